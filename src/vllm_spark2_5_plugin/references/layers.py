# SPDX-License-Identifier: Apache-2.0
"""What the two pure-PyTorch references share: the Spark2_5 building blocks.

RMSNorm, GELU, NeoX RoPE, masked GQA attention, the attention masks, the
``config.json`` fields, checkpoint reading and the one decoder layer that both
the target (:mod:`.spark2_5`) and the DSpark draft (:mod:`.dspark`) run. The
math is written from ``docs/model.md`` and ``docs/dspark.md`` alone: nothing
here imports vLLM or the plugin's model code, only the fixed names of
:mod:`vllm_spark2_5_plugin.names` and (for the defaults of fields a
``config.json`` leaves out) ``Spark2_5Config``.

Every function works on whatever device its tensors are on; new index and
mask tensors are created on the device of the tensors they go with.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

import torch

from vllm_spark2_5_plugin.names import FULL, SLIDING

Weights = Mapping[str, torch.Tensor]
#: Keys and values ``[T, nKV, D]`` that a layer's queries see ahead of its own.
KeyValue = tuple[torch.Tensor, torch.Tensor]


# -- elementwise pieces -----------------------------------------------------------


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps) * w``, computed in at least float32."""
    work = torch.promote_types(x.dtype, torch.float32)
    xf = x.to(work)
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (out * weight.to(work)).to(x.dtype)


def gelu(x: torch.Tensor, hidden_act: str) -> torch.Tensor:
    """``gelu_pytorch_tanh`` (tanh approximation) or ``gelu`` (exact erf)."""
    if hidden_act == "gelu_pytorch_tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))
        return 0.5 * x * (1.0 + torch.tanh(inner))
    if hidden_act == "gelu":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    raise ValueError(f"unknown hidden_act {hidden_act!r}")


def linear(x: torch.Tensor, weights: Weights, name: str, bias: bool) -> torch.Tensor:
    """``x W^T (+ b)`` with ``W = weights[name.weight]``, ``b = weights[name.bias]``."""
    out = x @ weights[f"{name}.weight"].T
    return out + weights[f"{name}.bias"] if bias else out


def top2_margins(logits: torch.Tensor) -> torch.Tensor:
    """Per row of ``logits [..., V]``: top-1 minus top-2 logit (``>= 0``)."""
    top2 = logits.topk(2, dim=-1).values
    return top2[..., 0] - top2[..., 1]


# -- RoPE ----------------------------------------------------------------------


#: The ``rope_type`` values the references implement.
REFERENCE_ROPE_TYPES = ("default", "linear")


def rope_inverse_frequencies(
    rope: Mapping[str, Any], head_dim: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Per-pair inverse frequencies (float64); ``linear`` divides positions."""
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in REFERENCE_ROPE_TYPES:
        raise ValueError(
            f"the reference implements rope_type {'/'.join(REFERENCE_ROPE_TYPES)}, "
            f"not {rope_type!r}"
        )
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64, device=device)
    inv_freq = 1.0 / (float(rope["rope_theta"]) ** (exponents / head_dim))
    if rope_type == "linear":
        inv_freq = inv_freq / float(rope["factor"])
    return inv_freq


def apply_rope(
    x: torch.Tensor, positions: torch.Tensor, rope: Mapping[str, Any]
) -> torch.Tensor:
    """Rotate-half (NeoX) RoPE of ``x [T, heads, D]`` at ``positions [T]``.

    Angles are computed in float64, then cast to ``x``'s dtype.
    """
    head_dim = x.shape[-1]
    positions = positions.to(device=x.device, dtype=torch.float64)
    inv_freq = rope_inverse_frequencies(rope, head_dim, x.device)
    angles = positions[:, None] * inv_freq
    cos = angles.cos()[:, None, :].to(x.dtype)
    sin = angles.sin()[:, None, :].to(x.dtype)
    first, second = x[..., : head_dim // 2], x[..., head_dim // 2 :]
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


# -- attention and its masks -----------------------------------------------------


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor
) -> torch.Tensor:
    """``softmax(q k^T / sqrt(D) + mask) v`` with GQA.

    q ``[Tq, nH, D]``, k/v ``[Tk, nKV, D]``, ``visible [Tq, Tk]`` True where a
    query sees a key. Query head h uses kv head ``h // (nH / nKV)`` (the kv
    heads are broadcast, not copied). Returns ``[Tq, nH, D]``.
    """
    t_q, n_q, d = q.shape
    n_kv = k.shape[1]
    grouped = q.reshape(t_q, n_kv, n_q // n_kv, d)
    scores = torch.einsum("qkgd,tkd->kgqt", grouped, k) / math.sqrt(d)
    scores = scores.masked_fill(~visible.to(scores.device), float("-inf"))
    out = torch.einsum("kgqt,tkd->qkgd", scores.softmax(-1), v)
    return out.reshape(t_q, n_q, d)


def causal_mask(positions: torch.Tensor, window: int | None) -> torch.Tensor:
    """``[T, T]``: a query at t sees keys ``t-W+1 .. t`` (``0 .. t`` if no W)."""
    q_pos, k_pos = positions[:, None], positions[None, :]
    visible = k_pos <= q_pos
    if window is not None:
        visible &= k_pos > q_pos - window
    return visible


def block_mask(
    context_len: int,
    block_len: int,
    window: int | None,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """``[B, L+B]``, no causal order: every block query sees the same keys.

    Those are positions ``max(0, L-W) .. L+B-1`` (``0 .. L+B-1`` if no W): the
    last ``W`` context positions and the whole block.
    """
    first = 0 if window is None else max(0, context_len - window)
    key_pos = torch.arange(context_len + block_len, device=device)
    return (key_pos >= first)[None, :].expand(block_len, -1)


# -- config and checkpoint --------------------------------------------------------


@functools.cache
def config_defaults() -> dict[str, Any]:
    """The defaults ``Spark2_5Config`` gives the fields a ``config.json`` may
    leave out (``head_dim``, ``sliding_window``, ...; not those defaulting to
    None), read from it."""
    from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config

    return {
        name: getattr(Spark2_5Config, name)
        for name in Spark2_5Config.__annotations__
        if not name.startswith("_")
        and isinstance(getattr(Spark2_5Config, name, None), (bool, int, float, str))
    }


def with_config_defaults(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` with ``Spark2_5Config``'s default for every field it omits."""
    return {**config_defaults(), **raw}


