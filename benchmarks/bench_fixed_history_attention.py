# SPDX-License-Identifier: Apache-2.0
"""Benchmark: fixed-history draft attention kernel vs gather + SDPA / FlexAttention.

Run on a CUDA machine (needs only torch and triton; the FA3 column also
vLLM's CUDA build):

    PYTHONPATH=src python3 benchmarks/bench_fixed_history_attention.py \
        [--sweep] [--md results.md] [--shapes 0,1,2] [--kv-dtypes bf16 fp8]

For every shape (R, L, B, W, nH/nKV/D) and KV-cache dtype it builds a paged KV
cache the way vLLM 0.32.0 lays it out by default (LBNHC: physically
[num_blocks, block_size, nKV, 2*D]; K/V are ``kv_cache.transpose(1,
2).split(D, -1)`` of the per-layer [num_blocks, nKV, block_size, 2*D] view),
holding all L + B positions of every request in randomly permuted (scattered)
blocks (Python's ``random.shuffle``, so every torch version places them alike;
``--pages sequential``: each request's blocks in order). q is bf16; the
cache is bf16 (``--kv-cache-dtype auto``) or fp8 e4m3 holding K / k_scale
and V / v_scale with float32 scale tensors on the device (``--kv-cache-dtype
fp8``, vLLM's layer._k_scale/_v_scale). Both rows of a
shape are printed next to each other. It then times:

* kernel      fixed_history_attention(...) as called (launch wrapper included);
* kernel(g)   the same call captured in a CUDA graph and replayed;
* gather+SDPA gather each request's window pages from the paged cache with
              index_select, slice the window to a dense [R, nKV, span, D]
              tensor, then F.scaled_dot_product_attention(enable_gqa=True), no
              mask (every query sees the whole gathered window); gather and
              attention timed together; an fp8 window is dequantized to bf16
              (``.to(bf16) * scale``) after the gather, inside the timing;
* gather+Flex the same page gather without the slice ([R, nKV, pages*bs, D]),
              then torch.compile(flex_attention) with a block mask holding the
              fixed-history rule (key k visible iff lo_r <= k < hi_r in the
              gathered coordinates). The block mask is built once, outside the
              timed region; compile happens during warm-up; fp8 pages are
              dequantized like for SDPA;
* vLLM FA3    vLLM 0.32.0's FlashAttention 3 (``vllm.vllm_flash_attn``, on
              GPUs where it runs; ``--no-fa3`` leaves it out) on the paged
              cache itself, with the rule written as its sliding window: the B
              queries x G query heads of each KV head become B * G query heads
              of one query per request at position L + B - 1, window (W + B -
              1, 0), so that each sees exactly positions L - W .. L + B - 1;
              q reordered (KV head, query, head) and, for an fp8 cache, cast
              to e4m3 (FA3 multiplies fp8 q, K, weights and V; q's descale
              1.0, vLLM's static default), the output reordered back, all
              inside the timing (the call alone is printed too); FA3 picks
              its own splits (``num_splits=0``), as vLLM lets it;
* floor       bytes of the K/V window read once (R * nKV * span * D * 2 *
              bytes per element: 2 for bf16, 1 for fp8) divided by the
              bandwidth of a large device-to-device copy (bytes read +
              written) measured in the same run. The header also gives
              what an empty kernel of one program per SM takes timed as
              the graph column is: the part of any timed launch that no
              floor holds.

Timing: medians of CUDA-event timings as triton.testing.do_bench takes
them, the L2 emptied before every call by reading a 256 MB buffer, so that
the timed call has no dirty lines to write back (the default since
2026-12-02); ``--flush zero`` is do_bench's own way, zeroing the buffer
(``FLUSH``). Each baseline's output is checked against the kernel's.
Goals: every row at most 1.35x its own read floor (fp8 rows: the fp8 floor);
bf16 rows also at least 10x gather+SDPA, judged only when SDPA ran (not with
``--kernel-only``). Only the public API of
``vllm_spark2_5_plugin.ops`` is used, except by ``--baseline-kernel FILE``:
that also times, in the same process and with the same launch plans, the
kernels of another version of ``ops/fixed_history_kernel.py`` (e.g.
``git show REV:src/vllm_spark2_5_plugin/ops/fixed_history_kernel.py >
FILE``; its kernels must take the same arguments), swapped into the launch
module for the duration, and prints a before/after table.

``--sweep`` also times a grid of launch plans per shape, each with its
output's difference from the default plan's; ``--sweep --try JSON``
(repeatable) times only the given changes to the default plan, e.g.
``--try '{"block_q": 16, "block_n": 64, "num_stages": 3}'``. The grid
explores the Triton kernel (``gluon=False``); ``--try '{"gluon": true}'``
asks for the Gluon kernel. When a shape's default plan runs the Gluon kernel
(sm_90, fp8), the plan's Triton kernel is timed too. ``--gluon`` also
times the Gluon kernel's pipeline variants (``ops/fixed_history_gluon.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import json
import math
import os
import platform
import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

try:
    from vllm_spark2_5_plugin import ops
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from vllm_spark2_5_plugin import ops

# (R, L, B, W, nH, nKV, D)
SHAPES = [
    (64, 8192, 8, 4096, 32, 8, 128),
    (256, 8192, 8, 4096, 32, 8, 128),
    (256, 2048, 8, 1024, 32, 8, 128),
    (32, 32768, 16, 4096, 32, 4, 128),
    (128, 8192, 8, 4096, 16, 16, 64),
]
PAGE = 16
DTYPE = torch.bfloat16  # q, and the cache of the "bf16" rows
KV_DTYPES = ("bf16", "fp8")  # --kv-dtypes choices: the model dtype, fp8 e4m3
FP8 = torch.float8_e4m3fn
# fp8 rows: the cache holds K / K_SCALE and V / V_SCALE (N(0, 1) data stays
# well inside e4m3's +-448); powers of two, so that the dequantized values are
# exactly the quantized ones times the scale.
K_SCALE, V_SCALE = 1 / 64, 1 / 32
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: --smoke only
GOAL_SPEEDUP = 10.0
GOAL_FLOOR_RATIO = 1.35


BASELINE = None  # --baseline-kernel: the module holding the other kernels


def load_kernels(path):
    """The module of ``fixed_history_kernel.py`` at ``path``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("baseline_fixed_history", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _OlderKernel:
    """A Triton kernel launched with only the keyword arguments it declares:
    an older kernel ignores the compile-time flags it predates and runs its
    own code (the "before" of a before/after)."""

    _LAUNCH_OPTIONS = ("num_warps", "num_stages")

    def __init__(self, kernel):
        self.kernel = kernel
        self.known = set(kernel.arg_names) | set(self._LAUNCH_OPTIONS)

    def __getitem__(self, grid):
        launch = self.kernel[grid]

        def run(*args, **kwargs):
            return launch(*args, **{k: kwargs[k] for k in kwargs if k in self.known})

        return run


@contextlib.contextmanager
def kernels_from(module):
    """Launch ``module``'s kernels instead of the package's, for a while."""
    from vllm_spark2_5_plugin.ops import fixed_history_launch as launch

    names = ("fixed_history_kernel", "combine_splits_kernel")
    saved = {n: getattr(launch, n) for n in names}
    try:
        for n in names:
            setattr(launch, n, _OlderKernel(getattr(module, n)))
        yield
    finally:
        for n, kernel in saved.items():
            setattr(launch, n, kernel)


#: How the L2 cache is emptied before each timed call: "zero" (do_bench's
#: own: a 256 MB buffer zeroed, which leaves the L2 full of dirty lines that
#: the timed kernel then writes back to memory while it reads: up to ~50 MB
#: of extra traffic, which lengthens a short memory-bound kernel) or "clean"
#: (the same buffer read instead: the timed kernel finds a cold L2 of clean
#: lines). ``--flush`` or SPARK2_5_BENCH_FLUSH; "zero" is what every figure
#: before 2026-12-02 (fourteenth session) used, "clean" the default since
#: (on the H200 the bf16 long-context kernel took 89.4 us with "zero", 80.5
#: with "clean", and 82-84 us under Nsight Compute, which empties the L2
#: without dirtying it).
FLUSH = os.environ.get("SPARK2_5_BENCH_FLUSH", "clean")
_FLUSH_BYTES = 256 * 1024**2


def bench(fn, rep=200):
    if DEVICE != "cuda":  # --smoke on a machine without a GPU: run once
        import time

        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    if FLUSH == "clean":
        return _bench_clean_flush(fn, rep)
    return do_bench(fn, warmup=50, rep=rep, return_mode="median") * 1e3  # us


@functools.cache
def _flush_buffer():
    return torch.ones(_FLUSH_BYTES // 4, dtype=torch.int32, device=DEVICE)


def _bench_clean_flush(fn, rep_ms):
    """Median microseconds of ``fn`` as ``do_bench`` times it (CUDA events
    around each call, about ``rep_ms`` of calls after warm-up), the L2 cache
    emptied before each call by reading a 256 MB buffer, so that no dirty
    lines are left for the timed call to write back."""
    buf = _flush_buffer()
    start, end = (
        torch.cuda.Event(enable_timing=True),
        torch.cuda.Event(enable_timing=True),
    )
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(5):
        buf.sum()
        fn()
    end.record()
    torch.cuda.synchronize()
    per_call = max(start.elapsed_time(end) / 5, 1e-3)  # ms, flush included
    n_warm, n_rep = max(1, int(25 / per_call)), max(1, int(rep_ms / per_call))
    for _ in range(n_warm):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for i in range(n_rep):
        buf.sum()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(a.elapsed_time(b) for a, b in zip(starts, ends, strict=True))
    return times[len(times) // 2] * 1e3  # us


def bench_replayed(fn, rep=200):
    """``bench`` of ``fn`` captured once in a CUDA graph and replayed: the
    GPU's time, whatever the host's (vLLM replays the draft so)."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return bench(g.replay, rep=rep)


def probe_args(argv):
    """The probes' command line (``SHAPE_INDEX bf16|fp8 'JSON list' [graph]``,
    e.g. ``results/h200-2026-12-01j/sweep.py``): the shape, its inputs from
    ``build``, the variants (keyword arguments) and whether to time replays
    of a CUDA graph."""
    idx, kv = int(argv[1]), argv[2]
    shape = SHAPES[idx]
    return (
        shape,
        build(shape, seed=idx, kv_dtype=kv),
        json.loads(argv[3]),
        (argv[4:] == ["graph"]),
    )


def probe_gluon_options(shape, inputs, v_pages=None):
    """The Gluon pipeline options the launch takes for a probe's fp8
    ``inputs`` (``build``'s) of ``shape``: the base that probes override.
    ``v_pages``: the K and V views of the cache with V's pages transposed
    (``with_v_pages``), which the launch then reads instead."""
    from vllm_spark2_5_plugin.ops import fixed_history_launch as launch
    from vllm_spark2_5_plugin.ops.fixed_history_checks import PagedKV

    _, q, k, v, bt, ctx, qsl, sc = inputs
    _, _, _, W, nH, nKV, D = shape
    plan = launch.plan_launch(
        num_tokens=q.shape[0], num_reqs=ctx.shape[0], num_heads=nH,
        num_kv_heads=nKV, head_dim=D, sliding_window=W,
        max_kv_len=bt.shape[1] * k.shape[1], device=q.device, kv_fp8=True,
    )  # fmt: skip
    scales = (sc["k_scale"], sc["v_scale"])
    if v_pages is None:
        kv = PagedKV(k, v, bt, ctx, qsl, scales)
    else:
        kv = PagedKV(*v_pages, bt, ctx, qsl, scales, True)
    return launch.gluon_options(q, kv, plan)


def time_variants(call, variants, *, graph=False, rep=300, before=None):
    """``(variant, median us)`` for ``call(**variant)`` of each variant, after
    ``before()`` (if given) and one untimed call (``bench_replayed`` with
    ``graph``), or ``(variant, exception)`` where the variant failed: a probe
    reports it and goes on."""
    for var in variants:
        fn = functools.partial(call, **var)
        try:
            if before is not None:
                before()
            fn()
            torch.cuda.synchronize()
            yield var, bench_replayed(fn, rep) if graph else bench(fn, rep)
        except Exception as e:  # noqa: BLE001 (a probe: report, go on)
            yield var, e


@triton.jit
def _empty_kernel(x_ptr):
    pass


def launch_cost():
    """Microseconds that an empty kernel of one program per SM takes when
    timed as the kernel's graph column is (a CUDA graph replayed, the L2
    emptied before each call): what any timed launch holds beside its own
    work, which the floor does not (on the H200 3.8-4.3 us, 2026-12-04).
    ``None`` on the CPU."""
    if DEVICE != "cuda":
        return None
    x = torch.empty(1, device=DEVICE)
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    return bench_replayed(lambda: _empty_kernel[(programs,)](x))


def copy_bandwidth():
    n = 2 * 1024**3 if DEVICE == "cuda" else 2**24  # 2 GiB each way on a GPU
    src = torch.randn(n // 2, dtype=torch.bfloat16, device=DEVICE)
    dst = torch.empty_like(src)
    t = bench(functools.partial(dst.copy_, src)) * 1e-6
    return 2 * n / t  # bytes/s, read + write


LAYOUT = "nhd"
#: Where each request's pages lie in the cache: "scattered" (a permutation of
#: all blocks by Python's random.shuffle with the shape's seed, the same
#: under every torch version) or "sequential" (request by request).
PAGES = "scattered"


def build(shape, seed=0, kv_dtype="bf16"):
    """The paged cache and metadata of one shape; ``scales`` holds the
    ``k_scale``/``v_scale`` arguments (fp8) or nothing."""
    R, L, B, W, nH, nKV, D = shape
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    pages_per_req = -(-(L + B) // PAGE)
    num_blocks = R * pages_per_req + 1
    if LAYOUT == "nhd":  # vLLM's default (LBNHC)
        dims = (num_blocks, PAGE, nKV, 2 * D)
    else:  # VLLM_KV_CACHE_LAYOUT=HND (LBHNC)
        dims = (num_blocks, nKV, PAGE, 2 * D)
    raw = torch.empty(dims, dtype=DTYPE, device=DEVICE)
    raw.normal_(generator=gen)
    scales = {}
    if kv_dtype == "fp8":
        # Quantized like vLLM's cache writes: K / k_scale, V / v_scale.
        raw8 = torch.empty(dims, dtype=FP8, device=DEVICE)
        for half, s in ((slice(0, D), K_SCALE), (slice(D, 2 * D), V_SCALE)):
            raw8[..., half] = (raw[..., half].float() / s).clamp(-448, 448).to(FP8)
        raw = raw8
        scales = dict(
            k_scale=torch.tensor(K_SCALE, dtype=torch.float32, device=DEVICE),
            v_scale=torch.tensor(V_SCALE, dtype=torch.float32, device=DEVICE),
        )
    kv_cache = raw.permute(0, 2, 1, 3) if LAYOUT == "nhd" else raw
    k, v = kv_cache.transpose(1, 2).split(D, -1)
    order = list(range(num_blocks))
    if PAGES == "scattered":
        random.Random(seed).shuffle(order)
    perm = torch.tensor(order, device=DEVICE)
    bt = perm[: R * pages_per_req].view(R, pages_per_req).to(torch.int32)
    ctx = torch.full((R,), L, dtype=torch.int32, device=DEVICE)
    qsl = torch.arange(0, (R + 1) * B, B, dtype=torch.int32, device=DEVICE)
    q = torch.randn(R * B, nH, D, dtype=DTYPE, device=DEVICE, generator=gen)
    return raw, q, k, v, bt, ctx, qsl, scales


def with_v_pages(raw, D):
    """A copy of the cache ``raw`` whose V pages are transposed, as the
    DSpark draft's sliding layers keep an fp8 cache on Hopper
    (``ops.v_pages_preferred``): its K and V views."""
    from vllm_spark2_5_plugin.ops.v_pages import v_page_keys

    raw = raw.clone()
    kv_cache = raw.permute(0, 2, 1, 3) if LAYOUT == "nhd" else raw
    k, v = kv_cache.transpose(1, 2).split(D, -1)
    bits = v.view(torch.uint8)
    blocks, page, heads, _ = bits.shape
    t = bits[:, v_page_keys(v.device)].permute(0, 2, 3, 1)  # [.., D, position]
    bits.copy_(t.reshape(blocks, heads, page, D).permute(0, 2, 1, 3))
    return k, v


def dequantize(x, scale):
    """A gathered K or V window in DTYPE (fp8: times its scale)."""
    if scale is None:
        return x
    return x.to(DTYPE) * scale


def window_bounds(shape):
    R, L, B, W, nH, nKV, D = shape
    lo = max(0, L - W)
    hi = L + B
    first_page, last_page = lo // PAGE, (hi - 1) // PAGE
    return lo, hi, first_page, last_page - first_page + 1


def make_gather(shape, k, v, bt):
    R, L, B, W, nH, nKV, D = shape
    lo, hi, first_page, n_pages = window_bounds(shape)
    pages = bt[:, first_page : first_page + n_pages].reshape(-1).long()

    def gather(cache):
        # [R * n_pages, PAGE, nKV, D] -> [R, nKV, n_pages * PAGE, D]
        g = cache.index_select(0, pages)
        return g.view(R, n_pages * PAGE, nKV, D).transpose(1, 2)

    return gather, lo - first_page * PAGE, hi - lo


def make_sdpa(shape, q, k, v, bt, scale, k_scale=None, v_scale=None):
    R, L, B, W, nH, nKV, D = shape
    gather, off, span = make_gather(shape, k, v, bt)

    def run():
        kd = dequantize(gather(k)[:, :, off : off + span], k_scale)
        vd = dequantize(gather(v)[:, :, off : off + span], v_scale)
        qd = q.view(R, B, nH, D).transpose(1, 2)
        o = F.scaled_dot_product_attention(qd, kd, vd, scale=scale, enable_gqa=True)
        return o.transpose(1, 2).reshape(R * B, nH, D)

    return run


def make_flex(shape, q, k, v, bt, scale, k_scale=None, v_scale=None):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    R, L, B, W, nH, nKV, D = shape
    gather, off, span = make_gather(shape, k, v, bt)
    kv_len = (window_bounds(shape)[3]) * PAGE
    # Per-request window in gathered coordinates (uniform here, but the mask is
    # the general fixed-history rule).
    lo_t = torch.full((R,), off, dtype=torch.int32, device=DEVICE)
    hi_t = lo_t + span

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx >= lo_t[b]) & (kv_idx < hi_t[b])

    block_mask = create_block_mask(mask_mod, R, None, B, kv_len, device=DEVICE)
    flex = torch.compile(flex_attention, dynamic=False)

    def run():
        kd = dequantize(gather(k), k_scale)
        vd = dequantize(gather(v), v_scale)
        qd = q.view(R, B, nH, D).transpose(1, 2)
        o = flex(qd, kd, vd, block_mask=block_mask, scale=scale, enable_gqa=True)
        return o.transpose(1, 2).reshape(R * B, nH, D)

    return run


def fa3_available():
    """Whether vLLM's FlashAttention 3 runs here (a CUDA build of vLLM on a
    Hopper GPU)."""
    if DEVICE != "cuda":
        return False
    try:
        from vllm.vllm_flash_attn.flash_attn_interface import (
            is_fa_version_supported,
        )

        return is_fa_version_supported(3)
    except Exception:  # noqa: BLE001 (no CUDA vLLM: no such peer)
        return False


def fa3_window(shape):
    """FlashAttention's ``window_size`` that gives a request's one query (at
    position L + B - 1) the fixed-history range L - W .. L + B - 1 (all
    positions while L <= W): FA3 lets query i of sq see the keys from
    ``i + sk - sq - left`` to ``i + sk - sq + right``."""
    R, L, B, W, nH, nKV, D = shape
    return [W + B - 1 if L > W else -1, 0]


def fa3_queries(q, shape):
    """``q`` ([R * B, nH, D]) as FA3's one query per request with B * G
    query heads per KV head, ``[R, nKV, B, G, D]`` (a view): query head
    ``n * B * G + i * G + g`` is query i's head ``n * G + g``, so that FA3's
    KV head for it, its index // (B * G), is n."""
    R, L, B, W, nH, nKV, D = shape
    return q.view(R, B, nKV, nH // nKV, D).transpose(1, 2)


def fa3_output(out, shape):
    """FA3's output ``[R, nKV * B * G, D]`` back in q's order."""
    R, L, B, W, nH, nKV, D = shape
    return out.view(R, nKV, B, nH // nKV, D).transpose(1, 2).reshape(R * B, nH, D)


def make_fa3(shape, q, k, v, bt, scale, k_scale=None, v_scale=None):
    """vLLM's FlashAttention 3 over the paged cache with the fixed-history
    rule as a sliding window of one query per request (``fa3_window``,
    ``fa3_queries``); returns the whole call and FA3's call alone."""
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    R, L, B, W, nH, nKV, D = shape
    fp8 = k.dtype == FP8
    seqused = torch.full((R,), L + B, dtype=torch.int32, device=DEVICE)
    cu_q = torch.arange(R + 1, dtype=torch.int32, device=DEVICE)
    qp = torch.empty(
        R, nKV, B, nH // nKV, D, dtype=FP8 if fp8 else q.dtype, device=DEVICE
    )
    out = torch.empty(R, nKV * B * (nH // nKV), D, dtype=q.dtype, device=DEVICE)
    descales = {}
    if fp8:
        per = (R, nKV)
        one = torch.ones(1, dtype=torch.float32, device=DEVICE)
        descales = dict(
            q_descale=one.expand(per),
            k_descale=k_scale.reshape(1).expand(per),
            v_descale=v_scale.reshape(1).expand(per),
        )

    def call():
        return flash_attn_varlen_func(
            qp.view(R, -1, D), k, v, max_seqlen_q=1, cu_seqlens_q=cu_q,
            max_seqlen_k=L + B, seqused_k=seqused, softmax_scale=scale,
            causal=False, window_size=fa3_window(shape), block_table=bt, out=out,
            fa_version=3, **descales,
        )  # fmt: skip

    def run():
        qp.copy_(fa3_queries(q, shape))
        call()
        return fa3_output(out, shape)

    return run, call


def rel_err(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm()).item()


def sweep_grid(block_m, head_dim):
    """Plan changes to time: block-table loads through inline PTX
    (asm_page_load, so the compiler pipelines K/V num_stages - 1 tiles ahead)
    at several tile sizes and depths, plus plain-load configurations."""
    if block_m >= 128:
        grid = []
        # With 4 warps (one warpgroup holding all 128 rows) every tile spills
        # (sm_90, Triton 3.7.1, benchmarks/kernel_codegen.py); with 8 warps
        # 32 keys at 2-4 stages, 64 keys at 2-3 and 128 keys at 2 do not.
        tiles = (
            (32, 4, 4),
            (32, 8, 2),
            (32, 8, 3),
            (32, 8, 4),
            (64, 4, 3),
            (64, 4, 4),
            (64, 8, 2),
            (64, 8, 3),
            (64, 8, 4),
            (128, 8, 2),
            (128, 8, 3),
        )
    elif head_dim <= 64:
        grid = [dict(block_n=128, num_warps=4, num_stages=3, asm_page_load=False)]
        tiles = ((64, 4, 4), (128, 4, 3), (128, 4, 4), (128, 8, 3), (256, 4, 3))
        if block_m <= 16:
            # One or two warps: a 16-row tile then needs no reduction across
            # warps (4 warps split its keys, and its softmax goes through
            # shared memory with a barrier), and smaller programs fit more
            # per SM. sm_90 code: 96-202 registers, none spilled.
            tiles += (
                (16, 2, 4),
                (32, 1, 3),
                (32, 1, 4),
                (32, 2, 3),
                (32, 2, 4),
                (64, 2, 3),
            )
    else:
        grid = [
            dict(block_n=bn, num_warps=nw, num_stages=2, asm_page_load=False)
            # 8 warps: with an fp8 cache the 4-warp plan uses all 255 registers
            # (sm_90 code, benchmarks/kernel_codegen.py); 8 warps need ~196.
            for bn, nw in ((128, 4), (128, 8), (256, 8))
        ]
        tiles = (
            (32, 4, 6),
            (64, 4, 3),
            (64, 4, 4),
            (64, 4, 5),
            (128, 4, 3),
            (128, 8, 3),
            (128, 4, 4),
        )
    for bn, nw, ns in tiles:
        grid.append(dict(block_n=bn, num_warps=nw, num_stages=ns, asm_page_load=True))
    return grid


def triton_plan(plan):
    """``plan`` as the Triton kernel runs it: no Gluon kernel, hence none of
    its fp8 scores (``LaunchPlan`` refuses them without it)."""
    return dataclasses.replace(
        plan, gluon=False, fp8_scores=False, half_rows=False, wide_tiles=False
    )


def sweep(shape, q, k, v, bt, ctx, qsl, scale, out, base, scales, want, only=None):
    """Tile/warp/stage grid at the default split count, then the best of those
    with half, twice and four times the splits and, with one split, with 0 (one
    program per item) to 3 persistent programs per SM. ``only``: a list of
    plan changes (dicts of ``LaunchPlan`` fields) to time instead of all that.
    ``scales``: the ``k_scale``/``v_scale`` arguments of an fp8 cache, else
    empty; with them each configuration is tried with every way of feeding
    the tensor cores (fp8 tensor-core dots only at tiles of >= 64 rows, where
    Triton emits them). Every plan prints its time and its difference from ``want``, the
    default plan's output. Returns [(us, plan)], fastest first."""
    R, L, B, W, nH, nKV, D = shape
    group = nH // nKV
    results = []
    base = triton_plan(base)  # the grid is the Triton kernel's

    def try_plan(plan, **changes):
        if changes.get("num_splits", plan.num_splits) > 1:
            changes["programs_per_sm"] = 0  # the persistent grid needs 1 split
        try:
            plan = dataclasses.replace(plan, **changes)
        except ValueError:  # a combination LaunchPlan refuses
            return
        if plan.block_n * D > 256 * 128:
            return
        try:
            fn = functools.partial(
                ops.fixed_history_attention,
                *(q, k, v, bt, ctx, qsl, W, scale),
                out=out,
                plan=plan,
                **scales,
            )
            fn()
            t = bench(fn, rep=60)
        except Exception as e:  # out of resources etc.
            print(f"    sweep {plan}: failed ({type(e).__name__})")
            return
        # Every plan's output against the default plan's: a plan that times
        # well but computes something else shows here.
        kind = "e4m3 dots" if plan.fp8_e4m3_dot else "tried"
        print(
            f"    {kind} {t:9.1f} us, rel diff vs default plan "
            f"{rel_err(out, want):.2e}: {plan}",
            flush=True,
        )
        results.append((t, plan))

    if only is not None:
        for changes in only:
            try_plan(base, **changes)
        results.sort(key=lambda x: x[0])
        return results

    # fp8: each configuration with each way of feeding the tensor cores.
    dots = [dict(fp8_f16_dot=base.fp8_f16_dot, fp8_e4m3_dot=False)]
    if scales:
        dots = [dict(fp8_f16_dot=f16, fp8_e4m3_dot=False) for f16 in (False, True)]
        if base.tile_rows(group) >= 64:
            dots.append(dict(fp8_f16_dot=False, fp8_e4m3_dot=True))
    for changes in sweep_grid(base.tile_rows(group), D):
        for dot in dots:
            try_plan(base, **dot, **changes)
    if scales and base.tile_rows(group) < 64 and D >= 128:
        # fp8 tensor cores need 64-row tiles: more queries per tile than a
        # request has (the extra rows are masked), twice the MMA work.
        block_q = base.block_q
        while dataclasses.replace(base, block_q=block_q).tile_rows(group) < 64:
            block_q *= 2
        wide = dict(block_q=block_q, fp8_f16_dot=False, fp8_e4m3_dot=True)
        for bn, nw, ns in ((64, 8, 2), (64, 8, 3), (128, 8, 2), (64, 4, 2)):
            try_plan(base, block_n=bn, num_warps=nw, num_stages=ns, **wide)
        # The same widening with 16-bit dots: a 64-row tile is multiplied by
        # warpgroup MMAs from shared memory, so the converted K and V tiles
        # are stored there once instead of being rearranged in registers.
        for f16 in (False, True):
            wide16 = dict(wide, fp8_f16_dot=f16, fp8_e4m3_dot=False)
            for bn, nw, ns in ((64, 4, 2), (64, 4, 3), (128, 4, 2), (64, 8, 2)):
                try_plan(base, block_n=bn, num_warps=nw, num_stages=ns, **wide16)
    results.sort(key=lambda x: x[0])
    if results:
        best = results[0][1]
        for s in {
            max(1, base.num_splits // 2),
            base.num_splits * 2,
            base.num_splits * 4,
        }:
            if s != best.num_splits:
                try_plan(best, num_splits=s)
        if best.num_splits == 1:
            for p in range(4):
                if p != best.programs_per_sm:
                    try_plan(best, programs_per_sm=p)
        if base.tile_rows(group) >= 128 and base.block_q > 1:  # several passes
            try_plan(best, block_q=base.block_q // 2)
    results.sort(key=lambda x: x[0])
    for t, plan in results[:8]:
        print(f"    sweep {t:9.1f} us  {plan}", flush=True)
    return results


def time_gluon(shape, q, k, v, bt, ctx, qsl, scale, scales, want, only=None):
    """The Gluon kernel's variants (sm_90 only) at this shape: time and
    difference from the default kernel's output, per variant (those whose
    name contains ``only``, where given)."""
    from vllm_spark2_5_plugin.ops.fixed_history_gluon import (
        fixed_history_attention_wgmma,
    )

    W = shape[3]
    big = dict(programs_per_sm=1, maxnreg=168, worker_regs=152)
    variants = [
        ("warp-specialized, 64-key tiles, 2 staged, 2/SM", {}),
        (
            "warp-specialized, 32-key tiles, 6 staged, 2/SM",
            dict(block_n=32, raw_slots=6),
        ),
    ]
    wide = shape[2] * shape[4] // shape[5] >= 128  # 128 rows without padding
    if wide:
        variants += [
            ("warp-specialized, 128-row tiles, 1/SM", dict(rows=128)),
            (
                "warp-specialized, 128-row tiles, ring 4, 4 staged, 1/SM",
                dict(rows=128, ring=4, raw_slots=4),
            ),
        ]
    # The multiplying warps fence each tile instead of the loader (the
    # direct-copy loader's copies then signal their tiles as they land).
    moved = dict(fence_in_mma=True)
    variants += [
        ("warp-specialized, fence in the MMA warps, 2/SM", moved),
        (
            "warp-specialized, fence in the MMA warps, ring 3, 2/SM",
            dict(moved, ring=3),
        ),
    ]
    if wide:
        variants += [
            (
                "warp-specialized, 128-row tiles, fence in the MMA warps, 1/SM",
                dict(moved, rows=128),
            ),
            (
                "warp-specialized, 128-row tiles, fence in the MMA warps, ring 4, "
                "4 staged, 1/SM",
                dict(moved, rows=128, ring=4, raw_slots=4),
            ),
            # Two multiplying partitions of 64 rows, each releasing the
            # buffers itself (no barrier of both warpgroups per tile).
            (
                "warp-specialized, 128-row tiles, split MMA, 1/SM",
                dict(rows=128, split_mma=True),
            ),
            (
                "warp-specialized, 128-row tiles, split MMA, fence in the MMA "
                "warps, ring 4, 4 staged, 1/SM",
                dict(moved, rows=128, ring=4, raw_slots=4, split_mma=True),
            ),
        ]
    if not scales:  # whole pages copied by TMA (caches in q's dtype only)
        variants.append(("warp-specialized, TMA page copies, 2/SM", dict(tma=True)))
        if wide:
            variants += [
                (
                    "warp-specialized, 128-row tiles, split MMA, TMA page "
                    f"copies, ring {ring}, 1/SM",
                    dict(rows=128, split_mma=True, tma=True, ring=ring),
                )
                for ring in (3, 4, 5)
            ]
    if scales:  # fp8 (4 staged bf16 tiles would exceed the shared memory)
        variants.append(
            (
                "warp-specialized, 64-key tiles, 4 staged, ring 3, 1/SM",
                dict(raw_slots=4, ring=3, **big),
            )
        )
        # float16 MMAs (K/V converted to float16 only), and with the staged
        # tiles read back 8 values per thread (the launch's fp8 loader)
        variants += [
            (f"{name}, float16 dots", dict(kwargs, f16_dots=True))
            for name, kwargs in variants
        ] + [
            (
                f"{name}, float16 dots, narrow conversion",
                dict(kwargs, f16_dots=True, narrow_convert=True),
            )
            for name, kwargs in variants
        ]
        if shape[6] % 128 == 0:  # raw tiles staged by TMA (128 e4m3 per row)
            fp8_tma = dict(tma=True, f16_dots=True, narrow_convert=True)
            variants.append(
                ("warp-specialized, TMA-staged fp8 pages, float16 dots, 2/SM", fp8_tma)
            )
            if wide:
                variants.append(
                    (
                        "warp-specialized, 128-row tiles, split MMA, ring 4, "
                        "TMA-staged fp8 pages, float16 dots, 1/SM",
                        dict(fp8_tma, rows=128, split_mma=True, ring=4),
                    )
                )
    for name, kwargs in variants:
        if only and only not in name:
            continue
        out = torch.full_like(q, float("nan"))
        fn = functools.partial(
            fixed_history_attention_wgmma,
            *(q, k, v, bt, ctx, qsl, W, scale, out),
            **scales,
            **kwargs,
        )
        try:
            fn()
            torch.cuda.synchronize()
            t = bench(fn, rep=60)
        except Exception as e:  # noqa: BLE001 (an experiment: report, go on)
            print(f"    gluon {name}: failed ({type(e).__name__}: {e})", flush=True)
            continue
        print(
            f"    gluon {t:9.1f} us, rel diff vs default plan "
            f"{rel_err(out, want):.2e}: {name}",
            flush=True,
        )


def run_shape(idx, shape, kv_dtype, bw, args):
    """Times one shape with one KV-cache dtype; returns its table row."""
    R, L, B, W, nH, nKV, D = shape
    name = f"({R}, {L}, {B}, {W}, {nH}/{nKV}/{D})"
    kv_name = kv_dtype_name(kv_dtype)
    print(f"\n== shape {name}, KV cache {kv_name}", flush=True)
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    raw, q, k, v, bt, ctx, qsl, scales = build(shape, seed=idx, kv_dtype=kv_dtype)
    scale = D**-0.5
    span = min(L, W) + B
    kv_bytes = R * nKV * span * D * 2 * raw.element_size()
    floor_us = kv_bytes / bw * 1e6
    out = torch.empty_like(q)
    # fp8 on Hopper: the kernel reads V's pages transposed, as the draft's
    # sliding layers keep them (the reference and the peers read V in rows).
    v_pages = (
        kv_dtype == "fp8"
        and not args.v_rows
        and ops.v_pages_preferred(q.device, kv_fp8=True, head_dim=D, page_size=PAGE)
    )
    k_run, v_run = with_v_pages(raw, D) if v_pages else (k, v)

    fn = functools.partial(
        ops.fixed_history_attention,
        *(q, k_run, v_run, bt, ctx, qsl, W, scale),
        out=out,
        v_pages_transposed=v_pages,
        **scales,
    )
    fn()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    ref_out = out.clone()
    # Spot check against the reference (it dequantizes fp8 itself) on a few
    # requests.
    sub = slice(0, 2)
    ref = ops.fixed_history_attention_reference(
        *(q[: 2 * B], k, v, bt[sub], ctx[sub], qsl[:3], W, scale), **scales
    )
    err_ref = rel_err(ref_out[: 2 * B], ref)
    t_kernel = bench(fn)
    t_base = err_base = float("nan")
    if BASELINE is not None:
        base_out = torch.full_like(out, float("nan"))
        with kernels_from(BASELINE):
            ops.fixed_history_attention(
                *(q, k, v, bt, ctx, qsl, W, scale), out=base_out, **scales
            )
            err_base = rel_err(base_out, ref_out)

        def baseline():
            with kernels_from(BASELINE):
                fn()

        # Alternate, and keep each one's best: drift hits both alike.
        t_base = bench(baseline)
        t_kernel = min(t_kernel, bench(fn))
        t_base = min(t_base, bench(baseline))
        print(
            f"  baseline kernel {t_base:.1f} us (rel diff vs kernel "
            f"{err_base:.2e}); kernel {t_kernel:.1f} us",
            flush=True,
        )
    t_graph = float("nan")
    if DEVICE == "cuda":
        t_graph = bench_replayed(fn)
    # The plan the kernel launched with (the block table holds L + B).
    plan = ops.uniform_batch_plan(
        shape, device=q.device, page_size=PAGE, kv_fp8=kv_dtype != "bf16"
    )
    via_triton = ""
    if plan.gluon:  # the Gluon kernel ran: the Triton kernel's time too
        triton_fn = functools.partial(fn, plan=triton_plan(plan))
        via_triton = f" (the plan's Triton kernel: {bench(triton_fn):.1f} us)"
    print(
        f"  kernel {t_kernel:.1f} us{via_triton} (graph {t_graph:.1f} us), "
        f"plan {plan}{', V pages transposed' if v_pages else ''}, "
        f"floor {floor_us:.1f} us, {kv_bytes / t_kernel / 1e6:.2f} TB/s, "
        f"rel err vs reference {err_ref:.2e}",
        flush=True,
    )

    best_sweep = None
    if args.sweep:
        res = sweep(
            *(shape, q, k, v, bt, ctx, qsl, scale, torch.empty_like(q), plan),
            scales,
            ref_out,
            only=args.try_plans,
        )
        if res:
            best_sweep = res[0]

    if args.gluon:
        time_gluon(
            shape, q, k, v, bt, ctx, qsl, scale, scales, ref_out, args.gluon_only
        )

    t_sdpa = float("nan")
    if not args.kernel_only:
        sdpa = make_sdpa(shape, q, k, v, bt, scale, **scales)
        o = sdpa()
        err_sdpa = rel_err(o, ref_out)
        del o
        t_sdpa = bench(sdpa)
        print(
            f"  gather+SDPA {t_sdpa:.1f} us (rel diff vs kernel {err_sdpa:.2e})",
            flush=True,
        )

    t_flex, err_flex = float("nan"), float("nan")
    if not (args.no_flex or args.kernel_only):
        try:
            flex = make_flex(shape, q, k, v, bt, scale, **scales)
            o = flex()
            err_flex = rel_err(o, ref_out)
            del o
            t_flex = bench(flex)
            print(
                f"  gather+Flex {t_flex:.1f} us (rel diff vs kernel {err_flex:.2e})",
                flush=True,
            )
        except Exception as e:
            print(f"  gather+Flex failed: {type(e).__name__}: {e}"[:400], flush=True)

    t_fa3 = float("nan")
    if not (args.no_fa3 or args.kernel_only) and fa3_available():
        try:
            fa3, fa3_call = make_fa3(shape, q, k, v, bt, scale, **scales)
            o = fa3()
            err_fa3 = rel_err(o, ref_out)
            del o
            t_fa3 = bench(fa3)
            print(
                f"  vLLM FA3 {t_fa3:.1f} us (the call alone "
                f"{bench(fa3_call):.1f} us; rel diff vs kernel {err_fa3:.2e})",
                flush=True,
            )
        except Exception as e:
            print(f"  vLLM FA3 failed: {type(e).__name__}: {e}"[:400], flush=True)

    ratio = t_kernel / floor_us
    speedup = t_sdpa / t_kernel
    row = dict(
        name=name,
        kv=kv_name + (" (V pages transposed)" if v_pages else ""),
        speed_goal=kv_dtype == "bf16",
        kernel=t_kernel,
        graph=t_graph,
        sdpa=t_sdpa,
        flex=t_flex,
        floor=floor_us,
        ratio=ratio,
        speedup=speedup,
        flex_speedup=t_flex / t_kernel,
        fa3=t_fa3,
        fa3_speedup=t_fa3 / t_kernel,
        ratio_ok=ratio <= GOAL_FLOOR_RATIO,
        speed_ok=speedup >= GOAL_SPEEDUP,
        tbps=kv_bytes / t_kernel / 1e6,
        err=err_ref,
        plan=plan,
        sweep=best_sweep,
        base=t_base,
        base_err=err_base,
    )
    del raw, q, k, v, k_run, v_run, bt, ctx, qsl, out, scales
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return row


def kv_dtype_name(kv_dtype):
    """The cache dtype a --kv-dtypes choice stands for in this run."""
    return str(DTYPE).removeprefix("torch.") if kv_dtype == "bf16" else "fp8_e4m3"


def goal_verdict(r):
    """The floor goal for every row; the SDPA speed-up goal for bf16 rows
    whose SDPA peer ran (a NaN peer is not a miss)."""
    misses = []
    if not r["ratio_ok"]:
        misses.append(f"{r['ratio']:.2f} > {GOAL_FLOOR_RATIO} x floor")
    judged_speed = r["speed_goal"] and not math.isnan(r["speedup"])
    if judged_speed and not r["speed_ok"]:
        misses.append(f"{r['speedup']:.1f}x < {GOAL_SPEEDUP:g}x vs SDPA")
    if misses:
        return "no: " + ", ".join(misses)
    return "yes" if judged_speed or not r["speed_goal"] else "yes (floor; SDPA not run)"


def plan_changes(text):
    """A ``--try`` value: a JSON object of ``LaunchPlan`` fields."""
    try:
        changes = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e}): {text!r}") from None
    fields = {f.name for f in dataclasses.fields(ops.LaunchPlan)}
    if not isinstance(changes, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}")
    unknown = sorted(set(changes) - fields)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"not LaunchPlan fields: {', '.join(unknown)} "
            f"(fields: {', '.join(sorted(fields))})"
        )
    return changes


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description="Fixed-history attention kernel vs gather + SDPA/Flex (CUDA)."
    )
    ap.add_argument(
        "--shapes",
        default=None,
        help="indices into SHAPES (with --smoke: into the smoke shapes), e.g. 0,3",
    )
    ap.add_argument(
        "--kv-dtypes",
        nargs="+",
        choices=KV_DTYPES,
        default=list(KV_DTYPES),
        help="KV-cache dtypes to time for every shape: bf16 (the model dtype, "
        "--kv-cache-dtype auto) and/or fp8 (e4m3 with per-tensor scales); "
        "default both",
    )
    ap.add_argument(
        "--baseline-kernel",
        metavar="FILE",
        help="also time the kernels of this fixed_history_kernel.py (before/after)",
    )
    ap.add_argument("--sweep", action="store_true", help="also try tile configs")
    ap.add_argument(
        "--try",
        dest="try_plans",
        metavar="JSON",
        type=plan_changes,
        action="append",
        default=None,
        help="with --sweep: time only these changes to each default plan "
        '(repeatable), e.g. \'{"block_q": 16, "block_n": 64}\'',
    )
    ap.add_argument(
        "--gluon",
        action="store_true",
        help="also time the Gluon kernel's pipeline variants (sm_90 GPUs only)",
    )
    ap.add_argument(
        "--gluon-only",
        metavar="TEXT",
        default=None,
        help="with --gluon: only the variants whose name contains TEXT",
    )
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument(
        "--no-fa3", action="store_true", help="leave vLLM's FlashAttention 3 out"
    )
    ap.add_argument("--kernel-only", action="store_true", help="skip baselines")
    ap.add_argument(
        "--v-rows",
        action="store_true",
        help="fp8 caches with V in rows even where the draft's layers would keep "
        "V's pages transposed (ops.v_pages_preferred)",
    )
    ap.add_argument("--layout", choices=("nhd", "hnd"), default="nhd")
    ap.add_argument(
        "--pages",
        choices=("scattered", "sequential"),
        default="scattered",
        help="block placement: a seeded permutation of all blocks (default) or "
        "each request's blocks in order",
    )
    ap.add_argument(
        "--flush",
        choices=("zero", "clean"),
        default=FLUSH,
        help="how the L2 cache is emptied before each timed call: zero a 256 MB "
        "buffer (do_bench's way; the timed call writes its dirty lines back) or "
        "read one (a cold L2 of clean lines); default clean, or "
        "SPARK2_5_BENCH_FLUSH",
    )
    ap.add_argument("--md", default=None, help="write the markdown table here")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="tiny shapes (also on CPU with TRITON_INTERPRET=1; the bf16 rows "
        "then use float16)",
    )
    args = ap.parse_args(argv)
    # Checked before anything is timed (each of these raised a traceback
    # after the bandwidth measurement).
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    if args.shapes is not None:
        indices = args.shapes.split(",")
        if not all(i.strip().isdigit() and int(i) < len(shapes) for i in indices):
            ap.error(
                f"--shapes {args.shapes}: comma-separated indices 0..{len(shapes) - 1}"
                f" into the {'smoke ' if args.smoke else ''}shapes"
            )
    if args.baseline_kernel and not Path(args.baseline_kernel).is_file():
        ap.error(f"--baseline-kernel {args.baseline_kernel}: no such file")
    if args.flush not in ("zero", "clean"):  # a default from the environment
        ap.error(f"SPARK2_5_BENCH_FLUSH={args.flush}: use zero or clean")
    if DEVICE == "cpu" and not (args.smoke and _interpreted()):
        print(
            f"{ap.prog}: no CUDA device: this benchmark needs a GPU; on CPU only "
            "--smoke with TRITON_INTERPRET=1 runs",
            file=sys.stderr,
        )
        sys.exit(2)
    return args


def _interpreted():
    """Whether Triton runs kernels in its CPU interpreter (TRITON_INTERPRET)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


#: --smoke's tiny shapes. The third has 64-row tiles (8 queries x 8 heads):
#: with --sweep and an fp8 cache it exercises the fp8 tensor-core plans too.
SMOKE_SHAPES = [
    (2, 100, 4, 40, 4, 2, 32),
    (3, 20, 2, 64, 2, 2, 32),
    (2, 60, 8, 40, 16, 2, 32),
]


def main():
    args = parse_args()
    global SHAPES, DTYPE, LAYOUT, PAGES, BASELINE, FLUSH
    LAYOUT, PAGES, FLUSH = args.layout, args.pages, args.flush
    if args.baseline_kernel:
        BASELINE = load_kernels(args.baseline_kernel)
    if args.smoke:
        DTYPE = torch.float16  # bf16 is broken under the Triton interpreter
        SHAPES = SMOKE_SHAPES  # --shapes then picks among these
    if args.shapes is None:
        args.shapes = ",".join(str(i) for i in range(len(SHAPES)))
    kv_dtypes = [d for d in KV_DTYPES if d in args.kv_dtypes]

    if DEVICE == "cuda":
        props = torch.cuda.get_device_properties(0)
        gpu = f"{props.name} ({props.multi_processor_count} SMs)"
    else:
        gpu = "CPU (Triton interpreter; smoke test only)"
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    header = (
        f"GPU: {gpu}; torch {torch.__version__}; triton {triton.__version__}; "
        f"python {platform.python_version()}; date {date}"
    )
    print(header, flush=True)
    bw = copy_bandwidth()
    print(
        f"device-to-device copy bandwidth (read+write): {bw / 1e12:.2f} TB/s",
        flush=True,
    )
    empty_us = launch_cost()
    launch_note = (
        "an empty kernel of one program per SM: not timed on the CPU"
        if empty_us is None
        else f"an empty kernel of one program per SM takes {empty_us:.1f} us timed "
        "as the graph column is, which no floor holds"
    )
    print(launch_note, flush=True)

    rows = [
        run_shape(idx, SHAPES[idx], kv_dtype, bw, args)
        for idx in (int(i) for i in args.shapes.split(","))
        for kv_dtype in kv_dtypes
    ]

    lines = [
        header,
        "",
        f"Copy bandwidth (read+write): {bw / 1e12:.2f} TB/s; q in {DTYPE}; KV "
        f"caches {', '.join(map(kv_dtype_name, kv_dtypes))} (fp8: e4m3, k_scale "
        f"{K_SCALE}, v_scale {V_SCALE} as device tensors); block size {PAGE}, "
        f"{PAGES} blocks, KV layout {LAYOUT.upper()}; times are medians in "
        f"microseconds (L2 emptied before each call: {FLUSH}); the floor reads "
        f"the K/V window once at the cache's bytes per element; {launch_note}.",
        "",
        "| shape (R, L, B, W, nH/nKV/D) | KV dtype | kernel us | kernel (CUDA "
        "graph) us | gather+SDPA us | gather+Flex us | vLLM FA3 us | floor us | "
        "kernel/floor | speed-up vs SDPA | speed-up vs Flex | speed-up vs FA3 | "
        "K/V TB/s | goal met? |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['kv']} | {r['kernel']:.1f} | {r['graph']:.1f} | "
            f"{r['sdpa']:.1f} | {r['flex']:.1f} | {r['fa3']:.1f} | "
            f"{r['floor']:.1f} | {r['ratio']:.2f} | {r['speedup']:.1f}x | "
            f"{r['flex_speedup']:.1f}x | {r['fa3_speedup']:.1f}x | "
            f"{r['tbps']:.2f} | {goal_verdict(r)} |"
        )
    if BASELINE is not None:
        lines += [
            "",
            f"Before/after, same process and launch plans: baseline kernels from "
            f"`{args.baseline_kernel}`.",
            "",
            "| shape (R, L, B, W, nH/nKV/D) | KV dtype | baseline kernel us | "
            "kernel us | kernel / baseline | baseline rel diff vs kernel |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['name']} | {r['kv']} | {r['base']:.1f} | {r['kernel']:.1f} | "
            f"{r['kernel'] / r['base']:.2f} | {r['base_err']:.1e} |"
            for r in rows
        ]
    table = "\n".join(lines)
    print("\n" + table)
    if args.sweep:
        print("\nbest sweep configs:")
        for r in rows:
            if r["sweep"]:
                print(
                    f"  {r['name']} {r['kv']}: {r['sweep'][0]:.1f} us "
                    f"{r['sweep'][1]} (default {r['kernel']:.1f} us {r['plan']})"
                )
    if args.md:
        Path(args.md).write_text(table + "\n")


if __name__ == "__main__":
    main()
