"""Fixed-history sliding attention for the DSpark draft block (Triton).

DSpark drafts a block of ``B_r`` tokens for request ``r`` after its ``L_r``
context tokens. Every query of that block attends to one and the same key
range, ``max(0, L_r - W) .. L_r + B_r - 1``: the trailing ``W`` context
positions plus the whole draft block, with no causal mask inside the block.
vLLM's FlashAttention and Triton backends give each query its own symmetric
window instead, so the draft layers call :func:`fixed_history_attention`.

The kernel reads vLLM 0.32.0's paged KV cache in place. Per layer vLLM keeps a
``[num_blocks, num_kv_heads, block_size, 2 * head_dim]`` view and splits it with
``kv_cache.transpose(1, 2).split(head_dim, -1)``; the resulting K and V are
non-contiguous ``[num_blocks, block_size, num_kv_heads, head_dim]`` views, and
the kernel uses whatever strides they have (only the head dim must be dense).

Work split (flash-decoding style): one program handles one request, one KV
head and one slice ("split") of that request's key range. Inside a program all
``nH / nKV`` query heads of the KV head and all queries of the request form the
rows of one ``tl.dot`` tile, so every K/V row is read from HBM once per
(request, KV head). When there are too few (request, KV head) pairs to fill the
GPU, the key range is cut into several splits whose partial results (running
max, exp-sum, unnormalised output) a second kernel merges. With a single split
the kernel can instead run persistently (``PERSISTENT``): a fixed number of
programs per SM loop over the (request, KV head) items, KV heads fastest. The
grid is sized from static bounds only (no host synchronisation), so the launch
can be captured in a CUDA graph; splits that receive no keys simply write an
empty partial. Key tiles are loaded either through Triton's software pipeliner
(``num_stages`` > 1) or through a hand-written prefetch loop
(``MANUAL_PREFETCH``). Triton 3.6 pipelines a load whose address comes from
another load in the loop (K/V through the block table) only one tile ahead;
with ``ASM_PAGE_LOAD`` the page ids are read with inline PTX, which the
pipeliner does not treat as a load, so the K/V tiles go ``num_stages - 1``
tiles ahead. ``_launch_config`` picks tiles, warps, splits and the page-id
load from host-side values (tuned on an H200, see
``benchmarks/fixed_history_attention_h200.md``).

Grid limits: at most 65535 requests per launch (grid y-dim).

This module needs only ``torch`` and ``triton``; it never imports vLLM.
"""

from __future__ import annotations

import math
import operator
import os

import torch
import triton
import triton.language as tl

__all__ = ["fixed_history_attention", "fixed_history_attention_reference"]

_KERNEL_DTYPES = (torch.float16, torch.bfloat16)
_MIN_HEAD_DIM = 32
_MAX_HEAD_DIM = 256
_LOG2E = 1.4426950408889634


# ---------------------------------------------------------------------------
# Triton kernels
# ---------------------------------------------------------------------------


