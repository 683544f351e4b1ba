# SPDX-License-Identifier: Apache-2.0
"""The ``spark25`` call scanner: model output in, content and call events out.

Pure Python (no vLLM), so it can be tested and fuzzed on its own. It is the
one state machine behind both modes: the adapter feeds it the deltas of a
stream, or the whole output at once, and the events do not depend on how the
text is split. Grammar of one valid call (ws: ``str.isspace`` characters)::

    "<tool_call>" ws* NAME (ws* "\\n" | ws*) PAIR* ws* "</tool_call>"
    PAIR := ws* "<arg_key>" KEY "</arg_key>" ws* "<arg_value>" VALUE "</arg_value>"

NAME is a tool of the request with a callable name (:func:`is_callable_name`);
KEY (stripped) and VALUE (verbatim) are any text without the six structural
tags, and no KEY may repeat within a call. Everything else is content,
verbatim: ``<tool_call>`` without a known name is text (scanning resumes
after the tag); a named call that breaks the grammar (a repeated key
included) or is cut off is abandoned, its raw text becomes content and
scanning resumes where it broke. Text is held back only while it may still be
a tag or a call name. See ``docs/tool_parser.md``.
"""

from __future__ import annotations

import enum
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from vllm_spark2_5_plugin.names import (
    ARG_KEY_END,
    ARG_KEY_START,
    ARG_VALUE_END,
    ARG_VALUE_START,
    STRUCTURAL_TAGS,
    TOOL_CALL_END,
    TOOL_CALL_START,
)
from vllm_spark2_5_plugin.tool_parsers.values import ArgumentsWriter

_MAX_TAG_LEN = max(len(t) for t in STRUCTURAL_TAGS)


def is_callable_name(name: str) -> bool:
    """Can a call of the tool ``name`` be written in the format?

    A callable name is not empty and holds neither ``<`` nor any character for
    which ``str.isspace`` is true (the name ends at whitespace, and ``<`` may
    begin a tag). Other tools are never called.
    """
    return bool(name) and "<" not in name and not any(c.isspace() for c in name)


@dataclass
class ContentEvent:
    """Text that is not part of a valid call."""

    text: str


@dataclass
class CallStartEvent:
    """Call ``index`` has a known name (it may still be abandoned later)."""

    index: int
    name: str


@dataclass
class ArgumentsEvent:
    """The next fragment of the arguments JSON of call ``index``."""

    index: int
    text: str


@dataclass
class CallEndEvent:
    """Call ``index`` is complete; ``arguments`` is its whole arguments JSON."""

    index: int
    name: str
    arguments: str


Event = ContentEvent | CallStartEvent | ArgumentsEvent | CallEndEvent


class _NameReader:
    """Reads a call's NAME, one character at a time, against the tool names.

    The names are sorted once. Those that begin with the text read so far are
    the consecutive ``names[lo:hi]``, ordered by their next character (a name
    that ends there first), so each character narrows the range by bisection.
    Memory is linear in the total length of the names (no set of prefixes),
    and the work per character does not grow with the name's length.
    """

    def __init__(self, names: Iterable[str]):
        self._names = sorted(names)
        self.reset()

    def reset(self) -> None:
        self._lo, self._hi, self.length = 0, len(self._names), 0

    def read(self, char: str) -> bool:
        """Read one more character; False (nothing read) when no name would
        begin with the text read so far followed by ``char``."""
        depth = self.length

        def next_char(name: str) -> str:
            return name[depth : depth + 1]

        lo = bisect_left(self._names, char, self._lo, self._hi, key=next_char)
        hi = bisect_right(self._names, char, lo, self._hi, key=next_char)
        if lo == hi:
            return False
        self._lo, self._hi, self.length = lo, hi, depth + 1
        return True

    def text(self) -> str:
        """The text read so far (a prefix of a tool name)."""
        return self._names[self._lo][: self.length] if self.length else ""

    def complete(self) -> str | None:
        """The tool name read, when the text read so far is a whole name."""
        if self.length and len(self._names[self._lo]) == self.length:
            return self._names[self._lo]
        return None


class _State(enum.Enum):
    CONTENT = enum.auto()  # plain text; watching for <tool_call>
    NAME = enum.auto()  # after <tool_call>: reading the function name
    BODY = enum.auto()  # between pairs: whitespace, <arg_key> or </tool_call>
    KEY = enum.auto()  # inside <arg_key> ... </arg_key>
    BEFORE_VALUE = enum.auto()  # after </arg_key>: whitespace, <arg_value>
    VALUE = enum.auto()  # inside <arg_value> ... </arg_value>


# The tags a state inside a call accepts next; any other tag breaks the call.
_ACCEPTS = {
    _State.BODY: (ARG_KEY_START, TOOL_CALL_END),
    _State.KEY: (ARG_KEY_END,),
    _State.BEFORE_VALUE: (ARG_VALUE_START,),
    _State.VALUE: (ARG_VALUE_END,),
}


