# SPDX-License-Identifier: Apache-2.0
"""Where a decode step's time goes at high concurrency: GPU, engine CPU
(scheduler, model-runner input preparation, output update), detokenization,
API server.

Two phases over the same workload (``--concurrency`` requests of random
prompts, ``--input-len`` in, ``--output-len`` out, greedy, ``--ignore-eos``):

* **offline** (no API server): a fresh process runs ``vllm.LLM.generate`` with
  the engine in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, uni executor,
  the server's batching limits and CUDA graphs). The scheduler, the executor's
  ``execute_model``/``sample_tokens``, the wait for the GPU's result,
  ``update_from_output`` and the output processor (detokenization) are wrapped
  with timers; a model step ends at each ``update_from_output``. Steady decode
  steps (every request running, no prefill in the batch) give the step period
  and its CPU split. ``torch.profiler`` records ``--profile-steps`` of those
  steps; the union of the device's busy intervals (kernels and copies) per
  step is the GPU time. While it records, ``execute_model`` (the target's
  forward) and ``sample_tokens`` (sampling, and with DSpark the rejection
  and the draft's proposal) run inside ``record_function`` ranges, and each
  kernel is charged to the range whose host call launched it (matched by
  the profiler's correlation ids): the GPU time of each part of a step.
* **server**: ``vllm serve`` with the same settings, ``vllm bench serve`` at the
  same concurrency (one wave), while a sampler reads /metrics (engine
  iterations, tokens, running requests), the CPU time of the API-server and
  engine-core processes, and the GPU's utilization (NVML). The steady decode
  window gives the server's engine step; the client's TPOT/ITL include the API
  server's streaming.

Writes ``profile.json`` (both phases and a one-line ``answer``) to ``--out``:

    python benchmarks/profile_decode.py CKPT --out DIR [--dspark] \\
        [--concurrency 500] [--input-len 1525] [--output-len 400]
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import multiprocessing
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _round(value: Any, digits: int = 3) -> Any:
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: _round(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [_round(v, digits) for v in value]
    return value


def _complete(events: list[dict[str, Any]], *cats: str) -> list[dict[str, Any]]:
    """The complete ("X") events of the categories ``cats``."""
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in cats]


def _trace_events(
    trace_file: Path, device: bool, events: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The complete events of a Chrome trace: GPU kernels, copies and memsets,
    or CPU ops with ``device=False``. ``events``: the trace's events when the
    caller has read them already."""
    if events is None:
        events = _read_events(trace_file)
    cats = ("kernel", "gpu_memcpy", "gpu_memset") if device else ("cpu_op",)
    return _complete(events, *cats)


def _read_events(trace_file: Path) -> list[dict[str, Any]]:
    return json.loads(trace_file.read_text()).get("traceEvents", [])


def busy_ms(
    trace_file: Path, device: bool = True, events: list[dict[str, Any]] | None = None
) -> tuple[float, int]:
    """Union of the busy intervals of :func:`_trace_events`, in ms, and the
    event count (``events``: as for :func:`_trace_events`)."""
    spans = [
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in _trace_events(trace_file, device, events)
    ]
    return _union_ms(spans), len(spans)


#: Prefix of the ``record_function`` ranges around the timed executor calls.
PHASE_PREFIX = "spark25::"
#: The executor calls whose GPU work is attributed (see ``phase_busy_ms``).
PHASES = ("execute_model", "sample_tokens")


