# Lease b (2026-12-03): the copy-issuing warp (issue_warp). Bare H200 with
# Triton 3.7.1 in /tmp/t371. Step "tests": its GPU tests (fp8 scores
# against the reference fed e4m3 rows of q, plain and with NaN outside the
# windows; wait statistics). Step "sweep": the launch's fp8 pipeline
# against issue_warp at its depth and deeper, fp8 shapes 3, 1, 2 and 4
# (64-row tiles), CUDA graphs.
export PYTHONPATH=/tmp/t371:src
case $1 in
tests)
  timeout 300 python3 -m pytest -q -rf tests/test_fixed_history_gluon.py \
    -k "issue-warp or issue_warp or wait_statistics" > $OUT/tests-issue.log 2>&1
  echo "issue-warp tests rc $?"; tail -n 3 $OUT/tests-issue.log | cut -c1-400 ;;
sweep)
  S=benchmarks/results/h200-2026-12-01j/sweep.py
  W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true,"fp8_scores":true'
  A="$W,\"ring\":3,\"raw_slots\":3}"
  I="$W,\"ring\":3,\"raw_slots\":3,\"issue_warp\":true}"
  I34="$W,\"ring\":3,\"raw_slots\":4,\"issue_warp\":true}"
  I42="$W,\"ring\":4,\"raw_slots\":1,\"issue_warp\":true}"
  I22="$W,\"ring\":2,\"raw_slots\":2,\"issue_warp\":true}"
  {
  for i in 2 0 1 3; do
    echo "== fp8 shape $((i+1)): launch, issue_warp (3+3), (3+4), (4+1), (2+2), launch, issue_warp (3+3)"
    timeout 100 python3 $S $i fp8 "[$A,$I,$I34,$I42,$I22,$A,$I]" graph 2>&1
  done
  } > $OUT/sweep.txt 2>&1
  grep -E "==|us |error" $OUT/sweep.txt | cut -c1-60 ;;
esac
