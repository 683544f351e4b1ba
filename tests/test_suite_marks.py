# SPDX-License-Identifier: Apache-2.0
"""The ``cpu_build`` mark: the test session skips those tests where vLLM's
CUDA build runs on a GPU, and runs them (and every unmarked test) elsewhere.

CI has no GPU, so the CUDA side is simulated in a child pytest whose
``vllm_helpers.gpu_vllm_available`` answers True."""

from vllm_helpers import run_python

MARKED = "test_a_draft_declared_full_keeps_its_window_for_the_math"
UNMARKED = "test_full_is_offered_only_when_the_target_has_a_full_layer"


def run_window_tests(cuda_build: bool) -> str:
    result = run_python(
        f"""
        import sys
        sys.path.insert(0, "tests")
        import pytest
        import vllm_helpers
        vllm_helpers.gpu_vllm_available = lambda: {cuda_build}
        sys.exit(pytest.main([
            "-q", "-rs", "-p", "no:cacheprovider",
            "tests/test_kv_cache_window.py", "-k", "{MARKED} or {UNMARKED}",
        ]))
        """,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_cpu_build_tests_skip_under_a_cuda_build():
    out = run_window_tests(cuda_build=True)
    assert "1 passed, 1 skipped" in out, out[-2000:]
    assert "written for vLLM's CPU build" in out and "pytest -m cuda" in out


def test_cpu_build_tests_run_elsewhere():
    out = run_window_tests(cuda_build=False)
    assert "2 passed" in out and "skipped" not in out, out[-2000:]
