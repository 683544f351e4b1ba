"""Pure-PyTorch reference of the Spark2_5 forward pass (SPEC §3).

Independent of vLLM and of :mod:`vllm_spark2_5_plugin.spark2_5`: written from
the specification alone, on whole sequences with dense masks, in float64 by
default. The tests compare vLLM's output with it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

SLIDING = "sliding_attention"
FULL = "full_attention"


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps) * w``, computed in at least float32."""
    work = torch.promote_types(x.dtype, torch.float32)
    xf = x.to(work)
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (out * weight.to(work)).to(x.dtype)


def gelu(x: torch.Tensor, hidden_act: str) -> torch.Tensor:
    if hidden_act == "gelu_pytorch_tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))
        return 0.5 * x * (1.0 + torch.tanh(inner))
    if hidden_act == "gelu":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    raise ValueError(f"unknown hidden_act {hidden_act!r}")


def rope_inverse_frequencies(rope: Mapping[str, Any], head_dim: int) -> torch.Tensor:
    """Per-pair inverse frequencies; ``linear`` scaling divides positions."""
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", "linear"):
        raise ValueError(
            f"the reference implements rope_type default/linear, not {rope_type!r}"
        )
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
    inv_freq = 1.0 / (float(rope["rope_theta"]) ** exponents)
    if rope_type == "linear":
        inv_freq = inv_freq / float(rope["factor"])
    return inv_freq


def apply_rope(
    x: torch.Tensor, positions: torch.Tensor, rope: Mapping[str, Any]
) -> torch.Tensor:
    """Rotate-half (NeoX) RoPE of ``x [T, heads, D]`` at ``positions [T]``."""
    head_dim = x.shape[-1]
    angles = positions.to(torch.float64)[:, None] * rope_inverse_frequencies(
        rope, head_dim
    )
    cos = angles.cos()[:, None, :].to(x.dtype)
    sin = angles.sin()[:, None, :].to(x.dtype)
    first, second = x[..., : head_dim // 2], x[..., head_dim // 2 :]
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor
) -> torch.Tensor:
    """Softmax attention with GQA; ``visible [Tq, Tk]`` is True where allowed.

    q ``[Tq, nH, D]``, k/v ``[Tk, nKV, D]``; query head h uses kv head
    ``h // (nH / nKV)``. Returns ``[Tq, nH, D]``.
    """
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def causal_mask(positions: torch.Tensor, window: int | None) -> torch.Tensor:
    """A query at t sees keys ``t-W+1 .. t`` (``0 .. t`` without a window)."""
    q_pos, k_pos = positions[:, None], positions[None, :]
    visible = k_pos <= q_pos
    if window is not None:
        visible &= k_pos > q_pos - window
    return visible


