# SPDX-License-Identifier: Apache-2.0
"""What the fixed-history attention kernel can run.

Pure Python (no torch, no triton), so configuration code can refuse an
unsupported model at start-up. The kernel's own input checks use the same
functions. See ``docs/kernel.md``.
"""

from __future__ import annotations

#: dtypes of q and of the K/V cache (both must be the same one).
SUPPORTED_DTYPES: tuple[str, ...] = ("float16", "bfloat16")

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
    """``None`` when the kernel runs this q/KV dtype, else why not (a phrase
    that does not repeat the value).

    ``dtype_name`` is a torch dtype name such as ``"bfloat16"``; a ``"torch."``
    prefix (``str(torch.bfloat16)``) is accepted.
    """
    name = str(dtype_name).removeprefix("torch.")
    if name not in SUPPORTED_DTYPES:
        return (
            f"the fixed-history kernel runs {' or '.join(SUPPORTED_DTYPES)} only "
            "(q and the K/V cache in the same dtype; no fp8 caches)"
        )
    return None
