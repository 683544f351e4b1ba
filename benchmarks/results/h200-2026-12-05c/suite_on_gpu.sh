#!/usr/bin/env bash
# The unmarked tests (written for vLLM's CPU build) run file by file under
# vLLM's CUDA build on the lent GPU, each file under its own time limit, so
# that a slow file cannot hide the others' results.
#   NAME=a BUDGET=540 PER_FILE=200 bash suite_on_gpu.sh tests/test_x.py ...
# (MARK=cuda runs the CUDA-marked tests instead of the unmarked ones)
# Writes $OUT/$NAME.log (every file's pytest output) and $OUT/$NAME-summary.txt
# (one line per file).
set -u
name=${NAME:-suite}
budget=${BUDGET:-540}
per_file=${PER_FILE:-240}
log=$OUT/$name.log
summary=$OUT/$name-summary.txt
start=$SECONDS
for f in "$@"; do
    left=$((budget - (SECONDS - start)))
    if ((left < 20)); then
        echo "$f: not run (the call's time is spent)" >>"$summary"
        continue
    fi
    limit=$((left < per_file ? left : per_file))
    t0=$SECONDS
    timeout -k 5 "$limit" python3 -m pytest "$f" -m "${MARK:-not cuda}" -q -rfE \
        --tb=short -p no:cacheprovider >/tmp/one.log 2>&1
    rc=$?
    { echo "=== $f rc=$rc $((SECONDS - t0)) s"; cat /tmp/one.log; } >>"$log"
    echo "$f: rc=$rc $((SECONDS - t0)) s: $(tail -n 1 /tmp/one.log)" >>"$summary"
done
cat "$summary"
