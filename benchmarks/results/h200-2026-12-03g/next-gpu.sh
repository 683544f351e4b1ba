# For the next lease (written 2026-12-03, twentieth session; not yet run).
# Bare H200 with Triton 3.7.1 in /tmp/t371. Lease f showed that at fp8
# shape 3 the multiplying warps' chain per tile sets the pace (a fence
# taken out of it: 2% faster; a barrier wait added by k_ring: 7% slower).
# Step "tests": the early_scores, fp8 P V and fence-every-tile kernels against
# the float64 reference (the fp8 P V kernels' options were fixed after
# lease f: the launch's pipeline carries issue_warp, which fp8_pv refuses).
# Step "sweep": early_scores (each tile's P V with the next tile's S right
# behind it; at 64 rows with the other warps at 88 registers, so that the
# multiplying ones do not spill) and the overlapped softmax with the
# issuing warp (24 bytes of stack under 3.7.1 at 112 worker registers,
# none at 88) against the launch, at fp8 shapes 3, 1 and 4 and bf16
# shapes 3 and 4.
export PYTHONPATH=/tmp/t371:src
case $1 in
tests)
  timeout 330 python3 -m pytest -q -rf tests/test_fixed_history_gluon.py \
    -k "early-scores or fp8-pv or fence-every-tile" > $OUT/tests.log 2>&1
  echo "tests rc $?"; tail -n 3 $OUT/tests.log | cut -c1-400 ;;
sweep)
  S=benchmarks/results/h200-2026-12-01j/sweep.py
  F8='{"warp_specialized":true,"f16_dots":true,"rows":64,"narrow_convert":true,"tma":true,"edge_fence":true,"fp8_scores":true,"ring":3,"raw_slots":3,"issue_warp":true'
  F8B='{"warp_specialized":true,"f16_dots":true,"rows":128,"narrow_convert":true,"tma":true,"edge_fence":true,"fp8_scores":true,"split_mma":true,"ring":4'
  B16='{"warp_specialized":true,"rows":64,"tma":true,"edge_fence":true'
  B16B='{"warp_specialized":true,"rows":128,"tma":true,"edge_fence":true,"split_mma":true,"ring":4'
  E=',"early_scores":true}'
  E88=',"early_scores":true,"worker_regs":88}'
  W88=',"worker_regs":88}'
  O88=',"overlap":true,"worker_regs":88}'
  {
  for i in 2 0; do
    echo "== fp8 shape $((i+1)): launch, early 88, launch 88, early 112, overlap 88, launch, early 88"
    timeout 120 python3 $S $i fp8 "[$F8},$F8$E88,$F8$W88,$F8$E,$F8$O88,$F8},$F8$E88]" graph 2>&1
  done
  echo "== fp8 shape 4: launch, early, launch, early"
  timeout 100 python3 $S 3 fp8 "[$F8B},$F8B$E,$F8B},$F8B$E]" graph 2>&1
  echo "== bf16 shape 3: launch, early, launch, early"
  timeout 100 python3 $S 2 bf16 "[$B16},$B16$E,$B16},$B16$E]" graph 2>&1
  echo "== bf16 shape 4: launch, early, launch, early"
  timeout 100 python3 $S 3 bf16 "[$B16B},$B16B$E,$B16B},$B16B$E]" graph 2>&1
  } > $OUT/sweep.txt 2>&1
  grep -E "==|us |error" $OUT/sweep.txt | cut -c1-40 ;;
esac
