# SPDX-License-Identifier: Apache-2.0
"""Spark2_5 decoder for vLLM 0.32.0, built from vLLM's own layers.

Reads top-down: MLP -> Attention -> DecoderLayer -> Model -> ForCausalLM.
Pre-norm decoder layers with hybrid sliding/full attention (RoPE parameters
per layer type), a head-wise sigmoid output gate (``g_proj``) and a gated GELU
MLP; the math is written out in ``docs/model.md``.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice
from typing import Any, ClassVar

import torch
from torch import nn
from vllm.compilation.decorators import support_torch_compile
from vllm.config import CacheConfig, VllmConfig
from vllm.distributed import get_pp_group, get_tensor_model_parallel_world_size
from vllm.model_executor.layers.activation import GeluAndMul
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import (
    ColumnParallelLinear,
    MergedColumnParallelLinear,
    QKVParallelLinear,
    RowParallelLinear,
)
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.quantization import QuantizationConfig
from vllm.model_executor.layers.rotary_embedding import get_rope
from vllm.model_executor.layers.vocab_parallel_embedding import (
    ParallelLMHead,
    VocabParallelEmbedding,
)
from vllm.model_executor.models.interfaces import (
    EagleModelMixin,
    SupportsEagle3,
    SupportsLoRA,
    SupportsPP,
)
from vllm.model_executor.models.utils import (
    AutoWeightsLoader,
    PPMissingLayer,
    WeightsMapper,
    extract_layer_index,
    make_empty_intermediate_tensors_factory,
    make_layers,
    maybe_prefix,
    spec_decode_needs_target_embed,
)
from vllm.sequence import IntermediateTensors

from vllm_spark2_5_plugin import vllm_seam
from vllm_spark2_5_plugin.configs.kv_cache_window import SAME_WINDOW, KVCacheWindow
from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
from vllm_spark2_5_plugin.models.checkpoint_tables import TARGET_HINTS, target_tensors
from vllm_spark2_5_plugin.models.weight_checks import (
    LoadPolicy,
    WeightCheck,
    classifier_head,
    kv_cache_scales_by_the_method,
    target_parameters_not_from_checkpoint,
    unlisted_target_tensor,
)
from vllm_spark2_5_plugin.names import DRAFT_WEIGHT_PREFIXES, SLIDING

# Hugging Face layout -> vLLM's fused projections.
STACKED_PROJECTIONS = {
    ".q_proj": (".qkv_proj", "q"),
    ".k_proj": (".qkv_proj", "k"),
    ".v_proj": (".qkv_proj", "v"),
    ".gate_proj": (".gate_up_proj", 0),
    ".up_proj": (".gate_up_proj", 1),
}

GELU_APPROXIMATION = {"gelu_pytorch_tanh": "tanh", "gelu": "none"}


class Spark2_5MLP(nn.Module):
    """``down(act(x W_gate) * (x W_up))`` with the two up projections fused."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        hidden_act: str,
        quant_config: QuantizationConfig | None = None,
        prefix: str = "",
    ) -> None:
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(
            hidden_size,
            [intermediate_size] * 2,
            bias=False,
            quant_config=quant_config,
            prefix=f"{prefix}.gate_up_proj",
        )
        self.down_proj = RowParallelLinear(
            intermediate_size,
            hidden_size,
            bias=False,
            quant_config=quant_config,
            prefix=f"{prefix}.down_proj",
        )
        self.act_fn = GeluAndMul(approximate=GELU_APPROXIMATION[hidden_act])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up, _ = self.gate_up_proj(x)
        x, _ = self.down_proj(self.act_fn(gate_up))
        return x


