# SPDX-License-Identifier: Apache-2.0
"""Fixed-history attention written in Gluon for Hopper (sm_90): explicit
layouts, warpgroup MMAs and warp specialization. The launch policy runs
``fixed_history_ws_kernel`` at D = 128 (fp8 caches and caches in q's dtype)
for tiles of 64 and of 128 query rows, on sm_90 under Triton 3.7
(``LaunchPlan.gluon``; the pipeline it picks: ``gluon_options`` of the
launch module). ``fixed_history_attention_wgmma`` launches the kernel with
any of its options, for the tests and the benchmarks
(``benchmarks/bench_fixed_history_attention.py --gluon``).

Why: the Triton kernel (``fixed_history_kernel``) stays at 2-2.4 times the
fp8 read floor. Its K/V conversion sits in every warp's chain between the
load and the MMA, and Triton decides where the converted tiles live and
which warps do what. Here a loading warpgroup (fp8: copy ``NUM_RAW``
tiles ahead, convert, store into a ring of ``NUM_BUF`` buffers; caches in
q's dtype: copy straight into the ring, by ``cp.async`` or, with ``TMA``,
a page at a time by the tensor memory accelerator, which with an fp8 cache
fills the staging slots instead) and one or two multiplying ones (MMAs and
softmax), synchronized by mbarriers, run side by side, so that the loads
and conversions overlap the MMAs and the softmax instead of sitting
between them. Tiles of 64 or 128 query rows (``BLOCK_Q`` query slots x
``GROUP`` query heads, the extra slots masked), 64- or 128-key tiles, a
persistent grid over the (request, KV head) items, KV heads fastest, one
key split (no partial results).

The launch's pipelines: caches copied by TMA where they can be
(``_tma_copyable`` in the launch module); 128-row tiles in two multiplying
partitions (``SPLIT_MMA``); with an fp8 cache, ``S = Q K^T`` on fp8 tensor
cores with q rounded to e4m3 row by row (``FP8_SCORES``), and where the
cache holds V's pages transposed (the DSpark draft's fp8 layout),
``O += P V`` on fp8 tensor cores over those pages as TMA copies them
(``FP8_PV``). Against the read floor on the H200 (CUDA graphs, the L2
emptied by reading; ``benchmarks/fixed_history_attention_h200.md``):
bf16 1.00-1.27 times at the benchmark's shapes 1-4, fp8 1.06-1.27 at
shapes 1-3 and about 1.75 at shape 4 (32 requests x 4 KV heads, 4096-key
windows), where the softmax of each 128-key tile sets the pace.

With an fp8 cache, ``F16_DOTS`` runs the MMAs in float16 (q times the
softmax scale rounded to float16, K/V converted e4m3 -> float16 only), as
the Triton kernel's ``LaunchPlan.fp8_f16_dot`` does; otherwise the MMAs take
q's dtype. The kernel writes the normalized output directly; rows of q
outside every request are left untouched.
"""

from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    async_copy,
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from vllm_spark2_5_plugin.ops.fixed_history_launch import sm_count

_LOG2E = 1.4426950408889634

# Gluon's API moves between Triton releases: 3.7 (vLLM 0.32.0's) names the
# asynchronous global -> shared copy async_copy_global_to_shared, 3.9
# async_load, with the same leading arguments.
_async_load = getattr(async_copy, "async_load", None)
if _async_load is None:
    _async_load = async_copy.async_copy_global_to_shared
# The same for TMA's copy into shared memory (async_copy_global_to_shared,
# async_load), and a shared-memory view with another shape and layout is
# _reinterpret (3.7) or reinterpret (3.9).
_tma_load = getattr(tma, "async_load", None)
if _tma_load is None:
    _tma_load = tma.async_copy_global_to_shared
_PUBLIC_REINTERPRET = gl.constexpr(hasattr(gl.shared_memory_descriptor, "reinterpret"))


@gluon.jit
def _view_as(smem, dtype: gl.constexpr, shape: gl.constexpr, layout: gl.constexpr):
    """``smem``'s bytes as a buffer of ``shape`` in ``layout``."""
    if _PUBLIC_REINTERPRET:
        return smem.reinterpret(dtype, shape, layout)
    else:
        return smem._reinterpret(dtype, shape, layout)


@gluon.jit
def _item_range(
    item,
    context_lens_ptr,
    query_start_loc_ptr,
    window,
    HAS_WINDOW: gl.constexpr,
    NUM_KV_HEADS: gl.constexpr,
    BLOCK_N: gl.constexpr,
    ALIGN: gl.constexpr = 1,
):
    """Request, KV head, first query row, query count, where the key tiles
    start (``lo`` rounded down to a multiple of ``ALIGN``: a page for TMA,
    which copies whole pages), the key range ``lo .. hi - 1`` (the window's
    last keys and the draft block) and the key tiles of an item."""
    kv_head = item % NUM_KV_HEADS
    req = item // NUM_KV_HEADS
    q_first = gl.load(query_start_loc_ptr + req)
    num_q = gl.load(query_start_loc_ptr + req + 1) - q_first
    ctx_len = gl.load(context_lens_ptr + req)
    hi = ctx_len + num_q
    lo = 0
    if HAS_WINDOW:
        lo = gl.maximum(ctx_len - window, 0)
    first = lo - lo % ALIGN
    return req, kv_head, q_first, num_q, first, lo, hi, gl.cdiv(hi - first, BLOCK_N)


@gluon.jit
def _kv_rows(
    req, kv_head, block_table_ptr, k_ptr, v_ptr, stride_bt, stride_k_head,
    stride_v_head,
):  # fmt: skip
    """The request's block-table row and the KV head's K and V bases."""
    bt_row = block_table_ptr + req.to(gl.int64) * stride_bt
    k_head = k_ptr + kv_head.to(gl.int64) * stride_k_head
    v_head = v_ptr + kv_head.to(gl.int64) * stride_v_head
    return bt_row, k_head, v_head


@gluon.jit
def _item_kv(
    item, context_lens_ptr, query_start_loc_ptr, block_table_ptr, k_ptr, v_ptr,
    window, stride_bt, stride_k_head, stride_v_head, HAS_WINDOW: gl.constexpr,
    NUM_KV_HEADS: gl.constexpr, BLOCK_N: gl.constexpr, ALIGN: gl.constexpr,
):  # fmt: skip
    """``_item_range`` (without the request) and ``_kv_rows`` of an item:
    what every loader needs."""
    req, kv_head, q_first, num_q, first, lo, hi, n_tiles = _item_range(
        item, context_lens_ptr, query_start_loc_ptr, window, HAS_WINDOW,
        NUM_KV_HEADS, BLOCK_N, ALIGN,
    )  # fmt: skip
    bt_row, k_head, v_head = _kv_rows(
        req, kv_head, block_table_ptr, k_ptr, v_ptr, stride_bt, stride_k_head,
        stride_v_head,
    )  # fmt: skip
    return kv_head, q_first, num_q, first, lo, hi, n_tiles, bt_row, k_head, v_head


@gluon.jit
def _scales(qk_scale, k_scale_ptr, KV_FP8: gl.constexpr, F16_DOTS: gl.constexpr):
    """The factor applied to q before the MMAs (``F16_DOTS``: the softmax
    scale, so that q fits float16's range and precision where it matters)
    and the factor of the scores in the softmax exponent (base 2)."""
    if F16_DOTS:
        return qk_scale, gl.load(k_scale_ptr)
    elif KV_FP8:
        return 1.0, qk_scale * gl.load(k_scale_ptr)
    else:
        return 1.0, qk_scale


@gluon.constexpr_function
def _mma_dtype(q_dtype, f16_dots):
    """The MMAs' operand type: float16 for ``F16_DOTS``, else q's."""
    return gl.float16 if f16_dots else q_dtype


@gluon.jit
def _tile_pages(
    bt_row, start, hi, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
    layout: gl.constexpr,
):  # fmt: skip
    """The block-table entries of keys ``start .. start + BLOCK_N - 1`` (in
    ``layout``'s rows; 0 at keys >= hi) and the mask of the keys < hi. K
    and V share them; loaded a tile early, their latency stays off the copy's
    path."""
    pos = start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
    ok = pos < hi
    return gl.load(bt_row + pos // PAGE_SIZE, mask=ok, other=0), ok


@gluon.jit
def _copy_kv_tile(
    slot,
    head_ptr,
    page,
    ok,
    start,
    stride_blk,
    stride_slot,
    PAGE_SIZE: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    layout: gl.constexpr,
):
    """Start copying keys ``start .. start + BLOCK_N - 1`` of one KV head into
    the shared-memory ``slot`` (zeros where ``ok`` is false), through their
    pages ``page``. Each thread copies the pieces of ``layout``: where the
    same thread reads them back (the staging slots) waiting for its own
    copies is enough; where other warps read them (the ring of
    ``_ws_copy_partition``) every thread must have waited first."""
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    pos = start + offs_n
    row = page.to(gl.int64) * stride_blk + (pos % PAGE_SIZE) * stride_slot
    ptrs = head_ptr + gl.expand_dims(row, 1) + gl.expand_dims(offs_d, 0)
    mask = gl.expand_dims(ok, 1) & gl.expand_dims(offs_d < HEAD_DIM, 0)
    _async_load(slot, ptrs, mask=mask)


@gluon.jit
def _copy_kv_tiles(
    k_slot, v_slot, k_head, v_head, page, ok, start,
    stride_k_blk, stride_k_slot, stride_v_blk, stride_v_slot,
    PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
    layout: gl.constexpr,
):  # fmt: skip
    """The K and V copies of one key tile, as one commit group (``v_slot``
    ``None``: the first tensor's only)."""
    _copy_kv_tile(
        k_slot, k_head, page, ok, start, stride_k_blk, stride_k_slot,
        PAGE_SIZE, BLOCK_N, HEAD_DIM, layout,
    )  # fmt: skip
    if v_slot is not None:
        _copy_kv_tile(
            v_slot, v_head, page, ok, start, stride_v_blk, stride_v_slot,
            PAGE_SIZE, BLOCK_N, HEAD_DIM, layout,
        )  # fmt: skip
    async_copy.commit_group()


@gluon.jit
def _converted(tile, dtype: gl.constexpr, KV_FP8: gl.constexpr):
    """A K/V tile as loaded, in the MMAs' dtype: e4m3 through float16
    (exact)."""
    if KV_FP8:
        tile = tile.to(gl.float16).to(dtype)
    return tile


@gluon.jit
def _convert_tiles(
    k_slot, v_slot, k_dst, v_dst, layout: gl.constexpr, KV_FP8: gl.constexpr,
    start=0, lo=0, hi=0, EDGE_TMA: gl.constexpr = False,
):  # fmt: skip
    """A staged K/V tile into MMA buffers. The caller has waited for the
    copies. ``EDGE_TMA``: V's keys outside ``lo .. hi - 1`` zeroed
    (``_window_rows``; K's scores there are masked)."""
    k_dst.store(_converted(k_slot.load(layout), k_dst.dtype, KV_FP8))
    _convert_v(v_slot, v_dst, layout, start, lo, hi, EDGE_TMA, KV_FP8)


@gluon.jit
def _convert_v(
    raw, dst, layout: gl.constexpr, start, lo, hi, EDGE_TMA: gl.constexpr,
    KV_FP8: gl.constexpr = True,
):  # fmt: skip
    """A staged V tile (or its first rows; e4m3 with ``KV_FP8``) converted
    into ring buffer ``dst`` (``EDGE_TMA``: its keys outside ``lo .. hi -
    1`` zeroed)."""
    v = _converted(raw.load(layout), dst.dtype, KV_FP8)
    if EDGE_TMA:
        v = _window_rows(v, start, lo, hi)
    dst.store(v)


@gluon.jit
def _window_rows(tile, start, lo, hi):
    """A converted V tile of the keys from ``start`` with the keys outside
    ``lo .. hi - 1`` zeroed where the tile holds any (``_edge_tile``): TMA
    copied its whole pages (``EDGE_TMA``), and cache slots outside a
    request's window may hold anything, NaN included, which a weight of 0
    would not cancel."""
    BLOCK_N: gl.constexpr = tile.shape[0]
    if _edge_tile(start, lo, hi, BLOCK_N):
        keys = start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, tile.type.layout))
        inside = gl.expand_dims((keys >= lo) & (keys < hi), 1)
        tile = gl.where(inside, tile, gl.zeros_like(tile))
    return tile


