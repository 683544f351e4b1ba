# The 128-row Gluon kernel's multiplying side alone, as it stands on
# 2026-12-03 (twenty-sixth session, a copy of h200-2026-12-03m's): the
# product's two multiplying partitions (_ws_mma_partition: q, fp8 scores,
# the softmax, P V, the output) fed by a partition that reads nothing and
# signals each ring buffer as soon as both partitions have released it, so
# the tiles hold whatever the shared memory held (the output is
# meaningless; only the time counts). Warps and registers as the real
# kernel's (a loading warpgroup of WORKER_REGS registers). Its time is what
# the MMAs and the softmax need at fp8 shape 4, the ceiling of any loader.
# It passes the product partition's P_SMEM argument, which only
# psmem-ovpv.patch adds (the module as it ran): apply it first.
#   PYTHONPATH=/tmp/t371:src python3 mma_probe.py SHAPE_INDEX fp8 'JSON' [graph]
# (JSON: a list of {"block_n", "ring", "overlap", "pingpong", "fp8_pv",
# "narrow_tail", "mma_regs", "worker_regs", "p_smem", "parts"} variants;
# added 2026-12-03n: p_smem, the weights through shared memory; parts,
# the key loop with the MMAs alone, the softmax alone or both)
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from vllm_spark2_5_plugin.ops import fixed_history_gluon as G  # noqa: E402
from vllm_spark2_5_plugin.ops.fixed_history_launch import sm_count  # noqa: E402


