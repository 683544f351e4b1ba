# SPDX-License-Identifier: Apache-2.0
"""Records of the DSpark proposal oracle (:mod:`dspark_oracle`).

What vLLM proposed (:class:`Proposal`) and the finished requests it is
checked against (:class:`RequestSequence`).

Recorded per request of each non-dummy ``propose`` call (:class:`Proposal`)
--------------------------------------------------------------------------

Let ``i`` be the request's row in the batch, ``Q = num_query_per_req`` (``K``
for DSpark's anchor-as-first layout, ``spec_decode/dspark/speculator.py:53``)
and ``K = num_speculative_steps``.

* ``req_id``: ``input_batch.req_ids[i]`` -- the runner's request id, vLLM's
  internal id ``"<external id>-<8 random chars>"``
  (``v1/engine/input_processor.py:371``); :func:`external_request_id` maps it
  back to ``RequestOutput.request_id``. Row ``i`` of every per-request buffer
  below is this request (the kernel runs one program per batch row).
* ``req_state_idx``: ``input_batch.idx_mapping_np[i]`` (the request's slot).
* ``block_tokens``: ``speculator.input_buffers.input_ids[i*Q:(i+1)*Q]`` --
  the draft block ``[anchor, noise, ...]`` that the draft forward reads
  (written at ``spec_decode/dflash/speculator.py:667``; the Markov chain reads
  the anchor from the same buffer, ``spec_decode/dspark/speculator.py:177``).
  ``anchor_token = block_tokens[0]``: the last sampled token
  (``last_sampled``), or for a request still prefilling in chunks the next
  prompt token (``next_prefill_tokens``), lines 590-595.
* ``block_positions``: ``speculator.input_buffers.positions[i*Q:(i+1)*Q]``:
  ``L .. L+Q-1``, clamped to ``max_model_len - 1`` (lines 637, 668), where
  ``L = last valid context position + 1`` = the number of tokens whose target
  hidden states exist. ``anchor_pos = block_positions[0] = L``.
* ``seq_len``: ``speculator.input_buffers.seq_lens[i]`` = ``min(L + Q,
  max_model_len)`` (line 690).
* ``num_sampled`` / ``num_rejected`` / ``num_scheduled``: the ``propose``
  arguments ``num_sampled[i]``, ``num_rejected[i]`` and
  ``input_batch.num_scheduled_tokens[i]`` (diagnostics; ``num_sampled == 0``
  marks a partial prefill chunk).
* ``draft``: ``propose``'s return value ``speculator.draft_tokens[i, :K]``
  (written at ``spec_decode/dspark/speculator.py:189``).
* ``logits`` (``draft_sample_method="probabilistic"`` only):
  ``speculator.draft_logits[req_state_idx, :K]`` -- the pre-temperature draft
  logits that the Gumbel sampler caches for the rejection sampler
  (``spec_decode/dspark/speculator.py:151``, ``sample/gumbel.py:236-256``),
  i.e. vLLM's own draft distribution, as float32 (capped by memory).
* ``confidence`` (only when the speculator uses the confidence head, i.e.
  ``enable_adaptive_verification``): ``draft_token_confidence_probs[i, :K]``
  (line 197).
* ``step``, ``cuda_graph``: the ordinal of the ``propose`` call and whether
  its draft was replayed from a CUDA graph.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, fields
from typing import Any

import torch


@dataclass
class Proposal:
    """One request's draft in one ``propose`` call (see the module docstring)."""

    step: int
    req_id: str
    batch_index: int
    req_state_idx: int
    block_tokens: list[int]
    block_positions: list[int]
    seq_len: int
    num_sampled: int
    num_rejected: int
    num_scheduled: int
    draft: list[int]
    cuda_graph: bool = False
    logits: torch.Tensor | None = None  # [K, V] float32, CPU
    confidence: list[float] | None = None

    @property
    def anchor_pos(self) -> int:
        return self.block_positions[0]

    @property
    def anchor_token(self) -> int:
        return self.block_tokens[0]

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["logits"] = None if self.logits is None else list(self.logits.shape)
        return out


@dataclass
class RequestSequence:
    """A finished request: its vLLM request id and final token ids."""

    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]

    @property
    def token_ids(self) -> list[int]:
        return [*self.prompt_token_ids, *self.output_token_ids]

    @classmethod
    def from_request_output(cls, out: Any) -> RequestSequence:
        return cls(
            out.request_id,
            list(out.prompt_token_ids),
            list(out.outputs[0].token_ids),
        )


def external_request_id(runner_id: str, known: Container[str]) -> str | None:
    """The ``RequestOutput.request_id`` of a runner request id, if known.

    vLLM 0.32.0 appends ``-<8 random chars>`` to every external id.
    """
    if runner_id in known:
        return runner_id
    head, sep, _ = runner_id.rpartition("-")
    if sep and head in known:
        return head
    return None
