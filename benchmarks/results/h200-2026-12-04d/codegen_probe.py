# The 128-row fp8 pipeline of fp8 shape 4 (16 queries x 8 heads, 128-key
# tiles, TMA) compiled for sm_90 on a CPU (thirtieth session): the spill
# stores (STL) and loads (LDL) in the code after each
# USETMAXREG.DEALLOC (the start of a partition's code, named by its
# registers) and a few opcodes of the whole kernel. Run from the
# repository root with Triton 3.7.1 (the GPU's) on the path, the probe's
# patch applied where its options need it:
#   PYTHONPATH=/tmp/t371cpu python codegen_probe.py JSON
# JSON: options over the base below (turns.patch: "pingpong"; joint.patch:
# PROBE_JOINT=1 in the environment, and the joint descriptor is used;
# vt.patch: PROBE_VT=1, V's descriptor without swizzle).
import json
import os
import re
import sys

sys.path[:0] = ["tests", "src"]

import test_fixed_history_gluon as tests  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin.ops import fixed_history_codegen as codegen  # noqa: E402
from vllm_spark2_5_plugin.ops import fixed_history_gluon as gluon_ops  # noqa: E402

BASE = dict(
    kernel_name="fixed_history_ws_kernel", kv_dtype="fp8e4nv", group=8,
    head_dim=128, f16=True, block_n=128, rows=128, split_mma=True,
    narrow_convert=True, tma=True, edge_fence=True, fp8_scores=True, ring=2,
    raw_slots=2, maxnreg=168,
)  # fmt: skip
SASS = []

if os.environ.get("PROBE_JOINT") == "1":

    def _joint(cache):
        full = torch.empty(4, 16, 8, 256, dtype=cache.dtype)
        return gluon_ops._tma_joint_descriptor(full[..., :128], full[..., 128:])

    gluon_ops._tma_descriptor = _joint

if os.environ.get("PROBE_VT") == "1":
    # V's descriptor copies pages byte for byte (swizzle 0), K's as before.
    from triton.experimental.gluon import _runtime
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    cache = torch.empty(4, 16, 8, 128, dtype=torch.float8_e4m3fn)
    flat = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=4)
    v_type = mangle_type(
        TensorDescriptor(
            cache, list(cache.shape), list(cache.stride()), [1, 16, 1, 128], flat
        )
    )

    class _Source(_runtime.GluonASTSource):
        def __init__(self, fn, signature, *args, **kwargs):
            super().__init__(fn, {**signature, "v_desc": v_type}, *args, **kwargs)

    _runtime.GluonASTSource = _Source

_run = codegen._run


def _keep_sass(*args):
    out = _run(*args)
    if args[1] == "-c":
        SASS.append(out)
    return out


codegen._run = _keep_sass
options = json.loads(sys.argv[1])
compiled = tests._compile(**{**BASE, **options})
print(options, "stack", compiled.stack_bytes, "smem", compiled.shared_bytes)
region, spills = "start", {}
for line in SASS[-1].splitlines():
    found = re.search(r"SETMAXREG\.DEALLOC[A-Z_.]*\s+(0x[0-9a-f]+|\d+)", line)
    if found:
        region = f"dealloc {int(found.group(1), 0)}"
        spills.setdefault(region, [0, 0])
        continue
    counts = spills.setdefault(region, [0, 0])
    counts[0] += "STL" in line
    counts[1] += "LDL" in line
for region, (stores, loads) in spills.items():
    print(" ", region, "STL", stores, "LDL", loads)
ops = ("UTMALDG", "BAR.SYNC", "LDS", "STS", "F2FP", "PRMT", "QGMMA", "HGMMA")
ops += ("WARPGROUP.DEPBAR",)
print(" ", " ".join(f"{op} {compiled.count(op)}" for op in ops))
