# bf16 TMA loader, kernel in a CUDA graph: main (page ids loaded per copy), late (page ids of a tile loaded
# after its buffer's wait), branch (page ids loaded a tile ahead). Shapes 1, 3, 4; three alternations.
export PYTHONPATH=/tmp/t371:src
B=benchmarks/bench_fixed_history_attention.py
for r in 1 2 3; do
  for t in main late branch; do
    d=.gpu-vllm/$t-tree; [ $t = branch ] && d=.
    echo "== round $r $t"
    (cd $d && timeout 60 python3 $B --kernel-only --kv-dtypes bf16 --shapes 0,2,3 2>&1 | grep -E "^== shape|kernel .*graph" | sed -E 's/, plan.*floor/ floor/')
  done
done | tee $OUT/ab3.txt
