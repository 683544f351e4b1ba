# Host time per call of the launch paths at shape 4 (bf16 and fp8 caches):
# three rounds in alternating order, then a cProfile of each API path.
#   PYTHONPATH=/tmp/t371:src python3 host2.py
import cProfile
import io
import pstats
import sys
import time

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402
from vllm_spark2_5_plugin.ops import fixed_history_launch as L  # noqa: E402
from vllm_spark2_5_plugin.ops.fixed_history_gluon import (  # noqa: E402
    fixed_history_attention_wgmma,
)

shape = B.SHAPES[3]
W, s = shape[3], shape[6] ** -0.5
calls = {}
for kv in ("bf16", "fp8"):
    raw, q, k, v, bt, ctx, qsl, sc = B.build(shape, seed=3, kv_dtype=kv)
    out = torch.empty_like(q)
    extra = L._gluon_pipeline(128, kv_fp8=kv == "fp8")
    args = (q, k, v, bt, ctx, qsl, W, s, out)

    def api(args=args, sc=sc):
        return ops.fixed_history_attention(*args, **sc)

    def direct(args=args, sc=sc, extra=extra):
        return fixed_history_attention_wgmma(
            *args, **sc, warp_specialized=True, rows=128, **extra
        )

    def plan(q=q, bt=bt, fp8=kv == "fp8"):
        return ops.plan_launch(
            num_tokens=q.shape[0],
            num_reqs=shape[0],
            num_heads=32,
            num_kv_heads=4,
            head_dim=128,
            sliding_window=W,
            max_kv_len=bt.shape[1] * 16,
            device=q.device,
            kv_fp8=fp8,
        )

    calls.update({f"{kv} api": api, f"{kv} direct": direct, f"{kv} plan": plan})
for f in calls.values():
    for _ in range(10):
        f()
torch.cuda.synchronize()
names = list(calls)
for rnd in range(3):
    for name in names if rnd % 2 == 0 else names[::-1]:
        f, n = calls[name], 200
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host, total = 1e6 * (t1 - t0) / n, 1e6 * (t2 - t0) / n
        print(f"round {rnd} {name:11s} host {host:7.1f} us/call, host+GPU {total:7.1f}")
for name in ("bf16 api", "fp8 api"):
    profile = cProfile.Profile()
    torch.cuda.synchronize()
    profile.enable()
    for _ in range(200):
        calls[name]()
    profile.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(18)
    print("==", name)
    print(text.getvalue()[-4000:])
