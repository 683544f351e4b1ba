# SPDX-License-Identifier: Apache-2.0
"""vLLM side of the DSpark proposal oracle (:mod:`dspark_oracle`).

:class:`ProposalRecorder` records every draft that
``DSparkSpeculator.propose`` returns.

The fields of a recorded :class:`Proposal` and where each is read from are
described in :mod:`dspark_oracle_records`.

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
With tensor parallelism the workers are other processes: there
:func:`install_in_worker` and :func:`collect_from_worker` are sent to every
worker through ``LLM.collective_rpc`` (the same class-level patch, installed
in each worker after the engine is built, and the worker's recorder pickled
back afterwards); the workers must be able to import this module
(``PYTHONPATH``).

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
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from dspark_oracle_records import Proposal


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


# -- tensor parallelism: one recorder per worker process ------------------------------

_WORKER_RECORDER: ProposalRecorder | None = None
_WORKER_PATCH: contextlib.AbstractContextManager | None = None


def install_in_worker(worker: Any) -> int:
    """``collective_rpc`` target: patch this worker process's speculator class.
    Returns the worker's rank (``worker.rank``, else -1)."""
    global _WORKER_RECORDER, _WORKER_PATCH
    if _WORKER_PATCH is None:
        _WORKER_RECORDER = ProposalRecorder()
        _WORKER_PATCH = _WORKER_RECORDER.installed()
        _WORKER_PATCH.__enter__()
    return int(getattr(worker, "rank", -1))


def collect_from_worker(worker: Any) -> tuple[int, ProposalRecorder | None]:
    """``collective_rpc`` target: (rank, this worker's recorder), unpatched."""
    global _WORKER_RECORDER, _WORKER_PATCH
    recorder = _WORKER_RECORDER
    if _WORKER_PATCH is not None:
        _WORKER_PATCH.__exit__(None, None, None)
    _WORKER_RECORDER = _WORKER_PATCH = None
    return int(getattr(worker, "rank", -1)), recorder
