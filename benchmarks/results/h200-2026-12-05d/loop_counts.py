# The SASS of the launch's pipeline for fp8 shape 4 (128-row tiles of 128
# keys over V's pages, loader first), compiled for sm_90 on the CPU as
# tests/test_fixed_history_gluon.py compiles it, with its loops: for each
# backward branch the instructions from its target to it, and for the
# multiplying partitions' key loop (the innermost loop with 8 QGMMA: S and
# P V of a 64-row partition) its instructions per interior tile (its
# forward branches that skip the edge tiles' masking and fence taken) and
# its opcodes.
#   PYTHONPATH=/tmp/t371 python loop_counts.py [MODULE.py] (a patched copy
#   of the Gluon module; BYTES=1 or 2 sets its _BYTES)
import collections
import importlib.util
import os
import re
import sys
import tempfile

sys.path[:0] = ["tests", "src"]

import test_fixed_history_gluon as T  # noqa: E402
import triton  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402
from vllm_spark2_5_plugin.ops import fixed_history_codegen as CG  # noqa: E402
from vllm_spark2_5_plugin.ops.fixed_history_launch import (  # noqa: E402
    _gluon_pipeline,
)

INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*)")


def sass_of_launch():
    saved = {}
    inspect = CG._inspect

    def keep(cubin, shared):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "k.cubin")
            with open(path, "wb") as f:
                f.write(cubin)
            saved["sass"] = CG._run(CG.nvidia_tool("nvdisasm"), "-c", path)
        return inspect(cubin, shared)

    CG._inspect = keep
    pipeline = _gluon_pipeline(
        128, kv_fp8=True, tma=True, fp8_scores=True, wide_tiles=True, v_pages=True
    )
    code = T._compile("fp8e4nv", 8, 128, maxnreg=168, rows=128, f16=True, **pipeline)
    return code, saved["sass"]


def parse(sass):
    ins, labels, pending = [], {}, []
    for line in sass.splitlines():
        label = re.match(r"\s*(\.L_x_\d+):", line)
        if label:
            pending.append(label.group(1))
            continue
        m = INS.search(line)
        if m:
            labels.update(dict.fromkeys(pending, len(ins)))
            pending = []
            ins.append((m.group(2), m.group(3)))
    return ins, labels


def main():
    if len(sys.argv) > 1:
        spec = importlib.util.spec_from_file_location(
            "vllm_spark2_5_plugin.ops.fixed_history_gluon", sys.argv[1]
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if "BYTES" in os.environ:
            module._BYTES = module.gl.constexpr(int(os.environ["BYTES"]))
        # The test's compile helper imports the module from the package.
        sys.modules[spec.name] = module
        ops.fixed_history_gluon = module
    code, sass = sass_of_launch()
    print(
        f"triton {triton.__version__}: {code.registers} registers, "
        f"{code.stack_bytes} bytes of stack, {sum(code.instructions.values())} "
        "instructions"
    )
    ins, labels = parse(sass)
    for end, (op, rest) in enumerate(ins):
        target = re.search(r"(\.L_x_\d+)", rest)
        if not (op.startswith("BRA") and target and labels[target.group(1)] <= end):
            continue
        start = labels[target.group(1)]
        body = collections.Counter(o for o, _ in ins[start : end + 1])
        mmas = sum(n for o, n in body.items() if o.startswith("QGMMA"))
        if mmas != 8 or end - start > 900:
            continue
        skipped = 0
        for k in range(start, end):
            fwd = re.search(r"(\.L_x_\d+)", ins[k][1])
            if ins[k][0].startswith("BRA") and fwd:
                to = labels[fwd.group(1)]
                if k < to <= end:
                    skipped += to - k - 1
        print(
            f"key loop: {end - start + 1} instructions, {end - start + 1 - skipped}"
            " per interior tile"
        )
        kinds = collections.Counter(o.split(".")[0] for o, _ in ins[start : end + 1])
        print("  ", ", ".join(f"{o} {n}" for o, n in kinds.most_common(16)))
        break


if __name__ == "__main__":
    main()
