"""Tests for the fixed-history draft attention kernel (spark_triton_attention).

Three groups:

* CPU, Triton interpreter: ``TRITON_INTERPRET=1`` must be set before Triton
  decorates the kernel, i.e. before the module is first imported, and other test
  files may already have imported it without the interpreter. So
  ``test_triton_interpreter_suite`` runs this same file again in a child
  process with ``TRITON_INTERPRET=1`` (and ``_SPARK_FH_ATTN_CHILD=1``); in that
  child only the ``test_interp_*`` tests exist. float16 only: bfloat16 is
  broken under the interpreter.
* CPU, plain: the PyTorch reference against an independent dense-mask
  computation, and every refusal of the launch wrapper.
* CUDA (skipped without a GPU): realistic shapes, fp16 and bf16, head dims
  32..256, GQA 1..8, CUDA-graph replay.

Every kernel check compares with the reference evaluated in float64 on fresh
random inputs, poisons ``out`` with NaN first, and builds K/V as vLLM 0.32.0
does: ``kv_cache.transpose(1, 2).split(D, -1)`` of a per-layer
``[num_blocks, nKV, block_size, 2*D]`` view, with scattered block tables.
Only torch, triton, pytest and the standard library are imported.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

_SRC = Path(__file__).resolve().parents[1] / "src"
try:
    from vllm_spark2_5_plugin.ops import fixed_history_attention as sta
except ImportError:  # running from a plain checkout without an install
    sys.path.insert(0, str(_SRC))
    from vllm_spark2_5_plugin.ops import fixed_history_attention as sta

_CHILD_ENV = "_SPARK_FH_ATTN_CHILD"
_IN_CHILD = os.environ.get(_CHILD_ENV) == "1"

# ‖out − ref‖ / ‖ref‖ and max |out − ref| against the float64 reference.
_REL_TOL = {torch.float16: 3e-3, torch.bfloat16: 2e-2}
_ABS_TOL = {torch.float16: 1e-2, torch.bfloat16: 6e-2}


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _fresh_seed() -> int:
    return random.SystemRandom().randrange(2**31)


def _make_inputs(
    ctx_lens,
    q_lens,
    *,
    num_heads,
    num_kv_heads,
    head_dim,
    page_size,
    dtype,
    device,
    layout="nhd",
    seed,
    q_gain=1.0,
    strided_q=False,
    extra_rows=0,
):
    """Random inputs laid out like vLLM 0.32.0's paged cache.

    layout "nhd": vLLM's default KV-cache layout (LBNHC), physically
    [num_blocks, block_size, nKV, 2D]; "hnd": physically [num_blocks, nKV,
    block_size, 2D]. Either way the per-layer view is [num_blocks, nKV,
    block_size, 2D] and K/V come from .transpose(1, 2).split(D, -1).
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    num_reqs = len(ctx_lens)
    spans = [c + b for c, b in zip(ctx_lens, q_lens, strict=True)]
    max_blocks = max(-(-n // page_size) for n in spans) + 1
    num_blocks = num_reqs * max_blocks + 5
    if layout == "nhd":
        raw = torch.randn(
            num_blocks, page_size, num_kv_heads, 2 * head_dim, generator=gen
        )
        kv_cache = raw.to(dtype).to(device).permute(0, 2, 1, 3)
    else:
        raw = torch.randn(
            num_blocks, num_kv_heads, page_size, 2 * head_dim, generator=gen
        )
        kv_cache = raw.to(dtype).to(device)
    assert kv_cache.shape == (num_blocks, num_kv_heads, page_size, 2 * head_dim)
    k_cache, v_cache = kv_cache.transpose(1, 2).split(head_dim, -1)
    assert not k_cache.is_contiguous()

    perm = torch.randperm(num_blocks, generator=gen)[: num_reqs * max_blocks]
    block_table = perm.view(num_reqs, max_blocks).to(torch.int32).to(device)
    context_lens = torch.tensor(ctx_lens, dtype=torch.int32, device=device)
    starts = [0]
    for b in q_lens:
        starts.append(starts[-1] + b)
    query_start_loc = torch.tensor(starts, dtype=torch.int32, device=device)
    num_tokens = starts[-1] + extra_rows
    q = torch.randn(num_tokens, num_heads, head_dim, generator=gen) * q_gain
    if strided_q:
        # q as a slice of a fused qkv projection output, like in a model.
        qkv = torch.randn(
            num_tokens, (num_heads + 2 * num_kv_heads) * head_dim, generator=gen
        )
        qkv[:, : num_heads * head_dim] = q.view(num_tokens, -1)
        q = qkv.to(dtype).to(device)[:, : num_heads * head_dim]
        q = q.view(num_tokens, num_heads, head_dim)
        assert not q.is_contiguous()
    else:
        q = q.to(dtype).to(device)
    return q, k_cache, v_cache, block_table, context_lens, query_start_loc


def _reference_f64(q, k_cache, v_cache, block_table, ctx, qsl, window, scale):
    return sta.fixed_history_attention_reference(
        q.double(),
        k_cache.double(),
        v_cache.double(),
        block_table,
        ctx,
        qsl,
        window,
        scale,
    )


def _assert_close(out, ref, dtype, rows, what):
    got = out[:rows].double()
    want = ref[:rows]
    assert torch.isfinite(got).all(), f"{what}: NaN/inf in output (unwritten rows?)"
    rel = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
    err = (got - want).abs().max().item()
    assert rel < _REL_TOL[dtype], f"{what}: relative error {rel:.3e}"
    assert err < _ABS_TOL[dtype], f"{what}: max abs error {err:.3e}"


def _run_and_check(
    ctx_lens,
    q_lens,
    window,
    *,
    num_heads,
    num_kv_heads,
    head_dim,
    page_size,
    dtype,
    device,
    layout="nhd",
    out_given=True,
    q_gain=1.0,
    strided_q=False,
    extra_rows=0,
    config=None,
):
    seed = _fresh_seed()
    what = (
        f"seed={seed} L={ctx_lens} B={q_lens} W={window} "
        f"nH/nKV/D={num_heads}/{num_kv_heads}/{head_dim} page={page_size} "
        f"{dtype} {layout} out_given={out_given} config={config}"
    )
    q, k, v, bt, ctx, qsl = _make_inputs(
        ctx_lens,
        q_lens,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        page_size=page_size,
        dtype=dtype,
        device=device,
        layout=layout,
        seed=seed,
        q_gain=q_gain,
        strided_q=strided_q,
        extra_rows=extra_rows,
    )
    scale = head_dim**-0.5
    ref = _reference_f64(q, k, v, bt, ctx, qsl, window, scale)
    if config is not None or out_given or extra_rows:
        out = torch.full_like(q, float("nan"))
        if config is not None:
            res = sta._launch(q, k, v, bt, ctx, qsl, window, scale, out, **config)
        else:
            res = sta.fixed_history_attention(
                q, k, v, bt, ctx, qsl, window, scale, out=out
            )
        assert res is out, what
    else:
        # No out=: the result is freshly allocated. Free a NaN-filled block of
        # the same size first so that (on CUDA, through the caching allocator)
        # the kernel most likely writes into poisoned memory.
        poison = torch.full_like(q, float("nan"))
        del poison
        out = sta.fixed_history_attention(q, k, v, bt, ctx, qsl, window, scale)
        assert out.shape == q.shape and out.dtype == q.dtype, what
    rows = sum(q_lens)
    _assert_close(out, ref, dtype, rows, what)
    if extra_rows:
        assert torch.isnan(out[rows:]).all(), f"{what}: padding rows were written"


# ---------------------------------------------------------------------------
# CPU: Triton interpreter (child process)
# ---------------------------------------------------------------------------

# (ctx_lens, q_lens, window, nH, nKV, D, page, layout)
_INTERP_CASES = {
    "L0": ([0], [4], 8, 4, 4, 32, 4, "nhd"),
    "L_below_W_gqa2": ([3, 5], [2, 1], 8, 4, 2, 32, 4, "nhd"),
    "L_above_W_gqa4_hnd": ([20, 9, 33], [3, 1, 6], 8, 8, 2, 64, 8, "hnd"),
    "full_attention_gqa8": ([0, 13], [5, 2], None, 8, 1, 32, 4, "nhd"),
    "window_1": ([7, 0], [3, 2], 1, 2, 1, 32, 4, "nhd"),
    "one_long_block": ([2, 9, 4, 30], [1, 1, 1, 12], 16, 4, 2, 32, 8, "nhd"),
    "empty_request": ([5, 6, 7], [2, 0, 3], 4, 4, 2, 32, 4, "hnd"),
    "window_equals_L": ([16, 15, 17], [2, 2, 2], 16, 4, 1, 32, 16, "nhd"),
    "d128_gqa1": ([11, 40], [2, 3], 24, 2, 2, 128, 8, "nhd"),
    "full_attention_long": ([700, 650], [3, 2], None, 4, 2, 32, 16, "nhd"),
}


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

    @pytest.mark.parametrize("name", sorted(_INTERP_CASES))
    @pytest.mark.parametrize("out_given", [True, False])
    def test_interp_kernel_matches_float64_reference(name, out_given):
        ctx, qlen, w, nh, nkv, d, page, layout = _INTERP_CASES[name]
        _run_and_check(
            ctx,
            qlen,
            w,
            num_heads=nh,
            num_kv_heads=nkv,
            head_dim=d,
            page_size=page,
            dtype=torch.float16,
            device="cpu",
            layout=layout,
            out_given=out_given,
        )

    @pytest.mark.parametrize("manual_prefetch", [False, True])
    @pytest.mark.parametrize("num_splits", [1, 2, 4])
    def test_interp_split_path_matches_reference(num_splits, manual_prefetch):
        # Small tiles so the key range really is cut into several splits and a
        # request with more queries than BLOCK_Q takes several passes.
        config = dict(
            BLOCK_Q=2,
            BLOCK_M=16,
            BLOCK_N=16,
            NUM_SPLITS=num_splits,
            num_warps=4,
            num_stages=1,
            MANUAL_PREFETCH=manual_prefetch,
        )
        _run_and_check(
            [40, 0, 70],
            [3, 2, 5],
            48,
            num_heads=4,
            num_kv_heads=2,
            head_dim=32,
            page_size=8,
            dtype=torch.float16,
            device="cpu",
            config=config,
            extra_rows=3,
        )

    @pytest.mark.parametrize("window", [None, 6])
    @pytest.mark.parametrize("persistent", [1, 2])
    def test_interp_persistent_grid_loops_over_items(persistent, window):
        # Persistent grid: min(R * nKV, PERSISTENT * SMs) programs (the
        # interpreter reports 4 SMs) walk 15 (request, KV head) items, so each
        # program handles several, unevenly. Ragged requests, one with no
        # queries, one needing several query passes (BLOCK_Q=2), padding rows.
        ctx, qlen, nkv = [9, 0, 30, 4, 17], [3, 2, 0, 5, 1], 3
        items = len(ctx) * nkv
        assert persistent * sta._sm_count(torch.device("cpu")) < items
        config = dict(
            BLOCK_Q=2,
            BLOCK_M=16,
            BLOCK_N=16,
            NUM_SPLITS=1,
            num_warps=4,
            num_stages=1,
            PERSISTENT=persistent,
        )
        _run_and_check(
            ctx,
            qlen,
            window,
            num_heads=2 * nkv,
            num_kv_heads=nkv,
            head_dim=32,
            page_size=4,
            dtype=torch.float16,
            device="cpu",
            config=config,
            extra_rows=3,
        )

    def test_interp_strided_q_and_sharp_softmax():
        _run_and_check(
            [25, 3],
            [4, 4],
            12,
            num_heads=4,
            num_kv_heads=2,
            head_dim=64,
            page_size=4,
            dtype=torch.float16,
            device="cpu",
            q_gain=4.0,
            strided_q=True,
        )

    def test_interp_leaves_padding_rows_untouched():
        _run_and_check(
            [10, 4],
            [2, 3],
            6,
            num_heads=2,
            num_kv_heads=1,
            head_dim=32,
            page_size=4,
            dtype=torch.float16,
            device="cpu",
            extra_rows=4,
        )

else:

    def test_triton_interpreter_suite():
        """Runs the test_interp_* tests in a TRITON_INTERPRET=1 child process."""
        env = dict(os.environ)
        env["TRITON_INTERPRET"] = "1"
        env[_CHILD_ENV] = "1"
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_SRC), env.get("PYTHONPATH", "")) if p
        )
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "--noconftest",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            str(Path(__file__)),
        ]
        proc = subprocess.run(
            cmd,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            cwd=str(Path(__file__).resolve().parents[1]),
        )
        assert proc.returncode == 0, (
            "interpreter suite failed:\n" + proc.stdout[-8000:] + proc.stderr[-4000:]
        )
        assert " passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout


