# Branch mma-split with split_mma in the launch policy: GPU tests of the 128-row kernels and the launch.
export PYTHONPATH=/tmp/t371:src
timeout 330 python3 -m pytest -q -rf -k "launch or split" tests/test_fixed_history_gluon.py > $OUT/split-policy-tests.log 2>&1; echo "rc $?"
tail -n 6 $OUT/split-policy-tests.log | cut -c1-300
timeout 200 python3 -m pytest -q -rf -k "cuda and (gluon or persistent)" tests/test_fixed_history_attention.py > $OUT/split-policy-tests2.log 2>&1; echo "rc $?"
tail -n 4 $OUT/split-policy-tests2.log | cut -c1-300
