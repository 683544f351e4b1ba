# Steps for the next lease, after vLLM 0.32.0's CUDA bundle is installed:
#   source /tmp/gpu-vllm/env.sh && bash /tmp/gpu-vllm/on-gpu.sh project &&
#   bash benchmarks/results/h100-2026-12-05g/next-gpu.sh STEP      (output in $OUT)
here=benchmarks/results/h100-2026-12-05g
suite=benchmarks/results/h200-2026-12-05c/suite_on_gpu.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv \
    > $OUT/machine-$1.txt 2>&1
case $1 in
mplog)  # where the engine core's start-up lines go (file, pipe, pipe + DEBUG),
  # then the multiprocess test itself
  timeout -k 5 ${PROBE_S:-200} python3 $here/mp_log_probe.py $OUT | tee $OUT/mplog.txt
  timeout -s INT -k 10 ${TESTS_S:-110} python3 -m pytest tests/test_generation_parity.py \
    -k multiprocess -q -rfE --tb=short -p no:cacheprovider 2>&1 | tail -20 \
    > $OUT/multiproc-test.txt
  tail -3 $OUT/multiproc-test.txt ;;
rest)  # the CPU-build files not yet run (or cut off) under the CUDA build
  NAME=rest BUDGET=${BUDGET:-560} PER_FILE=${PER_FILE:-180} bash $suite \
    tests/test_tool_choice.py tests/test_registration.py tests/test_demo.py \
    tests/test_tool_choice_responses.py tests/test_tool_parser_property.py \
    tests/test_lora.py tests/test_train_dspark.py ;;
kernels)  # the CUDA kernel tests, each file with a long limit
  NAME=kernels BUDGET=${BUDGET:-560} PER_FILE=${PER_FILE:-280} MARK=cuda bash $suite \
    tests/test_fixed_history_attention.py tests/test_fixed_history_gluon.py ;;
esac
