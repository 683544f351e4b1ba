# Leases of 2026-12-03 (twenty-fourth session), bare H200s with vLLM
# 0.32.0's Triton 3.7.1 wheel in /tmp/t371 (five machines, each installed
# anew). Steps in the order they ran: tail and tailbf16 (narrow_tail, an
# item's last tile multiplied as 16 keys, alone: no faster; the kernel
# change then lived in narrow_tail.patch), f16dots (the twenty-third
# session's pending step), edge (what an edge tile costs), edgetma,
# gtests, fp8tests, five8 (edge tiles by TMA), final (the landed policy of
# that moment on another machine), tail2 and tests4 (narrow_tail again,
# with edge_tma and the converting warps narrowed too), five8 once more
# (its files renamed *-landed). shape4 is for the next lease.
export PYTHONPATH=/tmp/t371:src PYTHONUNBUFFERED=1
S=benchmarks/results/h200-2026-12-01j/sweep.py
F64='"warp_specialized":true,"f16_dots":true,"rows":64,"narrow_convert":true,"half_rows":true,"tma":true,"edge_fence":true,"fp8_scores":true,"ring":3,"raw_slots":3,"issue_warp":true'
F128='"warp_specialized":true,"f16_dots":true,"rows":128,"narrow_convert":true,"tma":true,"edge_fence":true,"fp8_scores":true,"split_mma":true,"ring":4'
B64='"warp_specialized":true,"rows":64,"half_rows":true,"tma":true,"edge_fence":true'
B128='"warp_specialized":true,"rows":128,"tma":true,"edge_fence":true,"split_mma":true,"ring":4'
OPT=narrow_tail
alt() {  # alt PIPELINE ROUNDS: without, with $OPT, ROUNDS times
  v=""; for i in $(seq $2); do v="$v{$1,\"$OPT\":false},{$1,\"$OPT\":true},"; done
  echo "[${v%,}]"
}
sweep() {  # sweep SHAPE_INDEX DTYPE PIPELINE ROUNDS
  timeout 150 python3 $S $1 $2 "$(alt "$3" $4)" graph 2>&1 | sed "s/^/$2 shape index $1: /" \
    | sed -E "s/\{.*'$OPT': (True|False)\}/$OPT=\1/"
}
case $1 in
tail)
  { sweep 2 fp8 "$F64" 3; sweep 0 fp8 "$F64" 2; sweep 3 fp8 "$F128" 3; sweep 1 fp8 "$F64" 2; } \
    | tee $OUT/tail.txt ;;
tailbf16)
  { sweep 2 bf16 "$B64" 2; sweep 0 bf16 "$B64" 2; sweep 3 bf16 "$B128" 2; } | tee $OUT/tail-bf16.txt ;;
f16dots)  # the twenty-third session's step: float16 dots with V's copy
  # against tiles in q's dtype at D = 256 (32-row tiles) and D = 128 with
  # 16-row tiles
  C=benchmarks/results/h200-2026-12-03k/copy_probe.py
  V='[{}, {"fp8_f16_dot": true}, {}, {"fp8_f16_dot": true}]'
  for s in '[64,8192,8,4096,32,8,256]' '[128,8192,8,4096,16,8,128]'; do
    timeout 150 python3 $C "$s" fp8 "$V" 2>&1
  done | tee $OUT/f16dots.txt ;;
edge)  # fp8 shape 3 and its neighbours with 0, 1 or 2 edge tiles per item
  # (the first and last key tiles, copied by cp.async instead of TMA when
  # they hold keys outside the window); 3 rounds, alternating
  timeout 200 python3 benchmarks/results/h200-2026-12-03l/edge_probe.py \
    '[[256,2048,8,1024,32,8,128],[256,2048,8,1016,32,8,128],[256,2040,8,1016,32,8,128],[256,2040,8,1024,32,8,128]]' \
    fp8 3 2>&1 | tee $OUT/edge.txt ;;
fp8tests)  # the Triton kernel's fp8 GPU tests (float64 reference) with the
  # float16-dot policy for tiles of fewer than 64 rows
  timeout 330 python3 -m pytest -q -rf -p no:cacheprovider -m cuda \
    tests/test_fixed_history_attention.py -k "test_cuda_fp8 or \
    test_cuda_transposed_dots or test_cuda_split_path" > $OUT/tests-fp8.log 2>&1
  echo "tests rc $?"; tail -n 3 $OUT/tests-fp8.log | cut -c1-400 ;;
