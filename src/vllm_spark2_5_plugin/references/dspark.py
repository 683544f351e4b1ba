# SPDX-License-Identifier: Apache-2.0
"""Pure-PyTorch reference of the DSpark draft (``docs/dspark.md``).

Written from the draft's description, independent of vLLM and of the plugin's
model code: one request at a time, whole sequences, dense masks, no paged
cache, float64 by default (float32 for a faster check, on any device). Each
draft layer is the shared Spark2_5 decoder layer of :mod:`.layers`, given the
context keys/values and the block's non-causal mask. The tests compare the
vLLM draft with it.

For one request with ``L`` accepted context tokens and a block of ``B`` query
tokens ``[anchor, noise, ...]`` at positions ``L .. L+B-1``::

    c_t  = rmsnorm(concat_i(h_t^(i)) main_proj^T, main_norm)
    draft layer j: context K/V at t = RoPE(c_t Wk_j (+bk)), c_t Wv_j (+bv)
    x    = embed_tokens[block]      (the target's embedding)
    layer j: a Spark2_5 decoder layer whose keys are context K/V + block K/V;
             every block query sees positions max(0, L-W_d) .. L+B-1 (sliding)
             or 0 .. L+B-1 (full), with no causal mask inside the block
    h_i  = rmsnorm(x_i, norm);  base_logits_i = h_i lm_head^T
    e_i  = markov_w1[prev_i]                              (vanilla)
         = tanh(markov_w1[prev_i] + e_{i-1} rnn_proj^T)    (rnn, e_{-1} = 0)
    logits_i     = base_logits_i + e_i markov_w2^T
    confidence_i = sigmoid([h_i, e_i] proj^T + b)

Context K/V depend only on ``c_t`` and ``t``, so a request computes them once
for its longest context (:meth:`DSparkReference.context_kv_all`) and every
draft step at ``L`` uses the first ``L`` positions (:meth:`ContextKV.prefix`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from vllm_spark2_5_plugin.names import (
    DRAFT_WEIGHT_PREFIXES,
    DSPARK_ALIASES,
    SLIDING,
)
from vllm_spark2_5_plugin.references.layers import (
    KeyValue,
    ReferenceConfig,
    ReferenceModel,
    block_mask,
    decoder_layer,
    key_value,
    linear,
    rms_norm,
    top2_margins,
    with_config_defaults,
)

#: The target tensors the draft shares: embedding and (untied) LM head.
SHARED_TARGET_TENSORS = ("model.embed_tokens.weight", "lm_head.weight")


def _field(raw: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """A DSpark field under its canonical name or its alias."""
    value = raw.get(name)
    if value is None and name in DSPARK_ALIASES:
        value = raw.get(DSPARK_ALIASES[name])
    return default if value is None else value


@dataclass
class DSparkReferenceConfig(ReferenceConfig):
    """The target's fields, with the draft's ``layer_types``/``sliding_window``."""

    target_layer_ids: list[int]
    markov_rank: int
    markov_head_type: str
    enable_confidence_head: bool
    noise_token_id: int
    block_size: int | None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], **fields: Any) -> DSparkReferenceConfig:
        draft_fields: dict[str, Any] = dict(
            layer_types=list(_field(raw, "dspark_layer_types", [SLIDING])),
            sliding_window=_field(
                raw,
                "dspark_sliding_window",
                with_config_defaults(raw)["sliding_window"],
            ),
            target_layer_ids=list(_field(raw, "dspark_target_layer_ids")),
            markov_rank=_field(raw, "dspark_markov_rank"),
            markov_head_type=_field(raw, "dspark_markov_head_type", "vanilla"),
            enable_confidence_head=_field(raw, "dspark_enable_confidence_head", False),
            noise_token_id=_field(raw, "dspark_noise_token_id"),
            block_size=_field(raw, "dspark_block_size"),
        )
        return super().from_dict(raw, **{**draft_fields, **fields})


@dataclass(frozen=True)
class ContextKV:
    """Every draft layer's context keys/values for positions ``0 .. length-1``.

    ``keys[j]``/``values[j]`` are ``[length, nKV, D]`` (keys RoPE'd at their
    positions). Made by :meth:`DSparkReference.context_kv_all`.
    """

    length: int
    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]

    def __len__(self) -> int:
        return self.length

    def layer(self, j: int) -> KeyValue:
        return self.keys[j], self.values[j]

    def prefix(self, length: int) -> ContextKV:
        """The first ``length`` positions (views, no copy)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"prefix length {length} not in 0..{self.length}")
        return ContextKV(
            length,
            tuple(k[:length] for k in self.keys),
            tuple(v[:length] for v in self.values),
        )


