# The thirty-second session's leases on the H200 (2026-12-04): ten bare
# H200s with vLLM 0.32.0's Triton 3.7.1 wheel (parts .gpu-vllm/tw00..tw03
# as in h200-2026-12-04d: part x 4, wheel, then the lease's steps). Each
# step names the working tree it ran on: commit 2b2ad5a (the session's
# start), it with one of this folder's patches applied (`git apply`), or
# a later commit. "old" is the module of the commit before the one
# measured (`git show REV:src/vllm_spark2_5_plugin/ops/fixed_history_gluon.py
# > $D/old_gluon.py`; 2b2ad5a for leases 1-2, 07bd630 for lease 9; not
# committed), run beside it.
#   bash next-gpu.sh STEP   (from the repository root; output in $OUT)
export PYTHONPATH=/tmp/t371:src PYTHONUNBUFFERED=1
D=benchmarks/results/h200-2026-12-04f
O="{\"module\":\"$D/old_gluon.py\"}"
alone_and_loaded() {  # the variants $1 at fp8 shape 4, two rounds, each with
  # the loader only signalling (PROBE_NO_LOAD=1, batch-noload.patch) and
  # as it is, in alternating processes
  for i in 1 2; do
    PROBE_NO_LOAD=1 timeout 100 python3 $D/turns_probe.py 3 "[$1]" 2>&1 \
      | grep -v "Warn\|^shape" | cut -c1-200 | sed 's/^/no-load /'
    timeout 100 python3 $D/turns_probe.py 3 "[$1]" 2>&1 \
      | grep -v "Warn\|^shape" | cut -c1-200
  done
}
case $1 in
part|wheel)
  bash benchmarks/results/h200-2026-12-04d/next-gpu.sh "$@" ;;
turns)  # lease 1, turns.patch: fp8 shape 4, old against the patch's edge
  # tiles (per-page TMA with zeros from outside the cache, every tile
  # through that code) and its turns (pingpong without overlap, the turn
  # passed once a batch completed) at register splits; two rounds
  T='"pingpong":true'
  V="$O,{},{$T,\"mma_regs\":208,\"worker_regs\":80},{$T,\"mma_regs\":208,\"worker_regs\":88},{$T,\"mma_regs\":200,\"worker_regs\":96},{$T,\"mma_regs\":208,\"worker_regs\":80,\"ring\":3}"
  timeout 400 python3 $D/turns_probe.py 3 "[$V,$V]" 2>&1 | grep -v Warn \
    | cut -c1-300 | tee $OUT/probe1-turns.txt ;;
edge)  # lease 2, edge-packed.patch: fp8 shape 4, old against the patch's
  # edge tiles (interior tiles as before) and the softmax on float16 pairs
  # with 8-bit P V; two rounds; then fp8 shape 1 (64 rows) the same
  P='"packed_softmax":true'
  V="$O,{},{$P},{$P,\"mma_regs\":168},{$P,\"ring\":3}"
  timeout 250 python3 $D/turns_probe.py 3 "[$V,$V]" 2>&1 | grep -v Warn \
    | cut -c1-300 | tee $OUT/probe2-edge-packed.txt
  timeout 120 python3 $D/turns_probe.py 0 "[$O,{},{$P},$O,{},{$P}]" 2>&1 \
    | grep -v Warn | cut -c1-300 | tee $OUT/probe2-edge-packed-shape1.txt ;;
tests)  # lease 2, edge-packed.patch: the GPU tests over V's pages (the
  # Gluon pipelines at 64 and 128 rows with NaN outside the windows too,
  # the packed-softmax entries the patch adds, the public entry's plans)
  timeout 280 python3 -m pytest -q -m cuda tests/test_fixed_history_gluon.py \
    tests/test_fixed_history_attention.py -k "pages" 2>&1 | tail -15 \
    | tee $OUT/tests-pages.txt ;;
splits)  # lease 3, HEAD: fp8 shape 4, the launch's pipeline against
  # 64-key tiles (rings of 6 and 8) and register splits (second
  # multiplying partition / loader; the first gets 504 less both)
  V='{},{"block_n":64,"ring":6},{"block_n":64,"ring":8},{"mma_regs":216,"worker_regs":80},{"mma_regs":200,"worker_regs":96},{"mma_regs":232,"worker_regs":80},{"mma_regs":216,"worker_regs":96}'
  timeout 300 python3 $D/turns_probe.py 3 "[$V,$V]" 2>&1 | grep -v Warn \
    | cut -c1-300 | tee $OUT/probe3-regs.txt ;;
