"""Value conversion of the ``spark25`` parser, and which tool names it calls.

* Conversion by the declared type (``convert_value``).
* No model output makes the parser raise. A value that cannot be converted
  exactly (an integer past Python's int-string limit, a float that overflows
  or underflows, nesting too deep for ``json``, a lone surrogate escape) stays
  the raw string, and only ASCII digits make numbers.
* A call that repeats a key is content (the table cases in
  ``test_tool_parser.py`` and the property tests cover both modes).
* A request with a tool whose name cannot be written in the format is refused
  by ``adjust_request`` with vLLM's 400 error, naming the tool.
"""

from __future__ import annotations

import json
import re
import sys

import pytest
from test_tool_parser import (
    TOOLS,
    _function,
    make_parser,
    make_request,
    run_non_streaming,
    run_streaming,
    split_every,
)
from vllm.exceptions import VLLMValidationError

from vllm_spark2_5_plugin.tool_parsers.scanner import (
    CallEndEvent,
    ContentEvent,
    Spark25CallScanner,
    is_callable_name,
)
from vllm_spark2_5_plugin.tool_parsers.values import ArgumentsWriter, convert_value

INTEGER = {"type": "integer"}
NUMBER = {"type": "number"}
ARRAY = {"type": "array"}
OBJECT = {"type": "object"}
LIMIT = sys.get_int_max_str_digits()
needs_int_limit = pytest.mark.skipif(LIMIT == 0, reason="no int-string limit set")
LONG = "9" * (LIMIT + 1)
DEEP_ARRAY = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a": ' * 100_000 + "1" + "}" * 100_000


@pytest.mark.parametrize(
    ("raw", "schema", "expected"),
    [
        ("5", {"type": "integer"}, 5),
        ("5", {"type": "number"}, 5),
        ("-0.25", {"type": "number"}, -0.25),
        ("1e3", {"type": "number"}, 1000.0),
        ("nan", {"type": "number"}, "nan"),
        ("FALSE", {"type": "boolean"}, False),
        ("null", {"type": ["string", "null"]}, None),
        ("None", {"type": ["string", "null"]}, "None"),
        ("12", {"type": ["string", "integer"]}, 12),
        ("12", {"oneOf": [{"type": "string"}, {"type": "number"}]}, 12),
        ('{"a": NaN}', {"type": "object"}, '{"a": NaN}'),
        ("[" * 5000, {"type": "array"}, "[" * 5000),
        (" text ", {"type": "string"}, " text "),
        (" text ", None, " text "),
        ("7", {"enum": [1, 2]}, "7"),  # no "type": left as the string
    ],
)
def test_convert_value(raw, schema, expected):
    value = convert_value(raw, schema)
    assert value == expected and type(value) is type(expected)


@needs_int_limit
@pytest.mark.parametrize(
    ("raw", "schema"),
    [
        (LONG, INTEGER),
        (f" -{LONG} ", INTEGER),
        (LONG, NUMBER),
        (f"-{LONG}", NUMBER),
        (LONG + ".5", NUMBER),
        (LONG, {"type": ["integer", "string"]}),
        (LONG, {"anyOf": [{"type": "null"}, {"type": "number"}]}),
        (f"[{LONG}]", ARRAY),
        (f'{{"n": {LONG}}}', OBJECT),
    ],
)
def test_long_numbers_stay_strings(raw, schema):
    assert convert_value(raw, schema) == raw


@pytest.mark.parametrize(
    ("raw", "schema"),
    [
        ("\u0663\u0664", INTEGER),  # Arabic-Indic digits
        ("\u0663\u0664", NUMBER),
        ("-\u0661.\u0665", NUMBER),
        ("\uff11\uff12", INTEGER),  # fullwidth digits
        ("\u0661e3", NUMBER),
        ("[\u0663]", ARRAY),
        (".5", NUMBER),  # not JSON
        ("-.5e3", NUMBER),
        ("5.", NUMBER),
        ("+5", NUMBER),
        ("007.5", NUMBER),
        ("1_000", INTEGER),
        ("3.0", INTEGER),
        ("1e999", NUMBER),  # overflows a double
        ("-1e400", NUMBER),
        ("1e-400", NUMBER),  # nonzero, underflows to 0
        ("[1e999]", ARRAY),
        ('{"a": [-1e400]}', OBJECT),
        ("[1.5e-999]", ARRAY),
        ('["\\ud800"]', ARRAY),  # a lone surrogate cannot be written as UTF-8
        ('{"s": "x\\udfff"}', OBJECT),
        (DEEP_ARRAY, ARRAY),
        (DEEP_OBJECT, OBJECT),
        (DEEP_ARRAY, {"type": ["object", "array", "string"]}),
    ],
)
def test_values_that_cannot_be_converted_exactly_stay_strings(raw, schema):
    assert convert_value(raw, schema) == raw


