# SPDX-License-Identifier: Apache-2.0
"""Helpers for tests that run the real vLLM engine on CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Settings that keep an engine small and exact on CPU (see ENVIRONMENT.md).
LLM_KWARGS = dict(
    dtype="float32",
    enforce_eager=True,
    max_model_len=512,
    seed=0,
)


def greedy_generate(
    model: str | Path,
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    logprobs: int = 5,
    **llm_kwargs,
) -> list[tuple[list[int], list[dict[int, float]]]]:
    """Greedy tokens and top logprobs per step from an in-process ``vllm.LLM``."""
    from vllm import LLM, SamplingParams
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
    from vllm.inputs import TokensPrompt

    kwargs = {**LLM_KWARGS, "distributed_executor_backend": "uni", **llm_kwargs}
    llm = LLM(str(model), **kwargs)
    try:
        params = SamplingParams(
            temperature=0.0, max_tokens=max_tokens, logprobs=logprobs, ignore_eos=True
        )
        outputs = llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
            params,
            use_tqdm=False,
        )
    finally:
        del llm
        cleanup_dist_env_and_memory()
    results = []
    for out in outputs:
        completion = out.outputs[0]
        steps = [
            {token: lp.logprob for token, lp in step.items()}
            for step in completion.logprobs
        ]
        results.append((list(completion.token_ids), steps))
    return results


def run_python(
    code: str,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    args: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (fresh plugin state) and capture output."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def skip_without_gpu_vllm() -> None:
    """Skip the calling test module unless CUDA and a CUDA build of vLLM exist."""
    import pytest

    try:
        import torch

        available = torch.cuda.is_available()
        if available:
            from vllm.platforms import current_platform

            available = current_platform.is_cuda()
    except Exception:  # noqa: BLE001 - any import problem means "not available"
        available = False
    if not available:
        pytest.skip(
            "needs an NVIDIA GPU and a CUDA build of vLLM 0.32.0",
            allow_module_level=True,
        )
