# SPDX-License-Identifier: Apache-2.0
"""The DSpark trainer's data: prompts, continuations, sequences, hidden states.

Seeded random prompts, the target's greedy continuations (reference or vLLM),
sequences files, and the target's hidden states at the draft's layers.

See ``docs/dspark_training.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from vllm_spark2_5_plugin.references.layers import with_config_defaults
from vllm_spark2_5_plugin.references.spark2_5 import Spark2_5Reference
from vllm_spark2_5_plugin.tools.dspark_checkpoint import load_tokenizer

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


# -- command-line values ---------------------------------------------------------------


def number_in_range(
    kind: type, minimum: float, above: bool = False, most: float | None = None
):
    """An argparse ``type``: a finite ``kind`` (``int`` or ``float``) ``>=
    minimum`` (``> minimum`` with ``above``) and ``<= most``."""
    low = f"{'above' if above else 'at least'} {minimum:g}"
    want = low if most is None else f"{low} and at most {most:g}"
    noun = "an integer" if kind is int else "a number"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        ok = value > minimum if above else value >= minimum
        if not (ok and math.isfinite(value) and (most is None or value <= most)):
            raise argparse.ArgumentTypeError(f"must be {want}, got {value}")
        return value

    return parse


def int_at_least(minimum: int):
    """An argparse ``type``: an integer ``>= minimum``."""
    return number_in_range(int, minimum)


def device_name(text: str) -> str:
    """An argparse ``type``: ``cpu`` or ``cuda[:N]`` of a CUDA device present."""
    try:
        device = torch.device(text)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"expected cpu or cuda[:N], got {text!r}")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise argparse.ArgumentTypeError(
                f"{text!r}: CUDA is not available on this machine; use cpu"
            )
        if device.index is not None and device.index >= count:
            raise argparse.ArgumentTypeError(
                f"{text!r}: this machine has {count} CUDA device(s), 0..{count - 1}"
            )
    return text


#: The seeds the vLLM child takes: vLLM seeds NumPy with it (``np.random.seed``).
VLLM_SEED_MOST = 2**32 - 1


def vllm_seed_problem(args: Any) -> str | None:
    """Why ``--seed`` cannot seed the vLLM child, or None: with
    ``--continuations vllm`` (and no ``--sequences``) vLLM seeds NumPy with
    it, which takes ``0 .. VLLM_SEED_MOST`` only."""
    if (
        args.continuations == "vllm"
        and args.sequences is None
        and not 0 <= args.seed <= VLLM_SEED_MOST
    ):
        return (
            f"argument --seed: with --continuations vllm, vLLM seeds NumPy with "
            f"it, which takes 0 to {VLLM_SEED_MOST}; got {args.seed}"
        )
    return None


#: The ``dtype`` values ``vllm.LLM`` accepts (vLLM 0.32.0's ``ModelDType``):
#: the choices of ``--vllm-dtype``.
VLLM_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
#: Positions the vLLM child asks for beyond the longest prompt + continuation
#: (its ``max_model_len``).
VLLM_EXTRA_POSITIONS = 8


def check_length(
    raw: dict, prompt_len: int, gen_len: int, continuations: str = "reference"
) -> None:
    """``ValueError`` when ``prompt_len + gen_len`` tokens exceed the target's
    ``max_position_embeddings`` (the longest sequence vLLM would serve;
    ``Spark2_5Config``'s default where ``raw`` omits it), or,
    with ``vllm`` continuations, when the ``max_model_len`` the vLLM child
    asks for (``VLLM_EXTRA_POSITIONS`` more) does."""
    limit = with_config_defaults(raw)["max_position_embeddings"]
    extra = VLLM_EXTRA_POSITIONS if continuations == "vllm" else 0
    needed = prompt_len + gen_len + extra
    if limit is None or needed <= limit:
        return
    lengths = f"--prompt-len {prompt_len} + --gen-len {gen_len}"
    if extra:
        what = (
            f"--continuations vllm: {lengths} + {extra} = {needed} positions "
            "(the max_model_len vLLM is asked for)"
        )
    else:
        what = f"{lengths} = {needed} tokens"
    raise ValueError(
        f"{what} exceed the model's max_position_embeddings {limit}; shorten them"
    )


#: The vLLM child's options and their defaults (they apply with
#: --continuations vllm only; the acceptance tool takes the dtype alone).
VLLM_OPTION_DEFAULTS = {"vllm_gpu_memory_utilization": 0.8, "vllm_dtype": "auto"}


def settle_vllm_options(args: Any, defaults: dict[str, Any]) -> str | None:
    """Why options that set how the vLLM child writes the continuations
    (``defaults``: attribute -> default, ``None`` when not given) cannot
    apply, or ``None`` after filling in the defaults of those not given.
    They apply only where vLLM writes them: ``--continuations vllm`` without
    ``--sequences``; elsewhere nothing reads them, so they are refused
    rather than ignored without a word."""
    given = [name for name in defaults if getattr(args, name) is not None]
    if given and (args.continuations != "vllm" or args.sequences is not None):
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        why = (
            "--sequences supplies the sequences"
            if args.sequences is not None
            else f"the continuations are the {args.continuations}'s"
        )
        return (
            f"{flags} set how vLLM writes the continuations, but {why}; "
            "drop it, or use --continuations vllm without --sequences"
        )
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return None


# -- prompts and the target's greedy continuations -------------------------------------


def prompt_token_pool(path: str | Path, vocab_size: int) -> torch.Tensor:
    """Token ids a random prompt may use: the tokenizer's ids minus special ones.

    Without a loadable tokenizer: ``0 .. vocab_size-1`` minus the special ids
    that ``config.json`` names.
    """
    path = Path(path)
    raw = json.loads((path / "config.json").read_text())
    special: set[int] = set()
    for key in (
        "eos_token_id",
        "pad_token_id",
        "bos_token_id",
        "dspark_noise_token_id",
    ):
        value = raw.get(key)
        special.update(value if isinstance(value, list) else [value])
    size = vocab_size
    try:
        tok = load_tokenizer(path)
        size = min(vocab_size, len(tok))
        special.update(tok.all_special_ids)
        special.update(i for i, t in tok.added_tokens_decoder.items() if t.special)
    except Exception as exc:  # noqa: BLE001 (a checkpoint without a tokenizer)
        print(f"[dspark] no tokenizer ({exc!r}); prompts use ids 0..{size - 1}")
    return torch.tensor([i for i in range(size) if i not in special])


def random_prompts(
    pool: torch.Tensor, num: int, length: int, seed: int
) -> list[list[int]]:
    """``num`` prompts of ``length`` ids drawn from ``pool``; fixed by ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return pool[torch.randint(len(pool), (num, length), generator=gen)].tolist()


def _vllm_worker(path: str, job: str) -> None:
    """Runs in a fresh process: vLLM greedy continuations, written to ``job``."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    spec = json.loads(Path(job).read_text())
    prompts, gen_len = spec["prompts"], spec["gen_len"]
    llm = LLM(
        model=path,
        seed=spec["seed"],
        max_model_len=max(map(len, prompts)) + gen_len + VLLM_EXTRA_POSITIONS,
        gpu_memory_utilization=spec["gpu_memory_utilization"],
        dtype=spec["dtype"],
        enforce_eager=True,
    )
    params = SamplingParams(temperature=0.0, max_tokens=gen_len, ignore_eos=True)
    # One generate call per group: a prompt's continuation can depend on the
    # batch it shares steps with (batch-dependent numerics on a GPU).
    spec["continuations"] = []
    first = 0
    for size in spec.get("groups") or [len(prompts)]:
        group = [TokensPrompt(prompt_token_ids=p) for p in prompts[first:][:size]]
        outputs = llm.generate(group, params)
        spec["continuations"] += [list(o.outputs[0].token_ids) for o in outputs]
        first += size
    Path(job).write_text(json.dumps(spec))


def greedy_continuations(
    path: str | Path,
    prompts: Sequence[Sequence[int]],
    gen_len: int,
    method: str,
    target: Spark2_5Reference | None = None,
    seed: int = 0,
    gpu_memory_utilization: float = 0.8,
    vllm_dtype: str = "auto",
    first_alone: int = 0,
) -> list[list[int]]:
    """The target's greedy continuation (``gen_len`` tokens) of every prompt.

    ``reference``: :meth:`Spark2_5Reference.greedy` (tiny models, CPU).
    ``vllm``: ``vllm.LLM`` at temperature 0 with ``ignore_eos``, in a child
    process so that its GPU memory is free again when it returns. The first
    ``first_alone`` prompts are generated as a batch of their own, before the
    others, so that their continuations do not depend on how many prompts
    follow them.
    """
    if method == "reference":
        if target is None:
            raise ValueError("the reference continuations need the reference target")
        with torch.no_grad():
            return [target.greedy(list(p), gen_len)[0] for p in prompts]
    if method != "vllm":
        raise ValueError(f"continuations must be reference or vllm, not {method!r}")
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.json"
        spec = {"prompts": [list(p) for p in prompts], "gen_len": gen_len}
        spec |= {"seed": seed, "dtype": vllm_dtype}
        spec |= {"gpu_memory_utilization": gpu_memory_utilization}
        alone = min(max(first_alone, 0), len(prompts))
        spec["groups"] = [n for n in (alone, len(prompts) - alone) if n]
        job.write_text(json.dumps(spec))
        code = f"import {__name__} as m; m._vllm_worker({str(path)!r}, {str(job)!r})"
        done = subprocess.run([sys.executable, "-c", code], check=False)
        if done.returncode != 0:
            raise SystemExit(
                f"the vLLM continuations failed: its process ended with exit "
                f"status {done.returncode} (its output is above)"
            )
        out = json.loads(job.read_text())["continuations"]
    short = [i for i, c in enumerate(out) if len(c) != gen_len]
    if short:
        raise RuntimeError(f"vLLM stopped early on prompts {short}")
    return out


def target_features(
    target: Spark2_5Reference,
    ids: Sequence[int] | torch.Tensor,
    layer_ids: Sequence[int],
) -> torch.Tensor:
    """``[T, n*H]``: the outputs of target layers ``layer_ids`` (ascending)."""
    with torch.no_grad():
        stream = target.residual_stream(ids)
        return torch.cat([stream[i + 1] for i in sorted(layer_ids)], dim=-1)


def stacked_target_features(
    target: Spark2_5Reference,
    seqs: Sequence[Sequence[int]],
    layer_ids: Sequence[int],
    chunk: int = 64,
) -> torch.Tensor:
    """``[N, T, n*H]``: :func:`target_features` of ``N`` sequences of one
    length, ``chunk`` sequences per forward (``torch.vmap`` over the
    reference's one-sequence forward: the same math, batched, so a GPU runs
    a few large kernels instead of many small ones per sequence)."""
    ids = torch.tensor([list(s) for s in seqs], dtype=torch.long, device=target.device)
    one = torch.vmap(lambda row: target_features(target, row, layer_ids))
    return torch.cat([one(part) for part in ids.split(chunk)])


# -- sequences: generated or from a file -----------------------------------------------


def read_sequences(
    path: Path,
    take: int | None = None,
    vocab_size: int | None = None,
    min_new: int = 0,
    max_len: int | None = None,
) -> tuple[int, list[list[int]]]:
    """``(prompt_len, sequences)`` of a ``{"prompt_len", "sequences"}`` file.

    ``take``: the first ``take`` sequences, which must exist and share one
    length (``None``: all of them, of any length). ``ValueError`` naming the
    file and the fault: no such file, not JSON, a missing or malformed field,
    ``prompt_len < 1``, a sequence of fewer than ``prompt_len + min_new`` or
    more than ``max_len`` tokens, a token id outside ``0 .. vocab_size-1``.
    """
    try:
        given = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a readable JSON file: {exc}") from None
    if not isinstance(given, dict) or not {"prompt_len", "sequences"} <= set(given):
        raise ValueError(f'{path}: expected {{"prompt_len": P, "sequences": [...]}}')
    plen, seqs = given["prompt_len"], given["sequences"]
    if type(plen) is not int or plen < 1:
        raise ValueError(f"{path}: prompt_len must be a positive integer, got {plen!r}")
    if not isinstance(seqs, list) or not seqs:
        raise ValueError(f"{path}: sequences must be a non-empty list of id lists")
    for i, seq in enumerate(seqs):
        if not isinstance(seq, list) or not all(type(t) is int for t in seq):
            raise ValueError(f"{path}: sequence {i} is not a list of token ids")
    if take is not None:
        if len(seqs) < take or len(set(map(len, seqs))) != 1:
            raise ValueError(f"{path}: need {take} sequences of one length")
        seqs = seqs[:take]
    for i, seq in enumerate(seqs):
        if len(seq) < plen + min_new:
            raise ValueError(
                f"{path}: sequence {i} has {len(seq)} tokens; prompt_len {plen} "
                f"and {min_new} more are needed"
            )
        if max_len is not None and len(seq) > max_len:
            raise ValueError(
                f"{path}: sequence {i} has {len(seq)} tokens, more than the "
                f"model's max_position_embeddings {max_len}"
            )
        if vocab_size is not None:
            bad = next((t for t in seq if not 0 <= t < vocab_size), None)
            if bad is not None:
                raise ValueError(
                    f"{path}: sequence {i} has token id {bad}, outside the "
                    f"model's 0..{vocab_size - 1}"
                )
    return plen, seqs


def write_sequences(path: Path, prompt_len: int, seqs: list[list[int]]) -> None:
    """The file :func:`read_sequences` reads, as a new file: ``FileExistsError``
    rather than replacing one that exists."""
    text = json.dumps({"prompt_len": prompt_len, "sequences": seqs}) + "\n"
    with path.open("x") as f:
        f.write(text)


def target_and_sequences(
    path: Path,
    num: int,
    prompt_len: int,
    gen_len: int,
    seed: int,
    continuations: str,
    dtype: torch.dtype,
    device: str | torch.device,
    gpu_memory_utilization: float = 0.8,
    vllm_dtype: str = "auto",
    held_out: int = 0,
    sequences: tuple[int, list[list[int]]] | None = None,
) -> tuple[Spark2_5Reference, int, list[list[int]]]:
    """The reference target of checkpoint ``path`` and ``prompt + continuation``
    sequences: ``sequences`` (``(prompt_len, sequences)`` already read with
    :func:`read_sequences`), else ``num`` seeded random prompts and their
    greedy continuations.

    vLLM generates before the reference target is loaded, so that the two
    never hold GPU memory at once; it continues the first ``held_out`` prompts
    in a batch of their own (see :func:`greedy_continuations`). Returns
    ``(target, prompt_len, sequences)``.
    """
    seqs = None
    if sequences is not None:
        prompt_len, seqs = sequences
    else:
        # Spark2_5Config's default where config.json omits it, as vLLM reads it.
        raw = with_config_defaults(json.loads((path / "config.json").read_text()))
        vocab = raw["vocab_size"]
        prompts = random_prompts(prompt_token_pool(path, vocab), num, prompt_len, seed)
        # The first output can be minutes away: say what is running.
        print(
            f"generating {num} greedy continuations of {gen_len} tokens with "
            f"the {'vLLM engine' if continuations == 'vllm' else 'reference'}...",
            file=sys.stderr,
            flush=True,
        )
        if continuations == "vllm":
            conts = greedy_continuations(
                path,
                prompts,
                gen_len,
                "vllm",
                seed=seed,
                gpu_memory_utilization=gpu_memory_utilization,
                vllm_dtype=vllm_dtype,
                first_alone=held_out,
            )
            seqs = [p + c for p, c in zip(prompts, conts, strict=True)]
    target = Spark2_5Reference.from_checkpoint(path, dtype, device)
    if seqs is None:
        conts = greedy_continuations(path, prompts, gen_len, continuations, target)
        seqs = [p + c for p, c in zip(prompts, conts, strict=True)]
    return target, prompt_len, seqs
