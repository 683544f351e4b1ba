# The launch's Gluon pipeline at a benchmark shape against the same with
# packed_softmax (twenty-eighth session, 2026-12-04), with register splits:
# do_bench medians in us of CUDA-graph replays, and each output's largest
# difference from the float32 reference (unrounded q), relative to its
# largest value, for q as built and for q times GAIN (sharper softmax).
#   PYTHONPATH=/tmp/t371:src python3 packed_probe.py SHAPE fp8 'JSON' graph [GAIN]
# (JSON: a list of option overrides; {} is the launch's pipeline)
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402
from vllm_spark2_5_plugin.ops.fixed_history_gluon import (  # noqa: E402
    fixed_history_attention_wgmma,
)

shape, inputs, variants, graph = B.probe_args(sys.argv[:5])
gain = float(sys.argv[5]) if len(sys.argv) > 5 else 4.0
raw, q, k, v, bt, ctx, qsl, sc = inputs
R, L, Bq, W, nH, nKV, D = shape
s = D**-0.5
base = B.probe_gluon_options(shape, inputs)
print(f"shape {shape}, launch options {base}", flush=True)
out = torch.empty_like(q)
refs = {}
for g in (1.0, gain):
    refs[g] = ops.fixed_history_attention(
        q * g, k, v, bt, ctx, qsl, W, s, reference=True, **sc
    ).float()


def call(**var):
    return fixed_history_attention_wgmma(
        q, k, v, bt, ctx, qsl, W, s, out, **sc, **{**base, **var}
    )


def error(var, g):
    o = fixed_history_attention_wgmma(
        q * g, k, v, bt, ctx, qsl, W, s, None, **sc, **{**base, **var}
    ).float()
    return ((o - refs[g]).abs().max() / refs[g].abs().max()).item()


for var, t in B.time_variants(call, variants, graph=graph):
    if isinstance(t, Exception):
        print(f"   error {type(t).__name__}: {str(t)[:200]}  {var}", flush=True)
        continue
    errs = "  ".join(f"err(q x {g:g}) {error(var, g):.2e}" for g in refs)
    print(f"{t:8.1f} us  {errs}  {var}", flush=True)
