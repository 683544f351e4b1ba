# Host time per call at shape 4 bf16: the API (TMA), direct with TMA, direct
# without; cProfile of the API.  PYTHONPATH=/tmp/t371:src python3 host3.py
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
from vllm_spark2_5_plugin.ops.fixed_history_gluon import fixed_history_attention_wgmma  # noqa: E402

shape = B.SHAPES[3]
W, s = shape[3], shape[6] ** -0.5
raw, q, k, v, bt, ctx, qsl, sc = B.build(shape, seed=3, kv_dtype="bf16")
out = torch.empty_like(q)


def direct(**pipeline):
    return lambda: fixed_history_attention_wgmma(
        q, k, v, bt, ctx, qsl, W, s, out, warp_specialized=True, rows=128, **pipeline
    )


calls = {
    "api": lambda: ops.fixed_history_attention(q, k, v, bt, ctx, qsl, W, s, out, **sc),
    "direct tma": direct(**L._gluon_pipeline(128, kv_fp8=False, tma=True)),
    "direct cp.async": direct(**L._gluon_pipeline(128, kv_fp8=False)),
}
for f in calls.values():
    for _ in range(10):
        f()
torch.cuda.synchronize()
for rnd in range(2):
    for name, f in calls.items():
        n = 200
        torch.cuda.synchronize()
        torch.cuda._sleep(2_000_000_000 // 1000 * 400)
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        print(
            f"round {rnd} {name:16s} host {1e6 * (t1 - t0) / n:7.1f} us/call"
            " (GPU held by a sleep)"
        )
pr = cProfile.Profile()
torch.cuda.synchronize()
pr.enable()
for _ in range(200):
    calls["api"]()
pr.disable()
torch.cuda.synchronize()
sio = io.StringIO()
pstats.Stats(pr, stream=sio).sort_stats("tottime").print_stats(20)
print(sio.getvalue()[-5000:])
