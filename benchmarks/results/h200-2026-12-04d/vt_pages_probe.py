# Can the fp8 tensor cores read V where each 16-key page of the draft's
# cache holds V transposed ([D, 16] per page, the keys contiguous)?
# (thirtieth session) A one-warpgroup Gluon kernel computes O = P V with
# P [64, 128] e4m3 from shared memory and V as eight such pages laid one
# after another ([8 pages, D, 16] bytes), described to the MMA as a
# [keys, D] operand in several ways; each result is compared with
# P.float() @ V.float(). On a CPU it only compiles (sm_90):
#   PYTHONPATH=/tmp/t371:src python vt_pages_probe.py [compile]
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)

M = gl.constexpr(64)
N = gl.constexpr(128)
D = gl.constexpr(128)
PAGE = gl.constexpr(16)


@gluon.constexpr_function
def _linear_pages():
    """[D, keys] where offset = page * D * PAGE + d * PAGE + key % PAGE."""
    bases = [[0, 1], [0, 2], [0, 4], [0, 8]]  # offset bits 0-3: key % 16
    bases += [[1 << i, 0] for i in range(7)]  # bits 4-10: d
    bases += [[0, 16], [0, 32], [0, 64]]  # bits 11-13: the page
    return gl.SharedLinearLayout(bases)


@gluon.jit
def _probe(p_ptr, v_ptr, out_ptr, MODE: gl.constexpr):
    blocked: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0])
    rows = gl.arange(0, M, layout=gl.SliceLayout(1, blocked))
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, blocked))
    p = gl.load(p_ptr + gl.expand_dims(rows, 1) * N + gl.expand_dims(cols, 0))
    p_smem = gl.allocate_shared_memory(
        gl.float8e4nv,
        [M, N],
        gl.NVMMASharedLayout.get_default_for([M, N], gl.float8e4nv),
    )
    p_smem.store(p)
    # V's bytes as the cache pages hold them: [pages, D, PAGE] in a flat
    # layout, loaded as [D, keys] (offset page * D * PAGE + d * PAGE + k).
    vb: gl.constexpr = gl.BlockedLayout([1, 16], [32, 1], [4, 1], [1, 0])
    d = gl.arange(0, D, layout=gl.SliceLayout(1, vb))
    k = gl.arange(0, N, layout=gl.SliceLayout(0, vb))
    offs = (
        gl.expand_dims(k // PAGE, 0) * (D * PAGE)
        + gl.expand_dims(d, 1) * PAGE
        + gl.expand_dims(k % PAGE, 0)
    )
    vt = gl.load(v_ptr + offs)  # [D, keys]
    if MODE == 0:
        # The pages' own layout, described as a linear layout.
        v_smem = gl.allocate_shared_memory(gl.float8e4nv, [D, N], _linear_pages())
    elif MODE == 1:
        # Triton's own 128-byte swizzle (what a transposing loader writes).
        v_smem = gl.allocate_shared_memory(
            gl.float8e4nv,
            [D, N],
            gl.NVMMASharedLayout.get_default_for([D, N], gl.float8e4nv),
        )
    else:
        # Triton's swizzle-0 layout of [D, keys].
        v_smem = gl.allocate_shared_memory(
            gl.float8e4nv,
            [D, N],
            gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=2),
        )
    v_smem.store(vt)
    fence_async_shared()
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 32]
    )
    acc = gl.zeros([M, D], gl.float32, acc_layout)
    acc = warpgroup_mma(p_smem, v_smem.permute((1, 0)), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    ob: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    acc = gl.convert_layout(acc, ob)
    r = gl.arange(0, M, layout=gl.SliceLayout(1, ob))
    c = gl.arange(0, D, layout=gl.SliceLayout(0, ob))
    gl.store(out_ptr + gl.expand_dims(r, 1) * D + gl.expand_dims(c, 0), acc)


def compile_only(mode):
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    sig = {"p_ptr": "*fp8e4nv", "v_ptr": "*fp8e4nv", "out_ptr": "*fp32"}
    src = GluonASTSource(
        _probe, {**sig, "MODE": "constexpr"}, constexprs={"MODE": mode}
    )
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    print(f"mode {mode}: compiled, {c.asm['ptx'].count('wgmma.mma_async')} wgmma")


def run(mode):
    torch.manual_seed(0)
    p = (torch.rand(M, N, device="cuda") * 2 - 1).to(torch.float8_e4m3fn)
    v = (torch.randn(N, D, device="cuda")).to(torch.float8_e4m3fn)  # [keys, D]
    pages = v.view(N // PAGE, PAGE, D).transpose(1, 2).contiguous()  # [page, D, 16]
    out = torch.empty(M, D, device="cuda", dtype=torch.float32)
    _probe[(1,)](p, pages, out, MODE=mode, num_warps=4)
    ref = p.float() @ v.float()
    err = ((out - ref).abs().max() / ref.abs().max()).item()
    print(f"mode {mode}: max |O - P V| / max |P V| = {err:.2e}", flush=True)


if __name__ == "__main__":
    for mode in (0, 1, 2):
        try:
            (compile_only if "compile" in sys.argv[1:] else run)(mode)
        except Exception as e:  # noqa: BLE001 (each mode's outcome is the result)
            print(f"mode {mode}: {type(e).__name__}: {str(e)[:400]}", flush=True)
