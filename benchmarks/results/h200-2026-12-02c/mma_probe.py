# The warp-specialized Gluon kernel's multiplying side alone: the same
# multiplying partition(s) (q, MMAs, softmax, output), fed by a partition
# that reads nothing: it signals every ring buffer as soon as the MMAs have
# released it, so the tiles hold whatever the shared memory held (the
# output is meaningless; only the time counts). It has the real kernel's
# warps and registers (a loading warpgroup of 112 registers per thread).
# Its time is what the MMAs and the softmax need at one shape, set against
# the full kernel's, the loader alone's (loader_probe.py of
# results/h200-2026-12-02) and the read floor.
#   PYTHONPATH=/tmp/t371:src python3 mma_probe.py SHAPE_INDEX bf16|fp8 'JSON' [graph]
# (JSON: a list of {"ring", "rows", "programs_per_sm", "split_mma",
# "overlap", "pingpong", "f16_dots", "maxnreg"} variants; with "graph" each
# call is timed as a CUDA graph's replays)
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import mbarrier  # noqa: E402

from vllm_spark2_5_plugin.ops import fixed_history_gluon as G  # noqa: E402
from vllm_spark2_5_plugin.ops.fixed_history_launch import sm_count  # noqa: E402


@gluon.jit
def _signal_partition(
    ready, empty, context_lens_ptr, query_start_loc_ptr, window, num_reqs,
    NUM_KV_HEADS: gl.constexpr, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
    HAS_WINDOW: gl.constexpr, NUM_BUF: gl.constexpr,
):  # fmt: skip
    it = 0
    for item in range(gl.program_id(0), num_reqs * NUM_KV_HEADS, gl.num_programs(0)):
        _, _, _, num_q, _, _, _, n_tiles = G._item_range(
            item, context_lens_ptr, query_start_loc_ptr, window, HAS_WINDOW,
            NUM_KV_HEADS, BLOCK_N, 1,
        )  # fmt: skip
        for _pass in range(0, num_q, BLOCK_Q):
            for _t in range(0, n_tiles):
                buf = it % NUM_BUF
                mbarrier.wait(empty.index(buf), ((it // NUM_BUF) & 1) ^ 1)
                mbarrier.arrive(ready.index(buf), count=1)
                it += 1


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
    NUM_BUF: gl.constexpr, SPLIT_MMA: gl.constexpr, OVERLAP: gl.constexpr,
    PINGPONG: gl.constexpr, MMA_REGS: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    BLOCK_M: gl.constexpr = BLOCK_Q * GROUP
    dtype: gl.constexpr = G._mma_dtype(q_ptr.dtype.element_ty, F16_DOTS)
    tile_smem: gl.constexpr = G._tile_smem([BLOCK_N, HEAD_DIM], dtype)
    PARTS: gl.constexpr = 2 if SPLIT_MMA else 1
    PART_Q: gl.constexpr = BLOCK_Q // PARTS
    PART_M: gl.constexpr = BLOCK_M // PARTS
    q_layout: gl.constexpr = G._tile_smem([PART_M, HEAD_DIM], dtype)
    q_smem = gl.allocate_shared_memory(dtype, [PARTS, PART_M, HEAD_DIM], q_layout)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_N, HEAD_DIM], tile_smem)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_N, HEAD_DIM], tile_smem)
    ready = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_BUF):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=PARTS)
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    if PINGPONG:
        for i in gl.static_range(2):
            mbarrier.init(turn.index(i), count=1)
        mbarrier.arrive(turn.index(0), count=1)
    if SPLIT_MMA:
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
                        False, BLOCK_Q, 0, 0, PINGPONG, 1,
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
                        False, BLOCK_Q, PART_Q, 1, PINGPONG, 1,
                    ),
                ),
                (
                    _signal_partition,
                    (
                        ready, empty, context_lens_ptr, query_start_loc_ptr,
                        window, num_reqs, NUM_KV_HEADS, BLOCK_Q, BLOCK_N,
                        HAS_WINDOW, NUM_BUF,
                    ),
                ),
            ],
            [4, 4],
            [MMA_REGS, 112],
        )  # fmt: skip
    else:
        gl.warp_specialize(
            [
                (
                    G._ws_mma_partition,
                    (
                        q_smem.index(0), k_smem, v_smem, ready, empty, turn,
                        q_ptr, out_ptr, context_lens_ptr, query_start_loc_ptr,
                        k_scale_ptr, v_scale_ptr, qk_scale, window, num_reqs,
                        stride_q_t, stride_q_h, stride_o_t, stride_o_h,
                        NUM_KV_HEADS, GROUP, BLOCK_Q, BLOCK_N, HEAD_DIM,
                        HAS_WINDOW, KV_FP8, F16_DOTS, NUM_BUF, num_warps,
                        OVERLAP, False, BLOCK_Q, 0, 0, False, 1,
                    ),
                ),
                (
                    _signal_partition,
                    (
                        ready, empty, context_lens_ptr, query_start_loc_ptr,
                        window, num_reqs, NUM_KV_HEADS, BLOCK_Q, BLOCK_N,
                        HAS_WINDOW, NUM_BUF,
                    ),
                ),
            ],
            [4],
            [112],
        )  # fmt: skip


def mma_only(q, k, v, bt, ctx, qsl, window, scale, out, k_scale=None,
             v_scale=None, *, ring=4, rows=128, programs_per_sm=None,
             split_mma=True, overlap=False, pingpong=False, f16_dots=False,
             maxnreg=None):  # fmt: skip
    group = q.shape[1] // k.shape[2]
    args, constants = G.kernel_arguments(
        q, k, v, bt, ctx, qsl, window, scale, out, k_scale, v_scale,
        block_q=rows // group, block_n=64, f16_dots=f16_dots,
    )  # fmt: skip
    per_sm = programs_per_sm or (2 if rows == 64 else 1)
    grid = (max(1, min(ctx.shape[0] * k.shape[2], per_sm * sm_count(q.device))),)
    mma_only_kernel[grid](
        *args, **constants, NUM_BUF=ring, SPLIT_MMA=split_mma, OVERLAP=overlap,
        PINGPONG=pingpong, MMA_REGS=G.MMA_PART_REGS,
        num_warps=4 if split_mma else rows // 16,
        maxnreg=maxnreg or (128 if per_sm >= 2 else 168),
    )  # fmt: skip


def main():
    shape, inputs, variants, graph = B.probe_args(sys.argv)
    raw, q, k, v, bt, ctx, qsl, sc = inputs
    R, L, Bq, W, nH, nKV, D = shape
    out = torch.empty_like(q)
    tiles = -(-(min(L, W) + Bq) // 64)
    kv = "bf16" if raw.element_size() == 2 else "fp8"
    print(f"{kv} shape {shape}: {tiles} key tiles per item", flush=True)

    def call(**var):
        mma_only(q, k, v, bt, ctx, qsl, W, D**-0.5, out, **sc, **var)

    for var, t in B.time_variants(call, variants, graph=graph):
        if isinstance(t, Exception):
            print(f"  error {type(t).__name__}: {str(t)[:200]}  {var}", flush=True)
        else:
            print(f"  MMAs and softmax only {t:7.1f} us  {var}", flush=True)


if __name__ == "__main__":
    main()
