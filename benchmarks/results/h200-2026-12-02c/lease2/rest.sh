export PYTHONPATH=/tmp/t371:src
timeout 420 python3 -m pytest -q -rf -x $(cat .gpu-vllm/ids-rest.txt) > $OUT/tests-rest.log 2>&1; echo "tests rc $?"
tail -n 3 $OUT/tests-rest.log | cut -c1-300
