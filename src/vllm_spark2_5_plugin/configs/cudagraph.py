# SPDX-License-Identifier: Apache-2.0
"""CUDA-graph capture sizes for a DSpark server (the rationale:
``vllm_spark2_5_plugin.tools.cudagraph_sizes``, which prints them).

vLLM 0.32.0's V2 model runner captures the target's decode steps (``R * (K +
1)`` tokens for ``R`` requests) and the DSpark draft's steps (``R * K``) from
one list of token counts; its default list stops at 512 tokens on an H200.
Unless the user chose the sizes, :func:`widen_capture_sizes` replaces that
default for Spark2_5 DSpark servers with a list that covers ``max_num_seqs``
(measured on an H200 at 500 concurrent requests: +42% output tokens/s served,
``benchmarks/dspark_serving_h200.md``).
"""

from __future__ import annotations

import json
from typing import Any

#: vLLM 0.32.0's default ceiling of its capture sizes, in tokens (Hopper and
#: older GPUs; 1024 on data-centre Blackwell).
VLLM_DEFAULT_MAX_CAPTURE_SIZE = 512

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


def _is_none_mode(mode: Any) -> bool:
    """Whether a ``CUDAGraphMode`` (or its name) is ``NONE``: no graphs."""
    return getattr(mode, "name", str(mode)) == "NONE"


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
    if spec is None or mode is None or _is_none_mode(mode):
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


def widen_capture_sizes(vllm_config: Any, *, cuda: bool) -> list[int] | None:
    """Capture sizes covering every batch of a Spark2_5 DSpark server.

    Runs before ``VllmConfig.__post_init__`` derives vLLM's default list (the
    caller has checked that the draft is Spark2_5's DSpark). When the user
    set neither ``cudagraph_capture_sizes`` nor ``max_cudagraph_capture_size``
    nor ``performance_mode="interactivity"``, graphs are on (``cuda``: a CUDA
    platform; not ``enforce_eager``, mode not ``NONE``) and vLLM's default
    would stop short of ``max_num_seqs`` requests, sets
    ``compilation_config.cudagraph_capture_sizes`` to
    :func:`dspark_capture_sizes` for ``min(max_num_seqs,
    max_num_batched_tokens // (K + 1))`` requests and returns it; otherwise
    changes nothing and returns ``None``. The larger graphs' memory comes out
    of the KV cache (vLLM profiles it before sizing the cache).
    """
    spec = vllm_config.speculative_config
    compilation = vllm_config.compilation_config
    model = vllm_config.model_config
    mode = compilation.cudagraph_mode
    if (
        not cuda
        or spec is None
        or (model is not None and model.enforce_eager)
        or (mode is not None and _is_none_mode(mode))  # None: vLLM's default
        or compilation.cudagraph_capture_sizes is not None
        or compilation.max_cudagraph_capture_size is not None
        # vLLM's fine-grained small-batch list, the user's choice
        or getattr(vllm_config, "performance_mode", None) == "interactivity"
    ):
        return None
    k = spec.num_speculative_tokens
    if not k:
        return None
    scheduler = vllm_config.scheduler_config
    requests = scheduler.max_num_seqs
    if scheduler.max_num_batched_tokens:
        requests = min(requests, scheduler.max_num_batched_tokens // (k + 1))
    if requests * (k + 1) <= VLLM_DEFAULT_MAX_CAPTURE_SIZE:
        return None  # vLLM's default list covers it
    sizes = dspark_capture_sizes(k, requests)
    compilation.cudagraph_capture_sizes = sizes
    return sizes


def widened_message(sizes: list[int], num_speculative_tokens: int) -> str:
    """The start-up line that says what :func:`widen_capture_sizes` did."""
    k = num_speculative_tokens
    return (
        f"DSpark with {k} draft tokens: CUDA graphs for steps of up to "
        f"{sizes[-1] // (k + 1)} requests ({len(sizes)} capture sizes up to "
        f"{sizes[-1]} tokens) instead of vLLM's default of "
        f"{VLLM_DEFAULT_MAX_CAPTURE_SIZE} tokens, so that the draft does not "
        "run eagerly on busy servers; the graphs' memory comes out of the KV "
        "cache. To keep vLLM's default, serve with --compilation-config "
        f"'{{\"max_cudagraph_capture_size\":{VLLM_DEFAULT_MAX_CAPTURE_SIZE}}}'"
    )
