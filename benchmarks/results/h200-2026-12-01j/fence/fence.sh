# Branch fence-in-mma (bare H200, Triton 3.7.1 in /tmp/t371). GPU tests first with short limits (a hang costs the call), then timing.
# The branch's default kernel reorders the loaders (no block-table read in flight at the fence): compare its "kernel" rows with main's
# (benchmarks/results/h200-2026-12-01i/kern/five-shapes.md: bf16 267.1/1067.2/292.8/112.9, fp8 244.4/962.5/272.2/104.1 us).
export PYTHONPATH=/tmp/t371:src
timeout 130 python3 -m pytest -q -rf -x -k "fence-in-mma or ws-128rows-ring4-raw4 or ws-n32-raw6" tests/test_fixed_history_gluon.py > $OUT/fence-tests.log 2>&1; echo "tests rc $?"
tail -n 3 $OUT/fence-tests.log | cut -c1-300
timeout 200 python3 benchmarks/bench_fixed_history_attention.py --kernel-only --gluon --gluon-only "fence in the MMA" --shapes 3,0,2,1 > $OUT/fence-bench.log 2>&1; echo "rc $?"
grep -E "gluon|kernel |^== " $OUT/fence-bench.log | cut -c1-150
