"""End to end: ``vllm serve`` (CPU build) + ``--tool-call-parser spark25``.

One server for the whole module, on 127.0.0.1, serving the tiny random
Spark2_5 checkpoint. The model is made to emit tool calls through the real
engine, detokenizer and parser with vLLM's structured outputs:

* a Lark grammar that names the tag token ids (``<[ID]>``), so the real
  special tokens come out (the parser's adjust_request keeps them in the text);
* a regex forcing the same text; xgrammar meets it with ordinary byte tokens
  (and, where it likes, a tag's special token): the tags arrive spelled out.

Both are checked streamed and non-streamed with the official ``openai`` client
against hand-written expected calls, plus a load test and bad requests (an
invalid tools schema; tools whose names the format cannot call, which the
parser's adjust_request refuses with a 400 naming them).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

MODEL = "spark2_5-tiny"
STARTUP_TIMEOUT_S = 300
REQUEST_TIMEOUT_S = 120

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather forecast for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "set_alarm",
            "parameters": {
                "type": "object",
                "properties": {
                    "enabled": {"type": "boolean"},
                    "labels": {"type": "array", "items": {"type": "string"}},
                    "note": {"type": ["string", "null"]},
                },
            },
        },
    },
]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]

# (text the model is forced to write, expected content, expected calls)
ONE_CALL = (
    "Sure. <tool_call>get_weather\n"
    "<arg_key>city</arg_key><arg_value>Paris</arg_value>\n"
    "<arg_key>days</arg_key><arg_value>3</arg_value>\n</tool_call>",
    "Sure. ",
    [("get_weather", '{"city": "Paris", "days": 3}')],
)
TWO_CALLS = (
    "<tool_call>set_alarm\n<arg_key>enabled</arg_key><arg_value>true</arg_value>\n"
    '<arg_key>labels</arg_key><arg_value>["wake", "café"]</arg_value>\n'
    "<arg_key>note</arg_key><arg_value>null</arg_value>\n</tool_call>\n"
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Zürich</arg_value>"
    "</tool_call> Done.",
    "\n Done.",
    [
        ("set_alarm", '{"enabled": true, "labels": ["wake", "café"], "note": null}'),
        ("get_weather", '{"city": "Zürich"}'),
    ],
)
TAGS = [
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
]


def regex_for(text: str) -> str:
    return re.escape(text)


def lark_for(text: str, tag_ids: dict[str, int]) -> str:
    """A Lark grammar writing ``text`` with every tag as its special token."""
    pattern = "(" + "|".join(re.escape(t) for t in TAGS) + ")"
    items = []
    for piece in re.split(pattern, text):
        if not piece:
            continue
        items.append(f"<[{tag_ids[piece]}]>" if piece in tag_ids else json.dumps(piece))
    return "start: " + " ".join(items) + "\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> int:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from transformers import AutoTokenizer

    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path_factory.mktemp("spark25-serve") / "ckpt")
    tokenizer = AutoTokenizer.from_pretrained(path)
    tag_ids = {tag: tokenizer.convert_tokens_to_ids(tag) for tag in TAGS}
    port = _free_port()
    vllm_bin = Path(sys.executable).with_name("vllm")
    cmd = [
        str(vllm_bin), "serve", str(path),
        "--served-model-name", MODEL,
        "--host", "127.0.0.1", "--port", str(port),
        # 1024, not 512: the tool list in the prompt takes ~440 tiny-BPE tokens.
        "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024",
        "--enable-auto-tool-choice", "--tool-call-parser", "spark25",
    ]  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    log_path = tmp_path_factory.mktemp("spark25-serve-log") / "server.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed in teardown
    proc = subprocess.Popen(
        cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"vllm serve exited ({proc.returncode}):\n{_tail(log_path)}"
                )
            try:
                if _get(base + "/health") == 200:
                    break
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not healthy in time:\n{_tail(log_path)}")
            time.sleep(1.0)
        yield {"base": base, "tag_ids": tag_ids, "log": log_path, "proc": proc}
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.close()


def _tail(path: Path, lines: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    return OpenAI(
        base_url=server["base"] + "/v1",
        api_key="EMPTY",
        timeout=REQUEST_TIMEOUT_S,
        max_retries=0,
    )


def _constraint(kind: str, text: str, tag_ids: dict[str, int]) -> dict:
    if kind == "lark":
        return {"grammar": lark_for(text, tag_ids)}
    return {"regex": regex_for(text)}


def _request_kwargs(kind: str, text: str, tag_ids, **extra) -> dict:
    return {
        "model": MODEL,
        "messages": MESSAGES,
        "tools": TOOLS,
        "tool_choice": extra.pop("tool_choice", "auto"),
        "temperature": 0.0,
        "max_tokens": 500,  # byte-spelled tags take many tokens
        "extra_body": {"structured_outputs": _constraint(kind, text, tag_ids)},
        **extra,
    }


def _collect_stream(stream) -> tuple[str, list[tuple[str, str]], str | None, list]:
    content = ""
    calls: dict[int, dict] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            for tc in delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": None, "name": "", "args": ""})
                entry["id"] = entry["id"] or tc.id
                if tc.function and tc.function.name:
                    entry["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    entry["args"] += tc.function.arguments
            finish = choice.finish_reason or finish
    ordered = [calls[i] for i in sorted(calls)]
    return content, [(c["name"], c["args"]) for c in ordered], finish, ordered


CASES = {"one_call": ONE_CALL, "two_calls": TWO_CALLS}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("kind", ["lark", "regex"])
def test_non_streaming_tool_calls_are_exact(server, client, kind, case):
    text, content, calls = CASES[case]
    response = client.chat.completions.create(
        **_request_kwargs(kind, text, server["tag_ids"])
    )
    message = response.choices[0].message
    got = [(tc.function.name, tc.function.arguments) for tc in message.tool_calls or []]
    assert got == calls
    assert message.content == content
    assert response.choices[0].finish_reason == "tool_calls"
    assert all(tc.id and tc.type == "function" for tc in message.tool_calls)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("kind", ["lark", "regex"])
def test_streamed_tool_calls_are_exact(server, client, kind, case):
    text, content, calls = CASES[case]
    stream = client.chat.completions.create(
        **_request_kwargs(kind, text, server["tag_ids"]), stream=True
    )
    got_content, got_calls, finish, raw = _collect_stream(stream)
    assert got_calls == calls
    assert got_content == content
    assert finish == "tool_calls"
    assert len({c["id"] for c in raw}) == len(raw) and all(c["id"] for c in raw)


def test_special_tokens_really_reach_the_parser(server, client):
    """The Lark run emits the tag token ids, and the parser still sees the tags."""
    text, content, calls = ONE_CALL
    response = client.chat.completions.create(
        **_request_kwargs("lark", text, server["tag_ids"]), logprobs=True
    )
    choice = response.choices[0]
    tokens = [entry.token for entry in choice.logprobs.content]
    for tag in ("<tool_call>", "<arg_key>", "</arg_value>", "</tool_call>"):
        assert tag in tokens  # one special token each
    got = [
        (tc.function.name, tc.function.arguments) for tc in choice.message.tool_calls
    ]
    assert got == calls


def test_tool_choice_none_returns_no_calls(server, client):
    text, _, _ = ONE_CALL
    response = client.chat.completions.create(
        **_request_kwargs("regex", text, server["tag_ids"], tool_choice="none")
    )
    message = response.choices[0].message
    assert not message.tool_calls
    # With tool_choice="none" special tokens are skipped as usual; a regex may
    # be met by a tag's special token or by its bytes, so compare without tags.
    untagged = re.sub("|".join(re.escape(t) for t in TAGS), "", text)
    assert re.sub("|".join(re.escape(t) for t in TAGS), "", message.content) == untagged


def test_truncated_call_is_content_and_streams_the_same_text(server, client):
    text = "Hmm <tool_call>get_weather\n<arg_key>city</arg_key><arg_value>Par"
    kwargs = _request_kwargs("regex", text, server["tag_ids"])
    response = client.chat.completions.create(**kwargs)
    assert response.choices[0].message.content == text
    assert not response.choices[0].message.tool_calls
    content, calls, _, _ = _collect_stream(
        client.chat.completions.create(**kwargs, stream=True)
    )
    assert content == text  # nothing lost; the started call stays unfinished
    assert calls == [("get_weather", '{"city": "Par')]


def test_required_tool_choice_parses_native_format(server, client):
    text, content, calls = ONE_CALL
    response = client.chat.completions.create(
        **_request_kwargs("regex", text, server["tag_ids"], tool_choice="required")
    )
    message = response.choices[0].message
    assert [
        (tc.function.name, tc.function.arguments) for tc in message.tool_calls
    ] == calls


def test_32_concurrent_tool_call_requests(server):
    from openai import AsyncOpenAI

    async def one(client, i: int):
        text, content, calls = ONE_CALL if i % 2 else TWO_CALLS
        kind = "regex" if i % 4 < 2 else "lark"
        kwargs = _request_kwargs(kind, text, server["tag_ids"])
        if i % 3 == 0:
            content_s, calls_s = "", {}
            stream = await client.chat.completions.create(**kwargs, stream=True)
            async for chunk in stream:
                delta = chunk.choices[0].delta if chunk.choices else None
                if delta is None:
                    continue
                content_s += delta.content or ""
                for tc in delta.tool_calls or []:
                    entry = calls_s.setdefault(tc.index, ["", ""])
                    entry[0] += (tc.function.name or "") if tc.function else ""
                    entry[1] += (tc.function.arguments or "") if tc.function else ""
            return (
                content_s,
                [tuple(calls_s[k]) for k in sorted(calls_s)],
                content,
                calls,
            )
        response = await client.chat.completions.create(**kwargs)
        message = response.choices[0].message
        got = [(tc.function.name, tc.function.arguments) for tc in message.tool_calls]
        return message.content, got, content, calls

    async def main():
        client = AsyncOpenAI(
            base_url=server["base"] + "/v1", api_key="EMPTY", timeout=300, max_retries=0
        )
        try:
            return await asyncio.wait_for(
                asyncio.gather(*(one(client, i) for i in range(32))), timeout=600
            )
        finally:
            await client.close()

    results = asyncio.run(main())
    assert len(results) == 32
    for got_content, got_calls, content, calls in results:
        assert got_calls == calls
        assert (got_content or "") == (content or "")


def _post_refused(server, tools: list, **extra) -> tuple[int, dict]:
    """POST a chat request that must be refused: (status, JSON error body)."""
    body = {"model": MODEL, "messages": MESSAGES, "tools": tools, "max_tokens": 5}
    request = urllib.request.Request(
        server["base"] + "/v1/chat/completions",
        data=json.dumps({**body, **extra}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S)
    return excinfo.value.code, json.loads(excinfo.value.read())


def _assert_still_serving(server, client) -> None:
    assert _get(server["base"] + "/health") == 200
    text, content, calls = ONE_CALL
    response = client.chat.completions.create(
        **_request_kwargs("regex", text, server["tag_ids"])
    )
    got = [
        (tc.function.name, tc.function.arguments)
        for tc in response.choices[0].message.tool_calls
    ]
    assert got == calls
    assert server["proc"].poll() is None


def test_invalid_tools_schema_gets_4xx_and_server_keeps_serving(server, client):
    tools = [{"type": "function", "function": {"parameters": "not a schema"}}]
    code, _ = _post_refused(server, tools)
    assert 400 <= code < 500
    _assert_still_serving(server, client)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_uncallable_tool_name_gets_400_naming_it(server, client, stream):
    """adjust_request refuses a tool the format cannot call; nothing else breaks."""
    bad = [{"type": "function", "function": {"name": n}} for n in ("a b", "a\nb")]
    code, error = _post_refused(server, [*TOOLS, *bad], stream=stream)
    assert code == 400
    assert error["error"]["type"] == "BadRequestError"
    message = error["error"]["message"]
    assert "'a b'" in message and "'a\\nb'" in message
    assert "get_weather" not in message and "set_alarm" not in message
    _assert_still_serving(server, client)
