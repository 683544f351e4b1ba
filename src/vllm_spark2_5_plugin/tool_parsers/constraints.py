# SPDX-License-Identifier: Apache-2.0
"""Decoding constraints for ``tool_choice`` and ``strict`` tools (xgrammar).

Builds the xgrammar structural tag that makes the model write calls in the
``spark25`` format, laid out as the chat template writes them::

    <tool_call>NAME
    <arg_key>KEY</arg_key><arg_value>VALUE</arg_value>
    </tool_call>

* ``"required"``: nothing but one or more calls (separated by a newline) of the
  offered tools; one call when ``parallel_tool_calls`` is false.
* ``"forced"`` (a named function): exactly one call of that function.
* ``"auto"``: free text, but every ``<tool_call>`` the model opens must become
  a valid call (used only when a tool is ``strict``).

Arguments of each call: only the declared keys, each at most once and in
declared order, every ``required`` key present. A ``strict`` tool's values
follow the whole property schema (``enum``, ``const``, bounds, nested
objects, ...), a non-strict tool's values only the property's ``type``.
String values are free text without the format's tags and the turn-ending
tokens. The rules are described in ``docs/tool_parser.md`` ("tool_choice").

Imports xgrammar's format models only (no vLLM).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from xgrammar.structural_tag import (
    AnyTextFormat,
    ConstStringFormat,
    JSONSchemaFormat,
    OptionalFormat,
    OrFormat,
    SequenceFormat,
    StarFormat,
    StructuralTag,
    TagFormat,
    TagsWithSeparatorFormat,
    TriggeredTagsFormat,
)

from vllm_spark2_5_plugin import names
from vllm_spark2_5_plugin.tool_parsers import refs

Mode = Literal["auto", "required", "forced"]

#: Text that no key or value may hold: a tag would end or break the call, a
#: turn-ending token would end the turn (the parser cuts the output there).
EXCLUDED = (*names.STRUCTURAL_TAGS, *names.TURN_END_TOKENS)
#: Between two calls (the chat template writes calls one per line).
CALL_SEPARATOR = "\n"
_JSON_TYPES = ("null", "integer", "number", "boolean", "object", "array")
# Schema keywords that make the top level more than "an object with these
# properties"; such schemas get free argument pairs.
_COMPLEX_TOP_LEVEL = ("$ref", "allOf", "anyOf", "oneOf", "not", "if")


@dataclass(frozen=True)
class ToolSpec:
    """What the grammar needs to know about one function tool."""

    name: str
    parameters: Any
    strict: bool


def _text() -> AnyTextFormat:
    return AnyTextFormat(excludes=list(EXCLUDED))


def _writable(text: str) -> bool:
    return not any(tag in text for tag in EXCLUDED)


def render_value(value: Any) -> str:
    """A value as the chat template writes it: strings verbatim, else JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _one_of(formats: list[Any]) -> Any:
    return formats[0] if len(formats) == 1 else OrFormat(elements=formats)


def _types(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)]
    return []


def _json_value(schema: dict[str, Any]) -> JSONSchemaFormat:
    # Strings inside JSON values (nested objects and arrays) may not hold a
    # tag either: the parser would end the value there.
    return JSONSchemaFormat(json_schema=schema, excludes=list(EXCLUDED))


