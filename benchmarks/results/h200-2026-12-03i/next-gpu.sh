# For the next lease (written 2026-12-03, twenty-first session; not yet
# run). Bare H200 with Triton 3.7.1 in /tmp/t371 (install as in the
# earlier leases' scripts: the wheel's four parts carried in
# .gpu-vllm/tw00..tw03).
# half_rows: the launch's 64-row tiles of 8 queries x 4 heads hold 32 rows
# of queries and 32 padding rows; with half_rows the queries sit in rows
# 16 w + 0..7 of each multiplying warp's 16, so that every thread's second
# row set is padding and the softmax runs on the first alone (sm_90 code of
# the launch's fp8 kernel: MUFU.EX2 34 -> 17, 3,640 -> 3,144 instructions,
# no more shared-memory traffic, barriers or stack).
# Step "tests": the half_rows kernels against the float64 reference (112,
# with overlap among them).
# Step "sweep": half_rows against the launch, alternating, at fp8 shapes
# 3, 1, 2 and bf16 shapes 3, 1.
export PYTHONPATH=/tmp/t371:src PYTHONUNBUFFERED=1
case $1 in
tests)
  timeout 300 python3 -m pytest -q -rf -p no:cacheprovider \
    tests/test_fixed_history_gluon.py -k "half-rows" > $OUT/tests.log 2>&1
  echo "tests rc $?"; tail -n 3 $OUT/tests.log | cut -c1-400 ;;
sweep)
  S=benchmarks/results/h200-2026-12-01j/sweep.py
  F8='{"warp_specialized":true,"f16_dots":true,"rows":64,"narrow_convert":true,"tma":true,"edge_fence":true,"fp8_scores":true,"ring":3,"raw_slots":3,"issue_warp":true'
  B16='{"warp_specialized":true,"rows":64,"tma":true,"edge_fence":true'
  H=',"half_rows":true}'
  {
  for i in 2 0 1; do
    echo "== fp8 shape $((i+1)): launch, half_rows, launch, half_rows"
    timeout 120 python3 $S $i fp8 "[$F8},$F8$H,$F8},$F8$H]" graph 2>&1
  done
  for i in 2 0; do
    echo "== bf16 shape $((i+1)): launch, half_rows, launch, half_rows"
    timeout 100 python3 $S $i bf16 "[$B16},$B16$H,$B16},$B16$H]" graph 2>&1
  done
  echo "== fp8 shape 3: launch, half_rows with overlap (workers at 88 registers), half_rows, half_rows with overlap"
  O=',"half_rows":true,"overlap":true,"worker_regs":88}'
  timeout 120 python3 $S 2 fp8 "[$F8},$F8$O,$F8$H,$F8$O]" graph 2>&1
  echo "== fp8 shape 3: half_rows at other depths (ring + staged: 2 + 4, 2 + 5), launch, half_rows"
  timeout 120 python3 $S 2 fp8 "[${F8/\"ring\":3,\"raw_slots\":3/\"ring\":2,\"raw_slots\":4}$H,${F8/\"ring\":3,\"raw_slots\":3/\"ring\":2,\"raw_slots\":5}$H,$F8},$F8$H]" graph 2>&1
  } > $OUT/sweep.txt 2>&1
  grep -E "==|us |error" $OUT/sweep.txt | cut -c1-60 ;;
esac
