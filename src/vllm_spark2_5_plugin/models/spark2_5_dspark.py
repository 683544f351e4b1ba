# SPDX-License-Identifier: Apache-2.0
"""Spark2_5 DSpark draft model for vLLM 0.32.0 (math: ``docs/dspark.md``).

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

The heads and the draft attention/decoder layer are in
:mod:`vllm_spark2_5_plugin.models.dspark_layers` (the Markov and confidence
heads are vLLM's own DSpark heads; ``rnn`` adds its recurrence); this module
reads top-down: model -> ForCausalLM. The independent pure-PyTorch statement
of the same math is :mod:`vllm_spark2_5_plugin.references.dspark`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.logger import init_logger
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.models.utils import (
    AutoWeightsLoader,
    WeightsMapper,
    maybe_prefix,
)

from vllm_spark2_5_plugin import vllm_seam
from vllm_spark2_5_plugin.configs.cudagraph import coverage_hint
from vllm_spark2_5_plugin.configs.dspark import DSparkSettings, read_dspark_settings
from vllm_spark2_5_plugin.configs.kv_cache_window import (
    SAME_WINDOW,
    KVCacheWindow,
    choose_draft_kv_cache_window,
)
from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
from vllm_spark2_5_plugin.models.checkpoint_tables import draft_tensors
from vllm_spark2_5_plugin.models.dspark_layers import (
    DSparkConfidenceHead,
    Spark2_5DSparkDecoderLayer,
    Spark2_5MarkovHead,
)
from vllm_spark2_5_plugin.models.spark2_5 import (
    STACKED_PROJECTIONS,
    Spark2_5LayerSpec,
)
from vllm_spark2_5_plugin.models.weight_checks import (
    PROJECTION_OUTPUT_SCALE,
    CheckpointFiles,
    LoadPolicy,
    WeightCheck,
    kv_cache_scale_name,
)
from vllm_spark2_5_plugin.names import DRAFT_WEIGHT_PREFIXES, PLUGIN_NAME, SLIDING

logger = init_logger("vllm.spark2_5_plugin.dspark")

#: The speculator's context slots: one mapping, one per draft layer, or None.
ContextSlots = torch.Tensor | list[torch.Tensor | None] | None

# ---------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------


class Spark2_5DSparkModel(nn.Module):
    """main_proj/main_norm, draft layers, final norm and the DSpark heads.

    ``embed_tokens`` is the target's (aliased in by vLLM's DSpark loader);
    draft layer ``j`` registers its attention as
    ``{prefix}.layers.{num_target_layers + j}`` so its KV-cache name never
    collides with a target layer's. Sliding layers declare ``kv_cache_window``
    to vLLM's KV-cache manager and read ``settings.sliding_window``.
    """

    def __init__(
        self,
        *,
        vllm_config: VllmConfig,
        config: Spark2_5Config,
        settings: DSparkSettings,
        start_layer_id: int,
        kv_cache_window: KVCacheWindow = SAME_WINDOW,
        prefix: str = "",
    ) -> None:
        super().__init__()
        self.config = config
        self.settings = settings
        cache_config = vllm_config.cache_config
        quant_config = vllm_config.quant_config
        # For vLLM's AutoWeightsLoader: it applies the quantization method's
        # checkpoint name mappings only where it finds quant_config.
        self.quant_config = quant_config
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
                Spark2_5LayerSpec(
                    config,
                    layer_type,
                    settings.sliding_window,
                    cache_config,
                    quant_config,
                    kv_cache_window=kv_cache_window,  # sliding layers only
                    # The target's longest sequence, plus the draft block.
                    max_positions=vllm_config.model_config.max_model_len
                    + (settings.block_size or 0),
                ),
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
            DSparkConfidenceHead(
                hidden + settings.markov_rank,
                prefix=maybe_prefix(prefix, "confidence_head"),
                bias=True,
                with_markov=True,
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
        context_slot_mapping: ContextSlots = None,
    ) -> None:
        """Write every draft layer's context K/V (``None`` slots: dummy run;
        a list: one slot mapping per layer, in KV-cache-layer-name order)."""
        per_layer = isinstance(context_slot_mapping, list | tuple)
        for j, layer in enumerate(self.layers):
            slots = context_slot_mapping[j] if per_layer else context_slot_mapping
            attn = layer.self_attn
            k, v = attn.context_kv(context_states, context_positions)
            if slots is not None:  # None: dummy run, compute only
                attn.store_kv(k, v, slots)

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor
    ) -> torch.Tensor:
        """The draft layers and the final norm over the embedded block."""
        # One forward per draft step, before the sequential Markov calls.
        self.markov_head.reset_state()
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
        # What the sliding layers tell vLLM's KV-cache manager: the layout's
        # cheapest grouping (their kernel reads settings.sliding_window).
        self.kv_cache_choice = choose_draft_kv_cache_window(vllm_config, self.settings)
        if SLIDING in self.settings.layer_types:
            logger.info_once(
                "%s: %s",
                PLUGIN_NAME,
                self.kv_cache_choice.describe(self.settings.sliding_window),
            )
        self.model = Spark2_5DSparkModel(
            vllm_config=vllm_config,
            config=self.config,
            settings=self.settings,
            start_layer_id=num_target_layers,
            kv_cache_window=self.kv_cache_choice.window,
            prefix=maybe_prefix(prefix, "model"),
        )
        hint = coverage_hint(vllm_config)
        if hint is not None:
            logger.info_once("%s: %s", PLUGIN_NAME, hint)
        self.lm_head: nn.Module | None = None  # shared from the target
        self.logits_processor = LogitsProcessor(self.config.vocab_size)
        # The draft is not torch.compile'd: give its norms, RoPE and
        # activation vLLM's fused kernels instead of unfused PyTorch ops.
        self.platform_kernels = vllm_seam.use_platform_kernels(self.model)
        logger.debug_once(
            "%s: DSpark draft layers use vLLM's kernels for %s",
            PLUGIN_NAME,
            ", ".join(self.platform_kernels) or "no op",
        )

    # -- hooks of vLLM's DSpark speculator -------------------------------------

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_input_ids(input_ids)

    def combine_hidden_states(self, aux_hidden_states: torch.Tensor) -> torch.Tensor:
        return self.model.combine_hidden_states(aux_hidden_states)

    def precompute_and_store_context_kv(
        self, states: torch.Tensor, positions: torch.Tensor, slots: ContextSlots = None
    ) -> None:
        self.model.precompute_and_store_context_kv(states, positions, slots)

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
        if inputs_embeds is None:
            inputs_embeds = self.embed_input_ids(input_ids)
        return self.model(positions, inputs_embeds)

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

    def compute_confidence(
        self, head_hidden: torch.Tensor, markov_embed: torch.Tensor
    ) -> torch.Tensor:
        if self.model.confidence_head is None:
            raise RuntimeError(
                "compute_confidence needs dspark_enable_confidence_head: true in "
                "the checkpoint's config.json"
            )
        return torch.sigmoid(self.model.confidence_head(head_hidden, markov_embed))

    # -- weights ---------------------------------------------------------------

    #: Draft tensors after their checkpoint prefix -> this module's parameters.
    hf_to_vllm_mapper = WeightsMapper(orig_to_new_stacked=STACKED_PROJECTIONS)

    def _load_policy(self) -> LoadPolicy:
        """Every load must be whole (a draft gets no partial weight updates):
        by the checkpoint's tables where the draft is unquantised, by what
        every quantisation method keeps where it is quantised; the checkpoint
        is the draft config's."""
        return LoadPolicy(
            CheckpointFiles(self.config.name_or_path),
            check=self.model.main_proj.quant_config is None,
            require_all=True,
            first_load_only=False,
        )

    def _draft_tensors(
        self, weights: Iterable[tuple[str, torch.Tensor]], check: WeightCheck
    ) -> Iterable[tuple[str, torch.Tensor]]:
        """The draft's tensors as ``model.<name>``, from exactly one prefix,
        each shape-checked (``check``) before vLLM's weight loaders see it."""
        found: str | None = None
        params = dict(self.named_parameters())
        for ckpt_name, tensor in weights:
            prefix = next(
                (p for p in DRAFT_WEIGHT_PREFIXES if ckpt_name.startswith(p)), None
            )
            if prefix is None:
                continue  # a target tensor: the target model loads it
            if found is not None and prefix != found:
                raise ValueError(
                    f"The checkpoint holds DSpark draft weights under several "
                    f"prefixes {sorted({found, prefix})}; keep exactly one of "
                    f"{list(DRAFT_WEIGHT_PREFIXES)}"
                )
            found = prefix
            # Older llm-compressor's KV-cache scale names, through the
            # method's mapping before the q/k/v fusion (as the target's).
            name = kv_cache_scale_name(
                "model." + ckpt_name[len(prefix) :], self.model.quant_config
            )
            if name is None:
                continue  # the method drops it
            if self.model.confidence_head is None and name.startswith(
                "model.confidence_head."
            ):
                logger.warning_once(
                    "%s: ignoring DSpark confidence_head weights because "
                    "dspark_enable_confidence_head is false",
                    PLUGIN_NAME,
                )
                continue
            # A quantised draft's tensors carry the method's own names (KV-cache
            # scales, GPTQ's g_idx), which vLLM's loader maps or drops with
            # the method's mappings; only an unquantised one is judged here.
            if (
                self.model.quant_config is None
                and self.hf_to_vllm_mapper.map_name(name) not in params
                and not PROJECTION_OUTPUT_SCALE.search(name)  # named by the check
            ):
                raise ValueError(
                    f"DSpark draft tensor {ckpt_name!r} has no matching parameter; "
                    + (
                        "q/k/v biases need attention_bias: true in config.json "
                        "(the draft layers share the target's setting)"
                        if name.endswith(".bias")
                        else "check dspark_layer_types (the number of draft "
                        "layers), dspark_markov_head_type and "
                        "dspark_enable_confidence_head against the checkpoint"
                    )
                )
            check.check(name, tensor, shown=ckpt_name)
            self._draft_prefix = found
            yield name, tensor

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load the draft from ``draft_model.*``, ``mtp.*`` or ``model.mtp.*``.

        vLLM streams the whole (shared) checkpoint through here; target
        tensors are skipped, draft tensors go through the same loader and
        stacked-projection mapping as the target's. Every parameter must come
        from the checkpoint, each shard of a fused one included: a missing
        draft tensor raises, naming it; so does a tensor whose shape is not
        the one config.json gives, before any weight loader sees it.
        """
        self._draft_prefix: str | None = None

        def shown(name: str) -> str:  # model.<name> -> the checkpoint's name
            return (self._draft_prefix or "") + name.removeprefix("model.")

        policy = self._load_policy()
        check = WeightCheck(
            self,
            draft_tensors(self.config, self.settings),
            policy=policy,
            mapper=self.hf_to_vllm_mapper,
            shown=shown,
        )
        loaded = AutoWeightsLoader(self).load_weights(
            self._draft_tensors(weights, check), mapper=self.hf_to_vllm_mapper
        )
        where = self._draft_prefix or " / ".join(DRAFT_WEIGHT_PREFIXES)
        header = (
            f"The checkpoint {policy.checkpoint.describe()} lacks DSpark "
            f"draft weights (looked under {where})"
        )
        check.finish(loaded, header=header)
        return loaded


__all__ = ["Spark2_5DSparkForCausalLM", "Spark2_5DSparkModel"]