@gluon.constexpr_function
def _kv_layout(head_dim, kv_fp8, num_warps):
    """16-byte pieces of K/V rows, a warp's threads along the head dim."""
    vec = 16 if kv_fp8 else 8
    tpw_d = head_dim // vec
    return gl.BlockedLayout([1, vec], [32 // tpw_d, tpw_d], [num_warps, 1], [1, 0])


@gluon.constexpr_function
def _convert_layout(head_dim, narrow, num_warps):
    """How the loader reads staged e4m3 tiles back to convert them: as
    copied (``_kv_layout``), or ``narrow``: 8 values per thread, a warp's
    threads along the head dim, so that each thread's converted values are
    one 16-byte piece and the 8 threads of a quarter warp store 8
    neighbouring pieces of one row (one wavefront). With 16 values per
    thread each thread stores two pieces, and a quarter warp's first pieces
    fall into 4 of the 8 bank groups twice: two wavefronts per store."""
    if not narrow:
        return _kv_layout(head_dim, True, num_warps)
    tpw_d = head_dim // 8
    return gl.BlockedLayout([1, 8], [32 // tpw_d, tpw_d], [num_warps, 1], [1, 0])


@gluon.constexpr_function
def _mma_layout(n, num_warps, k=16):
    """The accumulator layout of a warpgroup MMA with ``n`` output columns
    (``k``: the instruction's depth, 32 for 8-bit operands; the accumulator's
    values sit in the same threads either way)."""
    return gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, n, k]
    )


@gluon.jit
def _row_ptrs(
    base, q_first, q_base, num_q, kv_head, stride_t, stride_h,
    GROUP: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr,
    layout: gl.constexpr, HALF_ROWS: gl.constexpr = False,
):  # fmt: skip
    """Pointers to a tile's rows of a ``[T, nH, D]`` tensor (row r: query
    ``q_base + r // GROUP`` of the request, head ``r % GROUP`` of the KV
    head's group) and the mask of the rows that exist. ``HALF_ROWS``: the
    rows ``16 w + 0 .. 7`` of each 16 hold rows ``8 w + 0 .. 7`` as above,
    the others none (``_row_halves``)."""
    rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    if HALF_ROWS:
        first_half = rows % 16 < 8
        rows = rows // 16 * 8 + rows % 8
    q_idx = q_base + rows // GROUP
    head = kv_head * GROUP + rows % GROUP
    tok = (q_first + q_idx).to(gl.int64)
    ptrs = (
        base
        + gl.expand_dims(tok * stride_t + head * stride_h, 1)
        + gl.expand_dims(offs_d, 0)
    )
    row_ok = q_idx < num_q
    if HALF_ROWS:
        row_ok = row_ok & first_half
    mask = gl.expand_dims(row_ok, 1) & gl.expand_dims(offs_d < HEAD_DIM, 0)
    return ptrs, mask


@gluon.jit
def _softmax_step(
    s, m_i, l_i, acc, key_start, lo, hi, score_scale, dtype: gl.constexpr,
    EDGE: gl.constexpr = None,
):  # fmt: skip
    """One online-softmax update (base 2) with the scores ``s`` of keys
    ``key_start ..`` (those outside ``lo .. hi - 1`` masked; ``EDGE``: see
    ``_mask_keys``): the new row maxima and sums, ``acc`` rescaled, and the
    weights P as the A operand of ``P V``. Every tile holds a valid key."""
    p_op, m_new, l_i, alpha_o = _softmax_weights(
        s, m_i, l_i, key_start, lo, hi, score_scale, dtype, acc.type.layout, EDGE
    )
    return p_op, m_new, l_i, _rescale_rows(acc, alpha_o)


@gluon.jit
def _rescale_rows(acc, alpha):
    """``acc`` with each row times its ``alpha``; ``alpha`` of half the
    rows (``HALF_ROWS``): the first half of ``_row_halves`` alone (the
    other stays as it is, 0)."""
    if alpha.shape[0] * 2 == acc.shape[0]:
        a, b = _row_halves(acc)
        alpha_a = gl.convert_layout(alpha, gl.SliceLayout(1, a.type.layout))
        acc = _join_row_halves(a * gl.expand_dims(alpha_a, 1), b, acc.type.layout)
    else:
        acc = acc * gl.expand_dims(alpha, 1)
    return acc


@gluon.jit
def _row_halves(x):
    """``x`` (``[M, N]`` in an MMA layout: each thread holds rows ``16 w +
    r`` and ``16 w + 8 + r`` of warp w) split into those two row sets,
    ``[M / 2, N]`` each, row ``8 w + r``; no data moves."""
    M: gl.constexpr = x.shape[0]
    N: gl.constexpr = x.shape[1]
    x = gl.permute(gl.reshape(x, [M // 16, 2, 8, N]), (0, 2, 3, 1))
    a, b = gl.split(x)
    return gl.reshape(a, [M // 2, N]), gl.reshape(b, [M // 2, N])


@gluon.jit
def _join_row_halves(a, b, layout: gl.constexpr):
    """The inverse of ``_row_halves``, in ``layout``."""
    H: gl.constexpr = a.shape[0]
    N: gl.constexpr = a.shape[1]
    x = gl.join(gl.reshape(a, [H // 8, 8, N]), gl.reshape(b, [H // 8, 8, N]))
    x = gl.reshape(gl.permute(x, (0, 3, 1, 2)), [2 * H, N])
    return gl.convert_layout(x, layout)


@gluon.jit
def _edge_tile(start, lo, hi, BLOCK_N: gl.constexpr):
    """Whether the key tile from ``start`` holds keys outside ``lo .. hi -
    1``: the softmax masks them, and the TMA loaders copy such a tile by
    ``cp.async`` (TMA copies whole pages)."""
    return (start + BLOCK_N > hi) | (start < lo)


@gluon.jit
def _mask_keys(s, key_start, lo, hi, EDGE: gl.constexpr = None):
    """The scores ``s`` (a row per query row) of keys ``key_start ..`` with
    those outside ``lo .. hi - 1`` set to -inf. Only the last tile has keys
    to mask, and the first where the tiles start at a page boundary before
    lo: ``EDGE`` ``None`` tests for them, ``True`` masks, ``False`` (the
    caller knows the tile has none) leaves ``s`` as it is."""
    BLOCK_N: gl.constexpr = s.shape[1]
    if EDGE is not None:
        if EDGE:
            s = _masked_keys(s, key_start, lo, hi)
    elif _edge_tile(key_start, lo, hi, BLOCK_N):
        s = _masked_keys(s, key_start, lo, hi)
    return s


@gluon.jit
def _masked_keys(s, key_start, lo, hi):
    """``_mask_keys`` without the test."""
    BLOCK_N: gl.constexpr = s.shape[1]
    keys = key_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s.type.layout))
    valid = gl.expand_dims((keys >= lo) & (keys < hi), 0)
    if s.dtype == gl.float16:
        # By the bits of each register's two values (the scores of keys
        # outside the window may be NaN: e4m3 bytes copied from any page):
        # (s & keep) | fill, fill the bits of -inf (0xfc00) where masked.
        keep = gl.where(valid, -1, 0).to(gl.int16).to(gl.float16, bitcast=True)
        fill = gl.where(valid, 0, -1024).to(gl.int16).to(gl.float16, bitcast=True)
        return _packed_asm(
            "{ .reg .b32 t; and.b32 t, $1, $2; or.b32 $0, t, $3; }",
            s,
            keep,
            fill,
        )
    return gl.where(valid, s, float("-inf"))


@gluon.jit
def _softmax_weights(
    s, m_i, l_i, key_start, lo, hi, score_scale, dtype: gl.constexpr,
    o_layout: gl.constexpr, EDGE: gl.constexpr = None,
):  # fmt: skip
    """``_softmax_step`` without touching the output: the weights P, the new
    row maxima and sums, and the factor ``alpha`` (in the rows of
    ``o_layout``) that the output takes before ``P V`` is added.
    ``score_scale``: each row's factor of its scores (``_row_scales``).
    With maxima of half the rows (``HALF_ROWS``): the softmax of the first
    half of ``_row_halves`` alone, the other half's weights 0, and
    ``alpha`` in the maxima's layout."""
    HALF: gl.constexpr = m_i.shape[0] * 2 == s.shape[0]
    if HALF:
        s, _ = _row_halves(s)
    # Scores of 8-bit MMAs (FP8_SCORES) in the 16-bit MMAs' layout: the same
    # threads hold the same values, the conversion only renames the layout.
    s = gl.convert_layout(s, m_i.type.layout.parent)
    s = _mask_keys(s, key_start, lo, hi, EDGE)
    if s.dtype == gl.float16:
        return _packed_weights(s, m_i, l_i, score_scale, o_layout, HALF)
    # The maxima in the scaled domain (score_scale > 0), and the scale folded
    # into the exponent's fused multiply-add.
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * score_scale)
    alpha = gl.exp2(m_i - m_new)
    # e4m3 weights (P V on fp8 tensor cores) are 2^8 times the softmax's,
    # in [0, 256] instead of [0, 1], where e4m3 keeps 3 bits down to 2^-14
    # of the row's maximum; the row sums take the same factor, so the output
    # does not change.
    p_log2: gl.constexpr = _weights_log2(dtype)
    p = gl.exp2(s * gl.expand_dims(score_scale, 1) - gl.expand_dims(m_new - p_log2, 1))
    l_i = l_i * alpha + gl.sum(p, axis=1)
    p = p.to(dtype)
    if dtype.primitive_bitwidth == 8:
        p = _fp8_key_order(p)
    p_op, alpha_o = _weights_operand(p, alpha, o_layout, HALF)
    return p_op, m_new, l_i, alpha_o


@gluon.jit
def _weights_operand(p, alpha, o_layout: gl.constexpr, HALF: gl.constexpr):
    """The weights ``p`` (the MMA's dtype) as the A operand of ``P V`` and
    ``alpha`` in the output's rows (``HALF``: the first half of
    ``_row_halves``, the other half's weights 0; the conversions only
    rename layouts)."""
    p_layout: gl.constexpr = gl.DotOperandLayout(
        operand_index=0, parent=o_layout, k_width=32 // p.dtype.primitive_bitwidth
    )
    if HALF:
        p_op = _join_row_halves(p, gl.zeros_like(p), p_layout)
        alpha_o = alpha
    else:
        p_op = gl.convert_layout(p, p_layout)
        alpha_o = gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))
    return p_op, alpha_o


@gluon.jit
def _packed_weights(
    s, m_i, l_i, score_scale, o_layout: gl.constexpr, HALF: gl.constexpr
):
    """``_softmax_weights`` of float16 scores (``PACKED_SOFTMAX``), two
    values per instruction: the tile's row maxima in float16 (exact), the
    exponents ``s * scale - m`` by float16 fused multiply-adds and
    ``ex2.approx.f16x2``, the tile's row sums by float16 additions down to
    8 columns (``_packed_row_sums``). The running maxima and sums stay
    float32, the maxima rounded to float16: the values the exponents
    subtract, so that ``alpha`` rescales exactly what they weighed."""
    m_tile = gl.max(s, axis=1).to(gl.float32)
    m_new = gl.maximum(m_i, m_tile * score_scale).to(gl.float16)
    alpha = gl.exp2(m_i - m_new.to(gl.float32))
    x = _packed_asm(
        "fma.rn.f16x2 $0, $1, $2, $3;",
        s,
        gl.expand_dims(score_scale.to(gl.float16), 1),
        -gl.expand_dims(m_new, 1),
    )
    p = _packed_asm("ex2.approx.f16x2 $0, $1;", x)
    sums = gl.convert_layout(_packed_row_sums(p), l_i.type.layout)
    l_i = l_i * alpha + sums
    p_op, alpha_o = _weights_operand(p, alpha, o_layout, HALF)
    return p_op, m_new.to(gl.float32), l_i, alpha_o


@gluon.jit
def _packed_asm(asm: gl.constexpr, a, b=None, c=None):
    """One float16x2 PTX instruction on float16 tensors (``$0`` the result,
    ``$1``.. the operands, two values per 32-bit register: the pairs of
    neighbouring columns that an MMA layout gives each thread)."""
    if b is None:
        args = [a]
        constraints: gl.constexpr = "=r,r"
    elif c is None:
        args = [a, b]
        constraints: gl.constexpr = "=r,r,r"
    else:
        args = [a, b, c]
        constraints: gl.constexpr = "=r,r,r,r"
    return gl.inline_asm_elementwise(
        asm, constraints, args, dtype=gl.float16, is_pure=True, pack=2
    )


@gluon.jit
def _packed_row_sums(p):
    """The row sums of ``p`` (float16, an MMA layout) in float32: the two
    column halves added in float16 pairs (each thread holds columns c and
    c + N / 2, each with its neighbour) down to 8 columns, then in float32."""
    M: gl.constexpr = p.shape[0]
    N: gl.constexpr = p.shape[1]
    if N > 8:
        halves = gl.permute(gl.reshape(p, [M, 2, N // 2]), (0, 2, 1))
        a, b = gl.split(halves)
        return _packed_row_sums(_packed_asm("add.rn.f16x2 $0, $1, $2;", a, b))
    else:
        return gl.sum(p.to(gl.float32), axis=1)


@gluon.jit
def _fp8_key_order(x):
    """``x`` (``[rows, keys]``, keys a multiple of 16) with its keys in the
    order that 8-bit ``P V`` MMAs take them: position ``16 h + 4 q + 2 e +
    b`` holds key ``16 h + 8 e + 2 q + b``. The weights as the scores'
    accumulator leaves them in each thread are then the A operand's values
    of the same thread (no exchange between threads), provided that V's
    transposed pages hold their keys in this order too (``v_page_keys`` of
    ``ops.v_pages``)."""
    m: gl.constexpr = x.shape[0]
    n: gl.constexpr = x.shape[1]
    x = gl.reshape(x, [m, n // 16, 2, 4, 2])
    x = gl.permute(x, (0, 1, 3, 2, 4))
    return gl.reshape(x, [m, n])


@gluon.constexpr_function
def _weights_log2(dtype):
    """log2 of the factor of the softmax weights as the MMA ``P V`` takes
    them: 8 for e4m3 weights, else 0."""
    return 8.0 if dtype.primitive_bitwidth == 8 else 0.0


@gluon.jit
def _out_scale(v_scale_ptr, KV_FP8: gl.constexpr):
    """The factor of every output value: ``v_scale`` for fp8, else 1."""
    if KV_FP8:
        return gl.load(v_scale_ptr)
    else:
        return 1.0


@gluon.jit
def _store_output(
    out_ptr, acc, l_i, v_scale_ptr, q_first, q_base, num_q, kv_head,
    stride_o_t, stride_o_h, GROUP: gl.constexpr, KV_FP8: gl.constexpr,
):  # fmt: skip
    """``acc`` times ``v_scale / l`` (``v_scale``: for fp8, else 1; one
    division per row, not per value) into the tile's output rows (with sums
    of half the rows, ``HALF_ROWS``: the first half of ``_row_halves``)."""
    if l_i.shape[0] * 2 == acc.shape[0]:
        acc, _ = _row_halves(acc)
    o_layout: gl.constexpr = acc.type.layout
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    result = acc * gl.expand_dims(_out_scale(v_scale_ptr, KV_FP8) / l_o, 1)
    ptrs, mask = _row_ptrs(
        out_ptr, q_first, q_base, num_q, kv_head, stride_o_t, stride_o_h,
        GROUP, acc.shape[0], acc.shape[1], o_layout,
    )  # fmt: skip
    gl.store(ptrs, result.to(out_ptr.dtype.element_ty), mask=mask)


@gluon.jit
def _load_q(
    q_smem, q_ptr, q_first, q_base, num_q, kv_head, stride_q_t, stride_q_h,
    q_factor, GROUP: gl.constexpr, F16_DOTS: gl.constexpr,
    num_warps: gl.constexpr, FP8_SCORES: gl.constexpr = False,
    HALF_ROWS: gl.constexpr = False, PACKED_SOFTMAX: gl.constexpr = False,
):  # fmt: skip
    """A tile of q into shared memory, visible to the MMAs of every warp
    (``F16_DOTS``: times ``q_factor``, rounded to float16 once;
    ``FP8_SCORES``: each row times the power of two that puts its largest
    magnitude in [128, 256), rounded to e4m3; with ``PACKED_SOFTMAX`` in
    [0.5, 1), so that no float16 sum of 128 products with e4m3 keys, at
    most 448 each, can overflow). Returns the factor that each
    row's scores take (``FP8_SCORES``: ``q_factor`` over the row's power of
    two; else 1). An all-zero row, a padding row, stays 0 (``HALF_ROWS``:
    the rows of ``_row_ptrs``). The caller's previous MMAs on ``q_smem``
    have completed."""
    HEAD_DIM: gl.constexpr = q_smem.shape[1]
    layout: gl.constexpr = _kv_layout(HEAD_DIM, False, num_warps)
    ptrs, mask = _row_ptrs(
        q_ptr, q_first, q_base, num_q, kv_head, stride_q_t, stride_q_h,
        GROUP, q_smem.shape[0], HEAD_DIM, layout, HALF_ROWS,
    )  # fmt: skip
    q = gl.load(ptrs, mask=mask, other=0.0)
    if FP8_SCORES:
        # An exact scaling, so that the rounding is e4m3's alone: 2^(7 - E)
        # (PACKED_SOFTMAX: 2^(-1 - E)) for a row maximum of 2^E times
        # [1, 2), built from E's bits (a zero row takes 2^7 or 2^-1; the
        # exponent kept finite and normal at both ends).
        top: gl.constexpr = 253 if PACKED_SOFTMAX else 261
        qf = q.to(gl.float32)
        row_max = gl.max(gl.abs(qf), axis=1)
        row_max = gl.where(row_max > 0, row_max, 1.0)
        biased = (row_max.to(gl.int32, bitcast=True) >> 23) & 0xFF
        exponent = gl.maximum(gl.minimum(top - biased, 254), 1)
        pow2 = (exponent << 23).to(gl.float32, bitcast=True)
        q = (qf * gl.expand_dims(pow2, 1)).to(q_smem.dtype)
        descale = q_factor / pow2
    else:
        if F16_DOTS:
            q = (q.to(gl.float32) * q_factor).to(gl.float16)
        descale = gl.full([q_smem.shape[0]], 1.0, gl.float32, gl.SliceLayout(1, layout))
    gl.barrier()  # every warp is past its MMAs on the previous tile of q
    q_smem.store(q)
    fence_async_shared()
    gl.barrier()
    return descale


@gluon.jit
def _row_scales(
    descale, score_scale, BLOCK_N: gl.constexpr, num_warps: gl.constexpr,
    FP8_SCORES: gl.constexpr = False, HALF_ROWS: gl.constexpr = False,
):  # fmt: skip
    """The factor of each row's scores in the softmax exponent: the
    kernel's ``score_scale`` times (``FP8_SCORES``) the row's ``descale``
    from ``_load_q``, in the rows of the scores' layout (``HALF_ROWS``:
    of their first half, ``_row_halves``)."""
    rows: gl.constexpr = gl.SliceLayout(1, _mma_layout(BLOCK_N, num_warps))
    if FP8_SCORES:
        r = gl.convert_layout(descale, rows) * score_scale
    else:
        r = gl.full([descale.shape[0]], 1.0, gl.float32, rows) * score_scale
    if HALF_ROWS:  # once per pass: through a tile of the scores' shape
        full = gl.expand_dims(r, 1) + gl.zeros(
            [descale.shape[0], BLOCK_N], gl.float32, _mma_layout(BLOCK_N, num_warps)
        )
        r = gl.max(_row_halves(full)[0], axis=1)
    return r


@gluon.jit
def _issue_scores(
    q_smem, k_buf, num_warps: gl.constexpr, PACKED_SOFTMAX: gl.constexpr = False
):
    """Start ``S = Q K^T`` on the tensor cores for one key tile
    (``PACKED_SOFTMAX``: accumulated in float16)."""
    BLOCK_N: gl.constexpr = k_buf.shape[0]
    BLOCK_M: gl.constexpr = q_smem.shape[0]
    depth: gl.constexpr = 256 // q_smem.dtype.primitive_bitwidth
    s_dtype: gl.constexpr = gl.float16 if PACKED_SOFTMAX else gl.float32
    s = gl.zeros([BLOCK_M, BLOCK_N], s_dtype, _mma_layout(BLOCK_N, num_warps, depth))
    return warpgroup_mma(q_smem, k_buf.permute((1, 0)), s, use_acc=False, is_async=True)


@gluon.jit
def _finish_tile(
    s, v_buf, m_i, l_i, acc, key_start, lo, hi, score_scale,
    EDGE: gl.constexpr = None,
):  # fmt: skip
    """Wait for the scores, update the softmax (``EDGE``: see
    ``_mask_keys``) and run ``O += P V``; returns once the MMAs are done
    with the tile's buffers."""
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    p_op, m_i, l_i, acc = _softmax_step(
        s, m_i, l_i, acc, key_start, lo, hi, score_scale, v_buf.dtype, EDGE
    )
    acc = warpgroup_mma(p_op, v_buf, acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    return m_i, l_i, acc


@gluon.jit
def _key_tile(
    q_smem, k_buf, v_buf, m_i, l_i, acc, key_start, lo, hi, score_scale,
    num_warps: gl.constexpr, TAIL_N: gl.constexpr, HALF_ROWS: gl.constexpr,
    PACKED_SOFTMAX: gl.constexpr = False,
):  # fmt: skip
    """One key tile of a pass: ``S = Q K^T``, the softmax and
    ``O += P V`` (``_finish_tile``; ``PACKED_SOFTMAX``: ``_issue_scores``,
    except in a narrow tile: Triton 3.7 reads the halves of a 16-column
    float16 accumulator before waiting for its MMAs, which makes ptxas
    serialize every MMA of the kernel). ``TAIL_N`` (not 0): a tile whose keys
    from ``key_start`` on all lie below ``key_start + TAIL_N`` (an item's
    last tile, e.g. the 8 draft keys past a window of whole tiles) is
    multiplied as a ``TAIL_N``-key tile, its buffers' first rows alone:
    a quarter of the MMAs and exponentials of a 64-key tile at 16."""
    if TAIL_N > 0:
        if hi - key_start <= TAIL_N:
            m_i, l_i, acc = _narrow_tile(
                q_smem, k_buf.slice(0, TAIL_N), v_buf.slice(0, TAIL_N), m_i, l_i,
                acc, key_start, lo, hi, score_scale, num_warps, HALF_ROWS,
            )  # fmt: skip
        else:
            m_i, l_i, acc = _whole_tile(
                q_smem, k_buf, v_buf, m_i, l_i, acc, key_start, lo, hi,
                score_scale, num_warps, PACKED_SOFTMAX,
            )  # fmt: skip
    else:
        m_i, l_i, acc = _whole_tile(
            q_smem, k_buf, v_buf, m_i, l_i, acc, key_start, lo, hi, score_scale,
            num_warps, PACKED_SOFTMAX,
        )  # fmt: skip
    return m_i, l_i, acc


@gluon.jit
def _whole_tile(
    q_smem, k_buf, v_buf, m_i, l_i, acc, key_start, lo, hi, score_scale,
    num_warps: gl.constexpr, PACKED_SOFTMAX: gl.constexpr,
):  # fmt: skip
    """``_key_tile`` of the buffers' whole tile. With ``PACKED_SOFTMAX`` the
    tile with keys to mask and the others take separate copies of the
    softmax: where the masked float16 scores and the others meet after a
    branch, ptxas keeps their halves in separate registers and packs them
    again in every tile (126 byte permutes per tile and thread at fp8
    shape 4 under Triton 3.7.1, against 64). Each copy starts its own
    ``S``: Triton reads a float16 accumulator's halves right after issuing
    its MMAs, and across a branch ptxas then serializes every MMA of the
    kernel."""
    args = (q_smem, k_buf, v_buf, m_i, l_i, acc, key_start, lo, hi, score_scale)
    if PACKED_SOFTMAX:
        if _edge_tile(key_start, lo, hi, k_buf.shape[0]):
            m_i, l_i, acc = _scored_tile(*args, num_warps, True, True)
        else:
            m_i, l_i, acc = _scored_tile(*args, num_warps, True, False)
    else:
        m_i, l_i, acc = _scored_tile(*args, num_warps, False)
    return m_i, l_i, acc


@gluon.jit
def _scored_tile(
    q_smem, k_buf, v_buf, m_i, l_i, acc, key_start, lo, hi, score_scale,
    num_warps: gl.constexpr, PACKED_SOFTMAX: gl.constexpr, EDGE: gl.constexpr = None,
):  # fmt: skip
    """``S`` started (``_issue_scores``), then ``_finish_tile``."""
    s = _issue_scores(q_smem, k_buf, num_warps, PACKED_SOFTMAX)
    return _finish_tile(s, v_buf, m_i, l_i, acc, key_start, lo, hi, score_scale, EDGE)


@gluon.jit
def _narrow_tile(
    q_smem, k_buf, v_buf, m_i, l_i, acc, key_start, lo, hi, score_scale,
    num_warps: gl.constexpr, HALF_ROWS: gl.constexpr,
):  # fmt: skip
    """``_finish_tile`` on ``k_buf`` and ``v_buf`` of fewer keys than the
    loop's tiles: the row state moved into the narrower scores' row layout
    and back (each thread holds the same rows in both: no data moves)."""
    narrow_m, _, _ = _softmax_init(
        q_smem.shape[0], k_buf.shape[0], v_buf.shape[1], num_warps, 16, HALF_ROWS
    )
    rows: gl.constexpr = narrow_m.type.layout
    s = _issue_scores(q_smem, k_buf, num_warps)
    m_n, l_n, acc = _finish_tile(
        s, v_buf, gl.convert_layout(m_i, rows), gl.convert_layout(l_i, rows), acc,
        key_start, lo, hi, gl.convert_layout(score_scale, rows),
    )  # fmt: skip
    m_i = gl.convert_layout(m_n, m_i.type.layout)
    l_i = gl.convert_layout(l_n, l_i.type.layout)
    return m_i, l_i, acc


@gluon.jit
def _softmax_init(
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    num_warps: gl.constexpr,
    PV_DEPTH: gl.constexpr = 16,
    HALF_ROWS: gl.constexpr = False,
):
    """Row maxima, row sums and the output accumulator before the first tile
    (``PV_DEPTH``: the depth of the ``P V`` instructions, 32 for 8-bit
    operands; ``HALF_ROWS``: the maxima and sums of the first half of the
    rows, ``_row_halves``, in the layout it gives)."""
    s_layout: gl.constexpr = _mma_layout(BLOCK_N, num_warps)
    o_layout: gl.constexpr = _mma_layout(HEAD_DIM, num_warps, PV_DEPTH)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    if HALF_ROWS:
        h, _ = _row_halves(gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout))
        rows: gl.constexpr = gl.SliceLayout(1, h.type.layout)
        m_i = gl.full([BLOCK_M // 2], float("-inf"), gl.float32, rows)
        l_i = gl.zeros([BLOCK_M // 2], gl.float32, rows)
    else:
        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
        l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
    return m_i, l_i, acc


@gluon.constexpr_function
def _tile_smem(shape, dtype):
    return gl.NVMMASharedLayout.get_default_for(shape, dtype)


@gluon.jit
def _ws_load_partition(
    k_raw, v_raw, raw_ready, k_smem, v_smem, ready, empty,
    k_ptr, v_ptr, block_table_ptr, context_lens_ptr, query_start_loc_ptr,
    window, num_reqs,
    stride_k_blk, stride_k_slot, stride_k_head,
    stride_v_blk, stride_v_slot, stride_v_head, stride_bt, k_desc, v_desc,
    NUM_KV_HEADS: gl.constexpr, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr, HAS_WINDOW: gl.constexpr,
    KV_FP8: gl.constexpr, NUM_BUF: gl.constexpr, NUM_RAW: gl.constexpr,
    AHEAD: gl.constexpr, FENCE_IN_MMA: gl.constexpr, NARROW: gl.constexpr,
    TMA: gl.constexpr, stats_ptr=None, FP8_SCORES: gl.constexpr = False,
    FP8_PV: gl.constexpr = False, EDGE_TMA: gl.constexpr = False,
):  # fmt: skip
    """The loading warpgroup: every key tile of every item and query pass, in
    the multiplying warpgroup's order, staged ``NUM_RAW`` tiles ahead (so
    that enough bytes are in flight to keep the memory busy), converted and
    stored into ring buffer ``it % NUM_BUF`` once that buffer is free.
    ``FENCE_IN_MMA``: signalled after a barrier of the loading warps instead
    of a fence (which waits for the thread's outstanding loads); the
    multiplying warps fence after waiting. Caches in q's dtype:
    ``_ws_copy_partition`` instead (``k_raw``/``v_raw`` unused, ``AHEAD``
    its copies in flight at a signal). ``NARROW``: the staged tiles are read
    back 8 values per thread (``_convert_layout``, every loading thread's
    copies awaited), so that the converted stores are one wavefront each.
    ``TMA``: ``_ws_tma_partition`` (caches in q's dtype) or
    ``_ws_tma_fp8_partition`` (fp8, its slots' barriers ``raw_ready``) with
    the caches' descriptors ``k_desc``/``v_desc``; those two record their
    waits in ``stats_ptr`` (not ``None``). ``FP8_SCORES``, ``FP8_PV``,
    ``EDGE_TMA``: see ``_ws_tma_fp8_partition``."""
    if TMA and KV_FP8:
        _ws_tma_fp8_partition(
            k_desc, v_desc, k_raw, v_raw, raw_ready, k_smem, v_smem, ready,
            empty, k_ptr, v_ptr, block_table_ptr, context_lens_ptr,
            query_start_loc_ptr, window, num_reqs, stride_k_blk, stride_k_slot,
            stride_k_head, stride_v_blk, stride_v_slot, stride_v_head,
            stride_bt, NUM_KV_HEADS, BLOCK_Q, BLOCK_N, HEAD_DIM, PAGE_SIZE,
            HAS_WINDOW, NUM_BUF, NUM_RAW, NARROW, stats_ptr, FP8_SCORES, FP8_PV,
            EDGE_TMA,
        )  # fmt: skip
    elif TMA:
        _ws_tma_partition(
            k_desc, v_desc, k_smem, v_smem, ready, empty, k_ptr, v_ptr,
            block_table_ptr, context_lens_ptr, query_start_loc_ptr, window,
            num_reqs, stride_k_blk, stride_k_slot, stride_k_head, stride_v_blk,
            stride_v_slot, stride_v_head, stride_bt, NUM_KV_HEADS, BLOCK_Q,
            BLOCK_N, HEAD_DIM, PAGE_SIZE, HAS_WINDOW, NUM_BUF, stats_ptr,
        )  # fmt: skip
    elif not KV_FP8:
        _ws_copy_partition(
            k_smem, v_smem, ready, empty, k_ptr, v_ptr, block_table_ptr,
            context_lens_ptr, query_start_loc_ptr, window, num_reqs,
            stride_k_blk, stride_k_slot, stride_k_head, stride_v_blk,
            stride_v_slot, stride_v_head, stride_bt, NUM_KV_HEADS, BLOCK_Q,
            BLOCK_N, HEAD_DIM, PAGE_SIZE, HAS_WINDOW, NUM_BUF, AHEAD,
            FENCE_IN_MMA,
        )  # fmt: skip
    else:
        kv_layout: gl.constexpr = _kv_layout(HEAD_DIM, KV_FP8, 4)
        cvt_layout: gl.constexpr = _convert_layout(HEAD_DIM, NARROW, 4)
        it = 0
        num_items = num_reqs * NUM_KV_HEADS
        for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
            kv_head, q_first, num_q, lo, _, hi, n_tiles, bt_row, k_head, v_head = (
                _item_kv(
                    item, context_lens_ptr, query_start_loc_ptr, block_table_ptr,
                    k_ptr, v_ptr, window, stride_bt, stride_k_head, stride_v_head,
                    HAS_WINDOW, NUM_KV_HEADS, BLOCK_N, 1,
                )
            )  # fmt: skip
            for _pass in range(0, num_q, BLOCK_Q):
                for i in range(0, NUM_RAW):
                    page, ok = _tile_pages(
                        bt_row, lo + i * BLOCK_N, hi, PAGE_SIZE, BLOCK_N, kv_layout
                    )
                    _copy_kv_tiles(
                        k_raw.index(i), v_raw.index(i), k_head, v_head, page, ok,
                        lo + i * BLOCK_N, stride_k_blk, stride_k_slot,
                        stride_v_blk, stride_v_slot, PAGE_SIZE, BLOCK_N, HEAD_DIM,
                        kv_layout,
                    )  # fmt: skip
                page, ok = _tile_pages(
                    bt_row, lo + NUM_RAW * BLOCK_N, hi, PAGE_SIZE, BLOCK_N, kv_layout
                )
                for t in range(0, n_tiles):
                    slot = t % NUM_RAW
                    buf = it % NUM_BUF
                    # Tile t landed (the NUM_RAW - 1 after it may be in flight).
                    async_copy.wait_group(NUM_RAW - 1)
                    if NARROW:
                        gl.barrier()  # read back across the loading threads
                    # Ring buffer free once the MMAs on its previous tile have
                    # completed (in the first round parity 1, which precedes a
                    # new barrier's phase).
                    mbarrier.wait(empty.index(buf), ((it // NUM_BUF) & 1) ^ 1)
                    _convert_tiles(
                        k_raw.index(slot), v_raw.index(slot), k_smem.index(buf),
                        v_smem.index(buf), cvt_layout, KV_FP8,
                    )  # fmt: skip
                    # Tile t + NUM_RAW into the slot just read (the barrier that
                    # the compiler puts between the reads and the copy orders
                    # them), through pages loaded an iteration ago, before the
                    # signal: a fence waits for the thread's loads in flight, and
                    # the copy has consumed these. Then the next tile's pages.
                    _copy_kv_tiles(
                        k_raw.index(slot), v_raw.index(slot), k_head, v_head, page,
                        ok, lo + (t + NUM_RAW) * BLOCK_N, stride_k_blk,
                        stride_k_slot, stride_v_blk, stride_v_slot, PAGE_SIZE,
                        BLOCK_N, HEAD_DIM, kv_layout,
                    )  # fmt: skip
                    if FENCE_IN_MMA:
                        gl.barrier()  # every loading thread's stores, then the signal
                    else:
                        fence_async_shared()
                    mbarrier.arrive(ready.index(buf), count=1)
                    page, ok = _tile_pages(
                        bt_row, lo + (t + NUM_RAW + 1) * BLOCK_N, hi, PAGE_SIZE,
                        BLOCK_N, kv_layout,
                    )  # fmt: skip
                    it += 1
                # The copies staged past the last tile land before the slots
                # are reused.
                async_copy.wait_group(0)


@gluon.jit
def _ws_copy_partition(
    k_smem, v_smem, ready, empty,
    k_ptr, v_ptr, block_table_ptr, context_lens_ptr, query_start_loc_ptr,
    window, num_reqs,
    stride_k_blk, stride_k_slot, stride_k_head,
    stride_v_blk, stride_v_slot, stride_v_head, stride_bt,
    NUM_KV_HEADS: gl.constexpr, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr, HAS_WINDOW: gl.constexpr,
    NUM_BUF: gl.constexpr, AHEAD: gl.constexpr, FENCE_IN_MMA: gl.constexpr,
):  # fmt: skip
    """The loading warpgroup for caches in q's dtype (nothing to convert):
    every key tile copied with ``cp.async`` straight into ring buffer
    ``it % NUM_BUF`` once that buffer is free, and signalled once ``AHEAD``
    newer copies are in flight (the last ones at the end); ``AHEAD`` is
    ``copies_ahead(NUM_BUF)``, ``NUM_BUF - 1`` (with more, neither side
    could go on).
    ``FENCE_IN_MMA``: instead, each thread's copies of a tile arrive on its
    ``ready`` barrier when they land (``cp.async.mbarrier.arrive``), so the
    loader never waits for memory nor fences (the multiplying warps fence
    after the barrier); ``ready`` then counts the loader's 128 threads."""
    kv_layout: gl.constexpr = _kv_layout(HEAD_DIM, False, 4)
    it = 0  # tiles whose copies were issued
    done = 0  # tiles signalled
    num_items = num_reqs * NUM_KV_HEADS
    for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
        kv_head, q_first, num_q, lo, _, hi, n_tiles, bt_row, k_head, v_head = (
            _item_kv(
                item, context_lens_ptr, query_start_loc_ptr, block_table_ptr,
                k_ptr, v_ptr, window, stride_bt, stride_k_head, stride_v_head,
                HAS_WINDOW, NUM_KV_HEADS, BLOCK_N, 1,
            )
        )  # fmt: skip
        for _pass in range(0, num_q, BLOCK_Q):
            page, ok = _tile_pages(bt_row, lo, hi, PAGE_SIZE, BLOCK_N, kv_layout)
            for t in range(0, n_tiles):
                buf = it % NUM_BUF
                # Free once the MMAs on its previous tile completed (in the
                # first round parity 1, which precedes a new barrier's phase).
                mbarrier.wait(empty.index(buf), ((it // NUM_BUF) & 1) ^ 1)
                _copy_kv_tiles(
                    k_smem.index(buf), v_smem.index(buf), k_head, v_head, page,
                    ok, lo + t * BLOCK_N, stride_k_blk, stride_k_slot,
                    stride_v_blk, stride_v_slot, PAGE_SIZE, BLOCK_N, HEAD_DIM,
                    kv_layout,
                )  # fmt: skip
                if FENCE_IN_MMA:
                    async_copy.mbarrier_arrive(ready.index(buf), increment_count=False)
                it += 1
                if not FENCE_IN_MMA and it - done == AHEAD + 1:
                    # The oldest tile in flight has landed, from every thread.
                    async_copy.wait_group(AHEAD)
                    fence_async_shared()
                    gl.barrier()
                    mbarrier.arrive(ready.index(done % NUM_BUF), count=1)
                    done += 1
                # The next tile's pages only now: a fence waits for the
                # thread's loads still in flight, and these are not needed
                # before the next copy.
                page, ok = _tile_pages(
                    bt_row, lo + (t + 1) * BLOCK_N, hi, PAGE_SIZE, BLOCK_N,
                    kv_layout,
                )  # fmt: skip
    async_copy.wait_group(0)
    if not FENCE_IN_MMA:
        fence_async_shared()
        gl.barrier()
        for j in range(done, it):
            mbarrier.arrive(ready.index(j % NUM_BUF), count=1)


@gluon.constexpr_function
def tma_piece_layout(bitwidth):
    """The shared layout of one TMA copy: a page of one KV head, 128 bytes
    of the head dim (``[1, PAGE_SIZE, 1, tma_piece_width(bitwidth)]`` of a
    ``[blocks, page, heads, D]`` cache), placed inside a tile's 128-byte
    swizzle."""
    return gl.NVMMASharedLayout(
        swizzle_byte_width=128, element_bitwidth=bitwidth, rank=4
    )


@gluon.constexpr_function
def tma_piece_width(bitwidth):
    """Head-dim values per TMA copy: one 128-byte swizzle row (64 bf16/fp16
    values, 128 e4m3)."""
    return 1024 // bitwidth


@gluon.constexpr_function
def _page_ids_layout(pages, num_warps):
    """Every thread of ``num_warps`` warps holding all ``pages`` page ids of
    a key tile (TMA coordinates are the same in every thread)."""
    return gl.BlockedLayout([pages], [32], [num_warps], [0])


@gluon.jit
def _tile_page_ids(
    bt_row, start, hi, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr
):  # fmt: skip
    """The block-table entries of the pages of the key tile from ``start``
    (a page boundary; 0 past ``hi``), loaded a tile before its copies are
    issued, so that their latency stays off the loader's path."""
    PAGES: gl.constexpr = BLOCK_N // PAGE_SIZE
    layout: gl.constexpr = _page_ids_layout(PAGES, gl.num_warps())
    pos = start + PAGE_SIZE * gl.arange(0, PAGES, layout=layout)
    return gl.load(bt_row + pos // PAGE_SIZE, mask=pos < hi, other=0)


@gluon.jit
def _masked_page_ids(
    page_ids, bt_row, start, hi, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr
):  # fmt: skip
    """``page_ids``, or where ``None`` those of ``_tile_page_ids`` (no read
    past the request's pages)."""
    if page_ids is None:
        return _tile_page_ids(bt_row, start, hi, PAGE_SIZE, BLOCK_N)
    else:
        return page_ids


@gluon.jit
def _page_id(page_ids, p: gl.constexpr):
    """Entry ``p`` of ``_tile_page_ids``, as a scalar (a sum within each
    thread)."""
    layout: gl.constexpr = page_ids.type.layout
    idx = gl.arange(0, page_ids.shape[0], layout=layout)
    return gl.sum(gl.where(idx == p, page_ids, 0), axis=0)


@gluon.jit
def _tma_copy_tile(
    k_desc, v_desc, k_dst, v_dst, bar, bt_row, start, page_ids, kv_head,
    BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr,
):  # fmt: skip
    """The TMA copies of the K/V key tile from ``start`` (a page boundary)
    into ``k_dst``/``v_dst`` (128-byte-swizzled ``[BLOCK_N, HEAD_DIM]``
    tiles in the caches' dtype), one page of one KV head and 128 bytes of
    the head dim per copy; ``bar`` completes when their bytes have landed
    (the expectation is its one arrival). Its pages: ``page_ids`` (from
    ``_tile_page_ids``), or with ``None`` read from ``bt_row`` at each
    copy (the faster choice with a cache in q's dtype on the H200).
    ``v_desc`` ``None``: one tensor's tile (``k_desc`` into ``k_dst``)."""
    dtype: gl.constexpr = k_dst.dtype
    bits: gl.constexpr = dtype.primitive_bitwidth
    WIDTH: gl.constexpr = tma_piece_width(bits)
    PAGES: gl.constexpr = BLOCK_N // PAGE_SIZE
    PIECES: gl.constexpr = HEAD_DIM // WIDTH
    piece_layout: gl.constexpr = tma_piece_layout(bits)
    piece_shape: gl.constexpr = [PIECES * PAGES, 1, PAGE_SIZE, 1, WIDTH]
    if v_desc is None:
        mbarrier.expect(bar, BLOCK_N * HEAD_DIM * bits // 8)
    else:
        mbarrier.expect(bar, 2 * BLOCK_N * HEAD_DIM * bits // 8)
        v_pieces = _view_as(v_dst, dtype, piece_shape, piece_layout)
    # The tile as pieces: piece h * PAGES + p holds rows PAGE_SIZE * p ..
    # PAGE_SIZE * (p + 1) - 1 of the head dim's h-th WIDTH values (a
    # 128-byte-swizzled tile stores its 128-byte column blocks one after
    # the other).
    k_pieces = _view_as(k_dst, dtype, piece_shape, piece_layout)
    for p in gl.static_range(PAGES):
        if page_ids is None:
            page_id = gl.load(bt_row + start // PAGE_SIZE + p)
        else:
            page_id = _page_id(page_ids, p)
        for h in gl.static_range(PIECES):
            _tma_load(
                k_desc, [page_id, 0, kv_head, WIDTH * h], bar,
                k_pieces.index(h * PAGES + p),
            )  # fmt: skip
            if v_desc is not None:
                _tma_load(
                    v_desc, [page_id, 0, kv_head, WIDTH * h], bar,
                    v_pieces.index(h * PAGES + p),
                )  # fmt: skip


@gluon.jit
def _copy_edge_tile(
    k_dst, v_dst, bar, bt_row, k_head, v_head, start, lo, hi,
    stride_k_blk, stride_k_slot, stride_v_blk, stride_v_slot,
    PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
    layout: gl.constexpr,
):  # fmt: skip
    """The K/V key tile from ``start`` by ``cp.async``, the keys outside
    ``lo .. hi - 1`` zero-filled (cache slots outside a request's window may
    hold anything, and a weight of 0 times NaN is NaN): where TMA, which
    copies whole pages, would read them. Each thread's copies arrive on
    ``bar`` as they land (each counted first), then the loader arrives once
    (``bar`` expects one arrival)."""
    page, ok = _tile_pages(bt_row, start, hi, PAGE_SIZE, BLOCK_N, layout)
    keys = start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
    ok = ok & (keys >= lo)
    _copy_kv_tiles(
        k_dst, v_dst, k_head, v_head, page, ok, start, stride_k_blk,
        stride_k_slot, stride_v_blk, stride_v_slot, PAGE_SIZE, BLOCK_N,
        HEAD_DIM, layout,
    )  # fmt: skip
    async_copy.mbarrier_arrive(bar, increment_count=True)
    # Every thread's copies counted before the arrival that would otherwise
    # complete the phase.
    gl.barrier()
    mbarrier.arrive(bar, count=1)


@gluon.jit
def _stage_tile(
    k_desc, v_desc, k_dst, v_dst, bar, bt_row, page_ids, k_head, v_head,
    kv_head, start, lo, hi, stride_k_blk, stride_k_slot, stride_v_blk,
    stride_v_slot, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr, layout: gl.constexpr, EDGE_TMA: gl.constexpr = False,
):  # fmt: skip
    """The K/V key tile from ``start`` (its pages ``page_ids``, or ``None``:
    see ``_tma_copy_tile``) into ``k_dst``/``v_dst``, ``bar`` completing
    when it has landed: by TMA when all its keys lie in ``lo .. hi - 1``,
    else by ``_copy_edge_tile``. ``v_desc`` and ``v_dst`` ``None``: one
    tensor's tile (``k_desc``, ``k_head`` and the K strides into
    ``k_dst``). ``EDGE_TMA`` (fp8 staging, whose converting warps zero V's
    keys outside the window, ``_window_rows``): every tile by TMA, whole
    pages, those past ``hi`` as page 0 (``_tile_page_ids``)."""
    if EDGE_TMA:
        _tma_copy_tile(
            k_desc, v_desc, k_dst, v_dst, bar, bt_row, start,
            _masked_page_ids(page_ids, bt_row, start, hi, PAGE_SIZE, BLOCK_N),
            kv_head, BLOCK_N, HEAD_DIM, PAGE_SIZE,
        )  # fmt: skip
    # Not an edge tile (``_edge_tile``), written as the interior test: the
    # negated form compiles the loaders differently under Triton 3.7.1
    # (their address arithmetic moved out of the uniform registers).
    elif (start >= lo) & (start + BLOCK_N <= hi):
        _tma_copy_tile(
            k_desc, v_desc, k_dst, v_dst, bar, bt_row, start, page_ids,
            kv_head, BLOCK_N, HEAD_DIM, PAGE_SIZE,
        )  # fmt: skip
    else:
        _copy_edge_tile(
            k_dst, v_dst, bar, bt_row, k_head, v_head, start, lo, hi,
            stride_k_blk, stride_k_slot, stride_v_blk, stride_v_slot,
            PAGE_SIZE, BLOCK_N, HEAD_DIM, layout,
        )  # fmt: skip


@gluon.jit
def _ws_tma_partition(
    k_desc, v_desc, k_smem, v_smem, ready, empty,
    k_ptr, v_ptr, block_table_ptr, context_lens_ptr, query_start_loc_ptr,
    window, num_reqs,
    stride_k_blk, stride_k_slot, stride_k_head,
    stride_v_blk, stride_v_slot, stride_v_head, stride_bt,
    NUM_KV_HEADS: gl.constexpr, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr, HAS_WINDOW: gl.constexpr,
    NUM_BUF: gl.constexpr, stats_ptr=None,
):  # fmt: skip
    """The loading warpgroup with TMA (caches in q's dtype): the key tiles
    of an item start at a page boundary, and each is copied into ring
    buffer ``it % NUM_BUF`` by ``_stage_tile`` (TMA, or ``cp.async`` for
    the tiles with keys outside the window: an item's first, where ``lo``
    is not at a page boundary, and its last), its ``ready`` barrier
    completing when the tile has landed. The multiplying warps fence every
    tile after waiting (the ``cp.async`` copies are not in TMA's proxy).
    The page ids are read at each copy (loading them a tile ahead, as the
    fp8 loader does, was 0.7-0.9% slower at shapes 3 and 4 on the H200).
    ``stats_ptr``: see ``_store_stats`` (its waits for free buffers)."""
    kv_layout: gl.constexpr = _kv_layout(HEAD_DIM, False, 4)
    STATS: gl.constexpr = stats_ptr is not None
    started = _clock() if STATS else 0
    waited = _clock() * 0 if STATS else 0
    it = 0
    num_items = num_reqs * NUM_KV_HEADS
    for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
        kv_head, q_first, num_q, first, lo, hi, n_tiles, bt_row, k_head, v_head = (
            _item_kv(
                item, context_lens_ptr, query_start_loc_ptr, block_table_ptr,
                k_ptr, v_ptr, window, stride_bt, stride_k_head, stride_v_head,
                HAS_WINDOW, NUM_KV_HEADS, BLOCK_N, PAGE_SIZE,
            )
        )  # fmt: skip
        for _pass in range(0, num_q, BLOCK_Q):
            for t in range(0, n_tiles):
                buf = it % NUM_BUF
                # Free once the MMAs on its previous tile completed (in the
                # first round parity 1, which precedes a new barrier's phase).
                waited = _timed_wait(
                    empty.index(buf), ((it // NUM_BUF) & 1) ^ 1, waited, STATS
                )
                _stage_tile(
                    k_desc, v_desc, k_smem.index(buf), v_smem.index(buf),
                    ready.index(buf), bt_row, None, k_head, v_head, kv_head,
                    first + t * BLOCK_N, lo, hi, stride_k_blk, stride_k_slot,
                    stride_v_blk, stride_v_slot, PAGE_SIZE, BLOCK_N, HEAD_DIM,
                    kv_layout,
                )  # fmt: skip
                it += 1
    async_copy.wait_group(0)
    if STATS:
        _store_stats(stats_ptr, 2, waited * 0, waited, started, it)


@gluon.jit
def _stage_raw(
    k_desc, v_desc, k_dst, v_dst, bar, bt_row, page_ids, k_head, v_head,
    kv_head, start, lo, hi, stride_k_blk, stride_k_slot, stride_v_blk,
    stride_v_slot, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr, layout: gl.constexpr, FP8_SCORES: gl.constexpr,
    EDGE_TMA: gl.constexpr = False,
):  # fmt: skip
    """``_stage_tile`` of a staging slot: K and V, or (``FP8_SCORES``, K
    staged into the ring instead) V only."""
    if FP8_SCORES:
        _stage_tile(
            v_desc, None, v_dst, None, bar, bt_row, page_ids, v_head, None,
            kv_head, start, lo, hi, stride_v_blk, stride_v_slot, None, None,
            PAGE_SIZE, BLOCK_N, HEAD_DIM, layout, EDGE_TMA,
        )  # fmt: skip
    else:
        _stage_tile(
            k_desc, v_desc, k_dst, v_dst, bar, bt_row, page_ids, k_head,
            v_head, kv_head, start, lo, hi, stride_k_blk, stride_k_slot,
            stride_v_blk, stride_v_slot, PAGE_SIZE, BLOCK_N, HEAD_DIM, layout,
            EDGE_TMA,
        )  # fmt: skip


@gluon.constexpr_function
def v_page_piece_layout():
    """The shared layout of one TMA copy of a transposed V page (``[1, 16,
    1, 128]`` of the ``[blocks, page, heads, D]`` e4m3 view): its bytes as
    they are, no swizzle."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=4)


@gluon.constexpr_function
def _v_pages_layout(head_dim, block_n, page):
    """A ring buffer of transposed V pages as the ``[head_dim, block_n]``
    operand of 8-bit ``P V``: the tile's pages one after another, each
    ``[head_dim, page]`` with its keys contiguous (offset bits 0-3: the key
    position within the page, then the head dim, then the page)."""
    bases = [[0, 1 << i] for i in range(page.bit_length() - 1)]
    bases += [[1 << i, 0] for i in range(head_dim.bit_length() - 1)]
    bases += [[0, page << i] for i in range((block_n // page).bit_length() - 1)]
    return gl.SharedLinearLayout(bases)


@gluon.jit
def _v_page_keys(pos):
    """The key (within its page) that position ``pos`` of a transposed V
    page holds: the order of ``_fp8_key_order``."""
    return 8 * ((pos // 2) % 2) + 2 * (pos // 4) + pos % 2


@gluon.jit
def _tma_kv_pages(
    k_desc, v_desc, k_dst, v_dst, bar, bt_row, start, kv_head,
    PAGE_SIZE: gl.constexpr,
):  # fmt: skip
    """An interior key tile (all its keys in the window) from ``start`` by
    TMA: each page's K rows into ``k_dst`` (a 128-byte-swizzled ``[BLOCK_N,
    128]`` e4m3 tile) and its transposed V page into ``v_dst`` byte for
    byte (the layout ``_v_pages_layout`` reads), the two copies of a page
    issued together after one read of its block-table entry (1-2% faster at
    fp8 shapes 1 and 4 than K's and V's copies issued apart, which read each
    tile's pages twice); ``bar`` takes two arrivals, K's bytes and V's."""
    HEAD_DIM: gl.constexpr = v_dst.shape[0]
    BLOCK_N: gl.constexpr = v_dst.shape[1]
    PAGES: gl.constexpr = BLOCK_N // PAGE_SIZE
    mbarrier.expect(bar, BLOCK_N * HEAD_DIM)
    mbarrier.expect(bar, BLOCK_N * HEAD_DIM)
    k_pieces = _view_as(
        k_dst, k_dst.dtype, [PAGES, 1, PAGE_SIZE, 1, HEAD_DIM], tma_piece_layout(8)
    )
    v_pieces = _view_as(
        v_dst, v_dst.dtype, [PAGES, 1, PAGE_SIZE, 1, HEAD_DIM], v_page_piece_layout()
    )
    for p in gl.static_range(PAGES):
        page_id = gl.load(bt_row + start // PAGE_SIZE + p)
        _tma_load(k_desc, [page_id, 0, kv_head, 0], bar, k_pieces.index(p))
        _tma_load(v_desc, [page_id, 0, kv_head, 0], bar, v_pieces.index(p))


@gluon.jit
def _stage_v_edge_pages(
    v_head, dst, bar, bt_row, start, lo, hi, stride_v_blk, stride_v_slot,
    PAGE_SIZE: gl.constexpr,
):  # fmt: skip
    """The transposed V pages of a key tile with keys outside ``lo .. hi -
    1`` (an edge tile; ``_tma_kv_pages`` copies the others) from ``start``
    into ring buffer ``dst`` (``[BLOCK_N // 16]`` pages of 16 rows of 128
    bytes) through the loader's registers, a page at a time, the bytes of
    keys outside the window zeroed (a page's 16 keys share every 16-byte
    piece, so no copy can leave some out; those slots may hold NaN, which a
    weight of 0 would not cancel); then fenced, and one arrival on
    ``bar``."""
    HEAD_DIM: gl.constexpr = dst.shape[0]
    BLOCK_N: gl.constexpr = dst.shape[1]
    PAGES: gl.constexpr = BLOCK_N // PAGE_SIZE
    # 16 bytes per thread (the whole tile would spill).
    layout: gl.constexpr = _kv_layout(HEAD_DIM, True, gl.num_warps())
    flat: gl.constexpr = gl.NVMMASharedLayout(
        swizzle_byte_width=0, element_bitwidth=8, rank=2
    )
    pages = _view_as(dst, dst.dtype, [PAGES, PAGE_SIZE, HEAD_DIM], flat)
    rows = gl.arange(0, PAGE_SIZE, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    page_keys = gl.expand_dims(_v_page_keys(cols % PAGE_SIZE), 0)
    for p in gl.static_range(PAGES):
        page_start = start + p * PAGE_SIZE
        page = gl.load(bt_row + page_start // PAGE_SIZE, mask=page_start < hi, other=0)
        keys = page_start + page_keys
        v = gl.load(
            v_head + page.to(gl.int64) * stride_v_blk
            + gl.expand_dims(rows * stride_v_slot, 1) + gl.expand_dims(cols, 0),
            mask=(keys >= lo) & (keys < hi),
            other=0.0,
        )  # fmt: skip
        pages.index(p).store(v)
    fence_async_shared()
    gl.barrier()
    mbarrier.arrive(bar, count=1)


@gluon.jit
def _ws_tma_fp8_partition(
    k_desc, v_desc, k_raw, v_raw, raw_ready, k_smem, v_smem, ready, empty,
    k_ptr, v_ptr, block_table_ptr, context_lens_ptr, query_start_loc_ptr,
    window, num_reqs,
    stride_k_blk, stride_k_slot, stride_k_head,
    stride_v_blk, stride_v_slot, stride_v_head, stride_bt,
    NUM_KV_HEADS: gl.constexpr, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr, HAS_WINDOW: gl.constexpr,
    NUM_BUF: gl.constexpr, NUM_RAW: gl.constexpr, NARROW: gl.constexpr,
    stats_ptr=None, FP8_SCORES: gl.constexpr = False, FP8_PV: gl.constexpr = False,
    EDGE_TMA: gl.constexpr = False,
):  # fmt: skip
    """The loading warpgroup with TMA and an fp8 cache: the raw e4m3 tiles
    of an item (from a page boundary) staged ``NUM_RAW`` ahead into the
    128-byte-swizzled slots ``k_raw``/``v_raw`` by ``_stage_tile``, slot
    barrier ``raw_ready`` completing as each lands; then, as without TMA,
    read back (``NARROW``: 8 values per thread), converted and stored into
    ring buffer ``it % NUM_BUF`` once it is free, fenced and signalled.
    ``r``, the raw tiles staged so far, gives each slot's phase.
    ``FP8_SCORES``: only V goes through the slots; once a ring buffer is
    free, the tile's K is staged by TMA straight into it (e4m3, for the fp8
    MMAs), its landing one of the buffer's two arrivals, the loader's after
    converting V the other. ``FP8_PV`` (with ``FP8_SCORES``): V's
    transposed pages copied into the ring instead, their landing the second
    arrival, nothing staged: an interior tile's K and V
    by TMA page by page together (``_tma_kv_pages``), an edge tile's K as
    above and its V through the loader's registers
    (``_stage_v_edge_pages``, its arrival the second).
    ``EDGE_TMA`` (not ``FP8_PV``): the edge tiles by TMA too, V's keys
    outside the window zeroed as converted (``_stage_tile``).
    ``stats_ptr``: see ``_store_stats`` (its waits for landed tiles, then
    for free ring buffers)."""
    kv_layout: gl.constexpr = _kv_layout(HEAD_DIM, True, 4)
    cvt_layout: gl.constexpr = _convert_layout(HEAD_DIM, NARROW, 4)
    STATS: gl.constexpr = stats_ptr is not None
    started = _clock() if STATS else 0
    landed = _clock() * 0 if STATS else 0
    freed = _clock() * 0 if STATS else 0
    it = 0
    r = 0
    num_items = num_reqs * NUM_KV_HEADS
    for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
        kv_head, q_first, num_q, first, lo, hi, n_tiles, bt_row, k_head, v_head = (
            _item_kv(
                item, context_lens_ptr, query_start_loc_ptr, block_table_ptr,
                k_ptr, v_ptr, window, stride_bt, stride_k_head, stride_v_head,
                HAS_WINDOW, NUM_KV_HEADS, BLOCK_N, PAGE_SIZE,
            )
        )  # fmt: skip
        for _pass in range(0, num_q, BLOCK_Q):
            for i in range(0, gl.minimum(NUM_RAW, n_tiles)):
                slot = (r + i) % NUM_RAW
                start = first + i * BLOCK_N
                if not FP8_PV:
                    _stage_raw(
                        k_desc, v_desc, k_raw.index(slot), v_raw.index(slot),
                        raw_ready.index(slot), bt_row,
                        _tile_page_ids(bt_row, start, hi, PAGE_SIZE, BLOCK_N),
                        k_head, v_head, kv_head, start, lo, hi, stride_k_blk,
                        stride_k_slot, stride_v_blk, stride_v_slot, PAGE_SIZE,
                        BLOCK_N, HEAD_DIM, kv_layout, FP8_SCORES, EDGE_TMA,
                    )  # fmt: skip
            page_ids = _tile_page_ids(
                bt_row, first + NUM_RAW * BLOCK_N, hi, PAGE_SIZE, BLOCK_N
            )
            for t in range(0, n_tiles):
                slot = (r + t) % NUM_RAW
                buf = it % NUM_BUF
                if FP8_SCORES:
                    # K into the ring as soon as its buffer is free, its pages
                    # read at each copy (loaded an iteration ahead, before or
                    # after the fence below: 2-3.5% slower at shapes 1-3 on
                    # the H200).
                    freed = _timed_wait(
                        empty.index(buf), ((it // NUM_BUF) & 1) ^ 1, freed, STATS
                    )
                    start = first + t * BLOCK_N
                    if FP8_PV and (start >= lo) & (start + BLOCK_N <= hi):
                        # An interior tile: K's and V's copies of a page
                        # issued together, one read of its block-table entry.
                        _tma_kv_pages(
                            k_desc, v_desc, k_smem.index(buf), v_smem.index(buf),
                            ready.index(buf), bt_row, start, kv_head, PAGE_SIZE,
                        )  # fmt: skip
                    else:
                        _stage_tile(
                            k_desc, None, k_smem.index(buf), None,
                            ready.index(buf), bt_row, None, k_head, None,
                            kv_head, start, lo, hi, stride_k_blk,
                            stride_k_slot, None, None, PAGE_SIZE, BLOCK_N,
                            HEAD_DIM, kv_layout, EDGE_TMA,
                        )  # fmt: skip
                        if FP8_PV:
                            _stage_v_edge_pages(
                                v_head, v_smem.index(buf), ready.index(buf),
                                bt_row, start, lo, hi, stride_v_blk,
                                stride_v_slot, PAGE_SIZE,
                            )  # fmt: skip
                    # V staged in a slot (not FP8_PV, whose V went above):
                    # converted into the ring.
                    if not FP8_PV:
                        landed = _timed_wait(
                            raw_ready.index(slot), ((r + t) // NUM_RAW) & 1,
                            landed, STATS,
                        )  # fmt: skip
                        _convert_v(
                            v_raw.index(slot), v_smem.index(buf), cvt_layout,
                            first + t * BLOCK_N, lo, hi, EDGE_TMA,
                        )  # fmt: skip
                else:
                    landed = _timed_wait(
                        raw_ready.index(slot), ((r + t) // NUM_RAW) & 1, landed,
                        STATS,
                    )  # fmt: skip
                    # Ring buffer free once the MMAs on its previous tile
                    # have completed (in the first round parity 1, which
                    # precedes a new barrier's phase).
                    freed = _timed_wait(
                        empty.index(buf), ((it // NUM_BUF) & 1) ^ 1, freed, STATS
                    )
                    _convert_tiles(
                        k_raw.index(slot), v_raw.index(slot), k_smem.index(buf),
                        v_smem.index(buf), cvt_layout, True,
                        first + t * BLOCK_N, lo, hi, EDGE_TMA,
                    )  # fmt: skip
                # Every loading thread's stores visible to the MMAs' proxy and
                # its reads of the slot done before TMA writes it again
                # (FP8_PV: in _stage_v_edge_pages, where it stores).
                if not FP8_PV:
                    fence_async_shared()
                    gl.barrier()
                    mbarrier.arrive(ready.index(buf), count=1)
                    if t + NUM_RAW < n_tiles:
                        _stage_raw(
                            k_desc, v_desc, k_raw.index(slot), v_raw.index(slot),
                            raw_ready.index(slot), bt_row, page_ids, k_head,
                            v_head, kv_head, first + (t + NUM_RAW) * BLOCK_N, lo,
                            hi, stride_k_blk, stride_k_slot, stride_v_blk,
                            stride_v_slot, PAGE_SIZE, BLOCK_N, HEAD_DIM,
                            kv_layout, FP8_SCORES, EDGE_TMA,
                        )  # fmt: skip
                page_ids = _tile_page_ids(
                    bt_row, first + (t + NUM_RAW + 1) * BLOCK_N, hi, PAGE_SIZE,
                    BLOCK_N,
                )  # fmt: skip
                it += 1
            r += n_tiles
    async_copy.wait_group(0)
    if STATS:
        _store_stats(stats_ptr, 2, landed, freed, started, it)


@gluon.jit
def _ws_fp8_issue_partition(
    k_desc, v_desc, v_raw, raw_ready, raw_free, k_smem, ready, empty,
    k_ptr, v_ptr, block_table_ptr, context_lens_ptr, query_start_loc_ptr,
    window, num_reqs,
    stride_k_blk, stride_k_slot, stride_k_head,
    stride_v_blk, stride_v_slot, stride_v_head, stride_bt,
    NUM_KV_HEADS: gl.constexpr, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr, HAS_WINDOW: gl.constexpr,
    NUM_BUF: gl.constexpr, NUM_RAW: gl.constexpr, EDGE_TMA: gl.constexpr = False,
):  # fmt: skip
    """``ISSUE_WARP`` (fp8 scores): one warp that only issues the copies.
    Per key tile t of a pass, in order: the e4m3 V tile ``NUM_RAW - 1``
    tiles ahead into its staging slot once the converting warps have
    released the slot (``raw_free``; they released it after converting
    the tile before), then tile t's K straight into ring buffer
    ``t % NUM_BUF`` once the MMAs have released it (its landing one of the
    buffer's two arrivals). Both tiles' page ids are read a tile ahead, so
    that their latency stays off this warp's path; the copies themselves
    are ``_stage_tile``'s (TMA, or ``cp.async`` for the edge tiles). The
    block-table reads, the waits and the TMA issue that the converting
    warps would otherwise do between their conversions run here, beside
    them."""
    kv_layout: gl.constexpr = _kv_layout(HEAD_DIM, True, 1)
    LEAD: gl.constexpr = NUM_RAW - 1
    it = 0  # K tiles issued (ring position)
    r = 0  # V tiles issued (staging position)
    num_items = num_reqs * NUM_KV_HEADS
    for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
        kv_head, q_first, num_q, first, lo, hi, n_tiles, bt_row, k_head, v_head = (
            _item_kv(
                item, context_lens_ptr, query_start_loc_ptr, block_table_ptr,
                k_ptr, v_ptr, window, stride_bt, stride_k_head, stride_v_head,
                HAS_WINDOW, NUM_KV_HEADS, BLOCK_N, PAGE_SIZE,
            )
        )  # fmt: skip
        for _pass in range(0, num_q, BLOCK_Q):
            for i in range(0, gl.minimum(LEAD, n_tiles)):
                slot = r % NUM_RAW
                mbarrier.wait(raw_free.index(slot), ((r // NUM_RAW) & 1) ^ 1)
                _stage_tile(
                    v_desc, None, v_raw.index(slot), None, raw_ready.index(slot),
                    bt_row, None, v_head, None, kv_head, first + i * BLOCK_N,
                    lo, hi, stride_v_blk, stride_v_slot, None, None,
                    PAGE_SIZE, BLOCK_N, HEAD_DIM, kv_layout, EDGE_TMA,
                )  # fmt: skip
                r += 1
            k_pages = _tile_page_ids(bt_row, first, hi, PAGE_SIZE, BLOCK_N)
            v_pages = _tile_page_ids(
                bt_row, first + LEAD * BLOCK_N, hi, PAGE_SIZE, BLOCK_N
            )
            for t in range(0, n_tiles):
                if t + LEAD < n_tiles:
                    slot = r % NUM_RAW
                    mbarrier.wait(raw_free.index(slot), ((r // NUM_RAW) & 1) ^ 1)
                    _stage_tile(
                        v_desc, None, v_raw.index(slot), None,
                        raw_ready.index(slot), bt_row, v_pages, v_head, None,
                        kv_head, first + (t + LEAD) * BLOCK_N, lo, hi,
                        stride_v_blk, stride_v_slot, None, None, PAGE_SIZE,
                        BLOCK_N, HEAD_DIM, kv_layout, EDGE_TMA,
                    )  # fmt: skip
                    r += 1
                buf = it % NUM_BUF
                # Free once the MMAs on its previous tile completed (in the
                # first round parity 1, which precedes a new barrier's phase).
                mbarrier.wait(empty.index(buf), ((it // NUM_BUF) & 1) ^ 1)
                _stage_tile(
                    k_desc, None, k_smem.index(buf), None, ready.index(buf),
                    bt_row, k_pages, k_head, None, kv_head, first + t * BLOCK_N,
                    lo, hi, stride_k_blk, stride_k_slot, None, None, PAGE_SIZE,
                    BLOCK_N, HEAD_DIM, kv_layout, EDGE_TMA,
                )  # fmt: skip
                k_pages = _tile_page_ids(
                    bt_row, first + (t + 1) * BLOCK_N, hi, PAGE_SIZE, BLOCK_N
                )
                v_pages = _tile_page_ids(
                    bt_row, first + (t + LEAD + 1) * BLOCK_N, hi, PAGE_SIZE,
                    BLOCK_N,
                )  # fmt: skip
                it += 1
    async_copy.wait_group(0)


@gluon.jit
def _ws_fp8_convert_partition(
    v_raw, raw_ready, raw_free, v_smem, ready, empty, context_lens_ptr,
    query_start_loc_ptr, window, num_reqs, NUM_KV_HEADS: gl.constexpr,
    BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
    PAGE_SIZE: gl.constexpr, HAS_WINDOW: gl.constexpr, NUM_BUF: gl.constexpr,
    NUM_RAW: gl.constexpr, NARROW: gl.constexpr, stats_ptr=None,
    EDGE_TMA: gl.constexpr = False, TAIL_N: gl.constexpr = 0,
):  # fmt: skip
    """``ISSUE_WARP`` (fp8 scores): the converting warps (two) beside
    ``_ws_fp8_issue_partition``. Per key tile, once its e4m3 V tile has
    landed in staging slot ``it % NUM_RAW`` and ring buffer
    ``it % NUM_BUF`` is free: V read back, converted to float16 and
    stored into the ring, fenced for the MMAs' proxy, then one arrival on
    the buffer's ``ready`` (its other: K's landing) and one on the slot's
    ``raw_free``. ``EDGE_TMA``: V's keys outside the window zeroed
    (``_window_rows``). ``TAIL_N`` (not 0): of a tile whose keys all lie
    among its first ``TAIL_N`` (``_key_tile``), those rows alone.
    ``stats_ptr``: see ``_store_stats`` (row 2: its
    waits for landed tiles, then for free ring buffers)."""
    cvt_layout: gl.constexpr = _convert_layout(HEAD_DIM, NARROW, gl.num_warps())
    STATS: gl.constexpr = stats_ptr is not None
    started = _clock() if STATS else 0
    landed = _clock() * 0 if STATS else 0
    freed = _clock() * 0 if STATS else 0
    it = 0
    num_items = num_reqs * NUM_KV_HEADS
    for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
        _, _, _, num_q, first, lo, hi, n_tiles = _item_range(
            item, context_lens_ptr, query_start_loc_ptr, window, HAS_WINDOW,
            NUM_KV_HEADS, BLOCK_N, PAGE_SIZE,
        )  # fmt: skip
        for _pass in range(0, num_q, BLOCK_Q):
            for t in range(0, n_tiles):
                slot = it % NUM_RAW
                buf = it % NUM_BUF
                landed = _timed_wait(
                    raw_ready.index(slot), (it // NUM_RAW) & 1, landed, STATS
                )
                freed = _timed_wait(
                    empty.index(buf), ((it // NUM_BUF) & 1) ^ 1, freed, STATS
                )
                start = first + t * BLOCK_N
                if TAIL_N > 0:
                    if hi - start <= TAIL_N:
                        _convert_v(
                            v_raw.index(slot).slice(0, TAIL_N),
                            v_smem.index(buf).slice(0, TAIL_N), cvt_layout, start,
                            lo, hi, EDGE_TMA,
                        )  # fmt: skip
                    else:
                        _convert_v(
                            v_raw.index(slot), v_smem.index(buf), cvt_layout, start,
                            lo, hi, EDGE_TMA,
                        )  # fmt: skip
                else:
                    _convert_v(
                        v_raw.index(slot), v_smem.index(buf), cvt_layout, start, lo,
                        hi, EDGE_TMA,
                    )  # fmt: skip
                # Every converting thread's stores visible to the MMAs'
                # proxy and its reads of the slot done before TMA writes
                # it again.
                fence_async_shared()
                gl.barrier()
                mbarrier.arrive(ready.index(buf), count=1)
                mbarrier.arrive(raw_free.index(slot), count=1)
                it += 1
    if STATS:
        _store_stats(stats_ptr, 2, landed, freed, started, it)


@gluon.jit
def _clock():
    """The SM's cycle counter (``%clock64``; for the wait statistics)."""
    return gl.inline_asm_elementwise(
        "mov.u64 $0, %clock64;", "=l", [], dtype=gl.int64, is_pure=False, pack=1
    )


@gluon.jit
def _timed_wait(bar, phase, waited, STATS: gl.constexpr):
    """``mbarrier.wait``; returns ``waited`` plus, with ``STATS``, the cycles
    the wait took."""
    if STATS:
        t0 = _clock()
        mbarrier.wait(bar, phase)
        waited += _clock() - t0
    else:
        mbarrier.wait(bar, phase)
    return waited


@gluon.jit
def _store_stats(stats_ptr, part: gl.constexpr, wait_a, wait_b, started, tiles):
    """One partition's wait statistics (``wait_stats`` of the launch):
    cycles waited at its two kinds of barrier (the multiplying partitions:
    at the ring, then between key loops), cycles from its start to here,
    tiles handled; row ``part`` (0-1 multiplying, 2 loading) of the
    program's block of 3 rows of 4."""
    row = stats_ptr + (gl.program_id(0) * 3 + part) * 4
    gl.store(row, wait_a)
    gl.store(row + 1, wait_b)
    gl.store(row + 2, _clock() - started)
    gl.store(row + 3, tiles.to(gl.int64))


@gluon.jit
def _wait_tile(
    ready, it, NUM_BUF: gl.constexpr, FENCE: gl.constexpr, waited=0,
    STATS: gl.constexpr = False, copied=True,
):  # fmt: skip
    """Wait until ring buffer ``it % NUM_BUF`` holds tile ``it``; ``FENCE``
    where the loader signalled with its copies' own arrivals and did not
    fence them for the MMAs (``FENCE_IN_MMA``), and then only if
    ``copied`` (the tile came by ``cp.async``). Returns ``waited`` plus the
    cycles waited (``STATS``)."""
    waited = _timed_wait(ready.index(it % NUM_BUF), (it // NUM_BUF) & 1, waited, STATS)
    if FENCE:  # noqa: SIM102 (constexpr, then a runtime condition)
        if copied:
            fence_async_shared()
    return waited


@gluon.jit
def _tile_copied(start, lo, hi, BLOCK_N: gl.constexpr, EDGE_FENCE: gl.constexpr):
    """Whether the key tile from ``start`` may have come by ``cp.async``
    (``EDGE_FENCE``: only an edge tile, as ``_stage_tile`` decides; else
    every tile counts)."""
    if EDGE_FENCE:
        return _edge_tile(start, lo, hi, BLOCK_N)
    else:
        return True


@gluon.jit
def _ws_mma_partition(
    q_smem, k_smem, v_smem, ready, empty,
    q_ptr, out_ptr, context_lens_ptr, query_start_loc_ptr, k_scale_ptr,
    v_scale_ptr, qk_scale, window, num_reqs,
    stride_q_t, stride_q_h, stride_o_t, stride_o_h,
    NUM_KV_HEADS: gl.constexpr, GROUP: gl.constexpr, BLOCK_Q: gl.constexpr,
    BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, HAS_WINDOW: gl.constexpr,
    KV_FP8: gl.constexpr, F16_DOTS: gl.constexpr, NUM_BUF: gl.constexpr,
    MMA_WARPS: gl.constexpr, FENCE_IN_MMA: gl.constexpr, PASS_Q: gl.constexpr,
    Q_OFFSET: gl.constexpr, ME: gl.constexpr, ALIGN: gl.constexpr,
    stats_ptr=None, FP8_SCORES: gl.constexpr = False,
    FP8_PV: gl.constexpr = False, EDGE_FENCE: gl.constexpr = False,
    HALF_ROWS: gl.constexpr = False, TAIL_N: gl.constexpr = 0,
    PACKED_SOFTMAX: gl.constexpr = False,
):  # fmt: skip
    """The multiplying warpgroup(s) (``MMA_WARPS`` warps, 16 tile rows
    each): q into shared memory, then per key tile the MMAs and the softmax,
    releasing each ring buffer once its MMAs have completed; the normalized
    output at the end of each pass. A pass covers ``PASS_Q`` queries of the
    request, of which these warps take ``BLOCK_Q`` from ``Q_OFFSET`` on (all
    of them, or one half where two partitions share the key tiles; ``ME``:
    which partition, for the statistics). The key tiles start at a multiple
    of ``ALIGN`` (a page where TMA copies them). ``stats_ptr`` (not
    ``None``): the cycles its waits for tiles took and the cycles it spent
    between key loops (storing a pass's output, reading the next item's
    data, loading its q: an item's start as these warps see it;
    ``_store_stats``). ``FP8_SCORES``: q rounded to e4m3 row by row
    (``_load_q``) and ``S = Q K^T`` on fp8 tensor cores with the e4m3 K
    tiles as staged. ``FP8_PV`` (with ``FP8_SCORES``): ``O += P V`` on fp8
    tensor cores too, the weights times 2^8 rounded to e4m3
    (``_softmax_weights``) and the ring's V tiles V's transposed e4m3 pages
    as copied (``_v_pages_layout``: the keys, the MMA's depth, contiguous,
    as 8-bit MMAs need). ``EDGE_FENCE`` (TMA): only the tiles that the
    loader copied by ``cp.async`` (``_stage_tile``: those with keys outside
    the window) are fenced; the others landed through TMA, in the MMAs' own
    proxy. ``HALF_ROWS``: a tile of twice the rows of ``BLOCK_Q`` queries,
    which fill the first half of ``_row_halves`` (the rows
    ``16 w + 0 .. 7``); the softmax runs on that half alone (half the
    exponentials). ``TAIL_N`` (not ``FP8_PV``): an item's last tile
    multiplied as a ``TAIL_N``-key tile where its keys fit (``_key_tile``).
    ``PACKED_SOFTMAX`` (``FP8_SCORES``, not ``FP8_PV``): q scaled into
    [0.5, 1) (``_load_q``), S accumulated in float16 and the softmax on
    float16 pairs (``_packed_weights``)."""
    BLOCK_M: gl.constexpr = BLOCK_Q * GROUP * (2 if HALF_ROWS else 1)
    STATS: gl.constexpr = stats_ptr is not None
    started = _clock() if STATS else 0
    waited = _clock() * 0 if STATS else 0
    # Cycles between key loops: a pass's output stored, the next item's
    # request data read, its q loaded; ``mark``: where the last key loop
    # ended (the start, before the first).
    between = waited
    mark = started
    q_factor, score_scale = _scales(qk_scale, k_scale_ptr, KV_FP8, F16_DOTS)
    it = 0
    num_items = num_reqs * NUM_KV_HEADS
    for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
        _, kv_head, q_first, num_q, first, lo, hi, n_tiles = _item_range(
            item, context_lens_ptr, query_start_loc_ptr, window, HAS_WINDOW,
            NUM_KV_HEADS, BLOCK_N, ALIGN,
        )  # fmt: skip
        for pass_base in range(0, num_q, PASS_Q):
            q_base = pass_base + Q_OFFSET
            descale = _load_q(
                q_smem, q_ptr, q_first, q_base, num_q, kv_head, stride_q_t,
                stride_q_h, q_factor, GROUP, F16_DOTS, MMA_WARPS, FP8_SCORES,
                HALF_ROWS, PACKED_SOFTMAX,
            )  # fmt: skip
            m_i, l_i, acc = _softmax_init(
                BLOCK_M, BLOCK_N, HEAD_DIM, MMA_WARPS, 32 if FP8_PV else 16,
                HALF_ROWS,
            )  # fmt: skip
            row_scale = _row_scales(
                descale, score_scale, BLOCK_N, MMA_WARPS, FP8_SCORES, HALF_ROWS
            )
            if STATS:
                between += _clock() - mark
            for t in range(0, n_tiles):
                buf = it % NUM_BUF
                start = first + t * BLOCK_N
                waited = _wait_tile(
                    ready, it, NUM_BUF, FENCE_IN_MMA, waited, STATS,
                    _tile_copied(start, lo, hi, BLOCK_N, EDGE_FENCE),
                )  # fmt: skip
                v_buf = v_smem.index(buf)
                if FP8_PV:
                    v_buf = _view_as(
                        v_buf, v_buf.dtype, [HEAD_DIM, BLOCK_N],
                        _v_pages_layout(HEAD_DIM, BLOCK_N, 16),
                    ).permute((1, 0))  # fmt: skip
                m_i, l_i, acc = _key_tile(
                    q_smem, k_smem.index(buf), v_buf, m_i, l_i, acc, start, lo,
                    hi, row_scale, MMA_WARPS, 0 if FP8_PV else TAIL_N,
                    HALF_ROWS, PACKED_SOFTMAX,
                )  # fmt: skip
                mbarrier.arrive(empty.index(buf), count=1)
                it += 1
            if STATS:
                mark = _clock()
            _store_output(
                out_ptr, acc, l_i, v_scale_ptr, q_first, q_base, num_q, kv_head,
                stride_o_t, stride_o_h, GROUP, KV_FP8,
            )  # fmt: skip
    if STATS:
        _store_stats(stats_ptr, ME, waited, between, started, it)


@gluon.jit
def fixed_history_ws_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, block_table_ptr, context_lens_ptr,
    query_start_loc_ptr, k_scale_ptr, v_scale_ptr, qk_scale, window, num_reqs,
    stride_q_t, stride_q_h, stride_k_blk, stride_k_slot, stride_k_head,
    stride_v_blk, stride_v_slot, stride_v_head, stride_o_t, stride_o_h,
    stride_bt, k_desc, v_desc, stats_ptr,
    NUM_KV_HEADS: gl.constexpr, GROUP: gl.constexpr, BLOCK_Q: gl.constexpr,
    BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr,
    HAS_WINDOW: gl.constexpr, KV_FP8: gl.constexpr, F16_DOTS: gl.constexpr,
    NUM_BUF: gl.constexpr, NUM_RAW: gl.constexpr, WORKER_REGS: gl.constexpr,
    COPIES_AHEAD: gl.constexpr, FENCE_IN_MMA: gl.constexpr,
    SPLIT_MMA: gl.constexpr, MMA_REGS: gl.constexpr,
    NARROW_CONVERT: gl.constexpr, TMA: gl.constexpr, FP8_SCORES: gl.constexpr,
    FP8_PV: gl.constexpr, ISSUE_WARP: gl.constexpr,
    EDGE_FENCE: gl.constexpr, HALF_ROWS: gl.constexpr, EDGE_TMA: gl.constexpr,
    TAIL_N: gl.constexpr, PACKED_SOFTMAX: gl.constexpr, LOADER_FIRST: gl.constexpr,
    num_warps: gl.constexpr,
):  # fmt: skip
    """Fixed-history attention over the (request, KV head) items of a
    persistent grid, with the loading (and for fp8 caches converting) in a
    separate warpgroup (``gl.warp_specialize``) that stages ``NUM_RAW`` key
    tiles ahead and fills up to ``NUM_BUF`` ring buffers ahead of the
    multiplying warps (``num_warps``: 4 for 64-row tiles, 8 for 128, or 4
    per partition with ``SPLIT_MMA``). Caches in q's dtype are copied
    straight into the ring (``TMA``: by the tensor memory accelerator
    through ``k_desc`` and ``v_desc``, descriptors of the caches; else
    ``None``). ``stats_ptr``: ``None``, or where the partitions record how
    long they waited at their barriers (``_store_stats``; the multiplying
    partitions and the TMA loaders). ``FP8_SCORES`` (TMA, an fp8 cache,
    ``F16_DOTS``): the K tiles staged by TMA straight into the ring as e4m3
    and ``S = Q K^T`` on fp8 tensor cores with q rounded to e4m3 row by
    row; only V is converted (``_ws_tma_fp8_partition``). ``FP8_PV`` (with
    ``FP8_SCORES``): ``P V`` on fp8 tensor cores as well, over a cache
    whose V pages are held transposed, copied by the loader straight into
    the ring (``_tma_kv_pages``; no staging slots for V). ``HALF_ROWS``
    (one multiplying partition): tiles of twice ``BLOCK_Q * GROUP`` rows,
    the queries in every other 8 of them (``_ws_mma_partition``).
    ``PACKED_SOFTMAX`` (``FP8_SCORES``, not ``FP8_PV``): S accumulated in
    float16 and the softmax on float16 pairs (``_packed_weights``).
    ``LOADER_FIRST`` (``SPLIT_MMA``): the loading warpgroup is the default
    partition (warps 0-3) and both multiplying ones are workers of
    ``MMA_REGS`` registers."""
    BLOCK_M: gl.constexpr = BLOCK_Q * GROUP * (2 if HALF_ROWS else 1)
    dtype: gl.constexpr = _mma_dtype(q_ptr.dtype.element_ty, F16_DOTS)
    kv_dtype: gl.constexpr = k_ptr.dtype.element_ty
    # The operands' dtype of S = Q K^T.
    qk_dtype: gl.constexpr = kv_dtype if FP8_SCORES else dtype
    tile_smem: gl.constexpr = _tile_smem([BLOCK_N, HEAD_DIM], dtype)
    # SPLIT_MMA: two multiplying partitions of one warpgroup each, a half of
    # the tile's rows (and of q's shared memory) each, both reading every
    # ring buffer; else one of num_warps warps.
    PARTS: gl.constexpr = 2 if SPLIT_MMA else 1
    PART_Q: gl.constexpr = BLOCK_Q // PARTS
    PART_M: gl.constexpr = BLOCK_M // PARTS
    q_smem_layout: gl.constexpr = _tile_smem([PART_M, HEAD_DIM], qk_dtype)
    q_smem = gl.allocate_shared_memory(
        qk_dtype, [PARTS, PART_M, HEAD_DIM], q_smem_layout
    )
    k_smem = gl.allocate_shared_memory(
        qk_dtype,
        [NUM_BUF, BLOCK_N, HEAD_DIM],
        _tile_smem([BLOCK_N, HEAD_DIM], qk_dtype),
    )
    if FP8_PV:
        # The keys contiguous: the depth of P V (8-bit MMAs read their B
        # operand along its depth only).
        v_smem = gl.allocate_shared_memory(
            kv_dtype,
            [NUM_BUF, HEAD_DIM, BLOCK_N],
            _tile_smem([HEAD_DIM, BLOCK_N], kv_dtype),
        )
    else:
        v_smem = gl.allocate_shared_memory(
            dtype, [NUM_BUF, BLOCK_N, HEAD_DIM], tile_smem
        )
    ready = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    # FENCE_IN_MMA with a cache in q's dtype: every thread of the loading
    # warpgroup arrives on ready, through its copies. Each multiplying
    # partition releases a buffer.
    # TMA: one arrival (with the tile's bytes, or the loader's after its
    # counted cp.async copies), the multiplying warps fencing every tile
    # (EDGE_FENCE: those copied by cp.async).
    # FP8_SCORES: that arrival for K, and the loader's once V is converted.
    ARRIVALS: gl.constexpr = (
        2 if FP8_SCORES else 128 if FENCE_IN_MMA and not KV_FP8 and not TMA else 1
    )
    MMA_FENCE: gl.constexpr = FENCE_IN_MMA or (TMA and (FP8_SCORES or not KV_FP8))
    ALIGN: gl.constexpr = PAGE_SIZE if TMA else 1
    for i in gl.static_range(NUM_BUF):
        mbarrier.init(ready.index(i), count=ARRIVALS)
        mbarrier.init(empty.index(i), count=PARTS)
    raw_ready = ready  # unused but with TMA and an fp8 cache
    if KV_FP8:
        # The tiles as loaded, before conversion (TMA: 128-byte-swizzled, as
        # its copies place them; each slot with a barrier for their bytes).
        if TMA:
            raw_smem: gl.constexpr = gl.NVMMASharedLayout(
                swizzle_byte_width=128, element_bitwidth=8, rank=2
            )
        else:
            raw_smem: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])
        if FP8_SCORES:
            k_raw = k_smem  # unused: K staged straight into the ring
        else:
            k_raw = gl.allocate_shared_memory(
                kv_dtype, [NUM_RAW, BLOCK_N, HEAD_DIM], raw_smem
            )
        if FP8_PV:
            v_raw = v_smem  # unused: V's pages copied straight into the ring
        else:
            v_raw = gl.allocate_shared_memory(
                kv_dtype, [NUM_RAW, BLOCK_N, HEAD_DIM], raw_smem
            )
        if TMA:
            raw_ready = gl.allocate_shared_memory(
                gl.int64, [NUM_RAW, 1], mbarrier.MBarrierLayout()
            )
            for i in gl.static_range(NUM_RAW):
                mbarrier.init(raw_ready.index(i), count=1)
        if ISSUE_WARP:
            # Each slot released by the converting warps once read.
            raw_free = gl.allocate_shared_memory(
                gl.int64, [NUM_RAW, 1], mbarrier.MBarrierLayout()
            )
            for i in gl.static_range(NUM_RAW):
                mbarrier.init(raw_free.index(i), count=1)
    else:
        k_raw = k_smem  # unused: copied straight into the ring
        v_raw = v_smem
    if SPLIT_MMA:
        if LOADER_FIRST:
            # The loader in warps 0-3 (the default partition, with the
            # registers that the two multiplying workers leave; see
            # ``loader_first`` of the launch). Both orders are written out:
            # Gluon takes the partitions as a literal list, and arguments
            # kept in a tuple variable would lose their constexpr values.
            gl.warp_specialize(
                [
                    (
                        _ws_load_partition,
                        (
                            k_raw, v_raw, raw_ready, k_smem, v_smem, ready, empty,
                            k_ptr, v_ptr, block_table_ptr, context_lens_ptr,
                            query_start_loc_ptr, window, num_reqs, stride_k_blk,
                            stride_k_slot, stride_k_head, stride_v_blk,
                            stride_v_slot, stride_v_head, stride_bt, k_desc, v_desc,
                            NUM_KV_HEADS, BLOCK_Q, BLOCK_N, HEAD_DIM, PAGE_SIZE,
                            HAS_WINDOW, KV_FP8, NUM_BUF, NUM_RAW, COPIES_AHEAD,
                            FENCE_IN_MMA, NARROW_CONVERT, TMA, stats_ptr,
                            FP8_SCORES, FP8_PV, EDGE_TMA,
                        ),
                    ),
                    (
                        _ws_mma_partition,
                        (
                            q_smem.index(0), k_smem, v_smem, ready, empty,
                            q_ptr, out_ptr, context_lens_ptr, query_start_loc_ptr,
                            k_scale_ptr, v_scale_ptr, qk_scale, window, num_reqs,
                            stride_q_t, stride_q_h, stride_o_t, stride_o_h,
                            NUM_KV_HEADS, GROUP, PART_Q, BLOCK_N, HEAD_DIM,
                            HAS_WINDOW, KV_FP8, F16_DOTS, NUM_BUF, 4, MMA_FENCE,
                            BLOCK_Q, 0, 0, ALIGN, stats_ptr, FP8_SCORES, FP8_PV,
                            EDGE_FENCE, False, TAIL_N, PACKED_SOFTMAX,
                        ),
                    ),
                    (
                        _ws_mma_partition,
                        (
                            q_smem.index(1), k_smem, v_smem, ready, empty,
                            q_ptr, out_ptr, context_lens_ptr, query_start_loc_ptr,
                            k_scale_ptr, v_scale_ptr, qk_scale, window, num_reqs,
                            stride_q_t, stride_q_h, stride_o_t, stride_o_h,
                            NUM_KV_HEADS, GROUP, PART_Q, BLOCK_N, HEAD_DIM,
                            HAS_WINDOW, KV_FP8, F16_DOTS, NUM_BUF, 4, MMA_FENCE,
                            BLOCK_Q, PART_Q, 1, ALIGN, stats_ptr, FP8_SCORES, FP8_PV,
                            EDGE_FENCE, False, TAIL_N, PACKED_SOFTMAX,
                        ),
                    ),
                ],
                [4, 4],
                [MMA_REGS, MMA_REGS],
            )  # fmt: skip
        else:
            gl.warp_specialize(
                [
                    (
                        _ws_mma_partition,
                        (
                            q_smem.index(0), k_smem, v_smem, ready, empty,
                            q_ptr, out_ptr, context_lens_ptr, query_start_loc_ptr,
                            k_scale_ptr, v_scale_ptr, qk_scale, window, num_reqs,
                            stride_q_t, stride_q_h, stride_o_t, stride_o_h,
                            NUM_KV_HEADS, GROUP, PART_Q, BLOCK_N, HEAD_DIM,
                            HAS_WINDOW, KV_FP8, F16_DOTS, NUM_BUF, 4, MMA_FENCE,
                            BLOCK_Q, 0, 0, ALIGN, stats_ptr, FP8_SCORES, FP8_PV,
                            EDGE_FENCE, False, TAIL_N, PACKED_SOFTMAX,
                        ),
                    ),
                    (
                        _ws_mma_partition,
                        (
                            q_smem.index(1), k_smem, v_smem, ready, empty,
                            q_ptr, out_ptr, context_lens_ptr, query_start_loc_ptr,
                            k_scale_ptr, v_scale_ptr, qk_scale, window, num_reqs,
                            stride_q_t, stride_q_h, stride_o_t, stride_o_h,
                            NUM_KV_HEADS, GROUP, PART_Q, BLOCK_N, HEAD_DIM,
                            HAS_WINDOW, KV_FP8, F16_DOTS, NUM_BUF, 4, MMA_FENCE,
                            BLOCK_Q, PART_Q, 1, ALIGN, stats_ptr, FP8_SCORES, FP8_PV,
                            EDGE_FENCE, False, TAIL_N, PACKED_SOFTMAX,
                        ),
                    ),
                    (
                        _ws_load_partition,
                        (
                            k_raw, v_raw, raw_ready, k_smem, v_smem, ready, empty,
                            k_ptr, v_ptr, block_table_ptr, context_lens_ptr,
                            query_start_loc_ptr, window, num_reqs, stride_k_blk,
                            stride_k_slot, stride_k_head, stride_v_blk,
                            stride_v_slot, stride_v_head, stride_bt, k_desc, v_desc,
                            NUM_KV_HEADS, BLOCK_Q, BLOCK_N, HEAD_DIM, PAGE_SIZE,
                            HAS_WINDOW, KV_FP8, NUM_BUF, NUM_RAW, COPIES_AHEAD,
                            FENCE_IN_MMA, NARROW_CONVERT, TMA, stats_ptr,
                            FP8_SCORES, FP8_PV, EDGE_TMA,
                        ),
                    ),
                ],
                [4, 4],
                [MMA_REGS, WORKER_REGS],
            )  # fmt: skip
    elif ISSUE_WARP:
        gl.warp_specialize(
            [
                (
                    _ws_mma_partition,
                    (
                        q_smem.index(0), k_smem, v_smem, ready, empty,
                        q_ptr, out_ptr, context_lens_ptr, query_start_loc_ptr,
                        k_scale_ptr, v_scale_ptr, qk_scale, window, num_reqs,
                        stride_q_t, stride_q_h, stride_o_t, stride_o_h,
                        NUM_KV_HEADS, GROUP, BLOCK_Q, BLOCK_N, HEAD_DIM,
                        HAS_WINDOW, KV_FP8, F16_DOTS, NUM_BUF, num_warps,
                        MMA_FENCE, BLOCK_Q, 0, 0, ALIGN, stats_ptr, FP8_SCORES,
                        FP8_PV,
                        EDGE_FENCE, HALF_ROWS, TAIL_N, PACKED_SOFTMAX,
                    ),
                ),
                (
                    _ws_fp8_convert_partition,
                    (
                        v_raw, raw_ready, raw_free, v_smem, ready, empty,
                        context_lens_ptr, query_start_loc_ptr, window,
                        num_reqs, NUM_KV_HEADS, BLOCK_Q, BLOCK_N, HEAD_DIM,
                        PAGE_SIZE, HAS_WINDOW, NUM_BUF, NUM_RAW,
                        NARROW_CONVERT, stats_ptr, EDGE_TMA, TAIL_N,
                    ),
                ),
                (
                    _ws_fp8_issue_partition,
                    (
                        k_desc, v_desc, v_raw, raw_ready, raw_free, k_smem,
                        ready, empty, k_ptr, v_ptr, block_table_ptr,
                        context_lens_ptr, query_start_loc_ptr, window,
                        num_reqs, stride_k_blk, stride_k_slot, stride_k_head,
                        stride_v_blk, stride_v_slot, stride_v_head, stride_bt,
                        NUM_KV_HEADS, BLOCK_Q, BLOCK_N, HEAD_DIM, PAGE_SIZE,
                        HAS_WINDOW, NUM_BUF, NUM_RAW, EDGE_TMA,
                    ),
                ),
            ],
            [2, 1],
            [WORKER_REGS, WORKER_REGS],
        )  # fmt: skip
    else:
        gl.warp_specialize(
            [
                (
                    _ws_mma_partition,
                    (
                        q_smem.index(0), k_smem, v_smem, ready, empty,
                        q_ptr, out_ptr, context_lens_ptr, query_start_loc_ptr,
                        k_scale_ptr, v_scale_ptr, qk_scale, window, num_reqs,
                        stride_q_t, stride_q_h, stride_o_t, stride_o_h,
                        NUM_KV_HEADS, GROUP, BLOCK_Q, BLOCK_N, HEAD_DIM,
                        HAS_WINDOW, KV_FP8, F16_DOTS, NUM_BUF, num_warps,
                        MMA_FENCE, BLOCK_Q, 0, 0, ALIGN, stats_ptr, FP8_SCORES,
                        FP8_PV,
                        EDGE_FENCE, HALF_ROWS, TAIL_N, PACKED_SOFTMAX,
                    ),
                ),
                (
                    _ws_load_partition,
                    (
                        k_raw, v_raw, raw_ready, k_smem, v_smem, ready, empty, k_ptr,
                        v_ptr, block_table_ptr, context_lens_ptr,
                        query_start_loc_ptr, window, num_reqs, stride_k_blk,
                        stride_k_slot, stride_k_head, stride_v_blk,
                        stride_v_slot, stride_v_head, stride_bt, k_desc, v_desc,
                        NUM_KV_HEADS, BLOCK_Q, BLOCK_N, HEAD_DIM, PAGE_SIZE,
                        HAS_WINDOW, KV_FP8, NUM_BUF, NUM_RAW, COPIES_AHEAD,
                        FENCE_IN_MMA, NARROW_CONVERT, TMA, stats_ptr,
                        FP8_SCORES, FP8_PV, EDGE_TMA,
                    ),
                ),
            ],
            [4],
            [WORKER_REGS],
        )  # fmt: skip


# Registers per thread of the second multiplying partition (split_mma).
MMA_PART_REGS = 168

# The keys of an item's last tile multiplied as a narrow tile (narrow_tail).
NARROW_TAIL_KEYS = 16


def copies_ahead(ring: int) -> int:
    """How many newer copies the direct-copy loader (a cache in q's dtype)
    keeps in flight when it signals a tile: ``ring - 1``. With one more,
    the loader would wait for a buffer that only a tile it has not yet
    signalled can free."""
    return ring - 1


def pipeline_constants(
    *, ring, raw_slots, worker_regs, fence_in_mma=False, split_mma=False,
    mma_regs=MMA_PART_REGS, narrow_convert=False, tma=False, fp8_scores=False,
    issue_warp=False, edge_fence=False, half_rows=False, edge_tma=False,
    narrow_tail=False, packed_softmax=False, v_pages=False, loader_first=False,
):  # fmt: skip
    """The warp-specialized kernel's pipeline constants (shared by the launch
    and the ahead-of-time compile in the tests)."""
    return dict(
        NUM_BUF=ring,
        NUM_RAW=raw_slots,
        WORKER_REGS=worker_regs,
        COPIES_AHEAD=copies_ahead(ring),
        FENCE_IN_MMA=fence_in_mma,
        SPLIT_MMA=split_mma,
        MMA_REGS=mma_regs,
        NARROW_CONVERT=narrow_convert,
        TMA=tma,
        FP8_SCORES=fp8_scores,
        FP8_PV=v_pages,
        ISSUE_WARP=issue_warp,
        EDGE_FENCE=edge_fence,
        HALF_ROWS=half_rows,
        EDGE_TMA=edge_tma,
        TAIL_N=NARROW_TAIL_KEYS if narrow_tail else 0,
        PACKED_SOFTMAX=packed_softmax,
        LOADER_FIRST=loader_first,
    )


def kernel_arguments(
    q,
    k_cache,
    v_cache,
    block_table,
    context_lens,
    query_start_loc,
    sliding_window,
    scale,
    out,
    k_scale=None,
    v_scale=None,
    *,
    block_q,
    block_n=64,
    f16_dots=False,
):
    """Positional arguments and constants of one launch (shared by the launch
    and the ahead-of-time compile in the tests)."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads = k_cache.shape[2]
    kv_fp8 = k_cache.dtype == torch.float8_e4m3fn
    # Without fp8 the kernel never reads the scale pointers.
    scales = (k_scale, v_scale) if kv_fp8 else (context_lens, context_lens)
    args = (
        q,
        k_cache,
        v_cache,
        out,
        block_table,
        context_lens,
        query_start_loc,
        *scales,
        scale * _LOG2E,
        0 if sliding_window is None else sliding_window,
        context_lens.shape[0],
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        out.stride(0),
        out.stride(1),
        block_table.stride(0),
    )
    constants = dict(
        NUM_KV_HEADS=num_kv_heads,
        GROUP=num_heads // num_kv_heads,
        BLOCK_Q=block_q,
        BLOCK_N=block_n,
        HEAD_DIM=head_dim,
        PAGE_SIZE=k_cache.shape[1],
        HAS_WINDOW=sliding_window is not None,
        KV_FP8=kv_fp8,
        F16_DOTS=kv_fp8 and f16_dots,
    )
    return args, constants


def _tma_descriptor(cache, v_pages=False):
    """A TMA descriptor of a ``[blocks, page, KV heads, D]`` cache view (any
    16-byte-aligned strides) whose copies are one page of one KV head and
    128 bytes of the head dim (``v_pages``: a transposed V page, unswizzled)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    bits = cache.element_size() * 8
    return TensorDescriptor(
        cache,
        list(cache.shape),
        list(cache.stride()),
        [1, cache.shape[1], 1, tma_piece_width(bits)],
        _host_piece_layout(bits, v_pages),
    )


@functools.cache
def _host_piece_layout(bits, v_pages=False):
    """``tma_piece_layout`` (``v_pages``: ``v_page_piece_layout``) built once
    per element width on the host (a layout takes about 5 us to build, twice
    per launch)."""
    return v_page_piece_layout() if v_pages else tma_piece_layout(bits)


def fixed_history_attention_wgmma(
    q,
    k_cache,
    v_cache,
    block_table,
    context_lens,
    query_start_loc,
    sliding_window,
    scale,
    out=None,
    k_scale=None,
    v_scale=None,
    *,
    programs_per_sm=None,
    worker_regs=112,
    maxnreg=None,
    f16_dots=False,
    block_n=64,
    raw_slots=2,
    ring=2,
    rows=64,
    fence_in_mma=False,
    split_mma=False,
    mma_regs=MMA_PART_REGS,
    narrow_convert=False,
    tma=False,
    fp8_scores=False,
    issue_warp=False,
    edge_fence=False,
    half_rows=False,
    edge_tma=False,
    narrow_tail=False,
    packed_softmax=False,
    v_pages=False,
    loader_first=False,
    wait_stats=None,
):
    """``fixed_history_ws_kernel`` on a Hopper GPU, for tiles of ``rows``
    rows (64, or 128 with two multiplying warpgroups; ``nH / nKV`` must
    divide it) and the pipeline the options below describe (the launch's:
    ``gluon_options`` of the launch module). fp8 scales must be float32
    device tensors. Only the checks below (``fixed_history_attention``
    checks its inputs fully).

    ``programs_per_sm``: the persistent grid's programs per SM (default 2
    for 64 rows, 1 for 128; the grid is never larger than the number of
    (request, KV head) items). ``worker_regs``: registers per thread of the
    loading warpgroup; ``maxnreg``: of the program at launch (default 128
    with 2 programs per SM, else 168). ``f16_dots`` (fp8 caches): float16
    MMAs, with q times the softmax scale rounded to float16 and the K/V
    tiles converted to float16 only (the Triton kernel's
    ``LaunchPlan.fp8_f16_dot``). ``block_n`` keys per tile, ``raw_slots``
    tiles staged ahead as loaded, ``ring`` converted tiles ahead of the
    MMAs (shared memory per program: q, ``ring`` converted and
    ``raw_slots`` loaded K/V tiles).
    ``fence_in_mma``: the multiplying warps fence each tile after waiting
    for it, instead of the loader before signalling it (a fence waits for
    the thread's outstanding loads, the loader's block-table reads and
    copies among them); with a cache in q's dtype the loader's copies then
    signal their tile themselves as they land, so that it never waits.
    ``split_mma`` (128 rows): the two multiplying warpgroups as two
    partitions of 64 rows each (``mma_regs`` registers per thread for the
    second), each releasing every ring buffer itself, instead of one of 8
    warps, whose releases synchronize both warpgroups at every tile.
    ``narrow_convert`` (fp8 caches): the loader converts 8 values per thread
    at a time, so that its stores into the ring run without bank conflicts.
    ``tma`` (pages that divide ``block_n``; a cache in q's dtype with a head
    dim a multiple of 64, or an fp8 cache with one a multiple of 128):
    whole pages copied by the tensor memory accelerator, 128 bytes of the
    head dim per copy, straight into the ring (``_ws_tma_partition``) or
    into the fp8 staging slots (``_ws_tma_fp8_partition``).
    ``fp8_scores`` (``tma`` with an fp8 cache, ``f16_dots``; changes the
    numerics): ``S = Q K^T`` on fp8 tensor cores, each row of q scaled by a
    power of two into e4m3's range (its largest magnitude into [128, 256))
    and rounded to e4m3, the softmax scale applied to the scores, the K
    tiles staged by TMA straight into the ring, only V converted to float16
    by the loader (shared memory per program: q in e4m3, ``ring`` e4m3 K
    and float16 V tiles, and ``raw_slots`` staged V tiles). ``edge_fence``
    (``tma``): the multiplying warps fence only the tiles copied by
    ``cp.async`` (those with keys outside the window), not every tile.
    ``half_rows`` (64 rows, one multiplying partition, not ``v_pages``;
    query heads per KV head that divide 32): a tile of 64 rows holds 32 of
    queries (``rows // group // 2`` of them per pass), in the rows
    ``16 w + 0 .. 7`` of each warp's 16, and the softmax runs on those
    alone. ``edge_tma`` (``tma`` with an fp8 cache, not ``v_pages``): the
    tiles holding keys outside the window are copied by TMA too, whole
    pages (those past the request's last as page 0), and the loader zeroes
    V's keys outside the window as it converts them (K's scores there are
    masked), instead of copying such a tile by ``cp.async`` with those keys
    zero-filled. ``narrow_tail`` (``fp8_scores``, not ``v_pages``,
    ``block_n`` above 16): an item's last key tile, where its keys lie
    within the tile's first 16 (the 8 or 16 draft keys past a window of
    whole tiles, say), multiplied as a 16-key tile, and with the issuing
    warp (``issue_warp``) converted as one too. ``packed_softmax``
    (``fp8_scores``, not ``v_pages``; changes the numerics further): each
    row of q scaled into [0.5, 1) instead, ``S = Q K^T`` accumulated in
    float16 (no sum can overflow: at most 128 x 448 at D = 128) and the
    softmax computed on float16 pairs, two values per instruction (the
    exponents ``s * scale - m`` rounded to float16, ``ex2.approx.f16x2``,
    the tile's row sums in float16 down to 8 columns); the running maxima,
    sums and the output stay float32.
    ``v_pages`` (``fp8_scores``, pages of 16 keys, head dim 128, 64- or
    128-key tiles; changes the numerics further): ``v_cache`` holds each
    page's V transposed (the writer's ``v_pages_transposed`` layout:
    ``v_cache[block, d // 8, head, 16 * (d % 8) + position]``, the keys of
    a page at the positions of ``_fp8_key_order``), and ``O += P V`` runs
    on fp8 tensor cores with the softmax weights times 2^8 rounded to e4m3:
    the cache's pages are that MMA's operand as they are, so the loader
    copies them by TMA byte for byte straight into the ring, no staging and
    no conversion (the tiles with keys outside the window through its
    registers, those keys' bytes zeroed). ``loader_first`` (``split_mma``):
    the loading warpgroup runs as the default partition (warps 0-3, with
    the registers that the two multiplying ones, ``mma_regs`` each, leave
    it; ``worker_regs`` is then unused) instead of the first multiplying
    one.
    ``wait_stats`` (a measurement): an int64 tensor of at least
    ``programs x 3 x 4`` values that each program's partitions fill (rows
    0-1 multiplying, 2 loading): cycles waited at their barriers
    (multiplying: for tiles, then the cycles spent between its key loops,
    from each loop's end to the next one's start; TMA loaders: for landed
    staged tiles, then for free ring buffers), cycles from start to end,
    tiles."""
    num_reqs = context_lens.shape[0]
    num_heads, num_kv_heads = q.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    fp8_cache = k_cache.dtype == torch.float8_e4m3fn
    if rows not in (64, 128):
        raise ValueError(f"rows must be 64 or 128, got {rows}")
    if rows % group:
        raise ValueError(f"the query heads per KV head ({group}) must divide {rows}")
    if split_mma and rows != 128:
        raise ValueError("split_mma needs rows=128")
    if loader_first and not split_mma:
        raise ValueError("loader_first needs split_mma=True")
    if tma and (
        k_cache.dtype not in (q.dtype, torch.float8_e4m3fn)
        or q.shape[2] % (128 // k_cache.element_size())
        or block_n % k_cache.shape[1]
    ):
        raise ValueError(
            "tma needs a cache in q's dtype (head dim a multiple of 64) or in "
            "fp8 (head dim a multiple of 128) and pages that divide block_n"
        )
    if fp8_scores and not (tma and f16_dots and fp8_cache):
        raise ValueError("fp8_scores needs an fp8 cache, tma=True and f16_dots=True")
    if issue_warp and not (fp8_scores and not v_pages and not split_mma):
        raise ValueError(
            "issue_warp needs fp8_scores=True, v_pages=False and split_mma=False"
        )
    if edge_fence and not tma:
        raise ValueError("edge_fence needs tma=True")
    if half_rows and not (
        rows == 64 and not (split_mma or v_pages) and (rows // 2) % group == 0
    ):
        raise ValueError(
            "half_rows needs rows=64, split_mma and v_pages False and query "
            f"heads per KV head that divide 32 (got rows={rows}, {group} per "
            "KV head)"
        )
    if edge_tma and not (tma and fp8_cache and not v_pages):
        raise ValueError("edge_tma needs tma=True, an fp8 cache and v_pages=False")
    if narrow_tail and not (fp8_scores and not v_pages and block_n > NARROW_TAIL_KEYS):
        raise ValueError(
            "narrow_tail needs fp8_scores=True, v_pages=False and block_n above "
            f"{NARROW_TAIL_KEYS} (got block_n={block_n})"
        )
    if packed_softmax and not (fp8_scores and not v_pages):
        raise ValueError("packed_softmax needs fp8_scores=True and v_pages=False")
    if v_pages and not (
        fp8_scores
        and block_n in (64, 128)
        and k_cache.shape[1] == 16
        and q.shape[2] == 128
    ):
        raise ValueError(
            "v_pages needs fp8_scores=True, block_n 64 or 128, pages of 16 keys "
            f"and head dim 128 (got block_n={block_n}, pages of "
            f"{k_cache.shape[1]}, head dim {q.shape[2]})"
        )
    if tma and fence_in_mma and fp8_cache:
        raise ValueError(
            "tma with an fp8 cache fences in the loader; fence_in_mma does not apply"
        )
    if k_cache.stride(3) != 1 or v_cache.stride(3) != 1 or q.stride(2) != 1:
        raise ValueError("q and the K/V caches need a unit last stride")
    if out is not None and out.stride(2) != 1:
        raise ValueError(
            f"out needs a unit last stride, got strides {tuple(out.stride())}"
        )
    if fp8_cache and not (
        isinstance(k_scale, torch.Tensor) and isinstance(v_scale, torch.Tensor)
    ):
        raise TypeError("an fp8 cache needs k_scale and v_scale as device tensors")
    if out is None:
        out = torch.empty_like(q)
    args, constants = kernel_arguments(
        q,
        k_cache,
        v_cache,
        block_table,
        context_lens,
        query_start_loc,
        sliding_window,
        scale,
        out,
        k_scale,
        v_scale,
        block_q=rows // group // (2 if half_rows else 1),
        block_n=block_n,
        f16_dots=f16_dots,
    )
    per_sm = (2 if rows == 64 else 1) if programs_per_sm is None else programs_per_sm
    grid = (max(1, min(num_reqs * num_kv_heads, per_sm * sm_count(q.device))),)
    if maxnreg is None:
        maxnreg = 128 if per_sm >= 2 else 168
    if wait_stats is not None and (
        wait_stats.dtype != torch.int64 or wait_stats.numel() < grid[0] * 12
    ):
        raise ValueError(
            f"wait_stats needs an int64 tensor of at least {grid[0]} x 3 x 4 values"
        )
    descs = (
        (_tma_descriptor(k_cache), _tma_descriptor(v_cache, v_pages))
        if tma
        else (None, None)
    )
    fixed_history_ws_kernel[grid](
        *args,
        *descs,
        wait_stats,
        **constants,
        **pipeline_constants(
            ring=ring,
            raw_slots=raw_slots,
            worker_regs=worker_regs,
            fence_in_mma=fence_in_mma,
            split_mma=split_mma,
            mma_regs=mma_regs,
            narrow_convert=narrow_convert,
            tma=tma,
            fp8_scores=fp8_scores,
            issue_warp=issue_warp,
            edge_fence=edge_fence,
            half_rows=half_rows,
            edge_tma=edge_tma,
            narrow_tail=narrow_tail,
            packed_softmax=packed_softmax,
            v_pages=v_pages,
            loader_first=loader_first,
        ),
        num_warps=4 if split_mma else rows // 16,
        maxnreg=maxnreg,
    )
    return out


__all__ = ["fixed_history_attention_wgmma", "fixed_history_ws_kernel"]
