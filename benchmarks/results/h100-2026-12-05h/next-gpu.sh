# Steps for the next lease, after vLLM 0.32.0's CUDA bundle is installed:
#   source /tmp/gpu-vllm/env.sh && bash /tmp/gpu-vllm/on-gpu.sh project &&
#   bash benchmarks/results/h100-2026-12-05h/next-gpu.sh STEP      (output in $OUT)
suite=benchmarks/results/h200-2026-12-05c/suite_on_gpu.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv \
    > $OUT/machine-$1.txt 2>&1
case $1 in
serve)  # this session's server-side fixes under the CUDA build: the Responses
  # stream cut inside a call, content parts, tool_choice none, the front
  # end's registered line (multiprocess test)
  NAME=serve BUDGET=${BUDGET:-560} PER_FILE=${PER_FILE:-200} bash $suite \
    tests/test_tool_choice_responses.py tests/test_server_tool_calls.py \
    tests/test_generation_parity.py ;;
tools)  # the DSpark tools and the files not reached last time
  NAME=tools BUDGET=${BUDGET:-560} PER_FILE=${PER_FILE:-180} bash $suite \
    tests/test_train_dspark.py tests/test_dspark_tools_refusals.py \
    tests/test_registration.py tests/test_lora.py ;;
fp8)  # the forty-fifth session's checks of quantised loads under the CUDA
  # build: the FP8 checkpoint and online --quantization fp8 must still load,
  # broken copies must be refused naming the tensor. Carry out/fp8-pair, made
  # on the CPU machine by `.venv/bin/python tests/test_fp8_gpu.py out/fp8-pair`.
  SPARK2_5_FP8_PAIR=out/fp8-pair SPARK2_5_ORACLE_OUT=$OUT NAME=fp8 MARK=cuda \
    BUDGET=${BUDGET:-330} PER_FILE=${PER_FILE:-330} bash $suite tests/test_fp8_gpu.py
  NAME=fp8-cpu-tests BUDGET=200 PER_FILE=200 bash $suite tests/test_strict_loading.py ;;
esac
