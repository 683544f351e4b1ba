# SPDX-License-Identifier: Apache-2.0
"""The serving benchmarks stop a server left behind by a killed command, and
only one on their own GPUs.

On a two-GPU machine, two matrices run side by side (one GPU each). With one
record for the whole machine, the second matrix's start-up stopped the first
one's server while it was still starting (seen on the H200: "server exited
with -9 during start-up")."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_serving_matrix.py"


@pytest.fixture(scope="module")
def matrix():
    spec = importlib.util.spec_from_file_location("bench_serving_matrix", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
