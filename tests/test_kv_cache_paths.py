# SPDX-License-Identifier: Apache-2.0
"""The engine's KV-cache paths keep the model exact (SPEC §3 reference).

``test_generation_parity.py`` serves each prompt once on a fresh engine, in
one prefill: no prefix-cache hit, no prompt cut into chunks, no preemption.
Here a small sliding window (8) and 32-token blocks make those paths cross
the window: cached blocks of sliding layers reused by a later request, a
prompt prefilled 16 tokens at a time, requests preempted and recomputed
(while sliding blocks are freed as requests decode past the window; no
counter shows that part). vLLM's own counters show that the cache hits and
the preemptions happened (the 16-token chunks follow from the batch's token
limit); then every request is compared with the float64 reference.
"""

import pytest
import torch
from test_generation_parity import assert_matches_reference
from vllm_helpers import (
    GREEDY_KWARGS,
    generate_tokens,
    greedy_params,
    greedy_results,
    llm_engine,
    run_llm,
)

from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

WINDOW = 8
BLOCK = 32

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(
        tmp_path_factory.mktemp("kv-cache-paths"), seed=7, sliding_window=WINDOW
    )


def random_prompt(length: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(20, 500, (length,), generator=gen).tolist()


def test_prefix_cache_hits_and_chunked_prefill_match_reference(checkpoint):
    """A repeated prompt and prompts sharing a 150-token prefix (not a
    multiple of the block), one request at a time on one engine, prefilled at
    most 16 tokens a step: the hits reuse sliding layers' blocks that hold
    only the window's keys."""
    prompt = random_prompt(200, 1)
    prefix = random_prompt(150, 2)
    requests = [
        prompt,
        prompt,
        prefix + random_prompt(37, 3),
        prefix + random_prompt(53, 4),
        prefix[:141] + random_prompt(20, 5),
    ]
    params = greedy_params(30)
    results, cached = [], []
    with llm_engine(
        checkpoint,
        **GREEDY_KWARGS,
        block_size=BLOCK,
        enable_prefix_caching=True,
        enable_chunked_prefill=True,
        max_num_batched_tokens=16,
        max_num_seqs=4,
    ) as llm:
        for request in requests:
            (output,) = generate_tokens(llm, [request], params)
            cached.append(output.num_cached_tokens or 0)
            results += greedy_results([output])
    # The repeat reads all its full blocks from the cache; a later request
    # on the shared prefix hits too (which one depends on the blocks vLLM's
    # sliding-window policy kept).
    assert cached[0] == 0 and cached[1] >= 6 * BLOCK, cached
    assert any(n >= 4 * BLOCK for n in cached[2:]), cached
    assert_matches_reference(checkpoint, results, requests)


def test_preempted_requests_match_reference(checkpoint):
    """Eight requests on a cache of 28 blocks: vLLM preempts some and
    recomputes them later; their sliding blocks are freed as they decode past
    the window.

    28 is about the least vLLM starts with under both builds: one request of
    ``max_model_len`` (256) takes 8 blocks of the full-attention layer and,
    on each of the three sliding layers, the window plus the tokens in flight
    (one 64-token batch on the CPU build, two under the CUDA build's
    asynchronous scheduling: 4 or 6 blocks), and vLLM keeps one block back.
    """
    lengths = [100, 37, 120, 64, 90, 15, 110, 50]
    max_tokens = [60, 80, 40, 70, 60, 90, 50, 75]
    requests = [random_prompt(n, 100 + i) for i, n in enumerate(lengths)]
    outputs, metrics = run_llm(
        checkpoint,
        requests,
        [greedy_params(n) for n in max_tokens],
        **GREEDY_KWARGS
        | dict(
            max_model_len=256,
            block_size=BLOCK,
            num_gpu_blocks_override=28,
            enable_chunked_prefill=True,
            max_num_batched_tokens=64,
            disable_log_stats=False,
        ),
    )
    assert metrics["vllm:num_preemptions"].value >= 1
    results = greedy_results(outputs)
    assert [len(tokens) for tokens, _ in results] == max_tokens
    assert_matches_reference(checkpoint, results, requests)
