# SPDX-License-Identifier: Apache-2.0
"""Fuzz of the whole request path: ``vllm serve`` + chat template + ``spark25``.

One server (the tiny random checkpoint, ``--enable-auto-tool-choice
--tool-call-parser spark25``) gets a fixed, seeded set of random chat requests
(``random.Random(SEED)``, so every run sends the same requests):

* histories of system / user / assistant / tool turns, contents as strings or
  text parts; assistant turns with history tool calls whose ``arguments`` are
  random JSON objects (nested values of every JSON type), empty, or -- in some
  requests -- not a JSON object (``"not json"``, ``"[1,2]"``, ``"null"``...),
  which the plugin refuses with exactly 400;
* random tool lists: callable names (``get``, ``f.x``, ``a>b``, ``名前``...),
  parameters of every JSON type (unions and ``anyOf`` too), and in some
  requests a name the format cannot call (``a b``, ``<|user|>``...), which
  must get exactly 400 unless ``tool_choice`` is ``"none"``;
* texts everywhere (contents, tool results, descriptions, parameter names,
  history argument keys and values) built from the format's tags, role tokens,
  tag fragments, unicode, quotes and long repetitions;
* model outputs of two kinds: free sampling from the random model (random
  temperature, seed, small ``max_tokens``, ``logit_bias`` on the tag tokens
  and on one-token tool names so that whole and broken calls come out,
  ``ignore_eos``, ``include_stop_str_in_output``), and outputs forced through
  ``structured_outputs`` (a Lark grammar writing the tags as their special
  tokens, or a regex that xgrammar meets with byte tokens) from random texts
  made of valid, broken, cut-off, unknown-name and repeated-key calls, role
  tokens spelled out and free text;
* streamed and not, ``tool_choice`` ``"auto"``, ``"none"`` or absent,
  sometimes ``n=2`` or ``logprobs``.

Every request must get a 200 or an HTTP 4xx with a JSON error body -- never a
5xx, an error inside a stream, or a dropped connection. A 4xx must be one the
request asked for (non-object history arguments, uncallable tool names) or,
for random long texts, the prompt not fitting ``--max-model-len``.

A 200 must be well-formed: content a string or null, each tool call with an
id, type ``function``, a name among the request's callable tools (only when
calls are enabled), arguments a JSON object without repeated keys;
``finish_reason`` consistent with the calls. A stream must be valid SSE ending
with ``data: [DONE]``, one finish reason per choice, each call's id and name
sent once.

**Nothing lost** -- checked on the token ids the response returns
(``return_token_ids``): let ``T`` be those ids decoded by the tiny tokenizer
(special tokens kept when the parser is active -- tools and ``tool_choice``
not ``"none"`` -- and skipped otherwise, as vLLM does), cut at the first
turn-ending token (``<|endoftext|>`` or a role token, the documented place
where the parser drops text). Then the content must be ``T`` with exactly the
returned calls cut out: each call is one block from a ``<tool_call>`` to the
next ``</tool_call>``, in order, whose name is the call's name and whose
``<arg_key>`` keys are the call's argument keys in order, each value being
the raw text (string values) or that text converted (typed values). When
calls were made, whitespace-only content may be null (non-streaming) or not
sent (streaming), as documented. One tolerance: a trailing incomplete UTF-8
sequence, decoded by the tokenizer as U+FFFD, never becomes text in vLLM's
incremental detokenizer, so ``T`` may end without it. In a stream, only the
calls whose arguments close (valid JSON) count; an abandoned call's raw text
must be in the content.

Each streamed request is also sent once more without streaming (same seed):
when both produced the same token ids, the concatenated deltas must equal the
non-streamed message (content, and the closed calls in order).

After all requests the server must be healthy and still serve a known call,
and its log must hold no ``Traceback`` and no ``ERROR`` line. (A parser that
raises is not a 5xx: vLLM 0.32.0 answers a ``ValueError`` from it with a 400
and logs nothing, so a 400 the request did not ask for fails too.)

The server's token budget per step (``--max-num-batched-tokens``) holds the
prompts of all concurrent requests, so no prompt is prefilled in chunks: in
vLLM 0.32.0's CPU build a request with a ``seed`` whose prompt is prefilled in
chunks kills the engine (``RuntimeError: CPU Generator does not use offset``
in ``GPUModelRunner._bookkeeping_sync``, which rewinds the request's generator
as CUDA's Philox generators allow and CPU generators do not). That is vLLM's
CPU runner, not the plugin; the README's troubleshooting section says how to
avoid it. ``SEEDED_SAMPLING = False`` leaves the seeds out.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from vllm_helpers import http_status, vllm_server

pytestmark = pytest.mark.slow

MODEL = "spark2_5-tiny"
SEED = 20261130
#: Fuzzed requests (streamed ones are sent twice: streamed and not).
N_REQUESTS = 400
WORKERS = 6
MAX_MODEL_LEN = 2048
#: Every concurrent prompt (x2: some requests ask for n=2) fits in one step:
#: no chunked prefill (see above).
MAX_NUM_BATCHED_TOKENS = MAX_MODEL_LEN * WORKERS * 2
#: Free-sampling requests carry a ``seed`` (clients do; it also lets the
#: non-streamed twin of a stream sample the same tokens).
SEEDED_SAMPLING = True
STARTUP_TIMEOUT_S = 300
REQUEST_TIMEOUT_S = 120

TOOL_TAGS = (
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
)
RESPONSE_TAGS = ("<tool_response>", "</tool_response>")
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")
TURN_END = ("<|endoftext|>", *ROLE_TOKENS)
CALL_START, CALL_END = TOOL_TAGS[0], TOOL_TAGS[1]

# -- random texts ----------------------------------------------------------------------

TEXT_PIECES = [
    *TOOL_TAGS,
    *RESPONSE_TAGS,
    *TURN_END,
    "<|mask|>",
    "<tool_",
    "</arg_val",
    "<|",
    "|>",
    "<",
    ">",
    "</",
    "<b>x</b>",
    "a < b",
    "{{ x }}",
    "{% if %}",
    "Paris",
    "get_weather",
    "city",
    " the weather ",
    "Hello!",
    "3",
    "-1.5e3",
    "true",
    "null",
    '{"a": [1, 2]}',
    "[1",
    "\n",
    " ",
    "\t",
    "\r\n",
    "\u00a0",
    "\u200b",
    "é",
    "Zürich",
    "東京の天気",
    "🌧",
    "\U0001f600",
    '"',
    "\\",
    "\\u0000",
    "'",
]


def rand_text(rng: random.Random, max_pieces: int = 8) -> str:
    parts = []
    for _ in range(rng.randint(0, max_pieces)):
        if rng.random() < 0.2:
            parts.append(
                "".join(
                    rng.choice("abcxyz éü東<>|/ \n") for _ in range(rng.randint(1, 6))
                )
            )
        else:
            parts.append(rng.choice(TEXT_PIECES))
    text = "".join(parts)
    if rng.random() < 0.015:  # a long one
        text = (text or "long ") * rng.randint(20, 80)
    return text


# -- random tools ----------------------------------------------------------------------

#: Callable names; the first ones are single tokens of the tiny tokenizer, so
#: the random model, biased towards them, writes real calls.
CALLABLE_NAMES = [
    "get",
    "weather",
    "city",
    "Paris",
    "tags",
    "get_weather",
    "f.x",
    "a>b",
    "x/y",
    "über",
    "名前",
    "t-1",
    "ns__fn",
    "A" * 64,
]
ONE_TOKEN_NAMES = ["get", "weather", "city", "Paris", "tags"]
UNCALLABLE_NAMES = [
    "a b",
    "x<y",
    "<|user|>",
    "x</tool_call>",
    "tab\tname",
    "nb\u00a0sp",
]
KEY_POOL = ["city", "days", "unit", "tags", "a", "k é", "x y", "<arg_key>", "名"]
TYPES = [
    {"type": "string"},
    {"type": "integer"},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "null"},
    {"type": "object"},
    {"type": "array", "items": {"type": "integer"}},
    {"type": ["string", "null"]},
    {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
    {},
]


def rand_schema_properties(rng: random.Random) -> dict[str, Any]:
    props: dict[str, Any] = {}
    if rng.random() < 0.25:  # one parameter of every type
        for i, schema in enumerate(TYPES):
            props[f"p{i}"] = dict(schema)
    for _ in range(rng.randint(0, 3)):
        key = rng.choice(KEY_POOL) if rng.random() < 0.8 else rand_text(rng, 2)
        props[key] = dict(rng.choice(TYPES))
        if rng.random() < 0.3:
            props[key]["description"] = rand_text(rng, 3)
    return props


def rand_tools(rng: random.Random, uncallable: bool) -> list[dict]:
    names = rng.sample(CALLABLE_NAMES, rng.randint(1, 4))
    if rng.random() < 0.5:
        names[0] = rng.choice(ONE_TOKEN_NAMES)
    if uncallable:
        names.append(rng.choice(UNCALLABLE_NAMES))
    tools = []
    for name in dict.fromkeys(names):
        function: dict[str, Any] = {"name": name}
        if rng.random() < 0.6:
            function["description"] = rand_text(rng, 4)
        if rng.random() < 0.85:
            function["parameters"] = {
                "type": "object",
                "properties": rand_schema_properties(rng),
            }
        tools.append({"type": "function", "function": function})
    return tools


def schemas_of(tools: list[dict]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for tool in tools:
        function = tool["function"]
        props = (function.get("parameters") or {}).get("properties") or {}
        out.setdefault(function["name"], props)
    return out


def callable_name(name: str) -> bool:
    return bool(name) and "<" not in name and not any(c.isspace() for c in name)


# -- random histories ------------------------------------------------------------------


def rand_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 2 else 6)
    if kind == 0:
        return rand_text(rng, 3)
    if kind == 1:
        return rng.randint(-(10**12), 10**12)
    if kind == 2:
        return rng.choice([0.5, -1.5e-7, 1e300, 3.0])
    if kind == 3:
        return rng.random() < 0.5
    if kind == 4:
        return None
    if kind == 5:
        return rng.choice(["", "<tool_call>x</tool_call>", "a\nb"])
    if kind == 6:
        return [rand_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {
        rand_text(rng, 2): rand_json(rng, depth + 1) for _ in range(rng.randint(0, 3))
    }


BAD_ARGUMENTS = ["not json", "[1,2]", "42", '"a string"', "null", "{", "true"]


def rand_content(rng: random.Random) -> Any:
    if rng.random() < 0.2:
        return [
            {"type": "text", "text": rand_text(rng)} for _ in range(rng.randint(1, 3))
        ]
    return rand_text(rng)


def rand_messages(
    rng: random.Random, tools: list[dict], bad_arguments: bool
) -> tuple[list[dict], int | None]:
    """Random history; with ``bad_arguments`` one history call has arguments
    that are not a JSON object (returns that message's index)."""
    messages: list[dict] = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": rand_content(rng)})
    messages.append({"role": "user", "content": rand_content(rng)})
    pending_ids: list[str] = []
    bad_index = None
    for _ in range(rng.randint(0, 4)):
        role = rng.choice(["user", "assistant", "assistant", "tool"])
        if role == "tool" and not pending_ids:
            role = "assistant"
        if role == "user":
            messages.append({"role": "user", "content": rand_content(rng)})
        elif role == "tool":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": pending_ids.pop(0),
                    "content": rand_content(rng),
                }
            )
        else:
            message: dict[str, Any] = {"role": "assistant"}
            message["content"] = rng.choice([None, rand_text(rng)])
            calls = []
            for _ in range(rng.randint(0, 2)):
                name = (
                    rng.choice(tools)["function"]["name"]
                    if tools and rng.random() < 0.8
                    else rng.choice(CALLABLE_NAMES)
                )
                r = rng.random()
                if r < 0.7:
                    args = {
                        rng.choice(KEY_POOL)
                        if rng.random() < 0.6
                        else rand_text(rng, 2): (rand_json(rng))
                        for _ in range(rng.randint(0, 3))
                    }
                    arguments = json.dumps(args, ensure_ascii=rng.random() < 0.5)
                else:
                    arguments = rng.choice(["", "{}", " {} "])
                call_id = f"call_{len(messages)}_{len(calls)}"
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": arguments},
                    }
                )
                pending_ids.append(call_id)
            if calls:
                message["tool_calls"] = calls
            elif message["content"] is None:
                message["content"] = ""
            messages.append(message)
    if bad_arguments:
        call = {
            "id": "call_bad",
            "type": "function",
            "function": {
                "name": rng.choice(CALLABLE_NAMES),
                "arguments": rng.choice(BAD_ARGUMENTS),
            },
        }
        bad_index = len(messages)
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append(
            {"role": "tool", "tool_call_id": "call_bad", "content": rand_text(rng)}
        )
    if rng.random() < 0.7 and messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": rand_content(rng)})
    return messages, bad_index