@pytest.mark.parametrize(
    ("raw", "schema", "expected"),
    [
        ("007", INTEGER, 7),
        ("-0", INTEGER, 0),
        ("007", NUMBER, 7),
        ("-1.5E+2", NUMBER, -150.0),
        ("0e-400", NUMBER, 0.0),
        ("-0.000e-999", NUMBER, -0.0),
        ("5e-324", NUMBER, 5e-324),
        ("1.7976931348623157e308", NUMBER, 1.7976931348623157e308),
        ("9" * 300, NUMBER, int("9" * 300)),
        ('["\\ud83c\\udf27", 1e-5]', ARRAY, ["\U0001f327", 1e-05]),
        ("[" * 50 + "]" * 50, ARRAY, json.loads("[" * 50 + "]" * 50)),
    ],
)
def test_json_numbers_and_values_convert(raw, schema, expected):
    value = convert_value(raw, schema)
    assert value == expected and type(value) is type(expected)


@needs_int_limit
def test_longest_integer_python_can_read_converts():
    digits = "9" * LIMIT
    assert convert_value(digits, INTEGER) == int(digits)


def _typed_call(pairs: list[tuple[str, str]]) -> str:
    body = "".join(
        f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>\n" for k, v in pairs
    )
    return f"ok <tool_call>typed\n{body}</tool_call>"


def _both_modes(output: str, sizes: tuple[int, ...]) -> list[tuple[str, str]]:
    """Run ``output`` in both modes (deltas of ``sizes``); the calls must agree."""
    request = make_request()
    result, calls = run_non_streaming(output, request)
    assert result.content == "ok "
    for size in (*sizes, len(output)):
        stream = run_streaming(split_every(output, size), request)
        assert stream.content == "ok "
        assert [(c["name"], c["arguments"]) for c in stream.calls] == calls
    return calls


@needs_int_limit
def test_long_numbers_never_raise_in_either_mode():
    output = _typed_call(
        [("count", LONG), ("ratio", f"-{LONG}"), ("maybe", f" {LONG} "), ("flag", "1")]
    )
    assert _both_modes(output, (1, 7)) == [
        (
            "typed",
            f'{{"count": "{LONG}", "ratio": "-{LONG}", "maybe": " {LONG} ", '
            '"flag": "1"}',
        )
    ]


def test_deep_nesting_never_raises_in_either_mode():
    output = _typed_call([("tags", DEEP_ARRAY), ("opts", DEEP_OBJECT)])
    arguments = json.dumps({"tags": DEEP_ARRAY, "opts": DEEP_OBJECT})
    assert _both_modes(output, (997,)) == [("typed", arguments)]


def _at_stack_depth(frames: int, fn):
    return fn() if frames == 0 else _at_stack_depth(frames - 1, fn)


@pytest.mark.parametrize("frames", [0, 5, 40, 200])
def test_nesting_near_the_recursion_limit_never_raises(frames):
    """Read and written at whatever stack depth: the value or the raw string."""
    writer = ArgumentsWriter({"tags": ARRAY})
    limit = sys.getrecursionlimit()
    for depth in range(limit - 260, limit + 20, 3):
        raw = "[" * depth + "]" * depth
        text = _at_stack_depth(frames, lambda r=raw: writer.typed_value("tags", r))
        assert text.encode("utf-8")
        assert text == json.dumps(raw) or text == raw


# -- tool names -------------------------------------------------------------------

UNCALLABLE = ["get weather", "", "ping\n", " ping", "tab\tname", "a<b", "x\u00a0y"]
CALLABLE = ["a>b", "über", "x/y", "名前", "get-weather.v2", "$", "a\u200bb", "_"]


@pytest.mark.parametrize("name", UNCALLABLE, ids=ascii)
def test_uncallable_tool_names_are_refused_by_name(name):
    request = make_request(tools=[*TOOLS, _function(name), _function("ok")])
    with pytest.raises(VLLMValidationError, match=re.escape(repr(name))) as info:
        make_parser(request).adjust_request(request)
    assert "'ok'" not in str(info.value)
    assert not is_callable_name(name)


def test_all_uncallable_tool_names_are_named():
    request = make_request(tools=[_function("a b"), _function("c\nd")])
    with pytest.raises(VLLMValidationError) as info:
        make_parser(request).adjust_request(request)
    assert "'a b'" in str(info.value) and "'c\\nd'" in str(info.value)


def test_uncallable_tool_names_do_not_matter_when_calls_are_disabled():
    request = make_request(tools=[_function("a b")], tool_choice="none")
    assert make_parser(request).adjust_request(request) is request


@pytest.mark.parametrize("name", CALLABLE, ids=ascii)
def test_callable_tool_names_are_accepted_and_called(name):
    request = make_request(tools=[*TOOLS, _function(name)])
    assert make_parser(request).adjust_request(request) is request
    assert is_callable_name(name)
    output = f"<tool_call>{name}</tool_call><tool_call> {name}\n</tool_call>"
    result, calls = run_non_streaming(output, request)
    assert (result.content, calls) == (None, [(name, "{}"), (name, "{}")])


@pytest.mark.parametrize("name", ["a<b", "a b", "get\nweather"], ids=ascii)
def test_scanner_never_calls_an_uncallable_name(name):
    scanner = Spark25CallScanner({name: {}})
    output = f"<tool_call>{name}</tool_call>"
    events = scanner.feed(output) + scanner.finish()
    assert not any(isinstance(e, CallEndEvent) for e in events)
    assert "".join(e.text for e in events if isinstance(e, ContentEvent)) == output
