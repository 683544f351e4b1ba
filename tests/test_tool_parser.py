"""Table-driven tests of the ``spark25`` tool parser, in both modes.

Every case lists the model output and, written by hand, the content and the
tool calls (name, exact arguments JSON) that the parser must return. Each case
runs non-streaming and streaming under several chunkings; the streamed result
must equal the hand-written one too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

from vllm_spark2_5_plugin.tool_parsers.spark25 import Spark25ToolParser


def _function(name: str, properties: dict | None = None) -> dict:
    fn: dict = {"name": name, "description": f"the {name} tool"}
    if properties is not None:
        fn["parameters"] = {"type": "object", "properties": properties}
    return {"type": "function", "function": fn}


TOOLS = [
    _function(
        "get_weather",
        {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
    ),
    _function(
        "typed",
        {
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "nothing": {"type": "null"},
            "tags": {"type": "array", "items": {}},
            "opts": {"type": "object"},
            "note": {"type": ["string", "null"]},
            "maybe": {"type": ["integer", "null"]},
            "choice": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
        },
    ),
    _function("ping"),  # no parameters at all
    _function("search", {"query": {"type": "string"}, "free": {}}),
]


class DummyTokenizer:
    """The parser never tokenizes; vLLM's base class only asks for a vocab."""

    def get_vocab(self) -> dict[str, int]:
        return {}


def make_request(tools: list | None = TOOLS, **kwargs) -> ChatCompletionRequest:
    return ChatCompletionRequest(
        messages=[{"role": "user", "content": "hi"}],
        model="spark2_5-tiny",
        tools=tools,
        **kwargs,
    )


def make_parser(request: ChatCompletionRequest) -> Spark25ToolParser:
    return Spark25ToolParser(DummyTokenizer(), request.tools)


@dataclass
class Case:
    id: str
    output: str
    content: str | None
    calls: list[tuple[str, str]] = field(default_factory=list)
    # Streaming only: calls whose name was streamed before they broke the
    # grammar (a stream cannot take a delta back). Their text is content.
    abandoned: list[str] = field(default_factory=list)


W = "<tool_call>get_weather\n"
CITY_PARIS = "<arg_key>city</arg_key><arg_value>Paris</arg_value>\n"

