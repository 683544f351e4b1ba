# Lease 3 (bare H200, Triton 3.7.1 in /tmp/t371): fp8_scores as committed
# (K's pages read at each copy again) against the reference, with the
# overlapped softmax and turns too; then timed in CUDA graphs (L2 emptied by
# reading) against the launch's fp8 choice at shapes 1-4.
export PYTHONPATH=/tmp/t371:src
timeout 240 python3 -m pytest -q -rf tests/test_fixed_history_gluon.py -k fp8_scores \
  > $OUT/fp8-scores-tests.log 2>&1; echo "tests rc $?"; tail -n 3 $OUT/fp8-scores-tests.log | cut -c1-400
export SPARK2_5_BENCH_FLUSH=clean
S=benchmarks/results/h200-2026-12-01j/sweep.py
W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true'
F="$W,\"fp8_scores\":true"
P4="$W,\"rows\":128,\"split_mma\":true"
{
for i in 0 1 2; do echo "== fp8 shape $((i+1)): launch, scores r3/3, scores+overlap r3/3, scores+overlap r4/1, launch"
  timeout 70 python3 $S $i fp8 "[$W},$F,\"ring\":3,\"raw_slots\":3},$F,\"ring\":3,\"raw_slots\":3,\"overlap\":true},$F,\"ring\":4,\"raw_slots\":1,\"overlap\":true},$W}]" graph 2>&1; done
echo "== fp8 shape 4: launch (r4), scores r4/2, scores+overlap r4/2, scores+pingpong r6/4, launch"
timeout 70 python3 $S 3 fp8 "[$P4,\"ring\":4},$P4,\"ring\":4,\"fp8_scores\":true},$P4,\"ring\":4,\"fp8_scores\":true,\"overlap\":true},$P4,\"ring\":6,\"raw_slots\":4,\"fp8_scores\":true,\"overlap\":true,\"pingpong\":true},$P4,\"ring\":4}]" graph 2>&1
} | tee $OUT/fp8-scores-sweep.txt | grep -E "==|us |rror"
