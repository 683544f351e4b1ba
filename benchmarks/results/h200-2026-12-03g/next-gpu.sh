# For the next lease (written 2026-12-03, twentieth session; not yet run).
# Bare H200 with Triton 3.7.1 in /tmp/t371. Lease f showed that at fp8
# shape 3 the multiplying warps' chain per tile sets the pace (a fence
# taken out of it: 2% faster; a barrier wait added by k_ring: 7% slower).
# Step "tests": the fp8 P V kernels' reference tests (their kernel options
# were fixed after lease f: the launch's pipeline carries issue_warp, which
# fp8_pv refuses). Step "sweep": the overlapped softmax (P V of tile t - 1
# beside the softmax of tile t) with the issuing warp, at fp8 shapes 3 and
# 1, against the launch; it compiles with 24 bytes of stack under 3.7.1.
export PYTHONPATH=/tmp/t371:src
case $1 in
tests)
  timeout 300 python3 -m pytest -q -rf tests/test_fixed_history_gluon.py \
    -k "fp8-pv" > $OUT/tests-fp8-pv.log 2>&1
  echo "fp8_pv tests rc $?"; tail -n 3 $OUT/tests-fp8-pv.log | cut -c1-400 ;;
sweep)
  S=benchmarks/results/h200-2026-12-01j/sweep.py
  L='{"warp_specialized":true,"f16_dots":true,"rows":64,"narrow_convert":true,"tma":true,"edge_fence":true,"fp8_scores":true,"ring":3,"raw_slots":3,"issue_warp":true'
  O=',"overlap":true}'
  {
  for i in 2 0; do
    echo "== fp8 shape $((i+1)): launch, overlap, launch, overlap"
    timeout 100 python3 $S $i fp8 "[$L},$L$O,$L},$L$O]" graph 2>&1
  done
  } > $OUT/sweep.txt 2>&1
  grep -E "==|us |error" $OUT/sweep.txt | cut -c1-40 ;;
esac
