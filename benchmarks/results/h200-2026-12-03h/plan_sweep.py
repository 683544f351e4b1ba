# Timing sweep of Triton-kernel plans at one shape: the launch's own plan
# with the given LaunchPlan fields changed, do_bench medians in us, and each
# output's max difference from the launch plan's, relative to its max.
#   PYTHONPATH=/tmp/t371:src python3 plan_sweep.py SHAPE bf16|fp8 'JSON list' [graph]
# e.g. '[{}, {"transposed": true}]' times the launch plan and its transposed
# form; "graph" times CUDA-graph replays. (results/h200-2026-12-02h's
# triton_probe.py, less its register-cap shim: LaunchPlan.max_registers now
# carries the cap; and the reference is the launch plan's output.)
import dataclasses
import functools
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402

shape, inputs, variants, graph = B.probe_args(sys.argv)
raw, q, k, v, bt, ctx, qsl, sc = inputs
W, s = shape[3], shape[6] ** -0.5
base = B.triton_plan(
    ops.uniform_batch_plan(shape, device=q.device, page_size=B.PAGE, kv_fp8=bool(sc))
)
print(f"launch plan: {base}", flush=True)
ref = ops.fixed_history_attention(q, k, v, bt, ctx, qsl, W, s, plan=base, **sc)
out = torch.empty_like(q)


def call(**changes):
    plan = dataclasses.replace(base, **changes)
    return ops.fixed_history_attention(
        q, k, v, bt, ctx, qsl, W, s, out, plan=plan, **sc
    )


nan_out = functools.partial(out.fill_, float("nan"))
for var, t in B.time_variants(call, variants, graph=graph, before=nan_out):
    if isinstance(t, Exception):
        print(f"   error {type(t).__name__}: {str(t)[:150]}  {var}", flush=True)
        continue
    d = (out.float() - ref.float()).abs().max() / ref.float().abs().max()
    print(f"{t:8.1f} us  diff {d.item():.1e}  {var}", flush=True)
