# SPDX-License-Identifier: Apache-2.0
"""Fixed-history attention written in Gluon for Hopper (sm_90): explicit
layouts and warpgroup MMAs. EXPERIMENTAL, not used by the launch policy.

Why: the Triton kernel (``fixed_history_kernel``) cannot reach the fp8 read
floor. Its K/V conversion sits in each warp's dependency chain between the
load and the MMA, and Triton chooses where the converted tiles live. Here
each step is placed by hand, for tiles of 64 query rows (``BLOCK_Q`` query
slots x ``GROUP`` query heads) and one warpgroup per program:

* the K and V tiles of key tile t + 1 were loaded into registers one
  iteration earlier (the page ids looked up per key); while the tensor cores
  compute ``S = Q K_t^T`` asynchronously, the warps convert tile t + 1 (fp8
  -> q's dtype) and store it into the other half of a double buffer in
  shared memory, then issue the global loads of tile t + 2;
* then the online softmax of S in registers, and ``O += P V_t`` with P from
  registers and V_t from shared memory.

One split (no partial results); a persistent grid of ``programs`` programs
walks the (request, KV head) items, KV heads fastest.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    async_copy,
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

_LOG2E = 1.4426950408889634

# Gluon's API moves between Triton releases: 3.7 (vLLM 0.32.0's) names the
# asynchronous global -> shared copy async_copy_global_to_shared, 3.9
# async_load, with the same leading arguments.
_async_load = getattr(async_copy, "async_load", None)
if _async_load is None:
    _async_load = async_copy.async_copy_global_to_shared


@gluon.jit
def _copy_kv_tile(
    slot,
    head_ptr,
    bt_row,
    start,
    hi,
    stride_blk,
    stride_slot,
    PAGE_SIZE: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    layout: gl.constexpr,
):
    """Start copying keys ``start .. start + BLOCK_N - 1`` of one KV head into
    the shared-memory ``slot`` (zeros at keys >= hi), page by page through
    the block table. Each thread copies the 16-byte pieces of ``layout`` that
    it later reads back, so waiting for its own copies is enough."""
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    pos = start + offs_n
    ok = pos < hi
    page = gl.load(bt_row + pos // PAGE_SIZE, mask=ok, other=0)
    row = page.to(gl.int64) * stride_blk + (pos % PAGE_SIZE) * stride_slot
    ptrs = head_ptr + gl.expand_dims(row, 1) + gl.expand_dims(offs_d, 0)
    mask = gl.expand_dims(ok, 1) & gl.expand_dims(offs_d < HEAD_DIM, 0)
    _async_load(slot, ptrs, mask=mask)


@gluon.jit
def _to_mma_dtype(tile, dtype: gl.constexpr, KV_FP8: gl.constexpr):
    """A K/V register tile in q's dtype: e4m3 through float16 (exact)."""
    if KV_FP8:
        return tile.to(gl.float16).to(dtype)
    else:
        return tile


