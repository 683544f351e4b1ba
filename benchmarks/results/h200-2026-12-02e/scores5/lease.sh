# Lease 5 (bare H200, Triton 3.7.1 in /tmp/t371), last 266 device seconds:
# fp8_scores with K's block-table entries loaded an iteration ahead, after
# the loader's fence (before it, the fence waited for them: 1.7-2.2% slower
# in scores2/), so that no load latency lies between the free-buffer wait
# and K's TMA copies; tests (launch's two fp8_scores pipelines, and through
# the public API), then timed against the launch at fp8 shapes 1, 3, 4.
# Measured slower (171 / 198 / 78.4 us against 167.6 / 191.1 / 78.0 with the
# pages read at each copy) and not kept: this folder's kernel is not main's.
# Its change: K's page ids loaded before the item's tile loop and, for tile
# t + 1, at the end of iteration t (after V's), passed to _stage_tile.
export PYTHONPATH=/tmp/t371:src
timeout 100 python3 -m pytest -q -rf $(cat benchmarks/results/h200-2026-12-02e/scores5/ids.txt) \
  tests/test_fixed_history_attention.py::test_cuda_fp8_scores_through_the_launch > $OUT/tests.log 2>&1
echo "tests rc $?"; tail -n 2 $OUT/tests.log | cut -c1-300
export SPARK2_5_BENCH_FLUSH=clean
S=benchmarks/results/h200-2026-12-01j/sweep.py
W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true'
F="$W,\"fp8_scores\":true,\"ring\":3,\"raw_slots\":3}"
P4="$W,\"rows\":128,\"split_mma\":true,\"ring\":4"
{
for i in 0 2; do echo "== fp8 shape $((i+1)): launch, scores r3/3, launch, scores r3/3"
  timeout 40 python3 $S $i fp8 "[$W},$F,$W},$F]" graph 2>&1; done
echo "== fp8 shape 4: launch, scores, launch, scores"
timeout 40 python3 $S 3 fp8 "[$P4},$P4,\"fp8_scores\":true},$P4},$P4,\"fp8_scores\":true}]" graph 2>&1
} | tee $OUT/sweep.txt | grep -E "==|us |rror"
