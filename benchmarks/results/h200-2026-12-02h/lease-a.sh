# Lease a (2026-12-02, eighteenth session): the seventeenth session's
# next-gpu.sh plus step "shape5". Bare H200 with Triton 3.7.1 in /tmp/t371 (or a vLLM lease's
# env.sh). Step "tests": the fp8 public-API tests under the new policy (fp8
# scores by default; never run on a GPU since the flip), then the GPU tests
# of carry (fixed: the staging loop counts from 0) and of fp8_pv's new
# transposition, the 600-request case among them. Step "sweep": the
# launch's fp8 pipeline against carry, fp8 P V and both, in CUDA graphs,
# alternating, at fp8 shapes 3, 1, 2 and 4. Step "bench": the benchmark's
# fp8 rows with the new policy (fp8 scores by default), for the table.
export PYTHONPATH=/tmp/t371:src
case $1 in
tests)
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
  timeout 250 python3 -m pytest -q -rf tests/test_fixed_history_attention.py \
    -k "fp8_cache_matches or fp8_gluon_path or fp8_scores_through or fp8_head_dims or fp8_128_row" \
    > $OUT/tests-api.log 2>&1; echo "api tests rc $?"; tail -n 3 $OUT/tests-api.log | cut -c1-400
  timeout 300 python3 -m pytest -q -rf tests/test_fixed_history_gluon.py \
    -k "carry or fp8-pv or (many and fp8-scores)" > $OUT/tests-gluon.log 2>&1
  echo "gluon tests rc $?"; tail -n 3 $OUT/tests-gluon.log | cut -c1-400 ;;
sweep)
  S=benchmarks/results/h200-2026-12-01j/sweep.py
  W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true,"fp8_scores":true'
  A="$W,\"ring\":3,\"raw_slots\":3}"
  B="$W,\"ring\":3,\"raw_slots\":3,\"carry\":true}"
  P="$W,\"ring\":3,\"raw_slots\":3,\"fp8_pv\":true}"
  Q="$W,\"ring\":3,\"raw_slots\":3,\"fp8_pv\":true,\"carry\":true}"
  E="$W,\"rows\":128,\"split_mma\":true,\"ring\":4}"
  F="$W,\"rows\":128,\"split_mma\":true,\"ring\":4,\"fp8_pv\":true}"
  {
  for i in 2 0 1; do
    echo "== fp8 shape $((i+1)): launch, carry, pv, pv + carry, launch, carry"
    timeout 80 python3 $S $i fp8 "[$A,$B,$P,$Q,$A,$B]" graph 2>&1
  done
  echo "== fp8 shape 4: launch, pv, launch, pv"
  timeout 60 python3 $S 3 fp8 "[$E,$F,$E,$F]" graph 2>&1
  } > $OUT/sweep.txt 2>&1
  grep -E "==|us |error" $OUT/sweep.txt | cut -c1-170 ;;
bench)
  timeout 120 python3 benchmarks/bench_fixed_history_attention.py --kernel-only \
    --kv-dtypes fp8 --md $OUT/five-fp8.md > $OUT/five-fp8.log 2>&1; echo "bench rc $?"
  grep -E "^\| \(" $OUT/five-fp8.md | cut -c1-200 ;;
shape5)
  # The Triton kernel's one-warp plan at fp8 shape 5 (latency-bound at ~10
  # warps per SM, 202 registers): register caps, stages, 64-key tiles.
  P=benchmarks/results/h200-2026-12-02h/triton_probe.py
  timeout 200 python3 $P 4 fp8 '[{}, {"maxnreg": 168}, {"maxnreg": 128}, {"maxnreg": 96},
    {"num_stages": 2}, {"num_stages": 2, "maxnreg": 128}, {"num_stages": 4, "maxnreg": 128},
    {"block_n": 64, "num_stages": 2}, {"block_n": 64, "num_stages": 3},
    {"block_n": 64, "num_stages": 2, "maxnreg": 168}, {"num_splits": 4, "maxnreg": 128},
    {"num_splits": 1, "maxnreg": 128}, {}]' > $OUT/shape5.txt 2>&1
  cat $OUT/shape5.txt | cut -c1-170 ;;
esac
