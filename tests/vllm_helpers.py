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


def run_llm(
    model: str | Path,
    prompts: Sequence[Sequence[int]],
    sampling_params,
    **llm_kwargs,
) -> tuple[list, dict]:
    """``RequestOutput``s and metrics (by name) of one in-process ``vllm.LLM``,
    torn down afterwards so the next engine gets the memory back."""
    from vllm import LLM
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
    from vllm.inputs import TokensPrompt

    llm = LLM(str(model), **llm_kwargs)
    try:
        outputs = llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
            sampling_params,
            use_tqdm=False,
        )
        metrics = (
            {m.name: m for m in llm.get_metrics()}
            if llm_kwargs.get("disable_log_stats") is False
            else {}
        )
    finally:
        del llm
        cleanup_dist_env_and_memory()
    return outputs, metrics


def greedy_generate(
    model: str | Path,
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    logprobs: int = 5,
    **llm_kwargs,
) -> list[tuple[list[int], list[dict[int, float]]]]:
    """Greedy tokens and top logprobs per step from an in-process ``vllm.LLM``."""
    from vllm import SamplingParams

    kwargs = {**LLM_KWARGS, "distributed_executor_backend": "uni", **llm_kwargs}
    params = SamplingParams(
        temperature=0.0, max_tokens=max_tokens, logprobs=logprobs, ignore_eos=True
    )
    outputs, _ = run_llm(model, prompts, params, **kwargs)
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
