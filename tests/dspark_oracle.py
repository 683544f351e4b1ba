# SPDX-License-Identifier: Apache-2.0
"""DSpark proposal oracle: record what vLLM's speculator drafts, recompute it.

"Greedy output with DSpark equals output without" proves nothing about the
draft (rejection sampling repairs any draft). This module records every draft
that vLLM 0.32.0's ``DSparkSpeculator`` really proposes for real requests and
recomputes each one with the independent pure-PyTorch references
(:mod:`vllm_spark2_5_plugin.references`). It imports neither vLLM nor CUDA at
module level: the comparison logic runs (and is tested) on CPU.

What is wrapped (vLLM 0.32.0, paths under ``vllm/v1/worker/gpu/``)
--------------------------------------------------------------------

One method, at class level, before the engine is built:
``DSparkSpeculator.propose`` -- the method ``DSparkSpeculator`` inherits from
``spec_decode/dflash/speculator.py:343`` (``DFlashSpeculator.propose``; the
subclass ``spec_decode/dspark/speculator.py:40`` does not override it). The
wrapper is set on ``DSparkSpeculator`` only, so other speculators are
untouched, and it is removed again afterwards (:meth:`ProposalRecorder.installed`).
The engine must run in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
``distributed_executor_backend="uni"``) so that the worker sees the patch.

Why there, outside every CUDA graph: ``propose`` is plain Python called
eagerly once per engine step by ``GPUModelRunner.sample_tokens``
(``model_runner.py:2239``) and by ``_dummy_run`` (``model_runner.py:943``,
``dummy_run=True``, skipped here). Inside it, what may be a CUDA graph is
``_generate_draft`` (``spec_decode/dspark/speculator.py:250``: the block
forward and the sequential Markov sampling ``_sample_sequential``, line 156),
replayed through ``query_cudagraph_manager.run_fullgraph``
(``spec_decode/dflash/speculator.py:515``) or called eagerly (line 521); the
inputs are prepared before it by ``prepare_dflash_inputs`` (Triton kernel
``_prepare_dflash_inputs_kernel``, ``spec_decode/dflash/speculator.py:533``).
Graph or not, everything lands in persistent speculator buffers that stay
valid until the next ``propose``; the wrapper calls ``torch.cuda.synchronize()``
after ``propose`` returns and copies them to the CPU *before* the runner
touches them (the runner writes ``-1`` into the returned view when fewer
tokens are scheduled, ``model_runner.py:2256``, and copies it to
``req_states.draft_tokens``, line 2257). Asynchronous scheduling and the
asynchronous output copy (``AsyncOutput``, ``model_runner.py:2184``) do not
matter: the speculator's own buffers are read, after a device-wide sync, in
the same thread, before the next step can overwrite them. The wrapper also
shadows ``run_fullgraph`` on the speculator's own graph manager instance to
note whether the step's draft was replayed from a CUDA graph.

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

The comparison (:class:`DSparkOracle`)
--------------------------------------

For each finished request the target reference runs once over its final
token sequence ``seq = prompt + output`` (the target is causal, so the hidden
states of positions ``< L`` are those of ``seq[:L]``), giving
``c = combine([h_{i+1} for i in target_layer_ids])`` and the draft's context
K/V once. For each proposal of the request:

1. ``L >= len(seq)``: the proposal lies past the final sequence (vLLM truncates
   the last accepted tokens at ``max_tokens``; async scheduling may run one
   more step) -- counted as ``beyond_final``, not checked.
2. Layout: ``1 <= L``, positions ``L..L+Q-1``, ``seq_len = L+Q`` (both with
   vLLM's ``max_model_len`` clamp), ``block_tokens[1:]`` all the noise token,
   ``num_sampled > 0`` implies ``L >= prompt_len``, ``len(draft) = K``.
3. Anchor: ``anchor_token == seq[L]``. Every proposal must pass 2 and 3.
4. Draft: the reference drafts from ``c[:L]`` (the context K/V prefix) with
   the same anchor. **Teacher forcing**: the base logits of the block do not
   depend on the sampled tokens, only the Markov chain does, so the reference
   Markov chain is fed vLLM's recorded previous tokens,
   ``prev = [anchor, draft_0 .. draft_{K-2}]``; the reference logits of
   position ``k`` are then exactly what a correct implementation computes
   given vLLM's own prefix, and *every* position is comparable, also after a
   disagreement (a wrong token at ``k`` is caught at ``k``; position ``k+1``
   then checks vLLM's Markov step from that wrong token). Without
   ``markov_embeds``/``markov_bias`` on the reference the oracle falls back to
   comparing the reference's own greedy chain up to and including the first
   disagreement.

Greedy runs: at each position the reference margin ``m = top1 - top2`` of the
teacher-forced logits is computed. Positions with ``m > tau`` are *included*;
the run passes when >= 99 % of included positions agree, and no position with
``m > hard_factor * tau`` (4 tau) disagrees (a disagreement there is far
outside any rounding, so a single corrupted token is a failure).

Threshold ``tau`` (measured, unless given): bf16/fp16 noise of vLLM's logits
is not observable in a greedy run, so it is estimated by running the *same
references in the engine's dtype* (bf16 GEMMs with fp32 accumulation, norms
in fp32, bf16 activations: rounding at roughly the points where vLLM's
kernels round) on a subsample of the recorded proposals (same sequence, same
recorded prefix) and comparing with the float64/float32 references. At each
position, with ``a`` the exact argmax and ``eps = z_lowp - z``, the *flip
noise* is ``max_b (eps_b - eps_a)^+`` over the tokens ``b`` in the top 16 of
``z`` or of ``z_lowp`` (:func:`flip_noise`): how much any near-top token gains
on ``a`` through rounding (a flip at margin ``m`` needs a gain ``> m``).
``tau = safety * quantile_0.999(flip noise)`` with ``safety = 2`` (vLLM's
rounding is of the same order but at different points), floored at ``1e-3``.
Probabilistic runs record vLLM's logits and so *measure* vLLM's flip noise
directly: the report gives it next to the low-precision estimate, and the run
checks that <= 1 % of positions exceed ``tau`` (and none ``4 tau``), which
validates the estimate used by greedy runs.

Probabilistic runs (``draft_sample_method="probabilistic"``, temperature
``T``): tokens are sampled, so equality is meaningless. With teacher forcing,
``p = softmax(z / T)`` is the reference draft distribution of each position
given vLLM's own prefix, and

* each drafted token must lie in the reference's top-p (0.999) set: a
  correct sampler leaves it with probability <= 0.1 %, so <= 1 % may; none
  may have ``p < 1e-3 / (V * positions)`` (for a correct sampler that
  happens anywhere in the run with probability ~1e-3);
* a calibration z-test: over positions deduplicated by (request, sampled
  position) -- vLLM keys the draft's Gumbel noise by (seed, position), so a
  position redrafted in a later step reuses its noise -- ``S = sum(log p(x) +
  H(p)) / sqrt(sum Var_p(log p))`` is ~N(0, 1) if tokens follow ``p``;
  ``|S| <= 6``;
* when vLLM's logits were recorded: flip noise as above (<= 1 % above
  ``tau``, none above ``4 tau``) and the total-variation distance between
  ``softmax(z_vllm / T)`` and ``p`` (<= 1 % above ``max(0.01, 2 *
  q_0.999(TV of the low-precision reference))``, none above 4x that).

Confidence (when recorded): ``|conf_vllm - conf_ref|`` with the same soft/hard
rule, tolerance ``max(0.01, 2 * q_0.999`` of the low-precision reference's
error).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
from collections import defaultdict
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Recorder
# ---------------------------------------------------------------------------


def _cpu(x: Any) -> torch.Tensor:
    return torch.as_tensor(x).detach().to("cpu")


class ProposalRecorder:
    """Wraps ``DSparkSpeculator.propose`` and keeps one :class:`Proposal` per
    request and step. Errors while recording never reach the engine; they are
    kept in :attr:`errors`."""

    def __init__(self, max_logit_bytes: int = 512 * 2**20) -> None:
        self.proposals: list[Proposal] = []
        self.errors: list[str] = []
        self.steps = 0
        self.graph_steps = 0
        self.dummy_calls = 0
        self.logits_dropped = 0
        self.max_logit_bytes = max_logit_bytes
        self._logit_bytes = 0
        self._replayed = False
        self.info: dict[str, Any] = {}

    # -- reading the speculator -------------------------------------------------

    def record(
        self, spec: Any, args: Mapping[str, Any], out: torch.Tensor, graph: bool
    ) -> None:
        """Copy one ``propose`` call's proposals (called right after it)."""
        input_batch = args["input_batch"]
        n = int(input_batch.num_reqs)
        self.steps += 1
        self.graph_steps += int(graph)
        if n <= 0:
            return
        k = int(spec.num_speculative_steps)
        q = int(getattr(spec, "num_query_per_req", k))
        if not self.info:
            self.info = {
                "speculator": type(spec).__name__,
                "num_speculative_steps": k,
                "num_query_per_req": q,
                "sample_from_anchor": bool(getattr(spec, "sample_from_anchor", True)),
                "noise_token_id": int(getattr(spec, "parallel_drafting_token_id", -1)),
                "max_model_len": int(getattr(spec, "max_model_len", 0)) or None,
                "use_confidence_head": bool(
                    getattr(spec, "use_confidence_head", False)
                ),
                "probabilistic": getattr(spec, "draft_logits", None) is not None,
            }
        if out.is_cuda:
            torch.cuda.synchronize(out.device)
        buffers = spec.input_buffers
        draft = _cpu(out[:n, :k]).long().tolist()
        ids = _cpu(buffers.input_ids[: n * q]).long().view(n, q).tolist()
        pos = _cpu(buffers.positions[: n * q]).long().view(n, q).tolist()
        seq_lens = _cpu(buffers.seq_lens[:n]).long().tolist()
        num_sampled = _cpu(args["num_sampled"][:n]).long().tolist()
        num_rejected = _cpu(args["num_rejected"][:n]).long().tolist()
        num_scheduled = [
            int(x) for x in np.asarray(input_batch.num_scheduled_tokens)[:n]
        ]
        idx = [int(x) for x in np.asarray(input_batch.idx_mapping_np)[:n]]
        req_ids = list(input_batch.req_ids[:n])

        logits: list[torch.Tensor | None] = [None] * n
        draft_logits = getattr(spec, "draft_logits", None)
        if draft_logits is not None:
            need = n * k * draft_logits.shape[-1] * 4
            if self._logit_bytes + need <= self.max_logit_bytes:
                rows = torch.as_tensor(idx, device=draft_logits.device)
                block = _cpu(draft_logits[rows, :k].float())
                logits = list(block.unbind(0))
                self._logit_bytes += need
            else:
                self.logits_dropped += n
        confidence: list[list[float] | None] = [None] * n
        if getattr(spec, "use_confidence_head", False):
            probs = _cpu(spec.draft_token_confidence_probs[:n, :k]).double()
            confidence = probs.tolist()

        for i in range(n):
            self.proposals.append(
                Proposal(
                    step=self.steps - 1,
                    req_id=req_ids[i],
                    batch_index=i,
                    req_state_idx=idx[i],
                    block_tokens=ids[i],
                    block_positions=pos[i],
                    seq_len=seq_lens[i],
                    num_sampled=num_sampled[i],
                    num_rejected=num_rejected[i],
                    num_scheduled=num_scheduled[i],
                    draft=draft[i],
                    cuda_graph=graph,
                    logits=logits[i],
                    confidence=confidence[i],
                )
            )

    # -- the patch ------------------------------------------------------------------

    def _watch_graphs(self, spec: Any) -> None:
        """Shadow ``run_fullgraph`` on this speculator's own graph manager.

        The shadow refers to the recorder only (no cycle through the
        speculator, which must be freed with the engine).
        """
        manager = getattr(spec, "query_cudagraph_manager", None)
        if manager is None or "run_fullgraph" in vars(manager):
            return
        original = manager.run_fullgraph
        recorder = self

        @functools.wraps(original)
        def run_fullgraph(*args: Any, **kwargs: Any) -> Any:
            recorder._replayed = True
            return original(*args, **kwargs)

        manager.run_fullgraph = run_fullgraph

    def wrap(self, propose: Any) -> Any:
        """A ``propose`` that calls ``propose`` and then :meth:`record`."""
        signature = inspect.signature(propose)
        recorder = self

        @functools.wraps(propose)
        def wrapped(spec: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                recorder._watch_graphs(spec)
            except Exception as exc:  # noqa: BLE001 - never break the engine
                recorder.errors.append(f"watching graphs: {exc!r}")
            recorder._replayed = False
            out = propose(spec, *args, **kwargs)
            try:
                bound = signature.bind(spec, *args, **kwargs)
                bound.apply_defaults()
                call = dict(bound.arguments)
                if call.get("dummy_run"):
                    recorder.dummy_calls += 1
                else:
                    with torch.inference_mode():
                        recorder.record(spec, call, out, recorder._replayed)
            except Exception as exc:  # noqa: BLE001 - never break the engine
                if len(recorder.errors) < 20:
                    recorder.errors.append(f"recording a proposal: {exc!r}")
            return out

        return wrapped

    @contextlib.contextmanager
    def installed(self, cls: Any = None) -> Iterator[ProposalRecorder]:
        """Patch ``cls.propose`` (default: vLLM's ``DSparkSpeculator``)."""
        if cls is None:
            from vllm.v1.worker.gpu.spec_decode.dspark.speculator import (
                DSparkSpeculator as cls,
            )
        had_own = "propose" in vars(cls)
        original = vars(cls)["propose"] if had_own else None
        cls.propose = self.wrap(cls.propose)
        try:
            yield self
        finally:
            if had_own:
                cls.propose = original
            else:
                del cls.propose

    def summary(self) -> dict[str, Any]:
        return {
            "propose_calls": self.steps,
            "propose_calls_from_cuda_graph": self.graph_steps,
            "dummy_propose_calls": self.dummy_calls,
            "proposals_recorded": len(self.proposals),
            "proposals_with_logits": sum(p.logits is not None for p in self.proposals),
            "logits_dropped": self.logits_dropped,
            "recorder_errors": list(self.errors),
            "speculator": self.info,
        }


# ---------------------------------------------------------------------------
# Reference side
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Per-position statistics
# ---------------------------------------------------------------------------


def top2_margin(z: torch.Tensor) -> torch.Tensor:
    top = z.topk(2, dim=-1).values
    return top[..., 0] - top[..., 1]


def flip_noise(z: torch.Tensor, other: torch.Tensor, top_k: int = 16) -> torch.Tensor:
    """``[K]``: the most any near-top token gains on ``a = argmax z`` in ``other``.

    ``max_b ((o - z)_b - (o - z)_a)^+`` over the tokens ``b`` in the top
    ``top_k`` of ``z`` or of ``other`` (a token that ``other`` promotes to
    its top counts, however low it is in ``z``); ``0`` when ``other`` keeps
    the order of those tokens relative to ``a``. A shift of all logits is no
    gain.
    """
    z = z.double()
    other = other.double()
    eps = other - z
    k = min(top_k, z.shape[-1])
    idx = torch.cat([z.topk(k, -1).indices, other.topk(k, -1).indices], -1)
    top = z.argmax(-1, keepdim=True)
    gain = eps.gather(-1, idx) - eps.gather(-1, top)
    return gain.max(-1).values.clamp(min=0.0)


def total_variation(z: torch.Tensor, other: torch.Tensor, temperature: float):
    p = torch.softmax(z.double() / temperature, -1)
    o = torch.softmax(other.double() / temperature, -1)
    return 0.5 * (p - o).abs().sum(-1)


def top_p_member(p: torch.Tensor, token: int, top_p: float) -> bool:
    """Whether ``token`` is in the smallest set of top tokens with mass >= top_p."""
    mass_before = p[p > p[token]].sum().item()
    return mass_before < top_p


def _quantile(values: Sequence[float], q: float) -> float | None:
    return (
        float(np.quantile(np.asarray(values, dtype=np.float64), q)) if values else None
    )


def _share(flags: Sequence[bool]) -> float | None:
    return float(np.mean(flags)) if len(flags) else None


# ---------------------------------------------------------------------------
# The oracle
# ---------------------------------------------------------------------------


@dataclass
class OracleSettings:
    sampling: str = "greedy"  # or "probabilistic"
    temperature: float = 1.0
    threshold: float | None = None  # None: measured (see the module docstring)
    safety: float = 2.0
    hard_factor: float = 4.0
    noise_quantile: float = 0.999
    threshold_floor: float = 1e-3
    noise_max_proposals: int = 256
    flip_top_k: int = 16
    min_agreement: float = 0.99
    max_excluded_share: float = 0.8
    top_p: float = 0.999
    max_soft_share: float = 0.01
    max_abs_z: float = 6.0
    min_z_samples: int = 50
    tv_floor: float = 0.01
    confidence_floor: float = 0.01
    max_examples: int = 8


@dataclass
class _Position:
    req: str
    step: int
    anchor_pos: int
    k: int
    recorded: int
    reference: int
    margin: float
    forced: bool


@dataclass
class OracleReport:
    settings: OracleSettings
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    anchor_mismatches: list[dict[str, Any]] = field(default_factory=list)
    layout_mismatches: list[dict[str, Any]] = field(default_factory=list)
    unchecked_requests: list[str] = field(default_factory=list)
    context_lengths: list[int] = field(default_factory=list)
    # greedy
    positions: list[_Position] = field(default_factory=list)
    comparable: list[bool] = field(default_factory=list)
    # probabilistic
    in_top_p: list[bool] = field(default_factory=list)
    token_probs: list[float] = field(default_factory=list)
    prob_examples: list[dict[str, Any]] = field(default_factory=list)
    z_terms: dict[tuple[str, int], tuple[float, float, float]] = field(
        default_factory=dict
    )
    # vLLM logits (probabilistic runs) and confidence
    vllm_flip: list[float] = field(default_factory=list)
    vllm_tv: list[float] = field(default_factory=list)
    vllm_max_abs: list[float] = field(default_factory=list)
    vllm_logit_examples: list[dict[str, Any]] = field(default_factory=list)
    confidence_err: list[float] = field(default_factory=list)
    confidence_examples: list[dict[str, Any]] = field(default_factory=list)
    # noise measured with the low-precision references
    noise_dtype: str | None = None
    lp_flip: list[float] = field(default_factory=list)
    lp_tv: list[float] = field(default_factory=list)
    lp_max_abs: list[float] = field(default_factory=list)
    lp_confidence_err: list[float] = field(default_factory=list)
    vocab_size: int = 0

    # -- derived ------------------------------------------------------------------

    @property
    def threshold(self) -> float | None:
        s = self.settings
        if s.threshold is not None:
            return float(s.threshold)
        q = _quantile(self.lp_flip, s.noise_quantile)
        return None if q is None else max(s.threshold_floor, s.safety * q)

    @property
    def tv_tolerance(self) -> float:
        q = _quantile(self.lp_tv, self.settings.noise_quantile) or 0.0
        return max(self.settings.tv_floor, self.settings.safety * q)

    @property
    def confidence_tolerance(self) -> float:
        q = _quantile(self.lp_confidence_err, self.settings.noise_quantile) or 0.0
        return max(self.settings.confidence_floor, self.settings.safety * q)

    def _greedy(self) -> dict[str, Any]:
        tau = self.threshold
        pairs = [p for p, c in zip(self.positions, self.comparable, strict=True) if c]
        out: dict[str, Any] = {
            "positions_recorded": len(self.positions),
            "positions_compared": len(pairs),
            "positions_after_divergence": len(self.positions) - len(pairs),
            "threshold": tau,
            "hard_threshold": None if tau is None else self.settings.hard_factor * tau,
        }
        if tau is None or not pairs:
            return out
        hard = self.settings.hard_factor * tau
        included = [p for p in pairs if p.margin > tau]
        agree = [p.recorded == p.reference for p in included]
        wrong = [p for p in pairs if p.recorded != p.reference]
        wrong_included = [p for p in included if p.recorded != p.reference]
        out.update(
            positions_included=len(included),
            excluded_share=1.0 - len(included) / len(pairs),
            agreement=_share(agree),
            agreement_all_positions=_share([p.recorded == p.reference for p in pairs]),
            disagreements=len(wrong),
            disagreements_included=len(wrong_included),
            disagreements_above_hard=sum(p.margin > hard for p in wrong),
            max_margin_at_disagreement=max((p.margin for p in wrong), default=None),
            margin_quantiles={
                str(q): _quantile([p.margin for p in pairs], q)
                for q in (0.01, 0.1, 0.5)
            },
            first_disagreements=[
                asdict(p)
                for p in sorted(wrong, key=lambda p: -p.margin)[
                    : self.settings.max_examples
                ]
            ],
        )
        return out

    def _probabilistic(self) -> dict[str, Any]:
        n = len(self.in_top_p)
        out: dict[str, Any] = {
            "positions_compared": n,
            "top_p": self.settings.top_p,
            "top_p_violation_share": None if not n else 1.0 - _share(self.in_top_p),
            "hard_probability": self.hard_probability,
            "below_hard_probability": sum(
                p < self.hard_probability for p in self.token_probs
            ),
            "min_token_probability": min(self.token_probs, default=None),
            "examples": self.prob_examples[: self.settings.max_examples],
        }
        terms = list(self.z_terms.values())
        if terms:
            s = sum(t[0] for t in terms)
            v = sum(t[1] for t in terms)
            out["z_samples"] = len(terms)
            out["z_statistic"] = s / math.sqrt(v) if v > 0 else 0.0
        return out

    @property
    def hard_probability(self) -> float:
        return 1e-3 / (max(self.vocab_size, 1) * max(len(self.in_top_p), 1))

    def _vllm_logits(self) -> dict[str, Any]:
        tau = self.threshold
        if not self.vllm_flip:
            return {}
        return {
            "positions": len(self.vllm_flip),
            "flip_noise_q0.5": _quantile(self.vllm_flip, 0.5),
            "flip_noise_q0.999": _quantile(self.vllm_flip, 0.999),
            "flip_noise_max": max(self.vllm_flip),
            "max_abs_logit_error_q0.999": _quantile(self.vllm_max_abs, 0.999),
            "share_flip_above_threshold": (
                None if tau is None else _share([f > tau for f in self.vllm_flip])
            ),
            "tv_tolerance": self.tv_tolerance,
            "tv_q0.999": _quantile(self.vllm_tv, 0.999),
            "tv_max": max(self.vllm_tv),
            "share_tv_above_tolerance": _share(
                [t > self.tv_tolerance for t in self.vllm_tv]
            ),
            "worst": self.vllm_logit_examples[: self.settings.max_examples],
        }

    def _confidence(self) -> dict[str, Any]:
        if not self.confidence_err:
            return {}
        tol = self.confidence_tolerance
        return {
            "positions": len(self.confidence_err),
            "tolerance": tol,
            "max_error": max(self.confidence_err),
            "error_q0.999": _quantile(self.confidence_err, 0.999),
            "share_above_tolerance": _share([e > tol for e in self.confidence_err]),
            "worst": self.confidence_examples[: self.settings.max_examples],
        }

    def _noise(self) -> dict[str, Any]:
        s = self.settings
        return {
            "method": (
                "references in the engine dtype vs high precision on the same "
                "recorded proposals; threshold = safety * quantile(flip noise)"
                if s.threshold is None
                else "given"
            ),
            "dtype": self.noise_dtype,
            "positions": len(self.lp_flip),
            "quantile": s.noise_quantile,
            "safety": s.safety,
            "flip_noise_q0.5": _quantile(self.lp_flip, 0.5),
            "flip_noise_q0.999": _quantile(self.lp_flip, s.noise_quantile),
            "flip_noise_max": max(self.lp_flip, default=None),
            "max_abs_logit_error_q0.999": _quantile(self.lp_max_abs, 0.999),
            "tv_q0.999": _quantile(self.lp_tv, 0.999),
            "confidence_error_q0.999": _quantile(self.lp_confidence_err, 0.999),
        }

    def summary(self) -> dict[str, Any]:
        s = self.settings
        out: dict[str, Any] = {
            "sampling": s.sampling,
            "temperature": s.temperature,
            "counts": dict(self.counts),
            "anchor_mismatches": len(self.anchor_mismatches),
            "anchor_mismatch_examples": self.anchor_mismatches[: s.max_examples],
            "layout_mismatches": len(self.layout_mismatches),
            "layout_mismatch_examples": self.layout_mismatches[: s.max_examples],
            "requests_without_checked_proposals": self.unchecked_requests,
            "context_length_max": max(self.context_lengths, default=None),
            "context_length_median": _quantile(self.context_lengths, 0.5),
            "noise": self._noise(),
        }
        if s.sampling == "greedy":
            out["greedy"] = self._greedy()
        else:
            out["probabilistic"] = self._probabilistic()
        if self.vllm_flip:
            out["vllm_logits"] = self._vllm_logits()
        if self.confidence_err:
            out["confidence"] = self._confidence()
        return out

    def failures(self) -> list[str]:
        """Every violated criterion, as a readable line (empty: the run passes)."""
        s = self.settings
        fails: list[str] = []
        checked = self.counts.get("proposals_checked", 0)
        if checked == 0:
            fails.append("no recorded proposal could be checked")
        if self.unchecked_requests:
            fails.append(
                f"{len(self.unchecked_requests)} request(s) have no checked "
                f"proposal: {self.unchecked_requests[:5]}"
            )
        if self.anchor_mismatches:
            fails.append(
                f"{len(self.anchor_mismatches)} anchor mismatch(es), e.g. "
                f"{self.anchor_mismatches[:3]}"
            )
        if self.layout_mismatches:
            fails.append(
                f"{len(self.layout_mismatches)} block layout mismatch(es), e.g. "
                f"{self.layout_mismatches[:3]}"
            )
        tau = self.threshold
        if tau is None and (self.positions or self.vllm_flip):
            fails.append("no threshold: the noise measurement produced no position")
            return fails
        if s.sampling == "greedy" and checked:
            g = self._greedy()
            if not g.get("positions_included"):
                fails.append(f"no position has a margin above the threshold {tau:.4g}")
            else:
                if g["agreement"] < s.min_agreement:
                    fails.append(
                        f"agreement {g['agreement']:.4%} < {s.min_agreement:.0%} on "
                        f"{g['positions_included']} positions with margin > "
                        f"{tau:.4g}; worst: {g['first_disagreements'][:3]}"
                    )
                if g["disagreements_above_hard"]:
                    fails.append(
                        f"{g['disagreements_above_hard']} disagreement(s) where the "
                        f"reference margin exceeds {g['hard_threshold']:.4g} "
                        f"({s.hard_factor:g} x threshold): "
                        f"{g['first_disagreements'][:3]}"
                    )
                if g["excluded_share"] > s.max_excluded_share:
                    fails.append(
                        f"{g['excluded_share']:.1%} of positions excluded by the "
                        f"threshold {tau:.4g} (> {s.max_excluded_share:.0%}): the "
                        "comparison would test too little"
                    )
        if s.sampling != "greedy" and checked:
            p = self._probabilistic()
            if not p["positions_compared"]:
                fails.append("no drafted position was compared")
            else:
                if p["top_p_violation_share"] > s.max_soft_share:
                    fails.append(
                        f"{p['top_p_violation_share']:.3%} of drafted tokens lie "
                        f"outside the reference's top-p {s.top_p} set (> "
                        f"{s.max_soft_share:.0%}); e.g. {p['examples'][:3]}"
                    )
                if p["below_hard_probability"]:
                    fails.append(
                        f"{p['below_hard_probability']} drafted token(s) have "
                        f"reference probability < {p['hard_probability']:.3g}; e.g. "
                        f"{p['examples'][:3]}"
                    )
                if (
                    p.get("z_samples", 0) >= s.min_z_samples
                    and abs(p["z_statistic"]) > s.max_abs_z
                ):
                    fails.append(
                        f"drafted tokens do not follow the reference distribution: "
                        f"calibration z = {p['z_statistic']:.2f} over "
                        f"{p['z_samples']} positions (|z| > {s.max_abs_z:g})"
                    )
        if self.vllm_flip:
            v = self._vllm_logits()
            hard = s.hard_factor * tau
            if v["share_flip_above_threshold"] > s.max_soft_share:
                fails.append(
                    f"vLLM's draft logits: {v['share_flip_above_threshold']:.3%} of "
                    f"positions have flip noise > threshold {tau:.4g} (> "
                    f"{s.max_soft_share:.0%}); worst {v['worst'][:3]}"
                )
            if v["flip_noise_max"] > hard:
                fails.append(
                    f"vLLM's draft logits: flip noise {v['flip_noise_max']:.4g} > "
                    f"{hard:.4g}; worst {v['worst'][:3]}"
                )
            if v["share_tv_above_tolerance"] > s.max_soft_share:
                fails.append(
                    f"vLLM's draft distribution: {v['share_tv_above_tolerance']:.3%} "
                    f"of positions have total variation > {v['tv_tolerance']:.4g}"
                )
            if v["tv_max"] > s.hard_factor * v["tv_tolerance"]:
                fails.append(
                    f"vLLM's draft distribution: total variation {v['tv_max']:.4g} "
                    f"> {s.hard_factor * v['tv_tolerance']:.4g}; worst "
                    f"{v['worst'][:3]}"
                )
        if self.confidence_err:
            c = self._confidence()
            if c["share_above_tolerance"] > s.max_soft_share:
                fails.append(
                    f"confidence: {c['share_above_tolerance']:.3%} of positions "
                    f"differ by > {c['tolerance']:.4g}; worst {c['worst'][:3]}"
                )
            if c["max_error"] > s.hard_factor * c["tolerance"]:
                fails.append(
                    f"confidence: error {c['max_error']:.4g} > "
                    f"{s.hard_factor * c['tolerance']:.4g}; worst {c['worst'][:3]}"
                )
        return fails


class DSparkOracle:
    """Recomputes recorded DSpark proposals with the pure-PyTorch references.

    ``refs``: high-precision references (float64 on CPU, float32 on a GPU);
    ``noise_refs``: the same references in the engine's dtype, used to
    measure the rounding noise that sets the threshold (optional when the
    threshold is given).
    """

    def __init__(
        self, refs: ReferencePair, noise_refs: ReferencePair | None = None
    ) -> None:
        self.refs = refs
        self.noise_refs = noise_refs

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        *,
        device: str = "cpu",
        dtype: torch.dtype | None = None,
        noise_dtype: torch.dtype | None = torch.bfloat16,
    ) -> DSparkOracle:
        if dtype is None:
            dtype = torch.float64 if str(device) == "cpu" else torch.float32
        refs = ReferencePair.load(path, dtype, device)
        noise = (
            None
            if noise_dtype is None
            else ReferencePair.load(path, noise_dtype, device)
        )
        return cls(refs, noise)

    # -- the main loop ------------------------------------------------------------

    def compare(
        self,
        proposals: Iterable[Proposal],
        sequences: Iterable[RequestSequence],
        settings: OracleSettings | None = None,
        *,
        num_speculative_tokens: int | None = None,
        max_model_len: int | None = None,
        noise_token_id: int | None = None,
    ) -> OracleReport:
        s = settings or OracleSettings()
        report = OracleReport(s, vocab_size=self.refs.vocab_size)
        seqs = {r.request_id: r for r in sequences}
        noise_id = (
            self.refs.noise_token_id if noise_token_id is None else noise_token_id
        )
        by_req: dict[str, list[Proposal]] = defaultdict(list)
        for prop in proposals:
            report.counts["proposals_recorded"] += 1
            ext = external_request_id(prop.req_id, seqs)
            if ext is None:
                report.counts["proposals_of_other_requests"] += 1
                continue
            by_req[ext].append(prop)

        # Subsample for the noise measurement: evenly spaced over proposals that
        # lie inside their final sequences.
        inside = [
            (rid, j)
            for rid in sorted(by_req)
            for j, prop in enumerate(by_req[rid])
            if prop.anchor_pos < len(seqs[rid].token_ids)
        ]
        chosen: set[tuple[str, int]] = set()
        if self.noise_refs is not None and inside:
            count = min(s.noise_max_proposals, len(inside))
            picks = np.linspace(0, len(inside) - 1, count).round().astype(int)
            chosen = {inside[i] for i in picks}
            report.noise_dtype = str(self.noise_refs.draft.dtype).removeprefix("torch.")

        with torch.no_grad():
            for rid in sorted(seqs):
                self._compare_request(
                    report,
                    seqs[rid],
                    sorted(by_req.get(rid, []), key=lambda p: p.step),
                    chosen,
                    num_speculative_tokens,
                    max_model_len,
                    noise_id,
                )
        return report

    def _layout_problems(
        self,
        prop: Proposal,
        k: int,
        prompt_len: int,
        max_model_len: int | None,
        noise_id: int,
    ) -> list[str]:
        ctx_len = prop.anchor_pos
        q = len(prop.block_positions)
        problems = []
        if ctx_len < 1:
            problems.append(f"anchor position {ctx_len} < 1")
        cap = (max_model_len - 1) if max_model_len else None
        want = [ctx_len + j if cap is None else min(ctx_len + j, cap) for j in range(q)]
        if prop.block_positions != want:
            problems.append(f"block positions {prop.block_positions} != {want}")
        want_len = ctx_len + q if not max_model_len else min(ctx_len + q, max_model_len)
        if prop.seq_len != want_len:
            problems.append(f"seq_len {prop.seq_len} != {want_len}")
        if any(t != noise_id for t in prop.block_tokens[1:]):
            problems.append(f"block tokens {prop.block_tokens} (noise id {noise_id})")
        if len(prop.draft) != k:
            problems.append(f"{len(prop.draft)} drafted tokens, expected {k}")
        if prop.num_sampled > 0 and ctx_len < prompt_len:
            problems.append(
                f"a sampled anchor (num_sampled={prop.num_sampled}) at position "
                f"{ctx_len}, inside the prompt ({prompt_len} tokens)"
            )
        vocab = self.refs.vocab_size
        if any(not 0 <= t < vocab for t in [*prop.draft, prop.anchor_token]):
            problems.append(f"token ids outside 0..{vocab - 1}: {prop.draft}")
        return problems

    def _compare_request(
        self,
        report: OracleReport,
        req: RequestSequence,
        props: list[Proposal],
        chosen: set[tuple[str, int]],
        num_speculative_tokens: int | None,
        max_model_len: int | None,
        noise_id: int,
    ) -> None:
        s = report.settings
        seq = req.token_ids
        rid = req.request_id
        context = None
        lp_context = None
        checked = 0
        for j, prop in enumerate(props):
            ctx_len = prop.anchor_pos
            where = {"req": rid, "step": prop.step, "L": ctx_len}
            if ctx_len >= len(seq):
                report.counts["proposals_beyond_final_sequence"] += 1
                continue
            k = num_speculative_tokens or len(prop.draft)
            problems = self._layout_problems(
                prop, k, len(req.prompt_token_ids), max_model_len, noise_id
            )
            if problems:
                report.layout_mismatches.append({**where, "problems": problems})
            if prop.anchor_token != seq[ctx_len]:
                report.anchor_mismatches.append(
                    {**where, "recorded": prop.anchor_token, "sequence": seq[ctx_len]}
                )
                continue
            if problems:
                continue
            if context is None:
                context = self.refs.context(seq)
            ref = self.refs.step(context, ctx_len, prop.anchor_token, prop.draft, k)
            checked += 1
            report.counts["proposals_checked"] += 1
            report.counts["prefill_chunk_proposals"] += int(prop.num_sampled == 0)
            report.counts["proposals_from_cuda_graph"] += int(prop.cuda_graph)
            report.counts["teacher_forced_proposals"] += int(ref.forced)
            report.context_lengths.append(ctx_len)
            z = ref.logits
            if s.sampling == "greedy":
                self._greedy_positions(report, prop, ref, where)
            else:
                self._sampled_positions(report, prop, ref, where, rid)
            if prop.logits is not None:
                self._vllm_logits(report, prop, z, where)
            if prop.confidence is not None and ref.confidence is not None:
                err = (torch.tensor(prop.confidence[:k]) - ref.confidence).abs()
                for i, e in enumerate(err.tolist()):
                    report.confidence_err.append(e)
                    report.confidence_examples.append(
                        {**where, "k": i, "error": e, "recorded": prop.confidence[i]}
                    )
                report.confidence_examples.sort(key=lambda d: -d["error"])
                del report.confidence_examples[s.max_examples :]
            if (rid, j) in chosen and self.noise_refs is not None:
                if lp_context is None:
                    lp_context = self.noise_refs.context(seq)
                lp = self.noise_refs.step(
                    lp_context, ctx_len, prop.anchor_token, prop.draft, k
                )
                report.lp_flip.extend(flip_noise(z, lp.logits, s.flip_top_k).tolist())
                report.lp_max_abs.extend((lp.logits - z).abs().amax(-1).tolist())
                report.lp_tv.extend(
                    total_variation(z, lp.logits, s.temperature).tolist()
                )
                if lp.confidence is not None and ref.confidence is not None:
                    report.lp_confidence_err.extend(
                        (lp.confidence - ref.confidence).abs().tolist()
                    )
        if checked == 0:
            report.unchecked_requests.append(rid)

    @staticmethod
    def _greedy_positions(
        report: OracleReport, prop: Proposal, ref: StepReference, where: dict
    ) -> None:
        z = ref.logits
        margins = top2_margin(z).tolist()
        argmax = z.argmax(-1).tolist()
        diverged = False
        for i, (rec, m) in enumerate(zip(prop.draft, margins, strict=False)):
            # Teacher-forced: every position is comparable. Otherwise the
            # reference's own chain only up to and including the first
            # disagreement (later Markov inputs differ).
            reference = argmax[i] if ref.forced else ref.greedy[i]
            report.positions.append(
                _Position(
                    where["req"],
                    where["step"],
                    where["L"],
                    i,
                    rec,
                    reference,
                    m,
                    ref.forced,
                )
            )
            report.comparable.append(ref.forced or not diverged)
            if rec != reference:
                diverged = True

    @staticmethod
    def _sampled_positions(
        report: OracleReport,
        prop: Proposal,
        ref: StepReference,
        where: dict,
        rid: str,
    ) -> None:
        s = report.settings
        logp = torch.log_softmax(ref.logits / s.temperature, -1)
        p = logp.exp()
        entropy = -(p * logp).sum(-1)
        second = (p * logp.square()).sum(-1)
        # Without teacher forcing only position 0 (Markov input = the anchor)
        # has a known distribution.
        count = len(prop.draft) if ref.forced else 1
        for i in range(count):
            tok = prop.draft[i]
            member = top_p_member(p[i], tok, s.top_p)
            prob = p[i, tok].item()
            report.in_top_p.append(member)
            report.token_probs.append(prob)
            if not member and len(report.prob_examples) < 100:
                report.prob_examples.append(
                    {
                        **where,
                        "k": i,
                        "token": tok,
                        "p": prob,
                        "reference_top": int(p[i].argmax()),
                    }
                )
            key = (rid, where["L"] + 1 + i)  # the sampled position keys the noise
            if key not in report.z_terms:
                h = entropy[i].item()
                var = max(second[i].item() - h * h, 0.0)
                report.z_terms[key] = (logp[i, tok].item() + h, var, prob)

    @staticmethod
    def _vllm_logits(
        report: OracleReport, prop: Proposal, z: torch.Tensor, where: dict
    ) -> None:
        s = report.settings
        k = z.shape[0]
        v = z.shape[1]
        got = prop.logits[:k].double()
        if got.shape[1] != v:
            report.layout_mismatches.append(
                {**where, "problems": [f"draft logits width {got.shape[1]} != {v}"]}
            )
            return
        flips = flip_noise(z, got, s.flip_top_k).tolist()
        tvs = total_variation(z, got, s.temperature).tolist()
        errs = (got - z).abs().amax(-1).tolist()
        report.vllm_flip.extend(flips)
        report.vllm_tv.extend(tvs)
        report.vllm_max_abs.extend(errs)
        for i in range(k):
            report.vllm_logit_examples.append(
                {**where, "k": i, "flip": flips[i], "tv": tvs[i], "max_abs": errs[i]}
            )
        report.vllm_logit_examples.sort(key=lambda d: -d["flip"])
        del report.vllm_logit_examples[s.max_examples :]


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
