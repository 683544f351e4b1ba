# SPDX-License-Identifier: Apache-2.0
"""vLLM adapter of the ``spark25`` tool parser (``--tool-call-parser spark25``).

The format and its parsing live in :mod:`.scanner`, :mod:`.values` and
:mod:`.turns` (where the assistant turn ends; all pure Python); this module
only turns scanner events into vLLM's messages. The
parser is hand-written rather than built on vLLM's declarative parser engine
(the one behind the GLM-4.7 ``glm47`` parser) because

* one scanner serves streaming and non-streaming, so the two give the same
  content and the same completed calls (a call abandoned after its name was
  streamed stays in the stream, which cannot take a delta back);
* each call's argument fragments concatenate to exactly the non-streaming
  arguments string under any chunking (one JSON writer for both modes);
* it is cheaper: on CPU, 8-21x less time than ``glm47`` non-streaming and
  1.7-4.3x less streaming on the same outputs (``benchmarks/tool_parser_cpu.md``).

``adjust_request`` also turns ``tool_choice`` "required" / named and
``strict`` tools into an xgrammar structural tag (built in
:mod:`.constraints`), and refuses a forced call combined with the request's
own structured output. The full description is in ``docs/tool_parser.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import vllm.envs as envs
from pydantic_core import PydanticSerializationError
from vllm.entrypoints.generate.base.protocol import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.entrypoints.openai.chat_completion.protocol import (
    ChatCompletionNamedToolChoiceParam,
    ChatCompletionRequest,
)
from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
from vllm.exceptions import VLLMValidationError
from vllm.renderers.chat_utils import make_tool_call_id
from vllm.sampling_params import StructuredOutputsParams
from vllm.tokenizers import TokenizerLike
from vllm.tool_parsers.abstract_tool_parser import Tool, ToolParser
from vllm.tool_parsers.utils import get_function_tools

from vllm_spark2_5_plugin import vllm_seam
from vllm_spark2_5_plugin.tool_parsers.constraints import (
    Mode,
    ToolSpec,
    build_structural_tag,
    grammar_problem,
)
from vllm_spark2_5_plugin.tool_parsers.scanner import (
    ArgumentsEvent,
    CallEndEvent,
    CallStartEvent,
    ContentEvent,
    Event,
    Spark25CallScanner,
    is_callable_name,
)
from vllm_spark2_5_plugin.tool_parsers.turns import TurnCutter, cut_at_turn_end


def _functions(tools: Iterable[Tool] | None) -> Iterator[tuple[str, Any]]:
    """``(name, parameters)`` of each function tool the model is shown.

    Namespaced Responses tools are flattened the way vLLM renders them
    (``<namespace>__<name>``); non-function tools are ignored.
    """
    for tool in get_function_tools(list(tools or ())):
        function = getattr(tool, "function", tool)
        name = getattr(function, "name", None)
        if isinstance(name, str):
            yield name, getattr(function, "parameters", None)


def tool_schemas(tools: Iterable[Tool] | None) -> dict[str, Any]:
    """``{function name: parameters schema}`` for the request's tools (the
    whole schema, where each property's local ``$ref`` points)."""
    schemas: dict[str, Any] = {}
    for name, parameters in _functions(tools):
        schemas.setdefault(name, parameters if isinstance(parameters, dict) else {})
    return schemas


def tool_specs(tools: Iterable[Tool] | None) -> list[ToolSpec]:
    """The request's function tools as the grammar sees them (callable only)."""
    specs: list[ToolSpec] = []
    seen: set[str] = set()
    for tool in get_function_tools(list(tools or ())):
        function = getattr(tool, "function", tool)
        name = getattr(function, "name", None)
        if isinstance(name, str) and is_callable_name(name) and name not in seen:
            seen.add(name)
            strict = getattr(function, "strict", None) is True
            specs.append(ToolSpec(name, getattr(function, "parameters", None), strict))
    return specs