# ---------------------------------------------------------------------------
# CPU: reference semantics and refusals (no interpreter needed)
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

    @pytest.mark.parametrize("window", [None, 1, 5, 64])
    def test_reference_sees_exactly_the_fixed_history_window(window):
        seed = _fresh_seed()
        q, k, v, bt, ctx, qsl = _make_inputs(
            [0, 3, 17],
            [2, 4, 3],
            num_heads=4,
            num_kv_heads=2,
            head_dim=8,
            page_size=4,
            dtype=torch.float32,
            device="cpu",
            seed=seed,
        )
        ref = sta.fixed_history_attention_reference(
            q.double(), k.double(), v.double(), bt, ctx, qsl, window, 0.3
        )
        want = _dense_masked_attention(q, k, v, bt, ctx, qsl, window, 0.3)
        torch.testing.assert_close(
            ref, want, rtol=1e-10, atol=1e-10, msg=f"seed={seed}"
        )

    def test_reference_keys_outside_window_do_not_matter():
        seed = _fresh_seed()
        q, k, v, bt, ctx, qsl = _make_inputs(
            [12],
            [3],
            num_heads=2,
            num_kv_heads=1,
            head_dim=8,
            page_size=4,
            dtype=torch.float32,
            device="cpu",
            seed=seed,
        )
        before = sta.fixed_history_attention_reference(q, k, v, bt, ctx, qsl, 4, 1.0)
        # Positions 0..7 are outside max(0, 12-4)=8 .. 14: scribble on them.
        for p in range(8):
            k[bt[0, p // 4], p % 4] = 1e3
            v[bt[0, p // 4], p % 4] = -1e3
        after = sta.fixed_history_attention_reference(q, k, v, bt, ctx, qsl, 4, 1.0)
        torch.testing.assert_close(before, after, msg=f"seed={seed}")

    def _good_args(**over):
        q, k, v, bt, ctx, qsl = _make_inputs(
            [5, 2],
            [2, 3],
            num_heads=4,
            num_kv_heads=2,
            head_dim=32,
            page_size=4,
            dtype=torch.float16,
            device="cpu",
            seed=0,
        )
        args = dict(
            q=q,
            k_cache=k,
            v_cache=v,
            block_table=bt,
            context_lens=ctx,
            query_start_loc=qsl,
            sliding_window=4,
            scale=0.1,
            out=None,
        )
        args.update(over)
        return args

    def _refusal_cases():
        base = _good_args()
        q, k, v = base["q"], base["k_cache"], base["v_cache"]
        q48 = torch.randn(5, 4, 48, dtype=torch.float16)
        cache48 = torch.randn(20, 2, 4, 96, dtype=torch.float16)
        k48, v48 = cache48.transpose(1, 2).split(48, -1)
        q512 = torch.randn(5, 4, 512, dtype=torch.float16)
        cache512 = torch.randn(20, 2, 4, 1024, dtype=torch.float16)
        k512, v512 = cache512.transpose(1, 2).split(512, -1)
        q16 = torch.randn(5, 4, 16, dtype=torch.float16)
        cache16 = torch.randn(20, 2, 4, 32, dtype=torch.float16)
        k16, v16 = cache16.transpose(1, 2).split(16, -1)
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
            "head_dim_48": (dict(q=q48, k_cache=k48, v_cache=v48), ValueError, "D=48"),
            "head_dim_512": (
                dict(q=q512, k_cache=k512, v_cache=v512),
                ValueError,
                "D=512",
            ),
            "head_dim_16": (dict(q=q16, k_cache=k16, v_cache=v16), ValueError, "D=16"),
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
            sta.fixed_history_attention(**_good_args(**over))

    @pytest.mark.skipif(sta._interpreting(), reason="interpreter runs CPU tensors")
    def test_launch_wrapper_refuses_cpu_tensors_without_interpreter():
        with pytest.raises(RuntimeError, match="needs CUDA tensors"):
            sta.fixed_history_attention(**_good_args())

    def test_reference_refuses_bad_window_too():
        with pytest.raises(ValueError, match="positive int"):
            sta.fixed_history_attention_reference(**_good_args(sliding_window=0))

    def test_persistent_launch_refuses_several_splits():
        a = _good_args()
        with pytest.raises(ValueError, match="PERSISTENT needs NUM_SPLITS == 1"):
            sta._launch(
                a["q"],
                a["k_cache"],
                a["v_cache"],
                a["block_table"],
                a["context_lens"],
                a["query_start_loc"],
                4,
                0.1,
                torch.empty_like(a["q"]),
                BLOCK_Q=2,
                BLOCK_M=16,
                BLOCK_N=16,
                NUM_SPLITS=2,
                num_warps=4,
                num_stages=1,
                PERSISTENT=2,
            )

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
    def test_launch_config_persistent_only_for_its_branch(
        shape, persistent, monkeypatch
    ):
        # Pretend an H200 (132 SMs, cached for device 0) so no GPU is needed.
        monkeypatch.setitem(sta._SM_COUNT, 0, 132)
        r, length, b, w, nh, nkv, d = shape
        max_kv = (-(-(length + b) // 16)) * 16
        args = (r * b, r, nkv, nh // nkv, d, w, max_kv)
        cfg = sta._launch_config(*args, torch.device("cuda", 0))
        assert cfg["PERSISTENT"] == persistent, cfg
        if persistent:
            assert cfg["NUM_SPLITS"] == 1 and cfg["BLOCK_N"] == 128, cfg
            assert cfg["num_warps"] == 4 and cfg["num_stages"] == 2, cfg
            assert not cfg["ASM_PAGE_LOAD"] and not cfg["MANUAL_PREFETCH"], cfg
        # Never on CPU (interpreter) devices.
        assert sta._launch_config(*args, torch.device("cpu"))["PERSISTENT"] == 0


# ---------------------------------------------------------------------------
# CUDA
# ---------------------------------------------------------------------------

_no_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# (ctx_lens, q_lens, window, nH, nKV, D, page, layout)
_CUDA_CASES = {
    "mixed_L_32_8_128": (
        [0, 100, 5000, 9000],
        [8, 1, 16, 8],
        4096,
        32,
        8,
        128,
        16,
        "nhd",
    ),
    "L_below_W_16_16_64": ([3000, 17, 2048], [8, 8, 8], 1024, 16, 16, 64, 16, "nhd"),
    "d256_gqa4_page32": ([700, 1500, 0], [4, 8, 2], 512, 8, 2, 256, 32, "nhd"),
    "d32_gqa8_full": ([1200, 5, 333], [8, 3, 1], None, 16, 2, 32, 16, "nhd"),
    "window_edges_hnd": ([63, 64, 65, 0], [1, 2, 3, 4], 64, 8, 4, 128, 16, "hnd"),
    "single_long_request": ([32768], [16], 4096, 32, 4, 128, 16, "nhd"),
    "one_block_much_longer": (
        [900, 50, 4000, 7],
        [1, 2, 1, 40],
        2048,
        8,
        2,
        64,
        16,
        "nhd",
    ),
}

if not _IN_CHILD:

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    @pytest.mark.parametrize("name", sorted(_CUDA_CASES))
    @pytest.mark.parametrize("out_given", [True, False])
    def test_cuda_kernel_matches_float64_reference(name, dtype, out_given):
        ctx, qlen, w, nh, nkv, d, page, layout = _CUDA_CASES[name]
        _run_and_check(
            ctx,
            qlen,
            w,
            num_heads=nh,
            num_kv_heads=nkv,
            head_dim=d,
            page_size=page,
            dtype=dtype,
            device="cuda",
            layout=layout,
            out_given=out_given,
        )

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    @pytest.mark.parametrize(
        "head_dim,group",
        [(32, 1), (32, 8), (64, 2), (64, 8), (128, 1), (128, 4), (256, 1), (256, 8)],
    )
    def test_cuda_head_dims_and_gqa_ratios(head_dim, group, dtype):
        nkv = 2
        _run_and_check(
            [0, 37, 1000, 2600],
            [4, 1, 8, 6],
            512,
            num_heads=nkv * group,
            num_kv_heads=nkv,
            head_dim=head_dim,
            page_size=16,
            dtype=dtype,
            device="cuda",
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
            ctx,
            qlen,
            512,
            num_heads=32,
            num_kv_heads=8,
            head_dim=128,
            page_size=16,
            dtype=torch.bfloat16,
            device="cuda",
            extra_rows=5,
        )

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize("loads", ["pipelined", "manual", "asm_pages"])
    @pytest.mark.parametrize("num_splits", [1, 2, 8])
    def test_cuda_split_path_with_strided_q(num_splits, loads):
        config = dict(
            BLOCK_Q=8,
            BLOCK_M=32,
            BLOCK_N=64,
            NUM_SPLITS=num_splits,
            num_warps=4,
            num_stages=4 if loads == "asm_pages" else 3,
            MANUAL_PREFETCH=loads == "manual",
            ASM_PAGE_LOAD=loads == "asm_pages",
        )
        _run_and_check(
            [5000, 0, 130],
            [8, 8, 8],
            4096,
            num_heads=32,
            num_kv_heads=8,
            head_dim=128,
            page_size=16,
            dtype=torch.bfloat16,
            device="cuda",
            config=config,
            strided_q=True,
            extra_rows=2,
        )

    @pytest.mark.cuda
    @_no_cuda
    @pytest.mark.parametrize(
        "block_n,num_warps,num_stages", [(32, 4, 4), (64, 8, 3), (128, 4, 3)]
    )
    def test_cuda_block_table_loads_in_ptx(block_n, num_warps, num_stages):
        # ASM_PAGE_LOAD: page ids through inline PTX (clamped index), K/V
        # pipelined num_stages - 1 tiles ahead; 128-row tiles, uneven splits,
        # windows that end mid-tile, L < W and an empty request.
        config = dict(
            BLOCK_Q=16,
            BLOCK_M=128,
            BLOCK_N=block_n,
            NUM_SPLITS=4,
            num_warps=num_warps,
            num_stages=num_stages,
            MANUAL_PREFETCH=False,
            ASM_PAGE_LOAD=True,
        )
        _run_and_check(
            [3000, 0, 777, 9, 40],
            [16, 7, 16, 0, 20],
            1000,
            num_heads=32,
            num_kv_heads=4,
            head_dim=128,
            page_size=16,
            dtype=torch.bfloat16,
            device="cuda",
            config=config,
            extra_rows=3,
        )

    @pytest.mark.cuda
    @_no_cuda
    def test_cuda_graph_replay_follows_new_metadata():
        """The launch has no host sync: capture once, then change L and q."""
        seed = _fresh_seed()
        q, k, v, bt, ctx, qsl = _make_inputs(
            [3000, 10, 700],
            [8, 8, 8],
            num_heads=16,
            num_kv_heads=4,
            head_dim=128,
            page_size=16,
            dtype=torch.bfloat16,
            device="cuda",
            seed=seed,
        )
        out = torch.full_like(q, float("nan"))
        scale = 128**-0.5
        sta.fixed_history_attention(q, k, v, bt, ctx, qsl, 1024, scale, out=out)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            sta.fixed_history_attention(q, k, v, bt, ctx, qsl, 1024, scale, out=out)
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
        q_lens[2] = 12  # more queries than BLOCK_Q=8: two passes
        q, k, v, bt, ctx, qsl = _make_inputs(
            ctx_lens,
            q_lens,
            num_heads=32,
            num_kv_heads=nkv,
            head_dim=128,
            page_size=16,
            dtype=torch.bfloat16,
            device="cuda",
            seed=seed,
            extra_rows=5,
        )
        scale = 128**-0.5
        num_sms = sta._sm_count(q.device)
        if how == "default":
            cfg = sta._launch_config(
                q.shape[0], num_reqs, nkv, 4, 128, window, bt.shape[1] * 16, q.device
            )
            assert cfg["PERSISTENT"] == 2 and cfg["NUM_SPLITS"] == 1, cfg

            def call():
                sta.fixed_history_attention(
                    q, k, v, bt, ctx, qsl, window, scale, out=out
                )

        else:
            cfg = dict(
                BLOCK_Q=8,
                BLOCK_M=32,
                BLOCK_N=128,
                NUM_SPLITS=1,
                num_warps=4,
                num_stages=2,
                PERSISTENT=1,
            )

            def call():
                sta._launch(q, k, v, bt, ctx, qsl, window, scale, out, **cfg)

        assert cfg["PERSISTENT"] * num_sms < num_reqs * nkv
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
