# SPDX-License-Identifier: Apache-2.0
"""Tests for the KV-cache writer (``ops.v_pages`` and ``ops.kv_cache_write``).

Three groups:

* CPU, plain: the PyTorch reference against an expectation the test builds
  from the layout formulas itself, both layouts, float16/bfloat16 and fp8
  caches; ``gather_v_rows``; the key permutation; every refusal.
* CPU, Triton interpreter: ``TRITON_INTERPRET=1`` must be set before Triton
  decorates the kernel, so ``test_triton_interpreter_suite`` runs this file
  again in a child process with it (and ``_SPARK_KV_WRITE_CHILD=1``), where
  only the ``test_interp_*`` tests exist: the kernel equals the reference byte
  for byte (float16 keys: bfloat16 is broken under the interpreter).
* CUDA (skipped without a GPU): byte equality at realistic sizes, bfloat16
  and fp8 caches, and a CUDA-graph replay with new inputs.

Caches are built as vLLM does, ``kv.transpose(1, 2).split(D, -1)`` of a
``[num_blocks, nKV, page, 2*D]`` tensor, filled with random bytes, and
compared as bytes in full, so a write to a wrong place fails.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from triton_interpreter import e4m3_rounding_shim, run_interpreter_suite

_SRC = Path(__file__).resolve().parents[1] / "src"
try:
    from vllm_spark2_5_plugin.ops import kv_cache_write, v_pages
except ImportError:  # running from a plain checkout without an install
    sys.path.insert(0, str(_SRC))
    from vllm_spark2_5_plugin.ops import kv_cache_write, v_pages

write_kv_cache = kv_cache_write.write_kv_cache

_CHILD_ENV = "_SPARK_KV_WRITE_CHILD"
_IN_CHILD = os.environ.get(_CHILD_ENV) == "1"
FP8 = torch.float8_e4m3fn
# (page size, nKV, D) per layout; V pages need page 16 and D 128.
_SHAPES = {"rows": (8, 3, 64), "v_pages": (16, 2, 128)}
# Cache dtype and the scales' form: fp8 scales far from 1 and different.
_CACHES = {
    "f16": (torch.float16, None),
    "bf16": (torch.bfloat16, None),
    "fp8": (FP8, "tensor"),
    "fp8-float": (FP8, "float"),
}


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _caches(seed, num_blocks, page, nkv, d, dtype, device="cpu"):
    """vLLM's K/V views of a ``[num_blocks, nKV, page, 2*D]`` cache of random
    bytes (the same bytes for the same seed)."""
    gen = torch.Generator().manual_seed(seed)
    shape = (num_blocks, nkv, page, 2 * d * dtype.itemsize)
    raw = torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen)
    return raw.to(device).view(dtype).transpose(1, 2).split(d, -1)


def _inputs(seed, num_tokens, extra, num_blocks, page, nkv, d, dtype, flat, device):
    """key/value with ``extra`` unused rows (2-D column slices of a fused
    projection when ``flat``, else 3-D), scattered distinct slots, some
    negative, and one key row far beyond fp8's range."""
    gen = torch.Generator().manual_seed(seed)
    rows = num_tokens + extra
    fused = torch.randn(rows, 3 * nkv * d, generator=gen) * 4
    key, value = fused[:, nkv * d : 2 * nkv * d], fused[:, 2 * nkv * d :]
    key[0, :8] = torch.tensor([1e3, -1e3, 600, -500, 0, 1e-3, 2.0, -0.0])
    if not flat:
        key, value = (t.reshape(rows, nkv, d).contiguous() for t in (key, value))
    slots = torch.randperm(num_blocks * page, generator=gen)[:num_tokens]
    slots[3::5] = -1
    slots[4::7] = -5
    return key.to(device, dtype), value.to(device, dtype), slots.to(device)


def _scales(form, device):
    if form is None:
        return {}
    if form == "float":
        return {"k_scale": 0.05, "v_scale": 3.0}
    return {
        "k_scale": torch.tensor([0.5], device=device),
        "v_scale": torch.tensor(3.0, device=device),
    }


def _stored(x, dtype, scale):
    """What the cache holds for ``x``: cast, or ``x / scale`` saturated and
    rounded to e4m3."""
    if scale is None:
        return x.to(dtype)
    scale = torch.as_tensor(scale, dtype=torch.float32, device=x.device)
    return (x.float() / scale).clamp(-448, 448).to(dtype)


