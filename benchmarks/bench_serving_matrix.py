# SPDX-License-Identifier: Apache-2.0
"""Serving matrix: Spark2_5 with and without DSpark (and an in-tree model of
equal shapes) over concurrencies and request shapes, with `vllm bench serve`.

For each mode it starts one `vllm serve` (baseline; DSpark with
``--speculative-config '{"method":"dspark","num_speculative_tokens":N}'``; or
the in-tree copy of the target), waits for /health, runs one warm-up and then
vLLM's own serving benchmark (random dataset, ``--ignore-eos``, greedy, all
requests sent at once under ``--max-concurrency C``) for every shape and
concurrency, and stops the server. Every point is saved as soon as it is done,
so a matrix can be split over several commands (``--modes``, ``--shapes``,
``--concurrencies``) and resumed: points already in ``--work-dir`` are skipped
unless ``--force``. After every point ``matrix.json`` (all points, the
server's spec-decode and step counters, the machine) and ``matrix.md`` (the
published table's metrics, DSpark/baseline and Spark2_5/in-tree ratios,
acceptance lengths) are rewritten in ``--report-dir``.

    python benchmarks/bench_serving_matrix.py CKPT --work-dir /tmp/matrix \\
        --report-dir "$OUT" [--modes baseline dspark intree] \\
        [--shapes published decode] [--concurrencies 1 8 64 500] [--dry-run]

See benchmarks/dspark_serving.md for the GPU session's commands.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: Named request shapes: (input tokens, output tokens).
SHAPES = {
    "published": (1525, 127),  # the published reference run (SPEC §7)
    "decode": (128, 1024),  # decode-heavy
}
MODES = ("baseline", "dspark", "intree")
#: Target-only Spark2_5 against the in-tree model of equal shapes.
IN_TREE_GOAL = 0.97

#: The published DSpark figures (500 concurrent requests, ~1525 in / ~127 out).
PUBLISHED = {
    "completed": 500,
    "duration": 4.70,
    "total_input_tokens": 762489,
    "total_output_tokens": 63478,
    "request_throughput": 106.42,
    "output_throughput": 13510,
    "max_output_tokens_per_s": 16452,
    "total_token_throughput": 175791,
    "mean_ttft_ms": 2122,
    "median_ttft_ms": 2112,
    "p99_ttft_ms": 4169,
    "mean_tpot_ms": 11.58,
    "median_tpot_ms": 13.39,
    "p99_tpot_ms": 14.13,
    "mean_itl_ms": 12.34,
    "median_itl_ms": 11.13,
    "p99_itl_ms": 32.92,
}

#: Rows of the published table: (label, result key, format).
ROWS = [
    ("Successful requests", "completed", "{:.0f}"),
    ("Failed requests", "failed", "{:.0f}"),
    ("Benchmark duration (s)", "duration", "{:.2f}"),
    ("Total input tokens", "total_input_tokens", "{:,.0f}"),
    ("Total generated tokens", "total_output_tokens", "{:,.0f}"),
    ("Request throughput (req/s)", "request_throughput", "{:.2f}"),
    ("Output token throughput (tok/s)", "output_throughput", "{:,.0f}"),
    ("Peak output token throughput (tok/s)", "max_output_tokens_per_s", "{:,.0f}"),
    ("Total token throughput (tok/s)", "total_token_throughput", "{:,.0f}"),
    *[
        (f"{stat.capitalize()} {m.upper()} (ms)", f"{stat}_{m}_ms", "{:.2f}")
        for m in ("ttft", "tpot", "itl")
        for stat in ("mean", "median", "p99")
    ],
    ("Mean acceptance length", "acceptance_length", "{:.2f}"),
    ("Draft acceptance rate", "acceptance_rate", "{:.3f}"),
    ("Engine steps", "engine_steps", "{:,.0f}"),
    ("Mean engine step (ms)", "engine_step_ms", "{:.2f}"),
    ("Tokens per engine step", "tokens_per_step", "{:.1f}"),
    ("Preemptions", "preemptions", "{:.0f}"),
]

# -- time estimates (rough H200 guesses for a ~1B bf16 model; only for sizing) -
EST_STEP_FIXED_MS = 2.0  # per decode step at batch 1 (measured 1.9-2.3 ms, ~1B)
EST_STEP_PER_SEQ_MS = 0.03  # CPU cost per running sequence per step
EST_HBM_BYTES_PER_S = 3.0e12  # KV-cache read rate
EST_PREFILL_TOK_PER_S = 80_000.0
EST_DSPARK_TOKENS_PER_STEP = 2.0  # unknown before the run; refined from results
EST_DSPARK_STEP_COST = 1.4  # verify + draft step relative to a plain step
EST_SERVER_START_S = 90.0
EST_POINT_OVERHEAD_S = 4.0


def _kv_bytes_per_token(cfg: dict[str, Any], context: int) -> float:
    layers = cfg.get("layer_types") or ["full_attention"] * cfg["num_hidden_layers"]
    window = cfg.get("sliding_window") or context
    per_layer = 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 2  # bf16 K+V
    return sum(
        per_layer * (min(window, context) if t == "sliding_attention" else context)
        for t in layers
    )


def estimate(
    cfg: dict[str, Any], mode: str, shape: tuple[int, int], c: int, prompts: int
) -> float:
    """Rough seconds for one point (sizing and the printed plan only)."""
    n_in, n_out = shape
    ctx = n_in + n_out // 2
    step = (
        EST_STEP_FIXED_MS
        + EST_STEP_PER_SEQ_MS * c
        + 1e3 * c * _kv_bytes_per_token(cfg, ctx) / EST_HBM_BYTES_PER_S
    )
    per_token = step
    if mode == "dspark":
        per_token = step * EST_DSPARK_STEP_COST / EST_DSPARK_TOKENS_PER_STEP
    waves = max(1.0, prompts / c)
    prefill = prompts * n_in / EST_PREFILL_TOK_PER_S
    return waves * n_out * per_token / 1e3 + prefill + EST_POINT_OVERHEAD_S


def num_prompts_for(
    cfg: dict[str, Any], shape: tuple[int, int], c: int, seconds: float, cap: int
) -> int:
    """Prompts so that a point takes about ``seconds``: at least one full wave
    (3 requests at concurrency 1); exactly ``c`` at 500 and above (all sent at
    once, as in the published run); a multiple of ``c`` otherwise."""
    if c >= 500:
        return c
    n = max(c, 3)
    # Sized on the baseline's estimate, so every mode gets the same prompts.
    while n < cap and estimate(cfg, "baseline", shape, c, n + c) <= seconds:
        n += c
    return min(n, cap)


# -- server --------------------------------------------------------------------


def _free_port(preferred: int) -> int:
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", preferred)) != 0:
            return preferred
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read().decode()
    except OSError:
        return None


def scrape_metrics(base: str) -> dict[str, float]:
    """The server's Prometheus samples, summed over labels except ``position``."""
    text = _get(f"{base}/metrics") or ""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        pos = re.search(r'position="(\d+)"', name_labels)
        if pos:
            name = f"{name}[{pos.group(1)}]"
        with contextlib.suppress(ValueError):
            out[name] = out.get(name, 0.0) + float(value)
    return out


