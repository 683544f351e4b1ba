# SPDX-License-Identifier: Apache-2.0
"""vLLM's registries: read who registered a name, write the config registry."""

from __future__ import annotations

import inspect

from vllm_spark2_5_plugin.vllm_seam.hooks import expect as _expect
from vllm_spark2_5_plugin.vllm_seam.hooks import hook_point as _hook_point

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
