# SPDX-License-Identifier: Apache-2.0
"""Offline DSpark acceptance, and the data side of :mod:`.train_dspark`.

Data: seeded random prompts, the target's greedy continuations (reference or
vLLM), the target's hidden states at the draft's layers, and checkpoint I/O
(find the draft prefix, read tensors, write a checkpoint with a new draft).

Acceptance: replay greedy speculative decoding with the references.

Given a checkpoint with a DSpark draft and sequences ``prompt + continuation``
that the target produced by greedy decoding, :func:`offline_acceptance`
replays what vLLM does with ``--speculative-config '{"method": "dspark"}'`` at
temperature 0, using the pure-PyTorch references only:

* Where the first draft step starts. Prefill runs the target on the ``P``
  prompt tokens (positions ``0 .. P-1``) and samples the first output token,
  at position ``P``. The draft then runs with context ``c_0 .. c_{P-1}`` (the
  target's hidden states of the prompt) and the block ``[anchor, noise...]``
  at positions ``P .. P+K-1`` whose anchor is that first output token: the
  first draft step has ``L = P`` and anchor ``seq[P]``, and it proposes the
  tokens of positions ``P+1 .. P+K``. The first output token itself is never
  drafted.
* A step at ``L`` drafts ``K`` tokens; the target accepts the longest prefix
  equal to its own greedy tokens ``seq[L+1 ..]`` (``a`` tokens) and emits one
  more token itself (the correction, or the bonus token after a full accept),
  at position ``L+a+1``. That token is the next anchor: ``L += a + 1``.
* Steps are counted while a whole block of true tokens exists
  (``L + K <= len(seq) - 1``); the tail of a sequence, where vLLM would stop
  at ``max_tokens``, is left out so that every step could accept ``K``.

Reported like vLLM's spec-decode metrics: ``mean_acceptance_length = 1 +
accepted / drafts`` and ``acceptance_rate_per_position[i]`` = fraction of
drafts whose ``i``-th token was accepted.

Efficient: one reference target pass per sequence gives every hidden state,
``c`` is combined once per sequence, and the draft layers' context K/V are
computed once per sequence (``DSparkReference.context_kv_all(c).prefix(L)``).

    python -m vllm_spark2_5_plugin.tools.dspark_acceptance CKPT \
        [--num-prompts 8 --prompt-len 32 --gen-len 128 --seed 1234] \
        [--continuations reference|vllm] [--vllm-dtype auto] [--sequences FILE] \
        [--num-tokens K] [--device cpu] [--dtype float32]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from vllm_spark2_5_plugin.names import DRAFT_WEIGHT_PREFIXES, DSPARK_ALIASES
from vllm_spark2_5_plugin.references.dspark import DSparkReference
from vllm_spark2_5_plugin.references.spark2_5 import Spark2_5Reference

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


# -- prompts and the target's greedy continuations ----------------------------------


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
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(path))
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
        max_model_len=max(map(len, prompts)) + gen_len + 8,
        gpu_memory_utilization=spec["gpu_memory_utilization"],
        dtype=spec["dtype"],
        enforce_eager=True,
    )
    params = SamplingParams(temperature=0.0, max_tokens=gen_len, ignore_eos=True)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params)
    spec["continuations"] = [list(o.outputs[0].token_ids) for o in outputs]
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
) -> list[list[int]]:
    """The target's greedy continuation (``gen_len`` tokens) of every prompt.

    ``reference``: :meth:`Spark2_5Reference.greedy` (tiny models, CPU).
    ``vllm``: ``vllm.LLM`` at temperature 0 with ``ignore_eos``, in a child
    process so that its GPU memory is free again when it returns.
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
        job.write_text(json.dumps(spec))
        code = f"import {__name__} as m; m._vllm_worker({str(path)!r}, {str(job)!r})"
        subprocess.run([sys.executable, "-c", code], check=True)
        out = json.loads(job.read_text())["continuations"]
    short = [i for i, c in enumerate(out) if len(c) != gen_len]
    if short:
        raise RuntimeError(f"vLLM stopped early on prompts {short}")
    return out


