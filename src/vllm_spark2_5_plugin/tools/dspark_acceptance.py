# SPDX-License-Identifier: Apache-2.0
"""Offline DSpark acceptance of a checkpoint's draft, replayed with the references.

Greedy speculative decoding over the target's own greedy sequences, reported
as vLLM's spec-decode metrics are.

    python -m vllm_spark2_5_plugin.tools.dspark_acceptance CKPT [--help]

How the replay works: ``docs/dspark_training.md``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from vllm_spark2_5_plugin.configs.dspark import read_dspark_settings
from vllm_spark2_5_plugin.names import DRAFT_WEIGHT_PREFIXES
from vllm_spark2_5_plugin.references.dspark import DSparkReference
from vllm_spark2_5_plugin.references.layers import with_config_defaults
from vllm_spark2_5_plugin.references.spark2_5 import Spark2_5Reference
from vllm_spark2_5_plugin.tools.dspark_checkpoint import (
    draft_prefix,
    read_target_input,
    reference_input_problem,
    weights_problem,
)
from vllm_spark2_5_plugin.tools.dspark_data import (
    DTYPES,
    VLLM_DTYPES,
    VLLM_OPTION_DEFAULTS,
    check_length,
    device_name,
    int_at_least,
    read_sequences,
    settle_vllm_options,
    target_and_sequences,
    target_features,
    vllm_seed_problem,
)
from vllm_spark2_5_plugin.tools.tiny_checkpoint import seed_value

# -- the replay ------------------------------------------------------------------------


@dataclass
class AcceptanceReport:
    num_sequences: int
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    mean_acceptance_length: float
    acceptance_rate_per_position: list[float]
    accepted_histogram: list[int]  # drafts that accepted exactly 0 .. K tokens

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def offline_acceptance(
    target: Spark2_5Reference,
    draft: DSparkReference,
    sequences: Sequence[Sequence[int]],
    prompt_lens: int | Sequence[int],
    num_tokens: int | None = None,
) -> AcceptanceReport:
    """Greedy DSpark speculative decoding of ``sequences``, replayed.

    ``sequences[s] = prompt + greedy continuation``; ``prompt_lens`` is ``P``
    (one int for all, or one per sequence). ``num_tokens`` (``K``) defaults to
    the draft's block size. The first step drafts at ``L = P`` from the first
    output token ``seq[P]``; a step that accepts ``a`` tokens moves on to
    ``L + a + 1``; steps run while ``L + K <= len(seq) - 1``. The full account:
    ``docs/dspark_training.md``.
    """
    k = draft.config.block_size if num_tokens is None else num_tokens
    if k is None:
        raise ValueError("num_tokens is required: the draft sets no block size")
    if k < 1:
        raise ValueError(f"num_tokens must be at least 1, got {k}")
    if isinstance(prompt_lens, int):
        prompt_lens = [prompt_lens] * len(sequences)
    layer_ids = sorted(draft.config.target_layer_ids)
    hist = [0] * (k + 1)
    per_pos = [0] * k
    with torch.no_grad():
        for seq, p in zip(sequences, prompt_lens, strict=True):
            seq = list(seq)
            feats = target_features(target, seq, layer_ids)
            n_aux = len(layer_ids)
            c = draft.combine(list(feats.chunk(n_aux, dim=-1)))
            ctx = draft.context_kv_all(c) if hasattr(draft, "context_kv_all") else None
            pos = p
            while pos + k <= len(seq) - 1:
                context = ctx.prefix(pos) if ctx is not None else c[:pos]
                tokens = draft.draft(context, seq[pos], k).tokens
                accepted = 0
                while accepted < k and tokens[accepted] == seq[pos + 1 + accepted]:
                    per_pos[accepted] += 1
                    accepted += 1
                hist[accepted] += 1
                pos += accepted + 1
    drafts = sum(hist)
    accepted_total = sum(per_pos)
    return AcceptanceReport(
        num_sequences=len(sequences),
        num_drafts=drafts,
        num_draft_tokens=drafts * k,
        num_accepted_tokens=accepted_total,
        mean_acceptance_length=1.0 + accepted_total / max(drafts, 1),
        acceptance_rate_per_position=[n / max(drafts, 1) for n in per_pos],
        accepted_histogram=hist,
    )


def checkpoint_acceptance(
    path: str | Path,
    sequences: Sequence[Sequence[int]],
    prompt_lens: int | Sequence[int],
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    target: Spark2_5Reference | None = None,
    num_tokens: int | None = None,
) -> AcceptanceReport:
    """:func:`offline_acceptance` of the draft stored in checkpoint ``path``."""
    target = target or Spark2_5Reference.from_checkpoint(path, dtype, device)
    draft = DSparkReference.from_checkpoint(path, dtype, device)
    return offline_acceptance(target, draft, sequences, prompt_lens, num_tokens)


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """The command line, returning the report as a dict."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("checkpoint", type=Path)
    add("--num-prompts", type=int_at_least(1), default=8)
    add("--prompt-len", type=int_at_least(1), default=32)
    add("--gen-len", type=int_at_least(1), default=128)
    add("--seed", type=seed_value(), default=1234)
    add("--continuations", choices=["reference", "vllm"], default="reference")
    add(
        "--vllm-dtype",
        choices=VLLM_DTYPES,
        help="dtype of the vLLM continuations (default auto)",
    )
    add("--sequences", type=Path, help="JSON {prompt_len, sequences}: no generation")
    add("--num-tokens", type=int_at_least(1), help="K (default: the block size)")
    add("--device", type=device_name, default="cpu")
    add("--dtype", choices=list(DTYPES), default="float32")
    args = parser.parse_args(argv)
    problem = settle_vllm_options(
        args, {"vllm_dtype": VLLM_OPTION_DEFAULTS["vllm_dtype"]}
    )
    if problem is not None:
        parser.error(problem)
    if (problem := vllm_seed_problem(args)) is not None:
        parser.error(problem)
    dtype, path = DTYPES[args.dtype], args.checkpoint
    # The target's fields as vLLM reads them, a checkpoint the references
    # read as served (not quantized, say), its tensors from the shard headers
    # (unreadable, missing or misshapen ones ended in a traceback).
    try:
        raw, config = read_target_input(path)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        prefix = draft_prefix(path)
    except ValueError as exc:  # several prefixes, or an unreadable shard
        parser.error(str(exc))
    if prefix is None:
        parser.error(
            f"{path} has no DSpark draft tensors (none under "
            f"{', '.join(DRAFT_WEIGHT_PREFIXES)}); train one into a copy with "
            "spark2_5-train-dspark IN OUT --init-draft target"
        )
    try:  # the DSpark fields as vLLM reads them (aliases included)
        settings = read_dspark_settings(config)
    except (ValueError, TypeError) as exc:
        parser.error(f"{path / 'config.json'}: {exc}")
    # The same of the draft's layers and tensors.
    problem = reference_input_problem(path, raw, settings.layer_types)
    problem = problem or weights_problem(path, config, raw, (settings, prefix))
    if problem is not None:
        parser.error(problem)
    k = args.num_tokens or settings.block_size
    if k is None:
        parser.error(f"{path} sets no dspark_block_size; pass --num-tokens")
    # Every sequence needs room for one draft step after its prompt: K + 1
    # tokens (a report of no drafts would read as acceptance length 1).
    given = None
    if args.sequences is not None:
        fields = with_config_defaults(raw)  # as vLLM reads config.json
        try:
            given = read_sequences(
                args.sequences,
                vocab_size=fields["vocab_size"],
                min_new=k + 1,
                max_len=fields["max_position_embeddings"],
            )
        except ValueError as exc:
            parser.error(f"--sequences: {exc}")
    elif args.gen_len < k + 1:
        parser.error(
            f"--gen-len {args.gen_len} leaves no draft step of K={k} tokens: "
            f"use --gen-len {k + 1} or more"
        )
    else:
        try:
            check_length(raw, args.prompt_len, args.gen_len, args.continuations)
        except ValueError as exc:
            parser.error(str(exc))
    target, plen, seqs = target_and_sequences(
        path,
        args.num_prompts,
        args.prompt_len,
        args.gen_len,
        args.seed,
        args.continuations,
        dtype,
        args.device,
        vllm_dtype=args.vllm_dtype,
        sequences=given,
    )
    report = checkpoint_acceptance(
        path, seqs, plen, dtype, args.device, target, args.num_tokens
    ).as_dict()
    print(json.dumps(report, indent=2))
    return report


def main(argv: list[str] | None = None) -> None:
    run(argv)


__all__ = [
    "AcceptanceReport",
    "checkpoint_acceptance",
    "offline_acceptance",
    "run",
]


if __name__ == "__main__":
    main()
