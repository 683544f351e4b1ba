# SPDX-License-Identifier: Apache-2.0
"""What the fixed-history attention kernel can run.

Pure Python (no torch, no triton), so configuration code can refuse an
unsupported model at start-up. The kernel's own input checks use the same
functions. See ``docs/kernel.md``.
"""

from __future__ import annotations

#: dtypes of q (the model dtype); a K/V cache in the same dtype is read as is.
SUPPORTED_DTYPES: tuple[str, ...] = ("float16", "bfloat16")

#: torch dtype name of the only quantized K/V cache the kernel reads: fp8 e4m3
#: with one float32 scale per tensor (vLLM's ``layer._k_scale``/``_v_scale``).
FP8_CACHE_DTYPE = "float8_e4m3fn"

#: vLLM ``--kv-cache-dtype`` values that select that fp8 e4m3 cache.
FP8_KV_CACHE_DTYPES: tuple[str, ...] = ("fp8", "fp8_e4m3")

#: vLLM ``--kv-cache-dtype`` values the kernel reads; ``float16``/``bfloat16``
#: only when they are the model dtype (no mixed-precision caches).
SUPPORTED_KV_CACHE_DTYPES: tuple[str, ...] = (
    "auto",
    *SUPPORTED_DTYPES,
    *FP8_KV_CACHE_DTYPES,
)

#: Head dims: a power of two in MIN_HEAD_DIM..MAX_HEAD_DIM.
MIN_HEAD_DIM = 32
MAX_HEAD_DIM = 256


def unsupported_head_dim_reason(head_dim: int) -> str | None:
    """``None`` when the kernel runs this head dim, else why not (a phrase
    that does not repeat the value)."""
    if (
        isinstance(head_dim, bool)
        or not isinstance(head_dim, int)
        or not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM
        or head_dim & (head_dim - 1) != 0
    ):
        return (
            "the fixed-history kernel needs a head dim that is a power of two "
            f"in {MIN_HEAD_DIM}..{MAX_HEAD_DIM}"
        )
    return None


def unsupported_dtype_reason(dtype_name: str) -> str | None:
    """``None`` when the kernel runs this q (model) dtype, else why not (a
    phrase that does not repeat the value).

    ``dtype_name`` is a torch dtype name such as ``"bfloat16"``; a ``"torch."``
    prefix (``str(torch.bfloat16)``) is accepted.
    """
    name = str(dtype_name).removeprefix("torch.")
    if name not in SUPPORTED_DTYPES:
        return (
            f"the fixed-history kernel runs {' or '.join(SUPPORTED_DTYPES)} only "
            "(q in one of them; the K/V cache in q's dtype or in fp8 e4m3)"
        )
    return None


def unsupported_kv_cache_dtype_reason(cache_dtype: str, model_dtype: str) -> str | None:
    """``None`` when the kernel reads a K/V cache of vLLM's ``--kv-cache-dtype
    cache_dtype`` for a model in ``model_dtype``, else why not (a phrase that
    does not repeat the value).

    Supported: ``"auto"`` and the model dtype itself (the cache in the model
    dtype), ``"fp8"`` and ``"fp8_e4m3"`` (float8_e4m3fn with per-tensor
    scales). Everything else is refused: fp8_e5m2, fp8_inc, fp8_ds_mla, the
    nvfp4/int/turboquant caches, and a float16/bfloat16 cache that is not the
    model dtype. ``model_dtype`` is a torch dtype name (``"bfloat16"``, with
    or without ``"torch."``); whether the kernel runs it at all is
    :func:`unsupported_dtype_reason`'s question.
    """
    cache = str(cache_dtype).removeprefix("torch.")
    model = str(model_dtype).removeprefix("torch.")
    if cache in ("auto", model, *FP8_KV_CACHE_DTYPES):
        return None
    return (
        "the fixed-history kernel reads the K/V cache in the model dtype "
        "(--kv-cache-dtype auto) or in fp8 e4m3 with per-tensor scales "
        f"(--kv-cache-dtype {' or '.join(FP8_KV_CACHE_DTYPES)})"
    )