def _tag_at(text: str, pos: int) -> tuple[str | None, bool]:
    """Structural tag starting at ``text[pos]``.

    Returns ``(tag, False)`` for a complete tag, ``(None, True)`` when the rest
    of ``text`` is a proper prefix of some tag (wait for more text), and
    ``(None, False)`` when ``text[pos]`` is ordinary text.
    """
    for tag in STRUCTURAL_TAGS:
        if text.startswith(tag, pos):
            return tag, False
    tail = text[pos : pos + _MAX_TAG_LEN]
    if len(text) - pos < _MAX_TAG_LEN and any(
        t.startswith(tail) for t in STRUCTURAL_TAGS
    ):
        return None, True
    return None, False


def _split_at_tag(text: str) -> tuple[str, str | None, str]:
    """``(text before, tag, rest)`` at the first (possibly partial) tag.

    ``tag`` is None when no complete tag is there yet; ``rest`` then holds a
    possible partial tag, or nothing.
    """
    pos = text.find("<")
    while pos >= 0:
        tag, partial = _tag_at(text, pos)
        if tag is not None or partial:
            return text[:pos], tag, text[pos:]
        pos = text.find("<", pos + 1)
    return text, None, ""


def _tool_call_prefix_len(text: str) -> int:
    """Length of the longest suffix of ``text`` that may begin ``<tool_call>``."""
    start = text.rfind("<", max(0, len(text) - len(TOOL_CALL_START) + 1))
    if start < 0:
        return 0
    return len(text) - start if TOOL_CALL_START.startswith(text[start:]) else 0