def metric_deltas(before: dict[str, float], after: dict[str, float]) -> dict:
    """Counters of one point: spec decode, engine steps, tokens, preemptions."""

    def d(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    out: dict[str, Any] = {
        "engine_steps": d("vllm:iteration_tokens_total_count"),
        "step_tokens": d("vllm:iteration_tokens_total_sum"),
        "generation_tokens": d("vllm:generation_tokens_total"),
        "prompt_tokens": d("vllm:prompt_tokens_total"),
        "preemptions": d("vllm:num_preemptions_total"),
        "server_itl_s_sum": d("vllm:inter_token_latency_seconds_sum"),
        "server_itl_count": d("vllm:inter_token_latency_seconds_count"),
        "server_tpot_s_sum": d("vllm:request_time_per_output_token_seconds_sum"),
        "server_tpot_count": d("vllm:request_time_per_output_token_seconds_count"),
    }
    drafts = d("vllm:spec_decode_num_drafts_total")
    if drafts > 0:
        accepted = d("vllm:spec_decode_num_accepted_tokens_total")
        draft_tokens = d("vllm:spec_decode_num_draft_tokens_total")
        out["spec_num_drafts"] = drafts
        out["spec_draft_tokens"] = draft_tokens
        out["spec_accepted_tokens"] = accepted
        out["acceptance_length"] = 1.0 + accepted / drafts
        out["acceptance_rate"] = accepted / draft_tokens if draft_tokens else None
        per_pos = []
        i = 0
        while f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{i}]" in after:
            per_pos.append(
                d(f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{i}]") / drafts
            )
            i += 1
        out["acceptance_per_position"] = per_pos
    return out


def pid_file(env: dict) -> Path:
    """Where the process group of the last server these scripts started on
    the GPUs of ``env`` is kept: a server left behind by a killed command is
    stopped before the next one starts on the same GPUs. One file per
    ``CUDA_VISIBLE_DEVICES``, so that runs sharing a machine (one GPU each)
    never stop each other's servers."""
    gpus = env.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "-") or "none"
    return Path(f"/tmp/spark2_5-bench-server-gpu{gpus}.pgid")


def stop_stale_server(record: Path) -> None:
    """Stop the server group recorded in ``record`` if it still runs (only a
    group these scripts started: its leader, if alive, must be `vllm serve`)."""
    if not record.exists():
        return
    with contextlib.suppress(ValueError, OSError):
        pgid = int(record.read_text().split()[0])
        cmdline = Path(f"/proc/{pgid}/cmdline")
        if cmdline.exists() and b"vllm" not in cmdline.read_bytes():
            return
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            os.killpg(pgid, sig)
            print(f"stopping a server left running (group {pgid})", flush=True)
            for _ in range(wait):
                time.sleep(1)
                os.killpg(pgid, 0)  # raises once the group is gone
    record.unlink(missing_ok=True)


