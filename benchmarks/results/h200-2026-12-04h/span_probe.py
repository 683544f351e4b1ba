# fp8 shape 4 over V's pages as the launch runs it: where the kernel's
# time goes outside its key loop. span_gluon.py is the launch's Gluon
# module (src/, read at run time) with %globaltimer stamps added by
# text substitution (SUBS below; only with wait statistics on): each
# partition of every program stores its start, its first ring tile
# (multiplying: the tile ready; loader: the first tile's copies issued),
# the end of its key loop and its end, in ns, and %clock64 at start and
# end. The probe times the launch's kernel and two empty kernels the same
# way (CUDA-graph replays, L2 emptied by reading), then runs the stamped
# kernel between CUDA events and prints the spans. PROBE_NO_MMA=1: the
# multiplying partitions only wait for each tile and release it;
# PROBE_SWAP=1: rows 64-127 in the default partition (warps 0-3);
# PROBE_NOFLUSH=1: the stamped run right after another (no L2 emptying);
# PROBE_LOADER_DEFAULT=1 / 0: the kernel's loader_first on / off;
# PROBE_STORE=wide / none: the output stored in 16-byte pieces / not
# (plain or unset: as the launch stores it);
# PROBE_PREFETCH=1: the next tile's block-table entries read ahead;
# PROBE_WARM=1: the item loop's body run once first with nothing to do;
# PROBE_ROTATE=1: an item's first key tile taken last.
#   PYTHONPATH=/tmp/t371:src python3 span_probe.py [reps]
import os
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = "src/vllm_spark2_5_plugin/ops/fixed_history_gluon.py"
G = 4096  # the stamps' base in the statistics tensor: [program][part][8]

HELPER = '''

@gluon.jit
def _gtimer():
    """(Probe) the global nanosecond timer."""
    return gl.inline_asm_elementwise(
        "mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1
    )


@gluon.jit
def _span_store(stats_ptr, part: gl.constexpr, g0, g1, g2, c0, ga=0, gb=0):
    row = stats_ptr + 4096 + (gl.program_id(0) * 3 + part) * 8
    g3 = _gtimer()
    gl.store(row, g0)
    gl.store(row + 1, g1)
    gl.store(row + 2, g2)
    gl.store(row + 3, g3)
    gl.store(row + 4, c0)
    gl.store(row + 5, _clock())
    gl.store(row + 6, ga)
    gl.store(row + 7, gb)


@gluon.jit
def _timed_wait('''

MMA_START = """    started = _clock() if STATS else 0
    waited = _clock() * 0 if STATS else 0
    # Cycles between key loops"""
LOADER_START = """    started = _clock() if STATS else 0
    landed = _clock() * 0 if STATS else 0
    freed = _clock() * 0 if STATS else 0
    it = 0
    r = 0"""
STAMP0 = """    g0 = _gtimer() if STATS else 0
    g1 = g0
    g2 = g0
    ga = g0
    gb = g0
"""
NO_MMA = """    if _NO_MMA:
        pass
    elif TAIL_N > 0:
        if hi - key_start <= TAIL_N:"""
