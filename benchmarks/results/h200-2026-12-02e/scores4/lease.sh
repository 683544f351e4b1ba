# Lease 4 (bare H200, Triton 3.7.1 in /tmp/t371): the plan's fp8_scores
# (SPARK2_5_GLUON=fp8-scores) through the public API against the reference,
# the default fp8 Gluon path beside it; then the five shapes' fp8 rows with
# the opt-in, kernel only, L2 emptied by reading (the benchmark's default).
export PYTHONPATH=/tmp/t371:src
timeout 200 python3 -m pytest -q -rf tests/test_fixed_history_attention.py \
  -k "cuda_fp8_scores_through or cuda_fp8_gluon_path" > $OUT/api-tests.log 2>&1
echo "tests rc $?"; tail -n 2 $OUT/api-tests.log | cut -c1-300
SPARK2_5_GLUON=fp8-scores timeout 200 python3 benchmarks/bench_fixed_history_attention.py \
  --kernel-only --kv-dtypes fp8 --md $OUT/five-shapes-fp8-scores.md > $OUT/five-shapes.log 2>&1
echo "table rc $?"; grep -E "^\| \(" $OUT/five-shapes-fp8-scores.md | cut -d'|' -f2-9
grep -E "plan LaunchPlan" $OUT/five-shapes.log | grep -o "fp8_scores=[A-Za-z]*" | tr '\n' ' '
