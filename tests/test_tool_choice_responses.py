# SPDX-License-Identifier: Apache-2.0
"""End to end: ``tool_choice`` forms of the Responses API (``POST /v1/responses``).

One ``vllm serve`` (CPU, tiny random Spark2_5 checkpoint,
``--tool-call-parser spark25``) for the module. vLLM 0.32.0 runs the tool
parser's ``adjust_request`` on Responses requests too
(``renderers/online_renderer.py``, ``preprocess_chat``), so
``constrain_tool_calls`` sets its grammar there. The random model never writes
a call by itself, so every call checked here exists only because of it:

* ``{"type": "function", "name": N}`` (ToolChoiceFunction): exactly one
  ``function_call`` output item, of N, whose arguments match N's schema;
* ``{"type": "allowed_tools", "mode": "required", "tools": [...]}``: only calls
  of the listed tools;
* ``allowed_tools`` with mode ``"auto"``: no grammar unless a listed tool is
  ``strict`` (then a call the model opens is a valid one);
* a forced call with the request's own ``text.format`` (json_schema or
  json_object): HTTP 400 naming both.

Each is run streamed (the function_call items of the ``response.completed``
event and the argument deltas) and not. As in ``test_tool_choice``, a logit
bias on ``</arg_value>`` lets the random model end string values; the bias
alone makes no call (the mode "auto" test).

Non-streamed allowed_tools requests are refused with a 400 asking to stream:
vLLM 0.32.0 does not hand their output to the tool parser.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import jsonschema
import pytest
from test_tool_choice import MODE, WEATHER
from vllm_helpers import vllm_server

MODEL = "spark2_5-tiny"
REQUEST_TIMEOUT_S = 120
SLOW = pytest.mark.slow

# Responses API FunctionTool: name and parameters at the top level.
TOOLS = [
    {"type": "function", "name": "get_weather", "parameters": WEATHER},
    {"type": "function", "name": "set_mode", "parameters": MODE, "strict": True},
]
SPEED = {
    "type": "object",
    "properties": {"speed": {"type": "integer", "enum": [1, 2, 3]}},
    "required": ["speed"],
    "additionalProperties": False,
}
SPEED_TOOL = {
    "type": "function",
    "name": "set_speed",
    "parameters": SPEED,
    "strict": True,
}
SCHEMAS = {"get_weather": WEATHER, "set_mode": MODE, "set_speed": SPEED}
INPUT = "Paris, 3 days, please."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from transformers import AutoTokenizer

    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path_factory.mktemp("spark25-resp") / "ckpt")
    tokenizer = AutoTokenizer.from_pretrained(path)
    ids = {
        t: tokenizer.convert_tokens_to_ids(t) for t in ("<tool_call>", "</arg_value>")
    }
    args = [
        "--served-model-name", MODEL,
        "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024",
        "--enable-auto-tool-choice", "--tool-call-parser", "spark25",
    ]  # fmt: skip
    log_path = tmp_path_factory.mktemp("spark25-resp-log") / "server.log"
    with vllm_server(
        path, args, log_path, env={"VLLM_CPU_KVCACHE_SPACE": "1"}
    ) as served:
        yield {**served, "ids": ids}


def _body(server, tool_choice, *, bias=("</arg_value>",), **extra) -> dict:
    return {
        "model": MODEL,
        "input": INPUT,
        "tools": extra.pop("tools", TOOLS),
        "tool_choice": tool_choice,
        "temperature": 0.0,
        "max_output_tokens": extra.pop("max_output_tokens", 200),
        "logit_bias": {str(server["ids"][token]): 100 for token in bias},
        "store": False,
        **extra,
    }


def _post(server, body: dict):
    request = urllib.request.Request(
        server["base"] + "/v1/responses",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    return urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S)


def _sse_events(response) -> list[dict]:
    events = []
    for raw in response:
        line = raw.decode().strip()
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            events.append(json.loads(line[5:]))
    return events


def _run(server, stream: bool, body: dict) -> tuple[str, list, dict]:
    """(output text, [(name, arguments)], response), streamed or not.

    Streamed, the calls are those of the ``response.completed`` event; each
    call's argument deltas must add up to its arguments."""
    with _post(server, {**body, "stream": stream}) as response:
        if not stream:
            final = json.loads(response.read())
        else:
            events = _sse_events(response)
            kinds = [e["type"] for e in events]
            assert kinds[-1] == "response.completed", kinds
            final = events[-1]["response"]
            deltas: dict[str, str] = {}
            for event in events:
                if event["type"] == "response.function_call_arguments.delta":
                    item = event["item_id"]
                    deltas[item] = deltas.get(item, "") + event["delta"]
            streamed_calls = [
                i for i in final["output"] if i["type"] == "function_call"
            ]
            for item in streamed_calls:
                if item["id"] in deltas:
                    assert deltas[item["id"]] == item["arguments"]
    text = "".join(
        part.get("text", "")
        for item in final["output"]
        if item["type"] == "message"
        for part in item["content"]
    )
    calls = [
        (item["name"], item["arguments"])
        for item in final["output"]
        if item["type"] == "function_call"
    ]
    return text, calls, final


