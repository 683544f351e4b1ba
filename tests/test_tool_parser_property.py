"""Property tests (hypothesis) of the ``spark25`` parser on random outputs.

* Random and malformed outputs, built from tags, tag fragments, names, keys,
  values and free text: the parser never raises, no text is lost, and
  streaming under random chunkings agrees with non-streaming.
* Random well-formed outputs rendered from a known list of calls: the parser
  returns exactly those calls and the text between them.
* The scanner alone (no vLLM objects): its events do not depend on how the
  output is cut into pieces.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_tool_parser import make_request, run_non_streaming, run_streaming

from vllm_spark2_5_plugin.names import STRUCTURAL_TAGS
from vllm_spark2_5_plugin.tool_parsers.scanner import (
    ArgumentsEvent,
    CallEndEvent,
    CallStartEvent,
    ContentEvent,
    Spark25CallScanner,
)

KNOWN = ["get_weather", "typed", "ping", "search"]
PIECES = [
    *STRUCTURAL_TAGS,
    *(t[:k] for t in STRUCTURAL_TAGS for k in (1, 2, 5, len(t) - 1)),
    *KNOWN,
    "get_weathe",
    "unknown_tool",
    "city",
    "days",
    "count",
    "flag",
    "tags",
    "opts",
    "query",
    "3",
    "-1.5",
    "true",
    "null",
    '{"a": [1, 2]}',
    "[1",
    "\n",
    " ",
    "\t",
    "<",
    ">",
    "</",
    "é",
    "🌧",
    '"',
    "\\",
]
piece = st.one_of(st.sampled_from(PIECES), st.text(max_size=6))
outputs = st.lists(piece, max_size=40).map("".join)

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def chunk_by(text: str, cuts: list[int]) -> list[str]:
    points = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    return [text[a:b] for a, b in zip(points, points[1:], strict=False)] or [""]


def content_after_removing_calls(output: str, content: str, calls: int) -> bool:
    """Is ``content`` ``output`` with exactly ``calls`` call blocks cut out?

    A call block is the text from a ``<tool_call>`` to the next
    ``</tool_call>`` (a valid call holds exactly one closing tag). This is an
    oracle independent of the parser: it only looks at the strings.
    """
    start, end = "<tool_call>", "</tool_call>"
    frontier = {(0, 0, calls)}  # (position in output, in content, calls left)
    seen = set(frontier)
    while frontier:
        following = set()
        for i, j, left in frontier:
            if i == len(output) and j == len(content) and left == 0:
                return True
            steps = []
            if i < len(output) and j < len(content) and output[i] == content[j]:
                steps.append((i + 1, j + 1, left))
            if left and output.startswith(start, i):
                close = output.find(end, i)
                if close >= 0:
                    steps.append((close + len(end), j, left - 1))
            for state in steps:
                if state not in seen:
                    seen.add(state)
                    following.add(state)
        frontier = following
    return False


@SETTINGS
@given(output=outputs, cuts=st.lists(st.integers(0, 400), max_size=12))
def test_random_output_never_raises_and_loses_no_text(output, cuts):
    request = make_request()
    result, calls = run_non_streaming(output, request)
    content = result.content or ""
    assert content_after_removing_calls(output, content, len(calls))
    for name, arguments in calls:
        assert name in KNOWN
        assert isinstance(json.loads(arguments), dict)

    for chunks in (chunk_by(output, cuts), list(output) or [""]):
        stream = run_streaming(chunks, request)
        if calls and not content.strip():
            assert stream.content == ""
        else:
            assert stream.content == content
        finished = [(c["name"], c["arguments"]) for c in stream.calls if _closed(c)]
        assert finished == calls


def _closed(call: dict) -> bool:
    try:
        return isinstance(json.loads(call["arguments"]), dict)
    except ValueError:
        return False


# -- well-formed outputs from a known list of calls ------------------------------

free_text = st.text(
    alphabet=st.characters(blacklist_characters="<", blacklist_categories=["Cs"]),
    max_size=12,
)
value_text = st.text(
    alphabet=st.characters(blacklist_characters="<", blacklist_categories=["Cs"]),
    max_size=10,
) | st.sampled_from(["a < b", "<b>x</b>", "</arg_val", "<tool_cal"])
whitespace = st.sampled_from(["", "\n", " ", " \n ", "\t\n"])
search_call = st.tuples(
    st.just("search"),
    st.dictionaries(
        st.sampled_from(["query", "free", "other"]), value_text, max_size=3
    ),
)
ping_call = st.tuples(st.just("ping"), st.just({}))
segments = st.lists(st.tuples(free_text, st.one_of(search_call, ping_call)), max_size=4)


@SETTINGS
@given(
    segments=segments, tail=free_text, ws=whitespace, cuts=st.lists(st.integers(0, 400))
)
def test_rendered_calls_parse_back_exactly(segments, tail, ws, cuts):
    output = ""
    expected_calls = []
    expected_content = ""
    for text, (name, arguments) in segments:
        output += text + "<tool_call>" + name + ws
        for key, value in arguments.items():
            output += f"<arg_key>{key}</arg_key>{ws}<arg_value>{value}</arg_value>{ws}"
        output += "</tool_call>"
        expected_content += text
        # search's parameters are string-typed or undeclared: values stay strings.
        expected_calls.append((name, json.dumps(arguments, ensure_ascii=False)))
    output += tail
    expected_content += tail

    request = make_request()
    result, calls = run_non_streaming(output, request)
    assert calls == expected_calls
    assert (result.content or "") == expected_content
    stream = run_streaming(chunk_by(output, cuts), request)
    assert [(c["name"], c["arguments"]) for c in stream.calls] == expected_calls
    if expected_calls and not expected_content.strip():
        assert stream.content == ""
    else:
        assert stream.content == expected_content


# -- the scanner on its own ------------------------------------------------------

SCANNER_SCHEMAS = {
    "get_weather": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "ping": {},
}
whole_calls = st.sampled_from(
    [
        "<tool_call>ping</tool_call>",
        "<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>Oslo</arg_value>",
        "<arg_key>days</arg_key> <arg_value> 4 </arg_value>\n</tool_call>",
        "<tool_call> get_weather <arg_key>city</arg_key><arg_value>a < b",
    ]
)
scanner_outputs = st.lists(st.one_of(piece, whole_calls), max_size=30).map("".join)


def scan(chunks: list[str]) -> tuple:
    """(content, started calls, ended calls, arguments by index) of a run."""
    scanner = Spark25CallScanner(SCANNER_SCHEMAS)
    events = [e for chunk in chunks for e in scanner.feed(chunk)]
    events += scanner.finish()
    assert scanner.feed("more") == [] and scanner.finish() == []
    content = "".join(e.text for e in events if isinstance(e, ContentEvent))
    started = [(e.index, e.name) for e in events if isinstance(e, CallStartEvent)]
    ended = [
        (e.index, e.name, e.arguments) for e in events if isinstance(e, CallEndEvent)
    ]
    arguments: dict[int, str] = {}
    for e in events:
        if isinstance(e, ArgumentsEvent):
            arguments[e.index] = arguments.get(e.index, "") + e.text
    return content, started, ended, arguments


@SETTINGS
@given(output=scanner_outputs, cuts=st.lists(st.integers(0, 400), max_size=12))
def test_scanner_events_do_not_depend_on_chunking(output, cuts):
    whole = scan([output])
    assert scan(chunk_by(output, cuts)) == whole
    assert scan(list(output) or [""]) == whole
    content, started, ended, arguments = whole
    assert content_after_removing_calls(output, content, len(ended))
    assert [i for i, _ in started] == list(range(len(started)))
    for index, name, call_arguments in ended:
        assert (index, name) in started
        assert arguments[index] == call_arguments
        assert isinstance(json.loads(call_arguments), dict)