def forced_choice(tool_choice: Any) -> tuple[Mode, str, set[str] | None]:
    """``(mode, description, allowed names)`` of a request's ``tool_choice``.

    ``mode`` is ``"required"``, ``"forced"`` (one named function) or
    ``"auto"`` (anything else: ``"auto"``, unset, a custom or hosted tool
    choice); ``allowed`` is None for "all function tools".
    """
    if tool_choice == "required":
        return "required", '"required"', None
    if isinstance(tool_choice, ChatCompletionNamedToolChoiceParam):
        name = tool_choice.function.name
        return "forced", f"function {name!r}", {name}
    kind = getattr(tool_choice, "type", None)
    if kind == "function" and isinstance(getattr(tool_choice, "name", None), str):
        # Responses API ToolChoiceFunction
        return "forced", f"function {tool_choice.name!r}", {tool_choice.name}
    if kind == "allowed_tools":
        # Responses API ToolChoiceAllowed: {"mode": ..., "tools": [{"name": ...}]}
        items = getattr(tool_choice, "tools", None) or ()
        names = [t.get("name") for t in items if isinstance(t, dict)]
        allowed = {n for n in names if isinstance(n, str)}
        if getattr(tool_choice, "mode", None) == "required":
            return "required", 'allowed_tools (mode "required")', allowed
        return "auto", 'allowed_tools (mode "auto")', allowed
    return "auto", '"auto"', None


def own_constraints(request: Any) -> list[str]:
    """The request's own structured-output fields that constrain decoding."""
    found: list[str] = []
    if getattr(request, "structured_outputs", None) is not None:
        found.append("structured_outputs")
    response_format = getattr(request, "response_format", None)
    kind = getattr(response_format, "type", "text")
    if response_format is not None and kind != "text":
        found.append(f"response_format ({kind})")
    text = (
        getattr(request, "text", None)
        if isinstance(request, ResponsesRequest)
        else None
    )
    text_format = getattr(text, "format", None)
    kind = getattr(text_format, "type", "text")
    if text_format is not None and kind != "text":
        found.append(f"text.format ({kind})")
    return found


def _nesting(value: Any) -> int:
    """How deep objects and arrays nest in ``value`` (iteratively: the schema
    may be deeper than Python's recursion limit)."""
    depth, level = 0, [value]
    while level := [
        child
        for node in level
        if isinstance(node, (dict, list))
        for child in (node.values() if isinstance(node, dict) else node)
    ]:
        depth += 1
    return depth