def _union_ms(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total / 1e3


def phase_busy_ms(
    trace_file: Path, device: bool = True, events: list[dict[str, Any]] | None = None
) -> dict[str, float]:
    """Busy ms of :func:`_trace_events` per phase: the ``PHASE_PREFIX`` range
    (a ``record_function`` on the host) that was open when the event was
    issued, ``"other"`` when none was. A GPU event is matched to its launch
    (a CUDA runtime or driver call with the same correlation id) and the
    launch's time decides; a CPU op's own start time does. Each phase is
    the union of its events' intervals (``events``: as for
    :func:`_trace_events`)."""
    if events is None:
        events = _read_events(trace_file)
    ranges = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e["name"])
        for e in _complete(events, "user_annotation")
        if str(e.get("name", "")).startswith(PHASE_PREFIX)
    )
    starts = [r[0] for r in ranges]
    launches = {
        (e.get("args") or {}).get("correlation"): float(e["ts"])
        for e in _complete(events, "cuda_runtime", "cuda_driver")
    }

    def phase_at(ts: float | None) -> str:
        if ts is None:
            return "other"
        i = bisect.bisect_right(starts, ts) - 1
        # The executor calls run one after another, so at most the last
        # range starting before ``ts`` can hold it.
        if i >= 0 and ts <= ranges[i][1]:
            return ranges[i][2][len(PHASE_PREFIX) :]
        return "other"

    spans: dict[str, list[tuple[float, float]]] = {}
    for e in _trace_events(trace_file, device, events):
        if device:
            issued = launches.get((e.get("args") or {}).get("correlation"))
        else:
            issued = float(e["ts"])
        start = float(e["ts"])
        spans.setdefault(phase_at(issued), []).append(
            (start, start + float(e.get("dur", 0)))
        )
    return {name: _union_ms(s) for name, s in spans.items()}


