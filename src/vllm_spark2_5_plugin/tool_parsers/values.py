# SPDX-License-Identifier: Apache-2.0
"""Argument values of a ``spark25`` call: type lookup, conversion, JSON writer.

Pure Python (no vLLM). A value is converted by the JSON-schema type the
request declares for its parameter; string-typed and undeclared values stay
the raw text, and so does any value that cannot be converted exactly. Nothing
here raises on model output. :class:`ArgumentsWriter` is the only place where
arguments JSON is written, so streamed fragments and the final string cannot
differ. The rules are described in ``docs/tool_parser.md``.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from typing import Any

from vllm_spark2_5_plugin.tool_parsers import refs

# Order in which the types of a union are tried; "string" is the fallback.
_TYPE_PRIORITY = ("null", "integer", "number", "boolean", "object", "array")
_KNOWN_TYPES = frozenset({*_TYPE_PRIORITY, "string"})
_SCALARS = frozenset({"null", "integer", "number", "boolean"})
# ASCII digits only ("\d" would take any Unicode digit, which JSON does not).
_INTEGER_RE = re.compile(r"-?[0-9]+")
_NUMBER_RE = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


def declared_types(schema: Any, root: Any = None) -> frozenset[str]:
    """JSON-schema types a parameter schema allows (empty: nothing declared).

    Reads ``type`` (a name or a list of names) and, recursively, the branches
    of ``anyOf`` / ``oneOf`` (the value is any of them). A local ``$ref`` into
    ``root`` (the tool's parameters schema; by default ``schema`` itself) and
    the branches of ``allOf`` also hold (the types they declare are
    intersected). A ``$ref`` that is not local, points to nothing or loops back
    declares nothing. Unknown type names are ignored.
    """
    root = schema if root is None else root
    by_ref: dict[str, frozenset[str]] = {}

    def types_of(node: Any, depth: int) -> frozenset[str]:
        if not isinstance(node, dict) or depth >= refs.MAX_DEPTH:
            return frozenset()
        found: set[str] = set()
        kind = node.get("type")
        if isinstance(kind, str):
            found.add(kind)
        elif isinstance(kind, list):
            found.update(k for k in kind if isinstance(k, str))
        for branch_key in ("anyOf", "oneOf"):
            for branch in _branches(node, branch_key):
                found |= types_of(branch, depth + 1)
        parts = [frozenset(found & _KNOWN_TYPES)]
        ref = node.get("$ref")
        if refs.is_local(ref):
            if ref not in by_ref:
                by_ref[ref] = frozenset()  # meanwhile: a loop declares nothing
                with contextlib.suppress(KeyError):  # points to nothing: nothing
                    by_ref[ref] = types_of(refs.pointed(ref, root), depth + 1)
            parts.append(by_ref[ref])
        parts += [types_of(branch, depth + 1) for branch in _branches(node, "allOf")]
        declared = [p for p in parts if p]
        if len(declared) < 2:
            return declared[0] if declared else frozenset()
        return frozenset.intersection(*map(refs.widen, declared))

    return types_of(schema, 0)


def _branches(schema: dict[str, Any], key: str) -> list[Any]:
    branches = schema.get(key)
    return branches if isinstance(branches, list) else []


def is_plain_string(schema: Any, root: Any = None) -> bool:
    """True when every value of this parameter stays a string (streamable)."""
    return not (declared_types(schema, root) - {"string"})


def _reject_constant(name: str) -> Any:
    # NaN / Infinity are not JSON; refusing them keeps arguments valid JSON.
    raise ValueError(name)


def _read_float(text: str) -> float:
    """A JSON number with a fraction or exponent, as the nearest double.

    Raises ValueError when the number does not fit a double: it would become
    infinity, or (not being zero) 0.0.
    """
    number = float(text)
    mantissa = text.lower().partition("e")[0]
    if not math.isfinite(number) or (number == 0 and mantissa.strip("-0.")):
        raise ValueError(text)
    return number


def _parse_as(kind: str, text: str) -> tuple[bool, Any]:
    """Try to read ``text`` (already stripped) as JSON-schema type ``kind``.

    May raise ValueError or RecursionError (Python's int-string limit, nesting
    too deep for ``json``); :func:`_convert` treats them as "does not fit".
    """
    if kind == "null":
        return (text == "null", None)
    if kind == "boolean":
        lowered = text.lower()
        if lowered in ("true", "false"):
            return (True, lowered == "true")
        return (False, None)
    if kind in ("integer", "number") and _INTEGER_RE.fullmatch(text):
        return (True, int(text))
    if kind == "number" and _NUMBER_RE.fullmatch(text):
        return (True, _read_float(text))
    if kind not in ("object", "array"):
        return (False, None)
    value = json.loads(text, parse_constant=_reject_constant, parse_float=_read_float)
    expected = dict if kind == "object" else list
    return (isinstance(value, expected), value)


def _string_json(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _value_json(value: Any) -> str:
    """JSON text of a converted value; ValueError if not valid UTF-8 JSON."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    text.encode("utf-8")  # a lone surrogate (from a "\ud800" escape) fails here
    return text


def _convert(raw: str, schema: Any, root: Any = None) -> tuple[Any, str]:
    """``(value, its JSON text)`` for the raw text of one ``<arg_value>``."""
    declared = declared_types(schema, root)
    types = declared - {"string"}
    # With a string alternative, a scalar converts only from the spelling the
    # chat template writes for it: "00501", "TRUE" or "1e3" stay the strings
    # they may well be (converted, they could not be written back).
    spelled_only = "string" in declared
    text = raw.strip()
    for kind in _TYPE_PRIORITY:
        if kind in types:
            try:
                ok, value = _parse_as(kind, text)
                if not ok:
                    continue
                written = _value_json(value)
                if spelled_only and kind in _SCALARS and written != text:
                    continue
                return value, written
            except (ValueError, RecursionError):
                pass  # does not fit this type exactly
    return raw, _string_json(raw)


def convert_value(raw: str, schema: Any, root: Any = None) -> Any:
    """Convert the raw text of ``<arg_value>`` by the parameter's schema
    (its local ``$ref`` point into ``root``, by default ``schema`` itself).

    String-typed and undeclared parameters keep the raw text (not stripped).
    Otherwise the stripped text is tried against each declared type in the
    order null, integer, number, boolean, object, array; the first that fits
    exactly wins. Where ``string`` is declared too, a null, boolean or number
    fits only when the text is its JSON spelling (``501``, not ``00501``). A
    value that fits none stays the raw string. Never raises.
    """
    return _convert(raw, schema, root)[0]


class ArgumentsWriter:
    """Writes the arguments JSON of one call, fragment by fragment.

    Each method returns the next fragment; the fragments of a call, in order,
    concatenate to one JSON object. A string value is written in pieces
    (escaping is per character, so the escapes of consecutive pieces
    concatenate to the escape of the whole value); a typed value is written
    whole. A key is written once: the scanner asks :meth:`repeats` first.
    """

    def __init__(self, properties: dict[str, Any], root: Any = None):
        self._properties = properties  # {parameter: schema} of the function
        self._root = root  # where their local $ref point (parameters schema)
        self._keys: set[str] = set()  # keys written so far

    @classmethod
    def for_tool(cls, parameters: Any) -> ArgumentsWriter:
        """The writer for a call of the tool with this parameters schema."""
        properties = (
            parameters.get("properties") if isinstance(parameters, dict) else None
        )
        return cls(properties if isinstance(properties, dict) else {}, parameters)

    def repeats(self, key: str) -> bool:
        """True when ``key`` was already written for this call."""
        return key in self._keys

    def open_pair(self, key: str) -> str:
        separator = ", " if self._keys else "{"
        self._keys.add(key)
        return f"{separator}{_string_json(key)}: "

    def value_streams(self, key: str) -> bool:
        """True when the value of ``key`` is written piece by piece."""
        return is_plain_string(self._properties.get(key), self._root)

    def open_string(self) -> str:
        return '"'

    def string_piece(self, text: str) -> str:
        return _string_json(text)[1:-1]

    def close_string(self) -> str:
        return '"'

    def typed_value(self, key: str, raw: str) -> str:
        return _convert(raw, self._properties.get(key), self._root)[1]

    def close(self) -> str:
        return "}" if self._keys else "{}"
