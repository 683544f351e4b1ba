# Lease c (2026-12-02, eighteenth session), bare H200 with Triton 3.7.1 in
# /tmp/t371. Step "tests": the fp8 public-API tests whose plans the new
# register cap changes (one-warp tiles at D <= 64), then the Gluon kernels
# with prefetch_q (new) against the float64 reference. Step "sweep": the
# launch's pipelines without and with prefetch_q, in CUDA graphs,
# alternating, at fp8 shapes 3, 1, 2, 4 and bf16 shapes 3 and 1. Step
# "bench": the five shapes with both caches and the peers (the policy as
# committed), then the fp8 rows again with prefetch_q added to the launch's
# Gluon pipeline.
export PYTHONPATH=/tmp/t371:src
R=benchmarks/results/h200-2026-12-02h
case $1 in
tests)
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
  timeout 200 python3 -m pytest -q -rf tests/test_fixed_history_attention.py \
    -k "cuda and fp8 and (L_below_W or head_dims)" > $OUT/tests-api.log 2>&1
  echo "api tests rc $?"; tail -n 3 $OUT/tests-api.log | cut -c1-400
  timeout 300 python3 -m pytest -q -rf tests/test_fixed_history_gluon.py \
    -k "prefetch" > $OUT/tests-gluon.log 2>&1
  echo "gluon tests rc $?"; tail -n 3 $OUT/tests-gluon.log | cut -c1-400 ;;
sweep)
  S=benchmarks/results/h200-2026-12-01j/sweep.py
  W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true,"fp8_scores":true'
  A="$W,\"ring\":3,\"raw_slots\":3}"
  B="$W,\"ring\":3,\"raw_slots\":3,\"prefetch_q\":true}"
  E="$W,\"rows\":128,\"split_mma\":true,\"ring\":4}"
  F="$W,\"rows\":128,\"split_mma\":true,\"ring\":4,\"prefetch_q\":true}"
  G='{"warp_specialized":true,"tma":true}'
  H='{"warp_specialized":true,"tma":true,"prefetch_q":true}'
  {
  for i in 2 0 1; do
    echo "== fp8 shape $((i+1)): launch, prefetch_q, launch, prefetch_q"
    timeout 80 python3 $S $i fp8 "[$A,$B,$A,$B]" graph 2>&1
  done
  echo "== fp8 shape 4: launch, prefetch_q, launch, prefetch_q"
  timeout 60 python3 $S 3 fp8 "[$E,$F,$E,$F]" graph 2>&1
  for i in 2 0; do
    echo "== bf16 shape $((i+1)): launch, prefetch_q, launch, prefetch_q"
    timeout 80 python3 $S $i bf16 "[$G,$H,$G,$H]" graph 2>&1
  done
  } > $OUT/sweep.txt 2>&1
  grep -E "==|us |error" $OUT/sweep.txt | cut -c1-60 ;;
bench)
  timeout 330 python3 benchmarks/bench_fixed_history_attention.py \
    --md $OUT/five.md > $OUT/five.log 2>&1; echo "bench rc $?"
  grep -E "^\| \(" $OUT/five.md | cut -c1-200
  timeout 120 python3 $R/bench_with.py '{"prefetch_q": true}' --kernel-only \
    --kv-dtypes fp8 --md $OUT/five-fp8-prefetch.md > $OUT/five-fp8-prefetch.log 2>&1
  echo "prefetch bench rc $?"; grep -E "^\| \(" $OUT/five-fp8-prefetch.md | cut -c1-200 ;;
esac
