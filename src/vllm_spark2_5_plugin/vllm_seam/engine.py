# SPDX-License-Identifier: Apache-2.0
"""An offline engine's shutdown (vLLM 0.32.0's ``LLM`` has no public one)."""

from __future__ import annotations

import inspect
from typing import Any

from vllm_spark2_5_plugin.vllm_seam.hooks import expect as _expect
from vllm_spark2_5_plugin.vllm_seam.hooks import hook_point as _hook_point


def shutdown_llm(llm: Any) -> None:
    """Stop ``llm``'s engine core now, releasing its model and KV cache.

    Left to garbage collection at interpreter exit, vLLM waits only briefly
    for a separate engine-core process and then logs that it force-killed
    it; an in-process engine keeps its memory for as long as anything holds
    the ``LLM``."""
    llm.llm_engine.engine_core.shutdown()


@_hook_point(
    "LLM.llm_engine.engine_core is the engine-core client, whose shutdown() "
    "stops the engine (in process or not)"
)
def _check_llm_shutdown() -> None:
    from vllm.v1.engine.core_client import EngineCoreClient
    from vllm.v1.engine.llm_engine import LLMEngine

    _expect(callable(getattr(EngineCoreClient, "shutdown", None)), "client.shutdown")
    source = inspect.getsource(LLMEngine.__init__)
    _expect("self.engine_core = EngineCoreClient" in source, "LLMEngine.engine_core")
