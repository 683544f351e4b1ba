# SPDX-License-Identifier: Apache-2.0
"""Tool-call parser ``spark25`` for the Spark2_5 XML/KV call format.

A Spark2_5 model calls a function like this (one block per call, any text
before, between and after the blocks)::

    <tool_call>get_weather
    <arg_key>city</arg_key><arg_value>Paris</arg_value>
    <arg_key>days</arg_key><arg_value>3</arg_value>
    </tool_call>

Grammar of one *valid* call (whitespace = any ``str.isspace`` characters)::

    "<tool_call>" ws* NAME (ws* "\\n" | ws*) PAIR* ws* "</tool_call>"
    PAIR := ws* "<arg_key>" KEY "</arg_key>" ws* "<arg_value>" VALUE "</arg_value>"

* NAME is a function name of the request's tools (no inner whitespace). It
  ends at the first newline after it, or at ``<arg_key>`` / ``</tool_call>``.
* KEY is stripped; VALUE is taken verbatim up to ``</arg_value>``. KEY and
  VALUE may hold any text except the six structural tags (``<tool_call>``,
  ``</tool_call>``, ``<arg_key>``, ``</arg_key>``, ``<arg_value>``,
  ``</arg_value>``); other markup such as ``<b>x</b>`` or ``a < b`` is text.

Everything that is not part of a valid call is content, character for
character, in both modes (nothing is dropped):

* an opening tag not followed by a known name (unknown tool, no tools in the
  request, prose after the tag) is plain text, and scanning resumes right
  after that tag;
* a call with a known name that breaks the grammar later (stray text between
  pairs, a structural tag inside a value, the output ending before
  ``</tool_call>``) is abandoned: its raw text, from ``<tool_call>`` up to the
  point where it broke, becomes content and scanning resumes at that point.

Values are converted by the JSON-schema type the request declares for the
parameter (see :func:`convert_value`); the arguments string of a call is built
from the pairs in order by one writer (:class:`_ArgumentsWriter`) that both
modes share, so streamed fragments always concatenate to the non-streaming
arguments.

Streaming: one incremental scanner (:class:`Spark25CallScanner`) consumes the
deltas; the non-streaming path feeds it the whole text at once. It emits
content as soon as the text cannot be the start of ``<tool_call>``, the call
(id, name) once the name is complete and known, argument fragments that can no
longer change (a string-typed value streams as it arrives, a typed value when
its ``</arg_value>`` arrives), and ``}`` at ``</tool_call>``. A delta can hold
any number of tokens or tags; the result does not depend on the chunking.

A stream cannot take back a delta. When a started call is abandoned (stream
ended inside it, or malformed markup), its raw text is sent as content, as in
non-streaming, and the already-streamed call stays behind with arguments that
are not valid JSON (the closing ``}`` is only sent at ``</tool_call>``).
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from vllm.entrypoints.generate.base.protocol import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
from vllm.logger import init_logger
from vllm.renderers.chat_utils import make_tool_call_id
from vllm.tokenizers import TokenizerLike
from vllm.tool_parsers.abstract_tool_parser import Tool, ToolParser
from vllm.tool_parsers.utils import get_function_tools

logger = init_logger("vllm.spark2_5_plugin.tool_parser")

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
ARG_KEY_START = "<arg_key>"
ARG_KEY_END = "</arg_key>"
ARG_VALUE_START = "<arg_value>"
ARG_VALUE_END = "</arg_value>"
STRUCTURAL_TAGS = (
    TOOL_CALL_START,
    TOOL_CALL_END,
    ARG_KEY_START,
    ARG_KEY_END,
    ARG_VALUE_START,
    ARG_VALUE_END,
)
_MAX_TAG_LEN = max(len(t) for t in STRUCTURAL_TAGS)

# ---------------------------------------------------------------------------
# Value conversion (shared by both modes)
# ---------------------------------------------------------------------------

# Order in which a union type is tried; "string" is the fallback for all.
_TYPE_PRIORITY = ("null", "integer", "number", "boolean", "object", "array")
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
    return frozenset(found & {*_TYPE_PRIORITY, "string"})


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
    if kind == "integer":
        if _INTEGER_RE.fullmatch(text):
            return (True, int(text))
        return (False, None)
    if kind == "number":
        if _INTEGER_RE.fullmatch(text):
            return (True, int(text))
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


def is_plain_string(schema: Any) -> bool:
    """True when every value of this parameter stays a string (streamable)."""
    return not (declared_types(schema) - {"string"})


def _json_string_body(text: str) -> str:
    """JSON escape of ``text`` without the quotes.

    Escaping is per character, so the escapes of consecutive pieces of a value
    concatenate to the escape of the whole value.
    """
    return json.dumps(text, ensure_ascii=False)[1:-1]


class _ArgumentsWriter:
    """Builds the arguments JSON of one call, fragment by fragment.

    The only place where argument JSON is written; the scanner sends every
    fragment both to the stream and to the call's final arguments string.
    """

    def __init__(self, properties: dict[str, Any]):
        self.properties = properties
        self.pairs = 0

    def open_pair(self, key: str) -> str:
        separator = "{" if self.pairs == 0 else ", "
        return f"{separator}{json.dumps(key, ensure_ascii=False)}: "

    def value_streams(self, key: str) -> bool:
        return is_plain_string(self.properties.get(key))

    def open_string(self) -> str:
        return '"'

    def string_piece(self, text: str) -> str:
        return _json_string_body(text)

    def close_string(self) -> str:
        self.pairs += 1
        return '"'

    def typed_value(self, key: str, raw: str) -> str:
        self.pairs += 1
        value = convert_value(raw, self.properties.get(key))
        return json.dumps(value, ensure_ascii=False)

    def close(self) -> str:
        return "{}" if self.pairs == 0 else "}"


# ---------------------------------------------------------------------------
# Scanner: text in, events out (one state machine for both modes)
# ---------------------------------------------------------------------------


@dataclass
class ContentEvent:
    text: str


@dataclass
class CallStartEvent:
    index: int
    name: str


@dataclass
class ArgumentsEvent:
    index: int
    text: str


@dataclass
class CallEndEvent:
    """A valid call is complete; ``raw`` is its exact text in the output."""

    index: int
    name: str
    arguments: str
    raw: str


@dataclass
class CallAbandonedEvent:
    """A started call broke the grammar; its raw text follows as content."""

    index: int
    raw: str


Event = (
    ContentEvent | CallStartEvent | ArgumentsEvent | CallEndEvent | CallAbandonedEvent
)


class ScanState(enum.Enum):
    CONTENT = "content"  # plain text; watching for <tool_call>
    NAME = "name"  # after <tool_call>: reading the function name
    BODY = "body"  # between pairs: <arg_key>, </tool_call> or whitespace
    KEY = "key"  # inside <arg_key> ... </arg_key>
    BEFORE_VALUE = "before_value"  # after </arg_key>: whitespace, <arg_value>
    VALUE = "value"  # inside <arg_value> ... </arg_value>


def _tag_at(text: str, pos: int) -> tuple[str | None, bool]:
    """Structural tag starting at ``text[pos]`` (a ``<``).

    Returns ``(tag, False)`` for a complete tag, ``(None, True)`` when the rest
    of ``text`` is a proper prefix of some tag (wait for more text), and
    ``(None, False)`` when this ``<`` is ordinary text.
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


