# The thirty-first session's leases on the H200 (2026-12-04): V's pages
# transposed in the draft's fp8 cache, from the kernel to DSpark inside
# vLLM. The first lease after ../shared/gpu-vllm's install (its 22 parts
# re-cut into 24 of 56 MiB, so that each call stays within 64 MiB with the
# tree): tests, bench, train, accept, profile, ring. The second a bare H200
# with vLLM 0.32.0's Triton 3.7.1 wheel (parts .gpu-vllm/tw00..tw03 as in
# h200-2026-12-04d): part x 4, wheel, triton.
#   bash next-gpu.sh STEP   (from the repository root; output in $OUT)
[ -f /tmp/gpu-vllm/env.sh ] && source /tmp/gpu-vllm/env.sh
export PYTHONUNBUFFERED=1
D=benchmarks/results/h200-2026-12-04e
case $1 in
part|wheel)
  bash benchmarks/results/h200-2026-12-04d/next-gpu.sh "$@" ;;
triton)  # the Triton kernel reading V's pages 16 bytes at a time (the
  # second version): the public entry's GPU tests of the layout, then fp8
  # shapes 1 and 4 and a few-request shape with V's pages transposed and
  # in rows (each line with the plan's Triton kernel too)
  export PYTHONPATH=/tmp/t371:src
  timeout 200 python3 -m pytest -q -m cuda tests/test_fixed_history_attention.py \
    -k pages 2>&1 | tail -3 | tee $OUT/tests-triton.txt
  for rows in "" --v-rows; do
    timeout 100 python3 benchmarks/bench_fixed_history_attention.py --kv-dtypes fp8 \
      --shapes 0,3 --kernel-only $rows 2>&1 | grep -E "^  kernel|^GPU" | cut -c1-160
  done | tee $OUT/bench-triton.txt ;;
tests)  # the GPU tests of the layout: the writer, the Gluon pipelines over
  # it (64 and 128 rows, with NaN outside the windows), the public entry's
  # own plans (Gluon and Triton kernels); then the step bench
  bash /tmp/gpu-vllm/on-gpu.sh project > $OUT/project.log 2>&1; echo "project rc $?"
  timeout 270 python3 -m pytest -q -m cuda tests/test_kv_cache_write.py \
    tests/test_fixed_history_attention.py tests/test_fixed_history_gluon.py \
    -k "pages or kv_cache_write" 2>&1 | tail -15 | tee $OUT/tests-pages.txt ;&
bench)  # fp8 shapes 1-4: the kernel over V's pages transposed (the
  # product's layout there) and over V in rows (--v-rows); then the writers
  for rows in "" --v-rows; do
    timeout 110 python3 benchmarks/bench_fixed_history_attention.py --kv-dtypes fp8 \
      --shapes 0,1,2,3 --kernel-only $rows 2>&1 | grep -E "^  kernel|^GPU" | cut -c1-400
  done | tee $OUT/bench.txt
  timeout 60 python3 $D/writer_probe.py 2>&1 | grep -v Warn | tee $OUT/writer.txt ;;
train)  # the ~1B small target with a trained draft (about 5 minutes)
  STAGE_TIMEOUT=420 OUT=$OUT bash benchmarks/run_h200.sh small-train 2>&1 | tail -4 ;;
accept)  # DSpark acceptance with --kv-cache-dtype fp8 at 160 prompts (the
  # Gluon kernel, one key split): V's pages transposed (the default) and
  # not (SPARK2_5_V_PAGES=0), with the launch's log lines
  for mode in ${MODES:-1 0}; do
    mkdir -p $OUT/v-pages-$mode
    SPARK2_5_V_PAGES=$mode SPARK2_5_ACCEPTANCE_PROMPTS=160 ACCEPTANCE_K=fp8 \
      SPARK2_5_ACCEPTANCE_CHECKPOINT=/tmp/small-dspark SPARK2_5_ACCEPTANCE_SEQUENCES=/tmp/small-seqs.json \
      STAGE_TIMEOUT=280 OUT=$OUT/v-pages-$mode \
      bash benchmarks/run_h200.sh acceptance 2>&1 | grep -E "PASSED|FAILED|passed|failed|Error" | tail -4
    grep -h "fixed-history attention:" $OUT/v-pages-$mode/acceptance.log | sort | uniq -c
    grep -ho '"vllm_mean_acceptance_length": [0-9.]*\|"relative_difference": [-0-9.e]*' $OUT/v-pages-$mode/acceptance-fp8.json
  done ;;
triton2)  # the same for the third version (K and the scores in the pages'
  # order, V^T read as stored), shortened to the lease's last minutes
  export PYTHONPATH=/tmp/t371:src
  timeout 100 python3 -m pytest -q -m cuda tests/test_fixed_history_attention.py \
    -k cuda_reads_v_pages 2>&1 | tail -3 | tee $OUT/tests-triton2.txt
  timeout 60 python3 benchmarks/bench_fixed_history_attention.py --kv-dtypes fp8 \
    --shapes 0,3 --kernel-only 2>&1 | grep -E "^  kernel|^GPU" | cut -c1-160 \
    | tee $OUT/bench-triton2.txt ;;
profile)  # a DSpark run of 256 requests (1525 in, 256 out) with an fp8 cache,
  # V's pages transposed and not (no steady decode steps: prefill-bound)
  for m in 1 0; do
    SPARK2_5_V_PAGES=$m timeout 230 python3 benchmarks/profile_decode.py /tmp/small-dspark \
      --dspark --concurrency 256 --input-len 1525 --output-len 256 --max-model-len 2048 \
      --dtype bfloat16 --phases offline --label vpages-$m --out $OUT --log-dir /tmp/pl-$m \
      --llm-kwargs '{"kv_cache_dtype": "fp8"}' > $OUT/profile-vpages-$m.log 2>&1
  done ;;
ring)  # fp8 shape 4 over V's pages (vt_kernel_probe.py rewrites the cache):
  # rings of 3 and 4, the second multiplying partition at 200 and 168
  timeout 200 python3 benchmarks/results/h200-2026-12-04d/vt_kernel_probe.py 3 \
    '[{"v_pages":true,"ring":3},{"v_pages":true,"ring":4},{"v_pages":true,"ring":3,"mma_regs":168},{"v_pages":true,"ring":4,"mma_regs":168},{"v_pages":true,"ring":4}]' \
    2>&1 | grep -v Warn | tee $OUT/vpages-ring.txt ;;
esac
