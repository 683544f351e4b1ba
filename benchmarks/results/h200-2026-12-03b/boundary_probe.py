# (Copied 2026-12-03 with EXTRA: a JSON dict of kernel options added to
# the launch's, e.g. {"issue_warp": true, "f16_dots": true}.)
# Where an item's start goes inside the warp-specialized Gluon kernel
# (written 2026-12-02, eighteenth session; not yet run): the launch's own
# Gluon options for a uniform batch near the benchmark's shape 3 (R requests
# x 8 KV heads, 8 queries x 4 heads per KV head, L and W given), run once
# with wait_stats, then per partition the mean over programs of the share
# of its cycles waiting at each barrier and, for the multiplying warps, the
# cycles between key loops (a pass's output stored, the next item's data
# read, its q loaded) per key loop; the kernel's time without the
# statistics (CUDA-graph replays, L2 emptied by reading).
#   PYTHONPATH=/tmp/t371:src python3 boundary_probe.py bf16|fp8 R,L,W [R,L,W ...]
import json
import os
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402
from vllm_spark2_5_plugin.ops.fixed_history_checks import PagedKV  # noqa: E402
from vllm_spark2_5_plugin.ops.fixed_history_gluon import (  # noqa: E402
    fixed_history_attention_wgmma,
)
from vllm_spark2_5_plugin.ops.fixed_history_launch import (  # noqa: E402
    gluon_options,
    sm_count,
)


def probe(kv, R, L, W):
    shape = (R, L, 8, W, 32, 8, 128)
    raw, q, k, v, bt, ctx, qsl, sc = B.build(shape, seed=3, kv_dtype=kv)
    scale = 128**-0.5
    plan = ops.uniform_batch_plan(shape, device=q.device, kv_fp8=kv == "fp8")
    scales = (sc["k_scale"], sc["v_scale"]) if sc else None
    options = gluon_options(q, PagedKV(k, v, bt, ctx, qsl, scales), plan, own_plan=True)
    options = {**options, **json.loads(os.environ.get("EXTRA", "{}"))}
    if options is None:
        print(f"R {R} L {L} W {W}: the launch runs the Triton kernel here")
        return
    out = torch.empty_like(q)
    per_sm = 2 if options["rows"] == 64 else 1
    programs = min(R * 8, per_sm * sm_count(q.device))
    stats = torch.zeros(programs, 3, 4, dtype=torch.int64, device="cuda")

    def call(**extra):
        fixed_history_attention_wgmma(
            q, k, v, bt, ctx, qsl, W, scale, out, **sc, **options, **extra
        )

    call(wait_stats=stats)
    torch.cuda.synchronize()
    t = B.bench_replayed(call)
    lo = L - W
    tiles_per_loop = -(-(L + 8 - (lo - lo % 16)) // 64)
    s = stats.double().cpu()
    print(
        f"R {R} L {L} W {W} {kv}: {t:.1f} us without statistics, "
        f"{tiles_per_loop} tiles per key loop, {programs} programs",
        flush=True,
    )
    for part, name in {0: "multiplying 0", 1: "multiplying 1", 2: "loader"}.items():
        r = s[:, part]
        r = r[r[:, 3] > 0]
        if not len(r):
            continue
        cyc = r[:, 2]
        a, b = (r[:, 0] / cyc).mean().item(), (r[:, 1] / cyc).mean().item()
        loops = r[:, 3] / tiles_per_loop
        line = (
            f"   {name:13s} {cyc.mean().item() / 1e3:8.1f} k cycles, "
            f"{r[:, 3].mean().item():6.1f} tiles"
        )
        if part < 2:
            per_loop = (r[:, 1] / loops).mean().item()
            line += (
                f"; waiting for tiles {100 * a:5.1f}%, between key loops "
                f"{100 * b:5.1f}% ({per_loop:.0f} cycles per loop)"
            )
        else:
            line += (
                f"; waiting for landed tiles {100 * a:5.1f}%, "
                f"free buffers {100 * b:5.1f}%"
            )
        print(line, flush=True)


kv = sys.argv[1]
for spec in sys.argv[2:]:
    probe(kv, *map(int, spec.split(",")))
