# SPDX-License-Identifier: Apache-2.0
"""The main job: write a tiny Spark2_5 checkpoint and generate with real vLLM.

    python -m vllm_spark2_5_plugin.tools.demo [--model DIR] [--prompt TEXT]

Without ``--model`` a tiny random checkpoint is written to a temporary
directory first, so the output text is gibberish; what the demo shows is that
vLLM discovers the plugin through its entry point, loads the Spark2_5
architecture and config, and serves it end to end.
"""

from __future__ import annotations

import argparse
import os
import tempfile


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a Spark2_5 checkpoint (default: tiny random)")
    parser.add_argument("--prompt", default="The weather in Paris is")
    parser.add_argument("--max-tokens", type=int, default=24)
    args = parser.parse_args(argv)

    # Small CPU KV cache unless the user chose one (GiB per worker).
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams

    model = args.model
    if model is None:
        from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

        model = str(make_tiny_checkpoint(tempfile.mkdtemp(prefix="spark2_5-tiny-")))
        print(f"wrote a tiny random Spark2_5 checkpoint to {model}")

    llm = LLM(model, dtype="float32", enforce_eager=True, max_model_len=512, seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    completion = llm.generate([args.prompt], params, use_tqdm=False)[0].outputs[0]
    chat = llm.chat([{"role": "user", "content": args.prompt}], params, use_tqdm=False)[
        0
    ].outputs[0]
    arch = llm.llm_engine.model_config.architecture
    print(f"architecture: {arch}")
    print(f"prompt:       {args.prompt!r}")
    print(f"generate():   {len(completion.token_ids)} tokens {completion.text!r}")
    print(f"chat():       {len(chat.token_ids)} tokens {chat.text!r}")


if __name__ == "__main__":
    main()