CASES = [
    Case(
        "plain_text", "Hello there. No tools needed.", "Hello there. No tools needed."
    ),
    Case("empty_output", "", None),
    Case(
        "one_call_newline_layout",
        W
        + CITY_PARIS
        + "<arg_key>days</arg_key><arg_value>3</arg_value>\n</tool_call>",
        None,
        [("get_weather", '{"city": "Paris", "days": 3}')],
    ),
    Case(
        "one_call_no_whitespace",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
        "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
        None,
        [("get_weather", '{"city": "Paris", "days": 3}')],
    ),
    Case(
        "whitespace_variants",
        "<tool_call> get_weather \r\n  <arg_key> city </arg_key>\n <arg_value>Paris"
        "</arg_value>\t\n\n<arg_key>days</arg_key>  <arg_value> 7 </arg_value> "
        "</tool_call>",
        None,
        [("get_weather", '{"city": "Paris", "days": 7}')],
    ),
    Case(
        "name_on_its_own_line",
        "<tool_call>\nping\n</tool_call>",
        None,
        [("ping", "{}")],
    ),
    Case(
        "text_before_and_after",
        "Let me check.\n" + W + CITY_PARIS + "</tool_call>\nDone.",
        "Let me check.\n\nDone.",
        [("get_weather", '{"city": "Paris"}')],
    ),
    Case(
        "several_calls_text_between",
        "A" + W + CITY_PARIS + "</tool_call>B<tool_call>ping\n</tool_call>C"
        "<tool_call>search<arg_key>query</arg_key><arg_value>vllm</arg_value></tool_call>",
        "ABC",
        [
            ("get_weather", '{"city": "Paris"}'),
            ("ping", "{}"),
            ("search", '{"query": "vllm"}'),
        ],
    ),
    Case(
        "no_argument_calls",
        "<tool_call>ping</tool_call><tool_call>ping\n</tool_call>",
        None,
        [("ping", "{}"), ("ping", "{}")],
    ),
    Case(
        "whitespace_only_between_calls",
        "\n<tool_call>ping</tool_call>\n\n<tool_call>ping</tool_call>\n",
        "\n\n\n\n",
        [("ping", "{}"), ("ping", "{}")],
    ),
    Case(
        "declared_types_convert",
        "<tool_call>typed\n"
        "<arg_key>count</arg_key><arg_value> 42 </arg_value>\n"
        "<arg_key>ratio</arg_key><arg_value>2.5</arg_value>\n"
        "<arg_key>flag</arg_key><arg_value>True</arg_value>\n"
        "<arg_key>nothing</arg_key><arg_value>null</arg_value>\n"
        '<arg_key>tags</arg_key><arg_value>["a", 1]</arg_value>\n'
        '<arg_key>opts</arg_key><arg_value>{"k": {"n": [1, 2.0]}}</arg_value>\n'
        "<arg_key>note</arg_key><arg_value>null</arg_value>\n"
        "<arg_key>maybe</arg_key><arg_value>-7</arg_value>\n"
        "<arg_key>choice</arg_key><arg_value>false</arg_value>\n"
        "</tool_call>",
        None,
        [
            (
                "typed",
                '{"count": 42, "ratio": 2.5, "flag": true, "nothing": null, '
                '"tags": ["a", 1], "opts": {"k": {"n": [1, 2.0]}}, "note": null, '
                '"maybe": -7, "choice": false}',
            )
        ],
    ),
    Case(
        "unparseable_typed_values_stay_strings",
        "<tool_call>typed\n"
        "<arg_key>count</arg_key><arg_value>forty-two</arg_value>\n"
        "<arg_key>ratio</arg_key><arg_value>1e999</arg_value>\n"
        "<arg_key>flag</arg_key><arg_value>yes</arg_value>\n"
        "<arg_key>tags</arg_key><arg_value>[1, 2</arg_value>\n"
        "<arg_key>opts</arg_key><arg_value>[1]</arg_value>\n"
        "<arg_key>nothing</arg_key><arg_value>nil</arg_value>\n"
        "<arg_key>maybe</arg_key><arg_value> x </arg_value>\n"
        "<arg_key>choice</arg_key><arg_value>3.0</arg_value>\n"
        "</tool_call>",
        None,
        [
            (
                "typed",
                '{"count": "forty-two", "ratio": "1e999", "flag": "yes", '
                '"tags": "[1, 2", "opts": "[1]", "nothing": "nil", "maybe": " x ", '
                '"choice": "3.0"}',
            )
        ],
    ),
    Case(
        "inexact_and_non_ascii_numbers_stay_strings",
        "<tool_call>typed\n"
        "<arg_key>count</arg_key><arg_value>\u0663\u0664</arg_value>\n"
        "<arg_key>ratio</arg_key><arg_value>.5</arg_value>\n"
        "<arg_key>maybe</arg_key><arg_value>\uff11\uff12</arg_value>\n"
        "<arg_key>tags</arg_key><arg_value>[1e999, 1e-400]</arg_value>\n"
        '<arg_key>opts</arg_key><arg_value>{"s": "\\ud800"}</arg_value>\n'
        "<arg_key>choice</arg_key><arg_value>007</arg_value>\n"
        "</tool_call>",
        None,
        [
            (
                "typed",
                '{"count": "\u0663\u0664", "ratio": ".5", "maybe": "\uff11\uff12", '
                '"tags": "[1e999, 1e-400]", "opts": "{\\"s\\": \\"\\\\ud800\\"}", '
                '"choice": 7}',
            )
        ],
    ),
    Case(
        "string_typed_and_undeclared_stay_strings",
        "<tool_call>search\n<arg_key>query</arg_key><arg_value>42</arg_value>\n"
        "<arg_key>free</arg_key><arg_value>true</arg_value>\n"
        "<arg_key>extra</arg_key><arg_value> [1] </arg_value>\n</tool_call>",
        None,
        [("search", '{"query": "42", "free": "true", "extra": " [1] "}')],
    ),
    Case(
        "unicode_values_and_text",
        "Météo 🌦:" + W + "<arg_key>city</arg_key><arg_value>東京 — Zürich 🌧</arg_value>"
        "</tool_call>ok ✓",
        "Météo 🌦:ok ✓",
        [("get_weather", '{"city": "東京 — Zürich 🌧"}')],
    ),
    Case(
        "markup_and_escapes_inside_values",
        "<tool_call>search\n<arg_key>query</arg_key><arg_value>"
        '<b>bold</b> & a < b > c "q" \\ back\nline\ttab </arg_valu <tool_cal'
        "</arg_value>\n</tool_call>",
        None,
        [
            (
                "search",
                '{"query": "<b>bold</b> & a < b > c \\"q\\" \\\\ back\\nline\\ttab '
                '</arg_valu <tool_cal"}',
            )
        ],
    ),
    Case(
        "empty_and_padded_values",
        W + "<arg_key>city</arg_key><arg_value> Paris </arg_value>"
        "<arg_key>days</arg_key><arg_value></arg_value></tool_call>",
        None,
        [("get_weather", '{"city": " Paris ", "days": ""}')],
    ),
    Case(
        "unknown_tool_is_content",
        "X<tool_call>delete_all\n<arg_key>x</arg_key><arg_value>1</arg_value>\n"
        "</tool_call>Y",
        "X<tool_call>delete_all\n<arg_key>x</arg_key><arg_value>1</arg_value>\n"
        "</tool_call>Y",
    ),
    Case(
        "unknown_then_known",
        "<tool_call>nope</tool_call><tool_call>ping</tool_call>",
        "<tool_call>nope</tool_call>",
        [("ping", "{}")],
    ),
    Case(
        "prefix_and_extension_of_a_known_name",
        "<tool_call>get_weathe\n</tool_call><tool_call>get_weather_v2\n</tool_call>"
        "<tool_call>get weather</tool_call>",
        "<tool_call>get_weathe\n</tool_call><tool_call>get_weather_v2\n</tool_call>"
        "<tool_call>get weather</tool_call>",
    ),
    Case(
        "repeated_opening_tag",
        "<tool_call><tool_call>ping</tool_call>",
        "<tool_call>",
        [("ping", "{}")],
    ),
    Case(
        "lookalike_markup_is_content",
        "a < b, <tool> </tool_call> <arg_key>k</arg_key> <tool_call",
        "a < b, <tool> </tool_call> <arg_key>k</arg_key> <tool_call",
    ),
    Case("truncated_after_opening_tag", "Hi <tool_call>", "Hi <tool_call>"),
    Case("truncated_inside_name", "Hi <tool_call>get_wea", "Hi <tool_call>get_wea"),
    Case(
        "truncated_inside_value",
        "Sure." + W + "<arg_key>city</arg_key><arg_value>Par",
        "Sure." + W + "<arg_key>city</arg_key><arg_value>Par",
        abandoned=["get_weather"],
    ),
    Case(
        "truncated_inside_closing_tag",
        W + CITY_PARIS + "</tool_ca",
        W + CITY_PARIS + "</tool_ca",
        abandoned=["get_weather"],
    ),
    Case(
        "truncated_second_call",
        "<tool_call>ping</tool_call>" + W + "<arg_key>days</arg_key><arg_value>1",
        W + "<arg_key>days</arg_key><arg_value>1",
        [("ping", "{}")],
        abandoned=["get_weather"],
    ),
    Case(
        "stray_text_in_body_is_content",
        W + "please<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
        W + "please<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
        abandoned=["get_weather"],
    ),
    Case(
        "missing_value_close_is_content",
        W + "<arg_key>city</arg_key><arg_value>Paris</tool_call>after",
        W + "<arg_key>city</arg_key><arg_value>Paris</tool_call>after",
        abandoned=["get_weather"],
    ),
    Case(
        "broken_call_then_valid_call",
        W + "<arg_key>city</arg_key><arg_value>Paris<tool_call>ping</tool_call>",
        W + "<arg_key>city</arg_key><arg_value>Paris",
        [("ping", "{}")],
        abandoned=["get_weather"],
    ),
    Case(
        "repeated_key_call_is_content",
        W + CITY_PARIS + "<arg_key> city </arg_key><arg_value>Rome</arg_value>"
        "</tool_call>!<tool_call>ping</tool_call>",
        W + CITY_PARIS + "<arg_key> city </arg_key><arg_value>Rome</arg_value>"
        "</tool_call>!",
        [("ping", "{}")],
        abandoned=["get_weather"],
    ),
    Case(
        "repeated_typed_key_call_is_content",
        "<tool_call>typed<arg_key>count</arg_key><arg_value>1</arg_value>"
        "<arg_key>flag</arg_key><arg_value>true</arg_value>"
        "<arg_key>count</arg_key><arg_value>2</arg_value></tool_call>",
        "<tool_call>typed<arg_key>count</arg_key><arg_value>1</arg_value>"
        "<arg_key>flag</arg_key><arg_value>true</arg_value>"
        "<arg_key>count</arg_key><arg_value>2</arg_value></tool_call>",
        abandoned=["typed"],
    ),
    Case(
        "key_without_value_is_content",
        W + "<arg_key>city</arg_key></tool_call>",
        W + "<arg_key>city</arg_key></tool_call>",
        abandoned=["get_weather"],
    ),
    # A role token or <|endoftext|> ends the assistant turn: it and all that
    # follows are neither content nor calls (docs/tool_parser.md).
    Case("role_token_ends_the_turn", "Hi<|user|>more", "Hi"),
    Case("end_of_text_ends_the_turn", "Done.<|endoftext|><|endoftext|>", "Done."),
    Case("turn_ends_at_the_first_of_several", "a<|system|>b<|user|>c", "a"),
    Case(
        "call_before_observation_token_counts_the_one_after_not",
        W
        + CITY_PARIS
        + "</tool_call><|observation|>\n<tool_response>sunny</tool_response>"
        + W
        + "<arg_key>city</arg_key><arg_value>Rome</arg_value></tool_call>",
        None,
        [("get_weather", '{"city": "Paris"}')],
    ),
    Case(
        "role_token_inside_a_call_cuts_it_off",
        W + "<arg_key>city</arg_key><arg_value>Par<|assistant|>is</arg_value>",
        W + "<arg_key>city</arg_key><arg_value>Par",
        abandoned=["get_weather"],
    ),
    Case(
        "role_token_lookalikes_are_content",
        "a <|use b <|user| c |user|> <user> <|endoftext",
        "a <|use b <|user| c |user|> <user> <|endoftext",
    ),
]


