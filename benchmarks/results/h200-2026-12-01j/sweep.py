# Timing sweep of Gluon variants at one shape: do_bench medians in us, and
# each output's max difference from the API's, relative to its max.
#   PYTHONPATH=/tmp/t371:src python3 sweep.py SHAPE_INDEX bf16|fp8 'JSON list' [graph]
# With "graph" (added 2026-12-02c) each call is captured in a CUDA graph and
# the replays are timed, so that a host slower than the kernel does not set
# the time (a TMA launch costs 90-200 us on the host).
import functools
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402
from vllm_spark2_5_plugin.ops.fixed_history_gluon import (  # noqa: E402
    fixed_history_attention_wgmma,
)

shape, inputs, variants, graph = B.probe_args(sys.argv)
raw, q, k, v, bt, ctx, qsl, sc = inputs
W, s = shape[3], shape[6] ** -0.5
ref = ops.fixed_history_attention(q, k, v, bt, ctx, qsl, W, s, **sc)
out = torch.empty_like(q)


def call(**var):
    return fixed_history_attention_wgmma(q, k, v, bt, ctx, qsl, W, s, out, **sc, **var)


# NaN in out before each variant: rows a variant leaves unwritten show.
nan_out = functools.partial(out.fill_, float("nan"))
for var, t in B.time_variants(call, variants, graph=graph, before=nan_out):
    if isinstance(t, Exception):
        print(f"   error {type(t).__name__}: {str(t)[:150]}  {var}", flush=True)
        continue
    d = (out.float() - ref.float()).abs().max() / ref.float().abs().max()
    print(f"{t:8.1f} us  diff {d.item():.1e}  {var}", flush=True)
