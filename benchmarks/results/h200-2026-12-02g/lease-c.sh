# Bare H200, Triton 3.7.1 (seventeenth session): where the carry option
# fails (an unspecified launch failure once programs take 2+ items, lease-b).
export PYTHONPATH=/tmp/t371:src
D=benchmarks/results/h200-2026-12-02g/carry_debug.py
S='{"fp8_scores":true,"ring":3,"raw_slots":3,"carry":true}'
echo "== R L W: 400 600 256 (first tiles cp.async), scores; then without fp8 scores"
timeout 40 python3 $D "$S" 2>&1 | grep -E "^ok|Error:" | head -2
timeout 40 python3 $D '{"carry":true}' 2>&1 | grep -E "^ok|Error:" | head -2
echo "== 400 640 256 (first tiles by TMA), scores; 400 100 64 (2 tiles per item)"
timeout 40 python3 $D "$S" 400 640 256 2>&1 | grep -E "^ok|Error:" | head -2
timeout 40 python3 $D '{"carry":true}' 400 100 64 2>&1 | grep -E "^ok|Error:" | head -2
CS=$(which compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "sanitizer: $CS"
[ -n "$CS" ] && timeout 90 $CS --tool memcheck --print-limit 4 python3 $D "$S" 300 640 256 > $OUT/sanitizer.txt 2>&1
grep -E "=====|Invalid|ok " $OUT/sanitizer.txt | head -30
