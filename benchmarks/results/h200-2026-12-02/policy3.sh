# Branch mma-split, launch policy: split_mma at 128 rows, narrow conversion and float16 MMAs for fp8.
export PYTHONPATH=/tmp/t371:src
timeout 170 python3 -m pytest -q -rf -x -k "cuda and (gluon or persistent)" tests/test_fixed_history_attention.py > $OUT/policy-api-tests.log 2>&1; echo "api tests rc $?"
tail -n 2 $OUT/policy-api-tests.log | cut -c1-300
timeout 300 python3 benchmarks/bench_fixed_history_attention.py --kernel-only --md $OUT/five-shapes.md > $OUT/five-shapes.log 2>&1; echo "bench rc $?"
grep -E "^\|" $OUT/five-shapes.log | cut -c1-250
timeout 150 python3 -m pytest -q -rf -x -k "launch" tests/test_fixed_history_gluon.py > $OUT/policy-kernel-tests.log 2>&1; echo "kernel tests rc $?"
tail -n 2 $OUT/policy-kernel-tests.log | cut -c1-300
