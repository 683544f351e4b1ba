# One H200 session's GPU work after the vLLM install (run by h200_background.sh).
set -x
export STAGE_TIMEOUT=700
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
python3 -c "import torch, triton, vllm; print(torch.__version__, triton.__version__, vllm.__version__)"
python3 benchmarks/bench_fixed_history_attention.py --kernel-only --shapes 4 --kv-dtypes bf16 --md $OUT/shape5-triton371.md 2>&1 | tail -12
date -u; OUT=$OUT/train bash benchmarks/run_h200.sh small-train
date -u; OUT=$OUT/ab1 PLUGIN_BASELINE=".gpu-vllm/plugin-815c158" PLUGIN_AB_CKPT=/tmp/small-dspark PLUGIN_AB_ROUNDS=1 bash benchmarks/run_h200.sh plugin-ab
date -u; OUT=$OUT/matrix SMALL_REPEATS=3 SMALL_MODES="dspark baseline" bash benchmarks/run_h200.sh small-serve
date -u; OUT=$OUT/fp8kv SERVE_MODES=dspark bash benchmarks/run_h200.sh serve-fp8kv
date -u; OUT=$OUT/ab2 PLUGIN_BASELINE=".gpu-vllm/plugin-1bb074b .gpu-vllm/plugin-78a777e" PLUGIN_AB_CKPT=/tmp/small-dspark PLUGIN_AB_ROUNDS=1 bash benchmarks/run_h200.sh plugin-ab
date -u; echo SESSION DONE
