# SPDX-License-Identifier: Apache-2.0
"""Reference side of the DSpark proposal oracle (:mod:`dspark_oracle`).

The pure-PyTorch target and draft references in one dtype on one device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


def _load(cls: Any, path: str | Path, dtype: torch.dtype, device: str) -> Any:
    try:
        return cls.from_checkpoint(path, dtype=dtype, device=device)
    except TypeError:  # an older reference without a device argument
        if str(device) != "cpu":
            raise
        return cls.from_checkpoint(path, dtype=dtype)


@dataclass
class StepReference:
    """The reference's view of one proposal."""

    logits: torch.Tensor  # [K, V] float64 CPU (teacher-forced if ``forced``)
    greedy: list[int]  # the reference's own greedy chain
    confidence: torch.Tensor | None  # [K] float64 CPU
    forced: bool


class ReferencePair:
    """Target + draft references in one dtype on one device."""

    def __init__(self, target: Any, draft: Any) -> None:
        self.target = target
        self.draft = draft

    @classmethod
    def load(cls, path: str | Path, dtype: torch.dtype, device: str) -> ReferencePair:
        from vllm_spark2_5_plugin.references.dspark import DSparkReference
        from vllm_spark2_5_plugin.references.spark2_5 import Spark2_5Reference

        return cls(
            _load(Spark2_5Reference, path, dtype, device),
            _load(DSparkReference, path, dtype, device),
        )

    @property
    def target_layer_ids(self) -> list[int]:
        ids = getattr(self.draft, "target_layer_ids", None)
        return sorted(ids if ids is not None else self.draft.config.target_layer_ids)

    @property
    def noise_token_id(self) -> int:
        value = getattr(self.draft, "noise_token_id", None)
        return int(value if value is not None else self.draft.config.noise_token_id)

    @property
    def vocab_size(self) -> int:
        return int(self.draft.lm_head.shape[0])

    @property
    def teacher_forcing(self) -> bool:
        return hasattr(self.draft, "markov_embeds") and hasattr(
            self.draft, "markov_bias"
        )

    def context(self, token_ids: Sequence[int]) -> Any:
        """The draft context of a whole sequence (context K/V when available)."""
        stream = self.target.residual_stream(list(token_ids))
        c = self.draft.combine([stream[i + 1] for i in self.target_layer_ids])
        if hasattr(self.draft, "context_kv_all"):
            return self.draft.context_kv_all(c)
        return c

    @staticmethod
    def prefix(context: Any, length: int) -> Any:
        return (
            context.prefix(length) if hasattr(context, "prefix") else context[:length]
        )

    def step(
        self, context: Any, length: int, anchor: int, recorded: Sequence[int], k: int
    ) -> StepReference:
        """Reference draft at ``L = length``, Markov chain fed ``recorded``."""
        res = self.draft.draft(self.prefix(context, length), anchor, k)
        if self.teacher_forcing and len(recorded) >= k - 1:
            prev = [int(anchor), *(int(t) for t in recorded[: k - 1])]
            e = self.draft.markov_embeds(prev)
            logits = res.base_logits + self.draft.markov_bias(e)
            conf = None
            if res.confidence is not None and hasattr(self.draft, "confidence"):
                conf = self.draft.confidence(res.hidden, e)
            forced = True
        else:
            logits, conf, forced = res.logits, res.confidence, False
        return StepReference(
            logits.detach().to("cpu", torch.float64),
            [int(t) for t in res.tokens],
            None if conf is None else conf.detach().to("cpu", torch.float64),
            forced,
        )