class Server:
    """One `vllm serve` process group, started and stopped by its own id."""

    def __init__(self, model: str, args: list[str], log: Path, env: dict, port: int):
        self.base = f"http://127.0.0.1:{port}"
        self.log = log
        self.cmd = [
            sys.executable,
            "-m",
            "vllm.entrypoints.cli.main",
            "serve",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *args,
        ]
        self.env = env
        self.record = pid_file(env)
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None

    def start(self, timeout: float) -> str | None:
        """Start and wait for /health; return None, or why it failed."""
        stop_stale_server(self.record)
        start = time.perf_counter()
        with open(self.log, "w") as log:
            log.write("$ " + shlex.join(self.cmd) + "\n")
            log.flush()
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # its own group: stopped as a whole below
            )
        self.record.write_text(f"{self.proc.pid}\n")
        while time.perf_counter() - start < timeout:
            if self.proc.poll() is not None:
                return f"server exited with {self.proc.returncode} during start-up"
            if _get(f"{self.base}/health", timeout=2) is not None:
                self.startup_s = time.perf_counter() - start
                return None
            time.sleep(2)
        return f"server not healthy after {timeout:.0f} s"

    def stop(self) -> None:
        """Stop the whole group (also engine processes whose leader died)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
            for _ in range(30):  # children exit after the API server
                os.killpg(self.proc.pid, 0)
                time.sleep(1)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        # Only our own record: another server may have replaced it since.
        with contextlib.suppress(OSError):
            if self.record.read_text().split()[:1] == [str(self.proc.pid)]:
                self.record.unlink()
        self.proc = None


def exit_on_sigterm() -> None:
    """Turn SIGTERM (e.g. from `timeout`) into SystemExit, so `finally` blocks
    stop the server before the command ends."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


#: A vLLM log line's prefix: level, date, time, [file:line].
_LOG_PREFIX = re.compile(r"(ERROR|CRITICAL) \S+ \S+ \[[^\]]*\] ?")


def failure_reason(log: Path, lines: int = 400) -> str:
    """The error lines at the end of a server log (exception messages, the
    plugin's and vLLM's refusals), without the log prefixes and warnings:
    the first exception message (the root cause: a worker's error comes
    before the engine's and the API server's re-raises of it), then the last
    three error lines."""
    tail = log.read_text(errors="replace").splitlines()[-lines:]
    errors, exceptions = [], []
    for line in tail:
        text = re.sub(r"^\([\w.-]+ pid=\d+\)\s*", "", line).strip()
        if re.match(r"(INFO|WARNING|DEBUG) ", text) or text.startswith("File "):
            continue
        prefix = _LOG_PREFIX.match(text)
        body = text[prefix.end() :] if prefix else text
        if prefix and (body[:1].isspace() or body.startswith(("File ", "Traceback"))):
            continue  # a logged traceback's frames
        if re.match(r"[\w.]+(Error|Exception)\b", body):
            exceptions.append(body)
        if re.match(r"([\w.]+(Error|Exception)\b|Value error|ERROR )", text):
            errors.append(text)
    reason = " | ".join(dict.fromkeys(exceptions[:1] + errors[-3:]))
    return reason[:1500] if reason else " | ".join(tail[-3:])[:1500]


# -- benchmark client ----------------------------------------------------------


class Bench:
    """`vllm bench serve`, in this process (one import for all points) or as
    a subprocess per point (``--bench-subprocess``)."""

    def __init__(self, subprocess_mode: bool):
        self.subprocess_mode = subprocess_mode
        if not subprocess_mode:
            from vllm.benchmarks.serve import add_cli_args, main
            from vllm.plugins import load_general_plugins
            from vllm.utils.argparse_utils import FlexibleArgumentParser

            # The client reads the checkpoint's config.json for its tokenizer:
            # with the plugin's config registered, vLLM parses it instead of
            # logging "Error parsing config ... model type `spark2_5`".
            load_general_plugins()

            parser = FlexibleArgumentParser()
            add_cli_args(parser)
            self._parser, self._main = parser, main

    def run(self, argv: list[str], result: Path | None) -> dict[str, Any]:
        if result is not None:
            argv += [
                "--save-result",
                "--result-dir",
                str(result.parent),
                "--result-filename",
                result.name,
            ]
        if self.subprocess_mode:
            cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve"]
            subprocess.run(cmd + argv, check=True)
            return json.loads(result.read_text()) if result else {}
        return self._main(self._parser.parse_args(argv))


def bench_argv(
    model: str,
    base: str,
    shape: tuple[int, int],
    c: int,
    prompts: int,
    seed: int,
    temperature: float,
    extra: list[str],
) -> list[str]:
    return [
        "--backend",
        "vllm",
        "--base-url",
        base,
        "--model",
        model,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(shape[0]),
        "--random-output-len",
        str(shape[1]),
        "--random-range-ratio",
        "0",
        "--ignore-eos",
        "--num-prompts",
        str(prompts),
        "--max-concurrency",
        str(c),
        "--request-rate",
        "inf",
        "--temperature",
        str(temperature),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--seed",
        str(seed),
        "--disable-tqdm",
        *extra,
    ]


# -- the matrix ----------------------------------------------------------------


def point_name(mode: str, shape: str, c: int) -> str:
    return f"{mode}__{shape}__c{c}"


def _read_config(path: Path) -> dict[str, Any]:
    return json.loads((path / "config.json").read_text())


def _num_spec_tokens(cfg: dict[str, Any], given: int | None) -> int | None:
    if given:
        return given
    return cfg.get("dspark_block_size") or cfg.get("block_size")


