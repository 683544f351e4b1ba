# SPDX-License-Identifier: Apache-2.0
"""Write a random Spark2_5 checkpoint of a named, realistic shape.

``small`` is a ~1.0B-parameter target (hidden 2048, 16 layers in the pattern
3 sliding : 1 full, 16 query / 4 KV heads of 128, GELU-tanh MLP of 7168,
sliding window 4096, 8192 positions, vocabulary 32768) with an untrained DSpark
draft (one sliding layer, rnn Markov head, block 7) that
``spark2_5-train-dspark`` can train. ``mini`` is the same recipe at tiny sizes,
for CPU tests. Everything is generated here, deterministically from ``--seed``,
with no download:

* weights: the tiny maker's random tensors (same formulas, same draw order:
  :func:`~vllm_spark2_5_plugin.tools.tiny_checkpoint.iter_random_weights`),
  except that the target's ``o_proj`` and ``down_proj`` are scaled by
  GPT-2's ``1/sqrt(2 * layers)`` (``--branch-scale``; see ``PRESETS``),
  cast to ``--dtype`` one tensor at a time and written to ONE
  ``model.safetensors`` (about 2.2 GB for ``small`` in bf16; vLLM and the
  draft trainer read a single file of any size, so no sharding);
* tokenizer: a byte-level BPE trained on a generated corpus (pseudo-words with
  a Zipf-like frequency, numbers, JSON and code lines) to exactly
  ``vocab_size`` tokens, so every id the model can emit is a real token that
  decodes, and vLLM's random benchmark dataset samples from the whole
  vocabulary;
* ``--in-tree llama|gemma3``: the same weights in the layout of a vLLM in-tree
  architecture of equal shapes (``OUT-llama``, ``OUT-gemma3``), with the same
  tokenizer, for target-only throughput comparisons.

    python -m vllm_spark2_5_plugin.tools.make_checkpoint OUT --preset small \\
        [--seed 0] [--dtype bfloat16] [--no-dspark] [--branch-scale S] \\
        [--in-tree llama] [--in-tree-only] [--set key=JSON ...] [--overwrite]

(also ``spark2_5-make-tiny-checkpoint OUT --preset small ...``). A summary with
the parameter counts and timings is written to ``OUT/make_checkpoint.json``.
With ``--in-tree-only`` the checkpoint at ``OUT`` is copied as it is, so the
options that shape a new one (``--preset``, ``--seed``, ``--dtype``, ``--set``,
``--no-dspark``, ``--dspark-prefix``, ``--branch-scale``) are refused with it.
``--set`` sets config fields only: the names of the options above are refused.

Every input is checked, and the weights are made in memory (shapes whose
weights exceed the machine's memory are refused up front), before ``OUT`` is
created or ``--overwrite`` empties it. ``config.json``, the file that marks a
directory as a checkpoint, is written last, and a run that fails (or is
interrupted with Ctrl-C) deletes what it wrote, so a half-written directory
never looks like a checkpoint.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import json
import math
import os
import random
import time
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from vllm_spark2_5_plugin.configs.checks import is_positive_int
from vllm_spark2_5_plugin.configs.dspark import DSparkSettings, read_dspark_settings
from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
from vllm_spark2_5_plugin.names import (
    DRAFT_WEIGHT_PREFIXES,
    DSPARK_ALIASES,
    DSPARK_FIELDS,
    FULL,
    SLIDING,
)
from vllm_spark2_5_plugin.tools.dspark_checkpoint import read_target_config
from vllm_spark2_5_plugin.tools.tiny_checkpoint import (
    EOS_TOKEN,
    NOISE_TOKEN,
    SPECIAL_TOKENS,
    TOKENIZER_CORPUS,
    add_checkpoint_arguments,
    build_tokenizer,
    checkpoint_config,
    generation_config,
    iter_random_weights,
    refuse_non_empty,
    seed_problem,
    writing_into,
)

_ROPE = {
    SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
    FULL: {"rope_type": "default", "rope_theta": 1_000_000.0},
}


def _layer_types(n: int) -> list[str]:
    """3 sliding : 1 full (every fourth layer full), as Spark2_5's default."""
    return [FULL if i % 4 == 3 else SLIDING for i in range(n)]


def _target_layer_ids(n: int) -> list[int]:
    """Three target layers spread over the depth (the trainer's default)."""
    return sorted({min(n - 1, 1 + round(k * max(n - 3, 0) / 2)) for k in range(3)})


