# SPDX-License-Identifier: Apache-2.0
"""Checkpoint I/O of the DSpark trainer: draft tensors and ``dspark_*`` fields.

Find and read the draft tensors of a checkpoint; write a copy of it with a new
draft and its ``dspark_*`` config fields.

See ``docs/dspark_training.md``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from vllm_spark2_5_plugin.names import DRAFT_WEIGHT_PREFIXES, DSPARK_ALIASES, MODEL_TYPE

INDEX = "model.safetensors.index.json"
DRAFT_SHARD = "model-dspark-draft.safetensors"


def _from_shards(path: Path, keep, read) -> dict[str, Any]:
    """``read(file, name)`` of every tensor whose name ``keep`` accepts, over
    the checkpoint's shards."""
    from safetensors import safe_open

    out = {}
    for shard in sorted(path.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            out.update({n: read(f, n) for n in f.keys() if keep(n)})  # noqa: SIM118
    return out


def read_tensors(path: Path, keep) -> dict[str, torch.Tensor]:
    """The tensors of every shard whose name ``keep`` accepts."""
    return _from_shards(path, keep, lambda f, n: f.get_tensor(n))


def _draft(path: Path, prefix: str, read) -> dict[str, Any]:
    found = _from_shards(path, lambda n: n.startswith(prefix), read)
    return {n[len(prefix) :]: value for n, value in found.items()}


def read_draft(path: Path, prefix: str) -> dict[str, torch.Tensor]:
    """The draft tensors under ``prefix``, named without it."""
    return _draft(path, prefix, lambda f, n: f.get_tensor(n))


def draft_tensor_shapes(path: Path, prefix: str) -> dict[str, tuple[int, ...]]:
    """The shapes of the draft tensors under ``prefix`` (named without it),
    read from the shard headers only."""
    return _draft(path, prefix, lambda f, n: tuple(f.get_slice(n).get_shape()))


def read_target_config(path: Path) -> dict[str, Any]:
    """``config.json`` of the Spark2_5 checkpoint at ``path``; ``SystemExit``
    with the reason when ``path`` is not one."""
    config = path / "config.json"
    if not config.is_file():
        raise SystemExit(f"{path} is not a checkpoint directory: no config.json")
    try:
        raw = json.loads(config.read_text())
    except json.JSONDecodeError as exc:
        raise SystemExit(f"{config} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict) or raw.get("model_type") != MODEL_TYPE:
        found = raw.get("model_type") if isinstance(raw, dict) else None
        raise SystemExit(
            f"{path} is not a Spark2_5 checkpoint (model_type {found!r}, "
            f"expected {MODEL_TYPE!r})"
        )
    return raw


def checked_config(path: Path, raw: dict[str, Any]) -> Any:
    """``raw`` (the config.json of checkpoint ``path``) read as vLLM reads it:
    a ``Spark2_5Config``, with its defaults for the fields ``raw`` omits.
    ``ValueError`` ``"PATH/config.json: <why>"`` naming the field when the
    config is one vLLM would refuse. Only the target's fields are checked
    here (the ``dspark_*`` ones by ``read_dspark_settings``)."""
    from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config

    try:
        return Spark2_5Config.from_dict(raw)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path / 'config.json'}: {exc}") from None


def unreadable_weights(file: Path, exc: Exception) -> str:
    """The one line for a weight file safetensors cannot read."""
    return f"{file} is not a readable safetensors file ({exc}); restore it"


def weight_shapes(
    path: Path, files: list[Path] | None = None
) -> dict[str, tuple[tuple[int, ...], Path]]:
    """Every tensor of the checkpoint's ``files`` (default: its
    ``*.safetensors`` files, which the references read) -> ``(shape, file)``,
    from the file headers only. ``ValueError`` naming the file when one is
    not a readable safetensors file (truncated, say), instead of a
    ``SafetensorError`` traceback."""
    from safetensors import SafetensorError, safe_open

    found: dict[str, tuple[tuple[int, ...], Path]] = {}
    for shard in sorted(path.glob("*.safetensors")) if files is None else files:
        try:
            with safe_open(str(shard), framework="pt") as f:
                for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                    found[name] = (tuple(f.get_slice(name).get_shape()), shard)
        except (OSError, SafetensorError) as exc:
            raise ValueError(unreadable_weights(shard, exc)) from None
    return found


def weights_problem(
    path: Path,
    config: Any,
    raw: dict[str, Any],
    draft: tuple[Any, str] | None = None,
) -> str | None:
    """Why the weights of checkpoint ``path`` cannot be read as its config
    (``config``, a ``Spark2_5Config``; ``raw``, config.json as written)
    describes them, in one line, or None: a shard that is not a readable
    safetensors file, a target tensor that is missing or of another shape
    and, with ``draft`` = ``(DSpark settings, prefix)``, the same of the
    draft's tensors. From the file headers only, before any work: found
    later, they would end the tools in a ``KeyError`` or ``SafetensorError``
    traceback after ``--overwrite`` had deleted the earlier output."""
    from vllm_spark2_5_plugin.models.checkpoint_tables import (
        draft_tensors,
        target_tensors,
    )

    try:
        found = weight_shapes(path)
    except ValueError as exc:
        return str(exc)
    if not found:
        return (
            f"{path} has no weights (no *.safetensors file with tensors): "
            "give a complete checkpoint"
        )
    expected = target_tensors(config)
    if draft is not None:
        settings, prefix = draft
        for name, want in draft_tensors(config, settings).items():
            expected[prefix + name.removeprefix("model.")] = want
    return table_problem(path, expected, found, config, raw)


def table_problem(
    path: Path,
    expected: dict[str, Any],
    found: dict[str, tuple[tuple[int, ...], Path]],
    config: Any,
    raw: dict[str, Any],
    fallback: str = "give a complete checkpoint",
) -> str | None:
    """The first tensor of ``expected`` (name -> ``Expected``) that ``found``
    (name -> ``(shape, file)``, :func:`weight_shapes`) lacks or holds in
    another shape, in one line naming the config fields behind the shape
    (and those that took their defaults: ``config``, config.json ``raw``);
    ``fallback`` is the advice for a missing tensor without a hint of its
    own. ``None`` if every tensor is there in its shape."""
    from vllm_spark2_5_plugin.models.checkpoint_tables import (
        TARGET_HINTS,
        defaults_note,
    )

    missing = [name for name in expected if name not in found]
    if missing:
        name = missing[0]
        more = f" ({len(missing)} tensors missing)" if len(missing) > 1 else ""
        return (
            f"{path} lacks the tensor {name} ({expected[name].describe()}) that "
            f"vLLM reads{more}; {TARGET_HINTS.get(name, fallback)}"
        )
    for name, want in expected.items():
        shape, file = found[name]
        if shape != want.shape:
            return (
                f"{name} in {file} has shape {shape}, but config.json gives "
                f"{want.describe()}: the checkpoint and config.json disagree; fix "
                "whichever is wrong"
                + defaults_note(config, want.differing_fields(shape), raw)
            )
    return None


def reference_input_problem(
    path: Path, raw: dict[str, Any], draft_layer_types: Any = ()
) -> str | None:
    """Why the references cannot read the checkpoint at ``path`` (config.json
    ``raw``) as it is served, in one line, or None: its weights are quantized
    (the references would read FP8 codes without their scales), or a layer
    type the target or the draft (``draft_layer_types``) uses has a RoPE type
    the references do not implement."""
    from vllm_spark2_5_plugin.references.layers import (
        ReferenceConfig,
        unsupported_rope,
    )

    if raw.get("quantization_config") is not None:
        method = raw["quantization_config"]
        method = method.get("quant_method") if isinstance(method, dict) else method
        return (
            f"{path} is a quantized checkpoint (quantization_config, "
            f"{method!r}); the references read only unquantized weights: "
            "train and measure on the unquantized checkpoint and quantize "
            "afterwards (python -m vllm_spark2_5_plugin.tools.quantize_fp8)"
        )
    config = ReferenceConfig.from_dict(raw)
    problem = unsupported_rope(
        config.rope_parameters, [*config.layer_types, *draft_layer_types]
    )
    return None if problem is None else f"{path}: {problem}"


def read_target_input(path: Path) -> tuple[dict[str, Any], Any]:
    """``(config.json, its checked config)`` of the target checkpoint a DSpark
    tool reads, after every check that needs no settings: a Spark2_5
    checkpoint directory (:func:`read_target_config`), fields as vLLM reads
    them (:func:`checked_config`), a checkpoint the references read as it is
    served (:func:`reference_input_problem`) and the target tensors the tools
    read (:func:`weights_problem`). ``ValueError`` with the first problem."""
    try:
        raw = read_target_config(path)
    except SystemExit as exc:  # not a Spark2_5 checkpoint directory
        raise ValueError(str(exc)) from None
    config = checked_config(path, raw)
    problem = reference_input_problem(path, raw) or weights_problem(path, config, raw)
    if problem is not None:
        raise ValueError(problem)
    return raw, config


def draft_prefix(path: Path) -> str | None:
    """The one draft prefix the checkpoint's tensors use (``None``: no draft);
    ``ValueError`` for several, or for an unreadable shard
    (:func:`weight_shapes`)."""
    names = weight_shapes(path)
    found = {p for n in names for p in DRAFT_WEIGHT_PREFIXES if n.startswith(p)}
    if len(found) > 1:
        raise ValueError(f"{path} has draft tensors under several prefixes {found}")
    return found.pop() if found else None


def write_checkpoint(
    src: Path,
    dst: Path,
    draft: dict[str, torch.Tensor],
    prefix: str,
    fields: dict[str, Any],
) -> None:
    """``dst`` = ``src`` with every old draft tensor dropped and ``draft`` added.

    One unindexed shard: the draft goes into it. Otherwise the draft gets its
    own shard, ``model-dspark-draft.safetensors``, listed in the index. Draft
    tensors take the dtype of the target's embedding. config.json gets the
    ``dspark_*`` fields (and any alias spelling present is set alike).
    """
    from safetensors.torch import load_file, save_file

    is_draft = lambda n: n.startswith(DRAFT_WEIGHT_PREFIXES)  # noqa: E731
    shutil.copytree(
        src,
        dst,
        ignore=shutil.ignore_patterns("*.safetensors", INDEX, "train_dspark.json"),
        dirs_exist_ok=True,
    )
    shards = sorted(p.name for p in src.glob("*.safetensors") if p.name != DRAFT_SHARD)
    embed = read_tensors(src, lambda n: n == "model.embed_tokens.weight")
    dtype = next(iter(embed.values())).dtype
    new = {
        prefix + n: t.detach().to("cpu", dtype).contiguous() for n, t in draft.items()
    }
    merge = len(shards) == 1 and not (src / INDEX).exists()
    for name in shards:
        tensors = load_file(str(src / name))
        kept = {n: t for n, t in tensors.items() if not is_draft(n)}
        if merge:
            kept |= new
        if merge or len(kept) != len(tensors):
            save_file(kept, str(dst / name), metadata={"format": "pt"})
        else:
            shutil.copy2(src / name, dst / name)
    if not merge:
        save_file(new, str(dst / DRAFT_SHARD), metadata={"format": "pt"})
        if (src / INDEX).exists():
            index = json.loads((src / INDEX).read_text())
            wmap = {n: f for n, f in index["weight_map"].items() if not is_draft(n)}
            index["weight_map"] = wmap | dict.fromkeys(new, DRAFT_SHARD)
            (dst / INDEX).write_text(json.dumps(index, indent=2) + "\n")
    config = with_dspark_fields(json.loads((src / "config.json").read_text()), fields)
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def with_dspark_fields(
    config: dict[str, Any], fields: dict[str, Any]
) -> dict[str, Any]:
    """``config`` with the ``dspark_*`` ``fields`` set, and any alias spelling
    it has set alike (a copy)."""
    config = dict(config)
    for name, value in fields.items():
        config[name] = value
        if DSPARK_ALIASES.get(name) in config:
            config[DSPARK_ALIASES[name]] = value
    return config


def load_tokenizer(path: str | Path):
    """The checkpoint's tokenizer, through Transformers' ``AutoTokenizer``.

    Spark2_5Config is registered with ``AutoConfig`` first: AutoTokenizer reads
    ``config.json``, and without the registration Transformers falls back to a
    bare config and warns that the model type does not match.
    """
    from transformers import AutoConfig, AutoTokenizer

    from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
    from vllm_spark2_5_plugin.names import MODEL_TYPE

    AutoConfig.register(MODEL_TYPE, Spark2_5Config, exist_ok=True)
    return AutoTokenizer.from_pretrained(str(path))


def noise_token_id(path: Path) -> tuple[int | None, str | None]:
    """The tokenizer's mask token (or ``<|mask|>``), the default noise token,
    as ``(id, None)``; ``(None, why)`` where the tokenizer has none or does
    not load (Transformers raises plain ``ValueError``/``OSError`` for a
    missing or a broken tokenizer alike, so ``why`` carries its message)."""
    try:
        tok = load_tokenizer(path)
    except Exception as exc:  # noqa: BLE001
        why = " ".join(str(exc).split())
        return None, f"its tokenizer did not load: {type(exc).__name__}: {why}"
    if tok.mask_token_id is not None:
        return tok.mask_token_id, None
    ids = tok.convert_tokens_to_ids(["<|mask|>"])
    if ids[0] is None or ids[0] == tok.unk_token_id:
        return None, "its tokenizer has no mask token and no <|mask|>"
    return ids[0], None
