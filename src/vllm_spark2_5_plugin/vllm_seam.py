# SPDX-License-Identifier: Apache-2.0
"""The one place where the plugin relies on vLLM internals.

vLLM's documented plugin surface is used directly by the rest of the package:
``ModelRegistry.register_model``, ``ToolParserManager.register_lazy_module``,
``vllm.logger.init_logger``, the model layers and ``models.interfaces`` /
``models.utils`` helpers that in-tree models are built from, the ``ToolParser``
base class, and vLLM's config objects read as plain data.

Everything beyond that lives here, one function per assumption:

* reading vLLM's registries (who registered an architecture, a tool parser or
  a config class) and writing the config registry;
* two class-level wrappers: ``SpeculativeConfig.update_arch_`` (to undo the
  DeepSeek-V4 fallback for Spark2_5 drafts) and ``VllmConfig.__post_init__``
  (to refuse DSpark settings the draft cannot run, at start-up);
* the attention internals the draft's fixed-history layers read: the per-layer
  attention context, the paged metadata fields, the KV-cache layout and the
  backend's KV write;
* vLLM's DSpark Markov and confidence heads (defined in its Qwen3 DSpark
  model module).

Each assumption is also a :class:`HookPoint` in :data:`HOOK_POINTS`;
:func:`check_hook_points` verifies them all against the running vLLM, so a
vLLM upgrade that breaks one fails in one place, with one message. vLLM is
imported lazily: importing this module is free.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import torch

# Marks our class-level wrappers so that installing twice never wraps twice.
_WRAPPED = "_spark2_5_plugin_wrapper"


@dataclass(frozen=True)
class HookPoint:
    """One assumption about vLLM's internals and how to check it."""

    name: str
    relies_on: str
    check: Callable[[], None]


HOOK_POINTS: list[HookPoint] = []


