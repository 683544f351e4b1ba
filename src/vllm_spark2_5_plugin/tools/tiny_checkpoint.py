# SPDX-License-Identifier: Apache-2.0
"""Write a small random Spark2_5 checkpoint (config, safetensors, tokenizer).

It is the default model of the demo and of the tests: every file vLLM needs,
no download. Weights are random but scaled so that logits are well spread
(greedy decoding then rarely meets near-ties). Optionally the checkpoint also
carries DSpark draft weights under one of the three accepted prefixes.

    spark2_5-make-tiny-checkpoint /tmp/spark2_5-tiny [--dspark] [--seed 0]

With ``--preset NAME`` the command writes a larger checkpoint of a named shape
instead (``small``: about 1B parameters); see
:mod:`vllm_spark2_5_plugin.tools.make_checkpoint`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
from vllm_spark2_5_plugin.names import (
    DRAFT_WEIGHT_PREFIXES,
    DSPARK_ALIASES,
    END_OF_TEXT,
    FULL,
    ROLE_TOKENS,
    SLIDING,
    TARGET_ARCH,
    TOOL_TOKENS,
)

# Special tokens: role markers, end of text, and the tool-call tags (one token
# each, so the parser sees whole tags, as it would with a real Spark2_5).
EOS_TOKEN = END_OF_TEXT
NOISE_TOKEN = "<|mask|>"
SPECIAL_TOKENS = [EOS_TOKEN, *ROLE_TOKENS, *TOOL_TOKENS, NOISE_TOKEN]

TINY_CONFIG: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,  # the smallest head size vLLM's CPU attention supports
    "max_position_embeddings": 2048,
    "sliding_window": 16,
    "rope_parameters": {
        SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
        FULL: {"rope_type": "default", "rope_theta": 1_000_000.0},
    },
}

TINY_DSPARK: dict[str, Any] = {
    "dspark_block_size": 4,
    "dspark_markov_rank": 8,
    "dspark_target_layer_ids": [1, 3],
    "dspark_markov_head_type": "vanilla",
    "dspark_enable_confidence_head": False,
    "dspark_layer_types": [SLIDING],
}

# A few lines of text in the shapes the tokenizer will meet (prose, JSON, code,
# tool calls) so that byte-pair merges look like a real tokenizer's.
TOKENIZER_CORPUS = """\
The quick brown fox jumps over the lazy dog. What is the weather in Paris today?
Hello! How can I help you? I will call a function to get the answer for you.
{"city": "Paris", "days": 3, "unit": "celsius", "verbose": true, "tags": ["a", "b"]}
def get_weather(city: str, days: int = 1) -> dict: return {"city": city}
get_weather city days unit location query number value result name type object
Les prix sont en euros. Der Hund schläft. 東京の天気は晴れです。 Ceci est un test.
0 1 2 3 4 5 6 7 8 9 10 42 100 3.14 -1 true false null
"""


def build_tokenizer(vocab_size: int, corpus: Iterable[str] | None = None):
    """A byte-level BPE tokenizer (no download), tool tags as special tokens.

    ``corpus`` (lines of text) replaces the built-in few lines; a larger
    vocabulary needs a corpus with enough distinct byte pairs to merge.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = TOKENIZER_CORPUS.splitlines() if corpus is None else corpus
    tokenizer.train_from_iterator(lines, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        additional_special_tokens=[t for t in SPECIAL_TOKENS if t != EOS_TOKEN],
    )


def generation_config(tokenizer) -> dict[str, Any]:
    """The generation_config.json of a checkpoint with this tokenizer.

    As a real Spark2_5 checkpoint declares it: end of text and every role
    token are end-of-sequence ids (a role token starts the next turn, so the
    assistant's turn is over), end of text first; padding is end of text.
    vLLM stops on all of them and keeps them out of the text.
    """
    eos_ids = [tokenizer.convert_tokens_to_ids(t) for t in (EOS_TOKEN, *ROLE_TOKENS)]
    return {"eos_token_id": eos_ids, "pad_token_id": eos_ids[0]}


