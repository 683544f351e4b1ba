# Bare H200 with Triton 3.7.1 in /tmp/t371 (2026-12-02, sixteenth session):
# fp8_pv with the weights' keys in the 8-bit MMA's order (no exchange
# between threads; the loader holding 16 keys per thread) - its GPU tests,
# then timed in CUDA graphs against fp8_scores alone at fp8 shapes 1-4.
export PYTHONPATH=/tmp/t371:src
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
timeout 200 python3 -m pytest -q -rf tests/test_fixed_history_gluon.py tests/test_fixed_history_attention.py \
  -k "fp8_pv or (fp8_scores_match and pv)" > $OUT/tests.log 2>&1; echo "tests rc $?"
tail -n 4 $OUT/tests.log | cut -c1-600
S=benchmarks/results/h200-2026-12-01j/sweep.py
W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true,"fp8_scores":true'
A="$W,\"ring\":3,\"raw_slots\":3}"
B="$W,\"ring\":3,\"raw_slots\":3,\"fp8_pv\":true}"
C="$W,\"ring\":4,\"raw_slots\":4,\"fp8_pv\":true}"
R="$W,\"rows\":128,\"split_mma\":true"
E="$R,\"ring\":4}"
F="$R,\"ring\":4,\"fp8_pv\":true}"
G="$R,\"ring\":6,\"raw_slots\":4,\"fp8_pv\":true}"
{
for i in 0 1 2; do
  echo "== fp8 shape $((i+1)): scores (launch), pv, pv ring4+raw4, scores, pv"
  timeout 60 python3 $S $i fp8 "[$A,$B,$C,$A,$B]" graph 2>&1
done
echo "== fp8 shape 4: scores (launch), pv, pv ring6+raw4, scores, pv"
timeout 60 python3 $S 3 fp8 "[$E,$F,$G,$E,$F]" graph 2>&1
} > $OUT/sweep.txt 2>&1
grep -E "==|us |error" $OUT/sweep.txt | cut -c1-150
