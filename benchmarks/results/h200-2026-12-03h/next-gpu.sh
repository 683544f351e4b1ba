# Lease h (twenty-first session, 2026-12-03). Bare H200 with Triton 3.7.1
# in /tmp/t371.
# Step "tests": the fp8 P V and fence-every-tile Gluon kernels (fixed after
# lease f, never run since) and the Triton kernel's transposed dots against
# the float64 reference (pytest unbuffered, so that a timeout keeps the
# report so far).
# Step "sweep": the Triton kernel's transposed dots (S^T = K Q^T, O^T +=
# V^T P^T: 8-row tiles without padding rows) at shape 5 (8 queries x 1 head
# per KV head, D = 64), fp8 and bf16, with register caps, splits and tile
# sizes around the launch plan.
export PYTHONPATH=/tmp/t371:src PYTHONUNBUFFERED=1
case $1 in
tests)
  timeout 330 python3 -m pytest -q -rf -p no:cacheprovider \
    tests/test_fixed_history_attention.py \
    tests/test_fixed_history_gluon.py -k "transposed or fp8-pv or fence-every-tile" \
    > $OUT/tests.log 2>&1
  echo "tests rc $?"; tail -n 3 $OUT/tests.log | cut -c1-400 ;;
sweep)
  S=benchmarks/results/h200-2026-12-03h/plan_sweep.py
  T='"transposed":true'
  {
  echo "== fp8 shape 5"
  timeout 240 python3 $S 4 fp8 "[{},{$T},{$T,\"max_registers\":128},{$T,\"max_registers\":144},{$T,\"max_registers\":0},{$T,\"num_splits\":4},{$T,\"num_splits\":1},{$T,\"num_stages\":4},{$T,\"block_n\":64,\"num_stages\":2},{$T,\"fp8_f16_dot\":false},{},{$T}]" graph 2>&1
  echo "== bf16 shape 5"
  timeout 150 python3 $S 4 bf16 "[{},{$T},{$T,\"max_registers\":168},{},{$T}]" graph 2>&1
  } > $OUT/sweep.txt 2>&1
  grep -E "==|us |error|plan" $OUT/sweep.txt | cut -c1-200 ;;
sweep2)  # run inline on the lease (recorded here): one split, register caps
  S=benchmarks/results/h200-2026-12-03h/plan_sweep.py
  T='"transposed":true'
  timeout 240 python3 $S 4 fp8 "[{},{$T,\"num_splits\":1},{$T,\"num_splits\":1,\"max_registers\":0},{$T,\"num_splits\":1,\"max_registers\":128},{$T,\"num_splits\":1,\"num_stages\":2},{$T,\"max_registers\":0},{$T,\"num_splits\":1,\"max_registers\":0,\"num_stages\":2},{},{$T,\"num_splits\":1,\"max_registers\":0}]" graph > $OUT/sweep2.txt 2>&1
  T='"transposed":true,"num_splits":1'
  timeout 240 python3 $S 4 fp8 "[{},{$T,\"max_registers\":128},{$T,\"max_registers\":96},{$T,\"max_registers\":104},{$T,\"max_registers\":112},{$T,\"max_registers\":120},{$T,\"max_registers\":136},{$T,\"max_registers\":128,\"num_stages\":4},{$T,\"max_registers\":112,\"num_stages\":4},{},{$T,\"max_registers\":128}]" graph > $OUT/sweep3.txt 2>&1 ;;
bench)  # with the transposed fp8 plan of shape 5 in the launch
  timeout 250 python3 benchmarks/bench_fixed_history_attention.py \
    --kv-dtypes fp8 --kernel-only --md $OUT/five-fp8.md > $OUT/bench.txt 2>&1
  echo "bench rc $?"; cat $OUT/five-fp8.md
  # the launch's transposed fp8 plan at D = 64 through the public API
  timeout 80 python3 -m pytest -q -rf -p no:cacheprovider -m cuda \
    tests/test_fixed_history_attention.py \
    -k "fp8 and (L_below_W_16_16_64 or graph_replay)" > $OUT/tests-api.log 2>&1
  echo "api rc $?"; tail -n 2 $OUT/tests-api.log | cut -c1-300 ;;
sweep4)  # run inline on the last lease (recorded here): around the new launch plan
  timeout 100 python3 benchmarks/results/h200-2026-12-03h/plan_sweep.py 4 fp8 \
    '[{},{"max_registers":124},{"asm_page_load":false},{"num_stages":2,"max_registers":104},{"block_n":16,"num_stages":4},{}]' \
    graph > $OUT/sweep4.txt 2>&1 ;;
api)  # the public API's fp8 launches (shape 5's tiles now transposed) and plans
  timeout 200 python3 -m pytest -q -rf -p no:cacheprovider -m cuda \
    tests/test_fixed_history_attention.py -k "fp8_cache_matches or \
    fp8_head_dims or graph_replay or transposed or split_path" \
    > $OUT/tests-api.log 2>&1
  echo "api rc $?"; tail -n 3 $OUT/tests-api.log | cut -c1-400 ;;
esac
