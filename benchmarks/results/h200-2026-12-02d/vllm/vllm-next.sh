# vLLM lease: the small trained target and draft (D = 128: the draft's
# fixed-history attention in the Gluon kernel), then DSpark inside vLLM with
# --kv-cache-dtype fp8 (the shipped fp8 path: raw tiles staged by TMA, narrow
# conversion, float16 MMAs), acceptance against the references' prediction.
source /tmp/gpu-vllm/env.sh && bash /tmp/gpu-vllm/on-gpu.sh project > $OUT/project.log 2>&1; echo "project rc $?"
date -u
python3 -c "import torch, triton, vllm; print(torch.__version__, triton.__version__, vllm.__version__)"
python3 -c "import torch; from vllm_spark2_5_plugin import ops; print('gluon_supported', ops.gluon_supported(torch.device('cuda')))"
STAGE_TIMEOUT=270 OUT=$OUT bash benchmarks/run_h200.sh small-train 2>&1 | tail -4
date -u
ACCEPTANCE_K=fp8 SPARK2_5_ACCEPTANCE_CHECKPOINT=/tmp/small-dspark SPARK2_5_ACCEPTANCE_SEQUENCES=/tmp/small-seqs.json STAGE_TIMEOUT=280 OUT=$OUT bash benchmarks/run_h200.sh acceptance 2>&1 | grep -E "PASSED|FAILED|passed|failed|acceptance|Error" | tail -12
date -u
