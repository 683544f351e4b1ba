# Leases of the twenty-seventh session (2026-12-04), bare H200s with vLLM
# 0.32.0's Triton 3.7.1 wheel in /tmp/t371. fp8 shape 4 (32 requests x 4
# KV heads x 4096 keys, 128-row tiles, one program per SM).
#   bash next-gpu.sh STEP   (from the repository root; output in $OUT)
# Steps in the order they ran: loop (lease 1); turns (lease 2, the working
# tree holding turns-lazy.patch: h200-2026-12-03n's turns.patch and the
# lazy maxima, lazy_max); parts, slots, nosoftmax (lease 3, the working
# tree holding leave-out.patch); issue, issue2 (lease 4, the working tree
# holding split-issue-warp.patch); lead (lease 5, lead-warp.patch). The
# patches apply to the module as of
# 560138a; none is in the product.
export PYTHONPATH=/tmp/t371:src PYTHONUNBUFFERED=1
D=benchmarks/results/h200-2026-12-04a
S=benchmarks/results/h200-2026-12-01j/sweep.py
F128='"warp_specialized":true,"f16_dots":true,"rows":128,"narrow_convert":true,"tma":true,"edge_fence":true,"fp8_scores":true,"split_mma":true,"narrow_tail":true,"block_n":128,"ring":2,"raw_slots":2'
R='"mma_regs":208,"worker_regs":88'
case $1 in
loop)  # the key loop alone (loop_probe.py): the softmax as the product's,
  # with the row sums by the tensor cores, with a quarter or half of the
  # exponentials on the FMA pipe, the partitions taking turns, q from
  # registers (S = Q K^T with A in registers); alternating;
  # then program 0's timeline for four of them
  V1="{},{\"sums\":true},{\"poly\":4},{\"sums\":true,\"poly\":4},{\"turns\":true,$R},{\"turns\":true,\"sums\":true,$R},{\"poly\":2,$R},{$R},{\"qreg\":true,$R},{\"qreg\":true,\"sums\":true,$R}"
  V="[$V1,$V1]"
  timeout 300 python3 $D/loop_probe.py 3 fp8 "$V" graph 2>&1 | tee $OUT/loop.txt
  T="[{},{\"sums\":true},{\"turns\":true,$R},{\"turns\":true,\"sums\":true,$R}]"
  timeout 200 python3 $D/loop_probe.py 3 fp8 "$T" graph trace 2>&1 | grep -v "key loop" | tee $OUT/timeline.txt ;;
turns)  # the partitions taking turns: in the probe with the weights held
  # until P V completed (keep_p), and the lazy maxima (lazy); then in the
  # product (the working tree: turns.patch of h200-2026-12-03n and lazy_max)
  # with rings of 2 and 3 key tiles, and lazy_max, against the launch's
  # pipeline, alternating
  K1="{$R},{\"turns\":true,$R},{\"turns\":true,\"keep_p\":true,$R},{\"lazy\":true,$R},{\"turns\":true,\"keep_p\":true,\"lazy\":true,$R}"
  K="[$K1,$K1]"
  timeout 150 python3 $D/loop_probe.py 3 fp8 "$K" graph 2>&1 | tee $OUT/keep.txt
  L="[{\"turns\":true,\"keep_p\":true,$R},{\"turns\":true,\"keep_p\":true,\"lazy\":true,$R}]"
  timeout 100 python3 $D/loop_probe.py 3 fp8 "$L" graph trace 2>&1 | grep -v "key loop" | tee $OUT/timeline-lazy.txt
  T="$F128,\"narrow_tail\":false,\"pingpong\":true,$R"
  Z="$F128,\"lazy_max\":true"
  timeout 400 python3 $S 3 fp8 "[{$F128},{$T,\"ring\":3},{$T,\"ring\":3,\"raw_slots\":3},{$T},{$Z},{$Z,$R},{$T,\"ring\":3,\"lazy_max\":true},{$F128},{$T,\"ring\":3},{$Z},{$Z,$R},{$F128,\"ring\":3}]" graph 2>&1 | cut -c1-250 | tee $OUT/shape4-turns.txt ;;
parts)  # the launch's pipeline at fp8 shape 4 with parts left out
  # (leave-out.patch, applied to the working tree for this step; the
  # environment chooses): none; V not converted (PROBE_SKIP_CVT); V neither
  # staged nor converted (+ PROBE_SKIP_RAW: only K's copies into the ring);
  # no softmax (PROBE_NO_SOFTMAX: P = S in float16); no softmax and only
  # K's copies; two rounds
  for round in 1 2; do
    for e in "" "PROBE_SKIP_CVT=1" "PROBE_SKIP_CVT=1 PROBE_SKIP_RAW=1" \
        "PROBE_NO_SOFTMAX=1" "PROBE_NO_SOFTMAX=1 PROBE_SKIP_CVT=1 PROBE_SKIP_RAW=1"; do
      env $e timeout 100 python3 $S 3 fp8 "[{$F128}]" graph 2>&1 | cut -c1-30 | sed "s/^/[$e] /"
    done
  done 2>&1 | tee $OUT/parts-whole.txt ;;