# -- random model outputs --------------------------------------------------------------

VALUE_TEXTS = [
    "Paris",
    "3",
    "007",
    "-2",
    "1.5e3",
    "1e999",
    "٣",
    "True",
    "false",
    "null",
    '{"a": 1}',
    "[1, 2]",
    "[1",
    " x ",
    "a < b",
    "</arg_val",
    "é🌧",
    "",
]


def rand_call_text(rng: random.Random, schemas: dict[str, dict]) -> str:
    """One call-like block: valid, or broken in one of many ways."""
    names = list(schemas) or ["get"]
    r = rng.random()
    if r < 0.7:
        name = rng.choice(names)
    elif r < 0.8:
        name = rng.choice(names)[:-1] or "x"  # a prefix of a name
    elif r < 0.9:
        name = rng.choice(names) + "x"
    else:
        name = rand_text(rng, 2)
    ws = lambda: rng.choice(["", "", "\n", " ", " \n", "\t"])  # noqa: E731
    clean = rng.random() < 0.5  # well-formed, if the name is a tool's
    text = CALL_START + ws() + name + ws()
    props = list(schemas.get(name, {})) or KEY_POOL
    keys = [rng.choice(props) for _ in range(rng.randint(0, 3))]
    if clean:
        keys = list(dict.fromkeys(k.strip() for k in keys))
    for key in keys:
        if rng.random() < 0.2:
            key = " " + key + " "
        value = rng.choice(VALUE_TEXTS)
        text += f"{ws()}<arg_key>{key}</arg_key>{ws()}<arg_value>{value}"
        if clean or rng.random() < 0.9:
            text += "</arg_value>"
        if not clean and rng.random() < 0.1:
            text += rng.choice(["junk", "<arg_value>", "<tool_call>"])
    if clean or rng.random() < 0.8:
        text += ws() + CALL_END
    return text


