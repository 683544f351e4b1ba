# Host time per call of the launch paths at shape 4 (bf16, fp8), rounds in alternating order, then cProfile of each API path.
import cProfile, pstats, sys, time, io
sys.path[:0] = ["benchmarks", "src"]
import torch
import bench_fixed_history_attention as B
from vllm_spark2_5_plugin import ops
from vllm_spark2_5_plugin.ops.fixed_history_gluon import fixed_history_attention_wgmma
from vllm_spark2_5_plugin.ops import fixed_history_launch as L
shape = B.SHAPES[3]
W, s = shape[3], shape[6] ** -0.5
calls = {}
for kv in ("bf16", "fp8"):
    raw, q, k, v, bt, ctx, qsl, sc = B.build(shape, seed=3, kv_dtype=kv)
    out = torch.empty_like(q)
    extra = L._gluon_pipeline(128, kv_fp8=kv == "fp8")
    calls[f"{kv} api"] = (lambda q=q, k=k, v=v, bt=bt, ctx=ctx, qsl=qsl, out=out, sc=sc: ops.fixed_history_attention(q, k, v, bt, ctx, qsl, W, s, out, **sc))
    calls[f"{kv} direct"] = (lambda q=q, k=k, v=v, bt=bt, ctx=ctx, qsl=qsl, out=out, sc=sc, extra=extra: fixed_history_attention_wgmma(q, k, v, bt, ctx, qsl, W, s, out, **sc, warp_specialized=True, rows=128, **extra))
    calls[f"{kv} plan"] = (lambda q=q, bt=bt, kv=kv: ops.plan_launch(num_tokens=q.shape[0], num_reqs=shape[0], num_heads=32, num_kv_heads=4, head_dim=128, sliding_window=W, max_kv_len=bt.shape[1] * 16, device=q.device, kv_fp8=kv == "fp8"))
for f in calls.values():
    for _ in range(10): f()
torch.cuda.synchronize()
names = list(calls)
for rnd in range(3):
    order = names if rnd % 2 == 0 else names[::-1]
    for name in order:
        f = calls[name]; n = 200
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(n): f()
        t1 = time.perf_counter(); torch.cuda.synchronize(); t2 = time.perf_counter()
        print(f"round {rnd} {name:11s} host {1e6*(t1-t0)/n:7.1f} us/call, host+GPU {1e6*(t2-t0)/n:7.1f}")
for name in ("bf16 api", "fp8 api"):
    pr = cProfile.Profile(); f = calls[name]
    torch.cuda.synchronize(); pr.enable()
    for _ in range(200): f()
    pr.disable(); torch.cuda.synchronize()
    sio = io.StringIO(); pstats.Stats(pr, stream=sio).sort_stats("tottime").print_stats(18)
    print("==", name); print(sio.getvalue()[-4000:])
