# Branch fp8-tma: timing (after fp8tma-tests.sh passed). bf16: the branch's TMA loader (one warp, page ids a
# tile ahead) against main's (a warpgroup) from .gpu-vllm/main-tree (git archive main), alternating;
# fp8: TMA-staged raw tiles against the cp.async fp8 loader. Then the loader alone.
export PYTHONPATH=/tmp/t371
S=benchmarks/results/h200-2026-12-01j/sweep.py
T='{"warp_specialized":true,"tma":true'
T4="$T,\"rows\":128,\"split_mma\":true,\"ring\":4}"
for r in 1 2; do
  echo "== round $r shape 4 bf16: main, then branch"
  (cd .gpu-vllm/main-tree && timeout 45 python3 $S 3 bf16 "[$T4,$T4]" 2>&1)
  timeout 45 python3 $S 3 bf16 "[$T4,$T4]" 2>&1
done | tee $OUT/bf16-shape4-ab.txt
for i in 0 2; do
  echo "== shape $((i+1)) bf16: main, then branch"
  (cd .gpu-vllm/main-tree && timeout 45 python3 $S $i bf16 "[$T}]" 2>&1)
  timeout 45 python3 $S $i bf16 "[$T}]" 2>&1
done | tee $OUT/bf16-shape13-ab.txt
W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true'
P4="$W,\"rows\":128,\"split_mma\":true,\"ring\":4"
timeout 50 python3 $S 3 fp8 "[$P4},$P4,\"tma\":true},$P4,\"tma\":true,\"raw_slots\":3},$P4}]" 2>&1 | tee $OUT/fp8tma-shape4.txt
for i in 0 2; do timeout 60 python3 $S $i fp8 "[$W},$W,\"tma\":true},$W,\"tma\":true,\"ring\":3},$W}]" 2>&1 | tee $OUT/fp8tma-shape$((i+1)).txt; done
L=benchmarks/results/h200-2026-12-02/loader_probe.py
timeout 50 python3 $L 3 bf16 '[{"ring":4,"tma":true}]' 2>&1 | tee $OUT/loader-bf16-shape4.txt
(cd .gpu-vllm/main-tree && timeout 50 python3 $L 3 bf16 '[{"ring":4,"tma":true}]' 2>&1) | tee -a $OUT/loader-bf16-shape4.txt
timeout 50 python3 $L 3 fp8 '[{"ring":4,"narrow_convert":true,"f16_dots":true},{"ring":4,"narrow_convert":true,"f16_dots":true,"tma":true}]' 2>&1 | tee $OUT/loader-fp8tma-shape4.txt
timeout 50 python3 $L 0 fp8 '[{"rows":64,"programs_per_sm":2,"narrow_convert":true,"f16_dots":true},{"rows":64,"programs_per_sm":2,"narrow_convert":true,"f16_dots":true,"tma":true}]' 2>&1 | tee $OUT/loader-fp8tma-shape1.txt
