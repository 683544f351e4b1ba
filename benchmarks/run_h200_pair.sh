#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two lists of single-GPU stages of run_h200.sh side by side on a two-GPU
# machine, one GPU each (run from the repository root, after the install):
#
#   bash benchmarks/run_h200_pair.sh "fp8-ckpt serve-fp8kv" "acceptance oracle-b"
#
# Each list runs with its own CUDA_VISIBLE_DEVICES, OUT=$OUT/gpu0|gpu1 and
# server port (SERVE_PORT 8000 / 8100); neither stops the other's processes
# (run_h200.sh stops only what it started); exits non-zero if either failed.
#
# For correctness stages only: the two lists share the host's CPUs, and an
# engine starting on one GPU (compile, graph capture) slows a CPU-bound
# serving benchmark on the other by up to a third. Measure speed alone.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: run_h200_pair.sh 'STAGES for GPU 0' 'STAGES for GPU 1'" >&2; exit 2; }
OUT=${OUT:-out}
here=$(dirname "$0")
pids=()
for gpu in 0 1; do
  stages=$1
  shift
  mkdir -p "$OUT/gpu$gpu"
  # shellcheck disable=SC2086  # a stage list is split into stage names
  CUDA_VISIBLE_DEVICES=$gpu OUT="$OUT/gpu$gpu" SERVE_PORT=$((8000 + 100 * gpu)) \
    bash "$here/run_h200.sh" $stages > "$OUT/gpu$gpu/run.txt" 2>&1 &
  pids+=($!)
done
status=0
for gpu in 0 1; do
  wait "${pids[$gpu]}" || status=1
  echo "== GPU $gpu:"
  tail -15 "$OUT/gpu$gpu/run.txt"
done
exit $status
