# SPDX-License-Identifier: Apache-2.0
"""Fixed-history attention of the DSpark draft block: the public entry.

Checks the inputs, then runs the Triton kernel on vLLM's paged KV cache in
place (planning the launch), or with ``reference=True`` the plain-PyTorch
reference. Needs torch, and triton for the kernel only (imported on first
use); never vLLM. The contract, the launch policy and the tests are described
in ``docs/kernel.md``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch

from vllm_spark2_5_plugin.ops.fixed_history_checks import (
    PagedKV,
    check_kv_dtypes,
    check_metadata,
    check_scale,
    check_tensors,
    check_window,
    interpreting,
)
from vllm_spark2_5_plugin.ops.fixed_history_reference import attend_reference
from vllm_spark2_5_plugin.ops.limits import (
    unsupported_dtype_reason,
    unsupported_head_dim_reason,
)
from vllm_spark2_5_plugin.ops.v_pages import check_v_pages

if TYPE_CHECKING:
    from vllm_spark2_5_plugin.ops.fixed_history_launch import LaunchPlan


def _check_kernel_inputs(q, k_cache, v_cache, fp8: bool) -> None:
    """What the kernel needs beyond the reference's checks."""
    reason = unsupported_dtype_reason(str(q.dtype))
    if reason is not None:
        raise TypeError(
            f"q has dtype {q.dtype}: {reason}; cast q/k/v to the model's "
            "half-precision dtype or use fixed_history_attention_reference"
        )
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != q.dtype and not fp8:
            raise TypeError(
                f"{name} dtype {t.dtype} differs from q dtype {q.dtype}; the K/V "
                "caches must both have q's dtype or both be torch.float8_e4m3fn "
                "(with k_scale and v_scale); mixed-precision caches are not "
                "supported"
            )
        if t.stride(-1) != 1:
            raise ValueError(
                f"{name} must be dense along the head dim (last stride 1), got "
                f"strides {tuple(t.stride())}; pass the vLLM view "
                "kv_cache.transpose(1, 2).split(D, -1) of a dense cache"
            )
    reason = unsupported_head_dim_reason(q.shape[2])
    if reason is not None:
        raise ValueError(f"q, k_cache, v_cache have head dim D={q.shape[2]}: {reason}")
    if q.dtype == torch.bfloat16 and interpreting():
        raise TypeError(
            "q has dtype torch.bfloat16, which Triton's interpreter "
            "(TRITON_INTERPRET=1) computes wrongly (its NumPy arrays have no "
            "bfloat16); under the interpreter use float16, or use "
            "fixed_history_attention_reference"
        )
    if q.device.type != "cuda" and not interpreting():
        raise RuntimeError(
            f"fixed_history_attention needs CUDA tensors, got q on {q.device}; "
            "on CPU set TRITON_INTERPRET=1 before importing this module, or use "
            "fixed_history_attention_reference"
        )