def header(args: argparse.Namespace, cfg: dict[str, Any]) -> dict[str, Any]:
    info: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "checkpoint": str(args.checkpoint),
    }
    try:
        from machine import describe

        info["machine"] = describe().removeprefix("machine: ")
    except Exception as exc:  # noqa: BLE001 - the record is best effort
        info["machine"] = f"unknown ({exc})"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        info["gpu"] = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,memory.total,driver_version",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    with contextlib.suppress(Exception):
        import vllm_spark2_5_plugin

        info["plugin"] = vllm_spark2_5_plugin.__version__
    keys = (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "vocab_size",
        "sliding_window",
        "dspark_block_size",
        "dspark_markov_head_type",
        "dspark_target_layer_ids",
        "dspark_layer_types",
    )
    info["model"] = {k: cfg[k] for k in keys if k in cfg}
    for name in ("make_checkpoint.json", "train_dspark.json"):
        file = Path(args.checkpoint) / name
        if file.exists():
            data = json.loads(file.read_text())
            if name == "train_dspark.json":
                acceptance = data.get("acceptance") or {}
                data = {
                    "offline_acceptance_length": {
                        when: (acceptance.get(when) or {}).get("mean_acceptance_length")
                        for when in ("before", "after")
                    },
                    **{
                        k: data.get(k)
                        for k in (
                            "steps",
                            "num_train_sequences",
                            "sequence_length",
                            "ms_per_step",
                            "teacher_forced_accept_len",
                            "dtype",
                        )
                    },
                }
            info[name.removesuffix(".json")] = data
    return info


def server_args(args: argparse.Namespace, mode: str, num_spec: int | None) -> list:
    out = [
        "--max-num-seqs",
        str(args.max_num_seqs),
        "--max-model-len",
        str(args.max_model_len),
        "--dtype",
        args.dtype,
        "--seed",
        "0",
        "--disable-uvicorn-access-log",
    ]
    if not args.prefix_caching:
        out.append("--no-enable-prefix-caching")
    if mode == "dspark":
        spec: dict[str, Any] = {"method": "dspark", "num_speculative_tokens": num_spec}
        if args.temperature > 0:
            spec["draft_sample_method"] = "probabilistic"
        out += ["--speculative-config", json.dumps(spec)]
    return out + shlex.split(args.serve_args)


#: Seed offset between repeats of a point (points differ by 1000 * c + input).
REPEAT_SEED_STEP = 7919

#: Per-repeat figures kept in a point's ``repeats`` list.
REPEAT_KEYS = ("output_throughput", "mean_tpot_ms", "mean_ttft_ms", "duration")


