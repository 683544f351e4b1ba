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
# The engine tests compare float32 engines with a float64 reference at 1e-4.
# On a GPU, Triton multiplies float32 in TF32 (10 mantissa bits) unless told
# otherwise, and vLLM's TRITON_ATTN backend (the one a float32 engine gets)
# passes no precision: the logprobs then differ by ~1e-3 by design. Exact
# float32 for the whole process (Triton's in-memory kernel cache does not key
# on this variable, so setting it per test would depend on test order). No
# effect on vLLM's CPU build.
os.environ.setdefault("TRITON_F32_DEFAULT", "ieee")


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default tiny Spark2_5 checkpoint (fp32, 4 layers, mixed types)."""
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("spark2_5-tiny"))


@pytest.fixture(scope="module")
def world():
    """A one-process gloo world for building models with vLLM's ``get_model``,
    torn down after the module (other modules build whole ``LLM``s)."""
    import vllm_spark2_5_plugin

    vllm_spark2_5_plugin.register()
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import (
        init_distributed_environment,
        initialize_model_parallel,
    )
    from vllm.distributed.parallel_state import (
        cleanup_dist_env_and_memory,
        model_parallel_is_initialized,
    )

    owned = not model_parallel_is_initialized()
    if owned:
        from vllm.utils.network_utils import get_open_port

        with set_current_vllm_config(VllmConfig()):
            init_distributed_environment(
                world_size=1,
                rank=0,
                local_rank=0,
                distributed_init_method=f"tcp://127.0.0.1:{get_open_port()}",
                backend="gloo",
            )
            initialize_model_parallel(1, 1)
    yield
    if owned:
        cleanup_dist_env_and_memory()


def pytest_collection_modifyitems(config, items):
    """Under a CUDA build of vLLM, skip the tests marked ``cpu_build`` (they
    check what vLLM's CPU build does: its verdicts, the PyTorch reference in
    place of the GPU kernels, models on the CPU; their GPU counterparts carry
    the ``cuda`` mark), and those marked ``ranks(n)`` where there are fewer
    than n GPUs (vLLM's ParallelConfig refuses a world size larger than the
    GPUs present before anything of the plugin runs; the CPU build runs any
    number of ranks as processes)."""
    from vllm_helpers import gpu_vllm_available

    if not gpu_vllm_available():
        return
    import torch

    gpus = torch.cuda.device_count()
    cpu_build = pytest.mark.skip(
        reason="written for vLLM's CPU build; under its CUDA build run "
        "`pytest -m cuda tests/`"
    )
    for item in items:
        if item.get_closest_marker("cpu_build"):
            item.add_marker(cpu_build)
        ranks = item.get_closest_marker("ranks")
        if ranks and ranks.args[0] > gpus:
            item.add_marker(
                pytest.mark.skip(
                    reason=f"configures {ranks.args[0]} ranks: vLLM's CUDA build "
                    f"needs as many GPUs ({gpus} here)"
                )
            )