def fixed_history_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    sliding_window: int | None,
    scale: float,
    out: torch.Tensor | None = None,
    *,
    plan: LaunchPlan | None = None,
    reference: bool = False,
    k_scale: torch.Tensor | float | None = None,
    v_scale: torch.Tensor | float | None = None,
    v_pages_transposed: bool = False,
) -> torch.Tensor:
    """Attention of each request's draft block over a fixed key window.

    Args:
        q: ``[T, nH, D]`` float16/bfloat16, the queries of all draft blocks.
        k_cache, v_cache: ``[num_blocks, block_size, nKV, D]`` with the same
            dtype as ``q``, or both ``torch.float8_e4m3fn`` (vLLM's
            ``--kv-cache-dtype fp8``/``fp8_e4m3``; a uint8 cache must be
            viewed as float8_e4m3fn first); any strides as long as the last
            one is 1 (vLLM's ``kv_cache.transpose(1, 2).split(D, -1)`` views
            qualify).
        block_table: ``[>= R, max_blocks]`` int32 page ids per request.
        context_lens: ``[R]`` int32, contiguous, ``L_r`` (context tokens
            before the block).
        query_start_loc: ``[R + 1]`` int32, contiguous; request ``r`` owns
            query rows ``query_start_loc[r] .. query_start_loc[r+1]-1``
            (``B_r`` rows), whose K/V are already in the cache at positions
            ``L_r .. L_r + B_r - 1``.
        sliding_window: ``W > 0``: every query of request ``r`` sees positions
            ``max(0, L_r - W) .. L_r + B_r - 1``. ``None``: full attention,
            positions ``0 .. L_r + B_r - 1``. Zero/negative values are refused.
        scale: softmax scale applied to ``q . k``: a real number (not a
            tensor), finite, that fits in float32 (no overflow to inf, no
            nonzero value rounded to 0).
        out: optional ``[T, nH, D]`` output with ``q``'s dtype and device.
        plan: the launch configuration; ``None`` (the default) uses the one
            :func:`plan_launch` picks for these shapes and this device.
        reference: compute with the plain-PyTorch reference instead of the
            kernel (``fixed_history_attention_reference``): any floating
            dtype (float32 math, float64 for float64 inputs) on any device,
            with a Python loop over requests; ``plan`` is ignored.
        k_scale, v_scale: fp8 caches only (``None`` otherwise, and required
            then): the cache holds ``K / k_scale`` and ``V / v_scale``, and
            attention uses ``K = k_cache.float() * k_scale`` and ``V =
            v_cache.float() * v_scale``. Either vLLM's ``layer._k_scale`` /
            ``layer._v_scale``, a float32 tensor with one element on q's
            device that the kernel reads on the device (no host sync, so the
            call stays capturable and follows in-place updates on replay), or
            a finite positive Python number.
        v_pages_transposed: ``v_cache``'s pages hold V transposed, as
            ``write_kv_cache(..., v_pages_transposed=True)`` writes them
            (pages of 16 keys, head dim 128): value ``d`` of the key at
            offset ``k`` of page ``b`` at ``v_cache[b, d // 8, head, 16 * (d
            % 8) + position(k)]`` (``ops.v_pages``). On Hopper an fp8 cache
            in that layout is the 8-bit ``P V``'s operand as it is, so the
            Gluon kernel copies its pages without staging or transposing.

    Returns:
        ``out`` (allocated when not given). Rows owned by no request are left
        untouched.

    Not checked by the kernel (that would need a device-to-host sync): that
    ``query_start_loc`` is non-decreasing with ``query_start_loc[R] <= T``,
    that ``0 <= L_r`` and ``L_r + B_r <= max_blocks * block_size`` with valid
    page ids in the table, and that scale tensors hold a finite positive
    value. The reference, which reads the metadata on the host anyway,
    refuses a negative ``L_r``, keys past the block table and page ids
    outside the cache among the pages a request reads.
    GQA: query head ``h`` uses KV head ``h // (nH // nKV)``.
    """
    check_tensors(q, k_cache, v_cache, out)
    scales = check_kv_dtypes(q, k_cache, v_cache, k_scale, v_scale)
    window = check_window(sliding_window)
    # Checked for both paths alike, so the reference refuses what the kernel
    # refuses (None, a string, NaN, a float that float32 cannot hold).
    scale = check_scale(scale)
    check_metadata(q, block_table, context_lens, query_start_loc)
    if not reference:
        _check_kernel_inputs(q, k_cache, v_cache, scales is not None)
    if out is None:
        out = torch.empty_like(q)
    if v_pages_transposed:
        check_v_pages(v_cache)
    kv = PagedKV(
        k_cache,
        v_cache,
        block_table,
        context_lens,
        query_start_loc,
        scales,
        bool(v_pages_transposed),
    )
    if reference:
        return attend_reference(q, kv, window, scale, out)
    from vllm_spark2_5_plugin.ops.fixed_history_launch import launch_kernel

    return launch_kernel(q, kv, window, scale, out, plan)


#: ``fixed_history_attention(..., reference=True)``: same arguments, same
#: result, plain PyTorch (no Triton); the tests' ground truth in float64 and
#: the draft's path on CPU.
fixed_history_attention_reference = functools.partial(
    fixed_history_attention, reference=True
)
