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
import bench_fixed_history_attention as B
import torch
from vllm_spark2_5_plugin import ops
from vllm_spark2_5_plugin.ops.fixed_history_checks import PagedKV
from vllm_spark2_5_plugin.ops.fixed_history_gluon import fixed_history_attention_wgmma
from vllm_spark2_5_plugin.ops.fixed_history_launch import gluon_options, sm_count

def probe(kv, R, L, W):
    shape = (R, L, 8, W, 32, 8, 128)
    raw, q, k, v, bt, ctx, qsl, sc = B.build(shape, seed=3, kv_dtype=kv)
    plan = ops.uniform_batch_plan(shape, device=q.device, kv_fp8=kv == "fp8")
    scales = (sc["k_scale"], sc["v_scale"]) if sc else None
    options = gluon_options(q, PagedKV(k, v, bt, ctx, qsl, scales), plan, own_plan=True)
    out = torch.empty_like(q)
    per_sm = 2 if options["rows"] == 64 else 1
    programs = min(R * 8, per_sm * sm_count(q.device))
    stats = torch.zeros(programs * 2, 3, 4, dtype=torch.int64, device="cuda")
    def call(**extra):
        fixed_history_attention_wgmma(q, k, v, bt, ctx, qsl, W, 128**-0.5, out, **sc, **options, **extra)
    call(wait_stats=stats); torch.cuda.synchronize()
    s = stats.double().cpu()
    items = R * 8 / programs
    ex = s.reshape(-1, 4)[programs * 3:programs * 4]
    s = s[:programs]
    r0, r1 = s[:, 0], s[:, 1]
    print(f"{kv} R {R} L {L} W {W}: items/program {items:.2f}; per item cycles: "
          f"between {r0[:,1].mean()/items:.0f} store {r1[:,0].mean()/items:.0f} "
          f"item_range {r1[:,1].mean()/items:.0f} load_q {r1[:,2].mean()/items:.0f} "
          f"| total k cycles {r0[:,2].mean()/1e3:.1f} waits {r0[:,0].mean()/1e3:.1f}", flush=True)
    r2 = s[:, 2]
    tiles = r2[:, 3].mean()
    print(f"   loader per tile: k stage {ex[:,0].mean()/tiles:.0f}, v convert {ex[:,1].mean()/tiles:.0f}, "
          f"tail (fence, arrive, stage raw, page ids) {ex[:,2].mean()/tiles:.0f}, landed wait {r2[:,0].mean()/tiles:.0f}, "
          f"free wait {r2[:,1].mean()/tiles:.0f}, all {r2[:,2].mean()/tiles:.0f}; per item start {ex[:,3].mean()/items:.0f}", flush=True)

for kv in sys.argv[1:]:
    for spec in ["256,2048,1024", "512,2040,1016"]:
        probe(kv, *map(int, spec.split(",")))