def rand_output_text(rng: random.Random, schemas: dict[str, dict]) -> str:
    parts = []
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if r < 0.55:
            parts.append(rand_call_text(rng, schemas))
        elif r < 0.62:
            parts.append(rng.choice(TURN_END))
        else:
            parts.append(
                "".join(
                    rng.choice(
                        ["Sure. ", "\n", " ", "a < b", "é", "東京", "<tool_", "ok"]
                    )
                    for _ in range(rng.randint(1, 3))
                )
            )
    return "".join(parts)


def lark_for(text: str, tag_ids: dict[str, int]) -> str:
    """A Lark grammar writing ``text``, every tool tag as its special token."""
    pattern = "(" + "|".join(re.escape(t) for t in tag_ids) + ")"
    items = [
        f"<[{tag_ids[piece]}]>" if piece in tag_ids else json.dumps(piece)
        for piece in re.split(pattern, text)
        if piece
    ]
    return "start: " + (" ".join(items) or '""') + "\n"


# -- one fuzz case ---------------------------------------------------------------------


@dataclass
class Case:
    index: int
    body: dict
    #: ("400", why) when the request must be refused, else None.
    expect_400: str | None = None
    #: "free" (sampled), "lark" or "regex" (forced through structured outputs)
    mode: str = "free"
    notes: list[str] = field(default_factory=list)

    @property
    def parser_active(self) -> bool:
        return bool(self.body.get("tools")) and self.body.get("tool_choice") != "none"

    @property
    def schemas(self) -> dict[str, dict]:
        return schemas_of(self.body.get("tools") or [])

    @property
    def callable_tools(self) -> set[str]:
        return {n for n in self.schemas if callable_name(n)}


