# The three Nsight Compute calls of the vllm lease (after vllm-next.sh), as run.
source /tmp/gpu-vllm/env.sh
S=benchmarks/results/h200-2026-12-01j/sweep.py
W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true'
# 1: fp8 shape 1, the launch's options
timeout 170 ncu --clock-control none -k regex:fixed_history_ws_kernel --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \
  python3 $S 0 fp8 "[$W}]" > $OUT/ncu-fp8-shape1.txt 2>&1
# 2: fp8 shapes 1 and 4 with pipe and shared-memory metrics
M=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio
for spec in "0|[$W}]" "3|[$W,\"rows\":128,\"split_mma\":true,\"ring\":4}]"; do
  i=${spec%%|*}; v=${spec#*|}
  timeout 80 ncu --clock-control none -k regex:fixed_history_ws_kernel --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section WarpStateStats --metrics $M python3 $S $i fp8 "$v" > $OUT/ncu2-fp8-shape$((i+1)).txt 2>&1
done
# 3: bf16 shape 4, the launch's options
T='{"warp_specialized":true,"tma":true,"rows":128,"split_mma":true,"ring":4}'
timeout 80 ncu --clock-control none -k regex:fixed_history_ws_kernel --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats \
  --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_wait.ratio,smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio \
  python3 $S 3 bf16 "[$T]" > $OUT/ncu2-bf16-shape4.txt 2>&1
