# The 128-row kernel's key loop at fp8 shape 4 with nothing loaded, in
# variants of its softmax and of the two multiplying partitions' order, and
# a timeline of one SM (twenty-seventh session, 2026-12-04). Like
# h200-2026-12-03n/mma_probe.py's `parts` (two 64-row partitions, 128-key
# tiles, a partition that signals each ring buffer as soon as both have
# released it; q and the tiles hold whatever the shared memory held, so
# only the time counts), with:
#   sums  the row sums by the tensor cores: P times a K-major [8, BLOCK_N]
#         tile of ones (the B operand as K's, permuted), beside P V; the
#         softmax adds no row sums;
#   poly  a share (1/poly) of the exponentials on the FMA pipe: 2^x as
#         2^j * p(f), j = x rounded by adding 1.5 * 2^23, p of degree 3
#         (relative error 1.0e-4 on [-0.5, 0.5]), the rest by MUFU.EX2;
#   turns the partitions take turns at the tensor cores (P V of tile t and
#         S of tile t + 1 issued as one batch), as h200-2026-12-03n's
#         turns.patch did in the product;
#   qreg  q from registers (S = Q K^T with A in registers);
#   keep_p (turns) the weights' registers held until their P V completed
#         (in the wait's deps; without it their registers may be reused
#         while the MMA still reads them: times only);
#   lazy  the exponentials against the row maxima so far, the tile's
#         maxima found beside them; the output and sums rescaled (and the
#         tile's weights taken again) only where a row's maximum grew by
#         more than 8 (log2; a branch on the partition's largest growth);
#   half  (twenty-eighth session) S accumulated in float16 by the fp8
#         MMAs and the softmax in packed float16 pairs (max, fma and sum
#         two values per instruction; ex2.approx.f16x2), q scaled so that
#         no sum can overflow;
#   trace clock64 stamps of program 0's partitions at each of the first
#         pass's tiles 8-23: before the ring wait, S issued, S done
#         (softmax starts), softmax done (P V issued), P V done.
#   PYTHONPATH=/tmp/t371:src python3 loop_probe.py 3 fp8 'JSON' graph [trace]
# (JSON: a list of {"sums", "poly", "turns", "mma_regs", "worker_regs"})
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

TRACE_FROM = gl.constexpr(8)
TRACE_TILES = gl.constexpr(16)


@gluon.jit
def _exp2_fma(x):
    """2^x (x <= 0) without MUFU: x = j + f with j the nearest integer
    (x + 1.5 * 2^23 puts it in the low mantissa bits) and f in [-0.5, 0.5],
    2^f by a cubic, 2^j added to its exponent bits."""
    x = gl.maximum(x, -127.0)
    t = x + 12582912.0
    f = x - (t - 12582912.0)
    p = f * 0.05500831 + 0.24220971
    p = p * f + 0.69328286
    p = p * f + 1.0
    bits = p.to(gl.int32, bitcast=True) + (t.to(gl.int32, bitcast=True) << 23)
    return bits.to(gl.float32, bitcast=True)


