# vLLM lease, after lease-a.sh: the small trained target and draft, then
# DSpark inside vLLM with --kv-cache-dtype fp8 opted into fp8 scores
# (SPARK2_5_GLUON=fp8-scores), acceptance against the references'
# prediction (no quantization). lease-c.sh: the same with fp8-pv.
source /tmp/gpu-vllm/env.sh && bash /tmp/gpu-vllm/on-gpu.sh project > $OUT/project.log 2>&1; echo "project rc $?"
date -u
STAGE_TIMEOUT=270 OUT=$OUT bash benchmarks/run_h200.sh small-train 2>&1 | tail -4
date -u
mode=${MODE:-fp8-scores}
mkdir -p $OUT/gluon-$mode
SPARK2_5_GLUON=$mode ACCEPTANCE_K=fp8 SPARK2_5_ACCEPTANCE_CHECKPOINT=/tmp/small-dspark \
  SPARK2_5_ACCEPTANCE_SEQUENCES=/tmp/small-seqs.json STAGE_TIMEOUT=280 OUT=$OUT/gluon-$mode \
  bash benchmarks/run_h200.sh acceptance 2>&1 | grep -E "PASSED|FAILED|passed|failed|acceptance|Error" | tail -6
date -u