@triton.jit
def _load_page_ids(
    bt_row, pos, split_hi, PAGE_SIZE: tl.constexpr, ASM_PAGE_LOAD: tl.constexpr
):
    """Page ids of cache positions ``pos``; positions at or past split_hi
    give an unused but valid page id (the index is clamped to split_hi - 1,
    which is inside the block table whenever the key loop runs)."""
    if ASM_PAGE_LOAD:
        # A plain PTX load: Triton's pipeliner does not see it as a load, so
        # the K/V loads that depend on it are not "indirect" to it and get
        # pipelined num_stages - 1 tiles ahead (an indirect load only one).
        idx = tl.minimum(pos, split_hi - 1) // PAGE_SIZE
        page = tl.inline_asm_elementwise(
            "ld.global.nc.b32 $0, [$1];",
            "=r,l",
            [bt_row + idx],
            dtype=tl.int32,
            is_pure=True,
            pack=1,
        )
    else:
        page = tl.load(bt_row + pos // PAGE_SIZE, mask=pos < split_hi, other=0)
    return page


@triton.jit
def _load_kv_tile(
    bt_row,
    k_head,
    v_head,
    pos,
    split_hi,
    offs_d,
    stride_k_blk,
    stride_k_slot,
    stride_v_blk,
    stride_v_slot,
    PAGE_SIZE: tl.constexpr,
    ASM_PAGE_LOAD: tl.constexpr = False,
):
    """K and V rows of cache positions ``pos`` (masked beyond split_hi)."""
    key_ok = pos < split_hi
    page = _load_page_ids(bt_row, pos, split_hi, PAGE_SIZE, ASM_PAGE_LOAD)
    slot = pos % PAGE_SIZE
    k_row = page.to(tl.int64) * stride_k_blk + slot * stride_k_slot
    v_row = page.to(tl.int64) * stride_v_blk + slot * stride_v_slot
    k_tile = tl.load(
        k_head + k_row[:, None] + offs_d[None, :], mask=key_ok[:, None], other=0.0
    )
    v_tile = tl.load(
        v_head + v_row[:, None] + offs_d[None, :], mask=key_ok[:, None], other=0.0
    )
    return k_tile, v_tile


@triton.jit
def _online_softmax_step(q_tile, k_tile, v_tile, key_ok, m_i, l_i, acc, qk_scale):
    """One flash-attention update with a key tile (log2 domain)."""
    s = tl.dot(q_tile, tl.trans(k_tile)) * qk_scale
    s = tl.where(key_ok[None, :], s, float("-inf"))
    # Every tile holds at least one valid key, so m_new is finite.
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v_tile.dtype), v_tile)
    return m_new, l_i, acc


