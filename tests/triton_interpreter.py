# SPDX-License-Identifier: Apache-2.0
"""Running a test file's Triton kernels under the Triton interpreter.

``TRITON_INTERPRET=1`` must be set before Triton decorates a kernel, that is
before its module is first imported, and other test files may already have
imported it without the interpreter. A test file therefore runs itself again
in a child process (:func:`run_interpreter_suite`) with the interpreter on
and an environment marker set, under which only its ``test_interp_*`` tests
exist; the child installs :func:`e4m3_rounding_shim` first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

_ROOT = Path(__file__).resolve().parents[1]


def e4m3_rounding_shim() -> None:
    """Work around the Triton interpreter's rounding to e4m3 (3.7-3.9).

    When rounding carries out of the mantissa it does not raise the exponent:
    7.98 becomes 4.0 instead of 8.0, 0.998 becomes 0.5; and it rounds ties
    away from zero. A GPU rounds in hardware (``cvt.rn.satfinite``),
    correctly. Test-only: round float32/float16 values to e4m3 through torch
    (to nearest, ties to even, saturating at +-448 like the hardware).
    """
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as ti

    orig = ti._convert_float
    if getattr(orig, "_spark_e4m3_shim", False):
        return
    widths = {tl.float32: np.float32, tl.float16: np.float16}

    def convert(input, input_dtype, output_dtype, rounding_mode):
        if output_dtype != tl.float8e4nv or input_dtype not in widths:
            return orig(input, input_dtype, output_dtype, rounding_mode)
        values = np.frombuffer(input.tobytes(), dtype=widths[input_dtype])
        x = torch.from_numpy(values.astype(np.float32)).clamp(-448.0, 448.0)
        return x.to(torch.float8_e4m3fn).view(torch.uint8).numpy().reshape(input.shape)

    convert._spark_e4m3_shim = True
    ti._convert_float = convert


def run_interpreter_suite(test_file: str, child_env: str, timeout: int) -> None:
    """Runs ``test_file`` in a child pytest with ``TRITON_INTERPRET=1`` and
    ``child_env=1`` (the package's sources first on the path); fails with
    the child's output unless all its tests passed and none was skipped."""
    env = dict(os.environ, TRITON_INTERPRET="1", **{child_env: "1"})
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_ROOT / "src"), env.get("PYTHONPATH", "")) if p
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "--noconftest"]
    cmd += ["-p", "no:cacheprovider", "-o", "addopts=", str(Path(test_file))]
    proc = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=str(_ROOT)
    )
    assert proc.returncode == 0, (
        "interpreter suite failed:\n" + proc.stdout[-8000:] + proc.stderr[-4000:]
    )
    assert " passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout
