export PYTHONPATH=/tmp/t371:src
timeout 300 python3 benchmarks/bench_fixed_history_attention.py --kernel-only --md $OUT/five-shapes.md > $OUT/five-shapes.log 2>&1; echo "rc $?"
grep -E "^\|" $OUT/five-shapes.log | cut -c1-250
