# Lease b, second machine (2026-12-03): after the first (lease.sh) the
# output's normalization takes one division per row (times v_scale) instead
# of one per value. Step "tests": issue_warp's GPU tests, wait statistics,
# and the float64-reference tests of the launch's fp8 kernels, the Hopper
# wgmma kernel and the transposed one (all normalize through the changed
# code). Step "sweep": fp8 shapes 3, 1, 2: the launch's pipeline, issue_warp
# at 3 + 3 and 3 + 2; bf16 shape 3. Step "boundary": waits and time between
# key loops with issue_warp at shape 3 (the converting warps in the
# loader's row).
export PYTHONPATH=/tmp/t371:src
case $1 in
tests)
  timeout 420 python3 -m pytest -q -rf tests/test_fixed_history_gluon.py \
    -k "issue or wait_statistics or (matches_float64 and (ws-launch-fp8] or ws-swap-ab-tma] or wgmma]))" \
    > $OUT/tests.log 2>&1
  echo "tests rc $?"; tail -n 3 $OUT/tests.log | cut -c1-400 ;;
sweep)
  S=benchmarks/results/h200-2026-12-01j/sweep.py
  W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true,"fp8_scores":true'
  A="$W,\"ring\":3,\"raw_slots\":3}"
  I="$W,\"ring\":3,\"raw_slots\":3,\"issue_warp\":true}"
  I32="$W,\"ring\":3,\"raw_slots\":2,\"issue_warp\":true}"
  G='{"warp_specialized":true,"tma":true}'
  {
  for i in 2 0 1; do
    echo "== fp8 shape $((i+1)): launch, issue_warp (3+3), (3+2), launch, issue_warp (3+3)"
    timeout 100 python3 $S $i fp8 "[$A,$I,$I32,$A,$I]" graph 2>&1
  done
  echo "== bf16 shape 3: launch, launch"
  timeout 100 python3 $S 2 bf16 "[$G,$G]" graph 2>&1
  } > $OUT/sweep.txt 2>&1
  grep -E "==|us |error" $OUT/sweep.txt | cut -c1-60 ;;
boundary)
  P=benchmarks/results/h200-2026-12-03b/boundary_probe.py
  EXTRA='{"issue_warp": true, "f16_dots": true}' timeout 150 python3 $P fp8 \
    256,2048,1024 512,2040,1016 > $OUT/boundary.txt 2>&1
  timeout 150 python3 $P fp8 256,2048,1024 >> $OUT/boundary.txt 2>&1
  cut -c1-170 $OUT/boundary.txt ;;
esac
