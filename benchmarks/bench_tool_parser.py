# SPDX-License-Identifier: Apache-2.0
"""Parse cost of ``spark25`` against vLLM's ``glm47`` parser on the same outputs.

Synthetic model outputs of 256 to 8192 tokens (prose plus a tool call every
~100 tokens, in the newline layout both parsers read) are tokenized with the
tiny Spark2_5 tokenizer (tool tags are special tokens) and parsed

* non-streaming: one ``extract_tool_calls`` call on the whole text;
* streaming: one delta per token, fed the way vLLM feeds both parsers (they
  are both ``engine_based_streaming``: delta text and delta ids only), then
  ``finish_streaming()``.

Each measurement is the best of ``--repeats`` runs with a fresh parser. The
per-token cost column shows whether the total grows linearly.

    python benchmarks/bench_tool_parser.py [--sizes 256 512 ...] [--repeats 5]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import tempfile
import time

from machine import cpu_name

from vllm_spark2_5_plugin.tools.dspark_data import int_at_least

CALL = (
    "<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>{city}</arg_value>\n"
    "<arg_key>days</arg_key><arg_value>{days}</arg_value>\n"
    '<arg_key>options</arg_key><arg_value>{{"unit": "celsius", "hourly": true}}'
    "</arg_value>\n</tool_call>"
)
PROSE = (
    "The quick brown fox jumps over the lazy dog. Let me look that up for you "
    "and compare the forecast with last week. "
)
CITIES = ["Paris", "Tokyo", "São Paulo", "Zürich", "Lagos", "Oslo"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "options": {"type": "object"},
                },
            },
        },
    }
]


def build_output(tokenizer, n_tokens: int) -> tuple[str, list[int], int]:
    """Prose and calls alternating, ending with prose, at least ``n_tokens``.

    The text is not cut mid-call: a truncated call is content for spark25 but
    a call for glm47, and the two parsers should do the same work here.
    """
    parts: list[str] = []
    calls = 0
    while True:
        parts.append(PROSE)
        candidate = "".join(parts)
        if len(tokenizer.encode(candidate, add_special_tokens=False)) >= n_tokens:
            break
        parts.append(CALL.format(city=CITIES[calls % len(CITIES)], days=calls % 9 + 1))
        calls += 1
    text = "".join(parts)
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids, skip_special_tokens=False) == text
    return text, ids, calls


def token_deltas(tokenizer, ids: list[int]) -> list[tuple[str, list[int]]]:
    """One delta per token, never splitting a UTF-8 character."""
    deltas = []
    sent = ""
    for k in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:k], skip_special_tokens=False)
        if text.endswith("\ufffd") and k < len(ids):
            text = sent
        deltas.append((text[len(sent) :], ids[k - 1 : k]))
        sent = text
    return deltas


def best_of(repeats, make_parser, run) -> tuple[float, int]:
    """Best time of ``run(parser)`` over fresh parsers, and what it returned."""
    best, found = float("inf"), 0
    for _ in range(repeats):
        parser = make_parser()
        start = time.perf_counter()
        found = run(parser)
        best = min(best, time.perf_counter() - start)
    return best, found


def time_non_streaming(
    parser_cls, tokenizer, request, text, repeats
) -> tuple[float, int]:
    """One ``extract_tool_calls``; returns (seconds, calls found)."""

    def run(parser) -> int:
        return len(parser.extract_tool_calls(text, request).tool_calls)

    return best_of(repeats, lambda: parser_cls(tokenizer, request.tools), run)


def time_streaming(
    parser_cls, tokenizer, request, deltas, repeats
) -> tuple[float, int]:
    """One delta per token, then ``finish_streaming()``; (seconds, names sent)."""

    def run(parser) -> int:
        names = 0
        for delta_text, delta_ids in deltas:
            message = parser.extract_tool_calls_streaming(
                "", delta_text, delta_text, [], delta_ids, delta_ids, request
            )
            if message is not None:
                names += sum(
                    1 for tc in message.tool_calls if tc.function and tc.function.name
                )
        finish = getattr(parser, "finish_streaming", None)
        if finish is not None:
            finish()
        return names

    return best_of(repeats, lambda: parser_cls(tokenizer, request.tools), run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        type=int_at_least(1),
        nargs="+",
        default=[256, 512, 1024, 2048, 4096, 8192],
    )
    parser.add_argument("--repeats", type=int_at_least(1), default=5)
    args = parser.parse_args()

    import vllm
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.plugins import load_general_plugins
    from vllm.tool_parsers import ToolParserManager

    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    load_general_plugins()
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = AutoTokenizer.from_pretrained(make_tiny_checkpoint(tmp))
    request = ChatCompletionRequest(
        messages=[{"role": "user", "content": "hi"}], model="m", tools=TOOLS
    )
    parsers = {
        "spark25": ToolParserManager.get_tool_parser("spark25"),
        "glm47": ToolParserManager.get_tool_parser("glm47"),
    }
    print(
        f"# date {datetime.date.today()}; vLLM {vllm.__version__}; "
        f"Python {platform.python_version()}; CPU {cpu_name()} "
        f"({os.cpu_count()} cores visible); best of {args.repeats}"
    )
    header = (
        "| tokens | calls | parser | non-stream ms | non-stream µs/token "
        "| stream ms (1 token/delta) | stream µs/token |"
    )
    print(header)
    print("|---:|---:|---|---:|---:|---:|---:|")
    for size in args.sizes:
        text, ids, calls = build_output(tokenizer, size)
        deltas = token_deltas(tokenizer, ids)
        for name, cls in parsers.items():
            t_ns, n_ns = time_non_streaming(cls, tokenizer, request, text, args.repeats)
            t_s, n_s = time_streaming(cls, tokenizer, request, deltas, args.repeats)
            note = "" if n_ns == n_s == calls else f" (found {n_ns}/{n_s} of {calls})"
            print(f"| {len(ids)} | {calls} | {name}{note} | {t_ns * 1e3:.2f} "
                  f"| {t_ns * 1e6 / len(ids):.2f} | {t_s * 1e3:.1f} "
                  f"| {t_s * 1e6 / len(ids):.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
