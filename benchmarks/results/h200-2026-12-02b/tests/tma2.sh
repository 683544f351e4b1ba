# Branch tma-loader with tma in the launch policy (caches in q's dtype): GPU tests by node id.
export PYTHONPATH=/tmp/t371:src
pwd
timeout 150 python3 -m pytest -q -rf $(cat .gpu-vllm/ids-api.txt) > $OUT/tma-api-tests.log 2>&1; echo "api rc $?"
tail -n 3 $OUT/tma-api-tests.log | cut -c1-300
timeout 400 python3 -m pytest -q -rf $(cat .gpu-vllm/ids-kernel.txt) > $OUT/tma-kernel-tests.log 2>&1; echo "kernel rc $?"
tail -n 5 $OUT/tma-kernel-tests.log | cut -c1-300
