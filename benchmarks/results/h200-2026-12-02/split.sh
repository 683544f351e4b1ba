# Branch mma-split (bare H200, Triton 3.7.1 in /tmp/t371): the two-partition 128-row kernels.
# GPU tests first with a short limit (a hang costs the call), then shape 4 timing against the policy's
# (bf16 102-105 us with fence_in_mma ring 4; fp8 ~101 us; benchmarks/results/h200-2026-12-01j/sweep.txt).
export PYTHONPATH=/tmp/t371:src
timeout 150 python3 -m pytest -q -rf -x -k "split" tests/test_fixed_history_gluon.py > $OUT/split-tests.log 2>&1; echo "tests rc $?"
tail -n 3 $OUT/split-tests.log | cut -c1-300
V='[{"warp_specialized":true,"rows":128,"fence_in_mma":true,"ring":4},{"warp_specialized":true,"rows":128,"split_mma":true},{"warp_specialized":true,"rows":128,"split_mma":true,"fence_in_mma":true,"ring":4},{"warp_specialized":true,"rows":128,"split_mma":true,"overlap":true,"ring":4,"raw_slots":4},{"warp_specialized":true,"rows":128,"split_mma":true,"overlap":true,"pingpong":true,"ring":4,"raw_slots":4},{"warp_specialized":true,"rows":128,"split_mma":true,"overlap":true,"pingpong":true,"fence_in_mma":true,"ring":4,"raw_slots":4}]'
timeout 90 python3 benchmarks/results/h200-2026-12-01j/sweep.py 3 bf16 "$V" 2>&1 | tee $OUT/split-bf16.txt
V8='[{"warp_specialized":true,"rows":128},{"warp_specialized":true,"rows":128,"split_mma":true},{"warp_specialized":true,"rows":128,"split_mma":true,"overlap":true,"ring":4,"raw_slots":4},{"warp_specialized":true,"rows":128,"split_mma":true,"overlap":true,"pingpong":true,"ring":4,"raw_slots":4},{"warp_specialized":true,"rows":128,"split_mma":true,"overlap":true,"pingpong":true,"ring":3,"raw_slots":3}]'
timeout 90 python3 benchmarks/results/h200-2026-12-01j/sweep.py 3 fp8 "$V8" 2>&1 | tee $OUT/split-fp8.txt