def _decoder_layer_weights(
    config: Spark2_5Config,
    prefix: str,
    gen: torch.Generator,
    branch_scale: float = 1.0,
) -> dict[str, torch.Tensor]:
    """One decoder layer; ``branch_scale`` multiplies the two projections that
    write into the residual stream (``o_proj``, ``down_proj``) after drawing,
    so the random draws are the same for every scale."""
    h, d = config.hidden_size, config.head_dim
    n_q, n_kv, inter = (
        config.num_attention_heads,
        config.num_key_value_heads,
        (config.intermediate_size),
    )

    def linear(out_features: int, in_features: int) -> torch.Tensor:
        return torch.randn(out_features, in_features, generator=gen) / in_features**0.5

    def norm(size: int) -> torch.Tensor:
        return 1.0 + 0.1 * torch.randn(size, generator=gen)

    w = {
        f"{prefix}input_layernorm.weight": norm(h),
        f"{prefix}self_attn.q_proj.weight": linear(n_q * d, h),
        f"{prefix}self_attn.k_proj.weight": linear(n_kv * d, h),
        f"{prefix}self_attn.v_proj.weight": linear(n_kv * d, h),
        f"{prefix}self_attn.o_proj.weight": linear(h, n_q * d),
        f"{prefix}post_attention_layernorm.weight": norm(h),
        f"{prefix}mlp.gate_proj.weight": linear(inter, h),
        f"{prefix}mlp.up_proj.weight": linear(inter, h),
        f"{prefix}mlp.down_proj.weight": linear(h, inter),
    }
    if config.attention_bias:
        for name, size in (("q", n_q * d), ("k", n_kv * d), ("v", n_kv * d)):
            w[f"{prefix}self_attn.{name}_proj.bias"] = 0.1 * torch.randn(
                size, generator=gen
            )
    if config.attention_output_gate:
        w[f"{prefix}self_attn.g_proj.weight"] = linear(n_q, h)
    if branch_scale != 1.0:
        for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
            w[f"{prefix}{name}"] = w[f"{prefix}{name}"] * branch_scale
    return w


def random_weights(
    config: Spark2_5Config, seed: int = 0, dspark_prefix: str | None = None
) -> dict[str, torch.Tensor]:
    """Random tensors in the checkpoint layout of docs/model.md (and, with a
    prefix, the draft layout of docs/dspark.md)."""
    return dict(iter_random_weights(config, seed, dspark_prefix))


def iter_random_weights(
    config: Spark2_5Config,
    seed: int = 0,
    dspark_prefix: str | None = None,
    branch_scale: float = 1.0,
) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors of :func:`random_weights`, one at a time and in the same
    order from the same draws, so a large checkpoint can be cast and stored
    without holding every float32 tensor at once. ``branch_scale`` scales the
    residual-branch outputs of the target's layers (1.0: as drawn)."""
    gen = torch.Generator().manual_seed(seed)
    h, v = config.hidden_size, config.vocab_size
    yield "model.embed_tokens.weight", torch.randn(v, h, generator=gen).contiguous()
    for i in range(config.num_hidden_layers):
        layer = _decoder_layer_weights(config, f"model.layers.{i}.", gen, branch_scale)
        for name, tensor in layer.items():
            yield name, tensor.contiguous()
    yield "model.norm.weight", (1.0 + 0.1 * torch.randn(h, generator=gen)).contiguous()
    if not config.tie_word_embeddings:
        # Larger than 1/sqrt(h) so logits spread over several units.
        head = 4.0 * torch.randn(v, h, generator=gen) / h**0.5
        yield "lm_head.weight", head.contiguous()

    if dspark_prefix is None:
        return
    p = dspark_prefix
    n_aux = len(config.dspark_target_layer_ids)
    rank = config.dspark_markov_rank
    draft: dict[str, torch.Tensor] = {}
    draft[f"{p}main_proj.weight"] = (
        torch.randn(h, n_aux * h, generator=gen) / (n_aux * h) ** 0.5
    )
    draft[f"{p}main_norm.weight"] = 1.0 + 0.1 * torch.randn(h, generator=gen)
    for name, tensor in draft.items():
        yield name, tensor.contiguous()
    for j in range(len(config.dspark_layer_types)):
        for name, tensor in _decoder_layer_weights(
            config, f"{p}layers.{j}.", gen
        ).items():
            yield name, tensor.contiguous()
    draft = {f"{p}norm.weight": 1.0 + 0.1 * torch.randn(h, generator=gen)}
    draft[f"{p}markov_head.markov_w1.weight"] = torch.randn(v, rank, generator=gen)
    draft[f"{p}markov_head.markov_w2.weight"] = (
        torch.randn(v, rank, generator=gen) / rank**0.5
    )
    if config.dspark_markov_head_type == "rnn":
        draft[f"{p}markov_head.rnn_proj.weight"] = (
            torch.randn(rank, rank, generator=gen) / rank**0.5
        )
    if config.dspark_enable_confidence_head:
        draft[f"{p}confidence_head.proj.weight"] = (
            torch.randn(1, h + rank, generator=gen) / (h + rank) ** 0.5
        )
        draft[f"{p}confidence_head.proj.bias"] = torch.randn(1, generator=gen)
    for name, tensor in draft.items():
        yield name, tensor.contiguous()


