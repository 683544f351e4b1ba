# SPDX-License-Identifier: Apache-2.0
"""Write a tiny Spark2_5 checkpoint (or take one) and generate from it with vLLM.

    python -m vllm_spark2_5_plugin.tools.demo [--model DIR] [--prompt TEXT]
        [--max-tokens N]

Without ``--model`` a tiny random checkpoint is written to a temporary
directory first, so the output text is gibberish; what the demo shows is that
vLLM discovers the plugin through its entry point, loads the Spark2_5
architecture and config, and serves it end to end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from pathlib import Path

from vllm_spark2_5_plugin.tools.dspark_data import int_at_least


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a Spark2_5 checkpoint (default: tiny random)")
    parser.add_argument("--prompt", default="The weather in Paris is")
    parser.add_argument("--max-tokens", type=int_at_least(1), default=24)
    args = parser.parse_args(argv)
    if not args.prompt:
        parser.error("--prompt: give some text (vLLM refuses an empty prompt)")
    if args.model is not None:
        problem = _model_problem(Path(args.model))
        if problem is not None:
            parser.error(f"--model: {problem}")

    # Small CPU KV cache unless the user chose one (GiB per worker).
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    with contextlib.ExitStack() as stack:
        model = args.model
        if model is None:
            from vllm_spark2_5_plugin.tools.tiny_checkpoint import (
                make_tiny_checkpoint,
            )

            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="spark2_5-"))
            model = str(make_tiny_checkpoint(Path(tmp) / "tiny"))
            print(f"wrote a tiny random Spark2_5 checkpoint to {model} (removed after)")
        _generate(model, args.prompt, args.max_tokens)


def _model_problem(path: Path) -> str | None:
    """Why vLLM could not serve the checkpoint at ``path``, found before it
    starts: not a Spark2_5 checkpoint, a config field that cannot work, no
    tokenizer. ``None`` if none of these."""
    from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
    from vllm_spark2_5_plugin.tools.dspark_checkpoint import read_target_config

    try:
        raw = read_target_config(path)
    except SystemExit as exc:
        return str(exc)
    try:
        Spark2_5Config.from_dict(raw)
    except (ValueError, TypeError) as exc:
        return f"{path / 'config.json'}: {exc}"
    from transformers import AutoTokenizer

    try:
        AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # noqa: BLE001 - any reason is reported
        why = (str(exc).strip().splitlines() or [""])[0]
        return (
            f"{path} has no tokenizer that can be loaded ({type(exc).__name__}: {why})"
        )
    return None


def _generate(model: str, prompt: str, max_tokens: int) -> None:
    from vllm import LLM, SamplingParams

    from vllm_spark2_5_plugin.vllm_seam import shutdown_llm

    llm = LLM(model, dtype="float32", enforce_eager=True, max_model_len=512, seed=0)
    try:
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
        completion = llm.generate([prompt], params, use_tqdm=False)[0].outputs[0]
        chat = llm.chat([{"role": "user", "content": prompt}], params, use_tqdm=False)
        reply = chat[0].outputs[0]
        arch = llm.llm_engine.model_config.architecture
    finally:
        # Stopped here, not at interpreter exit, where vLLM force-kills its
        # engine process with a warning.
        shutdown_llm(llm)
    print(f"architecture: {arch}")
    print(f"prompt:       {prompt!r}")
    print(f"generate():   {len(completion.token_ids)} tokens {completion.text!r}")
    print(f"chat():       {len(reply.token_ids)} tokens {reply.text!r}")


if __name__ == "__main__":
    main()
