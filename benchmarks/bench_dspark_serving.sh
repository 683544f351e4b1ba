#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Serving benchmark for Spark2_5 with and without DSpark speculative decoding,
# in the shape of the published table (SPEC §7): 500 concurrent requests,
# ~1525 input / ~127 output tokens each, all sent at once; request and token
# throughput (with the peak output rate), TTFT / TPOT / ITL mean, median and
# P99, DSpark's acceptance length. One point of benchmarks/bench_serving_matrix.py
# (which runs the whole concurrency x shape matrix); see
# benchmarks/dspark_serving.md. Needs a CUDA build of vLLM 0.32.0 with this
# plugin installed and a Spark2_5 checkpoint that carries DSpark draft weights.
#
#   benchmarks/bench_dspark_serving.sh CKPT [baseline|dspark|both]
#
# Environment knobs (defaults in brackets):
#   PORT [8000]  NUM_PROMPTS [= MAX_CONCURRENCY]  MAX_CONCURRENCY [500]
#   INPUT_LEN [1525]  OUTPUT_LEN [127]  NUM_SPEC_TOKENS [the checkpoint's
#   dspark_block_size]  TP [1]  TEMPERATURE [0]  RESULT_DIR [a run folder of
#   its own, benchmarks/results/dspark-serving-YYYY-MM-DD-HHMMSS (UTC): the
#   matrix's work files (points/, raw/, server logs) and its report]
#   SERVE_ARGS [extra `vllm serve` flags]  STARTUP_TIMEOUT [1800] seconds
#   PYTHON [python3]
set -euo pipefail

CKPT=${1:?usage: $0 CKPT [baseline|dspark|both]}
MODE=${2:-both}
HERE=$(cd "$(dirname "$0")" && pwd)
MAX_CONCURRENCY=${MAX_CONCURRENCY:-500}
TP=${TP:-1}
RESULT_DIR=${RESULT_DIR:-$HERE/results/dspark-serving-$(date -u +%Y-%m-%d-%H%M%S)}

case "$MODE" in
  both) MODES=(baseline dspark) ;;
  baseline | dspark) MODES=("$MODE") ;;
  *) echo "mode must be baseline, dspark or both" >&2; exit 2 ;;
esac

# The published shape by name (its table then shows the published column).
SHAPE=published
if [ -n "${INPUT_LEN:-}${OUTPUT_LEN:-}" ]; then
  SHAPE="point=${INPUT_LEN:-1525}:${OUTPUT_LEN:-127}"
fi
ARGS=(
  "$CKPT"
  --work-dir "$RESULT_DIR"
  --modes "${MODES[@]}"
  --shapes "$SHAPE"
  --concurrencies "$MAX_CONCURRENCY"
  --num-prompts "${NUM_PROMPTS:-$MAX_CONCURRENCY}"
  --max-num-seqs "$(( MAX_CONCURRENCY > 512 ? MAX_CONCURRENCY : 512 ))"
  --temperature "${TEMPERATURE:-0}"
  --port "${PORT:-8000}"
  --startup-timeout "${STARTUP_TIMEOUT:-1800}"
  "--serve-args=--tensor-parallel-size $TP ${SERVE_ARGS:-}"
  --force
)
if [ -n "${NUM_SPEC_TOKENS:-}" ]; then
  ARGS+=(--num-spec-tokens "$NUM_SPEC_TOKENS")
fi
exec "${PYTHON:-python3}" "$HERE/bench_serving_matrix.py" "${ARGS[@]}"
