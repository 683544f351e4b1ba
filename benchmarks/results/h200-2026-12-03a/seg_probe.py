# Segment probe (2026-12-03, lease a; seg.txt): where the fp8 kernel's
# partitions spend their cycles at shape 3 (R, L, W = 256, 2048, 1024) and
# 512, 2040, 1016. It ran against a temporary build of the kernel (not
# committed) with %clock64 marks added: the multiplying warps summed per
# item the cycles of the output store (from the key loop's end), of the
# item's request data (read with the clock made to depend on the loaded
# values) and of _load_q, into row 1 of the statistics; the fp8 TMA loader
# summed per tile the cycles of staging K, of converting V, and of the rest
# of the iteration (fence, barrier, signal, the next V staged, page ids),
# and per item its start, into a fourth block of rows after the programs'
# statistics (hence the doubled tensor). The marks themselves cost cycles
# (the multiplying warps then kept 24-40 bytes on the stack): read the
# split, not the totals.
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
    plan = ops.uniform_batch_plan(shape, device=q.device, kv_fp8=kv == "fp8")
    scales = (sc["k_scale"], sc["v_scale"]) if sc else None
    paged = PagedKV(k, v, bt, ctx, qsl, scales)
    options = gluon_options(q, paged, plan, own_plan=True)
    out = torch.empty_like(q)
    per_sm = 2 if options["rows"] == 64 else 1
    programs = min(R * 8, per_sm * sm_count(q.device))
    stats = torch.zeros(programs * 2, 3, 4, dtype=torch.int64, device="cuda")
    fixed_history_attention_wgmma(
        q, k, v, bt, ctx, qsl, W, 128**-0.5, out, **sc, **options,
        wait_stats=stats,
    )  # fmt: skip
    torch.cuda.synchronize()
    s = stats.double().cpu()
    items = R * 8 / programs
    ex = s.reshape(-1, 4)[programs * 3 : programs * 4]
    s = s[:programs]
    r0, r1, r2 = s[:, 0], s[:, 1], s[:, 2]

    def per(x, n):
        return f"{x.mean().item() / n:.0f}"

    print(
        f"{kv} R {R} L {L} W {W}: items/program {items:.2f}; per item cycles: "
        f"between {per(r0[:, 1], items)} store {per(r1[:, 0], items)} "
        f"item_range {per(r1[:, 1], items)} load_q {per(r1[:, 2], items)} "
        f"| total k cycles {per(r0[:, 2], 1e3)} waits {per(r0[:, 0], 1e3)}",
        flush=True,
    )
    tiles = r2[:, 3].mean().item()
    print(
        f"   loader per tile: k stage {per(ex[:, 0], tiles)}, "
        f"v convert {per(ex[:, 1], tiles)}, tail (fence, arrive, stage raw, "
        f"page ids) {per(ex[:, 2], tiles)}, landed wait {per(r2[:, 0], tiles)}, "
        f"free wait {per(r2[:, 1], tiles)}, all {per(r2[:, 2], tiles)}; "
        f"per item start {per(ex[:, 3], items)}",
        flush=True,
    )


for kv in sys.argv[1:]:
    for spec in ["256,2048,1024", "512,2040,1016"]:
        probe(kv, *map(int, spec.split(",")))
