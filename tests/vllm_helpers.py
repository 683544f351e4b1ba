# SPDX-License-Identifier: Apache-2.0
"""Helpers for tests that run the real vLLM engine on CPU."""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def llm_engine(model: str | Path, **llm_kwargs):
    """A ``vllm.LLM`` of ``model``, shut down on leaving so the next engine
    gets the memory back.

    The engine core is shut down explicitly: the caller's ``as`` name still
    holds the ``LLM`` until its test returns, so dropping this function's
    reference freed nothing, and under vLLM's CUDA build the next engine of
    the same test file found the GPU's memory taken.

    An engine that failed in an earlier test can outlive it (the exception's
    frames hold it); collected while this one runs, its shutdown tore down
    the distributed groups this engine had just set up ("pipeline model
    parallel group is not initialized" at its first step). So it is
    collected first."""
    import gc

    from vllm import LLM
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    from vllm_spark2_5_plugin import vllm_seam

    gc.collect()
    llm = LLM(str(model), **llm_kwargs)
    try:
        yield llm
    finally:
        vllm_seam.shutdown_llm(llm)
        del llm
        gc.collect()
        cleanup_dist_env_and_memory()


def generate_tokens(llm, prompts: Sequence[Sequence[int]], sampling_params) -> list:
    """``llm.generate`` of token-id prompts, without a progress bar."""
    from vllm.inputs import TokensPrompt

    return llm.generate(
        [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
        sampling_params,
        use_tqdm=False,
    )


def metrics_by_name(llm) -> dict:
    """The engine's metrics by name (the engine needs ``disable_log_stats=False``)."""
    return {m.name: m for m in llm.get_metrics()}


def run_llm(
    model: str | Path,
    prompts: Sequence[Sequence[int]],
    sampling_params,
    **llm_kwargs,
) -> tuple[list, dict]:
    """``RequestOutput``s and metrics (by name) of one in-process ``vllm.LLM``,
    torn down afterwards so the next engine gets the memory back."""
    with llm_engine(model, **llm_kwargs) as llm:
        outputs = generate_tokens(llm, prompts, sampling_params)
        metrics = (
            metrics_by_name(llm) if llm_kwargs.get("disable_log_stats") is False else {}
        )
    return outputs, metrics


def load_model(path: Path, draft: bool = False, **model_kwargs):
    """The target (or, ``draft``, the DSpark draft) of ``path``, built and
    loaded by vLLM's ``get_model`` on CPU (float32, eager unless
    ``model_kwargs`` say otherwise), as its worker does. Needs the
    single-process distributed world initialised."""
    import pytest
    import torch
    from vllm.config import (
        ModelConfig,
        ParallelConfig,
        SpeculativeConfig,
        VllmConfig,
        set_current_vllm_config,
    )
    from vllm.model_executor.model_loader import get_model

    model_config = ModelConfig(
        model=str(path),
        **{"dtype": "float32", "max_model_len": 256, "enforce_eager": True}
        | model_kwargs,
    )
    parallel = ParallelConfig()
    vllm_config = VllmConfig(model_config=model_config, parallel_config=parallel)
    if draft:
        # Attached after validation: VllmConfig refuses DSpark on CPU.
        vllm_config.speculative_config = SpeculativeConfig(
            method="dspark",
            num_speculative_tokens=4,
            target_model_config=model_config,
            target_parallel_config=parallel,
        )
        model_config = vllm_config.speculative_config.draft_model_config
    with set_current_vllm_config(vllm_config), pytest.MonkeyPatch.context() as mp:
        # The CPU worker patches this out too (vllm/v1/worker/cpu/shm.py).
        mp.setattr(torch.accelerator, "empty_cache", lambda *a, **k: None)
        return get_model(vllm_config=vllm_config, model_config=model_config)


def build_dspark_models(
    path: Path,
    num_speculative_tokens: int,
    **model_kwargs,
):
    """``(vllm_config, speculative_config, target, draft)`` of a DSpark
    checkpoint, built and loaded by vLLM's model loader on CPU (float32,
    eager) as its DSpark runner does, the target's embedding and LM head shared
    with the draft. Needs the single-process distributed world initialised.
    The hybrid KV-cache manager is on, as vLLM's engine runs it (the CPU
    build supports it too)."""
    import pytest
    import torch
    from vllm.config import (
        ModelConfig,
        ParallelConfig,
        SpeculativeConfig,
        VllmConfig,
        set_current_vllm_config,
    )
    from vllm.model_executor.model_loader import get_model
    from vllm.v1.worker.gpu.spec_decode.eagle.utils import (
        _should_share,
        get_target_lm_head,
        maybe_share_target_embed,
    )

    target_config = ModelConfig(
        model=str(path),
        **{"dtype": "float32", "max_model_len": 256, "enforce_eager": True}
        | model_kwargs,
    )
    parallel = ParallelConfig()
    spec = SpeculativeConfig(
        method="dspark",
        num_speculative_tokens=num_speculative_tokens,
        target_model_config=target_config,
        target_parallel_config=parallel,
    )
    # VllmConfig refuses DSpark on CPU (the plugin's check, and vLLM's "Model
    # Runner V1 does not support"), so the validated speculative config is
    # attached afterwards.
    vllm_config = VllmConfig(model_config=target_config, parallel_config=parallel)
    vllm_config.speculative_config = spec
    assert vllm_config.scheduler_config.disable_hybrid_kv_cache_manager is False
    with (
        set_current_vllm_config(vllm_config),
        pytest.MonkeyPatch.context() as mp,
    ):
        # The CPU worker patches this out too (vllm/v1/worker/cpu/shm.py).
        mp.setattr(torch.accelerator, "empty_cache", lambda *a, **k: None)
        target = get_model(vllm_config=vllm_config, model_config=target_config)
        draft = get_model(vllm_config=vllm_config, model_config=spec.draft_model_config)
    # The tail of vLLM's load_dspark_model: share the target's embed / LM head.
    maybe_share_target_embed(draft, draft.model, target.model)
    target_head = get_target_lm_head(target, target)
    if _should_share(draft, "has_own_lm_head", draft.lm_head, target_head):
        draft.lm_head = target_head
    return vllm_config, spec, target, draft


GREEDY_KWARGS = {**LLM_KWARGS, "distributed_executor_backend": "uni"}


def greedy_params(max_tokens: int, logprobs: int = 5):
    """Greedy sampling of ``max_tokens`` tokens (EOS ignored) with the top
    ``logprobs`` logprobs of every step."""
    from vllm import SamplingParams

    return SamplingParams(
        temperature=0.0, max_tokens=max_tokens, logprobs=logprobs, ignore_eos=True
    )


def greedy_results(outputs) -> list[tuple[list[int], list[dict[int, float]]]]:
    """Tokens and per-step logprobs (by token) of each ``RequestOutput``."""
    results = []
    for out in outputs:
        completion = out.outputs[0]
        steps = [
            {token: lp.logprob for token, lp in step.items()}
            for step in completion.logprobs
        ]
        results.append((list(completion.token_ids), steps))
    return results


def greedy_generate(
    model: str | Path,
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    logprobs: int = 5,
    **llm_kwargs,
) -> list[tuple[list[int], list[dict[int, float]]]]:
    """Greedy tokens and top logprobs per step from an in-process ``vllm.LLM``."""
    params = greedy_params(max_tokens, logprobs)
    outputs, _ = run_llm(model, prompts, params, **GREEDY_KWARGS | llm_kwargs)
    return greedy_results(outputs)


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


def vllm_command() -> str:
    """The ``vllm`` console script: the one beside this interpreter (a venv's),
    else the first on PATH (installs whose scripts sit elsewhere)."""
    import shutil

    beside = Path(sys.executable).with_name("vllm")
    found = str(beside) if beside.exists() else shutil.which("vllm")
    if found is None:
        raise FileNotFoundError(f"no `vllm` script beside {sys.executable} or on PATH")
    return found


def gpu_vllm_available() -> bool:
    """True where CUDA and a CUDA build of vLLM are both present."""
    try:
        import torch

        if not torch.cuda.is_available():
            return False
        from vllm.platforms import current_platform

        return current_platform.is_cuda()
    except Exception:  # noqa: BLE001 - any import problem means "not available"
        return False


def skip_without_gpu_vllm() -> None:
    """Skip the calling test module unless CUDA and a CUDA build of vLLM exist."""
    import pytest

    if not gpu_vllm_available():
        pytest.skip(
            "needs an NVIDIA GPU and a CUDA build of vLLM 0.32.0",
            allow_module_level=True,
        )


# -- `vllm serve` in a subprocess ----------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url: str, timeout: float = 5.0) -> int:
    import urllib.request

    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status


def raised_value_error_naming(error: BaseException, text: str) -> bool:
    """Whether ``error`` or an exception it was raised from (vLLM wraps a
    failed engine start in its own) is a ``ValueError`` whose message holds
    ``text``."""
    while error is not None:
        if isinstance(error, ValueError) and text in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def log_tail(path: Path, lines: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def vllm_server(
    model: str | Path,
    args: Sequence[str],
    log_path: Path,
    env: dict[str, str] | None = None,
    startup_timeout: float = 300.0,
):
    """``vllm serve MODEL ARGS`` on a free port of 127.0.0.1, its output in
    ``log_path``; yields ``{"base", "port", "log", "proc"}`` once /health
    answers 200, and stops the server's whole process group afterwards.
    A server that exits or does not come up fails the test with its log."""
    import signal
    import time
    import urllib.error

    import pytest

    port = free_port()
    cmd = [
        vllm_command(), "serve", str(model),
        "--host", "127.0.0.1", "--port", str(port), *args,
    ]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"vllm serve exited ({proc.returncode}):\n{log_tail(log_path)}"
                )
            try:
                if http_status(base + "/health") == 200:
                    break
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not healthy in time:\n{log_tail(log_path)}")
            time.sleep(1.0)
        yield {"base": base, "port": port, "log": log_path, "proc": proc}
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
