# SPDX-License-Identifier: Apache-2.0
"""A Spark2_5 checkpoint rewritten as a vLLM in-tree architecture of equal shapes.

Used for target-only throughput comparisons (``make_checkpoint --in-tree``):
the same weights and tokenizer in the layout of Llama or Gemma3, as described
in ``benchmarks/dspark_serving.md``.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import torch

from vllm_spark2_5_plugin.configs.spark2_5 import SIZE_FIELDS, Spark2_5Config
from vllm_spark2_5_plugin.names import DRAFT_WEIGHT_PREFIXES, SLIDING
from vllm_spark2_5_plugin.tools.dspark_checkpoint import (
    read_target_config,
    unreadable_weights,
    weight_shapes,
)
from vllm_spark2_5_plugin.tools.make_checkpoint import IN_TREE_ARCHS
from vllm_spark2_5_plugin.tools.tiny_checkpoint import writing_into


def _weight_files(spark_dir: Path, num_layers: int) -> list[Path]:
    """The checkpoint's weight files; ``SystemExit`` when it has none, one
    cannot be read (truncated, not safetensors), or it lacks a tensor the
    copies are built from."""
    files = sorted(spark_dir.glob("*.safetensors"))
    if not files:
        raise SystemExit(f"{spark_dir} has no *.safetensors weights to copy")
    try:
        names = weight_shapes(spark_dir, files)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    needed = ["model.embed_tokens.weight", "model.norm.weight"] + [
        f"model.layers.{i}.post_attention_layernorm.weight" for i in range(num_layers)
    ]
    missing = [name for name in needed if name not in names]
    if missing:
        raise SystemExit(
            f"{spark_dir} is not a complete Spark2_5 checkpoint: no tensor "
            f"{missing[0]} ({len(missing)} missing)"
        )
    return files


def write_in_tree(
    spark_dir: str | Path, out_dir: str | Path, arch: str = "llama", overwrite=False
) -> Path:
    """Copy a Spark2_5 checkpoint's target into a vLLM in-tree architecture of
    equal shapes, with the same tokenizer (draft tensors are left out).
    ``SystemExit`` naming the problem when ``spark_dir`` is not a complete
    Spark2_5 checkpoint, before ``out_dir`` is touched. The weights are read
    before ``out_dir`` is touched too, and its ``config.json`` is written
    last, so a failed run never leaves a directory that looks like a
    checkpoint.

    * ``llama``: ``LlamaForCausalLM`` with ``layer_types``/``sliding_window``
      (vLLM's Llama reads both), the Spark2_5 tensors minus the head gate
      ``g_proj``; SiLU, as vLLM's Llama supports no other activation; one RoPE
      theta (the sliding layers').
    * ``gemma3``: ``Gemma3ForCausalLM`` (``gemma3_text``): GELU-tanh and
      per-layer-type RoPE as Spark2_5, no soft-capping, plus Gemma's extra
      norms (q/k norms, post-attention and post-MLP norms) and embedding
      scaling; norms stored as Gemma's ``1 + w`` offsets.
    """
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import save_file

    if arch not in IN_TREE_ARCHS:
        raise ValueError(f"unknown in-tree architecture {arch!r}: {IN_TREE_ARCHS}")
    spark_dir, out_dir = Path(spark_dir), Path(out_dir)
    raw = read_target_config(spark_dir)
    try:  # the fields' defaults filled in, and checked
        spark = Spark2_5Config.from_dict(raw)
    except ValueError as exc:
        raise SystemExit(f"{spark_dir / 'config.json'}: {exc}") from None
    files = _weight_files(spark_dir, spark.num_hidden_layers)
    shapes = {
        key: getattr(spark, key)
        for key in (
            *SIZE_FIELDS,
            "layer_types",
            "rms_norm_eps",
            "attention_bias",
            "tie_word_embeddings",
        )
    }
    ids = {
        "eos_token_id": raw.get("eos_token_id"),
        "pad_token_id": raw.get("pad_token_id"),
        "bos_token_id": raw.get("bos_token_id"),
    }
    dtype = raw.get("dtype") or raw.get("torch_dtype") or "bfloat16"
    # The RoPE the plugin serves: Spark2_5Config's reading of every spelling
    # config.json may use (per layer type, one flat set, or the legacy
    # top-level rope_theta / rope_scaling), each type's default theta filled
    # in. Read from config.json's dict instead, a legacy rope_theta was lost
    # and the copies rotated with the default thetas: another model.
    rope = copy.deepcopy(spark.rope_parameters)
    if arch == "llama":
        from transformers import LlamaConfig

        config = LlamaConfig(
            architectures=["LlamaForCausalLM"],
            hidden_act="silu",
            rope_parameters=rope[SLIDING],
            dtype=dtype,
            **shapes,
            **ids,
        )
    else:
        from transformers import Gemma3TextConfig

        config = Gemma3TextConfig(
            architectures=["Gemma3ForCausalLM"],
            hidden_activation="gelu_pytorch_tanh",
            rope_parameters=rope,
            query_pre_attn_scalar=spark.head_dim,
            final_logit_softcapping=None,
            attn_logit_softcapping=None,
            dtype=dtype,
            **shapes,
            **ids,
        )

    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                    if name.startswith(DRAFT_WEIGHT_PREFIXES) or ".g_proj." in name:
                        continue
                    tensors[name] = f.get_tensor(name)
        except (OSError, SafetensorError) as exc:
            raise SystemExit(unreadable_weights(file, exc)) from None
    if arch == "gemma3":
        ref = tensors["model.norm.weight"]
        for key in [k for k in tensors if k.endswith("norm.weight")]:
            tensors[key] = (tensors[key].float() - 1.0).to(ref.dtype)
        for i in range(spark.num_hidden_layers):
            p = f"model.layers.{i}."
            # Spark2_5's pre-MLP norm is Gemma's pre_feedforward_layernorm.
            tensors[f"{p}pre_feedforward_layernorm.weight"] = tensors.pop(
                f"{p}post_attention_layernorm.weight"
            )
            zeros = torch.zeros(spark.hidden_size, dtype=ref.dtype)
            tensors[f"{p}post_attention_layernorm.weight"] = zeros.clone()
            tensors[f"{p}post_feedforward_layernorm.weight"] = zeros.clone()
            for qk in ("q_norm", "k_norm"):
                tensors[f"{p}self_attn.{qk}.weight"] = torch.zeros(
                    spark.head_dim, dtype=ref.dtype
                )
    with writing_into(out_dir, overwrite):
        save_file(
            tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"}
        )
        for item in spark_dir.iterdir():
            if item.name.startswith(("tokenizer", "special_tokens")) or item.name in (
                "chat_template.jinja",
                "generation_config.json",
            ):
                shutil.copy(item, out_dir / item.name)
        summary = {
            "from": str(spark_dir),
            "arch": config.architectures[0],
            "parameters": sum(t.numel() for t in tensors.values()),
        }
        (out_dir / "make_checkpoint.json").write_text(
            json.dumps(summary, indent=2) + "\n"
        )
        # Last: config.json marks the directory as a checkpoint.
        config.save_pretrained(out_dir)
    return out_dir


# -- command -------------------------------------------------------------------
