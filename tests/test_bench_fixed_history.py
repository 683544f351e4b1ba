# SPDX-License-Identifier: Apache-2.0
"""The kernel benchmark's ``--try`` option, on CPU under Triton's interpreter.

``--sweep --try JSON`` times only the given changes to each shape's default
launch plan, and prints each plan's difference from the default plan's
output, so that a plan that times well but computes something else shows."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vllm_spark2_5_plugin.ops import fixed_history_attention_reference

_ROOT = Path(__file__).resolve().parents[1]
_SCRIPT = _ROOT / "benchmarks" / "bench_fixed_history_attention.py"
_TRIED = re.compile(
    r"tried\s+[\d.]+ us, rel diff vs default plan (\S+): (LaunchPlan\(.*\))"
)


def _smoke(*argv: str) -> subprocess.CompletedProcess:
    # The smoke runs on CPU under the interpreter even where a GPU is visible
    # (the interpreter cannot run inside the script's CUDA-graph timing).
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
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
    # The launch cost line (timed on a GPU only) in the output and the table.
    assert run.stdout.count("an empty kernel of one program per SM") == 2
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
    # LaunchPlan refuses 8-key tiles: the run goes on without that plan and
    # times the valid one given with it (once per smoke shape).
    run = _smoke(
        "--sweep",
        "--kv-dtypes",
        "bf16",
        "--try",
        '{"block_n": 8}',
        "--try",
        '{"block_n": 64}',
    )
    assert run.returncode == 0, run.stderr[-3000:]
    plans = [plan for _, plan in _TRIED.findall(run.stdout)]
    assert len(plans) == 3, run.stdout[-3000:]
    assert all("block_n=64" in plan for plan in plans), plans


def test_flush_choice_is_recorded_with_the_table(tmp_path):
    # --flush clean: the L2 emptied by reading a buffer instead of zeroing
    # one (on a GPU; without one each call runs once): the table says which.
    table = tmp_path / "table.md"
    run = _smoke("--kv-dtypes", "bf16", "--flush", "clean", "--md", str(table))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "L2 emptied before each call: clean" in table.read_text()
    refused = _smoke("--flush", "wipe")
    assert refused.returncode == 2 and "--flush" in refused.stderr


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_fixed_history", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fa3_as_documented(q, k, v, bt, seqlen_k, window, scale):
    """FlashAttention's varlen call over a paged cache as its interface
    documents it, in float64: one query per request (``q``: ``[R, heads,
    D]``), query head h on KV head ``h // (heads / kv_heads)``, query i of
    sq seeing the keys ``i + sk - sq - left .. i + sk - sq + right``
    (``left`` -1: no bound), here sq = 1."""
    R, heads, D = q.shape
    page = k.shape[1]
    group = heads // k.shape[2]
    out = torch.empty(R, heads, D, dtype=torch.float64, device=q.device)
    left, right = window
    for r in range(R):
        first = 0 if left < 0 else max(0, seqlen_k - 1 - left)
        pos = torch.arange(first, min(seqlen_k, seqlen_k + right), device=q.device)
        pages = bt[r].long()[pos // page]
        keys = k[pages, pos % page].double().repeat_interleave(group, dim=1)
        vals = v[pages, pos % page].double().repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,nhd->hn", q[r].double(), keys) * scale
        out[r] = torch.einsum("hn,nhd->hd", torch.softmax(scores, -1), vals)
    return out


@pytest.mark.parametrize(
    "shape",
    [
        (2, 100, 4, 40, 4, 2, 32),  # a window inside the context
        (3, 20, 2, 64, 6, 2, 16),  # the whole context (L <= W: no window)
        (2, 60, 8, 45, 16, 2, 32),  # a window that starts inside a page
    ],
)
def test_fa3_peer_asks_flash_attention_for_the_fixed_history_rule(shape):
    # The benchmark's FA3 column gives FlashAttention the rule as one query
    # per request whose query heads are the block's queries x heads, with a
    # sliding window. Fed through FA3's documented semantics, that call must
    # equal the fixed-history reference (FA3 itself needs a Hopper GPU).
    bench = _bench_module()
    R, L, B, W, nH, nKV, D = shape
    _, q, k, v, bt, ctx, qsl, _ = bench.build(shape, seed=1, kv_dtype="bf16")
    q, k, v = q.double(), k.double(), v.double()
    scale = D**-0.5
    heads = bench.fa3_queries(q, shape).reshape(R, nKV * B * (nH // nKV), D)
    got = _fa3_as_documented(q=heads, k=k, v=v, bt=bt, seqlen_k=L + B,
                             window=bench.fa3_window(shape), scale=scale)  # fmt: skip
    want = fixed_history_attention_reference(q, k, v, bt, ctx, qsl, W, scale)
    torch.testing.assert_close(bench.fa3_output(got, shape), want)
    # The query heads must be the block's own: swapping two queries' order
    # must show (the check above can fail).
    wrong = bench.fa3_output(got, shape).view(R, B, nH, D).flip(1).reshape(R * B, nH, D)
    assert not torch.allclose(wrong, want)


def _plain(*argv: str, interpret: str = "") -> subprocess.CompletedProcess:
    """The script with no GPU visible and, unless given, no interpreter."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET=interpret)
    return subprocess.run(
        [sys.executable, str(_SCRIPT), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    "argv, interpret, message",
    [
        # Without a GPU: one line up front, not a RuntimeError from the kernel
        # after a header and a bandwidth of 0.00 TB/s.
        (("--shapes", "2", "--kernel-only"), "", "no CUDA device"),
        (("--smoke", "--kernel-only"), "", "no CUDA device"),
        # Argument errors, before anything is timed.
        (("--smoke", "--shapes", "9"), "1", "--shapes 9: comma-separated indices 0..2"),
        (("--smoke", "--shapes", "x"), "1", "--shapes x: comma-separated indices"),
        (("--smoke", "--baseline-kernel", "/nonexistent.py"), "1", "no such file"),
    ],
)
def test_refusals_come_up_front_in_one_line(argv, interpret, message):
    run = _plain(*argv, interpret=interpret)
    assert run.returncode == 2, (run.stdout + run.stderr)[-3000:]
    assert message in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    assert run.stdout == ""  # no header, no bandwidth measurement
    if message == "no CUDA device":
        assert "--smoke with TRITON_INTERPRET=1" in run.stderr
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_kernel_codegen_refuses_a_table_file_in_a_missing_folder(tmp_path):
    """Before the code of every plan is computed, not after."""
    run = subprocess.run(
        [
            sys.executable,
            str(_ROOT / "benchmarks" / "kernel_codegen.py"),
            "--md",
            str(tmp_path / "missing" / "table.md"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 2, run.stderr[-3000:]
    assert "--md" in run.stderr and "no folder" in run.stderr, run.stderr
    assert run.stdout == ""