@triton.jit
def _attend_item(
    q_ptr,  # [T, nH, D]
    k_ptr,  # [num_blocks, block_size, nKV, D], last stride 1
    v_ptr,  # [num_blocks, block_size, nKV, D], last stride 1
    out_ptr,  # [T, nH, D], written when NUM_SPLITS == 1
    part_acc_ptr,  # [T, nH, NUM_SPLITS, D] fp32, written when NUM_SPLITS > 1
    part_max_ptr,  # [T, nH, NUM_SPLITS] fp32 (log2 domain)
    part_sum_ptr,  # [T, nH, NUM_SPLITS] fp32
    block_table_ptr,  # [>= R, max_blocks] int32
    context_lens_ptr,  # [R] int32
    query_start_loc_ptr,  # [R + 1] int32
    qk_scale,  # float: softmax scale * log2(e)
    window,  # int: sliding window W (ignored when HAS_WINDOW is False)
    stride_q_t,
    stride_q_h,
    stride_q_d,
    stride_k_blk,
    stride_k_slot,
    stride_k_head,
    stride_v_blk,
    stride_v_slot,
    stride_v_head,
    stride_o_t,
    stride_o_h,
    stride_o_d,
    stride_bt,
    req_idx,
    kv_head,
    split_idx,
    NUM_Q_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,  # nH // nKV
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,  # vLLM block_size
    BLOCK_Q: tl.constexpr,  # queries of one request per tile
    BLOCK_M: tl.constexpr,  # next_pow2(BLOCK_Q * GROUP), >= 16
    BLOCK_N: tl.constexpr,  # keys per tile
    NUM_SPLITS: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    MANUAL_PREFETCH: tl.constexpr,  # hand-pipelined loads (num_stages=1)
    ASM_PAGE_LOAD: tl.constexpr,  # block-table loads hidden from the pipeliner
):
    """One work item: all queries of request ``req_idx`` on KV head
    ``kv_head`` over key slice ``split_idx`` of NUM_SPLITS (the whole key
    range when NUM_SPLITS == 1)."""
    q_first = tl.load(query_start_loc_ptr + req_idx)
    q_end = tl.load(query_start_loc_ptr + req_idx + 1)
    num_q = q_end - q_first
    ctx_len = tl.load(context_lens_ptr + req_idx)

    # -----------------------------------------------------------------------
    # Which keys each query sees. Request r owns query rows
    # query_start_loc[r] .. query_start_loc[r+1]-1 (B_r = their count); their
    # own K/V already sit in the cache at positions L_r .. L_r+B_r-1, with
    # L_r = context_lens[r]. EVERY one of those B_r queries attends to exactly
    # the cache positions
    #     kv_lo = max(0, L_r - W)   (kv_lo = 0 when there is no window)
    #     kv_hi = L_r + B_r         (exclusive)
    # i.e. the last W context tokens plus the whole draft block, non-causal
    # inside the block (query i also sees block tokens i+1 .. B_r-1). The key
    # range does not depend on the query's own position. Position p lives in
    # page block_table[r, p // PAGE_SIZE], slot p % PAGE_SIZE.
    # -----------------------------------------------------------------------
    kv_hi = ctx_len + num_q
    if HAS_WINDOW:  # noqa: SIM108 (constexpr branch)
        kv_lo = tl.maximum(ctx_len - window, 0)
    else:
        kv_lo = ctx_len * 0
    # This program's slice of [kv_lo, kv_hi), a whole number of key tiles.
    span = kv_hi - kv_lo
    chunk = tl.cdiv(tl.cdiv(span, NUM_SPLITS), BLOCK_N) * BLOCK_N
    split_lo = kv_lo + split_idx * chunk
    split_hi = tl.minimum(split_lo + chunk, kv_hi)

    rows = tl.arange(0, BLOCK_M)
    q_in_tile = rows // GROUP
    head = kv_head * GROUP + rows % GROUP
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    # tl.cast, not .to(): under the interpreter a loop index is a Python int.
    bt_row = block_table_ptr + tl.cast(req_idx, tl.int64) * stride_bt
    k_head = k_ptr + tl.cast(kv_head, tl.int64) * stride_k_head
    v_head = v_ptr + tl.cast(kv_head, tl.int64) * stride_v_head

    # Usually a single pass (all queries of the request fit in BLOCK_Q); a
    # request with more queries than BLOCK_Q is handled in several passes.
    for q_base in range(0, num_q, BLOCK_Q):
        q_idx = q_base + q_in_tile
        row_ok = (q_idx < num_q) & (rows < BLOCK_Q * GROUP)
        tok = (q_first + q_idx).to(tl.int64)
        q_tile = tl.load(
            q_ptr
            + tok[:, None] * stride_q_t
            + head[:, None] * stride_q_h
            + offs_d[None, :] * stride_q_d,
            mask=row_ok[:, None],
            other=0.0,
        )

        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

        if MANUAL_PREFETCH:
            # Hand-written software pipeline (launched with num_stages=1): the
            # K/V rows of tile i+1 are requested before tile i is computed,
            # and the page ids two tiles ahead, so no load waits on another
            # load inside an iteration.
            pos = split_lo + offs_n
            k_tile, v_tile = _load_kv_tile(
                bt_row,
                k_head,
                v_head,
                pos,
                split_hi,
                offs_d,
                stride_k_blk,
                stride_k_slot,
                stride_v_blk,
                stride_v_slot,
                PAGE_SIZE,
            )
            pos_next = pos + BLOCK_N
            page_next = tl.load(
                bt_row + pos_next // PAGE_SIZE, mask=pos_next < split_hi, other=0
            )
            for start_n in range(split_lo, split_hi, BLOCK_N):
                pos_next = start_n + BLOCK_N + offs_n
                next_ok = pos_next < split_hi
                slot = pos_next % PAGE_SIZE
                k_row = page_next.to(tl.int64) * stride_k_blk + slot * stride_k_slot
                v_row = page_next.to(tl.int64) * stride_v_blk + slot * stride_v_slot
                k_next = tl.load(
                    k_head + k_row[:, None] + offs_d[None, :],
                    mask=next_ok[:, None],
                    other=0.0,
                )
                v_next = tl.load(
                    v_head + v_row[:, None] + offs_d[None, :],
                    mask=next_ok[:, None],
                    other=0.0,
                )
                pos_after = pos_next + BLOCK_N
                page_next = tl.load(
                    bt_row + pos_after // PAGE_SIZE,
                    mask=pos_after < split_hi,
                    other=0,
                )
                key_ok = start_n + offs_n < split_hi
                m_i, l_i, acc = _online_softmax_step(
                    q_tile, k_tile, v_tile, key_ok, m_i, l_i, acc, qk_scale
                )
                k_tile = k_next
                v_tile = v_next
        else:
            for start_n in range(split_lo, split_hi, BLOCK_N):
                pos = start_n + offs_n
                k_tile, v_tile = _load_kv_tile(
                    bt_row,
                    k_head,
                    v_head,
                    pos,
                    split_hi,
                    offs_d,
                    stride_k_blk,
                    stride_k_slot,
                    stride_v_blk,
                    stride_v_slot,
                    PAGE_SIZE,
                    ASM_PAGE_LOAD,
                )
                m_i, l_i, acc = _online_softmax_step(
                    q_tile,
                    k_tile,
                    v_tile,
                    pos < split_hi,
                    m_i,
                    l_i,
                    acc,
                    qk_scale,
                )

        if NUM_SPLITS == 1:
            # The split covers the whole key range (>= 1 key since B_r >= 1).
            o = acc / l_i[:, None]
            tl.store(
                out_ptr
                + tok[:, None] * stride_o_t
                + head[:, None] * stride_o_h
                + offs_d[None, :] * stride_o_d,
                o.to(out_ptr.dtype.element_ty),
                mask=row_ok[:, None],
            )
        else:
            # Partial result; an empty split stores max=-inf, sum=0, acc=0.
            part = (tok * NUM_Q_HEADS + head) * NUM_SPLITS + split_idx
            tl.store(part_max_ptr + part, m_i, mask=row_ok)
            tl.store(part_sum_ptr + part, l_i, mask=row_ok)
            tl.store(
                part_acc_ptr + part[:, None] * HEAD_DIM + offs_d[None, :],
                acc,
                mask=row_ok[:, None],
            )


