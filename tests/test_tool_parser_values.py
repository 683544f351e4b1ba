"""Value conversion of the ``spark25`` parser, and which tool names it calls.

* Conversion by the declared type (``convert_value``).
* No model output makes the parser raise. A value that cannot be converted
  exactly (an integer past Python's int-string limit, a float that overflows
  or underflows, nesting too deep for ``json``, a lone surrogate escape) stays
  the raw string, and only ASCII digits make numbers.
* A call that repeats a key is content (the table cases in
  ``test_tool_parser.py`` and the property tests cover both modes).
* Types declared through local ``$ref`` (pydantic's ``$defs``), ``allOf`` and
  ``anyOf`` convert as if written in place; a reference that loops, points to
  nothing or is not local declares nothing.
* A request with a tool whose name cannot be written in the format is refused
  by ``adjust_request`` with vLLM's 400 error, naming the tool.
* The scanner's memory is linear in the length of the tool names.
"""

from __future__ import annotations

import json
import re
import sys
import tracemalloc

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
from vllm_spark2_5_plugin.tool_parsers.values import (
    ArgumentsWriter,
    convert_value,
    declared_types,
)

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


STRING_OR_INTEGER = {"type": ["string", "integer"]}
STRING_OR_NUMBER = {"anyOf": [{"type": "string"}, {"type": "number"}]}
STRING_OR_BOOLEAN = {"type": ["boolean", "string"]}


@pytest.mark.parametrize(
    ("raw", "schema", "expected"),
    [
        # Where string is an alternative, a scalar converts only from its
        # JSON spelling (what the chat template writes for that value);
        # other spellings were converted and could not be written back.
        ("00501", STRING_OR_INTEGER, "00501"),
        ("-0", STRING_OR_INTEGER, "-0"),
        ("501", STRING_OR_INTEGER, 501),
        (" 501\n", STRING_OR_INTEGER, 501),
        ("1e3", STRING_OR_NUMBER, "1e3"),
        ("1.50", STRING_OR_NUMBER, "1.50"),
        ("1.5", STRING_OR_NUMBER, 1.5),
        ("2", STRING_OR_NUMBER, 2),
        ("TRUE", STRING_OR_BOOLEAN, "TRUE"),
        ("True", STRING_OR_BOOLEAN, "True"),
        ("true", STRING_OR_BOOLEAN, True),
        ("NULL", {"type": ["string", "null"]}, "NULL"),
        # Without a string alternative every exact reading still converts.
        ("00501", INTEGER, 501),
        ("TRUE", {"type": "boolean"}, True),
        ("1e3", {"type": ["number", "null"]}, 1000.0),
        # An object or array text converts (its spacing is not its value).
        ('{"a":1}', {"type": ["string", "object"]}, {"a": 1}),
    ],
    ids=ascii,
)
def test_string_unions_keep_spellings_that_are_not_json(raw, schema, expected):
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


def test_scanner_memory_does_not_grow_with_the_square_of_a_name():
    """A set of every prefix of every name took n**2/2 bytes (a 30,000-character
    name cost ~0.5 GB per request, built for every request with tools)."""
    name = "f" * 20_000
    tracemalloc.start()
    try:
        Spark25CallScanner({name: {}, name[:-1] + "g": {}})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024  # was about 200 MB


def _calls_and_content(scanner: Spark25CallScanner, chunks: list[str]):
    events = [e for chunk in chunks for e in scanner.feed(chunk)] + scanner.finish()
    calls = [e.name for e in events if isinstance(e, CallEndEvent)]
    return calls, "".join(e.text for e in events if isinstance(e, ContentEvent))


LONG = "f" * 20_000
SHARING = ["get", "get_weather", "get_time", "go", LONG, LONG[:-1] + "g"]


@pytest.mark.parametrize(
    ("name", "called"),
    [
        ("get", True),
        ("get_weather", True),
        ("get_time", True),
        ("go", True),
        (LONG, True),
        (LONG[:-1] + "g", True),
        ("g", False),
        ("get_", False),
        ("get_weathe", False),
        ("get_weatherr", False),
        ("get_timeget", False),
        ("gox", False),
        (LONG[:-1], False),
        (LONG + "f", False),
        (LONG[:-1] + "h", False),
        ("get weather", False),
        ("get<weather", False),
    ],
    ids=lambda v: ascii(v)[:14] + (f"..{len(v)}" if len(str(v)) > 14 else ""),
)
@pytest.mark.parametrize("size", [1, 7, None], ids=["chars_1", "chars_7", "whole"])
def test_names_sharing_prefixes_are_read_exactly(name, called, size):
    """Only a whole tool name is called, never a prefix or an extension of one,
    however the text is cut (the scanner reads names character by character)."""
    output = f"a <tool_call> {name} \n<arg_key>k</arg_key><arg_value>v</arg_value>"
    output += "</tool_call> b"
    scanner = Spark25CallScanner({n: {} for n in SHARING})
    calls, content = _calls_and_content(
        scanner, [output] if size is None else split_every(output, size)
    )
    assert calls == ([name] if called else [])
    assert content == ("a  b" if called else output)


