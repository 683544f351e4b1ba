"""Streaming replay with a real tokenizer, through vLLM's own parser driver.

The tiny checkpoint's byte-level BPE tokenizer has the tool tags as special
tokens. Each table case is tokenized, decoded back incrementally the way a
detokenizer does (never splitting a UTF-8 character), and fed to the
``Parser`` vLLM builds for ``--tool-call-parser spark25`` in deltas of 1, 2,
3, 5 and 8 tokens (speculative decoding sends several tokens at once). The
streamed content and calls must equal the hand-written table and vLLM's
non-streaming result. The same runs with the tags spelled in ordinary byte
tokens, as a regex-constrained decode produces them.
"""

from __future__ import annotations

import json

import pytest
from test_tool_parser import (
    CASES,
    TOOLS,
    Case,
    StreamResult,
    assert_stream_matches_case,
    make_request,
    merge_tool_call_delta,
)

TOKENS_PER_DELTA = [1, 2, 3, 5, 8]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path_factory.mktemp("spark25-tok") / "ckpt")
    return AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def parser_cls():
    from vllm.parser import ParserManager
    from vllm.plugins import load_general_plugins

    load_general_plugins()  # runs the plugin's register() via its entry point
    cls = ParserManager.get_parser(tool_parser_name="spark25", enable_auto_tools=True)
    assert cls is not None
    return cls


def tokenize(tokenizer, text: str, tags_as_special_tokens: bool) -> list[int]:
    ids = tokenizer.encode(
        text, add_special_tokens=False, split_special_tokens=not tags_as_special_tokens
    )
    assert tokenizer.decode(ids, skip_special_tokens=False) == text
    return ids


def detokenized_deltas(tokenizer, ids: list[int], group: int):
    """(delta_text, delta_ids) per step of ``group`` tokens, like a detokenizer.

    Text that ends in an incomplete UTF-8 character is held back until the
    character completes, so a delta may carry no text.
    """
    sent = ""
    for start in range(0, len(ids), group):
        text = tokenizer.decode(ids[: start + group], skip_special_tokens=False)
        if text.endswith("\ufffd") and start + group < len(ids):
            text = sent  # hold back the partial character
        assert text.startswith(sent)
        yield text[len(sent) :], ids[start : start + group]
        sent = text


def stream_through_vllm(parser_cls, tokenizer, request, ids, group) -> StreamResult:
    parser = parser_cls(tokenizer, request.tools)
    request = parser.adjust_request(request)
    content = ""
    calls: dict[int, dict] = {}
    steps = list(detokenized_deltas(tokenizer, ids, group)) or [("", [])]
    for n, (delta_text, delta_ids) in enumerate(steps):
        delta = parser.parse_delta(
            delta_text,
            delta_ids,
            request,
            prompt_token_ids=[1, 2, 3],
            finished=n == len(steps) - 1,
        )
        if delta is None:
            continue
        content += delta.content or ""
        for tc in delta.tool_calls:
            entry = merge_tool_call_delta(calls, tc)
            entry["id"] = entry["id"] or tc.id
    return StreamResult(content, [calls[i] for i in sorted(calls)])


def non_streaming_through_vllm(parser_cls, tokenizer, request, text):
    parser = parser_cls(tokenizer, request.tools)
    request = parser.adjust_request(request)
    _, content, calls = parser.parse(text, request, enable_auto_tools=True)
    return content, [(c.name, c.arguments) for c in calls or []]


@pytest.mark.parametrize("special", [True, False], ids=["tag_tokens", "byte_tokens"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_token_replay_matches_table_and_non_streaming(
    parser_cls, tokenizer, case: Case, special: bool
):
    request = make_request()
    ids = tokenize(tokenizer, case.output, special)
    if "<tool_call>" in case.output:
        tag_id = tokenizer.convert_tokens_to_ids("<tool_call>")
        assert (tag_id in ids) is special

    content, calls = non_streaming_through_vllm(
        parser_cls, tokenizer, request, case.output
    )
    assert calls == case.calls
    # vLLM's serving layer returns whitespace-only content as null with calls.
    expected_content = case.content
    if case.calls and not (case.content or "").strip():
        expected_content = None
    assert content == expected_content

    for group in TOKENS_PER_DELTA:
        stream = stream_through_vllm(parser_cls, tokenizer, make_request(), ids, group)
        assert_stream_matches_case(stream, case)
        # Streamed and non-streamed agree exactly.
        assert stream.content == (content or "")
        complete = [
            (c["name"], c["arguments"])
            for c in stream.calls
            if _is_object(c["arguments"])
        ]
        assert complete == calls


def _is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def test_multi_token_deltas_carry_whole_tags(parser_cls, tokenizer):
    """One delta holding a whole call (as speculative decoding may send)."""
    text = "Hi<tool_call>ping</tool_call><tool_call>get_weather\n<arg_key>city"
    text += "</arg_key><arg_value>Oslo</arg_value></tool_call>!"
    ids = tokenize(tokenizer, text, True)
    stream = stream_through_vllm(parser_cls, tokenizer, make_request(), ids, len(ids))
    assert stream.content == "Hi!"
    assert [(c["name"], c["arguments"]) for c in stream.calls] == [
        ("ping", "{}"),
        ("get_weather", '{"city": "Oslo"}'),
    ]


def test_tools_schema_used_for_types_in_replay(parser_cls, tokenizer):
    text = "<tool_call>typed\n<arg_key>count</arg_key><arg_value>10</arg_value>\n"
    text += "<arg_key>ratio</arg_key><arg_value>0.5</arg_value>\n</tool_call>"
    ids = tokenize(tokenizer, text, True)
    for group in TOKENS_PER_DELTA:
        stream = stream_through_vllm(parser_cls, tokenizer, make_request(), ids, group)
        assert [(c["name"], c["arguments"]) for c in stream.calls] == [
            ("typed", '{"count": 10, "ratio": 0.5}')
        ]
    assert TOOLS[1]["function"]["name"] == "typed"
