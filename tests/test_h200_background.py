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
