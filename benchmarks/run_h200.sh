#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU checks, in stages (results and how each was run: README, "Results
# on an H200", and benchmarks/*_h200.md). Run from the repository root with a
# CUDA build of vLLM 0.32.0 and this plugin installed:
#
#   bash benchmarks/run_h200.sh kernel e2e        # one or more stages
#
# A list of stages longer than one device call runs as a background job
# (benchmarks/h200_background.sh).
#
# Stages:
#   kernel      fixed-history kernel: CUDA tests + the five-shape benchmark
#   kernel-ab   the five shapes, kernel only, against the kernels of the file
#               KERNEL_BASELINE (an older fixed_history_kernel.py) in the
#               same process: a before/after on one machine
#   e2e         DSpark end to end (tests/test_dspark_gpu_e2e.py)
#   oracle-a    DSpark oracle, the batch-64 runs
#   oracle-b    DSpark oracle, every other single-GPU run
#   oracle-tp2  DSpark oracle at tensor parallel 2 (needs two GPUs)
#   acceptance  trained draft: vLLM's acceptance vs the references' prediction
#               (ACCEPTANCE_K: a pytest -k expression, e.g. fp8 for the
#               --kv-cache-dtype fp8 case only)
#   lora        LoRA adapters in bf16 vs the merged reference (TP=2 with 2 GPUs)
#   fp8-ckpt    the llm-compressor FP8 checkpoint vs its bf16 source; needs
#               SPARK2_5_FP8_PAIR (made on a CPU machine, see tests/test_fp8_gpu.py)
#   serve-tp2   tiny checkpoint served at tensor parallel 2, with/without DSpark
#   serve-fp8kv tiny checkpoint served with --kv-cache-dtype fp8, with/without DSpark
#   profile-c1  where a DSpark step's time goes at concurrency 1, for the
#               prompt lengths PROFILE_C1_INPUTS (default "128 1525 3000"), on
#               PROFILE_C1_CKPT (default /tmp/small, the ~1B "small" preset
#               with random weights; /tmp/small-dspark after small-train)
#   draft-ops   the same for DRAFT_OPS_POINTS (mode:prompt-length): DSpark with
#               the draft on vLLM's kernels (kernels, as shipped), DSpark with
#               its RMSNorm/RoPE/GELU as plain PyTorch (native, the state
#               before) and no speculation (target)
#   small-train the ~1B "small" target (+ its Llama twin) with a trained draft:
#               /tmp/small, /tmp/small-llama, /tmp/small-dspark (about 5 minutes)
#               SMALL_TRAIN_PROMPTS training sequences (default 4096; with
#               512 the draft learns them by heart: held-out acceptance
#               2.49 against 3.25)
#   small-serve that checkpoint served, SMALL_SHAPES (default "published
#               decode"), SMALL_MODES (default "baseline dspark") at
#               SMALL_CONCURRENCIES (default "1 64"), SMALL_REPEATS runs per
#               point (default 1; the median counts); points already measured
#               in /tmp/matrix-small (-$SMALL_TAG when set: a new draft needs
#               a new tag) are kept
#   fp8kv-profile the DSpark step with a bf16 and an fp8 KV cache
#               (profile_decode.py offline, 64 requests, 128 in, 512 out) for
#               each checkpoint of FP8KV_CKPTS (default /tmp/tiny)
#   plugin-ab   a DSpark step with this plugin and with older checkouts of
#               it (PLUGIN_BASELINE: directories carried with the call, e.g.
#               `git archive REV pyproject.toml src | tar -x -C
#               .gpu-vllm/plugin-REV`; several for a bisect), in turn,
#               PLUGIN_AB_ROUNDS times (default 2) on PLUGIN_AB_CKPT (default
#               /tmp/small, made if missing), profile_decode.py offline with
#               PLUGIN_AB_ARGS
#               (default: concurrency 64, 128 in, 512 out): finds which
#               commit a DSpark slowdown came with
#   llama-profile Spark2_5 (/tmp/small) and its Llama twin (/tmp/small-llama),
#               random weights, no speculation, profiled in turn at
#               LLAMA_PROFILE_CONCURRENCIES (default "64 500") for
#               LLAMA_PROFILE_ROUNDS rounds (default 1), published shape:
#               the GPU-busy time per step, which the host's speed does not
#               move (profile_decode.py offline)
#   graphs-500  DSpark at 500 concurrent requests with vLLM's CUDA-graph
#               capture sizes (the 512-token cap) and with the plugin's (the
#               default since 2026-12-01, covering max_num_seqs):
#               profile_decode.py offline for both and for no speculation
#               (the draft's share of a step), then the published shape
#               served at 500 with both; on GRAPHS_CKPT (default /tmp/small,
#               random weights; /tmp/small-dspark after small-train),
#               GRAPHS_OUTPUT_LEN decode tokens (default 600: with 200 no
#               DSpark step ran all 500 requests without a prefill);
#               GRAPHS_SERVE=0 runs the three profiles only
#   llama-repeat Spark2_5 against its Llama twin at 64 and 500, in the mode
#               order LLAMA_ORDER (default "baseline intree"), into
#               /tmp/llama-$LLAMA_TAG; then profile_decode.py without DSpark at
#               64 on the model named by LLAMA_PROFILE (spark or llama, or none)
#
# Logs, JSON and tables go to $OUT (default: out/); the oracle's per-proposal
# records are packed into one archive per stage. STAGE_TIMEOUT=N stops any
# single command after N seconds (engines start in 30-60 s each on the H200).
# After each command (and on exit) the script stops only what it started: the
# command's process group (`timeout` gives each command one of its own) and
# the `vllm serve` group that bench_serving_matrix.py recorded during it.
# Two single-GPU runs can share a two-GPU machine: give each its own
# CUDA_VISIBLE_DEVICES, OUT and SERVE_PORT (benchmarks/run_h200_pair.sh).
#
#   bash benchmarks/run_h200.sh --help            # this text
set -uo pipefail
STAGES="kernel kernel-ab e2e oracle-a oracle-b oracle-tp2 acceptance lora \
fp8-ckpt serve-tp2 serve-fp8kv profile-c1 draft-ops plugin-ab small-train \
small-serve fp8kv-profile llama-profile graphs-500 llama-repeat"
usage() { sed -n '3,/^set -uo pipefail/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
# Every stage name is checked before anything runs (no trap, no $OUT yet).
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") echo "usage: run_h200.sh STAGE... (--help lists them); stages: $STAGES" >&2; exit 2 ;;
esac
for stage in "$@"; do
  case " $STAGES " in
    *" $stage "*) ;;
    *) echo "run_h200.sh: unknown stage '$stage'; stages: $STAGES" >&2; exit 2 ;;
  esac
