# Steps prepared in the forty-second session for a lease (none came), run
# after vLLM 0.32.0's CUDA bundle is installed:
#   source /tmp/gpu-vllm/env.sh && bash /tmp/gpu-vllm/on-gpu.sh project &&
#   bash benchmarks/results/h200-2026-12-05f/next-gpu.sh STEP      (output in $OUT)
here=benchmarks/results/h200-2026-12-05f
prev=benchmarks/results/h100-2026-12-05e
suite=benchmarks/results/h200-2026-12-05c/suite_on_gpu.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv \
    > $OUT/machine-$1.txt 2>&1
case $1 in
probe)  # the parity configurations' logprob distance from the float64
  # reference, with Triton's float32 dots as they default and forced to IEEE
  # (side by side), then the test file itself (SIGINT at the limit, so
  # pytest still reports what it saw)
  timeout -k 5 ${PROBE_S:-260} python3 $here/probe_shared.py /tmp/parity-default \
    > $OUT/probe-default.log 2>&1 &
  TRITON_F32_DEFAULT=ieee timeout -k 5 ${PROBE_S:-260} python3 $here/probe_shared.py \
    /tmp/parity-ieee > $OUT/probe-ieee.log 2>&1 &
  wait
  for f32 in default ieee; do
    grep -E "PARITY|Using .*backend|Error" $OUT/probe-$f32.log | cut -c1-400 |
      sed "s/^/$f32 /"
  done | tee $OUT/probe.txt
  if [ "${TESTS_S:-250}" -gt 0 ]; then timeout -s INT -k 10 ${TESTS_S:-250} python3 -m pytest \
    tests/test_generation_parity.py -m "not cuda" -q -rfE --tb=short \
    -p no:cacheprovider 2>&1 | tail -60 > $OUT/parity-tests.txt
  tail -5 $OUT/parity-tests.txt; fi
  ;;
servers)  # the server files first: a crash there is what users would see
  NAME=servers BUDGET=${BUDGET:-290} PER_FILE=150 bash $suite \
    tests/test_server_tool_calls.py tests/test_request_fuzz.py ;;
suite)  # the CPU-build files not yet run under the CUDA build
  NAME=rest BUDGET=${BUDGET:-560} PER_FILE=${PER_FILE:-150} bash $suite \
    tests/test_tool_choice.py tests/test_tool_choice_responses.py \
    tests/test_lora.py tests/test_demo.py tests/test_tool_parser_streaming.py \
    tests/test_tool_parser_values.py tests/test_tool_parser_property.py \
    tests/test_train_dspark.py tests/test_registration.py ;;
esac
