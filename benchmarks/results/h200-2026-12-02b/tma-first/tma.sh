# Branch tma-loader (bare H200, Triton 3.7.1 in /tmp/t371): TMA page copies. GPU tests first (a hang costs
# the call: short limits), then timing against the launch's choices, then the loader alone.
export PYTHONPATH=/tmp/t371:src
timeout 200 python3 -m pytest -q -rf -x -k "tma or ignores_cache" tests/test_fixed_history_gluon.py > $OUT/tma-tests.log 2>&1; echo "tests rc $?"
tail -n 3 $OUT/tma-tests.log | cut -c1-300
S=benchmarks/results/h200-2026-12-01j/sweep.py
W='{"warp_specialized":true'
P4="$W,\"rows\":128,\"split_mma\":true"
timeout 60 python3 $S 3 bf16 "[$P4,\"fence_in_mma\":true,\"ring\":4},$P4,\"tma\":true,\"ring\":4},$P4,\"tma\":true,\"ring\":3},$P4,\"tma\":true,\"ring\":5},$P4,\"fence_in_mma\":true,\"ring\":4}]" 2>&1 | tee $OUT/tma-shape4.txt
for i in 0 2; do timeout 60 python3 $S $i bf16 "[$W},$W,\"tma\":true},$W,\"tma\":true,\"ring\":3},$W}]" 2>&1 | tee $OUT/tma-shape$((i+1)).txt; done
timeout 60 python3 benchmarks/results/h200-2026-12-02/loader_probe.py 3 bf16 '[{"ring":4,"fence_in_mma":true},{"ring":4,"tma":true},{"ring":6,"tma":true}]' 2>&1 | tee $OUT/loader-tma-shape4.txt
timeout 60 python3 benchmarks/results/h200-2026-12-02/loader_probe.py 0 bf16 '[{"rows":64,"programs_per_sm":2,"fence_in_mma":true},{"rows":64,"programs_per_sm":2,"tma":true}]' 2>&1 | tee $OUT/loader-tma-shape1.txt