done

OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# The test processes touch CUDA before vLLM starts its tensor-parallel
# workers, and a forked worker cannot initialise CUDA again: spawn them.
export VLLM_WORKER_MULTIPROC_METHOD=spawn
status=0
GROUP_FILE=$(mktemp)  # the process group of the command running now
# bench_serving_matrix.py's record of the server group it started on these
# GPUs (its pid_file(): one per CUDA_VISIBLE_DEVICES).
gpus=${CUDA_VISIBLE_DEVICES-all}
gpus=${gpus//,/-}
SERVER_RECORD=/tmp/spark2_5-bench-server-gpu${gpus:-none}.pgid

stop_group() {  # PGID: TERM, then KILL what is left after 15 s
  local pg=$1
  [ -n "$pg" ] && kill -0 -- "-$pg" 2>/dev/null || return 0
  echo "== stopping what the command left running (process group $pg)"
  kill -TERM -- "-$pg" 2>/dev/null
  for _ in $(seq 15); do
    kill -0 -- "-$pg" 2>/dev/null || return 0
    sleep 1
  done
  kill -KILL -- "-$pg" 2>/dev/null
  return 0
}

cleanup() {  # a command cut short can leave a server or engine holding the GPUs
  # Only processes this script started: the command's own process group...
  stop_group "$(cat "$GROUP_FILE" 2>/dev/null)"
  : > "$GROUP_FILE"
  # ...and a server group bench_serving_matrix.py recorded during the
  # command (a new record; its leader, if alive, is `vllm serve`).
  local server
  server=$(head -c 20 "$SERVER_RECORD" 2>/dev/null | tr -dc 0-9)
  if [ -n "$server" ] && [ "$server" != "${server_before:-}" ]; then
    if [ ! -e "/proc/$server/cmdline" ] || tr '\0' ' ' < "/proc/$server/cmdline" | grep -q vllm; then
      stop_group "$server"
    fi
  fi
  return 0
}
trap 'cleanup; rm -f "$GROUP_FILE"' EXIT

run() {  # name, command...: log to $OUT/name.log, remember a failure
  local name=$1
  shift
  echo "== $name: $*"
  # STAGE_TIMEOUT (seconds, 0 = none) stops one command, not the whole call,
  # so a slow stage still leaves its log and the next stage a free GPU.
  server_before=$(head -c 20 "$SERVER_RECORD" 2>/dev/null | tr -dc 0-9)
  # `timeout` moves itself (this subshell's pid, after exec) into a new process
  # group, which the command's children join: cleanup stops that group.
  { echo "$BASHPID" > "$GROUP_FILE"
    exec timeout --kill-after=15 "${STAGE_TIMEOUT:-0}" "$@"; } 2>&1 \
    | tee "$OUT/$name.log" | tail -25
  local rc=${PIPESTATUS[0]}
  cleanup
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

tiny_checkpoint() {  # /tmp/tiny: the tiny checkpoint with a random draft, bf16
  [ -d /tmp/tiny ] || spark2_5-make-tiny-checkpoint /tmp/tiny --dspark \
    --dtype bfloat16 > /dev/null
}

small_checkpoint() {  # /tmp/small: the ~1B preset, random weights
  [ -d /tmp/small ] || run make-small python3 -m \
    vllm_spark2_5_plugin.tools.make_checkpoint /tmp/small --preset small
}

profile() {  # stage name, label, checkpoint, profile_decode.py options: offline
  local name=$1 label=$2 ckpt=$3
  shift 3
  run "$name" python3 benchmarks/profile_decode.py "$ckpt" "$@" --phases offline \
    --label "$label" --out "$OUT" --log-dir "/tmp/profile-logs-$label"
}

serve() {  # name, extra `vllm serve` flags: decode shape, c=1 and 64 ($SERVE_MODES)
  tiny_checkpoint
  mkdir -p "$OUT/serve-$1"
  # shellcheck disable=SC2086  # mode list
  run "serve-$1" python3 benchmarks/bench_serving_matrix.py /tmp/tiny \
    --work-dir "/tmp/matrix-$1" --report-dir "$OUT/serve-$1" \
    --modes ${SERVE_MODES:-baseline dspark} --shapes decode --concurrencies 1 64 \
    --max-model-len 2048 --point-seconds 15 --serve-args "$2" \
    --port "${SERVE_PORT:-8000}"
}

small_pair() {  # /tmp/small and its in-tree Llama twin /tmp/small-llama
  [ -d /tmp/small-llama ] || { rm -rf /tmp/small; run small-make python3 -m \
    vllm_spark2_5_plugin.tools.make_checkpoint /tmp/small --preset small --in-tree llama; }
}

small_train() {  # the trained checkpoint of benchmarks/dspark_serving_h200.md
  small_pair
  rm -f /tmp/small-seqs.json  # --save-sequences writes a new file only
  run small-train spark2_5-train-dspark /tmp/small /tmp/small-dspark --overwrite \
    --device cuda --dtype bfloat16 --continuations vllm --vllm-dtype bfloat16 \
    --vllm-gpu-memory-utilization 0.5 --num-prompts "${SMALL_TRAIN_PROMPTS:-4096}" \
    --eval-prompts 16 \
    --prompt-len 64 --gen-len 256 --steps 2000 --lr 5e-4 --warmup 100 \
    --batch-anchors 256 --anchors-per-seq 32 --init-draft target --log-every 200 \
    --save-sequences /tmp/small-seqs.json
  cp /tmp/small-dspark/train_dspark.json "$OUT/" 2>/dev/null
}

for stage in "$@"; do
  case "$stage" in
    kernel)
      run kernel-tests python3 -m pytest -q -rA tests/test_fixed_history_attention.py
      run kernel-bench python3 benchmarks/bench_fixed_history_attention.py \
        --md "$OUT/kernel-bench.md"
      ;;
    kernel-ab)
      if [ -z "${KERNEL_BASELINE:-}" ] || [ ! -f "$KERNEL_BASELINE" ]; then
        echo "kernel-ab needs KERNEL_BASELINE=<an older fixed_history_kernel.py>" >&2
        status=1
      else
        run kernel-ab python3 benchmarks/bench_fixed_history_attention.py \
          --kernel-only --baseline-kernel "$KERNEL_BASELINE" --md "$OUT/kernel-ab.md"
      fi
      ;;
    e2e) run e2e python3 -m pytest -q -rA tests/test_dspark_gpu_e2e.py ;;
    oracle-a) oracle oracle-a "b64 and not tp2" ;;
    oracle-b) oracle oracle-b "not b64 and not tp2" ;;
    oracle-tp2) oracle oracle-tp2 "tp2" ;;
    acceptance)
      SPARK2_5_ORACLE_OUT=$OUT run acceptance python3 -m pytest -q -rA -s \
        tests/test_dspark_gpu_acceptance.py ${ACCEPTANCE_K:+-k "$ACCEPTANCE_K"}
      ;;
    lora)
      SPARK2_5_ORACLE_OUT=$OUT run lora python3 -m pytest -q -rA -s \
        tests/test_lora_gpu.py
      ;;
    fp8-ckpt)
      SPARK2_5_ORACLE_OUT=$OUT run fp8-ckpt python3 -m pytest -q -rA -s \
        tests/test_fp8_gpu.py
      ;;
    serve-tp2) serve tp2 "--tensor-parallel-size 2" ;;
    serve-fp8kv) serve fp8kv "--kv-cache-dtype fp8" ;;
    profile-c1)
      ckpt=${PROFILE_C1_CKPT:-/tmp/small}
      [ "$ckpt" != /tmp/small ] || small_checkpoint
      for n in ${PROFILE_C1_INPUTS:-128 1525 3000}; do
        profile "profile-c1-in$n" "c1-in$n" "$ckpt" \
          --dspark --concurrency 1 --input-len "$n" --output-len 256
      done
      ;;
    draft-ops)
      small_checkpoint
      native='{"compilation_config": {"custom_ops":
        ["none", "-rms_norm", "-rotary_embedding", "-gelu_and_mul"]}}'
      for point in ${DRAFT_OPS_POINTS:-kernels:1525 native:1525 target:1525 kernels:128 target:128}; do
        mode=${point%:*} n=${point#*:}
        flags=(--dspark --llm-kwargs '{}')
        [ "$mode" = native ] && flags=(--dspark --llm-kwargs "$native")
        [ "$mode" = target ] && flags=(--llm-kwargs '{}')
        profile "draft-ops-$mode-in$n" "c1-in$n-$mode" /tmp/small \
          "${flags[@]}" --concurrency 1 --input-len "$n" --output-len 256
      done
      ;;
    plugin-ab)
      # PLUGIN_BASELINE: one or more older checkouts (space-separated).
      trees=()
      for tree in ${PLUGIN_BASELINE:-}; do
        if [ ! -f "$tree/pyproject.toml" ]; then
          echo "plugin-ab: $tree is not a checkout of this repository" >&2
          status=1
          continue 2
        fi
        trees+=("$tree")
      done
      if [ "${#trees[@]}" -eq 0 ]; then
        echo "plugin-ab needs PLUGIN_BASELINE=<older checkouts of this repository>" >&2
        status=1
        continue
      fi
      # PLUGIN_AB_CKPT: e.g. /tmp/small-dspark (after small-train) for a
      # trained draft, whose accepted tokens make a step do more.
      ab_ckpt=${PLUGIN_AB_CKPT:-/tmp/small}
      [ "$ab_ckpt" != /tmp/small ] || small_checkpoint
      # Each older plugin in its own folder, put first on the path in place
      # of this one (the install puts this one first: /tmp/project-site).
      sides=(current)
      declare -A side_path=([current]=${PYTHONPATH:-})
      for tree in "${trees[@]}"; do
        side=$(basename "$tree")
        rm -rf "/tmp/project-$side"
        python3 -m pip install -q --no-index --no-deps --no-build-isolation \
          --no-compile --target "/tmp/project-$side" "$tree" 2>&1 | tail -3
        side_path[$side]="/tmp/project-$side:${PYTHONPATH#*:}"
        sides+=("$side")
      done
      # shellcheck disable=SC2206  # an argument list
      point=(${PLUGIN_AB_ARGS:---concurrency 64 --input-len 128 --output-len 512})
      for round in $(seq "${PLUGIN_AB_ROUNDS:-2}"); do
        for side in "${sides[@]}"; do
          PYTHONPATH=${side_path[$side]} profile "plugin-ab-$side-$round" \
            "ab-$side-$round" "$ab_ckpt" --dspark "${point[@]}"
        done
      done
      ;;
    small-train) small_train ;;
    fp8kv-profile)
      tiny_checkpoint
      for ckpt in ${FP8KV_CKPTS:-/tmp/tiny}; do
        for cache in auto fp8; do
          tag=$(basename "$ckpt")-c64-$cache
          profile "fp8kv-profile-$tag" "$tag" "$ckpt" \
            --dspark --concurrency 64 --input-len 128 --output-len 512 \
            --max-model-len 2048 --llm-kwargs "{\"kv_cache_dtype\": \"$cache\"}"
          # Which attention backends the engine chose, and whether the draft
          # ran in CUDA graphs ("running the draft eagerly" otherwise).
          grep -h -i -E "backend|cuda ?graph|eager" "/tmp/profile-logs-$tag"/* \
            > "$OUT/fp8kv-engine-$tag.txt" 2>/dev/null
        done
      done
      ;;
    small-serve)
      [ -d /tmp/small-dspark ] || small_train
      mkdir -p "$OUT/small-serve"
      # shellcheck disable=SC2086  # mode and concurrency lists
      run small-serve python3 benchmarks/bench_serving_matrix.py /tmp/small-dspark \
        --work-dir "/tmp/matrix-small${SMALL_TAG:+-$SMALL_TAG}" \
        --report-dir "$OUT/small-serve" --shapes ${SMALL_SHAPES:-published decode} \
        --modes ${SMALL_MODES:-baseline dspark} \
        --concurrencies ${SMALL_CONCURRENCIES:-1 64} --point-seconds 15 \
        --repeats "${SMALL_REPEATS:-1}" --port "${SERVE_PORT:-8000}"
      ;;
    llama-profile)
      small_pair
      for round in $(seq "${LLAMA_PROFILE_ROUNDS:-1}"); do
        for c in ${LLAMA_PROFILE_CONCURRENCIES:-64 500}; do
          for model in small small-llama; do
            profile "llama-profile-$model-c$c-$round" "$model-c$c-$round" \
              "/tmp/$model" --concurrency "$c" --input-len 1525 --output-len 400
          done
        done
      done
      ;;
    graphs-500)
      ckpt=${GRAPHS_CKPT:-/tmp/small}
      [ "$ckpt" != /tmp/small ] || small_checkpoint
      # vLLM's own list (what a DSpark server got before the plugin widened
      # it): the user's cap of 512 tokens keeps it. The plugin's list is what
      # a server gets without flags.
      vllm_cap='{"max_cudagraph_capture_size": 512}'
      point=(--concurrency 500 --input-len 1525 --output-len "${GRAPHS_OUTPUT_LEN:-600}")
      graphs_lists=(vllm plugin)
      [ "${GRAPHS_SERVE:-1}" = 1 ] || graphs_lists=()
      profile graphs-500-target c500-target "$ckpt" "${point[@]}"
      profile graphs-500-vllm c500-dspark-vllm "$ckpt" --dspark "${point[@]}" \
        --llm-kwargs "{\"compilation_config\": $vllm_cap}"
      profile graphs-500-plugin c500-dspark-plugin "$ckpt" --dspark "${point[@]}"
      for graphs in "${graphs_lists[@]}"; do
        extra=()
        [ "$graphs" = vllm ] && extra=(--serve-args "--compilation-config '$vllm_cap'")
        mkdir -p "$OUT/graphs-500-serve-$graphs"
        run "graphs-500-serve-$graphs" python3 benchmarks/bench_serving_matrix.py \
          "$ckpt" --work-dir "/tmp/graphs-500-$graphs" \
          --report-dir "$OUT/graphs-500-serve-$graphs" --modes dspark \
          --shapes published --concurrencies 500 --point-seconds 15 \
          --port "${SERVE_PORT:-8000}" "${extra[@]}"
        # KV-cache size and graph memory of each (the larger graphs' cost).
        grep -r -h -E "KV cache size|graph pool memory|Graph capturing|CUDA graphs for" \
          "/tmp/graphs-500-$graphs" --include="server-*.log" > "$OUT/graphs-500-memory-$graphs.txt" 2>/dev/null
      done
      ;;
    llama-repeat)
      { [ -d /tmp/small-llama ] && [ -d /tmp/small-dspark ]; } || small_train
      tag=${LLAMA_TAG:-1}
      mkdir -p "$OUT/llama-$tag"
      # shellcheck disable=SC2086  # mode list
      run "llama-$tag" python3 benchmarks/bench_serving_matrix.py /tmp/small-dspark \
        --work-dir "/tmp/llama-$tag" --report-dir "$OUT/llama-$tag" \
        --modes ${LLAMA_ORDER:-baseline intree} --in-tree-checkpoint /tmp/small-llama \
        --concurrencies 64 500 --point-seconds 15 --port "${SERVE_PORT:-8000}"
      case ${LLAMA_PROFILE:-none} in
        spark) ckpt=/tmp/small ;;
        llama) ckpt=/tmp/small-llama ;;
        *) ckpt= ;;
      esac
      [ -z "$ckpt" ] || profile "profile-c64-${LLAMA_PROFILE}" \
        "c64-${LLAMA_PROFILE}" "$ckpt" --concurrency 64 --input-len 1525 \
        --output-len 400
      ;;
  esac
done
exit $status
