# Steps for this session's lease, run after vLLM 0.32.0's CUDA bundle is
# installed:
#   source /tmp/gpu-vllm/env.sh && bash /tmp/gpu-vllm/on-gpu.sh project &&
#   bash benchmarks/results/h200-2026-12-06a/next-gpu.sh STEP      (output in $OUT)
suite=benchmarks/results/h200-2026-12-05c/suite_on_gpu.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv \
    > $OUT/machine-$1.txt 2>&1
case $1 in
lora-serve)  # the LoRA refusal and bf16 parity (CUDA-marked), then the
  # server files for the forty-sixth session's template/parser changes
  SPARK2_5_ORACLE_OUT=$OUT NAME=lora MARK=cuda BUDGET=240 PER_FILE=240 \
    bash $suite tests/test_lora_gpu.py
  NAME=serve BUDGET=${BUDGET:-300} PER_FILE=150 bash $suite \
    tests/test_chat_history.py tests/test_request_fuzz.py \
    tests/test_server_tool_calls.py tests/test_tool_choice_responses.py ;;
parity)  # the two files that ran out of their limits last time
  NAME=parity BUDGET=${BUDGET:-560} PER_FILE=${PER_FILE:-340} bash $suite \
    tests/test_generation_parity.py tests/test_registration.py ;;
rest)  # what the parity step did not reach (for the next lease)
  NAME=rest BUDGET=${BUDGET:-560} PER_FILE=${PER_FILE:-200} bash $suite \
    "tests/test_generation_parity.py::test_checkpoint_with_draft_tensors_serves_target_only" \
    tests/test_generation_parity.py::test_multiprocess_engine_discovers_plugin_through_entry_point \
    tests/test_generation_parity.py::test_quantised_load_checks_hold_on_every_tensor_parallel_rank \
    tests/test_registration.py::test_config_loads_without_remote_code \
    tests/test_tool_choice_responses.py ;;
esac
