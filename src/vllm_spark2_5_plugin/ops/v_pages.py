# SPDX-License-Identifier: Apache-2.0
"""Writing K/V rows into vLLM's paged cache, optionally with "V pages transposed".

The caches are vLLM's per-layer views ``k_cache``, ``v_cache``, each
``[num_blocks, page_size, nKV, D]``. A token with ``slot = slot_mapping[t]``
(negative: padding, skipped) goes to page ``slot // page_size``, key
``k = slot % page_size`` of that page:

* rows (vLLM's layout): K at ``k_cache[page, k, h]``, V at ``v_cache[page, k, h]``;
* V pages transposed (``v_pages_transposed=True``, page size 16 and head dim
  128 only): K as before; per (page, head) the V bytes hold V^T, 128 dims by 16
  keys, the keys in the order :func:`v_page_keys`. Element ``d`` of key ``k``
  is at ``v_cache[page, d // 8, h, (d % 8) * 16 + pos(k)]`` with ``pos =
  v_page_positions()``: row ``s`` of a page holds dims ``8s .. 8s+7``.

An fp8 cache (``torch.float8_e4m3fn``, with per-tensor float32 scales) stores
``x / scale`` clamped to +-448 and rounded to e4m3 (to nearest, ties to even);
any other cache stores ``x`` cast to its dtype.

:func:`write_kv_cache_reference` is the plain-PyTorch writer (masking on the
host); ``ops.kv_cache_write.write_kv_cache`` is the Triton kernel with the same
arguments. Only torch is imported.
"""

from __future__ import annotations

import torch

from vllm_spark2_5_plugin.ops.fixed_history_checks import (
    FP8_CACHE_TORCH_DTYPE,
    check_cache_scale,
)

#: The page size and head dim that "V pages transposed" supports.
V_PAGE_SIZE = 16
V_PAGE_HEAD_DIM = 128
#: Dims per row of a transposed V page (V_PAGE_HEAD_DIM / V_PAGE_SIZE rows).
_DIMS_PER_ROW = 8

_E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max