@dataclass
class DraftResult:
    """One greedy draft step of one request."""

    tokens: list[int]  # B drafted tokens
    hidden: torch.Tensor  # [B, H] rmsnorm(x, norm)
    base_logits: torch.Tensor  # [B, V]
    markov_embeds: torch.Tensor  # [B, r]
    logits: torch.Tensor  # [B, V] base + Markov bias
    confidence: torch.Tensor | None  # [B]

    @property
    def margins(self) -> torch.Tensor:
        """``[B]``: top-1 minus top-2 of ``logits`` at every drafted position."""
        return top2_margins(self.logits)


class DSparkReference(ReferenceModel):
    """The DSpark draft of one checkpoint (draft weights + target embed/head).

    ``DSparkReference(config, weights, dtype=torch.float64, device="cpu")``:
    ``weights`` may hold the whole checkpoint; only the draft's tensors (under
    exactly one of ``draft_model.``, ``mtp.``, ``model.mtp.``) and the target's
    embedding and LM head are kept, in ``dtype`` on ``device``.
    """

    config_class = DSparkReferenceConfig
    config: DSparkReferenceConfig

    def __init__(
        self,
        config: Mapping[str, Any],
        weights: Mapping[str, torch.Tensor],
        dtype: torch.dtype = torch.float64,
        device: torch.device | str = "cpu",
    ) -> None:
        found = sorted(
            {p for p in DRAFT_WEIGHT_PREFIXES for n in weights if n.startswith(p)}
        )
        if len(found) != 1:
            raise ValueError(f"expected draft weights under one prefix, found {found}")
        self.prefix = found[0]
        super().__init__(config, weights, dtype, device)

    @staticmethod
    def reads(name: str) -> bool:
        """The draft's own tensors and the target's embedding and LM head."""
        return name.startswith(DRAFT_WEIGHT_PREFIXES) or name in SHARED_TARGET_TENSORS

    # -- settings and weights -----------------------------------------------------

    @property
    def target_layer_ids(self) -> list[int]:
        """Zero-based target layers whose outputs feed :meth:`combine`, ascending."""
        return sorted(self.config.target_layer_ids)

    @property
    def block_size(self) -> int | None:
        return self.config.block_size

    @property
    def noise_token_id(self) -> int:
        return self.config.noise_token_id

    def w(self, name: str) -> torch.Tensor:
        return self.weights[self.prefix + name]

    # -- context ---------------------------------------------------------------------

    def combine(self, aux: Sequence[torch.Tensor]) -> torch.Tensor:
        """``[T, H]`` per target layer (ascending ids) -> ``c [T, H]``."""
        cat = torch.cat([self.here(a) for a in aux], dim=-1)
        return rms_norm(
            cat @ self.w("main_proj.weight").T,
            self.w("main_norm.weight"),
            self.config.rms_norm_eps,
        )

    def context_kv(
        self, j: int, c: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draft layer ``j``'s context K/V ``[T, nKV, D]`` (no input norm)."""
        return key_value(
            self.here(c),
            positions.to(self.device),
            self.weights,
            f"{self.prefix}layers.{j}.",
            self.config,
            self.config.layer_types[j],
        )

    def context_kv_all(self, c: torch.Tensor) -> ContextKV:
        """Every draft layer's context K/V of ``c [T, H]`` at positions ``0..T-1``."""
        positions = torch.arange(c.shape[0], device=self.device)
        per_layer = [
            self.context_kv(j, c, positions)
            for j in range(len(self.config.layer_types))
        ]
        return ContextKV(
            c.shape[0],
            tuple(k for k, _ in per_layer),
            tuple(v for _, v in per_layer),
        )

    def _context(self, context: torch.Tensor | ContextKV) -> ContextKV:
        if isinstance(context, ContextKV):
            return context
        return self.context_kv_all(context)

    # -- the block forward -----------------------------------------------------------

    def visible_keys(self, j: int, context_len: int, block_len: int) -> torch.Tensor:
        """``[B, L+B]`` mask: which context+block positions every query sees."""
        window = self.config.window(self.config.layer_types[j])
        return block_mask(context_len, block_len, window, self.device)

    def layer(
        self,
        j: int,
        h: torch.Tensor,
        positions: torch.Tensor,
        visible: torch.Tensor,
        context: KeyValue | None = None,
    ) -> torch.Tensor:
        """Draft layer ``j`` (the shared decoder layer) on ``h [T, H]``."""
        return decoder_layer(
            h,
            positions.to(self.device),
            self.weights,
            f"{self.prefix}layers.{j}.",
            self.config,
            self.config.layer_types[j],
            visible,
            context,
        )

    def block_hidden(
        self, context: torch.Tensor | ContextKV, block_ids: Sequence[int]
    ) -> torch.Tensor:
        """``rmsnorm(x, norm)`` of the block after every draft layer, ``[B, H]``.

        ``context``: the combined features ``c [L, H]`` of the ``L`` context
        tokens (positions ``0 .. L-1``), or their precomputed :class:`ContextKV`;
        the block sits at ``L .. L+B-1``.
        """
        ctx = self._context(context)
        ctx_len, blk_len = len(ctx), len(block_ids)
        positions = torch.arange(ctx_len, ctx_len + blk_len, device=self.device)
        h = self.embed_tokens[torch.as_tensor(block_ids, device=self.device)]
        for j in range(len(self.config.layer_types)):
            visible = self.visible_keys(j, ctx_len, blk_len)
            h = self.layer(j, h, positions, visible, ctx.layer(j))
        return rms_norm(h, self.w("norm.weight"), self.config.rms_norm_eps)

    def base_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.here(hidden) @ self.lm_head.T

    # -- Markov and confidence heads -------------------------------------------------

    def _markov_step(
        self, prev: int | torch.Tensor, e: torch.Tensor | None
    ) -> torch.Tensor:
        """``e_i`` from token ``prev_i`` and ``e_{i-1}`` (``None`` before e_0)."""
        row = self.w("markov_head.markov_w1.weight")[prev]
        if self.config.markov_head_type == "vanilla":
            return row
        state = torch.zeros_like(row) if e is None else e
        return torch.tanh(row + state @ self.w("markov_head.rnn_proj.weight").T)

    def markov_embeds(self, prev_tokens: Sequence[int]) -> torch.Tensor:
        """``e_0 .. e_{B-1}`` for previous tokens ``prev_0 .. prev_{B-1}``."""
        out: list[torch.Tensor] = []
        for prev in prev_tokens:
            out.append(self._markov_step(prev, out[-1] if out else None))
        return torch.stack(out)

    def markov_bias(self, e: torch.Tensor) -> torch.Tensor:
        return self.here(e) @ self.w("markov_head.markov_w2.weight").T

    def confidence(self, hidden: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.here(hidden), self.here(e)], dim=-1)
        return torch.sigmoid(
            linear(x, self.weights, f"{self.prefix}confidence_head.proj", True)
        ).squeeze(-1)

    # -- one draft step --------------------------------------------------------------

    def draft(
        self,
        context: torch.Tensor | ContextKV,
        anchor: int,
        num_tokens: int | None = None,
    ) -> DraftResult:
        """Greedy DSpark draft of ``num_tokens`` (default: the block size).

        ``context``: ``c [L, H]``, or (cheaper when one request drafts many
        times) ``context_kv_all(c_full).prefix(L)``; both give the same result.
        """
        n = self.config.block_size if num_tokens is None else num_tokens
        if n is None:
            raise ValueError("num_tokens is required without dspark_block_size")
        block = [anchor] + [self.config.noise_token_id] * (n - 1)
        hidden = self.block_hidden(context, block)
        base = self.base_logits(hidden)
        prev: int | torch.Tensor = anchor
        e: torch.Tensor | None = None
        tokens, embeds, logits = [], [], []
        for i in range(n):
            e = self._markov_step(prev, e)
            row = base[i] + self.markov_bias(e)
            prev = row.argmax()  # stays on the device: one sync at the end
            tokens.append(prev)
            embeds.append(e)
            logits.append(row)
        e_all = torch.stack(embeds)
        conf = (
            self.confidence(hidden, e_all)
            if self.config.enable_confidence_head
            else None
        )
        return DraftResult(
            torch.stack(tokens).tolist(),
            hidden,
            base,
            e_all,
            torch.stack(logits),
            conf,
        )


__all__ = [
    "ContextKV",
    "DSparkReference",
    "DSparkReferenceConfig",
    "DraftResult",
]
