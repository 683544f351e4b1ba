# Lease of 2026-12-03 (twenty-second session): the launch with half_rows
# (the Gluon kernel's 64-row tiles widened from 32 rows keep their queries
# in half of each thread's rows; lease i's sweep: fp8 shapes 1-3 4-5%
# faster, bf16 unchanged). Bare H200, Triton 3.7.1 in /tmp/t371.
# Steps ncu, stalls (run), source and read (not yet run): see each step.
# Step "bench": the five shapes, kernel only, fp8 and bf16, then the public
# API's GPU tests of the Gluon launches (fp8 and 16-bit caches, fp8 scores,
# CUDA-graph replays).
export PYTHONPATH=/tmp/t371:src PYTHONUNBUFFERED=1
case $1 in
bench)
  timeout 300 python3 benchmarks/bench_fixed_history_attention.py \
    --kv-dtypes fp8 bf16 --kernel-only --md $OUT/five.md > $OUT/bench.txt 2>&1
  echo "bench rc $?"; cut -c1-200 $OUT/five.md | grep "|"
  timeout 250 python3 -m pytest -q -rf -p no:cacheprovider -m cuda \
    tests/test_fixed_history_attention.py -k "gluon_path or \
    fp8_scores_through_the_launch or graph_replay or fp8_cache_matches" \
    > $OUT/tests-api.log 2>&1
  echo "api rc $?"; tail -n 3 $OUT/tests-api.log | cut -c1-400 ;;
ncu)  # where the two shapes still above the fp8 goal spend their time:
  # shape 5's Triton launch plan (transposed one-warp tiles) and shape 4's
  # Gluon pipeline (128 rows, two multiplying partitions), one launch each
  # under Nsight Compute, clocks left alone
  secs="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats"
  timeout 200 ncu --clock-control none -k regex:fixed_history_kernel --launch-skip 3 \
    --launch-count 1 $secs python3 benchmarks/results/h200-2026-12-03h/plan_sweep.py \
    4 fp8 '[{}]' > $OUT/ncu-fp8-shape5.txt 2>&1
  echo "ncu shape 5 rc $?"
  G='{"warp_specialized":true,"f16_dots":true,"rows":128,"narrow_convert":true,"tma":true,"edge_fence":true,"fp8_scores":true,"split_mma":true,"ring":4}'
  timeout 200 ncu --clock-control none -k regex:fixed_history_ws_kernel --launch-skip 3 \
    --launch-count 1 $secs python3 benchmarks/results/h200-2026-12-01j/sweep.py \
    3 fp8 "[$G]" > $OUT/ncu-fp8-shape4.txt 2>&1
  echo "ncu shape 4 rc $?"
  for f in $OUT/ncu-fp8-shape5.txt $OUT/ncu-fp8-shape4.txt; do
    grep -E "Duration|Throughput|Busy|Stall|Issued|Eligible|Registers|Achieved Occ|Theoretical Occ|Block Limit" $f | head -40
  done ;;
stalls)  # run inline on the lease (recorded here): shape 5's stall samples
  export PYTHONPATH=/tmp/t371:src
  m=smsp__pcsamp_warps_issue_stalled
  timeout 200 ncu --clock-control none -k regex:fixed_history_kernel --launch-skip 3 \
    --launch-count 1 --section WarpStateStats --section SourceCounters --metrics \
    ${m}_long_scoreboard,${m}_short_scoreboard,${m}_mio_throttle,${m}_lg_throttle,${m}_wait,${m}_math_pipe_throttle,${m}_barrier,${m}_not_selected,${m}_selected,${m}_dispatch_stall,${m}_tex_throttle,${m}_no_instructions \
    python3 benchmarks/results/h200-2026-12-03h/plan_sweep.py 4 fp8 '[{}]' \
    > $OUT/ncu-fp8-shape5-stalls.txt 2>&1 ;;
source)  # shape 5's launch plan: per-instruction counters (which shared
  # accesses the 49% excessive wavefronts of the stall run come from)
  export PYTHONPATH=/tmp/t371:src
  timeout 200 ncu --clock-control none -k regex:fixed_history_kernel --launch-skip 3 \
    --launch-count 1 --section SourceCounters --page source --csv --print-source sass \
    python3 benchmarks/results/h200-2026-12-03h/plan_sweep.py 4 fp8 '[{}]' \
    > $OUT/ncu-fp8-shape5-source.csv 2>&1
  echo "source rc $?"; wc -l $OUT/ncu-fp8-shape5-source.csv; head -c 1500 $OUT/ncu-fp8-shape5-source.csv ;;
read)  # shape 5's K/V reads alone: K and V as two 64-byte halves of each
  # key's line (as the kernel loads them) or one 128-byte load; bf16 (128
  # bytes each) for comparison; the launch plan's time is ~373 us (fp8)
  export PYTHONPATH=/tmp/t371:src
  P=benchmarks/results/h200-2026-12-03j/read_probe.py
  V='[{"joined":false},{"joined":true},{"joined":false,"num_warps":4},{"joined":true,"num_warps":4},{"joined":false,"block_n":64,"num_stages":2},{"joined":true,"block_n":64,"num_stages":2},{"joined":false}]'
  { timeout 150 python3 $P 4 fp8 "$V"; timeout 150 python3 $P 4 bf16 "$V"; } > $OUT/read.txt 2>&1
  cat $OUT/read.txt | cut -c1-120 ;;
esac