def v_page_positions(device=None) -> torch.Tensor:
    """Position of each key 0..15 within a transposed V page's 16 columns of
    one dim: ``4 * ((k % 8) // 2) + 2 * (k // 8) + k % 2``."""
    k = torch.arange(V_PAGE_SIZE, device=device)
    return 4 * ((k % 8) // 2) + 2 * (k // 8) + k % 2


def v_page_keys(device=None) -> torch.Tensor:
    """The key at each position 0..15 (the inverse of :func:`v_page_positions`):
    ``8 * ((p // 2) % 2) + 2 * (p // 4) + p % 2``."""
    p = torch.arange(V_PAGE_SIZE, device=device)
    return 8 * ((p // 2) % 2) + 2 * (p // 4) + p % 2


def check_v_pages(v_cache: torch.Tensor) -> None:
    """Refuses a V cache that "V pages transposed" cannot hold."""
    page_size, head_dim = v_cache.shape[1], v_cache.shape[3]
    if (page_size, head_dim) != (V_PAGE_SIZE, V_PAGE_HEAD_DIM):
        raise ValueError(
            f"v_pages_transposed needs page size {V_PAGE_SIZE} and head dim "
            f"{V_PAGE_HEAD_DIM}, got v_cache with page size {page_size} and head "
            f"dim {head_dim}"
        )


def _v_columns(v_cache: torch.Tensor) -> torch.Tensor:
    """``v_cache`` as ``[num_blocks, rows, nKV, 8 dims, 16 positions]``."""
    return v_cache.unflatten(-1, (_DIMS_PER_ROW, V_PAGE_SIZE))


def gather_v_rows(
    v_cache: torch.Tensor, pages: torch.Tensor, slots: torch.Tensor
) -> torch.Tensor:
    """The V rows ``[n, nKV, D]`` of keys ``slots`` (in-page indices) of pages
    ``pages`` in a V-pages-transposed cache, in the cache's dtype."""
    check_v_pages(v_cache)
    cols = v_page_positions(v_cache.device)[slots]
    # [n, rows, nKV, 8] -> [n, nKV, rows * 8]: dim d = 8 * row + j.
    return _v_columns(v_cache)[pages, :, :, :, cols].transpose(1, 2).flatten(2)


def check_kv_write(
    key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale, v_pages_transposed
):
    """The checks the reference and the kernel share; each raises
    ``TypeError``/``ValueError`` naming the argument.

    Returns ``(key, value, scales)``: key and value as ``[T, nKV, D]`` views,
    ``scales`` the checked ``(k_scale, v_scale)`` for fp8 caches, else ``None``.
    """
    named = (("key", key), ("value", value), ("k_cache", k_cache))
    named += (("v_cache", v_cache), ("slot_mapping", slot_mapping))
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device != k_cache.device:
            raise ValueError(f"{name} is on {t.device} but k_cache on {k_cache.device}")
    if k_cache.dim() != 4 or v_cache.shape != k_cache.shape:
        raise ValueError(
            "k_cache and v_cache must both be [num_blocks, page_size, nKV, D], got "
            f"shapes {tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    if v_pages_transposed:
        check_v_pages(v_cache)
    fp8 = FP8_CACHE_TORCH_DTYPE
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype.itemsize == 1 and t.dtype != fp8:
            raise TypeError(
                f"{name} has dtype {t.dtype}: an fp8 cache must be passed as "
                f"{name}.view(torch.float8_e4m3fn)"
            )
    if (k_cache.dtype == fp8) != (v_cache.dtype == fp8):
        raise TypeError(
            f"k_cache dtype {k_cache.dtype} and v_cache dtype {v_cache.dtype}: an fp8 "
            "cache needs both in torch.float8_e4m3fn"
        )
    scales = None
    if k_cache.dtype == fp8:
        scales = tuple(
            check_cache_scale(name, s, k_cache.device, "k_cache")
            for name, s in (("k_scale", k_scale), ("v_scale", v_scale))
        )
    else:
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            if s is not None:
                raise TypeError(
                    f"{name} is only for torch.float8_e4m3fn caches; with "
                    f"{k_cache.dtype} caches pass {name}=None"
                )
    if slot_mapping.dim() != 1 or slot_mapping.dtype != torch.int64:
        raise TypeError(
            "slot_mapping must be a 1-D int64 tensor, got dtype "
            f"{slot_mapping.dtype} and shape {tuple(slot_mapping.shape)}"
        )
    # The kernel loads token t's slot at ``slot_mapping_ptr + t``: a strided
    # view would send rows to other tokens' slots. Refused rather than copied,
    # since a copy would be captured into a CUDA graph and replays would read
    # it instead of the caller's tensor; the reference refuses alike.
    if not slot_mapping.is_contiguous():
        raise ValueError(
            f"slot_mapping must be contiguous (stride 1), got stride "
            f"{slot_mapping.stride(0)}; pass slot_mapping.contiguous(), made "
            "before any CUDA-graph capture and updated in place for replays"
        )
    num_tokens = slot_mapping.shape[0]
    num_kv_heads, head_dim = k_cache.shape[2:]
    rows = []
    for name, t in (("key", key), ("value", value)):
        if not t.is_floating_point() or t.dtype != key.dtype:
            raise TypeError(
                f"{name} must have a floating dtype, the same for key and value, "
                f"got {t.dtype} (key: {key.dtype})"
            )
        if (
            t.dim() not in (2, 3)
            or t.shape[0] < num_tokens
            or t.shape[1:] not in ((num_kv_heads, head_dim), (num_kv_heads * head_dim,))
        ):
            raise ValueError(
                f"{name} must be [T, {num_kv_heads}, {head_dim}] or [T, "
                f"{num_kv_heads * head_dim}] with T >= len(slot_mapping) = "
                f"{num_tokens}, got shape {tuple(t.shape)}"
            )
        rows.append(t.unflatten(1, (num_kv_heads, head_dim)) if t.dim() == 2 else t)
    return rows[0], rows[1], scales


def _quantize(x: torch.Tensor, scale) -> torch.Tensor:
    """``x / scale`` clamped to e4m3's range and rounded to e4m3. A float
    scale becomes a tensor: on CUDA torch divides by a host scalar through its
    reciprocal, which can differ in the last bit."""
    scale = torch.as_tensor(scale, dtype=torch.float32, device=x.device)
    return (x.float() / scale).clamp(-_E4M3_MAX, _E4M3_MAX).to(torch.float8_e4m3fn)


def write_kv_cache_reference(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: torch.Tensor | float | None = None,
    v_scale: torch.Tensor | float | None = None,
    *,
    v_pages_transposed: bool = False,
) -> None:
    """Writes rows ``t < len(slot_mapping)`` of ``key``/``value`` into the
    caches in place (see the module docstring for the layouts), skipping
    negative slots. Plain PyTorch, masking on the host."""
    key, value, scales = check_kv_write(
        key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale, v_pages_transposed
    )
    num_tokens, page_size = slot_mapping.shape[0], k_cache.shape[1]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    pages, offsets = slots // page_size, slots % page_size
    k, v = key[:num_tokens][keep], value[:num_tokens][keep]
    if scales is not None:
        k, v = _quantize(k, scales[0]), _quantize(v, scales[1])
    k_cache[pages, offsets] = k.to(k_cache.dtype)
    v = v.to(v_cache.dtype)
    if v_pages_transposed:
        # [n, nKV, D] -> [n, rows, nKV, 8]: dim d at row d // 8, column d % 8.
        cols = v_page_positions(v_cache.device)[offsets]
        v = v.unflatten(-1, (-1, _DIMS_PER_ROW)).transpose(1, 2)
        _v_columns(v_cache)[pages, :, :, :, cols] = v
    else:
        v_cache[pages, offsets] = v
