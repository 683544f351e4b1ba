# SPDX-License-Identifier: Apache-2.0
"""DSpark proposal oracle: record what vLLM's speculator drafts, recompute it.

"Greedy output with DSpark equals output without" proves nothing about the
draft (rejection sampling repairs any draft). This module records every draft
that vLLM 0.32.0's ``DSparkSpeculator`` really proposes for real requests and
recomputes each one with the independent pure-PyTorch references
(:mod:`vllm_spark2_5_plugin.references`). It imports neither vLLM nor CUDA at
module level: the comparison logic runs (and is tested) on CPU.

The oracle is split into modules of one job each; this module re-exports
their public names:

* :mod:`dspark_oracle_records` -- the records (:class:`Proposal`,
  :class:`RequestSequence`, :func:`external_request_id`) and what each field
  of a proposal is;
* :mod:`dspark_oracle_recorder` -- the vLLM side: what is wrapped and why
  there (:class:`ProposalRecorder`);
* :mod:`dspark_oracle_references` -- the pure-PyTorch references in one dtype
  (:class:`ReferencePair`, :class:`StepReference`);
* :mod:`dspark_oracle_stats` -- per-position statistics (:func:`flip_noise`,
  :func:`top2_margin`, :func:`total_variation`, ...);
* :mod:`dspark_oracle_report` -- settings, the report and the pass criteria:
  greedy, probabilistic, confidence and the measured threshold
  (:class:`OracleSettings`, :class:`OracleReport`);
* :mod:`dspark_oracle_compare` -- the comparison loop (:class:`DSparkOracle`).
"""

from __future__ import annotations

from dspark_oracle_compare import DSparkOracle
from dspark_oracle_recorder import ProposalRecorder
from dspark_oracle_records import Proposal, RequestSequence, external_request_id
from dspark_oracle_references import ReferencePair, StepReference
from dspark_oracle_report import OracleReport, OracleSettings
from dspark_oracle_stats import flip_noise, top2_margin, total_variation

__all__ = [
    "DSparkOracle",
    "OracleReport",
    "OracleSettings",
    "Proposal",
    "ProposalRecorder",
    "ReferencePair",
    "RequestSequence",
    "StepReference",
    "external_request_id",
    "flip_noise",
    "top2_margin",
    "total_variation",
]
