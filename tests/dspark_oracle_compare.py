# SPDX-License-Identifier: Apache-2.0
"""Comparison of the DSpark proposal oracle (:mod:`dspark_oracle`).

Recomputes each recorded proposal with the references.

The pass criteria, the threshold and its measurement are described in
:mod:`dspark_oracle_report`.

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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch
from dspark_oracle_records import Proposal, RequestSequence, external_request_id
from dspark_oracle_references import ReferencePair, StepReference
from dspark_oracle_report import OracleReport, OracleSettings, _Position
from dspark_oracle_stats import flip_noise, top2_margin, top_p_member, total_variation


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
