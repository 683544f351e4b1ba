# Leases of 2026-12-03 (twenty-sixth session), bare H200s with vLLM
# 0.32.0's Triton 3.7.1 wheel in /tmp/t371. fp8 shape 4 (32 requests x 4
# KV heads x 4096 keys, 128-row tiles, one program per SM). Steps in the
# order they ran, one lease each but the second: alone (with turns.patch
# applied: the two multiplying partitions taking turns in the default
# loop, P V of tile t and S of tile t + 1 issued as one batch, at 208
# registers per multiplying thread and 88 for the loader - at 200 the
# softmax spills); shape4 and ncu (shape4-turns.txt, ncu-probe*.txt);
# tree (with tree.patch applied; old_gluon.py was the module at the
# session's start, git show 651f4e1:src/vllm_spark2_5_plugin/ops/
# fixed_history_gluon.py, not kept here); pv128 and ncuw (fp8_pv taking
# 128-key tiles, as landed); ovpv; psmem (both with psmem-ovpv.patch
# applied, which mma_probe.py's p_smem argument needs); parts; mufu;
# sums (psmem-ovpv.patch applied by the step; sums.txt: parts 6 faulted
# with an illegal memory access on its first launch, leaving the context
# unusable for the rest - not debugged, the session's device time spent).
# The patches apply to the module as committed in 66082a1.
# ncu-samples.txt: the warp samples of the two Nsight Compute reports per
# partition (from their SASS pages, 1.1 MB each, not kept).
export PYTHONPATH=/tmp/t371:src PYTHONUNBUFFERED=1
S=benchmarks/results/h200-2026-12-01j/sweep.py
M=benchmarks/results/h200-2026-12-03n/mma_probe.py
F128='"warp_specialized":true,"f16_dots":true,"rows":128,"narrow_convert":true,"tma":true,"edge_fence":true,"fp8_scores":true,"split_mma":true,"narrow_tail":true,"block_n":128,"ring":2,"raw_slots":2'
R='"mma_regs":208,"worker_regs":88'
case $1 in
alone)  # the multiplying side alone: 128-key tiles without and with turns
  # (and with fp8 P V), alternating
  A='"block_n":128,"ring":2,"narrow_tail":false'
  timeout 250 python3 $M 3 fp8 "[{$A,$R},{$A,$R,\"pingpong\":true},{$A,$R,\"fp8_pv\":true},{$A,$R,\"fp8_pv\":true,\"pingpong\":true},{$A,$R},{$A,$R,\"pingpong\":true},{$A,\"pingpong\":true,\"mma_regs\":224,\"worker_regs\":56}]" graph 2>&1 | tee $OUT/alone.txt ;;
shape4)  # the whole kernel: the launch's against turns, alternating
  T="{$F128,\"narrow_tail\":false,\"pingpong\":true,$R}"
  timeout 300 python3 $S 3 fp8 "[{$F128},$T,{$F128,$R},$T,{$F128}]" graph 2>&1 | tee $OUT/shape4.txt ;;
ncu)  # the multiplying side alone (128-key tiles, no turns) under Nsight
  # Compute: why its warps wait (stall reasons per issued instruction,
  # pipe utilization, and the stall samples of each SASS instruction)
  A='"block_n":128,"ring":2,"narrow_tail":false'
  m='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active$,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active$,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum'
  timeout 300 ncu --clock-control none -k regex:mma_only_kernel --launch-skip 3 \
    --launch-count 1 --section SourceCounters --section WarpStateStats --metrics "$m" \
    -o $OUT/probe python3 $M 3 fp8 "[{$A,$R}]" > $OUT/ncu-probe.txt 2>&1
  echo "ncu rc $?"
  ncu --import $OUT/probe.ncu-rep --page details --print-units base > $OUT/ncu-probe-details.txt 2>&1
  ncu --import $OUT/probe.ncu-rep --page source --csv --print-source sass > $OUT/ncu-probe-sass.csv 2>&1
  ls -la $OUT; grep -E "stalled|pipe|Duration|per_second" $OUT/ncu-probe-details.txt | sort -k3 -n -r | head -60 ;;