def measure(
    bench: Bench, server: Server, log: Path, argv: list[str], raw: Path
) -> dict[str, Any]:
    """One `vllm bench serve` run against ``server``: status, the result's
    scalar fields and the server's counter deltas over the run."""
    before = scrape_metrics(server.base)
    run: dict[str, Any] = {}
    try:
        result = bench.run(argv, raw)
        run["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - keep the other points going
        result = {}
        run.update(status="error", error=repr(exc)[:1000])
        if server.proc is not None and server.proc.poll() is not None:
            run["error"] += f"; server died: {failure_reason(log)}"
    keep = {k: v for k, v in result.items() if not isinstance(v, list | dict)}
    keep["spec_decode_per_position_acceptance_rates"] = result.get(
        "spec_decode_per_position_acceptance_rates"
    )
    run["result"] = keep
    run["server_metrics"] = metric_deltas(before, scrape_metrics(server.base))
    return run


def pick_median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fields of a point from its repeats: the run with the median output
    throughput (the lower middle one for an even count) stands for the point,
    and ``repeats`` keeps every run's main figures. Any failed run makes the
    point failed (it is that run)."""
    failed = [r for r in runs if r["status"] != "ok"]
    if failed:
        return dict(failed[0])
    ordered = sorted(runs, key=lambda r: r["result"].get("output_throughput", 0.0))
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    if len(runs) > 1:
        chosen["repeats"] = [
            {
                **{k: r["result"].get(k) for k in REPEAT_KEYS},
                "engine_steps": r["server_metrics"].get("engine_steps"),
                "acceptance_length": r["server_metrics"].get("acceptance_length"),
            }
            for r in runs
        ]
    return chosen


def repeat_range(base: dict[str, Any] | None, spec: dict[str, Any] | None) -> str:
    """DSpark / baseline over the repeats: worst (slowest DSpark run over the
    fastest baseline run) to best; "–" unless both points were repeated."""
    if not (base and spec and base.get("repeats") and spec.get("repeats")):
        return "–"
    b = [x["output_throughput"] for x in base["repeats"] if x["output_throughput"]]
    s = [x["output_throughput"] for x in spec["repeats"] if x["output_throughput"]]
    if not (b and s):
        return "–"
    return f"{min(s) / max(b):.2f}–{max(s) / min(b):.2f}×"


def run_mode(
    args: argparse.Namespace,
    mode: str,
    model: Path,
    todo: list[tuple[str, int, int]],
    work: Path,
    bench: Bench,
    cfg: dict[str, Any],
    report,
) -> dict[str, Any]:
    """One server for all points of ``mode``; returns the mode's status."""
    num_spec = _num_spec_tokens(cfg, args.num_spec_tokens)
    if mode == "dspark" and not num_spec:
        return {"status": "refused", "reason": "the checkpoint has no DSpark fields"}
    env = dict(os.environ)
    for item in args.env:
        key, _, value = item.partition("=")
        env[key] = value
    port = _free_port(args.port)
    log = work / f"server-{mode}.log"
    server = Server(str(model), server_args(args, mode, num_spec), log, env, port)
    print(f"== {mode}: starting vllm serve {model} (log {log})", flush=True)
    error = server.start(args.startup_timeout)
    status: dict[str, Any] = {"model": str(model), "server_cmd": server.cmd[3:]}
    if error:
        server.stop()
        status.update(status="refused", reason=f"{error}: {failure_reason(log)}")
        print(f"== {mode}: REFUSED: {status['reason']}", flush=True)
        return status
    status["startup_s"] = round(server.startup_s or 0.0, 1)
    print(f"== {mode}: healthy after {status['startup_s']} s", flush=True)
    try:
        if args.warmups:
            start = time.perf_counter()
            warm = bench_argv(
                str(model),
                server.base,
                (min(128, args.shape_table[todo[0][0]][0]), 16),
                args.warmups,
                args.warmups,
                12345,
                args.temperature,
                shlex.split(args.bench_args),
            )
            with contextlib.suppress(Exception):
                bench.run(warm, None)
            status["warmup_s"] = round(time.perf_counter() - start, 1)
        for shape_name, c, prompts in todo:
            shape = args.shape_table[shape_name]
            name = point_name(mode, shape_name, c)
            est = args.repeats * estimate(cfg, mode, shape, c, prompts)
            left = args.deadline - time.perf_counter()
            if left < est:
                print(f"== {name}: left for a later command ({left:.0f} s left)")
                status["skipped"] = status.get("skipped", []) + [name]
                continue
            (work / "raw").mkdir(parents=True, exist_ok=True)
            runs_txt = f" x {args.repeats} runs" if args.repeats > 1 else ""
            print(
                f"== {name}: {prompts} prompts{runs_txt}, estimated {est:.0f} s",
                flush=True,
            )
            start = time.perf_counter()
            point: dict[str, Any] = {
                "mode": mode,
                "shape": shape_name,
                "input_len": shape[0],
                "output_len": shape[1],
                "concurrency": c,
                "num_prompts": prompts,
                "estimated_s": round(est, 1),
            }
            runs = []
            for r in range(args.repeats):
                # Fresh prompts per point and per repeat.
                seed = args.seed + 1000 * c + shape[0] + REPEAT_SEED_STEP * r
                argv = bench_argv(
                    str(model),
                    server.base,
                    shape,
                    c,
                    prompts,
                    seed,
                    args.temperature,
                    shlex.split(args.bench_args),
                )
                raw = work / "raw" / f"{name}{f'-r{r}' if r else ''}.json"
                runs.append(measure(bench, server, log, argv, raw))
                if runs[-1]["status"] != "ok":
                    break
            point.update(pick_median(runs))
            point["wall_s"] = round(time.perf_counter() - start, 1)
            (work / "points").mkdir(exist_ok=True)
            (work / "points" / f"{name}.json").write_text(json.dumps(point, indent=1))
            spread = ""
            if len(point.get("repeats", [])) > 1:
                tps = [x["output_throughput"] for x in point["repeats"]]
                spread = f" (median of {len(tps)}: {min(tps):,.0f}-{max(tps):,.0f})"
            keep = point["result"]
            print(
                f"== {name}: {point['status']}, {point['wall_s']} s, output "
                f"{keep.get('output_throughput', 0):,.0f} tok/s{spread}, TPOT "
                f"{keep.get('mean_tpot_ms', 0):.2f} ms",
                flush=True,
            )
            report()
            if server.proc is not None and server.proc.poll() is not None:
                status.update(status="died", reason=failure_reason(log))
                return status
    finally:
        server.stop()
    status["status"] = "ok"
    return status


# -- report --------------------------------------------------------------------


def _value(point: dict[str, Any] | None, key: str) -> float | None:
    if not point or point.get("status") != "ok":
        return None
    result, server = point["result"], point["server_metrics"]
    if key in ("acceptance_length", "acceptance_rate"):
        value = server.get(key)
        if value is None:
            value = result.get(f"spec_decode_{key}")
            if key == "acceptance_rate" and value is not None:
                value /= 100.0  # vLLM's bench reports a percentage
        return value
    if key == "engine_steps":
        return server.get("engine_steps") or None
    if key == "engine_step_ms":
        steps = server.get("engine_steps")
        return 1e3 * result["duration"] / steps if steps else None
    if key == "tokens_per_step":
        steps = server.get("engine_steps")
        return server.get("generation_tokens", 0) / steps if steps else None
    if key == "preemptions":
        return server.get("preemptions")
    return result.get(key)


def _fmt(value: float | None, fmt: str) -> str:
    return "–" if value is None else fmt.format(value)


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if not a or not b else f"{a / b:.2f}×"


def load_points(work: Path, merge: list[Path]) -> dict[str, dict[str, Any]]:
    points: dict[str, dict[str, Any]] = {}
    for file in merge:
        for point in json.loads(file.read_text()).get("points", []):
            points[point_name(point["mode"], point["shape"], point["concurrency"])] = (
                point
            )
    for file in sorted((work / "points").glob("*.json")):
        point = json.loads(file.read_text())
        points[file.stem] = point
    return points


def write_report(
    args: argparse.Namespace,
    info: dict[str, Any],
    statuses: dict[str, Any],
    work: Path,
) -> None:
    points = load_points(work, args.merge)
    report = args.report_dir
    report.mkdir(parents=True, exist_ok=True)
    data = {
        "header": info,
        "modes": statuses,
        "published": PUBLISHED,
        "points": sorted(
            points.values(), key=lambda p: (p["shape"], p["concurrency"], p["mode"])
        ),
    }
    (report / "matrix.json").write_text(json.dumps(data, indent=1) + "\n")

    def get(mode: str, shape: str, c: int) -> dict[str, Any] | None:
        return points.get(point_name(mode, shape, c))

    shapes = sorted({p["shape"] for p in points.values()}, key=_shape_order)
    concs = sorted({p["concurrency"] for p in points.values()})
    modes = [m for m in MODES if any(p["mode"] == m for p in points.values())]
    lines = [f"# Serving matrix: `{info['checkpoint']}`", ""]
    for key in ("date", "machine", "gpu", "plugin", "model"):
        if key in info:
            lines.append(f"* {key}: {info[key]}")
    for key in ("make_checkpoint", "train_dspark"):
        if key in info:
            lines.append(f"* {key}: `{json.dumps(info[key])[:600]}`")
    for mode, status in statuses.items():
        detail = status.get("reason") or f"start-up {status.get('startup_s')} s"
        lines.append(f"* mode {mode}: {status.get('status')} ({detail})")
    lines += [
        "",
        "Greedy (temperature 0), `--ignore-eos`, random prompts, all requests sent "
        "at once under `--max-concurrency`; output tok/s from `vllm bench serve` "
        "(with `--repeats N`: the run with the median output tok/s; 'over "
        "repeats' spans the slowest DSpark run over the fastest baseline run to "
        "the reverse); DSpark step / base step = the modes' mean engine steps "
        "(prefill steps included); "
        "acceptance length = 1 + accepted / drafts from the server's /metrics; "
        "engine step = benchmark duration / engine iterations (/metrics).",
        "",
        "## Summary",
        "",
        "| shape (in/out) | c | baseline tok/s | DSpark tok/s | DSpark / baseline "
        "| over repeats | goal | accept len | TPOT base / DSpark (ms) | DSpark "
        "step / base step | in-tree "
        f"tok/s | Spark2_5 / in-tree (goal ≥ {IN_TREE_GOAL}×) |",
        "|---|---:|---:|---:|---:|---:|---|---:|---|---:|---:|---:|",
    ]
    goals = {1: 2.0, 64: 1.2}
    for shape in shapes:
        for c in concs:
            base, spec, tree = (get(m, shape, c) for m in MODES)
            if not (base or spec or tree):
                continue
            b = _value(base, "output_throughput")
            s = _value(spec, "output_throughput")
            t = _value(tree, "output_throughput")
            goal = goals.get(c)
            goal_txt = "–"
            if goal:
                met = None if not (b and s) else s / b >= goal
                verdict = {None: "(–)", True: "met", False: "missed"}[met]
                goal_txt = f"≥ {goal}× {verdict}"
            tree_goal = ""
            if b and t:
                tree_goal = " met" if b / t >= IN_TREE_GOAL else " missed"
            ins = SHAPES.get(shape) or args.shape_table.get(shape, ("?", "?"))
            tpot = (
                f"{_fmt(_value(base, 'mean_tpot_ms'), '{:.2f}')} / "
                f"{_fmt(_value(spec, 'mean_tpot_ms'), '{:.2f}')}"
            )
            # What a DSpark step costs in baseline steps: the speed-up is the
            # acceptance length over this (for decode-only steps).
            step_ratio = _ratio(
                _value(spec, "engine_step_ms"), _value(base, "engine_step_ms")
            )
            lines.append(
                f"| {shape} ({ins[0]}/{ins[1]}) | {c} | {_fmt(b, '{:,.0f}')} "
                f"| {_fmt(s, '{:,.0f}')} | {_ratio(s, b)} | {repeat_range(base, spec)} "
                f"| {goal_txt} "
                f"| {_fmt(_value(spec, 'acceptance_length'), '{:.2f}')} | {tpot} "
                f"| {step_ratio} "
                f"| {_fmt(t, '{:,.0f}')} | {_ratio(b, t)}{tree_goal} |"
            )
    for shape in shapes:
        for c in concs:
            cols = [(m, get(m, shape, c)) for m in modes]
            if not any(p for _, p in cols):
                continue
            published = shape == "published" and c == 500
            names = [m for m, _ in cols] + (["published"] if published else [])
            lines += [
                "",
                f"## {shape}, concurrency {c}",
                "",
                "| metric | " + " | ".join(names) + " |",
                "|---|" + "---:|" * len(names),
            ]
            for label, key, fmt in ROWS:
                cells = [_fmt(_value(p, key), fmt) for _, p in cols]
                if published:
                    cells.append(_fmt(PUBLISHED.get(key), fmt))
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
            for m, p in cols:
                if p and p.get("status") != "ok":
                    lines.append(f"\n{m}: {p.get('status')}: {p.get('error')}")
    (report / "matrix.md").write_text("\n".join(lines) + "\n")


def _shape_order(name: str) -> tuple[int, str]:
    return (list(SHAPES).index(name) if name in SHAPES else len(SHAPES), name)


# -- command -------------------------------------------------------------------


def add_passthrough_arguments(p: argparse.ArgumentParser) -> None:
    """``--serve-args`` and ``--bench-args`` (also profile_decode.py's)."""
    p.add_argument(
        "--serve-args",
        default="",
        help="extra `vllm serve` flags, one string; a value that starts with "
        "`--` only as --serve-args=--flag or --serve-args='--a 1 --b'",
    )
    p.add_argument(
        "--bench-args",
        default="",
        help="extra `vllm bench serve` flags, one string; a value that starts "
        "with `--` only as --bench-args=--flag",
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("checkpoint", type=Path, help="Spark2_5 checkpoint (with draft)")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/serving-matrix"))
    p.add_argument(
        "--report-dir",
        type=Path,
        help="where matrix.json, matrix.md and servers.log go (default: work dir)",
    )
    p.add_argument("--modes", nargs="+", choices=MODES, default=["baseline", "dspark"])
    p.add_argument(
        "--shapes",
        nargs="+",
        default=list(SHAPES),
        help=f"named shapes {list(SHAPES)} or NAME=IN:OUT",
    )
    p.add_argument("--concurrencies", nargs="+", type=int, default=[1, 8, 64, 500])
    p.add_argument("--num-spec-tokens", type=int, help="default: dspark_block_size")
    p.add_argument("--in-tree-arch", choices=("llama", "gemma3"), default="llama")
    p.add_argument(
        "--in-tree-checkpoint",
        type=Path,
        help="default: CKPT-ARCH beside CKPT, written from CKPT if missing",
    )
    p.add_argument(
        "--point-seconds", type=float, default=20.0, help="target length of a point"
    )
    p.add_argument("--max-prompts", type=int, default=2000)
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs per point on the same server (fresh prompts each); the "
        "report takes the median and shows the spread",
    )
    p.add_argument(
        "--num-prompts", type=int, help="the same for every point (toy runs)"
    )
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmups", type=int, default=8, help="warm-up requests (0: none)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-num-seqs", type=int, default=512)
    p.add_argument(
        "--max-model-len",
        type=int,
        help="default: 4096, or max_position_embeddings if smaller",
    )
    p.add_argument("--dtype", default="auto")
    p.add_argument(
        "--prefix-caching",
        action="store_true",
        help="keep vLLM's prefix caching on (off by default: random prompts can "
        "repeat across points and would hit the cache)",
    )
    add_passthrough_arguments(p)
    p.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="server env"
    )
    p.add_argument("--startup-timeout", type=float, default=900.0)
    p.add_argument(
        "--time-budget",
        type=float,
        help="seconds: start no point whose estimate would end past this "
        "(the rest are left for a later command)",
    )
    p.add_argument("--bench-subprocess", action="store_true")
    p.add_argument("--force", action="store_true", help="re-run points already done")
    p.add_argument(
        "--merge",
        nargs="*",
        type=Path,
        default=[],
        help="earlier matrix.json files whose points join the report",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    args = p.parse_args(argv)
    # Every input is checked here, before a folder is made or a server starts.
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, got {args.repeats}")
    if any(c < 1 for c in args.concurrencies):
        p.error(f"--concurrencies must be at least 1, got {args.concurrencies}")
    if args.num_prompts is not None and args.num_prompts < 1:
        p.error(f"--num-prompts must be at least 1, got {args.num_prompts}")
    if args.max_prompts < 1:
        p.error(f"--max-prompts must be at least 1, got {args.max_prompts}")
    for option in ("point_seconds", "startup_timeout", "time_budget"):
        value = getattr(args, option)
        if value is not None and not value > 0:
            p.error(f"--{option.replace('_', '-')} must be above 0, got {value}")
    if args.warmups < 0:
        p.error(f"--warmups must be at least 0, got {args.warmups}")
    if not (args.checkpoint / "config.json").is_file():
        p.error(f"checkpoint {args.checkpoint} has no config.json")
    try:
        config = _read_config(args.checkpoint)
    except (OSError, ValueError) as e:
        p.error(f"checkpoint {args.checkpoint}: config.json cannot be read ({e})")
    if not isinstance(config, dict):
        p.error(f"checkpoint {args.checkpoint}: config.json is not a JSON object")
    existing = next(d for d in (args.work_dir, *args.work_dir.parents) if d.exists())
    if not existing.is_dir():
        p.error(f"--work-dir {args.work_dir}: {existing} is a file, not a directory")
    for file in args.merge:
        try:
            points = json.loads(file.read_text()).get("points")
        except (OSError, ValueError, AttributeError) as e:
            p.error(f"--merge {file}: not a matrix.json ({type(e).__name__}: {e})")
        if not isinstance(points, list):
            p.error(f"--merge {file}: not a matrix.json (no list of points)")
    args.report_dir = args.report_dir or args.work_dir
    table = dict(SHAPES)
    names = []
    for item in args.shapes:
        name, sep, dims = item.partition("=")
        if sep:
            n_in, colon, n_out = dims.partition(":")
            if not (name and colon and n_in.isdigit() and n_out.isdigit()):
                p.error(f"--shapes {item}: use NAME=IN:OUT (token counts)")
            if int(n_in) < 1 or int(n_out) < 1:
                p.error(f"--shapes {item}: token counts must be at least 1")
            table[name] = (int(n_in), int(n_out))
        elif name not in table:
            p.error(f"unknown shape {name!r}; use one of {list(SHAPES)} or NAME=IN:OUT")
        names.append(name)
    args.shape_table, args.shape_names = table, names
    return args


#: Log lines kept from the middle of a server log (vLLM's warnings say which
#: backend or mode a server fell back to).
_NOTABLE = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b|Traceback")


def log_excerpt(lines: list[str], head: int = 5, tail: int = 60, middle: int = 200):
    """The first ``head`` and last ``tail`` lines of a log, with at most
    ``middle`` warning and error lines from between them."""
    if len(lines) <= head + tail:
        return list(lines)
    between = [line for line in lines[head:-tail] if _NOTABLE.search(line)]
    return lines[:head] + ["...", *between[:middle], "..."] + lines[-tail:]


def main(argv: list[str] | None = None) -> int:
    start_time = time.perf_counter()
    exit_on_sigterm()
    args = parse_args(argv)
    args.deadline = start_time + (args.time_budget or float("inf"))
    work = args.work_dir
    cfg = _read_config(args.checkpoint)
    if args.max_model_len is None:
        args.max_model_len = min(4096, cfg.get("max_position_embeddings", 4096))

    status_file = work / "modes.json"
    statuses: dict[str, Any] = (
        json.loads(status_file.read_text()) if status_file.exists() else {}
    )
    done = load_points(work, [])
    plan: dict[str, list[tuple[str, int, int]]] = {}
    total = 0.0
    print(f"plan for {args.checkpoint} (estimates are rough H200 guesses):")
    for mode in args.modes:
        todo = []
        for shape_name in args.shape_names:
            shape = args.shape_table[shape_name]
            for c in args.concurrencies:
                name = point_name(mode, shape_name, c)
                if not args.force and name in done and done[name].get("status") == "ok":
                    print(f"  {name}: done, skipped")
                    continue
                prompts = args.num_prompts or num_prompts_for(
                    cfg, shape, c, args.point_seconds, args.max_prompts
                )
                todo.append((shape_name, c, prompts))
                est = args.repeats * estimate(cfg, mode, shape, c, prompts)
                total += est
                print(f"  {name}: {prompts} prompts, ~{est:.0f} s")
        if todo:
            plan[mode] = todo
            total += EST_SERVER_START_S
            print(f"  {mode}: + ~{EST_SERVER_START_S:.0f} s server start-up")
    print(f"estimated total: ~{total / 60:.1f} min", flush=True)
    if args.dry_run:
        return 0
    work.mkdir(parents=True, exist_ok=True)

    info = header(args, cfg)

    def report() -> None:
        status_file.write_text(json.dumps(statuses, indent=1))
        write_report(args, info, statuses, work)

    bench = Bench(args.bench_subprocess) if plan else None
    for mode, todo in plan.items():
        if args.deadline - time.perf_counter() < EST_SERVER_START_S:
            print(f"== {mode}: left for a later command (time budget)")
            continue
        model = args.checkpoint
        if mode == "intree":
            model = args.in_tree_checkpoint or args.checkpoint.with_name(
                f"{args.checkpoint.name}-{args.in_tree_arch}"
            )
            if not (model / "config.json").exists():
                from vllm_spark2_5_plugin.tools.in_tree_checkpoint import write_in_tree

                print(f"== intree: writing {args.in_tree_arch} copy to {model}")
                write_in_tree(args.checkpoint, model, args.in_tree_arch)
        start = time.perf_counter()
        statuses[mode] = run_mode(args, mode, model, todo, work, bench, cfg, report)
        statuses[mode]["wall_s"] = round(time.perf_counter() - start, 1)
        report()
        print(f"== {mode}: {statuses[mode]['status']} in {statuses[mode]['wall_s']} s")
    report()
    # An excerpt of each server log, for the record (the logs themselves stay
    # in the work dir).
    with open(args.report_dir / "servers.log", "w") as out:
        for log in sorted(work.glob("server-*.log")):
            lines = log.read_text(errors="replace").splitlines()
            out.write(
                f"===== {log.name} ({len(lines)} lines; first 5, warnings and "
                "errors between, last 60)\n"
            )
            out.write("\n".join(log_excerpt(lines)) + "\n")
    print(f"report: {args.report_dir / 'matrix.md'}")
    print((args.report_dir / "matrix.md").read_text())
    ran = [m for m in plan if m in statuses]
    failed = [m for m in ran if statuses[m].get("status") != "ok"]
    return 1 if failed and len(failed) == len(ran) else 0


if __name__ == "__main__":
    sys.exit(main())
