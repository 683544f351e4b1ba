# The Triton kernel's launch plan at any shape, with and without the
# inline-PTX copy of the float16 V tile (kernel constant V_ASM_COPY), and
# with LaunchPlan fields changed: CUDA-graph replays, do_bench medians in
# us, each output's max difference from the first variant's, relative to
# its max (correctness: the GPU tests against the float64 reference).
#   PYTHONPATH=/tmp/t371:src python3 copy_probe.py '[R,L,B,W,nH,nKV,D]' fp8 'JSON list'
# a variant: {"copy": false, "max_registers": 112} (copy: default on)
import dataclasses
import functools
import json
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402
from vllm_spark2_5_plugin.ops import fixed_history_launch as launch  # noqa: E402

shape = tuple(json.loads(sys.argv[1]))
raw, q, k, v, bt, ctx, qsl, sc = B.build(shape, seed=5, kv_dtype=sys.argv[2])
variants = json.loads(sys.argv[3])
W, s = shape[3], shape[6] ** -0.5
base = B.triton_plan(
    ops.uniform_batch_plan(shape, device=q.device, page_size=B.PAGE, kv_fp8=bool(sc))
)
print(f"shape {shape}, launch plan: {base}", flush=True)
constants = launch.kernel_constants
copy = {"on": True}


def patched(*args, **kwargs):
    out = constants(*args, **kwargs)
    out["V_ASM_COPY"] = out["V_ASM_COPY"] and copy["on"]
    return out


launch.kernel_constants = patched
out = torch.empty_like(q)


def call(copy_on=True, **changes):
    copy["on"] = copy_on
    plan = dataclasses.replace(base, **changes)
    return ops.fixed_history_attention(
        q, k, v, bt, ctx, qsl, W, s, out, plan=plan, **sc
    )


first = None
nan_out = functools.partial(out.fill_, float("nan"))
for var in variants:
    kw = dict(var)
    kw["copy_on"] = kw.pop("copy", True)
    for _, t in B.time_variants(call, [kw], graph=True, before=nan_out):
        if isinstance(t, Exception):
            print(f"   error {type(t).__name__}: {str(t)[:150]}  {var}", flush=True)
            continue
        if first is None:
            first = out.float().clone()
        d = (out.float() - first).abs().max() / first.abs().max()
        print(f"{t:8.1f} us  diff {d.item():.1e}  {var}", flush=True)