def streamed_content_expected(case: Case) -> str:
    """The documented streaming rule for whitespace-only content.

    vLLM's non-streaming response turns whitespace-only content into null when
    tools were called; the stream matches it by not sending that whitespace.
    """
    content = case.content or ""
    if case.calls and not content.strip():
        return ""
    return content


# -- drivers ------------------------------------------------------------------


def run_non_streaming(output: str, request: ChatCompletionRequest):
    result = make_parser(request).extract_tool_calls(output, request)
    calls = [(c.function.name, c.function.arguments) for c in result.tool_calls]
    return result, calls


@dataclass
class StreamResult:
    content: str
    calls: list[dict]  # by index: {"id", "name", "arguments"}


def merge_tool_call_delta(calls: dict[int, dict], tc) -> dict:
    """Add one streamed tool-call delta to ``calls`` (by index); its entry."""
    entry = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
    if tc.function and tc.function.name is not None:
        assert entry["name"] is None, "a call's name must be sent once"
        entry["name"] = tc.function.name
    if tc.function and tc.function.arguments:
        entry["arguments"] += tc.function.arguments
    return entry


def run_streaming(
    chunks: list[str], request: ChatCompletionRequest, token_ids=None
) -> StreamResult:
    """Feed deltas the way vLLM does for this parser, then finish the stream."""
    parser = make_parser(request)
    content = ""
    calls: dict[int, dict] = {}
    previous = ""
    deltas = []
    for i, chunk in enumerate(chunks):
        ids = token_ids[i] if token_ids else []
        deltas.append(
            parser.extract_tool_calls_streaming(
                previous, previous + chunk, chunk, [], ids, ids, request
            )
        )
        previous += chunk
    deltas.append(parser.finish_streaming())
    for delta in deltas:
        if delta is None:
            continue
        content += delta.content or ""
        for tc in delta.tool_calls:
            entry = merge_tool_call_delta(calls, tc)
            if tc.id is not None:
                assert entry["id"] is None, "a call's id must be sent once"
                entry["id"] = tc.id
    assert sorted(calls) == list(range(len(calls))), "indices must be 0, 1, 2, ..."
    return StreamResult(content, [calls[i] for i in sorted(calls)])


