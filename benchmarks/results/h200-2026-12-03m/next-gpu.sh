# Leases of 2026-12-03 (twenty-fifth session), bare H200s with vLLM
# 0.32.0's Triton 3.7.1 wheel in /tmp/t371. fp8 shape 4 (32 requests x 4
# KV heads x 4096 keys, 128-row tiles, one program per SM) and its
# neighbours. Steps in the order they ran: alone, shape4, more (bn128.txt,
# alone2.txt), regs (bn128regs.txt, bn128-bf16.txt) on the first machine;
# tests128, shapes128, five8, wider (shapes128b.txt), edge (edge128.txt)
# on the second (all with 128-key tiles for every 128-row fp8-scores
# launch, before the plan's wide_tiles threshold); final on a third;
# issue128 on a fourth; ncu128 on a fifth.
export PYTHONPATH=/tmp/t371:src PYTHONUNBUFFERED=1
S=benchmarks/results/h200-2026-12-01j/sweep.py
M=benchmarks/results/h200-2026-12-03m/mma_probe.py
F128='"warp_specialized":true,"f16_dots":true,"rows":128,"narrow_convert":true,"tma":true,"edge_fence":true,"fp8_scores":true,"split_mma":true,"ring":4,"narrow_tail":true'
case $1 in
alone)  # the multiplying side alone (mma_probe.py), launch-like first and last
  timeout 250 python3 $M 3 fp8 '[{}, {"block_n":128,"ring":2}, {"block_n":128,"ring":2,"mma_regs":200}, {"fp8_pv":true}, {"fp8_pv":true,"block_n":128,"ring":2}, {"overlap":true}, {"overlap":true,"pingpong":true}, {}]' graph 2>&1 | tee $OUT/alone.txt ;;
shape4)  # the whole kernel: the launch's pipeline against 128-key tiles
  # (ring 2 + 2 staged; sm_90 stack 48 bytes at 168 registers), the second
  # multiplying partition at 192 registers, fp8 P V (64- and 128-key
  # tiles), the overlapped softmax with turns; launch first and last
  V="[{$F128},{$F128,\"block_n\":128,\"ring\":2,\"raw_slots\":2},{$F128,\"block_n\":128,\"ring\":2,\"raw_slots\":2,\"mma_regs\":192},{$F128,\"narrow_tail\":false,\"fp8_pv\":true},{$F128,\"narrow_tail\":false,\"fp8_pv\":true,\"block_n\":128,\"raw_slots\":2},{$F128,\"narrow_tail\":false,\"overlap\":true,\"pingpong\":true},{$F128}]"
  timeout 300 python3 $S 3 fp8 "$V" graph 2>&1 | tee $OUT/shape4.txt ;;
tests128)  # the 128-row fp8-scores kernels (128-key tiles now, the 64-key
  # pipeline beside them) against the reference fed q's e4m3 rows, NaN
  # outside the windows too, and the public API's Gluon tests
  timeout 560 python3 -m pytest -q -rf -p no:cacheprovider -m cuda \
    tests/test_fixed_history_gluon.py tests/test_fixed_history_attention.py -k \
    "gluon_path or fp8_scores_through or (test_fp8_scores_match and 128rows-fp8-scores) or (test_wait_statistics and 128)" \
    > $OUT/tests128.log 2>&1
  echo "tests rc $?"; tail -n 3 $OUT/tests128.log | cut -c1-400 ;;
shapes128)  # 64- against 128-key tiles at 128-row fp8 shapes around shape 4
  # (windows of 4096, 4088, 1024, 512 keys; 128 and 256 items), alternating
  K64="{$F128,\"block_n\":64,\"ring\":4,\"raw_slots\":2}"
  K128="{$F128,\"block_n\":128,\"ring\":2,\"raw_slots\":2}"
  timeout 300 python3 benchmarks/results/h200-2026-12-03m/sweep_shapes.py \
    '[[32,32768,16,4096,32,4,128],[32,32768,16,4088,32,4,128],[32,32768,16,1024,32,4,128],[32,8192,16,512,32,4,128],[64,8192,16,2048,32,4,128]]' \
    fp8 "[$K64,$K128,$K64,$K128]" 2>&1 | sed -E 's/\{.warp_specialized.*.narrow_tail.: True, //' | tee $OUT/shapes128.txt ;;
