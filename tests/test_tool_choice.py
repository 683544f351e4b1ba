# SPDX-License-Identifier: Apache-2.0
"""End to end: ``tool_choice`` "required" / named and ``strict`` tools.

One ``vllm serve`` (CPU, tiny random Spark2_5 checkpoint; the fixture of
``test_server_tool_calls``) for the module. The random model never writes a
call by itself, so every call checked here exists only because the parser's
``adjust_request`` constrained generation (``tool_parsers/constraints.py``):

* "required" and a named function give a parseable call of an allowed tool
  whose arguments match the tool's schema, streamed and not;
* "auto" stays unconstrained; with a ``strict`` tool, a call the model opens
  is a valid one;
* a forced call combined with the request's own structured output is a 400
  naming both; "auto" keeps the request's own constraint;
* a tool name the format cannot call is still refused first.

To let string values end, some requests put a logit bias on the
``</arg_value>`` token (the random model would otherwise write text until
``max_tokens``); the bias alone produces no call (see the "auto" test). No
Lark ``<[N]>`` grammar is used here (xgrammar 0.2.8 caches their token masks
across grammars that differ only in N).
"""

from __future__ import annotations

import json

import jsonschema
import pytest
import test_server_tool_calls as serving
from test_server_tool_calls import MODEL, _collect_stream, _post_refused

# The module-scoped server fixture of test_server_tool_calls (one server for
# this module) and its openai client.
server = serving.server
client = serving.client
SLOW = pytest.mark.slow

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
    },
    "required": ["city", "days"],
}
MODE = {
    "type": "object",
    "properties": {
        "mode": {"type": "string", "enum": ["eco", "boost"]},
        "on": {"type": "boolean"},
        "level": {"type": "integer", "minimum": 0, "maximum": 9},
    },
    "required": ["mode", "on"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "parameters": WEATHER},
    },
    {
        "type": "function",
        "function": {"name": "set_mode", "parameters": MODE, "strict": True},
    },
]
SCHEMAS = {"get_weather": WEATHER, "set_mode": MODE}
MESSAGES = [{"role": "user", "content": "Paris, 3 days, please."}]


def _named(name: str) -> dict:
    return {"type": "function", "function": {"name": name}}


def _kwargs(server, tool_choice, *, bias=("</arg_value>",), **extra) -> dict:
    ids = server["tag_ids"]
    return {
        "model": MODEL,
        "messages": MESSAGES,
        "tools": extra.pop("tools", TOOLS),
        "tool_choice": tool_choice,
        "temperature": 0.0,
        "max_tokens": extra.pop("max_tokens", 200),
        "logit_bias": {str(ids[token]): 100 for token in bias},
        **extra,
    }


def _run(client, stream: bool, **kwargs) -> tuple[str | None, list, str | None]:
    """(content, [(name, arguments)], finish reason), streamed or not."""
    if stream:
        content, calls, finish, raw = _collect_stream(
            client.chat.completions.create(**kwargs, stream=True)
        )
        assert all(c["id"] for c in raw)
        return content or None, calls, finish
    choice = client.chat.completions.create(**kwargs).choices[0]
    calls = [
        (tc.function.name, tc.function.arguments)
        for tc in choice.message.tool_calls or []
    ]
    return choice.message.content, calls, choice.finish_reason


def _assert_valid_calls(calls: list, allowed: set[str]) -> None:
    assert calls, "no tool call"
    for name, arguments in calls:
        assert name in allowed
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])


STREAM = pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])


@SLOW
@STREAM
def test_required_gives_valid_calls_of_offered_tools(server, client, stream):
    content, calls, finish = _run(client, stream, **_kwargs(server, "required"))
    _assert_valid_calls(calls, {"get_weather", "set_mode"})
    # nothing but calls: no content, and the grammar ended the output
    assert (content or "", finish) == ("", "tool_calls")


