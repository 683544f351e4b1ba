# The 128-row fp8 pipeline with V kept transposed per page (vt.patch,
# PROBE_VT=1 in the environment; thirtieth session): the benchmark's cache
# of a shape is rewritten so that each page's V bytes hold V^T ([D, 16]
# per page and KV head, slot s holding head-dim rows 8 s .. 8 s + 7, the
# keys within the page in the order of 8-bit P V, position 4 q + 2 e + b
# holding key 8 e + 2 q + b), and the kernel, which copies those pages by
# TMA straight into its ring, is compared with the float32 reference on
# the cache as it was; then timed (CUDA-graph replays): rings of 2-4, or
# the option overrides of the JSON list given (vt.patch and, for
# "packed_softmax", vt-packed.patch applied).
#   PROBE_VT=1 PYTHONPATH=/tmp/t371:src python3 vt_kernel_probe.py SHAPE [JSON]
import json
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402
from vllm_spark2_5_plugin.ops.fixed_history_gluon import (  # noqa: E402
    fixed_history_attention_wgmma,
)

shape, inputs, _, _ = B.probe_args([None, sys.argv[1], "fp8", "[]"])
raw, q, k, v, bt, ctx, qsl, sc = inputs
R, L, Bq, W, nH, nKV, D = shape
s = D**-0.5
base = B.probe_gluon_options(shape, inputs)
refs = {
    g: ops.fixed_history_attention(
        q * g, k, v, bt, ctx, qsl, W, s, reference=True, **sc
    ).float()
    for g in (1.0, 4.0)
}

# V^T per page, in place: [blocks, slot, head, D] bytes.
page = v.shape[1]
pos = torch.arange(page)
key_of_pos = 8 * ((pos // 2) % 2) + 2 * (pos // 4) + pos % 2
v8 = v.view(torch.uint8)
vt = v8[:, key_of_pos.to(v.device)]  # [blocks, pos, head, D]
vt = vt.permute(0, 2, 3, 1).reshape(
    v.shape[0], nKV, page, D
)  # [blocks, head, s, 8 x 16]
v8.copy_(vt.permute(0, 2, 1, 3))

opts = {**base, "fp8_pv": True, "packed_softmax": False, "narrow_tail": False}
print(f"shape {shape}", flush=True)
out = torch.empty_like(q)


def call(**var):
    return fixed_history_attention_wgmma(q, k, v, bt, ctx, qsl, W, s, out, **sc, **var)


overrides = json.loads(sys.argv[2]) if len(sys.argv) > 2 else []
for extra in overrides or [{"ring": ring} for ring in (2, 3, 4)]:
    var = {**opts, **extra}
    errs = []
    for g, ref in refs.items():
        o = fixed_history_attention_wgmma(
            q * g, k, v, bt, ctx, qsl, W, s, None, **sc, **var
        ).float()
        err = ((o - ref).abs().max() / ref.abs().max()).item()
        errs.append(f"err(q x {g:g}) {err:.2e}")
    [(_, t)] = B.time_variants(call, [var], graph=True)
    print(f"{t:8.1f} us  {'  '.join(errs)}  {extra}", flush=True)
