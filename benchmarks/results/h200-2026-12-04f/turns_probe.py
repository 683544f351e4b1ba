# fp8 shape 4 (or the shape index given) over V's pages transposed, as the
# launch runs it: the Gluon pipeline with the option overrides of the JSON
# list, each compared with the float32 reference (q as is and times 4) and
# timed (CUDA-graph replays, the L2 emptied by reading). A variant with
# "module": "PATH" runs that file's copy of the Gluon module instead (the
# previous commit's, for an A/B in one process).
#   PYTHONPATH=/tmp/t371:src python3 turns_probe.py SHAPE '[{...}, ...]'
import importlib.util
import json
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402
from vllm_spark2_5_plugin.ops.fixed_history_gluon import (  # noqa: E402
    fixed_history_attention_wgmma,
)


def module_entry(path):
    spec = importlib.util.spec_from_file_location("probe_gluon_module", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.fixed_history_attention_wgmma


shape, inputs, _, _ = B.probe_args([None, sys.argv[1], "fp8", "[]"])
raw, q, k, v, bt, ctx, qsl, sc = inputs
R, L, Bq, W, nH, nKV, D = shape
s = D**-0.5
refs = {
    g: ops.fixed_history_attention(
        q * g, k, v, bt, ctx, qsl, W, s, reference=True, **sc
    ).float()
    for g in (1.0, 4.0)
}
kp, vp = B.with_v_pages(raw, D)
base = B.probe_gluon_options(shape, inputs, (kp, vp))
print(f"shape {shape} base {base}", flush=True)
out = torch.empty_like(q)
entries = {}

for extra in json.loads(sys.argv[2]):
    extra = dict(extra)
    path = extra.pop("module", None)
    if path not in entries:
        entries[path] = module_entry(path) if path else fixed_history_attention_wgmma
    entry = entries[path]
    var = {**base, **extra}
    errs = []
    try:
        for g, ref in refs.items():
            o = entry(q * g, kp, vp, bt, ctx, qsl, W, s, None, **sc, **var).float()
            err = ((o - ref).abs().max() / ref.abs().max()).item()
            errs.append(f"err(q x {g:g}) {err:.2e}")
    except Exception as e:  # noqa: BLE001 (a probe: report, go on)
        print(f"FAILED {extra} {path or ''}: {str(e)[:300]}", flush=True)
        continue

    def call(entry=entry, **var):
        return entry(q, kp, vp, bt, ctx, qsl, W, s, out, **sc, **var)

    [(_, t)] = B.time_variants(call, [var], graph=True)
    print(f"{t:8.1f} us  {'  '.join(errs)}  {extra} {path or ''}", flush=True)
