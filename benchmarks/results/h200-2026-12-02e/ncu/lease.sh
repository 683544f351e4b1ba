# Lease 2, second call: Nsight Compute (clocks left alone) on the fp8
# kernel at shape 1, launch choice and fp8_scores (ring 3, 3 staged), and
# on fp8_scores at shape 3; who waits for whom with fp8_scores at shape 3.
export PYTHONPATH=/tmp/t371:src
S=benchmarks/results/h200-2026-12-01j/sweep.py
W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true'
F="$W,\"fp8_scores\":true,\"ring\":3,\"raw_slots\":3}"
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section InstructionStats --section Occupancy"
n=0
for spec in "0|[$W}]" "0|[$F]" "2|[$F]"; do
  i=${spec%%|*}; v=${spec#*|}; n=$((n+1))
  timeout 100 ncu --clock-control none -k regex:fixed_history_ws_kernel --launch-skip 3 \
    --launch-count 1 $SEC python3 $S $i fp8 "$v" > $OUT/ncu-$n.txt 2>&1
  echo "== ncu $n: shape $((i+1)) $v"
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Shared Memory|Stall|No Eligible|Issued Warp" $OUT/ncu-$n.txt | head -24
done
P=benchmarks/results/h200-2026-12-02d/wait_probe.py
SPARK2_5_BENCH_FLUSH=clean timeout 60 python3 $P 2 fp8 "[$F]" 2>&1 | tee $OUT/waits-shape3.txt