#: The seeds ``torch.manual_seed`` and a ``torch.Generator`` take.
SEED_LEAST, SEED_MOST = -(2**63), 2**64 - 1


def seed_problem(seed: int, most: int = SEED_MOST) -> str | None:
    """Why ``seed`` cannot seed torch (``SEED_LEAST .. most``), or ``None``
    (a larger one ended a run in an ``Overflow when unpacking long long``
    traceback)."""
    if SEED_LEAST <= seed <= most:
        return None
    return f"must be from {SEED_LEAST} to {most}, got {seed}"


def seed_value(most: int = SEED_MOST):
    """An argparse ``type`` for ``--seed``: an integer :func:`seed_problem`
    accepts (``most`` below ``SEED_MOST`` for a tool that also seeds with a
    larger value)."""

    def parse(text: str) -> int:
        try:
            seed = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        problem = seed_problem(seed, most)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return seed

    return parse


def checkpoint_config(
    fields: dict[str, Any], eos_id: int, dtype: torch.dtype
) -> Spark2_5Config:
    """The config.json of a written checkpoint: the target architecture, the
    tokenizer's end-of-text token as EOS and padding, ``dtype`` and ``fields``."""
    return Spark2_5Config(
        architectures=[TARGET_ARCH],
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        bos_token_id=None,
        dtype=str(dtype).removeprefix("torch."),
        **fields,
    )


def make_tiny_checkpoint(
    path: str | Path,
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    dspark: bool | dict[str, Any] = False,
    dspark_prefix: str = DRAFT_WEIGHT_PREFIXES[0],
    **config_overrides: Any,
) -> Path:
    """Write a tiny Spark2_5 checkpoint to ``path`` and return the path.

    ``config_overrides`` replace fields of :data:`TINY_CONFIG`. ``dspark=True``
    (or a dict of ``dspark_*`` fields overriding :data:`TINY_DSPARK`) adds a
    DSpark draft under ``dspark_prefix`` (one of ``draft_model.``, ``mtp.``,
    ``model.mtp.``).
    """
    from safetensors.torch import save_file

    problem = seed_problem(seed)
    if problem is not None:
        raise ValueError(f"seed {problem}")
    path = Path(path)
    tokenizer = build_tokenizer(TINY_CONFIG["vocab_size"])
    fields = {**TINY_CONFIG, **config_overrides}
    if dspark:
        if dspark_prefix not in DRAFT_WEIGHT_PREFIXES:
            raise ValueError(
                f"dspark_prefix must be one of {list(DRAFT_WEIGHT_PREFIXES)}, got "
                f"{dspark_prefix!r}"
            )

        # Accept the alias spellings too, as the plugin does for config.json.
        canonical = {alias: name for name, alias in DSPARK_ALIASES.items()}
        chosen = dspark if isinstance(dspark, dict) else {}
        fields = {
            **TINY_DSPARK,
            "dspark_noise_token_id": tokenizer.convert_tokens_to_ids(NOISE_TOKEN),
            **{canonical.get(key, key): value for key, value in chosen.items()},
            **fields,
        }
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    config = checkpoint_config(fields, eos_id, dtype)
    if len(tokenizer) > config.vocab_size:
        raise ValueError(
            f"vocab_size {config.vocab_size} is smaller than the tiny tokenizer "
            f"({len(tokenizer)} tokens)"
        )
    weights = random_weights(config, seed, dspark_prefix if dspark else None)
    tensors = {name: t.to(dtype) for name, t in weights.items()}
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(path)
    template = resources.files("vllm_spark2_5_plugin").joinpath("chat_template.jinja")
    (path / "chat_template.jinja").write_text(template.read_text(encoding="utf-8"))
    (path / "generation_config.json").write_text(
        json.dumps(generation_config(tokenizer), indent=2) + "\n"
    )
    # Last: config.json marks the directory as a checkpoint (CHECKPOINT_MARKER).
    config.save_pretrained(path)
    return path


