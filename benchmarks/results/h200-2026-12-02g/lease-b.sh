# Bare H200 with Triton 3.7.1 in /tmp/t371 (2026-12-02, seventeenth
# session). Step "tests": the GPU tests of the fp8 loader's staging carried
# across passes and items (carry), on the new many-items case too, and the
# fp8 public-API tests under the new policy (fp8 scores by default).
# Step "sweep": carry against the launch's fp8 pipeline in CUDA graphs at
# fp8 shapes 1-4, alternating.
export PYTHONPATH=/tmp/t371:src
case $1 in
tests)
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
  timeout 230 python3 -m pytest -q -rf -x tests/test_fixed_history_gluon.py tests/test_fixed_history_attention.py \
    -k "carry or (many and ws-fp8-scores-ring3) or fp8_cache_matches or fp8_gluon_path or fp8_scores_through" \
    > $OUT/tests.log 2>&1; echo "tests rc $?"
  tail -n 5 $OUT/tests.log | cut -c1-800 ;;
sweep)
  S=benchmarks/results/h200-2026-12-01j/sweep.py
  W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true,"fp8_scores":true'
  A="$W,\"ring\":3,\"raw_slots\":3}"
  B="$W,\"ring\":3,\"raw_slots\":3,\"carry\":true}"
  C="$W,\"ring\":3,\"raw_slots\":4,\"carry\":true}"
  E="$W,\"rows\":128,\"split_mma\":true,\"ring\":4}"
  F="$W,\"rows\":128,\"split_mma\":true,\"ring\":4,\"carry\":true}"
  {
  for i in 2 0 1; do
    echo "== fp8 shape $((i+1)): launch (fp8 scores), carry, carry + 4 staged, launch, carry"
    timeout 60 python3 $S $i fp8 "[$A,$B,$C,$A,$B]" graph 2>&1
  done
  echo "== fp8 shape 4: launch (fp8 scores), carry, launch, carry"
  timeout 60 python3 $S 3 fp8 "[$E,$F,$E,$F]" graph 2>&1
  } > $OUT/sweep.txt 2>&1
  grep -E "==|us |error" $OUT/sweep.txt | cut -c1-170 ;;
esac
