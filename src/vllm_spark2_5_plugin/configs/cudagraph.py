# SPDX-License-Identifier: Apache-2.0
"""CUDA-graph capture sizes for a DSpark server (the rationale:
``vllm_spark2_5_plugin.tools.cudagraph_sizes``, which prints them).

vLLM 0.32.0's V2 model runner captures the target's decode steps (``R * (K +
1)`` tokens for ``R`` requests) and the DSpark draft's steps (``R * K``) from
one list of token counts; its default list stops at 512 tokens on an H200.
"""

from __future__ import annotations

import json
from typing import Any

#: Request counts that get a graph (then every multiple of 64 up to the cap).
LADDER = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448)


def request_ladder(max_num_seqs: int) -> list[int]:
    """Request counts ``<= max_num_seqs`` that get a graph, ``max_num_seqs``
    included."""
    if isinstance(max_num_seqs, bool) or not isinstance(max_num_seqs, int):
        raise TypeError(f"max_num_seqs must be an int, got {max_num_seqs!r}")
    if max_num_seqs < 1:
        raise ValueError(f"max_num_seqs must be >= 1, got {max_num_seqs}")
    rungs = {n for n in LADDER if n <= max_num_seqs}
    rungs.update(range(512, max_num_seqs + 1, 64))
    rungs.add(max_num_seqs)
    return sorted(rungs)


def dspark_capture_sizes(num_speculative_tokens: int, max_num_seqs: int) -> list[int]:
    """Token counts ``n * K`` (draft steps) and ``n * (K + 1)`` (target decode
    steps) for every rung ``n`` of :func:`request_ladder`."""
    k = num_speculative_tokens
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"num_speculative_tokens must be an int >= 1, got {k!r}")
    return sorted({n * m for n in request_ladder(max_num_seqs) for m in (k, k + 1)})


def compilation_config(num_speculative_tokens: int, max_num_seqs: int) -> str:
    """The JSON for ``vllm serve --compilation-config``."""
    sizes = dspark_capture_sizes(num_speculative_tokens, max_num_seqs)
    return json.dumps({"cudagraph_capture_sizes": sizes}, separators=(",", ":"))


def coverage_hint(vllm_config: Any) -> str | None:
    """A start-up hint when CUDA graphs stop short of ``max_num_seqs``.

    ``None`` when graphs are off or when the largest capture size holds a
    target decode step of ``max_num_seqs`` requests (``R * (K + 1)`` tokens).
    Otherwise a message with the request count the graphs stop at and the
    ``--compilation-config`` that covers the rest.
    """
    spec = vllm_config.speculative_config
    compilation = vllm_config.compilation_config
    mode = compilation.cudagraph_mode
    if spec is None or mode is None or getattr(mode, "name", str(mode)) == "NONE":
        return None
    k = spec.num_speculative_tokens
    max_num_seqs = vllm_config.scheduler_config.max_num_seqs
    sizes = compilation.cudagraph_capture_sizes or []
    largest = compilation.max_cudagraph_capture_size or max(sizes, default=0)
    covered = largest // (k + 1)
    if not k or max_num_seqs <= covered:
        return None
    return (
        f"DSpark with {k} draft tokens: CUDA graphs (largest capture size "
        f"{largest} tokens) cover steps of up to {covered} requests; steps of "
        f"more, up to max_num_seqs={max_num_seqs}, run without graphs and the "
        f"draft eagerly. To capture them, serve with --max-num-batched-tokens "
        f">= {max_num_seqs * (k + 1)} --compilation-config "
        f"'{compilation_config(k, max_num_seqs)}' (python -m "
        "vllm_spark2_5_plugin.tools.cudagraph_sizes prints it)"
    )
