# SPDX-License-Identifier: Apache-2.0
"""vLLM's pooling conversions of a Spark2_5 model (``--runner pooling
--convert embed|classify``) load and pool as the reference says, and prompt
embeddings (``--enable-prompt-embeds``) generate as the reference does.

vLLM wraps the plugin's ``Spark2_5ForCausalLM`` in its own adapters: the
embedding model pools the final-normed hidden state of the last token, the
classifier adds a ``score`` head read from the checkpoint, or filled from two
rows of the LM head for a reranker converted online. Every expected value
comes from the float64 reference of SPEC §3.
"""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_generation_parity import assert_matches_reference
from vllm_helpers import (
    GREEDY_KWARGS,
    greedy_params,
    greedy_results,
    llm_engine,
    raised_value_error_naming,
)

from vllm_spark2_5_plugin.references.spark2_5 import Spark2_5Reference

pytestmark = pytest.mark.slow

PROMPT = [5, 17, 33, 101, 7, 250, 42, 9]
NUM_LABELS = 3
# fp32 engine vs float64 reference (pooled values were seen to agree to ~1e-7).
ATOL = 1e-5


@pytest.fixture(scope="module")
def reference(tiny_checkpoint):
    return Spark2_5Reference.from_checkpoint(tiny_checkpoint)


@pytest.fixture(scope="module")
def last_state(reference):
    """The final-normed hidden state of the prompt's last token."""
    return reference.final_norm(reference.residual_stream(PROMPT)[-1])[-1]


def with_score_head(source, destination, rows: int):
    """A copy of the checkpoint at ``source`` with a random ``score.weight``."""
    destination.mkdir()
    for path in source.iterdir():
        if path.name != "model.safetensors":
            (destination / path.name).write_bytes(path.read_bytes())
    weights = load_file(source / "model.safetensors")
    hidden = weights["model.norm.weight"].shape[0]
    gen = torch.Generator().manual_seed(11)
    weights["score.weight"] = torch.randn(rows, hidden, generator=gen) * 0.3
    save_file(weights, destination / "model.safetensors", metadata={"format": "pt"})
    return weights["score.weight"].double()


def classify(path, **llm_kwargs) -> torch.Tensor:
    with llm_engine(
        path, **GREEDY_KWARGS, runner="pooling", convert="classify", **llm_kwargs
    ) as llm:
        (output,) = llm.classify([{"prompt_token_ids": PROMPT}], use_tqdm=False)
    return torch.tensor(output.outputs.probs, dtype=torch.float64)


def test_embed_pools_the_normalised_last_state(tiny_checkpoint, last_state):
    with llm_engine(
        tiny_checkpoint, **GREEDY_KWARGS, runner="pooling", convert="embed"
    ) as llm:
        (output,) = llm.embed([{"prompt_token_ids": PROMPT}], use_tqdm=False)
    embedding = torch.tensor(output.outputs.embedding, dtype=torch.float64)
    expected = last_state / last_state.norm()
    assert embedding.shape == expected.shape
    assert torch.allclose(embedding, expected, atol=ATOL, rtol=0)


def test_classify_reads_the_checkpoints_score_head(
    tiny_checkpoint, tmp_path, last_state
):
    score = with_score_head(tiny_checkpoint, tmp_path / "head", NUM_LABELS)
    probs = classify(tmp_path / "head", hf_overrides={"num_labels": NUM_LABELS})
    expected = torch.softmax(score @ last_state, dim=-1)
    assert torch.allclose(probs, expected, atol=ATOL, rtol=0), (probs, expected)


def test_classify_without_a_score_head_is_refused_naming_it(tiny_checkpoint):
    with pytest.raises(Exception) as caught:
        classify(tiny_checkpoint, hf_overrides={"num_labels": NUM_LABELS})
    assert raised_value_error_naming(
        caught.value, "'score.weight' of shape (3, 64) = (num_labels, hidden_size)"
    ), caught.value
    assert raised_value_error_naming(caught.value, "classifier_from_token")


def test_a_score_head_of_other_labels_is_refused_naming_num_labels(
    tiny_checkpoint, tmp_path
):
    with_score_head(tiny_checkpoint, tmp_path / "head", NUM_LABELS + 1)
    with pytest.raises(Exception) as caught:
        classify(tmp_path / "head", hf_overrides={"num_labels": NUM_LABELS})
    assert raised_value_error_naming(caught.value, "score.weight"), caught.value
    assert raised_value_error_naming(caught.value, "num_labels"), caught.value


def test_reranker_converted_online_scores_from_two_logits(tiny_checkpoint, reference):
    """``from_2_way_softmax``: sigmoid(logit[true] - logit[false]) of the last
    token, the head filled from the LM head after the strict load."""
    vocab = json.loads((tiny_checkpoint / "tokenizer.json").read_text())["model"][
        "vocab"
    ]
    by_id = {i: token for token, i in vocab.items()}
    false_id, true_id = 300, 301
    probs = classify(
        tiny_checkpoint,
        hf_overrides={
            "classifier_from_token": [by_id[false_id], by_id[true_id]],
            "method": "from_2_way_softmax",
            "num_labels": 1,
        },
    )
    logits = reference.logits(PROMPT)[-1]
    expected = torch.sigmoid(logits[true_id] - logits[false_id])
    assert probs.shape == (1,)
    assert abs(float(probs[0]) - float(expected)) < ATOL, (probs, expected)


def test_prompt_embeddings_are_the_unscaled_embedding_rows(tiny_checkpoint):
    """The prompt given as rows of ``model.embed_tokens.weight`` (Spark2_5
    does not scale them) continues as the reference continues the token ids,
    in one batch with the same prompt given as ids."""
    rows = load_file(tiny_checkpoint / "model.safetensors")["model.embed_tokens.weight"]
    with llm_engine(tiny_checkpoint, **GREEDY_KWARGS, enable_prompt_embeds=True) as llm:
        outputs = llm.generate(
            [{"prompt_embeds": rows[PROMPT]}, {"prompt_token_ids": PROMPT}],
            greedy_params(12),
            use_tqdm=False,
        )
    results = greedy_results(outputs)
    assert_matches_reference(tiny_checkpoint, results, [PROMPT, PROMPT])
