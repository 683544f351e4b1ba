# SPDX-License-Identifier: Apache-2.0
"""Local ``$ref`` in a tool's parameters schema (pure Python, no vLLM).

Schemas written the pydantic way keep their models under ``$defs`` (or
``definitions``) and point to them with ``"$ref": "#/$defs/X"``, also inside
``allOf`` and ``anyOf``. A reference is *local* when it is a JSON pointer into
the same tool's parameters schema (``#`` or ``#/...``); only those are
followed, and nothing is ever fetched: any other ``$ref`` is left as written.

* :func:`pointed` looks a local reference up;
* :func:`fold` merges a value's top-level ``$ref`` and ``allOf`` into one
  schema, so that its ``type``, ``enum``, ``const`` and ``anyOf`` can be read;
* :class:`Localizer` makes a property's schema a document of its own for
  xgrammar, which resolves ``$ref`` against the document it is given.

Nothing here loops on a recursive schema. See ``docs/tool_parser.md``.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any
from urllib.parse import unquote

#: How deep :func:`fold` (and ``values.declared_types``) follow ``$ref`` /
#: ``allOf`` / ``anyOf`` / ``oneOf`` at the top of one value.
MAX_DEPTH = 64
#: The definitions copied into the grammar for a tool's values may take at
#: most this many times the size of its parameters schema, plus the allowance
#: (characters of JSON): each value's schema carries its own copy of the
#: definitions it uses, so without a bound a request could make the grammar
#: quadratically larger than itself.
COPY_FACTOR = 8
COPY_ALLOWANCE = 65_536

# Keywords whose annotations do not constrain a value; on a conflict while
# merging, the first wins.
_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$defs",
        "definitions",
    }
)
_INDEX = re.compile(r"0|[1-9][0-9]{0,17}")  # an index Python can read
# Keywords whose value is one schema, a list of schemas, or a map of schemas.
_SCHEMA = (
    "additionalProperties",
    "additionalItems",
    "items",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contentSchema",
)
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas", "dependencies")
# Where a schema's own constraints go on without describing a part of the
# value: a reference reached only through these makes the schema require
# itself (a loop no value can end).
_SAME_VALUE = ("allOf",)
# Schema maps that are only there to be pointed to (rewritten references never
# point into them, so a localized copy leaves them out).
_DEFINITIONS = ("$defs", "definitions")


def is_local(ref: Any) -> bool:
    """Is ``ref`` a JSON pointer into the same document (``#``, ``#/...``)?"""
    return isinstance(ref, str) and (ref == "#" or ref.startswith("#/"))


def pointed(ref: str, root: Any) -> Any:
    """What the local reference ``ref`` points to in ``root``.

    A JSON pointer (RFC 6901) in a URI fragment: tokens are percent-decoded,
    then ``~1`` is ``/`` and ``~0`` is ``~``. Raises KeyError when ``ref``
    points to nothing.
    """
    node = root
    for token in ref[2:].split("/") if ref != "#" else ():
        token = unquote(token).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif (
            isinstance(node, list)
            and _INDEX.fullmatch(token)
            and int(token) < len(node)
        ):
            node = node[int(token)]
        else:
            raise KeyError(ref)
    return node


def widen(types: frozenset[str]) -> frozenset[str]:
    """``types`` with ``integer`` where ``number`` is (every integer is one)."""
    return types | {"integer"} if "number" in types else types


def _type_set(kind: Any) -> frozenset[str] | None:
    if isinstance(kind, str):
        return frozenset({kind})
    if isinstance(kind, list) and all(isinstance(k, str) for k in kind):
        return frozenset(kind)
    return None


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One schema that means all of ``parts``, or None when they conflict.

    Keys merge when only one part has them or their values are equal;
    annotations keep the first; ``type`` takes the types common to all parts,
    ``required`` all the keys listed.
    """
    merged: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if key not in merged or merged[key] == value or key in _ANNOTATIONS:
                merged.setdefault(key, value)
            elif key == "type":
                mine, theirs = _type_set(merged[key]), _type_set(value)
                if mine is None or theirs is None:
                    return None
                common = widen(mine) & widen(theirs)
                if not common:
                    return None
                merged[key] = sorted(common) if len(common) > 1 else next(iter(common))
            elif key == "required":
                if not (isinstance(merged[key], list) and isinstance(value, list)):
                    return None
                merged[key] = list(dict.fromkeys([*merged[key], *value]))
            else:
                return None
    return merged


def fold(schema: Any, root: Any) -> Any:
    """``schema`` with its top-level local ``$ref`` and ``allOf`` merged in.

    ``{"$ref": "#/$defs/Opts", "description": ...}`` and ``{"allOf":
    [{"$ref": ...}]}`` become the definition itself (with the annotations), so
    that its ``type``, ``enum`` or ``anyOf`` can be read. Parts that conflict
    (two different ``properties``, say) are left as written, and so are a
    reference that is not local, points to nothing or loops back, and
    anything past :data:`MAX_DEPTH`. Each reference is folded once.
    """
    by_ref: dict[str, Any] = {}  # reference -> its folded target (None: none)

    def fold_(node: Any, depth: int) -> Any:
        if not isinstance(node, dict) or depth >= MAX_DEPTH:
            return node
        ref, all_of = node.get("$ref"), node.get("allOf")
        if ref is None and all_of is None:
            return node
        parts = [{k: v for k, v in node.items() if k not in ("$ref", "allOf")}]
        left: dict[str, Any] = {}  # what stays as written
        if is_local(ref) and ref not in by_ref:
            by_ref[ref] = None  # while being folded: a loop stays as written
            with contextlib.suppress(KeyError):
                by_ref[ref] = fold_(pointed(ref, root), depth + 1)
        if is_local(ref) and by_ref[ref] is not None:
            parts.append(by_ref[ref])
        elif ref is not None:
            left["$ref"] = ref
        if isinstance(all_of, list):
            parts += [fold_(b, depth + 1) for b in all_of if b is not True]
        elif all_of is not None:
            left["allOf"] = all_of
        if not all(isinstance(part, dict) for part in parts):
            return node
        merged = _merge([*parts, left])
        return node if merged is None else merged

    return fold_(schema, 0)


def _size(schema: Any) -> int:
    return len(json.dumps(schema, ensure_ascii=False))


def _number(name: str) -> int:
    return int(name.removeprefix("ref"))


class Localizer:
    """Makes schemas of one tool's parameters documents of their own.

    xgrammar resolves a ``$ref`` against the document it is given, which for
    one value is the property's schema, not the tool's. :meth:`localize`
    rewrites each local ``$ref`` of a schema, and of the definitions it
    reaches, into ``#/$defs/ref<N>`` and puts those definitions under
    ``$defs``. Each definition is rewritten once per tool, and a recursive
    schema (a tree whose children are trees) stays recursive.
    """

    def __init__(self, root: Any):
        self._root = root
        self._names: dict[str, str] = {}  # local reference -> its $defs name
        self._defs: dict[str, Any] = {}  # $defs name -> rewritten definition
        self._refers: dict[str, set[str]] = {}  # $defs name -> names it uses
        self._same_value: dict[str, set[str]] = {}  # ... through $ref / allOf
        self._sizes: dict[str, int] = {}
        self._loop_free: set[str] = set()
        self._too_deep = False
        self._pending: list[str] = []
        self._copied = 0
        self._limit: int | None = None

    def localize(self, schema: Any) -> Any:
        """``schema`` as a document of its own (unchanged without local refs).

        Raises ValueError (see :meth:`check`), and when the copies of the
        definitions, counted over this tool's values, would exceed the bound
        (:data:`COPY_FACTOR`).
        """
        document, reached = self._walk(schema)
        if not reached:
            return document
        self._charge(sum(self._size_of(name) for name in reached))
        ordered = sorted(reached, key=_number)
        return {**document, "$defs": {name: self._defs[name] for name in ordered}}

    def copied(self, schema: Any) -> None:
        """Count ``schema`` as copied into the grammar (a definition merged
        into a value by :func:`fold`); ValueError past the bound."""
        self._charge(_size(schema))

    def _charge(self, size: int) -> None:
        self._copied += size
        if self._limit is None:
            self._limit = COPY_FACTOR * _size(self._root) + COPY_ALLOWANCE
        if self._copied > self._limit:
            raise ValueError(
                "copying the $ref definitions into each value that uses them "
                f"would take {self._copied} characters of grammar (at most "
                f"{self._limit}: {COPY_FACTOR} times the size of the parameters "
                f"schema plus {COPY_ALLOWANCE}); use fewer references per value"
            )

    def check(self, schema: Any) -> None:
        """Raise ValueError naming the reference when a local ``$ref`` that
        ``schema`` reaches points to nothing, or when a definition requires
        itself through ``$ref`` / ``allOf`` alone (no value could end)."""
        self._walk(schema)

    def _walk(self, schema: Any) -> tuple[Any, set[str]]:
        used: set[str] = set()
        try:
            if self._too_deep:
                raise RecursionError
            document = self._rewrite(schema, used, set())
            self._rewrite_pending()
        except RecursionError:
            # Too deep to walk: as written (xgrammar decides), as before.
            self._too_deep = True
            return schema, set()
        reached = self._reach(self._refers, used)
        self._refuse_loops(reached)
        return document, reached

    def _name(self, ref: str) -> str:
        name = self._names.get(ref)
        if name is None:
            try:
                pointed(ref, self._root)
            except KeyError:
                raise ValueError(
                    f"$ref {ref!r} points to nothing in the tool's parameters schema"
                ) from None
            name = self._names[ref] = f"ref{len(self._names)}"
            self._pending.append(ref)
        return name

    def _rewrite_pending(self) -> None:
        while self._pending:
            ref = self._pending.pop()
            name = self._names[ref]
            used: set[str] = set()
            same_value: set[str] = set()
            self._defs[name] = self._rewrite(pointed(ref, self._root), used, same_value)
            self._refers[name], self._same_value[name] = used, same_value

    def _rewrite(self, schema: Any, used: set[str], same_value: set[str] | None) -> Any:
        """A copy of ``schema`` with local references renamed (recording the
        names in ``used``, and in ``same_value`` those that constrain the
        value itself: reached through ``$ref`` and ``allOf`` only)."""
        if not isinstance(schema, dict):
            return schema
        copy: dict[str, Any] = {}
        for key, value in schema.items():
            if key in _DEFINITIONS:
                continue
            if key == "$ref" and is_local(value):
                name = self._name(value)
                used.add(name)
                if same_value is not None:
                    same_value.add(name)
                copy[key] = f"#/$defs/{name}"
                continue
            inner = same_value if key in _SAME_VALUE else None
            if key in _SCHEMA_LISTS and isinstance(value, list):
                copy[key] = [self._rewrite(v, used, inner) for v in value]
            elif key in _SCHEMA_MAPS and isinstance(value, dict):
                copy[key] = {k: self._rewrite(v, used, None) for k, v in value.items()}
            elif key in _SCHEMA:
                copy[key] = self._rewrite(value, used, None)
            else:
                copy[key] = value
        return copy

    @staticmethod
    def _reach(edges: dict[str, set[str]], start: set[str]) -> set[str]:
        reached, stack = set(start), list(start)
        while stack:
            for name in edges.get(stack.pop(), ()):
                if name not in reached:
                    reached.add(name)
                    stack.append(name)
        return reached

    def _refuse_loops(self, names: set[str]) -> None:
        """ValueError for a definition that requires itself as the same value."""
        for name in sorted(names - self._loop_free, key=_number):
            if name in self._reach(self._same_value, self._same_value[name]):
                ref = next(r for r, n in self._names.items() if n == name)
                raise ValueError(
                    f"$ref {ref!r} refers back to itself through $ref / allOf "
                    "alone (a reference loop), so no value can match it"
                )
            self._loop_free.add(name)

    def _size_of(self, name: str) -> int:
        if name not in self._sizes:
            self._sizes[name] = _size(self._defs[name])
        return self._sizes[name]
