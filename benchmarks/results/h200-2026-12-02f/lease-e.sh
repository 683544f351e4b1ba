# Ran the code of commit 03c055f (prefetch_q), reverted after this lease:
# correct (83 GPU tests passed) but 2-7% slower at every shape timed
# (lease-e/sweep.txt; 24-88 bytes spilled per thread under Triton 3.7).
# Bare H200 with Triton 3.7.1 in /tmp/t371 (2026-12-02, sixteenth session):
# prefetch_q (the next pass's q and the next item's request data loaded
# before a pass's output is stored) - its GPU tests, then timed in CUDA
# graphs against the launch's pipelines: fp8 (fp8 scores) and bf16 at
# shapes 3 (7.8 items per program) and 1, 4.
export PYTHONPATH=/tmp/t371:src
timeout 110 python3 -m pytest -q -rf -x tests/test_fixed_history_gluon.py -k "prefetch" > $OUT/tests.log 2>&1; echo "tests rc $?"
tail -n 3 $OUT/tests.log | cut -c1-400
S=benchmarks/results/h200-2026-12-01j/sweep.py
F='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true,"fp8_scores":true,"ring":3,"raw_slots":3'
B='{"warp_specialized":true,"tma":true'
P=',"prefetch_q":true}'
{
echo "== fp8 shape 3 (fp8 scores): launch, prefetch, launch, prefetch"
timeout 40 python3 $S 2 fp8 "[$F},$F$P,$F},$F$P]" graph 2>&1
echo "== bf16 shape 3: launch, prefetch, launch, prefetch"
timeout 40 python3 $S 2 bf16 "[$B},$B$P,$B},$B$P]" graph 2>&1
echo "== fp8 shape 1 (fp8 scores): launch, prefetch"
timeout 30 python3 $S 0 fp8 "[$F},$F$P]" graph 2>&1
echo "== fp8 shape 4 (fp8 scores, 128 rows): launch, prefetch"
R='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true,"fp8_scores":true,"rows":128,"split_mma":true,"ring":4'
timeout 30 python3 $S 3 fp8 "[$R},$R$P]" graph 2>&1
} > $OUT/sweep.txt 2>&1
grep -E "==|us |error" $OUT/sweep.txt | cut -c1-100