def _assert_valid_calls(calls: list, allowed: set[str], text: str = "") -> None:
    assert calls, f"no function_call output item; output text: {text!r}"
    for name, arguments in calls:
        assert name in allowed
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])


def _named(name: str) -> dict:
    return {"type": "function", "name": name}


def _allowed(mode: str, *names: str) -> dict:
    return {
        "type": "allowed_tools",
        "mode": mode,
        "tools": [{"type": "function", "name": n} for n in names],
    }


STREAM = pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
# vLLM 0.32.0 does not hand the output of a non-streamed allowed_tools
# Responses request to the tool parser (DelegatingParser._extract_tool_calls,
# vllm/parser/abstract_parser.py:406, parses calls only for "auto"/None,
# "required" and a named choice), so the parser refuses such requests with a
# 400 (test_non_streamed_allowed_tools_is_refused); the allowed_tools tests
# stream.
STREAM_ALLOWED = pytest.mark.parametrize("stream", [True], ids=["stream"])


@SLOW
def test_streams_cut_inside_a_call_end_with_response_completed(server):
    """A forced call cut by max_output_tokens at every length: the delta
    that abandons the call carries the rest of its arguments and the text
    that becomes content. vLLM's Responses stream took the content first,
    reopened the call without a name and ended without response.completed
    (the client saw a dropped connection); ``_run`` asserts the last event."""
    cut_inside = 0
    for limit in range(4, 40, 3):
        body = _body(server, _named("get_weather"), max_output_tokens=limit)
        text, calls, final = _run(server, True, body)
        if final.get("incomplete_details") and text:
            cut_inside += 1  # the abandoned call's text is the message
    assert cut_inside, "no limit cut a call: the test checks nothing"


@SLOW
@STREAM
@pytest.mark.parametrize("name", ["get_weather", "set_mode"])
def test_named_function_gives_exactly_one_call_of_it(server, stream, name):
    text, calls, final = _run(server, stream, _body(server, _named(name)))
    _assert_valid_calls(calls, {name}, text)
    assert len(calls) == 1
    assert text.strip() == ""
    assert final["status"] == "completed"


@SLOW
@STREAM_ALLOWED
@pytest.mark.parametrize("listed", ["get_weather", "set_mode"])
def test_allowed_tools_required_calls_only_listed_tools(server, stream, listed):
    """Both tools are offered, one is listed: every call is of the listed one
    (run for each, so a grammar over all offered tools fails one of them)."""
    body = _body(server, _allowed("required", listed))
    text, calls, _ = _run(server, stream, body)
    _assert_valid_calls(calls, {listed}, text)
    assert text.strip() == ""


