# SPDX-License-Identifier: Apache-2.0
"""The serving matrix's own logic, without a GPU.

* It stops a server left behind by a killed command, and only one on its own
  GPUs. On a two-GPU machine, two matrices run side by side (one GPU each).
  With one record for the whole machine, the second matrix's start-up stopped
  the first one's server while it was still starting (seen on the H200:
  "server exited with -9 during start-up").
* ``--repeats``: a point stands for the median of its runs, and the report
  shows the spread. The DSpark/baseline ratios of two isolated H200 runs
  differed by -26% to +67% at concurrency 1 and 64, more than the goals'
  margins."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_serving_matrix.py"


def _load_script(path: Path):
    """A benchmark script imported as a module (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def matrix():
    return _load_script(_PATH)


def _detached(*argv: str) -> int:
    """Start ``argv`` as the leader of its own process group, not as our
    child (so that nothing here keeps it as a zombie once stopped); its pid."""
    out = subprocess.run(
        ["bash", "-c", 'setsid "$@" >/dev/null 2>&1 & echo $!', "-", *argv],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(out.stdout)


def _fake_server() -> int:
    """A group whose leader's command line names vllm, as the `vllm serve`
    the benchmark starts does."""
    sleep = "import time; time.sleep(120)"
    return _detached(sys.executable, "-c", sleep, "vllm", "serve")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return "Z"


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def test_each_gpu_set_has_its_own_record(matrix):
    tag = f"t{os.getpid()}"
    a = matrix.pid_file({"CUDA_VISIBLE_DEVICES": f"{tag}a"})
    b = matrix.pid_file({"CUDA_VISIBLE_DEVICES": f"{tag}b"})
    assert a != b
    assert matrix.pid_file({}) != a
    assert matrix.pid_file({"CUDA_VISIBLE_DEVICES": "0,1"}).name.endswith("gpu0-1.pgid")


def test_a_stale_server_is_stopped_only_on_its_own_gpus(matrix):
    tag = f"t{os.getpid()}"
    mine = matrix.pid_file({"CUDA_VISIBLE_DEVICES": f"{tag}a"})
    other = matrix.pid_file({"CUDA_VISIBLE_DEVICES": f"{tag}b"})
    pid = _fake_server()
    try:
        time.sleep(0.3)
        mine.write_text(f"{pid}\n")
        matrix.stop_stale_server(other)  # the neighbour starting its server
        assert _alive(pid), "a server on other GPUs was stopped"
        assert mine.exists()
        matrix.stop_stale_server(mine)  # the next server on the same GPUs
        assert not _alive(pid)
        assert not mine.exists()
    finally:
        _kill(pid)
        mine.unlink(missing_ok=True)
        other.unlink(missing_ok=True)


def test_a_group_that_is_not_vllm_is_left_alone(matrix):
    record = matrix.pid_file({"CUDA_VISIBLE_DEVICES": f"t{os.getpid()}c"})
    pid = _detached(sys.executable, "-c", "import time; time.sleep(120)")
    try:
        time.sleep(0.3)
        record.write_text(f"{pid}\n")
        matrix.stop_stale_server(record)
        assert _alive(pid)
    finally:
        _kill(pid)
        record.unlink(missing_ok=True)


# -- --repeats -----------------------------------------------------------------


def _run(tok_s: float, status: str = "ok") -> dict:
    return {
        "status": status,
        "result": {
            "output_throughput": tok_s,
            "mean_tpot_ms": 1e3 / tok_s,
            "duration": 10.0,
        },
        "server_metrics": {"engine_steps": 100.0, "acceptance_length": 3.0},
    }


def test_a_repeated_point_is_its_median_run(matrix):
    point = matrix.pick_median([_run(300.0), _run(100.0), _run(200.0)])
    assert point["result"]["output_throughput"] == 200.0
    assert [r["output_throughput"] for r in point["repeats"]] == [300.0, 100.0, 200.0]
    assert point["repeats"][0]["acceptance_length"] == 3.0
    # An even count: the lower middle run, never an average of two.
    even = matrix.pick_median([_run(400.0), _run(100.0), _run(300.0), _run(200.0)])
    assert even["result"]["output_throughput"] == 200.0
    # One run: the point as before, without a repeats list.
    single = matrix.pick_median([_run(250.0)])
    assert single["result"]["output_throughput"] == 250.0 and "repeats" not in single


def test_a_failed_repeat_fails_the_point(matrix):
    failed = _run(1.0, status="error")
    failed["error"] = "RuntimeError('boom')"
    point = matrix.pick_median([_run(300.0), failed])
    assert point["status"] == "error" and "boom" in point["error"]


def test_the_report_shows_the_spread_over_repeats(matrix, tmp_path):
    base = matrix.pick_median([_run(100.0), _run(110.0), _run(105.0)])
    spec = matrix.pick_median([_run(240.0), _run(200.0), _run(220.0)])
    spec["result"]["duration"] = 20.0
    assert matrix.repeat_range(base, spec) == f"{200 / 110:.2f}–{240 / 100:.2f}×"
    assert matrix.repeat_range(base, matrix.pick_median([_run(220.0)])) == "–"

    work = tmp_path / "work"
    (work / "points").mkdir(parents=True)
    for mode, point in (("baseline", base), ("dspark", spec)):
        point.update(mode=mode, shape="decode", concurrency=1, num_prompts=5)
        name = matrix.point_name(mode, "decode", 1)
        (work / "points" / f"{name}.json").write_text(matrix.json.dumps(point))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    args = matrix.parse_args([str(ckpt), "--work-dir", str(work), "--repeats", "3"])
    matrix.write_report(args, {"checkpoint": str(ckpt)}, {}, work)
    row = next(
        line
        for line in (work / "matrix.md").read_text().splitlines()
        if line.startswith("| decode (128/1024) | 1 |")
    )
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:7] == ["105", "220", "2.10×", "1.82–2.40×", "≥ 2.0× met"], row
    # 100 engine steps each, in 20 s with DSpark and 10 s without.
    assert cells[9] == "2.00×", row


def test_a_concurrency_1_point_has_several_requests(matrix):
    # With 4 ms per step assumed (twice what the H200 took), the 15 s decode
    # point at concurrency 1 got 3 requests and ran 4-6 s: too few to average
    # out one slow request.
    cfg = {
        "num_hidden_layers": 16,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "sliding_window": 4096,
    }
    n = matrix.num_prompts_for(cfg, matrix.SHAPES["decode"], 1, 15.0, 2000)
    assert n >= 5, n


@pytest.mark.slow
def test_the_matrix_repeats_a_point_against_a_real_server(tiny_checkpoint, tmp_path):
    """The matrix end to end on CPU: one `vllm serve` (the real CPU build with
    the plugin), one point run twice with different prompts, the median run
    standing for it, and no config-parsing error from the benchmark client."""
    work = tmp_path / "matrix"
    argv = [
        sys.executable, str(_PATH), str(tiny_checkpoint),
        "--work-dir", str(work), "--modes", "baseline",
        "--shapes", "tiny=16:8", "--concurrencies", "1", "--num-prompts", "2",
        "--repeats", "2", "--max-model-len", "256", "--max-num-seqs", "4",
        "--warmups", "0", "--env", "VLLM_CPU_KVCACHE_SPACE=1",
    ]  # fmt: skip
    out = _run_on_cpu(argv)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    assert "Error parsing config" not in log, log[-4000:]

    (point,) = json.loads((work / "matrix.json").read_text())["points"]
    assert point["status"] == "ok" and point["num_prompts"] == 2, point
    runs = point["repeats"]
    assert len(runs) == 2, point
    assert all(r["output_throughput"] > 0 for r in runs), runs
    # The lower of the two runs stands for the point, with its own TPOT.
    slower = min(runs, key=lambda r: r["output_throughput"])
    assert point["result"]["output_throughput"] == slower["output_throughput"]
    assert point["result"]["mean_tpot_ms"] == slower["mean_tpot_ms"]
    # Two complete raw results, from two prompt seeds (vLLM's benchmark
    # prints its arguments).
    raws = [json.loads(p.read_text()) for p in sorted((work / "raw").glob("*.json"))]
    assert [(r["completed"], r["failed"]) for r in raws] == [(2, 0), (2, 0)], raws
    seeds = re.findall(r"Namespace\(.*?\bseed=(\d+)", log)
    assert len(seeds) == 2 and seeds[0] != seeds[1], seeds
    row = next(
        line
        for line in (work / "matrix.md").read_text().splitlines()
        if line.startswith("| tiny (16/8) | 1 |")
    )
    assert "| – |" in row, row  # no DSpark run, so no span


_PROFILE = _PATH.with_name("profile_decode.py")


def _profile(checkpoint: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    argv = [
        sys.executable, str(_PROFILE), str(checkpoint), "--out", str(out),
        "--phases", "offline", "--concurrency", "2", "--input-len", "16",
        "--output-len", "48", "--max-model-len", "256", "--max-num-seqs", "4",
        "--max-num-batched-tokens", "256", "--profiler-activity", "cpu",
        "--profile-skip", "2", "--profile-steps", "5", *extra,
    ]  # fmt: skip
    return _run_on_cpu(argv)


def _run_on_cpu(argv: list[str]) -> subprocess.CompletedProcess:
    """A benchmark script with real vLLM on CPU, 1 GiB of KV cache."""
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    return subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.slow
def test_the_decode_profiler_times_steady_steps_on_a_real_engine(
    tiny_checkpoint, tmp_path
):
    """profile_decode.py offline on CPU: the real engine with the plugin, every
    request decoding, the steps timed and their parts no longer than the
    step, and the plugin that ran recorded."""
    out = _profile(tiny_checkpoint, tmp_path, "--label", "cpu")
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    record = json.loads((tmp_path / "profile-cpu.json").read_text())
    offline = record["offline"]
    assert offline["status"] == "ok", offline
    assert offline["output_tokens"] == 2 * 48, offline
    assert offline["steady_steps"] > 10, offline
    step = offline["median_per_step_ms"]
    assert step["reqs"] == 2 and step["tokens"] == 2, step
    parts = ("schedule", "execute_model", "sample_tokens", "update_from_output")
    assert 0 < sum(step[p] for p in parts) <= step["engine_core_step"] * 1.05, step
    assert offline["plugin"]["path"].endswith("vllm_spark2_5_plugin"), offline
    # The profiled steps' CPU ops, split by the executor call they ran in:
    # the forward and the sampling both did work, each part of the whole.
    profile = offline["profile"]
    phases = profile["busy_ms_per_step_by_phase"]
    assert phases["execute_model"] > 0 and phases["sample_tokens"] > 0, profile
    assert max(phases.values()) <= profile["busy_ms_per_step"] + 1e-3, profile
    assert "issued from execute_model" in record["answer"], record["answer"]


@pytest.fixture(scope="module")
def profiler():
    return _load_script(_PROFILE)


def _x(cat: str, name: str, ts: float, dur: float, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": args}


def test_gpu_time_is_charged_to_the_host_call_that_launched_it(profiler, tmp_path):
    """A kernel belongs to the executor call whose launch issued it, even when
    it runs after that call has returned (the GPU lags the host)."""
    trace = {
        "traceEvents": [
            _x("user_annotation", "spark25::execute_model", 0, 100),
            _x("user_annotation", "spark25::sample_tokens", 100, 50),
            _x("user_annotation", "other range", 0, 1000),
            _x("cuda_runtime", "cudaGraphLaunch", 10, 5, correlation=1),
            _x("cuda_driver", "cuLaunchKernelEx", 120, 5, correlation=2),
            _x("cuda_runtime", "cudaLaunchKernel", 300, 5, correlation=3),
            # The forward's kernels: two overlapping ones count once.
            _x("kernel", "gemm", 90, 60, correlation=1),
            _x("kernel", "gemm_tail", 140, 20, correlation=1),
            # The draft's, launched inside sample_tokens, run after it.
            _x("kernel", "fixed_history_kernel", 160, 40, correlation=2),
            _x("gpu_memcpy", "Memcpy DtoH", 310, 4, correlation=3),
            _x("kernel", "no launch seen", 400, 6, correlation=9),
            _x("cpu_op", "aten::mm", 20, 30),
        ]
    }
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))
    phases = profiler.phase_busy_ms(path)
    assert phases == pytest.approx(
        {"execute_model": 0.070, "sample_tokens": 0.040, "other": 0.010}
    )
    busy, count = profiler.busy_ms(path)
    assert busy == pytest.approx(sum(phases.values())) and count == 5
    # CPU ops go by their own start time.
    assert profiler.phase_busy_ms(path, device=False) == pytest.approx(
        {"execute_model": 0.030}
    )


@pytest.mark.cuda
def test_gpu_work_is_charged_to_its_range_on_a_gpu(profiler, tmp_path):
    """The same on a real trace: a CUDA-graph replay, a Triton kernel launched
    through the driver API, eager aten kernels and a memset are charged to
    the range that issued them, and work outside the ranges to "other"."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import triton
    import triton.language as tl
    from torch.profiler import ProfilerActivity, profile, record_function

    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)

    x = torch.randn(2048, 2048, device="cuda")
    z = torch.zeros(1 << 20, device="cuda")

    def forward():
        add_one[(256,)](z, z.numel(), BLOCK=4096)
        return x @ x

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        forward()  # warm-up (compiles the Triton kernel)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            with record_function(profiler.PHASE_PREFIX + "execute_model"):
                graph.replay()
            with record_function(profiler.PHASE_PREFIX + "sample_tokens"):
                add_one[(256,)](z, z.numel(), BLOCK=4096)
                (x[:256] * 2).sum()
            x.add(1)  # outside both ranges
        torch.cuda.synchronize()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    phases = profiler.phase_busy_ms(trace)
    assert set(phases) == {"execute_model", "sample_tokens", "other"}, phases
    # The graph's GEMM outweighs everything else by far.
    assert phases["execute_model"] > 5 * phases["sample_tokens"], phases
    assert phases["other"] > 0 and phases["sample_tokens"] > 0, phases
    busy, _ = profiler.busy_ms(trace)
    assert sum(phases.values()) == pytest.approx(busy, rel=0.01), (phases, busy)


@pytest.mark.slow
def test_a_failed_profile_fails_the_command(tiny_checkpoint, tmp_path):
    """A phase that does not run (here DSpark, which vLLM's CPU build refuses)
    is recorded as an error and the command exits non-zero, so the GPU
    scripts count the stage as failed."""
    out = _profile(tiny_checkpoint, tmp_path, "--label", "refused", "--dspark")
    assert out.returncode == 1, (out.stdout + out.stderr)[-4000:]
    record = json.loads((tmp_path / "profile-refused.json").read_text())
    assert record["offline"]["status"] == "error", record["offline"]
    assert "dspark" in record["offline"]["error"].lower(), record["offline"]


def test_a_server_log_excerpt_keeps_the_warnings_between(matrix):
    lines = [f"INFO line {i}" for i in range(500)]
    lines[100] = "(EngineCore pid=1) WARNING 12-01 [x.py:1] running the draft eagerly."
    lines[200] = "Traceback (most recent call last):"
    lines[300] = "INFO a WARNINGS-free line"
    got = matrix.log_excerpt(lines)
    assert got[:5] == lines[:5] and got[-60:] == lines[-60:]
    assert got[5:-60] == ["...", lines[100], lines[200], "..."]
    # A short log is kept whole.
    assert matrix.log_excerpt(lines[:50]) == lines[:50]


@pytest.fixture
def fake_ckpt(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    return ckpt


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--merge", "{missing}"], "--merge"),
        (["--merge", "{not_json}"], "not a matrix.json"),
        (["--shapes", "toy=32"], "--shapes toy=32: use NAME=IN:OUT"),
        (["--shapes", "toy=a:16"], "--shapes toy=a:16: use NAME=IN:OUT"),
        (["--concurrencies", "0"], "--concurrencies must be at least 1"),
        (["--concurrencies", "-4"], "--concurrencies must be at least 1"),
        (["--num-prompts", "0"], "--num-prompts must be at least 1"),
        (["--repeats", "0"], "--repeats must be at least 1, got 0"),
        (["--checkpoint-missing"], "has no config.json"),
        (["--max-prompts", "-5"], "--max-prompts must be at least 1"),
        (["--point-seconds", "0"], "--point-seconds must be above 0"),
        (["--time-budget", "-1"], "--time-budget must be above 0"),
        (["--warmups", "-1"], "--warmups must be at least 0"),
        (["--config-not-json"], "config.json cannot be read"),
        (["--work-dir-below-a-file"], "is a file, not a directory"),
    ],
)
def test_the_matrix_checks_its_inputs_up_front(
    matrix, fake_ckpt, tmp_path, capsys, extra, message
):
    """Each refused before a folder is made or a server starts, in one line
    naming the option (a wrong --merge path failed after the first mode had
    run; the others raised a traceback)."""
    (tmp_path / "bad.json").write_text("{not json")
    files = {"missing": tmp_path / "nope.json", "not_json": tmp_path / "bad.json"}
    ckpt = str(fake_ckpt)
    work = tmp_path / "w"
    if extra == ["--checkpoint-missing"]:
        ckpt, extra = str(tmp_path / "no-ckpt"), []
    if extra == ["--config-not-json"]:
        (fake_ckpt / "config.json").write_text("{bad")
        extra = []
    if extra == ["--work-dir-below-a-file"]:
        (tmp_path / "afile").write_text("x")
        work, extra = tmp_path / "afile" / "w", []
    argv = [ckpt, "--work-dir", str(work), "--dry-run"]
    argv += [a.format(**files) for a in extra]
    with pytest.raises(SystemExit) as exit_:
        matrix.parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert ": error: " in err.strip().splitlines()[-1], err
    assert not (tmp_path / "w").exists()


def test_a_dry_run_makes_no_folder(matrix, tiny_checkpoint, tmp_path, capsys):
    """--dry-run ("print the plan and stop") created the work directory."""
    work = tmp_path / "w"
    argv = [str(tiny_checkpoint), "--work-dir", str(work), "--dry-run"]
    assert matrix.main(argv) == 0
    assert "estimated total" in capsys.readouterr().out
    assert not work.exists()


def test_a_start_failure_keeps_its_root_cause(matrix, tmp_path):
    """The worker's own error (here vLLM CPU's memory refusal) comes first in
    the reason, before the engine's and the API server's re-raises; the last
    three error lines alone only said "initialization failed"."""
    prefix = "ERROR 12-05 20:26:08 [multiproc_executor.py:953]"
    log = tmp_path / "server.log"
    log.write_text(
        "\n".join(
            [
                f"(VllmWorker-0 pid=6465) {prefix} WorkerProc failed to start.",
                f"(VllmWorker-0 pid=6465) {prefix} Traceback (most recent call last):",
                f"(VllmWorker-0 pid=6465) {prefix}     raise ValueError(",
                f"(VllmWorker-0 pid=6465) {prefix} ValueError: Available memory "
                "on node 0 (19.88/23.54 GiB) is less than desired",
                "(EngineCore pid=6439) ERROR 12-05 20:26:10 [core.py:1510] "
                "EngineCore failed to start.",
                "    raise e from None",
                "Exception: WorkerProc initialization failed due to an exception "
                "in a background process. See stack trace for root cause.",
                "RuntimeError: Engine core initialization failed. See root cause "
                "above. Failed core proc(s): {}",
            ]
        )
        + "\n"
    )
    reason = matrix.failure_reason(log)
    assert reason.startswith("ValueError: Available memory on node 0"), reason
    assert reason.endswith("Failed core proc(s): {}"), reason


# -- the CPU benchmarks' argument checks ----------------------------------------

_BENCH = _PATH.parent


def _script(name: str, *argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(_BENCH / name), *argv],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    "name, argv, message",
    [
        ("bench_register.py", ["--runs", "0"], "--runs must be >= 1"),
        ("bench_register.py", ["--runs", "-1"], "--runs must be >= 1"),
        ("bench_cpu_throughput.py", ["--rounds", "0"], "--rounds must be >= 1"),
        ("bench_tool_parser.py", ["--repeats", "0"], "--repeats: must be at least 1"),
        ("bench_tool_parser.py", ["--sizes", "-5"], "--sizes: must be at least 1"),
    ],
)
def test_a_cpu_benchmark_refuses_no_runs(name, argv, message):
    """Refused before anything runs (an IndexError, or a StatisticsError after
    three checkpoints were built)."""
    done = _script(name, *argv)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_register_benchmark_shows_the_samples_own_error(tmp_path):
    """A plugin that fails to import: its error, not a CalledProcessError that
    dropped the child's stderr."""
    shadow = tmp_path / "vllm_spark2_5_plugin"
    shadow.mkdir()
    (shadow / "__init__.py").write_text('raise ImportError("a broken plugin")\n')
    done = _script("bench_register.py", "--runs", "1", PYTHONPATH=str(tmp_path))
    assert done.returncode == 1, done.stderr
    assert "ImportError: a broken plugin" in done.stderr, done.stderr
    assert "CalledProcessError" not in done.stderr
