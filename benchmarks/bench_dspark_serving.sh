#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Serving benchmark for Spark2_5 with and without DSpark speculative decoding.
#
# Reproduces the metrics of the published table (SPEC §7): 500 concurrent
# requests, ~1525 input / ~127 output tokens each, all sent at once; request
# and token throughput (with the peak output rate), TTFT / TPOT / ITL mean,
# median and P99. Needs a CUDA build of vLLM 0.32.0 with this plugin installed
# (`pip install --no-deps vllm-spark2_5-plugin`) and a Spark2_5 checkpoint
# that carries DSpark draft weights. See benchmarks/dspark_serving.md.
#
#   benchmarks/bench_dspark_serving.sh CKPT [baseline|dspark|both]
#
# Environment knobs (defaults in brackets):
#   PORT [8000]  NUM_PROMPTS [500]  MAX_CONCURRENCY [500]  INPUT_LEN [1525]
#   OUTPUT_LEN [127]  NUM_SPEC_TOKENS [7]  TP [1]  TEMPERATURE [0]
#   RESULT_DIR [benchmarks/results]  SERVE_ARGS [extra `vllm serve` flags]
#   STARTUP_TIMEOUT [1800] seconds to wait for /health
set -euo pipefail

CKPT=${1:?usage: $0 CKPT [baseline|dspark|both]}
MODE=${2:-both}
PORT=${PORT:-8000}
NUM_PROMPTS=${NUM_PROMPTS:-500}
MAX_CONCURRENCY=${MAX_CONCURRENCY:-500}
INPUT_LEN=${INPUT_LEN:-1525}
OUTPUT_LEN=${OUTPUT_LEN:-127}
NUM_SPEC_TOKENS=${NUM_SPEC_TOKENS:-7}
TP=${TP:-1}
TEMPERATURE=${TEMPERATURE:-0}
RESULT_DIR=${RESULT_DIR:-benchmarks/results}
SERVE_ARGS=${SERVE_ARGS:-}
STARTUP_TIMEOUT=${STARTUP_TIMEOUT:-1800}

mkdir -p "$RESULT_DIR"
SERVER_PID=""

stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT

wait_for_health() {
  local deadline=$((SECONDS + STARTUP_TIMEOUT))
  until curl -sf "http://127.0.0.1:${PORT}/health" >/dev/null; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "server exited during start-up; see $1" >&2
      exit 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "server not healthy after ${STARTUP_TIMEOUT}s; see $1" >&2
      exit 1
    fi
    sleep 5
  done
}

run_one() {
  local label=$1
  shift
  local log="$RESULT_DIR/server-${label}.log"
  echo "== ${label}: starting vllm serve (log: ${log})"
  # shellcheck disable=SC2086  # SERVE_ARGS is a list of flags
  vllm serve "$CKPT" --host 127.0.0.1 --port "$PORT" \
    --tensor-parallel-size "$TP" --max-num-seqs "$MAX_CONCURRENCY" \
    "$@" $SERVE_ARGS >"$log" 2>&1 &
  SERVER_PID=$!
  wait_for_health "$log"

  echo "== ${label}: vllm bench serve, ${NUM_PROMPTS} requests"
  vllm bench serve \
    --backend vllm \
    --host 127.0.0.1 --port "$PORT" \
    --model "$CKPT" \
    --dataset-name random \
    --random-input-len "$INPUT_LEN" \
    --random-output-len "$OUTPUT_LEN" \
    --random-range-ratio 0 \
    --ignore-eos \
    --num-prompts "$NUM_PROMPTS" \
    --max-concurrency "$MAX_CONCURRENCY" \
    --request-rate inf \
    --temperature "$TEMPERATURE" \
    --percentile-metrics ttft,tpot,itl,e2el \
    --metric-percentiles 50,99 \
    --seed 0 \
    --save-result \
    --result-dir "$RESULT_DIR" \
    --result-filename "${label}.json" \
    --label "$label"
  stop_server
}

case "$MODE" in
  baseline | both) run_one baseline ;;
esac
case "$MODE" in
  dspark | both)
    SPEC="{\"method\": \"dspark\", \"num_speculative_tokens\": ${NUM_SPEC_TOKENS}"
    if [ "$TEMPERATURE" != "0" ]; then
      SPEC="${SPEC}, \"draft_sample_method\": \"probabilistic\""
    fi
    run_one dspark --speculative-config "${SPEC}}"
    ;;
esac

# One table in the layout of the published figures.
python3 - "$RESULT_DIR" <<'PY'
import json
import pathlib
import sys

rows = [
    ("Successful requests", "completed", "{:.0f}"),
    ("Failed requests", "failed", "{:.0f}"),
    ("Benchmark duration (s)", "duration", "{:.2f}"),
    ("Total input tokens", "total_input_tokens", "{:,.0f}"),
    ("Total generated tokens", "total_output_tokens", "{:,.0f}"),
    ("Request throughput (req/s)", "request_throughput", "{:.2f}"),
    ("Output token throughput (tok/s)", "output_throughput", "{:,.0f}"),
    ("Peak output token throughput (tok/s)", "max_output_tokens_per_s", "{:,.0f}"),
    ("Total token throughput (tok/s)", "total_token_throughput", "{:,.0f}"),
]
for metric in ("ttft", "tpot", "itl"):
    for stat in ("mean", "median", "p99"):
        rows.append((f"{stat} {metric.upper()} (ms)", f"{stat}_{metric}_ms", "{:.2f}"))
rows += [
    ("Draft acceptance rate", "spec_decode_acceptance_rate", "{:.3f}"),
    ("Mean acceptance length", "spec_decode_acceptance_length", "{:.2f}"),
]

results = {}
for label in ("baseline", "dspark"):
    path = pathlib.Path(sys.argv[1]) / f"{label}.json"
    if path.exists():
        results[label] = json.loads(path.read_text())
if not results:
    sys.exit(0)
print(f"\n{'metric':<40}" + "".join(f"{label:>14}" for label in results))
for name, key, fmt in rows:
    cells = []
    for data in results.values():
        value = data.get(key)
        cells.append(f"{fmt.format(value) if value is not None else '-':>14}")
    print(f"{name:<40}" + "".join(cells))
PY