def _expected(key, value, k_cache, v_cache, slot_mapping, scales, layout):
    """The caches after the write, from the layout formulas (K at ``[b, k, h,
    d]``; V at ``[b, k, h, d]`` or ``[b, d // 8, h, (d % 8) * 16 + pos(k)]``)."""
    exp_k, exp_v = k_cache.clone(), v_cache.clone()
    page, nkv, d = k_cache.shape[1:]
    n = slot_mapping.shape[0]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    blk, k = (slots // page)[:, None, None], (slots % page)[:, None, None]
    h = torch.arange(nkv, device=k.device)[None, :, None]
    dim = torch.arange(d, device=k.device)[None, None, :]
    kk = key[:n].reshape(n, nkv, d)[keep]
    vv = value[:n].reshape(n, nkv, d)[keep]
    exp_k[blk, k, h, dim] = _stored(kk, k_cache.dtype, scales.get("k_scale"))
    vv = _stored(vv, v_cache.dtype, scales.get("v_scale"))
    if layout == "v_pages":
        pos = 4 * ((k % 8) // 2) + 2 * (k // 8) + k % 2
        exp_v[blk, dim // 8, h, (dim % 8) * 16 + pos] = vv
    else:
        exp_v[blk, k, h, dim] = vv
    return exp_k, exp_v


def _same_bytes(a, b):
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _case(
    layout,
    cache,
    *,
    seed,
    num_tokens,
    extra,
    num_blocks,
    key_dtype,
    flat,
    nkv=None,
    device="cpu",
):
    """Inputs and two identical copies of the caches for one write."""
    page, default_nkv, d = _SHAPES[layout]
    nkv = nkv or default_nkv
    dtype, form = _CACHES[cache]
    args = (seed, num_tokens, extra, num_blocks, page, nkv, d, key_dtype, flat, device)
    key, value, slots = _inputs(*args)
    first = _caches(seed + 1, num_blocks, page, nkv, d, dtype, device)
    second = _caches(seed + 1, num_blocks, page, nkv, d, dtype, device)
    kwargs = {**_scales(form, device), "v_pages_transposed": layout == "v_pages"}
    return key, value, slots, first, second, kwargs


def _kernel_equals_reference(layout, cache, **case):
    key, value, slots, (k1, v1), (k2, v2), kwargs = _case(layout, cache, **case)
    write_kv_cache(key, value, k1, v1, slots, **kwargs)
    assert not _same_bytes(k1, k2) and not _same_bytes(v1, v2)  # it wrote
    v_pages.write_kv_cache_reference(key, value, k2, v2, slots, **kwargs)
    assert _same_bytes(k1, k2) and _same_bytes(v1, v2)


# ---------------------------------------------------------------------------
# CPU: Triton interpreter (child process)
# ---------------------------------------------------------------------------


if _IN_CHILD:
    e4m3_rounding_shim()
    _INTERP = dict(num_tokens=23, extra=3, num_blocks=5, key_dtype=torch.float16)

    @pytest.mark.parametrize("flat", [False, True], ids=["3d", "2d"])
    @pytest.mark.parametrize("cache", ["f16", "fp8", "fp8-float"])
    @pytest.mark.parametrize("layout", ["rows", "v_pages"])
    def test_interp_kernel_matches_reference(layout, cache, flat):
        _kernel_equals_reference(layout, cache, seed=1, flat=flat, **_INTERP)

    @pytest.mark.parametrize("layout", ["rows", "v_pages"])
    def test_interp_heads_over_several_programs(layout):
        # 20 heads: at D=128 (v_pages) 16 per program, the second tile part
        # masked; at D=64 (rows) one tile of 32 heads.
        case = {**_INTERP, "num_tokens": 6, "num_blocks": 2}
        _kernel_equals_reference(layout, "fp8", seed=2, flat=True, nkv=20, **case)

    @pytest.mark.parametrize("layout", ["rows", "v_pages"])
    def test_interp_scale_tensors_are_read_at_each_launch(layout):
        key, value, slots, (k1, v1), (k2, v2), kw = _case(
            layout, "fp8", seed=3, flat=False, **_INTERP
        )
        write_kv_cache(key, value, k1, v1, slots, **kw)
        kw["k_scale"].fill_(0.25)
        kw["v_scale"].fill_(0.125)
        write_kv_cache(key, value, k2, v2, slots, **kw)
        assert not _same_bytes(k1, k2) and not _same_bytes(v1, v2)
        v_pages.write_kv_cache_reference(key, value, k1, v1, slots, **kw)
        assert _same_bytes(k1, k2) and _same_bytes(v1, v2)

    @pytest.mark.parametrize("scale", ["float", "tensor"])
    def test_interp_nan_keys_stay_nan(scale):
        # NaN in the keys and values is stored as e4m3 NaN (0x7F), as the
        # reference's torch.clamp keeps it; tl.clamp's default turned it into
        # -448 (0xFE), a finite value hiding the fault upstream. +-inf still
        # saturates to +-448.
        row = [float("nan"), float("inf"), -float("inf"), 500.0, -1.0]
        key = torch.zeros(3, 2, 32, dtype=torch.float16)
        key[:, :, :5] = torch.tensor(row, dtype=torch.float16)
        value = key.flip(1)
        slots = torch.tensor([5, 0, 9])
        scales = {"k_scale": 1.0, "v_scale": 2.0}
        if scale == "tensor":
            scales = {n: torch.tensor(x) for n, x in scales.items()}
        k1, v1 = _caches(8, 3, 4, 2, 32, FP8)
        k2, v2 = _caches(8, 3, 4, 2, 32, FP8)
        write_kv_cache(key, value, k1, v1, slots, **scales)
        v_pages.write_kv_cache_reference(key, value, k2, v2, slots, **scales)
        assert k1[1, 1, 0, :5].view(torch.uint8).tolist() == [
            0x7F,
            0x7E,
            0xFE,
            0x7E,
            0xB8,
        ]
        assert _same_bytes(k1, k2) and _same_bytes(v1, v2)

    @pytest.mark.parametrize("num_tokens", [0, 6])
    def test_interp_padding_slots_write_nothing(num_tokens):
        key, value, slots, (k1, v1), (k2, v2), kw = _case(
            "v_pages", "fp8", seed=4, flat=False, **{**_INTERP, "num_tokens": 6}
        )
        slots = torch.full((num_tokens,), -1, dtype=torch.int64)
        write_kv_cache(key, value, k1, v1, slots, **kw)
        assert _same_bytes(k1, k2) and _same_bytes(v1, v2)

else:

    def test_triton_interpreter_suite():
        """Runs the test_interp_* tests in a TRITON_INTERPRET=1 child process."""
        run_interpreter_suite(__file__, _CHILD_ENV, timeout=300)


# ---------------------------------------------------------------------------
# CPU: the reference, the layout helpers, refusals
# ---------------------------------------------------------------------------

if not _IN_CHILD:

    @pytest.mark.parametrize("flat", [False, True], ids=["3d", "2d"])
    @pytest.mark.parametrize("cache", sorted(_CACHES))
    @pytest.mark.parametrize("layout", ["rows", "v_pages"])
    def test_reference_writes_the_layout(layout, cache, flat):
        key_dtype = torch.bfloat16 if cache == "bf16" else torch.float16
        key, value, slots, (k, v), _, kw = _case(
            layout,
            cache,
            seed=5,
            num_tokens=40,
            extra=4,
            num_blocks=7,
            key_dtype=key_dtype,
            flat=flat,
        )
        exp_k, exp_v = _expected(key, value, k, v, slots, kw, layout)
        v_pages.write_kv_cache_reference(key, value, k, v, slots, **kw)
        assert _same_bytes(k, exp_k) and _same_bytes(v, exp_v)
        if cache.startswith("fp8"):
            # key[0] (slot >= 0) starts 1e3, -1e3, 600, -500: saturated to +-448.
            blk, pos = divmod(int(slots[0]), k.shape[1])
            head0 = k[blk, pos, 0, :4].view(torch.uint8).tolist()
            assert head0 == [0x7E, 0xFE, 0x7E, 0xFE]

    def test_reference_casts_keys_to_the_cache_dtype():
        key, value, slots, (k, v), _, kw = _case(
            "rows",
            "bf16",
            seed=6,
            num_tokens=9,
            extra=0,
            num_blocks=3,
            key_dtype=torch.float32,
            flat=False,
        )
        exp_k, exp_v = _expected(key, value, k, v, slots, kw, "rows")
        v_pages.write_kv_cache_reference(key, value, k, v, slots, **kw)
        assert _same_bytes(k, exp_k) and _same_bytes(v, exp_v)

    @pytest.mark.parametrize("cache", ["f16", "fp8"])
    def test_gather_v_rows_reads_back_what_was_written(cache):
        key, value, slots, (k, v), _, kw = _case(
            "v_pages",
            cache,
            seed=7,
            num_tokens=50,
            extra=2,
            num_blocks=6,
            key_dtype=torch.float16,
            flat=True,
        )
        v_pages.write_kv_cache_reference(key, value, k, v, slots, **kw)
        keep = slots >= 0
        rows = v_pages.gather_v_rows(v, slots[keep] // 16, slots[keep] % 16)
        want = _stored(value[:50][keep].reshape(-1, 2, 128), v.dtype, kw.get("v_scale"))
        assert rows.dtype == v.dtype and rows.shape == want.shape
        assert _same_bytes(rows, want)

    def test_v_page_permutation_helpers_are_inverse():
        pos, keys = v_pages.v_page_positions(), v_pages.v_page_keys()
        ident = torch.arange(16)
        assert sorted(pos.tolist()) == list(range(16)) != pos.tolist()
        assert torch.equal(pos[keys], ident) and torch.equal(keys[pos], ident)
        assert pos.tolist()[:4] == [0, 1, 4, 5] and pos[8] == 2 and keys[2] == 8
        assert pos.dtype == keys.dtype == torch.int64

    @pytest.mark.parametrize("page,d", [(32, 128), (16, 64), (8, 256)])
    def test_check_v_pages_names_the_unsupported_shape(page, d):
        k, v = _caches(0, 2, page, 1, d, torch.float16)
        with pytest.raises(ValueError, match=f"page size {page} and head dim {d}"):
            v_pages.check_v_pages(v)
        with pytest.raises(ValueError, match=f"page size {page} and head dim {d}"):
            v_pages.gather_v_rows(v, torch.zeros(1, dtype=torch.long), torch.ones(1))
        key = torch.zeros(1, 1, d, dtype=torch.float16)
        args = (key, key, k, v, torch.zeros(1, dtype=torch.long))
        for write in (v_pages.write_kv_cache_reference, write_kv_cache):
            with pytest.raises(ValueError, match=f"page size {page}"):
                write(*args, v_pages_transposed=True)
        v_pages.write_kv_cache_reference(*args)  # the rows layout takes any shape
        assert _same_bytes(k[0, 0], key[0])

    def _bad(**change):
        """Valid fp16 arguments with ``change`` applied (a callable gets the
        valid value)."""
        k, v = _caches(0, 3, 16, 2, 128, torch.float16)
        args = dict(
            key=torch.zeros(5, 2, 128, dtype=torch.float16),
            value=torch.zeros(5, 256, dtype=torch.float16),
            k_cache=k,
            v_cache=v,
            slot_mapping=torch.arange(4),
        )
        for name, new in change.items():
            args[name] = new(args.get(name)) if callable(new) else new
        return args

    def _as_fp8(cache):
        return cache.view(torch.uint8).view(FP8)[..., :128]

    def _fp8(**change):
        """Valid fp8 arguments (scales 1.0) with ``change`` applied."""
        valid = dict(k_cache=_as_fp8, v_cache=_as_fp8, k_scale=1.0, v_scale=1.0)
        return _bad(**{**valid, **change})

    _REFUSALS = {
        "key_not_tensor": (_bad(key=[0.0]), TypeError, "key must be a torch.Tensor"),
        "slots_int32": (
            _bad(slot_mapping=lambda s: s.int()),
            TypeError,
            "slot_mapping must be a 1-D int64",
        ),
        "slots_2d": (
            _bad(slot_mapping=lambda s: s[None]),
            TypeError,
            "slot_mapping must be a 1-D",
        ),
        # The same slots two elements apart: the kernel, loading slot t at
        # slot_mapping_ptr + t, wrote rows into other tokens' slots.
        "slots_strided": (
            _bad(slot_mapping=lambda s: torch.stack([s, s], 1)[:, 0]),
            ValueError,
            r"slot_mapping must be contiguous \(stride 1\), got stride 2",
        ),
        "key_too_few_rows": (_bad(key=lambda t: t[:3]), ValueError, "key must be"),
        "value_bad_shape": (_bad(value=lambda t: t[:, :200]), ValueError, "value must"),
        "value_dtype": (_bad(value=lambda t: t.bfloat16()), TypeError, "value must"),
        "key_int": (_bad(key=lambda t: t.int()), TypeError, "key must have a floating"),
        "v_cache_shape": (_bad(v_cache=lambda c: c[:2]), ValueError, "v_cache"),
        "k_cache_3d": (_bad(k_cache=lambda c: c[0]), ValueError, "k_cache and v_cache"),
        "uint8_caches": (
            _bad(
                k_cache=lambda c: c.view(torch.uint8),
                v_cache=lambda c: c.view(torch.uint8),
            ),
            TypeError,
            r"k_cache.view\(torch.float8_e4m3fn\)",
        ),
        "e5m2_caches": (
            _fp8(k_cache=lambda c: _as_fp8(c).view(torch.float8_e5m2)),
            TypeError,
            "k_cache has dtype torch.float8_e5m2",
        ),
        "fp8_k_only": (
            _bad(k_cache=_as_fp8, k_scale=1.0, v_scale=1.0),
            TypeError,
            "fp8 cache needs both",
        ),
        "fp8_without_k_scale": (_fp8(k_scale=None), TypeError, "k_scale is required"),
        "v_scale_float64": (
            _fp8(v_scale=torch.tensor(1.0, dtype=torch.float64)),
            TypeError,
            "v_scale must be a float32 tensor",
        ),
        "v_scale_two": (_fp8(v_scale=torch.ones(2)), ValueError, "v_scale must hold"),
        "k_scale_negative": (_fp8(k_scale=-1.0), ValueError, "k_scale must be finite"),
        # The attention kernels refuse it too: one check for both.
        "k_scale_below_float32": (
            _fp8(k_scale=1e-50),
            ValueError,
            "k_scale must be finite and positive in float32 .* holds as 0.0",
        ),
        "k_scale_str": (_fp8(k_scale="1"), TypeError, "k_scale must be a float32"),
        "scale_without_fp8": (_bad(v_scale=1.0), TypeError, "v_scale is only for"),
        "slots_other_device": (
            _bad(slot_mapping=lambda s: s.to("meta")),
            ValueError,
            "slot_mapping is on meta",
        ),
    }

    @pytest.mark.parametrize("name", sorted(_REFUSALS))
    @pytest.mark.parametrize("kernel", [False, True], ids=["reference", "kernel"])
    def test_refusals_name_the_argument(name, kernel):
        args, exc, match = _REFUSALS[name]
        write = write_kv_cache if kernel else v_pages.write_kv_cache_reference
        before = args["k_cache"].clone()
        with pytest.raises(exc, match=match):
            write(**args)
        assert _same_bytes(args["k_cache"], before)

    def test_kernel_only_refusals():
        with pytest.raises(TypeError, match="differs from key dtype torch.float32"):
            write_kv_cache(**_bad(key=lambda t: t.float(), value=lambda t: t.float()))
        strided = torch.zeros(3, 16, 2, 256, dtype=torch.float16)[..., ::2]
        with pytest.raises(ValueError, match="k_cache must have unit stride"):
            write_kv_cache(**_bad(k_cache=strided))
        if not kv_cache_write.interpreting():
            with pytest.raises(
                ValueError, match="needs CUDA tensors.*TRITON_INTERPRET"
            ):
                write_kv_cache(**_bad())


# ---------------------------------------------------------------------------
# CUDA
# ---------------------------------------------------------------------------

_no_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
# 4096 tokens (+3 unused rows) over 1000 pages of 16, 8 KV heads, D 128.
_CUDA = dict(num_tokens=4096, extra=3, num_blocks=1000, key_dtype=torch.bfloat16)

if not _IN_CHILD:

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("flat", [False, True], ids=["3d", "2d"])
    @pytest.mark.parametrize("cache", ["bf16", "fp8", "fp8-float"])
    @pytest.mark.parametrize("layout", ["rows", "v_pages"])
    def test_cuda_kernel_matches_reference(layout, cache, flat):
        _kernel_equals_reference(
            layout, cache, seed=8, flat=flat, nkv=8, device="cuda", **_CUDA
        )

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("cache", ["bf16", "fp8"])
    @pytest.mark.parametrize("layout", ["rows", "v_pages"])
    def test_cuda_graph_replay_writes_like_the_reference(layout, cache):
        case = dict(flat=True, nkv=8, device="cuda", **_CUDA)
        key, value, slots, (k, v), _, kw = _case(layout, cache, seed=9, **case)
        write_kv_cache(key, value, k, v, slots, **kw)  # compiles outside capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            write_kv_cache(key, value, k, v, slots, **kw)
        # New inputs, scales and cache contents in the same tensors.
        key2, value2, slots2, (k0, v0), (k_ref, v_ref), kw2 = _case(
            layout, cache, seed=10, **case
        )
        for dst, src in (
            (key, key2),
            (value, value2),
            (slots, slots2),
            (k, k0),
            (v, v0),
        ):
            dst.copy_(src)
        if cache == "fp8":
            kw["k_scale"].fill_(0.125)
            kw["v_scale"].fill_(7.0)
            kw2 = {**kw2, "k_scale": kw["k_scale"], "v_scale": kw["v_scale"]}
        graph.replay()
        torch.cuda.synchronize()
        v_pages.write_kv_cache_reference(key2, value2, k_ref, v_ref, slots2, **kw2)
        assert _same_bytes(k, k_ref) and _same_bytes(v, v_ref)
        assert not _same_bytes(k, k0)
