# Branch fp8-tma (bare H200, Triton 3.7.1 in /tmp/t371): raw fp8 tiles staged by TMA (in the launch policy on the branch).
# Tests first (API through the launch, then the kernel's entries), then
# timing against the launch's fp8 choices at shapes 4, 1, 3, 2, then the loader alone.
export PYTHONPATH=/tmp/t371:src
timeout 150 python3 -m pytest -q -rf -x $(cat .gpu-vllm/ids-fp8tma-api.txt) > $OUT/fp8tma-api-tests.log 2>&1; echo "api tests rc $?"
tail -n 3 $OUT/fp8tma-api-tests.log | cut -c1-300
timeout 330 python3 -m pytest -q -rf -x $(cat .gpu-vllm/ids-fp8tma.txt) > $OUT/fp8tma-tests.log 2>&1; echo "tests rc $?"
tail -n 3 $OUT/fp8tma-tests.log | cut -c1-300
