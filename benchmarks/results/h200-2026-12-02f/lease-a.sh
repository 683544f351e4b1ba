# vLLM lease, call after on-gpu.sh install (2026-12-02, sixteenth session):
# fp8_pv (P V on fp8 tensor cores, e4m3 weights, V transposed by the
# loader) - its GPU tests, then timed in CUDA graphs against fp8_scores
# alone at the fp8 shapes 1-4, then the benchmark's fp8 rows under
# SPARK2_5_GLUON=fp8-scores and =fp8-pv.
source /tmp/gpu-vllm/env.sh && bash /tmp/gpu-vllm/on-gpu.sh project > $OUT/project.log 2>&1; echo "project rc $?"
python3 -c "import torch, triton, vllm; print(torch.__version__, triton.__version__, vllm.__version__)"
date -u
timeout 280 python3 -m pytest -q -rf tests/test_fixed_history_gluon.py tests/test_fixed_history_attention.py \
  -k "fp8_pv or fp8_scores_match or fp8_scores_through" > $OUT/tests.log 2>&1; echo "tests rc $?"
tail -n 6 $OUT/tests.log | cut -c1-600
date -u
S=benchmarks/results/h200-2026-12-01j/sweep.py
W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true,"fp8_scores":true'
A="$W,\"ring\":3,\"raw_slots\":3}"
B="$W,\"ring\":3,\"raw_slots\":3,\"fp8_pv\":true,\"worker_regs\":96}"
C="$W,\"ring\":4,\"raw_slots\":4,\"fp8_pv\":true,\"worker_regs\":96}"
D="$W,\"ring\":3,\"raw_slots\":3,\"fp8_pv\":true}"
R="$W,\"rows\":128,\"split_mma\":true"
E="$R,\"ring\":4}"
F="$R,\"ring\":4,\"fp8_pv\":true}"
G="$R,\"ring\":6,\"raw_slots\":4,\"fp8_pv\":true}"
H="$R,\"ring\":8,\"raw_slots\":4,\"fp8_pv\":true}"
{
for i in 0 1 2; do
  echo "== fp8 shape $((i+1)): scores (launch), pv, pv ring4+raw4, pv worker 112, scores, pv"
  timeout 60 python3 $S $i fp8 "[$A,$B,$C,$D,$A,$B]" graph 2>&1
done
echo "== fp8 shape 4: scores (launch), pv, pv ring6+raw4, pv ring8+raw4, scores, pv"
timeout 60 python3 $S 3 fp8 "[$E,$F,$G,$H,$E,$F]" graph 2>&1
} > $OUT/sweep.txt 2>&1
grep -E "==|us |error" $OUT/sweep.txt | cut -c1-200
date -u
for mode in fp8-scores fp8-pv; do
  SPARK2_5_GLUON=$mode timeout 100 python3 benchmarks/bench_fixed_history_attention.py --kernel-only \
    --kv-dtypes fp8 --md $OUT/five-$mode.md > $OUT/five-$mode.log 2>&1; echo "bench $mode rc $?"
  grep -E "^\| \(" $OUT/five-$mode.md | cut -c1-200
done
date -u
