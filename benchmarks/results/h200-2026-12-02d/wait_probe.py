# Who waits for whom inside the warp-specialized Gluon kernel (written
# 2026-12-02, fourteenth session; not yet run): each variant launched once
# with wait_stats, then per partition the mean over programs of the share of
# its cycles spent at each barrier (clock64 around the waits), and the
# kernel's time without the statistics (CUDA graph replays).
#   PYTHONPATH=/tmp/t371:src python3 wait_probe.py SHAPE_INDEX bf16|fp8 'JSON list'
# (JSON: keyword arguments of fixed_history_attention_wgmma, e.g. the
# launch's fp8 choice at 64 rows:
#  '[{"warp_specialized":true,"f16_dots":true,"narrow_convert":true,"tma":true}]')
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin.ops.fixed_history_gluon import (  # noqa: E402
    fixed_history_attention_wgmma,
)
from vllm_spark2_5_plugin.ops.fixed_history_launch import sm_count  # noqa: E402


def main():
    shape, inputs, variants, _ = B.probe_args(sys.argv + ["graph"])
    raw, q, k, v, bt, ctx, qsl, sc = inputs
    W, scale = shape[3], shape[6] ** -0.5
    out = torch.empty_like(q)
    items = ctx.shape[0] * k.shape[2]
    for var in variants:
        rows = var.get("rows", 64)
        per_sm = var.get("programs_per_sm") or (2 if rows == 64 else 1)
        programs = min(items, per_sm * sm_count(q.device))
        stats = torch.zeros(programs, 3, 4, dtype=torch.int64, device="cuda")

        def call(var=var, **extra):
            fixed_history_attention_wgmma(
                q, k, v, bt, ctx, qsl, W, scale, out, **sc, **var, **extra
            )

        call(wait_stats=stats)
        torch.cuda.synchronize()
        t = B.bench_replayed(call)
        s = stats.double().cpu()
        print(f"{t:8.1f} us without statistics  {var}")
        names = {0: "multiplying 0", 1: "multiplying 1", 2: "loader"}
        for part, name in names.items():
            rows_ = s[:, part]
            used = rows_[:, 3] > 0
            if not used.any():
                continue
            r = rows_[used]
            cyc = r[:, 2]
            a, b = (r[:, 0] / cyc).mean().item(), (r[:, 1] / cyc).mean().item()
            what = ("tiles", "-") if part < 2 else ("landed (fp8)", "free buffers")
            print(
                f"   {name:13s} {cyc.mean().item() / 1e3:9.1f} k cycles, "
                f"{r[:, 3].mean().item():6.1f} tiles; waiting for {what[0]} "
                f"{100 * a:5.1f}%, for {what[1]} {100 * b:5.1f}%"
            )


if __name__ == "__main__":
    main()