five8)  # the five shapes, fp8, kernel only (the launch's policy)
  timeout 300 python3 benchmarks/bench_fixed_history_attention.py --kv-dtypes fp8 \
    --kernel-only --md $OUT/five-fp8.md > $OUT/bench-fp8.txt 2>&1
  echo "bench rc $?"; cut -c1-200 $OUT/five-fp8.md | grep "|" ;;
more)  # ring and staging depths of 128-key tiles; the multiplying side
  # alone with the overlapped softmax and more registers at 128 keys
  B='"block_n":128'
  timeout 200 python3 $S 3 fp8 "[{$F128,$B,\"ring\":2,\"raw_slots\":2},{$F128,$B,\"ring\":3,\"raw_slots\":2},{$F128,$B,\"ring\":2,\"raw_slots\":3},{$F128,$B,\"ring\":3,\"raw_slots\":3},{$F128,$B,\"ring\":2,\"raw_slots\":1},{$F128,\"ring\":4}]" graph 2>&1 | tee $OUT/bn128.txt
  timeout 200 python3 $M 3 fp8 '[{"block_n":128,"ring":2}, {"block_n":128,"ring":3,"overlap":true}, {"block_n":128,"ring":3,"overlap":true,"pingpong":true}, {"block_n":128,"ring":2,"mma_regs":224,"worker_regs":56}, {"block_n":128,"ring":2,"fp8_pv":true,"mma_regs":224,"worker_regs":56}, {"block_n":128,"ring":2}]' graph 2>&1 | tee $OUT/alone2.txt ;;
regs)  # the second multiplying partition's registers at 128 keys; bf16
  B='"block_n":128'
  B128='"warp_specialized":true,"rows":128,"tma":true,"edge_fence":true,"split_mma":true'
  timeout 200 python3 $S 3 fp8 "[{$F128,$B,\"ring\":2,\"raw_slots\":2,\"mma_regs\":200,\"worker_regs\":96},{$F128,$B,\"ring\":2,\"raw_slots\":2,\"mma_regs\":184,\"worker_regs\":104},{$F128,$B,\"ring\":2,\"raw_slots\":2}]" graph 2>&1 | tee $OUT/bn128regs.txt
  timeout 200 python3 $S 3 bf16 "[{$B128,\"ring\":4},{$B128,$B,\"ring\":2},{$B128,$B,\"ring\":3},{$B128,\"ring\":4}]" graph 2>&1 | tee $OUT/bn128-bf16.txt ;;
wider)  # more windows, 64- against 128-key tiles, alternating
  K64="{$F128,\"block_n\":64,\"ring\":4,\"raw_slots\":2}"
  K128="{$F128,\"block_n\":128,\"ring\":2,\"raw_slots\":2}"
  timeout 300 python3 benchmarks/results/h200-2026-12-03m/sweep_shapes.py \
    '[[32,32768,16,2048,32,4,128],[32,32768,16,1536,32,4,128],[32,32768,16,3072,32,4,128],[64,8192,16,1024,32,4,128],[32,4096,16,null,32,4,128]]' \
    fp8 "[$K64,$K128,$K64,$K128]" 2>&1 | tee $OUT/shapes128b.txt ;;
edge)  # edge_tma with 128-key tiles; ring 2 with 3 staged
  K128="{$F128,\"block_n\":128,\"ring\":2,\"raw_slots\":2}"
  K128E="{$F128,\"block_n\":128,\"ring\":2,\"raw_slots\":2,\"edge_tma\":true}"
  K128R3="{$F128,\"block_n\":128,\"ring\":2,\"raw_slots\":3}"
  timeout 300 python3 benchmarks/results/h200-2026-12-03m/sweep_shapes.py \
    '[[32,32768,16,4096,32,4,128],[32,32768,16,4088,32,4,128]]' fp8 \
    "[$K128,$K128E,$K128R3,$K128,$K128E]" 2>&1 | tee $OUT/edge128.txt ;;