# -- types declared through $ref / allOf / anyOf ---------------------------------

OPTS = {
    "type": "object",
    "properties": {"unit": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["unit", "n"],
}
# A pydantic model's schema: models under $defs (or "definitions"), pointed to.
PYDANTIC = {
    "$defs": {"Opts": OPTS, "Tags": {"type": "array", "items": {"type": "string"}}},
    "definitions": {"Count": {"type": "integer"}},
    "type": "object",
    "properties": {
        "opts": {"$ref": "#/$defs/Opts"},
        "maybe": {"anyOf": [{"$ref": "#/$defs/Opts"}, {"type": "null"}]},
        "all": {"allOf": [{"$ref": "#/$defs/Opts"}], "description": "x"},
        "described": {"$ref": "#/$defs/Opts", "description": "siblings too"},
        "tags": {"$ref": "#/$defs/Tags"},
        "count": {"$ref": "#/definitions/Count"},
        "both": {"allOf": [{"type": "number"}, {"$ref": "#/definitions/Count"}]},
        "text": {"$ref": "#/properties/label"},
        "label": {"type": "string"},
    },
}
OPTS_TEXT = '{"unit": "c", "n": 2}'


def _function_with(name: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def _book_call(pairs: dict[str, str]) -> str:
    body = "".join(
        f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in pairs.items()
    )
    return f"ok <tool_call>book\n{body}</tool_call>"


VALUES = {  # parameter: (value text, argument)
    "opts": (OPTS_TEXT, {"unit": "c", "n": 2}),
    "maybe": (OPTS_TEXT, {"unit": "c", "n": 2}),
    "all": (OPTS_TEXT, {"unit": "c", "n": 2}),
    "described": (OPTS_TEXT, {"unit": "c", "n": 2}),
    "tags": ('["a", "b"]', ["a", "b"]),
    "count": (" 3 ", 3),
    "both": ("4", 4),
    "text": ("12", "12"),
}


@pytest.mark.parametrize("maybe", [OPTS_TEXT, "null"])
def test_values_declared_through_ref_allof_and_anyof_convert_in_both_modes(maybe):
    """An object parameter declared the pydantic way comes back as an object
    (it came back as its JSON text, a string)."""
    request = make_request(tools=[*TOOLS, _function_with("book", PYDANTIC)])
    values = {key: text for key, (text, _) in VALUES.items()} | {"maybe": maybe}
    expected = {key: value for key, (_, value) in VALUES.items()}
    expected["maybe"] = json.loads(maybe)
    output = _book_call(values)
    result, calls = run_non_streaming(output, request)
    assert result.content == "ok "
    assert [(name, json.loads(arguments)) for name, arguments in calls] == [
        ("book", expected)
    ]
    for size in (1, 5):
        stream = run_streaming(split_every(output, size), request)
        assert [(c["name"], c["arguments"]) for c in stream.calls] == calls


LOOPS = {
    "$defs": {
        "Self": {"$ref": "#/$defs/Self"},
        "A": {"allOf": [{"$ref": "#/$defs/B"}]},
        "B": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "integer"}]},
        "Tree": {
            "type": "object",
            "properties": {
                "kids": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}
            },
        },
    }
}


@pytest.mark.parametrize(
    ("schema", "types"),
    [
        ({"$ref": "#/$defs/Self"}, set()),  # a loop declares nothing
        ({"$ref": "#/$defs/A"}, {"integer"}),
        ({"$ref": "#/$defs/Tree"}, {"object"}),
        ({"$ref": "#/$defs/Nope"}, set()),  # points to nothing
        ({"$ref": "https://example.com/opts.json"}, set()),  # never fetched
        ({"$ref": "opts.json#/$defs/Opts"}, set()),
        ({"allOf": [{"type": ["integer", "string"]}, {"type": "number"}]}, {"integer"}),
        ({"allOf": [{"type": "integer"}, {"type": "string"}]}, set()),
        ({"type": "object", "allOf": [{"required": ["a"]}]}, {"object"}),
    ],
)
def test_declared_types_follow_local_refs_and_never_loop(schema, types):
    assert declared_types(schema, LOOPS) == types


def test_a_standalone_schema_is_its_own_root():
    schema = {"$defs": {"O": {"type": "object"}}, "$ref": "#/$defs/O"}
    assert convert_value('{"a": 1}', schema) == {"a": 1}
    assert ArgumentsWriter({"o": schema}).typed_value("o", "[1]") == '"[1]"'