tree)  # (with old_gluon.py, the module at the session's start, in a copy
  # of the tree under /tmp/old) the softmax's row maxima and sums reduced
  # as trees against the chains before, alternating: the multiplying side
  # alone and the whole kernel at fp8 shape 4 (the launch's 128-key
  # pipeline), then the five shapes, both caches, kernel only (new code)
  rm -rf /tmp/old && mkdir /tmp/old && cp -r benchmarks src /tmp/old/ && \
    cp benchmarks/results/h200-2026-12-03n/old_gluon.py /tmp/old/src/vllm_spark2_5_plugin/ops/fixed_history_gluon.py
  A='"block_n":128,"ring":2'
  for rep in 1 2; do for t in new old; do
    d=.; [ $t = old ] && d=/tmp/old
    (cd $d && timeout 120 python3 $M 3 fp8 "[{$A},{$A}]" graph 2>&1 | grep "MMAs" | sed "s/^/$t /")
    (cd $d && timeout 120 python3 $S 3 fp8 "[{$F128},{$F128}]" graph 2>&1 | grep " us " | cut -c1-40 | sed "s/^/$t whole /")
  done; done 2>&1 | tee $OUT/tree.txt
  timeout 300 python3 benchmarks/bench_fixed_history_attention.py --kernel-only \
    --md $OUT/five-tree.md > $OUT/bench-tree.txt 2>&1
  echo "bench rc $?"; cut -c1-200 $OUT/five-tree.md | grep "|" ;;
tests)  # the public API's Gluon tests and the 128-row fp8-scores kernels
  # against the float64 reference
  timeout 500 python3 -m pytest -q -rf -p no:cacheprovider -m cuda \
    tests/test_fixed_history_gluon.py tests/test_fixed_history_attention.py -k \
    "gluon_path or fp8_scores_through or (test_fp8_scores_match and 128rows-fp8-scores)" \
    > $OUT/tests-tree.log 2>&1
  echo "tests rc $?"; tail -n 3 $OUT/tests-tree.log | cut -c1-400 ;;
pv128)  # P V on fp8 tensor cores with 128-key tiles (the loader
  # transposing V into the ring; fp8_pv allowed at 128 keys for this),
  # against the launch's, alternating; then those kernels against the
  # float64 reference
  P="{$F128,\"narrow_tail\":false,\"fp8_pv\":true}"
  timeout 200 python3 $S 3 fp8 "[{$F128},$P,{$F128,\"narrow_tail\":false,\"fp8_pv\":true,\"ring\":3},{$F128,\"narrow_tail\":false,\"fp8_pv\":true,\"raw_slots\":3},{$F128},$P]" graph 2>&1 | tee $OUT/pv128.txt
  timeout 300 python3 -m pytest -q -rf -p no:cacheprovider -m cuda \
    tests/test_fixed_history_gluon.py -k "test_fp8_scores_match and 128rows-fp8-pv" \
    > $OUT/tests-pv128.log 2>&1
  echo "tests rc $?"; tail -n 3 $OUT/tests-pv128.log | cut -c1-400 ;;
ncuw)  # the landed kernel at fp8 shape 4 under Nsight Compute: stall
  # reasons and each SASS instruction's samples (as ncu for the probe)
  m='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active$,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active$,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum'
  timeout 300 ncu --clock-control none -k regex:fixed_history_ws_kernel --launch-skip 3 \
    --launch-count 1 --section SourceCounters --section WarpStateStats --metrics "$m" \
    -o $OUT/whole python3 $S 3 fp8 "[{$F128}]" > $OUT/ncu-whole.txt 2>&1
  echo "ncu rc $?"
  ncu --import $OUT/whole.ncu-rep --page details --print-units base > $OUT/ncu-whole-details.txt 2>&1
  ncu --import $OUT/whole.ncu-rep --page source --csv --print-source sass > $OUT/ncu-whole-sass.csv 2>&1
  grep -E "stalled|pipe_(tensor|xu|alu|fma|lsu)|Duration|per_second" $OUT/ncu-whole-details.txt | sort -k3 -n -r | head -30 ;;
