# SPDX-License-Identifier: Apache-2.0
"""The ``cpu_build`` and ``ranks(n)`` marks: the test session skips the
first where vLLM's CUDA build runs on a GPU, and the second where that build
has fewer than n GPUs; elsewhere both run, as every unmarked test does.

CI has no GPU, so the CUDA side is simulated in a child pytest whose
``vllm_helpers.gpu_vllm_available`` answers True (and torch counts no GPU)."""

from vllm_helpers import run_python

MARKED = "test_a_draft_declared_full_keeps_its_window_for_the_math"
UNMARKED = "test_full_is_offered_only_when_the_target_has_a_full_layer"
TWO_RANKS = "test_pipeline_parallel_is_refused"


def run_tests(cuda_build: bool, path: str, selection: str) -> str:
    result = run_python(
        f"""
        import sys
        sys.path.insert(0, "tests")
        import pytest
        import vllm_helpers
        vllm_helpers.gpu_vllm_available = lambda: {cuda_build}
        sys.exit(pytest.main([
            "-q", "-rs", "-p", "no:cacheprovider", "{path}", "-k", "{selection}",
        ]))
        """,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def run_window_tests(cuda_build: bool) -> str:
    return run_tests(
        cuda_build, "tests/test_kv_cache_window.py", f"{MARKED} or {UNMARKED}"
    )


def test_cpu_build_tests_skip_under_a_cuda_build():
    out = run_window_tests(cuda_build=True)
    assert "1 passed, 1 skipped" in out, out[-2000:]
    assert "written for vLLM's CPU build" in out and "pytest -m cuda" in out


def test_cpu_build_tests_run_elsewhere():
    out = run_window_tests(cuda_build=False)
    assert "2 passed" in out and "skipped" not in out, out[-2000:]


def test_two_rank_tests_skip_under_a_cuda_build_without_two_gpus():
    out = run_tests(True, "tests/test_dspark_config.py", TWO_RANKS)
    assert "1 skipped" in out and "passed" not in out, out[-2000:]
    assert "configures 2 ranks: vLLM's CUDA build needs as many GPUs (0 here)" in out


def test_two_rank_tests_run_on_the_cpu_build():
    out = run_tests(False, "tests/test_dspark_config.py", TWO_RANKS)
    assert "1 passed" in out and "skipped" not in out, out[-2000:]
