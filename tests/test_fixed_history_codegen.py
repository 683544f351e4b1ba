# SPDX-License-Identifier: Apache-2.0
"""The fixed-history kernel compiled for an H200 (sm_90) on this CPU machine.

Triton compiles for NVIDIA GPUs without one, so CI checks that every launch
plan the heuristic picks at the benchmark shapes compiles for sm_90 (inline
PTX included, which the interpreter never runs) and what its machine code
does with an fp8 cache. Speed itself is measured on the GPU
(``benchmarks/bench_fixed_history_attention.py``).
"""

from __future__ import annotations

import pytest

from vllm_spark2_5_plugin.ops.fixed_history_codegen import compile_uniform_batch

#: (requests, context L, draft block B, window W, query heads, KV heads, D):
#: the five shapes of the kernel benchmark.
SHAPES = {
    "many-requests": (64, 8192, 8, 4096, 32, 8, 128),
    "more-requests": (256, 8192, 8, 4096, 32, 8, 128),
    "short-window": (256, 2048, 8, 1024, 32, 8, 128),
    "long-context": (32, 32768, 16, 4096, 32, 4, 128),
    "head-dim-64": (128, 8192, 8, 4096, 16, 16, 64),
}


#: Other branches of the launch policy: D = 256 and D = 32 tiles, the split
#: path (few requests), and full attention over a long draft block.
OTHER_SHAPES = {
    "head-dim-256": (64, 8192, 8, 4096, 32, 8, 256),
    "head-dim-32": (64, 2048, 8, 1024, 32, 8, 32),
    "few-requests-split": (4, 8192, 8, 4096, 32, 8, 128),
    "full-attention-block-40": (16, 500, 40, None, 8, 1, 128),
}


def compile_shape(shape, q_dtype: str, kv_dtype: str, **plan_changes):
    """The H200's default plan for ``shape`` (with ``plan_changes``) and its
    sm_90 code."""
    return compile_uniform_batch(
        shape, q_dtype=q_dtype, kv_dtype=kv_dtype, **plan_changes
    )


@pytest.mark.parametrize("q_dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", [*SHAPES, *OTHER_SHAPES])
def test_fp8_f16_dot_converts_once_in_registers(name, q_dtype):
    """The float16-dot fp8 path (``fp8_f16_dot``). Converting tiles to q's
    dtype reads V from shared memory one byte per element (``LDS.U8``: an
    8-bit operand cannot be transposed by ``ldmatrix``) and, with bf16 q,
    converts every K/V value twice (e4m3 -> fp16 -> bf16, ``F2F.BF16.F16``);
    this path must do neither. (On the H200 it was nevertheless slower at
    head_dim 128, so the policy takes it at head_dim <= 64 only.)"""
    shape = SHAPES.get(name) or OTHER_SHAPES[name]
    plan, code = compile_shape(shape, q_dtype, "float8_e4m3fn", fp8_f16_dot=True)
    assert code.instructions["LDS.U8"] == 0, (plan, code.instructions)
    # The scalar fp16 -> bf16 step of the old double conversion (Triton 3.9;
    # Triton 3.7 spelled it HADD2.F32 plus a pack).
    assert code.instructions["F2F.BF16.F16"] == 0, (plan, code.instructions)
    # Every K/V element still goes through the hardware e4m3 -> fp16 unpack.
    assert code.instructions["F2FP.F16.E4M3.UNPACK_B"] > 0, (plan, code.instructions)
    # No register-held dot operand takes 8 values per thread (see the test
    # below), with mma.sync (tiles under 64 rows) or warpgroup MMAs.
    assert code.dot_operand_k_widths[8] == 0, (plan, code.dot_operand_k_widths)


