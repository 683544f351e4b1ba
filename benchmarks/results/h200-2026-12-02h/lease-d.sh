# Lease d (2026-12-02, eighteenth session), bare H200 with Triton 3.7.1 in
# /tmp/t371: the kernel after carry and prefetch_q were taken out (the fp8
# TMA loader back to its code before carry, with the fp8 P V transposition
# of this session). Step "tests": the fp8-scores Gluon kernels against the
# float64 reference (the 600-request case among them) and the public-API
# fp8 tests of the Gluon path. Step "sweep": the launch's fp8 pipeline at
# shapes 3, 1 and 4 (compare lease-a and lease-c).
export PYTHONPATH=/tmp/t371:src
case $1 in
tests)
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
  timeout 240 python3 -m pytest -q -rf tests/test_fixed_history_gluon.py \
    -k "fp8-scores and not pv and not overlap and not pingpong" > $OUT/tests-gluon.log 2>&1
  echo "gluon tests rc $?"; tail -n 3 $OUT/tests-gluon.log | cut -c1-400
  timeout 150 python3 -m pytest -q -rf tests/test_fixed_history_attention.py \
    -k "fp8_gluon_path or fp8_scores_through or fp8_128_row" > $OUT/tests-api.log 2>&1
  echo "api tests rc $?"; tail -n 3 $OUT/tests-api.log | cut -c1-400 ;;
sweep)
  S=benchmarks/results/h200-2026-12-01j/sweep.py
  W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true,"fp8_scores":true'
  A="$W,\"ring\":3,\"raw_slots\":3}"
  E="$W,\"rows\":128,\"split_mma\":true,\"ring\":4}"
  {
  for i in 2 0; do
    echo "== fp8 shape $((i+1)): launch x3"
    timeout 60 python3 $S $i fp8 "[$A,$A,$A]" graph 2>&1
  done
  echo "== fp8 shape 4: launch x3"
  timeout 60 python3 $S 3 fp8 "[$E,$E,$E]" graph 2>&1
  } > $OUT/sweep.txt 2>&1
  grep -E "==|us |error" $OUT/sweep.txt | cut -c1-60 ;;
esac
# Lease e (same session, appended): step "span" of this script.
if [ "$1" = span ]; then
  P=benchmarks/results/h200-2026-12-02h/span_probe.py
  { timeout 90 python3 $P fp8; timeout 90 python3 $P bf16; } > $OUT/span.txt 2>&1
  cut -c1-150 $OUT/span.txt
  ls /usr/local/cuda/bin/ncu* 2>&1 | head -2
fi