@SLOW
@STREAM_ALLOWED
def test_allowed_tools_required_single_call(server, stream):
    body = _body(
        server,
        _allowed("required", "get_weather", "set_mode"),
        parallel_tool_calls=False,
    )
    text, calls, _ = _run(server, stream, body)
    _assert_valid_calls(calls, {"get_weather", "set_mode"}, text)
    assert len(calls) == 1 and text.strip() == ""


@SLOW
@STREAM_ALLOWED
def test_allowed_tools_auto_without_strict_tool_is_unconstrained(server, stream):
    """Only the non-strict tool is listed (the strict one is offered, not
    listed): no grammar. The model, biased to ``<tool_call>``, writes it over
    and over, which is no call (a grammar would make it complete a call)."""
    body = _body(
        server,
        _allowed("auto", "get_weather"),
        bias=("<tool_call>",),
        max_output_tokens=8,
    )
    text, calls, final = _run(server, stream, body)
    assert calls == []
    assert text == "<tool_call>" * 8
    assert final["status"] == "incomplete"  # ran into max_output_tokens


@SLOW
@STREAM_ALLOWED
@pytest.mark.parametrize("listed", ["set_mode", "set_speed"])
def test_allowed_tools_auto_with_strict_tool_makes_opened_calls_valid(
    server, stream, listed
):
    """A listed strict tool under mode "auto" (two strict tools offered, one
    listed): the model, biased to open a call, must complete a valid call of
    the listed tool."""
    body = _body(
        server,
        _allowed("auto", listed),
        tools=[*TOOLS, SPEED_TOOL],
        bias=("<tool_call>",),
        parallel_tool_calls=False,
    )
    text, calls, _ = _run(server, stream, body)
    _assert_valid_calls(calls, {listed}, text)
    assert len(calls) == 1


OWN_FORMATS = {
    "json_object": {"type": "json_object"},
    "json_schema": {
        "type": "json_schema",
        "name": "answer",
        "schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
    },
}
FORCED = {
    "named": (_named("set_mode"), "function 'set_mode'"),
    "allowed_required": (
        _allowed("required", "set_mode"),
        'allowed_tools (mode "required")',
    ),
}


@SLOW
@STREAM
@pytest.mark.parametrize("own", sorted(OWN_FORMATS))
@pytest.mark.parametrize("forced", sorted(FORCED))
def test_forced_call_with_own_text_format_is_refused(server, forced, own, stream):
    tool_choice, description = FORCED[forced]
    body = _body(server, tool_choice, text={"format": OWN_FORMATS[own]})
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        _post(server, {**body, "stream": stream}).close()
    assert excinfo.value.code == 400
    error = json.loads(excinfo.value.read())["error"]
    message = error["message"]
    assert f"tool_choice {description}" in message, message
    assert f"text.format ({own})" in message, message
    assert error.get("param") == "tool_choice"


@SLOW
def test_allowed_tools_auto_keeps_the_requests_own_text_format(server):
    """Mode "auto" with a listed strict tool and the request's own
    json_schema: no refusal, and the request's format applies."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "enum": ["x"]}},
        "required": ["a"],
        "additionalProperties": False,
    }
    body = _body(
        server,
        _allowed("auto", "set_mode"),
        bias=(),
        max_output_tokens=40,
        text={"format": {"type": "json_schema", "name": "a", "schema": schema}},
    )
    text, calls, _ = _run(server, True, body)
    assert calls == []
    assert json.loads(text) == {"a": "x"}


@SLOW
@pytest.mark.parametrize("mode", ["required", "auto"])
def test_non_streamed_allowed_tools_is_refused(server, mode):
    """Its calls would come back as text (see STREAM_ALLOWED): a 400 that
    says to stream instead."""
    body = _body(server, _allowed(mode, "set_mode"))
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        _run(server, False, body)
    assert excinfo.value.code == 400
    error = json.loads(excinfo.value.read())["error"]
    assert '"stream": true' in error["message"], error
    assert error.get("param") == "tool_choice"
