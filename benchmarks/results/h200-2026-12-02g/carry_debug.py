# Which carry variants fail where items cross (seventeenth session): one
# launch of fixed_history_attention_wgmma on a small batch whose programs
# take 2+ items, checked against the launch's own plan without carry.
#   PYTHONPATH=/tmp/t371:src python3 carry_debug.py 'JSON options' [R L W]
import json
import sys

import torch

sys.path[:0] = ["tests", "src"]
from test_fixed_history_attention import Case, _make_inputs  # noqa: E402

from vllm_spark2_5_plugin.ops.fixed_history_gluon import (  # noqa: E402
    fixed_history_attention_wgmma,
)

var = json.loads(sys.argv[1])
R, L, W = (int(x) for x in (sys.argv[2:5] or (400, 600, 256)))
case = Case([L] * R, [8] * R, W, 32, 8, 128, 16)
q, k, v, bt, ctx, qsl = _make_inputs(
    case, dtype=torch.bfloat16, device="cuda", seed=1, fp8_scales=(0.02, 3.0)
)
sc = {
    n: torch.tensor(s, device="cuda") for n, s in (("k_scale", 0.02), ("v_scale", 3.0))
}
base = dict(warp_specialized=True, f16_dots=True, narrow_convert=True, tma=True)
ref = fixed_history_attention_wgmma(
    q,
    k,
    v,
    bt,
    ctx,
    qsl,
    W,
    128**-0.5,
    **sc,
    **base,
    **{k_: v_ for k_, v_ in var.items() if k_ != "carry"},
)
torch.cuda.synchronize()
out = fixed_history_attention_wgmma(
    q, k, v, bt, ctx, qsl, W, 128**-0.5, **sc, **base, **var
)
torch.cuda.synchronize()
d = (out.float() - ref.float()).abs().max().item()
print(f"ok diff {d:.2e} R={R} L={L} W={W} {var}", flush=True)