@gluon.jit
def _split_cols(x, BLOCK: gl.constexpr):
    """``x`` [M, N] split into the columns whose bit ``BLOCK`` (1 or 8) is 0
    and those where it is 1; both sets sit in each thread's registers of an
    MMA layout (no data moves)."""
    M: gl.constexpr = x.shape[0]
    N: gl.constexpr = x.shape[1]
    y = gl.permute(gl.reshape(x, [M, N // (2 * BLOCK), 2, BLOCK]), (0, 1, 3, 2))
    a, b = gl.split(y)
    return gl.reshape(a, [M, N // 2]), gl.reshape(b, [M, N // 2])


@gluon.jit
def _join_cols(a, b, BLOCK: gl.constexpr):
    """The inverse of ``_split_cols``."""
    M: gl.constexpr = a.shape[0]
    H: gl.constexpr = a.shape[1]
    y = gl.join(
        gl.reshape(a, [M, H // BLOCK, BLOCK]), gl.reshape(b, [M, H // BLOCK, BLOCK])
    )
    return gl.reshape(gl.permute(y, (0, 1, 3, 2)), [M, 2 * H])


@gluon.jit
def _exp2_shared(x, POLY: gl.constexpr):
    """2^x with 1/POLY of the values by ``_exp2_fma`` (POLY 0: none)."""
    if POLY == 2:
        a, b = _split_cols(x, 1)
        p = _join_cols(gl.exp2(a), _exp2_fma(b), 1)
    elif POLY == 4:
        a, b = _split_cols(x, 8)
        b1, b2 = _split_cols(b, 1)
        p = _join_cols(gl.exp2(a), _join_cols(gl.exp2(b1), _exp2_fma(b2), 1), 8)
    else:
        p = gl.exp2(x)
    return gl.convert_layout(p, x.type.layout)


@gluon.jit
def _signal_partition(
    ready, empty, context_lens_ptr, query_start_loc_ptr, window, num_reqs,
    NUM_KV_HEADS: gl.constexpr, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
    NUM_BUF: gl.constexpr, ALIGN: gl.constexpr,
):  # fmt: skip
    it = 0
    for item in range(gl.program_id(0), num_reqs * NUM_KV_HEADS, gl.num_programs(0)):
        _, _, _, num_q, _, _, _, n_tiles = G._item_range(
            item, context_lens_ptr, query_start_loc_ptr, window, True,
            NUM_KV_HEADS, BLOCK_N, ALIGN,
        )  # fmt: skip
        for _pass in range(0, num_q, BLOCK_Q):
            for _t in range(0, n_tiles):
                buf = it % NUM_BUF
                mbarrier.wait(empty.index(buf), ((it // NUM_BUF) & 1) ^ 1)
                mbarrier.arrive(ready.index(buf), count=1)
                it += 1


@gluon.jit
def _stamp(trace_ptr, t, i: gl.constexpr, ME: gl.constexpr, TRACE: gl.constexpr):
    """clock64 as stamp ``i`` of tile ``t`` (program 0, tiles TRACE_FROM ..)."""
    if TRACE:
        c = G._clock()
        tile = t - TRACE_FROM
        if (gl.program_id(0) == 0) & (tile >= 0) & (tile < TRACE_TILES):
            gl.store(trace_ptr + ((ME * TRACE_TILES + tile) * 5 + i), c)


@gluon.jit
def _weights_lazy(s, m_i, l_i, acc, acc_l, row_scale, dtype: gl.constexpr):
    """(LAZY) the exponentials against the maxima so far (``m_i``, kept
    while no row's scores exceed it by more than 2^8: the weights stay
    below 256), the tile's maxima found beside them; only where some row
    of the partition grew by more than that are the weights taken again
    against the new maxima and the sums and output rescaled."""
    scale = gl.expand_dims(row_scale, 1)
    p = gl.exp2(s * scale - gl.expand_dims(m_i, 1))
    m_tile = gl.max(s, axis=1) * row_scale
    if gl.max(m_tile - m_i, axis=0) > 8.0:
        m_new = gl.maximum(m_i, m_tile)
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(s * scale - gl.expand_dims(m_new, 1))
        l_i = l_i * alpha
        a_o = gl.convert_layout(alpha, gl.SliceLayout(1, acc.type.layout))
        acc = acc * gl.expand_dims(a_o, 1)
        m_i = m_new
    l_i = l_i + gl.sum(p, axis=1)
    p_op = gl.convert_layout(
        p.to(dtype),
        gl.DotOperandLayout(operand_index=0, parent=acc.type.layout, k_width=2),
    )
    return p_op, m_i, l_i, acc, acc_l


@gluon.jit
def _hfma2(a, b, c):
    """a * b + c, float16, two values per instruction."""
    return gl.inline_asm_elementwise(
        "fma.rn.f16x2 $0, $1, $2, $3;", "=r,r,r,r", [a, b, c],
        dtype=gl.float16, is_pure=True, pack=2,
    )  # fmt: skip


@gluon.jit
def _hex2(x):
    """2^x, float16, two values per instruction."""
    return gl.inline_asm_elementwise(
        "ex2.approx.f16x2 $0, $1;", "=r,r", [x], dtype=gl.float16, is_pure=True,
        pack=2,
    )  # fmt: skip


@gluon.jit
def _hadd2(a, b):
    """a + b, float16, two values per instruction."""
    return gl.inline_asm_elementwise(
        "add.rn.f16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=gl.float16,
        is_pure=True, pack=2,
    )  # fmt: skip


@gluon.jit
def _half_row_sums(p):
    """The row sums of ``p`` (float16, an MMA layout): column halves added
    in float16 pairs (each thread holds columns c and c + N / 2, both of a
    pair), down to 8 columns, then in float32."""
    M: gl.constexpr = p.shape[0]
    N: gl.constexpr = p.shape[1]
    if N > 8:
        x = gl.permute(gl.reshape(p, [M, 2, N // 2]), (0, 2, 1))
        a, b = gl.split(x)
        return _half_row_sums(_hadd2(a, b))
    else:
        return gl.sum(p.to(gl.float32), axis=1)


@gluon.jit
def _weights_half(s, m_i, l_i, acc, acc_l, row_scale, dtype: gl.constexpr):
    """(HALF) the softmax on float16 scores: the tile's maxima and sums
    and the exponents in float16 pairs, the maxima and sums kept in float32
    (the maxima rounded to float16, the values the exponents used)."""
    m_tile = gl.max(s, axis=1).to(gl.float32)
    m_new = gl.maximum(m_i, m_tile * row_scale).to(gl.float16)
    alpha = gl.exp2(m_i - m_new.to(gl.float32))
    scale = gl.expand_dims(row_scale.to(gl.float16), 1)
    p = _hex2(_hfma2(s, scale, -gl.expand_dims(m_new, 1)))
    l_i = l_i * alpha + gl.convert_layout(_half_row_sums(p), l_i.type.layout)
    p_op = gl.convert_layout(
        p, gl.DotOperandLayout(operand_index=0, parent=acc.type.layout, k_width=2)
    )
    a_o = gl.convert_layout(alpha, gl.SliceLayout(1, acc.type.layout))
    return p_op, m_new.to(gl.float32), l_i, acc * gl.expand_dims(a_o, 1), acc_l


@gluon.jit
def _weights(s, m_i, l_i, acc, acc_l, row_scale, dtype: gl.constexpr,
             SUMS: gl.constexpr, POLY: gl.constexpr, LAZY: gl.constexpr,
             HALF: gl.constexpr = False):  # fmt: skip
    """The softmax of one tile's scores as the product's (no masking), with
    the sums by the tensor cores (SUMS: only ``acc_l`` rescaled) and a share
    of the exponentials on the FMA pipe (POLY)."""
    s = gl.convert_layout(s, m_i.type.layout.parent)
    if HALF:
        return _weights_half(s, m_i, l_i, acc, acc_l, row_scale, dtype)
    if LAZY:
        return _weights_lazy(s, m_i, l_i, acc, acc_l, row_scale, dtype)
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * row_scale)
    alpha = gl.exp2(m_i - m_new)
    p = _exp2_shared(s * gl.expand_dims(row_scale, 1) - gl.expand_dims(m_new, 1), POLY)
    if SUMS:
        a_l = gl.convert_layout(alpha, gl.SliceLayout(1, acc_l.type.layout))
        acc_l = acc_l * gl.expand_dims(a_l, 1)
    else:
        l_i = l_i * alpha + gl.sum(p, axis=1)
    p_op = gl.convert_layout(
        p.to(dtype),
        gl.DotOperandLayout(operand_index=0, parent=acc.type.layout, k_width=2),
    )
    a_o = gl.convert_layout(alpha, gl.SliceLayout(1, acc.type.layout))
    return p_op, m_new, l_i, acc * gl.expand_dims(a_o, 1), acc_l


@gluon.jit
def _scores(q, q_smem, k_buf, QREG: gl.constexpr, HALF: gl.constexpr = False):
    """S = Q K^T started: q from shared memory, or (QREG) from registers;
    (HALF) accumulated in float16."""
    if HALF:
        M: gl.constexpr = q_smem.shape[0]
        N: gl.constexpr = k_buf.shape[0]
        s = gl.zeros([M, N], gl.float16, G._mma_layout(N, 4, 32))
        return warpgroup_mma(
            q_smem, k_buf.permute((1, 0)), s, use_acc=False, is_async=True
        )
    elif QREG:
        M: gl.constexpr = q.shape[0]
        N: gl.constexpr = k_buf.shape[0]
        s = gl.zeros([M, N], gl.float32, G._mma_layout(N, 4, 32))
        return warpgroup_mma(q, k_buf.permute((1, 0)), s, use_acc=False, is_async=True)
    else:
        return G._issue_scores(q_smem, k_buf, 4)


@gluon.jit
def _issue_pv(p_op, v_buf, ones_t, acc, acc_l, SUMS: gl.constexpr):
    acc = warpgroup_mma(p_op, v_buf, acc, is_async=True)
    if SUMS:
        p_l = gl.convert_layout(
            p_op,
            gl.DotOperandLayout(operand_index=0, parent=acc_l.type.layout, k_width=2),
        )
        acc_l = warpgroup_mma(p_l, ones_t, acc_l, is_async=True)
    return acc, acc_l


@gluon.jit
def _loop_partition(
    q_smem, k_smem, v_smem, ones_smem, ready, empty, turn, context_lens_ptr,
    query_start_loc_ptr, out_ptr, trace_ptr, score_scale, window, num_reqs,
    NUM_KV_HEADS: gl.constexpr, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr, NUM_BUF: gl.constexpr, ALIGN: gl.constexpr,
    ME: gl.constexpr, SUMS: gl.constexpr, POLY: gl.constexpr,
    TURNS: gl.constexpr, TRACE: gl.constexpr, QREG: gl.constexpr,
    KEEP_P: gl.constexpr, LAZY: gl.constexpr, HALF: gl.constexpr,
):  # fmt: skip
    dtype: gl.constexpr = v_smem.dtype
    M: gl.constexpr = q_smem.shape[0]
    it = 0
    k = 0
    row_scale = (
        gl.full([M], 1.0, gl.float32, gl.SliceLayout(1, G._mma_layout(BLOCK_N, 4)))
        * score_scale
    )
    l_layout: gl.constexpr = G._mma_layout(8, 4)
    ones_t = ones_smem.permute((1, 0))
    r = gl.zeros([M], gl.float32, gl.SliceLayout(1, G._mma_layout(HEAD_DIM, 4)))
    for item in range(gl.program_id(0), num_reqs * NUM_KV_HEADS, gl.num_programs(0)):
        _, _, _, num_q, _, _, _, n_tiles = G._item_range(
            item, context_lens_ptr, query_start_loc_ptr, window, True,
            NUM_KV_HEADS, BLOCK_N, ALIGN,
        )  # fmt: skip
        for _pass in range(0, num_q, BLOCK_Q * 2):
            m_i, l_i, acc = G._softmax_init(M, BLOCK_N, HEAD_DIM, 4, 16)
            acc_l = gl.zeros([M, 8], gl.float32, l_layout)
            if QREG:
                q = q_smem.load(
                    gl.DotOperandLayout(
                        operand_index=0, parent=G._mma_layout(BLOCK_N, 4, 32), k_width=4
                    )
                )
            else:
                q = 0
            if TURNS:
                G._wait_tile(ready, it, NUM_BUF, False)
                G._take_turn(turn, k, ME, True)
                s = _scores(q, q_smem, k_smem.index(it % NUM_BUF), QREG, HALF)
                k = G._pass_turn(turn, k, ME, True)
                s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
                for t in range(0, n_tiles):
                    buf = it % NUM_BUF
                    _stamp(trace_ptr, t, 2, ME, TRACE)
                    p_op, m_i, l_i, acc, acc_l = _weights(
                        s, m_i, l_i, acc, acc_l, row_scale, dtype, SUMS, POLY, LAZY,
                        HALF,
                    )  # fmt: skip
                    _stamp(trace_ptr, t, 3, ME, TRACE)
                    if t + 1 < n_tiles:
                        _stamp(trace_ptr, t, 0, ME, TRACE)
                        G._wait_tile(ready, it + 1, NUM_BUF, False)
                        _stamp(trace_ptr, t, 1, ME, TRACE)
                        G._take_turn(turn, k, ME, True)
                        acc, acc_l = _issue_pv(
                            p_op, v_smem.index(buf), ones_t, acc, acc_l, SUMS
                        )
                        s = _scores(
                            q, q_smem, k_smem.index((it + 1) % NUM_BUF), QREG, HALF
                        )
                        k = G._pass_turn(turn, k, ME, True)
                        if KEEP_P:
                            acc, acc_l, s, p_op = warpgroup_mma_wait(
                                num_outstanding=0, deps=(acc, acc_l, s, p_op)
                            )
                        else:
                            acc, acc_l, s = warpgroup_mma_wait(
                                num_outstanding=0, deps=(acc, acc_l, s)
                            )
                    else:
                        G._take_turn(turn, k, ME, True)
                        acc, acc_l = _issue_pv(
                            p_op, v_smem.index(buf), ones_t, acc, acc_l, SUMS
                        )
                        k = G._pass_turn(turn, k, ME, True)
                        acc, acc_l = warpgroup_mma_wait(
                            num_outstanding=0, deps=(acc, acc_l)
                        )
                    _stamp(trace_ptr, t, 4, ME, TRACE)
                    mbarrier.arrive(empty.index(buf), count=1)
                    it += 1
            else:
                for t in range(0, n_tiles):
                    buf = it % NUM_BUF
                    _stamp(trace_ptr, t, 0, ME, TRACE)
                    G._wait_tile(ready, it, NUM_BUF, False)
                    _stamp(trace_ptr, t, 1, ME, TRACE)
                    s = _scores(q, q_smem, k_smem.index(buf), QREG, HALF)
                    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
                    _stamp(trace_ptr, t, 2, ME, TRACE)
                    p_op, m_i, l_i, acc, acc_l = _weights(
                        s, m_i, l_i, acc, acc_l, row_scale, dtype, SUMS, POLY, LAZY,
                        HALF,
                    )  # fmt: skip
                    _stamp(trace_ptr, t, 3, ME, TRACE)
                    acc, acc_l = _issue_pv(
                        p_op, v_smem.index(buf), ones_t, acc, acc_l, SUMS
                    )
                    acc, acc_l = warpgroup_mma_wait(
                        num_outstanding=0, deps=(acc, acc_l)
                    )
                    _stamp(trace_ptr, t, 4, ME, TRACE)
                    mbarrier.arrive(empty.index(buf), count=1)
                    it += 1
            rows_o: gl.constexpr = gl.SliceLayout(1, acc.type.layout)
            r += gl.sum(acc, axis=1) + gl.convert_layout(l_i, rows_o)
            r += gl.convert_layout(gl.sum(acc_l, axis=1), rows_o)
    offs = gl.arange(0, M, layout=r.type.layout)
    gl.store(out_ptr + (gl.program_id(0) * 2 + ME) * M + offs, r)


@gluon.jit
def loop_probe_kernel(
    out_ptr, trace_ptr, context_lens_ptr, query_start_loc_ptr, score_scale,
    window, num_reqs,
    NUM_KV_HEADS: gl.constexpr, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr, PART_M: gl.constexpr, ALIGN: gl.constexpr,
    NUM_BUF: gl.constexpr, SUMS: gl.constexpr, POLY: gl.constexpr,
    TURNS: gl.constexpr, TRACE: gl.constexpr, QREG: gl.constexpr,
    KEEP_P: gl.constexpr, LAZY: gl.constexpr, HALF: gl.constexpr,
    MMA_REGS: gl.constexpr,
    WORKER_REGS: gl.constexpr,
    num_warps: gl.constexpr,
):  # fmt: skip
    qk: gl.constexpr = gl.float8e4nv
    q_smem = gl.allocate_shared_memory(
        qk, [2, PART_M, HEAD_DIM], G._tile_smem([PART_M, HEAD_DIM], qk)
    )
    k_smem = gl.allocate_shared_memory(
        qk, [NUM_BUF, BLOCK_N, HEAD_DIM], G._tile_smem([BLOCK_N, HEAD_DIM], qk)
    )
    v_smem = gl.allocate_shared_memory(
        gl.float16,
        [NUM_BUF, BLOCK_N, HEAD_DIM],
        G._tile_smem([BLOCK_N, HEAD_DIM], gl.float16),
    )
    ready = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_BUF):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(turn.index(i), count=1)
    mbarrier.arrive(turn.index(0), count=1)
    # The ones of the row sums, K-major as the K tiles: [8, BLOCK_N]
    ones_layout: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [1, 4], [1, 0])
    ones_smem = gl.allocate_shared_memory(
        gl.float16,
        [8, BLOCK_N],
        G._tile_smem([8, BLOCK_N], gl.float16),
        gl.full([8, BLOCK_N], 1.0, gl.float16, ones_layout),
    )
    fence_async_shared()
    gl.barrier()
    gl.warp_specialize(
        [
            (
                _loop_partition,
                (
                    q_smem.index(0), k_smem, v_smem, ones_smem, ready, empty,
                    turn, context_lens_ptr, query_start_loc_ptr, out_ptr,
                    trace_ptr, score_scale, window, num_reqs, NUM_KV_HEADS, BLOCK_Q,
                    BLOCK_N, HEAD_DIM, NUM_BUF, ALIGN, 0, SUMS, POLY, TURNS,
                    TRACE, QREG, KEEP_P, LAZY, HALF,
                ),
            ),
            (
                _loop_partition,
                (
                    q_smem.index(1), k_smem, v_smem, ones_smem, ready, empty,
                    turn, context_lens_ptr, query_start_loc_ptr, out_ptr,
                    trace_ptr, score_scale, window, num_reqs, NUM_KV_HEADS, BLOCK_Q,
                    BLOCK_N, HEAD_DIM, NUM_BUF, ALIGN, 1, SUMS, POLY, TURNS,
                    TRACE, QREG, KEEP_P, LAZY, HALF,
                ),
            ),
            (
                _signal_partition,
                (
                    ready, empty, context_lens_ptr, query_start_loc_ptr,
                    window, num_reqs, NUM_KV_HEADS, BLOCK_Q, BLOCK_N, NUM_BUF,
                    ALIGN,
                ),
            ),
        ],
        [4, 4],
        [MMA_REGS, WORKER_REGS],
    )  # fmt: skip


def loop_probe(ctx, qsl, window, num_kv_heads, group, head_dim, out, trace, *,
               sums=False, poly=0, turns=False, qreg=False, keep_p=False, lazy=False,
               half=False,
               mma_regs=G.MMA_PART_REGS,
               worker_regs=112, maxnreg=168):  # fmt: skip
    block_q = 128 // group
    grid = (max(1, min(ctx.shape[0] * num_kv_heads, sm_count(out.device))),)
    loop_probe_kernel[grid](
        out, trace, ctx, qsl, head_dim**-0.5, window, ctx.shape[0],
        NUM_KV_HEADS=num_kv_heads, BLOCK_Q=block_q, BLOCK_N=128,
        HEAD_DIM=head_dim, PART_M=64, ALIGN=16, NUM_BUF=2, SUMS=sums,
        POLY=poly, TURNS=turns, QREG=qreg, KEEP_P=keep_p, LAZY=lazy, HALF=half,
        TRACE=trace is not None, MMA_REGS=mma_regs,
        WORKER_REGS=worker_regs, num_warps=4, maxnreg=maxnreg,
    )  # fmt: skip


def show_trace(trace):
    """Program 0's stamps relative to partition 0's first, per tile: ring
    wait start / S issued / softmax start / P V issued / P V done."""
    t = trace.view(2, TRACE_TILES.value, 5).cpu()
    t0 = int(t[t > 0].min())
    for tile in range(TRACE_TILES.value):
        row = []
        for me in range(2):
            row.append(" ".join(f"{int(c) - t0:7d}" for c in t[me, tile]))
        print(f"  tile {TRACE_FROM.value + tile:2d}  p0 {row[0]}  |  p1 {row[1]}")


def main():
    tracing = sys.argv[5:] == ["trace"]
    shape, inputs, variants, graph = B.probe_args(sys.argv[:5])
    raw, q, k, v, bt, ctx, qsl, sc = inputs
    R, L, Bq, W, nH, nKV, D = shape
    grid = min(ctx.shape[0] * nKV, sm_count(q.device))
    out = torch.zeros(grid * 2 * 64, dtype=torch.float32, device=q.device)
    print(f"shape {shape}, 128-row tiles of 128 keys, key loop alone", flush=True)

    def call(**var):
        loop_probe(ctx, qsl, W, nKV, nH // nKV, D, out, None, **var)

    for var, t in B.time_variants(call, variants, graph=graph):
        if isinstance(t, Exception):
            print(f"  error {type(t).__name__}: {str(t)[:200]}  {var}", flush=True)
        else:
            print(f"  key loop {t:7.1f} us  {var}", flush=True)
    if tracing:
        for var in variants:
            trace = torch.zeros(
                2 * TRACE_TILES.value * 5, dtype=torch.int64, device=q.device
            )
            for _ in range(3):
                loop_probe(ctx, qsl, W, nKV, nH // nKV, D, out, trace, **var)
            torch.cuda.synchronize()
            print(f"trace {var}", flush=True)
            show_trace(trace)


if __name__ == "__main__":
    main()