@triton.jit
def _fixed_history_attn_kernel(
    q_ptr,  # [T, nH, D]
    k_ptr,  # [num_blocks, block_size, nKV, D], last stride 1
    v_ptr,  # [num_blocks, block_size, nKV, D], last stride 1
    out_ptr,  # [T, nH, D], written when NUM_SPLITS == 1
    part_acc_ptr,  # [T, nH, NUM_SPLITS, D] fp32, written when NUM_SPLITS > 1
    part_max_ptr,  # [T, nH, NUM_SPLITS] fp32 (log2 domain)
    part_sum_ptr,  # [T, nH, NUM_SPLITS] fp32
    block_table_ptr,  # [>= R, max_blocks] int32
    context_lens_ptr,  # [R] int32
    query_start_loc_ptr,  # [R + 1] int32
    qk_scale,  # float: softmax scale * log2(e)
    window,  # int: sliding window W (ignored when HAS_WINDOW is False)
    num_reqs,  # int: R (persistent loop bound)
    stride_q_t: tl.int64,
    stride_q_h: tl.int64,
    stride_q_d: tl.int64,
    stride_k_blk: tl.int64,
    stride_k_slot: tl.int64,
    stride_k_head: tl.int64,
    stride_v_blk: tl.int64,
    stride_v_slot: tl.int64,
    stride_v_head: tl.int64,
    stride_o_t: tl.int64,
    stride_o_h: tl.int64,
    stride_o_d: tl.int64,
    stride_bt: tl.int64,
    NUM_Q_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,  # nH // nKV
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,  # vLLM block_size
    BLOCK_Q: tl.constexpr,  # queries of one request per tile
    BLOCK_M: tl.constexpr,  # next_pow2(BLOCK_Q * GROUP), >= 16
    BLOCK_N: tl.constexpr,  # keys per tile
    NUM_SPLITS: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    MANUAL_PREFETCH: tl.constexpr,  # hand-pipelined loads (num_stages=1)
    ASM_PAGE_LOAD: tl.constexpr,  # block-table loads hidden from the pipeliner
    PERSISTENT: tl.constexpr,  # grid-stride loop over (request, KV head)
):
    # KV heads vary fastest in launch order: the programs that run side by side
    # read the same cache pages (the heads of one slot are adjacent in vLLM's
    # default layout), which keeps DRAM row and L2 locality.
    if PERSISTENT:
        # A fixed number of programs (a few per SM, see _launch) walk the
        # (request, KV head) items, KV heads fastest; NUM_SPLITS == 1 only.
        for item in range(
            tl.program_id(0), num_reqs * NUM_KV_HEADS, tl.num_programs(0)
        ):
            _attend_item(
                q_ptr,
                k_ptr,
                v_ptr,
                out_ptr,
                part_acc_ptr,
                part_max_ptr,
                part_sum_ptr,
                block_table_ptr,
                context_lens_ptr,
                query_start_loc_ptr,
                qk_scale,
                window,
                stride_q_t,
                stride_q_h,
                stride_q_d,
                stride_k_blk,
                stride_k_slot,
                stride_k_head,
                stride_v_blk,
                stride_v_slot,
                stride_v_head,
                stride_o_t,
                stride_o_h,
                stride_o_d,
                stride_bt,
                item // NUM_KV_HEADS,
                item % NUM_KV_HEADS,
                0,
                NUM_Q_HEADS,
                NUM_KV_HEADS,
                GROUP,
                HEAD_DIM,
                PAGE_SIZE,
                BLOCK_Q,
                BLOCK_M,
                BLOCK_N,
                NUM_SPLITS,
                HAS_WINDOW,
                MANUAL_PREFETCH,
                ASM_PAGE_LOAD,
            )
    else:
        _attend_item(
            q_ptr,
            k_ptr,
            v_ptr,
            out_ptr,
            part_acc_ptr,
            part_max_ptr,
            part_sum_ptr,
            block_table_ptr,
            context_lens_ptr,
            query_start_loc_ptr,
            qk_scale,
            window,
            stride_q_t,
            stride_q_h,
            stride_q_d,
            stride_k_blk,
            stride_k_slot,
            stride_k_head,
            stride_v_blk,
            stride_v_slot,
            stride_v_head,
            stride_o_t,
            stride_o_h,
            stride_o_d,
            stride_bt,
            tl.program_id(1),
            tl.program_id(0) % NUM_KV_HEADS,
            tl.program_id(0) // NUM_KV_HEADS,
            NUM_Q_HEADS,
            NUM_KV_HEADS,
            GROUP,
            HEAD_DIM,
            PAGE_SIZE,
            BLOCK_Q,
            BLOCK_M,
            BLOCK_N,
            NUM_SPLITS,
            HAS_WINDOW,
            MANUAL_PREFETCH,
            ASM_PAGE_LOAD,
        )


