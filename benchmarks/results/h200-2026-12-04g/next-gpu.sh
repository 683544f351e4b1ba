# The thirty-third session's leases on the H200 (2026-12-04): nine bare
# H200s with vLLM 0.32.0's Triton 3.7.1 wheel (parts .gpu-vllm/tw00..tw03
# as in h200-2026-12-04d: part x 4, wheel, then the lease's steps; step
# module first, here, for the probes' module).
#   bash next-gpu.sh STEP   (from the repository root; output in $OUT)
export PYTHONPATH=/tmp/t371:src PYTHONUNBUFFERED=1
D=benchmarks/results/h200-2026-12-04g
against_launch() {  # the launch's loop at a ring of 5 against the variant
  # that the switch $1 selects, alone (PROBE_NO_LOAD=1) and with the
  # loader, alternating, two rounds
  for i in 1 2; do
    for mode in "PROBE_NO_LOAD=1" "PROBE_NO_LOAD=0"; do
      for v in "" "$1"; do
        echo "== $mode $v"
        env $mode $v timeout 80 python3 $D/timeline_probe.py '[{"ring":5}]' \
          2>&1 | grep -v "Warn\|^shape"
      done
    done
  done
}
case $1 in
part|wheel)
  bash benchmarks/results/h200-2026-12-04d/next-gpu.sh "$@" ;;
module)  # (before a lease, here) timeline_gluon.py: commit f967ae8's Gluon
  # module with timeline.patch (the probes; the final state, which every
  # earlier lease's switches select as they ran)
  git show f967ae8:src/vllm_spark2_5_plugin/ops/fixed_history_gluon.py \
    > $D/timeline_gluon.py && patch -s $D/timeline_gluon.py $D/timeline.patch ;;
timeline)  # lease 1 (timeline_gluon.py = HEAD f967ae8 + timeline.patch):
  # fp8 shape 4, per-tile clock stamps of both multiplying partitions and
  # the loader; the launch's loop and the batch loop (with and without
  # turns), each with the loader only signalling and as it is
  PP='{"pingpong":true}'
  for mode in "PROBE_NO_LOAD=1" "PROBE_NO_LOAD=0"; do
    env $mode timeout 100 python3 $D/timeline_probe.py '[{}]' dump 2>&1 | grep -v Warn
    env $mode PROBE_PP=1 timeout 100 python3 $D/timeline_probe.py "[$PP,{}]" dump 2>&1 | grep -v Warn
  done | tee $OUT/probe1-timeline.txt ;;
turns)  # lease 2 (timeline_gluon.py with the softmax turn and the delay):
  # fp8 shape 4, the softmax of the two partitions in turn (mutually
  # exclusive), and the second partition started 1200 cycles late, with the
  # loader only signalling and as it is; the launch's loop beside them
  for mode in "PROBE_NO_LOAD=1" "PROBE_NO_LOAD=0"; do
    env $mode timeout 80 python3 $D/timeline_probe.py '[{}]' 2>&1 | grep -v Warn
    env $mode PROBE_SMTURN=1 timeout 80 python3 $D/timeline_probe.py \
      '[{"pingpong":true}]' dump 2>&1 | grep -v Warn
    env $mode PROBE_DELAY=1200 timeout 80 python3 $D/timeline_probe.py '[{}]' \
      2>&1 | grep -v Warn
  done | tee $OUT/probe2-turns.txt ;;
overlap)  # lease 3 (timeline_gluon.py with the overlapped loop): fp8 shape
  # 4, the launch's loop, the softmax of tile t beside P V of tile t - 1
  # (PROBE_OVL=1: the weights of tile t - 1 kept live until P V's wait,
  # which a clock read holds after the softmax), the same with the row
  # maxima as a tree (PROBE_TREE=1), and the tree in the launch's loop;
  # with the loader only signalling and as it is
  for mode in "PROBE_NO_LOAD=1" "PROBE_NO_LOAD=0"; do
    for v in "" "PROBE_OVL=1" "PROBE_OVL=1 PROBE_TREE=1" "PROBE_TREE=1"; do
      echo "== $mode $v"
      env $mode $v timeout 80 python3 $D/timeline_probe.py '[{}]' 2>&1 \
        | grep -v "Warn\|^shape"
    done
  done | tee $OUT/probe3-overlap.txt ;;
