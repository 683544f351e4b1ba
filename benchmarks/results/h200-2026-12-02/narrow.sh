# Branch mma-split: the fp8 loader's narrow conversion (GPU tests, timing, loader-only probe).
export PYTHONPATH=/tmp/t371:src
timeout 150 python3 -m pytest -q -rf -x -k "narrow" tests/test_fixed_history_gluon.py > $OUT/narrow-tests.log 2>&1; echo "tests rc $?"
tail -n 3 $OUT/narrow-tests.log | cut -c1-300
S=benchmarks/results/h200-2026-12-02
W='{"warp_specialized":true'
for i in 0 1 2; do
echo "shape $((i+1)) fp8"
timeout 60 python3 $S/../h200-2026-12-01j/sweep.py $i fp8 "[$W},$W,\"narrow_convert\":true},$W,\"narrow_convert\":true,\"f16_dots\":true},$W,\"f16_dots\":true},$W}]" 2>&1 | tee $OUT/narrow-shape$((i+1)).txt
done
echo "shape 4 fp8"
P4="$W,\"rows\":128,\"split_mma\":true,\"ring\":4,\"raw_slots\":3"
timeout 60 python3 $S/../h200-2026-12-01j/sweep.py 3 fp8 "[$P4},$P4,\"narrow_convert\":true},$P4,\"narrow_convert\":true,\"f16_dots\":true},$P4}]" 2>&1 | tee $OUT/narrow-shape4.txt
echo "loader only"
timeout 60 python3 $S/loader_probe.py 0 fp8 '[{"rows":64,"programs_per_sm":2},{"rows":64,"programs_per_sm":2,"narrow_convert":true},{"rows":64,"programs_per_sm":2,"narrow_convert":true,"f16_dots":true}]' 2>&1 | tee $OUT/loader-narrow-shape1.txt
timeout 60 python3 $S/loader_probe.py 3 fp8 '[{"ring":4,"raw_slots":3},{"ring":4,"raw_slots":3,"narrow_convert":true},{"ring":4,"raw_slots":3,"narrow_convert":true,"f16_dots":true}]' 2>&1 | tee $OUT/loader-narrow-shape4.txt