@SLOW
@STREAM
def test_required_single_call_without_parallel_tool_calls(server, client, stream):
    kwargs = _kwargs(server, "required", parallel_tool_calls=False)
    content, calls, finish = _run(client, stream, **kwargs)
    _assert_valid_calls(calls, {"get_weather", "set_mode"})
    assert len(calls) == 1
    assert (content or "", finish) == ("", "tool_calls")


@SLOW
@STREAM
@pytest.mark.parametrize("name", ["get_weather", "set_mode"])
def test_named_gives_exactly_one_call_of_that_tool(server, client, stream, name):
    content, calls, finish = _run(client, stream, **_kwargs(server, _named(name)))
    _assert_valid_calls(calls, {name})
    assert len(calls) == 1
    # vLLM, like OpenAI, ends a named tool choice with "stop"
    assert (content or "", finish) == ("", "stop")


@SLOW
@STREAM
def test_named_strict_tool_needs_no_bias(server, client, stream):
    """A strict tool with bounded values (enum, boolean, integer range): the
    grammar alone brings the call to its end."""
    kwargs = _kwargs(server, _named("set_mode"), bias=())
    content, calls, finish = _run(client, stream, **kwargs)
    _assert_valid_calls(calls, {"set_mode"})
    args = json.loads(calls[0][1])
    assert args["mode"] in ("eco", "boost") and isinstance(args["on"], bool)
    assert (content or "", len(calls), finish) == ("", 1, "stop")


@SLOW
@STREAM
def test_auto_is_unconstrained(server, client, stream):
    """Non-strict tools and "auto": no grammar, so the biased token comes out
    first, as text, and no call is made."""
    tools = [TOOLS[0]]
    kwargs = _kwargs(server, "auto", tools=tools, max_tokens=8)
    content, calls, finish = _run(client, stream, **kwargs)
    assert calls == []
    assert content is not None and content.startswith("</arg_value>")
    assert finish == "length"


@SLOW
@STREAM
def test_auto_with_strict_tool_makes_opened_calls_valid(server, client, stream):
    """A strict tool under "auto": the model (biased to open a call) must
    complete a valid one."""
    kwargs = _kwargs(
        server,
        "auto",
        tools=[TOOLS[1]],
        bias=("<tool_call>",),
        parallel_tool_calls=False,
    )
    content, calls, finish = _run(client, stream, **kwargs)
    _assert_valid_calls(calls, {"set_mode"})
    assert len(calls) == 1 and finish == "tool_calls"


@SLOW
def test_auto_keeps_the_requests_own_structured_output(server, client):
    """A strict tool, "auto" and the request's own regex: the regex applies."""
    kwargs = _kwargs(
        server,
        "auto",
        bias=(),
        max_tokens=20,
        extra_body={"structured_outputs": {"regex": "plain answer"}},
    )
    content, calls, _ = _run(client, False, **kwargs)
    assert (content, calls) == ("plain answer", [])


OWN = {
    "structured_outputs": {"structured_outputs": {"grammar": 'start: "x"'}},
    "response_format": {"response_format": {"type": "json_object"}},
}


@SLOW
@SLOW
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("own", sorted(OWN))
@pytest.mark.parametrize("choice", ["required", "named"])
def test_forced_call_with_own_structured_output_is_refused(server, choice, own, stream):
    tool_choice = "required" if choice == "required" else _named("set_mode")
    code, error = _post_refused(
        server, TOOLS, tool_choice=tool_choice, stream=stream, **OWN[own]
    )
    assert code == 400
    message = error["error"]["message"]
    assert "tool_choice" in message and own in message


@SLOW
@pytest.mark.parametrize("choice", ["required", "named"])
def test_uncallable_tool_name_is_still_refused(server, choice):
    bad = {"type": "function", "function": {"name": "a b"}}
    tool_choice = "required" if choice == "required" else _named("set_mode")
    code, error = _post_refused(server, [*TOOLS, bad], tool_choice=tool_choice)
    assert code == 400
    assert "'a b'" in error["error"]["message"]


# -- the grammar and adjust_request, without a server -----------------------------