def _tool_call_prefix_len(text: str) -> int:
    """Length of the longest suffix of ``text`` that may begin ``<tool_call>``."""
    start = text.rfind("<", max(0, len(text) - len(TOOL_CALL_START) + 1))
    if start < 0:
        return 0
    return len(text) - start if TOOL_CALL_START.startswith(text[start:]) else 0


class Spark25CallScanner:
    """Incremental scanner for Spark2_5 tool calls.

    ``feed(text)`` consumes the next piece of model output and returns the
    events it settles; ``finish()`` ends the output. Text is only held back
    while it could still be part of a tag or of a call name, so the work per
    character is constant and the events do not depend on how the output is
    split into pieces.
    """

    def __init__(self, tool_schemas: dict[str, dict[str, Any]]):
        # name -> {parameter: schema}
        self._properties = tool_schemas
        self._name_prefixes = {n[:k] for n in tool_schemas for k in range(len(n) + 1)}
        self.state = ScanState.CONTENT
        self._pending = ""  # received but not yet consumed (a tag prefix)
        self._next_index = 0
        self.finished = False
        self._reset_call()

    # -- call bookkeeping ---------------------------------------------------
    def _reset_call(self) -> None:
        self._raw: list[str] = []  # consumed text of the current call
        self._name_lead = ""  # whitespace before the name
        self._name_core = ""  # the name itself
        self._name_trail = ""  # whitespace after the name
        self._name = ""
        self._key: list[str] = []
        self._current_key = ""
        self._value: list[str] = []
        self._value_streams = False
        self._args: list[str] = []
        self._writer: _ArgumentsWriter | None = None

    def _emit_args(self, events: list[Event], text: str) -> None:
        self._args.append(text)
        events.append(ArgumentsEvent(self._next_index, text))

    def _abandon(self, events: list[Event], rest: str) -> None:
        """The call broke the grammar where ``rest`` begins."""
        raw = "".join(self._raw)
        events.append(CallAbandonedEvent(self._next_index, raw))
        events.append(ContentEvent(raw))
        self._next_index += 1
        self._reset_call()
        self.state = ScanState.CONTENT
        self._pending = rest

    def _reject_name(self, events: list[Event], rest: str) -> None:
        """No known name after ``<tool_call>``: the tag is plain text."""
        events.append(ContentEvent(TOOL_CALL_START))
        name_text = self._name_lead + self._name_core + self._name_trail
        self._reset_call()
        self.state = ScanState.CONTENT
        self._pending = name_text + rest

    # -- public API -----------------------------------------------------------
    def feed(self, text: str) -> list[Event]:
        events: list[Event] = []
        if self.finished:
            return events
        self._pending += text
        handlers = {
            ScanState.CONTENT: self._scan_content,
            ScanState.NAME: self._scan_name,
            ScanState.BODY: self._scan_body,
            ScanState.KEY: self._scan_key,
            ScanState.BEFORE_VALUE: self._scan_before_value,
            ScanState.VALUE: self._scan_value,
        }
        while self._pending and handlers[self.state](events):
            pass
        return events

    def finish(self) -> list[Event]:
        """End of output: settle everything still held back."""
        events: list[Event] = []
        if self.finished:
            return events
        self.finished = True
        rest, self._pending = self._pending, ""
        if self.state is ScanState.CONTENT:
            if rest:
                events.append(ContentEvent(rest))
        elif self.state is ScanState.NAME:
            name_text = self._name_lead + self._name_core + self._name_trail
            events.append(ContentEvent(TOOL_CALL_START + name_text + rest))
        else:
            self._raw.append(rest)
            self._abandon(events, "")
        self._pending = ""
        return events

    # -- state handlers: each consumes from self._pending; returns True when
    #    it made progress and the loop should continue ----------------------
    def _scan_content(self, events: list[Event]) -> bool:
        text = self._pending
        start = text.find(TOOL_CALL_START)
        if start >= 0:
            if start:
                events.append(ContentEvent(text[:start]))
            self._pending = text[start + len(TOOL_CALL_START) :]
            self._reset_call()
            self._raw.append(TOOL_CALL_START)
            self.state = ScanState.NAME
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
                    self._reject_name(events, text[pos:])
                    return True
            if char == "\n" and self._name_core:
                self._name_trail += char
                return self._end_name(events, text[pos + 1 :])
            if char.isspace():
                if self._name_core:
                    self._name_trail += char
                    if self._name_core not in self._properties:
                        self._reject_name(events, text[pos + 1 :])
                        return True
                else:
                    self._name_lead += char
                continue
            if self._name_trail:  # text after the name's trailing space
                self._name_core += self._name_trail
                self._name_trail = ""
            self._name_core += char
            if self._name_core not in self._name_prefixes:
                self._reject_name(events, text[pos + 1 :])
                return True
        self._pending = ""
        return False

    def _end_name(self, events: list[Event], rest: str) -> bool:
        if self._name_core not in self._properties:
            self._reject_name(events, rest)
            return True
        self._name = self._name_core
        self._raw.append(self._name_lead + self._name_core + self._name_trail)
        self._writer = _ArgumentsWriter(self._properties[self._name])
        events.append(CallStartEvent(self._next_index, self._name))
        self.state = ScanState.BODY
        self._pending = rest
        return True

    def _skip_whitespace(self) -> str:
        """Consume leading whitespace into the call; return what is left."""
        text = self._pending
        stripped = text.lstrip()
        if len(stripped) != len(text):
            self._raw.append(text[: len(text) - len(stripped)])
        self._pending = stripped
        return stripped

    def _scan_body(self, events: list[Event]) -> bool:
        text = self._skip_whitespace()
        if not text:
            return False
        if text[0] == "<":
            tag, partial = _tag_at(text, 0)
            if partial:
                return False
            if tag == ARG_KEY_START:
                self._raw.append(tag)
                self._pending = text[len(tag) :]
                self._key = []
                self.state = ScanState.KEY
                return True
            if tag == TOOL_CALL_END:
                assert self._writer is not None
                self._raw.append(tag)
                self._pending = text[len(tag) :]
                self._emit_args(events, self._writer.close())
                events.append(
                    CallEndEvent(
                        self._next_index,
                        self._name,
                        "".join(self._args),
                        "".join(self._raw),
                    )
                )
                self._next_index += 1
                self._reset_call()
                self.state = ScanState.CONTENT
                return True
        self._abandon(events, text)
        return True

    def _scan_until(self) -> tuple[str, str | None, str]:
        """Split pending text at the first structural tag.

        Returns ``(text_before, tag, rest)``. ``tag`` is None when no complete
        tag is there yet; ``rest`` then holds a possible partial tag.
        """
        text = self._pending
        pos = text.find("<")
        while pos >= 0:
            tag, partial = _tag_at(text, pos)
            if tag is not None or partial:
                return text[:pos], tag, text[pos:]
            pos = text.find("<", pos + 1)
        return text, None, ""

    def _scan_key(self, events: list[Event]) -> bool:
        before, tag, rest = self._scan_until()
        if before:
            self._raw.append(before)
            self._key.append(before)
        self._pending = rest
        if tag is None:
            return False
        if tag != ARG_KEY_END:
            self._abandon(events, rest)
            return True
        assert self._writer is not None
        self._raw.append(tag)
        self._pending = rest[len(tag) :]
        self._current_key = "".join(self._key).strip()
        self._emit_args(events, self._writer.open_pair(self._current_key))
        self.state = ScanState.BEFORE_VALUE
        return True

    def _scan_before_value(self, events: list[Event]) -> bool:
        text = self._skip_whitespace()
        if not text:
            return False
        if text[0] == "<":
            tag, partial = _tag_at(text, 0)
            if partial:
                return False
            if tag == ARG_VALUE_START:
                assert self._writer is not None
                self._raw.append(tag)
                self._pending = text[len(tag) :]
                self._value = []
                self._value_streams = self._writer.value_streams(self._current_key)
                if self._value_streams:
                    self._emit_args(events, self._writer.open_string())
                self.state = ScanState.VALUE
                return True
        self._abandon(events, text)
        return True

    def _scan_value(self, events: list[Event]) -> bool:
        assert self._writer is not None
        before, tag, rest = self._scan_until()
        if before:
            self._raw.append(before)
            if self._value_streams:
                self._emit_args(events, self._writer.string_piece(before))
            else:
                self._value.append(before)
        self._pending = rest
        if tag is None:
            return False
        if tag != ARG_VALUE_END:
            self._abandon(events, rest)
            return True
        self._raw.append(tag)
        self._pending = rest[len(tag) :]
        if self._value_streams:
            self._emit_args(events, self._writer.close_string())
        else:
            raw_value = "".join(self._value)
            self._emit_args(
                events, self._writer.typed_value(self._current_key, raw_value)
            )
        self.state = ScanState.BODY
        return True


