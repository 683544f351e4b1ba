# fp8 shape 4 over V's pages transposed, as the launch runs it, through
# timeline_gluon.py (the Gluon module with per-tile clock stamps; see
# timeline.patch): each variant of the JSON list compared with the float32
# reference, timed (CUDA-graph replays, L2 emptied by reading), then run
# once with wait statistics, and the stamps of programs 0-3 summarised.
#   PYTHONPATH=/tmp/t371:src python3 timeline_probe.py '[{...}, ...]' [dump]
# PROBE_NO_LOAD=1: the loader only signals (the multiplying side alone).
# PROBE_SMTURN=1 ("pingpong": true): the softmax in turn with the other
# partition. PROBE_DELAY=N: the second partition starts N cycles late.
# PROBE_PP=1: the batch loop (S of tile t and P V of tile t - 1 issued
# together; "pingpong": true, in turn with the other partition).
# PROBE_OVL, PROBE_TREE, PROBE_SPLITPV, PROBE_PREWAIT: the README's list.
# (timeline_gluon.py: step `module` of next-gpu.sh.)
import importlib.util
import json
import os
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
path = f"{HERE}/timeline_gluon.py"
spec = importlib.util.spec_from_file_location("timeline_gluon", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
entry = mod.fixed_history_attention_wgmma
TL, PROGS, TILES, STAMPS = 65536, 4, 64, 8

shape, inputs, _, _ = B.probe_args([None, "3", "fp8", "[]"])
raw, q, k, v, bt, ctx, qsl, sc = inputs
R, L, Bq, W, nH, nKV, D = shape
s = D**-0.5
ref = ops.fixed_history_attention(q, k, v, bt, ctx, qsl, W, s, reference=True, **sc)
ref = ref.float()
kp, vp = B.with_v_pages(raw, D)
base = B.probe_gluon_options(shape, inputs, (kp, vp))
env = {k: os.environ.get(k, "0") for k in ("PROBE_NO_LOAD", "PROBE_PP")}
print(f"shape {shape} {env} base {base}", flush=True)
out = torch.empty_like(q)
names = ["part 0", "part 1", "loader"]


def summary(st, n_tiles):
    st = st[TL : TL + PROGS * 3 * TILES * STAMPS].view(PROGS, 3, TILES, STAMPS).cpu()
    t0 = st[:, :, 0, 0].clamp(min=1).min(dim=1).values  # each program's first stamp
    lines = []
    # stamps per partition: those set in program 0's sixth tile
    stamps = [int((st[0, part, 5] != 0).sum()) for part in range(3)]
    for part in range(3):
        x = st[:, part, :n_tiles, : stamps[part]].double()
        d = x[:, :, 1:] - x[:, :, :-1]  # phases
        period = x[:, 1:, 0] - x[:, :-1, 0]
        mid = slice(2, n_tiles - 2)
        ph = " ".join(f"{v:7.0f}" for v in d[:, mid].mean(dim=(0, 1)).tolist())
        lines.append(
            f"  {names[part]}: phases (mean, tiles 2..{n_tiles - 3}, programs 0-3) {ph}"
            f" | period {period[:, 2 : n_tiles - 3].mean():.0f}"
            f" | last end - first start {(x[:, -1, -1] - x[:, 0, 0]).mean():.0f}"
        )
    # the partitions' offset: part 1's stamp 0 minus part 0's, per tile
    off = (st[:, 1, :n_tiles, 0] - st[:, 0, :n_tiles, 0]).double()
    lines.append(
        f"  part 1 - part 0 at stamp 0: mean {off[:, 2:-2].mean():.0f}, "
        f"tiles 0-7 of program 0 {off[0, :8].tolist()}"
    )
    if "dump" in sys.argv:
        for p in range(2):
            for part in range(3):
                rel = (st[p, part, :n_tiles, : stamps[part]] - t0[p]).tolist()
                lines.append(f"  program {p} {names[part]}: {rel}")
    return "\n".join(lines)


for extra in json.loads(sys.argv[1]):
    var = {**base, **extra}
    try:
        o = entry(q, kp, vp, bt, ctx, qsl, W, s, None, **sc, **var).float()
        err = ((o - ref).abs().max() / ref.abs().max()).item()
    except Exception as e:  # noqa: BLE001 (a probe: report, go on)
        print(f"FAILED {extra}: {str(e)[:300]}", flush=True)
        continue

    def call(**var):
        return entry(q, kp, vp, bt, ctx, qsl, W, s, out, **sc, **var)

    [(_, t)] = B.time_variants(call, [var], graph=True)
    print(f"{t:8.1f} us  err {err:.2e}  {extra}", flush=True)
    size = TL + PROGS * 3 * TILES * STAMPS
    stats = torch.zeros(size, dtype=torch.int64, device=q.device)
    entry(q, kp, vp, bt, ctx, qsl, W, s, out, **sc, **var, wait_stats=stats)
    torch.cuda.synchronize()
    # tiles actually stamped: those with a nonzero first stamp in program 0
    n_tiles = int(
        (stats[TL : TL + TILES * STAMPS].view(TILES, STAMPS)[:, 0] != 0).sum()
    )
    print(summary(stats, n_tiles), flush=True)