def _request(tool_choice, tools=TOOLS, **extra):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest(
        messages=MESSAGES, model=MODEL, tools=tools, tool_choice=tool_choice, **extra
    )


def _adjusted(request):
    from vllm_spark2_5_plugin.tool_parsers.spark25 import Spark25ToolParser

    return Spark25ToolParser(None, request.tools).adjust_request(request)


@pytest.fixture(scope="module")
def matcher_for(tiny_checkpoint):
    """Compile the structural tag ``adjust_request`` sets; returns a function
    telling whether a whole output is accepted (ends where the grammar may)."""
    import xgrammar as xgr
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer))

    def accepts(request, output: str) -> bool:
        tag = _adjusted(request).structured_outputs.structural_tag
        matcher = xgr.GrammarMatcher(compiler.compile_structural_tag(tag))
        return matcher.accept_string(output) and matcher.is_completed()

    return accepts


W = "<tool_call>get_weather\n"
M = "<tool_call>set_mode\n"


def _pair(key: str, value: str) -> str:
    return f"<arg_key>{key}</arg_key><arg_value>{value}</arg_value>\n"


ECO_ON = _pair("mode", "eco") + _pair("on", "true")
OUTPUTS = [
    # (output, required accepts, named set_mode accepts)
    (W + _pair("city", "Paris") + _pair("days", "3") + "</tool_call>", True, False),
    (M + ECO_ON + "</tool_call>", True, True),
    (M + ECO_ON + _pair("level", "9") + "</tool_call>", True, True),
    (M + ECO_ON + "</tool_call>\n" + M + ECO_ON + "</tool_call>", True, False),
    (M + ECO_ON + "</tool_call>\n" + W + "</tool_call>", False, False),
    ("", False, False),  # a call is required
    ("Sure. " + M + ECO_ON + "</tool_call>", False, False),  # no text
    (M + ECO_ON + "</tool_call> Done.", False, False),
    ("<tool_call>nope\n</tool_call>", False, False),  # not an offered tool
    (W + _pair("city", "Paris") + "</tool_call>", False, False),  # days required
    (W + _pair("city", "Paris") + _pair("days", "3.5") + "</tool_call>", False, False),
    (W + _pair("days", "3") + _pair("city", "P") + "</tool_call>", False, False),
    (
        W + _pair("city", "a</arg_value>") + _pair("days", "1") + "</tool_call>",
        False,
        False,
    ),
    (
        W + _pair("city", "a<|user|>") + _pair("days", "1") + "</tool_call>",
        False,
        False,
    ),
    (M + _pair("mode", "eco") + ECO_ON + "</tool_call>", False, False),  # repeat
    (M + _pair("mode", "fast") + _pair("on", "true") + "</tool_call>", False, False),
    (M + ECO_ON + _pair("level", "10") + "</tool_call>", False, False),  # maximum
    (M + ECO_ON + _pair("x", "1") + "</tool_call>", False, False),  # undeclared
    (M + _pair("on", "true") + "</tool_call>", False, False),  # mode required
]


@pytest.mark.parametrize(("output", "required", "named"), OUTPUTS)
def test_grammar_of_required_and_named(matcher_for, output, required, named):
    assert matcher_for(_request("required"), output) is required
    assert matcher_for(_request(_named("set_mode")), output) is named


def test_non_strict_tool_values_follow_the_type_only():
    from vllm_spark2_5_plugin.tool_parsers.constraints import ToolSpec, value_format

    enum = {"type": "string", "enum": ["eco"]}
    assert value_format(enum, strict=False).type == "any_text"
    assert value_format(enum, strict=True).type == "const_string"
    bounded = {"type": "integer", "maximum": 3}
    assert value_format(bounded, strict=False).json_schema == {"type": "integer"}
    assert value_format(bounded, strict=True).json_schema == bounded
    assert ToolSpec("x", None, False).strict is False


def test_parallel_tool_calls_false_allows_one_call(matcher_for):
    request = _request("required", parallel_tool_calls=False)
    assert matcher_for(request, M + ECO_ON + "</tool_call>")
    assert not matcher_for(request, (M + ECO_ON + "</tool_call>\n") * 2)


