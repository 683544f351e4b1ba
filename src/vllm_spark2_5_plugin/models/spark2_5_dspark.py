"""Spark2_5 DSpark draft model for vLLM 0.32.0 (SPEC §4).

DSpark drafts a block of ``K = num_speculative_tokens`` tokens per request in
one parallel pass and then samples it left to right with a small Markov head.
vLLM's ``DSparkSpeculator`` (Model Runner V2) drives the model through these
hooks, in this order every decoding step:

1. ``combine_hidden_states(cat(aux))``: the target's hidden states after the
   configured layers, concatenated, -> ``c = rmsnorm(main_proj(.), main_norm)``.
2. ``precompute_and_store_context_kv(c, positions, slots)``: every draft layer
   projects ``c`` to its own context K/V (its own RoPE parameters) and writes
   them into its own paged KV cache.
3. ``forward(input_ids, positions)`` on the block ``[anchor, noise, ...]``:
   Spark2_5 decoder layers whose attention sees, non-causally, the context K/V
   plus the block's own K/V (sliding layers through the fixed-history kernel,
   full layers through vLLM's attention backend); returns ``rmsnorm(x, norm)``.
4. ``compute_draft_logits`` (the target's LM head, shared), then K times
   ``markov_embed(prev)`` / ``markov_bias(e)``, optionally
   ``compute_confidence``.

Reads top-down: heads -> attention -> decoder layer -> model -> ForCausalLM.
The pure-PyTorch statement of the same math is ``dspark_reference.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from vllm.config import CacheConfig, VllmConfig
from vllm.logger import init_logger
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.quantization import QuantizationConfig
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.utils import maybe_prefix

from vllm_spark2_5_plugin.configs.dspark import DSparkSettings, read_dspark_settings
from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
from vllm_spark2_5_plugin.models.spark2_5 import (
    DRAFT_WEIGHT_PREFIXES,
    STACKED_PROJECTIONS,
    Spark2_5Attention,
    Spark2_5DecoderLayer,
)
from vllm_spark2_5_plugin.names import FULL, SLIDING

logger = init_logger("vllm.spark2_5_plugin.dspark")

# Draft checkpoint names (after the prefix) that live on the inner model.
_MODEL_LEVEL = ("main_proj.", "main_norm.", "layers.", "norm.", "markov_head.")
_CONFIDENCE = "confidence_head."


# ---------------------------------------------------------------------------
# Heads
# ---------------------------------------------------------------------------


class Spark2_5MarkovHead(nn.Module):
    """Low-rank transition bias ``e_i markov_w2^T`` from the previous token.

    ``vanilla``: ``e_i = markov_w1[prev_i]``.
    ``rnn``:     ``e_i = tanh(markov_w1[prev_i] + e_{i-1} rnn_proj^T)``,
                 ``e_{-1} = 0`` at every draft step.

    The speculator calls :meth:`embed` K times per draft step with only the
    previous tokens, so the rnn state ``e_{i-1}`` lives here, in a static
    ``[max_num_reqs, r]`` buffer. It is zeroed by :meth:`reset_state`, which
    the draft's ``forward`` calls: vLLM runs exactly one draft forward before
    the K sequential Markov calls of each step (eagerly and inside the same
    FULL CUDA graph), so the reset is part of every step. Everything is
    in-place tensor work on fixed buffers (no host sync, no Python step
    counter), hence capture-safe; replays reset and advance the same memory.
    """

    def __init__(
        self,
        vocab_size: int,
        markov_rank: int,
        head_type: str,
        max_num_reqs: int,
        quant_config: QuantizationConfig | None = None,
        prefix: str = "",
    ) -> None:
        super().__init__()
        self.head_type = head_type
        # Replicated: the head runs once per draft position, sequentially, so
        # sharding it would add a collective to every position.
        self.markov_w1 = nn.Embedding(vocab_size, markov_rank)
        self.markov_w2 = ParallelLMHead(
            vocab_size,
            markov_rank,
            bias=False,
            quant_config=quant_config,
            prefix=maybe_prefix(prefix, "markov_w2"),
            disable_tp=True,
        )
        if head_type == "rnn":
            self.rnn_proj = ReplicatedLinear(
                markov_rank,
                markov_rank,
                bias=False,
                return_bias=False,
                prefix=maybe_prefix(prefix, "rnn_proj"),
            )
            self.register_buffer(
                "rnn_state", torch.zeros(max_num_reqs, markov_rank), persistent=False
            )
        else:
            self.rnn_proj = None
            self.rnn_state = None

    def reset_state(self) -> None:
        """Start a new draft step: ``e_{-1} = 0`` for every request."""
        if self.rnn_state is not None:
            self.rnn_state.zero_()

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        """``[R]`` previous tokens (int32 or int64) -> ``[R, r]`` embedding."""
        e = self.markov_w1(token_ids)
        if self.rnn_proj is None:
            return e
        num_reqs = token_ids.shape[0]
        if num_reqs > self.rnn_state.shape[0]:
            raise ValueError(
                f"rnn Markov head got {num_reqs} requests but its state holds "
                f"{self.rnn_state.shape[0]} (max_num_seqs)"
            )
        state = self.rnn_state[:num_reqs]
        e = torch.tanh(e + self.rnn_proj(state.to(e.dtype)))
        state.copy_(e)
        return e

    def bias(self, e: torch.Tensor, logits_processor: LogitsProcessor) -> torch.Tensor:
        """``[R, r]`` -> ``[R, V]`` transition bias ``e markov_w2^T``."""
        return logits_processor(self.markov_w2, e)


class Spark2_5ConfidenceHead(nn.Module):
    """``sigmoid([h, e] proj^T + b)``: chance that a drafted token is accepted."""

    def __init__(self, input_size: int, prefix: str = "") -> None:
        super().__init__()
        # float32 like vLLM's DSpark heads: it is tiny and feeds a threshold.
        self.proj = ReplicatedLinear(
            input_size,
            1,
            bias=True,
            return_bias=False,
            params_dtype=torch.float32,
            prefix=maybe_prefix(prefix, "proj"),
        )

    def forward(self, hidden: torch.Tensor, markov_embed: torch.Tensor) -> torch.Tensor:
        x = torch.cat([hidden, markov_embed.to(hidden.dtype)], dim=-1).float()
        return torch.sigmoid(self.proj(x).squeeze(-1))


# ---------------------------------------------------------------------------
# Attention over context + block
# ---------------------------------------------------------------------------


def store_kv_reference(
    kv_cache: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    slot_mapping: torch.Tensor,
    head_dim: int,
) -> None:
    """Write ``key``/``value`` rows into vLLM's paged cache at ``slot_mapping``.

    ``kv_cache`` is the per-layer ``[num_blocks, nKV, block_size, 2*D]`` view
    that FlashAttention/Triton use (any strides); ``slot = block *
    block_size + offset``; negative slots (``PAD_SLOT_ID``) are skipped, and
    like vLLM's writers only the first ``len(slot_mapping)`` rows are used.
    Plain PyTorch (with a host-side mask): the CPU/test path. On CUDA the
    attention backend's own ``do_kv_cache_update`` writes the same layout.
    """
    k_cache, v_cache = kv_cache.transpose(1, 2).split(head_dim, dim=-1)
    block_size = k_cache.shape[1]
    num = slot_mapping.shape[0]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    blocks, offsets = slots // block_size, slots % block_size
    num_kv_heads = k_cache.shape[2]
    k = key[:num].reshape(num, num_kv_heads, head_dim)[keep]
    v = value[:num].reshape(num, num_kv_heads, head_dim)[keep]
    k_cache[blocks, offsets] = k.to(k_cache.dtype)
    v_cache[blocks, offsets] = v.to(v_cache.dtype)


class Spark2_5DSparkAttention(Spark2_5Attention):
    """A Spark2_5 attention layer whose keys are context K/V plus the block.

    Every block query of a request with ``L`` context tokens sees, with no
    causal mask, positions ``max(0, L - W_d) .. L+B-1`` (sliding) or
    ``0 .. L+B-1`` (full). The vLLM ``Attention`` child owns the paged cache
    and its metadata (for sliding layers it also tells the KV manager the
    window, so older blocks can be freed). Sliding layers compute with
    :func:`fixed_history_attention` (FlashAttention/Triton would give each
    query its own symmetric window instead); full layers use vLLM's backend on
    CUDA (non-causal, the speculator's metadata). On CPU, where vLLM cannot
    run DSpark, both use the PyTorch reference of the kernel, which is how
    the tests run this exact code.
    """

    def __init__(
        self,
        config: Spark2_5Config,
        layer_type: str,
        sliding_window: int,
        cache_config: CacheConfig | None = None,
        quant_config: QuantizationConfig | None = None,
        prefix: str = "",
    ) -> None:
        super().__init__(
            config,
            layer_type,
            sliding_window,
            cache_config=cache_config,
            quant_config=quant_config,
            prefix=prefix,
        )
        self.scale = self.head_dim**-0.5

    # -- context K/V -----------------------------------------------------------

    def context_kv(
        self, states: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``K = RoPE(c Wk (+bk))``, ``V = c Wv (+bv)`` for context features.

        Runs the layer's own fused projection and drops Q: it works for every
        quantization method and for CPU's packed weights, and the context rows
        are few next to the target's own work on them.
        """
        qkv, _ = self.qkv_proj(states)
        kv = qkv[:, self.q_size :]
        k, v = kv.split([self.kv_size, self.kv_size], dim=-1)
        k = k.contiguous()
        # RoPE on K only (vLLM's rotary ops take key=None); in place on k.
        k, _ = self.rotary_emb(positions, k, None)
        return k, v.contiguous()

    def store_kv(
        self, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor
    ) -> None:
        """Write K/V rows into this layer's paged cache."""
        kv_cache = self.attn.kv_cache
        if kv_cache.is_cuda:
            self.attn.impl.do_kv_cache_update(
                self.attn,
                key.view(-1, self.num_kv_heads, self.head_dim),
                value.view(-1, self.num_kv_heads, self.head_dim),
                kv_cache,
                slot_mapping,
            )
        else:
            store_kv_reference(kv_cache, key, value, slot_mapping, self.head_dim)

    # -- block forward ---------------------------------------------------------

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        qkv, _ = self.qkv_proj(x)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        if self.layer_type == FULL and x.is_cuda:
            attn_output = self.attn(q, k, v)
        else:
            attn_output = self._fixed_history(q, k, v)
        output, _ = self.o_proj(self.gate(attn_output, x))
        return output

    def _fixed_history(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        from vllm.model_executor.layers.attention.attention import (
            get_attention_context,
        )

        metadata, _, kv_cache, slot_mapping = get_attention_context(
            self.attn.layer_name
        )
        num_tokens = q.shape[0]
        out = torch.zeros(
            num_tokens, self.num_heads, self.head_dim, dtype=q.dtype, device=q.device
        )
        if metadata is None:  # profiling / dummy run: no cache, no metadata
            return out.view(num_tokens, -1)
        if not all(
            hasattr(metadata, f)
            for f in ("block_table", "seq_lens", "query_start_loc", "slot_mapping")
        ):
            raise RuntimeError(
                f"Spark2_5 DSpark sliding draft layers read the paged KV cache "
                f"through FlashAttention/Triton-style metadata, but the draft's "
                f"attention backend produced {type(metadata).__name__}; set "
                '"attention_backend": "FLASH_ATTN" (or "TRITON_ATTN") in '
                "--speculative-config"
            )
        if slot_mapping is None:
            slot_mapping = metadata.slot_mapping
        self.store_kv(k, v, slot_mapping)

        seq_lens = metadata.seq_lens  # context + block, per request
        num_reqs = seq_lens.shape[0]
        query_start_loc = metadata.query_start_loc[: num_reqs + 1]
        # Clamped: FULL-graph padding requests own query rows but no sequence.
        context_lens = (seq_lens - query_start_loc.diff()).clamp(min=0).to(torch.int32)
        k_cache, v_cache = kv_cache.transpose(1, 2).split(self.head_dim, dim=-1)
        if q.is_cuda:
            from vllm_spark2_5_plugin.ops.fixed_history_attention import (
                fixed_history_attention as attend,
            )
        else:
            from vllm_spark2_5_plugin.ops.fixed_history_attention import (
                fixed_history_attention_reference as attend,
            )
        attend(
            q.reshape(num_tokens, self.num_heads, self.head_dim),
            k_cache,
            v_cache,
            metadata.block_table,
            context_lens,
            query_start_loc,
            self.sliding_window,  # None for full layers
            self.scale,
            out=out,
        )
        return out.view(num_tokens, -1)


class Spark2_5DSparkDecoderLayer(Spark2_5DecoderLayer):
    """A Spark2_5 decoder layer (same weights, same math) with DSpark attention."""

    attention_cls = Spark2_5DSparkAttention


# ---------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------


class Spark2_5DSparkModel(nn.Module):
    """main_proj/main_norm, draft layers, final norm and the DSpark heads.

    ``embed_tokens`` is the target's (aliased in by vLLM's DSpark loader);
    draft layer ``j`` registers its attention as
    ``{prefix}.layers.{num_target_layers + j}`` so its KV-cache name never
    collides with a target layer's.
    """

    def __init__(
        self,
        *,
        vllm_config: VllmConfig,
        config: Spark2_5Config,
        settings: DSparkSettings,
        start_layer_id: int,
        prefix: str = "",
    ) -> None:
        super().__init__()
        self.config = config
        self.settings = settings
        cache_config = vllm_config.cache_config
        quant_config = vllm_config.quant_config
        hidden = config.hidden_size
        num_aux = len(settings.target_layer_ids)

        self.embed_tokens: nn.Module | None = None  # shared from the target
        self.main_proj = ReplicatedLinear(
            num_aux * hidden,
            hidden,
            bias=False,
            return_bias=False,
            quant_config=quant_config,
            prefix=maybe_prefix(prefix, "main_proj"),
        )
        self.main_norm = RMSNorm(hidden, eps=config.rms_norm_eps)
        self.layers = nn.ModuleList(
            Spark2_5DSparkDecoderLayer(
                config,
                layer_type,
                settings.sliding_window,
                cache_config=cache_config,
                quant_config=quant_config,
                prefix=maybe_prefix(prefix, f"layers.{start_layer_id + j}"),
            )
            for j, layer_type in enumerate(settings.layer_types)
        )
        self.norm = RMSNorm(hidden, eps=config.rms_norm_eps)
        self.markov_head = Spark2_5MarkovHead(
            config.vocab_size,
            settings.markov_rank,
            settings.markov_head_type,
            max_num_reqs=vllm_config.scheduler_config.max_num_seqs,
            quant_config=quant_config,
            prefix=maybe_prefix(prefix, "markov_head"),
        )
        self.confidence_head = (
            Spark2_5ConfidenceHead(
                hidden + settings.markov_rank,
                prefix=maybe_prefix(prefix, "confidence_head"),
            )
            if settings.enable_confidence_head
            else None
        )

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.embed_tokens is None:
            raise RuntimeError(
                "The Spark2_5 DSpark draft uses the target's input embedding, but "
                "none was shared with it (vLLM's DSpark loader does this)"
            )
        return self.embed_tokens(input_ids)

    def combine_hidden_states(self, aux_hidden_states: torch.Tensor) -> torch.Tensor:
        """``[T, n*H]`` target states -> ``c = rmsnorm(. main_proj^T, main_norm)``."""
        return self.main_norm(self.main_proj(aux_hidden_states))

    def precompute_and_store_context_kv(
        self,
        context_states: torch.Tensor,
        context_positions: torch.Tensor,
        context_slot_mapping: torch.Tensor | list[torch.Tensor | None] | None = None,
    ) -> None:
        per_layer = isinstance(context_slot_mapping, list | tuple)
        for j, layer in enumerate(self.layers):
            slots = context_slot_mapping[j] if per_layer else context_slot_mapping
            attn = layer.self_attn
            k, v = attn.context_kv(context_states, context_positions)
            if slots is not None:  # None: dummy run, compute only
                attn.store_kv(k, v, slots)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # One forward per draft step, before the sequential Markov calls.
        self.markov_head.reset_state()
        hidden_states = (
            inputs_embeds
            if inputs_embeds is not None
            else self.embed_input_ids(input_ids)
        )
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual)
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


# ---------------------------------------------------------------------------
# ForCausalLM: the object vLLM's DSpark speculator talks to
# ---------------------------------------------------------------------------


class Spark2_5DSparkForCausalLM(nn.Module):
    """DSpark draft for Spark2_5 targets; weights ship in the target checkpoint.

    Full-vocabulary draft: it owns neither an input embedding nor an LM head
    (vLLM's DSpark loader aliases the target's), and draft ids are target ids.
    """

    has_own_embed_tokens = False
    has_own_lm_head = False
    draft_id_to_target_id = None

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        spec_config = vllm_config.speculative_config
        if spec_config is None or spec_config.draft_model_config is None:
            raise ValueError(
                "Spark2_5DSparkForCausalLM is a speculative draft; serve the "
                "Spark2_5 checkpoint with --speculative-config "
                '\'{"method": "dspark", "num_speculative_tokens": N}\''
            )
        # Inside the draft constructor vllm_config.model_config is the TARGET's.
        target_config = vllm_config.model_config.hf_config
        self.config: Spark2_5Config = spec_config.draft_model_config.hf_config
        num_target_layers = vllm_config.model_config.get_total_num_hidden_layers()
        self.settings = read_dspark_settings(
            self.config,
            num_target_layers=num_target_layers,
            target_hidden_size=target_config.hidden_size,
            target_vocab_size=target_config.vocab_size,
        )
        self.model = Spark2_5DSparkModel(
            vllm_config=vllm_config,
            config=self.config,
            settings=self.settings,
            start_layer_id=num_target_layers,
            prefix=maybe_prefix(prefix, "model"),
        )
        self.lm_head: nn.Module | None = None  # shared from the target
        self.logits_processor = LogitsProcessor(self.config.vocab_size)

    # -- hooks of vLLM's DSpark speculator -------------------------------------

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_input_ids(input_ids)

    def combine_hidden_states(self, aux_hidden_states: torch.Tensor) -> torch.Tensor:
        return self.model.combine_hidden_states(aux_hidden_states)

    def precompute_and_store_context_kv(
        self,
        context_states: torch.Tensor,
        context_positions: torch.Tensor,
        context_slot_mapping: torch.Tensor | list[torch.Tensor | None] | None = None,
    ) -> None:
        self.model.precompute_and_store_context_kv(
            context_states, context_positions, context_slot_mapping
        )

    def get_draft_kv_cache_layer_names(self) -> list[str]:
        return [layer.self_attn.attn.layer_name for layer in self.model.layers]

    def get_draft_attn_causal(self) -> list[bool]:
        # Every draft layer sees its whole block (sliding ones through the
        # fixed-history kernel, full ones through the backend).
        return [False] * len(self.model.layers)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        inputs_embeds: torch.Tensor | None = None,
        **_: Any,
    ) -> torch.Tensor:
        """Block hidden states after the final norm, ``rmsnorm(x, norm)``."""
        return self.model(input_ids, positions, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        if self.lm_head is None:
            raise RuntimeError(
                "The Spark2_5 DSpark draft uses the target's LM head, but none "
                "was shared with it (vLLM's DSpark loader does this)"
            )
        return self.logits_processor(self.lm_head, hidden_states)

    def compute_draft_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.compute_logits(hidden_states)

    def map_draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids

    def markov_embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.model.markov_head.embed(token_ids)

    def markov_bias(self, markov_embed: torch.Tensor) -> torch.Tensor:
        return self.model.markov_head.bias(markov_embed, self.logits_processor)

    def reset_markov_state(self) -> None:
        """Start a new sequence of ``markov_embed`` calls (forward does this)."""
        self.model.markov_head.reset_state()

    def compute_confidence(
        self, head_hidden: torch.Tensor, markov_embed: torch.Tensor
    ) -> torch.Tensor:
        if self.model.confidence_head is None:
            raise RuntimeError(
                "compute_confidence needs dspark_enable_confidence_head: true in "
                "the checkpoint's config.json"
            )
        return self.model.confidence_head(head_hidden, markov_embed)

    # -- weights ---------------------------------------------------------------

    @staticmethod
    def draft_weight_name(name: str) -> tuple[str, str] | None:
        """``(prefix, module path)`` of a draft tensor; ``None`` for target ones."""
        for prefix in DRAFT_WEIGHT_PREFIXES:
            if name.startswith(prefix):
                rest = name[len(prefix) :]
                break
        else:
            return None
        if rest.startswith(_MODEL_LEVEL) or rest.startswith(_CONFIDENCE):
            return prefix, f"model.{rest}"
        raise ValueError(
            f"Unexpected DSpark draft tensor {name!r}: after {prefix!r} expected "
            f"one of {[*_MODEL_LEVEL, _CONFIDENCE]}"
        )

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load the draft from ``draft_model.*``, ``mtp.*`` or ``model.mtp.*``.

        vLLM streams the whole (shared) checkpoint through here; target
        tensors are skipped. Returns every parameter name of this module, so
        vLLM's strict loaded-weights check passes; a draft tensor that is
        missing raises here first, naming it.
        """
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        prefixes_seen: set[str] = set()
        for ckpt_name, tensor in weights:
            mapped = self.draft_weight_name(ckpt_name)
            if mapped is None:
                continue
            prefix, name = mapped
            prefixes_seen.add(prefix)
            if len(prefixes_seen) > 1:
                raise ValueError(
                    f"The checkpoint holds DSpark draft weights under several "
                    f"prefixes {sorted(prefixes_seen)}; keep exactly one of "
                    f"{list(DRAFT_WEIGHT_PREFIXES)}"
                )
            if name.startswith("model.confidence_head.") and (
                self.model.confidence_head is None
            ):
                logger.warning_once(
                    "vllm-spark2_5-plugin: ignoring DSpark confidence_head weights "
                    "because dspark_enable_confidence_head is false"
                )
                continue
            shard_id: str | int | None = None
            if name.startswith("model.layers."):
                for ckpt_part, (param_part, shard) in STACKED_PROJECTIONS.items():
                    if ckpt_part + "." in name:
                        name = name.replace(ckpt_part + ".", param_part + ".")
                        shard_id = shard
                        break
            param = params.get(name)
            if param is None:
                raise ValueError(
                    f"DSpark draft tensor {ckpt_name!r} has no matching parameter "
                    f"({name!r}); check dspark_layer_types (the number of draft "
                    "layers), dspark_markov_head_type and "
                    "dspark_enable_confidence_head against the checkpoint"
                )
            weight_loader = getattr(param, "weight_loader", default_weight_loader)
            if shard_id is None:
                weight_loader(param, tensor)
            else:
                weight_loader(param, tensor, shard_id)
            loaded.add(name)

        missing = sorted(set(params) - loaded)
        if missing:
            where = (
                next(iter(prefixes_seen))
                if prefixes_seen
                else " / ".join(DRAFT_WEIGHT_PREFIXES)
            )
            raise ValueError(
                f"The checkpoint lacks DSpark draft weights (looked under {where}): "
                f"{missing}"
            )
        return loaded


__all__ = [
    "SLIDING",
    "Spark2_5ConfidenceHead",
    "Spark2_5DSparkAttention",
    "Spark2_5DSparkDecoderLayer",
    "Spark2_5DSparkForCausalLM",
    "Spark2_5DSparkModel",
    "Spark2_5MarkovHead",
    "store_kv_reference",
]