def split_every(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def split_at_tags(text: str) -> list[str]:
    """Cut just before and in the middle of every '<': stresses tag prefixes."""
    cuts = {0, len(text)}
    for i, char in enumerate(text):
        if char == "<":
            cuts.update({i, min(i + 3, len(text))})
    points = sorted(cuts)
    return [text[a:b] for a, b in zip(points, points[1:], strict=False)] or [""]


CHUNKINGS = {
    "whole": lambda t: [t],
    "chars_1": lambda t: split_every(t, 1),
    "chars_2": lambda t: split_every(t, 2),
    "chars_3": lambda t: split_every(t, 3),
    "chars_5": lambda t: split_every(t, 5),
    "chars_8": lambda t: split_every(t, 8),
    "at_tags": split_at_tags,
}


def assert_stream_matches_case(stream: StreamResult, case: Case) -> None:
    assert stream.content == streamed_content_expected(case)
    complete = [c for c in stream.calls if _is_json_object(c["arguments"])]
    broken = [c for c in stream.calls if not _is_json_object(c["arguments"])]
    assert [(c["name"], c["arguments"]) for c in complete] == case.calls
    assert [c["name"] for c in broken] == case.abandoned
    assert all(c["id"] and c["id"].startswith("chatcmpl-tool-") for c in stream.calls)


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


# -- tests ----------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_non_streaming_matches_table(case: Case):
    result, calls = run_non_streaming(case.output, make_request())
    assert result.content == case.content
    assert calls == case.calls
    assert result.tools_called == bool(case.calls)
    for name, arguments in calls:
        assert isinstance(json.loads(arguments), dict), (name, arguments)


@pytest.mark.parametrize("chunking", sorted(CHUNKINGS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_streaming_matches_table(case: Case, chunking: str):
    stream = run_streaming(CHUNKINGS[chunking](case.output), make_request())
    assert_stream_matches_case(stream, case)


def test_streamed_arguments_are_prefixes_of_final_arguments():
    """Every argument fragment extends a prefix of the final JSON (no rewrites)."""
    case = next(c for c in CASES if c.id == "declared_types_convert")
    request = make_request()
    parser = make_parser(request)
    sent = ""
    for char in case.output:
        delta = parser.extract_tool_calls_streaming("", "", char, [], [], [], request)
        for tc in delta.tool_calls if delta else []:
            sent += tc.function.arguments or ""
            assert case.calls[0][1].startswith(sent)
    assert sent == case.calls[0][1]


def test_typed_value_is_withheld_until_its_closing_tag():
    request = make_request()
    parser = make_parser(request)
    head = W + "<arg_key>days</arg_key><arg_value>12"
    delta = parser.extract_tool_calls_streaming("", head, head, [], [], [], request)
    assert [tc.function.arguments for tc in delta.tool_calls] == ['{"days": ']
    more = "3</arg_value>"
    delta = parser.extract_tool_calls_streaming(
        head, head + more, more, [], [], [], request
    )
    assert delta.tool_calls[0].function.arguments == "123"


def test_no_partial_tag_leaks_into_content():
    request = make_request()
    parser = make_parser(request)
    sent = []
    for chunk in ["Hello <", "tool", "_ca", "ll>ping</tool_call> bye"]:
        delta = parser.extract_tool_calls_streaming("", "", chunk, [], [], [], request)
        if delta and delta.content:
            sent.append(delta.content)
    assert sent == ["Hello ", " bye"]


def test_without_tools_everything_is_content():
    output = "<tool_call>ping</tool_call> and " + W + CITY_PARIS + "</tool_call>"
    request = make_request(tools=None)
    result, calls = run_non_streaming(output, request)
    assert (result.content, calls) == (output, [])
    stream = run_streaming(split_every(output, 3), request)
    assert (stream.content, stream.calls) == (output, [])


def test_tool_choice_none_keeps_calls_as_content():
    output = "<tool_call>ping</tool_call>"
    request = make_request(tool_choice="none")
    result, calls = run_non_streaming(output, request)
    assert (result.content, calls) == (output, [])
    stream = run_streaming(split_every(output, 2), request)
    assert (stream.content, stream.calls) == (output, [])


@pytest.mark.parametrize("mode", ["auto", "required"])
def test_allowed_tools_reads_calls_of_the_listed_tools_only(mode):
    """A Responses ``allowed_tools`` choice: a call of an offered but
    unlisted tool is not returned as a call (the client did not allow it;
    with mode "auto" and no strict tool no grammar stops the model writing
    it); its block stays content, as an unknown tool's does."""
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest

    request = ResponsesRequest(
        model="spark2_5-tiny",
        input="hi",
        tools=[
            {"type": "function", "name": "ping", "parameters": None},
            {
                "type": "function",
                "name": "get_weather",
                "parameters": TOOLS[0]["function"]["parameters"],
            },
        ],
        tool_choice={
            "type": "allowed_tools",
            "mode": mode,
            "tools": [{"type": "function", "name": "ping"}],
        },
        stream=True,
    )
    unlisted = W + CITY_PARIS + "</tool_call>"
    output = "<tool_call>ping</tool_call>" + unlisted
    result, calls = run_non_streaming(output, request)
    assert (result.content, calls) == (unlisted, [("ping", "{}")])
    for chunking in ("whole", "chars_3", "at_tags"):
        stream = run_streaming(CHUNKINGS[chunking](output), request)
        assert stream.content == unlisted, chunking
        assert [(c["name"], c["arguments"]) for c in stream.calls] == [("ping", "{}")]
    # Without allowed_tools both are calls.
    request.tool_choice = "auto"
    assert run_non_streaming(output, request)[1] == [
        ("ping", "{}"),
        ("get_weather", '{"city": "Paris"}'),
    ]


@pytest.mark.parametrize(
    ("tool_choice", "expected"),
    [("auto", False), ("required", False), ("none", True)],
)
def test_adjust_request_keeps_special_tokens_when_tools_are_active(
    tool_choice, expected
):
    request = make_request(tool_choice=tool_choice)
    assert request.skip_special_tokens is True
    adjusted = make_parser(request).adjust_request(request)
    assert adjusted.skip_special_tokens is expected
    # Only a forced call ("required") constrains generation: a structural tag.
    if tool_choice == "required":
        assert adjusted.structured_outputs.structural_tag is not None
    else:
        assert adjusted.structured_outputs is None


def test_adjust_request_without_tools_changes_nothing():
    request = make_request(tools=None)
    assert make_parser(request).adjust_request(request).skip_special_tokens is True


def test_parser_declares_no_structural_tag():
    assert Spark25ToolParser.structural_tag_model is None
    assert Spark25ToolParser.default_tool_strict_level is None
    assert Spark25ToolParser.supports_required_and_named is False


def test_vllm_end_of_stream_check_adds_no_arguments():
    """vLLM appends get_remaining_unstreamed_args() to the last delta."""
    request = make_request()
    parser = make_parser(request)
    output = (
        W + CITY_PARIS + "<arg_key>days</arg_key><arg_value>4</arg_value></tool_call>"
    )
    for chunk in split_every(output, 4):
        parser.extract_tool_calls_streaming("", "", chunk, [], [], [], request)
    assert parser.get_remaining_unstreamed_args() == ""
    assert parser.prev_tool_call_arr == [
        {"name": "get_weather", "arguments": '{"city": "Paris", "days": 4}'}
    ]


def test_chat_template_tool_calls_parse_back(tmp_path):
    """An assistant turn rendered by the shipped template parses back exactly."""
    from transformers import AutoTokenizer

    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    tokenizer = AutoTokenizer.from_pretrained(make_tiny_checkpoint(tmp_path / "ckpt"))
    arguments = [
        {"city": "Paris", "days": 3},
        {
            "count": 2,
            "flag": False,
            "tags": ["x", 2],
            "opts": {"k": None},
            "note": None,
        },
        {},
    ]
    names = ["get_weather", "typed", "ping"]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {"type": "function", "function": {"name": n, "arguments": a}}
                for n, a in zip(names, arguments, strict=True)
            ],
        },
        {"role": "tool", "content": "sunny"},
        {"role": "tool", "content": "42"},
    ]
    rendered = tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False)
    assert rendered.startswith("<|system|>\nBe brief.\n\n# Tools\n")
    assert '"name": "get_weather"' in rendered
    assert rendered.endswith(
        "<|observation|>\n<tool_response>sunny</tool_response>\n"
        "<tool_response>42</tool_response>"
    )
    turn = rendered.split("<|assistant|>\n", 1)[1].split("<|observation|>")[0]
    result, calls = run_non_streaming(turn, make_request())
    # the newline before each of the three blocks is content
    assert result.content == "Checking.\n\n\n"
    assert [(n, json.loads(a)) for n, a in calls] == list(
        zip(names, arguments, strict=True)
    )
    # The tags are single special tokens of the tokenizer.
    for tag in ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_value>"):
        assert len(tokenizer.encode(tag, add_special_tokens=False)) == 1