def _preset(
    vocab: int, hidden: int, inter: int, layers: int, heads: int, kv: int, **rest: Any
) -> dict[str, Any]:
    config = {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "layer_types": _layer_types(layers),
        "rope_parameters": copy.deepcopy(_ROPE),
        "hidden_act": "gelu_pytorch_tanh",
        "attention_output_gate": True,
        "tie_word_embeddings": False,
        **{k: v for k, v in rest.items() if k not in ("dspark", "branch_scale")},
    }
    dspark = {
        "dspark_block_size": 7,
        "dspark_markov_head_type": "rnn",
        "dspark_enable_confidence_head": False,
        "dspark_layer_types": [SLIDING],
        "dspark_target_layer_ids": _target_layer_ids(layers),
        **rest.get("dspark", {}),
    }
    return {
        "config": config,
        "dspark": dspark,
        "branch_scale": rest.get("branch_scale", "gpt2"),
    }


#: Named shapes. ``config`` are Spark2_5 config.json fields, ``dspark`` the
#: draft's fields, ``branch_scale`` the scale of the residual-branch outputs
#: (``o_proj``, ``down_proj``): a number, or ``"gpt2"`` for GPT-2's
#: ``1/sqrt(2 * num_hidden_layers)``. With the tiny maker's scale (1.0) a deep
#: random target is so chaotic that a trained draft stays near acceptance
#: length 1.2 (benchmarks/dspark_serving.md), which leaves DSpark's speed-up
#: unmeasurable; GPT-2's scale keeps the logits as spread (the final norm
#: rescales the stream) and gives a draft something to learn.
PRESETS: dict[str, dict[str, Any]] = {
    # ~1.006B target parameters (+69M draft): Llama-3.2-1B-like widths.
    "small": _preset(
        32768,
        2048,
        7168,
        16,
        16,
        4,
        head_dim=128,
        sliding_window=4096,
        max_position_embeddings=8192,
        dspark={"dspark_markov_rank": 32},
    ),
    # The same recipe at tiny sizes (CPU tests, toy serving runs).
    "mini": _preset(
        1024,
        128,
        448,
        4,
        4,
        1,
        head_dim=32,  # the smallest head size vLLM's CPU attention supports
        sliding_window=64,
        max_position_embeddings=2048,
        dspark={"dspark_markov_rank": 8},
    ),
}

#: Fields the tokenizer decides.
TOKEN_ID_FIELDS = ("pad_token_id", "bos_token_id", "eos_token_id")
#: The fields an override may set: Spark2_5Config's own and the draft's
#: (aliases included).
SETTABLE_FIELDS = frozenset(
    (
        {f.name for f in dataclasses.fields(Spark2_5Config)}
        & set(Spark2_5Config.__annotations__)
    )
    - set(TOKEN_ID_FIELDS)
) | frozenset(DSPARK_FIELDS)


