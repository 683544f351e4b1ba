# Lease of 2026-12-03 (twenty-second session): the launch with half_rows
# (the Gluon kernel's 64-row tiles widened from 32 rows keep their queries
# in half of each thread's rows; lease i's sweep: fp8 shapes 1-3 4-5%
# faster, bf16 unchanged). Bare H200, Triton 3.7.1 in /tmp/t371.
# Step "bench": the five shapes, kernel only, fp8 and bf16, then the public
# API's GPU tests of the Gluon launches (fp8 and 16-bit caches, fp8 scores,
# CUDA-graph replays).
export PYTHONPATH=/tmp/t371:src PYTHONUNBUFFERED=1
case $1 in
bench)
  timeout 300 python3 benchmarks/bench_fixed_history_attention.py \
    --kv-dtypes fp8 bf16 --kernel-only --md $OUT/five.md > $OUT/bench.txt 2>&1
  echo "bench rc $?"; cut -c1-200 $OUT/five.md | grep "|"
  timeout 250 python3 -m pytest -q -rf -p no:cacheprovider -m cuda \
    tests/test_fixed_history_attention.py -k "gluon_path or \
    fp8_scores_through_the_launch or graph_replay or fp8_cache_matches" \
    > $OUT/tests-api.log 2>&1
  echo "api rc $?"; tail -n 3 $OUT/tests-api.log | cut -c1-400 ;;
esac
