# SPDX-License-Identifier: Apache-2.0
"""What a Spark2_5 checkpoint holds: every tensor the target and its DSpark
draft read, with its full shape and the ``config.json`` field behind each
dimension (the layout of ``docs/model.md`` and ``docs/dspark.md``).

Plain functions of the config, importing neither vLLM nor the model code:
the load-time checks (:mod:`~vllm_spark2_5_plugin.models.weight_checks`)
and the FP8 tool, which runs in llm-compressor's environment without vLLM,
read the same table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Expected:
    """The full checkpoint shape of a tensor and the config field behind each
    dimension (``"num_key_value_heads*head_dim"`` for a product)."""

    shape: tuple[int, ...]
    fields: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.shape} = ({', '.join(self.fields)})"

    def differing_fields(self, found: tuple[int, ...]) -> list[str]:
        """The config fields behind the dimensions ``found`` does not match
        (every field where the number of dimensions differs)."""
        if len(found) != len(self.shape):
            dims = self.fields
        else:
            dims = tuple(
                f
                for f, want, got in zip(self.fields, self.shape, found, strict=True)
                if want != got
            )
        return [name for dim in dims for name in dim.split("*")]


def defaults_note(
    config: Any, fields: Iterable[str], given: Collection[str] | None = None
) -> str:
    """``"; head_dim is not in config.json: its default, 128, applies"`` for
    each of ``fields`` whose value on ``config`` is its config class's
    default, so a shape error points at a field the user may never have
    written; ``given`` is config.json's keys where known. ``""`` if none."""
    if not dataclasses.is_dataclass(config):
        return ""
    defaults = {
        f.name: f.default
        for f in dataclasses.fields(config)
        if f.default is not dataclasses.MISSING
    }
    notes = []
    for name in dict.fromkeys(fields):
        value = getattr(config, name, None)
        if name not in defaults or value != defaults[name]:
            continue
        if given is None:
            notes.append(
                f"{name} = {value!r} is its default: config.json must set it "
                "if the checkpoint was made with another"
            )
        elif name not in given:
            notes.append(
                f"{name} is not in config.json: its default, {value!r}, applies"
            )
    return "".join(f"; {note}" for note in notes)


def _expected(*dims: tuple[int, str]) -> Expected:
    return Expected(tuple(size for size, _ in dims), tuple(f for _, f in dims))


def decoder_layer_tensors(config: Any, prefix: str) -> dict[str, Expected]:
    """One Spark2_5 decoder layer's tensors under ``prefix`` (``...layers.i.``)."""
    d = config.head_dim
    hidden = (config.hidden_size, "hidden_size")
    q = (config.num_attention_heads * d, "num_attention_heads*head_dim")
    kv = (config.num_key_value_heads * d, "num_key_value_heads*head_dim")
    inter = (config.intermediate_size, "intermediate_size")
    tensors = {
        "input_layernorm.weight": _expected(hidden),
        "self_attn.q_proj.weight": _expected(q, hidden),
        "self_attn.k_proj.weight": _expected(kv, hidden),
        "self_attn.v_proj.weight": _expected(kv, hidden),
        "self_attn.o_proj.weight": _expected(hidden, q),
        "post_attention_layernorm.weight": _expected(hidden),
        "mlp.gate_proj.weight": _expected(inter, hidden),
        "mlp.up_proj.weight": _expected(inter, hidden),
        "mlp.down_proj.weight": _expected(hidden, inter),
    }
    if config.attention_bias:
        tensors["self_attn.q_proj.bias"] = _expected(q)
        tensors["self_attn.k_proj.bias"] = _expected(kv)
        tensors["self_attn.v_proj.bias"] = _expected(kv)
    if config.attention_output_gate:
        heads = (config.num_attention_heads, "num_attention_heads")
        tensors["self_attn.g_proj.weight"] = _expected(heads, hidden)
    return {prefix + name: shape for name, shape in tensors.items()}


def target_tensors(config: Any) -> dict[str, Expected]:
    """Every checkpoint tensor of the target (all layers, every PP stage)."""
    vocab_by_hidden = _expected(
        (config.vocab_size, "vocab_size"), (config.hidden_size, "hidden_size")
    )
    tensors = {"model.embed_tokens.weight": vocab_by_hidden}
    for i in range(config.num_hidden_layers):
        tensors.update(decoder_layer_tensors(config, f"model.layers.{i}."))
    tensors["model.norm.weight"] = _expected((config.hidden_size, "hidden_size"))
    if not config.tie_word_embeddings:
        tensors["lm_head.weight"] = vocab_by_hidden
    return tensors


def classifier_head_tensor(config: Any, num_labels: int) -> Expected:
    """``score.weight``, the classification head of ``--convert classify``."""
    return _expected((num_labels, "num_labels"), (config.hidden_size, "hidden_size"))


#: Advice shown with a missing tensor.
TARGET_HINTS = {
    "lm_head.weight": "if the LM head is the input embedding, set "
    "tie_word_embeddings: true in config.json",
    "score.weight": "--convert classify reads a classification head from the "
    "checkpoint; a reranker scored from two tokens' logits is converted online "
    'with --hf-overrides \'{"classifier_from_token": [NO, YES], "method": '
    '"from_2_way_softmax"}\'',
}


def draft_tensors(config: Any, settings: Any) -> dict[str, Expected]:
    """The DSpark draft's tensors as ``model.<name>`` (its prefix removed)."""
    hidden = (config.hidden_size, "hidden_size")
    rank = (settings.markov_rank, "dspark_markov_rank")
    vocab = (config.vocab_size, "vocab_size")
    num_aux = len(settings.target_layer_ids)
    aux = (num_aux * config.hidden_size, "len(dspark_target_layer_ids)*hidden_size")
    tensors = {
        "main_proj.weight": _expected(hidden, aux),
        "main_norm.weight": _expected(hidden),
        "norm.weight": _expected(hidden),
        "markov_head.markov_w1.weight": _expected(vocab, rank),
        "markov_head.markov_w2.weight": _expected(vocab, rank),
    }
    for j in range(len(settings.layer_types)):
        tensors.update(decoder_layer_tensors(config, f"layers.{j}."))
    if settings.markov_head_type == "rnn":
        tensors["markov_head.rnn_proj.weight"] = _expected(rank, rank)
    if settings.enable_confidence_head:
        both = (config.hidden_size + settings.markov_rank, "hidden_size+markov_rank")
        tensors["confidence_head.proj.weight"] = _expected((1, "1"), both)
        tensors["confidence_head.proj.bias"] = _expected((1, "1"))
    return {"model." + name: shape for name, shape in tensors.items()}