edgetma)  # edge_tma: the edge tiles by TMA, V's keys outside the window
  # zeroed by the converting warps (the launch's fp8 pipelines without and
  # with it, alternating); then the edge probe under the new policy
  OPT=edge_tma
  { sweep 2 fp8 "$F64" 3; sweep 0 fp8 "$F64" 2; sweep 3 fp8 "$F128" 3; sweep 1 fp8 "$F64" 2; } \
    | tee $OUT/edgetma.txt
  timeout 200 python3 benchmarks/results/h200-2026-12-03l/edge_probe.py \
    '[[256,2048,8,1024,32,8,128],[256,2048,8,1016,32,8,128],[256,2040,8,1016,32,8,128],[256,2040,8,1024,32,8,128]]' \
    fp8 2 2>&1 | tee $OUT/edge-after.txt ;;
gtests)  # the Gluon fp8-scores pipelines (with edge_tma) against the
  # reference fed q's e4m3 rows, NaN outside the windows too, and the
  # public API's Gluon tests (float64 reference)
  timeout 560 python3 -m pytest -q -rf -p no:cacheprovider -m cuda \
    tests/test_fixed_history_gluon.py tests/test_fixed_history_attention.py -k \
    "gluon_path or fp8_scores_through or (test_fp8_scores_match and (128rows-fp8-scores-plain or 128rows-fp8-scores-poison or issue-warp-half-rows or ring3-raw3))" \
    > $OUT/tests-gluon.log 2>&1
  echo "tests rc $?"; tail -n 3 $OUT/tests-gluon.log | cut -c1-400 ;;
five8)  # the five shapes, fp8, kernel only
  timeout 300 python3 benchmarks/bench_fixed_history_attention.py --kv-dtypes fp8 \
    --kernel-only --md $OUT/five-fp8.md > $OUT/bench-fp8.txt 2>&1
  echo "bench rc $?"; cut -c1-200 $OUT/five-fp8.md | grep "|" ;;
final)  # the landed policy (edge_tma at 64-row tiles only): the five
  # shapes, both caches, kernel only; the 128-row kernel with edge_tma and
  # the public API's Gluon tests
  timeout 300 python3 benchmarks/bench_fixed_history_attention.py --kernel-only \
    --md $OUT/five-final.md > $OUT/bench-final.txt 2>&1
  echo "bench rc $?"; cut -c1-200 $OUT/five-final.md | grep "|"
  timeout 400 python3 -m pytest -q -rf -p no:cacheprovider -m cuda \
    tests/test_fixed_history_gluon.py tests/test_fixed_history_attention.py -k \
    "gluon_path or fp8_scores_through or (test_fp8_scores_match and 128rows-fp8-scores-edge-tma)" \
    > $OUT/tests-final.log 2>&1
  echo "tests rc $?"; tail -n 3 $OUT/tests-final.log | cut -c1-400 ;;
tail2)  # narrow_tail again, now that the edge tiles come by TMA
  # (edge_tma) and the converting warps narrow the tail too (64 rows);
  # the launch's fp8 pipelines without and with it, alternating
  OPT=narrow_tail
  E64="$F64,\"edge_tma\":true"
  { sweep 2 fp8 "$E64" 3; sweep 0 fp8 "$E64" 2; sweep 3 fp8 "$F128" 3; } | tee $OUT/tail2.txt
  timeout 100 python3 benchmarks/results/h200-2026-12-03l/edge_probe.py \
    '[[256,2048,8,1024,32,8,128],[256,2040,8,1016,32,8,128]]' fp8 2 2>&1 \
    | tee $OUT/edge-tail2.txt ;;
tests4)  # the fp8-scores pipelines with narrow_tail (NaN outside the
  # windows too) and the public API's Gluon tests
  timeout 400 python3 -m pytest -q -rf -p no:cacheprovider -m cuda \
    tests/test_fixed_history_gluon.py tests/test_fixed_history_attention.py -k \
    "gluon_path or fp8_scores_through or (test_fp8_scores_match and (128rows-fp8-scores-plain or 128rows-fp8-scores-poison or issue-warp-half-rows))" \
    > $OUT/tests-tail.log 2>&1
  echo "tests rc $?"; tail -n 3 $OUT/tests-tail.log | cut -c1-400 ;;
shape4)  # NOT YET RUN (next lease): fp8 shape 4 (128 rows) with 128-key
  # tiles (half the per-tile waits and row reductions; ring 2 + 2 staged,
  # 148 KB), the second multiplying partition given more registers (the
  # loader fewer; sm_90 code under Triton 3.7.1: 16-48 bytes of stack
  # at 168-200 registers), and fp8 P V with today's pipeline; alternating
  # with the launch's pipeline
  V="[{$F128,\"narrow_tail\":true},{$F128,\"narrow_tail\":true,\"block_n\":128,\"ring\":2,\"raw_slots\":2},{$F128,\"narrow_tail\":true,\"block_n\":128,\"ring\":2,\"raw_slots\":2,\"mma_regs\":192,\"worker_regs\":112},{$F128,\"narrow_tail\":true},{$F128,\"fp8_pv\":true}]"
  timeout 200 python3 $S 3 fp8 "$V" graph 2>&1 | tee $OUT/shape4.txt ;;
esac