def preset_fields(
    preset: str, dspark: bool, overrides: dict[str, Any]
) -> dict[str, Any]:
    """The config fields of ``preset`` (with its draft's when ``dspark``)
    replaced by ``overrides``; ``ValueError`` naming a field the checkpoint
    cannot have. A new ``num_hidden_layers`` also gets the preset's layer
    types and draft target layers for that depth, unless given."""
    canonical = {alias: name for name, alias in DSPARK_ALIASES.items()}
    given: dict[str, Any] = {}
    for key, value in overrides.items():
        name = canonical.get(key, key)
        if name in TOKEN_ID_FIELDS:
            raise ValueError(f"{key} is taken from the tokenizer; it cannot be set")
        if name not in SETTABLE_FIELDS:
            close = difflib.get_close_matches(name, sorted(SETTABLE_FIELDS), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "see Spark2_5Config"
            raise ValueError(f"unknown config field {key!r} ({hint})")
        if not dspark and name in DSPARK_FIELDS:
            raise ValueError(
                f"{key} configures the DSpark draft, which this checkpoint leaves "
                "out (--no-dspark); drop one of the two"
            )
        if name in given and given[name] != value:
            raise ValueError(f"{name} is given twice, as {given[name]!r} and {value!r}")
        given[name] = value
    spec = copy.deepcopy(PRESETS[preset])
    fields = spec["config"]
    if dspark:
        fields.update(spec["dspark"])
    fields.update(given)
    layers = fields["num_hidden_layers"]
    if "num_hidden_layers" in given and is_positive_int(layers):
        if "layer_types" not in given:
            fields["layer_types"] = _layer_types(layers)
        if dspark and "dspark_target_layer_ids" not in given:
            fields["dspark_target_layer_ids"] = _target_layer_ids(layers)
    return fields


def check_fields(fields: dict[str, Any], draft: bool) -> DSparkSettings | None:
    """Check ``fields`` as the plugin will read the written config.json:
    ``Spark2_5Config``, and with a ``draft`` the DSpark checks (whose settings
    are returned). ``ValueError`` naming the first bad field."""
    try:
        config = Spark2_5Config(**copy.deepcopy(fields))
    except TypeError as exc:  # e.g. a list where a dict belongs
        raise ValueError(f"a config field has the wrong type: {exc}") from None
    return read_dspark_settings(config) if draft else None


# -- parameter count -----------------------------------------------------------


def _layer_params(c: dict[str, Any]) -> int:
    h, d, inter = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    n_q, n_kv = c["num_attention_heads"], c["num_key_value_heads"]
    n = h * n_q * d + 2 * h * n_kv * d + n_q * d * h  # q, k, v, o
    n += 3 * h * inter + 2 * h  # gate, up, down; two norms
    if c.get("attention_bias", False):
        n += (n_q + 2 * n_kv) * d
    if c.get("attention_output_gate", True):
        n += h * n_q  # g_proj: one gate per head
    return n


def parameter_count(config: dict[str, Any]) -> dict[str, int]:
    """Parameters of the target and of the draft (when ``config`` has the
    DSpark fields), from the shapes alone."""
    h, v = config["hidden_size"], config["vocab_size"]
    target = v * h + config["num_hidden_layers"] * _layer_params(config) + h
    if not config.get("tie_word_embeddings", False):
        target += v * h
    draft = 0
    if config.get("dspark_markov_rank") is not None:
        rank = config["dspark_markov_rank"]
        n_aux = len(config["dspark_target_layer_ids"])
        draft = n_aux * h * h + h  # main_proj, main_norm
        draft += len(config["dspark_layer_types"]) * _layer_params(config)
        draft += h + 2 * v * rank  # norm, markov_w1, markov_w2
        if config["dspark_markov_head_type"] == "rnn":
            draft += rank * rank
        if config.get("dspark_enable_confidence_head", False):
            draft += h + rank + 1
    return {"target": target, "draft": draft, "total": target + draft}


def memory_bytes() -> int | None:
    """This machine's physical memory, or ``None`` where it cannot be read."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def size_problem(counts: dict[str, int], dtype: torch.dtype) -> str | None:
    """Why weights of ``counts`` parameters in ``dtype`` cannot be made here,
    or ``None``: the maker holds every tensor in memory before it writes
    them, so weights larger than the machine's memory cannot be made."""
    need = counts["total"] * dtype.itemsize
    memory = memory_bytes()
    if memory is None or need <= memory:
        return None
    name = str(dtype).removeprefix("torch.")
    return (
        f"the weights would take {need / 2**30:,.1f} GiB ({counts['total']:,} "
        f"parameters in {name}), more than this machine's memory "
        f"({memory / 2**30:,.1f} GiB); give smaller sizes"
    )


# -- tokenizer -----------------------------------------------------------------

_CONSONANTS = "bcdfghjklmnprstvwxz"
_VOWELS = "aeiouy"


def synthetic_corpus(num_words: int, seed: int = 0) -> list[str]:
    """Deterministic text for training a byte-level BPE of a large vocabulary.

    Pseudo-words built from syllables, drawn from a lexicon with a Zipf-like
    frequency (so merges grow whole frequent words, as in real text), in
    lines of prose, numbers, JSON and code, plus the tiny maker's sample
    lines. ``num_words`` bounds the size: about 7 bytes a word.
    """
    rng = random.Random(seed)
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    syllables += [v + c for v in _VOWELS for c in _CONSONANTS]
    syllables += [c + v + e for c in _CONSONANTS[:12] for v in _VOWELS for e in "nrst"]

    def word() -> str:
        w = "".join(rng.choice(syllables) for _ in range(rng.choice((1, 2, 2, 3, 4))))
        r = rng.random()
        return w.capitalize() if r < 0.12 else w.upper() if r < 0.14 else w

    lexicon = [word() for _ in range(max(64, num_words // 6))]
    weights = [1.0 / (i + 8) for i in range(len(lexicon))]
    words = rng.choices(lexicon, weights=weights, k=num_words)
    lines = list(TOKENIZER_CORPUS.splitlines())
    i = 0
    while i < len(words):
        n = rng.randint(6, 24)
        chunk, i = words[i : i + n], i + n
        kind = rng.random()
        if kind < 0.70:  # prose
            text = " ".join(chunk)
            lines.append(text[:1].upper() + text[1:] + rng.choice(".?!,;:"))
        elif kind < 0.80:  # numbers
            nums = (str(rng.randint(0, 10 ** rng.randint(1, 6))) for _ in chunk)
            lines.append(
                " ".join(f"{w} {n}" for w, n in zip(chunk, nums, strict=False))
            )
        elif kind < 0.90:  # JSON
            pairs = ", ".join(
                f'"{k}": {json.dumps(rng.choice([w, rng.randint(0, 999), True, None]))}'
                for k, w in zip(chunk[::2], chunk[1::2], strict=False)
            )
            lines.append("{" + pairs + "}")
        else:  # code
            name, args = chunk[0].lower(), ", ".join(w.lower() for w in chunk[1:4])
            lines.append(f"def {name}({args}):\n    return {chunk[-1].lower()}")
    return lines


def build_preset_tokenizer(vocab_size: int, seed: int = 0):
    """A byte-level BPE with exactly ``vocab_size`` tokens (special tokens
    included), trained on :func:`synthetic_corpus`."""
    smallest = 256 + len(SPECIAL_TOKENS)  # every byte, and the special tokens
    if vocab_size < smallest:
        raise ValueError(
            f"vocab_size must be at least {smallest} (the byte-level tokenizer's "
            f"256 bytes and {len(SPECIAL_TOKENS)} special tokens), got {vocab_size}"
        )
    corpus = synthetic_corpus(max(4000, 12 * vocab_size), seed)
    tokenizer = build_tokenizer(vocab_size, corpus)
    if len(tokenizer) != vocab_size:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens, not vocab_size "
            f"{vocab_size}: the generated corpus is too small for that vocabulary"
        )
    return tokenizer


# -- the checkpoint ------------------------------------------------------------


def write_common_files(path: Path, tokenizer) -> None:
    tokenizer.save_pretrained(path)
    template = resources.files("vllm_spark2_5_plugin").joinpath("chat_template.jinja")
    (path / "chat_template.jinja").write_text(template.read_text(encoding="utf-8"))
    (path / "generation_config.json").write_text(
        json.dumps(generation_config(tokenizer), indent=2) + "\n"
    )


def _branch_scale(value: float | str) -> float | str:
    """A residual-branch scale: a positive number, or ``"gpt2"``."""
    if value == "gpt2":
        return value
    try:
        scale = float(value)
    except (TypeError, ValueError):
        scale = math.nan
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(
            f"branch_scale must be a positive number or gpt2, got {value!r}"
        )
    return scale


def make_checkpoint(
    path: str | Path,
    preset: str = "small",
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.bfloat16,
    dspark: bool = True,
    dspark_prefix: str = DRAFT_WEIGHT_PREFIXES[0],
    branch_scale: float | str | None = None,
    overwrite: bool = False,
    **overrides: Any,
) -> Path:
    """Write the checkpoint of ``preset`` to ``path`` and return the path.

    ``overrides`` replace config fields (``dspark_*`` ones the draft's);
    ``branch_scale`` (a number or ``"gpt2"``) overrides the preset's scale of
    the residual-branch outputs. Every input is checked (``ValueError`` naming
    the field) before ``path`` is touched, and the weights are made before
    it is too. ``config.json`` is written last, so a run that stops midway
    never leaves a directory that looks like a checkpoint.
    """
    from safetensors.torch import save_file

    problem = seed_problem(seed)
    if problem is not None:
        raise ValueError(f"seed {problem}")
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {list(PRESETS)}")
    if dspark_prefix not in DRAFT_WEIGHT_PREFIXES:
        raise ValueError(f"dspark_prefix must be one of {list(DRAFT_WEIGHT_PREFIXES)}")
    times: dict[str, float] = {}

    start = time.perf_counter()
    fields = preset_fields(preset, dspark, overrides)
    # The noise token's id comes from the tokenizer, so it is inside the
    # vocabulary; 0 stands in for it until then.
    settings = check_fields({"dspark_noise_token_id": 0, **fields}, dspark)
    if settings is not None:  # a field given as null: write what the plugin reads
        fields["dspark_markov_head_type"] = settings.markov_head_type
        fields["dspark_enable_confidence_head"] = settings.enable_confidence_head
        fields["dspark_layer_types"] = list(settings.layer_types)
    scale = PRESETS[preset]["branch_scale"] if branch_scale is None else branch_scale
    if scale == "gpt2":
        scale = (2 * fields["num_hidden_layers"]) ** -0.5
    scale = _branch_scale(scale)
    # Refused before the tokenizer (whose corpus grows with vocab_size) and
    # before any tensor is drawn.
    shapes = Spark2_5Config(
        **copy.deepcopy({"dspark_noise_token_id": 0, **fields} if dspark else fields)
    )
    problem = size_problem(parameter_count(shapes.to_dict()), dtype)
    if problem is not None:
        raise ValueError(problem)
    tokenizer = build_preset_tokenizer(fields["vocab_size"], seed)
    times["tokenizer_s"] = time.perf_counter() - start
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    if dspark:
        fields.setdefault(
            "dspark_noise_token_id", tokenizer.convert_tokens_to_ids(NOISE_TOKEN)
        )
    config = checkpoint_config(fields, eos_id, dtype)
    path = Path(path)
    raw = json.loads(config.to_json_string())  # what config.json will hold

    start = time.perf_counter()
    try:
        tensors = {
            name: tensor.to(dtype)
            for name, tensor in iter_random_weights(
                config, seed, dspark_prefix if dspark else None, branch_scale=scale
            )
        }
    except (RuntimeError, MemoryError) as exc:  # e.g. out of memory
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        raise ValueError(f"the weights could not be made: {reason}") from None
    times["weights_s"] = time.perf_counter() - start
    counts = parameter_count(raw)
    stored = sum(t.numel() for t in tensors.values())
    if stored != counts["total"]:
        raise AssertionError(f"stored {stored} parameters, formula {counts}")
    with writing_into(path, overwrite):
        start = time.perf_counter()
        save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
        times["write_s"] = time.perf_counter() - start
        write_common_files(path, tokenizer)
        summary = {
            "preset": preset,
            "seed": seed,
            "dtype": str(dtype).removeprefix("torch."),
            "branch_scale": scale,
            "dspark_prefix": dspark_prefix if dspark else None,
            "parameters": counts,
            "bytes": (path / "model.safetensors").stat().st_size,
            "vocab_size": raw["vocab_size"],
            "tokenizer_tokens": len(tokenizer),
            "overrides": overrides,
            "times": {k: round(v, 2) for k, v in times.items()},
            "torch": torch.__version__,
        }
        (path / "make_checkpoint.json").write_text(json.dumps(summary, indent=2) + "\n")
        # Last: config.json marks the directory as a checkpoint.
        config.save_pretrained(path)
    return path


# -- in-tree architectures of equal shapes ------------------------------------------

IN_TREE_ARCHS = ("llama", "gemma3")


def in_tree_path(path: Path, arch: str) -> Path:
    """``PATH-ARCH``: the directory beside ``path`` for its ``arch`` copy;
    ``ValueError`` for the root directory, which has nothing beside it."""
    given = path
    if path.name in ("", ".."):  # "." or "..": name the directory itself
        path = path.resolve()
    if not path.name:
        root = "" if given == path else f" ({path})"
        raise ValueError(
            f"{given} is the root directory{root}: there is nothing beside it for "
            f"the --in-tree {arch} copy (PATH-{arch}); give a named directory as PATH"
        )
    return path.with_name(f"{path.name}-{arch}")


#: The option of each keyword argument of :func:`make_checkpoint`, which
#: ``--set`` cannot reach: its overrides are that function's ``**overrides``.
KEYWORD_OPTIONS = {
    "path": "the PATH argument",
    "preset": "--preset",
    "seed": "--seed",
    "dtype": "--dtype",
    "dspark": "--no-dspark",
    "dspark_prefix": "--dspark-prefix",
    "branch_scale": "--branch-scale",
    "overwrite": "--overwrite",
}


def _parse_set(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, Any]:
    """The ``--set KEY=JSON`` overrides (a value that is not JSON is a
    string); ``parser.error`` for an item without ``=`` or a key that is one
    of :func:`make_checkpoint`'s own arguments (:data:`KEYWORD_OPTIONS`)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"argument --set: expected KEY=JSON, got {item!r}")
        if key in KEYWORD_OPTIONS:
            parser.error(
                f"argument --set: unknown config field {key!r} "
                f"(use {KEYWORD_OPTIONS[key]})"
            )
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _branch_scale_arg(value: str) -> float | str:
    try:
        return _branch_scale(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """The command; ``prog`` names it in usage and errors (another command
    that hands its ``--preset`` here names itself)."""
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__.splitlines()[0], allow_abbrev=False
    )
    add_checkpoint_arguments(parser, default_dtype="bfloat16")
    parser.add_argument(
        "--preset", choices=sorted(PRESETS), help="the shape (default small)"
    )
    parser.add_argument(
        "--no-dspark", action="store_true", help="leave out the untrained draft"
    )
    parser.add_argument(
        "--branch-scale",
        type=_branch_scale_arg,
        help="scale of the target's o_proj/down_proj: a number (1 = the tiny "
        "maker's) or gpt2 = 1/sqrt(2*layers) (the presets' default)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="override a config field, e.g. --set num_hidden_layers=12",
    )
    parser.add_argument(
        "--in-tree",
        action="append",
        choices=IN_TREE_ARCHS,
        default=[],
        help="also write PATH-ARCH, the target as an in-tree vLLM architecture",
    )
    parser.add_argument(
        "--in-tree-only",
        action="store_true",
        help="PATH already holds a Spark2_5 checkpoint: write only --in-tree copies",
    )
    # No defaults here, so that --in-tree-only can tell a given option; the
    # defaults are filled in below.
    parser.set_defaults(seed=None, dtype=None, preset=None)
    args = parser.parse_args(argv)
    path = Path(args.path)
    # Every input is checked before anything is written or replaced.
    if args.no_dspark and args.dspark_prefix is not None:
        parser.error("--dspark-prefix places the draft that --no-dspark leaves out")
    overrides = _parse_set(parser, args.set)
    try:
        outs = {arch: in_tree_path(path, arch) for arch in dict.fromkeys(args.in_tree)}
    except ValueError as exc:
        parser.error(str(exc))
    if args.in_tree_only:
        if not outs:
            parser.error("--in-tree-only writes only the --in-tree copies; name one")
        for flag, used in (
            ("--preset", args.preset is not None),
            ("--seed", args.seed is not None),
            ("--dtype", args.dtype is not None),
            ("--set", args.set),
            ("--no-dspark", args.no_dspark),
            ("--dspark-prefix", args.dspark_prefix is not None),
            ("--branch-scale", args.branch_scale is not None),
        ):
            if used:
                parser.error(f"{flag} does not apply with --in-tree-only")
        read_target_config(path)
    else:
        refuse_non_empty(parser, args)
        args.preset = "small" if args.preset is None else args.preset
        args.seed = 0 if args.seed is None else args.seed
        args.dtype = "bfloat16" if args.dtype is None else args.dtype
    for out in outs.values():
        refuse_non_empty(parser, args, out)
    if not args.in_tree_only:
        start = time.perf_counter()
        try:
            make_checkpoint(
                path,
                args.preset,
                seed=args.seed,
                dtype=getattr(torch, args.dtype),
                dspark=not args.no_dspark,
                dspark_prefix=args.dspark_prefix or DRAFT_WEIGHT_PREFIXES[0],
                branch_scale=args.branch_scale,
                overwrite=args.overwrite,
                **overrides,
            )
        except ValueError as exc:
            parser.error(str(exc))
        except OSError as exc:
            raise SystemExit(
                f"could not write the checkpoint to {path}: {exc}"
            ) from None
        summary = json.loads((path / "make_checkpoint.json").read_text())
        print(json.dumps(summary))
        print(
            f"wrote the {args.preset} Spark2_5 checkpoint to {path} "
            f"({summary['parameters']['total'] / 1e9:.3f}B parameters, "
            f"{time.perf_counter() - start:.1f} s)"
        )
    from vllm_spark2_5_plugin.tools.in_tree_checkpoint import write_in_tree

    for arch, out in outs.items():
        try:
            write_in_tree(path, out, arch, overwrite=args.overwrite)
        except OSError as exc:
            raise SystemExit(
                f"could not write the {arch} copy to {out}: {exc}"
            ) from None
        print(f"wrote the {arch} copy of {path} to {out}")


if __name__ == "__main__":
    main()
