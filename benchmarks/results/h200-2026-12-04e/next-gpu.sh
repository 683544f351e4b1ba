# The thirty-first session's vLLM lease on the H200 (2026-12-04), after
# ../shared/gpu-vllm's install: V's pages transposed in the draft's fp8
# cache, from the kernel to DSpark inside vLLM.
#   bash next-gpu.sh STEP   (from the repository root; output in $OUT)
source /tmp/gpu-vllm/env.sh
export PYTHONUNBUFFERED=1
D=benchmarks/results/h200-2026-12-04e
case $1 in
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
esac
