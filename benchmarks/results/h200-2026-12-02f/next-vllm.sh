# For the next vLLM lease (written 2026-12-02, sixteenth session; not yet
# run). This session's acceptance runs (lease-b, lease-c) served 48 prompts:
# the draft's fixed-history attention then splits each request's keys and
# runs the Triton kernel, so SPARK2_5_GLUON=fp8-scores and =fp8-pv gave the
# same counts to the token and measured nothing about fp8 scores. With 160
# prompts (from ~128 requests on, one split, the Gluon kernel) and the
# launch's once-per-kind INFO lines to show which kernels ran: DSpark with
# --kv-cache-dtype fp8 on the shipped Gluon path and opted into fp8 scores,
# each against the references' prediction. Run after on-gpu.sh install.
source /tmp/gpu-vllm/env.sh && bash /tmp/gpu-vllm/on-gpu.sh project > $OUT/project.log 2>&1; echo "project rc $?"
STAGE_TIMEOUT=270 OUT=$OUT bash benchmarks/run_h200.sh small-train 2>&1 | tail -4
for mode in 1 fp8-scores; do
  mkdir -p $OUT/gluon-$mode
  SPARK2_5_GLUON=$mode SPARK2_5_ACCEPTANCE_PROMPTS=160 ACCEPTANCE_K=fp8 \
    SPARK2_5_ACCEPTANCE_CHECKPOINT=/tmp/small-dspark SPARK2_5_ACCEPTANCE_SEQUENCES=/tmp/small-seqs.json \
    STAGE_TIMEOUT=400 OUT=$OUT/gluon-$mode \
    bash benchmarks/run_h200.sh acceptance 2>&1 | grep -E "PASSED|FAILED|passed|failed|acceptance|Error" | tail -6
  grep -h "fixed-history attention:" $OUT/gluon-$mode/acceptance.log | sort | uniq -c
done