def test_auto_with_a_strict_tool_constrains_opened_calls_only(matcher_for):
    request = _request("auto")
    assert matcher_for(request, "Just text, <b>no</b> call.")
    assert matcher_for(request, "Hi " + M + ECO_ON + "</tool_call> bye")
    assert not matcher_for(request, "Hi " + M + _pair("on", "true") + "</tool_call>")


def test_auto_without_strict_tools_adds_nothing():
    assert _adjusted(_request("auto", tools=TOOLS[:1])).structured_outputs is None


@pytest.mark.parametrize(
    "own",
    [
        {"structured_outputs": {"grammar": 'start: "x"'}},
        {"response_format": {"type": "json_object"}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "a"}}},
    ],
)
def test_forced_call_with_own_constraint_raises(own):
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match="tool_choice.*required"):
        _adjusted(_request("required", **own))
    # "auto" keeps the request's own constraint untouched
    request = _request("auto", **own)
    before = request.structured_outputs
    assert _adjusted(request).structured_outputs is before


def test_switch_turns_the_grammar_off(monkeypatch):
    monkeypatch.setenv("VLLM_ENFORCE_STRICT_TOOL_CALLING", "0")
    request = _request("required", response_format={"type": "json_object"})
    assert _adjusted(request).structured_outputs is None


def _nested_objects(depth: int) -> dict:
    schema = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def _function_tool(name, parameters, strict=None):
    function = {"name": name, "parameters": parameters}
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


@pytest.mark.parametrize(
    ("tools", "choice", "message"),
    [
        # xgrammar refuses the schema (it used to surface as vLLM's fallback
        # backend's "Invalid grammar specification: 'triggers'", or break a
        # stream): a 400 naming the tool and xgrammar's reason.
        (
            [
                _function_tool("fine", {"type": "object", "properties": {}}),
                _function_tool(
                    "bounded",
                    {
                        "type": "object",
                        "properties": {"a": {"type": "integer", "minimum": "abc"}},
                    },
                    strict=True,
                ),
            ],
            "required",
            r"tool 'bounded': its parameters schema cannot be turned into a "
            r"grammar for the tool call \(Value must be a number\)",
        ),
        # required entries that are not names (was "unhashable type: 'list'").
        (
            [
                _function_tool(
                    "f",
                    {
                        "type": "object",
                        "properties": {"a": {"type": "integer"}},
                        "required": [["a"]],
                    },
                )
            ],
            "required",
            r"tool 'f': parameters.required must list property names \(strings\), "
            r"got \['a'\]",
        ),
        # a required key the format cannot write (was a 200 whose call lacked
        # it).
        (
            [
                _function_tool(
                    "f",
                    {
                        "type": "object",
                        "properties": {" a ": {"type": "integer"}},
                        "required": [" a "],
                    },
                    strict=True,
                )
            ],
            "required",
            r"tool 'f': the required property ' a ' cannot be written",
        ),
        # required but not declared, and no other key allowed: unsatisfiable.
        (
            [
                _function_tool(
                    "f",
                    {
                        "type": "object",
                        "properties": {"a": {"type": "integer"}},
                        "required": ["a", "b"],
                        "additionalProperties": False,
                    },
                )
            ],
            "required",
            r"tool 'f': parameters.required lists 'b', which properties does not "
            r"declare and additionalProperties: false forbids",
        ),
        # a $ref loop no value can end (was xgrammar's "Cannot find field
        # $defs", as for any $ref).
        (
            [
                _function_tool(
                    "f",
                    {
                        "$defs": {
                            "A": {"allOf": [{"$ref": "#/$defs/B"}]},
                            "B": {"$ref": "#/$defs/A"},
                        },
                        "type": "object",
                        "properties": {"a": {"$ref": "#/$defs/A"}},
                    },
                    strict=True,
                )
            ],
            "required",
            r"tool 'f', parameter 'a': \$ref '#/\$defs/A' refers back to itself "
            r"through \$ref / allOf alone",
        ),
        (
            [
                _function_tool(
                    "f",
                    {
                        "$defs": {"A": {"type": "integer"}},
                        "type": "object",
                        "properties": {
                            "a": {"type": "array", "items": {"$ref": "#/$defs/B"}}
                        },
                    },
                    strict=True,
                )
            ],
            "required",
            r"tool 'f', parameter 'a': \$ref '#/\$defs/B' points to nothing",
        ),
        # each value carries its own copy of the definitions it uses: a bound
        # keeps the grammar from growing with (values x definitions).
        (
            [
                _function_tool(
                    "f",
                    {
                        "$defs": {"Big": {"enum": ["x" * 100_000]}},
                        "type": "object",
                        "properties": {
                            f"p{i}": {
                                "type": "object",
                                "properties": {"b": {"$ref": "#/$defs/Big"}},
                            }
                            for i in range(100)
                        },
                    },
                    strict=True,
                )
            ],
            "required",
            r"tool 'f', parameter 'p\d+': copying the \$ref definitions into each "
            r"value that uses them would take \d+ characters of grammar",
        ),
        # two tools of one name (the grammar and the parser used the first).
        (
            [
                _function_tool("f", {"type": "object", "properties": {}}),
                _function_tool("f", {"type": "object", "required": ["a"]}),
            ],
            "auto",
            r"the tool name\(s\) 'f' are given to more than one tool",
        ),
        # Past pydantic's serialization depth (was its own message, no param).
        (
            [
                _function_tool("shallow", {"type": "object", "properties": {}}),
                _function_tool("deep", _nested_objects(200), strict=True),
            ],
            "auto",
            r"tool 'deep': its parameters schema nests too deeply \(\d+ levels",
        ),
    ],
    ids=[
        "xgrammar-refuses",
        "required-not-names",
        "required-unwritable",
        "required-undeclared-closed",
        "ref-loop",
        "ref-to-nothing",
        "ref-copies",
        "twice",
        "too-deep",
    ],
)
def test_tools_the_grammar_cannot_honour_are_refused_naming_them(
    tools, choice, message
):
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match=message) as err:
        _adjusted(_request(choice, tools=tools))
    assert err.value.parameter == "tools"


