# For the next lease (written 2026-12-02, eighteenth session; not yet run).
# Bare H200 with Triton 3.7.1 in /tmp/t371. The span probe (lease-e) put
# ~32 us (fp8) and ~24 us (bf16) of shape 3's time outside the per-tile
# cost: an item's start. Step "tests": the wait-statistics GPU test (its
# multiplying rows now also hold the cycles between key loops) and the
# Gluon kernels with prefetch_q (now a distance: the next pass's q asked of
# the L2 that many tiles before a pass ends; at the first tile, as lease-c
# timed it, the key tiles streaming through the L2 may evict it first).
# Step "boundary": where an item's start goes, at shape 3 and at full-tile
# spans of 16 and 32 tiles, with 128, 256 and 512 requests (4, 8 and 16
# items per program), both caches. Step "sweep": the launch's pipelines
# against prefetch_q 1, 2 and 4 at fp8 shapes 3, 1, 2 and bf16 shape 3.
export PYTHONPATH=/tmp/t371:src
case $1 in
tests)
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
  timeout 200 python3 -m pytest -q -rf tests/test_fixed_history_gluon.py \
    -k "wait_statistics or prefetch" > $OUT/tests-stats.log 2>&1
  echo "stats/prefetch tests rc $?"; tail -n 3 $OUT/tests-stats.log | cut -c1-400 ;;
sweep)
  S=benchmarks/results/h200-2026-12-01j/sweep.py
  W='{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true,"fp8_scores":true,"ring":3,"raw_slots":3'
  A="$W}"; P1="$W,\"prefetch_q\":1}"; P2="$W,\"prefetch_q\":2}"; P4="$W,\"prefetch_q\":4}"
  G='{"warp_specialized":true,"tma":true}'
  H='{"warp_specialized":true,"tma":true,"prefetch_q":2}'
  {
  for i in 2 0 1; do
    echo "== fp8 shape $((i+1)): launch, prefetch_q 1, 2, 4, launch, prefetch_q 2"
    timeout 80 python3 $S $i fp8 "[$A,$P1,$P2,$P4,$A,$P2]" graph 2>&1
  done
  echo "== bf16 shape 3: launch, prefetch_q 2, launch, prefetch_q 2"
  timeout 80 python3 $S 2 bf16 "[$G,$H,$G,$H]" graph 2>&1
  } > $OUT/sweep.txt 2>&1
  grep -E "==|us |error" $OUT/sweep.txt | cut -c1-60 ;;
boundary)
  P=benchmarks/results/h200-2026-12-02h/boundary_probe.py
  for kv in fp8 bf16; do
    timeout 150 python3 $P $kv 256,2048,1024 256,2040,1016 256,2040,2040 \
      128,2040,1016 512,2040,1016 2>&1
  done > $OUT/boundary.txt
  cut -c1-170 $OUT/boundary.txt ;;
esac
