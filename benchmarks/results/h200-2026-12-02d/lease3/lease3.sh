# Lease 3 (bare H200, Triton 3.7.1 in /tmp/t371): split_kv (fp8 TMA loader
# handing over K and V separately) - GPU tests, then timed in CUDA graphs
# against the launch's choices at fp8 shapes 1, 3, 4.
export PYTHONPATH=/tmp/t371:src
timeout 240 python3 -m pytest -q -rf -x $(cat .gpu-vllm/ids-splitkv.txt) > $OUT/splitkv-tests.log 2>&1; echo "tests rc $?"
tail -n 4 $OUT/splitkv-tests.log | cut -c1-400
export PYTHONPATH=/tmp/t371
S=benchmarks/results/h200-2026-12-01j/sweep.py
W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true'
K="$W,\"split_kv\":true"
P4="$W,\"rows\":128,\"split_mma\":true"
K4="$P4,\"split_kv\":true"
{
for i in 0 2; do
  echo "== fp8 shape $((i+1)): launch, split_kv ring1+raw4, ring2+raw2, ring1+raw3, launch, ring1+raw4"
  timeout 90 python3 $S $i fp8 "[$W},$K,\"ring\":1,\"raw_slots\":4},$K},$K,\"ring\":1,\"raw_slots\":3},$W},$K,\"ring\":1,\"raw_slots\":4}]" graph 2>&1
done
echo "== fp8 shape 4: launch (ring 4), split_kv ring2+raw6, ring4+raw4, ring3+raw5, launch, ring2+raw6"
timeout 90 python3 $S 3 fp8 "[$P4,\"ring\":4},$K4,\"ring\":2,\"raw_slots\":6},$K4,\"ring\":4,\"raw_slots\":4},$K4,\"ring\":3,\"raw_slots\":5},$P4,\"ring\":4},$K4,\"ring\":2,\"raw_slots\":6}]" graph 2>&1
} | tee $OUT/splitkv-sweep.txt | grep -E "==|us |error"
