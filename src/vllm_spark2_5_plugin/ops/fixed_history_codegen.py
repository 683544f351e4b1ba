# SPDX-License-Identifier: Apache-2.0
"""Compile the fixed-history kernel for an NVIDIA GPU without one.

Triton compiles for any NVIDIA architecture on any machine (its wheel carries
``ptxas``, ``cuobjdump`` and ``nvdisasm``). :func:`compile_for_nvidia`
compiles :func:`fixed_history_kernel` for a :class:`LaunchPlan` and the
shapes a launch would pass, with the argument specialisations a real launch
gets (16-byte aligned pointers, strides that are multiples of 16, unit last
strides), and returns what the machine code holds: registers, spilled bytes,
shared memory, and the SASS instructions by opcode. It is for maintainers
(``benchmarks/kernel_codegen.py``, ``tests/test_fixed_history_codegen.py``):
static facts such as "the fp8 path reads V from shared memory byte by byte"
can be checked on a CPU; speed still needs the GPU.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any

from vllm_spark2_5_plugin.ops.fixed_history_launch import (
    LaunchPlan,
    compile_options,
    kernel_constants,
    uniform_batch_plan,
)

#: Triton's names of the element types a launch passes.
_POINTER_TYPES = {"float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8e4nv"}
_STRIDES = [
    "stride_q_t",
    "stride_q_h",
    "stride_q_d",
    "stride_k_blk",
    "stride_k_slot",
    "stride_k_head",
    "stride_v_blk",
    "stride_v_slot",
    "stride_v_head",
    "stride_o_t",
    "stride_o_h",
    "stride_o_d",
    "stride_bt",
]
_UNIT_STRIDES = ("stride_q_d", "stride_o_d")
#: Strides that are multiples of 16 for every cache vLLM allocates with
#: head_dim >= 16 (the block table's row length is not).
_ALIGNED_STRIDES = tuple(s for s in _STRIDES if s not in (*_UNIT_STRIDES, "stride_bt"))


@dataclasses.dataclass(frozen=True)
class Codegen:
    """What one compiled kernel holds."""

    registers: int  # per thread
    stack_bytes: int  # per thread: spilled registers and local arrays
    shared_bytes: int  # per program, as Triton allocates it
    instructions: collections.Counter[str]  # SASS opcode with modifiers -> count
    # BAR.SYNC instructions by the threads they wait for (0: the whole CTA).
    barrier_threads: collections.Counter[int] = dataclasses.field(
        default_factory=collections.Counter
    )
    # setmaxnreg (warp specialization) by kind and registers per thread:
    # ("DEALLOC", 120) gives registers back down to 120, ("TRY_ALLOC", 192)
    # takes them up to 192.
    register_targets: collections.Counter[tuple[str, int]] = dataclasses.field(
        default_factory=collections.Counter
    )
    # Register-held dot operands (mma.sync's A and B) by their elements per
    # thread along the reduction axis (Triton's kWidth), from the TTGIR.
    dot_operand_k_widths: collections.Counter[int] = dataclasses.field(
        default_factory=collections.Counter
    )

    def count(self, opcode: str) -> int:
        """Instructions whose opcode is ``opcode`` or starts with ``opcode.``
        (``count("LDS")`` includes ``LDS.U8``, ``LDS.128``, ...)."""
        return sum(
            n
            for op, n in self.instructions.items()
            if op == opcode or op.startswith(opcode + ".")
        )


def nvidia_tool(name: str) -> str:
    """Path of ``ptxas``/``cuobjdump``/``nvdisasm``: Triton's copy first."""
    import triton

    bundled = os.path.join(
        os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name
    )
    if os.path.exists(bundled):
        return bundled
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(
            f"{name} is neither in Triton's wheel ({bundled}) nor on PATH"
        )
    return found


