# Steps for the fiftieth session's lease, run after vLLM 0.32.0's CUDA
# bundle is installed:
#   source /tmp/gpu-vllm/env.sh && bash /tmp/gpu-vllm/on-gpu.sh project &&
#   bash benchmarks/results/gpu-2026-12-06c/next-gpu.sh STEP   (output in $OUT)
suite=benchmarks/results/h200-2026-12-05c/suite_on_gpu.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv \
    > $OUT/machine-$1.txt 2>&1
case $1 in
engines)  # the pooling and KV-cache files after the engine-helper fix and
  # the preemption test's cache sized for asynchronous scheduling
  NAME=engines BUDGET=${BUDGET:-540} PER_FILE=430 bash $suite \
    tests/test_kv_cache_paths.py tests/test_pooling_and_prompt_embeds.py ;;
changed)  # the forty-ninth session's changed unmarked files under the
  # CUDA build: the demo's own shutdown, the start-up refusals, the stand-in
  # config of a failed registration
  NAME=changed BUDGET=${BUDGET:-540} PER_FILE=300 bash $suite \
    tests/test_demo.py tests/test_registration.py tests/test_dspark_config.py ;;
esac