def make_case(rng: random.Random, index: int, token_ids: dict[str, int]) -> Case:
    tools = (
        rand_tools(rng, uncallable=rng.random() < 0.08) if rng.random() < 0.85 else []
    )
    bad_arguments = rng.random() < 0.08
    messages, bad_index = rand_messages(rng, tools, bad_arguments)
    body: dict[str, Any] = {"model": MODEL, "messages": messages}
    if tools:
        body["tools"] = tools
    r = rng.random()
    if tools and r < 0.6:
        body["tool_choice"] = "auto"
    elif tools and r < 0.85:
        body["tool_choice"] = "none"
    case = Case(index, body)
    stream = rng.random() < 0.4
    if stream:
        body["stream"] = True
    if rng.random() < 0.92:
        body["return_token_ids"] = True
    schemas = case.schemas
    if rng.random() < 0.45:  # forced output
        text = rand_output_text(rng, {n: s for n, s in schemas.items()})
        tags = {t: token_ids[t] for t in (*TOOL_TAGS, *RESPONSE_TAGS)}
        if rng.random() < 0.65:
            case.mode = "lark"
            body["structured_outputs"] = {"grammar": lark_for(text, tags)}
        else:
            case.mode = "regex"
            body["structured_outputs"] = {"regex": re.escape(text)}
        body["temperature"] = 0.0
        body["max_tokens"] = rng.choice([400, 400, 400, rng.randint(1, 30)])
    else:  # free sampling from the random model
        body["temperature"] = rng.choice([0.0, 0.7, 1.0, 1.5])
        seed = rng.randrange(2**31)
        if SEEDED_SAMPLING:
            body["seed"] = seed
        body["max_tokens"] = rng.randint(1, 24)
        if rng.random() < 0.3:
            body["top_p"] = rng.choice([0.5, 0.9])
        bias: dict[str, float] = {}
        r = rng.random()
        if r < 0.4:  # calls without arguments: <tool_call>NAME</tool_call>
            strength = rng.choice([6, 8, 10])
            for tag in (CALL_START, CALL_END):
                bias[str(token_ids[tag])] = strength
        elif r < 0.85:
            strength = rng.choice([2, 4, 6, 8])
            for tag in TOOL_TAGS:
                bias[str(token_ids[tag])] = strength
        if r < 0.85:
            for name in schemas:
                if name in token_ids:
                    bias[str(token_ids[name])] = strength
            for key in ("city", "days", "Paris", "3"):
                if r >= 0.4 and rng.random() < 0.5:
                    bias[str(token_ids[key])] = strength - 1
        if rng.random() < 0.2:
            bias[str(token_ids[rng.choice(TURN_END)])] = rng.choice([1, 3, 100])
        if bias:
            body["logit_bias"] = bias
        if rng.random() < 0.3:
            body["ignore_eos"] = True
        elif rng.random() < 0.15:
            body["include_stop_str_in_output"] = True
    if not stream and rng.random() < 0.1:
        body["n"] = 2
        seed = rng.randrange(2**31)
        if SEEDED_SAMPLING:
            body.setdefault("seed", seed)
        if body["temperature"] == 0.0:
            body["temperature"] = 1.0
    if rng.random() < 0.15:
        body["logprobs"] = True
        body["top_logprobs"] = rng.randint(0, 2)
    uncallable = any(not callable_name(n) for n in schemas)
    if bad_index is not None:
        case.expect_400 = f"message {bad_index}"
    elif uncallable and case.parser_active:
        case.expect_400 = "tools"
    return case


