# SPDX-License-Identifier: Apache-2.0
"""Argument values of a ``spark25`` call: type lookup, conversion, JSON writer.

Pure Python (no vLLM). A value is converted by the JSON-schema type the
request declares for its parameter; string-typed and undeclared values stay
the raw text. :class:`ArgumentsWriter` is the only place where arguments JSON
is written, so streamed fragments and the final string cannot differ. The
rules are described in ``docs/tool_parser.md``.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# Order in which the types of a union are tried; "string" is the fallback.
_TYPE_PRIORITY = ("null", "integer", "number", "boolean", "object", "array")
_KNOWN_TYPES = frozenset({*_TYPE_PRIORITY, "string"})
_INTEGER_RE = re.compile(r"-?\d+")
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+(?:[eE][-+]?\d+)?")


def declared_types(schema: Any) -> frozenset[str]:
    """JSON-schema types a parameter schema allows (empty: nothing declared).

    Reads ``type`` (a name or a list of names) and, recursively, the branches
    of ``anyOf`` / ``oneOf``. Unknown type names are ignored.
    """
    if not isinstance(schema, dict):
        return frozenset()
    found: set[str] = set()
    kind = schema.get("type")
    if isinstance(kind, str):
        found.add(kind)
    elif isinstance(kind, list):
        found.update(k for k in kind if isinstance(k, str))
    for branch_key in ("anyOf", "oneOf"):
        branches = schema.get(branch_key)
        if isinstance(branches, list):
            for branch in branches:
                found |= declared_types(branch)
    return frozenset(found & _KNOWN_TYPES)


def is_plain_string(schema: Any) -> bool:
    """True when every value of this parameter stays a string (streamable)."""
    return not (declared_types(schema) - {"string"})


def _reject_constant(name: str) -> Any:
    # NaN / Infinity are not JSON; refusing them keeps arguments valid JSON.
    raise ValueError(name)


def _parse_as(kind: str, text: str) -> tuple[bool, Any]:
    """Try to read ``text`` (already stripped) as JSON-schema type ``kind``."""
    if kind == "null":
        return (text == "null", None)
    if kind == "boolean":
        lowered = text.lower()
        if lowered in ("true", "false"):
            return (True, lowered == "true")
        return (False, None)
    if kind in ("integer", "number") and _INTEGER_RE.fullmatch(text):
        return (True, int(text))
    if kind == "integer":
        return (False, None)
    if kind == "number":
        if _NUMBER_RE.fullmatch(text):
            number = float(text)
            if math.isfinite(number):
                return (True, number)
        return (False, None)
    # object / array: JSON text of that shape.
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return (False, None)
    expected = dict if kind == "object" else list
    return (isinstance(value, expected), value)


def convert_value(raw: str, schema: Any) -> Any:
    """Convert the raw text of ``<arg_value>`` by the parameter's schema.

    String-typed and undeclared parameters keep the raw text (not stripped).
    Otherwise the stripped text is tried against each declared type in the
    order null, integer, number, boolean, object, array; the first that fits
    wins. A value that fits none stays the raw string. Never raises.
    """
    types = declared_types(schema)
    if not (types - {"string"}):
        return raw
    text = raw.strip()
    for kind in _TYPE_PRIORITY:
        if kind in types:
            ok, value = _parse_as(kind, text)
            if ok:
                return value
    return raw


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


class ArgumentsWriter:
    """Writes the arguments JSON of one call, fragment by fragment.

    Each method returns the next fragment; the fragments of a call, in order,
    concatenate to one JSON object. A string value is written in pieces
    (escaping is per character, so the escapes of consecutive pieces
    concatenate to the escape of the whole value); a typed value is written
    whole.
    """

    def __init__(self, properties: dict[str, Any]):
        self._properties = properties  # {parameter: schema} of the function
        self._pairs = 0

    def open_pair(self, key: str) -> str:
        separator = "{" if self._pairs == 0 else ", "
        return f"{separator}{_json(key)}: "

    def value_streams(self, key: str) -> bool:
        """True when the value of ``key`` is written piece by piece."""
        return is_plain_string(self._properties.get(key))

    def open_string(self) -> str:
        return '"'

    def string_piece(self, text: str) -> str:
        return _json(text)[1:-1]

    def close_string(self) -> str:
        self._pairs += 1
        return '"'

    def typed_value(self, key: str, raw: str) -> str:
        self._pairs += 1
        return _json(convert_value(raw, self._properties.get(key)))

    def close(self) -> str:
        return "{}" if self._pairs == 0 else "}"
