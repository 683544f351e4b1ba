# SPDX-License-Identifier: Apache-2.0
"""benchmarks/h200_background.sh, the GPU sessions' job runner, on CPU: a job
outlives the command that started it, writes its results where `collect`
packs them, records its exit status, and `stop` ends its whole process
session."""

from __future__ import annotations

import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "h200_background.sh"


@pytest.fixture
def runner(tmp_path):
    env = {
        **os.environ,
        "H200_BG_DIR": str(tmp_path / "bg"),
        "OUT": str(tmp_path / "out"),
    }

    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(_SCRIPT), *args],
            env=env,
            cwd=_SCRIPT.parents[1],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run, tmp_path


def test_a_job_runs_on_and_its_results_come_back(runner):
    run, tmp = runner
    job = 'sleep 2; echo done > "$OUT/result.txt"; test -f pyproject.toml; exit 3'
    started = run("start", "a", job)
    assert started.returncode == 0, started.stderr
    # The starting command has returned; the job is still running.
    assert run("start", "a", "true").returncode == 1
    waited = run("wait", "30")
    assert waited.returncode == 0, waited.stderr
    assert "=== a (ended, exit 3)" in waited.stdout, waited.stdout
    with tarfile.open(tmp / "out" / "a.tgz") as tgz:
        member = tgz.extractfile("./result.txt")
        assert member is not None and member.read() == b"done\n"
    assert (tmp / "out" / "a.log").exists()
    # The job ran in a copy of the repository.
    assert (tmp / "bg" / "a" / "repo" / "pyproject.toml").exists()


def test_stop_ends_the_whole_job(runner):
    run, tmp = runner
    assert run("start", "b", "sleep 300 & sleep 300; wait").returncode == 0
    sid = int((tmp / "bg" / "b" / "pid").read_text())
    assert _session_alive(sid)
    assert run("stop", "b").returncode == 0
    deadline = time.time() + 10
    while _session_alive(sid) and time.time() < deadline:
        time.sleep(0.2)
    assert not _session_alive(sid)


def test_wait_returns_after_its_limit(runner):
    run, _ = runner
    assert run("start", "c", "sleep 300").returncode == 0
    begin = time.time()
    waited = run("wait", "2")
    assert time.time() - begin < 20
    assert "=== c (running" in waited.stdout, waited.stdout
    run("stop", "c")


def _session_alive(sid: int) -> bool:
    return (
        subprocess.run(["pgrep", "-s", str(sid)], capture_output=True).returncode == 0
    )


# -- benchmarks/run_h200.sh: what it stops -----------------------------------

_RUN_H200 = _SCRIPT.parent / "run_h200.sh"

# Stand-ins on PATH: `pkill` only records that it was called; `python3` (every
# stage's command) leaves a process behind, as a killed engine would, and
# writes its pid to $LEFTOVER.
_PKILL = '#!/bin/sh\necho "$*" >> "$PKILL_LOG"\n'
_PYTHON3 = (
    '#!/bin/sh\nsleep 300 >/dev/null 2>&1 &\necho $! > "$LEFTOVER"\necho "python3 $*"\n'
)


@pytest.fixture
def run_h200(tmp_path):
    shims = tmp_path / "shims"
    shims.mkdir()
    for name, text in (("pkill", _PKILL), ("python3", _PYTHON3)):
        (shims / name).write_text(text)
        (shims / name).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{shims}:{os.environ['PATH']}",
        "PKILL_LOG": str(tmp_path / "pkill.log"),
        "LEFTOVER": str(tmp_path / "leftover.pid"),
        "OUT": str(tmp_path / "out"),
        # A record of our own GPUs' server that this test never touches.
        "CUDA_VISIBLE_DEVICES": f"test{os.getpid()}",
    }

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(_RUN_H200), *args],
            env=env,
            cwd=_SCRIPT.parents[1],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    return run, tmp_path


@pytest.mark.parametrize(
    "args, rc",
    [(("--help",), 0), (("-h",), 0), ((), 2), (("kernel", "typo"), 2)],
)
def test_run_h200_checks_its_stages_before_it_does_anything(run_h200, args, rc):
    run, tmp = run_h200
    done = run(*args)
    assert done.returncode == rc, done.stdout + done.stderr
    if rc == 0:
        assert "Stages:" in done.stdout and "graphs-500" in done.stdout
    else:
        assert "stages: kernel kernel-ab e2e" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    if args == ("kernel", "typo"):
        assert "unknown stage 'typo'" in done.stderr
        assert "python3" not in done.stdout  # `kernel` did not run first
    assert not (tmp / "pkill.log").exists()
    assert not (tmp / "out").exists()
    assert not (tmp / "leftover.pid").exists()


def test_run_h200_stops_only_what_it_started(run_h200):
    run, tmp = run_h200
    # Someone else's process, which must survive the script.
    other = subprocess.Popen(["sleep", "300"])
    try:
        done = run("e2e")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "== e2e: exit 0" in done.stdout
        left = int((tmp / "leftover.pid").read_text())
        deadline = time.time() + 20
        while _pid_alive(left) and time.time() < deadline:
            time.sleep(0.2)
        assert not _pid_alive(left), "the stage's leftover still runs"
        assert other.poll() is None, "a process the script did not start was stopped"
        assert not (tmp / "pkill.log").exists(), (tmp / "pkill.log").read_text()
    finally:
        other.kill()
        other.wait()


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_wait_refuses_seconds_that_are_no_number(runner):
    run, _ = runner
    done = run("wait", "abc")
    assert done.returncode == 2
    assert "SECONDS must be an integer" in done.stderr, done.stderr
    assert "unbound variable" not in done.stderr