def target_features(
    target: Spark2_5Reference, ids: Sequence[int], layer_ids: Sequence[int]
) -> torch.Tensor:
    """``[T, n*H]``: the outputs of target layers ``layer_ids`` (ascending)."""
    with torch.no_grad():
        stream = target.residual_stream(list(ids))
        return torch.cat([stream[i + 1] for i in sorted(layer_ids)], dim=-1)


# -- the checkpoint --------------------------------------------------------------------

INDEX = "model.safetensors.index.json"
DRAFT_SHARD = "model-dspark-draft.safetensors"


def read_tensors(path: Path, keep) -> dict[str, torch.Tensor]:
    """The tensors of every shard whose name ``keep`` accepts."""
    from safetensors import safe_open

    out = {}
    for shard in sorted(path.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            out.update({n: f.get_tensor(n) for n in f.keys() if keep(n)})  # noqa: SIM118
    return out


def draft_prefix(path: Path) -> str | None:
    """The one draft prefix the checkpoint's tensors use (``None``: no draft)."""
    from safetensors import safe_open

    found = set()
    for shard in path.glob("*.safetensors"):
        with safe_open(str(shard), framework="pt") as f:
            names = list(f.keys())  # noqa: SIM118 (safe_open is not a dict)
            found |= {
                p for n in names for p in DRAFT_WEIGHT_PREFIXES if n.startswith(p)
            }
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
    config = json.loads((src / "config.json").read_text())
    for name, value in fields.items():
        config[name] = value
        if DSPARK_ALIASES.get(name) in config:
            config[DSPARK_ALIASES[name]] = value
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def noise_token_id(path: Path) -> int | None:
    """The tokenizer's mask token (or ``<|mask|>``), the default noise token."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(path))
    except Exception:  # noqa: BLE001
        return None
    if tok.mask_token_id is not None:
        return tok.mask_token_id
    ids = tok.convert_tokens_to_ids(["<|mask|>"])
    return ids[0] if ids[0] != tok.unk_token_id and ids[0] is not None else None


# -- the replay --------------------------------------------------------------------


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
    """Greedy DSpark speculative decoding of ``sequences``, replayed (module doc).

    ``sequences[s] = prompt + greedy continuation``; ``prompt_lens`` is ``P``
    (one int for all, or one per sequence). ``num_tokens`` (``K``) defaults to
    the draft's block size.
    """
    k = num_tokens or draft.config.block_size
    if not k:
        raise ValueError("num_tokens is required: the draft sets no block size")
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
    add("--num-prompts", type=int, default=8)
    add("--prompt-len", type=int, default=32)
    add("--gen-len", type=int, default=128)
    add("--seed", type=int, default=1234)
    add("--continuations", choices=["reference", "vllm"], default="reference")
    add("--vllm-dtype", default="auto")
    add("--sequences", type=Path, help="JSON {prompt_len, sequences}: no generation")
    add("--num-tokens", type=int, default=None, help="K (default: the block size)")
    add("--device", default="cpu")
    add("--dtype", choices=list(DTYPES), default="float32")
    args = parser.parse_args(argv)
    dtype, path, plen = DTYPES[args.dtype], args.checkpoint, args.prompt_len
    seqs = None
    if args.sequences is not None:
        given = json.loads(args.sequences.read_text())
        plen, seqs = given["prompt_len"], given["sequences"]
    else:
        vocab = json.loads((path / "config.json").read_text())["vocab_size"]
        pool = prompt_token_pool(path, vocab)
        prompts = random_prompts(pool, args.num_prompts, plen, args.seed)
        if args.continuations == "vllm":  # before the reference takes GPU memory
            conts = greedy_continuations(
                path,
                prompts,
                args.gen_len,
                "vllm",
                seed=args.seed,
                vllm_dtype=args.vllm_dtype,
            )
            seqs = [p + c for p, c in zip(prompts, conts, strict=True)]
    target = Spark2_5Reference.from_checkpoint(path, dtype, args.device)
    if seqs is None:
        conts = greedy_continuations(path, prompts, args.gen_len, "reference", target)
        seqs = [p + c for p, c in zip(prompts, conts, strict=True)]
    report = checkpoint_acceptance(
        path, seqs, plen, dtype, args.device, target, args.num_tokens
    ).as_dict()
    print(json.dumps(report, indent=2))
    return report


def main(argv: list[str] | None = None) -> None:
    run(argv)


if __name__ == "__main__":
    main()
