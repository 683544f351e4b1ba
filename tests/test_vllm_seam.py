# SPDX-License-Identifier: Apache-2.0
"""The seam to vLLM's internals: every hook point holds on the running vLLM,
a broken one is reported by name, and nothing outside the seam reaches past
vLLM's plugin surface."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from vllm_spark2_5_plugin import vllm_seam

SRC = Path(__file__).resolve().parents[1] / "src" / "vllm_spark2_5_plugin"

# What the seam wraps: used anywhere else, it is a second door to vLLM's
# internals that an upgrade would have to find by hand.
INTERNAL_NAMES = {
    "_CONFIG_REGISTRY",
    "lazy_parsers",
    "update_arch_",
    "get_attention_context",
    "do_kv_cache_update",
    "qwen3_dspark",
    ".kv_cache",  # the attention layer's cache tensor
    ".impl",  # the attention backend implementation
    "_get_kv_cache_groups_uniform_page_size",
    "get_num_skipped_tokens",
}
INTERNAL_ATTRIBUTES = {
    ("ModelRegistry", "models"),
    ("ToolParserManager", "tool_parsers"),
}


def test_every_hook_point_holds_on_this_vllm():
    assert vllm_seam.check_hook_points() == []
    names = [hook.name for hook in vllm_seam.HOOK_POINTS]
    assert len(names) == len(set(names)) >= 10
    assert all(hook.relies_on for hook in vllm_seam.HOOK_POINTS)


def _two_args(layer_name, extra):  # a changed signature
    raise AssertionError("never called")


BREAKAGES = {
    "attention_context": (
        "vllm.model_executor.layers.attention.attention.get_attention_context",
        _two_args,
    ),
    "speculative_update_arch": (
        "vllm.config.speculative.SpeculativeConfig.update_arch_",
        None,
    ),
    "dspark_heads": (
        "vllm.model_executor.models.qwen3_dspark.DSparkMarkovHead.embed",
        None,
    ),
    "chat_parsers": ("vllm.renderers.hf.parse_chat_messages", _two_args),
    "model_level_sliding_window": (
        "vllm.engine.arg_utils.EngineArgs.create_engine_config",
        lambda self: None,
    ),
    "kv_cache_scales": (
        "vllm.model_executor.layers.attention.attention.set_default_quant_scales",
        lambda layer, register_buffer=False: None,
    ),
    "kv_cache_scale_method": (
        "vllm.model_executor.layers.quantization.kv_cache.BaseKVCacheMethod"
        ".create_weights",
        lambda self, layer: None,
    ),
    "custom_op_dispatch": (
        "vllm.model_executor.custom_op.CustomOp.dispatch_forward",
        lambda self: None,
    ),
    "kv_cache_group_size": (
        "vllm.v1.core.kv_cache_utils._get_kv_cache_groups_uniform_page_size",
        lambda kv_cache_spec: [],
    ),
    "sliding_window_freed_blocks": (
        "vllm.v1.core.single_type_kv_cache_manager.SlidingWindowManager"
        ".get_num_skipped_tokens",
        lambda self, num_computed_tokens: max(0, num_computed_tokens - 1),
    ),
    "draft_hf_overrides": (
        "vllm.config.speculative.SpeculativeConfig.compose_draft_hf_overrides",
        staticmethod(lambda overrides: lambda config: config),
    ),
    "kv_cache_layout": (
        "vllm.v1.attention.backends.flash_attn.FlashAttentionImpl.do_kv_cache_update",
        lambda self, layer, key, value, kv_cache, slots: None,
    ),
    "vllm_config_post_init": ("vllm.config.VllmConfig.__post_init__", None),
    # As if the DFlash speculator, whose source the check reads, no longer
    # called the draft (an unrelated vLLM module in its place).
    "dspark_draft_protocol": (
        "vllm.v1.worker.gpu.spec_decode.dflash.speculator",
        importlib.import_module("vllm.config.load"),
    ),
    "aux_hidden_state_layers": (
        "vllm.model_executor.models.interfaces.EagleModelMixin.aux_hidden_state_layers",
        (0,),
    ),
    "model_registry": ("vllm.ModelRegistry.models", []),
    "tool_parser_registry": ("vllm.tool_parsers.ToolParserManager.lazy_parsers", {}),
    "config_registry": ("vllm.transformers_utils.config._CONFIG_REGISTRY", ()),
    "tool_parser_streaming": (
        "vllm.tool_parsers.ToolParser.get_remaining_unstreamed_args",
        None,
    ),
    "llm_shutdown": ("vllm.v1.engine.core_client.EngineCoreClient.shutdown", None),
    "responses_split_delta": (
        "vllm.entrypoints.openai.responses.serving.split_delta",
        lambda delta: [delta],
    ),
}


def test_every_hook_point_has_a_breakage():
    assert set(BREAKAGES) == {hook.name for hook in vllm_seam.HOOK_POINTS}


@pytest.mark.parametrize("hook", sorted(BREAKAGES))
def test_a_broken_hook_point_is_reported_once_by_name(monkeypatch, hook):
    target, replacement = BREAKAGES[hook]
    monkeypatch.setattr(target, replacement)
    problems = vllm_seam.check_hook_points()
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{hook} (")
    with pytest.raises(vllm_seam.VllmSeamError, match=f"in 1 place.*{hook}"):
        vllm_seam.require_hook_points()


def test_responses_stream_takes_a_calls_continuation_before_the_content():
    """Only a delta vLLM's order cannot take changes: the end of an open call
    (arguments, no name) before the text after it; a new call (named) keeps
    coming after content, and reasoning stays first."""
    from vllm.entrypoints.generate.base.protocol import (
        DeltaFunctionCall,
        DeltaMessage,
        DeltaToolCall,
    )
    from vllm.entrypoints.openai.responses import serving

    vllm_seam.continue_open_call_first()
    vllm_seam.continue_open_call_first()  # idempotent
    assert not hasattr(serving.split_delta.__wrapped__, "__wrapped__")

    def kinds(**fields):
        parts = serving.split_delta(DeltaMessage(**fields))
        return [
            "reasoning" if p.reasoning else "content" if p.content else "call"
            for p in parts
        ]

    tail = DeltaToolCall(index=0, function=DeltaFunctionCall(arguments='"}'))
    start = DeltaToolCall(
        index=1, id="c1", type="function", function=DeltaFunctionCall(name="f")
    )
    assert kinds(content="after", tool_calls=[tail]) == ["call", "content"]
    assert kinds(reasoning="r", content="a", tool_calls=[tail]) == [
        "reasoning",
        "call",
        "content",
    ]
    assert kinds(content="\n", tool_calls=[tail, start]) == ["call", "content", "call"]
    assert kinds(content="before", tool_calls=[start]) == ["content", "call"]


def _vllm_imports(tree: ast.AST) -> list[str]:
    """``module:name`` of every ``from vllm... import name`` in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.module is None:
            continue
        if node.module == "vllm" or node.module.startswith("vllm."):
            found += [f"{node.module}:{alias.name}" for alias in node.names]
    return found


