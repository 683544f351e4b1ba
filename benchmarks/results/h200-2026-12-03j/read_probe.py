# Read-only probe of the fixed-history kernel's K/V traffic at one shape:
# each program walks one (request, KV head) item's window in BLOCK_N-key
# tiles through the block table, as the kernel does, and only adds up what
# it read (int32, elementwise; one value per program is stored so that the
# loads stay). "split": K and V loaded as two [BLOCK_N, D] tiles, as the
# kernel loads them; "joined": one [BLOCK_N, 2D] tile, since in vLLM's
# cache layout a key's K and V of one head are adjacent (at fp8 D = 64 one
# 128-byte line instead of two 64-byte halves per request). The question:
# does fp8 shape 5's one-warp plan lose its time to 64-byte requests
# (Nsight Compute: L1 and L2 80% busy, DRAM 60%)?
#   PYTHONPATH=/tmp/t371:src python3 read_probe.py SHAPE bf16|fp8 'JSON list'
# e.g. '[{"joined": false}, {"joined": true}, {"joined": true, "num_warps": 4}]'
import json
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def read_kernel(
    k_ptr, bt_ptr, out_ptr, lo, hi, stride_blk, stride_slot, stride_bt,
    NUM_KV: tl.constexpr, COLS: tl.constexpr, V_OFFSET: tl.constexpr,
    JOINED: tl.constexpr, BLOCK_N: tl.constexpr, PAGE: tl.constexpr,
):  # fmt: skip
    item = tl.program_id(0)
    req, head = item // NUM_KV, item % NUM_KV
    offs_n = tl.arange(0, BLOCK_N)
    offs_c = tl.arange(0, COLS)
    acc = tl.zeros([BLOCK_N, COLS], dtype=tl.int32)
    base = k_ptr + head * (2 * V_OFFSET)
    for start in range(lo, hi, BLOCK_N):
        pos = start + offs_n
        ok = pos < hi
        page = tl.load(bt_ptr + req * stride_bt + pos // PAGE, mask=ok, other=0)
        row = base + page.to(tl.int64) * stride_blk + (pos % PAGE) * stride_slot
        tile = tl.load(row[:, None] + offs_c[None, :], mask=ok[:, None], other=0)
        acc += tile.to(tl.int32)
        if not JOINED:
            v = tl.load(
                row[:, None] + V_OFFSET + offs_c[None, :], mask=ok[:, None], other=0
            )
            acc += v.to(tl.int32)
    tl.store(out_ptr + item, tl.sum(tl.sum(acc, axis=1), axis=0))


def main():
    shape, inputs, variants, _ = B.probe_args(sys.argv + ["graph"])
    raw, q, k, v, bt, ctx, qsl, sc = inputs
    R, L, Bq, W, nH, nKV, D = shape
    lo, hi = max(0, L - W), L + Bq
    # Read the cache bytes as integers (fp8 as uint8, bf16 as int16).
    ints = k.view(torch.uint8 if k.element_size() == 1 else torch.int16)
    assert v.data_ptr() - k.data_ptr() == D * k.element_size(), "K, V not adjacent"
    out = torch.empty(R * nKV, dtype=torch.int32, device=k.device)
    # What each program must find: its window's K and V integers summed.
    first = lo // B.PAGE
    pages = bt[:, first : (hi - 1) // B.PAGE + 1].long()
    want = []
    for cache in (ints, v.view(ints.dtype)):
        g = cache[pages.reshape(-1)].view(R, -1, nKV, D)[:, lo - first * B.PAGE :]
        want.append(g[:, : hi - lo].to(torch.int64).sum(dim=(1, 3)))
    want = (want[0] + want[1]).reshape(-1)
    print(f"shape {shape}, {k.dtype}, window keys {hi - lo}", flush=True)
    for var in variants:
        joined = var.get("joined", False)
        block_n = var.get("block_n", 32)

        def call(joined=joined, block_n=block_n, var=var):
            read_kernel[(R * nKV,)](
                ints, bt, out, lo, hi, ints.stride(0), ints.stride(1), bt.stride(0),
                NUM_KV=nKV, COLS=2 * D if joined else D, V_OFFSET=D,
                JOINED=joined, BLOCK_N=block_n, PAGE=B.PAGE,
                num_warps=var.get("num_warps", 1),
                num_stages=var.get("num_stages", 3),
            )  # fmt: skip

        out.zero_()
        call()
        torch.cuda.synchronize()
        # int32 sums wrap; compare them as int32.
        bad = (out.to(torch.int64) != want.to(torch.int32).to(torch.int64)).sum()
        assert bad == 0, f"{bad} programs read other bytes: {var}"
        t = B.bench_replayed(call, 300)
        nbytes = R * nKV * (hi - lo) * 2 * D * k.element_size()
        print(
            f"{t:8.1f} us  {nbytes / t / 1e6:6.2f} TB/s  {json.dumps(var)}", flush=True
        )


if __name__ == "__main__":
    main()
