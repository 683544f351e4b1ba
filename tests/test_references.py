# SPDX-License-Identifier: Apache-2.0
"""The pure-PyTorch references against themselves (CPU, no vLLM).

The draft's layer is the target's decoder layer; precomputed context K/V
change nothing; margins are what they say; float32 stays close to float64.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vllm_spark2_5_plugin.names import FULL, SLIDING
from vllm_spark2_5_plugin.references.dspark import DSparkReference
from vllm_spark2_5_plugin.references.layers import (
    block_mask,
    causal_mask,
    decoder_layer,
    read_checkpoint,
    rms_norm,
)
from vllm_spark2_5_plugin.references.spark2_5 import Spark2_5Reference

# Longer than the tiny sliding_window (16) so that windows matter.
IDS = [5, 77, 300, 12, 9, 41, 250, 8, 19, 64, 3, 99, 120, 7, 88, 200, 31, 2]
IDS += [17, 45, 6, 410, 23, 58]

CHECKPOINTS = {
    "vanilla-sliding": dict(dspark_prefix="draft_model.", dspark=True),
    "rnn-confidence-bias-tied": dict(
        dspark_prefix="mtp.",
        dspark={
            "dspark_markov_head_type": "rnn",
            "dspark_enable_confidence_head": True,
            "dspark_layer_types": [SLIDING, FULL],
            "dspark_sliding_window": 5,
        },
        attention_bias=True,
        tie_word_embeddings=True,
    ),
}


@pytest.fixture(scope="module", params=list(CHECKPOINTS))
def checkpoint(request, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    path = tmp_path_factory.mktemp(f"refs-{request.param}")
    return make_tiny_checkpoint(path, **CHECKPOINTS[request.param])


def load(
    path: Path, dtype: torch.dtype = torch.float64, device: str = "cpu"
) -> tuple[Spark2_5Reference, DSparkReference]:
    return (
        Spark2_5Reference.from_checkpoint(path, dtype, device),
        DSparkReference.from_checkpoint(path, dtype, device),
    )


def context_features(
    target: Spark2_5Reference, draft: DSparkReference, ids: list[int]
) -> torch.Tensor:
    """``c [T, H]`` from the target's outputs of the draft's target layers."""
    stream = target.residual_stream(ids)
    return draft.combine([stream[i + 1] for i in draft.target_layer_ids])


def test_settings_and_kept_tensors(checkpoint: Path):
    config, _ = read_checkpoint(checkpoint, keep=lambda name: False)
    target, draft = load(checkpoint)
    assert draft.target_layer_ids == sorted(config["dspark_target_layer_ids"])
    assert draft.block_size == config["dspark_block_size"] == 4
    assert draft.noise_token_id == config["dspark_noise_token_id"]
    assert not any(n.startswith(draft.prefix) for n in target.weights)
    assert all(
        n.startswith(draft.prefix) or n.startswith(("model.embed", "lm_head"))
        for n in draft.weights
    )
    assert len(draft.draft(draft.combine([torch.zeros(3, 64)] * 2), 9).tokens) == 4


def test_draft_layer_without_context_is_the_target_layer(checkpoint: Path):
    """Draft layer 0 holding target layer i's weights, causal mask = layer i."""
    config, weights = read_checkpoint(checkpoint)
    target = Spark2_5Reference(config, weights)
    prefix = DSparkReference(config, weights).prefix
    stream = target.residual_stream(IDS)
    positions = torch.arange(len(IDS))
    for i, layer_type in enumerate(target.config.layer_types):
        source = f"model.layers.{i}."
        swapped = {n: t for n, t in weights.items() if not n.startswith(prefix)}
        for name, tensor in weights.items():
            if name.startswith(source):
                swapped[f"{prefix}layers.0.{name.removeprefix(source)}"] = tensor
        draft_config = {
            **config,
            "dspark_layer_types": [layer_type],
            "dspark_sliding_window": config["sliding_window"],
        }
        draft = DSparkReference(draft_config, swapped)
        window = draft.config.window(layer_type)
        assert window == (16 if layer_type == SLIDING else None)
        got = draft.layer(0, stream[i], positions, causal_mask(positions, window))
        assert torch.equal(got, stream[i + 1]), (i, layer_type)


