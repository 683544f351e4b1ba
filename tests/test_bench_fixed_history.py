# SPDX-License-Identifier: Apache-2.0
"""The kernel benchmark's ``--try`` option, on CPU under Triton's interpreter.

``--sweep --try JSON`` times only the given changes to each shape's default
launch plan, and prints each plan's difference from the default plan's
output, so that a plan that times well but computes something else shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]
_SCRIPT = _ROOT / "benchmarks" / "bench_fixed_history_attention.py"
_TRIED = re.compile(
    r"tried\s+[\d.]+ us, rel diff vs default plan (\S+): (LaunchPlan\(.*\))"
)


def _smoke(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run(
        [sys.executable, str(_SCRIPT), "--smoke", "--kernel-only", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=_ROOT,
        timeout=600,
    )


def test_try_times_only_the_given_plans():
    run = _smoke(
        "--sweep",
        "--kv-dtypes",
        "fp8",
        "--try",
        '{"block_n": 64, "num_warps": 2}',
        "--try",
        '{"block_n": 32, "fp8_f16_dot": true}',
    )
    assert run.returncode == 0, run.stderr[-3000:]
    tried = _TRIED.findall(run.stdout)
    # Three smoke shapes, two plans each, and nothing from the grid.
    assert len(tried) == 6, run.stdout[-3000:]
    for i, (diff, plan) in enumerate(tried):
        if i % 2 == 0:
            assert "block_n=64" in plan and "num_warps=2" in plan, plan
        else:
            assert "block_n=32" in plan and "fp8_f16_dot=True" in plan, plan
        # Another tiling of the same attention: the same result, to rounding.
        assert float(diff) < 1e-2, (diff, plan)


@pytest.mark.parametrize(
    "value,message",
    [
        ("{block_n: 64}", "not JSON"),
        ("[64]", "not a JSON object"),
        ('{"warps": 2}', "not LaunchPlan fields: warps"),
    ],
)
def test_try_refuses_what_is_not_a_plan_change(value, message):
    run = _smoke("--sweep", "--try", value)
    assert run.returncode == 2, run.stderr[-3000:]
    assert "--try" in run.stderr and message in run.stderr, run.stderr[-3000:]


def test_try_skips_plans_the_kernel_refuses():
    # LaunchPlan refuses 8-key tiles: the run goes on without the plan.
    run = _smoke("--sweep", "--kv-dtypes", "bf16", "--try", '{"block_n": 8}')
    assert run.returncode == 0, run.stderr[-3000:]
    assert not _TRIED.findall(run.stdout)


def test_flush_choice_is_recorded_with_the_table(tmp_path):
    # --flush clean: the L2 emptied by reading a buffer instead of zeroing
    # one (on a GPU; without one each call runs once): the table says which.
    table = tmp_path / "table.md"
    run = _smoke("--kv-dtypes", "bf16", "--flush", "clean", "--md", str(table))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "L2 emptied before each call: clean" in table.read_text()
    refused = _smoke("--flush", "wipe")
    assert refused.returncode == 2 and "--flush" in refused.stderr
