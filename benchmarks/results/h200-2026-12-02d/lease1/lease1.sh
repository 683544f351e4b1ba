# Lease 1 (bare H200, Triton 3.7.1 in /tmp/t371): deeper fp8 staging (tests,
# then timed in CUDA graphs against the launch's choice), the multiplying side
# alone and the loader alone (corrected registers) at shapes 1, 3, 4.
export PYTHONPATH=/tmp/t371:src
timeout 240 python3 -m pytest -q -rf -x $(cat .gpu-vllm/ids-depth.txt) > $OUT/depth-tests.log 2>&1; echo "tests rc $?"
tail -n 2 $OUT/depth-tests.log | cut -c1-300
export PYTHONPATH=/tmp/t371
S=benchmarks/results/h200-2026-12-01j/sweep.py
W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true'
D="$W,\"ring\":1,\"raw_slots\":4}"
P4="$W,\"rows\":128,\"split_mma\":true"
{
for i in 0 2; do echo "== fp8 shape $((i+1)): launch, ring1+raw4, launch, ring1+raw4"
  timeout 60 python3 $S $i fp8 "[$W},$D,$W},$D]" graph 2>&1; done
echo "== fp8 shape 4: launch (ring 4), ring2+raw6, launch, ring2+raw6"
timeout 60 python3 $S 3 fp8 "[$P4,\"ring\":4},$P4,\"ring\":2,\"raw_slots\":6},$P4,\"ring\":4},$P4,\"ring\":2,\"raw_slots\":6}]" graph 2>&1
} | tee $OUT/depth-sweep.txt | grep -E "==|us "
M=benchmarks/results/h200-2026-12-02c/mma_probe.py
{
for i in 0 2; do
  echo "== shape $((i+1)) mma side alone (64 rows, ring 2, 2/SM)"
  timeout 50 python3 $M $i bf16 '[{"rows":64,"split_mma":false,"ring":2}]' graph 2>&1
  timeout 50 python3 $M $i fp8 '[{"rows":64,"split_mma":false,"ring":2,"f16_dots":true}]' graph 2>&1
done
echo "== shape 4 mma side alone (128 rows split, ring 4)"
timeout 50 python3 $M 3 bf16 '[{"ring":4}]' graph 2>&1
timeout 50 python3 $M 3 fp8 '[{"ring":4,"f16_dots":true}]' graph 2>&1
} | tee $OUT/mma-probe.txt | grep -E "==|us|error"
L=benchmarks/results/h200-2026-12-02/loader_probe.py
{
for i in 0 2; do
  echo "== shape $((i+1)) loader alone (64 rows, 2/SM)"
  timeout 50 python3 $L $i bf16 '[{"rows":64,"programs_per_sm":2,"tma":true}]' graph 2>&1
  timeout 50 python3 $L $i fp8 '[{"rows":64,"programs_per_sm":2,"narrow_convert":true,"f16_dots":true,"tma":true},{"rows":64,"programs_per_sm":2,"narrow_convert":true,"f16_dots":true,"tma":true,"ring":1,"raw_slots":4}]' graph 2>&1
done
echo "== shape 4 loader alone"
timeout 50 python3 $L 3 fp8 '[{"ring":4,"narrow_convert":true,"f16_dots":true,"tma":true},{"ring":2,"raw_slots":6,"narrow_convert":true,"f16_dots":true,"tma":true}]' graph 2>&1
} | tee $OUT/loader-probe.txt | grep -E "==|us|error"