def unsupported_rope(
    rope_parameters: Mapping[str, Mapping[str, Any]], layer_types: Any
) -> str | None:
    """Which of ``layer_types`` use a ``rope_type`` the references do not
    implement (one line), or None."""
    types = {t: rope_parameters[t].get("rope_type", "default") for t in layer_types}
    found = {t: r for t, r in types.items() if r not in REFERENCE_ROPE_TYPES}
    if not found:
        return None
    used = ", ".join(f"{t} layers use rope_type {r!r}" for t, r in found.items())
    return (
        f"{used}; the reference implements rope_type "
        f"{'/'.join(REFERENCE_ROPE_TYPES)} only"
    )


def resolve_rope_parameters(raw: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """RoPE settings per layer type from any spelling ``docs/model.md`` allows.

    Per-type dicts, a flat dict for both types, or the legacy top-level
    ``rope_theta``/``rope_scaling``; a missing theta gets the type's default
    (``Spark2_5Config``'s).
    """
    from vllm_spark2_5_plugin.configs.spark2_5 import DEFAULT_ROPE_THETA

    defaults = dict(DEFAULT_ROPE_THETA)
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
    """The ``config.json`` fields a Spark2_5 decoder stack reads."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_act: str
    rms_norm_eps: float
    sliding_window: int
    layer_types: list[str]
    rope_parameters: dict[str, dict[str, Any]]
    attention_bias: bool
    attention_output_gate: bool
    tie_word_embeddings: bool

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], **fields: Any) -> Self:
        """Read config.json (with ``Spark2_5Config``'s defaults for the fields
        it omits); ``fields`` win."""
        raw = with_config_defaults(raw)
        n_layers = raw["num_hidden_layers"]
        layer_types = raw.get("layer_types") or [
            FULL if i % 4 == 3 else SLIDING for i in range(n_layers)
        ]
        values: dict[str, Any] = dict(
            hidden_size=raw["hidden_size"],
            num_attention_heads=raw["num_attention_heads"],
            num_key_value_heads=raw["num_key_value_heads"],
            head_dim=raw["head_dim"],
            hidden_act=raw["hidden_act"],
            rms_norm_eps=raw["rms_norm_eps"],
            sliding_window=raw["sliding_window"],
            layer_types=list(layer_types),
            rope_parameters=resolve_rope_parameters(raw),
            attention_bias=bool(raw["attention_bias"]),
            attention_output_gate=raw["attention_output_gate"],
            tie_word_embeddings=raw["tie_word_embeddings"],
        )
        return cls(**{**values, **fields})

    def window(self, layer_type: str) -> int | None:
        """The attention window of a layer type (``None``: full attention)."""
        return self.sliding_window if layer_type == SLIDING else None


def read_checkpoint(
    path: str | Path, keep: Callable[[str], bool] | None = None
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``config.json`` as a dict and the safetensors tensors ``keep`` accepts."""
    from safetensors import safe_open

    path = Path(path)
    config = json.loads((path / "config.json").read_text())
    weights: dict[str, torch.Tensor] = {}
    for shard in sorted(path.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                if keep is None or keep(name):
                    weights[name] = f.get_tensor(name)
    return config, weights


def place_weights(
    weights: Weights,
    dtype: torch.dtype,
    device: torch.device | str,
    keep: Callable[[str], bool],
) -> dict[str, torch.Tensor]:
    """The tensors ``keep`` accepts, in ``dtype`` on ``device``."""
    return {
        name: t.to(device=device, dtype=dtype)
        for name, t in weights.items()
        if keep(name)
    }


class ReferenceModel:
    """One checkpoint's tensors in one dtype on one device, and its config.

    A subclass names the tensors it reads (:meth:`reads`) and its config
    class; the embedding and LM head are the target's, shared by the draft.
    """

    config_class: ClassVar[type[ReferenceConfig]] = ReferenceConfig

    def __init__(
        self,
        config: Mapping[str, Any],
        weights: Weights,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str = "cpu",
    ) -> None:
        self.config = self.config_class.from_dict(config)
        self.dtype = dtype
        self.weights = place_weights(weights, dtype, device, self.reads)

    @staticmethod
    def reads(name: str) -> bool:
        """Whether the model reads the checkpoint tensor ``name``."""
        raise NotImplementedError

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str = "cpu",
    ) -> Self:
        """Read ``path`` (config.json + safetensors) into ``dtype`` on ``device``."""
        return cls(*read_checkpoint(path, cls.reads), dtype, device)

    @property
    def embed_tokens(self) -> torch.Tensor:
        return self.weights["model.embed_tokens.weight"]

    @property
    def lm_head(self) -> torch.Tensor:
        if self.config.tie_word_embeddings:
            return self.embed_tokens
        return self.weights["lm_head.weight"]

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.device

    def here(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` in the model's dtype on its device."""
        return x.to(device=self.device, dtype=self.dtype)


# -- the decoder layer ------------------------------------------------------------


def key_value(
    x: torch.Tensor,
    positions: torch.Tensor,
    weights: Weights,
    prefix: str,
    config: ReferenceConfig,
    layer_type: str,
) -> KeyValue:
    """``RoPE(x Wk (+bk))`` and ``x Wv (+bv)``, each ``[T, nKV, D]``."""
    n_kv, d, bias = config.num_key_value_heads, config.head_dim, config.attention_bias
    k = linear(x, weights, f"{prefix}self_attn.k_proj", bias).view(-1, n_kv, d)
    v = linear(x, weights, f"{prefix}self_attn.v_proj", bias).view(-1, n_kv, d)
    return apply_rope(k, positions, config.rope_parameters[layer_type]), v


def decoder_layer(
    h: torch.Tensor,
    positions: torch.Tensor,
    weights: Weights,
    prefix: str,
    config: ReferenceConfig,
    layer_type: str,
    visible: torch.Tensor,
    context: KeyValue | None = None,
) -> torch.Tensor:
    """One pre-norm Spark2_5 decoder layer on ``h [T, H]`` at ``positions [T]``.

    ``context``: keys/values ``[Tc, nKV, D]`` the queries see ahead of the
    layer's own (the DSpark draft's context); ``visible [T, Tc+T]`` says which
    keys each query sees, the ``Tc`` context keys first. The target passes no
    context and :func:`causal_mask`.
    """
    cfg = config
    n_q, d = cfg.num_attention_heads, cfg.head_dim
    x = rms_norm(h, weights[f"{prefix}input_layernorm.weight"], cfg.rms_norm_eps)
    q = linear(x, weights, f"{prefix}self_attn.q_proj", cfg.attention_bias)
    q = apply_rope(q.view(-1, n_q, d), positions, cfg.rope_parameters[layer_type])
    k, v = key_value(x, positions, weights, prefix, cfg, layer_type)
    if context is not None:
        k, v = torch.cat([context[0], k]), torch.cat([context[1], v])
    a = attention(q, k, v, visible)
    if cfg.attention_output_gate:
        gate = torch.sigmoid(linear(x, weights, f"{prefix}self_attn.g_proj", False))
        a = a * gate[..., None]
    a = a.reshape(h.shape[0], n_q * d)
    h = h + linear(a, weights, f"{prefix}self_attn.o_proj", False)
    x = rms_norm(
        h, weights[f"{prefix}post_attention_layernorm.weight"], cfg.rms_norm_eps
    )
    up = linear(x, weights, f"{prefix}mlp.up_proj", False)
    mlp = gelu(linear(x, weights, f"{prefix}mlp.gate_proj", False), cfg.hidden_act) * up
    return h + linear(mlp, weights, f"{prefix}mlp.down_proj", False)
