# SPDX-License-Identifier: Apache-2.0
"""Train the DSpark draft of a Spark2_5 checkpoint on its target's greedy output.

    spark2_5-train-dspark IN_DIR OUT_DIR [--help]

The training loop and the command. Data, batched forward, loss, determinism,
checkpoint writing and worked examples: ``docs/dspark_training.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from vllm_spark2_5_plugin.configs.dspark import read_dspark_settings
from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
from vllm_spark2_5_plugin.names import FULL
from vllm_spark2_5_plugin.names import SLIDING as SLIDING_TYPE
from vllm_spark2_5_plugin.ops.limits import unsupported_head_dim_reason
from vllm_spark2_5_plugin.references.dspark import DSparkReference
from vllm_spark2_5_plugin.references.layers import with_config_defaults
from vllm_spark2_5_plugin.tools.dspark_acceptance import (
    AcceptanceReport,
    checkpoint_acceptance,
    offline_acceptance,
)
from vllm_spark2_5_plugin.tools.dspark_checkpoint import (
    draft_prefix,
    draft_tensor_shapes,
    noise_token_id,
    read_draft,
    read_target_input,
    reference_input_problem,
    with_dspark_fields,
    write_checkpoint,
)
from vllm_spark2_5_plugin.tools.dspark_data import (
    DTYPES,
    VLLM_DTYPES,
    VLLM_OPTION_DEFAULTS,
    check_length,
    device_name,
    int_at_least,
    number_in_range,
    read_sequences,
    settle_vllm_options,
    stacked_target_features,
    target_and_sequences,
    vllm_seed_problem,
    write_sequences,
)
from vllm_spark2_5_plugin.tools.dspark_draft_config import DraftConfig
from vllm_spark2_5_plugin.tools.dspark_draft_torch import (
    DSparkDraft,
    draft_loss,
    draft_shapes,
    initial_state,
    load_state,
    state_fit_problem,
)
from vllm_spark2_5_plugin.tools.tiny_checkpoint import (
    SEED_MOST,
    empty_dir,
    output_location_problem,
    overwrite_problem,
    seed_value,
)

# -- training --------------------------------------------------------------------------


def step_shape(args: argparse.Namespace, n_seq: int, n_pos: int) -> tuple[int, int]:
    """(sequences, anchors of each) per step: ``--batch-anchors`` anchors,
    at most ``--anchors-per-seq`` of a sequence's ``n_pos``. Where a step
    takes every anchor of a sequence, a sequence is never taken twice in one
    step: the copy would add nothing but work (one sequence made 256 copies
    of its one anchor)."""
    per_seq = min(args.anchors_per_seq, n_pos)
    n_seqs = max(1, math.ceil(args.batch_anchors / per_seq))
    if per_seq == n_pos:
        n_seqs = min(n_seqs, n_seq)
    return n_seqs, per_seq


def train_draft(
    draft: DSparkDraft,
    feats: torch.Tensor,
    tokens: torch.Tensor,
    prompt_len: int,
    args: argparse.Namespace,
    autocast_dtype: torch.dtype | None,
) -> list[dict[str, float]]:
    """AdamW on the draft over anchors ``L = P .. T-2`` of every sequence.

    Each step takes ``ceil(batch_anchors / A)`` sequences (in a seeded
    shuffled order) and ``A = min(anchors_per_seq, T-1-P)`` distinct anchors
    of each; warm-up then cosine (or constant) learning rate.
    """
    n_seq, seq_len = tokens.shape
    n_pos = seq_len - 1 - prompt_len
    if n_pos < 1:
        raise ValueError("--gen-len must be at least 2")
    n_seqs, per_seq = step_shape(args, n_seq, n_pos)
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(
        params, lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay
    )
    warmup = min(args.warmup, args.steps // 5)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if args.schedule == "constant":
            return 1.0
        frac = (step - warmup) / max(1, args.steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    gen = torch.Generator().manual_seed(args.seed + 1)
    order: list[int] = []
    history = []
    device = feats.device
    for step in range(args.steps):
        while len(order) < n_seqs:
            order += torch.randperm(n_seq, generator=gen).tolist()
        rows, order = order[:n_seqs], order[n_seqs:]
        anchors = torch.stack(
            [torch.randperm(n_pos, generator=gen)[:per_seq].sort().values for _ in rows]
        )
        index = torch.tensor(rows, device=device)
        with torch.autocast(
            device.type,
            dtype=autocast_dtype or torch.float32,
            enabled=autocast_dtype is not None,
        ):
            out = draft(feats[index], tokens[index], (anchors + prompt_len).to(device))
            loss, metrics = draft_loss(out, args.position_decay, args.confidence_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, args.clip)
        opt.step()
        sched.step()
        metrics |= {
            "step": step,
            "loss": float(loss.detach()),
            "grad_norm": float(grad_norm),
        }
        history.append(metrics)
        if step % args.log_every == 0 or step == args.steps - 1:
            print(json.dumps({k: round(v, 5) for k, v in metrics.items()}), flush=True)
    return history


# -- the command -----------------------------------------------------------------------
def _layer_types(text: str) -> list[str]:
    names = {
        "sliding": SLIDING_TYPE,
        SLIDING_TYPE: SLIDING_TYPE,
        "full": FULL,
        FULL: FULL,
    }
    try:
        return [names[t.strip()] for t in text.split(",")]
    except KeyError as exc:
        raise argparse.ArgumentTypeError(
            f"layer type {exc} is not sliding/full"
        ) from None


def _layer_ids(text: str) -> list[int]:
    """An argparse ``type``: comma-separated target layer indices."""
    try:
        return [int(i) for i in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated layer indices such as 1,6,10, got {text!r}"
        ) from None


def _number(minimum: float, above: bool = False, most: float | None = None):
    """An argparse ``type``: a finite float in range (``number_in_range``)."""
    return number_in_range(float, minimum, above, most)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = p.add_argument
    add("input", type=Path, help="Spark2_5 checkpoint directory")
    add(
        "output", type=Path, help="where to write the checkpoint with the trained draft"
    )
    # The trainer seeds torch with --seed and --seed + 1.
    add("--seed", type=seed_value(most=SEED_MOST - 1), default=0)
    add("--steps", type=int_at_least(0), default=1000)
    add("--num-prompts", type=int_at_least(1), default=64, help="training sequences")
    add(
        "--eval-prompts",
        type=int_at_least(0),
        default=8,
        help="held-out sequences, drawn before the training ones (0: no eval)",
    )
    add("--prompt-len", type=int_at_least(1), default=64)
    add("--gen-len", type=int_at_least(2), default=256)
    add("--lr", type=_number(0), default=1e-3)
    add("--weight-decay", type=_number(0), default=0.0)
    add("--warmup", type=int_at_least(0), default=50)
    add("--schedule", choices=["cosine", "constant"], default="cosine")
    add("--batch-anchors", type=int_at_least(1), default=256, help="anchors per step")
    add("--anchors-per-seq", type=int_at_least(1), default=64)
    add("--position-decay", type=_number(0), default=1.0, help="loss weight decay**i")
    add(
        "--confidence-weight",
        type=_number(0),
        help="loss weight of the confidence head (default 1; a draft with one only)",
    )
    add("--clip", type=_number(0, above=True), default=1.0)
    add("--log-every", type=int_at_least(1), default=25)
    add(
        "--device",
        type=device_name,
        default="cuda" if torch.cuda.is_available() else "cpu",
    )
    add("--dtype", choices=["float32", "bfloat16", "float64"], default="float32")
    add("--continuations", choices=["reference", "vllm"], default="reference")
    add(
        "--vllm-gpu-memory-utilization",
        type=_number(0, above=True, most=1),
        help="with --continuations vllm (default 0.8)",
    )
    add(
        "--vllm-dtype",
        choices=VLLM_DTYPES,
        help="dtype of the vLLM continuations (default auto)",
    )
    add("--init-draft", choices=["checkpoint", "random", "target"], default=None)
    add("--block-size", type=int)
    add("--markov-head-type", choices=["vanilla", "rnn"])
    add("--markov-rank", type=int)
    add("--draft-layer-types", type=_layer_types, help="e.g. sliding,full")
    add("--draft-sliding-window", type=int)
    add("--target-layer-ids", type=_layer_ids, help="e.g. 1,6,10")
    add("--confidence-head", action=argparse.BooleanOptionalAction, default=None)
    add("--noise-token-id", type=int)
    add("--sequences", type=Path, help="JSON {prompt_len, sequences}: skip generation")
    add(
        "--save-sequences",
        type=Path,
        help="write the sequences used (same format) to this new file",
    )
    add(
        "--overwrite",
        action="store_true",
        help="replace the checkpoint in the output dir (one holding a config.json)",
    )
    return p


def check_draft_config(raw: dict[str, Any], cfg: DraftConfig) -> None:
    """Check the config.json the trainer would write as vLLM will read it:
    ``Spark2_5Config`` and the DSpark settings checks (``ValueError`` naming
    the field and value)."""
    written = with_dspark_fields(raw, cfg.config_fields())
    read_dspark_settings(Spark2_5Config.from_dict(written))
    # vLLM's start-up check of a DSpark server (configs.dspark): sliding
    # draft layers run on the fixed-history kernel.
    reason = unsupported_head_dim_reason(cfg.head_dim)
    if SLIDING_TYPE in cfg.layer_types and reason is not None:
        raise ValueError(
            f"dspark_layer_types has sliding layers and head_dim={cfg.head_dim}: "
            f"{reason}; give the draft full-attention layers only"
        )


def train(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the command; returns the ``train_dspark.json`` summary. Input it
    refuses stops it with ``parser.error`` (exit status 2) before any work."""
    parser = build_parser()
    args = parser.parse_args(argv)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    src, dst = args.input, args.output
    if dst.resolve() == src.resolve():
        parser.error("the output directory must differ from the input")
    if dst.resolve() in src.resolve().parents or src.resolve() in dst.resolve().parents:
        # --overwrite would delete the input; a copy into itself never ends.
        parser.error("the output directory must not contain or be inside the input")
    # The target's fields as vLLM reads them (a field of the wrong type used
    # to end in a traceback from the draft config); a checkpoint the
    # references would read wrongly (quantized, say); then every target
    # tensor the run reads, from the shard headers. All before anything
    # below reads them, before --overwrite deletes anything, and before the
    # output is looked at (a missing input is the first thing to fix).
    try:
        raw, config = read_target_input(src)
    except ValueError as exc:
        parser.error(str(exc))
    # Where the output goes is checked next; what --overwrite would delete
    # there (only an earlier checkpoint), just before deleting it below.
    problem = output_location_problem(dst, args.overwrite)
    if problem is not None:
        parser.error(problem)
    replace_output = dst.exists() and any(dst.iterdir())
    shape = dict(
        block_size=args.block_size,
        markov_rank=args.markov_rank,
        target_layer_ids=args.target_layer_ids,
        markov_head_type=args.markov_head_type,
        enable_confidence_head=args.confidence_head,
        layer_types=args.draft_layer_types,
        sliding_window=args.draft_sliding_window,
    )
    try:
        prefix_in = draft_prefix(src)
    except ValueError as exc:  # several prefixes, or an unreadable shard
        parser.error(str(exc))
    shape_given = any(v is not None for v in shape.values())
    init = args.init_draft or (
        "checkpoint" if prefix_in and not shape_given else "random"
    )
    cfg = DraftConfig.from_config(raw, noise_token_id=args.noise_token_id, **shape)
    no_default_noise = None
    if cfg.noise_token_id is None:
        default, no_default_noise = noise_token_id(src)
        cfg = replace(cfg, noise_token_id=default)
    if init == "checkpoint" and prefix_in is None:
        parser.error(
            f"--init-draft checkpoint: {src} has no draft tensors; use "
            "--init-draft target or random"
        )
    try:
        check_draft_config(raw, cfg)
    except (ValueError, TypeError) as exc:
        # Only the dspark_* fields (of config.json or the options) are left
        # to fail here: the target's passed checked_config above.
        if no_default_noise and cfg.noise_token_id is None:
            # The reason the tokenizer gave no default (a broken file, say).
            exc = f"{exc} ({no_default_noise[:300]})"
        parser.error(
            f"the draft's settings cannot be served: {exc}. Set them with "
            "--block-size, --markov-rank, --target-layer-ids, --markov-head-type, "
            "--confidence-head, --draft-layer-types, --draft-sliding-window or "
            "--noise-token-id"
        )
    # The references compute the features, the continuations and the
    # acceptance: refuse a checkpoint they would read wrongly, before any work.
    problem = reference_input_problem(src, raw, cfg.layer_types)
    if problem is not None:
        parser.error(problem)
    if init == "checkpoint":
        # Before anything is deleted: the checkpoint's draft must fit the
        # settings (a changed --markov-rank, say, does not).
        problem = state_fit_problem(
            draft_shapes(cfg), draft_tensor_shapes(src, prefix_in)
        )
        if problem is not None:
            parser.error(
                f"--init-draft checkpoint: {src}'s {problem}; keep the draft's "
                "shape settings or use --init-draft random or target"
            )
    if args.confidence_weight is not None and not cfg.enable_confidence_head:
        parser.error(
            "--confidence-weight weighs the confidence head's loss, but this "
            "draft has none: add --confidence-head, or drop the option"
        )
    if args.confidence_weight is None:
        args.confidence_weight = 1.0
    problem = settle_vllm_options(args, VLLM_OPTION_DEFAULTS) or vllm_seed_problem(args)
    if problem is not None:
        parser.error(problem)
    given = check_data_options(parser, args, raw, cfg.block_size, replace_output)
    if replace_output:
        # Only now that the input and the settings passed their checks, and
        # only an earlier checkpoint (it holds a config.json), never the
        # working directory: the same rule as the checkpoint makers'.
        problem = overwrite_problem(dst)
        if problem is not None:
            parser.error(problem)
        empty_dir(dst)
    previous = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        summary = _run(args, raw, cfg, init, prefix_in, given)
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
    (dst / "train_dspark.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2), flush=True)
    return summary


def check_data_options(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    raw: dict[str, Any],
    block_size: int,
    replace_output: bool,
) -> tuple[int, list[list[int]]] | None:
    """``parser.error`` naming the option when the data options cannot
    work: sequences too short for an anchor (or, with held-out ones, for a
    draft step of ``block_size`` tokens) or longer than the target's
    positions, a ``--sequences`` file that cannot be trained on (it is read
    and checked here, and returned), a ``--save-sequences`` path that cannot
    be written or would replace a file (any existing file, or one inside the
    input or the output)."""
    # An anchor needs the token after it; a replayed draft step, K + 1 tokens.
    min_new = max(2, block_size + 1) if args.eval_prompts else 2
    given = None
    if args.sequences is not None:
        fields = with_config_defaults(raw)  # as vLLM reads config.json
        try:
            given = read_sequences(
                args.sequences,
                take=args.num_prompts + args.eval_prompts,
                vocab_size=fields["vocab_size"],
                min_new=min_new,
                max_len=fields["max_position_embeddings"],
            )
        except ValueError as exc:
            parser.error(f"--sequences: {exc}")
    elif args.gen_len < min_new:
        parser.error(
            f"--gen-len {args.gen_len} leaves the held-out acceptance no draft "
            f"step of {block_size} tokens: use --gen-len {min_new} or more, or "
            "--eval-prompts 0"
        )
    else:
        try:
            check_length(raw, args.prompt_len, args.gen_len, args.continuations)
        except ValueError as exc:
            parser.error(str(exc))
    save = args.save_sequences
    if save is not None:
        if save.is_dir() or not save.parent.is_dir():
            parser.error(
                f"--save-sequences {save}: name a file in an existing directory"
            )
        if args.sequences is not None and save.resolve() == args.sequences.resolve():
            parser.error(
                "--save-sequences would overwrite the --sequences file; name another"
            )
        # A file of the input or of the output (which the run writes, and
        # --overwrite deletes first) is never the place: one written over
        # the input's tokenizer.json broke the input and the output alike.
        parents = save.resolve().parents
        for what, where in (("input", args.input), ("output", args.output)):
            if where.resolve() in parents:
                deletes = what == "output" and replace_output
                more = ", which --overwrite deletes" if deletes else ""
                parser.error(
                    f"--save-sequences {save} is inside the {what} {where}{more}; "
                    "write it elsewhere"
                )
        if save.exists() or save.is_symlink():
            parser.error(
                f"--save-sequences {save} already exists; the trainer writes a new "
                "file only: remove it or name another"
            )
    return given


def _run(
    args,
    raw,
    cfg: DraftConfig,
    init: str,
    prefix_in: str | None,
    given: tuple[int, list[list[int]]] | None = None,
) -> dict:
    t_start = time.time()
    times: dict[str, float] = {}
    torch.manual_seed(args.seed)
    src, dst, device = args.input, args.output, torch.device(args.device)
    dtype = DTYPES[args.dtype]
    n_train, n_eval = args.num_prompts, args.eval_prompts
    n_all = n_train + n_eval
    mark = time.time()
    target, plen, seqs = target_and_sequences(
        src,
        n_all,
        args.prompt_len,
        args.gen_len,
        args.seed,
        args.continuations,
        dtype,
        device,
        sequences=given,
        gpu_memory_utilization=args.vllm_gpu_memory_utilization,
        vllm_dtype=args.vllm_dtype,
        held_out=n_eval,
    )
    if args.save_sequences is not None:
        write_sequences(args.save_sequences, plen, seqs)
    # The held-out sequences come first: the same ones whatever --num-prompts
    # is, so runs with more or less training data are judged on one set.
    eval_seqs, train_seqs = seqs[:n_eval], seqs[n_eval:]
    times["continuations_s"] = time.time() - mark
    mark = time.time()
    feats = stacked_target_features(target, train_seqs, cfg.target_layer_ids)
    tokens = torch.tensor(train_seqs, device=device)
    times["target_features_s"] = time.time() - mark

    param_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    half = dtype if dtype in (torch.bfloat16, torch.float16) else None
    draft = DSparkDraft(cfg, target.embed_tokens, target.lm_head)
    ckpt_draft = None
    if init == "checkpoint" and prefix_in:
        ckpt_draft = read_draft(src, prefix_in)
    target_types = target.config.layer_types
    state = initial_state(
        draft, init, args.seed, ckpt_draft, target.weights, target_types
    )
    load_state(draft, state)
    draft.to(device, param_dtype)
    prefix_out = prefix_in or "mtp."

    def reference_draft() -> DSparkReference:
        weights = {n: t for n, t in target.weights.items() if "layers" not in n}
        weights |= {prefix_out + n: p.detach() for n, p in draft.named_parameters()}
        return DSparkReference({**raw, **cfg.config_fields()}, weights, dtype, device)

    before = after = None
    if eval_seqs:
        mark = time.time()
        before = offline_acceptance(target, reference_draft(), eval_seqs, plen)
        times["eval_before_s"] = time.time() - mark
    mark = time.time()
    history = train_draft(draft, feats, tokens, plen, args, half)
    if device.type == "cuda":
        torch.cuda.synchronize()
    times["train_s"] = time.time() - mark
    mark = time.time()
    tensors = {n: p.detach() for n, p in draft.named_parameters()}
    write_checkpoint(src, dst, tensors, prefix_out, cfg.config_fields())
    times["write_s"] = time.time() - mark
    if eval_seqs:
        mark = time.time()
        after = checkpoint_acceptance(dst, eval_seqs, plen, dtype, str(device), target)
        times["eval_after_s"] = time.time() - mark
    times["total_s"] = time.time() - t_start
    summary = _summary(
        args,
        cfg,
        init,
        prefix_out,
        history,
        (before, after),
        times,
        n_params=sum(p.numel() for p in draft.parameters()),
        shape=(n_train, len(seqs[0]), plen),
    )
    # Two runs that differ tell from these whether their data differed (the
    # target's continuations) or only the training itself.
    summary["sequences_sha256"] = {
        "train": sequences_digest(train_seqs),
        "eval": sequences_digest(eval_seqs),
    }
    return summary


def sequences_digest(seqs: list[list[int]]) -> str:
    """SHA-256 of token sequences (ids, one sequence per line)."""
    text = "\n".join(" ".join(map(str, s)) for s in seqs)
    return hashlib.sha256(text.encode()).hexdigest()


def _summary(
    args: argparse.Namespace,
    cfg: DraftConfig,
    init: str,
    prefix_out: str,
    history: list[dict[str, float]],
    acceptance: tuple[AcceptanceReport | None, AcceptanceReport | None],
    times: dict[str, float],
    n_params: int,
    shape: tuple[int, int, int],
) -> dict[str, Any]:
    """The ``train_dspark.json`` summary; ``shape`` = (sequences, length, P)."""
    device = torch.device(args.device)
    n_train, seq_len, plen = shape
    before, after = acceptance

    def mean(key: str, part: list) -> float:
        return sum(h[key] for h in part) / len(part)

    n_seqs, per_seq = step_shape(args, n_train, seq_len - 1 - plen)
    head, tail = history[: min(10, len(history))], history[-min(10, len(history)) :]
    return {
        "input": str(args.input),
        "output": str(args.output),
        "prefix": prefix_out,
        "init_draft": init,
        "dspark": cfg.config_fields(),
        "args": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
        },
        "seed": args.seed,
        "steps": args.steps,
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else "cpu",
        "dtype": args.dtype,
        "torch": torch.__version__,
        "num_train_sequences": n_train,
        # What the run used (with --sequences, the file's; "args" holds the
        # command line, whose --prompt-len and --gen-len it then ignores).
        "prompt_len": plen,
        "sequence_length": seq_len,
        "draft_parameters": n_params,
        "anchors_per_step": n_seqs * per_seq,
        "ms_per_step": round(1000 * times["train_s"] / max(1, args.steps), 2),
        "loss": {
            "first": history[0]["loss"] if history else None,
            "start_mean10": mean("loss", head) if head else None,
            "end_mean10": mean("loss", tail) if tail else None,
            "last": history[-1]["loss"] if history else None,
        },
        "teacher_forced_accept_len": {
            "start_mean10": mean("tf_accept_len", head) if head else None,
            "end_mean10": mean("tf_accept_len", tail) if tail else None,
        },
        "loss_curve": [
            [h["step"], round(h["loss"], 5)]
            for h in history
            if h["step"] % args.log_every == 0 or h["step"] == len(history) - 1
        ],
        "acceptance": {
            "before": before.as_dict() if before else None,
            "after": after.as_dict() if after else None,
        },
        "time_s": {k: round(v, 3) for k, v in times.items()},
    }


def main(argv: list[str] | None = None) -> None:
    train(argv)


__all__ = ["build_parser", "main", "train", "train_draft"]


if __name__ == "__main__":
    main()