# -- the oracle ------------------------------------------------------------------------

PAIR_RE = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def declared(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    kind = schema.get("type")
    found = {kind} if isinstance(kind, str) else set(kind or [])
    for branch in schema.get("anyOf", []) + schema.get("oneOf", []):
        found |= declared(branch)
    return found


def value_matches(raw: str, value: Any, schema: Any) -> bool:
    """``value`` is the raw text, or the raw text read as a declared type."""
    if isinstance(value, str):
        return value == raw
    types, text = declared(schema), raw.strip()
    if isinstance(value, bool):
        return "boolean" in types and text.lower() == json.dumps(value)
    if value is None:
        return "null" in types and text == "null"
    if isinstance(value, (int, float)):
        try:
            number = int(text) if re.fullmatch(r"-?[0-9]+", text) else float(text)
        except ValueError:
            return False
        return bool(types & {"integer", "number"}) and number == value
    try:
        return json.loads(text) == value and bool(types & {"object", "array"})
    except ValueError:
        return False


def block_is_call(block: str, name: str, arguments: dict, props: dict) -> bool:
    """Is ``block`` (``<tool_call>`` ... ``</tool_call>``) the call
    ``name(arguments)``, read independently of the parser?"""
    body = block[len(CALL_START) :].lstrip()
    if not body.startswith(name):
        return False
    rest = body[len(name) :]
    if rest and not (rest[0].isspace() or rest.startswith(("<arg_key>", CALL_END))):
        return False
    pairs = [(k.strip(), v) for k, v in PAIR_RE.findall(rest)]
    if [k for k, _ in pairs] != list(arguments):
        return False
    return all(value_matches(v, arguments[k], props.get(k)) for k, v in pairs)


def accounts_for(
    text: str, content: str, calls: list[tuple[str, str]], schemas: dict, ws_free: bool
) -> bool:
    """Is ``content`` ``text`` with exactly ``calls`` cut out, in order?

    With ``ws_free`` (calls made, content empty) the rest may be whitespace.
    """
    parsed = [(n, json.loads(a)) for n, a in calls]
    frontier = {(0, 0, 0)}
    seen = set(frontier)
    while frontier:
        following = set()
        for i, j, k in frontier:
            if i == len(text) and j == len(content) and k == len(calls):
                return True
            steps = []
            if i < len(text):
                if ws_free and not content and text[i].isspace():
                    steps.append((i + 1, j, k))
                elif j < len(content) and text[i] == content[j]:
                    steps.append((i + 1, j + 1, k))
            if k < len(calls) and text.startswith(CALL_START, i):
                close = text.find(CALL_END, i)
                if close >= 0:
                    end = close + len(CALL_END)
                    name, args = parsed[k]
                    if block_is_call(text[i:end], name, args, schemas.get(name, {})):
                        steps.append((end, j, k + 1))
            for state in steps:
                if state not in seen:
                    seen.add(state)
                    following.add(state)
        frontier = following
    return False


def cut_turn(text: str) -> str:
    found = [p for t in TURN_END if (p := text.find(t)) != -1]
    return text[: min(found)] if found else text


def object_without_repeats(arguments: Any) -> bool:
    if not isinstance(arguments, str):
        return False
    try:
        pairs = json.loads(arguments, object_pairs_hook=lambda p: p)
    except ValueError:
        return False
    if not isinstance(pairs, list):
        return False
    keys = [k for k, _ in pairs]
    return len(keys) == len(set(keys))


@dataclass
class Choice:
    content: str | None
    calls: list[tuple[str, str]]  # closed calls (name, arguments)
    abandoned: list[tuple[str, str]]
    finish: str | None
    token_ids: list[int] | None


class Checker:
    def __init__(self, case: Case, tokenizer, errors: list[str]):
        self.case, self.tokenizer, self.errors = case, tokenizer, errors

    def fail(self, what: str) -> None:
        self.errors.append(what)

    def check_choice(self, choice: Choice, streamed: bool) -> None:
        case = self.case
        if choice.finish not in ("stop", "length", "tool_calls"):
            self.fail(f"finish_reason {choice.finish!r}")
        if choice.content is not None and not isinstance(choice.content, str):
            self.fail(f"content of type {type(choice.content).__name__}")
            return
        for name, _ in choice.calls + choice.abandoned:
            if not case.parser_active or name not in case.callable_tools:
                self.fail(f"call of {name!r}, not a callable tool of the request")
        for name, arguments in choice.calls:
            if not object_without_repeats(arguments):
                self.fail(f"arguments {arguments!r} of {name!r}: not a JSON object")
                return
        if choice.abandoned and not streamed:
            self.fail(f"non-streamed calls with invalid arguments {choice.abandoned}")
        if choice.calls and not streamed and choice.finish != "tool_calls":
            self.fail(f"calls made, finish_reason {choice.finish!r}")
        if not choice.calls + choice.abandoned and choice.finish == "tool_calls":
            self.fail("finish_reason tool_calls without calls")
        if choice.token_ids is None:
            return
        skip = not case.parser_active
        decoded = self.tokenizer.decode(choice.token_ids, skip_special_tokens=skip)
        text = cut_turn(decoded)
        content = choice.content or ""
        ws_free = bool(choice.calls) and not content
        candidates = [text]
        if text.endswith("\ufffd"):
            # vLLM's detokenizer never emits the text of final tokens that end
            # in an incomplete UTF-8 sequence.
            ids = choice.token_ids
            candidates.append(text.rstrip("\ufffd"))
            candidates += [
                cut_turn(self.tokenizer.decode(ids[:-m], skip_special_tokens=skip))
                for m in range(1, min(8, len(ids)) + 1)
            ]
        if not any(
            accounts_for(t, content, choice.calls, case.schemas, ws_free)
            for t in candidates
        ):
            self.fail(
                "text lost or changed: generated (cut at the turn end) "
                f"{text!r}, content {choice.content!r}, calls {choice.calls}"
            )
        content_is_blank = choice.content is not None and not choice.content.strip()
        if choice.calls and content_is_blank and not streamed:  # documented: null
            self.fail(f"whitespace-only content {choice.content!r} with calls")


def parse_response(case: Case, data: dict, checker: Checker) -> list[Choice]:
    choices = []
    if data.get("object") != "chat.completion":
        checker.fail(f"object {data.get('object')!r}")
    expected_n = case.body.get("n", 1)
    if len(data.get("choices") or []) != expected_n:
        checker.fail(f"{len(data.get('choices') or [])} choices, expected {expected_n}")
    for raw in data.get("choices") or []:
        message = raw.get("message") or {}
        if message.get("role") != "assistant":
            checker.fail(f"role {message.get('role')!r}")
        calls, abandoned = [], []
        for tc in message.get("tool_calls") or []:
            fn = tc.get("function") or {}
            if not tc.get("id") or tc.get("type") != "function":
                checker.fail(f"malformed tool call {tc}")
            pair = (fn.get("name"), fn.get("arguments"))
            (calls if object_without_repeats(pair[1]) else abandoned).append(pair)
        if case.body.get("logprobs") and raw.get("token_ids") is not None:
            entries = (raw.get("logprobs") or {}).get("content") or []
            if len(entries) != len(raw["token_ids"]):
                checker.fail(
                    f"{len(entries)} logprobs for {len(raw['token_ids'])} tokens"
                )
        choices.append(
            Choice(
                message.get("content"),
                calls,
                abandoned,
                raw.get("finish_reason"),
                raw.get("token_ids") if case.body.get("return_token_ids") else None,
            )
        )
    return choices


def parse_stream(case: Case, lines: list[str], checker: Checker) -> list[Choice]:
    data_lines = [line[len("data: ") :] for line in lines if line.startswith("data: ")]
    if not data_lines or data_lines[-1] != "[DONE]":
        checker.fail(f"stream does not end with [DONE]: {lines[-3:]}")
        return []
    acc: dict[int, dict] = {}
    for payload in data_lines[:-1]:
        try:
            chunk = json.loads(payload)
        except ValueError:
            checker.fail(f"stream line is not JSON: {payload!r}")
            continue
        if "error" in chunk:
            checker.fail(f"error inside the stream: {chunk['error']}")
            continue
        for raw in chunk.get("choices") or []:
            entry = acc.setdefault(
                raw["index"],
                {"content": "", "calls": {}, "finish": [], "ids": [], "role": 0},
            )
            delta = raw.get("delta") or {}
            if delta.get("role"):
                entry["role"] += 1
            if delta.get("content") is not None:
                if not isinstance(delta["content"], str):
                    checker.fail(f"delta content {delta['content']!r}")
                else:
                    entry["content"] += delta["content"]
            for tc in delta.get("tool_calls") or []:
                fn = tc.get("function") or {}
                call = entry["calls"].get(tc["index"])
                if call is None:
                    if (
                        not tc.get("id")
                        or tc.get("type") != "function"
                        or not fn.get("name")
                    ):
                        checker.fail(
                            f"first delta of a call without id/type/name: {tc}"
                        )
                    call = entry["calls"][tc["index"]] = {
                        "name": fn.get("name"),
                        "args": "",
                    }
                elif tc.get("id") or fn.get("name"):
                    checker.fail(f"call {tc['index']}: id or name sent twice: {tc}")
                call["args"] += fn.get("arguments") or ""
            if raw.get("finish_reason"):
                entry["finish"].append(raw["finish_reason"])
            entry["ids"] += raw.get("token_ids") or []
    choices = []
    for index in sorted(acc):
        entry = acc[index]
        if entry["role"] != 1:
            checker.fail(f"choice {index}: role sent {entry['role']} times")
        if len(entry["finish"]) != 1:
            checker.fail(f"choice {index}: finish reasons {entry['finish']}")
        calls, abandoned = [], []
        for k in sorted(entry["calls"]):
            pair = (entry["calls"][k]["name"], entry["calls"][k]["args"])
            (calls if object_without_repeats(pair[1]) else abandoned).append(pair)
        choices.append(
            Choice(
                entry["content"],
                calls,
                abandoned,
                entry["finish"][0] if entry["finish"] else None,
                entry["ids"] if case.body.get("return_token_ids") else None,
            )
        )
    if len(choices) != case.body.get("n", 1):
        checker.fail(f"{len(choices)} streamed choices")
    return choices


LENGTH_WORDS = ("maximum context length", "max_model_len", "too long", "context length")


def send(http, case: Case, body: dict):
    """(status, JSON body or SSE lines); raises on a dropped connection."""
    url = "/v1/chat/completions"
    if body.get("stream"):
        with http.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                response.read()
                return response.status_code, response
            return 200, [line for line in response.iter_lines() if line]
    response = http.post(url, json=body)
    return response.status_code, response


class Stats:
    """Counts, shared by the worker threads."""

    def __init__(self) -> None:
        self.counts: dict = {}
        self._lock = threading.Lock()

    def add(self, key, n: int = 1) -> None:
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def get(self, key, default: int = 0) -> int:
        return self.counts.get(key, default)


def run_case(http, tokenizer, case: Case, stats: Stats) -> list[str]:
    errors: list[str] = []
    checker = Checker(case, tokenizer, errors)
    try:
        status, result = send(http, case, case.body)
    except Exception as exc:  # noqa: BLE001 - a dropped connection is a failure
        return [f"no response: {type(exc).__name__}: {exc}"]
    stats.add(status, 1)
    if status != 200:
        try:
            error = result.json()["error"]
            message = error["message"]
        except Exception:  # noqa: BLE001
            return [f"HTTP {status} without a JSON error body: {result.text[:300]!r}"]
        if not 400 <= status < 500:
            return [f"HTTP {status}: {message[:500]}"]
        if any(w in message for w in LENGTH_WORDS):
            stats.add("too_long")
        elif case.expect_400 is not None:
            if status != 400 or case.expect_400 not in message:
                errors.append(
                    f"expected 400 naming {case.expect_400!r}: {status} {message}"
                )
        else:
            errors.append(f"unexpected HTTP {status}: {message[:500]}")
        return errors
    if case.expect_400 is not None:
        return [f"expected 400 naming {case.expect_400!r}, got 200"]
    streamed = bool(case.body.get("stream"))
    if streamed:
        choices = parse_stream(case, result, checker)
    else:
        try:
            data = result.json()
        except ValueError:
            return [f"200 without a JSON body: {result.text[:300]!r}"]
        choices = parse_response(case, data, checker)
    for choice in choices:
        checker.check_choice(choice, streamed)
        stats.add(f"calls_{case.mode}", len(choice.calls))
        stats.add("calls_abandoned_in_stream", len(choice.abandoned))
        stats.add("choices_with_content", bool(choice.content))
    if streamed and not errors:
        twin_body = {k: v for k, v in case.body.items() if k != "stream"}
        try:
            status, result = send(http, case, twin_body)
        except Exception as exc:  # noqa: BLE001
            return [f"non-streamed twin: no response: {type(exc).__name__}: {exc}"]
        if status != 200:
            return [f"non-streamed twin: HTTP {status}: {result.text[:300]!r}"]
        twins = parse_response(case, result.json(), checker)
        for got, want in zip(choices, twins, strict=False):
            checker.check_choice(want, streamed=False)
            if got.token_ids is None or got.token_ids != want.token_ids:
                stats.add("twin_diverged", 1)
                continue
            stats.add("twin_compared", 1)
            want_content = want.content or ""
            if want.calls and not want_content.strip():
                want_content = ""  # the stream does not send it
            if (got.content or "", got.calls) != (want_content, want.calls):
                errors.append(
                    "stream and non-stream disagree on the same tokens: streamed "
                    f"{(got.content, got.calls)}, "
                    f"non-streamed {(want.content, want.calls)}"
                )
    return errors


# -- the server ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    from transformers import AutoTokenizer

    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path_factory.mktemp("spark25-fuzz") / "ckpt")
    tokenizer = AutoTokenizer.from_pretrained(path)
    args = [
        "--served-model-name", MODEL,
        "--dtype", "float32", "--enforce-eager",
        "--max-model-len", str(MAX_MODEL_LEN),
        "--max-num-batched-tokens", str(MAX_NUM_BATCHED_TOKENS),
        "--enable-auto-tool-choice", "--tool-call-parser", "spark25",
    ]  # fmt: skip
    # The engine in its own process (conftest.py turns that off for in-process
    # engines): in one process, the API server and the engine share the GIL
    # and the fuzz takes several times as long.
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    log_path = tmp_path_factory.mktemp("spark25-fuzz-log") / "server.log"
    with vllm_server(
        path, args, log_path, env=env, startup_timeout=STARTUP_TIMEOUT_S
    ) as served:
        yield {**served, "tokenizer": tokenizer}


