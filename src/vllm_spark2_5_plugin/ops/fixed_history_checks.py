# SPDX-License-Identifier: Apache-2.0
"""Argument checks shared by the fixed-history kernel entry and its reference.

Each check raises ``TypeError``/``ValueError`` naming the argument. Only torch
is imported: none of these needs a device-to-host sync.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
from typing import NamedTuple

import torch

from vllm_spark2_5_plugin.ops.limits import FP8_CACHE_DTYPE

#: The fp8 cache dtype the kernel reads (``limits.FP8_CACHE_DTYPE``).
FP8_CACHE_TORCH_DTYPE: torch.dtype = getattr(torch, FP8_CACHE_DTYPE)


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
    # The kernels load element r at ``pointer + r``: a strided view (a column
    # of an [R, 2] tensor, say) would hand them other elements. Refused rather
    # than copied, since a copy made here would be captured into a CUDA graph
    # and replays would read the captured copy, not the caller's tensor. A
    # tensor of at most one element is contiguous whatever its stride says.
    for name, t in (
        ("context_lens", context_lens),
        ("query_start_loc", query_start_loc),
    ):
        if not t.is_contiguous():
            raise ValueError(
                f"{name} must be contiguous (stride 1), got stride {t.stride(0)}; "
                f"pass {name}.contiguous(), made before any CUDA-graph capture "
                "and updated in place for replays"
            )
    return num_reqs


def _as_float32(value: float) -> float:
    """``value`` rounded to float32, the precision the kernels use it in
    (out of float32's range: +-inf)."""
    return torch.tensor(value, dtype=torch.float32).item()


def check_scale(scale) -> float:
    """The softmax scale: a real number (``bool`` is not taken for one), not a
    tensor, whose float32 value is finite, and not 0 unless ``scale`` is 0;
    returned as a float.

    The kernel and the reference share this check, so they accept the same
    values: the kernel computes with the scale in float32, where a finite
    Python float such as 1e40 becomes inf and 1e-50 becomes 0.
    """
    if isinstance(scale, torch.Tensor):
        # Reading a device tensor's value would sync with the host inside a
        # call that CUDA graphs capture.
        raise TypeError(
            f"scale must be a real number, got a tensor of shape "
            f"{tuple(scale.shape)}; pass the softmax scale as a Python float"
        )
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(
            "scale must be a real number (the softmax scale of q . k, usually "
            f"head_dim ** -0.5), got {type(scale).__name__} {scale!r}"
        )
    value = float(scale)
    if not math.isfinite(value):
        raise ValueError(f"scale must be finite, got {value}")
    in_float32 = _as_float32(value)
    if not math.isfinite(in_float32) or (in_float32 == 0 and value != 0):
        raise ValueError(
            f"scale must fit in float32 (the precision the kernel uses), got "
            f"{value}, which float32 holds as {in_float32}"
        )
    return value


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


def _is_fp8(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point and dtype.itemsize == 1


def check_kv_dtypes(q, k_cache, v_cache, k_scale, v_scale):
    """The cache dtypes and the dequantization scales.

    Returns ``None`` for unquantized caches (then both scales must be
    ``None``), else ``(k_scale, v_scale)`` for float8_e4m3fn caches: each a
    float32 tensor with one element on q's device (read by the kernel on the
    device, never on the host) or a finite positive Python number (returned
    as a float).
    """
    fp8 = FP8_CACHE_TORCH_DTYPE
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype == torch.uint8:
            raise TypeError(
                f"{name} has dtype torch.uint8: an fp8 cache allocated as bytes "
                f"(as vLLM does) must be passed as {name}.view(torch.{FP8_CACHE_DTYPE})"
            )
        if _is_fp8(t.dtype) and t.dtype != fp8:
            raise TypeError(
                f"{name} has dtype {t.dtype}: the fixed-history kernel reads fp8 "
                f"caches as torch.{FP8_CACHE_DTYPE} only; serve with "
                "--kv-cache-dtype fp8_e4m3 (or fp8, or auto)"
            )
    if (k_cache.dtype == fp8) != (v_cache.dtype == fp8):
        raise TypeError(
            f"k_cache dtype {k_cache.dtype} differs from v_cache dtype "
            f"{v_cache.dtype}; an fp8 cache needs both in torch.{FP8_CACHE_DTYPE}"
        )
    scales = (("k_scale", k_scale), ("v_scale", v_scale))
    if k_cache.dtype != fp8:
        for name, s in scales:
            if s is not None:
                raise TypeError(
                    f"{name} is only for torch.{FP8_CACHE_DTYPE} caches; with "
                    f"{k_cache.dtype} caches pass {name}=None"
                )
        return None
    return tuple(check_cache_scale(name, s, q.device, "q") for name, s in scales)


def check_cache_scale(name: str, s, device: torch.device, beside: str):
    """An fp8 cache's ``k_scale``/``v_scale``: a float32 tensor of one element
    on ``device`` (that of the tensor named ``beside``), or a Python float;
    positive and finite in float32. The attention kernels and the KV-cache
    writer share it, so a scale one accepts the other does too."""
    if s is None:
        raise TypeError(
            f"{name} is required with torch.{FP8_CACHE_DTYPE} caches: pass the "
            f"attention layer's _{name} (a float32 tensor with one element), "
            "the factor that dequantizes the cache"
        )
    if isinstance(s, torch.Tensor):
        if s.dtype != torch.float32:
            raise TypeError(
                f"{name} must be a float32 tensor (vLLM's layer._{name}), got "
                f"dtype {s.dtype}"
            )
        if s.numel() != 1:
            raise ValueError(
                f"{name} must hold one element (shape [] or [1]), got shape "
                f"{tuple(s.shape)}"
            )
        if s.device != device:
            raise ValueError(
                f"{name} is on {s.device} but {beside} is on {device}; move it to "
                f"{beside}'s device"
            )
        return s
    if isinstance(s, bool) or not isinstance(s, numbers.Real):
        raise TypeError(
            f"{name} must be a float32 tensor with one element or a Python "
            f"float, got {type(s).__name__}"
        )
    value = float(s)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be finite and positive, got {value}")
    # The kernel receives the value as a float32 argument: a float beyond
    # float32's range would become inf, one below it 0.
    in_float32 = _as_float32(value)
    if not (math.isfinite(in_float32) and in_float32 > 0):
        raise ValueError(
            f"{name} must be finite and positive in float32 (the precision the "
            f"kernel uses), got {value}, which float32 holds as {in_float32}"
        )
    return value


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (TRITON_INTERPRET)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


class PagedKV(NamedTuple):
    """The paged cache and the per-request metadata one launch reads;
    ``scales`` is ``(k_scale, v_scale)`` for an fp8 cache (see
    :func:`check_kv_dtypes`), ``None`` otherwise; ``v_pages``: V's pages
    are held transposed (``fixed_history_attention(v_pages_transposed=True)``)."""

    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_table: torch.Tensor
    context_lens: torch.Tensor
    query_start_loc: torch.Tensor
    scales: tuple[torch.Tensor | float, torch.Tensor | float] | None = None
    v_pages: bool = False
