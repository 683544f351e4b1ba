# SPDX-License-Identifier: Apache-2.0
"""Plain PyTorch fixed-history attention: the kernel's reference and its CPU
path. Needs only torch."""

from __future__ import annotations

import torch

from vllm_spark2_5_plugin.ops.fixed_history_checks import (
    check_metadata,
    check_tensors,
    check_window,
)


def fixed_history_attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    sliding_window: int | None,
    scale: float,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Plain PyTorch version of ``fixed_history_attention``.

    Same arguments and key window. Accepts any floating dtype (also float32 and
    float64, which the kernel refuses) and any device; computes in float64 for
    float64 inputs and float32 otherwise, and returns ``q``'s dtype. Slow (a
    Python loop over requests, with a host sync): meant for tests and CPU.
    """
    check_tensors(q, k_cache, v_cache, out)
    window = check_window(sliding_window)
    num_reqs = check_metadata(q, block_table, context_lens, query_start_loc)
    if out is None:
        out = torch.empty_like(q)
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    num_heads = q.shape[1]
    _, page_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    qsl = query_start_loc.tolist()
    ctx = context_lens.tolist()
    max_kv = block_table.shape[1] * page_size
    for r in range(num_reqs):
        first, end = qsl[r], qsl[r + 1]
        if end <= first:
            continue
        ctx_len = ctx[r]
        lo = 0 if window is None else max(0, ctx_len - window)
        hi = ctx_len + (end - first)
        if ctx_len < 0 or hi > max_kv:
            raise ValueError(
                f"request {r}: keys {lo}..{hi - 1} do not fit its block table "
                f"({max_kv} positions)"
            )
        pos = torch.arange(lo, hi, device=q.device)
        pages = block_table[r].long()[pos // page_size]
        slots = pos % page_size
        k = k_cache[pages, slots].to(compute)  # [n, nKV, D]
        v = v_cache[pages, slots].to(compute)
        k = k.repeat_interleave(group, dim=1)  # [n, nH, D]
        v = v.repeat_interleave(group, dim=1)
        qr = q[first:end].to(compute)  # [b, nH, D]
        scores = torch.einsum("bhd,nhd->hbn", qr, k) * scale
        probs = torch.softmax(scores, dim=-1)
        out[first:end] = torch.einsum("hbn,nhd->bhd", probs, v).to(out.dtype)
    return out
