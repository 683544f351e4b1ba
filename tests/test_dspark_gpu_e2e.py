# SPDX-License-Identifier: Apache-2.0
"""End to end on a GPU: DSpark serves inside vLLM (CUDA graphs on).

Greedy output with DSpark equals output without it. That holds for any draft
(rejection sampling repairs it), so this is a smoke test; the proof that the
draft computes the right thing is ``tests/test_dspark_gpu_oracle.py``.

Needs an NVIDIA GPU and a CUDA build of vLLM 0.32.0 (DSpark runs only in
vLLM's V2 GPU model runner); skipped everywhere else. Run it with

    pytest -m cuda tests/test_dspark_gpu_e2e.py

By default it uses the tiny random checkpoint (float16, so the fixed-history
Triton kernel runs); set ``SPARK2_5_DSPARK_CHECKPOINT=/path/to/ckpt`` (with
``SPARK2_5_DSPARK_NUM_SPEC_TOKENS`` = its ``dspark_block_size``) to compare on a
real Spark2_5 checkpoint with DSpark weights.
"""

from __future__ import annotations

import os

import pytest
from vllm_helpers import run_llm, skip_without_gpu_vllm

pytestmark = [pytest.mark.cuda, pytest.mark.slow]


skip_without_gpu_vllm()

PROMPTS = [
    [11, 45, 200, 7, 93, 310, 5, 64],
    [3] * 40,
    list(range(20, 120)),
    [401, 17, 88, 17, 88, 17, 88, 250, 9],
]
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = os.environ.get("SPARK2_5_DSPARK_CHECKPOINT")
    if path:
        return path, int(os.environ.get("SPARK2_5_DSPARK_NUM_SPEC_TOKENS", "7"))
    import torch

    from vllm_spark2_5_plugin.names import FULL, SLIDING
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    tiny = make_tiny_checkpoint(
        tmp_path_factory.mktemp("dspark-gpu"),
        dtype=torch.float16,
        dspark={
            "dspark_layer_types": [SLIDING, FULL],
            "dspark_markov_head_type": "rnn",
            "dspark_enable_confidence_head": True,
        },
        dspark_prefix="mtp.",
    )
    return str(tiny), 4


def _generate(
    path: str, speculative_config: dict | None, sampling_params
) -> tuple[list, dict]:
    outputs, metrics = run_llm(
        path,
        PROMPTS,
        sampling_params,
        dtype="float16",
        max_model_len=1024,
        gpu_memory_utilization=0.35,
        seed=0,
        speculative_config=speculative_config,
        disable_log_stats=False,
    )
    return [list(o.outputs[0].token_ids) for o in outputs], metrics


def _greedy():
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)


def test_greedy_output_with_dspark_equals_output_without(checkpoint):
    path, num_spec = checkpoint
    baseline, _ = _generate(path, None, _greedy())
    drafted, metrics = _generate(
        path, {"method": "dspark", "num_speculative_tokens": num_spec}, _greedy()
    )
    for prompt, want, got in zip(PROMPTS, baseline, drafted, strict=True):
        assert got == want, f"prompt {prompt[:8]}...: {got} != {want}"
    # That DSpark ran at all (equal outputs alone would hold without it).
    assert metrics["vllm:spec_decode_num_drafts"].value > 0, "DSpark never drafted"


def test_probabilistic_drafting_runs_at_temperature_one(checkpoint):
    from vllm import SamplingParams

    path, num_spec = checkpoint
    outputs, metrics = _generate(
        path,
        {
            "method": "dspark",
            "num_speculative_tokens": num_spec,
            "draft_sample_method": "probabilistic",
        },
        SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS, seed=1, ignore_eos=True),
    )
    assert [len(tokens) for tokens in outputs] == [MAX_TOKENS] * len(PROMPTS)
    assert metrics["vllm:spec_decode_num_drafts"].value > 0, "DSpark never drafted"


@pytest.mark.parametrize(
    ("compilation", "widened"),
    [({}, True), ({"max_cudagraph_capture_size": 512}, False)],
)
def test_capture_sizes_cover_a_busy_server(checkpoint, compilation, widened):
    """A DSpark server of 512 requests gets CUDA graphs for every batch size
    in both models unless the user sets the capture sizes; with the user's
    cap, vLLM's own list (at most 512 tokens, 64 requests at K = 7)."""
    from vllm.engine.arg_utils import EngineArgs

    from vllm_spark2_5_plugin.configs.cudagraph import dspark_capture_sizes

    path, k = checkpoint
    config = EngineArgs(
        model=path,
        dtype="float16",
        max_model_len=1024,
        max_num_seqs=512,
        max_num_batched_tokens=512 * (k + 1),
        speculative_config={"method": "dspark", "num_speculative_tokens": k},
        compilation_config=compilation,
    ).create_engine_config()
    sizes = config.compilation_config.cudagraph_capture_sizes
    if widened:
        assert sizes == dspark_capture_sizes(k, 512)
    else:
        assert max(sizes) <= 512
