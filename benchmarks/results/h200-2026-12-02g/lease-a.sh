# Seventeenth session (2026-12-02), vLLM lease on the H200, after
# on-gpu.sh install. Step 1 (call 1): the project and the small trained
# target + draft. Step 2 (call 2): DSpark acceptance with --kv-cache-dtype fp8
# at 160 prompts (one key split, the Gluon kernel), shipped policy and opted
# into fp8 scores, with the launch's once-per-kind log lines. Step 3 (call 3):
# Nsight Compute on the fp8 P V loader (bank conflicts, stall reasons).
step=$1
source /tmp/gpu-vllm/env.sh
case $step in
train)
  bash /tmp/gpu-vllm/on-gpu.sh project > $OUT/project.log 2>&1; echo "project rc $?"
  STAGE_TIMEOUT=280 OUT=$OUT bash benchmarks/run_h200.sh small-train 2>&1 | tail -4 ;;
accept)
  for mode in ${MODES:-1 fp8-scores}; do
    mkdir -p $OUT/gluon-$mode
    SPARK2_5_GLUON=$mode SPARK2_5_ACCEPTANCE_PROMPTS=160 ACCEPTANCE_K=fp8 \
      SPARK2_5_ACCEPTANCE_CHECKPOINT=/tmp/small-dspark SPARK2_5_ACCEPTANCE_SEQUENCES=/tmp/small-seqs.json \
      STAGE_TIMEOUT=280 OUT=$OUT/gluon-$mode \
      bash benchmarks/run_h200.sh acceptance 2>&1 | grep -E "PASSED|FAILED|passed|failed|acceptance|Error" | tail -6
    grep -h "fixed-history attention:" $OUT/gluon-$mode/acceptance.log | sort | uniq -c
  done ;;
ncu)
  S=benchmarks/results/h200-2026-12-01j/sweep.py
  W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true,"fp8_scores":true,"ring":3,"raw_slots":3'
  M=l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,smsp__inst_executed_op_ldsm.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum
  for v in "scores|$W}" "pv|$W,\"fp8_pv\":true}"; do
    name=${v%%|*}; var=${v#*|}
    timeout 200 ncu --clock-control none -k regex:fixed_history_ws_kernel --launch-skip 3 --launch-count 1 \
      --section WarpStateStats --section SourceCounters --section MemoryWorkloadAnalysis_Tables \
      --metrics $M python3 $S 0 fp8 "[$var]" > $OUT/ncu-$name.txt 2>&1
    echo "ncu $name rc $?"; grep -E "bank_conflicts|wavefronts|inst_executed|Duration|Stall" $OUT/ncu-$name.txt | head -20
  done ;;
esac
