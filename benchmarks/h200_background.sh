#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Long GPU work as a background job that outlives the device call which
# started it, so one session's stages run back to back without the 10-minute
# limit of a call cutting a stage, and a lease is never idle between stages.
#
#   bash benchmarks/h200_background.sh start NAME 'COMMAND'
#   bash benchmarks/h200_background.sh wait SECONDS      # then collect
#   bash benchmarks/h200_background.sh collect
#   bash benchmarks/h200_background.sh stop NAME
#
# `start` copies the repository (without the vLLM bundle's parts) to
# /tmp/h200-bg/NAME/repo (H200_BG_DIR replaces /tmp/h200-bg) and runs COMMAND there with bash in a new process
# session (setsid: the device tool ends a call's processes when the call
# returns, except those), with OUT=/tmp/h200-bg/NAME/out and the caller's
# environment (source env.sh and install the project first). `wait` returns
# when every job has ended or after SECONDS, whichever is first, printing the
# jobs' progress; it then collects. `collect` packs each job's OUT into
# $OUT/NAME.tgz and copies its log to $OUT/NAME.log (what comes back from a
# call). Issue the next `wait` within the lease's idle limit (30 s), and give
# it SECONDS that end well before the session's device time does.
set -uo pipefail
BG=${H200_BG_DIR:-/tmp/h200-bg}  # one folder per job

running() {  # NAME: the job's process session still has a process
  local pid
  pid=$(cat "$BG/$1/pid" 2>/dev/null) || return 1
  pgrep -s "$pid" > /dev/null 2>&1
}

jobs_running() {
  local dir
  for dir in "$BG"/*/; do
    [ -f "$dir/pid" ] && running "$(basename "$dir")" && return 0
  done
  return 1
}

progress() {
  local dir name state
  for dir in "$BG"/*/; do
    [ -f "$dir/pid" ] || continue
    name=$(basename "$dir")
    state=ended
    running "$name" && state=running
    echo "=== $name ($state, exit $(cat "$dir/rc" 2>/dev/null || echo -)); last lines:"
    tail -n "${TAIL_LINES:-15}" "$dir/log" 2>/dev/null
  done
}

collect() {
  local out=${OUT:-out} dir name
  mkdir -p "$out"
  for dir in "$BG"/*/; do
    [ -f "$dir/pid" ] || continue
    name=$(basename "$dir")
    cp "$dir/log" "$out/$name.log" 2>/dev/null
    tar -czf "$out/$name.tgz" -C "$dir/out" . 2>/dev/null
  done
  ls -l "$out"
}

case "${1:-}" in
  start)
    [ $# -eq 3 ] || { echo "usage: $0 start NAME 'COMMAND'" >&2; exit 2; }
    [ -f pyproject.toml ] && [ -d benchmarks ] || {
      echo "$0 start: run it from the repository root (it copies the cwd)" >&2; exit 2; }
    name=$2 dir=$BG/$2
    if running "$name"; then
      echo "job $name is already running" >&2
      exit 1
    fi
    rm -rf "$dir" && mkdir -p "$dir/repo" "$dir/out"
    tar -c --exclude='./.gpu-vllm/part-*' --exclude='./.gpu-vllm/first' \
      --exclude='./.git' --exclude='./.venv*' . | tar -x -C "$dir/repo"
    # The job's shell leads the new session: it writes its pid (the session
    # id) first and its exit status last; its log holds everything else.
    # Every descriptor of the background subshell goes to the log, so nothing
    # keeps the caller's output open while the job runs.
    (cd "$dir/repo" && OUT=$dir/out exec setsid nohup bash -c \
      'echo $$ > "$0/pid"; (eval "$1"); echo $? > "$0/rc"' "$dir" "$3") \
      > "$dir/log" 2>&1 < /dev/null &
    for _ in $(seq 50); do [ -s "$dir/pid" ] && break; sleep 0.1; done
    echo "started $name (pid $(cat "$dir/pid")), log $dir/log"
    ;;
  wait)
    [ $# -eq 2 ] || { echo "usage: $0 wait SECONDS" >&2; exit 2; }
    [[ $2 =~ ^[0-9]+$ ]] || { echo "$0 wait: SECONDS must be an integer, got '$2'" >&2; exit 2; }
    end=$((SECONDS + $2))
    while jobs_running && [ "$SECONDS" -lt "$end" ]; do sleep 5; done
    progress
    collect
    ;;
  collect) collect ;;
  stop)
    [ $# -eq 2 ] || { echo "usage: $0 stop NAME" >&2; exit 2; }
    pid=$(cat "$BG/$2/pid" 2>/dev/null) || { echo "no job $2" >&2; exit 1; }
    pkill -TERM -s "$pid" 2>/dev/null
    sleep 3
    pkill -KILL -s "$pid" 2>/dev/null
    echo "stopped $2"
    ;;
  *)
    echo "usage: $0 start NAME 'COMMAND' | wait SECONDS | collect | stop NAME" >&2
    exit 2
    ;;
esac
