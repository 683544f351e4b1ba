# For a later lease with vLLM 0.32.0's CUDA bundle installed (after
# `source /tmp/gpu-vllm/env.sh && bash /tmp/gpu-vllm/on-gpu.sh project`):
#   bash benchmarks/results/h100-2026-12-05e/next-gpu.sh STEP   (output in $OUT)
D=benchmarks/results/h100-2026-12-05e
case $1 in
parity)  # why tests/test_generation_parity.py fails under the CUDA build:
  # its configurations' largest logprob difference from the float64
  # reference, as vLLM picks the kernels and with Triton's float32 dots
  # forced to IEEE, then the test file itself with its failures printed
  for f32 in default ieee; do
    if [ $f32 = ieee ]; then export TRITON_F32_DEFAULT=ieee; fi
    timeout 240 python3 $D/parity_probe.py /tmp/parity-$f32 2>&1 |
      grep -E "PARITY|[Bb]ackend|Error" | cut -c1-300 | sed "s/^/$f32 /"
  done | tee $OUT/parity.txt
  unset TRITON_F32_DEFAULT
  # SIGINT at the limit: pytest then still prints the failures it has seen
  timeout -s INT -k 10 300 python3 -m pytest tests/test_generation_parity.py -m "not cuda" \
    -k "greedy_generation or draft_tensors" -q -rfE --tb=line \
    -p no:cacheprovider 2>&1 | tail -20 | tee $OUT/parity-tests.txt ;;
esac