@triton.jit
def _fixed_history_combine_kernel(
    out_ptr,  # [T, nH, D]
    part_acc_ptr,  # [T, nH, NUM_SPLITS, D] fp32
    part_max_ptr,  # [T, nH, NUM_SPLITS] fp32
    part_sum_ptr,  # [T, nH, NUM_SPLITS] fp32
    query_start_loc_ptr,  # [R + 1] int32
    num_reqs,
    stride_o_t: tl.int64,
    stride_o_h: tl.int64,
    stride_o_d: tl.int64,
    NUM_Q_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
):
    tok = tl.program_id(0)
    head = tl.program_id(1)
    # Rows outside query_start_loc[0] .. query_start_loc[R]-1 belong to no
    # request (e.g. CUDA-graph padding): leave them untouched.
    first = tl.load(query_start_loc_ptr)
    last = tl.load(query_start_loc_ptr + num_reqs)
    if (tok >= first) & (tok < last):
        offs_s = tl.arange(0, NUM_SPLITS)
        offs_d = tl.arange(0, HEAD_DIM)
        part = (tok.to(tl.int64) * NUM_Q_HEADS + head) * NUM_SPLITS + offs_s
        m_s = tl.load(part_max_ptr + part)
        l_s = tl.load(part_sum_ptr + part)
        acc_s = tl.load(part_acc_ptr + part[:, None] * HEAD_DIM + offs_d[None, :])
        m_all = tl.max(m_s, axis=0)
        w = tl.exp2(m_s - m_all)  # empty splits: exp2(-inf) = 0
        denom = tl.sum(l_s * w, axis=0)
        o = tl.sum(acc_s * w[:, None], axis=0) / denom
        tl.store(
            out_ptr
            + tok.to(tl.int64) * stride_o_t
            + head.to(tl.int64) * stride_o_h
            + offs_d * stride_o_d,
            o.to(out_ptr.dtype.element_ty),
        )


