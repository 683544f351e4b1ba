# SPDX-License-Identifier: Apache-2.0
"""Triton writer of K/V rows into vLLM's paged cache (layouts in ``v_pages``).

:func:`write_kv_cache` checks its inputs on the host without reading device
memory, then launches one program per (token, group of KV heads). Each program
reads its slot and, for an fp8 cache, the scales on the device and writes
nothing for a negative slot, so a launch can be captured in a CUDA graph and
replayed with new slots, keys, values and scales. Addresses are int64.

With "V pages transposed" a token's V row lands in all 16 rows of its page
(one element per column group); distinct tokens write distinct elements, so
programs never race.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_spark2_5_plugin.ops.fixed_history_checks import interpreting
from vllm_spark2_5_plugin.ops.v_pages import check_kv_write

#: The largest finite e4m3 (float8_e4m3fn) value.
E4M3_MAX = tl.constexpr(448.0)
#: Elements (heads x padded head dim) one program writes to each cache at most.
MAX_TILE = 2048


@triton.jit
def _to_e4m3(x, scale, IN_MEMORY: tl.constexpr):
    """``x / scale`` (IEEE division) clamped to +-448 and rounded to e4m3;
    ``scale`` is an fp32 pointer (read at each launch) or a value. NaN stays
    NaN, as in the reference's ``torch.clamp``."""
    if IN_MEMORY:
        scale = tl.load(scale)
    x = tl.math.div_rn(x.to(tl.float32), scale)
    # tl.clamp's default (PropagateNan.NONE) is a max/min pair that returns
    # the bound for NaN: a NaN key (or 0 / 0 with a zero scale tensor) would
    # be stored as a finite -448 and hide the fault upstream.
    x = tl.clamp(x, -E4M3_MAX, E4M3_MAX, propagate_nan=tl.PropagateNan.ALL)
    return x.to(tl.float8e4nv)


@triton.jit
def kv_cache_write_kernel(
    key_ptr,
    value_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_mapping_ptr,
    k_scale,
    v_scale,
    stride_key_t: tl.int64,
    stride_key_h: tl.int64,
    stride_key_d: tl.int64,
    stride_value_t: tl.int64,
    stride_value_h: tl.int64,
    stride_value_d: tl.int64,
    stride_k_blk: tl.int64,
    stride_k_slot: tl.int64,
    stride_k_head: tl.int64,
    stride_v_blk: tl.int64,
    stride_v_slot: tl.int64,
    stride_v_head: tl.int64,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
    KV_FP8: tl.constexpr,
    K_SCALE_IN_MEMORY: tl.constexpr,
    V_SCALE_IN_MEMORY: tl.constexpr,
    V_PAGES_TRANSPOSED: tl.constexpr,
):
    """Token ``program_id(0)``, KV heads ``program_id(1) * BLOCK_H + i``."""
    tok = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + tok)
    if slot < 0:  # padding
        return
    page, key_idx = slot // PAGE_SIZE, slot % PAGE_SIZE
    heads = tl.program_id(1).to(tl.int64) * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (heads < NUM_KV_HEADS)[:, None] & (offs_d < HEAD_DIM)[None, :]

    src = heads[:, None] * stride_key_h + offs_d[None, :] * stride_key_d
    k = tl.load(key_ptr + tok * stride_key_t + src, mask=mask)
    src = heads[:, None] * stride_value_h + offs_d[None, :] * stride_value_d
    v = tl.load(value_ptr + tok * stride_value_t + src, mask=mask)
    if KV_FP8:
        k = _to_e4m3(k, k_scale, K_SCALE_IN_MEMORY)
        v = _to_e4m3(v, v_scale, V_SCALE_IN_MEMORY)

    k_row = page * stride_k_blk + key_idx * stride_k_slot
    dst = k_row + heads[:, None] * stride_k_head + offs_d[None, :]
    tl.store(k_cache_ptr + dst, k, mask=mask)
    if V_PAGES_TRANSPOSED:
        # Dim d at row d // 8, column (d % 8) * 16 + the key's position.
        col = 4 * ((key_idx % 8) // 2) + 2 * (key_idx // 8) + key_idx % 2
        v_offs = (offs_d // 8) * stride_v_slot + (offs_d % 8) * PAGE_SIZE + col
    else:
        v_offs = key_idx * stride_v_slot + offs_d
    dst = page * stride_v_blk + heads[:, None] * stride_v_head + v_offs[None, :]
    tl.store(v_cache_ptr + dst, v, mask=mask)


def write_kv_cache(
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
    caches in place, skipping negative slots: ``v_pages.write_kv_cache_reference``
    on the device, byte for byte. Beyond the reference's checks, non-fp8 caches
    must have key's dtype, both caches unit stride along the head dim, and the
    tensors must be on a CUDA device (any device under ``TRITON_INTERPRET=1``).
    Slots are not checked against the cache size."""
    key, value, scales = check_kv_write(
        key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale, v_pages_transposed
    )
    if scales is None and k_cache.dtype != key.dtype:
        raise TypeError(
            f"k_cache/v_cache dtype {k_cache.dtype} differs from key dtype "
            f"{key.dtype}: the caches must have key's dtype or be "
            "torch.float8_e4m3fn (with k_scale and v_scale)"
        )
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:
            raise ValueError(
                f"{name} must have unit stride along the head dim, got strides "
                f"{tuple(t.stride())}"
            )
    if k_cache.device.type != "cuda" and not interpreting():
        raise ValueError(
            f"write_kv_cache needs CUDA tensors, got k_cache on {k_cache.device}; "
            "on CPU set TRITON_INTERPRET=1 before importing this module, or use "
            "write_kv_cache_reference"
        )
    num_tokens = slot_mapping.shape[0]
    if num_tokens == 0:
        return
    num_kv_heads, head_dim = k_cache.shape[2:]
    block_d = triton.next_power_of_2(head_dim)
    block_h = min(triton.next_power_of_2(num_kv_heads), max(1, MAX_TILE // block_d))
    k_scale, v_scale = (1.0, 1.0) if scales is None else scales
    grid = (num_tokens, triton.cdiv(num_kv_heads, block_h))
    kv_cache_write_kernel[grid](
        key,
        value,
        k_cache,
        v_cache,
        slot_mapping,
        k_scale,
        v_scale,
        *key.stride(),
        *value.stride(),
        *k_cache.stride()[:3],
        *v_cache.stride()[:3],
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        PAGE_SIZE=k_cache.shape[1],
        BLOCK_H=block_h,
        BLOCK_D=block_d,
        KV_FP8=scales is not None,
        K_SCALE_IN_MEMORY=isinstance(k_scale, torch.Tensor),
        V_SCALE_IN_MEMORY=isinstance(v_scale, torch.Tensor),
        V_PAGES_TRANSPOSED=bool(v_pages_transposed),
    )
