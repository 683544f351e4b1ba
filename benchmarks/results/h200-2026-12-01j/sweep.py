# Timing sweep of Gluon variants at one shape (do_bench median us), rel diff vs the API's output.
import json, sys
sys.path[:0] = ["benchmarks", "src"]
import torch, triton
import bench_fixed_history_attention as B
from vllm_spark2_5_plugin import ops
from vllm_spark2_5_plugin.ops.fixed_history_gluon import fixed_history_attention_wgmma
idx, kv = int(sys.argv[1]), sys.argv[2]
variants = json.loads(sys.argv[3])
shape = B.SHAPES[idx]; W, s = shape[3], shape[6] ** -0.5
raw, q, k, v, bt, ctx, qsl, sc = B.build(shape, seed=idx, kv_dtype=kv)
ref = ops.fixed_history_attention(q, k, v, bt, ctx, qsl, W, s, **sc)
for var in variants:
    out = torch.empty_like(q)
    f = lambda: fixed_history_attention_wgmma(q, k, v, bt, ctx, qsl, W, s, out, **sc, **var)
    try:
        f(); torch.cuda.synchronize()
        t = triton.testing.do_bench(f, warmup=50, rep=300, return_mode="median") * 1e3
        d = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        print(f"{t:8.1f} us  diff {d:.1e}  {var}", flush=True)
    except Exception as e:
        print(f"   error {type(e).__name__}: {str(e)[:150]}  {var}", flush=True)