# ---------------------------------------------------------------------------
# Argument checks shared by the kernel wrapper and the reference
# ---------------------------------------------------------------------------


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _check_window(sliding_window) -> int | None:
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


def _check_metadata(q, block_table, context_lens, query_start_loc) -> int:
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


def _check_shapes(q, k_cache, v_cache, out):
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
    num_tokens, num_heads, head_dim = q.shape
    _, _, num_kv_heads, kv_dim = k_cache.shape
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


def _check_kernel_inputs(q, k_cache, v_cache):
    if q.dtype not in _KERNEL_DTYPES:
        raise TypeError(
            f"q must be float16 or bfloat16, got {q.dtype}; cast q/k/v to the "
            "model's half-precision dtype or use fixed_history_attention_reference"
        )
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != q.dtype:
            raise TypeError(
                f"{name} dtype {t.dtype} differs from q dtype {q.dtype}; quantized "
                "(fp8) or mixed-precision KV caches are not supported"
            )
        if t.stride(-1) != 1:
            raise ValueError(
                f"{name} must be dense along the head dim (last stride 1), got "
                f"strides {tuple(t.stride())}; pass the vLLM view "
                "kv_cache.transpose(1, 2).split(D, -1) of a dense cache"
            )
    head_dim = q.shape[2]
    if (
        head_dim < _MIN_HEAD_DIM
        or head_dim > _MAX_HEAD_DIM
        or head_dim & (head_dim - 1) != 0
    ):
        raise ValueError(
            f"head dim D={head_dim} is not supported: it must be a power of two "
            f"in {_MIN_HEAD_DIM}..{_MAX_HEAD_DIM}"
        )
    if q.device.type != "cuda" and not _interpreting():
        raise RuntimeError(
            f"fixed_history_attention needs CUDA tensors, got q on {q.device}; "
            "on CPU set TRITON_INTERPRET=1 before importing this module, or use "
            "fixed_history_attention_reference"
        )


# ---------------------------------------------------------------------------
# Launch configuration
# ---------------------------------------------------------------------------

_SM_COUNT: dict[int, int] = {}


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 4  # interpreter: small, so the split path gets exercised too
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        props = torch.cuda.get_device_properties(idx)
        _SM_COUNT[idx] = props.multi_processor_count
    return _SM_COUNT[idx]


