# Branch tma-loader inside vLLM: the trained small draft (D = 128, the Gluon kernel: TMA page copies for
# the bf16 cache; narrow conversion and float16 MMAs for the fp8 cache), acceptance against the references.
source /tmp/gpu-vllm/env.sh && bash /tmp/gpu-vllm/on-gpu.sh project > $OUT/project.log 2>&1; echo "project rc $?"
date -u
python3 -c "import torch, triton, vllm; print(torch.__version__, triton.__version__, vllm.__version__)"
python3 -c "import torch; from vllm_spark2_5_plugin import ops; print('gluon_supported', ops.gluon_supported(torch.device('cuda')))"
STAGE_TIMEOUT=270 OUT=$OUT bash benchmarks/run_h200.sh small-train 2>&1 | tail -4
date -u
SPARK2_5_ACCEPTANCE_CHECKPOINT=/tmp/small-dspark SPARK2_5_ACCEPTANCE_SEQUENCES=/tmp/small-seqs.json STAGE_TIMEOUT=280 OUT=$OUT bash benchmarks/run_h200.sh acceptance 2>&1 | grep -E "PASSED|FAILED|passed|failed|acceptance|Error" | tail -12
date -u