def read_checkpoint(path: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``config.json`` as a dict and every safetensors tensor of a checkpoint."""
    from safetensors.torch import load_file

    path = Path(path)
    config = json.loads((path / "config.json").read_text())
    weights: dict[str, torch.Tensor] = {}
    for shard in sorted(path.glob("*.safetensors")):
        weights.update(load_file(str(shard)))
    return config, weights


def resolve_rope_parameters(raw: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """RoPE settings per layer type from any SPEC §3 spelling in config.json.

    Per-type dicts, a flat dict for both types, or the legacy top-level
    ``rope_theta``/``rope_scaling``; a missing theta gets the type's default.
    """
    defaults = {SLIDING: 1e4, FULL: 1e6}
    params = raw.get("rope_parameters") or raw.get("rope_scaling")
    if params and any(key in params for key in defaults):
        per_type = {t: dict(params.get(t) or {}) for t in defaults}
    else:
        per_type = {t: dict(params or {}) for t in defaults}
    for layer_type, entry in per_type.items():
        entry.setdefault("rope_type", entry.get("type", "default"))
        entry.setdefault("rope_theta", raw.get("rope_theta") or defaults[layer_type])
    return per_type


@dataclass
class ReferenceConfig:
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_act: str
    rms_norm_eps: float
    sliding_window: int
    layer_types: list[str]
    rope_parameters: dict[str, dict[str, Any]]
    attention_output_gate: bool
    tie_word_embeddings: bool

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ReferenceConfig:
        """Read config.json fields, resolving the RoPE spellings of SPEC §3."""
        n_layers = raw["num_hidden_layers"]
        layer_types = raw.get("layer_types") or [
            FULL if i % 4 == 3 else SLIDING for i in range(n_layers)
        ]
        return cls(
            hidden_size=raw["hidden_size"],
            num_attention_heads=raw["num_attention_heads"],
            num_key_value_heads=raw["num_key_value_heads"],
            head_dim=raw["head_dim"],
            hidden_act=raw.get("hidden_act", "gelu_pytorch_tanh"),
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            sliding_window=raw.get("sliding_window", 4096),
            layer_types=list(layer_types),
            rope_parameters=resolve_rope_parameters(raw),
            attention_output_gate=raw.get("attention_output_gate", True),
            tie_word_embeddings=raw.get("tie_word_embeddings", False),
        )


def decoder_layer(
    h: torch.Tensor,
    positions: torch.Tensor,
    weights: Mapping[str, torch.Tensor],
    prefix: str,
    config: ReferenceConfig,
    layer_type: str,
    window: int | None,
) -> torch.Tensor:
    """One pre-norm decoder layer of SPEC §3 on a whole sequence ``h [T, H]``."""

    def w(name: str) -> torch.Tensor:
        return weights[prefix + name]

    def linear(x: torch.Tensor, name: str) -> torch.Tensor:
        out = x @ w(f"{name}.weight").T
        bias = weights.get(f"{prefix}{name}.bias")
        return out if bias is None else out + bias

    n_q, n_kv, d = (
        config.num_attention_heads,
        config.num_key_value_heads,
        config.head_dim,
    )
    x = rms_norm(h, w("input_layernorm.weight"), config.rms_norm_eps)
    q = linear(x, "self_attn.q_proj").view(-1, n_q, d)
    k = linear(x, "self_attn.k_proj").view(-1, n_kv, d)
    v = linear(x, "self_attn.v_proj").view(-1, n_kv, d)
    rope = config.rope_parameters[layer_type]
    q, k = apply_rope(q, positions, rope), apply_rope(k, positions, rope)
    a = attention(q, k, v, causal_mask(positions, window))
    if config.attention_output_gate:
        a = a * torch.sigmoid(x @ w("self_attn.g_proj.weight").T)[..., None]
    h = h + a.reshape(h.shape[0], n_q * d) @ w("self_attn.o_proj.weight").T
    x = rms_norm(h, w("post_attention_layernorm.weight"), config.rms_norm_eps)
    mlp = gelu(x @ w("mlp.gate_proj.weight").T, config.hidden_act) * (
        x @ w("mlp.up_proj.weight").T
    )
    return h + mlp @ w("mlp.down_proj.weight").T


class Spark2_5Reference:
    """The whole model on one sequence, without any cache."""

    def __init__(
        self,
        config: Mapping[str, Any],
        weights: Mapping[str, torch.Tensor],
        dtype: torch.dtype = torch.float64,
    ) -> None:
        self.raw_config = dict(config)
        self.config = ReferenceConfig.from_dict(config)
        self.weights = {name: t.to(dtype) for name, t in weights.items()}
        self.dtype = dtype

    @classmethod
    def from_checkpoint(
        cls, path: str | Path, dtype: torch.dtype = torch.float64
    ) -> Spark2_5Reference:
        return cls(*read_checkpoint(path), dtype)

    @property
    def lm_head(self) -> torch.Tensor:
        if self.config.tie_word_embeddings:
            return self.weights["model.embed_tokens.weight"]
        return self.weights["lm_head.weight"]

    def residual_stream(self, ids: Sequence[int]) -> list[torch.Tensor]:
        """``[h_0, h_1, ..., h_N]``: h_0 the embeddings, h_i the output of layer i-1."""
        ids_t = torch.as_tensor(list(ids), dtype=torch.long)
        positions = torch.arange(len(ids_t))
        h = self.weights["model.embed_tokens.weight"][ids_t]
        stream = [h]
        cfg = self.config
        for i, layer_type in enumerate(cfg.layer_types):
            window = cfg.sliding_window if layer_type == SLIDING else None
            h = decoder_layer(
                h,
                positions,
                self.weights,
                f"model.layers.{i}.",
                cfg,
                layer_type,
                window,
            )
            stream.append(h)
        return stream

    def logits(self, ids: Sequence[int]) -> torch.Tensor:
        """Next-token logits ``[T, V]`` for every position of ``ids``."""
        h = self.residual_stream(ids)[-1]
        return rms_norm(
            h, self.weights["model.norm.weight"], self.config.rms_norm_eps
        ) @ (self.lm_head.T)

    def greedy(
        self, prompt: Sequence[int], max_tokens: int
    ) -> tuple[list[int], list[torch.Tensor]]:
        """Greedy continuation and the log-softmax row of each chosen token."""
        ids, logprob_rows = list(prompt), []
        for _ in range(max_tokens):
            row = torch.log_softmax(self.logits(ids)[-1], dim=-1)
            logprob_rows.append(row)
            ids.append(int(row.argmax()))
        return ids[len(prompt) :], logprob_rows
