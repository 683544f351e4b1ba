# SPDX-License-Identifier: Apache-2.0
"""Triton kernels of the fixed-history attention (see ``docs/kernel.md``).

:func:`fixed_history_kernel` walks work items, one item being all queries of
one request on one KV head over one slice ("split") of its key range. With one
program per item each program runs one iteration of that walk; with a
persistent grid (fewer programs) each runs several. :func:`combine_splits_kernel`
merges the partial results of a launch with several splits.

With an fp8 (e4m3) cache (``KV_FP8``) the tiles are loaded as fp8 and the
per-tensor scales are applied outside the dot products. Two ways to feed the
tensor cores, chosen by the launch plan (``FP8_F16_DOT``):

* converted to q's dtype, exactly (every e4m3 value is an fp16 and a bf16
  value): e4m3 -> float16 in hardware, then -> bfloat16 for a bf16 q;
  ``q . (k8 * k_scale) * scale == (q . k8) * (scale * k_scale)``;
* float16 dot products whatever q's dtype: q is scaled by the softmax scale
  and rounded to float16 once per tile of queries, K is converted once and V
  in registers (no byte-wise shared-memory reads of V);
  ``(q * scale) . (k8 * k_scale) == ((q * scale) . k8) * k_scale``.

In both ``sum p * (v8 * v_scale) == v_scale * sum p * v8``. Which one is
faster depends on the shape (``benchmarks/fixed_history_attention_h200.md``).
On the float16 path the converted V tile goes through an inline-PTX copy
(``V_ASM_COPY``, see :func:`_asm_copy_f16`).

A third way, opt-in (``FP8_E4M3_DOT``), runs both dots on fp8 tensor cores
and so changes the numerics: each row of q is scaled to e4m3's range
(``q8 = q / r``, ``r = max|q_row| / 448``) and rounded to e4m3, once per
tile of queries, and the softmax weights are rounded to e4m3 after scaling
by 256 (``p <= 1``, so ``256 p`` stays below e4m3's largest value 448);
``q . k = r * (q8 . k8) * k_scale`` up to q's rounding and
``sum p v = v_scale / 256 * sum (256 p)8 * v8`` up to p's. The row sums of
the softmax use the unrounded weights. Triton emits fp8 ``wgmma`` for it on
sm_90 when a tile has at least 64 rows; with fewer it converts to float16.

Whatever the dot path, ``TRANSPOSED`` computes both dots transposed
(``S^T = K Q^T``, ``O^T += V^T P^T``): a dot takes 8 columns but 16 rows,
so a tile of 8 query rows needs no padding rows as the columns.
"""

import triton
import triton.language as tl

#: The softmax weights p <= 1 are scaled by this before rounding to e4m3.
P_E4M3_SCALE = tl.constexpr(256.0)
#: The largest finite e4m3 (float8_e4m3fn) value.
E4M3_MAX = tl.constexpr(448.0)


