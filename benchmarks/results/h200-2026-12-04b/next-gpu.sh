# Leases of the twenty-eighth session (2026-12-04), bare H200s with vLLM
# 0.32.0's Triton 3.7.1 wheel in /tmp/t371. fp8 shape 4 (32 requests x 4
# KV heads x 4096 keys, 128-row tiles, one program per SM).
#   bash next-gpu.sh STEP   (from the repository root; output in $OUT)
# Steps in the order they ran: half, packed (lease 1); packed2 (lease 2:
# its first run met the fresh machine before the wheel was installed and
# every variant failed; installed, then run again); verify, more, five
# (twice: five.md, then five-r2.md), old, keys64 (lease 3, the launch with
# packed_softmax at 128-row fp8 tiles of 128 keys); ncu, then the same
# by hand for the float32 scores at the launch's registers before
# (packed_probe.py '[{"packed_softmax":false,"mma_regs":168}]', -o f32;
# lease 4). ncu-samples.txt: ncu_regions.py on both SASS pages (1.9 MB
# each, not kept).
export PYTHONPATH=/tmp/t371:src PYTHONUNBUFFERED=1
P=benchmarks/results/h200-2026-12-04a/loop_probe.py
D=benchmarks/results/h200-2026-12-04b
R='"mma_regs":208,"worker_regs":88'
case $1 in
half)  # the key loop alone (loop_probe.py): the softmax as the product's
  # and in float16 pairs on float16 scores (half), each also with the
  # partitions taking turns (the weights held until their P V completed);
  # alternating, three rounds; then program 0's timeline for the four
  V1="{},{\"half\":true},{\"turns\":true,\"keep_p\":true,$R},{\"half\":true,\"turns\":true,\"keep_p\":true,$R},{\"half\":true,$R}"
  timeout 300 python3 $P 3 fp8 "[$V1,$V1,$V1]" graph 2>&1 | tee $OUT/half.txt
  T="[{},{\"half\":true},{\"turns\":true,\"keep_p\":true,$R},{\"half\":true,\"turns\":true,\"keep_p\":true,$R}]"
  timeout 200 python3 $P 3 fp8 "$T" graph trace 2>&1 | grep -v "key loop" | tee $OUT/timeline-half.txt ;;
packed)  # the launch's pipeline against packed_softmax (packed_probe.py),
  # with the launch's registers and with 184 / 208 / 112 (the first
  # multiplying partition / the second / the loader; packed_softmax spills
  # at the launch's), alternating, two rounds, at fp8 shape 4; then shapes
  # 1 and 3 (64-row tiles) with and without it
  X='"maxnreg":184,"mma_regs":208,"worker_regs":112'
  V1="{},{\"packed_softmax\":true},{$X},{\"packed_softmax\":true,$X}"
  timeout 300 python3 $D/packed_probe.py 3 fp8 "[$V1,$V1]" graph 2>&1 | cut -c1-300 | tee $OUT/packed.txt
  for i in 0 2; do
    timeout 150 python3 $D/packed_probe.py $i fp8 '[{},{"packed_softmax":true},{},{"packed_softmax":true}]' graph 2>&1 | cut -c1-300
  done | tee $OUT/packed-64rows.txt ;;
packed2)  # packed_softmax with the second multiplying partition at 192 and
  # 200 registers (the first then at 200 and 192; at the launch's 168 it
  # spills), against the launch's pipeline at those and its own, two rounds;
  # then the GPU tests of packed_softmax against the float64 reference
  V1="{},{\"packed_softmax\":true,\"mma_regs\":192},{\"packed_softmax\":true,\"mma_regs\":200},{\"mma_regs\":200},{\"packed_softmax\":true}"
  timeout 300 python3 $D/packed_probe.py 3 fp8 "[$V1,$V1]" graph 2>&1 | cut -c1-300 | tee $OUT/packed2.txt
  timeout 400 python3 -m pytest -q --tb=line -p no:cacheprovider tests/test_fixed_history_gluon.py -k "packed" 2>&1 | tail -40 | tee $OUT/tests-packed.log ;;
