# For a next lease (written 2026-12-02, sixteenth session; not yet run):
# where the fp8 P V loader's ~700 extra cycles per tile go. Nsight Compute
# on fp8 shape 1, fp8 scores alone and with fp8_pv: shared-memory
# wavefronts and bank conflicts, the warps' stall reasons, and the
# instructions that collect the most stall samples (SourceCounters).
# Bare H200 with Triton 3.7.1 in /tmp/t371 (or a vLLM lease's env.sh).
export PYTHONPATH=/tmp/t371:src
S=benchmarks/results/h200-2026-12-01j/sweep.py
W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true,"fp8_scores":true,"ring":3,"raw_slots":3'
M=l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__average_warp_latency_issue_stalled_membar.ratio,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio
for v in "scores|$W}" "pv|$W,\"fp8_pv\":true}"; do
  name=${v%%|*}; var=${v#*|}
  timeout 120 ncu --clock-control none -k regex:fixed_history_ws_kernel --launch-skip 3 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section MemoryWorkloadAnalysis_Tables \
    --metrics $M python3 $S 0 fp8 "[$var]" > $OUT/ncu-$name.txt 2>&1
  grep -E "bank_conflicts|wavefronts|stalled|Duration" $OUT/ncu-$name.txt | head -12
done