@triton.jit
def _key_slice(
    ctx_len,
    num_q,
    window,
    split_idx,
    HAS_WINDOW: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Cache positions ``[lo, hi)`` of one split of a request's key range."""
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
    # Split the range into NUM_SPLITS slices of whole key tiles (some of the
    # last ones may be empty).
    chunk = tl.cdiv(tl.cdiv(kv_hi - kv_lo, NUM_SPLITS), BLOCK_N) * BLOCK_N
    lo = kv_lo + split_idx * chunk
    return lo, tl.minimum(lo + chunk, kv_hi)


@triton.jit
def _page_ids(bt_row, pos, hi, PAGE_SIZE: tl.constexpr, ASM_PAGE_LOAD: tl.constexpr):
    """Page ids of cache positions ``pos``; a position at or past ``hi`` gets
    an unused but valid id."""
    if ASM_PAGE_LOAD:
        # A plain PTX load is not a load to Triton's pipeliner, so the K/V
        # loads that use these ids are pipelined num_stages - 1 tiles ahead
        # (behind a block-table load, only one). The index is clamped to
        # hi - 1, inside the block table whenever the key loop runs.
        idx = tl.minimum(pos, hi - 1) // PAGE_SIZE
        page = tl.inline_asm_elementwise(
            "ld.global.nc.b32 $0, [$1];",
            "=r,l",
            [bt_row + idx],
            dtype=tl.int32,
            is_pure=True,
            pack=1,
        )
    else:
        page = tl.load(bt_row + pos // PAGE_SIZE, mask=pos < hi, other=0)
    return page


@triton.jit
def _load_rows(head_ptr, page, slot, stride_blk, stride_slot, offs_d, ok):
    """Rows (page, slot) of one KV head of the K or V cache; 0 where not ok."""
    row = page.to(tl.int64) * stride_blk + slot * stride_slot
    return tl.load(
        head_ptr + row[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0
    )


@triton.jit
def _page_order(offs_n):
    """Tile row ``n`` in the order of V's transposed 16-key pages: the key
    offset that holds key ``8 ((p // 2) % 2) + 2 (p // 4) + p % 2`` of the
    tile's page ``n // 16``, ``p = n % 16`` (K's rows and the scores follow
    the order in which ``_load_v_pages`` reads V; the softmax does not
    depend on it)."""
    p = offs_n % 16
    return offs_n - p + 8 * ((p // 2) % 2) + 2 * (p // 4) + p % 2


@triton.jit
def _load_v_pages(
    head_ptr, bt_row, start, hi, key_ok, stride_blk, stride_slot,
    BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
):  # fmt: skip
    """V^T ``[HEAD_DIM, BLOCK_N]`` of the tile of keys from ``start`` (a page
    boundary) of one KV head of a cache whose 16-key pages hold V
    transposed (head dim 128: value ``d`` of the key at position ``p`` of
    page ``b`` at ``[b, d // 8, head, 16 * (d % 8) + p]``), column ``n``
    being position ``n % 16`` of the tile's page ``n // 16`` (the keys in
    ``_page_order``): whole pages read 16 bytes at a time, then the columns
    not ``key_ok`` zeroed (a weight of 0 would not cancel a NaN)."""
    PAGES: tl.constexpr = BLOCK_N // 16
    page_start = start + 16 * tl.arange(0, PAGES)
    live = page_start < hi
    page = tl.load(bt_row + page_start // 16, mask=live, other=0).to(tl.int64)
    d = tl.arange(0, HEAD_DIM)
    row = (d // 8) * stride_slot + 16 * (d % 8)
    off = row[:, None, None] + (page * stride_blk)[None, :, None]
    off = off + tl.arange(0, 16)[None, None, :]
    v = tl.load(head_ptr + off, mask=live[None, :, None], other=0.0)
    v = tl.reshape(v, [HEAD_DIM, BLOCK_N])
    return tl.where(key_ok[None, :], v, tl.zeros_like(v))


@triton.jit
def _scale_value(scale, IN_MEMORY: tl.constexpr):
    """A dequantization scale: read from device memory (an fp32 pointer, so a
    CUDA-graph replay sees its current value) or passed by value."""
    value = scale
    if IN_MEMORY:
        value = tl.load(scale)
    return value


@triton.jit
def _fp8_to(tile, dtype: tl.constexpr):
    """An fp8 e4m3 tile in ``dtype`` (float16 or bfloat16), exactly. Through
    float16 (a hardware conversion on sm_89+): with Triton 3.6's direct e4m3
    -> bfloat16 conversion the kernel ran 10-17% slower on an H200."""
    return tile.to(tl.float16).to(dtype)


@triton.jit
def _fp8_rows_to_f16(tile, ROWS: tl.constexpr, COLS: tl.constexpr):
    """An fp8 e4m3 ``[ROWS, COLS]`` tile as float16, converted in registers.

    For the P.V product, the V tile is read along its rows (the key axis),
    but the cache stores each row contiguously. An 8-bit operand cannot be
    transposed by ``ldmatrix``, so Triton would read it from shared memory
    byte by byte, after it has been converted to the dot-operand layout. The
    split/join pins the conversion to a register layout. The float16 tile is
    then transposed on its way to the tensor cores, as a bf16/fp16 tile is.
    """
    lo, hi = tl.split(tl.reshape(tile, [ROWS, COLS // 2, 2]))
    return tl.reshape(tl.join(lo.to(tl.float16), hi.to(tl.float16)), [ROWS, COLS])


@triton.jit
def _asm_copy_f16(tile):
    """``tile`` (float16) unchanged, copied by inline PTX that Triton does not
    look into.

    Triton lays out a dot operand for the narrowest type it can trace the
    operand back to through conversions. Traced to V's fp8 load, the float16
    V tile of the ``P V`` dot got 8 elements per thread along the key axis
    (``kWidth = 8``), and ``ldmatrix`` then read it (and ``P``) with 4-way
    shared-memory bank conflicts: 16 wavefronts per instruction instead of 4
    (Nsight Compute, H200). Behind this copy the dot sees float16 and takes
    the usual 2 elements per thread; the moves cost nothing after ``ptxas``.
    """
    return tl.inline_asm_elementwise(
        "mov.b32 $0, $1;", "=r,r", [tile], dtype=tl.float16, is_pure=False, pack=2
    )


@triton.jit
def _token_head_ptrs(base, tok, head, offs_d, stride_t, stride_h, stride_d):
    """Pointers to ``base[tok, head, :]`` of a [T, nH, D] tensor, one row per
    (tok, head) pair."""
    return (
        base
        + tok[:, None] * stride_t
        + head[:, None] * stride_h
        + offs_d[None, :] * stride_d
    )


@triton.jit
def _online_softmax_step(
    q_tile, k_tile, v_tile, key_ok, m_i, l_i, acc, qk_scale, P_E4M3: tl.constexpr
):
    """One flash-attention update with a key tile (log2 domain).

    ``qk_scale``: a scalar, or ``[BLOCK_M, 1]`` per-row scales (the e4m3
    path's q8 holds each row of q divided by its own scale). ``P_E4M3``: the
    softmax weights go to the P.V product as e4m3 after scaling by 256, and
    ``acc`` gathers ``256 p`` (see the module docstring); else in V's dtype.
    """
    s = tl.dot(q_tile, tl.trans(k_tile)) * qk_scale
    s = tl.where(key_ok[None, :], s, float("-inf"))
    # Every tile holds at least one valid key, so m_new is finite.
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if P_E4M3:  # noqa: SIM108 (constexpr branch)
        p_dot = (p * P_E4M3_SCALE).to(tl.float8e4nv)
    else:
        p_dot = p.to(v_tile.dtype)
    acc = acc * alpha[:, None] + tl.dot(p_dot, v_tile)
    return m_new, l_i, acc


@triton.jit
def _transposed_softmax_step(q_tile, k_tile, v_tile, key_ok, m_i, l_i, acc_t, qk_scale):
    """``_online_softmax_step`` with both dots transposed: ``S^T = K Q^T``
    (the keys as the dot's rows, the tile's query rows as its columns) and
    ``O^T += V^T P^T``, so that a tile of 8 rows needs no padding rows
    (the dots' smallest column count is 8, their smallest row count 16)."""
    s_t = tl.dot(k_tile, tl.trans(q_tile)) * qk_scale
    s_t = tl.where(key_ok[:, None], s_t, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s_t, axis=0))
    alpha = tl.exp2(m_i - m_new)
    p_t = tl.exp2(s_t - m_new[None, :])
    l_i = l_i * alpha + tl.sum(p_t, axis=0)
    acc_t = acc_t * alpha[None, :] + tl.dot(tl.trans(v_tile), p_t.to(v_tile.dtype))
    return m_new, l_i, acc_t


@triton.jit
def fixed_history_kernel(
    q_ptr,  # [T, nH, D]
    k_ptr,  # [num_blocks, block_size, nKV, D], last stride 1; q's dtype or fp8
    v_ptr,  # [num_blocks, block_size, nKV, D], last stride 1; q's dtype or fp8
    out_ptr,  # [T, nH, D], written when NUM_SPLITS == 1
    part_acc_ptr,  # [T, nH, NUM_SPLITS, D] fp32, written when NUM_SPLITS > 1
    part_max_ptr,  # [T, nH, NUM_SPLITS] fp32 (log2 domain)
    part_sum_ptr,  # [T, nH, NUM_SPLITS] fp32
    block_table_ptr,  # [>= R, max_blocks] int32
    context_lens_ptr,  # [R] int32
    query_start_loc_ptr,  # [R + 1] int32
    qk_scale,  # float: softmax scale * log2(e)
    k_scale,  # KV_FP8: K = k8 * k_scale (fp32 pointer or float); else unused
    v_scale,  # KV_FP8: V = v8 * v_scale (fp32 pointer or float); else unused
    window,  # int: sliding window W (ignored when HAS_WINDOW is False)
    num_reqs,  # int: R
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
    BLOCK_M: tl.constexpr,  # next_pow2(BLOCK_Q * GROUP), >= 16 (TRANSPOSED: 8)
    BLOCK_N: tl.constexpr,  # keys per tile
    NUM_SPLITS: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    ASM_PAGE_LOAD: tl.constexpr,  # block-table loads hidden from the pipeliner
    PERSISTENT: tl.constexpr,  # fewer programs than items: each loops
    KV_FP8: tl.constexpr,  # K/V caches in fp8 e4m3 with per-tensor scales
    FP8_F16_DOT: tl.constexpr,  # fp8: float16 dots, V converted in registers
    FP8_E4M3_DOT: tl.constexpr,  # fp8: e4m3 q and softmax weights, e4m3 dots
    K_SCALE_IN_MEMORY: tl.constexpr,  # k_scale is a pointer
    V_SCALE_IN_MEMORY: tl.constexpr,  # v_scale is a pointer
    TRANSPOSED: tl.constexpr,  # S^T = K Q^T, O^T += V^T P^T
    V_ASM_COPY: tl.constexpr,  # FP8_F16_DOT: V's float16 tile via _asm_copy_f16
    V_PAGES: tl.constexpr = False,  # V's 16-key pages transposed (_load_v_pages)
):
    if KV_FP8:
        # Dequantize outside the dot products (see the module docstring).
        if FP8_F16_DOT:  # the softmax scale goes into q, k_scale on the scores
            q_factor = qk_scale
            qk_scale = _scale_value(k_scale, K_SCALE_IN_MEMORY)
        else:
            qk_scale = qk_scale * _scale_value(k_scale, K_SCALE_IN_MEMORY)
        v_factor = _scale_value(v_scale, V_SCALE_IN_MEMORY)
        if FP8_E4M3_DOT:
            v_factor = v_factor / P_E4M3_SCALE
    # Items in launch order: KV heads fastest, then splits, then requests, so
    # programs that run side by side read the same cache pages (the heads of
    # one slot are adjacent in vLLM's default layout).
    pid = tl.program_id(0)
    num_items = num_reqs * (NUM_KV_HEADS * NUM_SPLITS)
    if PERSISTENT:  # items pid, pid + num_programs, ...
        offset, first, last, step = 0, pid, num_items, tl.num_programs(0)
    else:  # item pid: the loop runs once and the compiler removes it
        offset, first, last, step = pid, 0, 1, 1
    for it in range(first, last, step):
        item = offset + it
        kv_head = item % NUM_KV_HEADS
        split_idx = item // NUM_KV_HEADS % NUM_SPLITS
        req_idx = item // (NUM_KV_HEADS * NUM_SPLITS)
        q_first = tl.load(query_start_loc_ptr + req_idx)
        num_q = tl.load(query_start_loc_ptr + req_idx + 1) - q_first
        ctx_len = tl.load(context_lens_ptr + req_idx)
        split_lo, split_hi = _key_slice(
            ctx_len, num_q, window, split_idx, HAS_WINDOW, NUM_SPLITS, BLOCK_N
        )
        # The rows of one tile: BLOCK_Q queries x the GROUP query heads of a KV
        # head, so every K/V row is read once per (request, KV head).
        rows = tl.arange(0, BLOCK_M)
        q_in_tile = rows // GROUP
        head = kv_head * GROUP + rows % GROUP
        offs_d = tl.arange(0, HEAD_DIM)
        offs_n = tl.arange(0, BLOCK_N)
        # tl.cast, not .to(): under the interpreter a loop index is a Python int.
        bt_row = block_table_ptr + tl.cast(req_idx, tl.int64) * stride_bt
        k_head = k_ptr + tl.cast(kv_head, tl.int64) * stride_k_head
        v_head = v_ptr + tl.cast(kv_head, tl.int64) * stride_v_head

        # Usually one pass (all queries of the request fit in BLOCK_Q); a
        # request with more queries than BLOCK_Q takes several.
        for q_base in range(0, num_q, BLOCK_Q):
            q_idx = q_base + q_in_tile
            row_ok = (q_idx < num_q) & (rows < BLOCK_Q * GROUP)
            tok = (q_first + q_idx).to(tl.int64)
            q_tile = tl.load(
                _token_head_ptrs(
                    q_ptr, tok, head, offs_d, stride_q_t, stride_q_h, stride_q_d
                ),
                mask=row_ok[:, None],
                other=0.0,
            )
            if KV_FP8 and FP8_F16_DOT:
                # float16 q: |q| would need to pass ~5e5 (D = 128) to overflow.
                q_tile = (q_tile.to(tl.float32) * q_factor).to(tl.float16)
            score_scale = qk_scale
            if KV_FP8 and FP8_E4M3_DOT:
                # Each row in e4m3's range; an all-zero row (padding) stays 0.
                q_f32 = q_tile.to(tl.float32)
                row_max = tl.maximum(tl.max(tl.abs(q_f32), axis=1), 1e-30)
                to_e4m3 = E4M3_MAX / row_max
                q_tile = (q_f32 * to_e4m3[:, None]).to(tl.float8e4nv)
                score_scale = (row_max * (qk_scale / E4M3_MAX))[:, None]
            m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
            l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
            if TRANSPOSED:  # noqa: SIM108 (constexpr branch)
                acc = tl.zeros([HEAD_DIM, BLOCK_M], dtype=tl.float32)
            else:
                acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
            loop_lo = split_lo
            if V_PAGES:  # tiles of whole pages, the keys below split_lo masked
                loop_lo = tl.where(
                    split_lo < split_hi, split_lo - split_lo % PAGE_SIZE, split_lo
                )
            for start_n in range(loop_lo, split_hi, BLOCK_N):
                if V_PAGES:  # noqa: SIM108 (constexpr branch)
                    pos = start_n + _page_order(offs_n)
                else:
                    pos = start_n + offs_n
                key_ok = pos < split_hi
                if V_PAGES:
                    key_ok = key_ok & (pos >= split_lo)
                page = _page_ids(bt_row, pos, split_hi, PAGE_SIZE, ASM_PAGE_LOAD)
                slot = pos % PAGE_SIZE
                k_tile = _load_rows(
                    k_head, page, slot, stride_k_blk, stride_k_slot, offs_d, key_ok
                )
                if V_PAGES:
                    v_tile = _load_v_pages(
                        v_head, bt_row, start_n, split_hi, key_ok, stride_v_blk,
                        stride_v_slot, BLOCK_N, HEAD_DIM,
                    )  # fmt: skip
                    if KV_FP8 and FP8_F16_DOT:  # converted along its rows
                        v_tile = _fp8_rows_to_f16(v_tile, HEAD_DIM, BLOCK_N)
                    v_tile = tl.trans(v_tile)
                else:
                    v_tile = _load_rows(
                        v_head, page, slot, stride_v_blk, stride_v_slot, offs_d, key_ok
                    )
                # (The e4m3 path feeds the e4m3 tiles as they are.)
                if KV_FP8 and FP8_F16_DOT:
                    k_tile = k_tile.to(tl.float16)
                    if not V_PAGES:
                        v_tile = _fp8_rows_to_f16(v_tile, BLOCK_N, HEAD_DIM)
                    if V_ASM_COPY:
                        v_tile = _asm_copy_f16(v_tile)
                elif KV_FP8 and not FP8_E4M3_DOT:
                    k_tile = _fp8_to(k_tile, q_tile.dtype)
                    v_tile = _fp8_to(v_tile, q_tile.dtype)
                if TRANSPOSED:
                    m_i, l_i, acc = _transposed_softmax_step(
                        q_tile, k_tile, v_tile, key_ok, m_i, l_i, acc, qk_scale
                    )
                else:
                    m_i, l_i, acc = _online_softmax_step(
                        q_tile,
                        k_tile,
                        v_tile,
                        key_ok,
                        m_i,
                        l_i,
                        acc,
                        score_scale,
                        KV_FP8 and FP8_E4M3_DOT,
                    )
            if TRANSPOSED:  # once per pass: the rows back as rows
                acc = tl.trans(acc)
            if KV_FP8:
                acc = acc * v_factor

            if NUM_SPLITS == 1:
                # The split covers the whole key range (>= 1 key as B_r >= 1).
                tl.store(
                    _token_head_ptrs(
                        out_ptr, tok, head, offs_d, stride_o_t, stride_o_h, stride_o_d
                    ),
                    (acc / l_i[:, None]).to(out_ptr.dtype.element_ty),
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
def combine_splits_kernel(
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
    """One program per (token, query head): merge the split partials."""
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
