"""Pure-PyTorch reference of the DSpark draft math (SPEC §4).

Written from the specification, independent of vLLM and of
:mod:`vllm_spark2_5_plugin.spark2_5_dspark`: one request at a time, whole
sequences, dense masks, no paged cache, float64 by default. It reuses only the
small SPEC §3 helpers of :mod:`vllm_spark2_5_plugin.reference` (RMSNorm, GELU,
RoPE, masked GQA attention). The tests compare the vLLM draft with it.

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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vllm_spark2_5_plugin.references.spark2_5 import (
    SLIDING,
    apply_rope,
    attention,
    gelu,
    read_checkpoint,
    resolve_rope_parameters,
    rms_norm,
)

PREFIXES = ("draft_model.", "mtp.", "model.mtp.")
_ALIASES = {
    "dspark_block_size": "block_size",
    "dspark_markov_rank": "markov_rank",
    "dspark_target_layer_ids": "target_layer_ids",
    "dspark_markov_head_type": "markov_head_type",
    "dspark_enable_confidence_head": "enable_confidence_head",
    "dspark_noise_token_id": "mask_token_id",
}


def _field(raw: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """A DSpark field under its canonical name or its alias."""
    value = raw.get(name)
    if value is None and name in _ALIASES:
        value = raw.get(_ALIASES[name])
    return default if value is None else value


@dataclass
class DSparkReferenceConfig:
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_act: str
    rms_norm_eps: float
    rope_parameters: dict[str, dict[str, Any]]
    attention_output_gate: bool
    tie_word_embeddings: bool
    target_layer_ids: list[int]
    markov_rank: int
    markov_head_type: str
    enable_confidence_head: bool
    noise_token_id: int
    layer_types: list[str]
    sliding_window: int
    block_size: int | None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> DSparkReferenceConfig:
        return cls(
            hidden_size=raw["hidden_size"],
            num_attention_heads=raw["num_attention_heads"],
            num_key_value_heads=raw["num_key_value_heads"],
            head_dim=raw["head_dim"],
            hidden_act=raw.get("hidden_act", "gelu_pytorch_tanh"),
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope_parameters=resolve_rope_parameters(raw),
            attention_output_gate=raw.get("attention_output_gate", True),
            tie_word_embeddings=raw.get("tie_word_embeddings", False),
            target_layer_ids=list(_field(raw, "dspark_target_layer_ids")),
            markov_rank=_field(raw, "dspark_markov_rank"),
            markov_head_type=_field(raw, "dspark_markov_head_type", "vanilla"),
            enable_confidence_head=_field(raw, "dspark_enable_confidence_head", False),
            noise_token_id=_field(raw, "dspark_noise_token_id"),
            layer_types=list(_field(raw, "dspark_layer_types", [SLIDING])),
            sliding_window=_field(
                raw, "dspark_sliding_window", raw.get("sliding_window", 4096)
            ),
            block_size=_field(raw, "dspark_block_size"),
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


class DSparkReference:
    """The DSpark draft of one checkpoint (draft weights + target embed/head)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        weights: Mapping[str, torch.Tensor],
        dtype: torch.dtype = torch.float64,
    ) -> None:
        self.config = DSparkReferenceConfig.from_dict(config)
        found = sorted({p for p in PREFIXES for n in weights if n.startswith(p)})
        if len(found) != 1:
            raise ValueError(f"expected draft weights under one prefix, found {found}")
        self.prefix = found[0]
        self.dtype = dtype
        self.weights = {name: t.to(dtype) for name, t in weights.items()}

    @classmethod
    def from_checkpoint(
        cls, path: str | Path, dtype: torch.dtype = torch.float64
    ) -> DSparkReference:
        return cls(*read_checkpoint(path), dtype)

    # -- weights ---------------------------------------------------------------

    def w(self, name: str) -> torch.Tensor:
        return self.weights[self.prefix + name]

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        out = x @ self.w(f"{name}.weight").T
        bias = self.weights.get(f"{self.prefix}{name}.bias")
        return out if bias is None else out + bias

    @property
    def embed_tokens(self) -> torch.Tensor:
        return self.weights["model.embed_tokens.weight"]

    @property
    def lm_head(self) -> torch.Tensor:
        if self.config.tie_word_embeddings:
            return self.embed_tokens
        return self.weights["lm_head.weight"]

    def _rope(self, j: int) -> dict[str, Any]:
        return self.config.rope_parameters[self.config.layer_types[j]]

    # -- the math of SPEC §4 -----------------------------------------------------

    def combine(self, aux: Sequence[torch.Tensor]) -> torch.Tensor:
        """``[T, H]`` per target layer (ascending ids) -> ``c [T, H]``."""
        cat = torch.cat([a.to(self.dtype) for a in aux], dim=-1)
        return rms_norm(
            cat @ self.w("main_proj.weight").T,
            self.w("main_norm.weight"),
            self.config.rms_norm_eps,
        )

    def context_kv(
        self, j: int, c: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draft layer ``j``'s context K/V ``[T, nKV, D]`` (no input norm)."""
        cfg = self.config
        c = c.to(self.dtype)
        k = self._linear(c, f"layers.{j}.self_attn.k_proj")
        v = self._linear(c, f"layers.{j}.self_attn.v_proj")
        k = k.view(-1, cfg.num_key_value_heads, cfg.head_dim)
        v = v.view(-1, cfg.num_key_value_heads, cfg.head_dim)
        return apply_rope(k, positions, self._rope(j)), v

    def visible_keys(self, j: int, context_len: int, block_len: int) -> torch.Tensor:
        """``[B, L+B]`` mask: which context+block positions every query sees."""
        key_pos = torch.arange(context_len + block_len)
        if self.config.layer_types[j] == SLIDING:
            first = max(0, context_len - self.config.sliding_window)
        else:
            first = 0
        return (key_pos >= first)[None, :].expand(block_len, -1)

    def block_hidden(self, c: torch.Tensor, block_ids: Sequence[int]) -> torch.Tensor:
        """``rmsnorm(x, norm)`` of the block after every draft layer, ``[B, H]``.

        ``c [L, H]`` are the combined features of the ``L`` context tokens
        (positions ``0 .. L-1``); the block sits at ``L .. L+B-1``.
        """
        cfg = self.config
        n_q, n_kv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        ctx_len, blk_len = c.shape[0], len(block_ids)
        ctx_pos = torch.arange(ctx_len)
        blk_pos = torch.arange(ctx_len, ctx_len + blk_len)
        h = self.embed_tokens[torch.as_tensor(list(block_ids))]
        for j, _ in enumerate(cfg.layer_types):
            p = f"layers.{j}."
            x = rms_norm(h, self.w(p + "input_layernorm.weight"), cfg.rms_norm_eps)
            q = self._linear(x, p + "self_attn.q_proj").view(-1, n_q, d)
            k = self._linear(x, p + "self_attn.k_proj").view(-1, n_kv, d)
            v = self._linear(x, p + "self_attn.v_proj").view(-1, n_kv, d)
            q = apply_rope(q, blk_pos, self._rope(j))
            k = apply_rope(k, blk_pos, self._rope(j))
            ctx_k, ctx_v = self.context_kv(j, c, ctx_pos)
            a = attention(
                q,
                torch.cat([ctx_k, k]),
                torch.cat([ctx_v, v]),
                self.visible_keys(j, ctx_len, blk_len),
            )
            if cfg.attention_output_gate:
                gate = torch.sigmoid(x @ self.w(p + "self_attn.g_proj.weight").T)
                a = a * gate[..., None]
            h = (
                h
                + a.reshape(blk_len, n_q * d) @ self.w(p + "self_attn.o_proj.weight").T
            )
            x = rms_norm(
                h, self.w(p + "post_attention_layernorm.weight"), cfg.rms_norm_eps
            )
            mlp = gelu(x @ self.w(p + "mlp.gate_proj.weight").T, cfg.hidden_act) * (
                x @ self.w(p + "mlp.up_proj.weight").T
            )
            h = h + mlp @ self.w(p + "mlp.down_proj.weight").T
        return rms_norm(h, self.w("norm.weight"), cfg.rms_norm_eps)

    def base_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden.to(self.dtype) @ self.lm_head.T

    def markov_embeds(self, prev_tokens: Sequence[int]) -> torch.Tensor:
        """``e_0 .. e_{B-1}`` for previous tokens ``prev_0 .. prev_{B-1}``."""
        w1 = self.w("markov_head.markov_w1.weight")
        rows = w1[torch.as_tensor(list(prev_tokens))]
        if self.config.markov_head_type == "vanilla":
            return rows
        proj = self.w("markov_head.rnn_proj.weight")
        e = torch.zeros(self.config.markov_rank, dtype=self.dtype)
        out = []
        for row in rows:
            e = torch.tanh(row + e @ proj.T)
            out.append(e)
        return torch.stack(out)

    def markov_bias(self, e: torch.Tensor) -> torch.Tensor:
        return e.to(self.dtype) @ self.w("markov_head.markov_w2.weight").T

    def confidence(self, hidden: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        x = torch.cat([hidden.to(self.dtype), e.to(self.dtype)], dim=-1)
        return torch.sigmoid(self._linear(x, "confidence_head.proj")).squeeze(-1)

    def draft(self, c: torch.Tensor, anchor: int, num_tokens: int) -> DraftResult:
        """Greedy DSpark draft of ``num_tokens`` after ``L = len(c)`` tokens."""
        block = [anchor] + [self.config.noise_token_id] * (num_tokens - 1)
        hidden = self.block_hidden(c, block)
        base = self.base_logits(hidden)
        prev, tokens, embeds, logits = anchor, [], [], []
        e = torch.zeros(self.config.markov_rank, dtype=self.dtype)
        w1 = self.w("markov_head.markov_w1.weight")
        for i in range(num_tokens):
            if self.config.markov_head_type == "rnn":
                proj = self.w("markov_head.rnn_proj.weight")
                e = torch.tanh(w1[prev] + e @ proj.T)
            else:
                e = w1[prev]
            row = base[i] + self.markov_bias(e)
            prev = int(row.argmax())
            tokens.append(prev)
            embeds.append(e)
            logits.append(row)
        e_all = torch.stack(embeds)
        conf = (
            self.confidence(hidden, e_all)
            if self.config.enable_confidence_head
            else None
        )
        return DraftResult(tokens, hidden, base, e_all, torch.stack(logits), conf)


__all__ = ["DSparkReference", "DSparkReferenceConfig", "DraftResult", "PREFIXES"]
