# For the next lease (written 2026-12-02, eighteenth session; not yet run).
# Bare H200 with Triton 3.7.1 in /tmp/t371. The span probe (lease-e) put
# ~32 us (fp8) and ~24 us (bf16) of shape 3's time outside the per-tile
# cost: an item's start. Step "tests": the wait-statistics GPU test (its
# multiplying rows now also hold the cycles between key loops). Step
# "boundary": where an item's start goes, at shape 3 and at full-tile
# spans of 16 and 32 tiles, with 128, 256 and 512 requests (4, 8 and 16
# items per program), both caches.
export PYTHONPATH=/tmp/t371:src
case $1 in
tests)
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
  timeout 200 python3 -m pytest -q -rf tests/test_fixed_history_gluon.py \
    -k "wait_statistics" > $OUT/tests-stats.log 2>&1
  echo "stats tests rc $?"; tail -n 3 $OUT/tests-stats.log | cut -c1-400 ;;
boundary)
  P=benchmarks/results/h200-2026-12-02h/boundary_probe.py
  for kv in fp8 bf16; do
    timeout 150 python3 $P $kv 256,2048,1024 256,2040,1016 256,2040,2040 \
      128,2040,1016 512,2040,1016 2>&1
  done > $OUT/boundary.txt
  cut -c1-170 $OUT/boundary.txt ;;
esac
