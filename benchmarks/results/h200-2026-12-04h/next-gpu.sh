# The thirty-fourth session's leases on the H200 (2026-12-04): bare H200s
# with vLLM 0.32.0's Triton 3.7.1 wheel (parts .gpu-vllm/tw00..tw03 as in
# h200-2026-12-04d: part x 4, wheel, then the lease's steps; the parts are
# written by benchmarks/triton_wheel_parts.sh).
#   bash next-gpu.sh STEP   (from the repository root; output in $OUT)
export PYTHONPATH=/tmp/t371:src PYTHONUNBUFFERED=1
D=benchmarks/results/h200-2026-12-04h
pairs() {  # span_probe.py for each value in $4 of switch $2 within each
  # value in $3 of switch $1 (space-separated lists)
  for a in $3; do
    for b in $4; do
      v="$1=$a $2=$b"
      echo "== $v"
      env $v timeout 150 python3 $D/span_probe.py 1 2>&1 | grep -v Warn
    done
  done
}
case $1 in
part|wheel)
  bash benchmarks/results/h200-2026-12-04d/next-gpu.sh "$@" ;;
span)  # lease 1: fp8 shape 4, where the time outside the key loop goes
  # (global-timer stamps of every program's partitions), the launch's
  # kernel and the kernel with the multiplying partitions only releasing
  # each tile (the loader and the memory alone); two empty kernels timed
  # the same way
  for v in "PROBE_NO_MMA=0" "PROBE_NO_MMA=1" "PROBE_NO_MMA=0"; do
    echo "== $v"
    env $v timeout 150 python3 $D/span_probe.py 3 2>&1 | grep -v Warn
  done | tee $OUT/span.txt ;;
span2)  # lease 2: the same stamps with the ends of the first two tiles;
  # the L2 emptied before the stamped run or not (the code and part of the
  # data left in it), and the two multiplying partitions' rows swapped
  # between the default partition (warps 0-3) and the worker
  for v in "PROBE_SWAP=0" "PROBE_SWAP=0 PROBE_NOFLUSH=1" "PROBE_SWAP=1" \
      "PROBE_SWAP=1 PROBE_NOFLUSH=1"; do
    echo "== $v"
    env $v timeout 150 python3 $D/span_probe.py 2 2>&1 | grep -v Warn
  done | tee $OUT/span2.txt ;;
span3)  # lease 3: the loader as the default partition (warps 0-3) and both
  # multiplying partitions as workers, against the launch's order,
  # alternating, two rounds
  for i in 1 2; do
    for v in "PROBE_LOADER_DEFAULT=0" "PROBE_LOADER_DEFAULT=1"; do
      echo "== $v"
      env $v timeout 150 python3 $D/span_probe.py 1 2>&1 | grep -v Warn
    done
  done | tee $OUT/span3.txt ;;
span4)  # lease 4: the output stored in 16-byte pieces (PROBE_STORE=wide)
  # or not at all (none), with the launch's order and the loader as the
  # default partition
  pairs PROBE_LOADER_DEFAULT PROBE_STORE "0 1" "plain wide none" \
    | tee $OUT/span4.txt ;;
span5)  # lease 4: the next tile's block-table entries read ahead by the
  # loader (PROBE_PREFETCH=1), with the multiplying partitions only
  # releasing each tile (the memory path alone) and as they are
  pairs PROBE_NO_MMA PROBE_PREFETCH "1 0" "0 1" | tee $OUT/span5.txt ;;
confirm)  # lease 5, the working tree with loader_first in the launch's
  # 128-row pipeline over V's pages: fp8 shape 4 through the launch's module
  # with loader_first off / on, alternating, three rounds; the GPU tests
  # over V's pages; the benchmark's fp8 shapes 1 and 4 through the public
  # entry
  V='{"loader_first":false},{}'
  timeout 200 python3 benchmarks/results/h200-2026-12-04f/turns_probe.py 3 \
    "[$V,$V,$V]" 2>&1 | grep -v "Warn\|^shape" | cut -c1-200 \
    | tee $OUT/confirm-ab.txt
  timeout 300 python3 -m pytest -q -m cuda tests/test_fixed_history_gluon.py \
    tests/test_fixed_history_attention.py -k "pages" 2>&1 | tail -4 \
    | tee $OUT/tests-loader-first.txt
  timeout 150 python3 benchmarks/bench_fixed_history_attention.py --kv-dtypes fp8 \
    --shapes 0,3 --kernel-only 2>&1 | grep -E "^  kernel|^GPU|floor" | cut -c1-300 \
    | tee $OUT/bench-loader-first.txt ;;
span6)  # lease 5: each multiplying partition's item loop body run once
  # first with nothing to do (PROBE_WARM=1), with the loader first (the
  # launch's, from lease 5 on) and not
  pairs PROBE_LOADER_DEFAULT PROBE_WARM "1 0" "0 1" | tee $OUT/span6.txt ;;
span7)  # lease 5: an item's first key tile (its loader's register pass)
  # taken last (PROBE_ROTATE=1), with and without PROBE_WARM; the launch's
  # loader first
  pairs PROBE_ROTATE PROBE_WARM "0 1" "0 1" | tee $OUT/span7.txt ;;
esac
