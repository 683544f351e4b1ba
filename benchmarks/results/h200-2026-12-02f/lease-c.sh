# vLLM lease, after lease-b.sh (the trained checkpoint in /tmp): DSpark
# acceptance with SPARK2_5_GLUON=fp8-pv (fp8 scores and fp8 P V).
source /tmp/gpu-vllm/env.sh && bash /tmp/gpu-vllm/on-gpu.sh project > $OUT/project.log 2>&1; echo "project rc $?"
date -u
mode=${MODE:-fp8-pv}
mkdir -p $OUT/gluon-$mode
SPARK2_5_GLUON=$mode ACCEPTANCE_K=fp8 SPARK2_5_ACCEPTANCE_CHECKPOINT=/tmp/small-dspark \
  SPARK2_5_ACCEPTANCE_SEQUENCES=/tmp/small-seqs.json STAGE_TIMEOUT=280 OUT=$OUT/gluon-$mode \
  bash benchmarks/run_h200.sh acceptance 2>&1 | grep -E "PASSED|FAILED|passed|failed|acceptance|Error" | tail -6
date -u
