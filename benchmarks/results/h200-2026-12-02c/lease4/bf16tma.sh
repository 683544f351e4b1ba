export PYTHONPATH=/tmp/t371:src
timeout 240 python3 -m pytest -q -rf -x $(cat .gpu-vllm/ids-bf16tma.txt) > $OUT/tests-bf16tma.log 2>&1; echo "tests rc $?"
tail -n 3 $OUT/tests-bf16tma.log | cut -c1-300