class Spark25CallScanner:
    """Incremental scanner for Spark2_5 tool calls.

    ``feed(text)`` consumes the next piece of model output and returns the
    events it settles; ``finish()`` ends the output and settles the rest. The
    work per character is constant. ``tool_schemas`` maps each function name
    of the request to its parameters schema (the JSON schema of the arguments
    object); names that are not callable are left out.
    """

    def __init__(self, tool_schemas: dict[str, Any]):
        self._parameters = {
            n: p for n, p in tool_schemas.items() if is_callable_name(n)
        }
        self._name = _NameReader(self._parameters)
        self._state = _State.CONTENT
        self._pending = ""  # received, not yet consumed
        self._next_index = 0
        self._finished = False
        self._reset_call()
        self._handlers: dict[_State, Callable[[list[Event]], bool]] = {
            _State.CONTENT: self._scan_content,
            _State.NAME: self._scan_name,
            _State.BODY: self._scan_gap,
            _State.KEY: self._scan_text,
            _State.BEFORE_VALUE: self._scan_gap,
            _State.VALUE: self._scan_text,
        }
        self._on_tag: dict[str, Callable[[list[Event]], None]] = {
            ARG_KEY_START: self._open_key,
            ARG_KEY_END: self._close_key,
            ARG_VALUE_START: self._open_value,
            ARG_VALUE_END: self._close_value,
            TOOL_CALL_END: self._close_call,
        }

    # -- public API -------------------------------------------------------------
    def feed(self, text: str) -> list[Event]:
        """Consume the next piece of output; return the events it settles."""
        events: list[Event] = []
        if self._finished:
            return events
        self._pending += text
        # Each handler consumes from the front of _pending; True: go on.
        while self._pending and self._handlers[self._state](events):
            pass
        return events

    def finish(self) -> list[Event]:
        """End of output: settle everything still held back."""
        events: list[Event] = []
        if self._finished:
            return events
        self._finished = True
        rest, self._pending = self._pending, ""
        if self._state is _State.CONTENT:
            if rest:
                events.append(ContentEvent(rest))
        elif self._state is _State.NAME:
            events.append(ContentEvent(TOOL_CALL_START + self._name_text() + rest))
        else:
            self._raw.append(rest)
            self._abandon(events, "")
        return events

    # -- call bookkeeping -----------------------------------------------------------
    def _reset_call(self) -> None:
        self._raw: list[str] = []  # consumed text of the current call
        self._name.reset()  # the name itself
        self._name_lead = ""  # whitespace before the name
        self._name_trail = ""  # whitespace after the name
        self._call_name = ""  # the name, once known to be a tool's
        self._text: list[str] = []  # the key, or the typed value, being read
        self._key = ""  # the key of the current pair
        self._value_streams = False
        self._args: list[str] = []
        self._writer = ArgumentsWriter({})

    def _name_text(self) -> str:
        return self._name_lead + self._name.text() + self._name_trail

    def _to_content(self, rest: str) -> None:
        self._reset_call()
        self._state = _State.CONTENT
        self._pending = rest

    def _emit_args(self, events: list[Event], text: str) -> None:
        self._args.append(text)
        events.append(ArgumentsEvent(self._next_index, text))

    def _abandon(self, events: list[Event], rest: str) -> None:
        """The call broke the grammar where ``rest`` begins."""
        events.append(ContentEvent("".join(self._raw)))
        self._next_index += 1
        self._to_content(rest)

    def _reject_name(self, events: list[Event], rest: str) -> bool:
        """No known name after ``<tool_call>``: the tag is plain text."""
        events.append(ContentEvent(TOOL_CALL_START))
        self._to_content(self._name_text() + rest)
        return True

    # -- state handlers: consume from _pending; True when the loop goes on --------
    def _scan_content(self, events: list[Event]) -> bool:
        text = self._pending
        start = text.find(TOOL_CALL_START)
        if start >= 0:
            if start:
                events.append(ContentEvent(text[:start]))
            self._raw.append(TOOL_CALL_START)
            self._state = _State.NAME
            self._pending = text[start + len(TOOL_CALL_START) :]
            return True
        keep = _tool_call_prefix_len(text)
        if len(text) > keep:
            events.append(ContentEvent(text[: len(text) - keep]))
        self._pending = text[len(text) - keep :]
        return False

    def _scan_name(self, events: list[Event]) -> bool:
        text = self._pending
        for pos, char in enumerate(text):
            if char == "<":
                tag, partial = _tag_at(text, pos)
                if partial:
                    self._pending = text[pos:]
                    return False
                if tag in (ARG_KEY_START, TOOL_CALL_END):
                    return self._end_name(events, text[pos:])
                if tag is not None:
                    return self._reject_name(events, text[pos:])
            if char == "\n" and self._name.length:
                self._name_trail += char
                return self._end_name(events, text[pos + 1 :])
            if char.isspace():
                if not self._name.length:
                    self._name_lead += char
                    continue
                self._name_trail += char
                if self._name.complete() is None:
                    return self._reject_name(events, text[pos + 1 :])
                continue
            # Text after the name's trailing space (no tool name holds
            # whitespace), or a character no tool name continues with.
            if self._name_trail or not self._name.read(char):
                return self._reject_name(events, text[pos:])
        self._pending = ""
        return False

    def _end_name(self, events: list[Event], rest: str) -> bool:
        name = self._name.complete()
        if name is None:
            return self._reject_name(events, rest)
        self._call_name = name
        self._raw.append(self._name_text())
        self._writer = ArgumentsWriter.for_tool(self._parameters[name])
        events.append(CallStartEvent(self._next_index, name))
        self._state = _State.BODY
        self._pending = rest
        return True

    def _scan_gap(self, events: list[Event]) -> bool:
        """Between the parts of a call: whitespace, then the next tag."""
        text = self._pending
        stripped = text.lstrip()
        if len(stripped) != len(text):
            self._raw.append(text[: len(text) - len(stripped)])
        self._pending = stripped
        if not stripped:
            return False
        tag, partial = _tag_at(stripped, 0)
        if partial:
            return False
        return self._take_tag(events, tag, stripped)

    def _scan_text(self, events: list[Event]) -> bool:
        """Inside a key or value: any text, then the closing tag."""
        before, tag, rest = _split_at_tag(self._pending)
        if before:
            self._raw.append(before)
            if self._state is _State.VALUE and self._value_streams:
                self._emit_args(events, self._writer.string_piece(before))
            else:
                self._text.append(before)
        self._pending = rest
        if tag is None:
            return False
        return self._take_tag(events, tag, rest)

    def _take_tag(self, events: list[Event], tag: str | None, text: str) -> bool:
        """``text`` starts with ``tag`` (None: with no tag)."""
        if tag not in _ACCEPTS[self._state]:
            self._abandon(events, text)
            return True
        assert tag is not None
        self._raw.append(tag)
        self._pending = text[len(tag) :]
        self._on_tag[tag](events)
        return True

    # -- tag actions ---------------------------------------------------------------
    def _open_key(self, events: list[Event]) -> None:
        self._text = []
        self._state = _State.KEY

    def _close_key(self, events: list[Event]) -> None:
        self._key = "".join(self._text).strip()
        if self._writer.repeats(self._key):  # a repeated key breaks the call
            self._abandon(events, self._pending)
            return
        self._emit_args(events, self._writer.open_pair(self._key))
        self._state = _State.BEFORE_VALUE

    def _open_value(self, events: list[Event]) -> None:
        self._text = []
        self._value_streams = self._writer.value_streams(self._key)
        if self._value_streams:
            self._emit_args(events, self._writer.open_string())
        self._state = _State.VALUE

    def _close_value(self, events: list[Event]) -> None:
        if self._value_streams:
            fragment = self._writer.close_string()
        else:
            fragment = self._writer.typed_value(self._key, "".join(self._text))
        self._emit_args(events, fragment)
        self._state = _State.BODY

    def _close_call(self, events: list[Event]) -> None:
        self._emit_args(events, self._writer.close())
        arguments = "".join(self._args)
        events.append(CallEndEvent(self._next_index, self._call_name, arguments))
        self._next_index += 1
        self._to_content(self._pending)
