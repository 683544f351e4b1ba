# (2026-12-03n) How many base-2 exponentials (MUFU.EX2, ex2.approx.ftz.f32)
# an H200 SM completes per cycle, measured with the SM's own cycle counter:
# one program per SM, WARPS warps, each thread CHAINS independent chains of
# ITERS exponentials; also the same loop with a fused multiply-add in place
# of the exponential (the FMA pipe's rate), as a yardstick.
#   PYTHONPATH=/tmp/t371 python3 mufu_rate.py
import torch
import triton
import triton.language as tl


@triton.jit
def _clock():
    return tl.inline_asm_elementwise(
        "mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
    )


@triton.jit
def rate_kernel(
    out_ptr,
    cycles_ptr,
    ITERS: tl.constexpr,
    CHAINS: tl.constexpr,
    BLOCK: tl.constexpr,
    EX2: tl.constexpr,
):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    chains = tl.arange(0, CHAINS)[None, :].to(tl.float32) * 1e-3
    x = (offs.to(tl.float32) * 1e-6 - 0.5)[:, None] + chains
    start = _clock()
    for _ in range(ITERS):
        if EX2:
            x = (
                tl.inline_asm_elementwise(
                    "ex2.approx.ftz.f32 $0, $1;",
                    "=r,r",
                    [x],
                    dtype=tl.float32,
                    is_pure=True,
                    pack=1,
                )
                - 1.5
            )
        else:
            x = x * 0.999 + 0.0001
    end = _clock()
    tl.store(out_ptr + pid * BLOCK + offs, tl.sum(x, axis=1))
    tl.store(cycles_ptr + pid + offs * 0, end - start, mask=offs == 0)


def main():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(0), sms, "SMs, triton", triton.__version__)
    for ex2 in (True, False):
        for warps in (4, 8, 16):
            iters, chains = 4096, 8
            block = 32 * warps
            out = torch.empty(sms * block, device="cuda")
            cyc = torch.zeros(sms, dtype=torch.int64, device="cuda")
            for _ in range(2):
                rate_kernel[(sms,)](
                    out, cyc, iters, chains, block, ex2, num_warps=warps
                )
            torch.cuda.synchronize()
            ops = block * chains * iters
            per = ops / cyc.float()
            name = "ex2" if ex2 else "fma"
            lo, mid, hi = per.min().item(), per.median().item(), per.max().item()
            extra = "FADD" if ex2 else "none"
            print(
                f"{name} warps {warps:2d}: {mid:6.2f} per cycle per SM (min {lo:.2f}, "
                f"max {hi:.2f}; extra op per element: {extra})",
                flush=True,
            )


if __name__ == "__main__":
    main()
