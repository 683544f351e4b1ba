# Times Triton-kernel plans at one shape, each optionally compiled with a
# register cap (Triton's maxnreg launch option), in CUDA graphs: do_bench
# medians in us and each output's max difference from the API's, relative
# to its max.
#   PYTHONPATH=/tmp/t371:src python3 triton_probe.py SHAPE_INDEX bf16|fp8 \
#       '[{"block_n": 32, "num_warps": 1, "num_stages": 3, "maxnreg": 128}]'
import dataclasses
import functools
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402
from vllm_spark2_5_plugin.ops import fixed_history_launch as launch  # noqa: E402

shape, inputs, variants, _ = B.probe_args(sys.argv + ["graph"])
raw, q, k, v, bt, ctx, qsl, sc = inputs
W, s = shape[3], shape[6] ** -0.5
ref = ops.fixed_history_attention(q, k, v, bt, ctx, qsl, W, s, **sc)
out = torch.empty_like(q)
R, L, Bq, _, nH, nKV, D = shape
base = B.triton_plan(
    ops.plan_launch(
        num_tokens=R * Bq,
        num_reqs=R,
        num_heads=nH,
        num_kv_heads=nKV,
        head_dim=D,
        sliding_window=W,
        max_kv_len=bt.shape[1] * B.PAGE,
        device=q.device,
        kv_fp8=bool(sc),
    )
)
print("default plan:", base, flush=True)
kernel = launch.fixed_history_kernel


class Capped:
    """fixed_history_kernel with a register cap added to every launch."""

    def __init__(self, maxnreg):
        self.maxnreg = maxnreg

    def __getitem__(self, grid):
        return functools.partial(kernel[grid], maxnreg=self.maxnreg)


def call(maxnreg=None, **changes):
    launch.fixed_history_kernel = kernel if maxnreg is None else Capped(maxnreg)
    try:
        plan = dataclasses.replace(base, **changes)
        ops.fixed_history_attention(
            q, k, v, bt, ctx, qsl, W, s, out=out, plan=plan, **sc
        )
    finally:
        launch.fixed_history_kernel = kernel


nan_out = functools.partial(out.fill_, float("nan"))
for var, t in B.time_variants(call, variants, graph=True, before=nan_out):
    if isinstance(t, Exception):
        print(f"   error {type(t).__name__}: {str(t)[:150]}  {var}", flush=True)
        continue
    d = (out.float() - ref.float()).abs().max() / ref.float().abs().max()
    print(f"{t:8.1f} us  diff {d.item():.1e}  {var}", flush=True)