slots)  # (run as one command after parts, leave-out.patch still applied)
  # the launch's pipeline with rings of 2-3 and 2-4 staged V tiles, in this
  # order: 2+2, 2+3, 2+4, 3+3, 3+2, 2+2, 2+3, 2+4, 3+3; then without V's
  # conversion 2+4 and 3+3 ([skip cvt])
  F="$F128,\"ring\":2,\"raw_slots\":2"  # (the JSON takes the last value)
  timeout 300 python3 $S 3 fp8 "[{$F},{$F,\"raw_slots\":3},{$F,\"raw_slots\":4},{$F,\"ring\":3,\"raw_slots\":3},{$F,\"ring\":3},{$F},{$F,\"raw_slots\":3},{$F,\"raw_slots\":4},{$F,\"ring\":3,\"raw_slots\":3}]" graph 2>&1 | cut -c1-40 | tee $OUT/slots.txt
  PROBE_SKIP_CVT=1 timeout 100 python3 $S 3 fp8 "[{$F,\"raw_slots\":4},{$F,\"ring\":3,\"raw_slots\":3}]" graph 2>&1 | cut -c1-40 | sed "s/^/[skip cvt] /" | tee -a $OUT/slots.txt ;;
nosoftmax)  # (likewise) no softmax, with the whole loader, with K's copies
  # only, and with V staged but not converted; rings of 2 + 2, 3 + 2, 3 + 3
  # and 4 + 2 (the last beyond the shared memory)
  V="[{$F128},{$F128,\"ring\":3},{$F128,\"ring\":3,\"raw_slots\":3},{$F128,\"ring\":4}]"
  for e in "PROBE_NO_SOFTMAX=1" "PROBE_NO_SOFTMAX=1 PROBE_SKIP_CVT=1 PROBE_SKIP_RAW=1" "PROBE_NO_SOFTMAX=1 PROBE_SKIP_CVT=1"; do
    env $e timeout 100 python3 $S 3 fp8 "$V" graph 2>&1 | cut -c1-80 | sed "s/^/[$e] /"
  done | tee $OUT/nosoftmax-rings.txt ;;
issue)  # issue_warp with split_mma (the working tree: one warp issuing the
  # copies, four converting V, beside the two multiplying partitions; 13
  # warps, so maxnreg 152; edge_tma, as the issuing warp's cp.async of a
  # 128-key edge tile spills), against the launch's pipeline, alternating
  I="$F128,\"issue_warp\":true,\"edge_tma\":true,\"convert_warps\":4,\"maxnreg\":152"
  timeout 400 python3 $S 3 fp8 "[{$F128},{$I,\"mma_regs\":200,\"worker_regs\":88,\"issue_regs\":96},{$I,\"mma_regs\":184,\"worker_regs\":88,\"issue_regs\":64},{$I,\"mma_regs\":200,\"worker_regs\":88,\"issue_regs\":96,\"ring\":3},{$I,\"mma_regs\":200,\"worker_regs\":88,\"issue_regs\":96,\"raw_slots\":3},{$F128,\"edge_tma\":true},{$F128},{$I,\"mma_regs\":200,\"worker_regs\":88,\"issue_regs\":96},{$I,\"mma_regs\":184,\"worker_regs\":88,\"issue_regs\":64},{$I,\"mma_regs\":200,\"worker_regs\":88,\"issue_regs\":96,\"ring\":3}]" graph 2>&1 | cut -c1-40 | tee $OUT/issue.txt ;;
issue2)  # (run as two commands after issue) the failures' cause
  # (issue-err.txt: 13 warps take 16 warps' threads, which 152 registers
  # do not allow; two converting warps at 152 and 184 registers), then
  # four converting warps at 128 registers and three at 168 against the
  # launch's pipeline (issue2.txt)
  I="$F128,\"issue_warp\":true,\"edge_tma\":true,\"convert_warps\":4,\"mma_regs\":200,\"worker_regs\":88,\"issue_regs\":96"
  timeout 100 python3 $S 3 fp8 "[{$I,\"maxnreg\":152},{$I,\"maxnreg\":152,\"convert_warps\":2},{$I,\"maxnreg\":184,\"convert_warps\":2}]" graph 2>&1 | cut -c1-300 | tee $OUT/issue-err.txt
  J="$F128,\"issue_warp\":true,\"edge_tma\":true"
  timeout 200 python3 $S 3 fp8 "[{$F128},{$J,\"maxnreg\":128,\"convert_warps\":4,\"mma_regs\":200,\"worker_regs\":88,\"issue_regs\":64},{$J,\"maxnreg\":128,\"convert_warps\":4,\"mma_regs\":184,\"worker_regs\":96,\"issue_regs\":64},{$J,\"maxnreg\":168,\"convert_warps\":3,\"mma_regs\":200,\"worker_regs\":88,\"issue_regs\":64},{$F128}]" graph 2>&1 | cut -c1-200 | tee $OUT/issue2.txt ;;
lead)  # (lease 5, the working tree holding lead-warp.patch) the fp8
  # loader's TMA copies of interior tiles issued by its first warp alone,
  # the other three skipping their address arithmetic (PROBE_LEAD=1; the
  # branch is not uniform to ptxas: 239 R2UR instead of 99, 144 bytes of
  # stack instead of 48), against the launch's pipeline, alternating
  for round in 1 2; do for e in "" "PROBE_LEAD=1"; do
    env $e timeout 60 python3 $S 3 fp8 "[{$F128}]" graph 2>&1 | cut -c1-30 | sed "s/^/[$e] /"
  done; done 2>&1 | tee $OUT/lead.txt ;;
esac
