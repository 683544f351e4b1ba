# SPDX-License-Identifier: Apache-2.0
"""The DSpark draft as a batched, differentiable torch module; its loss and init.

It depends on torch only: written from the draft math (``docs/dspark.md``), not
from the references or the vLLM model. See ``docs/dspark_training.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vllm_spark2_5_plugin.names import SLIDING as SLIDING_TYPE
from vllm_spark2_5_plugin.tools.dspark_draft_config import DraftConfig

# -- the layers ------------------------------------------------------------------------


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


# -- the batched draft and its mask ----------------------------------------------------


def context_mask(
    anchors: torch.Tensor, t: torch.Tensor, window: int | None
) -> torch.Tensor:
    """``[S, A, T]``: which context positions ``t`` the block at ``L`` sees.

    ``max(0, L-W) <= t < L`` for a sliding layer of window ``W``, ``t < L``
    for a full layer (``window=None``); positions ``>= L`` stay hidden, so
    anchors of one sequence share its context K/V without seeing the future.
    """
    first = anchors * 0 if window is None else (anchors - window).clamp(min=0)
    return (t >= first[..., None]) & (t < anchors[..., None])


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
            sliding = layer.layer_type == SLIDING_TYPE
            visible = context_mask(anchors, t, cfg.sliding_window if sliding else None)
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


# -- the loss --------------------------------------------------------------------------


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


# -- initialisation --------------------------------------------------------------------


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


def state_fit_problem(
    own: dict[str, tuple[int, ...]], given: dict[str, tuple[int, ...]]
) -> str | None:
    """Why tensors of shapes ``given`` cannot fill parameters of shapes
    ``own`` (names to shapes), or ``None`` when they fit exactly."""
    missing, extra = sorted(set(own) - set(given)), sorted(set(given) - set(own))
    bad = sorted(n for n in own if n in given and given[n] != own[n])
    parts = [
        f"{what} {names}"
        for what, names in (("missing", missing), ("unexpected", extra))
        if names
    ] + [f"wrong shape {n}: {given[n]} for {own[n]}" for n in bad]
    if not parts:
        return None
    return "draft tensors do not fit the draft config: " + "; ".join(parts)


def draft_shapes(cfg: DraftConfig) -> dict[str, tuple[int, ...]]:
    """The draft's parameter shapes for ``cfg``, without allocating them."""
    with torch.device("meta"):
        draft = DSparkDraft(cfg, None, None)
    return {n: tuple(p.shape) for n, p in draft.named_parameters()}


def load_state(draft: DSparkDraft, state: dict[str, torch.Tensor]) -> None:
    own = dict(draft.named_parameters())
    problem = state_fit_problem(
        {n: tuple(p.shape) for n, p in own.items()},
        {n: tuple(t.shape) for n, t in state.items()},
    )
    if problem is not None:
        raise ValueError(f"{problem}; use --init-draft random")
    with torch.no_grad():
        for name, p in own.items():
            p.copy_(state[name])
