# The warp-specialized Gluon kernel's loading partition alone: the same
# loader (ring of converted/copied K/V tiles, mbarriers), with a consumer
# that only waits for each tile and releases it (no MMAs, no softmax). Its
# time is what the loader can do at one program per SM; set against the
# full kernel's and the read floor's at one shape.
#   PYTHONPATH=/tmp/t371:src python3 loader_probe.py SHAPE_INDEX bf16|fp8 'JSON' [graph]
# ("graph", added 2026-12-02c: each call timed as a CUDA graph's replays, so
# that the host's time per TMA launch does not set it)
# (JSON: a list of {"ring", "raw_slots", "fence_in_mma", "block_n", "rows",
# "programs_per_sm", "worker_regs", "narrow_convert", "f16_dots", "tma",
# "maxnreg"} variants). Before 2026-12-02c it launched without maxnreg:
# 255 registers per thread, one program per SM whatever programs_per_sm
# said, so its 64-row figures (shapes 1-3) were for one program per SM.
# Its ring defaults to 4 buffers (rows to 128): at 64 rows pass "ring": 2
# for the launch's depth; with 4, a program's shared memory (160 KB with an
# fp8 cache, 128 KB with bf16) leaves no room for a second (2026-12-02d).
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared,
    mbarrier,
)

from vllm_spark2_5_plugin.ops import fixed_history_gluon as G  # noqa: E402
from vllm_spark2_5_plugin.ops.fixed_history_launch import sm_count  # noqa: E402


@gluon.jit
def _release_partition(
    ready, empty, context_lens_ptr, query_start_loc_ptr, window, num_reqs,
    NUM_KV_HEADS: gl.constexpr, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr,
    HAS_WINDOW: gl.constexpr, NUM_BUF: gl.constexpr, FENCE: gl.constexpr,
    ALIGN: gl.constexpr,
):  # fmt: skip
    it = 0
    for item in range(gl.program_id(0), num_reqs * NUM_KV_HEADS, gl.num_programs(0)):
        _, _, _, num_q, _, _, _, n_tiles = G._item_range(
            item, context_lens_ptr, query_start_loc_ptr, window, HAS_WINDOW,
            NUM_KV_HEADS, BLOCK_N, ALIGN,
        )  # fmt: skip
        for _pass in range(0, num_q, BLOCK_Q):
            for _t in range(0, n_tiles):
                mbarrier.wait(ready.index(it % NUM_BUF), (it // NUM_BUF) & 1)
                if FENCE:
                    fence_async_shared()
                mbarrier.arrive(empty.index(it % NUM_BUF), count=1)
                it += 1


@gluon.jit
def loader_only_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, block_table_ptr, context_lens_ptr,
    query_start_loc_ptr, k_scale_ptr, v_scale_ptr, qk_scale, window, num_reqs,
    stride_q_t, stride_q_h, stride_k_blk, stride_k_slot, stride_k_head,
    stride_v_blk, stride_v_slot, stride_v_head, stride_o_t, stride_o_h,
    stride_bt, k_desc, v_desc,
    NUM_KV_HEADS: gl.constexpr, GROUP: gl.constexpr, BLOCK_Q: gl.constexpr,
    BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, PAGE_SIZE: gl.constexpr,
    HAS_WINDOW: gl.constexpr, KV_FP8: gl.constexpr, F16_DOTS: gl.constexpr,
    NUM_BUF: gl.constexpr, NUM_RAW: gl.constexpr, WORKER_REGS: gl.constexpr,
    OVERLAP: gl.constexpr, COPIES_AHEAD: gl.constexpr, FENCE_IN_MMA: gl.constexpr,
    SPLIT_MMA: gl.constexpr, MMA_REGS: gl.constexpr, PINGPONG: gl.constexpr,
    NARROW_CONVERT: gl.constexpr, TMA: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    dtype: gl.constexpr = G._mma_dtype(q_ptr.dtype.element_ty, F16_DOTS)
    kv_dtype: gl.constexpr = k_ptr.dtype.element_ty
    tile_smem: gl.constexpr = G._tile_smem([BLOCK_N, HEAD_DIM], dtype)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_N, HEAD_DIM], tile_smem)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_BUF, BLOCK_N, HEAD_DIM], tile_smem)
    ready = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    ARRIVALS: gl.constexpr = 128 if FENCE_IN_MMA and not KV_FP8 and not TMA else 1
    for i in gl.static_range(NUM_BUF):
        mbarrier.init(ready.index(i), count=ARRIVALS)
        mbarrier.init(empty.index(i), count=1)
    raw_ready = ready
    if KV_FP8:
        if TMA:  # staged by TMA (since 2026-12-02b): swizzled, with barriers
            raw_smem: gl.constexpr = gl.NVMMASharedLayout(
                swizzle_byte_width=128, element_bitwidth=8, rank=2
            )
        else:
            raw_smem: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])
        k_raw = gl.allocate_shared_memory(
            kv_dtype, [NUM_RAW, BLOCK_N, HEAD_DIM], raw_smem
        )
        v_raw = gl.allocate_shared_memory(
            kv_dtype, [NUM_RAW, BLOCK_N, HEAD_DIM], raw_smem
        )
        if TMA:
            raw_ready = gl.allocate_shared_memory(
                gl.int64, [NUM_RAW, 1], mbarrier.MBarrierLayout()
            )
            for i in gl.static_range(NUM_RAW):
                mbarrier.init(raw_ready.index(i), count=1)
    else:
        k_raw = k_smem
        v_raw = v_smem
    gl.warp_specialize(
        [
            (
                _release_partition,
                (
                    ready, empty, context_lens_ptr, query_start_loc_ptr, window,
                    num_reqs, NUM_KV_HEADS, BLOCK_Q, BLOCK_N, HAS_WINDOW,
                    NUM_BUF, FENCE_IN_MMA or (TMA and not KV_FP8),
                    PAGE_SIZE if TMA else 1,
                ),
            ),
            (
                G._ws_load_partition,
                (
                    k_raw, v_raw, raw_ready, k_smem, v_smem, ready, empty,
                    k_ptr,
                    v_ptr, block_table_ptr, context_lens_ptr,
                    query_start_loc_ptr, window, num_reqs, stride_k_blk,
                    stride_k_slot, stride_k_head, stride_v_blk,
                    stride_v_slot, stride_v_head, stride_bt, k_desc, v_desc,
                    NUM_KV_HEADS, BLOCK_Q, BLOCK_N, HEAD_DIM, PAGE_SIZE,
                    HAS_WINDOW, KV_FP8, NUM_BUF, NUM_RAW, COPIES_AHEAD,
                    FENCE_IN_MMA, NARROW_CONVERT, TMA,
                ),
            ),
        ],
        [4],
        [WORKER_REGS],
    )  # fmt: skip