def top_kernels(
    trace_file: Path,
    steps: int,
    device: bool = True,
    top: int = 25,
    events: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The ``top`` event names by total duration: ms and calls per step
    (``events``: as for :func:`_trace_events`)."""
    totals: dict[str, list[float]] = {}
    for e in _trace_events(trace_file, device, events):
        entry = totals.setdefault(str(e.get("name", "?"))[:160], [0.0, 0])
        entry[0] += float(e.get("dur", 0))
        entry[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]
    return [
        {"name": name, "ms_per_step": dur / 1e3 / steps, "calls_per_step": n / steps}
        for name, (dur, n) in ranked
    ]


# -- offline phase (runs in a child process) -----------------------------------


class Recorder:
    """Timers around engine methods; a model step ends at update_from_output."""

    def __init__(self, concurrency: int, spec_tokens: int, skip: int, window: int):
        self.calls: list[tuple[str, float, float]] = []
        self.sched: dict[int, tuple[int, int, int]] = {}
        self.steps: list[dict[str, Any]] = []
        self.tokens: list[tuple[float, int]] = []
        self.concurrency, self.spec_tokens = concurrency, spec_tokens
        self.skip, self.window = skip, window
        self.steady = 0
        self.profiler = None
        self.profile_steps: list[int] = []
        self.enabled = False
        self.t0 = 0.0  # when the recorded generate() began
        self.activity = "cuda"

    def _timed(self, label: str, fn, after=None):
        def wrapper(*args, **kwargs):
            if not self.enabled:
                return fn(*args, **kwargs)
            start = time.perf_counter()
            if label in PHASES and self._profiling():
                import torch

                with torch.profiler.record_function(PHASE_PREFIX + label):
                    out = fn(*args, **kwargs)
            else:
                out = fn(*args, **kwargs)
            end = time.perf_counter()
            self.calls.append((label, start, end))
            if after is not None:
                after(args, out, start, end)
            return out

        return wrapper

    def install(self, llm) -> None:
        engine = llm.llm_engine
        core = engine.engine_core.engine_core  # InprocClient -> EngineCore
        sched, executor = core.scheduler, core.model_executor

        def on_schedule(args, out, start, end):
            reqs = len(out.num_scheduled_tokens)
            self.sched[id(out)] = (
                reqs,
                out.total_num_scheduled_tokens,
                len(out.scheduled_new_reqs),
            )

        def on_update(args, out, start, end):
            reqs, tokens, new = self.sched.pop(id(args[0]), (0, 0, 0))
            steady = (
                reqs >= 0.9 * self.concurrency
                and new == 0
                and tokens <= reqs * (1 + self.spec_tokens)
            )
            index = len(self.steps)
            self.steps.append(
                {
                    "end": end,
                    "reqs": reqs,
                    "tokens": tokens,
                    "new": new,
                    "steady": steady,
                }
            )
            if not steady:
                return
            self.steady += 1
            try:
                if self.steady == self.skip and self.profiler is None:
                    self._start_profiler()
                elif self.profiler is not None and not hasattr(self, "profile_end"):
                    self.profile_steps.append(index)
                    if len(self.profile_steps) >= self.window:
                        self._stop_profiler()
            except Exception as exc:  # noqa: BLE001 - timings go on without it
                self.profiler_error = repr(exc)[:500]
                self.profile_end = time.perf_counter()

        def wrap_future(args, out, start, end):
            result = getattr(out, "result", None)
            if callable(result):
                out.result = self._timed("wait", result)

        sched.schedule = self._timed("schedule", sched.schedule, on_schedule)
        sched.update_from_output = self._timed(
            "update_from_output", sched.update_from_output, on_update
        )
        executor.execute_model = self._timed(
            "execute_model", executor.execute_model, wrap_future
        )
        executor.sample_tokens = self._timed(
            "sample_tokens", executor.sample_tokens, wrap_future
        )
        core.step_fn = self._timed("engine_core_step", core.step_fn)

        def on_outputs(args, out, start, end):
            outputs = args[0] if args else []
            self.tokens.append((end, sum(len(o.new_token_ids) for o in outputs)))

        engine.output_processor.process_outputs = self._timed(
            "process_outputs", engine.output_processor.process_outputs, on_outputs
        )

    def _profiling(self) -> bool:
        return self.profiler is not None and not hasattr(self, "profile_end")

    def _start_profiler(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if self.activity == "cuda" and torch.cuda.is_available():
            # The CPU activity brings the record_function ranges that
            # phase_busy_ms charges the kernels to.
            activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        else:
            self.activity = "cpu"
        self.profiler = profile(activities=activities)
        self.profiler.__enter__()
        self.profile_start = time.perf_counter()

    def _stop_profiler(self) -> None:
        self.profile_end = time.perf_counter()
        self.profiler.__exit__(None, None, None)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model_steps": len(self.steps)}
        profiled = set(self.profile_steps)
        # Steady steps outside the profiled window (and one step either side).
        margin = {i + d for i in profiled for d in (-1, 1)}
        steady = [
            i
            for i, step in enumerate(self.steps)
            if i > 0 and step["steady"] and i not in profiled and i not in margin
        ]
        rows = self._rows(steady)
        out["steady_steps"] = len(rows)
        if rows:
            out["median_per_step_ms"] = self._median_breakdown(rows)
            out["mean_period_ms"] = statistics.fmean(r["period_ms"] for r in rows)
        # Steps that admit new requests (their prefill, and with DSpark the
        # draft's context K/V over the prompt): where the extra time to the
        # first token goes.
        admitting = [i for i, s in enumerate(self.steps) if s["new"] > 0]
        rows = self._rows(admitting)
        out["prefill_steps"] = len(rows)
        if rows:
            out["median_prefill_step_ms"] = self._median_breakdown(rows)
        return out

    def _rows(self, indices: list[int]) -> list[dict[str, float]]:
        """Per step: its period, the time in each timed call, tokens out."""
        ends = [s["end"] for s in self.steps]
        rows = []
        for i in indices:
            # The first step starts when generate() was called.
            lo, hi = (ends[i - 1] if i > 0 else self.t0), ends[i]
            row = {
                "period_ms": 1e3 * (hi - lo),
                "reqs": self.steps[i]["reqs"],
                "scheduled_tokens": self.steps[i]["tokens"],
            }
            for label, start, end in self.calls:
                if lo < end <= hi:
                    row[label] = row.get(label, 0.0) + 1e3 * (end - start)
            row["tokens"] = sum(n for t, n in self.tokens if lo < t <= hi)
            rows.append(row)
        return rows

    @staticmethod
    def _median_breakdown(rows: list[dict[str, float]]) -> dict[str, float]:
        labels = (
            "period_ms",
            "engine_core_step",
            "schedule",
            "execute_model",
            "sample_tokens",
            "wait",
            "update_from_output",
            "process_outputs",
            "tokens",
            "scheduled_tokens",
            "reqs",
        )
        med = {k: _median([r.get(k, 0.0) for r in rows]) for k in labels}
        med["engine_core_other"] = max(
            0.0,
            med["engine_core_step"]
            - med["schedule"]
            - med["execute_model"]
            - med["sample_tokens"]
            - med["wait"]
            - med["update_from_output"],
        )
        med["loop_other"] = max(
            0.0, med["period_ms"] - med["engine_core_step"] - med["process_outputs"]
        )
        return med


def offline_child(args: argparse.Namespace) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import numpy as np
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    spec = _spec_config(args)
    kwargs = dict(
        model=str(args.checkpoint),
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        gpu_memory_utilization=args.gpu_memory_utilization,
        enable_prefix_caching=False,
        seed=0,
        distributed_executor_backend="uni",
        speculative_config=spec,
        **json.loads(args.llm_kwargs),
    )
    start = time.perf_counter()
    llm = LLM(**kwargs)
    startup = time.perf_counter() - start
    tokenizer = llm.get_tokenizer()
    vocab = json.loads((args.checkpoint / "config.json").read_text())["vocab_size"]
    banned = set(tokenizer.all_special_ids)
    allowed = np.array([i for i in range(vocab) if i not in banned])
    rng = np.random.default_rng(args.seed)
    prompts = [
        TokensPrompt(prompt_token_ids=rng.choice(allowed, args.input_len).tolist())
        for _ in range(args.concurrency)
    ]
    params = SamplingParams(
        temperature=0.0, max_tokens=args.output_len, ignore_eos=True
    )
    # Warm-up outside the record.
    llm.generate(prompts[:8], SamplingParams(max_tokens=8), use_tqdm=False)

    rec = Recorder(
        args.concurrency,
        spec["num_speculative_tokens"] if spec else 0,
        args.profile_skip,
        args.profile_steps,
    )
    rec.activity = args.profiler_activity
    rec.install(llm)
    rec.enabled = True
    start = rec.t0 = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    rec.enabled = False
    if rec.profiler is not None and not hasattr(rec, "profile_end"):
        rec._stop_profiler()

    result = rec.summary()
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    result.update(
        startup_s=startup,
        generate_s=elapsed,
        output_tokens=generated,
        output_tok_per_s=generated / elapsed,
        engine_kwargs={k: v for k, v in kwargs.items() if k != "model"},
    )
    if getattr(rec, "profiler_error", None):
        result["profile"] = {"error": rec.profiler_error}
    elif rec.profiler is not None and rec.profile_steps:
        with tempfile.TemporaryDirectory() as tmp:
            trace = Path(tmp) / "trace.json"
            rec.profiler.export_chrome_trace(str(trace))
            device = rec.activity == "cuda"
            events = _read_events(trace)  # parsed once for the three below
            busy, count = busy_ms(trace, device=device, events=events)
            steps = len(rec.profile_steps)
            kernels = top_kernels(trace, steps, device=device, events=events)
            phases = phase_busy_ms(trace, device=device, events=events)
        wall = 1e3 * (rec.profile_end - rec.profile_start)
        result["profile"] = {
            "activity": rec.activity,
            "steps": steps,
            "events": count,
            "busy_ms_per_step": busy / steps,
            "busy_ms_per_step_by_phase": {k: v / steps for k, v in phases.items()},
            "wall_ms_per_step_with_profiler": wall / steps,
            "top_kernels": kernels,
        }
    with contextlib.suppress(Exception):
        import torch

        if torch.cuda.is_available():
            result["gpu"] = torch.cuda.get_device_name()
    # Which copy of the plugin the engine ran (run_h200.sh plugin-ab swaps it).
    plugin = sys.modules.get("vllm_spark2_5_plugin")
    if plugin is not None:
        result["plugin"] = {
            "version": getattr(plugin, "__version__", None),
            "path": str(Path(plugin.__file__).parent),
        }
    Path(args.child_out).write_text(json.dumps(_round(result)))


def _spec_config(args: argparse.Namespace) -> dict[str, Any] | None:
    if not args.dspark:
        return None
    config = json.loads((args.checkpoint / "config.json").read_text())
    n = args.num_spec_tokens or config.get("dspark_block_size") or 7
    return {"method": "dspark", "num_speculative_tokens": n}


def run_offline(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        child_out = Path(tmp) / "offline.json"
        cmd = [sys.executable, __file__, *args.argv, "--child-out", str(child_out)]
        env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
        log = args.log_dir / f"offline-{args.label}.log"
        with open(log, "w") as out:
            proc = subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False
            )
        if proc.returncode or not child_out.exists():
            from bench_serving_matrix import failure_reason

            return {
                "status": "error",
                "returncode": proc.returncode,
                "error": failure_reason(log),
                "tail": log.read_text(errors="replace").splitlines()[-8:],
            }
        return {"status": "ok", **json.loads(child_out.read_text())}


# -- server phase --------------------------------------------------------------


def _process_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of the server's processes, by role."""
    import psutil

    out: dict[str, float] = {}
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return out
    for proc in procs:
        try:
            times = proc.cpu_times()
            cmd = " ".join(proc.cmdline()) + " " + proc.name()
        except psutil.Error:
            continue
        if proc.pid == pid:
            role = "api_server"
        elif "EngineCore" in cmd:
            role = "engine_core"
        elif "VLLM::Worker" in cmd:
            role = "worker"  # a separate worker process (multiproc executor)
        else:  # named, e.g. a resource tracker or a compile worker
            role = f"other:{proc.name()}"
        out[role] = out.get(role, 0.0) + times.user + times.system
    return out


def sample_loop(base: str, pid: int, period: float, stop, ready, out_path: str) -> None:
    """Runs in its own process (so the benchmark client's event loop is never
    slowed): samples /metrics, the server's CPU time and the GPU utilization
    until ``stop`` is set, then writes the samples to ``out_path``."""
    from bench_serving_matrix import scrape_metrics

    nvml = None
    with contextlib.suppress(Exception):
        import pynvml

        pynvml.nvmlInit()
        nvml = (pynvml, pynvml.nvmlDeviceGetHandleByIndex(0))
    samples: list[dict[str, Any]] = []
    while not stop.is_set():
        sample: dict[str, Any] = {"t": time.perf_counter()}
        metrics = scrape_metrics(base)
        for key, name in (
            ("steps", "vllm:iteration_tokens_total_count"),
            ("gen_tokens", "vllm:generation_tokens_total"),
            ("prompt_tokens", "vllm:prompt_tokens_total"),
            ("running", "vllm:num_requests_running"),
        ):
            sample[key] = metrics.get(name, 0.0)
        sample["cpu"] = _process_cpu(pid)
        if nvml is not None:
            with contextlib.suppress(Exception):
                nv, handle = nvml
                sample["gpu_util"] = nv.nvmlDeviceGetUtilizationRates(handle).gpu
        samples.append(sample)
        ready.set()
        stop.wait(period)
    Path(out_path).write_text(json.dumps(samples))


def steady_rates(samples: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    """Rates over the samples where every request runs and prefill is over."""
    if len(samples) < 3:
        return {"note": f"only {len(samples)} samples"}
    final_prompt = max(x["prompt_tokens"] for x in samples)
    window = [
        x
        for x in samples
        if x["prompt_tokens"] >= final_prompt and x["running"] >= 0.9 * concurrency
    ]
    if len(window) < 2:
        return {"note": "no steady decode window was sampled"}
    a, b = window[0], window[-1]
    dt = b["t"] - a["t"]
    steps = b["steps"] - a["steps"]
    tokens = b["gen_tokens"] - a["gen_tokens"]
    out: dict[str, Any] = {
        "window_s": dt,
        "samples": len(window),
        "engine_steps": steps,
        "engine_step_ms": 1e3 * dt / steps if steps else None,
        "output_tok_per_s": tokens / dt,
        "tokens_per_step": tokens / steps if steps else None,
    }
    for role in sorted(set(a["cpu"]) & set(b["cpu"])):
        out[f"{role}_cpu_percent"] = 100 * (b["cpu"][role] - a["cpu"][role]) / dt
    utils = [x["gpu_util"] for x in window if "gpu_util" in x]
    if utils:
        out["gpu_util_percent_nvml"] = statistics.fmean(utils)
    return out


def run_server(args: argparse.Namespace) -> dict[str, Any]:
    from bench_serving_matrix import Bench, Server, _free_port, bench_argv

    spec = _spec_config(args)
    serve = [
        "--dtype",
        args.dtype,
        "--max-model-len",
        str(args.max_model_len),
        "--max-num-seqs",
        str(args.max_num_seqs),
        "--max-num-batched-tokens",
        str(args.max_num_batched_tokens),
        "--gpu-memory-utilization",
        str(args.gpu_memory_utilization),
        "--no-enable-prefix-caching",
        "--disable-uvicorn-access-log",
        "--seed",
        "0",
        *(["--speculative-config", json.dumps(spec)] if spec else []),
        *shlex.split(args.serve_args),
    ]
    port = _free_port(args.port)
    log = args.log_dir / f"server-{args.label}.log"
    server = Server(str(args.checkpoint), serve, log, dict(os.environ), port)
    error = server.start(args.startup_timeout)
    if error:
        server.stop()
        from bench_serving_matrix import failure_reason

        return {"status": "error", "error": f"{error}: {failure_reason(log)}"}
    result: dict[str, Any] = {"status": "ok", "startup_s": server.startup_s}
    try:
        bench = Bench(subprocess_mode=False)
        model = str(args.checkpoint)
        with contextlib.suppress(Exception):
            bench.run(bench_argv(model, server.base, (128, 16), 8, 8, 7, 0.0, []), None)
        ctx = multiprocessing.get_context("spawn")
        stop, ready = ctx.Event(), ctx.Event()
        samples_file = args.log_dir / f"samples-{args.label}.json"
        sampler = ctx.Process(
            target=sample_loop,
            args=(server.base, server.proc.pid, 0.25, stop, ready, str(samples_file)),
            daemon=True,
        )
        sampler.start()
        ready.wait(timeout=120)
        argv = bench_argv(
            model,
            server.base,
            (args.input_len, args.output_len),
            args.concurrency,
            args.concurrency,
            args.seed,
            0.0,
            shlex.split(args.bench_args),
        )
        try:
            client = bench.run(argv, None)
        finally:
            stop.set()
            sampler.join(timeout=30)
        samples = json.loads(samples_file.read_text()) if samples_file.exists() else []
        samples_file.unlink(missing_ok=True)
        keys = (
            "completed",
            "duration",
            "output_throughput",
            "total_token_throughput",
            "mean_ttft_ms",
            "median_ttft_ms",
            "mean_tpot_ms",
            "median_tpot_ms",
            "p99_tpot_ms",
            "mean_itl_ms",
            "median_itl_ms",
            "p99_itl_ms",
            "spec_decode_acceptance_length",
        )
        result["client"] = {k: client.get(k) for k in keys if k in client}
        result["steady"] = steady_rates(samples, args.concurrency)
    finally:
        server.stop()
    return result


# -- the answer ----------------------------------------------------------------


def answer(offline: dict[str, Any], server: dict[str, Any], c: int) -> str:
    parts = []
    med = offline.get("median_per_step_ms") if offline.get("status") == "ok" else None
    if med:
        period = med["period_ms"]
        prof = offline.get("profile") or {}
        gpu = prof.get("busy_ms_per_step")
        what = "GPU" if prof.get("activity") == "cuda" else "CPU ops (no GPU)"
        gpu_txt = (
            f"{what} busy {gpu:.1f} ms of {period:.1f} ms per step "
            f"({100 * gpu / period:.0f}%)"
            if gpu is not None
            else f"step {period:.1f} ms (GPU time not measured)"
        )
        by_phase = prof.get("busy_ms_per_step_by_phase") or {}
        if gpu is not None and by_phase:
            gpu_txt += (
                f", issued from execute_model (the target's forward) "
                f"{by_phase.get('execute_model', 0.0):.1f} ms, from sample_tokens "
                f"(sampling; with DSpark also the draft) "
                f"{by_phase.get('sample_tokens', 0.0):.1f} ms, elsewhere "
                f"{by_phase.get('other', 0.0):.1f} ms"
            )
        parts.append(
            f"offline, {c} concurrent, no API server: {gpu_txt}; engine-core CPU "
            f"per step: scheduler {med['schedule']:.1f} ms, model-runner inputs and "
            f"launch {med['execute_model'] + med['sample_tokens']:.1f} ms, "
            f"waiting for the GPU {med['wait']:.1f} ms, update_from_output "
            f"{med['update_from_output']:.1f} ms; output processing/detokenize "
            f"{med['process_outputs']:.1f} ms; {med['tokens']:.0f} tokens per step"
        )
    pre = offline.get("median_prefill_step_ms") if med else None
    if pre:
        parts.append(
            f"steps admitting requests ({offline['prefill_steps']}, median "
            f"{pre['scheduled_tokens']:.0f} tokens): {pre['period_ms']:.1f} ms, of "
            f"which execute_model {pre['execute_model']:.1f} ms and "
            f"sample_tokens (with DSpark: the draft's proposal) "
            f"{pre['sample_tokens']:.1f} ms"
        )
    steady = server.get("steady") or {}
    client = server.get("client") or {}
    if client:
        txt = f"server: client mean TPOT {client.get('mean_tpot_ms', 0):.1f} ms"
        if steady.get("engine_step_ms"):
            txt += f", engine step {steady['engine_step_ms']:.1f} ms"
        if med and steady.get("engine_step_ms"):
            txt += (
                f" (offline {med['period_ms']:.1f} ms: API server adds "
                f"{steady['engine_step_ms'] - med['period_ms']:+.1f} ms per step)"
            )
        for role in ("api_server", "engine_core", "worker"):
            if f"{role}_cpu_percent" in steady:
                txt += f", {role} CPU {steady[f'{role}_cpu_percent']:.0f}%"
        if "gpu_util_percent_nvml" in steady:
            txt += f", GPU utilization {steady['gpu_util_percent_nvml']:.0f}%"
        parts.append(txt)
    for name, phase in (("offline", offline), ("server", server)):
        if phase.get("status") == "error":
            parts.append(f"{name} failed: {phase.get('error')}")
    return "; ".join(parts) or "no phase produced data"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--out", type=Path, default=Path("/tmp/profile-decode"))
    p.add_argument(
        "--log-dir", type=Path, help="engine and server logs (default: --out)"
    )
    p.add_argument("--label", help="file label (default: dspark or baseline)")
    p.add_argument("--dspark", action="store_true", help="speculate with DSpark")
    p.add_argument("--num-spec-tokens", type=int)
    p.add_argument("--concurrency", type=int, default=500)
    p.add_argument("--input-len", type=int, default=1525)
    p.add_argument(
        "--output-len",
        type=int,
        default=400,
        help="long enough for a steady decode window after the prefill wave",
    )
    p.add_argument(
        "--phases",
        nargs="+",
        choices=("offline", "server"),
        default=["offline", "server"],
    )
    p.add_argument("--profile-skip", type=int, default=10, help="steady steps first")
    p.add_argument("--profile-steps", type=int, default=30)
    p.add_argument("--profiler-activity", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--max-num-seqs", type=int, default=512)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--llm-kwargs", default="{}", help="JSON, extra LLM(...) kwargs")
    from bench_serving_matrix import add_passthrough_arguments

    add_passthrough_arguments(p)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--startup-timeout", type=float, default=900.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    # Checked before a child starts (a missing path read as a hub repo id).
    if not (args.checkpoint / "config.json").is_file():
        p.error(f"checkpoint {args.checkpoint} has no config.json")
    try:
        if not isinstance(json.loads(args.llm_kwargs), dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        p.error(f"--llm-kwargs: {e}")
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.log_dir = args.log_dir or args.out
    args.label = args.label or ("dspark" if args.dspark else "baseline")
    return args


def main(argv: list[str] | None = None) -> int:
    from bench_serving_matrix import exit_on_sigterm

    exit_on_sigterm()
    args = parse_args(argv)
    if args.child_out:
        offline_child(args)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "checkpoint": str(args.checkpoint),
        "label": args.label,
        "concurrency": args.concurrency,
        "input_len": args.input_len,
        "output_len": args.output_len,
    }
    with contextlib.suppress(Exception):
        from machine import describe

        record["machine"] = describe().removeprefix("machine: ")
    offline: dict[str, Any] = {}
    server: dict[str, Any] = {}
    if "offline" in args.phases:
        start = time.perf_counter()
        offline = run_offline(args)
        offline["phase_s"] = time.perf_counter() - start
        print("offline:", json.dumps(_round(offline)), flush=True)
    if "server" in args.phases:
        start = time.perf_counter()
        server = run_server(args)
        server["phase_s"] = time.perf_counter() - start
        print("server:", json.dumps(_round(server)), flush=True)
    record.update(offline=offline, server=server)
    record["answer"] = answer(offline, server, args.concurrency)
    out = args.out / f"profile-{args.label}.json"
    out.write_text(json.dumps(_round(record), indent=1) + "\n")
    print("ANSWER:", record["answer"])
    print(f"wrote {out}")
    # A phase that did not run to the end fails the command (run_h200.sh
    # counts a stage as failed by its exit status).
    ran = [phase for phase in (offline, server) if phase]
    return 0 if all(phase.get("status") == "ok" for phase in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
