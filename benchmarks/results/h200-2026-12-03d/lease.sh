# Lease d (2026-12-03): the launch with issue_warp in its fp8-scores
# pipelines (64-row tiles). Bare H200 with Triton 3.7.1 in /tmp/t371. Step
# "bench": the five shapes with an fp8 cache through the public API (kernel
# only, CUDA graphs, L2 emptied by reading). Step "tests": the public API's
# fp8 GPU tests.
export PYTHONPATH=/tmp/t371:src
case $1 in
bench)
  timeout 200 python3 benchmarks/bench_fixed_history_attention.py \
    --kv-dtypes fp8 --kernel-only --md $OUT/five-fp8.md > $OUT/bench.txt 2>&1
  echo "bench rc $?"; cat $OUT/five-fp8.md ;;
tests)
  timeout 260 python3 -m pytest -q -rf -m cuda tests/test_fixed_history_attention.py \
    -k fp8 > $OUT/tests-api.log 2>&1
  echo "tests rc $?"; tail -n 3 $OUT/tests-api.log | cut -c1-400 ;;
esac