def constrain_tool_calls(request: ChatCompletionRequest | ResponsesRequest) -> None:
    """Set the grammar that ``tool_choice`` and ``strict`` tools call for.

    * ``"required"`` / a named function / allowed_tools with mode
      ``"required"``: the output must be calls of the allowed tools (see
      :func:`.constraints.build_structural_tag`); a request that also carries
      its own structured output is refused (400 naming both).
    * ``"auto"`` with at least one ``strict`` tool: every call the model opens
      must be valid; a request's own structured output wins (no tool grammar).
    * otherwise nothing is added.

    ``VLLM_ENFORCE_STRICT_TOOL_CALLING=0`` (vLLM's switch for tool-call
    grammars) turns all of this off.
    """
    if not envs.VLLM_ENFORCE_STRICT_TOOL_CALLING:
        return
    mode, description, allowed = forced_choice(request.tool_choice)
    specs = tool_specs(request.tools)
    if allowed is not None:
        specs = [spec for spec in specs if spec.name in allowed]
    if mode == "auto" and not any(spec.strict for spec in specs):
        return
    if not specs:
        offered = "none"
        if allowed is not None and tool_specs(request.tools):
            listed = ", ".join(sorted(map(repr, allowed))) or "no function tool"
            offered = f"none of those it lists ({listed})"
        raise VLLMValidationError(
            f"tool_choice {description} needs a function tool to call, "
            f"and the request offers {offered}",
            parameter="tool_choice",
        )
    single_call = getattr(request, "parallel_tool_calls", None) is False
    try:
        structural_tag, unusable = build_structural_tag(specs, mode, single_call), None
        tag = structural_tag.model_dump_json()
    except ValueError as exc:  # a schema the format cannot constrain
        structural_tag, tag, unusable = None, None, str(exc)
        if isinstance(exc, PydanticSerializationError):  # pydantic's depth limit
            deepest = max(specs, key=lambda spec: _nesting(spec.parameters))
            unusable = (
                f"tool {deepest.name!r}: its parameters schema nests too deeply "
                f"({_nesting(deepest.parameters)} levels of objects and arrays) "
                "to be turned into a grammar"
            )
    current = getattr(request, "structured_outputs", None)
    if tag is not None and current is not None and current.structural_tag == tag:
        return  # adjusted already (the same request adjusted twice)
    own = own_constraints(request)
    if own and mode == "auto":
        return  # the request's own constraint applies; strict is not enforced
    if own:
        raise VLLMValidationError(
            f"tool_choice {description} makes the model call a tool, which "
            f"cannot be combined with the request's own {' and '.join(own)}: "
            "send one of them",
            parameter="tool_choice",
        )
    # The grammar applies: the tools' schemas must allow one.
    if unusable is not None:
        raise VLLMValidationError(unusable, parameter="tools")
    refuse_ungrammatical_tools(structural_tag, specs, mode)
    if getattr(request, "use_beam_search", False):
        # vLLM's beam search samples with parameters of its own, without the
        # request's structured outputs: the grammar would not apply.
        needs = f"tool_choice {description}" + (
            " with a strict tool" if mode == "auto" else ""
        )
        raise VLLMValidationError(
            f"use_beam_search cannot be combined with {needs}: vLLM's beam "
            "search does not apply the tool-call grammar; send the request "
            "without use_beam_search",
            parameter="use_beam_search",
        )
    request.structured_outputs = StructuredOutputsParams(structural_tag=tag)


def refuse_ungrammatical_tools(
    structural_tag: Any, specs: Sequence[ToolSpec], mode: Mode
) -> None:
    """400 naming the tool whose schema xgrammar cannot turn into a grammar
    (``constraints.grammar_problem``), before anything is generated."""
    problem = grammar_problem(structural_tag)
    if problem is None:
        return
    culprits = [
        repr(spec.name)
        for spec in specs
        if grammar_problem(build_structural_tag([spec], mode)) is not None
    ]
    which = (
        f"tool {culprits[0]}: its parameters schema"
        if culprits
        else "the tools' parameters schemas"
    )
    raise VLLMValidationError(
        f"{which} cannot be turned into a grammar for the tool call ({problem})",
        parameter="tools",
    )


def refuse_unparsed_allowed_tools(request: Any) -> None:
    """400 for a non-streamed Responses request whose ``tool_choice`` is
    ``allowed_tools``: vLLM 0.32.0 returns that output as text without handing
    it to the tool parser (``DelegatingParser._extract_tool_calls`` parses
    calls only for "auto", "required" and a named function), so its calls
    would arrive as ``output_text``. Streamed requests are parsed."""
    if not isinstance(request, ResponsesRequest) or request.stream:
        return
    if getattr(request.tool_choice, "type", None) == "allowed_tools":
        raise VLLMValidationError(
            'tool_choice "allowed_tools" needs "stream": true with this vLLM '
            "release (0.32.0 does not parse the tool calls of a non-streamed "
            'allowed_tools response); stream the request, or use "required", '
            '"auto" or a named function',
            parameter="tool_choice",
        )


def refuse_uncallable_tools(tools: Iterable[Tool] | None) -> None:
    """Raise vLLM's 400 error naming every tool that could never be called,
    and a name given to two tools (a call names its tool, so the second
    could not be told apart)."""
    all_names = [n for n, _ in _functions(tools)]
    names = [repr(n) for n in all_names if not is_callable_name(n)]
    if names:
        raise VLLMValidationError(
            f"the spark25 tool-call format cannot call the tool(s) {', '.join(names)}"
            ": a tool name must be non-empty and hold no whitespace and no '<'",
            parameter="tools",
        )
    twice = sorted({n for n in all_names if all_names.count(n) > 1})
    if twice:
        raise VLLMValidationError(
            f"the tool name(s) {', '.join(map(repr, twice))} are given to more "
            "than one tool; a spark25 call names its tool, so each name must be "
            "unique",
            parameter="tools",
        )


