# SPDX-License-Identifier: Apache-2.0
"""Plain PyTorch fixed-history attention: the kernel's reference and its CPU
path (``fixed_history_attention(..., reference=True)``, also exported as
``fixed_history_attention_reference``). Needs only torch."""

from __future__ import annotations

import torch

from vllm_spark2_5_plugin.ops.fixed_history_checks import PagedKV
from vllm_spark2_5_plugin.ops.v_pages import gather_v_rows


def attend_reference(
    q: torch.Tensor,
    kv: PagedKV,
    window: int | None,
    scale: float,
    out: torch.Tensor,
) -> torch.Tensor:
    """Fixed-history attention in plain PyTorch, written into ``out``.

    The arguments are ``fixed_history_attention``'s after its checks
    (``window``: ``None`` or > 0). Any floating dtype and any device; computes
    in float64 for float64 inputs and float32 otherwise. Slow (a Python loop
    over requests, with a host sync): meant for tests and CPU. Reading the
    metadata on the host, it refuses what the kernel cannot check: a negative
    ``context_lens``, keys past the block table and page ids outside the
    cache among the pages a request reads (``ValueError``). An fp8 cache
    (``kv.scales`` set) is dequantized as ``k_cache * k_scale`` and
    ``v_cache * v_scale`` in that precision. ``kv.v_pages``: V read from
    pages that hold it transposed (``ops.v_pages.gather_v_rows``).
    """
    k_cache, v_cache, block_table, context_lens, query_start_loc, scales = kv[:6]
    num_reqs = context_lens.shape[0]
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    num_heads = q.shape[1]
    _, page_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    qsl = query_start_loc.tolist()
    ctx = context_lens.tolist()
    num_blocks = k_cache.shape[0]
    max_kv = block_table.shape[1] * page_size
    for r in range(num_reqs):
        first, end = qsl[r], qsl[r + 1]
        if end <= first:
            continue
        ctx_len = ctx[r]
        if ctx_len < 0:
            raise ValueError(
                f"context_lens[{r}] = {ctx_len} is negative: request {r} needs "
                "L_r >= 0 context tokens before its draft block"
            )
        lo = 0 if window is None else max(0, ctx_len - window)
        hi = ctx_len + (end - first)
        if hi > max_kv:
            raise ValueError(
                f"request {r}: keys {lo}..{hi - 1} do not fit its block table "
                f"({max_kv} positions)"
            )
        # The page ids this request reads, checked on the host (the loop syncs
        # anyway): indexing with -1 would silently read the last cache block,
        # and an id past the cache would fail with a bare IndexError. Entries
        # outside these pages (padding, often -1) are never read.
        first_page = lo // page_size
        used = block_table[r, first_page : (hi - 1) // page_size + 1].tolist()
        for j, page in enumerate(used, first_page):
            if not 0 <= page < num_blocks:
                keys = max(lo, j * page_size), min(hi, (j + 1) * page_size) - 1
                raise ValueError(
                    f"block_table[{r}, {j}] = {page} is not a page id of the "
                    f"cache (0..{num_blocks - 1}): request {r} reads its keys "
                    f"{keys[0]}..{keys[1]} from that page; pad block_table "
                    "only past the pages a request reads"
                )
        pos = torch.arange(lo, hi, device=q.device)
        pages = block_table[r].long()[pos // page_size]
        slots = pos % page_size
        k = k_cache[pages, slots].to(compute)  # [n, nKV, D]
        if kv.v_pages:
            v = gather_v_rows(v_cache, pages, slots).to(compute)
        else:
            v = v_cache[pages, slots].to(compute)
        if scales is not None:
            k = k * _as_factor(scales[0], compute)
            v = v * _as_factor(scales[1], compute)
        k = k.repeat_interleave(group, dim=1)  # [n, nH, D]
        v = v.repeat_interleave(group, dim=1)
        qr = q[first:end].to(compute)  # [b, nH, D]
        scores = torch.einsum("bhd,nhd->hbn", qr, k) * scale
        probs = torch.softmax(scores, dim=-1)
        out[first:end] = torch.einsum("hbn,nhd->bhd", probs, v).to(out.dtype)
    return out


def _as_factor(scale: torch.Tensor | float, dtype: torch.dtype):
    """A dequantization scale as a 0-d tensor of ``dtype`` or a float."""
    if isinstance(scale, torch.Tensor):
        return scale.reshape(()).to(dtype)
    return float(scale)