def loader_only(q, k, v, bt, ctx, qsl, window, scale, out, k_scale=None,
                v_scale=None, *, ring=4, raw_slots=2, fence_in_mma=False,
                block_n=64, rows=128, programs_per_sm=1, worker_regs=112,
                narrow_convert=False, f16_dots=False, tma=False,
                maxnreg=None):  # fmt: skip
    group = q.shape[1] // k.shape[2]
    args, constants = G.kernel_arguments(
        q, k, v, bt, ctx, qsl, window, scale, out, k_scale, v_scale,
        block_q=rows // group, block_n=block_n, f16_dots=f16_dots,
    )  # fmt: skip
    grid = (min(ctx.shape[0] * k.shape[2], programs_per_sm * sm_count(q.device)),)
    descs = (G._tma_descriptor(k), G._tma_descriptor(v)) if tma else (None, None)
    loader_only_kernel[grid](
        *args, *descs, **constants,
        **G.pipeline_constants(
            ring=ring, raw_slots=raw_slots, worker_regs=worker_regs, overlap=False,
            fence_in_mma=fence_in_mma, narrow_convert=narrow_convert, tma=tma,
        ),
        num_warps=4,
        # As the launch (added 2026-12-02c): without it the compiler takes
        # 255 registers per thread, and two programs never fit on an SM.
        maxnreg=maxnreg or (128 if programs_per_sm >= 2 else 168),
    )  # fmt: skip


def main():
    shape, inputs, variants, graph = B.probe_args(sys.argv)
    raw, q, k, v, bt, ctx, qsl, sc = inputs
    R, L, Bq, W, nH, nKV, D = shape
    big = torch.empty(2**28, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(big)
    t = triton.testing.do_bench(lambda: dst.copy_(big), rep=200, return_mode="median")
    bw = 2 * big.numel() / (t * 1e-3)
    lo, hi, _, _ = B.window_bounds(shape)
    kv_bytes = R * nKV * (hi - lo) * D * 2 * raw.element_size()
    kv = "bf16" if raw.element_size() == 2 else "fp8"
    print(f"{kv} shape {shape}: floor {kv_bytes / bw * 1e6:.1f} us", flush=True)
    out = torch.empty_like(q)

    def call(**var):
        loader_only(q, k, v, bt, ctx, qsl, W, D**-0.5, out, **sc, **var)

    for var, t in B.time_variants(call, variants, graph=graph):
        if isinstance(t, Exception):
            print(f"  error {type(t).__name__}: {str(t)[:200]}  {var}", flush=True)
        else:
            tbs = kv_bytes / (t * 1e-6) / 1e12
            print(f"  loader only {t:7.1f} us ({tbs:.2f} TB/s)  {var}", flush=True)


if __name__ == "__main__":
    main()
