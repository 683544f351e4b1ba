# For the next lease (written 2026-12-02, not yet run). First the GPU test
# of wait_stats; then: is the bf16 shape-4
# kernel 82 us (Nsight Compute) or 88-90 us (do_bench)? The benchmark at
# shapes 1 and 4, kernel only, with do_bench's zeroing flush and with
# --flush clean, alternating, each in its own process; then the same kernel
# under Nsight Compute with the clocks left alone and with them locked to
# base. Bare H200 with Triton 3.7.1 in /tmp/t371 (or the vLLM env: drop
# the PYTHONPATH line).
export PYTHONPATH=/tmp/t371:src
# The wait statistics' GPU test first (written in the fourteenth session).
timeout 120 python3 -m pytest -q -rf tests/test_fixed_history_gluon.py -k wait_statistics \
  > $OUT/wait-tests.log 2>&1; echo "wait tests rc $?"; tail -n 2 $OUT/wait-tests.log
for f in zero clean zero clean; do
  timeout 140 python3 benchmarks/bench_fixed_history_attention.py --kernel-only \
    --shapes 0,3 --flush $f --md $OUT/flush-$f.md >> $OUT/flush.log 2>&1
  echo "flush $f rc $?"; grep -E "^\| \(" $OUT/flush-$f.md | cut -d'|' -f2-5,8-9
done
S=benchmarks/results/h200-2026-12-01j/sweep.py
T='[{"warp_specialized":true,"tma":true,"rows":128,"split_mma":true,"ring":4}]'
SPARK2_5_BENCH_FLUSH=clean timeout 60 python3 $S 3 bf16 "$T" graph 2>&1 | tail -1
timeout 60 python3 $S 3 bf16 "$T" graph 2>&1 | tail -1
for cc in none base; do
  timeout 80 ncu --clock-control $cc -k regex:fixed_history_ws_kernel --launch-skip 3 \
    --launch-count 1 --section SpeedOfLight python3 $S 3 bf16 "$T" > $OUT/ncu-$cc.txt 2>&1
  grep -E "SM Frequency|Duration" $OUT/ncu-$cc.txt
done
# Then who waits for whom (wait_probe.py: clock64 around the barrier
# waits) at the launch's choices: fp8 shapes 1, 3, 4 and bf16 shape 4.
P=benchmarks/results/h200-2026-12-02d/wait_probe.py
W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true'
for i in 0 2; do timeout 60 python3 $P $i fp8 "[$W}]"; done
timeout 60 python3 $P 3 fp8 "[$W,\"rows\":128,\"split_mma\":true,\"ring\":4}]"
timeout 60 python3 $P 3 bf16 '[{"warp_specialized":true,"tma":true,"rows":128,"split_mma":true,"ring":4}]'
