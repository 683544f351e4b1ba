# Gluon under Triton 3.7.1 compiles range(ahead, n), ahead carried by the
# enclosing loops, as a loop from 0 (the TTGIR's loops are printed; the
# loop of the carry loader's shape). Triton 3.9 and @triton.jit compile it
# right. CPU only: PYTHONPATH=/tmp/t371 python3 gluon_range_repro.py
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource


@gluon.jit
def staged_from_ahead(out_ptr, n_items, n):
    ahead = 0
    for _item in range(0, n_items):
        for _pass in range(0, 2):
            for i in range(ahead, n):
                gl.store(out_ptr + i, i)
            ahead = ahead * 0
            for t in range(0, n):
                if t > 3:
                    ahead = t


signature = {"out_ptr": "*i32", "n_items": "i32", "n": "i32"}
source = GluonASTSource(staged_from_ahead, signature)
compiled = triton.compile(
    source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}
)
print("triton", triton.__version__)
for line in compiled.asm["ttgir"].splitlines():
    if "scf.for" in line:
        print("  ", line.strip()[:150])