@gluon.jit
def fixed_history_wgmma_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    block_table_ptr,
    context_lens_ptr,
    query_start_loc_ptr,
    k_scale_ptr,
    v_scale_ptr,
    qk_scale,
    window,
    num_reqs,
    stride_q_t,
    stride_q_h,
    stride_k_blk,
    stride_k_slot,
    stride_k_head,
    stride_v_blk,
    stride_v_slot,
    stride_v_head,
    stride_o_t,
    stride_o_h,
    stride_bt,
    NUM_KV_HEADS: gl.constexpr,
    GROUP: gl.constexpr,
    BLOCK_Q: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    PAGE_SIZE: gl.constexpr,
    HAS_WINDOW: gl.constexpr,
    KV_FP8: gl.constexpr,
    num_warps: gl.constexpr,
):
    BLOCK_M: gl.constexpr = BLOCK_Q * GROUP
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    # Register layouts: the two MMAs' accumulators, P as the A operand of the
    # second, and 16-byte vector loads of K/V and q rows.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(
        operand_index=0, parent=o_layout, k_width=2
    )
    KV_VEC: gl.constexpr = 16 if KV_FP8 else 8
    KV_TPW_D: gl.constexpr = HEAD_DIM // KV_VEC
    kv_layout: gl.constexpr = gl.BlockedLayout(
        [1, KV_VEC], [32 // KV_TPW_D, KV_TPW_D], [num_warps, 1], [1, 0]
    )
    Q_TPW_D: gl.constexpr = HEAD_DIM // 8
    q_layout: gl.constexpr = gl.BlockedLayout(
        [1, 8], [32 // Q_TPW_D, Q_TPW_D], [num_warps, 1], [1, 0]
    )
    tile_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
        [BLOCK_N, HEAD_DIM], dtype
    )
    q_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
        [BLOCK_M, HEAD_DIM], dtype
    )
    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], q_smem_layout)
    k_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, HEAD_DIM], tile_smem)
    v_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, HEAD_DIM], tile_smem)
    # The tiles as loaded (fp8), two slots each, before conversion.
    raw_smem: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])
    kv_dtype: gl.constexpr = k_ptr.dtype.element_ty
    k_raw = gl.allocate_shared_memory(kv_dtype, [2, BLOCK_N, HEAD_DIM], raw_smem)
    v_raw = gl.allocate_shared_memory(kv_dtype, [2, BLOCK_N, HEAD_DIM], raw_smem)

    score_scale = qk_scale
    if KV_FP8:
        score_scale = qk_scale * gl.load(k_scale_ptr)

    rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, q_layout))
    offs_dq = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, q_layout))
    rows_o = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, o_layout))
    offs_do = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    offs_ns = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))

    num_items = num_reqs * NUM_KV_HEADS
    for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
        kv_head = item % NUM_KV_HEADS
        req = item // NUM_KV_HEADS
        q_first = gl.load(query_start_loc_ptr + req)
        num_q = gl.load(query_start_loc_ptr + req + 1) - q_first
        ctx_len = gl.load(context_lens_ptr + req)
        hi = ctx_len + num_q
        lo = 0
        if HAS_WINDOW:
            lo = gl.maximum(ctx_len - window, 0)
        n_tiles = gl.cdiv(hi - lo, BLOCK_N)
        bt_row = block_table_ptr + req.to(gl.int64) * stride_bt
        k_head = k_ptr + kv_head.to(gl.int64) * stride_k_head
        v_head = v_ptr + kv_head.to(gl.int64) * stride_v_head

        for q_base in range(0, num_q, BLOCK_Q):
            q_idx = q_base + rows // GROUP
            head = kv_head * GROUP + rows % GROUP
            tok = (q_first + q_idx).to(gl.int64)
            q_ptrs = (
                q_ptr
                + gl.expand_dims(tok * stride_q_t + head * stride_q_h, 1)
                + gl.expand_dims(offs_dq, 0)
            )
            q_mask = gl.expand_dims(q_idx < num_q, 1) & gl.expand_dims(
                offs_dq < HEAD_DIM, 0
            )
            q = gl.load(q_ptrs, mask=q_mask, other=0.0)
            # The previous pass's MMAs have completed (waited for below);
            # every warp must be past them before the buffers are rewritten.
            gl.barrier()
            q_smem.store(q)

            # Copies of key tiles 0 and 1 in flight; tile 0 converted into
            # buffer 0.
            _copy_kv_tile(
                k_raw.index(0), k_head, bt_row, lo, hi, stride_k_blk,
                stride_k_slot, PAGE_SIZE, BLOCK_N, HEAD_DIM, kv_layout,
            )  # fmt: skip
            _copy_kv_tile(
                v_raw.index(0), v_head, bt_row, lo, hi, stride_v_blk,
                stride_v_slot, PAGE_SIZE, BLOCK_N, HEAD_DIM, kv_layout,
            )  # fmt: skip
            async_copy.commit_group()
            _copy_kv_tile(
                k_raw.index(1), k_head, bt_row, lo + BLOCK_N, hi, stride_k_blk,
                stride_k_slot, PAGE_SIZE, BLOCK_N, HEAD_DIM, kv_layout,
            )  # fmt: skip
            _copy_kv_tile(
                v_raw.index(1), v_head, bt_row, lo + BLOCK_N, hi, stride_v_blk,
                stride_v_slot, PAGE_SIZE, BLOCK_N, HEAD_DIM, kv_layout,
            )  # fmt: skip
            async_copy.commit_group()
            async_copy.wait_group(1)
            k_tile = k_raw.index(0).load(kv_layout)
            v_tile = v_raw.index(0).load(kv_layout)
            k_smem.index(0).store(_to_mma_dtype(k_tile, dtype, KV_FP8))
            v_smem.index(0).store(_to_mma_dtype(v_tile, dtype, KV_FP8))
            fence_async_shared()
            gl.barrier()

            m_i = gl.full(
                [BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout)
            )
            l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
            acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
            for t in range(0, n_tiles):
                buf = t % 2
                start = lo + t * BLOCK_N
                s = warpgroup_mma(
                    q_smem,
                    k_smem.index(buf).permute((1, 0)),
                    gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout),
                    use_acc=False,
                    is_async=True,
                )
                # While the tensor cores work: the copy of tile t + 2 into
                # tile t's slot (read back in the previous iteration), then
                # tile t + 1 converted into the other buffer (its last
                # readers, tile t - 1's MMAs, have completed).
                _copy_kv_tile(
                    k_raw.index(buf), k_head, bt_row, start + 2 * BLOCK_N, hi,
                    stride_k_blk, stride_k_slot, PAGE_SIZE, BLOCK_N, HEAD_DIM,
                    kv_layout,
                )  # fmt: skip
                _copy_kv_tile(
                    v_raw.index(buf), v_head, bt_row, start + 2 * BLOCK_N, hi,
                    stride_v_blk, stride_v_slot, PAGE_SIZE, BLOCK_N, HEAD_DIM,
                    kv_layout,
                )  # fmt: skip
                async_copy.commit_group()
                async_copy.wait_group(1)
                k_tile = k_raw.index(1 - buf).load(kv_layout)
                v_tile = v_raw.index(1 - buf).load(kv_layout)
                k_smem.index(1 - buf).store(_to_mma_dtype(k_tile, dtype, KV_FP8))
                v_smem.index(1 - buf).store(_to_mma_dtype(v_tile, dtype, KV_FP8))
                s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))

                # Online softmax in base 2; every tile holds a valid key.
                s = s * score_scale
                key_ok = gl.expand_dims(start + offs_ns < hi, 0)
                s = gl.where(key_ok, s, float("-inf"))
                m_new = gl.maximum(m_i, gl.max(s, axis=1))
                alpha = gl.exp2(m_i - m_new)
                p = gl.exp2(s - gl.expand_dims(m_new, 1))
                l_i = l_i * alpha + gl.sum(p, axis=1)
                m_i = m_new
                alpha_o = gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))
                acc = acc * gl.expand_dims(alpha_o, 1)
                p_op = gl.convert_layout(p.to(dtype), p_layout)
                acc = warpgroup_mma(p_op, v_smem.index(buf), acc, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
                # The stores into the other buffer become visible to the
                # next iteration's MMAs (async proxy), for every warp.
                fence_async_shared()
                gl.barrier()

            l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
            result = acc / gl.expand_dims(l_o, 1)
            if KV_FP8:
                result = result * gl.load(v_scale_ptr)
            q_idx_o = q_base + rows_o // GROUP
            head_o = kv_head * GROUP + rows_o % GROUP
            tok_o = (q_first + q_idx_o).to(gl.int64)
            o_ptrs = (
                out_ptr
                + gl.expand_dims(tok_o * stride_o_t + head_o * stride_o_h, 1)
                + gl.expand_dims(offs_do, 0)
            )
            o_mask = gl.expand_dims(q_idx_o < num_q, 1) & gl.expand_dims(
                offs_do < HEAD_DIM, 0
            )
            gl.store(o_ptrs, result.to(dtype), mask=o_mask)


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
        BLOCK_N=64,
        HEAD_DIM=head_dim,
        PAGE_SIZE=k_cache.shape[1],
        HAS_WINDOW=sliding_window is not None,
        KV_FP8=kv_fp8,
    )
    return args, constants


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
    warp_specialized=False,
    programs_per_sm=None,
    worker_regs=112,
    maxnreg=128,
):
    """One of the Gluon kernels on a Hopper GPU, for tiles of 64 rows
    (``nH / nKV`` must divide 64). fp8 scales must be float32 device
    tensors. Only the checks below (experimental; ``fixed_history_attention``
    checks its inputs fully).

    ``warp_specialized``: ``fixed_history_ws_kernel`` (a loading and a
    multiplying warpgroup per program; ``worker_regs`` registers per thread
    for the loading one and ``maxnreg`` for the program at launch) instead of
    ``fixed_history_wgmma_kernel``. ``programs_per_sm``: the persistent
    grid's programs per SM (default 2; the grid is never larger than the
    number of (request, KV head) items)."""
    num_reqs = context_lens.shape[0]
    num_heads, num_kv_heads = q.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    if 64 % group:
        raise ValueError(f"the query heads per KV head ({group}) must divide 64")
    if k_cache.stride(3) != 1 or v_cache.stride(3) != 1 or q.stride(2) != 1:
        raise ValueError("q and the K/V caches need a unit last stride")
    if k_cache.dtype == torch.float8_e4m3fn and not (
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
        block_q=64 // group,
    )
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    per_sm = 2 if programs_per_sm is None else programs_per_sm
    grid = (max(1, min(num_reqs * num_kv_heads, per_sm * sms)),)
    if warp_specialized:
        fixed_history_ws_kernel[grid](
            *args,
            **constants,
            WORKER_REGS=[worker_regs],
            num_warps=4,
            maxnreg=maxnreg,
        )
    else:
        fixed_history_wgmma_kernel[grid](*args, **constants, num_warps=4)
    return out


