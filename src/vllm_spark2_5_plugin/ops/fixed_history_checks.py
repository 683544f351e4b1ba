# SPDX-License-Identifier: Apache-2.0
"""Argument checks shared by the fixed-history kernel entry and its reference.

Each check raises ``TypeError``/``ValueError`` naming the argument. Only torch
is imported: none of these needs a device-to-host sync.
"""

from __future__ import annotations

import operator
import os
from typing import NamedTuple

import torch


def check_window(sliding_window) -> int | None:
    """``None`` means full attention; a positive int is the window W."""
    if sliding_window is None:
        return None
    if isinstance(sliding_window, bool):
        raise TypeError(
            f"sliding_window must be a positive int or None, got {sliding_window!r}"
        )
    try:
        w = operator.index(sliding_window)
    except TypeError:
        raise TypeError(
            "sliding_window must be a positive int or None (None = full "
            f"attention), got {type(sliding_window).__name__} {sliding_window!r}"
        ) from None
    if w <= 0:
        raise ValueError(
            f"sliding_window must be a positive int, got {w}; pass None for "
            "full attention (every query sees positions 0 .. L+B-1)"
        )
    return w


def check_metadata(q, block_table, context_lens, query_start_loc) -> int:
    """int32 tensors on q's device with consistent shapes; returns R."""
    for name, t in (
        ("block_table", block_table),
        ("context_lens", context_lens),
        ("query_start_loc", query_start_loc),
    ):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.int32:
            raise TypeError(
                f"{name} must be int32 (vLLM's metadata dtype), got {t.dtype}; "
                f"convert it with {name}.to(torch.int32)"
            )
        if t.device != q.device:
            raise ValueError(
                f"{name} is on {t.device} but q is on {q.device}; move it to q's device"
            )
    if context_lens.dim() != 1:
        raise ValueError(
            f"context_lens must be 1-D [R], got shape {tuple(context_lens.shape)}"
        )
    num_reqs = context_lens.shape[0]
    if query_start_loc.dim() != 1 or query_start_loc.shape[0] != num_reqs + 1:
        raise ValueError(
            f"query_start_loc must be 1-D [R+1] = [{num_reqs + 1}] for "
            f"R={num_reqs} requests, got shape {tuple(query_start_loc.shape)}"
        )
    if block_table.dim() != 2 or block_table.shape[0] < num_reqs:
        raise ValueError(
            f"block_table must be 2-D [>= R, max_blocks] with R={num_reqs}, "
            f"got shape {tuple(block_table.shape)}"
        )
    if block_table.stride(1) != 1:
        raise ValueError(
            f"block_table must have unit stride on its last dim, got strides "
            f"{tuple(block_table.stride())}; pass block_table.contiguous()"
        )
    return num_reqs


def check_tensors(q, k_cache, v_cache, out) -> None:
    """Shapes and devices of q, the K/V cache views and ``out``."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 3:
        raise ValueError(f"q must be 3-D [T, nH, D], got shape {tuple(q.shape)}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dim() != 4:
            raise ValueError(
                f"{name} must be 4-D [num_blocks, block_size, nKV, D] (vLLM's "
                f"kv_cache.transpose(1, 2).split(D, -1)), got shape "
                f"{tuple(t.shape)}"
            )
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(
            f"k_cache shape {tuple(k_cache.shape)} differs from v_cache shape "
            f"{tuple(v_cache.shape)}"
        )
    num_heads, head_dim = q.shape[1:]
    num_kv_heads, kv_dim = k_cache.shape[2:]
    if kv_dim != head_dim:
        raise ValueError(
            f"head dim mismatch: q has D={head_dim}, k_cache/v_cache have D={kv_dim}"
        )
    if num_kv_heads <= 0 or num_heads % num_kv_heads != 0:
        raise ValueError(
            f"q's head count nH={num_heads} must be a multiple of the KV head "
            f"count nKV={num_kv_heads} (GQA)"
        )
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
        if out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
            raise ValueError(
                f"out must match q: shape {tuple(q.shape)}, dtype {q.dtype}, "
                f"device {q.device}; got shape {tuple(out.shape)}, dtype "
                f"{out.dtype}, device {out.device}"
            )


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (TRITON_INTERPRET)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


class PagedKV(NamedTuple):
    """The paged cache and the per-request metadata one launch reads."""

    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_table: torch.Tensor
    context_lens: torch.Tensor
    query_start_loc: torch.Tensor