@pytest.mark.parametrize("strict", [False, True])
def test_a_required_key_properties_does_not_declare_is_written(matcher_for, strict):
    # JSON Schema lets it hold any value; the forced call must carry it (it
    # used to be left out: the call then broke the tool's own schema).
    tool = _function_tool(
        "g",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "required": ["a", "note"],
        },
        strict=strict,
    )
    request = _request("required", tools=[tool])
    call = "<tool_call>g\n" + _pair("a", "1") + "{}</tool_call>"
    assert matcher_for(request, call.format(_pair("note", "any text, 42")))
    assert not matcher_for(request, call.format(""))
    assert not matcher_for(request, call.format(_pair("other", "x")))


OPTS = {
    "type": "object",
    "properties": {"unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["unit"],
    "additionalProperties": False,
}
TREE = {
    "type": "object",
    "properties": {
        "v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/Tree"}},
    },
    "required": ["v"],
    "additionalProperties": False,
}
# Parameters the pydantic way: models under $defs / definitions, pointed to.
BOOK = {
    "$defs": {"Opts": OPTS, "Tree": TREE},
    "definitions": {"Mode": {"type": "string", "enum": ["eco", "boost"]}},
    "type": "object",
    "properties": {
        "wrap": {
            "type": "object",
            "properties": {"inner": {"$ref": "#/$defs/Opts"}},
            "required": ["inner"],
        },
        "opts": {"$ref": "#/$defs/Opts"},
        "maybe": {"anyOf": [{"$ref": "#/$defs/Opts"}, {"type": "null"}]},
        "all": {"allOf": [{"$ref": "#/$defs/Opts"}], "description": "x"},
        "mode": {"$ref": "#/definitions/Mode", "description": "y"},
        "tree": {"$ref": "#/$defs/Tree"},
        "same": {"$ref": "#/properties/opts"},
    },
}