SUBS = [
    ("\n\n@gluon.jit\ndef _timed_wait(", HELPER),
    # PROBE_NO_MMA=1 (at import): the multiplying partitions only wait for
    # each tile and release it (the loader and the memory alone)
    (
        "_PUBLIC_REINTERPRET = ",
        '_NO_MMA = gl.constexpr(__import__("os").environ.get("PROBE_NO_MMA") == "1")\n'
        "_PUBLIC_REINTERPRET = ",
    ),
    ("    if TAIL_N > 0:\n        if hi - key_start <= TAIL_N:", NO_MMA),
    (MMA_START, STAMP0 + MMA_START),
    (LOADER_START, STAMP0 + LOADER_START),
    # the multiplying partitions: the first tile ready, the loop's end
    (
        """                    _tile_copied(start, lo, hi, BLOCK_N, EDGE_FENCE),
                )  # fmt: skip
""",
        """                    _tile_copied(start, lo, hi, BLOCK_N, EDGE_FENCE),
                )  # fmt: skip
                if STATS:
                    g1 = gl.where(it == 0, _gtimer(), g1)
""",
    ),
    (
        """            if STATS:
                mark = _clock()
""",
        """            if STATS:
                mark = _clock()
                g2 = _gtimer()
""",
    ),
    (
        "        _store_stats(stats_ptr, ME, waited, between, started, it)\n",
        "        _store_stats(stats_ptr, ME, waited, between, started, it)\n"
        "        _span_store(stats_ptr, ME, g0, g1, g2, started, ga, gb)\n",
    ),
    # ... and the ends of its first two tiles (once it released them)
    (
        """                mbarrier.arrive(empty.index(buf), count=1)
                it += 1
""",
        """                mbarrier.arrive(empty.index(buf), count=1)
                if STATS:
                    ga = gl.where(it == 0, _gtimer(), ga)
                    gb = gl.where(it == 1, _gtimer(), gb)
                it += 1
""",
    ),
    # the loader: the first tile's copies issued, the loop's end
    (
        """                page_ids = _tile_page_ids(
                    bt_row, first + (t + NUM_RAW + 1) * BLOCK_N, hi, PAGE_SIZE,
                    BLOCK_N,
                )  # fmt: skip
                it += 1
            r += n_tiles
    async_copy.wait_group(0)
    if STATS:
        _store_stats(stats_ptr, 2, landed, freed, started, it)
""",
        """                page_ids = _tile_page_ids(
                    bt_row, first + (t + NUM_RAW + 1) * BLOCK_N, hi, PAGE_SIZE,
                    BLOCK_N,
                )  # fmt: skip
                if STATS:
                    g1 = gl.where(it == 0, _gtimer(), g1)
                it += 1
            r += n_tiles
    if STATS:
        g2 = _gtimer()
    async_copy.wait_group(0)
    if STATS:
        _store_stats(stats_ptr, 2, landed, freed, started, it)
        _span_store(stats_ptr, 2, g0, g1, g2, started)
""",
    ),
]


# PROBE_SWAP=1: the second multiplying partition (rows 64-127) runs as
# the default partition (warps 0-3) and the first as the worker.
P0 = " " * 28 + "BLOCK_Q, 0, 0, ALIGN, stats_ptr, FP8_SCORES, FP8_PV,"
P1 = " " * 28 + "BLOCK_Q, PART_Q, 1, ALIGN, stats_ptr, FP8_SCORES, FP8_PV,"


STORE = """    ptrs, mask = _row_ptrs(
        out_ptr, q_first, q_base, num_q, kv_head, stride_o_t, stride_o_h,
        GROUP, acc.shape[0], acc.shape[1], o_layout,
    )  # fmt: skip
    gl.store(ptrs, result.to(out_ptr.dtype.element_ty), mask=mask)
"""
# PROBE_STORE=wide: the output in 16-byte pieces per thread (converted to
# _kv_layout first); PROBE_STORE=none: every output store masked off.
STORES = {
    "wide": """    WARPS: gl.constexpr = acc.shape[0] // 16
    st_layout: gl.constexpr = _kv_layout(acc.shape[1], False, WARPS)
    result = gl.convert_layout(result.to(out_ptr.dtype.element_ty), st_layout)
    ptrs, mask = _row_ptrs(
        out_ptr, q_first, q_base, num_q, kv_head, stride_o_t, stride_o_h,
        GROUP, acc.shape[0], acc.shape[1], st_layout,
    )  # fmt: skip
    gl.store(ptrs, result, mask=mask)
""",
    "none": STORE.replace("mask=mask)", "mask=mask & (num_q < 0))"),
}


# PROBE_PREFETCH=1: over V's pages the loader reads the next interior
# tile's block-table entries while it waits for a free buffer, instead of
# each page's entry right before its copies.
PREFETCH = [
    (
        """    k_desc, v_desc, k_dst, v_dst, bar, bt_row, start, kv_head,
    PAGE_SIZE: gl.constexpr,
):  # fmt: skip
""",
        """    k_desc, v_desc, k_dst, v_dst, bar, bt_row, start, kv_head,
    PAGE_SIZE: gl.constexpr, page_ids=None,
):  # fmt: skip
""",
    ),
    (
        """        page_id = gl.load(bt_row + start // PAGE_SIZE + p)
        _tma_load(k_desc, [page_id, 0, kv_head, 0], bar, k_pieces.index(p))""",
        """        if page_ids is None:
            page_id = gl.load(bt_row + start // PAGE_SIZE + p)
        else:
            page_id = _page_id(page_ids, p)
        _tma_load(k_desc, [page_id, 0, kv_head, 0], bar, k_pieces.index(p))""",
    ),
    (
        """            for t in range(0, n_tiles):
                slot = (r + t) % NUM_RAW
                buf = it % NUM_BUF
                if FP8_SCORES:
""",
        """            ids_next = _tile_page_ids(bt_row, first, hi, PAGE_SIZE, BLOCK_N)
            for t in range(0, n_tiles):
                ids = ids_next
                ids_next = _tile_page_ids(
                    bt_row, first + (t + 1) * BLOCK_N, hi, PAGE_SIZE, BLOCK_N
                )
                slot = (r + t) % NUM_RAW
                buf = it % NUM_BUF
                if FP8_SCORES:
""",
    ),
    (
        " kv_head, PAGE_SIZE,\n" + " " * 24 + ")  # fmt: skip\n",
        " kv_head, PAGE_SIZE,\n" + " " * 28 + "ids,\n" + " " * 24 + ")  # fmt: skip\n",
    ),
]