@gluon.jit
def _signal_partition(
    ready, empty, context_lens_ptr, query_start_loc_ptr, window, num_reqs,
    NUM_KV_HEADS: gl.constexpr, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
    HAS_WINDOW: gl.constexpr, NUM_BUF: gl.constexpr, ALIGN: gl.constexpr,
):  # fmt: skip
    it = 0
    for item in range(gl.program_id(0), num_reqs * NUM_KV_HEADS, gl.num_programs(0)):
        _, _, _, num_q, _, _, _, n_tiles = G._item_range(
            item, context_lens_ptr, query_start_loc_ptr, window, HAS_WINDOW,
            NUM_KV_HEADS, BLOCK_N, ALIGN,
        )  # fmt: skip
        for _pass in range(0, num_q, BLOCK_Q):
            for _t in range(0, n_tiles):
                buf = it % NUM_BUF
                mbarrier.wait(empty.index(buf), ((it // NUM_BUF) & 1) ^ 1)
                mbarrier.arrive(ready.index(buf), count=1)
                it += 1


@gluon.jit
def _parts_partition(
    q_smem, k_smem, v_smem, ones_smem, ready, empty, context_lens_ptr,
    query_start_loc_ptr, out_ptr, window, num_reqs,
    NUM_KV_HEADS: gl.constexpr, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr, HAS_WINDOW: gl.constexpr, NUM_BUF: gl.constexpr,
    ALIGN: gl.constexpr, PARTS: gl.constexpr,
):  # fmt: skip
    """(PARTS, added 2026-12-03n) one multiplying partition's key loop with
    a part of its work: 1 the MMAs alone (S = Q K^T, P = S rounded to
    float16, O += P V; no softmax), 2 the softmax alone (on scores made in
    registers, no MMA), 3 both (as the product's loop, without the
    narrow tail), 4 both with the softmax's 2^x taken as x / 2 + 1 (no
    MUFU), 5 both with that softmax written out (as 3), 6 as 5 with the
    row sums by the tensor cores (P times a tile of ones, 8 columns, beside
    P V: no FADD chain). q is not loaded (whatever q_smem holds)."""
    dtype: gl.constexpr = v_smem.dtype
    M: gl.constexpr = q_smem.shape[0]
    it = 0
    m_i, l_i, acc = G._softmax_init(M, BLOCK_N, HEAD_DIM, 4, 16)
    row_scale = gl.full([M], 1.0, gl.float32, m_i.type.layout)
    s_layout: gl.constexpr = G._mma_layout(BLOCK_N, 4, 32)
    l_layout: gl.constexpr = G._mma_layout(8, 4)
    acc_l = gl.zeros([M, 8], gl.float32, l_layout)
    for item in range(gl.program_id(0), num_reqs * NUM_KV_HEADS, gl.num_programs(0)):
        _, _, _, num_q, first, lo, hi, n_tiles = G._item_range(
            item, context_lens_ptr, query_start_loc_ptr, window, HAS_WINDOW,
            NUM_KV_HEADS, BLOCK_N, ALIGN,
        )  # fmt: skip
        for _pass in range(0, num_q, BLOCK_Q * 2):
            for t in range(0, n_tiles):
                buf = it % NUM_BUF
                start = first + t * BLOCK_N
                mbarrier.wait(ready.index(buf), (it // NUM_BUF) & 1)
                v_buf = v_smem.index(buf)
                if PARTS == 2:
                    keys = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
                    s = gl.full([M, BLOCK_N], 0.0, gl.float32, s_layout) + (t * 0.25)
                    rows = gl.arange(0, M, layout=gl.SliceLayout(1, s_layout))
                    s = s + gl.expand_dims(keys.to(gl.float32) * 0.01, 0)
                    s = s + gl.expand_dims(rows.to(gl.float32) * 0.03, 1)
                    p_op, m_i, l_i, acc = G._softmax_step(
                        s, m_i, l_i, acc, start, lo, hi, row_scale, dtype
                    )
                    acc = acc + gl.convert_layout(p_op, acc.type.layout).to(gl.float32)
                else:
                    s = G._issue_scores(q_smem, k_smem.index(buf), 4)
                    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
                    if PARTS >= 4:
                        # (4: the softmax with x / 2 + 1 for 2^x, no MUFU;
                        # 5: with exp2, as the product's)
                        s = gl.convert_layout(s, m_i.type.layout.parent)
                        m_new = gl.maximum(m_i, gl.max(s, axis=1) * row_scale)
                        alpha = gl.exp2(m_i - m_new)
                        x = s * gl.expand_dims(row_scale, 1) - gl.expand_dims(m_new, 1)
                        p = x * 0.5 + 1.0 if PARTS == 4 else gl.exp2(x)
                        if PARTS == 6:
                            alpha_l = gl.convert_layout(
                                alpha, gl.SliceLayout(1, l_layout)
                            )
                            acc_l = acc_l * gl.expand_dims(alpha_l, 1)
                        else:
                            l_i = l_i * alpha + gl.sum(p, axis=1)
                        m_i = m_new
                        p_op = gl.convert_layout(
                            p.to(dtype),
                            gl.DotOperandLayout(
                                operand_index=0, parent=acc.type.layout, k_width=2
                            ),
                        )
                        alpha_o = gl.convert_layout(
                            alpha, gl.SliceLayout(1, acc.type.layout)
                        )
                        acc = acc * gl.expand_dims(alpha_o, 1)
                    elif PARTS == 1:
                        p_op = gl.convert_layout(
                            s.to(dtype),
                            gl.DotOperandLayout(
                                operand_index=0, parent=acc.type.layout, k_width=2
                            ),
                        )
                    else:
                        p_op, m_i, l_i, acc = G._softmax_step(
                            s, m_i, l_i, acc, start, lo, hi, row_scale, dtype
                        )
                    acc = warpgroup_mma(p_op, v_buf, acc, is_async=True)
                    if PARTS == 6:
                        p_l = gl.convert_layout(
                            p_op,
                            gl.DotOperandLayout(
                                operand_index=0, parent=l_layout, k_width=2
                            ),
                        )
                        acc_l = warpgroup_mma(p_l, ones_smem, acc_l, is_async=True)
                        acc, acc_l = warpgroup_mma_wait(
                            num_outstanding=0, deps=(acc, acc_l)
                        )
                    else:
                        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
                mbarrier.arrive(empty.index(buf), count=1)
                it += 1
    offs = gl.arange(0, M, layout=gl.SliceLayout(1, acc.type.layout))
    rows_o: gl.constexpr = gl.SliceLayout(1, acc.type.layout)
    r = gl.sum(acc, axis=1) + gl.convert_layout(l_i, rows_o)
    r = r + gl.convert_layout(gl.sum(acc_l, axis=1), rows_o)
    gl.store(out_ptr + gl.program_id(0) * M + offs, r.to(out_ptr.dtype.element_ty))


@gluon.jit
def mma_only_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, block_table_ptr, context_lens_ptr,
    query_start_loc_ptr, k_scale_ptr, v_scale_ptr, qk_scale, window, num_reqs,
    stride_q_t, stride_q_h, stride_k_blk, stride_k_slot, stride_k_head,
    stride_v_blk, stride_v_slot, stride_v_head, stride_o_t, stride_o_h,
    stride_bt,
    NUM_KV_HEADS: gl.constexpr, GROUP: gl.constexpr, BLOCK_Q: gl.constexpr,
    BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr,
    HAS_WINDOW: gl.constexpr, KV_FP8: gl.constexpr, F16_DOTS: gl.constexpr,
    NUM_BUF: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr,
    FP8_PV: gl.constexpr, TAIL_N: gl.constexpr, MMA_REGS: gl.constexpr,
    WORKER_REGS: gl.constexpr, num_warps: gl.constexpr, P_SMEM: gl.constexpr = False,
    PARTS: gl.constexpr = 0,
):  # fmt: skip
    dtype: gl.constexpr = G._mma_dtype(q_ptr.dtype.element_ty, F16_DOTS)
    kv_dtype: gl.constexpr = k_ptr.dtype.element_ty
    PART_Q: gl.constexpr = BLOCK_Q // 2
    PART_M: gl.constexpr = BLOCK_Q * GROUP // 2
    q_smem = gl.allocate_shared_memory(
        kv_dtype, [2, PART_M, HEAD_DIM], G._tile_smem([PART_M, HEAD_DIM], kv_dtype)
    )
    k_smem = gl.allocate_shared_memory(
        kv_dtype,
        [NUM_BUF, BLOCK_N, HEAD_DIM],
        G._tile_smem([BLOCK_N, HEAD_DIM], kv_dtype),
    )
    if FP8_PV:
        v_smem = gl.allocate_shared_memory(
            kv_dtype, [NUM_BUF, HEAD_DIM, BLOCK_N],
            G._tile_smem([HEAD_DIM, BLOCK_N], kv_dtype),
        )  # fmt: skip
    else:
        v_smem = gl.allocate_shared_memory(
            dtype,
            [NUM_BUF, BLOCK_N, HEAD_DIM],
            G._tile_smem([BLOCK_N, HEAD_DIM], dtype),
        )
    ready = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_BUF):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    # P_SMEM: each partition's weights through shared memory (P V with both
    # operands there) instead of registers.
    p_smem = gl.allocate_shared_memory(
        dtype,
        [2 if P_SMEM else 1, PART_M, BLOCK_N],
        G._tile_smem([PART_M, BLOCK_N], dtype),
    )
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    if PINGPONG:
        for i in gl.static_range(2):
            mbarrier.init(turn.index(i), count=1)
        mbarrier.arrive(turn.index(0), count=1)
    if PARTS > 0:
        # PARTS 6: a [BLOCK_N, 8] tile of ones, the B operand of the row sums
        ones_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32, 1], [4, 1], [1, 0])
        ones_smem = gl.allocate_shared_memory(
            dtype,
            [BLOCK_N, 8],
            G._tile_smem([BLOCK_N, 8], dtype),
            gl.full([BLOCK_N, 8], 1.0, dtype, ones_layout),
        )
        fence_async_shared()
        gl.warp_specialize(
            [
                (
                    _parts_partition,
                    (
                        q_smem.index(0), k_smem, v_smem, ones_smem, ready, empty,
                        context_lens_ptr, query_start_loc_ptr, out_ptr, window,
                        num_reqs, NUM_KV_HEADS, BLOCK_Q, BLOCK_N, HEAD_DIM,
                        HAS_WINDOW, NUM_BUF, PAGE_SIZE, PARTS,
                    ),
                ),
                (
                    _parts_partition,
                    (
                        q_smem.index(1), k_smem, v_smem, ones_smem, ready, empty,
                        context_lens_ptr, query_start_loc_ptr, out_ptr, window,
                        num_reqs, NUM_KV_HEADS, BLOCK_Q, BLOCK_N, HEAD_DIM,
                        HAS_WINDOW, NUM_BUF, PAGE_SIZE, PARTS,
                    ),
                ),
                (
                    _signal_partition,
                    (
                        ready, empty, context_lens_ptr, query_start_loc_ptr,
                        window, num_reqs, NUM_KV_HEADS, BLOCK_Q, BLOCK_N,
                        HAS_WINDOW, NUM_BUF, PAGE_SIZE,
                    ),
                ),
            ],
            [4, 4],
            [MMA_REGS, WORKER_REGS],
        )  # fmt: skip
        return
    gl.warp_specialize(
        [
            (
                G._ws_mma_partition,
                (
                    q_smem.index(0), k_smem, v_smem, ready, empty, turn,
                    q_ptr, out_ptr, context_lens_ptr, query_start_loc_ptr,
                    k_scale_ptr, v_scale_ptr, qk_scale, window, num_reqs,
                    stride_q_t, stride_q_h, stride_o_t, stride_o_h,
                    NUM_KV_HEADS, GROUP, PART_Q, BLOCK_N, HEAD_DIM,
                    HAS_WINDOW, KV_FP8, F16_DOTS, NUM_BUF, 4, OVERLAP,
                    False, BLOCK_Q, 0, 0, PINGPONG, PAGE_SIZE, False,
                    p_smem.index(0), None, True, FP8_PV, False, False, TAIL_N,
                    P_SMEM,
                ),
            ),
            (
                G._ws_mma_partition,
                (
                    q_smem.index(1), k_smem, v_smem, ready, empty, turn,
                    q_ptr, out_ptr, context_lens_ptr, query_start_loc_ptr,
                    k_scale_ptr, v_scale_ptr, qk_scale, window, num_reqs,
                    stride_q_t, stride_q_h, stride_o_t, stride_o_h,
                    NUM_KV_HEADS, GROUP, PART_Q, BLOCK_N, HEAD_DIM,
                    HAS_WINDOW, KV_FP8, F16_DOTS, NUM_BUF, 4, OVERLAP,
                    False, BLOCK_Q, PART_Q, 1, PINGPONG, PAGE_SIZE, False,
                    p_smem.index(1 if P_SMEM else 0), None, True, FP8_PV, False,
                    False, TAIL_N, P_SMEM,
                ),
            ),
            (
                _signal_partition,
                (
                    ready, empty, context_lens_ptr, query_start_loc_ptr,
                    window, num_reqs, NUM_KV_HEADS, BLOCK_Q, BLOCK_N,
                    HAS_WINDOW, NUM_BUF, PAGE_SIZE,
                ),
            ),
        ],
        [4, 4],
        [MMA_REGS, WORKER_REGS],
    )  # fmt: skip


def mma_only(q, k, v, bt, ctx, qsl, window, scale, out, k_scale=None,
             v_scale=None, *, block_n=64, ring=4, overlap=False,
             pingpong=False, fp8_pv=False, narrow_tail=True,
             mma_regs=G.MMA_PART_REGS, worker_regs=112, maxnreg=168,
             p_smem=False, parts=0):  # fmt: skip
    group = q.shape[1] // k.shape[2]
    args, constants = G.kernel_arguments(
        q, k, v, bt, ctx, qsl, window, scale, out, k_scale, v_scale,
        block_q=128 // group, block_n=block_n, f16_dots=True,
    )  # fmt: skip
    grid = (max(1, min(ctx.shape[0] * k.shape[2], sm_count(q.device))),)
    mma_only_kernel[grid](
        *args, **constants, NUM_BUF=ring, OVERLAP=overlap, PINGPONG=pingpong,
        FP8_PV=fp8_pv, TAIL_N=G.NARROW_TAIL_KEYS if narrow_tail and not fp8_pv else 0,
        MMA_REGS=mma_regs, WORKER_REGS=worker_regs, num_warps=4, maxnreg=maxnreg,
        P_SMEM=p_smem, PARTS=parts,
    )  # fmt: skip


def main():
    shape, inputs, variants, graph = B.probe_args(sys.argv)
    raw, q, k, v, bt, ctx, qsl, sc = inputs
    R, L, Bq, W, nH, nKV, D = shape
    out = torch.empty_like(q)
    print(f"shape {shape}, 128-row tiles, multiplying side alone", flush=True)

    def call(**var):
        mma_only(q, k, v, bt, ctx, qsl, W, D**-0.5, out, **sc, **var)

    for var, t in B.time_variants(call, variants, graph=graph):
        if isinstance(t, Exception):
            print(f"  error {type(t).__name__}: {str(t)[:200]}  {var}", flush=True)
        else:
            print(f"  MMAs and softmax only {t:7.1f} us  {var}", flush=True)


if __name__ == "__main__":
    main()
