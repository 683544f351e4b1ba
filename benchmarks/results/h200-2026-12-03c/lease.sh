# Lease c (2026-12-03): q staged by the converting warps (stage_q, with
# issue_warp). Bare H200 with Triton 3.7.1 in /tmp/t371. Step "tests": the
# GPU tests of issue_warp and stage_q (fp8 scores against the reference fed
# e4m3 rows of q, plain and with NaN outside the windows; wait statistics).
# Step "sweep": fp8 shapes 3, 1, 2: the launch's pipeline, issue_warp,
# stage_q at 3 + 3 and 2 + 4. Step "boundary": waits and time between key
# loops with stage_q at shape 3.
export PYTHONPATH=/tmp/t371:src
case $1 in
tests)
  timeout 400 python3 -m pytest -q -rf tests/test_fixed_history_gluon.py \
    -k "stage or issue or wait_statistics" > $OUT/tests.log 2>&1
  echo "tests rc $?"; tail -n 3 $OUT/tests.log | cut -c1-400 ;;
sweep)
  S=benchmarks/results/h200-2026-12-01j/sweep.py
  W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true,"fp8_scores":true'
  A="$W,\"ring\":3,\"raw_slots\":3}"
  I="$W,\"ring\":3,\"raw_slots\":3,\"issue_warp\":true}"
  Q="$W,\"ring\":3,\"raw_slots\":3,\"issue_warp\":true,\"stage_q\":true}"
  Q24="$W,\"ring\":2,\"raw_slots\":4,\"issue_warp\":true,\"stage_q\":true}"
  {
  for i in 2 0 1; do
    echo "== fp8 shape $((i+1)): launch, issue_warp, stage_q (3+3), (2+4), launch, stage_q (3+3)"
    timeout 100 python3 $S $i fp8 "[$A,$I,$Q,$Q24,$A,$Q]" graph 2>&1
  done
  } > $OUT/sweep.txt 2>&1
  grep -E "==|us |error" $OUT/sweep.txt | cut -c1-60 ;;
boundary)
  P=benchmarks/results/h200-2026-12-03b/boundary_probe.py
  EXTRA='{"issue_warp": true, "stage_q": true, "f16_dots": true}' timeout 150 \
    python3 $P fp8 256,2048,1024 512,2040,1016 > $OUT/boundary.txt 2>&1
  cut -c1-170 $OUT/boundary.txt ;;
esac