def _next_pow2(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


def _launch_config(
    num_tokens, num_reqs, num_kv_heads, group, head_dim, window, max_kv, device
):
    """Tile sizes and split count chosen from host-side (static) values only.

    Tuned on an H200 (benchmarks/fixed_history_attention_h200.md): for
    D >= 128 with up to 64 rows per tile, 128-key tiles with plain
    compiler-pipelined loads (one tile ahead); for 128-row tiles (e.g. 16
    queries x 8 heads per KV head) and for D <= 64 with up to 32 rows, smaller
    key tiles pipelined 3 tiles ahead through ASM_PAGE_LOAD. Splits until ~3.5
    programs per SM (~1 per SM for 128-row tiles). For D >= 128 (< 256) with
    up to 32 rows and a single split, a persistent grid of 2 programs per SM
    looping over the (request, KV head) items (PERSISTENT=2; 5-9% faster than
    one program per item on the H200).
    """
    avg_q = max(1, -(-num_tokens // max(num_reqs, 1)))
    max_rows = 64 if head_dim >= 256 else 128
    block_q = _next_pow2(avg_q)
    while block_q > 1 and block_q * group > max_rows:
        block_q //= 2
    block_m = max(16, _next_pow2(block_q * group))
    manual = asm = False
    persistent = 0
    target = int(3.5 * _sm_count(device))
    if block_m >= 128:
        # Page ids through inline PTX so K/V are pipelined 3 tiles ahead;
        # about one (2-CTA) wave: more splits only add partials to merge.
        block_n, num_warps, num_stages, asm = 32, 4, 4, True
        target = _sm_count(device)
    elif head_dim >= 256:
        block_n, num_warps, num_stages = 64, 8, 2
    elif head_dim >= 128:
        block_n, num_warps, num_stages = 128, 4 if block_m <= 32 else 8, 2
        # Measured on the H200: 2 resident programs per SM streaming items
        # beat one program per item (3 and 1 per SM were slower).
        persistent = 2 if block_m <= 32 else 0
    elif block_m <= 32:
        block_n, num_warps, num_stages, asm = 64, 4, 4, True
    else:
        block_n, num_warps, num_stages = 128, 8, 3

    # Enough programs to fill the GPU, but keep each split at least a few key
    # tiles long (estimated from static bounds).
    est_span = min(max_kv, (window if window is not None else max_kv) + avg_q)
    splits = 1
    pairs = max(1, num_reqs * num_kv_heads)
    while (
        pairs * splits < target
        and est_span // (splits * 2) >= 4 * block_n
        and splits < 64
    ):
        splits *= 2
    # Inline PTX exists on NVIDIA GPUs only (not on ROCm builds of torch); the
    # persistent grid was tuned on NVIDIA only and needs a single split.
    asm = asm and torch.version.hip is None
    if splits > 1 or device.type != "cuda" or torch.version.hip is not None:
        persistent = 0
    return dict(
        BLOCK_Q=block_q,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        NUM_SPLITS=splits,
        num_warps=num_warps,
        num_stages=num_stages,
        MANUAL_PREFETCH=manual,
        ASM_PAGE_LOAD=asm,
        PERSISTENT=persistent,
    )


# ---------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------


def fixed_history_attention(
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
    """Attention of each request's draft block over a fixed key window.

    Args:
        q: ``[T, nH, D]`` float16/bfloat16, the queries of all draft blocks.
        k_cache, v_cache: ``[num_blocks, block_size, nKV, D]`` with the same
            dtype as ``q``; any strides as long as the last one is 1 (vLLM's
            ``kv_cache.transpose(1, 2).split(D, -1)`` views qualify).
        block_table: ``[>= R, max_blocks]`` int32 page ids per request.
        context_lens: ``[R]`` int32, ``L_r`` (context tokens before the block).
        query_start_loc: ``[R + 1]`` int32; request ``r`` owns query rows
            ``query_start_loc[r] .. query_start_loc[r+1]-1`` (``B_r`` rows),
            whose K/V are already in the cache at positions
            ``L_r .. L_r + B_r - 1``.
        sliding_window: ``W > 0``: every query of request ``r`` sees positions
            ``max(0, L_r - W) .. L_r + B_r - 1``. ``None``: full attention,
            positions ``0 .. L_r + B_r - 1``. Zero/negative values are refused.
        scale: softmax scale applied to ``q . k``.
        out: optional ``[T, nH, D]`` output with ``q``'s dtype and device.

    Returns:
        ``out`` (allocated when not given). Rows owned by no request are left
        untouched.

    Preconditions not checked (they would need a device-to-host sync):
    ``query_start_loc`` is non-decreasing with ``query_start_loc[R] <= T``, and
    ``L_r + B_r <= max_blocks * block_size`` with valid page ids in the table.
    GQA: query head ``h`` uses KV head ``h // (nH // nKV)``.
    """
    _check_shapes(q, k_cache, v_cache, out)
    window = _check_window(sliding_window)
    num_reqs = _check_metadata(q, block_table, context_lens, query_start_loc)
    _check_kernel_inputs(q, k_cache, v_cache)
    if num_reqs > 65535:
        raise ValueError(
            f"at most 65535 requests per launch (grid y-dim), got R={num_reqs}; "
            "split the batch"
        )
    scale = float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")

    if out is None:
        out = torch.empty_like(q)
    num_tokens, num_heads, head_dim = q.shape
    _, page_size, num_kv_heads, _ = k_cache.shape
    if num_tokens == 0 or num_reqs == 0 or num_heads == 0:
        return out
    group = num_heads // num_kv_heads
    max_kv = block_table.shape[1] * page_size
    cfg = _launch_config(
        num_tokens,
        num_reqs,
        num_kv_heads,
        group,
        head_dim,
        window,
        max_kv,
        q.device,
    )
    _launch(
        q,
        k_cache,
        v_cache,
        block_table,
        context_lens,
        query_start_loc,
        window,
        scale,
        out,
        **cfg,
    )
    return out


def _launch(
    q,
    k_cache,
    v_cache,
    block_table,
    context_lens,
    query_start_loc,
    window,
    scale,
    out,
    *,
    BLOCK_Q,
    BLOCK_M,
    BLOCK_N,
    NUM_SPLITS,
    num_warps,
    num_stages,
    MANUAL_PREFETCH=False,
    ASM_PAGE_LOAD=False,
    PERSISTENT=0,
):
    """Launch with an explicit configuration (arguments already validated).

    ``PERSISTENT=n`` (> 0, needs ``NUM_SPLITS == 1``) launches
    ``min(R * nKV, n * num_SMs)`` programs that loop over the (request, KV
    head) items instead of one program per item. The grid comes from shapes
    and the cached SM count only, so the launch stays graph-capturable.
    """
    if _interpreting():
        ASM_PAGE_LOAD = False  # the interpreter cannot run inline PTX
    num_tokens, num_heads, head_dim = q.shape
    _, page_size, num_kv_heads, _ = k_cache.shape
    num_reqs = context_lens.shape[0]
    group = num_heads // num_kv_heads
    if PERSISTENT:
        if NUM_SPLITS != 1:
            raise ValueError(
                f"PERSISTENT needs NUM_SPLITS == 1, got NUM_SPLITS={NUM_SPLITS}"
            )
        grid = (min(num_reqs * num_kv_heads, int(PERSISTENT) * _sm_count(q.device)),)
    else:
        grid = (num_kv_heads * NUM_SPLITS, num_reqs)
    if NUM_SPLITS > 1:
        part_acc = torch.empty(
            (num_tokens, num_heads, NUM_SPLITS, head_dim),
            dtype=torch.float32,
            device=q.device,
        )
        part_max = torch.empty(
            (num_tokens, num_heads, NUM_SPLITS),
            dtype=torch.float32,
            device=q.device,
        )
        part_sum = torch.empty_like(part_max)
    else:
        part_acc = part_max = part_sum = out  # unused by the kernel

    _fixed_history_attn_kernel[grid](
        q,
        k_cache,
        v_cache,
        out,
        part_acc,
        part_max,
        part_sum,
        block_table,
        context_lens,
        query_start_loc,
        scale * _LOG2E,
        window if window is not None else 0,
        num_reqs,
        q.stride(0),
        q.stride(1),
        q.stride(2),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        out.stride(0),
        out.stride(1),
        out.stride(2),
        block_table.stride(0),
        NUM_Q_HEADS=num_heads,
        NUM_KV_HEADS=num_kv_heads,
        GROUP=group,
        HEAD_DIM=head_dim,
        PAGE_SIZE=page_size,
        BLOCK_Q=BLOCK_Q,
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        NUM_SPLITS=NUM_SPLITS,
        HAS_WINDOW=window is not None,
        MANUAL_PREFETCH=MANUAL_PREFETCH,
        ASM_PAGE_LOAD=bool(ASM_PAGE_LOAD) and not MANUAL_PREFETCH,
        PERSISTENT=bool(PERSISTENT),
        num_warps=num_warps,
        num_stages=1 if MANUAL_PREFETCH else num_stages,
    )
    if NUM_SPLITS > 1:
        _fixed_history_combine_kernel[(num_tokens, num_heads)](
            out,
            part_acc,
            part_max,
            part_sum,
            query_start_loc,
            num_reqs,
            out.stride(0),
            out.stride(1),
            out.stride(2),
            NUM_Q_HEADS=num_heads,
            HEAD_DIM=head_dim,
            NUM_SPLITS=NUM_SPLITS,
            num_warps=4 if head_dim * NUM_SPLITS >= 1024 else 2,
        )
    return out


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
    """Plain PyTorch version of :func:`fixed_history_attention`.

    Same arguments and key window. Accepts any floating dtype (also float32 and
    float64, which the kernel refuses) and any device; computes in float64 for
    float64 inputs and float32 otherwise, and returns ``q``'s dtype. Slow (a
    Python loop over requests): meant for tests.
    """
    _check_shapes(q, k_cache, v_cache, out)
    window = _check_window(sliding_window)
    num_reqs = _check_metadata(q, block_table, context_lens, query_start_loc)
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