# PROBE_WARM=1: each multiplying partition first runs its item loop's body
# once with no key tiles and every output row masked (its program's first
# item), so that the body's code, the output's store among it, is fetched
# while the first tile is on its way rather than after the last one.
WARM = [
    (
        """    for item in range(gl.program_id(0), num_items, gl.num_programs(0)):
        _, kv_head, q_first, num_q, first, lo, hi, n_tiles = _item_range(
            item, context_lens_ptr, query_start_loc_ptr, window, HAS_WINDOW,
            NUM_KV_HEADS, BLOCK_N, ALIGN,
        )  # fmt: skip
""",
        """    programs = gl.num_programs(0)
    for item0 in range(gl.program_id(0) - programs, num_items, programs):
        warm = item0 < 0
        item = gl.where(warm, item0 + programs, item0)
        _, kv_head, q_first, num_q, first, lo, hi, n_tiles = _item_range(
            item, context_lens_ptr, query_start_loc_ptr, window, HAS_WINDOW,
            NUM_KV_HEADS, BLOCK_N, ALIGN,
        )  # fmt: skip
        n_tiles = gl.where(warm, 0, n_tiles)
""",
    ),
    (
        """            _store_output(
                out_ptr, acc, l_i, v_scale_ptr, q_first, q_base, num_q, kv_head,
""",
        """            _store_output(
                out_ptr, acc, l_i, v_scale_ptr, q_first, q_base,
                gl.where(warm, 0, num_q), kv_head,
""",
    ),
]


# PROBE_ROTATE=1: the loader and the multiplying partitions take an item's
# key tiles from its second on, the first (which reaches below the window
# and passes through the loader's registers) last, so that the first tile
# multiplied comes by TMA alone.
ROTATE = [
    # the fp8 TMA loader's
    "\n" + " " * 20 + "start = first + t * BLOCK_N\n",
    # the multiplying partitions'
    "buf = it % NUM_BUF\n" + " " * 16 + "start = first + t * BLOCK_N\n",
]
ROTATED = "((t + 1) % n_tiles) * BLOCK_N"