def value_format(
    schema: Any,
    strict: bool,
    root: Any = None,
    localizer: refs.Localizer | None = None,
) -> Any:
    """The format of one ``<arg_value>`` body for a property ``schema``.

    The parser converts a value by the declared ``type`` (``values.py``):
    string-typed and untyped values are the raw text, other types are JSON
    text. So a string is free text (no tags), another type is JSON of that
    type; with ``strict`` the JSON must also match the rest of the schema, and
    ``enum`` / ``const`` / ``anyOf`` / ``oneOf`` are followed.

    Local ``$ref`` point into ``root`` (the tool's parameters schema; by
    default ``schema``): the value's top-level ``$ref`` and ``allOf`` are
    merged in first (:func:`.refs.fold`), and a strict value's JSON schema
    carries the definitions it uses (``localizer``, one per tool). Raises
    ValueError for a strict value's local ``$ref`` that points to nothing or
    loops (:meth:`.refs.Localizer.check`).
    """
    if not isinstance(schema, dict):
        return _text()
    root = schema if root is None else root
    localizer = refs.Localizer(root) if localizer is None else localizer
    folded = refs.fold(schema, root)
    if strict and folded is not schema:
        localizer.copied(folded)  # each value gets its own copy
    schema = folded
    if strict:
        if refs.is_local(schema.get("$ref")):
            localizer.check(schema)  # a $ref that did not fold: missing, a loop
        if "const" in schema or "enum" in schema:
            choices = [schema["const"]] if "const" in schema else schema["enum"]
            if isinstance(choices, list):
                texts = [render_value(c) for c in choices]
                consts = [ConstStringFormat(value=t) for t in texts if _writable(t)]
                if consts:
                    return _one_of(consts)
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list) and branches and "type" not in schema:
                return _one_of(
                    [value_format(b, strict, root, localizer) for b in branches]
                )
    types = _types(schema)
    if not types:
        return _text()
    others = [t for t in types if t in _JSON_TYPES]
    formats: list[Any] = []
    if others:
        if strict:
            whole = {**schema, "type": _single(others)}
            formats.append(_json_value(localizer.localize(whole)))
        else:
            formats.append(_json_value({"type": _single(others)}))
    if "string" in types or not others:
        formats.append(_text())
    return _one_of(formats)


def _single(types: list[str]) -> str | list[str]:
    return types[0] if len(types) == 1 else types


def _pair(key: str, value: Any) -> SequenceFormat:
    return SequenceFormat(
        elements=[
            ConstStringFormat(
                value=f"{names.ARG_KEY_START}{key}{names.ARG_KEY_END}{names.ARG_VALUE_START}"
            ),
            value,
            ConstStringFormat(value=f"{names.ARG_VALUE_END}\n"),
        ]
    )


def _free_pairs() -> StarFormat:
    """Any pairs: keys and values are free text (no tags, no newline in keys)."""
    key = AnyTextFormat(excludes=[*EXCLUDED, "\n"])
    return StarFormat(
        content=SequenceFormat(
            elements=[
                ConstStringFormat(value=names.ARG_KEY_START),
                key,
                ConstStringFormat(value=names.ARG_KEY_END + names.ARG_VALUE_START),
                _text(),
                ConstStringFormat(value=f"{names.ARG_VALUE_END}\n"),
            ]
        )
    )


def _plain_object(parameters: Any) -> bool:
    return isinstance(parameters, dict) and not any(
        key in parameters for key in _COMPLEX_TOP_LEVEL
    )


def declared_properties(parameters: Any) -> dict[str, Any] | None:
    """``properties`` of a plain object schema, else None (free arguments)."""
    if not _plain_object(parameters):
        return None
    properties = parameters.get("properties")
    if properties is None:
        # {"type": "object"} alone: no declared keys. Strict means exactly
        # those (none); otherwise any keys.
        return {} if parameters.get("additionalProperties") is False else None
    return properties if isinstance(properties, dict) else None


def _writable_key(key: Any) -> bool:
    """A key the parser reads back as written: text without a tag or a
    turn-ending token, and no surrounding whitespace (which it strips)."""
    return isinstance(key, str) and bool(key) and key == key.strip() and _writable(key)


def _unwritable_required(tool: ToolSpec, key: str) -> ValueError:
    return ValueError(
        f"tool {tool.name!r}: the required property {key!r} cannot be "
        "written in the spark25 format (a key holds no tag or "
        "turn-ending token and no surrounding whitespace)"
    )


