#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU checks, in stages that each fit one call to the lent H200 (see
# benchmarks/h200_results.md for how vLLM gets there). Run from the repository
# root with a CUDA build of vLLM 0.32.0 and this plugin installed:
#
#   bash benchmarks/run_h200.sh kernel e2e        # one or more stages
#
# Stages:
#   kernel      fixed-history kernel: CUDA tests + the five-shape benchmark
#   e2e         DSpark end to end (tests/test_dspark_gpu_e2e.py)
#   oracle-a    DSpark oracle, the batch-64 runs
#   oracle-b    DSpark oracle, every other single-GPU run
#   oracle-tp2  DSpark oracle at tensor parallel 2 (needs two GPUs)
#   acceptance  trained draft: vLLM's acceptance vs the references' prediction
#
# Logs, JSON and tables go to $OUT (default: out/); the oracle's per-proposal
# records are packed into one archive per stage.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
status=0

run() {  # name, command...: log to $OUT/name.log, remember a failure
  local name=$1
  shift
  echo "== $name: $*"
  "$@" 2>&1 | tee "$OUT/$name.log" | tail -25
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc"
  [ "$rc" -eq 0 ] || status=1
}

oracle() {  # stage name, pytest -k expression
  local dir=/tmp/oracle-$1
  rm -rf "$dir" && mkdir -p "$dir"
  SPARK2_5_ORACLE_OUT=$dir run "$1" python3 -m pytest -q -rA -s \
    tests/test_dspark_gpu_oracle.py -k "$2"
  cat "$dir"/*.json > "$OUT/$1-summaries.json" 2>/dev/null
  tar -czf "$OUT/$1-records.tgz" -C "$dir" . 2>/dev/null
}

for stage in "$@"; do
  case "$stage" in
    kernel)
      run kernel-tests python3 -m pytest -q -rA tests/test_fixed_history_attention.py
      run kernel-bench python3 benchmarks/bench_fixed_history_attention.py \
        --md "$OUT/kernel-bench.md"
      ;;
    e2e) run e2e python3 -m pytest -q -rA tests/test_dspark_gpu_e2e.py ;;
    oracle-a) oracle oracle-a "b64 and not tp2" ;;
    oracle-b) oracle oracle-b "not b64 and not tp2" ;;
    oracle-tp2) oracle oracle-tp2 "tp2" ;;
    acceptance)
      SPARK2_5_ORACLE_OUT=$OUT run acceptance python3 -m pytest -q -rA -s \
        tests/test_dspark_gpu_acceptance.py
      ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
exit $status
