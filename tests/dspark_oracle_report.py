# SPDX-License-Identifier: Apache-2.0
"""Settings, report and pass criteria of the DSpark proposal oracle.

See :mod:`dspark_oracle`; :mod:`dspark_oracle_compare` fills the report.

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

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from dspark_oracle_stats import _quantile, _share


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
