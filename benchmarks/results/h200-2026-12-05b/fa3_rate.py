"""How fast vLLM 0.32.0's FlashAttention 3 multiplies on this GPU when
nothing but its arithmetic limits it: the rate the fixed-history kernel's
fp8 shape 4 would need to beat.

Fp8 shape 4 (R=32, L=32768, B=16, W=4096, 32/4/128) multiplies
R * nH * B * (W + B) * D * 4 = 34.5 GFLOP (Q K^T and P V). Its goal, 1.35x
the 31.6-us read floor, is 42.5 us for the whole timed call, of which about
9.5 us are not multiplication (a timed empty kernel ~4 us, the first tile's
three dependent reads ~3.5 us, the output ~2 us; measured 2026-12-04). This
probe times FA3 on long, compute-bound problems (no paging, no window,
non-causal, the same head layout 32/4/128) in bf16 and in fp8 e4m3 (q, K, V
and FA3's own fp8 weights; descales 1) and prints its rate beside the rate
that shape 4's key loop would need.

Each case is checked against PyTorch's SDPA on the dequantised inputs
(first request only, float32 output compared). Timing: CUDA-graph replays,
the L2 emptied by reading (the fixed-history benchmark's helpers).

Usage (vLLM's CUDA build installed): PYTHONPATH=src python3 fa3_rate.py
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))
import bench_fixed_history_attention as bfa  # noqa: E402
from vllm.vllm_flash_attn import flash_attn_varlen_func  # noqa: E402

FP8 = torch.float8_e4m3fn
NH, NKV, D = 32, 4, 128
# (requests, query tokens per request, keys per request)
CASES = [(4, 8192, 8192), (32, 128, 32768), (32, 16, 4112)]
_R, _L, _B, _W, _NH, _NKV, _D = bfa.SHAPES[3]  # fp8 shape 4
SHAPE4_FLOP = _R * _NH * _B * (_W + _B) * _D * 4
SHAPE4_GOAL_US, SHAPE4_NOT_MULTIPLYING_US = 42.5, 9.5


def sm_clock_mhz():
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
        return out.stdout.strip()
    except Exception as e:  # noqa: BLE001 (a probe: report, go on)
        return repr(e)


def run_case(b, sq, sk, kind):
    g = torch.Generator(device="cuda").manual_seed(b * 7 + sq)
    q = torch.randn(b * sq, NH, D, device="cuda", generator=g)
    k = torch.randn(b * sk, NKV, D, device="cuda", generator=g)
    v = torch.randn(b * sk, NKV, D, device="cuda", generator=g)
    kw = {}
    if kind == "fp8":
        q, k, v = (x.to(FP8) for x in (q, k, v))
        one = torch.ones(1, dtype=torch.float32, device="cuda").expand(b, NKV)
        kw = dict(q_descale=one, k_descale=one, v_descale=one)
    else:
        q, k, v = (x.to(torch.bfloat16) for x in (q, k, v))
    cu_q = torch.arange(0, (b + 1) * sq, sq, dtype=torch.int32, device="cuda")
    cu_k = torch.arange(0, (b + 1) * sk, sk, dtype=torch.int32, device="cuda")
    out = torch.empty(b * sq, NH, D, dtype=torch.bfloat16, device="cuda")
    scale = D**-0.5

    def call():
        flash_attn_varlen_func(
            q, k, v, max_seqlen_q=sq, cu_seqlens_q=cu_q, max_seqlen_k=sk,
            cu_seqlens_k=cu_k, softmax_scale=scale, causal=False, out=out,
            fa_version=3, **kw,
        )  # fmt: skip

    call()
    torch.cuda.synchronize()
    # Reference: the first request, dequantised, through SDPA in float32.
    qr = q[:sq].float().transpose(0, 1)[None]
    kr = k[:sk].float().transpose(0, 1)[None]
    vr = v[:sk].float().transpose(0, 1)[None]
    ref = F.scaled_dot_product_attention(qr, kr, vr, scale=scale, enable_gqa=True)
    got = out[:sq].float().transpose(0, 1)[None]
    err = bfa.rel_err(got, ref)
    us = bfa.bench_replayed(call)
    flop = 4 * b * NH * sq * sk * D
    return dict(
        kind=kind, requests=b, q_tokens=sq, keys=sk, us=us, err=err,
        tflops=flop / us / 1e6, gflop=flop / 1e9,
    )  # fmt: skip


def main():
    bfa.FLUSH = "clean"
    rows = []
    idle = sm_clock_mhz()
    for b, sq, sk in CASES:
        for kind in ("bf16", "fp8"):
            torch.cuda.empty_cache()
            try:
                row = run_case(b, sq, sk, kind)
            except Exception as e:  # noqa: BLE001 (a probe: report, go on)
                row = dict(kind=kind, requests=b, q_tokens=sq, keys=sk)
                row["error"] = repr(e)[:300]
            row["sm_clock_after_mhz"] = sm_clock_mhz()
            print(json.dumps(row), flush=True)
            rows.append(row)
    loop_us = SHAPE4_GOAL_US - SHAPE4_NOT_MULTIPLYING_US
    need = SHAPE4_FLOP / loop_us / 1e6
    print(
        f"\n{torch.cuda.get_device_name()} torch {torch.__version__}; SM clock idle "
        f"{idle} MHz\nfp8 shape 4: {SHAPE4_FLOP / 1e9:.1f} GFLOP; its goal leaves "
        f"{loop_us:.1f} us to multiply: {need:.0f} TFLOP/s"
    )
    print(
        "| FA3 case (requests x q tokens x keys, 32/4/128) | dtype | us | TFLOP/s | "
        "shape 4's 34.5 GFLOP at that rate + 9.5 us, us | err vs SDPA |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        case = f"{r['requests']} x {r['q_tokens']} x {r['keys']}"
        if "error" in r:
            print(f"| {case} | {r['kind']} | error: {r['error'][:80]} | | | |")
            continue
        at_rate = SHAPE4_FLOP / r["tflops"] / 1e6 + SHAPE4_NOT_MULTIPLYING_US
        print(
            f"| {case} | {r['kind']} | {r['us']:.1f} | {r['tflops']:.0f} | "
            f"{at_rate:.1f} | {r['err']:.1e} |"
        )
    out_dir = os.environ.get("OUT")
    if out_dir:
        summary = dict(rows=rows, need_tflops=need, idle_clock=idle)
        Path(out_dir, "fa3_rate.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
