# SPDX-License-Identifier: Apache-2.0
"""Per-position statistics of the DSpark proposal oracle (:mod:`dspark_oracle`).

Margins, flip noise, total variation, top-p membership and quantiles.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def top2_margin(z: torch.Tensor) -> torch.Tensor:
    top = z.topk(2, dim=-1).values
    return top[..., 0] - top[..., 1]


def flip_noise(z: torch.Tensor, other: torch.Tensor, top_k: int = 16) -> torch.Tensor:
    """``[K]``: the most any near-top token gains on ``a = argmax z`` in ``other``.

    ``max_b ((o - z)_b - (o - z)_a)^+`` over the tokens ``b`` in the top
    ``top_k`` of ``z`` or of ``other`` (a token that ``other`` promotes to
    its top counts, however low it is in ``z``); ``0`` when ``other`` keeps
    the order of those tokens relative to ``a``. A shift of all logits is no
    gain.
    """
    z = z.double()
    other = other.double()
    eps = other - z
    k = min(top_k, z.shape[-1])
    idx = torch.cat([z.topk(k, -1).indices, other.topk(k, -1).indices], -1)
    top = z.argmax(-1, keepdim=True)
    gain = eps.gather(-1, idx) - eps.gather(-1, top)
    return gain.max(-1).values.clamp(min=0.0)


def total_variation(z: torch.Tensor, other: torch.Tensor, temperature: float):
    p = torch.softmax(z.double() / temperature, -1)
    o = torch.softmax(other.double() / temperature, -1)
    return 0.5 * (p - o).abs().sum(-1)


def top_p_member(p: torch.Tensor, token: int, top_p: float) -> bool:
    """Whether ``token`` is in the smallest set of top tokens with mass >= top_p."""
    mass_before = p[p > p[token]].sum().item()
    return mass_before < top_p


def _quantile(values: Sequence[float], q: float) -> float | None:
    return (
        float(np.quantile(np.asarray(values, dtype=np.float64), q)) if values else None
    )


def _share(flags: Sequence[bool]) -> float | None:
    return float(np.mean(flags)) if len(flags) else None