def test_context_keys_are_keys_of_a_longer_sequence(checkpoint: Path):
    """Context K/V of ``c = input_norm(h)`` = the layer's own K/V of ``h``.

    So a draft layer over context + block is the same decoder layer on the
    concatenated sequence, whose block rows use the block mask.
    """
    _, draft = load(checkpoint)
    gen = torch.Generator().manual_seed(3)
    ctx_len, blk_len, hidden = 21, 4, draft.config.hidden_size
    h = torch.randn(ctx_len + blk_len, hidden, generator=gen, dtype=torch.float64)
    positions = torch.arange(ctx_len + blk_len)
    for j, layer_type in enumerate(draft.config.layer_types):
        norm = draft.w(f"layers.{j}.input_layernorm.weight")
        c = rms_norm(h[:ctx_len], norm, draft.config.rms_norm_eps)
        context = draft.context_kv(j, c, positions[:ctx_len])
        visible = draft.visible_keys(j, ctx_len, blk_len)
        got = draft.layer(j, h[ctx_len:], positions[ctx_len:], visible, context)
        full_mask = torch.cat([causal_mask(positions, None)[:ctx_len], visible], dim=0)
        want = decoder_layer(
            h,
            positions,
            draft.weights,
            f"{draft.prefix}layers.{j}.",
            draft.config,
            layer_type,
            full_mask,
        )[ctx_len:]
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_block_mask_sees_the_window_and_the_whole_block():
    mask = block_mask(10, 3, 4)
    assert mask.shape == (3, 13)
    assert mask[:, 6:].all() and not mask[:, :6].any()
    assert block_mask(2, 3, 4).all() and block_mask(10, 3, None).all()


def test_draft_with_precomputed_context_equals_draft_without(checkpoint: Path):
    target, draft = load(checkpoint)
    c = context_features(target, draft, IDS)
    precomputed = draft.context_kv_all(c)
    assert len(precomputed) == len(IDS)
    for ctx_len in (1, 4, 17, len(IDS)):
        prefix = precomputed.prefix(ctx_len)
        assert len(prefix) == ctx_len
        anchor = IDS[ctx_len - 1]
        plain = draft.draft(c[:ctx_len], anchor)
        fast = draft.draft(prefix, anchor)
        assert fast.tokens == plain.tokens
        for name in ("hidden", "base_logits", "markov_embeds", "logits"):
            torch.testing.assert_close(
                getattr(fast, name), getattr(plain, name), rtol=1e-12, atol=1e-12
            )
        if plain.confidence is not None:
            torch.testing.assert_close(fast.confidence, plain.confidence)
    with pytest.raises(ValueError):
        precomputed.prefix(len(IDS) + 1)


def test_margins_are_top1_minus_top2(checkpoint: Path):
    target, draft = load(checkpoint)
    c = context_features(target, draft, IDS)
    result = draft.draft(c, anchor=IDS[-1], num_tokens=6)
    assert result.margins.shape == (6,)
    assert (result.margins >= 0).all()
    ordered = result.logits.sort(dim=-1, descending=True).values
    torch.testing.assert_close(result.margins, ordered[:, 0] - ordered[:, 1])
    assert result.tokens == result.logits.argmax(-1).tolist()


def compare_precisions(path: Path, device: str) -> None:
    """float32 on ``device`` against float64 on CPU: logits, hidden, tokens."""
    t64, d64 = load(path)
    t32, d32 = load(path, torch.float32, device)
    logits64, logits32 = t64.logits(IDS), t32.logits(IDS)
    assert logits32.dtype == torch.float32 and logits32.device.type == device
    scale = logits64.abs().max()
    torch.testing.assert_close(
        logits32.cpu().double(), logits64, atol=1e-4 * scale, rtol=0
    )

    c64 = context_features(t64, d64, IDS)
    c32 = context_features(t32, d32, IDS)
    ctx32 = d32.context_kv_all(c32)
    for ctx_len in (5, len(IDS)):
        want = d64.draft(c64[:ctx_len], IDS[ctx_len - 1])
        got = d32.draft(ctx32.prefix(ctx_len), IDS[ctx_len - 1])
        assert got.logits.device.type == device
        tol = 1e-4 * want.logits.abs().max()
        torch.testing.assert_close(
            got.logits.cpu().double(), want.logits, atol=tol, rtol=0
        )
        torch.testing.assert_close(
            got.hidden.cpu().double(), want.hidden, atol=1e-4, rtol=1e-4
        )
        # Tokens agree wherever float64's choice is not a near-tie.
        clear = (want.margins > 10 * tol).tolist()
        for a, b, keep in zip(got.tokens, want.tokens, clear, strict=True):
            if not keep:
                break  # later tokens are conditioned on this one
            assert a == b


def test_float32_agrees_with_float64(checkpoint: Path):
    compare_precisions(checkpoint, "cpu")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_float32_on_cuda_agrees_with_float64_on_cpu(checkpoint: Path):
    compare_precisions(checkpoint, "cuda")
