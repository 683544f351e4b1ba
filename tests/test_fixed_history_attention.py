# SPDX-License-Identifier: Apache-2.0
"""Tests for the fixed-history draft attention kernel (``vllm_spark2_5_plugin.ops``).

Three groups, all through the public API of ``vllm_spark2_5_plugin.ops``:

* CPU, Triton interpreter: ``TRITON_INTERPRET=1`` must be set before Triton
  decorates the kernel, i.e. before the module is first imported, and other test
  files may already have imported it without the interpreter. So
  ``test_triton_interpreter_suite`` runs this same file again in a child
  process with ``TRITON_INTERPRET=1`` (and ``_SPARK_FH_ATTN_CHILD=1``); in that
  child only the ``test_interp_*`` tests exist. float16 only: bfloat16 is
  broken under the interpreter.
* CPU, plain: the PyTorch reference against an independent dense-mask
  computation, every refusal of the launch wrapper, the launch plans and the
  kernel limits (``ops.limits``).
* CUDA (skipped without a GPU): realistic shapes, fp16 and bf16, head dims
  32..256, GQA 1..8, CUDA-graph replay.

fp8 (e4m3) caches run in the first and third groups too (q in fp16 under the
interpreter, which loads and converts float8_e4m3fn; fp16 and bf16 on CUDA):
their ground truth is the float64 reference on the caches dequantized by the
test itself (``k8.double() * k_scale``), with scales far from 1 and different
for K and V so that a forgotten or swapped scale fails.

Every kernel check compares with the reference evaluated in float64 on fresh
random inputs, poisons ``out`` with NaN first, and builds K/V as vLLM 0.32.0
does: ``kv_cache.transpose(1, 2).split(D, -1)`` of a per-layer
``[num_blocks, nKV, block_size, 2*D]`` view, with scattered block tables.
Only torch, triton, pytest and the standard library are imported.
"""

from __future__ import annotations

import dataclasses
import fractions
import os
import random
import subprocess
import sys
import types
from pathlib import Path
from typing import NamedTuple
from unittest import mock

import pytest
import torch
from triton_interpreter import e4m3_rounding_shim, run_interpreter_suite

_SRC = Path(__file__).resolve().parents[1] / "src"
try:
    from vllm_spark2_5_plugin import ops
    from vllm_spark2_5_plugin.ops import limits
except ImportError:  # running from a plain checkout without an install
    sys.path.insert(0, str(_SRC))
    from vllm_spark2_5_plugin import ops
    from vllm_spark2_5_plugin.ops import limits

_CHILD_ENV = "_SPARK_FH_ATTN_CHILD"
_IN_CHILD = os.environ.get(_CHILD_ENV) == "1"

# ‖out − ref‖ / ‖ref‖ and max |out − ref| against the float64 reference.
_REL_TOL = {torch.float16: 3e-3, torch.bfloat16: 2e-2}
_ABS_TOL = {torch.float16: 1e-2, torch.bfloat16: 6e-2}


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


class Case(NamedTuple):
    """A batch: per-request context lengths L and draft block sizes B, the
    window W (None: full attention), nH, nKV, D, the block size and the KV
    cache layout."""

    ctx_lens: list[int]
    q_lens: list[int]
    window: int | None
    num_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int
    layout: str = "nhd"


def _fresh_seed() -> int:
    return random.SystemRandom().randrange(2**31)


@pytest.fixture(params=[False, True], ids=["fp8-dot-in-q-dtype", "fp8-dot-f16"])
def fp8_f16_dot(request, monkeypatch):
    """Both ways an fp8 cache feeds the tensor cores (``LaunchPlan.fp8_f16_dot``),
    forced into the plans the launch policy picks; tests that pass their own
    plan set the field themselves."""
    from vllm_spark2_5_plugin.ops import fixed_history_launch as launch

    policy = launch.plan_launch
    # ops resolves its names on first use and keeps them: resolved now, it
    # keeps the policy, not this test's stand-in.
    assert ops.plan_launch is policy

    def plan_launch(**kwargs):
        plan = policy(**kwargs)
        # fp8 scores (the policy's, on the Gluon kernel) need float16 dots.
        scores = plan.fp8_scores and request.param
        return dataclasses.replace(plan, fp8_f16_dot=request.param, fp8_scores=scores)

    monkeypatch.setattr(launch, "plan_launch", plan_launch)
    return request.param


def _f32(x: float) -> float:
    """``x`` rounded to float32, as a float32 scale tensor holds it."""
    return torch.tensor(x, dtype=torch.float32).item()


