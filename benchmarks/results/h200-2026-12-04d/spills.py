# Registers and spills per partition of the 128-row fp8 pipeline (fp8 shape
# 4 options), compiled for sm_90 on a CPU with Triton 3.7.1 (thirtieth
# session): the SASS regions after each USETMAXREG.DEALLOC, their spill
# stores (STL) and loads (LDL). With turns.patch applied:
#   PYTHONPATH=/tmp/t371cpu python spills.py JSON
import sys, json, re
sys.path[:0] = ["tests", "src"]
import test_fixed_history_gluon as T
from vllm_spark2_5_plugin.ops import fixed_history_codegen as codegen
orig = codegen._run
def run(*a):
    out = orig(*a)
    if a[1] == "-c":
        open("/tmp/sass.txt", "w").write(out)
    return out
codegen._run = run
base = dict(kernel_name="fixed_history_ws_kernel", kv_dtype="fp8e4nv", group=8, head_dim=128,
            f16=True, block_n=128, rows=128, split_mma=True, narrow_convert=True, tma=True,
            edge_fence=True, fp8_scores=True, ring=2, raw_slots=2, maxnreg=168)
var = json.loads(sys.argv[1])
c = T._compile(**{**base, **var})
print(var, "stack", c.stack_bytes)
sass = open("/tmp/sass.txt").read().splitlines()
# partitions: find SETMAXREG lines and count STL/LDL between them
cur = "start"
counts = {}
for line in sass:
    m = re.search(r"SETMAXREG[A-Z_.]*\s+(0x[0-9a-f]+|\d+)", line)
    if m:
        cur = f"after SETMAXREG {int(m.group(1),0)} @{line.split('*/')[0].strip()}"
        counts.setdefault(cur, [0, 0])
        continue
    if re.search(r"\bSTL\b|STL\.", line):
        counts.setdefault(cur, [0, 0])[0] += 1
    if re.search(r"\bLDL\b|LDL\.", line):
        counts.setdefault(cur, [0, 0])[1] += 1
for k, v in counts.items():
    print(" ", k, "STL", v[0], "LDL", v[1])
