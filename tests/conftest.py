# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures. Imports neither vLLM nor the plugin's model code at module
level: the kernel tests also run on a GPU machine that has no vLLM."""

import os
from pathlib import Path

import pytest

# Small KV cache (GiB per CPU worker) and in-process engines for the tests that
# build `vllm.LLM` here; tests of the multiprocess mode set their own env.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default tiny Spark2_5 checkpoint (fp32, 4 layers, mixed types)."""
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("spark2_5-tiny"))
