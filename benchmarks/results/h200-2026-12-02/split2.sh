export PYTHONPATH=/tmp/t371:src
S='"warp_specialized":true,"rows":128,"split_mma":true,"fence_in_mma":true'
V="[{\"warp_specialized\":true,\"rows\":128,\"fence_in_mma\":true,\"ring\":4},{$S,\"ring\":4},{$S,\"ring\":3},{$S,\"ring\":5},{$S,\"ring\":4,\"raw_slots\":3},{$S,\"ring\":4,\"worker_regs\":96},{$S,\"ring\":8,\"block_n\":32},{$S,\"ring\":6,\"block_n\":32},{$S,\"ring\":3,\"overlap\":true,\"raw_slots\":3},{$S,\"ring\":5,\"overlap\":true,\"pingpong\":true,\"raw_slots\":4},{\"warp_specialized\":true,\"rows\":128,\"fence_in_mma\":true,\"ring\":4}]"
timeout 100 python3 benchmarks/results/h200-2026-12-01j/sweep.py 3 bf16 "$V" 2>&1 | tee $OUT/split2-bf16.txt
V8="[{\"warp_specialized\":true,\"rows\":128},{$S,\"ring\":4},{$S,\"ring\":3},{$S,\"ring\":4,\"overlap\":true,\"pingpong\":true,\"raw_slots\":4},{\"warp_specialized\":true,\"rows\":128,\"split_mma\":true,\"ring\":3},{\"warp_specialized\":true,\"rows\":128,\"split_mma\":true,\"ring\":4,\"raw_slots\":3},{\"warp_specialized\":true,\"rows\":128}]"
timeout 100 python3 benchmarks/results/h200-2026-12-01j/sweep.py 3 fp8 "$V8" 2>&1 | tee $OUT/split2-fp8.txt