ovpv)  # the overlapped softmax with P V on fp8 tensor cores (8-bit
  # weights: 16 registers per thread instead of 32), 128-key tiles, ring 3:
  # the multiplying side alone, then the whole kernel, alternating with
  # the launch's
  A='"block_n":128,"ring":2'
  O='"block_n":128,"ring":3,"overlap":true,"fp8_pv":true,"narrow_tail":false'
  F='"block_n":128,"ring":3,"overlap":true,"narrow_tail":false'
  timeout 200 python3 $M 3 fp8 "[{$A},{$O},{$O,$R},{$F,$R},{$A},{$O},{$O,$R},{$F,$R}]" graph 2>&1 | tee $OUT/ovpv-alone.txt
  W="{$F128,\"narrow_tail\":false,\"fp8_pv\":true,\"overlap\":true,\"ring\":3}"
  WR="{$F128,\"narrow_tail\":false,\"fp8_pv\":true,\"overlap\":true,\"ring\":3,$R}"
  WF="{$F128,\"narrow_tail\":false,\"overlap\":true,\"ring\":3,$R}"
  timeout 250 python3 $S 3 fp8 "[{$F128},$W,$WR,$WF,{$F128},$W,$WR,$WF]" graph 2>&1 | cut -c1-60 | tee $OUT/ovpv.txt ;;
psmem)  # the multiplying side alone with the weights through shared
  # memory (P V with both operands there, not P from registers), alternating
  A='"block_n":128,"ring":2,"narrow_tail":false'
  timeout 200 python3 $M 3 fp8 "[{$A},{$A,\"p_smem\":true},{$A,\"p_smem\":true,$R},{$A},{$A,\"p_smem\":true},{$A,\"p_smem\":true,$R}]" graph 2>&1 | tee $OUT/psmem-alone.txt ;;
parts)  # the key loop's parts alone (mma_probe.py's parts: 1 the MMAs,
  # 2 the softmax, 3 both; no q, no output) against the product's loop
  A='"block_n":128,"ring":2,"narrow_tail":false'
  # 4 both with 2^x as x / 2 + 1 (no MUFU), 5 both written out as 4 is
  timeout 250 python3 $M 3 fp8 "[{$A,\"parts\":1},{$A,\"parts\":2},{$A,\"parts\":3},{$A,\"parts\":4},{$A,\"parts\":5},{$A},{$A,\"parts\":1},{$A,\"parts\":2},{$A,\"parts\":3},{$A,\"parts\":4},{$A,\"parts\":5},{$A}]" graph 2>&1 | tee $OUT/parts.txt ;;
mufu)  # the SM's rate of exponentials (mufu_rate.py)
  timeout 120 python3 benchmarks/results/h200-2026-12-03n/mufu_rate.py 2>&1 | tee $OUT/mufu.txt ;;
sums)  # the row sums by the tensor cores (mma_probe.py's parts 6: P times
  # a 128 x 8 tile of ones beside P V) against the softmax written out
  # (parts 5), alternating
  patch -p1 -s < benchmarks/results/h200-2026-12-03n/psmem-ovpv.patch || exit 4
  A='"block_n":128,"ring":2,"narrow_tail":false'
  timeout 200 python3 $M 3 fp8 "[{$A,\"parts\":5},{$A,\"parts\":6},{$A,\"parts\":5},{$A,\"parts\":6},{$A}]" graph 2>&1 | tee $OUT/sums.txt ;;
esac
