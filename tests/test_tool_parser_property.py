"""Property tests (hypothesis) of the ``spark25`` parser on random outputs.

* Random and malformed outputs, built from tags, tag fragments, names, keys,
  values and free text: the parser never raises, no text is lost, and
  streaming under random chunkings agrees with non-streaming.
* Random well-formed outputs rendered from a known list of calls: the parser
  returns exactly those calls and the text between them.
* Random well-formed calls whose keys may repeat: a call that repeats a key
  is content in both modes, the others parse back exactly.
* Random tool names: every callable name is called, under any chunking; every
  other name is refused by ``adjust_request``.
* The scanner alone (no vLLM objects): its events do not depend on how the
  output is cut into pieces.

No call's arguments ever hold a key twice.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_tool_parser import (
    _function,
    make_parser,
    make_request,
    run_non_streaming,
    run_streaming,
)
from vllm.exceptions import VLLMValidationError

from vllm_spark2_5_plugin.names import STRUCTURAL_TAGS
from vllm_spark2_5_plugin.tool_parsers.scanner import (
    ArgumentsEvent,
    CallEndEvent,
    CallStartEvent,
    ContentEvent,
    Spark25CallScanner,
    is_callable_name,
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


def assert_arguments_object(arguments: str) -> None:
    """``arguments`` is a JSON object that holds no key twice."""
    pairs = json.loads(arguments, object_pairs_hook=lambda p: p)
    assert isinstance(pairs, list)
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), arguments


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


def assert_streams_agree(output, cuts, request, content, calls) -> None:
    """Streamed in the given chunks and one character at a time, ``output``
    gives the non-streaming ``content`` (empty when only whitespace sits
    between calls) and exactly its finished ``calls``."""
    for chunks in (chunk_by(output, cuts), list(output) or [""]):
        stream = run_streaming(chunks, request)
        if calls and not content.strip():
            assert stream.content == ""
        else:
            assert stream.content == content
        finished = [(c["name"], c["arguments"]) for c in stream.calls if _closed(c)]
        assert finished == calls


@SETTINGS
@given(output=outputs, cuts=st.lists(st.integers(0, 400), max_size=12))
def test_random_output_never_raises_and_loses_no_text(output, cuts):
    request = make_request()
    result, calls = run_non_streaming(output, request)
    content = result.content or ""
    assert content_after_removing_calls(output, content, len(calls))
    for name, arguments in calls:
        assert name in KNOWN
        assert_arguments_object(arguments)

    assert_streams_agree(output, cuts, request, content, calls)


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
    assert_both_modes(output, cuts, expected_content, expected_calls)


def assert_both_modes(output, cuts, content, calls, abandoned=()) -> None:
    """``output`` gives ``content`` and ``calls`` in both modes.

    Streamed, the calls that never close are exactly ``abandoned`` (names).
    """
    request = make_request()
    result, got = run_non_streaming(output, request)
    assert got == calls
    assert (result.content or "") == content
    stream = run_streaming(chunk_by(output, cuts), request)
    finished = [(c["name"], c["arguments"]) for c in stream.calls if _closed(c)]
    assert finished == calls
    assert [c["name"] for c in stream.calls if not _closed(c)] == list(abandoned)
    if calls and not content.strip():
        assert stream.content == ""
    else:
        assert stream.content == content


keyed_call = st.tuples(
    st.just("search"),
    st.lists(st.tuples(st.sampled_from(["query", "free"]), value_text), max_size=3),
)


@SETTINGS
@given(
    segments=st.lists(st.tuples(free_text, keyed_call), max_size=4),
    ws=whitespace,
    cuts=st.lists(st.integers(0, 400)),
)
def test_calls_that_repeat_a_key_are_content_in_both_modes(segments, ws, cuts):
    output = expected_content = ""
    expected_calls, repeated = [], []
    for text, (name, pairs) in segments:
        block = f"<tool_call>{name}{ws}"
        for key, value in pairs:
            block += f"<arg_key>{ws}{key}</arg_key><arg_value>{value}</arg_value>"
        block += "</tool_call>"
        output += text + block
        keys = [k for k, _ in pairs]
        if len(set(keys)) < len(keys):
            repeated.append(name)
            expected_content += text + block
        else:
            expected_content += text
            expected_calls.append((name, json.dumps(dict(pairs), ensure_ascii=False)))
    assert_both_modes(output, cuts, expected_content, expected_calls, repeated)


# -- tool names ------------------------------------------------------------------

names = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"]), max_size=8
) | st.sampled_from(["", " ", "\n", "a b", "a<b", "<", "ping\n", "ping "])


@SETTINGS
@given(
    tool_names=st.lists(names, min_size=1, max_size=4, unique=True),
    pick=st.integers(0, 3),
    lead=whitespace,
    trail=st.sampled_from(["", "\n", " \n", " "]),
    cuts=st.lists(st.integers(0, 60), max_size=6),
)
def test_callable_names_are_called_and_others_refused(
    tool_names, pick, lead, trail, cuts
):
    request = make_request(tools=[_function(n) for n in tool_names])
    uncallable = [n for n in tool_names if not is_callable_name(n)]
    if uncallable:
        with pytest.raises(VLLMValidationError) as info:
            make_parser(request).adjust_request(request)
        assert all(repr(n) in str(info.value) for n in uncallable)
    else:
        assert make_parser(request).adjust_request(request) is request

    name = tool_names[pick % len(tool_names)]
    output = f"<tool_call>{lead}{name}{trail}</tool_call>"
    callable_ = is_callable_name(name)
    assert callable_ == (bool(name) and "<" not in name and name.split() == [name])
    expected = [(name, "{}")] if callable_ else []
    assert run_non_streaming(output, request)[1] == expected
    for chunks in (chunk_by(output, cuts), list(output)):
        stream = run_streaming(chunks, request)
        assert [(c["name"], c["arguments"]) for c in stream.calls] == expected


# -- the scanner on its own ------------------------------------------------------

SCANNER_SCHEMAS = {  # name -> parameters schema
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    },
    "ping": {},
}
whole_calls = st.sampled_from(
    [
        "<tool_call>ping</tool_call>",
        "<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>Oslo</arg_value>",
        "<arg_key>days</arg_key> <arg_value> 4 </arg_value>\n</tool_call>",
        "<tool_call> get_weather <arg_key>city</arg_key><arg_value>a < b",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>A</arg_value>"
        "<arg_key> city</arg_key><arg_value>B</arg_value></tool_call>",
        "<tool_call>get_weather<arg_key>days</arg_key><arg_value>1</arg_value>\n"
        "<arg_key>days</arg_key>",
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
        assert_arguments_object(call_arguments)


# -- turn-ending tokens ------------------------------------------------------------

TURN_TOKENS = [
    "<|endoftext|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
]
turn_outputs = st.lists(
    st.one_of(
        st.sampled_from(PIECES),
        st.sampled_from(TURN_TOKENS),
        st.sampled_from([t[:k] for t in TURN_TOKENS for k in (1, 2, 4, len(t) - 1)]),
        st.text(max_size=6),
    ),
    max_size=40,
).map("".join)


@SETTINGS
@given(output=turn_outputs, cuts=st.lists(st.integers(0, 400), max_size=12))
def test_output_ends_at_the_first_turn_token_in_both_modes(output, cuts):
    """A role token or <|endoftext|> ends the turn: the result is that of the
    text before the first one, streamed (any chunking) or not."""
    found = [i for t in TURN_TOKENS if (i := output.find(t)) >= 0]
    before = output[: min(found)] if found else output
    request = make_request()
    result, calls = run_non_streaming(output, request)
    expected, expected_calls = run_non_streaming(before, request)
    assert (result.content, calls) == (expected.content, expected_calls)
    content = result.content or ""
    assert not any(t in content for t in TURN_TOKENS)
    assert_streams_agree(output, cuts, request, content, calls)