batch)  # lease 4, batch.patch: fp8 shape 4, S of tile t + 1 and P V of
  # tile t issued as one batch, with and without turns (the turn passed
  # once a batch is issued), 128- and 64-key tiles; two rounds
  B='"batch":true,"mma_regs":208,"worker_regs":80'
  V="{},{$B},{$B,\"pingpong\":true},{$B,\"block_n\":64,\"ring\":6},{$B,\"block_n\":64,\"ring\":6,\"pingpong\":true}"
  timeout 300 python3 $D/turns_probe.py 3 "[$V,$V]" 2>&1 | grep -v Warn \
    | cut -c1-300 | tee $OUT/probe4-batch.txt ;;
split)  # lease 5, split.patch: fp8 shape 4, each 128-key tile multiplied
  # as two halves (the second half's S beside the first half's softmax,
  # the first half's P V beside the second's softmax): split_tiles 1
  # with the weights in registers (ptxas waits for the first half's P V
  # before the second softmax: it reuses the weights' registers), 2
  # through shared memory; two rounds
  V='{},{"split_tiles":1},{"split_tiles":2},{"split_tiles":2,"mma_regs":208,"worker_regs":96}'
  timeout 200 python3 $D/turns_probe.py 3 "[$V,$V]" 2>&1 | grep -v Warn \
    | cut -c1-300 | tee $OUT/probe5-split.txt ;;
noload)  # lease 6, batch-noload.patch: fp8 shape 4, the launch's loop,
  # the batch and the batch with turns, and the launch's loop at the
  # batch's registers: with the loader only signalling each ring buffer
  # (PROBE_NO_LOAD=1, nothing copied: the multiplying side alone, errors
  # meaningless) and as it is; two rounds each, alternating processes
  R='"mma_regs":208,"worker_regs":80'
  V="{},{$R},{\"batch\":true,$R},{\"batch\":true,\"pingpong\":true,$R}"
  alone_and_loaded "$V" | tee $OUT/probe6-noload.txt ;;
regs)  # lease 7, batch-noload.patch: fp8 shape 4, the launch's loop at
  # register splits with fewer registers for the multiplying partitions
  # (second partition / loader; the first gets 504 less both), alone
  # (PROBE_NO_LOAD=1) and with the loader; two rounds, alternating
  V='{},{"mma_regs":192,"worker_regs":128},{"mma_regs":184,"worker_regs":128},{"mma_regs":200,"worker_regs":120},{"mma_regs":192,"worker_regs":120}'
  alone_and_loaded "$V" | tee $OUT/probe7-regs.txt ;;
launch)  # lease 8, the commit that takes 192 / 120 registers for the
  # 128-key pipeline over V's pages: the GPU tests over V's pages (as in
  # step tests), then the benchmark's fp8 shapes 1 and 4 through the
  # public entry
  timeout 280 python3 -m pytest -q -m cuda tests/test_fixed_history_gluon.py \
    tests/test_fixed_history_attention.py -k "pages" 2>&1 | tail -4 \
    | tee $OUT/tests-launch.txt
  timeout 100 python3 benchmarks/bench_fixed_history_attention.py --kv-dtypes fp8 \
    --shapes 0,3 --kernel-only 2>&1 | grep -E "^  kernel|^GPU" | cut -c1-300 \
    | tee $OUT/bench-launch.txt ;;
kvpages)  # lease 9, the working tree after the register commit with each
  # interior tile's K and V copies issued page by page together (one
  # block-table read per page); old = that commit's module: fp8 shapes 4
  # and 1, alternating in one process; then the GPU tests over V's pages
  # with NaN outside the windows
  timeout 120 python3 $D/turns_probe.py 3 "[$O,{},$O,{},$O,{}]" 2>&1 \
    | grep -v "Warn\|^shape" | cut -c1-200 | tee $OUT/probe9-kvpages.txt
  timeout 60 python3 $D/turns_probe.py 0 "[$O,{},$O,{}]" 2>&1 \
    | grep -v "Warn\|^shape" | cut -c1-200 | tee -a $OUT/probe9-kvpages.txt
  timeout 150 python3 -m pytest -q -m cuda tests/test_fixed_history_gluon.py \
    tests/test_fixed_history_attention.py -k "pages and poison" 2>&1 | tail -3 \
    | tee $OUT/tests-kvpages.txt ;;
final)  # lease 10, the commit taking the joint copies (V's edge tiles now
  # their own function): the GPU tests over V's pages with NaN outside
  # the windows, then fp8 shape 4 once
  timeout 150 python3 -m pytest -q -m cuda tests/test_fixed_history_gluon.py \
    tests/test_fixed_history_attention.py -k "pages and poison" 2>&1 | tail -3 \
    | tee $OUT/tests-final.txt
  timeout 60 python3 $D/turns_probe.py 3 "[{}]" 2>&1 | grep -v "Warn\|^shape" \
    | cut -c1-200 | tee $OUT/probe10-final.txt ;;
esac