final)  # the landed policy (wide_tiles from 2048 keys per item): the public
  # API's Gluon tests, then the five shapes, both caches, kernel only
  timeout 300 python3 -m pytest -q -rf -p no:cacheprovider -m cuda \
    tests/test_fixed_history_attention.py -k "gluon_path or fp8_scores_through" \
    > $OUT/tests-final.log 2>&1
  echo "tests rc $?"; tail -n 2 $OUT/tests-final.log | cut -c1-400
  timeout 280 python3 benchmarks/bench_fixed_history_attention.py --kernel-only \
    --md $OUT/five-final.md > $OUT/bench-final.txt 2>&1
  echo "bench rc $?"; cut -c1-200 $OUT/five-final.md | grep "|" ;;
issue128)  # (with issue128.patch applied: the kernel change it timed,
  # reverted after) the issuing warp and two converting warps (issue_warp,
  # the 64-row pipeline's) beside the two multiplying partitions, with TMA
  # copies of the edge tiles (without them the issuing warp's cp.async
  # path spills 704 bytes at 128 keys); 168 registers, or 184 at launch
  # with the second multiplying partition at 200 (8 bytes of stack);
  # alternating with the launch's, at shape 4 and with 1024-key windows
  W="{$F128,\"block_n\":128,\"ring\":2,\"raw_slots\":2}"
  WI="{$F128,\"block_n\":128,\"ring\":2,\"raw_slots\":2,\"issue_warp\":true,\"edge_tma\":true}"
  WIR="{$F128,\"block_n\":128,\"ring\":2,\"raw_slots\":2,\"issue_warp\":true,\"edge_tma\":true,\"maxnreg\":184,\"mma_regs\":200}"
  N="{$F128,\"ring\":4,\"raw_slots\":2}"
  NI="{$F128,\"ring\":4,\"raw_slots\":2,\"issue_warp\":true,\"edge_tma\":true}"
  NIR="{$F128,\"ring\":4,\"raw_slots\":2,\"issue_warp\":true,\"edge_tma\":true,\"maxnreg\":184,\"mma_regs\":200}"
  timeout 250 python3 benchmarks/results/h200-2026-12-03m/sweep_shapes.py \
    '[[32,32768,16,4096,32,4,128]]' fp8 "[$W,$WI,$WIR,$W,$WI,$WIR,$N,$NI,$NIR]" 2>&1 \
    | tee $OUT/issue128.txt
  timeout 150 python3 benchmarks/results/h200-2026-12-03m/sweep_shapes.py \
    '[[32,32768,16,1024,32,4,128]]' fp8 "[$N,$NI,$NIR,$N,$NI,$NIR]" 2>&1 \
    | tee -a $OUT/issue128.txt ;;
ncu128)  # one launch of the landed 128-key pipeline at fp8 shape 4 under
  # Nsight Compute, clocks left alone (as the twenty-third session's
  # ncu-fp8-shape4.txt of the 64-key pipeline, results/h200-2026-12-03j)
  secs="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats --section Occupancy --section LaunchStats"
  G="{$F128,\"block_n\":128,\"ring\":2,\"raw_slots\":2}"
  timeout 240 ncu --clock-control none -k regex:fixed_history_ws_kernel --launch-skip 3 \
    --launch-count 1 $secs python3 $S 3 fp8 "[$G]" > $OUT/ncu-fp8-shape4-wide.txt 2>&1
  echo "ncu rc $?"
  grep -E "Duration|Busy|Issued|Eligible|Pipe|Stall|Registers|Achieved Occ|Executed Ipc" \
    $OUT/ncu-fp8-shape4-wide.txt | head -40 ;;
esac