verify)  # the launch with packed_softmax (128-row fp8 tiles of 128 keys):
  # the public API's Gluon GPU tests (a case over windows of 2100 keys
  # among them) and the fp8-scores kernels against the float64 reference
  timeout 500 python3 -m pytest -q -rf -p no:cacheprovider -m cuda \
    tests/test_fixed_history_gluon.py tests/test_fixed_history_attention.py -k \
    "gluon_path or fp8_scores_through or (test_fp8_scores_match and (128rows or packed))" \
    > $OUT/tests-verify.log 2>&1
  echo "tests rc $?"; tail -n 5 $OUT/tests-verify.log | cut -c1-400 ;;
more)  # the launch's pipeline (packed_softmax) with a ring of 3, 3 staged
  # V tiles, the second multiplying partition at 192, and at 208 with the
  # loader at 104 (the first partition at 192), alternating with it
  V1='{},{"ring":3},{"raw_slots":3},{"mma_regs":192},{"mma_regs":208,"worker_regs":104}'
  timeout 300 python3 $D/packed_probe.py 3 fp8 "[$V1,$V1]" graph 2>&1 | cut -c1-300 | tee $OUT/packed-more.txt ;;
five)  # the five shapes, kernel only, fp8 and bf16
  timeout 500 python3 benchmarks/bench_fixed_history_attention.py \
    --kv-dtypes fp8 bf16 --kernel-only --md $OUT/five.md > $OUT/bench.txt 2>&1
  echo "bench rc $?"; cut -c1-200 $OUT/five.md | grep "|" ;;
old)  # (after five, same machine) the five shapes at the previous commit,
  # in a worktree of it
  git worktree add -q /tmp/old 0706c16
  (cd /tmp/old && PYTHONPATH=/tmp/t371:src timeout 200 python3 \
    benchmarks/bench_fixed_history_attention.py --kv-dtypes fp8 bf16 \
    --kernel-only --md $OUT/five-0706c16.md > $OUT/bench-0706c16.txt 2>&1) ;;
keys64)  # the 128-row pipeline with 64-key tiles (ring 4): float32 scores
  # at 168 and 200 registers against packed_softmax, alternating
  V1='{"block_n":64,"ring":4,"packed_softmax":false,"mma_regs":168},{"block_n":64,"ring":4},{"block_n":64,"ring":4,"packed_softmax":false,"mma_regs":200}'
  timeout 200 python3 $D/packed_probe.py 3 fp8 "[$V1,$V1]" graph 2>&1 | cut -c1-200 | tee $OUT/packed-64keys.txt ;;
ncu)  # the launch's kernel at fp8 shape 4 (packed_softmax) under Nsight
  # Compute, as h200-2026-12-03n's ncuw: stall reasons per issued
  # instruction, pipe utilization and the warp samples of each SASS
  # instruction (the SASS page is read here, not kept)
  m='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active$,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active$,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active'
  timeout 300 ncu --clock-control none -k regex:fixed_history_ws_kernel --launch-skip 3 \
    --launch-count 1 --section SourceCounters --section WarpStateStats --metrics "$m" \
    -o $OUT/packed python3 $D/packed_probe.py 3 fp8 '[{}]' > $OUT/ncu-packed.txt 2>&1
  echo "ncu rc $?"
  ncu --import $OUT/packed.ncu-rep --page details --print-units base > $OUT/ncu-packed-details.txt 2>&1
  ncu --import $OUT/packed.ncu-rep --page source --csv --print-source sass > $OUT/ncu-packed-sass.csv 2>&1
  rm -f $OUT/packed.ncu-rep
  grep -E "stalled|pipe_(tensor|xu|alu|fma|fmaheavy|lsu)|issue_active|Duration|per_second" $OUT/ncu-packed-details.txt | sort -k3 -n -r | head -30 ;;
esac
