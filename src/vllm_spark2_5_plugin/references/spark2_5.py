# SPDX-License-Identifier: Apache-2.0
"""Pure-PyTorch reference of the Spark2_5 forward pass (``docs/model.md``).

Independent of vLLM and of the plugin's model code: written from the model
description alone, on whole sequences with dense masks, in float64 by default
(float32 for a faster check, on any device). The tests compare vLLM's output
with it; the building blocks live in :mod:`.layers`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vllm_spark2_5_plugin.names import DRAFT_WEIGHT_PREFIXES
from vllm_spark2_5_plugin.references.layers import (
    ReferenceModel,
    causal_mask,
    decoder_layer,
    rms_norm,
)


class Spark2_5Reference(ReferenceModel):
    """The whole model on one sequence, without any cache.

    ``Spark2_5Reference(config, weights, dtype=torch.float64, device="cpu")``
    puts ``weights`` in ``dtype`` on ``device``, leaving out the tensors of a
    DSpark draft (``draft_model.``, ``mtp.``, ``model.mtp.``).
    """

    @staticmethod
    def reads(name: str) -> bool:
        """Every tensor but the draft's."""
        return not name.startswith(DRAFT_WEIGHT_PREFIXES)

    def residual_stream(self, ids: Sequence[int] | torch.Tensor) -> list[torch.Tensor]:
        """``[h_0, h_1, ..., h_N]``: h_0 the embeddings, h_i the output of layer i-1.

        Each entry is ``[T, H]``; DSpark's features of target layer ``i`` are
        ``h_{i+1}``.
        """
        ids_t = torch.as_tensor(ids, dtype=torch.long, device=self.device)
        positions = torch.arange(len(ids_t), device=self.device)
        h = self.embed_tokens[ids_t]
        stream = [h]
        cfg = self.config
        for i, layer_type in enumerate(cfg.layer_types):
            visible = causal_mask(positions, cfg.window(layer_type))
            prefix = f"model.layers.{i}."
            h = decoder_layer(
                h, positions, self.weights, prefix, cfg, layer_type, visible
            )
            stream.append(h)
        return stream

    def final_norm(self, h: torch.Tensor) -> torch.Tensor:
        """``rmsnorm(h, norm)``: the hidden states the LM head (or a pooling
        head) reads, for last-layer states ``h [T, H]``."""
        return rms_norm(h, self.weights["model.norm.weight"], self.config.rms_norm_eps)

    def final_logits(self, h: torch.Tensor) -> torch.Tensor:
        """``rmsnorm(h, norm) lm_head^T`` for last-layer states ``h [T, H]``."""
        return self.final_norm(h) @ self.lm_head.T

    def logits(self, ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """Next-token logits ``[T, V]`` for every position of ``ids``."""
        return self.final_logits(self.residual_stream(ids)[-1])

    def greedy(
        self, prompt: Sequence[int], max_tokens: int
    ) -> tuple[list[int], list[torch.Tensor]]:
        """Greedy continuation and the log-softmax row of each chosen token."""
        ids, logprob_rows = list(prompt), []
        for _ in range(max_tokens):
            row = torch.log_softmax(self.logits(ids)[-1], dim=-1)
            logprob_rows.append(row)
            ids.append(int(row.argmax()))
        return ids[len(prompt) :], logprob_rows