def add_checkpoint_arguments(
    parser: argparse.ArgumentParser, default_dtype: str
) -> None:
    """The options every checkpoint maker shares: where, seed, dtype, prefix,
    and ``--overwrite`` (see :func:`refuse_non_empty`, :func:`empty_dir`)."""
    parser.add_argument("path", help="directory to write the checkpoint to")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the checkpoint at PATH (a directory that holds a config.json)",
    )
    parser.add_argument(
        "--seed",
        type=seed_value(),
        default=0,
        help=f"seed of the random weights, {SEED_LEAST} to {SEED_MOST} (default 0)",
    )
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        default=default_dtype,
        help=f"dtype of the weights (default {default_dtype})",
    )
    parser.add_argument(
        "--dspark-prefix",
        choices=DRAFT_WEIGHT_PREFIXES,
        default=None,
        help=f"where the draft's tensors go (default {DRAFT_WEIGHT_PREFIXES[0]})",
    )


#: The file that marks a directory as a checkpoint: every checkpoint these
#: tools write, and every Hugging Face export, has one. ``--overwrite`` only
#: ever empties a directory that holds it.
CHECKPOINT_MARKER = "config.json"
#: Entries of a refused directory named in the message.
LISTED_ENTRIES = 5


def overwrite_problem(path: Path) -> str | None:
    """Why ``--overwrite`` must not empty the existing, non-empty directory
    ``path``, or ``None``.

    The flag exists to replace an earlier checkpoint, so it is held to that:
    the directory must hold a ``config.json`` (a typo'd or mistaken path to a
    directory of one's own files is refused, not emptied), and it must not
    be the working directory or one of its parents (``PATH=.`` or ``..``
    would otherwise empty the directory the command runs in, or a tree above
    it), compared after resolving links and ``..``.
    """
    resolved = path.resolve()
    cwd = Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        return (
            f"{path} is the working directory ({cwd}) or one of its parents; "
            "--overwrite never empties it: pick an empty or new directory"
        )
    if not (path / CHECKPOINT_MARKER).is_file():
        names = sorted(entry.name for entry in path.iterdir())
        held = ", ".join(names[:LISTED_ENTRIES])
        if len(names) > LISTED_ENTRIES:
            held += f", ... ({len(names)} entries)"
        return (
            f"{path} holds {held} but no {CHECKPOINT_MARKER}, so it is not a "
            "checkpoint; --overwrite only replaces a checkpoint directory: pick "
            "an empty or new directory"
        )
    return None