def token_ids_of(tokenizer) -> dict[str, int]:
    """Ids of the special tokens and of the one-token words the bias uses."""
    words = [*TOOL_TAGS, *RESPONSE_TAGS, *TURN_END, *ONE_TOKEN_NAMES, "days", "3"]
    ids = {w: tokenizer.convert_tokens_to_ids(w) for w in words}
    for word, token in ids.items():
        assert tokenizer.decode([token]) == word, word
    return ids


def log_errors(path: Path) -> list[str]:
    lines = path.read_text(errors="replace").splitlines()
    return [
        line for line in lines if "Traceback" in line or re.search(r"\bERROR\b", line)
    ]


KNOWN_CALL = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"type": "function", "function": {"name": "get"}}],
    "structured_outputs": {"regex": re.escape("<tool_call>get</tool_call>")},
    "max_tokens": 50,
}


def still_serving(http, server) -> str | None:
    """None when the server is healthy and still makes a known call exactly."""
    if server["proc"].poll() is not None:
        return f"the server exited ({server['proc'].returncode})"
    try:
        if http_status(server["base"] + "/health") != 200:
            return "/health is not 200"
        response = http.post("/v1/chat/completions", json=KNOWN_CALL)
        calls = response.json()["choices"][0]["message"]["tool_calls"]
        got = [(c["function"]["name"], c["function"]["arguments"]) for c in calls]
    except Exception as exc:  # noqa: BLE001 - any failure is the finding
        return f"not serving: {type(exc).__name__}: {exc}"
    return None if got == [("get", "{}")] else f"known call came back as {got}"


