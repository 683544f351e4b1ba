# The launch's time against the key span per item near the benchmark's
# shape 3 (256 requests x 8 KV heads, 8 queries x 4 heads per KV head):
# L = 2040 and W varied so that each item takes 8-32 full tiles of 64 keys
# (the Gluon kernel's tiles start at the window's first page), and shape 3
# itself (L = 2048, W = 1024: 17 tiles, the last with 8 keys). A line
# through (tiles per item, time) of the full-tile cases splits the time
# into a cost per tile and a cost per item. CUDA-graph replays, L2 emptied
# by reading before each call.
#   PYTHONPATH=/tmp/t371:src python3 span_probe.py bf16|fp8
import functools
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402

kv = sys.argv[1]
bw = B.copy_bandwidth()
print(f"copy bandwidth {bw / 1e12:.2f} TB/s, {kv}", flush=True)
rows = []
cases = [(2040, 504), (2040, 1016), (2048, 1024), (2040, 1080), (2040, 1528)]
for L, W in [*cases, (2040, 2040), (2040, 1016), (2048, 1024)]:
    shape = (256, L, 8, W, 32, 8, 128)
    raw, q, k, v, bt, ctx, qsl, sc = B.build(shape, seed=2, kv_dtype=kv)
    out = torch.empty_like(q)
    call = functools.partial(
        ops.fixed_history_attention,
        *(q, k, v, bt, ctx, qsl, W, 128**-0.5),
        out=out,
        **sc,
    )
    call()
    torch.cuda.synchronize()
    t = B.bench_replayed(call)
    span = W + 8
    lo = L - W
    tiles = -(-(L + 8 - (lo - lo % 16)) // 64)
    nbytes = 256 * 8 * span * 128 * 2 * (1 if kv == "fp8" else 2)
    floor = nbytes / bw * 1e6
    plan = ops.plan_launch(
        num_tokens=256 * 8,
        num_reqs=256,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        sliding_window=W,
        max_kv_len=bt.shape[1] * B.PAGE,
        device=q.device,
        kv_fp8=kv == "fp8",
    )
    kernel = "Gluon" if plan.gluon else f"Triton, {plan.num_splits} splits"
    if L == 2040:
        rows.append((tiles, t))
    print(
        f"L {L} W {W:5d} span {span:5d} tiles {tiles:3d} "
        f"(last {L + 8 - (lo - lo % 16) - 64 * (tiles - 1):2d} keys)"
        f"  {t:7.1f} us  floor {floor:6.1f}  x{t / floor:.2f}  {t / tiles:.2f} us/tile"
        f"  {kernel}",
        flush=True,
    )
    del raw, q, k, v, out, call
x = torch.tensor([r[0] for r in rows], dtype=torch.float64)
y = torch.tensor([r[1] for r in rows], dtype=torch.float64)
A = torch.stack([torch.ones_like(x), x], 1)
c, k_ = torch.linalg.lstsq(A, y[:, None]).solution.flatten().tolist()
print(f"fit (L = 2040): {c:.1f} us + {k_:.2f} us x tiles per item")
