# SPDX-License-Identifier: Apache-2.0
"""The order in which vLLM's Responses stream takes the parts of a delta.

vLLM 0.32.0 splits each ``DeltaMessage`` of a streamed ``/v1/responses``
request into reasoning, then content, then tool calls
(``responses.streaming_events.split_delta``), and its event state machine
closes the open output item whenever the kind changes. A delta that carries
the rest of an open call's arguments *and* the text after the call (the
``spark25`` parser sends one when several tokens arrive at once, or when a
call is cut off and its text becomes content) is then taken as content
first: the call's item is closed, the arguments arrive for an item that no
longer exists, and vLLM opens a function-call item without a name, which
fails validation and ends the stream without ``response.completed``.

:func:`continue_open_call_first` wraps the splitter so that tool-call parts
that continue a call (no name: only an open call can be continued) come
before the content. Every delta vLLM's own order takes without failing is
split as before: a continuation after content always failed.
"""

from __future__ import annotations

import functools
from typing import Any

from vllm_spark2_5_plugin.vllm_seam.hooks import WRAPPED as _WRAPPED
from vllm_spark2_5_plugin.vllm_seam.hooks import expect as _expect
from vllm_spark2_5_plugin.vllm_seam.hooks import hook_point as _hook_point
from vllm_spark2_5_plugin.vllm_seam.hooks import params as _params


def _continues_a_call(part: Any) -> bool:
    calls = part.tool_calls
    return (
        bool(calls)
        and part.content is None
        and part.reasoning is None
        and all(call.function is None or not call.function.name for call in calls)
    )


def continue_open_call_first() -> None:
    """Make vLLM's Responses stream take a delta's continuation of the open
    call before its content (idempotent)."""
    from vllm.entrypoints.openai.responses import serving

    current = serving.split_delta
    if getattr(current, _WRAPPED, False):
        return

    @functools.wraps(current)
    def split_delta(delta: Any) -> list[Any]:
        parts = current(delta)
        continuations = [p for p in parts if _continues_a_call(p)]
        if not continuations or len(parts) < 2:
            return parts
        others = [p for p in parts if all(p is not c for c in continuations)]
        reasoning = [p for p in others if p.reasoning is not None]
        rest = [p for p in others if p.reasoning is None]
        return reasoning + continuations + rest

    setattr(split_delta, _WRAPPED, True)
    serving.split_delta = split_delta


@_hook_point(
    "vllm.entrypoints.openai.responses.serving streams through the module-level "
    "split_delta(delta), which puts a delta's content before its tool calls"
)
def _check_responses_split_delta() -> None:
    from vllm.entrypoints.generate.base.protocol import (
        DeltaFunctionCall,
        DeltaMessage,
        DeltaToolCall,
    )
    from vllm.entrypoints.openai.responses import serving, streaming_events

    _expect(callable(getattr(serving, "split_delta", None)), "serving.split_delta")
    original = getattr(serving.split_delta, "__wrapped__", serving.split_delta)
    _expect(original is streaming_events.split_delta, "serving imports split_delta")
    _expect(_params(original)[:1] == ["delta"], "split_delta(delta)")
    tail = DeltaToolCall(index=0, function=DeltaFunctionCall(arguments="}"))
    parts = original(DeltaMessage(content="x", tool_calls=[tail]))
    _expect(
        [p.content is not None for p in parts] == [True, False],
        "content is split off before the tool calls",
    )