def _code_names(tree: ast.AST) -> set[str]:
    """Identifiers the code uses (names, attributes, imports), not its prose."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.update((node.attr, f".{node.attr}"))
            if isinstance(node.value, ast.Name):
                names.add(f"{node.value.id}.{node.attr}")
        elif isinstance(node, ast.ImportFrom):
            names.update((node.module or "").split("."))
            names.update(alias.name for alias in node.names)
    return names


def test_no_module_outside_the_seam_names_a_vllm_internal():
    attributes = {f"{owner}.{attr}" for owner, attr in INTERNAL_ATTRIBUTES}
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).parts[0] == "vllm_seam":
            continue
        tree = ast.parse(path.read_text())
        rel = path.relative_to(SRC)
        used = _code_names(tree)
        offenders += [f"{rel}: {name}" for name in sorted(used & INTERNAL_NAMES)]
        offenders += [f"{rel}: {name}" for name in sorted(used & attributes)]
        for imported in _vllm_imports(tree):
            module, name = imported.split(":")
            if name.startswith("_") or any(
                p.startswith("_") for p in module.split(".")
            ):
                offenders.append(f"{rel}: {imported}")
    assert offenders == []


@pytest.mark.parametrize(
    "module", sorted(p.name for p in (SRC / "vllm_seam").glob("*.py"))
)
def test_the_seam_itself_imports_no_vllm_at_module_level(module):
    tree = ast.parse((SRC / "vllm_seam" / module).read_text())
    top_level = [
        node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)
    ]
    assert not _vllm_imports(ast.Module(body=top_level, type_ignores=[]))
