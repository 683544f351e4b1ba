# Branch fp8-tma, second lease: bf16 TMA loader back in a warpgroup (page ids still a tile ahead).
# Kernel tests by node id, then bf16 A/B against main, then the five shapes (kernel only).
export PYTHONPATH=/tmp/t371:src
timeout 260 python3 -m pytest -q -rf -x $(cat .gpu-vllm/ids-fp8tma.txt) > $OUT/tests2.log 2>&1; echo "tests rc $?"
tail -n 2 $OUT/tests2.log | cut -c1-300
export PYTHONPATH=/tmp/t371
S=benchmarks/results/h200-2026-12-01j/sweep.py
T='{"warp_specialized":true,"tma":true'
T4="$T,\"rows\":128,\"split_mma\":true,\"ring\":4}"
{
for r in 1 2 3; do
  echo "== round $r shape 4 bf16: main, then branch"
  (cd .gpu-vllm/main-tree && timeout 45 python3 $S 3 bf16 "[$T4,$T4]" 2>&1)
  timeout 45 python3 $S 3 bf16 "[$T4,$T4]" 2>&1
done
for i in 0 2; do
  echo "== shape $((i+1)) bf16: main, then branch, main, branch"
  (cd .gpu-vllm/main-tree && timeout 45 python3 $S $i bf16 "[$T}]" 2>&1)
  timeout 45 python3 $S $i bf16 "[$T}]" 2>&1
  (cd .gpu-vllm/main-tree && timeout 45 python3 $S $i bf16 "[$T}]" 2>&1)
  timeout 45 python3 $S $i bf16 "[$T}]" 2>&1
done
} | tee $OUT/bf16-ab2.txt | grep -E "==|us "
export PYTHONPATH=/tmp/t371:src
timeout 240 python3 benchmarks/bench_fixed_history_attention.py --kernel-only --md $OUT/five-shapes.md > $OUT/five-shapes.log 2>&1; echo "five rc $?"
grep -E "^\|" $OUT/five-shapes.log | cut -c1-250