# ---------------------------------------------------------------------------
# Warp-specialized variant: 4 warps load and convert, 4 warps multiply.
# ---------------------------------------------------------------------------


@gluon.jit
def _item_range(
    item,
    context_lens_ptr,
    query_start_loc_ptr,
    window,
    HAS_WINDOW: gl.constexpr,
    NUM_KV_HEADS: gl.constexpr,
):
    """(request, KV head, first query row, query count, key range lo..hi) of
    an item."""
    kv_head = item % NUM_KV_HEADS
    req = item // NUM_KV_HEADS
    q_first = gl.load(query_start_loc_ptr + req)
    num_q = gl.load(query_start_loc_ptr + req + 1) - q_first
    ctx_len = gl.load(context_lens_ptr + req)
    hi = ctx_len + num_q
    lo = 0
    if HAS_WINDOW:
        lo = gl.maximum(ctx_len - window, 0)
    return req, kv_head, q_first, num_q, lo, hi


@gluon.jit
def _ws_load_partition(
    k_raw, v_raw, k_smem, v_smem, ready, empty,
    k_ptr, v_ptr, block_table_ptr, context_lens_ptr, query_start_loc_ptr,
    window, num_reqs,
    stride_k_blk, stride_k_slot, stride_k_head,
    stride_v_blk, stride_v_slot, stride_v_head, stride_bt,
    NUM_KV_HEADS: gl.constexpr, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr, HAS_WINDOW: gl.constexpr,
    KV_FP8: gl.constexpr, NUM_BUF: gl.constexpr,
):  # fmt: skip
    """The producer: for every key tile of every item and query pass, in the
    consumer's order, copy the tile (fp8 or 16-bit) into a staging slot one
    tile ahead, convert it to q's dtype and store it into ring buffer
    ``it % NUM_BUF`` once the consumer has released it."""
    dtype: gl.constexpr = k_smem.dtype
    KV_VEC: gl.constexpr = 16 if KV_FP8 else 8
    KV_TPW_D: gl.constexpr = HEAD_DIM // KV_VEC
    kv_layout: gl.constexpr = gl.BlockedLayout(
        [1, KV_VEC], [32 // KV_TPW_D, KV_TPW_D], [4, 1], [1, 0]
    )
    it = 0
    num_items = num_reqs * NUM_KV_HEADS
    for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
        req, kv_head, q_first, num_q, lo, hi = _item_range(
            item, context_lens_ptr, query_start_loc_ptr, window, HAS_WINDOW,
            NUM_KV_HEADS,
        )  # fmt: skip
        n_tiles = gl.cdiv(hi - lo, BLOCK_N)
        bt_row = block_table_ptr + req.to(gl.int64) * stride_bt
        k_head = k_ptr + kv_head.to(gl.int64) * stride_k_head
        v_head = v_ptr + kv_head.to(gl.int64) * stride_v_head
        for _pass in range(0, num_q, BLOCK_Q):
            _copy_kv_tile(
                k_raw.index(0), k_head, bt_row, lo, hi, stride_k_blk,
                stride_k_slot, PAGE_SIZE, BLOCK_N, HEAD_DIM, kv_layout,
            )  # fmt: skip
            _copy_kv_tile(
                v_raw.index(0), v_head, bt_row, lo, hi, stride_v_blk,
                stride_v_slot, PAGE_SIZE, BLOCK_N, HEAD_DIM, kv_layout,
            )  # fmt: skip
            async_copy.commit_group()
            for t in range(0, n_tiles):
                slot = t % 2
                start = lo + t * BLOCK_N
                # Tile t + 1 into the other slot (zeros past the range).
                _copy_kv_tile(
                    k_raw.index(1 - slot), k_head, bt_row, start + BLOCK_N, hi,
                    stride_k_blk, stride_k_slot, PAGE_SIZE, BLOCK_N, HEAD_DIM,
                    kv_layout,
                )  # fmt: skip
                _copy_kv_tile(
                    v_raw.index(1 - slot), v_head, bt_row, start + BLOCK_N, hi,
                    stride_v_blk, stride_v_slot, PAGE_SIZE, BLOCK_N, HEAD_DIM,
                    kv_layout,
                )  # fmt: skip
                async_copy.commit_group()
                async_copy.wait_group(1)
                k_tile = _to_mma_dtype(k_raw.index(slot).load(kv_layout), dtype, KV_FP8)
                v_tile = _to_mma_dtype(v_raw.index(slot).load(kv_layout), dtype, KV_FP8)
                buf = it % NUM_BUF
                # Free once the consumer's MMAs on its last tile completed
                # (the first round passes: parity 1 precedes a new barrier).
                mbarrier.wait(empty.index(buf), ((it // NUM_BUF) & 1) ^ 1)
                k_smem.index(buf).store(k_tile)
                v_smem.index(buf).store(v_tile)
                fence_async_shared()
                mbarrier.arrive(ready.index(buf), count=1)
                it += 1
            # The copy past the last tile must land before slot 0 is reused.
            async_copy.wait_group(0)


@gluon.jit
def _ws_mma_partition(
    q_smem, k_smem, v_smem, ready, empty,
    q_ptr, out_ptr, context_lens_ptr, query_start_loc_ptr, k_scale_ptr,
    v_scale_ptr, qk_scale, window, num_reqs,
    stride_q_t, stride_q_h, stride_o_t, stride_o_h,
    NUM_KV_HEADS: gl.constexpr, GROUP: gl.constexpr, BLOCK_Q: gl.constexpr,
    BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, HAS_WINDOW: gl.constexpr,
    KV_FP8: gl.constexpr, NUM_BUF: gl.constexpr,
):  # fmt: skip
    """The consumer (one warpgroup): q into shared memory, then per key tile
    ``S = Q K^T``, the online softmax and ``O += P V``, releasing each ring
    buffer when its MMAs have completed; the normalized output at the end."""
    BLOCK_M: gl.constexpr = BLOCK_Q * GROUP
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(
        operand_index=0, parent=o_layout, k_width=2
    )
    Q_TPW_D: gl.constexpr = HEAD_DIM // 8
    q_layout: gl.constexpr = gl.BlockedLayout(
        [1, 8], [32 // Q_TPW_D, Q_TPW_D], [4, 1], [1, 0]
    )
    score_scale = qk_scale
    if KV_FP8:
        score_scale = qk_scale * gl.load(k_scale_ptr)
    rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, q_layout))
    offs_dq = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, q_layout))
    rows_o = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, o_layout))
    offs_do = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    offs_ns = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    it = 0
    num_items = num_reqs * NUM_KV_HEADS
    for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
        req, kv_head, q_first, num_q, lo, hi = _item_range(
            item, context_lens_ptr, query_start_loc_ptr, window, HAS_WINDOW,
            NUM_KV_HEADS,
        )  # fmt: skip
        n_tiles = gl.cdiv(hi - lo, BLOCK_N)
        for q_base in range(0, num_q, BLOCK_Q):
            q_idx = q_base + rows // GROUP
            head = kv_head * GROUP + rows % GROUP
            tok = (q_first + q_idx).to(gl.int64)
            q_ptrs = (
                q_ptr
                + gl.expand_dims(tok * stride_q_t + head * stride_q_h, 1)
                + gl.expand_dims(offs_dq, 0)
            )
            q_mask = gl.expand_dims(q_idx < num_q, 1) & gl.expand_dims(
                offs_dq < HEAD_DIM, 0
            )
            q = gl.load(q_ptrs, mask=q_mask, other=0.0)
            gl.barrier()  # the previous pass's MMAs are done with q_smem
            q_smem.store(q)
            fence_async_shared()
            gl.barrier()

            m_i = gl.full(
                [BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout)
            )
            l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
            acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
            for t in range(0, n_tiles):
                buf = it % NUM_BUF
                mbarrier.wait(ready.index(buf), (it // NUM_BUF) & 1)
                s = warpgroup_mma(
                    q_smem,
                    k_smem.index(buf).permute((1, 0)),
                    gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout),
                    use_acc=False,
                    is_async=True,
                )
                s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
                s = s * score_scale
                key_ok = gl.expand_dims(lo + t * BLOCK_N + offs_ns < hi, 0)
                s = gl.where(key_ok, s, float("-inf"))
                m_new = gl.maximum(m_i, gl.max(s, axis=1))
                alpha = gl.exp2(m_i - m_new)
                p = gl.exp2(s - gl.expand_dims(m_new, 1))
                l_i = l_i * alpha + gl.sum(p, axis=1)
                m_i = m_new
                alpha_o = gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))
                acc = acc * gl.expand_dims(alpha_o, 1)
                p_op = gl.convert_layout(p.to(dtype), p_layout)
                acc = warpgroup_mma(p_op, v_smem.index(buf), acc, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
                mbarrier.arrive(empty.index(buf), count=1)
                it += 1

            l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
            result = acc / gl.expand_dims(l_o, 1)
            if KV_FP8:
                result = result * gl.load(v_scale_ptr)
            q_idx_o = q_base + rows_o // GROUP
            head_o = kv_head * GROUP + rows_o % GROUP
            tok_o = (q_first + q_idx_o).to(gl.int64)
            o_ptrs = (
                out_ptr
                + gl.expand_dims(tok_o * stride_o_t + head_o * stride_o_h, 1)
                + gl.expand_dims(offs_do, 0)
            )
            o_mask = gl.expand_dims(q_idx_o < num_q, 1) & gl.expand_dims(
                offs_do < HEAD_DIM, 0
            )
            gl.store(o_ptrs, result.to(dtype), mask=o_mask)


@gluon.jit
def fixed_history_ws_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, block_table_ptr, context_lens_ptr,
    query_start_loc_ptr, k_scale_ptr, v_scale_ptr, qk_scale, window, num_reqs,
    stride_q_t, stride_q_h, stride_k_blk, stride_k_slot, stride_k_head,
    stride_v_blk, stride_v_slot, stride_v_head, stride_o_t, stride_o_h,
    stride_bt,
    NUM_KV_HEADS: gl.constexpr, GROUP: gl.constexpr, BLOCK_Q: gl.constexpr,
    BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr,
    HAS_WINDOW: gl.constexpr, KV_FP8: gl.constexpr, WORKER_REGS: gl.constexpr,
    num_warps: gl.constexpr,
):  # fmt: skip
    """The same computation as ``fixed_history_wgmma_kernel``, with the
    loading and converting in a second warpgroup (``gl.warp_specialize``)
    that runs up to ``NUM_BUF`` tiles ahead of the multiplying one."""
    NUM_BUF: gl.constexpr = 2
    BLOCK_M: gl.constexpr = BLOCK_Q * GROUP
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    kv_dtype: gl.constexpr = k_ptr.dtype.element_ty
    tile_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
        [BLOCK_N, HEAD_DIM], dtype
    )
    q_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
        [BLOCK_M, HEAD_DIM], dtype
    )
    raw_smem: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])
    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], q_smem_layout)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_N, HEAD_DIM], tile_smem)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_N, HEAD_DIM], tile_smem)
    k_raw = gl.allocate_shared_memory(kv_dtype, [2, BLOCK_N, HEAD_DIM], raw_smem)
    v_raw = gl.allocate_shared_memory(kv_dtype, [2, BLOCK_N, HEAD_DIM], raw_smem)
    ready = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_BUF):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    gl.warp_specialize(
        [
            (
                _ws_mma_partition,
                (
                    q_smem,
                    k_smem,
                    v_smem,
                    ready,
                    empty,
                    q_ptr,
                    out_ptr,
                    context_lens_ptr,
                    query_start_loc_ptr,
                    k_scale_ptr,
                    v_scale_ptr,
                    qk_scale,
                    window,
                    num_reqs,
                    stride_q_t,
                    stride_q_h,
                    stride_o_t,
                    stride_o_h,
                    NUM_KV_HEADS,
                    GROUP,
                    BLOCK_Q,
                    BLOCK_N,
                    HEAD_DIM,
                    HAS_WINDOW,
                    KV_FP8,
                    NUM_BUF,
                ),
            ),
            (
                _ws_load_partition,
                (
                    k_raw,
                    v_raw,
                    k_smem,
                    v_smem,
                    ready,
                    empty,
                    k_ptr,
                    v_ptr,
                    block_table_ptr,
                    context_lens_ptr,
                    query_start_loc_ptr,
                    window,
                    num_reqs,
                    stride_k_blk,
                    stride_k_slot,
                    stride_k_head,
                    stride_v_blk,
                    stride_v_slot,
                    stride_v_head,
                    stride_bt,
                    NUM_KV_HEADS,
                    BLOCK_Q,
                    BLOCK_N,
                    HEAD_DIM,
                    PAGE_SIZE,
                    HAS_WINDOW,
                    KV_FP8,
                    NUM_BUF,
                ),
            ),
        ],
        [4],
        WORKER_REGS,
    )


__all__ = [
    "fixed_history_attention_wgmma",
    "fixed_history_wgmma_kernel",
    "fixed_history_ws_kernel",
]