def tool_schemas(tools: Iterable[Tool] | None) -> dict[str, dict[str, Any]]:
    """``{function name: {parameter: schema}}`` for the request's tools.

    Namespaced Responses tools are flattened the way vLLM renders them
    (``<namespace>__<name>``); non-function tools are ignored.
    """
    schemas: dict[str, dict[str, Any]] = {}
    if not tools:
        return schemas
    for tool in get_function_tools(list(tools)):
        function = getattr(tool, "function", tool)
        name = getattr(function, "name", None)
        if not isinstance(name, str) or not name:
            continue
        parameters = getattr(function, "parameters", None) or {}
        properties = (
            parameters.get("properties") if isinstance(parameters, dict) else None
        )
        schemas.setdefault(name, properties if isinstance(properties, dict) else {})
    return schemas


# ---------------------------------------------------------------------------
# vLLM ToolParser
# ---------------------------------------------------------------------------


class Spark25ToolParser(ToolParser):
    """vLLM tool parser for Spark2_5 (``--tool-call-parser spark25``)."""

    # Required / named tool_choice fall back to this parser (as "auto"); the
    # JSON-array path vLLM uses otherwise would never see this format.
    supports_required_and_named = False
    # No xgrammar structural tag: it would force a layout (and replace the
    # request's own structured outputs) that the model need not follow.
    structural_tag_model = None
    default_tool_strict_level = None
    # Streaming is driven by deltas alone and vLLM calls finish_streaming()
    # at the end of the stream, so text held back at the end is not lost.
    engine_based_streaming = True

    def __init__(self, tokenizer: TokenizerLike, tools: list[Tool] | None = None):
        super().__init__(tokenizer, tools)
        self._raw_tools = tools
        self._scanner: Spark25CallScanner | None = None
        self._passthrough = False
        # Whitespace-only content is held back in streaming (see _stream_content).
        self._held_whitespace = ""
        self._content_started = False
        self._completed_calls = 0

    # -- request handling -----------------------------------------------------
    def adjust_request(
        self, request: ChatCompletionRequest | ResponsesRequest
    ) -> ChatCompletionRequest | ResponsesRequest:
        if request.tools and request.tool_choice != "none":
            # The tags are special tokens: keep them in the detokenized text.
            request.skip_special_tokens = False
        return super().adjust_request(request)

    def _schemas_for(self, request: Any) -> dict[str, dict[str, Any]]:
        tools = getattr(request, "tools", None)
        return tool_schemas(tools if tools is not None else self._raw_tools)

    @staticmethod
    def _calls_disabled(request: Any) -> bool:
        return getattr(request, "tool_choice", None) == "none"

    # -- non-streaming ----------------------------------------------------------
    def extract_tool_calls(
        self, model_output: str, request: ChatCompletionRequest
    ) -> ExtractedToolCallInformation:
        if self._calls_disabled(request):
            return ExtractedToolCallInformation(
                tools_called=False, tool_calls=[], content=model_output or None
            )
        scanner = Spark25CallScanner(self._schemas_for(request))
        events = scanner.feed(model_output) + scanner.finish()
        content: list[str] = []
        calls: list[ToolCall] = []
        for event in events:
            if isinstance(event, ContentEvent):
                content.append(event.text)
            elif isinstance(event, CallEndEvent):
                calls.append(
                    ToolCall(
                        type="function",
                        function=FunctionCall(
                            name=event.name, arguments=event.arguments
                        ),
                    )
                )
        text = "".join(content)
        return ExtractedToolCallInformation(
            tools_called=bool(calls), tool_calls=calls, content=text or None
        )

    # -- streaming ------------------------------------------------------------
    def extract_tool_calls_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
        request: ChatCompletionRequest,
    ) -> DeltaMessage | None:
        # Only delta_text is used: vLLM passes the whole output as deltas
        # (engine_based_streaming), and the scanner keeps its own state.
        if self._scanner is None:
            schemas = self._schemas_for(request)
            self._passthrough = self._calls_disabled(request) or not schemas
            self._scanner = Spark25CallScanner(schemas)
        if self._passthrough:
            return DeltaMessage(content=delta_text) if delta_text else None
        return self._to_delta(self._scanner.feed(delta_text), final=False)

    def finish_streaming(self) -> DeltaMessage | None:
        """Called by vLLM once the stream ends: settle held-back text."""
        if self._scanner is None or self._passthrough:
            return None
        return self._to_delta(self._scanner.finish(), final=True)

    def _stream_content(self, text: str, final: bool) -> str:
        """Content to send now.

        vLLM's non-streaming response turns whitespace-only content into null
        when tools were called. To give the same result, the stream holds
        whitespace back until other content arrives; at the end it is sent
        only if no call was completed.
        """
        if self._content_started:
            return text
        self._held_whitespace += text
        if self._held_whitespace.strip():
            self._content_started = True
            text, self._held_whitespace = self._held_whitespace, ""
            return text
        if final and self._completed_calls == 0:
            text, self._held_whitespace = self._held_whitespace, ""
            return text
        return ""

    def _to_delta(self, events: list[Event], final: bool) -> DeltaMessage | None:
        content: list[str] = []
        deltas: dict[int, DeltaToolCall] = {}
        for event in events:
            if isinstance(event, ContentEvent):
                content.append(event.text)
            elif isinstance(event, CallStartEvent):
                self.current_tool_id = event.index
                self.current_tool_name_sent = True
                self.prev_tool_call_arr.append({"name": event.name, "arguments": ""})
                self.streamed_args_for_tool.append("")
                deltas[event.index] = DeltaToolCall(
                    index=event.index,
                    id=make_tool_call_id(),
                    type="function",
                    function=DeltaFunctionCall(name=event.name),
                )
            elif isinstance(event, ArgumentsEvent):
                self._record_arguments(event.index, event.text)
                delta = deltas.get(event.index)
                if delta is None:
                    delta = deltas[event.index] = DeltaToolCall(
                        index=event.index, function=DeltaFunctionCall(arguments="")
                    )
                assert delta.function is not None
                delta.function.arguments = (delta.function.arguments or "") + event.text
            elif isinstance(event, CallEndEvent):
                self._completed_calls += 1
        text = self._stream_content("".join(content), final)
        if not text and not deltas:
            return None
        return DeltaMessage(content=text or None, tool_calls=list(deltas.values()))

    def _record_arguments(self, index: int, text: str) -> None:
        # Both lists hold one entry per started call, in call-index order.
        # Keeping them equal makes vLLM's end-of-stream "unstreamed
        # arguments" check (get_remaining_unstreamed_args) add nothing.
        self.streamed_args_for_tool[index] += text
        self.prev_tool_call_arr[index]["arguments"] = self.streamed_args_for_tool[index]
