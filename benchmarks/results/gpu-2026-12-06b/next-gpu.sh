# Steps for the forty-ninth session's lease, run after vLLM 0.32.0's CUDA
# bundle is installed:
#   source /tmp/gpu-vllm/env.sh && bash /tmp/gpu-vllm/on-gpu.sh project &&
#   bash benchmarks/results/gpu-2026-12-06b/next-gpu.sh STEP   (output in $OUT)
suite=benchmarks/results/h200-2026-12-05c/suite_on_gpu.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv \
    > $OUT/machine-$1.txt 2>&1
case $1 in
dspark)  # DSpark and fp8 serving under the CUDA build after the
  # forty-eighth session's start-up refusals of draft-only settings: the
  # accepted configurations must still start and draft
  # (carry out/fp8-pair, made on the CPU machine by
  # `.venv/bin/python tests/test_fp8_gpu.py out/fp8-pair`: the GPU machine has
  # no llm-compressor environment)
  SPARK2_5_FP8_PAIR=out/fp8-pair SPARK2_5_ORACLE_OUT=$OUT NAME=dspark \
    MARK=cuda BUDGET=${BUDGET:-560} PER_FILE=330 bash $suite \
    tests/test_dspark_gpu_e2e.py tests/test_fp8_gpu.py ;;
refusals)  # the start-up refusals' own tests under the CUDA build
  NAME=refusals BUDGET=${BUDGET:-300} PER_FILE=300 bash $suite \
    tests/test_dspark_config.py ;;
rest)  # what the forty-eighth session's lease did not reach
  bash benchmarks/results/h200-2026-12-06a/next-gpu.sh rest ;;
new)  # the forty-eighth session's new engine test files, never run under
  # the CUDA build before
  NAME=new BUDGET=${BUDGET:-400} PER_FILE=250 bash $suite \
    tests/test_engine_helpers.py tests/test_pooling_and_prompt_embeds.py \
    tests/test_kv_cache_paths.py ;;
esac
