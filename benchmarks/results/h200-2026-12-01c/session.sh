# One H200 session's GPU work after the vLLM install (run by h200_background.sh).
set -x
export STAGE_TIMEOUT=700
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
python3 -c "import torch, triton, vllm; print(torch.__version__, triton.__version__, vllm.__version__)"
# Shape 5 (bf16) under vLLM's torch/Triton, scattered (Python shuffle) and sequential pages.
for pages in scattered sequential; do
  python3 benchmarks/bench_fixed_history_attention.py --kernel-only --shapes 4 --kv-dtypes bf16 --pages $pages --md $OUT/shape5-371-$pages.md 2>&1 | tail -4
done
python3 benchmarks/bench_fixed_history_attention.py --kernel-only --kv-dtypes fp8 --md $OUT/fp8-371.md 2>&1 | tail -8
date -u; OUT=$OUT/t4k SMALL_TRAIN_PROMPTS=4096 bash benchmarks/run_h200.sh small-train
date -u; OUT=$OUT/serve SMALL_TAG=t4k SMALL_REPEATS=3 SMALL_CONCURRENCIES="1 8" SMALL_MODES="dspark baseline" bash benchmarks/run_h200.sh small-serve
date -u; OUT=$OUT/llama LLAMA_TAG=1 LLAMA_PROFILE=none bash benchmarks/run_h200.sh llama-repeat
date -u; OUT=$OUT/fp8kv FP8KV_CKPTS=/tmp/small-dspark bash benchmarks/run_h200.sh fp8kv-profile
date -u; OUT=$OUT/llama LLAMA_TAG=2 LLAMA_ORDER="intree baseline" LLAMA_PROFILE=spark bash benchmarks/run_h200.sh llama-repeat
date -u; echo SESSION DONE
