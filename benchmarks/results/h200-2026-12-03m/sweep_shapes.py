# sweep.py (results/h200-2026-12-01j) at shapes given as JSON instead of the
# benchmark's index: each Gluon variant timed at each shape as CUDA-graph
# replays (medians, us), with its output's max difference from the public
# API's (the launch's policy), relative to that output's max.
#   PYTHONPATH=/tmp/t371:src python3 sweep_shapes.py \
#       '[[R,L,B,W,nH,nKV,D], ...]' fp8 'JSON list'
import functools
import json
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402
from vllm_spark2_5_plugin.ops.fixed_history_gluon import (  # noqa: E402
    fixed_history_attention_wgmma,
)


def sweep(shape, seed, kv, variants):
    raw, q, k, v, bt, ctx, qsl, sc = B.build(tuple(shape), seed=seed, kv_dtype=kv)
    W, s = shape[3], shape[6] ** -0.5
    ref = ops.fixed_history_attention(q, k, v, bt, ctx, qsl, W, s, **sc)
    out = torch.empty_like(q)

    def call(**var):
        fixed_history_attention_wgmma(q, k, v, bt, ctx, qsl, W, s, out, **sc, **var)

    nan_out = functools.partial(out.fill_, float("nan"))
    for var, t in B.time_variants(call, variants, graph=True, before=nan_out):
        if isinstance(t, Exception):
            print(
                f"{shape} error {type(t).__name__}: {str(t)[:150]}  {var}", flush=True
            )
            continue
        d = (out.float() - ref.float()).abs().max() / ref.float().abs().max()
        print(f"{shape} {t:8.1f} us  diff {d.item():.1e}  {var}", flush=True)


shapes, kv, variants = json.loads(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
for i, shape in enumerate(shapes):
    sweep(shape, i, kv, variants)
