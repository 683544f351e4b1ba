# SPDX-License-Identifier: Apache-2.0
"""CUDA-graph capture sizes that cover a busy DSpark server.

    python -m vllm_spark2_5_plugin.tools.cudagraph_sizes \\
        --num-speculative-tokens 7 --max-num-seqs 512

prints the ``--compilation-config`` to pass to ``vllm serve``. A Spark2_5
DSpark server whose user sets no capture sizes gets this list at start-up
anyway (``configs.cudagraph.widen_capture_sizes``); the tool is for choosing
them yourself, e.g. for another ``max_num_seqs``.

Why: vLLM 0.32.0 (V2 model runner) captures the target's decode steps and the
DSpark draft's steps from one list, ``compilation_config.cudagraph_capture_sizes``,
counted in tokens. A target decode step of ``R`` requests has ``R * (K + 1)``
tokens; a draft step has ``R * K`` (the anchor-first block layout). The
default list stops at 512 tokens on an H200, so with ``K = 7`` steps of more
than 64 (target) or 71 (draft) requests run without CUDA graphs, the draft
eagerly. This list holds ``n * K`` and ``n * (K + 1)`` for a ladder of request
counts ``n`` up to ``max_num_seqs``, so a step of any batch size pads to the
next rung in both models (fewer graphs than the default list at ``K = 7``).

Cost: the largest graphs hold ``max_num_seqs`` requests, so the graph memory
pool grows (the draft's logits alone are about ``R * K * vocab * 2`` bytes);
vLLM's memory profiler takes it out of the KV cache. ``max_num_batched_tokens``
must be at least the largest size, or vLLM drops the sizes above it.
"""

from __future__ import annotations

import argparse

from vllm_spark2_5_plugin.configs.cudagraph import compilation_config


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0].removesuffix(".")
        + ": prints the vllm serve flags that set them",
        allow_abbrev=False,
    )
    parser.add_argument(
        "--num-speculative-tokens",
        type=int,
        required=True,
        help="K, the draft's block size (the checkpoint's dspark_block_size)",
    )
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        required=True,
        help="the most requests the server runs at once (vllm serve --max-num-seqs)",
    )
    args = parser.parse_args(argv)
    try:
        config = compilation_config(args.num_speculative_tokens, args.max_num_seqs)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    largest = args.max_num_seqs * (args.num_speculative_tokens + 1)
    print(f"--max-num-seqs {args.max_num_seqs} --compilation-config '{config}'")
    print(f"# needs --max-num-batched-tokens >= {largest}", flush=True)


if __name__ == "__main__":
    main()
