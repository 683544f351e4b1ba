"""vLLM 0.32.0's FlashAttention 3 as a peer of the fixed-history kernel.

The fixed-history rule (every query of a request's draft block sees the
cache positions max(0, L - W) .. L + B - 1) written as FlashAttention 3's
sliding window: the B queries x G query heads of each KV head become B * G
query heads of ONE query per request at position L + B - 1, with window
(W + B - 1, 0), so the keys each sees are exactly the rule's. FA3 maps query
head h to KV head h // (B * G), so the heads are ordered (KV head, query,
head of the group): a copy of q (with the fp8 cast: FA3 multiplies fp8 q,
fp8 K, fp8 weights and fp8 V; q's descale 1.0 as vLLM's static q scale) and
a copy of the output back. Timed whole (copies included) and FA3's call
alone, in CUDA graphs with the L2 emptied by reading, beside the plugin's
launch. Errors against the float32 reference.

Usage: PYTHONPATH=src python3 fa3_probe.py [shape indices, e.g. 3 or 0,1,2,3,4]
"""

import functools
import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))
import bench_fixed_history_attention as bfa  # noqa: E402
from bench_fixed_history_attention import FP8, ops  # noqa: E402
from vllm.vllm_flash_attn import flash_attn_varlen_func  # noqa: E402


def make_fa3(shape, q, k, v, bt, scale, scales, num_splits=0):
    R, L, B, W, nH, nKV, D = shape
    G = nH // nKV
    fp8 = k.dtype == FP8
    dev = q.device
    seqused = torch.full((R,), L + B, dtype=torch.int32, device=dev)
    cu_q = torch.arange(R + 1, dtype=torch.int32, device=dev)
    left = W + B - 1 if L > W else -1
    qp = torch.empty(R, nKV, B, G, D, dtype=FP8 if fp8 else q.dtype, device=dev)
    out = torch.empty(R, nKV * B * G, D, dtype=q.dtype, device=dev)
    kw = {}
    if fp8:
        shp = (R, nKV)
        one = torch.ones(1, dtype=torch.float32, device=dev)
        kw = dict(
            q_descale=one.expand(shp),
            k_descale=scales["k_scale"].reshape(1).expand(shp),
            v_descale=scales["v_scale"].reshape(1).expand(shp),
        )

    def fa3_only():
        flash_attn_varlen_func(
            qp.view(R, nKV * B * G, D), k, v, max_seqlen_q=1, cu_seqlens_q=cu_q,
            max_seqlen_k=L + B, seqused_k=seqused, softmax_scale=scale,
            causal=False, window_size=[left, 0], block_table=bt, out=out,
            num_splits=num_splits, fa_version=3, **kw,
        )  # fmt: skip
        return out

    def whole():
        qp.copy_(q.view(R, B, nKV, G, D).transpose(1, 2))
        fa3_only()
        return out.view(R, nKV, B, G, D).transpose(1, 2).reshape(R * B, nH, D)

    return whole, fa3_only


def main():
    idxs = [int(i) for i in (sys.argv[1] if len(sys.argv) > 1 else "3").split(",")]
    kvs = (sys.argv[2] if len(sys.argv) > 2 else "fp8,bf16").split(",")
    bfa.FLUSH = "clean"
    bw = bfa.copy_bandwidth()
    rows = []
    for idx in idxs:
        shape = bfa.SHAPES[idx]
        R, L, B, W, nH, nKV, D = shape
        for kv in kvs:
            torch.cuda.empty_cache()
            raw, q, k, v, bt, ctx, qsl, scales = bfa.build(shape, seed=idx, kv_dtype=kv)
            scale = D**-0.5
            kv_bytes = R * nKV * (min(L, W) + B) * D * 2 * raw.element_size()
            floor = kv_bytes / bw * 1e6
            ref = ops.fixed_history_attention_reference(
                q, k, v, bt, ctx, qsl, W, scale, **scales
            ).float()
            out = torch.empty_like(q)
            ours = functools.partial(
                ops.fixed_history_attention, q, k, v, bt, ctx, qsl, W, scale,
                out=out, **scales,
            )  # fmt: skip
            ours()
            torch.cuda.synchronize()
            err_ours = bfa.rel_err(out, ref)
            row = dict(shape=idx + 1, kv=kv, floor_us=floor, err_ours=err_ours)
            row["ours_us"] = bfa.bench_replayed(ours)
            for ns in (0, 1, 2):
                try:
                    whole, only = make_fa3(shape, q, k, v, bt, scale, scales, ns)
                    o = whole()
                    torch.cuda.synchronize()
                    row[f"err_fa3_s{ns}"] = bfa.rel_err(o, ref)
                    row[f"fa3_whole_s{ns}_us"] = bfa.bench_replayed(whole)
                    row[f"fa3_only_s{ns}_us"] = bfa.bench_replayed(only)
                except Exception as e:  # noqa: BLE001 (a probe: report, go on)
                    row[f"fa3_s{ns}_error"] = repr(e)[:300]
            row["ours_us_again"] = bfa.bench_replayed(ours)
            print(json.dumps(row), flush=True)
            rows.append(row)
    out_dir = os.environ.get("OUT")
    if out_dir:
        Path(out_dir, "fa3.json").write_text(json.dumps(rows, indent=1))
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s; {torch.cuda.get_device_name()}")
    for r in rows:
        f = r["floor_us"]
        t = r["ours_us"]
        line = f"shape {r['shape']} {r['kv']}: floor {f:.1f} ours {t:.1f}"
        line += f" ({t / f:.2f}x)"
        for ns in (0, 1, 2):
            if f"fa3_only_s{ns}_us" in r:
                line += (
                    f" | fa3 s{ns} only {r[f'fa3_only_s{ns}_us']:.1f} "
                    f"({r[f'fa3_only_s{ns}_us'] / f:.2f}x) whole "
                    f"{r[f'fa3_whole_s{ns}_us']:.1f} err {r[f'err_fa3_s{ns}']:.1e}"
                )
        print(line + f" | ours err {r['err_ours']:.1e}")


if __name__ == "__main__":
    main()