def test_random_requests_never_fail_and_lose_nothing(fuzz_server):
    import httpx

    tokenizer = fuzz_server["tokenizer"]
    ids = token_ids_of(tokenizer)
    rng = random.Random(SEED)
    cases = [make_case(rng, i, ids) for i in range(N_REQUESTS)]
    stats = Stats()
    started = time.monotonic()
    with httpx.Client(base_url=fuzz_server["base"], timeout=REQUEST_TIMEOUT_S) as http:
        with ThreadPoolExecutor(WORKERS) as pool:
            results = list(
                pool.map(lambda c: run_case(http, tokenizer, c, stats), cases)
            )
        elapsed = time.monotonic() - started
        broken = still_serving(http, fuzz_server)
    print(f"\nfuzz: {len(cases)} cases in {elapsed:.1f}s; {stats.counts}")
    failures = [
        f"case {case.index}: {'; '.join(errs)}\n  request: "
        + json.dumps(case.body, ensure_ascii=False)[:3000]
        for case, errs in zip(cases, results, strict=True)
        if errs
    ]
    bad_log = log_errors(fuzz_server["log"])
    report = []
    if failures:
        report += [f"{len(failures)} of {len(cases)} requests failed:", *failures[:8]]
    if broken:
        report.append(f"after the fuzz: {broken}")
    if bad_log:
        report += [f"server log ({len(bad_log)} Traceback/ERROR lines):", *bad_log[:40]]
    assert not report, "\n".join(report)
    # the fuzz reached what it is meant to reach
    assert stats.get(200) >= N_REQUESTS // 2
    assert stats.get(400) >= 3
    assert stats.get("calls_lark") + stats.get("calls_regex") >= 10
    assert stats.get("twin_compared") >= 10
