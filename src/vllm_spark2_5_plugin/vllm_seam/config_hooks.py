# SPDX-License-Identifier: Apache-2.0
"""Class-level wrappers on vLLM's config and chat-rendering steps."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from vllm_spark2_5_plugin.vllm_seam.hooks import WRAPPED as _WRAPPED
from vllm_spark2_5_plugin.vllm_seam.hooks import expect as _expect
from vllm_spark2_5_plugin.vllm_seam.hooks import hook_point as _hook_point
from vllm_spark2_5_plugin.vllm_seam.hooks import params as _params

# ---------------------------------------------------------------------------
# Config wrappers
# ---------------------------------------------------------------------------


def _wrap_method(cls: type, name: str, before: Callable[[Any], None]) -> None:
    """Run ``before(self)`` ahead of ``cls.name``; idempotent per ``before``
    (the wrapper carries the checks it and the wrappers inside it run)."""
    current = getattr(cls, name)
    installed = getattr(current, _WRAPPED, ())
    if before in installed:
        return

    @functools.wraps(current)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        before(self)
        return current(self, *args, **kwargs)

    setattr(wrapper, _WRAPPED, (*installed, before))
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


@_hook_point(
    "SpeculativeConfig.compose_draft_hf_overrides passes the target's dict "
    "--hf-overrides on to the draft's config only when they are callable"
)
def _check_draft_hf_overrides() -> None:
    from vllm.config.speculative import SpeculativeConfig

    composed = SpeculativeConfig.compose_draft_hf_overrides({"markov_rank": 4})
    _expect(
        composed is SpeculativeConfig.hf_config_override,
        "dict overrides are not applied to the draft config",
    )


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
