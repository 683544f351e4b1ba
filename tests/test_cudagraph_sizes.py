# SPDX-License-Identifier: Apache-2.0
"""The CUDA-graph capture sizes suggested for a busy DSpark server."""

from __future__ import annotations

import json

import pytest

from vllm_spark2_5_plugin.configs.cudagraph import (
    VLLM_DEFAULT_MAX_CAPTURE_SIZE,
    compilation_config,
    coverage_hint,
    dspark_capture_sizes,
    request_ladder,
    widen_capture_sizes,
    widened_message,
)
from vllm_spark2_5_plugin.tools.cudagraph_sizes import main


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


def _config(mode, max_size, max_num_seqs, k=7, sizes=None):
    """What ``coverage_hint`` reads of a resolved VllmConfig; the compilation
    part is vLLM's own CompilationConfig."""
    from types import SimpleNamespace

    from vllm.config import CompilationConfig
    from vllm.config.compilation import CUDAGraphMode

    fields = {} if sizes is None else {"cudagraph_capture_sizes": sizes}
    compilation = CompilationConfig(
        cudagraph_mode=getattr(CUDAGraphMode, mode), **fields
    )
    compilation.max_cudagraph_capture_size = max_size
    return SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=k),
        compilation_config=compilation,
        scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs),
    )


def test_start_up_hint_when_graphs_stop_short_of_max_num_seqs():
    """vLLM's default on an H200 (512 tokens) covers 64 requests at K = 7."""
    hint = coverage_hint(_config("FULL_AND_PIECEWISE", 512, 256))
    assert hint is not None
    assert "cover steps of up to 64 requests" in hint
    assert "max_num_seqs=256" in hint and ">= 2048" in hint
    sizes = json.loads(hint.split("--compilation-config '")[1].split("'")[0])
    assert sizes == json.loads(compilation_config(7, 256))


@pytest.mark.parametrize(
    ("mode", "max_size", "max_num_seqs"),
    [
        ("FULL_AND_PIECEWISE", 512, 64),  # 64 * 8 = 512: covered
        ("FULL_AND_PIECEWISE", 4096, 512),  # the tool's own list
        ("NONE", 512, 256),  # no graphs at all (eager, or the CPU build)
    ],
)
def test_no_hint_when_graphs_cover_the_server_or_are_off(mode, max_size, max_num_seqs):
    assert coverage_hint(_config(mode, max_size, max_num_seqs)) is None


def test_hint_reads_the_largest_size_from_the_list_when_needed():
    config = _config("FULL_AND_PIECEWISE", None, 128, k=3, sizes=[4, 8, 64])
    assert "cover steps of up to 16 requests" in coverage_hint(config)


def _unresolved(
    max_num_seqs, k=7, batched=8192, eager=False, mode="balanced", **compilation
):
    """What the plugin's hook sees of a DSpark engine config before vLLM
    derives its capture sizes: vLLM's own compilation and scheduler configs,
    ``compilation`` as the user's ``--compilation-config``."""
    from types import SimpleNamespace

    from vllm.config import CompilationConfig, SchedulerConfig

    return SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=k),
        compilation_config=CompilationConfig(**compilation),
        scheduler_config=SchedulerConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=batched,
            max_model_len=4096,
            is_encoder_decoder=False,
        ),
        model_config=SimpleNamespace(enforce_eager=eager),
        performance_mode=mode,
    )


def test_widened_sizes_cover_max_num_seqs_in_both_models():
    """vLLM's default (512 tokens) covers 64 requests at K = 7; a server of
    512 gets the tool's list, and then no start-up hint is left to give."""
    config = _unresolved(512)
    sizes = widen_capture_sizes(config, cuda=True)
    assert sizes == dspark_capture_sizes(7, 512)
    assert config.compilation_config.cudagraph_capture_sizes == sizes
    assert sizes[-1] == 4096 > VLLM_DEFAULT_MAX_CAPTURE_SIZE
    assert widen_capture_sizes(_unresolved(512, mode="throughput"), cuda=True) == sizes
    config.compilation_config.max_cudagraph_capture_size = sizes[-1]
    assert coverage_hint(config) is None
    message = widened_message(sizes, 7)
    assert "up to 512 requests" in message and "4096 tokens" in message
    opt_out = json.loads(message.split("--compilation-config '")[1].rstrip("'"))
    assert opt_out == {"max_cudagraph_capture_size": VLLM_DEFAULT_MAX_CAPTURE_SIZE}


def test_widened_sizes_stop_at_max_num_batched_tokens():
    """vLLM drops sizes above max_num_batched_tokens: the list stops at the
    largest target step that fits (2048 // 8 = 256 requests)."""
    sizes = widen_capture_sizes(_unresolved(1024, batched=2048), cuda=True)
    assert sizes == dspark_capture_sizes(7, 256) and sizes[-1] == 2048


@pytest.mark.parametrize(
    ("config", "cuda"),
    [
        (_unresolved(512), False),  # not a CUDA platform
        (_unresolved(512, eager=True), True),  # --enforce-eager
        (_unresolved(512, cudagraph_mode="NONE"), True),  # graphs off
        (_unresolved(512, cudagraph_capture_sizes=[8, 16]), True),  # user's list
        (_unresolved(512, max_cudagraph_capture_size=512), True),  # user's cap
        (_unresolved(512, mode="interactivity"), True),  # small-batch graphs
        (_unresolved(64), True),  # 64 * 8 = 512: vLLM's default covers it
        (_unresolved(512, batched=512), True),  # only 64 requests fit a step
    ],
)
def test_sizes_stay_vllms_when_the_user_chose_or_they_cover(config, cuda):
    before = config.compilation_config.cudagraph_capture_sizes
    assert widen_capture_sizes(config, cuda=cuda) is None
    assert config.compilation_config.cudagraph_capture_sizes == before
