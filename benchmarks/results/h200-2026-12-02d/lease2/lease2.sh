# Lease 2 (bare H200, Triton 3.7.1 in /tmp/t371): swap_ab (keys as the MMAs'
# rows) - GPU tests, then timed in CUDA graphs against the launch's choices.
export PYTHONPATH=/tmp/t371:src
timeout 300 python3 -m pytest -q -rf -x $(cat .gpu-vllm/ids-swap.txt) > $OUT/swap-tests.log 2>&1; echo "tests rc $?"
tail -n 4 $OUT/swap-tests.log | cut -c1-400
export PYTHONPATH=/tmp/t371
S=benchmarks/results/h200-2026-12-01j/sweep.py
W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true'
X="$W,\"swap_ab\":true,\"rows\":32"
B='{"warp_specialized":true,"tma":true'
Y="$B,\"swap_ab\":true,\"rows\":32"
{
for i in 0 2; do
  echo "== fp8 shape $((i+1)): launch, swap, swap ring1+raw4, swap 1/SM ring2+raw6, swap 1/SM ring3+raw4, launch, swap"
  timeout 90 python3 $S $i fp8 "[$W},$X},$X,\"ring\":1,\"raw_slots\":4},$X,\"programs_per_sm\":1,\"maxnreg\":168,\"raw_slots\":6},$X,\"programs_per_sm\":1,\"maxnreg\":168,\"ring\":3,\"raw_slots\":4},$W},$X}]" graph 2>&1
  echo "== bf16 shape $((i+1)): launch, swap, swap ring3, launch, swap"
  timeout 60 python3 $S $i bf16 "[$B},$Y},$Y,\"ring\":3},$B},$Y}]" graph 2>&1
done
echo "== shape 5 (D 64, 8 rows): swap 8 rows cp.async, swap ring 4 raw 4, 16 rows; bf16 tma"
timeout 60 python3 $S 4 fp8 '[{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"swap_ab":true,"rows":8},{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"swap_ab":true,"rows":8,"ring":4,"raw_slots":4},{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"swap_ab":true,"rows":16}]' graph 2>&1
timeout 60 python3 $S 4 bf16 '[{"warp_specialized":true,"swap_ab":true,"rows":8,"tma":true},{"warp_specialized":true,"swap_ab":true,"rows":8,"tma":true,"ring":4},{"warp_specialized":true,"swap_ab":true,"rows":8}]' graph 2>&1
} | tee $OUT/swap-sweep.txt | grep -E "==|us |error"
