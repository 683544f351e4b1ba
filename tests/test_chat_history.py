# SPDX-License-Identifier: Apache-2.0
"""Assistant tool calls whose arguments the template cannot write as key/value
pairs are refused before vLLM coerces them to ``{}`` (the server-side test is
``test_server_tool_calls.py::test_history_call_with_non_object_arguments_is_refused``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from vllm.exceptions import VLLMValidationError

from vllm_spark2_5_plugin import vllm_seam
from vllm_spark2_5_plugin.names import MODEL_TYPE
from vllm_spark2_5_plugin.tool_parsers.history import (
    check_spark2_5_history,
    refuse_unrenderable_roles,
    refuse_unrenderable_tool_calls,
)


def _history(arguments) -> list[dict]:
    call = {"id": "c1", "type": "function", "function": {"name": "f"}}
    if arguments is not ...:
        call["function"]["arguments"] = arguments
    return [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]


def _model(model_type: str):
    return SimpleNamespace(hf_config=SimpleNamespace(model_type=model_type))


@pytest.mark.parametrize(
    "arguments, why",
    [
        ("not json", "not valid JSON"),
        ("[1,2]", "JSON of type list"),
        ("42", "JSON of type int"),
        ('"a string"', "JSON of type str"),
        # Past Python's int digit limit (valid JSON, which Python cannot read).
        pytest.param(
            "1" * 5000,
            "not readable: Exceeds the limit (4300 digits)",
            id="5000-digits",
        ),
        pytest.param(
            '{"a": ' + "9" * 5000 + "}",
            "not readable: Exceeds the limit",
            id="object-with-5000-digits",
        ),
        # Past Python's recursion limit: was a 500 (RecursionError). Deep
        # enough for every Python vLLM runs on: 3.12 reads 1,100 levels and
        # 3.13 5,000; 3.11, 3.12 and 3.13 all refuse 100,000.
        pytest.param(
            '{"a":' * 100_000 + "1" + "}" * 100_000,
            "nested too deeply to read",
            id="nested-100000-deep",
        ),
        (["x"], "a list"),
        ('{"days": NaN}', "not readable: NaN is not a JSON value"),
        ('{"t": -Infinity}', "not readable: -Infinity is not a JSON value"),
    ],
)
def test_non_object_arguments_are_refused_naming_the_message(arguments, why):
    with pytest.raises(VLLMValidationError) as err:
        refuse_unrenderable_tool_calls(_history(arguments))
    assert str(err.value).startswith('message 1: the arguments of tool call "f"')
    assert why in str(err.value)
    assert err.value.parameter == "messages"


@pytest.mark.parametrize("arguments", ['{"a": 1}', " {} ", "", None, {"a": 1}, ...])
def test_objects_and_absent_arguments_pass(arguments):
    refuse_unrenderable_tool_calls(_history(arguments))


def test_only_spark2_5_models_are_checked():
    bad = _history("not json")
    check_spark2_5_history(bad, _model("llama"))  # vLLM's own rule applies
    with pytest.raises(VLLMValidationError, match="message 1"):
        check_spark2_5_history(bad, _model(MODEL_TYPE))


def test_the_check_runs_before_vllms_renderer_parses_the_messages():
    """register() wrapped the Transformers renderer's message parser: it now
    refuses before vLLM would coerce the arguments to {}."""
    from vllm.renderers import hf

    import vllm_spark2_5_plugin

    vllm_spark2_5_plugin.register()
    assert "chat_parsers" in {hook.name for hook in vllm_seam.HOOK_POINTS}
    with pytest.raises(VLLMValidationError, match="message 1"):
        hf.parse_chat_messages(_history("[1,2]"), _model(MODEL_TYPE), "string")


@pytest.mark.parametrize("role", ["frob", "function", "ipython", None])
def test_roles_the_template_leaves_out_are_refused(role):
    messages = [{"role": "user", "content": "hi"}, {"role": role, "content": "x"}]
    with pytest.raises(VLLMValidationError, match=f"message 1: role {role!r} is not"):
        check_spark2_5_history(messages, _model(MODEL_TYPE))
    check_spark2_5_history(messages, _model("llama"))  # vLLM's own rule applies


def test_every_role_the_template_renders_passes():
    # The roles the template renders, by name (test_chat_template.py checks
    # the template itself against this check).
    roles = ["system", "developer", "user", "assistant", "tool"]
    refuse_unrenderable_roles([{"role": r, "content": "x"} for r in roles])
    refuse_unrenderable_roles(_history("{}"))