@dataclass(frozen=True)
class Spark2_5LayerSpec:
    """What one decoder layer is built from.

    ``layer_type`` picks the RoPE parameters and, for sliding layers, the
    window ``sliding_window`` (a query at t sees keys t-W+1 .. t). The target
    takes both from config.json; the DSpark draft brings its own.

    ``kv_cache_window`` is the window a sliding layer declares to vLLM's
    KV-cache manager: ``"same"`` (the default) declares ``sliding_window``,
    None a full cache, an int that window (never below ``sliding_window``).
    It decides which cache blocks vLLM keeps and how it groups the layers,
    not what the layer computes; the DSpark draft picks it per layout
    (:mod:`vllm_spark2_5_plugin.configs.kv_cache_window`).
    """

    config: Spark2_5Config
    layer_type: str
    sliding_window: int | None
    cache_config: CacheConfig | None = None
    quant_config: QuantizationConfig | None = None
    kv_cache_window: KVCacheWindow = SAME_WINDOW
    #: The positions the layer must rotate (the engine's longest sequence);
    #: None: ``max_position_embeddings``.
    max_positions: int | None = None


def build_rope(
    head_dim: int, config: Spark2_5Config, layer_type: str, max_positions: int | None
) -> nn.Module:
    """vLLM's RoPE for ``layer_type``, its table long enough for
    ``max_positions``.

    vLLM takes the longest context from one layer type's scaling factor
    (``max_position_embeddings`` x factor) and assumes every type shares it;
    with the types scaled differently (or ``ntk``, whose table is not
    scaled), a table of ``max_position_embeddings`` rows would be read past
    its end. Such a table is rebuilt longer, which is only right where its
    length does not enter the frequencies: the new table must begin with the
    old one. Otherwise (or with no single table to check, as ``longrope``
    keeps two) the length is refused.
    """
    params = config.rope_parameters[layer_type]
    mpe = config.max_position_embeddings

    def rope_for(max_position: int) -> nn.Module:
        return get_rope(
            head_dim,
            max_position=max_position,
            rope_parameters=params,
            is_neox_style=True,
        )

    rope = rope_for(mpe)
    table = getattr(rope, "cos_sin_cache", None)
    rows = mpe if table is None else table.shape[0]
    if max_positions is None or rows >= max_positions:
        return rope
    if table is not None:
        longer = rope_for(-(-max_positions * mpe // rows))  # rows grow with it
        wider = getattr(longer, "cos_sin_cache", None)
        if (
            wider is not None
            and wider.shape[0] >= max_positions
            and torch.allclose(
                wider[:rows].float(), table.float(), rtol=1e-5, atol=1e-6
            )
        ):
            return longer
    raise ValueError(
        f"max_model_len {max_positions} is longer than the RoPE of the "
        f"{layer_type} layers reaches: rope_parameters.{layer_type} (rope_type "
        f"{params.get('rope_type')!r}) covers {rows} positions and cannot be "
        f"extended without changing its rotation; serve at most {rows} tokens "
        f"(--max-model-len {rows})"
    )


def declared_kv_cache_window(spec: Spark2_5LayerSpec) -> int | None:
    """The window a layer built from ``spec`` declares to vLLM (None: full)."""
    if spec.layer_type != SLIDING:
        return None
    if spec.kv_cache_window == SAME_WINDOW:
        return spec.sliding_window
    declared = spec.kv_cache_window
    if declared is not None and declared < spec.sliding_window:
        raise ValueError(
            f"a sliding layer reading {spec.sliding_window} tokens cannot declare "
            f"a {declared}-token KV-cache window: vLLM would free blocks it reads"
        )
    return declared


class Spark2_5Attention(nn.Module):
    """GQA self-attention with per-layer-type RoPE and an optional head gate."""

    def __init__(self, spec: Spark2_5LayerSpec, prefix: str = "") -> None:
        super().__init__()
        config, quant_config = spec.config, spec.quant_config
        tp_size = get_tensor_model_parallel_world_size()
        self.total_num_heads = config.num_attention_heads
        self.total_num_kv_heads = config.num_key_value_heads
        if self.total_num_heads % tp_size:
            raise ValueError(
                f"num_attention_heads ({self.total_num_heads}) must be divisible by "
                f"the tensor parallel size ({tp_size})"
            )
        if self.total_num_kv_heads % tp_size and tp_size % self.total_num_kv_heads:
            raise ValueError(
                f"num_key_value_heads ({self.total_num_kv_heads}) and the tensor "
                f"parallel size ({tp_size}) must divide one another"
            )
        self.num_heads = self.total_num_heads // tp_size
        # With fewer KV heads than ranks, each rank keeps a replica of one.
        self.num_kv_heads = max(1, self.total_num_kv_heads // tp_size)
        self.head_dim = config.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.layer_type = spec.layer_type
        sliding = spec.layer_type == SLIDING
        self.sliding_window = spec.sliding_window if sliding else None
        self.kv_cache_window = declared_kv_cache_window(spec)

        self.qkv_proj = QKVParallelLinear(
            config.hidden_size,
            self.head_dim,
            self.total_num_heads,
            self.total_num_kv_heads,
            bias=config.attention_bias,
            quant_config=quant_config,
            prefix=f"{prefix}.qkv_proj",
        )
        # One gate logit per query head; column-parallel so each rank keeps the
        # gates of exactly the heads its share of q_proj produces.
        self.g_proj = (
            ColumnParallelLinear(
                config.hidden_size,
                self.total_num_heads,
                bias=False,
                quant_config=quant_config,
                prefix=f"{prefix}.g_proj",
            )
            if config.attention_output_gate
            else None
        )
        self.o_proj = RowParallelLinear(
            self.total_num_heads * self.head_dim,
            config.hidden_size,
            bias=False,
            quant_config=quant_config,
            prefix=f"{prefix}.o_proj",
        )
        self.rotary_emb = build_rope(
            self.head_dim, config, spec.layer_type, spec.max_positions
        )
        self.attn = Attention(
            self.num_heads,
            self.head_dim,
            self.head_dim**-0.5,
            num_kv_heads=self.num_kv_heads,
            cache_config=(
                spec.cache_config
                if sliding and spec.kv_cache_window is not None
                else vllm_seam.full_attention_cache_config(spec.cache_config)
            ),
            quant_config=quant_config,
            per_layer_sliding_window=self.kv_cache_window,
            prefix=f"{prefix}.attn",
        )

    def gate(self, attn_output: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Scale each head's output by ``sigmoid(x W_g)[head]``."""
        if self.g_proj is None:
            return attn_output
        gate_logits, _ = self.g_proj(x)
        heads = attn_output.view(-1, self.num_heads, self.head_dim)
        return (heads * torch.sigmoid(gate_logits).unsqueeze(-1)).view_as(attn_output)

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        qkv, _ = self.qkv_proj(x)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        attn_output = self.gate(self.attn(q, k, v), x)
        output, _ = self.o_proj(attn_output)
        return output


class Spark2_5DecoderLayer(nn.Module):
    """Pre-norm layer: ``h += attn(norm(h))``, then ``h += mlp(norm(h))``."""

    # The DSpark draft reuses this layer with its own attention.
    attention_cls: type[Spark2_5Attention] = Spark2_5Attention

    def __init__(self, spec: Spark2_5LayerSpec, prefix: str = "") -> None:
        super().__init__()
        config = spec.config
        self.self_attn = self.attention_cls(spec, prefix=f"{prefix}.self_attn")
        self.mlp = Spark2_5MLP(
            config.hidden_size,
            config.intermediate_size,
            config.hidden_act,
            quant_config=spec.quant_config,
            prefix=f"{prefix}.mlp",
        )
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(
            config.hidden_size, eps=config.rms_norm_eps
        )

    def forward(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        residual: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # vLLM's fused RMSNorm adds the pending residual before normalising, so
        # `hidden_states + residual` is the residual stream h of docs/model.md.
        if residual is None:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states = self.self_attn(positions, hidden_states)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        return self.mlp(hidden_states), residual


@support_torch_compile
class Spark2_5Model(nn.Module, EagleModelMixin):
    """Embedding, decoder layers and final norm; captures DSpark's aux states."""

    hf_to_vllm_mapper = WeightsMapper(
        orig_to_new_stacked=STACKED_PROJECTIONS,
        orig_to_new_prefix=dict.fromkeys(DRAFT_WEIGHT_PREFIXES),
    )
    supports_aux_hidden_states_over_pp = True

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        config: Spark2_5Config = vllm_config.model_config.hf_config
        cache_config = vllm_config.cache_config
        quant_config = vllm_config.quant_config
        self.config = config
        # vLLM's AutoWeightsLoader applies the quantization method's checkpoint
        # name mappings (KV-cache scales onto the attention layer, GPTQ's g_idx
        # dropped) only when the model or a direct child carries quant_config:
        # without it, a pipeline stage without the LM head refused such
        # checkpoints ("no module or parameter named ...self_attn.k_scale").
        self.quant_config = quant_config
        pp_group = get_pp_group()

        if (
            pp_group.is_first_rank
            or (config.tie_word_embeddings and pp_group.is_last_rank)
            or spec_decode_needs_target_embed(vllm_config)
        ):
            self.embed_tokens = VocabParallelEmbedding(
                config.vocab_size,
                config.hidden_size,
                quant_config=quant_config,
                prefix=f"{prefix}.embed_tokens",
            )
        else:
            self.embed_tokens = PPMissingLayer()

        def make_layer(prefix: str) -> Spark2_5DecoderLayer:
            spec = Spark2_5LayerSpec(
                config,
                config.layer_types[extract_layer_index(prefix)],
                config.sliding_window,
                cache_config,
                quant_config,
                max_positions=vllm_config.model_config.max_model_len,
            )
            return Spark2_5DecoderLayer(spec, prefix=prefix)

        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers, make_layer, prefix=f"{prefix}.layers"
        )
        if pp_group.is_last_rank:
            self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        else:
            self.norm = PPMissingLayer()
        self.make_empty_intermediate_tensors = make_empty_intermediate_tensors_factory(
            ["hidden_states", "residual"], config.hidden_size
        )

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids)

    def _keep_aux(
        self,
        aux: list[torch.Tensor],
        aux_id: int,
        hidden_states: torch.Tensor,
        residual: torch.Tensor | None,
    ) -> None:
        """Keep the residual stream entering layer ``aux_id`` if it was asked for."""
        if aux_id in self.aux_hidden_state_layers:
            aux.append(hidden_states if residual is None else hidden_states + residual)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors: IntermediateTensors | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor | IntermediateTensors | tuple[torch.Tensor, list[torch.Tensor]]:
        pp_group = get_pp_group()
        if pp_group.is_first_rank:
            if inputs_embeds is None:
                inputs_embeds = self.embed_input_ids(input_ids)
            hidden_states, residual = inputs_embeds, None
        else:
            assert intermediate_tensors is not None
            hidden_states = intermediate_tensors["hidden_states"]
            residual = intermediate_tensors["residual"]

        # Aux id k is the residual stream entering layer k (0 = embeddings), so
        # DSpark's `dspark_target_layer_ids=[i]` (aux id i + 1) is the output of
        # decoder layer i.
        aux_hidden_states = self.collect_remote_aux_hidden_states(intermediate_tensors)
        local_aux: list[torch.Tensor] = []
        if pp_group.is_first_rank:
            self._keep_aux(local_aux, self.start_layer, hidden_states, residual)
        for idx, layer in enumerate(
            islice(self.layers, self.start_layer, self.end_layer),
            start=self.start_layer,
        ):
            hidden_states, residual = layer(positions, hidden_states, residual)
            self._keep_aux(local_aux, idx + 1, hidden_states, residual)

        if not pp_group.is_last_rank:
            return IntermediateTensors(
                {
                    "hidden_states": hidden_states,
                    "residual": residual,
                    **self.pack_local_aux_hidden_states(local_aux),
                }
            )
        hidden_states, _ = self.norm(hidden_states, residual)
        aux_hidden_states += local_aux
        if aux_hidden_states:
            return hidden_states, aux_hidden_states
        return hidden_states


class Spark2_5ForCausalLM(nn.Module, SupportsLoRA, SupportsPP, SupportsEagle3):
    """Spark2_5 causal LM: ``Spark2_5Model`` plus a (possibly tied) LM head.

    LoRA (``docs/model.md``) applies to every linear layer of the decoder:
    q/k/v (packed), the head gate ``g_proj``, ``o_proj`` and gate/up/down.
    """

    hf_to_vllm_mapper = Spark2_5Model.hf_to_vllm_mapper
    # Also how LoRA finds an adapter's q/k/v and gate/up inside the fused layers.
    packed_modules_mapping = {
        "qkv_proj": ["q_proj", "k_proj", "v_proj"],
        "gate_up_proj": ["gate_proj", "up_proj"],
    }
    # No LoRA on the embedding or LM head: vLLM refuses such adapters at load.
    embedding_modules: ClassVar[dict[str, str]] = {}
    # An adapter's DSpark-draft tensors are ignored, like the checkpoint's.
    lora_skip_prefixes: ClassVar[list[str]] = list(DRAFT_WEIGHT_PREFIXES)

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        config: Spark2_5Config = vllm_config.model_config.hf_config
        self.config = config
        self.model = Spark2_5Model(
            vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model")
        )
        if get_pp_group().is_last_rank:
            self.lm_head = ParallelLMHead(
                config.vocab_size,
                config.hidden_size,
                quant_config=vllm_config.quant_config,
                prefix=maybe_prefix(prefix, "lm_head"),
            )
            if config.tie_word_embeddings:
                self.lm_head = self.lm_head.tie_weights(self.model.embed_tokens)
            self.logits_processor = LogitsProcessor(config.vocab_size)
        else:
            self.lm_head = PPMissingLayer()
        self.make_empty_intermediate_tensors = (
            self.model.make_empty_intermediate_tensors
        )
        self.load_policy = LoadPolicy.from_config(vllm_config, vllm_config.model_config)

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_input_ids(input_ids)

    def forward(
        self, *args: Any, **kwargs: Any
    ) -> torch.Tensor | IntermediateTensors | tuple[torch.Tensor, list[torch.Tensor]]:
        """:meth:`Spark2_5Model.forward` (``input_ids, positions,
        intermediate_tensors=None, inputs_embeds=None``), which vLLM compiles."""
        return self.model(*args, **kwargs)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        return self.logits_processor(self.lm_head, hidden_states)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Strict: shapes checked against config.json before vLLM's loaders run,
        and every parameter (each shard of a fused one) read from the
        checkpoint (see :mod:`~vllm_spark2_5_plugin.models.weight_checks`)."""
        # A classification head that vLLM's --convert classify adds, if any.
        head, head_not_from_checkpoint = classifier_head(self)
        check = WeightCheck(
            self,
            target_tensors(self.config) | head,
            policy=self.load_policy,
            mapper=self.hf_to_vllm_mapper,
            not_from_checkpoint=target_parameters_not_from_checkpoint(self.config)
            | head_not_from_checkpoint,
            hints=TARGET_HINTS,
            unlisted=unlisted_target_tensor(self.config),
        )
        # KV-cache scales named as older llm-compressor wrote them
        # (self_attn.k_proj.output_scale) go through the quantization method's
        # mapping before the q/k/v fusion renames them, as in vLLM's in-tree
        # models; those no method maps are refused by the check.
        weights = kv_cache_scales_by_the_method(weights, self.model.quant_config)
        loaded = AutoWeightsLoader(self).load_weights(
            check.watch(weights), mapper=self.hf_to_vllm_mapper
        )
        check.finish(loaded)
        return loaded
