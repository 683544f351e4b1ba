# How fast can a program per (request, KV head) read shape 4's paged K/V
# window, with no attention at all? Triton kernels that only sum the window:
# cp.async-pipelined gathers (pointer loads) and TMA page loads (a tensor
# descriptor per cache), for 1..4 key-range splits per item. Medians of
# do_bench in us, against the floor (a large device-to-device copy).
#   python3 read_probe.py [SHAPE_INDEX]
import functools
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path[:0] = ["benchmarks"]
import bench_fixed_history_attention as B  # noqa: E402

PAGE = tl.constexpr(16)


@triton.jit
def gather_sum(
    raw,
    bt,
    out,
    bt_stride,
    first_page,
    n_pages,
    NKV: tl.constexpr,
    SPLITS: tl.constexpr,
    D2: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    item, split = pid // SPLITS, pid % SPLITS
    r, h = item // NKV, item % NKV
    per = tl.cdiv(n_pages, SPLITS)
    p0 = first_page + split * per
    p1 = tl.minimum(p0 + per, first_page + n_pages)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D2)
    acc = tl.zeros([16, D2], dtype=tl.float32)
    ones = tl.full([16, BLOCK_N], 1.0, dtype=tl.bfloat16)
    for p in range(p0 * PAGE, p1 * PAGE, BLOCK_N):
        key = p + offs_n
        blk = tl.load(bt + r * bt_stride + key // PAGE, mask=key < p1 * PAGE, other=0)
        row = (blk.to(tl.int64) * PAGE + key % PAGE) * NKV + h
        x = tl.load(
            raw + row[:, None] * D2 + offs_d[None, :],
            mask=(key < p1 * PAGE)[:, None],
            other=0.0,
        )
        acc = tl.dot(ones, x.to(tl.bfloat16), acc)
    tl.store(out + pid, tl.sum(acc))


@triton.jit
def tma_sum(
    desc,
    bt,
    out,
    bt_stride,
    first_page,
    n_pages,
    NKV: tl.constexpr,
    SPLITS: tl.constexpr,
    D2: tl.constexpr,
):
    pid = tl.program_id(0)
    item, split = pid // SPLITS, pid % SPLITS
    r, h = item // NKV, item % NKV
    per = tl.cdiv(n_pages, SPLITS)
    p0 = first_page + split * per
    p1 = tl.minimum(p0 + per, first_page + n_pages)
    acc = tl.zeros([16, D2], dtype=tl.float32)
    ones = tl.full([16, PAGE], 1.0, dtype=tl.bfloat16)
    for p in range(p0, p1):
        blk = tl.load(bt + r * bt_stride + p)
        x = desc.load([blk * PAGE, h, 0])
        acc = tl.dot(ones, tl.reshape(x, [PAGE, D2]).to(tl.bfloat16), acc)
    tl.store(out + pid, tl.sum(acc))


def timed(name, fn, ref):
    """Runs fn once (checked against ref), then its do_bench median."""
    try:
        out = fn()
        ok = torch.allclose(out.sum(), ref, rtol=1e-3, atol=1.0)
        t = triton.testing.do_bench(fn, rep=200, return_mode="median") * 1e3
        print(f"  {name}: {t:7.1f} us {'ok' if ok else 'WRONG'}", flush=True)
    except Exception as e:  # noqa: BLE001 (a probe: report, go on)
        print(f"  {name}: {type(e).__name__} {str(e)[:160]}", flush=True)


def run_gather(raw2, bt, first_page, n_pages, nkv, splits, cfg):
    block_n, stages, warps = cfg
    out = torch.empty(bt.shape[0] * nkv * splits, device="cuda")
    gather_sum[(out.numel(),)](
        raw2,
        bt,
        out,
        bt.stride(0),
        first_page,
        n_pages,
        NKV=nkv,
        SPLITS=splits,
        D2=raw2.shape[1],
        BLOCK_N=block_n,
        num_stages=stages,
        num_warps=warps,
    )
    return out


def run_tma(desc, d2, bt, first_page, n_pages, nkv, splits, cfg):
    stages, warps = cfg
    out = torch.empty(bt.shape[0] * nkv * splits, device="cuda")
    tma_sum[(out.numel(),)](
        desc,
        bt,
        out,
        bt.stride(0),
        first_page,
        n_pages,
        NKV=nkv,
        SPLITS=splits,
        D2=d2,
        num_stages=stages,
        num_warps=warps,
    )
    return out


def main():
    idx = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    B.LAYOUT, B.PAGES = "nhd", "scattered"
    shape = B.SHAPES[idx]
    R, L, Bq, W, nH, nKV, D = shape
    big = torch.empty(2**28, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(big)
    t = triton.testing.do_bench(lambda: dst.copy_(big), rep=200, return_mode="median")
    bw = 2 * big.numel() / (t * 1e-3)
    for kv in ("bf16", "fp8"):
        raw, q, k, v, bt, ctx, qsl, sc = B.build(shape, seed=idx, kv_dtype=kv)
        lo, hi, first_page, n_pages = B.window_bounds(shape)
        kv_bytes = R * nKV * (hi - lo) * D * 2 * raw.element_size()
        print(
            f"\n{kv} shape {shape}: floor {kv_bytes / bw * 1e6:.1f} us "
            f"({bw / 1e12:.2f} TB/s copy), {n_pages} pages per item",
            flush=True,
        )
        raw2 = raw.view(-1, 2 * D)  # rows (block, slot, head)
        flat = raw.view(-1, nKV, 2 * D)  # (block * PAGE + slot, head, 2D)
        pages = bt[:, first_page : first_page + n_pages].long()
        ref = raw.view(torch.uint8)[pages].view(raw.dtype).float().sum()
        desc = TensorDescriptor.from_tensor(flat, [PAGE, 1, 2 * D])
        for splits in (1, 2, 4):
            args = (bt, first_page, n_pages, nKV, splits)
            for cfg in ((64, 3, 4), (64, 4, 4), (128, 3, 8), (64, 6, 4)):
                name = f"gather splits {splits} block_n/stages/warps {cfg}"
                timed(name, functools.partial(run_gather, raw2, *args, cfg), ref)
            for cfg in ((3, 4), (6, 4), (10, 4)):
                name = f"tma    splits {splits} stages/warps {cfg}"
                timed(name, functools.partial(run_tma, desc, 2 * D, *args, cfg), ref)


if __name__ == "__main__":
    main()
