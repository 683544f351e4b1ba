# SPDX-License-Identifier: Apache-2.0
"""``vllm_helpers.llm_engine`` gives an engine's memory back on leaving.

Several engines start one after another in one test process (the pooling
and KV-cache files, test_lora). Under vLLM's CUDA build the second one
refuses to start if the first still holds the GPU's memory; on the CPU build
the same leak goes unnoticed. So the release is checked here directly: the
model and its KV caches are gone once the ``with`` block ends, although the
test still holds the ``LLM`` by its ``as`` name."""

from __future__ import annotations

import gc
import weakref

import pytest
from vllm_helpers import llm_engine

pytestmark = pytest.mark.slow


def test_leaving_the_engine_frees_its_model_and_kv_caches(tiny_checkpoint):
    import torch

    on_gpu = torch.cuda.is_available()
    before = torch.cuda.memory_allocated() if on_gpu else 0
    with llm_engine(
        tiny_checkpoint, dtype="float32", max_model_len=128, enforce_eager=True
    ) as llm:
        # In-process engine core (the tests' VLLM_ENABLE_V1_MULTIPROCESSING=0).
        runner = llm.llm_engine.engine_core.engine_core.model_executor
        runner = runner.driver_worker.model_runner
        model = weakref.ref(runner.get_model())
        caches = [weakref.ref(t) for t in getattr(runner, "kv_caches", [])]
        del runner
        assert model() is not None
        if on_gpu:
            held = torch.cuda.memory_allocated()
            assert held > before
        else:
            assert caches and all(c() is not None for c in caches)
    gc.collect()
    # The test's name ``llm`` still holds the LLM here.
    assert model() is None, "the model outlived the engine"
    assert all(c() is None for c in caches), "a KV cache outlived the engine"
    if on_gpu:
        # The KV cache alone takes most of the GPU's memory.
        assert torch.cuda.memory_allocated() - before < (held - before) / 100