def arguments_format(tool: ToolSpec) -> Any:
    """The arguments of one call, ``<arg_key>K</arg_key><arg_value>V</arg_value>\\n``
    for each pair.

    Declared keys only, each at most once, in declared order; the schema's
    ``required`` keys are not optional; one that ``properties`` does not
    declare follows them with a free value. A key that cannot be written (it
    holds a tag or a turn-ending token, or has surrounding whitespace, which
    the parser strips) is left out. Without declared properties (no
    ``properties``, or a top level with ``$ref`` / ``allOf`` / ``anyOf`` /
    ``oneOf`` / ``not`` / ``if``) the pairs are free.
    """
    properties = declared_properties(tool.parameters)
    if properties is None and tool.strict and _plain_object(tool.parameters):
        properties = {}  # strict {"type": "object"}: no keys declared, none allowed
    if properties is None:
        return _free_pairs()
    required = (
        tool.parameters.get("required") if isinstance(tool.parameters, dict) else None
    )
    required_keys: set[str] = set()
    if isinstance(required, list):
        for key in required:
            if not isinstance(key, str):
                raise ValueError(
                    f"tool {tool.name!r}: parameters.required must list property "
                    f"names (strings), got {key!r}"
                )
        required_keys = set(required)
    elements: list[Any] = []
    localizer = refs.Localizer(tool.parameters)
    for key, schema in properties.items():
        if not _writable_key(key):
            if key in required_keys:
                raise _unwritable_required(tool, key)
            continue
        try:
            value = value_format(schema, tool.strict, tool.parameters, localizer)
        except ValueError as exc:
            raise ValueError(f"tool {tool.name!r}, parameter {key!r}: {exc}") from None
        pair = _pair(key, value)
        elements.append(pair if key in required_keys else OptionalFormat(content=pair))
    # Required but not declared: JSON Schema lets such a key hold any value
    # (unless additionalProperties is false, when no call can be valid).
    for key in dict.fromkeys(required if isinstance(required, list) else ()):
        if key in properties:
            continue
        if tool.parameters.get("additionalProperties") is False:
            raise ValueError(
                f"tool {tool.name!r}: parameters.required lists {key!r}, which "
                "properties does not declare and additionalProperties: false "
                "forbids, so no call could be valid"
            )
        if not _writable_key(key):
            raise _unwritable_required(tool, key)
        elements.append(_pair(key, value_format({}, tool.strict)))
    if not elements:
        return ConstStringFormat(value="")
    return elements[0] if len(elements) == 1 else SequenceFormat(elements=elements)


def call_tag(tool: ToolSpec) -> TagFormat:
    """One call of ``tool``: ``<tool_call>NAME\\n`` arguments ``</tool_call>``."""
    return TagFormat(
        begin=f"{names.TOOL_CALL_START}{tool.name}\n",
        content=arguments_format(tool),
        end=names.TOOL_CALL_END,
    )


def grammar_problem(tag: StructuralTag) -> str | None:
    """Why xgrammar cannot build a grammar from ``tag`` (a schema it refuses,
    such as a bound that is not a number), or ``None``."""
    import xgrammar

    try:
        xgrammar.Grammar.from_structural_tag(tag.model_dump_json())
    except Exception as exc:  # noqa: BLE001 - xgrammar's C++ checks raise RuntimeError
        # "[08:01:58] /project/cpp/json_schema_converter.cc:4944: Value must be
        # a number": the message without its time and source line.
        return re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", str(exc).strip())
    return None


def build_structural_tag(
    tools: Sequence[ToolSpec], mode: Mode, single_call: bool = False
) -> StructuralTag:
    """The structural tag for ``tools`` (the tools the model may call).

    ``"required"``: the output is one or more calls and nothing else (one
    call with ``single_call``). ``"forced"``: exactly one call (pass the one
    named tool). ``"auto"``: any text, but each ``<tool_call>`` starts a
    valid call (at most one with ``single_call``).
    """
    if not tools:
        raise ValueError("no tool to constrain calls to")
    tags = [call_tag(tool) for tool in tools]
    if mode == "auto":
        calls: Any = TriggeredTagsFormat(
            triggers=[names.TOOL_CALL_START], tags=tags, stop_after_first=single_call
        )
    else:
        calls = TagsWithSeparatorFormat(
            tags=tags,
            separator=CALL_SEPARATOR,
            at_least_one=True,
            stop_after_first=single_call or mode == "forced",
        )
    return StructuralTag(format=calls)