@pytest.mark.parametrize(
    ("key", "value", "strict", "non_strict"),
    [
        ("wrap", '{"inner": {"unit": "c"}}', True, True),
        ("wrap", '{"inner": {"unit": "k"}}', False, True),
        ("wrap", '{"inner": {}}', False, True),
        ("wrap", "wrap it", False, False),
        ("opts", '{"unit": "f"}', True, True),
        ("opts", '{"unit": "k"}', False, True),
        ("opts", '{"unit": "c", "x": 1}', False, True),
        ("opts", "[1]", False, False),  # the declared type: an object
        ("maybe", "null", True, True),
        ("maybe", '{"unit": "c"}', True, True),
        ("maybe", '{"unit": "k"}', False, True),
        ("all", '{"unit": "c"}', True, True),
        ("all", '{"unit": "k"}', False, True),
        ("mode", "eco", True, True),
        ("mode", "fast", False, True),
        ("tree", '{"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]}', True, True),
        ("tree", '{"v": 1, "kids": [{"v": 2, "kids": [{"w": 3}]}]}', False, True),
        ("same", '{"unit": "f"}', True, True),
        ("same", '{"unit": "k"}', False, True),
    ],
)
def test_values_declared_through_ref_are_constrained(
    matcher_for, key, value, strict, non_strict
):
    """A strict tool whose properties point into $defs builds a grammar (it was
    a 400, "Cannot find field $defs") that holds each value to the definition,
    recursive ones included; a non-strict tool's value to the declared type."""
    call = "<tool_call>book\n" + _pair(key, value) + "</tool_call>"
    for is_strict, accepted in ((True, strict), (False, non_strict)):
        tool = _function_tool("book", BOOK, strict=is_strict)
        assert matcher_for(_request("required", tools=[tool]), call) is accepted


def test_allowed_tools_listing_no_offered_tool_says_so():
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
    from vllm.exceptions import VLLMValidationError

    from vllm_spark2_5_plugin.tool_parsers.spark25 import constrain_tool_calls

    request = ResponsesRequest(
        model=MODEL,
        input="hi",
        tools=[{"type": "function", "name": "get", "parameters": None}],
        tool_choice={
            "type": "allowed_tools",
            "mode": "required",
            "tools": [
                {"type": "function", "name": "nope"},
                {"type": "function", "name": ["not", "a", "name"]},
            ],
        },
        stream=True,
    )
    with pytest.raises(
        VLLMValidationError, match=r"offers none of those it lists \('nope'\)"
    ):
        constrain_tool_calls(request)


@pytest.mark.parametrize(
    ("choice", "tools", "needs"),
    [
        ("required", TOOLS, 'tool_choice "required"'),
        ("auto", TOOLS, 'tool_choice "auto" with a strict tool'),
    ],
)
def test_beam_search_with_a_tool_grammar_is_refused(choice, tools, needs):
    """vLLM's beam search samples without the request's structured outputs,
    so a forced or strict call would not be held to the grammar (a probe saw
    both beams run past the turn's end)."""
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match=f"with {needs}: vLLM's beam"):
        _adjusted(_request(choice, tools=tools, use_beam_search=True, n=2))
    # Without a grammar, beam search is left alone.
    request = _request("auto", tools=TOOLS[:1], use_beam_search=True, n=2)
    assert _adjusted(request).structured_outputs is None


def test_a_schema_without_grammar_is_not_refused_where_no_grammar_is_set():
    """ "auto" with the request's own constraint sets no tool grammar, so a
    strict tool whose schema xgrammar refuses is no reason for a 400 there."""
    bad = _function_tool(
        "bounded",
        {"type": "object", "properties": {"a": {"type": "integer", "minimum": "x"}}},
        strict=True,
    )
    request = _request("auto", tools=[bad], response_format={"type": "json_object"})
    before = request.structured_outputs
    assert _adjusted(request).structured_outputs is before