overlap2)  # lease 4: fp8 shape 4, the overlapped loop with S issued
  # first and waited for alone, then P V of tile t - 1 beside the softmax
  # (PROBE_OVL=2), and PROBE_OVL=1, each at rings of 4 and 5; the launch's
  # loop at both rings; the second partition started 1200 cycles late;
  # with the loader only signalling and as it is
  for mode in "PROBE_NO_LOAD=1" "PROBE_NO_LOAD=0"; do
    for v in "" "PROBE_OVL=2" "PROBE_OVL=1" "PROBE_DELAY=1200"; do
      echo "== $mode $v"
      env $mode $v timeout 80 python3 $D/timeline_probe.py '[{},{"ring":5}]' \
        2>&1 | grep -v "Warn\|^shape"
    done
  done | tee $OUT/probe4-overlap2.txt ;;
rings)  # lease 5, the working tree with a ring of 5 for the 128-key
  # pipeline over V's pages: fp8 shape 4 through the launch's module at
  # rings of 4, 5 (the launch's) and 6, alternating, three rounds; then the
  # GPU tests over V's pages
  V='{"ring":4},{},{"ring":6}'
  timeout 200 python3 benchmarks/results/h200-2026-12-04f/turns_probe.py 3 \
    "[$V,$V,$V]" 2>&1 | grep -v "Warn\|^shape" | cut -c1-200 \
    | tee $OUT/probe5-rings.txt
  timeout 300 python3 -m pytest -q -m cuda tests/test_fixed_history_gluon.py \
    tests/test_fixed_history_attention.py -k "pages" 2>&1 | tail -4 \
    | tee $OUT/tests-rings.txt ;;
splitpv)  # lease 6: fp8 shape 4 at a ring of 5, the launch's loop against
  # P V in two and four parts of each tile's keys, each part's P V issued
  # once its weights are ready (PROBE_SPLITPV=2, 4); with the loader only
  # signalling and as it is; then as it is again, a second round
  for mode in "PROBE_NO_LOAD=1" "PROBE_NO_LOAD=0" "PROBE_NO_LOAD=0"; do
    for v in "" "PROBE_SPLITPV=2" "PROBE_SPLITPV=4"; do
      echo "== $mode $v"
      env $mode $v timeout 80 python3 $D/timeline_probe.py '[{"ring":5}]' \
        2>&1 | grep -v "Warn\|^shape"
    done
  done | tee $OUT/probe6-splitpv.txt ;;
prewait)  # lease 8: fp8 shape 4, the launch's loop against the next tile's
  # ring wait issued while P V runs (PROBE_PREWAIT=1)
  against_launch PROBE_PREWAIT=1 | tee $OUT/probe8-prewait.txt ;;
smemp)  # lease 9: fp8 shape 4, the launch's loop against the overlapped
  # loop with the weights through shared memory (PROBE_OVL=3: S waited
  # for, then P V of the previous tile issued from shared memory, the
  # softmax and its weights' stores beside it)
  against_launch PROBE_OVL=3 | tee $OUT/probe9-smemp.txt ;;
bench)  # lease 7, commit 5b7c065 (the ring of 5): the benchmark's fp8
  # shapes 1 and 4 through the public entry
  timeout 150 python3 benchmarks/bench_fixed_history_attention.py --kv-dtypes fp8 \
    --shapes 0,3 --kernel-only 2>&1 | grep -E "^  kernel|^GPU|floor" | cut -c1-300 \
    | tee $OUT/bench-ring5.txt ;;
esac