def test_string_union_values_parse_back_as_written(tmp_path):
    """Strings of a parameter that may also be a number, a boolean or null
    come back as the strings the template wrote, where the text is not that
    other type's JSON spelling ("00501" came back as 501, "TRUE" as true)."""
    from transformers import AutoTokenizer

    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    tokenizer = AutoTokenizer.from_pretrained(make_tiny_checkpoint(tmp_path / "ckpt"))
    tools = [
        _function(
            "lookup",
            {
                "zip": {"type": ["string", "integer"]},
                "flag": {"anyOf": [{"type": "string"}, {"type": "boolean"}]},
                "size": {"type": ["number", "string"]},
                "label": {"type": ["string", "null"]},
            },
        )
    ]
    arguments = [
        {"zip": "00501", "flag": "TRUE", "size": "1e3", "label": "NULL"},
        {"zip": 501, "flag": True, "size": 1.5, "label": None},
    ]
    messages = [
        {"role": "user", "content": "Look it up."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "lookup", "arguments": a}}
                for a in arguments
            ],
        },
    ]
    rendered = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    turn = rendered.split("<|assistant|>\n", 1)[1]
    assert "<arg_value>00501</arg_value>" in turn
    request = make_request(tools)
    _, calls = run_non_streaming(turn, request)
    assert [json.loads(a) for _, a in calls] == arguments
    for size in (1, 3):
        streamed = run_streaming(split_every(turn, size), request)
        assert [json.loads(c["arguments"]) for c in streamed.calls] == arguments
