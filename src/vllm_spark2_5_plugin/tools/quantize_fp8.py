# SPDX-License-Identifier: Apache-2.0
"""Quantize a Spark2_5 checkpoint to FP8 with llm-compressor (compressed-tensors).

Runs in the separate llm-compressor environment (``tools/llmc-env.sh`` builds
``.venv-llmc``), not in vLLM's::

    .venv-llmc/bin/python -m vllm_spark2_5_plugin.tools.quantize_fp8 SRC DST

What it does:

1. builds :class:`Spark2_5ForQuantization`, a minimal Transformers
   ``PreTrainedModel`` whose modules carry exactly the checkpoint's tensor
   names (``model.layers.{i}.self_attn.q_proj`` ...), holding the TARGET's
   tensors only (no forward pass: the FP8_DYNAMIC scheme is data-free);
2. runs llm-compressor's ``oneshot`` with a ``QuantizationModifier``
   (``targets=["Linear"]``, ``scheme="FP8_DYNAMIC"``: per-channel static FP8
   weights, per-token dynamic FP8 activations) and saves the result in the
   compressed-tensors format with llm-compressor's ``save_pretrained``;
3. writes ``DST``: the quantized linear weights (``float8_e4m3fn``) and their
   ``weight_scale`` from that save; every other tensor of ``SRC`` (embeddings,
   LM head, norms, ``g_proj`` and EVERY DSpark draft tensor) copied through
   unchanged, byte for byte; ``SRC``'s ``config.json`` plus the
   ``quantization_config`` llm-compressor wrote (its ``ignore`` list extended
   so that vLLM keeps the draft's layers unquantized); and the tokenizer,
   chat template and generation config of ``SRC``.

Left unquantized on purpose: ``lm_head`` (as every llm-compressor FP8 recipe
does), ``g_proj`` (one output per head: tiny, sigmoid-gated, and its width
is not a multiple of 16 in small models, which FP8 GEMM kernels need), the
embeddings and norms (not ``Linear``), and the draft.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from vllm_spark2_5_plugin.names import DRAFT_WEIGHT_PREFIXES

SCHEMES = ("FP8_DYNAMIC",)
#: What the recipe leaves unquantized among the target's ``Linear`` modules.
RECIPE_IGNORE = ["lm_head", "re:.*self_attn\\.g_proj$"]
#: Files of SRC that are NOT copied as they are: the weights and the config
#: (everything else, tokenizer, chat template, generation config, is copied).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
WEIGHTS_FILE = "model.safetensors"


def is_draft(name: str) -> bool:
    return name.startswith(DRAFT_WEIGHT_PREFIXES)


def quantized_linear(name: str) -> bool:
    """Whether the recipe turns the checkpoint tensor ``name`` into FP8: a
    target decoder-layer projection weight other than ``g_proj``."""
    return (
        not is_draft(name)
        and re.fullmatch(
            r"model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)"
            r"\.weight",
            name,
        )
        is not None
    )


def draft_ignore_patterns(num_target_layers: int, names: list[str]) -> list[str]:
    """``ignore`` entries that keep the DSpark draft unquantized in vLLM.

    The checkpoint names the draft's tensors ``<prefix>...``; vLLM builds
    the plugin's draft with module names ``model.main_proj``,
    ``model.markov_head...``, ``model.confidence_head...`` and
    ``model.layers.{N + j}...`` (N target layers, j = 0 .. draft layers-1),
    and it matches the ``ignore`` list against those module names. Both
    spellings are listed (the draft layers counted from the checkpoint
    ``names``); none of them names a target module.
    """
    prefixes = "|".join(re.escape(p[:-1]) for p in DRAFT_WEIGHT_PREFIXES)
    patterns = [f"re:^({prefixes})\\..*"]
    draft_layers = {
        int(m.group(1))
        for name in names
        if is_draft(name)
        and (m := re.match(r"(?:draft_model|mtp|model\.mtp)\.layers\.(\d+)\.", name))
    }
    if not any(is_draft(name) for name in names):
        return patterns
    patterns.append("re:^model\\.(main_proj|markov_head|confidence_head)(\\..*)?$")
    if draft_layers:
        ids = "|".join(str(num_target_layers + j) for j in sorted(draft_layers))
        patterns.append(f"re:^model\\.layers\\.({ids})\\..*")
    return patterns


def dequantize(weights: dict[str, Any], dtype: Any = None) -> dict[str, Any]:
    """The checkpoint's tensors with every FP8 weight replaced by
    ``weight * weight_scale`` (per output channel) and the scales dropped:
    what a quantized checkpoint means, in ``dtype`` (default float32).
    Plain torch: works in any environment."""
    import torch

    dtype = dtype or torch.float32
    out = {}
    for name, tensor in weights.items():
        if name.endswith(("weight_scale", "input_scale", "weight_zero_point")):
            continue
        scale = weights.get(name.removesuffix("weight") + "weight_scale")
        if name.endswith(".weight") and scale is not None:
            out[name] = tensor.to(dtype) * scale.to(dtype)
        else:
            out[name] = tensor
    return out


# ---------------------------------------------------------------------------
# The Transformers model llm-compressor works on
# ---------------------------------------------------------------------------


def build_model(config_dict: dict[str, Any], tensors: dict[str, Any], src: Path):
    """A ``PreTrainedModel`` whose parameters are ``tensors`` (target only),
    each at the module path of its checkpoint name. ``*_proj`` and
    ``lm_head`` become ``nn.Linear``, ``embed_tokens`` an ``nn.Embedding``,
    anything else (norms) a parameter holder."""
    import torch
    from torch import nn
    from transformers import AutoConfig, PretrainedConfig, PreTrainedModel

    class Spark2_5QuantConfig(PretrainedConfig):
        model_type = "spark2_5"

    class Holder(nn.Module):
        """A module that only holds parameters (RMSNorm weights)."""

    class Spark2_5ForQuantization(PreTrainedModel):
        config_class = Spark2_5QuantConfig
        base_model_prefix = "model"
        _no_split_modules: list[str] = []

        def __init__(self, config, weights: dict[str, torch.Tensor]):
            super().__init__(config)
            for name, tensor in weights.items():
                *path, leaf = name.split(".")
                parent = self
                for i, part in enumerate(path):
                    child = parent._modules.get(part)
                    if child is None:
                        child = _new_module(path[: i + 1], weights)
                        parent.add_module(part, child)
                    parent = child
                parent._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)
            self.post_init()

        def forward(self, *args, **kwargs):  # noqa: D401 - data-free only
            raise NotImplementedError(
                "Spark2_5ForQuantization has no forward pass: only data-free "
                "schemes (FP8_DYNAMIC) are supported"
            )

        def _init_weights(self, module):  # weights come from the checkpoint
            return

    def _new_module(path: list[str], weights: dict[str, torch.Tensor]) -> nn.Module:
        stem = ".".join(path)
        weight = weights.get(f"{stem}.weight")
        if weight is None:
            return nn.Module()
        meta = {"device": "meta", "dtype": weight.dtype}
        if path[-1] == "embed_tokens":
            return nn.Embedding(*weight.shape, **meta)
        if path[-1].endswith("_proj") or path[-1] == "lm_head":
            bias = f"{stem}.bias" in weights
            return nn.Linear(weight.shape[1], weight.shape[0], bias=bias, **meta)
        return Holder()

    fields = {
        k: v
        for k, v in config_dict.items()
        if k not in ("architectures", "model_type", "quantization_config")
    }
    # oneshot re-reads config.json from name_or_path with AutoConfig.
    AutoConfig.register(
        Spark2_5QuantConfig.model_type, Spark2_5QuantConfig, exist_ok=True
    )
    config = Spark2_5QuantConfig(**fields)
    config.architectures = list(config_dict.get("architectures") or [])
    config.name_or_path = str(src)
    model = Spark2_5ForQuantization(config, tensors)
    model.eval()
    return model


# ---------------------------------------------------------------------------
# The whole run
# ---------------------------------------------------------------------------


def weight_files(src: Path) -> list[Path]:
    """The safetensors files of checkpoint ``src``: those its index names, or
    its single ``model.safetensors``. ``ValueError`` naming the file when the
    index is not valid JSON, has no weight map, or names a file ``src`` lacks
    (rather than a ``FileNotFoundError`` or ``JSONDecodeError`` traceback
    from the middle of the run)."""
    index = src / INDEX_FILES[0]
    if not index.is_file():
        return [src / WEIGHTS_FILE]
    try:
        data = json.loads(index.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{index} is not valid JSON ({exc}); rewrite it or remove it (the "
            f"tool then reads {WEIGHTS_FILE})"
        ) from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(file, str) for file in weight_map.values()
    ):
        raise ValueError(
            f"{index} has no weight_map of tensor name -> file name; rewrite it "
            f"or remove it (the tool then reads {WEIGHTS_FILE})"
        )
    files = [src / name for name in sorted(set(weight_map.values()))]
    for file in files:
        if not file.is_file():
            raise ValueError(
                f"{index} names the weight file {file.name}, which {src} lacks; "
                "restore the file or give a complete checkpoint"
            )
    return files


def _read_checkpoint(src: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    tensors: dict[str, Any] = {}
    for file in weight_files(src):
        tensors.update(load_file(str(file)))
    return tensors


def check_source(src: Path, raw: dict[str, Any]) -> None:
    """``ValueError`` (one line, naming the field, file or tensor) unless the
    weights of ``src`` are every tensor vLLM will read from the checkpoint,
    in the shape its config.json (``raw``) gives: the target's, and where
    the checkpoint carries a DSpark draft (tensors under a draft prefix,
    :func:`is_draft`) and config.json the ``dspark_*`` fields, the draft's.

    Read from the files' headers only, before any work: a source without,
    say, ``model.norm.weight`` would otherwise be quantized into an FP8
    checkpoint that vLLM serves with a norm of ones and no error.
    """
    from vllm_spark2_5_plugin.configs.dspark import (
        DSPARK_REQUIRED,
        read_dspark_settings,
    )
    from vllm_spark2_5_plugin.models.checkpoint_tables import (
        draft_tensors,
        target_tensors,
    )
    from vllm_spark2_5_plugin.names import DSPARK_ALIASES
    from vllm_spark2_5_plugin.tools.dspark_checkpoint import (
        checked_config,
        table_problem,
        weight_shapes,
    )

    config_file = src / "config.json"
    config = checked_config(src, raw)
    found = weight_shapes(src, weight_files(src))
    expected = target_tensors(config)

    # The draft: checked against its table only where config.json describes
    # one (without the dspark_* fields the draft's tensors are only copied).
    prefixes = sorted(
        {p for n in found for p in DRAFT_WEIGHT_PREFIXES if n.startswith(p)}
    )
    described = any(
        raw.get(field) is not None
        for field in (*DSPARK_REQUIRED, *(DSPARK_ALIASES[f] for f in DSPARK_REQUIRED))
    )
    if prefixes and described:
        if len(prefixes) > 1:
            raise ValueError(
                f"{src} has draft tensors under several prefixes {prefixes}; vLLM "
                "reads one: keep the draft under one of them"
            )
        try:
            settings = read_dspark_settings(config)
        except ValueError as exc:
            raise ValueError(f"{config_file}: {exc}") from None
        # The table names the draft's tensors model.<name>; the checkpoint
        # holds them under its prefix.
        for name, want in draft_tensors(config, settings).items():
            expected[prefixes[0] + name.removeprefix("model.")] = want

    problem = table_problem(
        src, expected, found, config, raw, "quantize a complete Spark2_5 checkpoint"
    )
    if problem is not None:
        raise ValueError(problem)


def check_directories(src: Path, dst: Path) -> None:
    """``ValueError`` unless ``src`` is an unquantized Spark2_5 checkpoint
    directory with its weights, complete and of the shapes its config.json
    gives (:func:`check_source`), and ``dst`` is a new or empty directory
    elsewhere, neither inside the other (the output never replaces a file)."""
    from vllm_spark2_5_plugin.tools.dspark_checkpoint import read_target_config
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import output_location_problem

    try:
        raw = read_target_config(src)
    except SystemExit as exc:
        raise ValueError(str(exc)) from None
    config = src / "config.json"
    if "quantization_config" in raw:
        raise ValueError(
            f"{src} is already quantized ({config} has a quantization_config); "
            "quantize the unquantized checkpoint"
        )
    if not any((src / name).is_file() for name in (WEIGHTS_FILE, INDEX_FILES[0])):
        raise ValueError(
            f"{src} has no {WEIGHTS_FILE} nor {INDEX_FILES[0]}: the tool reads "
            "safetensors checkpoints"
        )
    if dst.resolve() == src.resolve():
        raise ValueError(
            "the output directory must differ from the input: writing into it "
            "would replace the source checkpoint's weights"
        )
    if src.resolve() in dst.resolve().parents or dst.resolve() in src.resolve().parents:
        raise ValueError(
            f"the output directory {dst} must not contain or be inside the input {src}"
        )
    if dst.is_dir() and any(dst.iterdir()):
        raise ValueError(f"{dst} exists and is not an empty directory")
    # A file, a file above it, a place that cannot be written: found here,
    # not when the quantized weights are saved.
    problem = output_location_problem(dst, overwrite=True)
    if problem is not None:
        raise ValueError(problem)
    # Last, as it reads every weight file's header: the source has each
    # tensor the quantized checkpoint must carry, in its shape.
    check_source(src, raw)


def quantize(src: str | Path, dst: str | Path, scheme: str = "FP8_DYNAMIC") -> dict:
    """Quantize checkpoint ``src`` into ``dst`` (new or empty); return a
    summary (names of quantized and copied tensors, the quantization_config
    written)."""
    import torch
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from safetensors.torch import load_file, save_file

    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    src, dst = Path(src), Path(dst)
    check_directories(src, dst)
    config_dict = json.loads((src / "config.json").read_text())
    source = _read_checkpoint(src)
    target = {n: t.clone() for n, t in source.items() if not is_draft(n)}

    model = build_model(config_dict, target, src)
    recipe = QuantizationModifier(
        targets=["Linear"], scheme=scheme, ignore=list(RECIPE_IGNORE)
    )
    oneshot(model=model, recipe=recipe)

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, save_compressed=True)
        saved_config = json.loads((Path(tmp) / "config.json").read_text())
        saved: dict[str, torch.Tensor] = {}
        for file in sorted(Path(tmp).glob("*.safetensors")):
            saved.update(load_file(str(file)))

    qconfig = saved_config.get("quantization_config")
    if not qconfig or qconfig.get("quant_method") != "compressed-tensors":
        raise RuntimeError(
            f"llm-compressor wrote no compressed-tensors config: {qconfig}"
        )

    out: dict[str, torch.Tensor] = {}
    quantized: list[str] = []
    for name, tensor in source.items():
        if quantized_linear(name):
            weight = saved[name]
            if weight.dtype != torch.float8_e4m3fn:
                raise RuntimeError(f"{name} was not quantized to FP8: {weight.dtype}")
            out[name] = weight.contiguous()
            stem = name.removesuffix(".weight")
            extra = sorted(k for k in saved if k.startswith(stem + ".") and k != name)
            if f"{stem}.weight_scale" not in extra:
                raise RuntimeError(f"{name} has no weight_scale in the saved model")
            for key in extra:
                out[key] = saved[key].contiguous()
            quantized.append(name)
        else:
            # Copied from SRC; what llm-compressor saved of it must agree.
            if name in saved and not torch.equal(saved[name], tensor):
                raise RuntimeError(f"llm-compressor changed unquantized {name}")
            out[name] = tensor
    unexpected = sorted(
        k for k in saved if k not in out and not k.startswith(tuple(quantized))
    )
    if unexpected:
        raise RuntimeError(
            f"llm-compressor saved tensors not accounted for: {unexpected}"
        )

    qconfig = dict(qconfig)
    qconfig["ignore"] = list(qconfig.get("ignore") or []) + draft_ignore_patterns(
        int(config_dict["num_hidden_layers"]), list(source)
    )
    dst.mkdir(parents=True, exist_ok=True)
    save_file(out, str(dst / WEIGHTS_FILE), metadata={"format": "pt"})
    (dst / "config.json").write_text(
        json.dumps({**config_dict, "quantization_config": qconfig}, indent=2) + "\n"
    )
    copied_files = []
    for file in sorted(src.iterdir()):
        if (
            file.is_file()
            and file.name != "config.json"
            and file.name not in INDEX_FILES
            and not file.name.endswith(WEIGHT_SUFFIXES)
        ):
            shutil.copy2(file, dst / file.name)
            copied_files.append(file.name)
    copied = sorted(n for n in source if n not in quantized)
    return {
        "quantized": sorted(quantized),
        "copied": copied,
        "files": copied_files,
        "quantization_config": qconfig,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", help="unquantized Spark2_5 checkpoint directory")
    parser.add_argument("dst", help="directory to write the FP8 checkpoint to")
    parser.add_argument("--scheme", choices=SCHEMES, default="FP8_DYNAMIC")
    args = parser.parse_args(argv)
    try:
        check_directories(Path(args.src), Path(args.dst))
    except ValueError as exc:
        parser.error(str(exc))
    if importlib.util.find_spec("llmcompressor") is None:
        parser.error(
            "llm-compressor is not installed in this environment (its pins "
            "conflict with vLLM's): create its own with `bash tools/llmc-env.sh` "
            "and run this tool with .venv-llmc/bin/python"
        )
    summary = quantize(args.src, args.dst, args.scheme)
    print(
        f"wrote {args.dst}: {len(summary['quantized'])} FP8 linear weights, "
        f"{len(summary['copied'])} tensors copied unquantized"
    )


if __name__ == "__main__":
    main()