@pytest.mark.parametrize(
    "name,changes",
    [
        ("head-dim-64", {}),  # transposed one-warp tiles (the policy's plan)
        ("head-dim-64", {"transposed": False}),
        ("head-dim-32", {}),
        ("head-dim-256", {"fp8_f16_dot": True}),
    ],
)
def test_fp8_f16_dots_on_mma_sync_take_v_two_values_per_thread(name, changes):
    """Tiles under 64 rows run on ``mma.sync``, whose operands Triton holds
    in registers. Traced back to its fp8 load, V's float16 tile made Triton
    give the ``P V`` dot's operands 8 values per thread along the keys
    (``kWidth = 8``), which ``ldmatrix`` read with 4-way bank conflicts (H200,
    Nsight Compute). The kernel copies the converted tile through inline PTX
    (``V_ASM_COPY``), so the dot takes the usual 2. Where inline PTX cannot
    run (interpreter, ROCm), the kernel goes without the copy and its
    ``kWidth = 8`` shows that the copy is what changes it."""
    shape = SHAPES.get(name) or OTHER_SHAPES[name]
    plan, code = compile_shape(shape, "bfloat16", "float8_e4m3fn", **changes)
    assert plan.fp8_f16_dot and plan.tile_rows(shape[4] // shape[5]) < 64, plan
    widths = code.dot_operand_k_widths
    assert widths[8] == 0 and widths[2] > 0, (plan, widths)
    _, plain = compile_shape(
        shape, "bfloat16", "float8_e4m3fn", inline_ptx=False, **changes
    )
    assert plain.dot_operand_k_widths[8] > 0, (plan, plain.dot_operand_k_widths)


@pytest.mark.parametrize("name", [*SHAPES, *OTHER_SHAPES])
def test_fp8_default_plans_compile_for_sm90(name):
    """Every fp8 plan the policy picks compiles for sm_90 with bf16 q (the
    case only a GPU runs), within the register file, unpacking e4m3 in
    hardware; and the two dot paths really differ in their code."""
    shape = SHAPES.get(name) or OTHER_SHAPES[name]
    plan, code = compile_shape(shape, "bfloat16", "float8_e4m3fn")
    assert 0 < code.registers <= 255, plan
    assert code.instructions["F2FP.F16.E4M3.UNPACK_B"] > 0, (plan, code.instructions)
    assert code.count("HMMA") + code.count("HGMMA") > 0, plan
    other_plan, other = compile_shape(
        shape, "bfloat16", "float8_e4m3fn", fp8_f16_dot=not plan.fp8_f16_dot
    )
    assert other.instructions != code.instructions, (plan, other_plan)


@pytest.mark.parametrize("name", SHAPES)
def test_bf16_plans_compile_for_sm90_without_byte_loads(name):
    plan, code = compile_shape(SHAPES[name], "bfloat16", "bfloat16")
    assert code.count("HMMA") + code.count("HGMMA") > 0, plan
    assert code.instructions["LDS.U8"] == 0, (plan, code.instructions)
    assert code.count("F2FP.F16.E4M3") == 0
    assert 0 < code.registers <= 255


#: 128-row tiles as the policy plans them; 32-row tiles (8 queries x 4
#: heads) widened to 64 rows by taking 16 queries per tile (half masked).
E4M3_TILES = {
    "long-context": dict(num_warps=8, block_n=32, num_stages=2),
    "full-attention-block-40": dict(num_warps=8, block_n=32, num_stages=2),
    "many-requests": dict(block_q=16, num_warps=8, block_n=64, num_stages=2),
}


@pytest.mark.parametrize("name", E4M3_TILES)
def test_fp8_e4m3_dots_run_on_fp8_tensor_cores(name):
    """The opt-in fp8 tensor-core path (``fp8_e4m3_dot``) at tiles of 64 or
    128 rows: both dot products are fp8 ``wgmma`` (``QGMMA``), no K/V value
    goes through the e4m3 -> fp16 unpack, and with 8 warps nothing spills;
    the converting path of the same plan uses 16-bit tensor cores and unpacks
    every value."""
    shape = SHAPES.get(name) or OTHER_SHAPES[name]
    tile = dict(E4M3_TILES[name], fp8_f16_dot=False)
    plan, code = compile_shape(
        shape, "bfloat16", "float8_e4m3fn", fp8_e4m3_dot=True, **tile
    )
    assert plan.tile_rows(shape[4] // shape[5]) >= 64, plan
    assert code.count("QGMMA") > 0, (plan, code.instructions)
    assert code.count("HGMMA") + code.count("HMMA") == 0, (plan, code.instructions)
    assert code.count("F2FP.F16.E4M3") == 0, (plan, code.instructions)
    assert code.count("STL") == 0 and 0 < code.registers <= 255, plan
    _, converting = compile_shape(shape, "bfloat16", "float8_e4m3fn", **tile)
    assert converting.count("QGMMA") == 0
    assert converting.count("F2FP.F16.E4M3") > 0


def test_fp8_head_dim_64_plans_and_their_register_caps():
    """The one-warp fp8 plans at D = 64 are bound by latency. With 16-row
    tiles (8 queries x 2 query heads per KV head) the policy caps their
    registers so that more programs fit on an SM; the cap must reach the
    compiler (launch and ``triton.compile`` share ``compile_options``) and
    must bind: uncapped, the plan takes more. The transposed 8-row tiles of
    the benchmark's shape 5 run uncapped since V's asm copy (faster on the
    H200 than at 120 or 128 registers) and spill nothing."""
    sixteen_rows = (128, 8192, 8, 4096, 32, 16, 64)
    plan, code = compile_shape(sixteen_rows, "bfloat16", "float8_e4m3fn")
    assert plan.num_warps == 1 and not plan.transposed, plan
    assert plan.max_registers > 0, plan
    assert 0 < code.registers <= plan.max_registers, (plan, code.registers)
    assert code.instructions["F2FP.F16.E4M3.UNPACK_B"] > 0, code.instructions
    _, uncapped = compile_shape(
        sixteen_rows, "bfloat16", "float8_e4m3fn", max_registers=0
    )
    assert uncapped.registers > plan.max_registers, uncapped.registers
    eight_rows, code = compile_shape(SHAPES["head-dim-64"], "bfloat16", "float8_e4m3fn")
    assert eight_rows.transposed and eight_rows.max_registers == 0, eight_rows
    assert 0 < code.registers <= 255 and code.stack_bytes == 0, code
    # A bf16 cache keeps the compiler's choice (capping it was slower), and
    # so does D = 32 (its one-warp plans need fewer registers; capped at
    # 168, ptxas gives some more than uncapped).
    bf16_plan, _ = compile_shape(SHAPES["head-dim-64"], "bfloat16", "bfloat16")
    assert bf16_plan.max_registers == 0, bf16_plan
    d32 = (128, 8192, 8, 4096, 16, 16, 32)
    d32_plan, d32_code = compile_shape(d32, "bfloat16", "float8_e4m3fn")
    assert d32_plan.num_warps == 1 and d32_plan.max_registers == 0, d32_plan
    assert d32_code.registers < 168, d32_code.registers