def empty_dir(path: Path) -> None:
    """Delete every entry of the directory ``path`` that
    :func:`overwrite_problem` allows to be replaced (``FileExistsError`` with
    its reason otherwise); ``path`` itself stays.

    The entries are deleted rather than the directory: it is never
    recreated, so nothing can leave the path missing (``shutil.rmtree(".")``
    followed by ``mkdir(".")`` did, deleting everything and writing
    nothing), and the directory keeps its permissions and any link that
    points at it. Every check is made before the first entry goes.
    """
    problem = overwrite_problem(path)
    if problem is not None:
        raise FileExistsError(problem)
    for entry in list(path.iterdir()):
        # A link to a directory is removed as a link: rmtree would refuse
        # it, and what it points at is not part of this checkpoint.
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def prepare_dir(path: Path, overwrite: bool) -> None:
    """An empty directory at ``path``; a non-empty one is emptied only with
    ``overwrite`` and only if it is a checkpoint (:func:`empty_dir`), else
    ``FileExistsError``. A file at ``path`` is never replaced
    (``NotADirectoryError``)."""
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{path} is a file, not a directory")
    if path.exists() and any(path.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{path} is not empty; pass overwrite=True")
        empty_dir(path)
    path.mkdir(parents=True, exist_ok=True)


@contextmanager
def writing_into(path: Path, overwrite: bool) -> Iterator[None]:
    """:func:`prepare_dir`, then the body writes a checkpoint into the empty
    directory ``path``; if the body fails (an error, Ctrl-C), what it wrote
    is deleted again, and ``path`` too if this created it, so a failed run
    leaves no half-written checkpoint. Writers put ``config.json``
    (:data:`CHECKPOINT_MARKER`) last, so even a killed run leaves a directory
    that no tool takes for a checkpoint."""
    created = not path.exists()
    prepare_dir(path, overwrite)
    try:
        yield
    except BaseException:
        # Every entry is this run's: the directory was empty when it started.
        with suppress(OSError):
            for entry in list(path.iterdir()):
                with suppress(OSError):
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
            if created:
                path.rmdir()
        raise


def output_location_problem(path: Path, overwrite: bool) -> str | None:
    """Why ``path`` cannot become a checkpoint directory, whatever it holds,
    or ``None``: it holds files and ``overwrite`` is off (a maker never
    replaces a checkpoint unasked), it or a parent is a file, or it cannot be
    written. :func:`output_dir_problem` adds what ``overwrite`` may replace."""
    existing = next(p for p in (path, *path.parents) if p.exists())
    if existing == path and not path.is_dir():
        return f"{path} is a file, not a directory; give a directory path"
    if not existing.is_dir():
        return f"{path} cannot be created: {existing} is a file, not a directory"
    if existing == path and any(path.iterdir()) and not overwrite:
        return f"{path} is not empty; pass --overwrite to replace it"
    # An existing directory is emptied in place (:func:`empty_dir`), so it is
    # the one that must be writable; a new one is created in its nearest
    # existing parent.
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{path} cannot be written: {existing} is not writable"
    return None


def output_dir_problem(path: Path, overwrite: bool) -> str | None:
    """Why ``path`` cannot become a checkpoint directory, or ``None``:
    :func:`output_location_problem`, and with ``overwrite`` a non-empty
    directory that :func:`overwrite_problem` refuses to replace."""
    problem = output_location_problem(path, overwrite)
    if problem is None and path.is_dir() and any(path.iterdir()):
        problem = overwrite_problem(path)
    return problem


def refuse_non_empty(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    path: str | Path | None = None,
) -> None:
    """Stop with :func:`output_dir_problem`'s message for ``path`` (default
    ``args.path``), if any."""
    problem = output_dir_problem(
        Path(args.path if path is None else path), args.overwrite
    )
    if problem is not None:
        parser.error(problem)


def main(argv: list[str] | None = None) -> None:
    from vllm_spark2_5_plugin.tools import make_checkpoint

    presets = sorted(make_checkpoint.PRESETS)
    preset = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    preset.add_argument("--preset", choices=presets)
    preset.add_argument("--dspark", action="store_true")
    known, _ = preset.parse_known_args(argv)
    if known.preset is not None:
        if known.dspark:
            preset.error(
                "--dspark does not combine with --preset: a preset checkpoint has "
                "its draft unless --no-dspark is given"
            )
        # A named larger shape: its own options (`--preset NAME --help`).
        make_checkpoint.main(argv, prog=f"{preset.prog} --preset NAME")
        return
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], allow_abbrev=False
    )
    parser.add_argument(
        "--preset",
        choices=presets,
        help="write a larger named shape instead, with its own options "
        "(--preset NAME --help lists them)",
    )
    add_checkpoint_arguments(parser, default_dtype="float32")
    parser.add_argument(
        "--dspark",
        action="store_true",
        help="add DSpark draft config and weights (implied by --dspark-prefix)",
    )
    args = parser.parse_args(argv)
    refuse_non_empty(parser, args)
    dspark = args.dspark or args.dspark_prefix is not None
    try:
        with writing_into(Path(args.path), args.overwrite):
            out = make_tiny_checkpoint(
                args.path,
                seed=args.seed,
                dtype=getattr(torch, args.dtype),
                dspark=dspark,
                dspark_prefix=args.dspark_prefix or DRAFT_WEIGHT_PREFIXES[0],
            )
    except OSError as exc:
        raise SystemExit(
            f"could not write the checkpoint to {args.path}: {exc}"
        ) from None
    print(f"wrote a tiny Spark2_5 checkpoint to {out}")
    if args.dtype == "float32":
        print(
            "its weights are float32: serve it with --dtype float32 (vLLM's "
            "default, bfloat16, converts each tensor with a warning)"
        )


if __name__ == "__main__":
    main()
