# For the next vLLM lease (written 2026-12-02, fifteenth session; not yet
# run): DSpark inside vLLM with --kv-cache-dtype fp8, once on the shipped
# fp8 path and once opted into fp8 scores (SPARK2_5_GLUON=fp8-scores: Q K^T
# on fp8 tensor cores, q rounded to e4m3 row by row), each against the
# pure-PyTorch references' prediction (no quantization), so that the
# acceptance the opt-in costs, if any, is measured before it could become
# the policy. Run after on-gpu.sh install, like results/h200-2026-12-02d/vllm.
source /tmp/gpu-vllm/env.sh && bash /tmp/gpu-vllm/on-gpu.sh project > $OUT/project.log 2>&1; echo "project rc $?"
python3 -c "import torch, triton, vllm; print(torch.__version__, triton.__version__, vllm.__version__)"
STAGE_TIMEOUT=270 OUT=$OUT bash benchmarks/run_h200.sh small-train 2>&1 | tail -4
for mode in 1 fp8-scores; do
  mkdir -p $OUT/gluon-$mode
  SPARK2_5_GLUON=$mode ACCEPTANCE_K=fp8 SPARK2_5_ACCEPTANCE_CHECKPOINT=/tmp/small-dspark \
    SPARK2_5_ACCEPTANCE_SEQUENCES=/tmp/small-seqs.json STAGE_TIMEOUT=280 OUT=$OUT/gluon-$mode \
    bash benchmarks/run_h200.sh acceptance 2>&1 | grep -E "PASSED|FAILED|passed|failed|acceptance|Error" | tail -6
done