def stamped_module():
    with open(SRC) as f:
        text = f.read()
    if os.environ.get("PROBE_ROTATE") == "1":
        for old in ROTATE:
            assert text.count(old) == 1, old
            text = text.replace(old, old.replace("t * BLOCK_N", ROTATED))
    if os.environ.get("PROBE_WARM") == "1":
        for old, new in WARM:
            assert text.count(old) == 1, old[:80]
            text = text.replace(old, new)
    if os.environ.get("PROBE_PREFETCH") == "1":
        for old, new in PREFETCH:
            assert text.count(old) == 1, old[:80]
            text = text.replace(old, new)
    store = os.environ.get("PROBE_STORE", "plain")
    if store not in ("", "plain"):
        assert text.count(STORE) == 1, "store"
        text = text.replace(STORE, STORES[store])
    if os.environ.get("PROBE_SWAP") == "1":
        q0, q1 = "q_smem.index(0), k_smem,", "q_smem.index(1), k_smem,"
        # the launch's order: the call where LOADER_FIRST is off
        mark = "        else:\n            gl.warp_specialize("
        head, rest = text.split(mark, 1)
        block, tail = rest.split("    elif ISSUE_WARP:", 1)
        assert block.count(P0) == 1 and block.count(q0) == 1, "swap"
        block = block.replace(P0, "@P0@").replace(P1, P0).replace("@P0@", P1)
        block = block.replace(q0, "@Q0@").replace(q1, q0).replace("@Q0@", q1)
        text = head + mark + block + "    elif ISSUE_WARP:" + tail
    for old, new in SUBS:
        assert text.count(old) == 1, old[:80]
        text = text.replace(old, new)
    path = f"{HERE}/span_gluon.py"
    with open(path, "w") as f:
        f.write(text)
    import importlib.util

    spec = importlib.util.spec_from_file_location("span_gluon", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@triton.jit
def _nop(x_ptr):
    pass


@triton.jit
def _one_store(x_ptr):
    tl.store(x_ptr + tl.program_id(0), tl.program_id(0))


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    mod = stamped_module()
    entry = mod.fixed_history_attention_wgmma
    shape, inputs, _, _ = B.probe_args([None, "3", "fp8", "[]"])
    raw, q, k, v, bt, ctx, qsl, sc = inputs
    R, L, Bq, W, nH, nKV, D = shape
    s = D**-0.5
    ref = ops.fixed_history_attention(q, k, v, bt, ctx, qsl, W, s, reference=True, **sc)
    kp, vp = B.with_v_pages(raw, D)
    var = B.probe_gluon_options(shape, inputs, (kp, vp))
    if os.environ.get("PROBE_LOADER_DEFAULT") in ("0", "1"):
        var["loader_first"] = os.environ["PROBE_LOADER_DEFAULT"] == "1"
    print(f"shape {shape} options {var}", flush=True)
    out = torch.empty_like(q)
    o = entry(q, kp, vp, bt, ctx, qsl, W, s, None, **sc, **var).float()
    err = ((o - ref.float()).abs().max() / ref.float().abs().max()).item()

    def call(**kw):
        return entry(q, kp, vp, bt, ctx, qsl, W, s, out, **sc, **kw)

    x = torch.zeros(1024, dtype=torch.int64, device="cuda")
    nops = {
        "empty kernel, 128 programs": lambda: _nop[(128,)](x),
        "one store per program, 128 programs": lambda: _one_store[(128,)](x),
    }
    for name, fn in nops.items():
        [(_, t)] = B.time_variants(lambda fn=fn: fn(), [{}], graph=True)
        print(f"{t:8.2f} us  {name} (graph replay, L2 emptied)", flush=True)
    [(_, t)] = B.time_variants(call, [var], graph=True)
    print(f"{t:8.2f} us  the launch's kernel (graph replay, L2 emptied)  err {err:.2e}")
    stats = torch.zeros(G + 128 * 3 * 8 + 64, dtype=torch.int64, device="cuda")
    [(_, t)] = B.time_variants(call, [{**var, "wait_stats": stats}], graph=True)
    print(f"{t:8.2f} us  the same with the stamps", flush=True)
    buf = B._flush_buffer()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    names = ("part 0", "part 1", "loader")
    for rep in range(reps):
        stats.zero_()
        if os.environ.get("PROBE_NOFLUSH") == "1":
            call(**var, wait_stats=stats)  # the code and some data in the L2
            torch.cuda.synchronize()
            stats.zero_()
        else:
            buf.sum()
        ev[0].record()
        call(**var, wait_stats=stats)
        ev[1].record()
        torch.cuda.synchronize()
        event_us = ev[0].elapsed_time(ev[1]) * 1e3
        n = R * nKV
        st = stats[G : G + n * 3 * 8].view(n, 3, 8).double().cpu()
        g = st[:, :, :4]
        t0 = g[:, :, 0].min()
        rel = (g - t0) / 1e3  # us from the earliest partition start
        span = (g[:, :, 3].max() - t0) / 1e3
        ghz = ((st[:, :, 5] - st[:, :, 4]) / (g[:, :, 3] - g[:, :, 0])).median()
        print(
            f"rep {rep}: events {event_us:.2f} us, stamps first start -> last end "
            f"{span:.2f} us, SM clock {ghz:.3f} GHz (clock64 / globaltimer)"
        )
        print(
            "   (us, min / median / max over programs)"
            "   start    first tile   loop end      end"
        )
        for p in range(3):
            cols = []
            for j in range(4):
                c = rel[:, p, j]
                cols.append(f"{c.min():5.2f}/{c.median():5.2f}/{c.max():5.2f}")
            print(f"   {names[p]:8s} " + "  ".join(cols))
        for p in range(2):
            ends = " / ".join(
                f"{((st[:, p, j] - t0) / 1e3).median():.2f}" for j in (6, 7)
            )
            print(f"   {names[p]} tiles 0 / 1 released at (median) {ends} us")
        loop = (g[:, :2, 2] - g[:, :2, 1]) / 1e3
        print(
            f"   multiplying loop (first tile ready -> loop end): "
            f"{loop.min():.2f} / {loop.median():.2f} / {loop.max():.2f} us; "
            f"after the loop: {((g[:, :2, 3] - g[:, :2, 2]) / 1e3).median():.2f} us",
            flush=True,
        )


if __name__ == "__main__":
    main()
