# SPDX-License-Identifier: Apache-2.0
"""vLLM's DSpark heads and the speculator that calls the draft."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from vllm_spark2_5_plugin.vllm_seam.hooks import expect as _expect
from vllm_spark2_5_plugin.vllm_seam.hooks import hook_point as _hook_point
from vllm_spark2_5_plugin.vllm_seam.hooks import params as _params

if TYPE_CHECKING:
    pass


# ---------------------------------------------------------------------------
# vLLM's DSpark heads and the speculator that calls the draft
# ---------------------------------------------------------------------------


def dspark_heads() -> tuple[type, type]:
    """vLLM's ``(DSparkMarkovHead, DSparkConfidenceHead)`` module classes."""
    from vllm.model_executor.models.qwen3_dspark import (
        DSparkConfidenceHead,
        DSparkMarkovHead,
    )

    return DSparkMarkovHead, DSparkConfidenceHead


@_hook_point(
    "qwen3_dspark.DSparkMarkovHead(vocab_size, draft_vocab_size, markov_rank, "
    "prefix, quant_config) with embed/bias, and DSparkConfidenceHead(input_dim, "
    "prefix, bias, with_markov) returning a logit"
)
def _check_dspark_heads() -> None:
    markov, confidence = dspark_heads()
    _expect(
        _params(markov)[:5]
        == ["vocab_size", "draft_vocab_size", "markov_rank", "prefix", "quant_config"],
        f"DSparkMarkovHead{_params(markov)}",
    )
    _expect(callable(markov.embed) and callable(markov.bias), "embed and bias")
    _expect(
        _params(confidence)[:4] == ["input_dim", "prefix", "bias", "with_markov"],
        f"DSparkConfidenceHead{_params(confidence)}",
    )


#: What vLLM's DSpark speculator calls on the draft model (and the draft
#: implements); a rename on vLLM's side would silently bypass our method.
DRAFT_PROTOCOL = (
    "combine_hidden_states",
    "precompute_and_store_context_kv",
    "compute_draft_logits",
    "markov_embed",
    "markov_bias",
    "compute_confidence",
    "map_draft_to_target",
)


@_hook_point("the V2 DSpark/DFlash speculators call the draft's protocol methods")
def _check_dspark_draft_protocol() -> None:
    from vllm.v1.worker.gpu.spec_decode.dflash import speculator as dflash
    from vllm.v1.worker.gpu.spec_decode.dspark import speculator as dspark

    source = inspect.getsource(dflash) + inspect.getsource(dspark)
    for method in DRAFT_PROTOCOL:
        _expect(f".{method}(" in source, f"the speculator calls .{method}(")


@_hook_point(
    "EagleModelMixin.aux_hidden_state_layers holds the aux ids the runner "
    "asked for (id k = the residual stream entering layer k)"
)
def _check_aux_hidden_state_layers() -> None:
    from vllm.model_executor.models.interfaces import EagleModelMixin

    _expect(EagleModelMixin.aux_hidden_state_layers == (), "aux_hidden_state_layers")
    source = inspect.getsource(EagleModelMixin)
    _expect(
        "self.aux_hidden_state_layers = tuple(sorted(set(layers)))" in source,
        "aux ids stored sorted and unique",
    )
