# Lease 2 of the fifteenth session (bare H200, Triton 3.7.1 in /tmp/t371):
# fp8_scores against the reference once each row of q is scaled by a power
# of two (the first version's scaling by 448 / max made ties round apart
# from the reference's) and with K's pages loaded a tile ahead, timed
# again (CUDA graphs, the L2 emptied by reading); then the five-shape table (bf16 and fp8, the
# launch's policy, peers included) with the L2 emptied by reading
# (the benchmark's new default flush).
export PYTHONPATH=/tmp/t371:src
timeout 200 python3 -m pytest -q -rf tests/test_fixed_history_gluon.py -k fp8_scores \
  > $OUT/fp8-scores-tests.log 2>&1; echo "tests rc $?"; tail -n 3 $OUT/fp8-scores-tests.log | cut -c1-400
S=benchmarks/results/h200-2026-12-01j/sweep.py
W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true'
F="$W,\"fp8_scores\":true"
P4="$W,\"rows\":128,\"split_mma\":true,\"ring\":4"
{
for i in 0 1 2; do echo "== fp8 shape $((i+1)): launch, scores r3/3, r3/4, launch"
  SPARK2_5_BENCH_FLUSH=clean timeout 60 python3 $S $i fp8 "[$W},$F,\"ring\":3,\"raw_slots\":3},$F,\"ring\":3,\"raw_slots\":4},$W}]" graph 2>&1; done
echo "== fp8 shape 4: launch (r4), scores r4/2, launch"
SPARK2_5_BENCH_FLUSH=clean timeout 60 python3 $S 3 fp8 "[$P4},$P4,\"fp8_scores\":true},$P4}]" graph 2>&1
} | tee $OUT/fp8-scores-sweep.txt | grep -E "==|us |rror"
timeout 360 python3 benchmarks/bench_fixed_history_attention.py --md $OUT/five-shapes.md \
  > $OUT/five-shapes.log 2>&1; echo "table rc $?"; tail -n 5 $OUT/five-shapes.log | cut -c1-300
grep -E "^\| \(" $OUT/five-shapes.md | cut -d'|' -f2-13