def compile_for_nvidia(
    plan: LaunchPlan,
    *,
    q_dtype: str,
    kv_dtype: str,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    window: int | None,
    page_size: int = 16,
    arch: int = 90,
    inline_ptx: bool = True,
    v_pages: bool = False,
) -> Codegen:
    """Compile the kernel for ``sm_{arch}`` as ``launch_kernel`` would launch
    it with ``plan``; fp8 scales are device tensors, as vLLM passes them;
    ``v_pages``: V's pages held transposed.

    ``q_dtype``: "float16" or "bfloat16"; ``kv_dtype``: the same, or
    "float8_e4m3fn". ``inline_ptx=False``: as the launch compiles it where
    inline PTX cannot run (the interpreter, ROCm).
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from vllm_spark2_5_plugin.ops.fixed_history_kernel import fixed_history_kernel

    kv_fp8 = kv_dtype == "float8_e4m3fn"
    q_type, kv_type = _POINTER_TYPES[q_dtype], _POINTER_TYPES[kv_dtype]
    signature = {
        "q_ptr": f"*{q_type}",
        "k_ptr": f"*{kv_type}",
        "v_ptr": f"*{kv_type}",
        "out_ptr": f"*{q_type}",
        "part_acc_ptr": "*fp32",
        "part_max_ptr": "*fp32",
        "part_sum_ptr": "*fp32",
        "block_table_ptr": "*i32",
        "context_lens_ptr": "*i32",
        "query_start_loc_ptr": "*i32",
        "qk_scale": "fp32",
        "k_scale": "*fp32" if kv_fp8 else "fp32",
        "v_scale": "*fp32" if kv_fp8 else "fp32",
        "window": "i32",
        "num_reqs": "i32",
        **{name: "i64" for name in _STRIDES},
    }
    constants: dict[str, int | bool] = kernel_constants(
        plan,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        page_size=page_size,
        has_window=window is not None,
        kv_fp8=kv_fp8,
        k_scale_in_memory=kv_fp8,
        v_scale_in_memory=kv_fp8,
        inline_ptx=inline_ptx,
        v_pages=v_pages,
    )
    # Triton turns an integer argument equal to 1 into a constant.
    constants.update({name: 1 for name in _UNIT_STRIDES})
    signature.update({name: "constexpr" for name in constants})
    names = list(signature)
    aligned = [n for n in names if signature[n].startswith("*")]
    aligned += list(_ALIGNED_STRIDES)
    if window is not None and window % 16 == 0:
        aligned.append("window")
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    source = ASTSource(
        fixed_history_kernel, signature, constexprs=constants, attrs=attrs
    )
    compiled = triton.compile(
        source,
        target=GPUTarget("cuda", arch, 32),
        options=compile_options(plan),
    )
    code = _inspect(compiled.asm["cubin"], compiled.metadata.shared)
    # "#ttg.dot_op<{opIdx = 0, parent = #mma, kWidth = 2}>" in value types.
    widths = re.findall(r"dot_op<\{[^}]*kWidth = (\d+)", compiled.asm["ttgir"])
    return dataclasses.replace(
        code, dot_operand_k_widths=collections.Counter(int(w) for w in widths)
    )


def compile_uniform_batch(
    shape: tuple[int, int, int, int | None, int, int, int],
    *,
    q_dtype: str,
    kv_dtype: str,
    num_sms: int = 132,
    page_size: int = 16,
    arch: int = 90,
    inline_ptx: bool = True,
    **plan_changes: Any,
) -> tuple[LaunchPlan, Codegen]:
    """The plan the launch heuristic picks on a GPU with ``num_sms`` SMs (an
    H200 by default) for ``shape = (R, L, B, W, nH, nKV, D)``, with the
    :class:`LaunchPlan` fields in ``plan_changes`` changed, and its code
    (``inline_ptx``: see :func:`compile_for_nvidia`)."""
    import torch

    plan = uniform_batch_plan(
        shape,
        device=torch.device("cuda"),
        num_sms=num_sms,
        page_size=page_size,
        kv_fp8=kv_dtype.startswith("float8"),
    )
    if plan_changes:
        plan = dataclasses.replace(plan, **plan_changes)
    _, _, _, window, heads, kv_heads, head_dim = shape
    code = compile_for_nvidia(
        plan,
        q_dtype=q_dtype,
        kv_dtype=kv_dtype,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        window=window,
        page_size=page_size,
        arch=arch,
        inline_ptx=inline_ptx,
    )
    return plan, code


def _inspect(cubin: bytes, shared_bytes: int) -> Codegen:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        usage = _run(nvidia_tool("cuobjdump"), "--dump-resource-usage", path)
        sass = _run(nvidia_tool("nvdisasm"), "-c", path)
    # "/*0090*/   @!P0 LDS.U8 R4, [R2+0x10] ;": the opcode follows the address
    # and the optional predicate.
    opcodes = re.findall(
        r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass
    )
    # "BAR.SYNC.DEFER_BLOCKING 0x2, 0x80 ;": barrier 2, 128 threads; without
    # the count, every thread of the CTA.
    bars = re.findall(r"BAR\.SYNC[A-Z_.]*\s+\w+(?:,\s*(0x[0-9a-f]+|\d+))?\s*;", sass)
    # "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xc0 ;", "USETMAXREG.DEALLOC.CTAPOOL 0x78 ;"
    limits = re.findall(
        r"USETMAXREG\.(DEALLOC|TRY_ALLOC)\.CTAPOOL\s+(?:UP\d+,\s*)?(0x[0-9a-f]+|\d+)",
        sass,
    )
    return Codegen(
        registers=_field(usage, "REG"),
        stack_bytes=_field(usage, "STACK"),
        shared_bytes=shared_bytes,
        instructions=collections.Counter(opcodes),
        barrier_threads=collections.Counter(int(n, 0) if n else 0 for n in bars),
        register_targets=collections.Counter((k, int(n, 0)) for k, n in limits),
    )


def _field(usage: str, name: str) -> int:
    found = re.search(rf"\b{name}:(\d+)", usage)
    if found is None:
        raise RuntimeError(f"cuobjdump printed no {name}: {usage!r}")
    return int(found.group(1))


def _run(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return proc.stdout