def _make_inputs(
    case,
    *,
    dtype,
    device,
    seed,
    q_gain=1.0,
    strided_q=False,
    extra_rows=0,
    fp8_scales=None,
):
    """Random inputs laid out like vLLM 0.32.0's paged cache.

    layout "nhd": vLLM's default KV-cache layout (LBNHC), physically
    [num_blocks, block_size, nKV, 2D]; "hnd": physically [num_blocks, nKV,
    block_size, 2D]. Either way the per-layer view is [num_blocks, nKV,
    block_size, 2D] and K/V come from .transpose(1, 2).split(D, -1).

    ``fp8_scales=(k_scale, v_scale)``: the cache is float8_e4m3fn holding
    ``K / k_scale`` and ``V / v_scale`` (K, V ~ N(0, 1)), quantized like
    vLLM's cache writes (saturating at +-448); ``dtype`` is then q's only.
    """
    nh, nkv, d, page = case.num_heads, case.num_kv_heads, case.head_dim, case.page_size
    gen = torch.Generator(device="cpu").manual_seed(seed)
    num_reqs = len(case.ctx_lens)
    spans = [c + b for c, b in zip(case.ctx_lens, case.q_lens, strict=True)]
    max_blocks = max(-(-n // page) for n in spans) + 1
    num_blocks = num_reqs * max_blocks + 5
    shape = (num_blocks, page, nkv, 2 * d)
    if case.layout == "hnd":
        shape = (num_blocks, nkv, page, 2 * d)
    raw = torch.randn(shape, generator=gen)
    cache_dtype = dtype
    if fp8_scales is not None:
        raw[..., :d] /= fp8_scales[0]
        raw[..., d:] /= fp8_scales[1]
        raw = raw.clamp(-448.0, 448.0)
        cache_dtype = torch.float8_e4m3fn
    kv_cache = raw.to(cache_dtype).to(device)
    if case.layout == "nhd":
        kv_cache = kv_cache.permute(0, 2, 1, 3)
    assert kv_cache.shape == (num_blocks, nkv, page, 2 * d)
    k_cache, v_cache = kv_cache.transpose(1, 2).split(d, -1)
    assert not k_cache.is_contiguous()

    perm = torch.randperm(num_blocks, generator=gen)[: num_reqs * max_blocks]
    block_table = perm.view(num_reqs, max_blocks).to(torch.int32).to(device)
    context_lens = torch.tensor(case.ctx_lens, dtype=torch.int32, device=device)
    starts = [0]
    for b in case.q_lens:
        starts.append(starts[-1] + b)
    query_start_loc = torch.tensor(starts, dtype=torch.int32, device=device)
    num_tokens = starts[-1] + extra_rows
    q = torch.randn(num_tokens, nh, d, generator=gen) * q_gain
    if strided_q:
        # q as a slice of a fused qkv projection output, like in a model.
        qkv = torch.randn(num_tokens, (nh + 2 * nkv) * d, generator=gen)
        qkv[:, : nh * d] = q.view(num_tokens, -1)
        q = qkv.to(dtype).to(device)[:, : nh * d].view(num_tokens, nh, d)
        assert not q.is_contiguous()
    else:
        q = q.to(dtype).to(device)
    return q, k_cache, v_cache, block_table, context_lens, query_start_loc


def _poison_outside_windows(k, v, bt, ctx, qsl, window):
    """NaN in every cache slot outside the requests' key ranges: slots a
    kernel may read (whole pages, whole tiles) but must not use, since a
    weight of 0 times NaN is NaN."""
    page = k.shape[1]
    keep = torch.zeros(k.shape[:2], dtype=torch.bool, device=k.device)
    counts = (qsl[1:] - qsl[:-1]).tolist()
    for r, (c, n) in enumerate(zip(ctx.tolist(), counts, strict=True)):
        lo = 0 if window is None else max(0, c - window)
        pos = torch.arange(lo, c + n, device=k.device)
        keep[bt[r].long()[pos // page], pos % page] = True
    # All-ones bytes are NaN in bfloat16, float16 and float8_e4m3fn.
    k.view(torch.uint8)[~keep] = 0xFF
    v.view(torch.uint8)[~keep] = 0xFF


def _reference_f64(
    q, k_cache, v_cache, block_table, ctx, qsl, window, scale, fp8_scales=None
):
    """The float64 reference; an fp8 cache is dequantized here, by the test
    (``cache.double() * scale``), not by the reference."""
    k, v = k_cache.double(), v_cache.double()
    if fp8_scales is not None:
        k, v = k * fp8_scales[0], v * fp8_scales[1]
    return ops.fixed_history_attention_reference(
        q.double(), k, v, block_table, ctx, qsl, window, scale
    )


def _scale_args(fp8_scales, form, device):
    """``k_scale``/``v_scale`` keyword arguments in one of the accepted forms:
    "tensor" (shape [], like vLLM's layer._k_scale), "tensor1" (shape [1]) or
    "float"."""
    if fp8_scales is None:
        return {}
    if form == "float":
        values = fp8_scales
    else:
        shape = () if form == "tensor" else (1,)
        values = [
            torch.full(shape, s, dtype=torch.float32, device=device) for s in fp8_scales
        ]
    return dict(zip(("k_scale", "v_scale"), values, strict=True))


def _assert_close(out, ref, dtype, rows, what, rel_tol=None, abs_tol=None):
    """The first ``rows`` of ``out`` against ``ref``: finite, and within
    ``rel_tol`` in norm and ``abs_tol`` per value (default: q's dtype's)."""
    got = out[:rows].double()
    want = ref[:rows]
    assert torch.isfinite(got).all(), f"{what}: NaN/inf in output (unwritten rows?)"
    rel = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
    err = (got - want).abs().max().item()
    rel_tol = _REL_TOL[dtype] if rel_tol is None else rel_tol
    abs_tol = _ABS_TOL[dtype] if abs_tol is None else abs_tol
    assert rel < rel_tol, f"{what}: relative error {rel:.3e}"
    assert err < abs_tol, f"{what}: max abs error {err:.3e}"


def _e4m3_rows(q):
    """q as the fp8 tensor-core path sees it (``LaunchPlan.fp8_e4m3_dot``):
    each (token, head) row scaled to e4m3's range, rounded to e4m3 and scaled
    back, in float64."""
    qf = q.float()
    row_max = qf.abs().amax(-1, keepdim=True).clamp_min(1e-30)
    q8 = (qf * (448.0 / row_max)).to(torch.float8_e4m3fn)
    return q8.double() * (row_max.double() / 448.0)


def _e4m3_pow2_rows(q, top=8):
    """q as the Gluon kernel's ``fp8_scores`` rounds it, in float64: each
    (token, head) row times the power of two that puts its largest
    magnitude in [2^(top - 1), 2^top) ([128, 256); with its
    ``packed_softmax``, ``top`` 0: [0.5, 1)), rounded to e4m3, and scaled
    back."""
    qf = q.double()
    row_max = qf.abs().amax(-1, keepdim=True)
    _, exponent = torch.frexp(torch.where(row_max > 0, row_max, 1.0))
    pow2 = torch.ldexp(torch.ones_like(row_max), top - exponent)
    return (qf * pow2).to(torch.float8_e4m3fn).double() / pow2


def _assert_within_e4m3_rounding(out, ref, v_max, dtype, rows, what):
    """The fp8 tensor-core path against the reference fed the same
    e4m3-rounded q: what is left is the rounding of the softmax weights to
    e4m3 (relative error <= 2^-4 each, in the numerator only), so
    |out - ref| <= 2 * 2^-4 * max|V| plus the output's own rounding; in norm
    (the errors are unbiased) a few percent, and 5% is asserted."""
    abs_tol = 2 * 2.0**-4 * v_max + _ABS_TOL[dtype]
    _assert_close(out, ref, dtype, rows, what, rel_tol=0.05, abs_tol=abs_tol)


def _assert_within_e4m3_weights(out, ref, ref_abs_v, dtype, rows, what):
    """The Gluon kernel's fp8 ``P V`` (over V's pages) against the reference
    fed the same e4m3-rounded q: the weights rounded to e4m3 in the
    numerator only (times 2^8, relative error <= 2^-4 each; below e4m3's
    normal range an absolute error that the output shows at <= 2^-18 |v|
    per key, well inside q's dtype's tolerance here), so per value
    ``|out - ref| <= 2^-4 * sum_j w_j |v_j|`` (``ref_abs_v``: the reference
    with |V|) plus the output's own rounding; in norm (unbiased errors) a
    few percent, and 5% is asserted. A V tile in the wrong order breaks the
    bound by the size of V itself."""
    got, want = out[:rows].double(), ref[:rows]
    assert torch.isfinite(got).all(), f"{what}: NaN/inf in output (unwritten rows?)"
    bound = 2.0**-4 * ref_abs_v[:rows] + _ABS_TOL[dtype]
    excess = ((got - want).abs() - bound).max().item()
    assert excess <= 0, f"{what}: {excess:.3e} past the e4m3 weights' bound"
    rel = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
    assert rel < 0.05, f"{what}: relative error {rel:.3e}"


def _launch_plan(plan, q, k_cache, block_table, context_lens, window):
    """``plan``, or where it is ``None`` the plan the launch picks for these
    inputs (with an fp8 cache, as the tests call it; a fixture's stand-in
    for the policy included): on a Hopper GPU, where the Gluon kernel runs,
    it has ``fp8_scores``."""
    from vllm_spark2_5_plugin.ops import fixed_history_launch as launch

    if plan is not None:
        return plan
    return launch.plan_launch(
        num_tokens=q.shape[0],
        num_reqs=context_lens.shape[0],
        num_heads=q.shape[1],
        num_kv_heads=k_cache.shape[2],
        head_dim=q.shape[2],
        sliding_window=window,
        max_kv_len=block_table.shape[1] * k_cache.shape[1],
        device=q.device,
        kv_fp8=True,
    )


def _gluon_launch(plan, q, paged, scale_kwargs, window, v_pages=False):
    """The Gluon kernel's options where the launch (with ``plan``, or its
    own) runs it for an fp8 cache, else ``{}``."""
    from vllm_spark2_5_plugin.ops import fixed_history_launch as launch
    from vllm_spark2_5_plugin.ops.fixed_history_checks import PagedKV

    own = plan is None
    k, _, bt, ctx, _ = paged
    plan = _launch_plan(plan, q, k, bt, ctx, window)
    kv = PagedKV(*paged, tuple(scale_kwargs.values()), v_pages)
    return launch.gluon_options(q, kv, plan, own_plan=own) or {}


def _rounds_q(plan, q, paged, scale_kwargs, window):
    """Whether the launch (with ``plan``, or its own) rounds q to e4m3 for an
    fp8 cache: the Gluon kernel runs it with ``fp8_scores``."""
    return _gluon_launch(plan, q, paged, scale_kwargs, window).get("fp8_scores", False)


#: The key that each position of a transposed V page holds (16-key pages).
_V_PAGE_KEYS = [8 * ((p // 2) % 2) + 2 * (p // 4) + p % 2 for p in range(16)]


def _transpose_v_pages(v):
    """Rewrites the V cache view ``v`` (``[blocks, 16, nKV, 128]``, any
    strides) in place with each page's V transposed: value ``d`` of the key
    at position ``p`` (key ``_V_PAGE_KEYS[p]``) at ``[block, d // 8, head,
    16 * (d % 8) + p]``."""
    bits = v.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[v.element_size()])
    blocks, page, heads, dim = bits.shape
    assert (page, dim) == (16, 128), (page, dim)
    keys = torch.tensor(_V_PAGE_KEYS, device=v.device)
    t = bits[:, keys].permute(0, 2, 3, 1)  # [blocks, heads, d, position]
    t = t.reshape(blocks, heads, 16, 128)  # [.., d // 8, 16 * (d % 8) + p]
    bits.copy_(t.permute(0, 2, 1, 3))


def _run_and_check(
    case,
    *,
    dtype,
    device,
    out_given=True,
    plan=None,
    fp8_scales=None,
    scale_form="tensor",
    **options,
):
    """Runs the kernel (with ``plan`` when given) on fresh random inputs and
    checks it against the float64 reference; padding rows must stay NaN.
    ``fp8_scales=(k_scale, v_scale)``: an fp8 cache, the scales passed in
    ``scale_form`` (see :func:`_scale_args`); with a ``plan`` that takes the
    fp8 tensor-core path the reference gets the e4m3-rounded q and the bound
    of :func:`_assert_within_e4m3_rounding`. ``options``: q_gain, strided_q,
    extra_rows of :func:`_make_inputs`; poison: NaN in every cache slot
    outside the requests' key ranges (:func:`_poison_outside_windows`)."""
    seed = _fresh_seed()
    what = (
        f"seed={seed} {case} {dtype} out_given={out_given} plan={plan} "
        f"fp8_scales={fp8_scales} ({scale_form}) {options}"
    )
    if fp8_scales is not None:
        fp8_scales = tuple(_f32(s) for s in fp8_scales)
    poison = options.pop("poison", False)
    v_pages = options.pop("v_pages", False)
    q, k, v, bt, ctx, qsl = _make_inputs(
        case, dtype=dtype, device=device, seed=seed, fp8_scales=fp8_scales, **options
    )
    if poison:
        _poison_outside_windows(k, v, bt, ctx, qsl, case.window)
    extra_rows = options.get("extra_rows", 0)
    window, scale = case.window, case.head_dim**-0.5
    e4m3 = fp8_scales is not None and plan is not None and plan.fp8_e4m3_dot
    q_ref = _e4m3_rows(q) if e4m3 else q
    kwargs = _scale_args(fp8_scales, scale_form, device)
    if fp8_scales is not None and _rounds_q(
        plan, q, (k, v, bt, ctx, qsl), kwargs, window
    ):
        q_ref = _e4m3_pow2_rows(q)
    ref = _reference_f64(q_ref, k, v, bt, ctx, qsl, window, scale, fp8_scales)
    pv8 = False
    if v_pages:
        # The reference above read V in rows; the kernel reads the same
        # values from transposed pages (8-bit P V where the Gluon kernel
        # runs them: its weights' bound, _assert_within_e4m3_weights).
        pv8 = fp8_scales is not None and _gluon_launch(
            plan, q, (k, v, bt, ctx, qsl), kwargs, window, True
        ).get("v_pages", False)
        ref_abs_v = _reference_f64(
            q_ref, k, v.double().abs(), bt, ctx, qsl, window, scale, fp8_scales
        )
        _transpose_v_pages(v)
        kwargs["v_pages_transposed"] = True
    if plan is not None:
        kwargs["plan"] = plan
    if plan is not None or out_given or extra_rows:
        out = torch.full_like(q, float("nan"))
        res = ops.fixed_history_attention(
            q, k, v, bt, ctx, qsl, window, scale, out=out, **kwargs
        )
        assert res is out, what
    else:
        # No out=: the result is freshly allocated. Free a NaN-filled block of
        # the same size first so that (on CUDA, through the caching allocator)
        # the kernel most likely writes into poisoned memory.
        poison = torch.full_like(q, float("nan"))
        del poison
        out = ops.fixed_history_attention(
            q, k, v, bt, ctx, qsl, window, scale, **kwargs
        )
        assert out.shape == q.shape and out.dtype == q.dtype, what
    rows = sum(case.q_lens)
    if e4m3:
        v_max = (v.double() * fp8_scales[1]).abs().max().item()
        _assert_within_e4m3_rounding(out, ref, v_max, dtype, rows, what)
    elif pv8:
        _assert_within_e4m3_weights(out, ref, ref_abs_v, dtype, rows, what)
    else:
        _assert_close(out, ref, dtype, rows, what)
    if extra_rows:
        assert torch.isnan(out[rows:]).all(), f"{what}: padding rows were written"


def _every_other_value(t):
    """A copy of ``t`` (``[T, nH, D]``) whose values lie two apart along D
    (last stride 2)."""
    wide = torch.zeros(*t.shape[:2], 2 * t.shape[2], dtype=t.dtype, device=t.device)
    strided = wide[..., ::2]
    strided.copy_(t)
    assert strided.stride(2) == 2
    return strided


def _plan(block_q, block_n, num_splits=1, num_warps=4, num_stages=1, **more):
    return ops.LaunchPlan(
        block_q=block_q,
        block_n=block_n,
        num_splits=num_splits,
        num_warps=num_warps,
        num_stages=num_stages,
        **more,
    )


# ---------------------------------------------------------------------------
# CPU: Triton interpreter (child process)
# ---------------------------------------------------------------------------

_INTERP_CASES = {
    "L0": Case([0], [4], 8, 4, 4, 32, 4),
    "L_below_W_gqa2": Case([3, 5], [2, 1], 8, 4, 2, 32, 4),
    "L_above_W_gqa4_hnd": Case([20, 9, 33], [3, 1, 6], 8, 8, 2, 64, 8, "hnd"),
    "full_attention_gqa8": Case([0, 13], [5, 2], None, 8, 1, 32, 4),
    "window_1": Case([7, 0], [3, 2], 1, 2, 1, 32, 4),
    "one_long_block": Case([2, 9, 4, 30], [1, 1, 1, 12], 16, 4, 2, 32, 8),
    "empty_request": Case([5, 6, 7], [2, 0, 3], 4, 4, 2, 32, 4, "hnd"),
    "window_equals_L": Case([16, 15, 17], [2, 2, 2], 16, 4, 1, 32, 16),
    "d128_gqa1": Case([11, 40], [2, 3], 24, 2, 2, 128, 8),
    "full_attention_long": Case([700, 650], [3, 2], None, 4, 2, 32, 16),
}

# Ragged requests, one with no queries, one needing several query passes
# (block_q=2), 3 KV heads: 15 (request, KV head) items.
_RAGGED = Case([9, 0, 30, 4, 17], [3, 2, 0, 5, 1], None, 6, 3, 32, 4)


def _interpreter_index_shim(force=False):
    """Work around Triton <= 3.6's interpreter under numpy >= 2.5.

    That interpreter turns a loop bound into a Python int with
    ``int(ndarray)``, which numpy 2.5 refuses for the 1-element arrays the
    interpreter keeps scalars in (later Triton squeezes first). Test-only:
    re-patch ``tensor.__index__`` after the interpreter's own patching.
    """
    import numpy as np

    if not force:
        try:
            int(np.array([1]))
            return  # this numpy still converts 1-element arrays
        except TypeError:
            pass
    from triton.runtime import interpreter as ti

    orig = getattr(ti, "_patch_lang_tensor", None)
    if orig is None or getattr(orig, "_spark_fh_shim", False):
        return

    def patched(tensor, *args, **kwargs):
        orig(tensor, *args, **kwargs)
        scope = args[0] if args else kwargs.get("scope")
        index = lambda self: int(np.asarray(self.handle.data).reshape(-1)[0])  # noqa: E731
        if scope is not None and hasattr(scope, "set_attr"):
            scope.set_attr(tensor, "__index__", index)
        else:
            tensor.__index__ = index

    patched._spark_fh_shim = True
    ti._patch_lang_tensor = patched


if _IN_CHILD:
    _interpreter_index_shim(force=os.environ.get("_SPARK_FH_FORCE_SHIM") == "1")
    e4m3_rounding_shim()

    def _interp_check(case, **kwargs):
        _run_and_check(case, dtype=torch.float16, device="cpu", **kwargs)

    @pytest.mark.parametrize("name", sorted(_INTERP_CASES))
    @pytest.mark.parametrize("out_given", [True, False])
    def test_interp_kernel_matches_float64_reference(name, out_given):
        _interp_check(_INTERP_CASES[name], out_given=out_given)

    @pytest.mark.parametrize("block_n", [16, 32])
    @pytest.mark.parametrize("num_splits", [1, 2, 4])
    def test_interp_split_path_matches_reference(num_splits, block_n):
        # Small tiles so the key range really is cut into several splits (with
        # 32-key tiles and 4 splits, some of them empty) and a request with
        # more queries than block_q takes several passes.
        _interp_check(
            Case([40, 0, 70], [3, 2, 5], 48, 4, 2, 32, 8),
            plan=_plan(2, block_n, num_splits),
            extra_rows=3,
        )

    @pytest.mark.parametrize("window", [None, 6])
    @pytest.mark.parametrize("persistent", [1, 2])
    def test_interp_persistent_grid_loops_over_items(persistent, window):
        # Persistent grid: min(items, programs_per_sm * SMs) programs (the
        # interpreter reports 4 SMs) walk the 15 items, so each program
        # handles several, unevenly; padding rows stay untouched.
        items = len(_RAGGED.ctx_lens) * _RAGGED.num_kv_heads
        assert persistent * ops.sm_count(torch.device("cpu")) < items
        _interp_check(
            _RAGGED._replace(window=window),
            plan=_plan(2, 16, programs_per_sm=persistent),
            extra_rows=3,
        )

    @pytest.mark.parametrize("window", [None, 6])
    @pytest.mark.parametrize("persistent", [1, 3])
    def test_interp_persistent_and_one_item_grids_agree(persistent, window):
        # The same kernel loop, run once per program (one program per item)
        # and several times per program (persistent grid): every item is
        # computed by the same code, so the outputs are identical.
        seed = _fresh_seed()
        q, k, v, bt, ctx, qsl = _make_inputs(
            _RAGGED, dtype=torch.float16, device="cpu", seed=seed, extra_rows=3
        )
        outs = []
        for programs_per_sm in (0, persistent):
            out = torch.full_like(q, float("nan"))
            plan = _plan(2, 16, programs_per_sm=programs_per_sm)
            ops.fixed_history_attention(
                q, k, v, bt, ctx, qsl, window, 0.2, out=out, plan=plan
            )
            outs.append(out)
        rows = sum(_RAGGED.q_lens)
        one_item, looping = outs
        assert torch.equal(one_item[:rows], looping[:rows]), f"seed={seed}"
        assert torch.isnan(looping[rows:]).all(), f"seed={seed}"
        ref = _reference_f64(q, k, v, bt, ctx, qsl, window, 0.2)
        _assert_close(one_item, ref, torch.float16, rows, f"seed={seed}")

    def test_interp_strided_q_and_sharp_softmax():
        _interp_check(
            Case([25, 3], [4, 4], 12, 4, 2, 64, 4), q_gain=4.0, strided_q=True
        )

    @pytest.mark.parametrize("fp8_scales", [None, (0.5, 2.0)], ids=["f16", "fp8"])
    @pytest.mark.parametrize("name", ["L_above_W_gqa4_hnd", "one_long_block"])
    def test_interp_ignores_cache_slots_outside_the_window(name, fp8_scales):
        # NaN in the slots before each window in its first page, past each
        # request's end in its last, and in every page no request uses.
        _interp_check(_INTERP_CASES[name], fp8_scales=fp8_scales, poison=True)

    _V_PAGES_CASES = {
        "sliding_gqa2": Case([0, 37, 20], [3, 1, 5], 24, 4, 2, 128, 16),
        "full_hnd": Case([17, 3], [4, 2], None, 2, 1, 128, 16, "hnd"),
    }

    @pytest.mark.parametrize("fp8_scales", [None, (0.02, 3.0)], ids=["f16", "fp8"])
    @pytest.mark.parametrize("name", sorted(_V_PAGES_CASES))
    @pytest.mark.parametrize(
        "plan",
        [None, _plan(2, 32, num_warps=4, fp8_f16_dot=True), _plan(4, 16, 2)],
        ids=["policy", "f16-dot", "splits"],
    )
    def test_interp_reads_v_pages_transposed(name, fp8_scales, plan):
        # V's pages transposed (16-key pages, D = 128), NaN in every slot
        # outside the windows (in a transposed page a slot's bytes hold
        # other keys' values): the same output as from V in rows.
        if plan is not None and plan.fp8_f16_dot and fp8_scales is None:
            plan = dataclasses.replace(plan, fp8_f16_dot=False)
        _interp_check(
            _V_PAGES_CASES[name],
            fp8_scales=fp8_scales,
            poison=True,
            v_pages=True,
            extra_rows=2,
            **({} if plan is None else {"plan": plan}),
        )

    def test_interp_leaves_padding_rows_untouched():
        _interp_check(Case([10, 4], [2, 3], 6, 2, 1, 32, 4), extra_rows=4)

    # fp8 (e4m3) caches: sliding and full windows, GQA 1 to 8, both layouts,
    # an empty request; scales far from 1 and different for K and V.
    _INTERP_FP8_CASES = (
        "L_above_W_gqa4_hnd",
        "full_attention_gqa8",
        "window_1",
        "empty_request",
        "d128_gqa1",
    )

    @pytest.mark.parametrize("scales", [(0.02, 3.0), (3.0, 0.02)])
    @pytest.mark.parametrize("name", _INTERP_FP8_CASES)
    def test_interp_fp8_cache_matches_dequantized_reference(name, scales, fp8_f16_dot):
        _interp_check(_INTERP_CASES[name], fp8_scales=scales)

    @pytest.mark.parametrize("scale_form", ["tensor", "tensor1", "float"])
    @pytest.mark.parametrize("out_given", [True, False])
    def test_interp_fp8_scale_forms(scale_form, out_given, fp8_f16_dot):
        # 0-d and [1] float32 tensors (read by the kernel) and Python floats.
        _interp_check(
            Case([20, 3], [3, 2], 8, 4, 2, 64, 4),
            fp8_scales=(0.05, 2.5),
            scale_form=scale_form,
            out_given=out_given,
            extra_rows=2,
        )

    @pytest.mark.parametrize("num_splits", [2, 4])
    def test_interp_fp8_split_path(num_splits, fp8_f16_dot):
        # Several splits (with 4, some empty) merged by the combine kernel:
        # v_scale must be applied to every partial.
        _interp_check(
            Case([40, 0, 70], [3, 2, 5], 48, 4, 2, 32, 8),
            # (float16 dots need 32-key tiles, see LaunchPlan)
            plan=_plan(
                2, 32 if fp8_f16_dot else 16, num_splits, fp8_f16_dot=fp8_f16_dot
            ),
            fp8_scales=(0.02, 3.0),
            extra_rows=3,
        )

    @pytest.mark.parametrize("window", [None, 6])
    def test_interp_fp8_persistent_grid(window, fp8_f16_dot):
        # Persistent grid: each program loops over several items with the
        # scales loaded once per program.
        _interp_check(
            _RAGGED._replace(window=window),
            plan=_plan(
                2, 32 if fp8_f16_dot else 16, programs_per_sm=1, fp8_f16_dot=fp8_f16_dot
            ),
            fp8_scales=(3.0, 0.02),
            extra_rows=3,
        )

    @pytest.mark.parametrize("scale_form", ["tensor", "float"])
    def test_interp_gluon_plan_runs_the_triton_kernel_here(scale_form):
        # A plan for the Gluon kernel on a device that cannot run it (the
        # interpreter; float scales anywhere): its Triton launch instead.
        _interp_check(
            Case([40, 0, 70, 9], [4, 2, 5, 3], 48, 8, 2, 32, 8),
            plan=_plan(16, 16, programs_per_sm=1, gluon=True),
            fp8_scales=(0.02, 3.0),
            scale_form=scale_form,
            extra_rows=3,
        )

    # fp8 tensor-core dots (LaunchPlan.fp8_e4m3_dot, opt-in): q and the
    # softmax weights rounded to e4m3; one item per program, several splits
    # (partials merged), and a persistent grid.
    @pytest.mark.parametrize(
        "plan",
        [
            _plan(2, 32, fp8_e4m3_dot=True),
            _plan(2, 32, 4, fp8_e4m3_dot=True),
            _plan(2, 32, programs_per_sm=1, fp8_e4m3_dot=True),
            _plan(16, 32, fp8_e4m3_dot=True),
        ],
        ids=["one-item", "splits", "persistent", "masked-rows"],
    )
    @pytest.mark.parametrize("name", [*_INTERP_FP8_CASES, "full_attention_long"])
    def test_interp_fp8_e4m3_dot_within_its_rounding(name, plan):
        _interp_check(
            _INTERP_CASES[name], plan=plan, fp8_scales=(0.02, 3.0), extra_rows=2
        )

    # Transposed dots (LaunchPlan.transposed): S^T = K Q^T and O^T += V^T P^T,
    # tiles of 8 rows (GQA 4 with 2 queries: no padding rows; GQA 1: 2 rows
    # padded to 8; GQA 8: 16 rows), requests needing several query passes;
    # one item per program, several splits (with 4, some empty; partials
    # merged), a persistent grid; caches in q's dtype and fp8 (float16 dots
    # with V converted in registers, or K and V converted to q's dtype).
    @pytest.mark.parametrize(
        "plan",
        [
            _plan(2, 32, num_warps=1, transposed=True),
            _plan(2, 32, 4, num_warps=1, num_stages=2, transposed=True),
            _plan(2, 32, programs_per_sm=1, num_warps=2, transposed=True),
        ],
        ids=["one-item", "splits", "persistent"],
    )
    @pytest.mark.parametrize("cache", ["f16", "fp8-f16-dots", "fp8-converted"])
    @pytest.mark.parametrize(
        "name",
        [
            "L_above_W_gqa4_hnd",
            "full_attention_gqa8",
            "d128_gqa1",
            "empty_request",
            "full_attention_long",
        ],
    )
    def test_interp_transposed_dots_match_reference(name, cache, plan):
        fp8 = cache != "f16"
        if cache == "fp8-f16-dots":
            plan = dataclasses.replace(plan, fp8_f16_dot=True)
        _interp_check(
            _INTERP_CASES[name],
            plan=plan,
            fp8_scales=(0.02, 3.0) if fp8 else None,
            extra_rows=2,
            poison=True,
        )

    def test_interp_fp8_scale_tensors_are_read_at_each_launch():
        # The kernel reads the scale tensors' current values (as a CUDA-graph
        # replay would after vLLM updates layer._k_scale in place).
        seed = _fresh_seed()
        case = Case([12, 5], [2, 3], 6, 4, 2, 32, 4)
        first = (_f32(0.02), _f32(3.0))
        q, k, v, bt, ctx, qsl = _make_inputs(
            case, dtype=torch.float16, device="cpu", seed=seed, fp8_scales=first
        )
        scales = _scale_args(first, "tensor", "cpu")
        for new in (first, (_f32(0.5), _f32(0.125))):
            scales["k_scale"].fill_(new[0])
            scales["v_scale"].fill_(new[1])
            out = ops.fixed_history_attention(
                q,
                k,
                v,
                bt,
                ctx,
                qsl,
                6,
                0.2,
                out=torch.full_like(q, float("nan")),
                **scales,
            )
            ref = _reference_f64(q, k, v, bt, ctx, qsl, 6, 0.2, new)
            _assert_close(out, ref, torch.float16, 5, f"seed={seed} scales={new}")

else:

    def test_triton_interpreter_suite():
        """Runs the test_interp_* tests in a TRITON_INTERPRET=1 child process."""
        run_interpreter_suite(__file__, _CHILD_ENV, timeout=600)


# ---------------------------------------------------------------------------
# CPU: reference semantics, refusals, launch plans, limits (no interpreter)
# ---------------------------------------------------------------------------

if not _IN_CHILD:

    def _dense_masked_attention(q, k_cache, v_cache, bt, ctx, qsl, window, scale):
        """Independent float64 check: gather each request's whole sequence and
        mask with the fixed-history rule, position by position."""
        out = torch.zeros(q.shape, dtype=torch.float64)
        page = k_cache.shape[1]
        group = q.shape[1] // k_cache.shape[2]
        for r in range(ctx.shape[0]):
            first, end = int(qsl[r]), int(qsl[r + 1])
            length = int(ctx[r]) + (end - first)
            ks = torch.stack(
                [k_cache[bt[r, p // page], p % page] for p in range(length)]
            )
            vs = torch.stack(
                [v_cache[bt[r, p // page], p % page] for p in range(length)]
            )
            lo = 0 if window is None else max(0, int(ctx[r]) - window)
            for i in range(first, end):
                for h in range(q.shape[1]):
                    s = ks[:, h // group].double() @ q[i, h].double() * scale
                    keep = torch.tensor([lo <= p < length for p in range(length)])
                    s[~keep] = float("-inf")
                    out[i, h] = torch.softmax(s, 0) @ vs[:, h // group].double()
        return out

    def _cpu_inputs(case, seed, dtype=torch.float32):
        return _make_inputs(case, dtype=dtype, device="cpu", seed=seed)

    @pytest.mark.parametrize("window", [None, 1, 5, 64])
    def test_reference_sees_exactly_the_fixed_history_window(window):
        seed = _fresh_seed()
        q, k, v, bt, ctx, qsl = _cpu_inputs(
            Case([0, 3, 17], [2, 4, 3], window, 4, 2, 8, 4), seed
        )
        ref = ops.fixed_history_attention_reference(
            q.double(), k.double(), v.double(), bt, ctx, qsl, window, 0.3
        )
        want = _dense_masked_attention(q, k, v, bt, ctx, qsl, window, 0.3)
        torch.testing.assert_close(
            ref, want, rtol=1e-10, atol=1e-10, msg=f"seed={seed}"
        )

    def test_reference_keys_outside_window_do_not_matter():
        seed = _fresh_seed()
        q, k, v, bt, ctx, qsl = _cpu_inputs(Case([12], [3], 4, 2, 1, 8, 4), seed)
        before = ops.fixed_history_attention_reference(q, k, v, bt, ctx, qsl, 4, 1.0)
        # Positions 0..7 are outside max(0, 12-4)=8 .. 14: scribble on them.
        for p in range(8):
            k[bt[0, p // 4], p % 4] = 1e3
            v[bt[0, p // 4], p % 4] = -1e3
        after = ops.fixed_history_attention_reference(q, k, v, bt, ctx, qsl, 4, 1.0)
        torch.testing.assert_close(before, after, msg=f"seed={seed}")

    @pytest.mark.parametrize("window", [None, 20])
    def test_reference_reads_v_pages_transposed(window):
        # Transposed V pages (the test's own rewrite): the reference reads the
        # same values as from rows, so the outputs are equal bit for bit.
        seed = _fresh_seed()
        q, k, v, bt, ctx, qsl = _cpu_inputs(
            Case([0, 40, 9], [3, 5, 1], window, 4, 2, 128, 16), seed
        )
        rows = ops.fixed_history_attention_reference(q, k, v, bt, ctx, qsl, window, 0.1)
        _transpose_v_pages(v)
        pages = ops.fixed_history_attention_reference(
            q, k, v, bt, ctx, qsl, window, 0.1, v_pages_transposed=True
        )
        assert torch.equal(rows, pages), f"seed={seed}"
        plain = ops.fixed_history_attention_reference(
            q, k, v, bt, ctx, qsl, window, 0.1
        )
        assert not torch.allclose(rows, plain), "V read in rows from transposed pages"

    @pytest.mark.parametrize(
        "case", [Case([5], [2], 4, 2, 1, 128, 8), Case([5], [2], 4, 2, 1, 64, 16)]
    )
    def test_v_pages_transposed_needs_16_key_pages_of_head_dim_128(case):
        q, k, v, bt, ctx, qsl = _cpu_inputs(case, 0)
        with pytest.raises(ValueError, match="v_cache"):
            ops.fixed_history_attention_reference(
                q, k, v, bt, ctx, qsl, 4, 0.1, v_pages_transposed=True
            )

    def _good_args(**over):
        tensors = _cpu_inputs(Case([5, 2], [2, 3], 4, 4, 2, 32, 4), 0, torch.float16)
        names = [
            "q",
            "k_cache",
            "v_cache",
            "block_table",
            "context_lens",
            "query_start_loc",
        ]
        args = dict(zip(names, tensors, strict=True))
        args.update(sliding_window=4, scale=0.1, out=None)
        args.update(over)
        return args

    def _qkv_with_head_dim(d):
        q = torch.randn(5, 4, d, dtype=torch.float16)
        cache = torch.randn(20, 2, 4, 2 * d, dtype=torch.float16)
        k, v = cache.transpose(1, 2).split(d, -1)
        return dict(q=q, k_cache=k, v_cache=v)

    def _refusal_cases():
        base = _good_args()
        q, k, v = base["q"], base["k_cache"], base["v_cache"]
        k_strided = k.transpose(-1, -2).contiguous().transpose(-1, -2)
        return {
            "fp32_q": (
                dict(q=q.float(), k_cache=k.float(), v_cache=v.float()),
                TypeError,
                "float16 or bfloat16",
            ),
            "kv_dtype_mismatch": (
                dict(v_cache=v.to(torch.bfloat16)),
                TypeError,
                "v_cache dtype",
            ),
            "head_dim_48": (_qkv_with_head_dim(48), ValueError, "D=48"),
            "head_dim_512": (_qkv_with_head_dim(512), ValueError, "D=512"),
            "head_dim_16": (_qkv_with_head_dim(16), ValueError, "D=16"),
            "heads_not_divisible": (
                dict(q=torch.randn(5, 3, 32, dtype=torch.float16)),
                ValueError,
                "nH=3 .* nKV=2",
            ),
            "non_unit_last_stride": (
                dict(k_cache=k_strided),
                ValueError,
                "k_cache must be dense along the head dim",
            ),
            "context_lens_int64": (
                dict(context_lens=base["context_lens"].long()),
                TypeError,
                "context_lens must be int32",
            ),
            "block_table_int64": (
                dict(block_table=base["block_table"].long()),
                TypeError,
                "block_table must be int32",
            ),
            "query_start_loc_len": (
                dict(query_start_loc=base["query_start_loc"][:2]),
                ValueError,
                "query_start_loc must be 1-D",
            ),
            "window_zero": (
                dict(sliding_window=0),
                ValueError,
                "sliding_window must be a positive int, got 0",
            ),
            "window_negative": (
                dict(sliding_window=-4),
                ValueError,
                "sliding_window must be a positive int, got -4",
            ),
            "window_float": (dict(sliding_window=4.0), TypeError, "sliding_window"),
            "window_bool": (dict(sliding_window=True), TypeError, "sliding_window"),
            "out_wrong_dtype": (
                dict(out=torch.empty(q.shape, dtype=torch.float32)),
                ValueError,
                "out must match q",
            ),
            "out_wrong_shape": (
                dict(out=torch.empty(5, 4, 16, dtype=torch.float16)),
                ValueError,
                "out must match q",
            ),
            "q_2d": (dict(q=q.view(5, -1)), ValueError, "q must be 3-D"),
            "cache_3d": (
                dict(k_cache=k[0], v_cache=v[0]),
                ValueError,
                "k_cache must be 4-D",
            ),
        }

    @pytest.mark.parametrize("case", sorted(_refusal_cases()))
    def test_launch_wrapper_refuses_unsupported_input(case):
        over, exc, pattern = _refusal_cases()[case]
        with pytest.raises(exc, match=pattern):
            ops.fixed_history_attention(**_good_args(**over))

    @pytest.mark.skipif(
        os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
        reason="interpreter runs CPU tensors",
    )
    def test_launch_wrapper_refuses_cpu_tensors_without_interpreter():
        with pytest.raises(RuntimeError, match="needs CUDA tensors"):
            ops.fixed_history_attention(**_good_args())

    def test_interpreter_refuses_bfloat16(monkeypatch):
        # Triton's interpreter returns bfloat16 results off by orders of
        # magnitude without a word; the entry refuses them instead. (The check
        # reads TRITON_INTERPRET at call time; the kernel is never reached.)
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        args = _good_args()
        for name in ("q", "k_cache", "v_cache"):
            args[name] = args[name].to(torch.bfloat16)
        with pytest.raises(TypeError, match="bfloat16, which Triton's interpreter"):
            ops.fixed_history_attention(**args)

    @pytest.mark.parametrize("scale_form", ["tensor", "tensor1", "float"])
    def test_reference_dequantizes_fp8_caches(scale_form):
        # The reference itself (given fp8 caches and scales) against the
        # reference on caches dequantized here: a forgotten, swapped or
        # inverted scale changes the result far beyond the tolerance.
        seed = _fresh_seed()
        scales = (_f32(0.02), _f32(3.0))
        case = Case([0, 9, 17], [2, 4, 3], 5, 4, 2, 16, 4, "hnd")
        q, k, v, bt, ctx, qsl = _make_inputs(
            case, dtype=torch.float64, device="cpu", seed=seed, fp8_scales=scales
        )
        assert k.dtype == v.dtype == torch.float8_e4m3fn
        for window in (None, 5):
            got = ops.fixed_history_attention_reference(
                q,
                k,
                v,
                bt,
                ctx,
                qsl,
                window,
                0.3,
                **_scale_args(scales, scale_form, "cpu"),
            )
            want = _reference_f64(q, k, v, bt, ctx, qsl, window, 0.3, scales)
            torch.testing.assert_close(
                got, want, rtol=1e-12, atol=1e-12, msg=f"seed={seed} W={window}"
            )

    def test_reference_fp8_in_float32_for_half_q():
        # fp16 q with an fp8 cache: the CPU path of a model served with
        # --kv-cache-dtype fp8 (float32 math, fp16 output).
        seed = _fresh_seed()
        scales = (_f32(0.05), _f32(2.0))
        q, k, v, bt, ctx, qsl = _make_inputs(
            Case([30, 2], [3, 3], 8, 4, 1, 32, 8),
            dtype=torch.float16,
            device="cpu",
            seed=seed,
            fp8_scales=scales,
        )
        got = ops.fixed_history_attention_reference(
            q, k, v, bt, ctx, qsl, 8, 0.2, **_scale_args(scales, "tensor", "cpu")
        )
        assert got.dtype == torch.float16
        want = _reference_f64(q, k, v, bt, ctx, qsl, 8, 0.2, scales)
        _assert_close(got, want, torch.float16, 6, f"seed={seed}")

    def _fp8_args(**over):
        """Valid fp8 arguments (tensor scales) with ``over`` applied."""
        scales = (_f32(0.02), _f32(3.0))
        tensors = _make_inputs(
            Case([5, 2], [2, 3], 4, 4, 2, 32, 4),
            dtype=torch.float16,
            device="cpu",
            seed=0,
            fp8_scales=scales,
        )
        args = _good_args()
        args.update(zip(("q", "k_cache", "v_cache"), tensors[:3], strict=True))
        args.update(_scale_args(scales, "tensor", "cpu"))
        args.update(over)
        return args

    def _fp8_refusal_cases():
        base = _fp8_args()
        k8, v8 = base["k_cache"], base["v_cache"]
        k16, v16 = _good_args()["k_cache"], _good_args()["v_cache"]
        f32 = dict(dtype=torch.float32)
        return {
            "no_k_scale": (dict(k_scale=None), TypeError, "k_scale is required"),
            "no_v_scale": (dict(v_scale=None), TypeError, "v_scale is required"),
            "k_scale_float64": (
                dict(k_scale=torch.tensor(0.1, dtype=torch.float64)),
                TypeError,
                "k_scale must be a float32 tensor",
            ),
            "v_scale_bfloat16": (
                dict(v_scale=torch.tensor([0.1], dtype=torch.bfloat16)),
                TypeError,
                "v_scale must be a float32 tensor",
            ),
            "k_scale_two_elements": (
                dict(k_scale=torch.ones(2, **f32)),
                ValueError,
                r"k_scale must hold one element .* got shape \(2,\)",
            ),
            "v_scale_empty": (
                dict(v_scale=torch.ones(0, **f32)),
                ValueError,
                "v_scale must hold one element",
            ),
            "k_scale_other_device": (
                dict(k_scale=torch.ones((), device="meta", **f32)),
                ValueError,
                "k_scale is on meta but q is on cpu",
            ),
            "k_scale_bool": (dict(k_scale=True), TypeError, "k_scale must be"),
            "v_scale_str": (dict(v_scale="0.1"), TypeError, "v_scale must be .* str"),
            "k_scale_zero": (
                dict(k_scale=0.0),
                ValueError,
                "k_scale must be finite and positive, got 0.0",
            ),
            "v_scale_negative": (
                dict(v_scale=-2),
                ValueError,
                "v_scale must be finite and positive",
            ),
            "v_scale_nan": (
                dict(v_scale=float("nan")),
                ValueError,
                "v_scale must be finite",
            ),
            # Finite and positive as Python floats, inf and 0 as the float32
            # the kernel receives.
            "v_scale_inf_in_float32": (
                dict(v_scale=1e40),
                ValueError,
                r"v_scale must be finite and positive in float32 .* got 1e\+40, "
                "which float32 holds as inf",
            ),
            "k_scale_zero_in_float32": (
                dict(k_scale=1e-50),
                ValueError,
                "k_scale must be finite and positive in float32 .* holds as 0.0",
            ),
            "k_fp8_v_half": (
                dict(v_cache=v16, v_scale=None),
                TypeError,
                "k_cache dtype torch.float8_e4m3fn differs from v_cache dtype "
                "torch.float16",
            ),
            "k_half_v_fp8": (
                dict(k_cache=k16, k_scale=None),
                TypeError,
                "k_cache dtype torch.float16 differs from v_cache dtype",
            ),
            "e5m2_caches": (
                dict(
                    k_cache=k8.to(torch.float8_e5m2), v_cache=v8.to(torch.float8_e5m2)
                ),
                TypeError,
                "k_cache has dtype torch.float8_e5m2: .* --kv-cache-dtype fp8_e4m3",
            ),
            "e4m3fnuz_v_cache": (
                dict(v_cache=v8.to(torch.float8_e4m3fnuz)),
                TypeError,
                "v_cache has dtype torch.float8_e4m3fnuz: .*float8_e4m3fn only",
            ),
            "uint8_caches": (
                dict(k_cache=k8.view(torch.uint8), v_cache=v8.view(torch.uint8)),
                TypeError,
                r"k_cache has dtype torch.uint8: .*"
                r"k_cache.view\(torch.float8_e4m3fn\)",
            ),
            "scales_with_half_caches": (
                dict(k_cache=k16, v_cache=v16),
                TypeError,
                "k_scale is only for torch.float8_e4m3fn caches; with "
                "torch.float16 caches pass k_scale=None",
            ),
            "v_scale_with_half_caches": (
                dict(k_cache=k16, v_cache=v16, k_scale=None, v_scale=1.0),
                TypeError,
                "v_scale is only for torch.float8_e4m3fn caches",
            ),
        }

    @pytest.mark.parametrize("path", ["kernel", "reference"])
    @pytest.mark.parametrize("case", sorted(_fp8_refusal_cases()))
    def test_fp8_refusals(case, path):
        # The same checks guard the kernel and the reference.
        over, exc, pattern = _fp8_refusal_cases()[case]
        with pytest.raises(exc, match=pattern):
            ops.fixed_history_attention(
                **_fp8_args(**over), reference=path == "reference"
            )

    @pytest.mark.parametrize("q_dtype", [torch.float32, torch.float64])
    def test_kernel_refuses_fp8_caches_with_full_precision_q(q_dtype):
        # The reference runs any q with an fp8 cache; the kernel needs fp16/bf16.
        args = _fp8_args()
        args["q"] = args["q"].to(q_dtype)
        args["out"] = None
        with pytest.raises(TypeError, match="q has dtype .*float16 or bfloat16"):
            ops.fixed_history_attention(**args)
        out = ops.fixed_history_attention_reference(**args)
        assert out.dtype == q_dtype
        _assert_matches_dequantized(out, args, (_f32(0.02), _f32(3.0)))

    @pytest.mark.skipif(
        os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
        reason="interpreter runs CPU tensors",
    )
    @pytest.mark.parametrize("scale_form", ["tensor", "tensor1", "float", "numbers"])
    def test_launch_wrapper_accepts_fp8_inputs(scale_form):
        # Valid fp8 inputs pass every argument check and stop only at the
        # device check (CPU tensors without the interpreter); the reference
        # runs them.
        if scale_form == "numbers":  # any real number, converted with float()
            scales = (1.0, 1.5)
            args = _fp8_args(k_scale=1, v_scale=fractions.Fraction(3, 2))
        else:
            scales = (_f32(0.02), _f32(3.0))
            args = _fp8_args(**_scale_args(scales, scale_form, "cpu"))
        with pytest.raises(RuntimeError, match="needs CUDA tensors"):
            ops.fixed_history_attention(**args)
        out = ops.fixed_history_attention_reference(**args)
        _assert_matches_dequantized(out, args, scales)

    def _assert_matches_dequantized(out, args, scales):
        """``out`` of the reference over ``args``' fp8 cache against the
        float64 reference over the cache as this test dequantizes it (the
        five query rows of ``_fp8_args``)."""
        ref = _reference_f64(
            *(args[n] for n in ("q", "k_cache", "v_cache", "block_table")),
            *(args[n] for n in ("context_lens", "query_start_loc")),
            args["sliding_window"],
            args["scale"],
            scales,
        )
        tol = 1e-2 if out.dtype == torch.float16 else 1e-5
        torch.testing.assert_close(out[:5].double(), ref[:5], rtol=tol, atol=tol)

    def test_reference_refuses_bad_window_too():
        with pytest.raises(ValueError, match="positive int"):
            ops.fixed_history_attention_reference(**_good_args(sliding_window=0))

    def _strided_copy(t):
        """``t`` (1-D) with the same values two elements apart (stride 2), as
        a column of a ``[n, 2]`` tensor is."""
        strided = torch.stack([t, torch.full_like(t, 1)], 1)[:, 0]
        assert strided.stride() == (2,) and torch.equal(strided, t)
        return strided

    @pytest.mark.parametrize("path", ["kernel", "reference"])
    @pytest.mark.parametrize("name", ["context_lens", "query_start_loc"])
    def test_strided_metadata_is_refused(name, path):
        # The kernels load element r at pointer + r, so a strided view would
        # hand them other elements (the audit's wrong outputs and reads past
        # the block table). Refused by name, on both paths alike.
        args = _good_args()
        args[name] = _strided_copy(args[name])
        with pytest.raises(ValueError, match=f"{name} must be contiguous .*stride 2"):
            ops.fixed_history_attention(**args, reference=path == "reference")
        # A one-element tensor is contiguous whatever its stride: it passes.
        single = _good_args(
            context_lens=_strided_copy(torch.tensor([5, 0], dtype=torch.int32))[:1],
            query_start_loc=torch.tensor([0, 2], dtype=torch.int32),
        )
        assert single["context_lens"].stride() == (2,)
        ops.fixed_history_attention_reference(**single)

    def _scale_refusal_cases():
        return {
            "none": (None, TypeError, "scale must be a real number .*NoneType None"),
            "str": ("0.1", TypeError, "scale must be a real number .*str '0.1'"),
            "bool": (True, TypeError, "scale must be a real number .*bool"),
            "tensor": (
                torch.tensor([0.1, 0.2]),
                TypeError,
                r"scale must be a real number, got a tensor of shape \(2,\)",
            ),
            "nan": (float("nan"), ValueError, "scale must be finite, got nan"),
            "inf": (float("-inf"), ValueError, "scale must be finite, got -inf"),
            "inf_in_float32": (
                1e40,
                ValueError,
                r"scale must fit in float32 .*got 1e\+40, which float32 "
                "holds as inf",
            ),
            "zero_in_float32": (
                -1e-50,
                ValueError,
                "scale must fit in float32 .*which float32 holds as -0.0",
            ),
        }

    @pytest.mark.parametrize("path", ["kernel", "reference"])
    @pytest.mark.parametrize("case", sorted(_scale_refusal_cases()))
    def test_scale_refusals(case, path):
        # One shared check: the kernel and the reference refuse the same
        # scales, naming the argument (before this, None and "0.1" met a bare
        # float() or a tensor product, and NaN passed the reference).
        scale, exc, pattern = _scale_refusal_cases()[case]
        with pytest.raises(exc, match=pattern):
            ops.fixed_history_attention(
                **_good_args(scale=scale), reference=path == "reference"
            )

    def test_reference_takes_any_real_scale():
        # Any real number is a scale, converted with float() (an int, a
        # Fraction), and 0 is one too (uniform weights, exact in float32).
        for scale, same in ((fractions.Fraction(1, 2), 0.5), (1, 1.0), (0, 0.0)):
            got = ops.fixed_history_attention_reference(**_good_args(scale=scale))
            want = ops.fixed_history_attention_reference(**_good_args(scale=same))
            assert torch.equal(got, want), scale

    def test_reference_names_a_negative_context_len():
        ctx = torch.tensor([-3, 2], dtype=torch.int32)
        with pytest.raises(ValueError, match=r"context_lens\[0\] = -3 is negative"):
            ops.fixed_history_attention_reference(**_good_args(context_lens=ctx))

    def test_reference_checks_the_page_ids_a_request_reads():
        # Request 0 (L = 12, B = 3, W = 4, pages of 4) reads keys 8..14, in
        # its pages 2 and 3. Entries it never reads (pages 0 and 1, outside
        # the window, and a padding column) may hold anything, -1 included.
        q, k, v, bt, ctx, qsl = _cpu_inputs(Case([12], [3], 4, 2, 1, 8, 4), 0)
        want = ops.fixed_history_attention_reference(q, k, v, bt, ctx, qsl, 4, 0.5)
        padded = torch.cat([bt, torch.full_like(bt[:, :1], -1)], 1)
        padded[0, :2] = -1
        got = ops.fixed_history_attention_reference(q, k, v, padded, ctx, qsl, 4, 0.5)
        assert torch.equal(got, want)
        # A bad id in a page it reads: -1 used to read the last cache block
        # (negative indexing), a too-large one failed with a bare IndexError.
        num_blocks = k.shape[0]
        for j, page, keys in ((2, -1, "8..11"), (3, num_blocks, "12..14")):
            bad = padded.clone()
            bad[0, j] = page
            pattern = (
                rf"block_table\[0, {j}\] = {page} is not a page id of the cache "
                rf"\(0..{num_blocks - 1}\): request 0 reads its keys {keys}"
            )
            with pytest.raises(ValueError, match=pattern):
                ops.fixed_history_attention_reference(q, k, v, bad, ctx, qsl, 4, 0.5)

    def test_persistent_plan_refuses_several_splits():
        with pytest.raises(ValueError, match="needs num_splits == 1"):
            _plan(2, 16, num_splits=2, programs_per_sm=2)

    def test_plan_refuses_two_fp8_dot_paths():
        with pytest.raises(ValueError, match="exclude each other"):
            _plan(2, 32, fp8_f16_dot=True, fp8_e4m3_dot=True)

    def test_transposed_plan_tiles_and_refusals():
        # Transposed dots take the query rows as the dots' columns: 8 rows
        # suffice (16 otherwise); they are the Triton kernel's float16/bf16
        # dots only.
        assert _plan(8, 32, transposed=True).tile_rows(1) == 8
        assert _plan(8, 32).tile_rows(1) == 16
        assert _plan(1, 32, transposed=True).tile_rows(4) == 8
        assert _plan(4, 32, transposed=True).tile_rows(8) == 32
        for other in ({"gluon": True}, {"fp8_e4m3_dot": True}):
            with pytest.raises(ValueError, match="transposed is for the Triton"):
                _plan(8, 32, transposed=True, **other)

    def test_half_rows_plans_are_the_gluon_kernels():
        # Half of a tile's rows hold queries: the Gluon kernel's option, for
        # tiles of at least 2 queries (each half then holds whole queries).
        assert _plan(16, 64, gluon=True, half_rows=True).half_rows
        for other in ({}, {"block_q": 1, "gluon": True}):
            more = {"block_q": 16, **other}
            with pytest.raises(ValueError, match="half_rows is for the Gluon"):
                _plan(more.pop("block_q"), 64, half_rows=True, **more)

    @pytest.mark.parametrize("registers", [-1, 8, 23, 256, 1024])
    def test_plan_refuses_register_caps_outside_the_register_file(registers):
        with pytest.raises(ValueError, match="max_registers must be 0"):
            _plan(2, 32, max_registers=registers)
        assert _plan(2, 32, max_registers=168).max_registers == 168
        assert _plan(2, 32).max_registers == 0  # no cap unless asked
        with pytest.raises(ValueError, match="Gluon kernel sets its own"):
            _plan(2, 32, gluon=True, max_registers=168)

    def test_plan_refuses_e4m3_dots_over_16_keys():
        # An fp8 dot product sums over at least 32 keys: Triton would fail to
        # compile the kernel on the GPU.
        with pytest.raises(ValueError, match="fp8_e4m3_dot needs block_n >= 32"):
            _plan(2, 16, fp8_e4m3_dot=True)

    def test_plan_refuses_f16_dots_over_16_keys():
        # The float16-dot path with 16-key tiles came out wrong on the H200
        # (sm_90, Triton 3.7.1) although the interpreter computes it right.
        with pytest.raises(ValueError, match="fp8_f16_dot needs block_n >= 32"):
            _plan(2, 16, fp8_f16_dot=True)
        assert _plan(2, 32, fp8_f16_dot=True).fp8_f16_dot
        assert _plan(2, 16).block_n == 16

    @pytest.mark.parametrize("kv_fp8", [False, True])
    @pytest.mark.parametrize("head_dim", [32, 64, 128, 256])
    @pytest.mark.parametrize("queries,group", [(8, 4), (16, 8), (40, 8)])
    def test_policy_never_rounds_q_to_e4m3(queries, group, head_dim, kv_fp8):
        # The fp8 tensor-core path changes the numerics: opt-in only.
        shape = (32, 8192, queries, 4096, 4 * group, 4, head_dim)
        plan = ops.uniform_batch_plan(
            shape, device=torch.device("cuda", 0), num_sms=132, kv_fp8=kv_fp8
        )
        assert not plan.fp8_e4m3_dot, plan

    @pytest.mark.parametrize(
        "field,value,pattern",
        [
            ("block_q", 3, "block_q must be a power of two"),
            ("block_n", 8, "block_n must be at least 16"),
            ("num_splits", 3, "num_splits must be a power of two"),
            ("num_warps", 0, "num_warps must be a power of two"),
            ("num_stages", 0, "num_stages must be >= 1"),
        ],
    )
    def test_plan_refuses_bad_tiles(field, value, pattern):
        good = dict(block_q=2, block_n=16)
        with pytest.raises(ValueError, match=pattern):
            _plan(**dict(good, **{field: value}))

    def _plan_for(shape, device, kv_fp8=False, gluon=False):
        """The plan for a benchmark shape (R, L, B, W, nH, nKV, D), block size
        16, on a GPU with 132 SMs (an H200; no GPU needed), where the Gluon
        kernel can run (``gluon``) or not."""
        from vllm_spark2_5_plugin.ops import fixed_history_launch as launch

        with mock.patch.object(launch, "gluon_supported", lambda device: gluon):
            return ops.uniform_batch_plan(
                shape, device=device, num_sms=132, kv_fp8=kv_fp8
            )

    @pytest.mark.parametrize("kv_fp8", [False, True])
    @pytest.mark.parametrize(
        "shape,gluon",
        [
            ((64, 8192, 8, 4096, 32, 8, 128), True),  # 32 rows, widened to 64
            ((256, 8192, 8, 4096, 32, 8, 128), True),
            ((256, 2048, 8, 1024, 32, 8, 128), True),
            ((256, 8192, 32, 4096, 8, 8, 128), True),  # GQA 1
            ((32, 32768, 16, 4096, 32, 4, 128), True),  # 128 rows, 128 items
            ((8, 32768, 16, 4096, 32, 4, 128), False),  # 128 rows, 32 items
            ((64, 8192, 16, 4096, 32, 8, 128), False),  # 64 rows
            ((128, 8192, 8, 4096, 16, 16, 64), False),  # D = 64
            ((64, 8192, 8, 4096, 32, 8, 256), False),  # D = 256
            ((4, 8192, 8, 4096, 32, 8, 128), False),  # few items: split
            ((64, 8192, 4, 4096, 32, 8, 128), False),  # 16-row tiles
            ((256, 8192, 2, 4096, 64, 4, 128), False),  # GQA 16
            ((4, 8192, 8, 200, 32, 8, 128), True),  # few items, short window
        ],
    )
    def test_plan_gluon_where_measured_faster(shape, gluon, kv_fp8):
        # On a device that runs it, fp8 and bf16 caches alike: D = 128 tiles
        # of 32 rows (widened to 64) with one split, and of 128 rows with
        # items for 7/8 of the SMs; GQA 1 to 8.
        device = torch.device("cuda", 0)
        plan = _plan_for(shape, device, kv_fp8=kv_fp8, gluon=True)
        assert plan.gluon is gluon, plan
        if gluon:
            group = shape[4] // shape[5]
            assert plan.num_splits == 1, plan
            assert plan.block_q * group == plan.tile_rows(group) in (64, 128), plan
            # The 32-row tiles widened to 64 hold queries in half their rows.
            assert plan.half_rows is (plan.block_q * group == 64), plan
        else:
            assert not plan.half_rows, plan
        # An fp8 cache takes float16 MMAs in the Gluon kernel (its loader then
        # converts e4m3 -> float16 only), and at D = 64 or with tiles of
        # fewer than 64 rows (mma.sync) in either kernel.
        mma_sync = plan.tile_rows(shape[4] // shape[5]) < 64
        assert plan.fp8_f16_dot is (kv_fp8 and (gluon or shape[6] <= 64 or mma_sync)), (
            plan
        )
        # Never where it cannot run; there the plans are the Triton kernel's
        # (pinned in test_plan_for_the_h200_benchmark_shapes).
        assert not _plan_for(shape, device, kv_fp8=kv_fp8).gluon

    @pytest.mark.parametrize(
        "shape,kv_fp8,wide",
        [
            ((32, 32768, 16, 4096, 32, 4, 128), True, True),  # shape 4
            ((32, 32768, 16, 2048, 32, 4, 128), True, True),
            ((32, 4096, 16, None, 32, 4, 128), True, True),  # 4112 keys
            ((32, 32768, 16, 1536, 32, 4, 128), True, False),
            ((32, 32768, 16, 1024, 32, 4, 128), True, False),
            ((32, 8192, 16, 512, 32, 4, 128), True, False),
            ((32, 32768, 16, 4096, 32, 4, 128), False, False),  # bf16 cache
            ((256, 8192, 8, 4096, 32, 8, 128), True, False),  # 64 rows
        ],
    )
    def test_plan_takes_128_key_tiles_for_long_128_row_items(shape, kv_fp8, wide):
        # The Gluon kernel's 128-row fp8-scores tiles take 128 keys where an
        # item holds about 2048 keys or more (faster there, slower below),
        # never with a bf16 cache (slower) nor at 64 rows.
        plan = _plan_for(shape, torch.device("cuda", 0), kv_fp8=kv_fp8, gluon=True)
        assert plan.gluon, plan
        assert plan.wide_tiles is wide, plan

    def test_bf16_plans_change_only_where_the_gluon_kernel_runs():
        # With a cache in q's dtype, a device that runs the Gluon kernel gets
        # the Triton plan unchanged except where the plan runs Gluon: the
        # widened 64-row tiles were measured through the Gluon kernel only,
        # so the widening must not leave them to the Triton kernel (e.g.
        # when the key range is split after all).
        device = torch.device("cuda", 0)
        gluon_plans = 0
        for reqs in (1, 4, 16, 58, 116, 256):
            for window in (None, 100, 200, 300, 1024, 4096):
                for queries in (1, 4, 8, 16):
                    for heads, kv_heads in ((8, 8), (16, 8), (32, 8), (32, 4)):
                        shape = (reqs, 8192, queries, window, heads, kv_heads, 128)
                        triton = _plan_for(shape, device)
                        plan = _plan_for(shape, device, gluon=True)
                        assert plan == triton or plan.gluon, (shape, plan, triton)
                        gluon_plans += plan.gluon
        assert gluon_plans > 0

    @pytest.mark.parametrize("fp8", [False, True])
    @pytest.mark.parametrize("half_rows", [False, True])
    @pytest.mark.parametrize("rows", [64, 128])
    def test_launch_hands_gluon_plans_to_the_gluon_kernel(rows, fp8, half_rows):
        # What the launch passes to the Gluon kernel's entry (stood in for
        # here: it needs an sm_90 GPU, where test_cuda_*gluon* run it).
        from vllm_spark2_5_plugin.ops import fixed_history_gluon as gluon_ops
        from vllm_spark2_5_plugin.ops import fixed_history_launch as launch
        from vllm_spark2_5_plugin.ops.fixed_history_checks import PagedKV

        case = Case([40, 7], [4, 3], 32, 32, 4, 128, 16)
        scales = (0.5, 2.0) if fp8 else None
        q, k, v, bt, ctx, qsl = _make_inputs(
            case, dtype=torch.bfloat16, device="cpu", seed=0, fp8_scales=scales
        )
        if fp8:
            scales = tuple(torch.tensor(x) for x in scales)
        out = torch.empty_like(q)
        calls = []

        def entry(*args, **kwargs):
            calls.append((args, kwargs))
            return args[8]

        plan = _plan(rows // 8, 64, programs_per_sm=1, gluon=True, half_rows=half_rows)
        with (
            mock.patch.object(launch, "gluon_supported", lambda device: True),
            mock.patch.object(gluon_ops, "fixed_history_attention_wgmma", entry),
        ):
            kv = PagedKV(k, v, bt, ctx, qsl, scales)
            assert launch.launch_kernel(q, kv, 32, 0.1, out, plan) is out
        ((args, kwargs),) = calls
        assert args[:9] == (q, k, v, bt, ctx, qsl, 32, 0.1, out)
        if fp8:
            assert args[9] is scales[0] and args[10] is scales[1]
        else:
            assert args[9:] == (None, None)
        expected = {"f16_dots": False, "rows": rows}
        # Whole pages copied by TMA (16-key pages, aligned; fp8 into the
        # staging slots), the multiplying warps fencing only the tiles
        # copied by cp.async; fp8: the loader converts 8 values per thread.
        # 128-row tiles: two multiplying partitions and a ring of 4
        # (measured faster).
        expected.update(tma=True, edge_fence=True)
        if fp8:
            expected.update(narrow_convert=True)
        if rows == 128:
            expected.update(split_mma=True, ring=4)
        # half_rows: 64-row tiles only (the 128-row kernel has no such option).
        if half_rows and rows == 64:
            expected.update(half_rows=True)
        assert kwargs == expected
        # A cache in q's dtype that TMA cannot copy (a page stride off the
        # 16-byte grid): cp.async, the multiplying warps fencing 128-row
        # tiles.
        if not fp8:
            row = k.shape[2] * k.shape[3]
            padded = torch.zeros(*k.shape[:2], row + 4, dtype=k.dtype)
            odd = padded[..., :row].view(k.shape).copy_(k)
            calls.clear()
            with (
                mock.patch.object(launch, "gluon_supported", lambda device: True),
                mock.patch.object(gluon_ops, "fixed_history_attention_wgmma", entry),
            ):
                kv = PagedKV(odd, v, bt, ctx, qsl, None)
                launch.launch_kernel(q, kv, 32, 0.1, out, plan)
            ((_, kwargs),) = calls
            del expected["tma"], expected["edge_fence"]
            if rows == 128:
                expected.update(fence_in_mma=True)
            assert kwargs == expected
        # Head dims its GPU tests did not cover: the Triton launch instead.
        case = case._replace(head_dim=256)
        q, k, v, bt, ctx, qsl = _make_inputs(
            case, dtype=torch.bfloat16, device="cpu", seed=0
        )
        triton_grids = []
        triton_kernel = mock.MagicMock()
        triton_kernel.__getitem__.side_effect = lambda grid: (
            lambda *a, **kw: triton_grids.append(grid)
        )
        with (
            mock.patch.object(launch, "gluon_supported", lambda device: True),
            mock.patch.object(gluon_ops, "fixed_history_attention_wgmma", entry),
            mock.patch.object(launch, "fixed_history_kernel", triton_kernel),
        ):
            kv = PagedKV(k, v, bt, ctx, qsl, None)
            launch.launch_kernel(q, kv, 32, 0.1, torch.empty_like(q), plan)
        assert len(triton_grids) == 1
        assert len(calls) == 1

    @pytest.mark.parametrize("strided", ["q", "out"])
    def test_launch_runs_strided_head_dims_on_the_triton_kernel(strided):
        # The Gluon kernel reads q and writes out as rows of D contiguous
        # values; a q or out with another last stride (which the contract
        # allows) goes to the Triton kernel, which takes any strides, even
        # with a Gluon plan. (Stood in for here; test_cuda_strided_head_dims
        # runs it against the reference.)
        from vllm_spark2_5_plugin.ops import fixed_history_gluon as gluon_ops
        from vllm_spark2_5_plugin.ops import fixed_history_launch as launch
        from vllm_spark2_5_plugin.ops.fixed_history_checks import PagedKV

        case = Case([40, 7], [4, 3], 32, 32, 4, 128, 16)
        q, k, v, bt, ctx, qsl = _make_inputs(
            case, dtype=torch.bfloat16, device="cpu", seed=0
        )
        out = torch.empty_like(q)
        if strided == "q":
            q = _every_other_value(q)
        else:
            out = _every_other_value(out)
        gluon_calls, triton_grids = [], []
        triton_kernel = mock.MagicMock()
        triton_kernel.__getitem__.side_effect = lambda grid: (
            lambda *a, **kw: triton_grids.append(grid)
        )
        plan = _plan(16, 64, programs_per_sm=1, gluon=True)
        with (
            mock.patch.object(launch, "gluon_supported", lambda device: True),
            mock.patch.object(
                gluon_ops,
                "fixed_history_attention_wgmma",
                lambda *a, **kw: gluon_calls.append(a),
            ),
            mock.patch.object(launch, "fixed_history_kernel", triton_kernel),
        ):
            kv = PagedKV(k, v, bt, ctx, qsl, None)
            assert launch.launch_kernel(q, kv, 32, 0.1, out, plan) is out
            assert (gluon_calls, len(triton_grids)) == ([], 1)
            # Dense along D: the same plan runs the Gluon kernel.
            dense = torch.empty_like(out).copy_(out)
            launch.launch_kernel(q.contiguous(), kv, 32, 0.1, dense, plan)
            assert (len(gluon_calls), len(triton_grids)) == (1, 1)

    def test_gluon_needs_a_hopper_gpu():
        assert not ops.gluon_supported(torch.device("cpu"))
        if not torch.cuda.is_available():
            assert not ops.gluon_supported(torch.device("cuda", 0))

    def _pretend_hopper(monkeypatch):
        """A Hopper GPU with 132 SMs (an H200) as far as gluon_supported and
        the plans can tell; returns its device."""
        from vllm_spark2_5_plugin.ops import fixed_history_launch as launch

        monkeypatch.setattr(launch, "interpreting", lambda: False)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(launch, "_gluon_device", lambda idx: True)
        monkeypatch.setattr(torch.version, "hip", None)
        monkeypatch.setattr(launch, "sm_count", lambda device: 132)
        return torch.device("cuda", 0)

    def test_gluon_kernel_turned_off_by_its_environment_variable(monkeypatch, caplog):
        cuda = _pretend_hopper(monkeypatch)
        monkeypatch.delenv("SPARK2_5_GLUON", raising=False)
        assert ops.gluon_supported(cuda)
        for value, on in [("0", False), (" Off", False), ("1", True), ("yes", True)]:
            monkeypatch.setenv("SPARK2_5_GLUON", value)
            assert ops.gluon_supported(cuda) is on, value
        # Not a word it knows: left on, and the warning names the value.
        monkeypatch.setenv("SPARK2_5_GLUON", "disable")
        with caplog.at_level("WARNING", logger="vllm.spark2_5_plugin.ops"):
            assert ops.gluon_supported(cuda)
        assert "SPARK2_5_GLUON='disable'" in caplog.text
        # Off: the plans are the Triton kernel's, as on any other GPU.
        monkeypatch.setenv("SPARK2_5_GLUON", "0")
        plan = ops.uniform_batch_plan((64, 8192, 8, 4096, 32, 8, 128), device=cuda)
        assert not plan.gluon
        monkeypatch.setenv("SPARK2_5_GLUON", "1")
        plan = ops.uniform_batch_plan((64, 8192, 8, 4096, 32, 8, 128), device=cuda)
        assert plan.gluon
        # Plans are cached (a decode step asks for the same shapes each time),
        # by the switch's effect too, as the two plans above show.
        assert (
            ops.uniform_batch_plan((64, 8192, 8, 4096, 32, 8, 128), device=cuda) is plan
        )

    def test_fp8_scores_unless_the_environment_asks_for_f16_scores(monkeypatch):
        cuda = _pretend_hopper(monkeypatch)
        shapes = [(64, 8192, 8, 4096, 32, 8, 128), (32, 32768, 16, 4096, 32, 4, 128)]
        for value in (None, "1", "fp8-scores", "f16-scores", " F16-Scores ", "0"):
            if value is None:
                monkeypatch.delenv("SPARK2_5_GLUON", raising=False)
            else:
                monkeypatch.setenv("SPARK2_5_GLUON", value)
            f16 = value is not None and value.strip().lower() == "f16-scores"
            for shape in shapes:
                fp8 = ops.uniform_batch_plan(shape, device=cuda, kv_fp8=True)
                bf16 = ops.uniform_batch_plan(shape, device=cuda)
                assert fp8.gluon is (value != "0"), (value, fp8)
                # fp8 caches on the Gluon kernel, unless float16 scores are
                # asked for; never 16-bit caches.
                assert fp8.fp8_scores is (fp8.gluon and not f16), (value, fp8)
                assert not bf16.fp8_scores, (value, bf16)
        # Where the Gluon kernel does not run (D = 64), never.
        monkeypatch.delenv("SPARK2_5_GLUON", raising=False)
        d64 = ops.uniform_batch_plan(
            (128, 8192, 8, 4096, 16, 16, 64), device=cuda, kv_fp8=True
        )
        assert not d64.gluon and not d64.fp8_scores

    def test_v_pages_where_the_gluon_kernel_takes_them(monkeypatch):
        # V's pages transposed: fp8 caches of 16-key pages at D = 128 where
        # the Gluon kernel runs with fp8 scores, unless SPARK2_5_V_PAGES
        # turns it off; never on the CPU.
        from vllm_spark2_5_plugin.ops import fixed_history_launch as launch

        assert not ops.v_pages_preferred(
            torch.device("cpu"), kv_fp8=True, head_dim=128, page_size=16
        )
        cuda = _pretend_hopper(monkeypatch)
        for name in ("SPARK2_5_GLUON", "SPARK2_5_V_PAGES"):
            monkeypatch.delenv(name, raising=False)
        good = dict(kv_fp8=True, head_dim=128, page_size=16)
        assert ops.v_pages_preferred(cuda, **good)
        for change in ({"kv_fp8": False}, {"head_dim": 64}, {"page_size": 32}):
            assert not ops.v_pages_preferred(cuda, **{**good, **change}), change
        for name, value, on in [
            ("SPARK2_5_V_PAGES", "0", False),
            ("SPARK2_5_V_PAGES", " off", False),
            ("SPARK2_5_V_PAGES", "1", True),
            ("SPARK2_5_GLUON", "0", False),
            ("SPARK2_5_GLUON", "f16-scores", False),
        ]:
            monkeypatch.setenv(name, value)
            assert ops.v_pages_preferred(cuda, **good) is on, (name, value)
            monkeypatch.delenv(name)
        # The launch's 64- and 128-row Gluon pipelines over them: 8-bit P V
        # without the options it lacks; without fp8 scores, none (the Triton
        # kernel reads them).
        for rows in (64, 128):
            pipeline = launch._gluon_pipeline(
                rows, kv_fp8=True, tma=True, fp8_scores=True, half_rows=True,
                wide_tiles=True, v_pages=True,
            )  # fmt: skip
            assert pipeline["v_pages"], pipeline
            assert not {"half_rows", "issue_warp", "edge_tma", "narrow_tail"} & set(
                pipeline
            )
            assert not pipeline.get("packed_softmax"), pipeline
            assert "v_pages" not in launch._gluon_pipeline(
                rows, kv_fp8=True, tma=True, v_pages=True
            )
        # At 128 rows of 128 keys: the second multiplying partition at 192
        # registers, the loader at 120 and a ring of 5 (the partitions run
        # tiles apart under load), the loader in warps 0-3.
        assert pipeline == {
            "narrow_convert": True, "tma": True, "edge_fence": True,
            "fp8_scores": True, "split_mma": True, "block_n": 128, "ring": 5,
            "raw_slots": 2, "mma_regs": 192, "worker_regs": 120,
            "v_pages": True, "loader_first": True,
        }  # fmt: skip

    def test_fp8_dot_stand_in_keeps_fp8_scores_valid(monkeypatch, fp8_f16_dot):
        # The fixture forcing each fp8 dot into the policy's plans: the plans
        # keep fp8 scores with float16 dots and drop them without
        # (LaunchPlan refuses them there), and the reference the API tests
        # pick follows the plan the launch runs.
        from vllm_spark2_5_plugin.ops import fixed_history_launch as launch

        cuda = _pretend_hopper(monkeypatch)
        monkeypatch.delenv("SPARK2_5_GLUON", raising=False)
        kwargs = dict(
            num_tokens=64 * 8, num_reqs=64, num_heads=32, num_kv_heads=8,
            head_dim=128, sliding_window=4096, max_kv_len=8192 + 16, device=cuda,
            kv_fp8=True,
        )  # fmt: skip
        plan = launch.plan_launch(**kwargs)
        assert plan.gluon and plan.fp8_f16_dot is fp8_f16_dot
        assert plan.fp8_scores is fp8_f16_dot
        # The shapes the launch reads, on the pretended GPU.
        q = types.SimpleNamespace(shape=(64 * 8, 32, 128), device=cuda)
        k = types.SimpleNamespace(shape=(4, 16, 8, 128))
        bt = types.SimpleNamespace(shape=(64, 513))
        ctx = types.SimpleNamespace(shape=(64,))
        assert _launch_plan(None, q, k, bt, ctx, 4096) == plan

    def test_plan_refuses_fp8_scores_off_the_gluon_float16_path():
        with pytest.raises(ValueError, match="fp8_scores needs gluon=True"):
            _plan(16, 64, fp8_f16_dot=True, fp8_scores=True)
        with pytest.raises(ValueError, match="fp8_scores needs gluon=True"):
            _plan(16, 64, gluon=True, fp8_scores=True)

    @pytest.mark.parametrize("rows", [64, 128])
    def test_launch_hands_fp8_scores_to_the_gluon_kernel(rows):
        # With fp8_scores in the plan, the Gluon kernel gets it where TMA
        # copies the fp8 cache (at 64 rows with a ring of 3 and 3 staged
        # tiles, a warp issuing the copies; the multiplying warps fencing only
        # the tiles copied by cp.async), and not where TMA cannot (the
        # plan's other choices stay).
        from vllm_spark2_5_plugin.ops import fixed_history_gluon as gluon_ops
        from vllm_spark2_5_plugin.ops import fixed_history_launch as launch
        from vllm_spark2_5_plugin.ops.fixed_history_checks import PagedKV

        case = Case([40, 7], [4, 3], 32, 32, 4, 128, 16)
        q, k, v, bt, ctx, qsl = _make_inputs(
            case, dtype=torch.bfloat16, device="cpu", seed=0, fp8_scales=(0.5, 2.0)
        )
        scales = (torch.tensor(0.5), torch.tensor(2.0))
        calls = []

        def entry(*args, **kwargs):
            calls.append(kwargs)
            return args[8]

        plan = _plan(
            rows // 8, 64, programs_per_sm=1, gluon=True, fp8_f16_dot=True,
            fp8_scores=True,
        )  # fmt: skip
        row = k.shape[2] * k.shape[3]
        padded = torch.zeros(*k.shape[:2], row + 4, dtype=k.dtype)
        odd = padded[..., :row].view(k.shape).copy_(k)  # off TMA's 16-byte grid
        with (
            mock.patch.object(launch, "gluon_supported", lambda device: True),
            mock.patch.object(gluon_ops, "fixed_history_attention_wgmma", entry),
        ):
            for cache in (k, odd):
                kv = PagedKV(cache, v, bt, ctx, qsl, scales)
                launch.launch_kernel(q, kv, 32, 0.1, torch.empty_like(q), plan)
        tma, no_tma = calls
        expected = {"f16_dots": True, "rows": rows}
        expected.update(narrow_convert=True)
        if rows == 128:
            expected.update(split_mma=True, ring=4)
        assert no_tma == expected
        # ... with fp8 scores, an item's last tile multiplied as 16 keys where
        # its keys fit.
        expected.update(tma=True, edge_fence=True, fp8_scores=True, narrow_tail=True)
        if rows == 64:
            # ... and the tiles with keys outside the window copied by TMA
            # too (their V keys there zeroed by the converting warps).
            expected.update(ring=3, raw_slots=3, issue_warp=True, edge_tma=True)
        assert tma == expected
        # ... and with the plan's wide_tiles, at 128 rows, tiles of 128 keys,
        # a ring of 2 and 2 staged, the softmax on float16 pairs with the
        # second multiplying partition at 200 registers (at 64 rows, and
        # without fp8 scores, it changes nothing; a plan stripped of
        # fp8_scores stays valid).
        calls.clear()
        wide = dataclasses.replace(plan, wide_tiles=True)
        no_scores = dataclasses.replace(wide, fp8_scores=False)
        with (
            mock.patch.object(launch, "gluon_supported", lambda device: True),
            mock.patch.object(gluon_ops, "fixed_history_attention_wgmma", entry),
        ):
            for cache, chosen in ((k, wide), (odd, wide), (k, no_scores)):
                kv = PagedKV(cache, v, bt, ctx, qsl, scales)
                launch.launch_kernel(q, kv, 32, 0.1, torch.empty_like(q), chosen)
        wide_tma, wide_no_tma, without_scores = calls
        assert wide_no_tma == no_tma
        assert without_scores == {**no_tma, "tma": True, "edge_fence": True}
        if rows == 128:
            expected.update(
                block_n=128, ring=2, raw_slots=2, packed_softmax=True, mma_regs=200
            )
        assert wide_tma == expected

    def test_launch_logs_once_which_kernel_runs(caplog):
        # One INFO line per kind of launch and process, naming the kernel,
        # its tile rows, the cache and the Gluon kernel's switches: the log
        # of a served model says which kernels its draft ran.
        from vllm_spark2_5_plugin.ops import fixed_history_gluon as gluon_ops
        from vllm_spark2_5_plugin.ops import fixed_history_launch as launch
        from vllm_spark2_5_plugin.ops.fixed_history_checks import PagedKV

        case = Case([40, 7], [4, 3], 32, 32, 4, 128, 16)
        q, k, v, bt, ctx, qsl = _make_inputs(
            case, dtype=torch.bfloat16, device="cpu", seed=0, fp8_scales=(0.5, 2.0)
        )
        kv = PagedKV(k, v, bt, ctx, qsl, (torch.tensor(0.5), torch.tensor(2.0)))
        plan = _plan(
            8, 64, programs_per_sm=1, gluon=True, fp8_f16_dot=True, fp8_scores=True,
            half_rows=True,
        )  # fmt: skip
        split = _plan(4, 64, num_splits=2)  # the Triton kernel's
        launch._announce.cache_clear()
        with (
            mock.patch.object(launch, "gluon_supported", lambda device: True),
            mock.patch.object(
                gluon_ops, "fixed_history_attention_wgmma", lambda *a, **kw: a[8]
            ),
            # Its kernels are not launched (CPU tensors, no interpreter).
            mock.patch.object(launch, "fixed_history_kernel", mock.MagicMock()),
            mock.patch.object(launch, "combine_splits_kernel", mock.MagicMock()),
            caplog.at_level("INFO", logger="vllm.spark2_5_plugin.ops"),
        ):
            for chosen in (plan, plan, split, plan, split):
                launch.launch_kernel(q, kv, 32, 0.1, torch.empty_like(q), chosen)
        lines = [r.getMessage() for r in caplog.records]
        assert lines == [
            "fixed-history attention: Gluon kernel, 64-row tiles, fp8 cache "
            "(edge_fence, edge_tma, fp8_scores, half_rows, issue_warp, "
            "narrow_convert, narrow_tail, tma)",
            "fixed-history attention: Triton kernel, 32-row tiles, fp8 cache "
            "(2 key splits)",
        ], lines

    def test_launch_log_names_the_128_row_fp8_scores_tiles(caplog):
        # The 128-row fp8-scores pipeline's line names its 128-key tiles
        # and packed softmax (wide_tiles; the other pipelines' tiles have 64
        # keys, left unsaid).
        from vllm_spark2_5_plugin.ops import fixed_history_launch as launch

        launch._announce.cache_clear()
        with caplog.at_level("INFO", logger="vllm.spark2_5_plugin.ops"):
            launch._announce(
                "Gluon", 128, True, tma=True, fp8_scores=True, wide_tiles=True
            )
            launch._announce("Gluon", 128, True, tma=True, fp8_scores=True)
        assert [r.getMessage() for r in caplog.records] == [
            "fixed-history attention: Gluon kernel, 128-row tiles, fp8 cache "
            "(edge_fence, fp8_scores, narrow_convert, narrow_tail, "
            "packed_softmax, split_mma, tma, 128-key tiles)",
            "fixed-history attention: Gluon kernel, 128-row tiles, fp8 cache "
            "(edge_fence, fp8_scores, narrow_convert, narrow_tail, split_mma, "
            "tma)",
        ]
        launch._announce.cache_clear()

    def test_launch_log_counts_the_triton_kernels_key_splits(caplog):
        # The Triton kernel's line says how many key splits it runs, in the
        # singular for one.
        from vllm_spark2_5_plugin.ops import fixed_history_launch as launch

        launch._announce.cache_clear()
        with caplog.at_level("INFO", logger="vllm.spark2_5_plugin.ops"):
            launch._announce("Triton", 16, False)
            launch._announce("Triton", 64, True, v_pages=True, splits=4)
        assert [r.getMessage() for r in caplog.records] == [
            "fixed-history attention: Triton kernel, 16-row tiles, 16-bit cache "
            "(1 key split)",
            "fixed-history attention: Triton kernel, 64-row tiles, fp8 cache "
            "(4 key splits, V pages transposed)",
        ]
        launch._announce.cache_clear()

    def test_plan_refuses_gluon_with_splits_or_e4m3_dots():
        with pytest.raises(ValueError, match="gluon needs num_splits == 1"):
            _plan(16, 64, num_splits=2, gluon=True)
        with pytest.raises(ValueError, match="gluon needs num_splits == 1"):
            _plan(16, 64, fp8_e4m3_dot=True, gluon=True)

    @pytest.mark.parametrize(
        "shape,persistent",
        [
            ((64, 8192, 8, 4096, 32, 8, 128), 2),
            ((256, 8192, 8, 4096, 32, 8, 128), 2),
            ((256, 2048, 8, 1024, 32, 8, 128), 2),
            ((32, 32768, 16, 4096, 32, 4, 128), 0),  # 128-row tiles
            ((128, 8192, 8, 4096, 16, 16, 64), 0),  # D = 64
            ((4, 8192, 8, 4096, 32, 8, 128), 0),  # few items: split
            ((64, 8192, 8, 4096, 32, 8, 256), 0),  # D = 256
        ],
    )
    def test_plan_persistent_only_for_its_branch(shape, persistent):
        plan = _plan_for(shape, torch.device("cuda", 0))
        assert plan.programs_per_sm == persistent, plan
        if persistent:
            assert plan.num_splits == 1 and plan.block_n == 128, plan
            assert plan.num_warps == 4 and plan.num_stages == 2, plan
            assert not plan.asm_page_load, plan
        # Never on CPU (interpreter) devices.
        assert _plan_for(shape, torch.device("cpu")).programs_per_sm == 0

    @pytest.mark.parametrize(
        "head_dim,f16_dot", [(32, True), (64, True), (128, False), (256, True)]
    )
    def test_plan_fp8_dot_path_by_head_dim(head_dim, f16_dot):
        # Measured on the H200 (benchmarks/fixed_history_attention_h200.md):
        # float16 dots won at D = 64 and on mma.sync tiles (fewer than 64
        # rows: D = 256 here, 8 queries x 4 heads) and lost on D = 128's
        # widened 64-row tiles; bf16 caches never take that path.
        shape = (64, 8192, 8, 4096, 32, 8, head_dim)
        device = torch.device("cuda", 0)
        fp8 = _plan_for(shape, device, kv_fp8=True)
        assert fp8.fp8_f16_dot is f16_dot, fp8
        bf16 = _plan_for(shape, device)
        assert not bf16.fp8_f16_dot
        # Below D = 128 fp8 tiles take twice the keys (the same bytes) with one
        # stage less; at D = 128 the 32-row tiles are widened to 64 rows
        # (test_plan_for_the_h200_benchmark_shapes); D = 256 is the bf16 plan
        # with float16 dots.
        if head_dim < 128:
            assert fp8 == dataclasses.replace(
                bf16,
                fp8_f16_dot=f16_dot,
                block_n=bf16.block_n * 2,
                num_stages=bf16.num_stages - 1,
            )
        elif head_dim == 128:
            assert fp8.tile_rows(4) == 2 * bf16.tile_rows(4) == 64, fp8
        else:
            assert fp8 == dataclasses.replace(bf16, fp8_f16_dot=True)

    @pytest.mark.parametrize("rows", [16, 64, 128])
    def test_plan_widens_fp8_tiles_of_32_rows_only(rows):
        # Only the measured case: 32-row tiles at D = 128 with an fp8 cache.
        shape = (64, 8192, rows // 4, 4096, 32, 8, 128)
        device = torch.device("cuda", 0)
        fp8 = _plan_for(shape, device, kv_fp8=True)
        assert fp8.tile_rows(4) == _plan_for(shape, device).tile_rows(4) == rows

    def test_plan_for_the_h200_benchmark_shapes():
        # The launches measured in benchmarks/fixed_history_attention_h200.md;
        # changing one of them needs a new measurement.
        persistent_d128 = _plan(8, 128, num_stages=2, programs_per_sm=2)
        plans = {
            (64, 8192, 8, 4096, 32, 8, 128): persistent_d128,
            (256, 8192, 8, 4096, 32, 8, 128): persistent_d128,
            (256, 2048, 8, 1024, 32, 8, 128): persistent_d128,
            (32, 32768, 16, 4096, 32, 4, 128): _plan(
                16, 32, num_splits=2, num_stages=4, asm_page_load=True
            ),
            # 16-row tiles: one warp, one split
            (128, 8192, 8, 4096, 16, 16, 64): _plan(
                8, 32, num_warps=1, num_stages=3, asm_page_load=True
            ),
        }
        for shape, want in plans.items():
            assert _plan_for(shape, torch.device("cuda", 0)) == want, shape
        assert plans[(32, 32768, 16, 4096, 32, 4, 128)].tile_rows(8) == 128
        # fp8 caches (the 2026-12-01 sweeps): the bf16 plans but for the dot
        # path, except 64-row tiles (16 query slots for 8 queries) at the
        # three 32-row D = 128 shapes, and at the D = 64 shape both dots
        # transposed (8-row tiles) with no register cap (the 2026-12-03
        # sweeps: capped at 128 before V's float16 tile went through the
        # kernel's asm copy).
        wide_d128 = _plan(16, 64, num_stages=3, asm_page_load=True, programs_per_sm=2)
        fp8_plans = {
            **{shape: wide_d128 for shape in list(plans)[:3]},
            (32, 32768, 16, 4096, 32, 4, 128): plans[(32, 32768, 16, 4096, 32, 4, 128)],
            (128, 8192, 8, 4096, 16, 16, 64): dataclasses.replace(
                plans[(128, 8192, 8, 4096, 16, 16, 64)],
                fp8_f16_dot=True,
                max_registers=0,
                transposed=True,
            ),
        }
        for shape, want in fp8_plans.items():
            assert _plan_for(shape, torch.device("cuda", 0), kv_fp8=True) == want

    @pytest.mark.parametrize("head_dim", [32, 64, 128, 256])
    def test_limits_accept_supported_head_dims(head_dim):
        assert limits.unsupported_head_dim_reason(head_dim) is None

    @pytest.mark.parametrize("head_dim", [0, 16, 48, 96, 512, -64, True, 64.0])
    def test_limits_refuse_other_head_dims(head_dim):
        reason = limits.unsupported_head_dim_reason(head_dim)
        assert reason is not None and "power of two in 32..256" in reason

    def test_limits_dtypes():
        for name in ("float16", "bfloat16", "torch.bfloat16", str(torch.float16)):
            assert limits.unsupported_dtype_reason(name) is None, name
        for name in ("float32", "torch.float64", "float8_e4m3fn", "fp8", "auto"):
            reason = limits.unsupported_dtype_reason(name)
            assert reason is not None and "float16 or bfloat16" in reason, name
            assert "fp8 e4m3" in reason and "no fp8" not in reason, reason
        assert limits.SUPPORTED_DTYPES == ("float16", "bfloat16")

    @pytest.mark.parametrize(
        "cache,model",
        [
            ("auto", "bfloat16"),
            ("auto", "float16"),
            ("bfloat16", "bfloat16"),
            ("float16", "torch.float16"),
            ("fp8", "bfloat16"),
            ("fp8_e4m3", "float16"),
            ("fp8", "torch.float16"),
        ],
    )
    def test_limits_accept_kv_cache_dtypes(cache, model):
        assert limits.unsupported_kv_cache_dtype_reason(cache, model) is None

    @pytest.mark.parametrize(
        "cache,model",
        [
            ("fp8_e5m2", "bfloat16"),
            ("fp8_inc", "bfloat16"),
            ("fp8_ds_mla", "bfloat16"),
            ("nvfp4", "float16"),
            ("fp8_per_token_head", "bfloat16"),
            ("int8_per_token_head", "bfloat16"),
            ("turboquant_k8v4", "bfloat16"),
            ("float16", "bfloat16"),  # mixed precision
            ("bfloat16", "torch.float16"),
        ],
    )
    def test_limits_refuse_other_kv_cache_dtypes(cache, model):
        reason = limits.unsupported_kv_cache_dtype_reason(cache, model)
        assert reason is not None, cache
        assert "--kv-cache-dtype auto" in reason and "fp8 or fp8_e4m3" in reason
        assert cache not in reason.replace("fp8 or fp8_e4m3", ""), reason

    def test_limits_kv_cache_dtype_names():
        assert limits.SUPPORTED_KV_CACHE_DTYPES == (
            "auto",
            "float16",
            "bfloat16",
            "fp8",
            "fp8_e4m3",
        )
        assert limits.FP8_KV_CACHE_DTYPES == ("fp8", "fp8_e4m3")
        # The torch dtype the kernel reads those caches as.
        assert getattr(torch, limits.FP8_CACHE_DTYPE) is torch.float8_e4m3fn

    def _python_with_src(code: str) -> subprocess.CompletedProcess:
        """Run ``code`` in a fresh interpreter that imports the package from
        ``src``."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_SRC), env.get("PYTHONPATH", "")) if p
        )
        return subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def test_limits_import_neither_torch_nor_triton():
        code = (
            "import sys\n"
            "from vllm_spark2_5_plugin.ops import limits\n"
            "assert limits.unsupported_head_dim_reason(128) is None\n"
            "assert not limits.unsupported_kv_cache_dtype_reason('fp8', 'float16')\n"
            "from vllm_spark2_5_plugin import ops\n"
            "assert ops.unsupported_kv_cache_dtype_reason('fp8_e5m2', 'float16')\n"
            "assert ops.SUPPORTED_KV_CACHE_DTYPES is limits.SUPPORTED_KV_CACHE_DTYPES\n"
            "print(sorted(m for m in ('torch', 'triton', 'vllm') if m in sys.modules))"
        )
        proc = _python_with_src(code)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["[]"], proc.stdout

    def test_reference_runs_without_triton():
        """The draft's CPU path needs only torch: with Triton unimportable the
        reference still runs and matches a hand computation."""
        code = (
            "import sys\n"
            "sys.modules['triton'] = None  # any import of triton now fails\n"
            "import torch\n"
            "from vllm_spark2_5_plugin.ops import fixed_history_attention_reference\n"
            "q = torch.randn(2, 2, 4, dtype=torch.float64)\n"
            "k = torch.randn(1, 4, 1, 4, dtype=torch.float64)\n"
            "v = torch.randn(1, 4, 1, 4, dtype=torch.float64)\n"
            "i32 = dict(dtype=torch.int32)\n"
            "out = fixed_history_attention_reference(q, k, v, torch.zeros(1, 1, **i32),"
            " torch.tensor([2], **i32), torch.tensor([0, 2], **i32), None, 0.5)\n"
            "p = torch.softmax(torch.einsum('bhd,nd->hbn', q, k[0, :, 0]) * 0.5, -1)\n"
            "want = torch.einsum('hbn,nd->bhd', p, v[0, :, 0])\n"
            "assert torch.allclose(out, want), (out, want)\n"
            "e4m3 = torch.float8_e4m3fn\n"
            "k8, v8 = (k / 0.5).to(e4m3), (v / 4).to(e4m3)\n"
            "out = fixed_history_attention_reference(q, k8, v8,"
            " torch.zeros(1, 1, **i32), torch.tensor([2], **i32),"
            " torch.tensor([0, 2], **i32), None, 0.5,"
            " k_scale=0.5, v_scale=torch.tensor(4.0))\n"
            "k = k8[0, :, 0].double() * 0.5\n"
            "p = torch.softmax(torch.einsum('bhd,nd->hbn', q, k) * 0.5, -1)\n"
            "want = torch.einsum('hbn,nd->bhd', p, v8[0, :, 0].double() * 4)\n"
            "assert torch.allclose(out, want), (out, want)\n"
            "print('triton' in sys.modules and sys.modules['triton'] is not None)"
        )
        proc = _python_with_src(code)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["False"], proc.stdout

    def test_ops_exports_every_public_name():
        from vllm_spark2_5_plugin.ops import fixed_history_attention

        assert fixed_history_attention is ops.fixed_history_attention
        assert callable(fixed_history_attention)
        for name in ops.__all__:
            assert getattr(ops, name) is not None, name
        # Every public name of the limits module is exported as itself.
        public = [n for n in vars(limits) if not n.startswith("_")]
        public = [n for n in public if n not in ("annotations",)]
        assert "unsupported_kv_cache_dtype_reason" in public
        for name in public:
            assert name in ops.__all__, name
            assert getattr(ops, name) is getattr(limits, name), name


# ---------------------------------------------------------------------------
# CUDA
# ---------------------------------------------------------------------------

_no_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

_CUDA_CASES = {
    "mixed_L_32_8_128": Case([0, 100, 5000, 9000], [8, 1, 16, 8], 4096, 32, 8, 128, 16),
    "L_below_W_16_16_64": Case([3000, 17, 2048], [8, 8, 8], 1024, 16, 16, 64, 16),
    "d256_gqa4_page32": Case([700, 1500, 0], [4, 8, 2], 512, 8, 2, 256, 32),
    "d32_gqa8_full": Case([1200, 5, 333], [8, 3, 1], None, 16, 2, 32, 16),
    "window_edges_hnd": Case([63, 64, 65, 0], [1, 2, 3, 4], 64, 8, 4, 128, 16, "hnd"),
    "single_long_request": Case([32768], [16], 4096, 32, 4, 128, 16),
    "one_block_much_longer": Case(
        [900, 50, 4000, 7], [1, 2, 1, 40], 2048, 8, 2, 64, 16
    ),
}

if not _IN_CHILD:

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    @pytest.mark.parametrize("name", sorted(_CUDA_CASES))
    @pytest.mark.parametrize("out_given", [True, False])
    def test_cuda_kernel_matches_float64_reference(name, dtype, out_given):
        _run_and_check(
            _CUDA_CASES[name], dtype=dtype, device="cuda", out_given=out_given
        )

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    @pytest.mark.parametrize(
        "head_dim,group",
        [(32, 1), (32, 8), (64, 2), (64, 8), (128, 1), (128, 4), (256, 1), (256, 8)],
    )
    def test_cuda_head_dims_and_gqa_ratios(head_dim, group, dtype):
        case = Case([0, 37, 1000, 2600], [4, 1, 8, 6], 512, 2 * group, 2, head_dim, 16)
        _run_and_check(case, dtype=dtype, device="cuda")

    def _v_pages_case(num_reqs, q_len, window, num_heads, num_kv_heads, seed):
        """``num_reqs`` requests of random context lengths (some 0, some
        below the window), page 16, D = 128."""
        rng = random.Random(seed)
        ctx = [rng.choice([0, rng.randrange(1, 900), rng.randrange(900, 5000)])]
        ctx += [rng.randrange(0, 5000) for _ in range(num_reqs - 1)]
        return Case(ctx, [q_len] * num_reqs, window, num_heads, num_kv_heads, 128, 16)

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    @pytest.mark.parametrize("fp8", [None, (0.02, 3.0)], ids=["16-bit", "fp8"])
    @pytest.mark.parametrize(
        "shape",
        [(64, 8, 1024, 32, 8), (40, 16, 1024, 32, 4), (8, 16, 4096, 32, 4)],
        ids=["64-rows", "128-rows", "few-items"],
    )
    def test_cuda_reads_v_pages_transposed(shape, fp8, dtype):
        # The launch's own plans over V's pages transposed, NaN in every slot
        # outside the windows: on Hopper with an fp8 cache the Gluon kernel
        # at 64 and 128 rows (8-bit P V, its weights' bound), with few items
        # and with 16-bit caches the Triton kernel.
        reqs, q_len, window, heads, kv_heads = shape
        case = _v_pages_case(reqs, q_len, window, heads, kv_heads, _fresh_seed())
        if shape[0] == 40:  # enough items for the 128-row Gluon plan
            case = case._replace(ctx_lens=case.ctx_lens * 4, q_lens=case.q_lens * 4)
        _run_and_check(
            case,
            dtype=dtype,
            device="cuda",
            fp8_scales=fp8,
            poison=True,
            v_pages=True,
            extra_rows=3,
        )

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("num_reqs", [128, 300])
    def test_cuda_many_requests_direct_path(num_reqs):
        # Enough (request, KV head) pairs that no split is needed: covers the
        # single-pass path with random L (some 0, some < W) and B in 1..16.
        rng = random.Random(_fresh_seed())
        ctx = [
            rng.choice([0, rng.randrange(1, 600), rng.randrange(600, 3000)])
            for _ in range(num_reqs)
        ]
        qlen = [rng.randrange(1, 17) for _ in range(num_reqs)]
        _run_and_check(
            Case(ctx, qlen, 512, 32, 8, 128, 16),
            dtype=torch.bfloat16,
            device="cuda",
            extra_rows=5,
        )

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("fp8_scales", [None, (3.0, 0.02)], ids=["bf16", "fp8"])
    @pytest.mark.parametrize("loads", ["pipelined", "unpipelined", "asm_pages"])
    @pytest.mark.parametrize("num_splits", [1, 2, 8])
    def test_cuda_split_path_with_strided_q(num_splits, loads, fp8_scales):
        stages = {"pipelined": 3, "unpipelined": 1, "asm_pages": 4}[loads]
        _run_and_check(
            Case([5000, 0, 130], [8, 8, 8], 4096, 32, 8, 128, 16),
            dtype=torch.bfloat16,
            device="cuda",
            plan=_plan(
                8,
                64,
                num_splits,
                num_stages=stages,
                asm_page_load=loads == "asm_pages",
            ),
            fp8_scales=fp8_scales,
            strided_q=True,
            extra_rows=2,
        )

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize(
        "block_n,num_warps,num_stages", [(32, 4, 4), (64, 8, 3), (128, 4, 3)]
    )
    def test_cuda_block_table_loads_in_ptx(block_n, num_warps, num_stages):
        # asm_page_load: page ids through inline PTX (clamped index), K/V
        # pipelined num_stages - 1 tiles ahead; 128-row tiles (16 queries x 8
        # heads), uneven splits, windows that end mid-tile, L < W and an empty
        # request.
        _run_and_check(
            Case([3000, 0, 777, 9, 40], [16, 7, 16, 0, 20], 1000, 32, 4, 128, 16),
            dtype=torch.bfloat16,
            device="cuda",
            plan=_plan(16, block_n, 4, num_warps, num_stages, asm_page_load=True),
            extra_rows=3,
        )

    @pytest.mark.cuda
    @_no_cuda
    def test_cuda_graph_replay_follows_new_metadata():
        """The launch has no host sync: capture once, then change L and q."""
        seed = _fresh_seed()
        q, k, v, bt, ctx, qsl = _make_inputs(
            Case([3000, 10, 700], [8, 8, 8], 1024, 16, 4, 128, 16),
            dtype=torch.bfloat16,
            device="cuda",
            seed=seed,
        )
        out = torch.full_like(q, float("nan"))
        scale = 128**-0.5
        ops.fixed_history_attention(q, k, v, bt, ctx, qsl, 1024, scale, out=out)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ops.fixed_history_attention(q, k, v, bt, ctx, qsl, 1024, scale, out=out)
        for new_ctx in ([0, 2000, 2900], [1023, 1024, 1025]):
            ctx.copy_(torch.tensor(new_ctx, dtype=torch.int32))
            q.normal_()
            out.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            ref = _reference_f64(q, k, v, bt, ctx, qsl, 1024, scale)
            _assert_close(
                out,
                ref,
                torch.bfloat16,
                q.shape[0],
                f"seed={seed} graph replay L={new_ctx}",
            )

    def _persistent_plan(q, num_reqs, nkv, window, bt):
        """The default plan of the persistent-grid replay cases (32 heads,
        head dim 128, page 16): two programs per SM, no key splits."""
        plan = ops.plan_launch(
            num_tokens=q.shape[0],
            num_reqs=num_reqs,
            num_heads=32,
            num_kv_heads=nkv,
            head_dim=128,
            sliding_window=window,
            max_kv_len=bt.shape[1] * 16,
            device=q.device,
        )
        assert plan.programs_per_sm == 2 and plan.num_splits == 1, plan
        return plan

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("how", ["default", "forced_1_per_sm"])
    def test_cuda_persistent_grid_graph_replay(how):
        """Persistent grid (fewer programs than (request, KV head) items),
        captured in a CUDA graph and replayed with new L, q and B_r."""
        seed = _fresh_seed()
        rng = random.Random(seed)
        num_reqs, nkv, window = 100, 8, 512
        ctx_lens = [
            rng.choice([0, rng.randrange(1, 500), rng.randrange(500, 3000)])
            for _ in range(num_reqs)
        ]
        ctx_lens[0] = 3000  # sets the block-table capacity
        q_lens = [rng.randrange(1, 9) for _ in range(num_reqs)]
        q_lens[1] = 0  # a request with no queries
        q_lens[2] = 12  # more queries than block_q=8: two passes
        q, k, v, bt, ctx, qsl = _make_inputs(
            Case(ctx_lens, q_lens, window, 32, nkv, 128, 16),
            dtype=torch.bfloat16,
            device="cuda",
            seed=seed,
            extra_rows=5,
        )
        scale = 128**-0.5
        num_sms = ops.sm_count(q.device)
        if how == "default":
            plan = _persistent_plan(q, num_reqs, nkv, window, bt)

            def call():
                ops.fixed_history_attention(
                    q, k, v, bt, ctx, qsl, window, scale, out=out
                )

        else:
            plan = _plan(8, 128, num_stages=2, programs_per_sm=1)

            def call():
                ops.fixed_history_attention(
                    q, k, v, bt, ctx, qsl, window, scale, out=out, plan=plan
                )

        assert plan.programs_per_sm * num_sms < num_reqs * nkv
        out = torch.full_like(q, float("nan"))
        call()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()
        rows = sum(q_lens)
        capacity = bt.shape[1] * 16
        for _ in range(2):
            # New L and a new split of the same rows among the requests.
            new_q = q_lens[:]
            rng.shuffle(new_q)
            starts = [0]
            for b in new_q:
                starts.append(starts[-1] + b)
            new_ctx = [rng.randrange(0, capacity - b + 1) for b in new_q]
            ctx.copy_(torch.tensor(new_ctx, dtype=torch.int32))
            qsl.copy_(torch.tensor(starts, dtype=torch.int32))
            q.normal_()
            out.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            ref = _reference_f64(q, k, v, bt, ctx, qsl, window, scale)
            what = f"seed={seed} {how} graph replay"
            _assert_close(out, ref, torch.bfloat16, rows, what)
            assert torch.isnan(out[rows:]).all(), f"{what}: padding rows written"

    # fp8 (e4m3) caches. Scales far from 1 and different for K and V: a
    # forgotten, swapped or inverted scale fails.
    _FP8_SCALES = [(0.02, 3.0), (3.0, 0.02)]

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("scales", _FP8_SCALES)
    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    @pytest.mark.parametrize("name", sorted(_CUDA_CASES))
    def test_cuda_fp8_cache_matches_float64_reference(name, dtype, scales, fp8_f16_dot):
        _run_and_check(_CUDA_CASES[name], dtype=dtype, device="cuda", fp8_scales=scales)

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("scale_form", ["tensor1", "float"])
    @pytest.mark.parametrize(
        "head_dim,group", [(32, 8), (64, 2), (128, 1), (128, 4), (256, 1), (256, 8)]
    )
    def test_cuda_fp8_head_dims_and_gqa_ratios(
        head_dim, group, scale_form, fp8_f16_dot
    ):
        case = Case([0, 37, 1000, 2600], [4, 1, 8, 6], 512, 2 * group, 2, head_dim, 16)
        _run_and_check(
            case,
            dtype=torch.bfloat16,
            device="cuda",
            fp8_scales=(0.05, 0.5),
            scale_form=scale_form,
            out_given=False,
        )

    @pytest.mark.cuda
    @_no_cuda
    def test_cuda_fp8_128_row_tiles(fp8_f16_dot):
        # 16 queries x 8 heads per tile, the plan's PTX page-id branch.
        _run_and_check(
            Case([3000, 0, 777, 9, 40], [16, 7, 16, 0, 20], 1000, 32, 4, 128, 16),
            dtype=torch.float16,
            device="cuda",
            fp8_scales=(0.02, 3.0),
            extra_rows=3,
        )

    # Shapes whose default plan runs the Gluon kernel on Hopper (D = 128,
    # one key split): 32-row tiles widened to 64 (5-8 queries on average
    # per request x 4 heads, or 16 x 2, or 4 x 8) with short windows or
    # enough (request, KV head) items, and 128-row tiles (16 x 8) with items
    # for most SMs.
    _GLUON_CASES = {
        "gqa4": Case(
            [0, 37, 1000, 2600, 5, 4100], [8, 8, 8, 8, 8, 5], 200, 32, 8, 128, 16
        ),
        "gqa2_16q": Case([3000, 17, 2048], [16, 16, 12], 240, 16, 8, 128, 16),
        "gqa8_4q_full_60_reqs": Case(
            [(i * 97) % 1500 for i in range(60)], [4] * 59 + [1], None, 64, 8, 128, 16
        ),
        # 30 queries > the 16 query slots of a tile: two passes; an empty
        # request.
        "passes_hnd": Case(
            [3000, 0, 777, 9, 40, 5], [30, 2, 2, 2, 0, 4], 250, 32, 8, 128, 16, "hnd"
        ),
        # 128 rows: 30 requests x 4 KV heads, 8 query heads each; 20 queries
        # > the 16 query slots: two passes.
        "rows128_gqa8": Case(
            [(i * 211) % 3000 for i in range(30)],
            [16] * 28 + [20, 9],
            300,
            32,
            4,
            128,
            16,
        ),
        # ... over windows of 2100 keys: the fp8 plan's 128-key tiles and
        # packed softmax (wide_tiles); some requests shorter than the
        # window, the items' last tiles 8 to 127 keys (two of at most 16:
        # the narrow tail).
        "rows128_gqa8_wide": Case(
            [(i * 523) % 6000 + 100 for i in range(29)] + [2084],
            [16] * 28 + [20, 16],
            2100,
            32,
            4,
            128,
            16,
        ),
    }

    def _gluon_case(name, kv_fp8, extra_rows):
        """The case and its default plan, checked to run the Gluon kernel
        here (skips where it cannot run)."""
        case = _GLUON_CASES[name]
        device = torch.device("cuda")
        if not ops.gluon_supported(device):
            pytest.skip("the Gluon kernel needs an sm_90 GPU and Triton 3.7")
        lens = zip(case.ctx_lens, case.q_lens, strict=True)
        plan = ops.plan_launch(
            num_tokens=sum(case.q_lens) + extra_rows,
            num_reqs=len(case.q_lens),
            num_heads=case.num_heads,
            num_kv_heads=case.num_kv_heads,
            head_dim=case.head_dim,
            sliding_window=case.window,
            # The block-table capacity of _make_inputs.
            max_kv_len=16 * (1 + max(-(-(c + b) // 16) for c, b in lens)),
            device=device,
            kv_fp8=kv_fp8,
        )
        assert plan.gluon, plan
        # (the fp8 plan of a case over long windows takes 128-key tiles, so
        # that its tests run the packed softmax)
        assert plan.wide_tiles is (kv_fp8 and name.endswith("_wide")), plan
        return case, plan

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    @pytest.mark.parametrize("name", sorted(_GLUON_CASES))
    def test_cuda_fp8_gluon_path(name, dtype, fp8_f16_dot):
        """fp8 caches through the Gluon kernel (its CPU side: the compile
        tests of test_fixed_history_gluon.py and the interpreter's fallback
        test)."""
        case, _ = _gluon_case(name, True, extra_rows=3)
        _run_and_check(
            case, dtype=dtype, device="cuda", fp8_scales=(0.02, 3.0), extra_rows=3
        )

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    @pytest.mark.parametrize("name", sorted(_GLUON_CASES))
    def test_cuda_fp8_scores_through_the_launch(name, dtype):
        """The plan's fp8_scores through the public API: against the
        reference fed q rounded as the kernel rounds it."""
        case, plan = _gluon_case(name, True, extra_rows=3)
        assert plan.fp8_f16_dot, plan
        plan = dataclasses.replace(plan, fp8_scores=True)
        _run_and_check(
            case, dtype=dtype, device="cuda", plan=plan, fp8_scales=(0.02, 3.0),
            extra_rows=3,
        )  # fmt: skip

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("strided", ["q", "out"])
    @pytest.mark.parametrize("kv_fp8", [False, True])
    def test_cuda_strided_head_dims(strided, kv_fp8):
        """q or out with a last stride of 2 through the launch, on a shape
        whose plan runs the Gluon kernel (which then hands the call to the
        Triton kernel), against the float64 reference."""
        name = sorted(_GLUON_CASES)[0]
        case, plan = _gluon_case(name, kv_fp8, extra_rows=0)
        scales = (_f32(0.02), _f32(3.0)) if kv_fp8 else None
        q, k, v, bt, ctx, qsl = _make_inputs(
            case, dtype=torch.bfloat16, device="cuda", seed=0, fp8_scales=scales
        )
        kwargs = _scale_args(scales, "tensor", "cuda") if kv_fp8 else {}
        out = torch.full_like(q, float("nan"))
        if strided == "q":
            q = _every_other_value(q)
        else:
            out = _every_other_value(out)
        assert plan.gluon, plan
        window, scale = case.window, case.head_dim**-0.5
        res = ops.fixed_history_attention(
            q, k, v, bt, ctx, qsl, window, scale, out=out, **kwargs
        )
        assert res is out
        ref = _reference_f64(q, k, v, bt, ctx, qsl, window, scale, scales)
        _assert_close(out, ref, torch.bfloat16, sum(case.q_lens), f"{name} {strided}")

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    @pytest.mark.parametrize("name", sorted(_GLUON_CASES))
    def test_cuda_gluon_path_cache_in_q_dtype(name, dtype):
        """Caches in q's dtype, copied straight into the Gluon kernel's MMA
        buffers, through the launch with the default plan."""
        case, plan = _gluon_case(name, False, extra_rows=3)
        _run_and_check(case, dtype=dtype, device="cuda", plan=plan, extra_rows=3)

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    @pytest.mark.parametrize(
        "case,plan",
        [
            # 128-row tiles (16 queries x 8 heads): fp8 wgmma, 8 warps
            (
                Case([3000, 0, 777, 9, 40], [16, 7, 16, 0, 20], 1000, 32, 4, 128, 16),
                _plan(16, 64, num_warps=8, num_stages=2, fp8_e4m3_dot=True),
            ),
            # 64-row tiles (8 queries x 8 heads), split key range
            (
                Case([5000, 300], [8, 5], None, 16, 2, 128, 16),
                _plan(8, 64, 4, num_warps=4, num_stages=2, fp8_e4m3_dot=True),
            ),
            # 32-row tiles: Triton converts to float16 dots
            (
                Case([700, 64, 0], [8, 3, 4], 256, 32, 8, 128, 16),
                _plan(8, 128, num_stages=2, fp8_e4m3_dot=True),
            ),
            # the same requests in 64-row tiles, half of them masked rows
            (
                Case([700, 64, 0], [8, 3, 4], 256, 32, 8, 128, 16),
                _plan(16, 64, num_warps=8, num_stages=2, fp8_e4m3_dot=True),
            ),
        ],
        ids=["128-rows", "64-rows-splits", "32-rows", "32-rows-in-64-row-tiles"],
    )
    def test_cuda_fp8_e4m3_dot_within_its_rounding(case, plan, dtype):
        _run_and_check(
            case,
            dtype=dtype,
            device="cuda",
            plan=plan,
            fp8_scales=(0.02, 3.0),
            extra_rows=2,
        )

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    @pytest.mark.parametrize("cache", ["q-dtype", "fp8-f16-dots", "fp8-converted"])
    @pytest.mark.parametrize(
        "case,plan",
        [
            # 8 queries x 1 head per KV head at D = 64 (the benchmark's fifth
            # shape's tiles): one warp, page ids in PTX, 2 splits, at most
            # 168 registers; windows ending mid-tile, L < W, 1-8 queries.
            (
                Case([3000, 17, 2048, 0, 130], [8, 8, 3, 1, 8], 1024, 16, 16, 64, 16),
                _plan(
                    8,
                    32,
                    2,
                    num_warps=1,
                    num_stages=3,
                    asm_page_load=True,
                    max_registers=168,
                    transposed=True,
                ),
            ),
            # 64-key tiles, one split, a request needing two query passes
            (
                Case([900, 50, 4000, 7], [1, 2, 1, 12], 2048, 8, 2, 64, 16),
                _plan(2, 64, num_warps=1, num_stages=2, transposed=True),
            ),
            # 16-row tiles (4 queries x 4 heads) at D = 128, 4 warps, a
            # persistent grid, no window
            (
                Case([5000, 300, 0], [4, 3, 4], None, 16, 4, 128, 16),
                _plan(4, 32, programs_per_sm=2, num_stages=3, transposed=True),
            ),
        ],
        ids=["8-rows-d64", "64-keys-passes", "16-rows-d128"],
    )
    def test_cuda_transposed_dots(case, plan, cache, dtype):
        fp8 = cache != "q-dtype"
        plan = dataclasses.replace(plan, fp8_f16_dot=cache == "fp8-f16-dots")
        _run_and_check(
            case,
            dtype=dtype,
            device="cuda",
            plan=plan,
            fp8_scales=(0.02, 3.0) if fp8 else None,
            extra_rows=2,
            poison=True,
        )

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    def test_cuda_fp8_persistent_graph_replay_follows_new_scales(dtype):
        """The default (persistent) plan captured with fp8 caches and device
        scales; replays see new L, q and new scale values written in place."""
        seed = _fresh_seed()
        rng = random.Random(seed)
        num_reqs, nkv, window = 100, 8, 512
        ctx_lens = [rng.randrange(0, 3000) for _ in range(num_reqs)]
        ctx_lens[0] = 3000
        q_lens = [rng.randrange(1, 9) for _ in range(num_reqs)]
        first = (_f32(0.02), _f32(3.0))
        q, k, v, bt, ctx, qsl = _make_inputs(
            Case(ctx_lens, q_lens, window, 32, nkv, 128, 16),
            dtype=dtype,
            device="cuda",
            seed=seed,
            extra_rows=5,
            fp8_scales=first,
        )
        scales = _scale_args(first, "tensor", "cuda")
        _persistent_plan(q, num_reqs, nkv, window, bt)  # what the call below runs
        scale = 128**-0.5
        out = torch.full_like(q, float("nan"))

        def call():
            ops.fixed_history_attention(
                q, k, v, bt, ctx, qsl, window, scale, out=out, **scales
            )

        call()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()
        rows = sum(q_lens)
        for new_scales in (first, (_f32(0.5), _f32(0.125))):
            scales["k_scale"].fill_(new_scales[0])
            scales["v_scale"].fill_(new_scales[1])
            ctx.copy_(torch.tensor([rng.randrange(0, 3001) for _ in q_lens]))
            q.normal_()
            out.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            # (The Gluon kernel's fp8 scores round q to e4m3 row by row.)
            paged = (k, v, bt, ctx, qsl)
            rounds = _rounds_q(None, q, paged, scales, window)
            q_ref = _e4m3_pow2_rows(q) if rounds else q
            ref = _reference_f64(q_ref, k, v, bt, ctx, qsl, window, scale, new_scales)
            what = f"seed={seed} fp8 graph replay scales={new_scales} rounds={rounds}"
            _assert_close(out, ref, dtype, rows, what)
            assert torch.isnan(out[rows:]).all(), f"{what}: padding rows written"
