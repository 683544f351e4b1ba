# Static counts of the 128-row fp8 pipeline (fp8 shape 4 options) compiled for
# sm_90 on a CPU with Triton 3.7.1, with and without joint.patch (thirtieth
# session): spill stores/loads after each USETMAXREG.DEALLOC and a few
# opcodes of the whole kernel. With joint.patch applied:
#   [PROBE_JOINT=1 [PROBE_JOINT_NARROW=1]] PYTHONPATH=/tmp/t371cpu python joint_codegen.py JSON
import os, sys, json, re
sys.path[:0] = ["tests", "src"]
import torch
import test_fixed_history_gluon as T
from vllm_spark2_5_plugin.ops import fixed_history_gluon as G
from vllm_spark2_5_plugin.ops import fixed_history_codegen as codegen
if os.environ.get("PROBE_JOINT") == "1":
    def jd(cache):
        full = torch.empty(4, 16, 8, 256, dtype=cache.dtype)
        return G._tma_joint_descriptor(full[..., :128], full[..., 128:])
    G._tma_descriptor = jd
orig = codegen._run
def run(*a):
    out = orig(*a)
    if a[1] == "-c":
        open("/tmp/sass.txt", "w").write(out)
    return out
codegen._run = run
base = dict(kernel_name="fixed_history_ws_kernel", kv_dtype="fp8e4nv", group=8, head_dim=128,
            f16=True, block_n=128, rows=128, split_mma=True, narrow_convert=True, tma=True,
            edge_fence=True, fp8_scores=True, ring=2, raw_slots=2, maxnreg=168,
            narrow_tail=True, packed_softmax=True, mma_regs=200)
var = json.loads(sys.argv[1])
c = T._compile(**{**base, **var})
print(var, "stack", c.stack_bytes, "smem", c.shared_bytes)
sass = open("/tmp/sass.txt").read().splitlines()
cur = "start"; counts = {}; n = {}
for line in sass:
    m = re.search(r"SETMAXREG\.DEALLOC[A-Z_.]*\s+(0x[0-9a-f]+|\d+)", line)
    if m:
        cur = f"dealloc {int(m.group(1),0)}"
        counts.setdefault(cur, [0, 0]); continue
    if "STL" in line: counts.setdefault(cur, [0, 0])[0] += 1
    if "LDL" in line: counts.setdefault(cur, [0, 0])[1] += 1
for k, v in counts.items():
    print(" ", k, "STL", v[0], "LDL", v[1])
print(" UTMALDG", c.count("UTMALDG"), "BAR.SYNC", c.count("BAR.SYNC"), "LDS", c.count("LDS"), "STS", c.count("STS"), "F2FP", c.count("F2FP"), "PRMT", c.count("PRMT"))
