# Loader-only probe (bare H200, Triton 3.7.1 in /tmp/t371): shape 4 bf16/fp8, shape 1 fp8 (64 rows, 2/SM).
export PYTHONPATH=/tmp/t371:src
P=benchmarks/results/h200-2026-12-02/loader_probe.py
timeout 60 python3 $P 3 bf16 '[{"ring":4,"fence_in_mma":true},{"ring":4},{"ring":2},{"ring":6},{"ring":4,"fence_in_mma":true,"block_n":32},{"ring":6,"fence_in_mma":true}]' 2>&1 | tee $OUT/loader-shape4-bf16.txt
timeout 60 python3 $P 3 fp8 '[{"ring":4,"raw_slots":3},{"ring":4,"raw_slots":2},{"ring":2,"raw_slots":4},{"ring":4,"raw_slots":4},{"ring":4,"raw_slots":3,"fence_in_mma":true}]' 2>&1 | tee $OUT/loader-shape4-fp8.txt
for s in 0 2; do
timeout 60 python3 $P $s fp8 '[{"rows":64,"programs_per_sm":2},{"rows":64,"programs_per_sm":2,"fence_in_mma":true},{"rows":64,"programs_per_sm":1,"ring":4,"raw_slots":4},{"rows":64,"programs_per_sm":2,"worker_regs":128}]' 2>&1 | tee $OUT/loader-shape$((s+1))-fp8.txt
timeout 60 python3 $P $s bf16 '[{"rows":64,"programs_per_sm":2},{"rows":64,"programs_per_sm":2,"fence_in_mma":true}]' 2>&1 | tee $OUT/loader-shape$((s+1))-bf16.txt
done