class Spark25ToolParser(ToolParser):
    """vLLM tool parser for Spark2_5 (``--tool-call-parser spark25``)."""

    # Required / named tool_choice are parsed by this parser (in its own
    # format, which adjust_request constrains); the JSON-array path vLLM uses
    # otherwise would never see this format.
    supports_required_and_named = False
    # Not vLLM's structural-tag path: adjust_request builds the grammar itself
    # (constraints.py), so that it follows the chat template's layout and can
    # refuse a forced call combined with the request's own structured output.
    # Both are the base class's defaults, set here to say so: vLLM's
    # --tool-strict-level has no effect on this parser (docs/tool_parser.md).
    structural_tag_model = None
    default_tool_strict_level = None
    # Streaming is driven by deltas alone and vLLM calls finish_streaming()
    # at the end of the stream, so text held back at the end is not lost.
    engine_based_streaming = True

    def __init__(self, tokenizer: TokenizerLike, tools: list[Tool] | None = None):
        super().__init__(tokenizer, tools)
        # One delta may end a call and carry the text after it; vLLM's
        # Responses stream would take that text first (vllm_seam.responses).
        vllm_seam.continue_open_call_first()
        self._raw_tools = tools
        self._scanner: Spark25CallScanner | None = None
        # The output ends at the first turn-ending token (see turns.py).
        self._cutter = TurnCutter()
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
            refuse_uncallable_tools(request.tools)
            # The tags are special tokens: keep them in the detokenized text.
            request.skip_special_tokens = False
            # tool_choice "required" / named and strict tools: the grammar.
            constrain_tool_calls(request)
            refuse_unparsed_allowed_tools(request)
        return super().adjust_request(request)

    def _schemas_for(self, request: Any) -> dict[str, Any]:
        """The schemas of the tools whose calls are read: the request's,
        and for a Responses ``allowed_tools`` choice only the listed ones (a
        block naming another tool stays content, as an unknown tool's does:
        the client did not allow it, whether or not a grammar held the model
        to the list)."""
        tools = getattr(request, "tools", None)
        schemas = tool_schemas(tools if tools is not None else self._raw_tools)
        tool_choice = getattr(request, "tool_choice", None)
        if getattr(tool_choice, "type", None) == "allowed_tools":
            _, _, allowed = forced_choice(tool_choice)
            schemas = {n: s for n, s in schemas.items() if n in (allowed or ())}
        return schemas

    @staticmethod
    def _calls_disabled(request: Any) -> bool:
        return getattr(request, "tool_choice", None) == "none"

    # -- non-streaming ----------------------------------------------------------
    def extract_tool_calls(
        self, model_output: str, request: ChatCompletionRequest
    ) -> ExtractedToolCallInformation:
        model_output = cut_at_turn_end(model_output)
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
        delta_text = self._cutter.feed(delta_text)
        if self._scanner is None:
            schemas = self._schemas_for(request)
            self._passthrough = self._calls_disabled(request) or not schemas
            self._scanner = Spark25CallScanner(schemas)
        if self._passthrough:
            return DeltaMessage(content=delta_text) if delta_text else None
        return self._to_delta(self._scanner.feed(delta_text), final=False)

    def finish_streaming(self) -> DeltaMessage | None:
        """Called by vLLM once the stream ends: settle held-back text."""
        rest = self._cutter.finish()
        if self._scanner is None or self._passthrough:
            return DeltaMessage(content=rest) if rest else None
        events = self._scanner.feed(rest) + self._scanner.finish()
        return self._to_delta(events, final=True)

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
