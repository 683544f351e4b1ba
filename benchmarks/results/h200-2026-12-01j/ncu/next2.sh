export PYTHONPATH=/tmp/t371:src
timeout 120 python3 -m pytest -q -rf -k "overlap" tests/test_fixed_history_gluon.py > $OUT/overlap-tests.log 2>&1; echo "tests rc $?"
tail -n 3 $OUT/overlap-tests.log | cut -c1-300
for v in '{"warp_specialized": true, "rows": 128}' '{"warp_specialized": true, "rows": 128, "fence_in_mma": true, "ring": 4, "raw_slots": 4}'; do
  n=$(echo "$v" | tr -dc 'a-z0-9' | cut -c1-60)
  timeout 100 /usr/local/cuda/bin/ncu -k regex:fixed_history_ws -s 1 -c 1 --set full --page details --print-details all python3 .gpu-vllm/ws_once.py 3 bf16 "$v" > $OUT/det4-$n.txt 2>&1
  timeout 100 /usr/local/cuda/bin/ncu -k regex:fixed_history_ws -s 1 -c 1 --set full --page source --csv --print-source sass python3 .gpu-vllm/ws_once.py 3 bf16 "$v" > $OUT/src4-$n.csv 2>&1
  grep -E "^    Duration|No Eligible|Issue Slots Busy|DRAM Throughput  |Tensor" $OUT/det4-$n.txt | head -6
done