def _hook_point(relies_on: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    def add(check: Callable[[], None]) -> Callable[[], None]:
        name = check.__name__.removeprefix("_check_")
        HOOK_POINTS.append(HookPoint(name, relies_on, check))
        return check

    return add


class VllmSeamError(RuntimeError):
    """The running vLLM does not provide what the plugin relies on."""


def check_hook_points() -> list[str]:
    """Check every hook point; return one line per broken assumption."""
    problems = []
    for hook in HOOK_POINTS:
        try:
            hook.check()
        except Exception as exc:  # noqa: BLE001 - report every kind of breakage
            problems.append(f"{hook.name} ({hook.relies_on}): {exc!r}")
    return problems


def require_hook_points() -> None:
    """Raise :class:`VllmSeamError` listing every broken hook point."""
    problems = check_hook_points()
    if problems:
        raise VllmSeamError(
            "this vLLM differs from the one the plugin was written for in "
            f"{len(problems)} place(s): " + "; ".join(problems)
        )


def _params(fn: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(fn).parameters)


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


# ---------------------------------------------------------------------------
# Registries
# ---------------------------------------------------------------------------


def registered_model_module(arch: str) -> str | None:
    """Module of the class vLLM's model registry holds for ``arch``, if any."""
    from vllm import ModelRegistry

    entry = ModelRegistry.models.get(arch)
    if entry is None:
        return None
    module = getattr(entry, "module_name", None)
    if module is None:  # an eagerly registered class
        module = getattr(getattr(entry, "model_cls", None), "__module__", "?")
    return module


@_hook_point("ModelRegistry.models maps architectures to lazy/eager entries")
def _check_model_registry() -> None:
    from vllm import ModelRegistry

    _expect(isinstance(ModelRegistry.models, dict), "ModelRegistry.models is a dict")
    llama = ModelRegistry.models.get("LlamaForCausalLM")
    _expect(hasattr(llama, "module_name"), "lazy entries carry module_name")


def registered_tool_parser_module(name: str) -> str | None:
    """Module of the tool parser registered (resolved or lazily) as ``name``."""
    from vllm.tool_parsers import ToolParserManager

    if name in ToolParserManager.tool_parsers:
        return ToolParserManager.tool_parsers[name].__module__
    if name in ToolParserManager.lazy_parsers:
        return ToolParserManager.lazy_parsers[name][0]
    return None


def forget_resolved_tool_parser(name: str) -> None:
    """Drop an already imported parser, which would shadow a lazy entry."""
    from vllm.tool_parsers import ToolParserManager

    ToolParserManager.tool_parsers.pop(name, None)


@_hook_point(
    "ToolParserManager.tool_parsers (name -> class) and lazy_parsers "
    "(name -> (module, class)); resolved parsers shadow lazy ones"
)
def _check_tool_parser_registry() -> None:
    from vllm.tool_parsers import ToolParserManager

    _expect(isinstance(ToolParserManager.tool_parsers, dict), "tool_parsers dict")
    lazy = ToolParserManager.lazy_parsers
    _expect(isinstance(lazy, dict) and lazy, "lazy_parsers is a non-empty dict")
    module, cls = next(iter(lazy.values()))
    _expect(isinstance(module, str) and isinstance(cls, str), "(module, class)")


def registered_config_class(model_type: str) -> type | None:
    """The config class vLLM builds for ``model_type`` without remote code."""
    from vllm.transformers_utils.config import _CONFIG_REGISTRY

    return _CONFIG_REGISTRY.get(model_type)


def register_config_class(model_type: str, config_class: type) -> None:
    """Make vLLM (and Transformers' AutoConfig) build ``config_class``.

    vLLM's own registry wins over a checkpoint's ``auto_map``, so no remote
    code runs even with ``--trust-remote-code``; AutoConfig covers the paths
    that go through Transformers directly (tokenizer, processor).
    """
    from transformers import AutoConfig
    from vllm.transformers_utils.config import _CONFIG_REGISTRY

    _CONFIG_REGISTRY[model_type] = config_class
    AutoConfig.register(model_type, config_class, exist_ok=True)


@_hook_point("vllm.transformers_utils.config._CONFIG_REGISTRY (model_type -> class)")
def _check_config_registry() -> None:
    from vllm.transformers_utils.config import _CONFIG_REGISTRY

    _expect(hasattr(_CONFIG_REGISTRY, "get"), "_CONFIG_REGISTRY.get")
    _expect(hasattr(_CONFIG_REGISTRY, "__setitem__"), "_CONFIG_REGISTRY[...] = ...")


@_hook_point(
    "the chat serving path calls finish_streaming() of a tool parser that sets "
    "engine_based_streaming, and ToolParser keeps prev_tool_call_arr / "
    "streamed_args_for_tool for get_remaining_unstreamed_args()"
)
def _check_tool_parser_streaming() -> None:
    from vllm.parser import abstract_parser
    from vllm.tool_parsers import ToolParser

    source = inspect.getsource(abstract_parser)
    for needed in ('"engine_based_streaming"', '"finish_streaming"'):
        _expect(needed in source, f"vllm.parser looks up {needed}")
    init = inspect.getsource(ToolParser.__init__)
    for attr in ("prev_tool_call_arr", "streamed_args_for_tool"):
        _expect(f"self.{attr}" in init, f"ToolParser.{attr}")
    _expect(callable(ToolParser.get_remaining_unstreamed_args), "remaining args")


# ---------------------------------------------------------------------------
# Config wrappers
# ---------------------------------------------------------------------------


def _wrap_method(cls: type, name: str, before: Callable[[Any], None]) -> None:
    """Run ``before(self)`` ahead of ``cls.name``; idempotent per class."""
    current = getattr(cls, name)
    if getattr(current, _WRAPPED, False):
        return

    @functools.wraps(current)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        before(self)
        return current(self, *args, **kwargs)

    setattr(wrapper, _WRAPPED, True)
    setattr(cls, name, wrapper)


def wrap_speculative_update_arch(before: Callable[[Any], None]) -> None:
    """Run ``before(spec_config)`` each time vLLM calls ``update_arch_``.

    vLLM rewrites unknown ``dspark`` drafts to its DeepSeek-V4 draft and then
    calls ``SpeculativeConfig.update_arch_``, before it derives the draft's
    architecture info, parallel config and anything else from it.
    """
    from vllm.config.speculative import SpeculativeConfig

    _wrap_method(SpeculativeConfig, "update_arch_", before)


@_hook_point(
    "SpeculativeConfig.__post_init__ rewrites unknown dspark drafts to "
    "DSparkDraftModel and then calls update_arch_()"
)
def _check_speculative_update_arch() -> None:
    from vllm.config.speculative import SpeculativeConfig

    _expect(callable(SpeculativeConfig.update_arch_), "update_arch_ exists")
    source = inspect.getsource(SpeculativeConfig.__post_init__)
    fallback = source.find('"DSparkDraftModel"')
    _expect(fallback >= 0, "the DeepSeek-V4 DSpark fallback is in __post_init__")
    _expect(
        "self.update_arch_()" in source[fallback:],
        "update_arch_() is called after the fallback",
    )


def check_before_vllm_config(check: Callable[[Any], None]) -> None:
    """Run ``check(vllm_config)`` before vLLM validates a new ``VllmConfig``.

    The engine arguments have been resolved into the model, cache and
    speculative configs by then, and no process or weight exists yet.
    """
    from vllm.config import VllmConfig

    _wrap_method(VllmConfig, "__post_init__", check)


@_hook_point(
    "VllmConfig.__post_init__ runs once per engine, with model_config, "
    "cache_config and speculative_config already set"
)
def _check_vllm_config_post_init() -> None:
    from vllm.config import VllmConfig

    fields = getattr(VllmConfig, "__dataclass_fields__", {})
    for name in ("model_config", "cache_config", "speculative_config"):
        _expect(name in fields, f"VllmConfig.{name}")
    _expect(callable(VllmConfig.__post_init__), "VllmConfig.__post_init__")


# ---------------------------------------------------------------------------
# Chat rendering
# ---------------------------------------------------------------------------

_CHAT_PARSERS = ("parse_chat_messages", "parse_chat_messages_async")


def check_chat_messages(check: Callable[[Any, Any], None]) -> None:
    """Run ``check(messages, model_config)`` on a chat request's messages as
    sent, before vLLM's Transformers renderer parses them (and, in doing so,
    coerces assistant tool-call arguments that are not JSON objects to ``{}``).
    An exception from ``check`` fails that request only."""
    from vllm.renderers import hf

    for name in _CHAT_PARSERS:
        current = getattr(hf, name)
        if getattr(current, _WRAPPED, False):
            continue
        if inspect.iscoroutinefunction(current):

            @functools.wraps(current)
            async def wrapper(messages, model_config, *args, _f=current, **kwargs):
                check(messages, model_config)
                return await _f(messages, model_config, *args, **kwargs)

        else:

            @functools.wraps(current)
            def wrapper(messages, model_config, *args, _f=current, **kwargs):
                check(messages, model_config)
                return _f(messages, model_config, *args, **kwargs)

        setattr(wrapper, _WRAPPED, True)
        setattr(hf, name, wrapper)


@_hook_point(
    "vllm.renderers.hf.HfRenderer calls the module-level parse_chat_messages"
    "(_async)(messages, model_config, ...) before it applies the chat template"
)
def _check_chat_parsers() -> None:
    from vllm.renderers import hf

    source = inspect.getsource(hf.HfRenderer)
    for name in _CHAT_PARSERS:
        fn = getattr(hf, name, None)
        _expect(callable(fn), f"vllm.renderers.hf.{name}")
        _expect(_params(fn)[:2] == ["messages", "model_config"], f"{name} params")
        _expect(f"{name}(" in source, f"HfRenderer calls {name}")


# ---------------------------------------------------------------------------
# Attention internals read by the draft's fixed-history layers
# ---------------------------------------------------------------------------


class PagedAttentionInputs(NamedTuple):
    """What a layer needs to read and write its paged KV cache this step."""

    cache: torch.Tensor  # [blocks, nKV, block_size, 2*D] (see split_kv_cache)
    block_table: torch.Tensor  # [R, max_blocks] int32
    seq_lens: torch.Tensor  # [R] int32, context + this step's query tokens
    query_start_loc: torch.Tensor  # [R + 1] int32
    slot_mapping: torch.Tensor  # [T] int64, -1 = padding


_METADATA_FIELDS = ("block_table", "seq_lens", "query_start_loc", "slot_mapping")


def paged_attention_inputs(layer_name: str) -> PagedAttentionInputs | None:
    """This step's paged-cache inputs of attention layer ``layer_name``.

    ``None`` during profiling and dummy runs, which carry no metadata. Raises
    ``RuntimeError`` when the layer's backend keeps its metadata in another
    form (only FlashAttention/Triton-style metadata are understood).
    """
    from vllm.model_executor.layers.attention.attention import (
        get_attention_context,
    )

    metadata, _, kv_cache, slot_mapping = get_attention_context(layer_name)
    if metadata is None:
        return None
    if not all(hasattr(metadata, f) for f in _METADATA_FIELDS):
        raise RuntimeError(
            f"Spark2_5 DSpark sliding draft layers read the paged KV cache through "
            f"FlashAttention/Triton-style metadata, but the draft's attention "
            f"backend produced {type(metadata).__name__}; set "
            '"attention_backend": "FLASH_ATTN" (or "TRITON_ATTN") in '
            "--speculative-config"
        )
    return PagedAttentionInputs(
        kv_cache,
        metadata.block_table,
        metadata.seq_lens,
        metadata.query_start_loc,
        metadata.slot_mapping if slot_mapping is None else slot_mapping,
    )


@_hook_point(
    "get_attention_context(layer_name) -> (metadata, layer, kv_cache, "
    "slot_mapping); FlashAttention/Triton metadata carry block_table, seq_lens, "
    "query_start_loc and slot_mapping"
)
def _check_attention_context() -> None:
    from vllm.model_executor.layers.attention.attention import (
        get_attention_context,
    )
    from vllm.v1.attention.backends.flash_attn import FlashAttentionMetadata
    from vllm.v1.attention.backends.triton_attn import TritonAttentionMetadata

    _expect(_params(get_attention_context) == ["layer_name"], "one argument")
    for metadata in (FlashAttentionMetadata, TritonAttentionMetadata):
        fields = getattr(metadata, "__dataclass_fields__", {})
        for name in _METADATA_FIELDS:
            _expect(name in fields, f"{metadata.__name__}.{name}")


def split_kv_cache(
    kv_cache: torch.Tensor, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[blocks, nKV, block_size, 2*D]`` -> K and V as ``[blocks, block_size,
    nKV, D]`` views (any strides), the layout FlashAttention and Triton use."""
    return kv_cache.transpose(1, 2).split(head_dim, dim=-1)


def layer_kv_cache(attn: Any) -> torch.Tensor:
    """The paged cache vLLM bound to attention layer ``attn``."""
    return attn.kv_cache


def write_kv_cache(
    attn: Any,
    key: torch.Tensor,
    value: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write ``[T, nKV, D]`` keys/values at ``slot_mapping`` with the backend."""
    attn.impl.do_kv_cache_update(attn, key, value, kv_cache, slot_mapping)


@_hook_point(
    "FlashAttention/Triton impl.do_kv_cache_update(layer, key, value, kv_cache, "
    "slot_mapping) over a [blocks, nKV, block_size, 2*D] cache split with "
    "transpose(1, 2).split(D, -1)"
)
def _check_kv_cache_layout() -> None:
    from vllm.v1.attention.backends.flash_attn import FlashAttentionImpl
    from vllm.v1.attention.backends.triton_attn import TritonAttentionImpl

    for impl in (FlashAttentionImpl, TritonAttentionImpl):
        update = impl.do_kv_cache_update
        params = _params(update)
        _expect(
            params == ["self", "layer", "key", "value", "kv_cache", "slot_mapping"],
            f"{impl.__name__}.do_kv_cache_update{params}",
        )
        source = inspect.getsource(update)
        _expect(
            "kv_cache.transpose(1, 2).split(self.head_size" in source,
            f"{impl.__name__} splits K/V with transpose(1, 2).split(head_size, -1)",
        )


# ---------------------------------------------------------------------------
# vLLM's DSpark heads and the speculator that calls the draft
# ---------------------------------------------------------------------------


def dspark_heads() -> tuple[type, type]:
    """vLLM's ``(DSparkMarkovHead, DSparkConfidenceHead)`` module classes."""
    from vllm.model_executor.models.qwen3_dspark import (
        DSparkConfidenceHead,
        DSparkMarkovHead,
    )

    return DSparkMarkovHead, DSparkConfidenceHead


@_hook_point(
    "qwen3_dspark.DSparkMarkovHead(vocab_size, draft_vocab_size, markov_rank, "
    "prefix, quant_config) with embed/bias, and DSparkConfidenceHead(input_dim, "
    "prefix, bias, with_markov) returning a logit"
)
def _check_dspark_heads() -> None:
    markov, confidence = dspark_heads()
    _expect(
        _params(markov)[:5]
        == ["vocab_size", "draft_vocab_size", "markov_rank", "prefix", "quant_config"],
        f"DSparkMarkovHead{_params(markov)}",
    )
    _expect(callable(markov.embed) and callable(markov.bias), "embed and bias")
    _expect(
        _params(confidence)[:4] == ["input_dim", "prefix", "bias", "with_markov"],
        f"DSparkConfidenceHead{_params(confidence)}",
    )


#: What vLLM's DSpark speculator calls on the draft model (and the draft
#: implements); a rename on vLLM's side would silently bypass our method.
DRAFT_PROTOCOL = (
    "combine_hidden_states",
    "precompute_and_store_context_kv",
    "compute_draft_logits",
    "markov_embed",
    "markov_bias",
    "compute_confidence",
    "map_draft_to_target",
)


@_hook_point("the V2 DSpark/DFlash speculators call the draft's protocol methods")
def _check_dspark_draft_protocol() -> None:
    from vllm.v1.worker.gpu.spec_decode.dflash import speculator as dflash
    from vllm.v1.worker.gpu.spec_decode.dspark import speculator as dspark

    source = inspect.getsource(dflash) + inspect.getsource(dspark)
    for method in DRAFT_PROTOCOL:
        _expect(f".{method}(" in source, f"the speculator calls .{method}(")


@_hook_point(
    "EagleModelMixin.aux_hidden_state_layers holds the aux ids the runner "
    "asked for (id k = the residual stream entering layer k)"
)
def _check_aux_hidden_state_layers() -> None:
    from vllm.model_executor.models.interfaces import EagleModelMixin

    _expect(EagleModelMixin.aux_hidden_state_layers == (), "aux_hidden_state_layers")
    source = inspect.getsource(EagleModelMixin)
    _expect(
        "self.aux_hidden_state_layers = tuple(sorted(set(layers)))" in source,
        "aux ids stored sorted and unique",
    )
