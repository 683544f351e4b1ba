# SPDX-License-Identifier: Apache-2.0
"""The CUDA-graph capture sizes suggested for a busy DSpark server."""

from __future__ import annotations

import json

import pytest

from vllm_spark2_5_plugin.tools.cudagraph_sizes import (
    compilation_config,
    dspark_capture_sizes,
    main,
    request_ladder,
)


@pytest.mark.parametrize(("k", "max_num_seqs"), [(7, 512), (4, 256), (3, 1000), (1, 5)])
def test_every_batch_size_pads_to_a_graph_in_both_models(k, max_num_seqs):
    """A draft step of R requests (R*K tokens) and a target decode step
    (R*(K+1) tokens) each find a size at most twice as large, for every R
    up to max_num_seqs, and the largest sizes are exactly max_num_seqs'."""
    sizes = dspark_capture_sizes(k, max_num_seqs)
    assert sizes == sorted(set(sizes))
    assert sizes[-1] == max_num_seqs * (k + 1)
    assert max_num_seqs * k in sizes
    for r in range(1, max_num_seqs + 1):
        for tokens_per_request in (k, k + 1):
            need = r * tokens_per_request
            pad = min(s for s in sizes if s >= need and s % tokens_per_request == 0)
            assert pad <= 2 * need, (r, tokens_per_request, pad)


def test_fewer_graphs_than_vllms_default_list_at_k7():
    """vLLM's default list on an H200 has 51 sizes up to 512 tokens; this one
    covers 512 requests (4096 tokens) with fewer."""
    assert len(dspark_capture_sizes(7, 512)) < 51


def test_ladder_includes_the_cap_and_refuses_nonsense():
    assert request_ladder(1) == [1]
    assert request_ladder(500)[-1] == 500
    assert request_ladder(1024)[-3:] == [896, 960, 1024]
    with pytest.raises(ValueError, match="max_num_seqs must be >= 1"):
        request_ladder(0)
    with pytest.raises(TypeError, match="max_num_seqs must be an int"):
        request_ladder(True)
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        dspark_capture_sizes(0, 16)


def test_vllm_takes_the_list(capsys):
    from vllm.config import CompilationConfig

    sizes = json.loads(compilation_config(7, 512))["cudagraph_capture_sizes"]
    assert (
        CompilationConfig(cudagraph_capture_sizes=sizes).cudagraph_capture_sizes
        == sizes
    )
    main(["--num-speculative-tokens", "7", "--max-num-seqs", "512"])
    out = capsys.readouterr().out
    assert "--compilation-config '" in out and ">= 4096" in out
    with pytest.raises(SystemExit):
        main(["--num-speculative-tokens", "0", "--max-num-seqs", "512"])
