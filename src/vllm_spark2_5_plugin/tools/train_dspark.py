# SPDX-License-Identifier: Apache-2.0
"""Train the DSpark draft of a Spark2_5 checkpoint on its target's greedy output.

    spark2_5-train-dspark IN_DIR OUT_DIR [--overwrite] [--seed 0] [--steps 1000]
        [--num-prompts 64] [--eval-prompts 8] [--prompt-len 64] [--gen-len 256]
        [--lr 1e-3] [--batch-anchors 256] [--anchors-per-seq 64]
        [--device cuda|cpu] [--dtype float32|bfloat16|float64]
        [--continuations reference|vllm] [--vllm-dtype auto]
        [--sequences FILE] [--save-sequences FILE]
        [--init-draft checkpoint|random|target] [--block-size 8]
        [--markov-head-type vanilla|rnn] [--markov-rank 32]
        [--draft-layer-types sliding,full] [--draft-sliding-window W]
        [--target-layer-ids 1,6,10] [--confidence-head | --no-confidence-head]

1. Seeded random prompts (no special tokens) and the target's greedy
   continuations: ``reference`` (``Spark2_5Reference.greedy``, tiny models) or
   ``vllm`` (``vllm.LLM`` at temperature 0, in a child process). ``--sequences``
   reads ``{"prompt_len": P, "sequences": [...]}`` instead.
2. The target's hidden states at the draft's layers, from the reference target
   on ``--device`` in ``--dtype``: computed once, frozen.
3. AdamW on the draft only (embedding and LM head are the target's, frozen):
   every step drafts ``--batch-anchors`` blocks at once with teacher forcing,
   :class:`DSparkDraft`; loss = CE of every block position (+ BCE of the
   confidence head). Warm-up then cosine learning rate; seeded and
   deterministic algorithms (same seed, same device -> same weights).
4. OUT_DIR = IN_DIR with the draft tensors (under the input's prefix, else
   ``mtp.``) in the checkpoint dtype and the ``dspark_*`` fields of
   config.json; ``train_dspark.json`` holds the summary (also printed).
   ``--eval-prompts`` held-out sequences measure the offline acceptance
   (:mod:`.dspark_acceptance`) before and after training.

Without a draft in IN_DIR (or with shape options) the draft starts from
``random`` weights; ``target`` copies the target's last layer of each type.
``--dtype bfloat16`` trains fp32 master weights under autocast.

:class:`DSparkDraft` depends on torch only: it is written from the draft math,
not from the references or the vLLM model.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vllm_spark2_5_plugin.names import DSPARK_ALIASES, FULL
from vllm_spark2_5_plugin.names import SLIDING as SLIDING_TYPE

# -- the draft's shape ---------------------------------------------------------------


def _rope_per_type(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """RoPE parameters per layer type from any config.json spelling."""
    defaults = {SLIDING_TYPE: 1e4, FULL: 1e6}
    params = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    nested = any(t in params for t in defaults)
    out = {}
    for layer_type, theta in defaults.items():
        entry = dict(params.get(layer_type) or {}) if nested else dict(params)
        entry.setdefault("rope_type", entry.get("type", "default"))
        entry.setdefault("rope_theta", raw.get("rope_theta") or theta)
        out[layer_type] = entry
    return out


def _dspark(raw: dict[str, Any], name: str) -> Any:
    value = raw.get(name)
    return (
        raw.get(DSPARK_ALIASES[name])
        if value is None and name in DSPARK_ALIASES
        else value
    )


@dataclass(frozen=True)
class DraftConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_act: str
    rms_norm_eps: float
    attention_bias: bool
    attention_output_gate: bool
    rope_parameters: dict[str, dict[str, Any]]
    block_size: int
    markov_rank: int
    target_layer_ids: tuple[int, ...]
    markov_head_type: str
    enable_confidence_head: bool
    noise_token_id: int | None
    layer_types: tuple[str, ...]
    sliding_window: int

    @classmethod
    def from_config(cls, raw: dict[str, Any], **overrides: Any) -> DraftConfig:
        """Target fields + ``dspark_*`` fields of config.json; ``overrides`` win."""
        n = raw["num_hidden_layers"]
        default_ids = sorted(
            {min(n - 1, 1 + round(k * max(n - 3, 0) / 2)) for k in range(3)}
        )
        dspark = {
            "block_size": _dspark(raw, "dspark_block_size") or 8,
            "markov_rank": _dspark(raw, "dspark_markov_rank") or 32,
            "target_layer_ids": _dspark(raw, "dspark_target_layer_ids") or default_ids,
            "markov_head_type": _dspark(raw, "dspark_markov_head_type") or "vanilla",
            "enable_confidence_head": bool(
                _dspark(raw, "dspark_enable_confidence_head")
            ),
            "noise_token_id": _dspark(raw, "dspark_noise_token_id"),
            "layer_types": raw.get("dspark_layer_types") or [SLIDING_TYPE],
            "sliding_window": raw.get("dspark_sliding_window")
            or raw.get("sliding_window", 4096),
        }
        dspark.update({k: v for k, v in overrides.items() if v is not None})
        dspark["target_layer_ids"] = tuple(sorted(dspark["target_layer_ids"]))
        dspark["layer_types"] = tuple(dspark["layer_types"])
        return cls(
            vocab_size=raw["vocab_size"],
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            num_attention_heads=raw["num_attention_heads"],
            num_key_value_heads=raw["num_key_value_heads"],
            head_dim=raw["head_dim"],
            hidden_act=raw.get("hidden_act", "gelu_pytorch_tanh"),
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            attention_bias=bool(raw.get("attention_bias", False)),
            attention_output_gate=raw.get("attention_output_gate", True),
            rope_parameters=_rope_per_type(raw),
            **dspark,
        )

    def config_fields(self) -> dict[str, Any]:
        """The canonical ``dspark_*`` fields of config.json."""
        return {
            "dspark_block_size": self.block_size,
            "dspark_markov_rank": self.markov_rank,
            "dspark_target_layer_ids": list(self.target_layer_ids),
            "dspark_markov_head_type": self.markov_head_type,
            "dspark_enable_confidence_head": self.enable_confidence_head,
            "dspark_noise_token_id": self.noise_token_id,
            "dspark_layer_types": list(self.layer_types),
            "dspark_sliding_window": self.sliding_window,
        }


# -- the batched, differentiable draft (torch only) ---------------------------------


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf * self.weight.to(xf.dtype)


def _rope(pos: torch.Tensor, rope: dict[str, Any], head_dim: int) -> tuple:
    """NeoX cos/sin ``[..., 1, D/2]`` (float64 angles) for integer ``pos``."""
    kind = rope.get("rope_type", "default")
    if kind not in ("default", "linear"):
        raise ValueError(f"rope_type {kind!r} is not supported (default, linear)")
    exps = torch.arange(0, head_dim, 2, dtype=torch.float64, device=pos.device)
    inv = 1.0 / float(rope["rope_theta"]) ** (exps / head_dim)
    if kind == "linear":
        inv = inv / float(rope["factor"])
    ang = pos.to(torch.float64)[..., None, None] * inv
    return ang.cos(), ang.sin()


def _rotate(x: torch.Tensor, cos_sin: tuple) -> torch.Tensor:
    cos, sin = (t.to(x.dtype) for t in cos_sin)
    a, b = x.chunk(2, dim=-1)
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


class DraftLayer(nn.Module):
    """A Spark2_5 decoder layer whose block queries also see context K/V."""

    def __init__(self, cfg: DraftConfig, layer_type: str) -> None:
        super().__init__()
        h, d, nq, nkv = (
            cfg.hidden_size,
            cfg.head_dim,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
        )
        self.cfg, self.layer_type = cfg, layer_type
        self.input_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        attn = self.self_attn = nn.Module()
        attn.q_proj = nn.Linear(h, nq * d, bias=cfg.attention_bias)
        attn.k_proj = nn.Linear(h, nkv * d, bias=cfg.attention_bias)
        attn.v_proj = nn.Linear(h, nkv * d, bias=cfg.attention_bias)
        if cfg.attention_output_gate:
            attn.g_proj = nn.Linear(h, nq, bias=False)
        attn.o_proj = nn.Linear(nq * d, h, bias=False)
        mlp = self.mlp = nn.Module()
        mlp.gate_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        mlp.up_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        mlp.down_proj = nn.Linear(cfg.intermediate_size, h, bias=False)

    def kv(self, x: torch.Tensor, cos_sin: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        """``RoPE(x Wk)``, ``x Wv`` as ``[..., nKV, D]``."""
        shape = (self.cfg.num_key_value_heads, self.cfg.head_dim)
        k = self.self_attn.k_proj(x).unflatten(-1, shape)
        return _rotate(k, cos_sin), self.self_attn.v_proj(x).unflatten(-1, shape)

    def forward(self, h, blk_rope, ctx_k, ctx_v, ctx_visible) -> torch.Tensor:
        """Blocks ``h [S, A, B, H]``; ctx_k/v ``[S, T, nKV, D]``; visible ``[S, A, T]``.

        Query (s, a, i) attends to context keys t of sequence s with
        ``ctx_visible[s, a, t]`` and to the B keys of its own block (s, a),
        non-causally: one joint softmax over ``T + B`` scores.
        """
        cfg, attn = self.cfg, self.self_attn
        nq, nkv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        x = self.input_layernorm(h)
        q = _rotate(attn.q_proj(x).unflatten(-1, (nq, d)), blk_rope)
        k, v = self.kv(x, blk_rope)
        q = q.unflatten(-2, (nkv, nq // nkv))  # [S, A, B, nKV, G, D]
        s_ctx = torch.einsum("sabkgd,stkd->skgabt", q, ctx_k)
        s_blk = torch.einsum("sabkgd,sackd->skgabc", q, k)
        s_ctx = s_ctx.masked_fill(~ctx_visible[:, None, None, :, None, :], -math.inf)
        scores = torch.cat([s_ctx, s_blk], dim=-1) / math.sqrt(d)
        probs = scores.to(torch.promote_types(scores.dtype, torch.float32)).softmax(-1)
        p_ctx, p_blk = probs.to(v.dtype).split([ctx_k.shape[1], h.shape[2]], dim=-1)
        out = torch.einsum("skgabt,stkd->sabkgd", p_ctx, ctx_v)
        out = out + torch.einsum("skgabc,sackd->sabkgd", p_blk, v)
        out = out.flatten(-3, -2)  # [S, A, B, nQ, D], head = kv * G + g
        if cfg.attention_output_gate:
            out = out * torch.sigmoid(attn.g_proj(x))[..., None].to(out.dtype)
        h = h + attn.o_proj(out.flatten(-2))
        x = self.post_attention_layernorm(h)
        approx = "tanh" if cfg.hidden_act == "gelu_pytorch_tanh" else "none"
        gated = F.gelu(self.mlp.gate_proj(x), approximate=approx) * self.mlp.up_proj(x)
        return h + self.mlp.down_proj(gated)


@dataclass
class DraftOutput:
    hidden: torch.Tensor  # [S, A, B, H] rmsnorm(x, norm)
    base_logits: torch.Tensor  # [S, A, B, V]
    markov_embeds: torch.Tensor  # [S, A, B, r]
    logits: torch.Tensor  # [S, A, B, V] base + Markov bias (teacher-forced)
    confidence_logits: torch.Tensor | None  # [S, A, B] before the sigmoid
    labels: torch.Tensor  # [S, A, B] token at L+i+1, -100 past the sequence


class DSparkDraft(nn.Module):
    """The DSpark draft over many anchors at once; parameter names = checkpoint names.

    ``embed`` and ``lm_head`` are the target's (plain tensors, not trained).
    """

    def __init__(self, cfg: DraftConfig, embed: torch.Tensor, lm_head: torch.Tensor):
        super().__init__()
        h, r, v = cfg.hidden_size, cfg.markov_rank, cfg.vocab_size
        self.cfg, self.embed, self.lm_head = cfg, embed, lm_head
        self.main_proj = nn.Linear(len(cfg.target_layer_ids) * h, h, bias=False)
        self.main_norm = RMSNorm(h, cfg.rms_norm_eps)
        self.layers = nn.ModuleList(DraftLayer(cfg, t) for t in cfg.layer_types)
        self.norm = RMSNorm(h, cfg.rms_norm_eps)
        markov = self.markov_head = nn.Module()
        markov.markov_w1 = nn.Embedding(v, r)
        markov.markov_w2 = nn.Linear(r, v, bias=False)
        if cfg.markov_head_type == "rnn":
            markov.rnn_proj = nn.Linear(r, r, bias=False)
        if cfg.enable_confidence_head:
            self.confidence_head = nn.Module()
            self.confidence_head.proj = nn.Linear(h + r, 1)

    def combine(self, feats: torch.Tensor) -> torch.Tensor:
        """``c = rmsnorm(cat_i(h^(i)) main_proj^T, main_norm)``, ``[S, T, H]``."""
        return self.main_norm(self.main_proj(feats))

    def block_hidden(self, c, tokens, anchors) -> torch.Tensor:
        """``rmsnorm(x, norm)`` of every block ``[S, A, B, H]``.

        ``c [S, T, H]``; ``tokens [S, T]``; ``anchors [S, A]`` = L of each block
        (block at positions ``L .. L+B-1``, context ``max(0, L-W) .. L-1``).
        """
        cfg = self.cfg
        seq_len = tokens.shape[1]
        pos = anchors[..., None] + torch.arange(cfg.block_size, device=anchors.device)
        ids = torch.full_like(pos, cfg.noise_token_id)
        ids[..., 0] = tokens.gather(1, anchors)
        h = self.embed[ids]
        t = torch.arange(seq_len, device=tokens.device)
        for layer in self.layers:
            rope = cfg.rope_parameters[layer.layer_type]
            first = anchors * 0
            if layer.layer_type == SLIDING_TYPE:
                first = (anchors - cfg.sliding_window).clamp(min=0)
            visible = (t >= first[..., None]) & (t < anchors[..., None])
            ctx_k, ctx_v = layer.kv(c, _rope(t, rope, cfg.head_dim))
            h = layer(h, _rope(pos, rope, cfg.head_dim), ctx_k, ctx_v, visible)
        return self.norm(h)

    def markov_embeds(self, prev: torch.Tensor) -> torch.Tensor:
        """``e_i`` for previous tokens ``prev [..., B]`` (rnn: e_{-1} = 0)."""
        rows = self.markov_head.markov_w1(prev)
        if self.cfg.markov_head_type == "vanilla":
            return rows
        e, out = None, []
        for i in range(prev.shape[-1]):
            e = (
                rows[..., i, :]
                if e is None
                else rows[..., i, :] + self.markov_head.rnn_proj(e)
            )
            e = torch.tanh(e)
            out.append(e)
        return torch.stack(out, dim=-2)

    def forward(self, feats, tokens, anchors) -> DraftOutput:
        """Teacher-forced draft of every anchor: ``prev_i = tokens[L+i]``."""
        hidden = self.block_hidden(self.combine(feats), tokens, anchors)
        base = hidden.to(self.lm_head.dtype) @ self.lm_head.T
        seq_len = tokens.shape[1]
        idx = anchors[..., None] + torch.arange(
            self.cfg.block_size, device=tokens.device
        )
        s, a, b = idx.shape

        def take(i: torch.Tensor) -> torch.Tensor:
            return tokens.gather(1, i.clamp(max=seq_len - 1).flatten(1)).view(s, a, b)

        labels = take(idx + 1).masked_fill(idx + 1 >= seq_len, -100)
        e = self.markov_embeds(take(idx))
        logits = base + self.markov_head.markov_w2(e)
        conf = None
        if self.cfg.enable_confidence_head:
            head_in = torch.cat([hidden, e.to(hidden.dtype)], dim=-1)
            conf = self.confidence_head.proj(head_in).squeeze(-1)
        return DraftOutput(hidden, base, e, logits, conf, labels)


def draft_loss(
    out: DraftOutput, position_decay: float = 1.0, confidence_weight: float = 1.0
) -> tuple[torch.Tensor, dict[str, float]]:
    """Weighted CE of every block position (+ BCE of the confidence head).

    Position i weighs ``position_decay**i``. The confidence target is "argmax
    equals the label" (detached). Also returns the teacher-forced acceptance
    length: with teacher forcing, a greedy draft accepts exactly the leading
    run of correct argmaxes, so ``1 + mean(run)`` is what the anchor would get.
    """
    labels = out.labels
    valid = labels >= 0
    logits = out.logits.float()
    ce = F.cross_entropy(
        logits.flatten(0, -2), labels.clamp(min=0).flatten(), reduction="none"
    ).view_as(labels)
    decay = position_decay ** torch.arange(labels.shape[-1], device=labels.device)
    weight = decay * valid
    loss = (ce * weight).sum() / weight.sum()
    correct = (logits.argmax(-1) == labels) & valid
    metrics = {
        "ce": float((ce * valid).sum().detach() / valid.sum()),
        "acc0": float(correct[..., 0].float().mean()),
        "tf_accept_len": 1.0 + float(correct.long().cumprod(-1).sum(-1).float().mean()),
    }
    if out.confidence_logits is not None:
        bce = F.binary_cross_entropy_with_logits(
            out.confidence_logits.float(), correct.float(), weight=valid.float()
        ) * (valid.numel() / valid.sum())
        loss = loss + confidence_weight * bce
        metrics["conf_bce"] = float(bce.detach())
    return loss, metrics


# -- initialisation -----------------------------------------------------------------


def initial_state(
    draft: DSparkDraft,
    how: str,
    seed: int,
    checkpoint_draft: dict[str, torch.Tensor] | None = None,
    target_weights: dict[str, torch.Tensor] | None = None,
    target_layer_types: list[str] | None = None,
) -> dict[str, torch.Tensor]:
    """Initial draft tensors (names after the prefix), drawn on the CPU.

    ``checkpoint``: the input checkpoint's draft. ``random``: 1/sqrt(fan_in)
    Gaussians, unit norms, zero Markov w2 and confidence head. ``target``:
    ``random`` with each draft layer copied from the target's last layer of
    the same type, ``norm`` from the target's final norm and ``main_proj``
    averaging the target layers.
    """
    if how == "checkpoint":
        if not checkpoint_draft:
            raise ValueError("--init-draft checkpoint: the input has no draft tensors")
        return checkpoint_draft
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, p in draft.named_parameters():
        if name.endswith("norm.weight"):
            state[name] = torch.ones(p.shape)
        elif name.endswith("bias") or "markov_w2" in name or "confidence" in name:
            state[name] = torch.zeros(p.shape)
        elif "markov_w1" in name:
            state[name] = torch.randn(p.shape, generator=gen)
        else:
            state[name] = torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5
    if how == "target":
        cfg, tw = draft.cfg, target_weights or {}
        n_aux = len(cfg.target_layer_ids)
        eye = torch.eye(cfg.hidden_size) / n_aux
        state["main_proj.weight"] = torch.cat([eye] * n_aux, dim=1)
        state["norm.weight"] = tw["model.norm.weight"].float().cpu()
        types = target_layer_types or []
        for j, layer_type in enumerate(cfg.layer_types):
            same = [i for i, t in enumerate(types) if t == layer_type]
            src = same[-1] if same else len(types) - 1
            for name in list(state):
                if name.startswith(f"layers.{j}."):
                    key = f"model.layers.{src}." + name.split(".", 2)[2]
                    state[name] = tw[key].float().cpu()
    elif how != "random":
        raise ValueError(f"unknown --init-draft {how!r}")
    return state


def load_state(draft: DSparkDraft, state: dict[str, torch.Tensor]) -> None:
    own = dict(draft.named_parameters())
    missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    bad = [
        n for n in own if n in state and tuple(state[n].shape) != tuple(own[n].shape)
    ]
    if missing or extra or bad:
        raise ValueError(
            f"draft tensors do not fit the draft config: missing {missing}, "
            f"unexpected {extra}, wrong shape {bad}; use --init-draft random"
        )
    with torch.no_grad():
        for name, p in own.items():
            p.copy_(state[name])


# -- training -------------------------------------------------------------------------


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
    per_seq = min(args.anchors_per_seq, n_pos)
    n_seqs = max(1, math.ceil(args.batch_anchors / per_seq))
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = p.add_argument
    add("input", type=Path, help="Spark2_5 checkpoint directory")
    add(
        "output", type=Path, help="where to write the checkpoint with the trained draft"
    )
    add("--seed", type=int, default=0)
    add("--steps", type=int, default=1000)
    add("--num-prompts", type=int, default=64, help="training sequences")
    add("--eval-prompts", type=int, default=8, help="held-out sequences (0: no eval)")
    add("--prompt-len", type=int, default=64)
    add("--gen-len", type=int, default=256)
    add("--lr", type=float, default=1e-3)
    add("--weight-decay", type=float, default=0.0)
    add("--warmup", type=int, default=50)
    add("--schedule", choices=["cosine", "constant"], default="cosine")
    add("--batch-anchors", type=int, default=256, help="anchors (blocks) per step")
    add("--anchors-per-seq", type=int, default=64)
    add("--position-decay", type=float, default=1.0, help="loss weight decay**i")
    add("--confidence-weight", type=float, default=1.0)
    add("--clip", type=float, default=1.0)
    add("--log-every", type=int, default=25)
    add("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add("--dtype", choices=["float32", "bfloat16", "float64"], default="float32")
    add("--continuations", choices=["reference", "vllm"], default="reference")
    add("--vllm-gpu-memory-utilization", type=float, default=0.8)
    add("--vllm-dtype", default="auto", help="dtype of the vLLM continuations")
    add("--init-draft", choices=["checkpoint", "random", "target"], default=None)
    add("--block-size", type=int)
    add("--markov-head-type", choices=["vanilla", "rnn"])
    add("--markov-rank", type=int)
    add("--draft-layer-types", type=_layer_types, help="e.g. sliding,full")
    add("--draft-sliding-window", type=int)
    add("--target-layer-ids", type=lambda s: [int(i) for i in s.split(",")])
    add("--confidence-head", action=argparse.BooleanOptionalAction, default=None)
    add("--noise-token-id", type=int)
    add("--sequences", type=Path, help="JSON {prompt_len, sequences}: skip generation")
    add("--save-sequences", type=Path, help="write the sequences used (same format)")
    add("--overwrite", action="store_true", help="replace a non-empty output dir")
    return p


def _check(cfg: DraftConfig, raw: dict[str, Any]) -> None:
    n = raw["num_hidden_layers"]
    if not all(0 <= i < n for i in cfg.target_layer_ids) or not cfg.target_layer_ids:
        raise ValueError(f"target layer ids {cfg.target_layer_ids} not in 0..{n - 1}")
    if len(set(cfg.target_layer_ids)) != len(cfg.target_layer_ids):
        raise ValueError(f"target layer ids repeat: {cfg.target_layer_ids}")
    if cfg.markov_head_type not in ("vanilla", "rnn"):
        raise ValueError(f"markov head type {cfg.markov_head_type!r}")
    if cfg.noise_token_id is None or not 0 <= cfg.noise_token_id < cfg.vocab_size:
        raise ValueError(f"noise token id {cfg.noise_token_id}: pass --noise-token-id")


def train(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the command; returns the ``train_dspark.json`` summary."""
    args = build_parser().parse_args(argv)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    src, dst = args.input, args.output
    if dst.resolve() == src.resolve():
        raise SystemExit("the output directory must differ from the input")
    if dst.exists() and any(dst.iterdir()):
        if not args.overwrite:
            raise SystemExit(f"{dst} is not empty; pass --overwrite to replace it")
        shutil.rmtree(dst)
    raw = json.loads((src / "config.json").read_text())
    shape = dict(
        block_size=args.block_size,
        markov_rank=args.markov_rank,
        target_layer_ids=args.target_layer_ids,
        markov_head_type=args.markov_head_type,
        enable_confidence_head=args.confidence_head,
        layer_types=args.draft_layer_types,
        sliding_window=args.draft_sliding_window,
    )
    from vllm_spark2_5_plugin.tools import dspark_acceptance as acc

    prefix_in = acc.draft_prefix(src)
    shape_given = any(v is not None for v in shape.values())
    init = args.init_draft or (
        "checkpoint" if prefix_in and not shape_given else "random"
    )
    cfg = DraftConfig.from_config(raw, noise_token_id=args.noise_token_id, **shape)
    if cfg.noise_token_id is None:
        cfg = replace(cfg, noise_token_id=acc.noise_token_id(src))
    _check(cfg, raw)
    previous = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        summary = _run(args, raw, cfg, init, prefix_in)
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
    (dst / "train_dspark.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2), flush=True)
    return summary


def _run(args, raw, cfg: DraftConfig, init: str, prefix_in: str | None) -> dict:
    from vllm_spark2_5_plugin.references.dspark import DSparkReference
    from vllm_spark2_5_plugin.references.spark2_5 import Spark2_5Reference
    from vllm_spark2_5_plugin.tools import dspark_acceptance as acc

    t_start = time.time()
    times: dict[str, float] = {}
    torch.manual_seed(args.seed)
    src, dst, device = args.input, args.output, torch.device(args.device)
    dtype = acc.DTYPES[args.dtype]
    n_train, plen = args.num_prompts, args.prompt_len
    mark = time.time()
    target, seqs = None, None
    if args.sequences is not None:
        given = json.loads(args.sequences.read_text())
        plen, seqs = given["prompt_len"], given["sequences"]
        if len(seqs) < n_train + args.eval_prompts or len(set(map(len, seqs))) != 1:
            raise ValueError(
                f"{args.sequences}: need {n_train + args.eval_prompts} sequences "
                "of one length"
            )
        seqs = seqs[: n_train + args.eval_prompts]
    else:
        pool = acc.prompt_token_pool(src, raw["vocab_size"])
        prompts = acc.random_prompts(pool, n_train + args.eval_prompts, plen, args.seed)
        if args.continuations == "vllm":  # before the reference takes GPU memory
            conts = acc.greedy_continuations(
                src,
                prompts,
                args.gen_len,
                "vllm",
                seed=args.seed,
                gpu_memory_utilization=args.vllm_gpu_memory_utilization,
                vllm_dtype=args.vllm_dtype,
            )
            seqs = [p + c for p, c in zip(prompts, conts, strict=True)]
    target = Spark2_5Reference.from_checkpoint(src, dtype, device)
    if seqs is None:
        conts = acc.greedy_continuations(
            src, prompts, args.gen_len, "reference", target
        )
        seqs = [p + c for p, c in zip(prompts, conts, strict=True)]
    if args.save_sequences is not None:
        args.save_sequences.write_text(
            json.dumps({"prompt_len": plen, "sequences": seqs}) + "\n"
        )
    times["continuations_s"] = time.time() - mark
    mark = time.time()
    feats = torch.stack(
        [acc.target_features(target, s, cfg.target_layer_ids) for s in seqs[:n_train]]
    )
    tokens = torch.tensor(seqs[:n_train], device=device)
    times["target_features_s"] = time.time() - mark

    param_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    half = dtype if dtype in (torch.bfloat16, torch.float16) else None
    draft = DSparkDraft(cfg, target.embed_tokens, target.lm_head)
    ckpt_draft = None
    if init == "checkpoint" and prefix_in:
        found = acc.read_tensors(src, lambda n: n.startswith(prefix_in))
        ckpt_draft = {n[len(prefix_in) :]: t for n, t in found.items()}
    n_layers = raw["num_hidden_layers"]
    target_types = raw.get("layer_types") or [
        FULL if i % 4 == 3 else SLIDING_TYPE for i in range(n_layers)
    ]
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

    eval_seqs = seqs[n_train:]
    before = after = None
    if eval_seqs:
        mark = time.time()
        before = acc.offline_acceptance(target, reference_draft(), eval_seqs, plen)
        times["eval_before_s"] = time.time() - mark
    mark = time.time()
    history = train_draft(draft, feats, tokens, plen, args, half)
    if device.type == "cuda":
        torch.cuda.synchronize()
    times["train_s"] = time.time() - mark
    mark = time.time()
    tensors = {n: p.detach() for n, p in draft.named_parameters()}
    acc.write_checkpoint(src, dst, tensors, prefix_out, cfg.config_fields())
    times["write_s"] = time.time() - mark
    if eval_seqs:
        mark = time.time()
        after = acc.checkpoint_acceptance(
            dst, eval_seqs, plen, dtype, str(device), target
        )
        times["eval_after_s"] = time.time() - mark
    times["total_s"] = time.time() - t_start

    def mean(key: str, part: list) -> float:
        return sum(h[key] for h in part) / len(part)

    per_seq = min(args.anchors_per_seq, len(seqs[0]) - 1 - plen)
    head, tail = history[: min(10, len(history))], history[-min(10, len(history)) :]
    return {
        "input": str(src),
        "output": str(dst),
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
        "sequence_length": len(seqs[0]),
        "draft_parameters": sum(p.numel() for p in draft.parameters()),
        "anchors_per_step": math.ceil(args.batch_anchors / per_seq) * per_seq,
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


__all__ = ["DSparkDraft", "DraftConfig", "DraftOutput", "draft_loss", "train", "main"]


if __name__ == "__main__":
    main()
