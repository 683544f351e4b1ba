# Timing sweep of Gluon variants at one shape: do_bench medians in us, and
# each output's max difference from the API's, relative to its max.
#   PYTHONPATH=/tmp/t371:src python3 sweep.py SHAPE_INDEX bf16|fp8 'JSON list' [graph]
# With "graph" (added 2026-12-02c) each call is captured in a CUDA graph and
# the replays are timed, so that a host slower than the kernel does not set
# the time (a TMA launch costs 90-200 us on the host).
import json
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402
from vllm_spark2_5_plugin.ops.fixed_history_gluon import (  # noqa: E402
    fixed_history_attention_wgmma,
)

idx, kv = int(sys.argv[1]), sys.argv[2]
variants = json.loads(sys.argv[3])
graph = sys.argv[4:] == ["graph"]
shape = B.SHAPES[idx]
W, s = shape[3], shape[6] ** -0.5
raw, q, k, v, bt, ctx, qsl, sc = B.build(shape, seed=idx, kv_dtype=kv)
ref = ops.fixed_history_attention(q, k, v, bt, ctx, qsl, W, s, **sc)
for var in variants:
    out = torch.empty_like(q)

    def call(out=out, var=var):
        return fixed_history_attention_wgmma(
            q, k, v, bt, ctx, qsl, W, s, out, **sc, **var
        )

    try:
        call()
        torch.cuda.synchronize()
        t = (B.bench_replayed(call, rep=300) if graph else B.bench(call, rep=300)) / 1e3
        d = (out.float() - ref.float()).abs().max() / ref.float().abs().max()
        print(f"{t * 1e3:8.1f} us  diff {d.item():.1e}  {var}", flush=True)
    except Exception as e:
        print(f"   error {type(e).__name__}: {str(e)[:150]}  {var}", flush=True)
