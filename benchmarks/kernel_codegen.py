# SPDX-License-Identifier: Apache-2.0
"""What the fixed-history kernel compiles to on an H200, without a GPU.

For each benchmark shape (``bench_fixed_history_attention.SHAPES``) and cache
dtype, the launch plan the heuristic picks is compiled for sm_90 with the
installed Triton, and the SASS is summarised: registers and spilled bytes per
thread, shared memory, and the instructions that decide the inner loop's
cost (global->shared copies, shared loads, byte-wise shared loads, ldmatrix,
conversions, tensor-core instructions). Counts are for the whole kernel (the
pipelined key loop's body appears in them once or twice, next to its
prologue), so compare variants, not absolute numbers.

    python benchmarks/kernel_codegen.py [--q-dtype bfloat16] [--md out.md]

Runs on any machine with torch and Triton (Triton's wheel carries the CUDA
assembler); the numbers depend on the Triton version, which the header
records.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_fixed_history_attention import PAGE, SHAPES  # noqa: E402

from vllm_spark2_5_plugin.ops.fixed_history_codegen import (  # noqa: E402
    compile_uniform_batch,
)

H200_SMS = 132
#: Column -> SASS opcode (counted with its modifiers, see Codegen.count).
COLUMNS = {
    "LDGSTS": "LDGSTS",  # global -> shared copies (cp.async)
    "LDS": "LDS",  # shared loads, all widths
    "LDS.U8": None,  # byte-wise shared loads (exact opcode)
    "LDSM": "LDSM",  # ldmatrix
    "F2FP": "F2FP",  # packed conversions (e4m3 -> fp16, fp32 -> 16-bit)
    "F2F": "F2F",  # scalar conversions
    "HADD2.F32": None,  # fp16 -> fp32 (Triton 3.7's fp16 -> bf16 goes through it)
    "HMMA": "HMMA",  # mma.sync
    "HGMMA": "HGMMA",  # wgmma
    "STL": "STL",  # stores to local memory (spills)
}


def row(shape, q_dtype, kv_dtype):
    plan, code = compile_uniform_batch(
        shape, q_dtype=q_dtype, kv_dtype=kv_dtype, num_sms=H200_SMS, page_size=PAGE
    )
    counts = [
        code.instructions[name] if opcode is None else code.count(opcode)
        for name, opcode in COLUMNS.items()
    ]
    plan_text = (
        f"N={plan.block_n} w={plan.num_warps} s={plan.num_stages} "
        f"splits={plan.num_splits} pps={plan.programs_per_sm}"
        + (" asm" if plan.asm_page_load else "")
    )
    return [
        str(shape),
        kv_dtype,
        plan_text,
        code.registers,
        code.stack_bytes,
        code.shared_bytes,
        *counts,
    ]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--q-dtype", choices=("bfloat16", "float16"), default="bfloat16")
    ap.add_argument("--md", help="also write the table here")
    args = ap.parse_args(argv)
    if args.md and not Path(args.md).resolve().parent.is_dir():
        ap.error(f"--md {args.md}: no folder {Path(args.md).resolve().parent}")
    header = (
        f"sm_90 code of the default plans, q {args.q_dtype}; Triton "
        f"{triton.__version__}, torch {torch.__version__}; "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    )
    names = ["shape", "cache", "plan", "regs", "stack B", "shared B", *COLUMNS]
    lines = [header, "", "| " + " | ".join(names) + " |"]
    lines.append("|" + "---|" * len(names))
    for shape in SHAPES:
        for kv_dtype in (args.q_dtype, "float8_e4m3fn"):
            cells = row(shape, args.q_dtype, kv_dtype)
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    if args.md:
        Path(args.md).write_text(text)


if __name__ == "__main__":
    main()
