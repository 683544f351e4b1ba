# SPDX-License-Identifier: Apache-2.0
"""CPU tests of the DSpark proposal oracle (:mod:`dspark_oracle`).

The records are made synthetically from the reference itself on a tiny
checkpoint (float64 references, bf16 references for the noise measurement):
a perfect recorder must pass with 100 % agreement, and every kind of
corruption -- a wrong drafted token where the reference is sure, a wrong
anchor, a context that is off by one, a bad block layout, a token the draft
distribution (almost) never samples, wrong draft logits, a wrong confidence
-- must fail. The recorder itself is exercised on a fake speculator that
fills its buffers the way vLLM's DSpark speculator does.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from dspark_oracle import (
    DSparkOracle,
    OracleSettings,
    Proposal,
    ProposalRecorder,
    ReferencePair,
    RequestSequence,
    external_request_id,
    flip_noise,
    top2_margin,
)

from vllm_spark2_5_plugin.names import FULL, SLIDING

K = 4  # the tiny checkpoint's dspark_block_size
PROMPT_LEN = 30
OUTPUT_LEN = 18
SETTINGS = OracleSettings(noise_max_proposals=32)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny matrices: one thread is fastest and immune to busy CI cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def oracle(tmp_path_factory) -> DSparkOracle:
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    path = make_tiny_checkpoint(
        tmp_path_factory.mktemp("oracle-tiny"),
        dtype=torch.bfloat16,
        dspark={
            "dspark_layer_types": [SLIDING, FULL],
            "dspark_markov_head_type": "rnn",
            "dspark_enable_confidence_head": True,
            "dspark_sliding_window": 6,
        },
        dspark_prefix="mtp.",
    )
    return DSparkOracle.from_checkpoint(path, noise_dtype=torch.bfloat16)


@pytest.fixture(scope="module")
def sequences() -> list[RequestSequence]:
    gen = torch.Generator().manual_seed(7)
    out = []
    for rid in ("0", "1"):
        ids = torch.randint(16, 512, (PROMPT_LEN + OUTPUT_LEN,), generator=gen).tolist()
        out.append(RequestSequence(rid, ids[:PROMPT_LEN], ids[PROMPT_LEN:]))
    return out


@pytest.fixture(scope="module")
def contexts(oracle, sequences) -> dict[str, object]:
    return {s.request_id: oracle.refs.context(s.token_ids) for s in sequences}


def _proposal(
    oracle: DSparkOracle,
    seq: RequestSequence,
    step: int,
    ctx_len: int,
    draft: list[int],
    **fields,
) -> Proposal:
    noise = oracle.refs.noise_token_id
    ids = seq.token_ids
    return Proposal(
        step=step,
        req_id=f"{seq.request_id}-1a2b3c4d",  # vLLM's internal id
        batch_index=0,
        req_state_idx=0,
        block_tokens=[ids[ctx_len] if ctx_len < len(ids) else 5] + [noise] * (K - 1),
        block_positions=list(range(ctx_len, ctx_len + K)),
        seq_len=ctx_len + K,
        num_sampled=int(ctx_len >= PROMPT_LEN),
        num_rejected=0,
        num_scheduled=1,
        draft=draft,
        **fields,
    )


def _lengths() -> range:
    return range(3, PROMPT_LEN + OUTPUT_LEN, 2)


@pytest.fixture(scope="module")
def greedy_records(oracle, sequences, contexts) -> list[Proposal]:
    """What a perfect recorder sees for a correct greedy draft."""
    records = []
    for seq in sequences:
        ctx = contexts[seq.request_id]
        for step, ctx_len in enumerate(_lengths()):
            anchor = seq.token_ids[ctx_len]
            ref = oracle.refs.step(ctx, ctx_len, anchor, [], K)  # its greedy chain
            records.append(_proposal(oracle, seq, step, ctx_len, ref.greedy))
    return records


@pytest.fixture(scope="module")
def sampled_records(oracle, sequences, contexts) -> list[Proposal]:
    """A perfect probabilistic draft: tokens sampled left to right from the
    reference distribution given the tokens sampled so far, with bf16-rounded
    logits and the confidence recorded like vLLM's."""
    gen = torch.Generator().manual_seed(3)
    records = []
    for seq in sequences:
        ctx = contexts[seq.request_id]
        for step, ctx_len in enumerate(_lengths()):
            anchor = seq.token_ids[ctx_len]
            tokens: list[int] = []
            for i in range(K):
                ref = oracle.refs.step(ctx, ctx_len, anchor, tokens + [0] * K, K)
                p = torch.softmax(ref.logits[i], -1)
                tokens.append(int(torch.multinomial(p, 1, generator=gen)))
            ref = oracle.refs.step(ctx, ctx_len, anchor, tokens, K)
            records.append(
                _proposal(
                    oracle,
                    seq,
                    step,
                    ctx_len,
                    tokens,
                    logits=ref.logits.to(torch.bfloat16).float(),
                    confidence=ref.confidence.tolist(),
                )
            )
    return records


def _compare(oracle, records, sequences, **settings):
    return oracle.compare(
        records,
        sequences,
        replace(SETTINGS, **settings),
        num_speculative_tokens=K,
    )


# ---------------------------------------------------------------------------
# Greedy
# ---------------------------------------------------------------------------


def test_perfect_greedy_records_agree_completely(oracle, sequences, greedy_records):
    extra = [
        # A warmup request of vLLM and a step past the final sequence.
        replace(greedy_records[0], req_id="_warmup_0_"),
        _proposal(oracle, sequences[0], 99, PROMPT_LEN + OUTPUT_LEN, [1, 2, 3, 4]),
    ]
    report = _compare(oracle, greedy_records + extra, sequences)
    summary = report.summary()
    assert report.failures() == []
    greedy = summary["greedy"]
    assert greedy["agreement"] == 1.0
    assert greedy["agreement_all_positions"] == 1.0
    assert greedy["disagreements"] == 0
    assert 0.0 <= greedy["excluded_share"] < 0.8
    counts = summary["counts"]
    assert counts["proposals_checked"] == len(greedy_records)
    assert counts["teacher_forced_proposals"] == len(greedy_records)
    assert counts["proposals_of_other_requests"] == 1
    assert counts["proposals_beyond_final_sequence"] == 1
    assert counts["prefill_chunk_proposals"] == sum(
        p.num_sampled == 0 for p in greedy_records
    )
    # The threshold is measured: safety x the 0.999 quantile of the bf16 noise.
    noise = summary["noise"]
    assert noise["dtype"] == "bfloat16"
    assert noise["positions"] == SETTINGS.noise_max_proposals * K
    assert greedy["threshold"] == pytest.approx(
        max(1e-3, SETTINGS.safety * noise["flip_noise_q0.999"])
    )
    assert 0 < noise["flip_noise_q0.999"] < 1.0


def _high_margin_position(oracle, contexts, records, sequences, floor):
    seqs = {s.request_id: s for s in sequences}
    best = None
    for j, rec in enumerate(records):
        seq = seqs[rec.req_id.rpartition("-")[0]]
        ref = oracle.refs.step(
            contexts[seq.request_id], rec.anchor_pos, rec.anchor_token, rec.draft, K
        )
        margins = top2_margin(ref.logits)
        i = int(margins.argmax())
        if margins[i] > floor and (best is None or margins[i] > best[2]):
            best = (j, i, float(margins[i]), ref.logits[i].topk(2).indices.tolist())
    assert best is not None
    return best


def test_one_wrong_token_at_a_high_margin_position_fails(
    oracle, sequences, contexts, greedy_records
):
    tau = _compare(oracle, greedy_records, sequences).threshold
    j, i, margin, (top1, top2) = _high_margin_position(
        oracle, contexts, greedy_records, sequences, 4 * tau
    )
    records = copy.deepcopy(greedy_records)
    assert records[j].draft[i] == top1
    records[j].draft[i] = top2
    report = _compare(oracle, records, sequences)
    fails = report.failures()
    assert any("disagreement(s) where the reference margin exceeds" in f for f in fails)
    worst = report.summary()["greedy"]["first_disagreements"][0]
    assert (worst["step"], worst["k"]) == (records[j].step, i)
    assert (worst["recorded"], worst["reference"]) == (top2, top1)
    assert worst["margin"] == pytest.approx(margin)
    assert report.summary()["greedy"]["agreement"] < 1.0


def test_wrong_anchor_and_shifted_position_fail(oracle, sequences, greedy_records):
    records = copy.deepcopy(greedy_records)
    seq = sequences[0].token_ids
    bad = records[5]
    bad.block_tokens[0] = (seq[bad.anchor_pos] + 1) % 512
    shifted = records[9]  # L one too far: positions and seq_len consistent with it
    shifted.block_positions = [p + 1 for p in shifted.block_positions]
    shifted.seq_len += 1
    assert seq[shifted.anchor_pos] != shifted.anchor_token
    report = _compare(oracle, records, sequences)
    summary = report.summary()
    assert summary["anchor_mismatches"] == 2
    assert {m["step"] for m in summary["anchor_mismatch_examples"]} == {
        bad.step,
        shifted.step,
    }
    assert any("anchor mismatch" in f for f in report.failures())


def test_context_off_by_one_fails(oracle, sequences, contexts, greedy_records):
    """Drafts computed from c[:L-1] (one context row missing) but anchored at L."""
    records = copy.deepcopy(greedy_records)
    seqs = {s.request_id: s for s in sequences}
    for rec in records:
        seq = seqs[rec.req_id.rpartition("-")[0]]
        ctx = contexts[seq.request_id]
        rec.draft = oracle.refs.step(
            ctx, rec.anchor_pos - 1, rec.anchor_token, [], K
        ).greedy
    report = _compare(oracle, records, sequences)
    greedy = report.summary()["greedy"]
    assert greedy["agreement"] < 0.9
    assert any(f.startswith("agreement") for f in report.failures())


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("block_tokens", "noise", "block tokens"),
        ("seq_len", 1, "seq_len"),
        ("draft", [1, 2, 3], "drafted tokens"),
        ("num_sampled", 1, "inside the prompt"),
    ],
)
def test_block_layout_mismatches_fail(
    oracle, sequences, greedy_records, field, value, message
):
    records = copy.deepcopy(greedy_records)
    rec = records[2]  # L = 7, inside the prompt
    assert rec.num_sampled == 0
    if field == "block_tokens":
        rec.block_tokens[2] = rec.block_tokens[0]
    elif field == "seq_len":
        rec.seq_len += value
    else:
        setattr(rec, field, value)
    report = _compare(oracle, records, sequences)
    assert report.summary()["layout_mismatches"] == 1
    assert any(message in p for p in report.layout_mismatches[0]["problems"])
    assert any("layout mismatch" in f for f in report.failures())


def test_prefix_mode_without_teacher_forcing(oracle, sequences, greedy_records):
    """A reference without markov_embeds/markov_bias: compare the reference's
    greedy chain up to and including the first disagreement."""

    class NoMarkovCalls:
        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            if name in ("markov_embeds", "markov_bias"):
                raise AttributeError(name)
            return getattr(self._inner, name)

    plain = DSparkOracle(
        ReferencePair(oracle.refs.target, NoMarkovCalls(oracle.refs.draft)),
        oracle.noise_refs,
    )
    report = _compare(plain, greedy_records, sequences)
    assert report.failures() == []
    summary = report.summary()
    assert summary["counts"].get("teacher_forced_proposals", 0) == 0
    assert summary["greedy"]["agreement"] == 1.0

    records = copy.deepcopy(greedy_records)
    records[4].draft[0] = (records[4].draft[0] + 1) % 512
    greedy = _compare(plain, records, sequences, threshold=1e-9).summary()["greedy"]
    # Position 0 is compared and wrong; positions 1..K-1 are not comparable.
    assert greedy["positions_after_divergence"] == K - 1
    assert greedy["disagreements"] == 1


# ---------------------------------------------------------------------------
# Probabilistic
# ---------------------------------------------------------------------------


def test_perfect_sampled_records_pass(oracle, sequences, sampled_records):
    report = _compare(oracle, sampled_records, sequences, sampling="probabilistic")
    assert report.failures() == []
    summary = report.summary()
    prob = summary["probabilistic"]
    assert prob["positions_compared"] == len(sampled_records) * K
    assert prob["z_samples"] >= SETTINGS.min_z_samples
    assert abs(prob["z_statistic"]) < 4
    assert prob["top_p_violation_share"] <= 0.01
    assert summary["vllm_logits"]["positions"] == len(sampled_records) * K
    assert summary["vllm_logits"]["share_flip_above_threshold"] <= 0.01
    assert summary["confidence"]["max_error"] < summary["confidence"]["tolerance"]


def test_improbable_sampled_token_fails(oracle, sequences, contexts, sampled_records):
    records = copy.deepcopy(sampled_records)
    rec = records[11]
    seq = sequences[0]
    ref = oracle.refs.step(
        contexts[seq.request_id], rec.anchor_pos, rec.anchor_token, rec.draft, K
    )
    rec.draft[1] = int(ref.logits[1].argmin())
    report = _compare(oracle, records, sequences, sampling="probabilistic")
    prob = report.summary()["probabilistic"]
    assert prob["below_hard_probability"] >= 1
    assert any("reference probability <" in f for f in report.failures())


def test_greedy_tokens_in_a_probabilistic_run_fail_calibration(
    oracle, sequences, greedy_records
):
    """Argmax tokens are always in the top-p set; only the calibration test
    notices that they do not follow the distribution."""
    report = _compare(
        oracle, greedy_records, sequences, sampling="probabilistic", max_abs_z=4.0
    )
    prob = report.summary()["probabilistic"]
    assert prob["top_p_violation_share"] == 0.0
    assert prob["z_statistic"] > 4.0  # about 7 here; ~N(0, 1) for sampled tokens
    assert any("calibration z" in f for f in report.failures())


def test_wrong_draft_logits_and_confidence_fail(oracle, sequences, sampled_records):
    records = copy.deepcopy(sampled_records)
    logits = records[6].logits.clone()
    row = logits[2]
    low = int(row.argsort()[len(row) // 2])  # a middling token...
    row[low] = row.max() + 3.0  # ...now beats the top one by 3
    records[6].logits = logits
    records[8].confidence[1] += 0.2
    report = _compare(oracle, records, sequences, sampling="probabilistic")
    fails = report.failures()
    assert any("vLLM's draft logits: flip noise" in f for f in fails)
    assert any("confidence: error" in f for f in fails)
    worst = report.summary()["vllm_logits"]["worst"][0]
    assert (worst["step"], worst["k"]) == (records[6].step, 2)


# ---------------------------------------------------------------------------
# Small pieces
# ---------------------------------------------------------------------------


def test_statistics():
    z = torch.tensor([[3.0, 1.0, 0.0, -1.0]], dtype=torch.float64)
    assert top2_margin(z).tolist() == [2.0]
    other = z.clone()
    other[0, 1] += 0.5  # token 1 gains 0.5 on the argmax
    other[0, 0] -= 0.25
    assert flip_noise(z, other).tolist() == [pytest.approx(0.75)]
    assert flip_noise(z, z + 5.0).tolist() == [0.0]  # a shift changes nothing


def test_external_request_id():
    known = {"0", "12", "a-b"}
    assert external_request_id("12-1a2b3c4d", known) == "12"
    assert external_request_id("0", known) == "0"
    assert external_request_id("a-b-1a2b3c4d", known) == "a-b"
    assert external_request_id("_warmup_0_", known) is None


# ---------------------------------------------------------------------------
# The recorder, on a fake speculator
# ---------------------------------------------------------------------------


class _Buffers:
    def __init__(self, max_tokens: int, max_reqs: int) -> None:
        self.input_ids = torch.zeros(max_tokens, dtype=torch.int32)
        self.positions = torch.zeros(max_tokens, dtype=torch.int64)
        self.seq_lens = torch.zeros(max_reqs, dtype=torch.int32)


class _Batch:
    def __init__(self, req_ids, idx_mapping, scheduled) -> None:
        self.req_ids = req_ids
        self.num_reqs = len(req_ids)
        self.idx_mapping_np = idx_mapping
        self.num_scheduled_tokens = scheduled


class _GraphManager:
    def __init__(self) -> None:
        self.replays = 0

    def run_fullgraph(self, desc) -> None:
        self.replays += 1


class FakeSpeculator:
    """Fills its buffers like DFlash/DSpark's prepare kernel + Markov sampler."""

    NOISE = 13
    VOCAB = 32

    def __init__(self, probabilistic: bool, graph: bool = False) -> None:
        self.query_cudagraph_manager = _GraphManager() if graph else None
        self.num_speculative_steps = K
        self.num_query_per_req = K
        self.sample_from_anchor = True
        self.parallel_drafting_token_id = self.NOISE
        self.max_model_len = 100
        self.use_confidence_head = True
        self.input_buffers = _Buffers(64, 8)
        self.draft_tokens = torch.zeros(8, K, dtype=torch.int64)
        self.draft_token_confidence_probs = torch.zeros(8, K)
        self.draft_logits = torch.zeros(8, K, self.VOCAB) if probabilistic else None

    def propose(
        self,
        input_batch,
        attn_metadata,
        slot_mappings,
        last_hidden_states,
        aux_hidden_states,
        num_sampled,
        num_rejected,
        last_sampled,
        next_prefill_tokens,
        temperature,
        seeds,
        dp_sync_state=None,
        dummy_run=False,
        skip_attn_for_dummy_run=False,
        mm_inputs=None,
        is_profile=False,
        num_speculative_tokens=None,
    ):
        n = input_batch.num_reqs
        if self.query_cudagraph_manager is not None:
            self.query_cudagraph_manager.run_fullgraph("desc")
        for i in range(n):
            slot = int(input_batch.idx_mapping_np[i])
            ctx_len = 10 * (i + 1)
            block = slice(i * K, (i + 1) * K)
            self.input_buffers.input_ids[block] = self.NOISE
            self.input_buffers.input_ids[i * K] = int(last_sampled[slot])
            self.input_buffers.positions[block] = torch.arange(ctx_len, ctx_len + K)
            self.input_buffers.seq_lens[i] = ctx_len + K
            self.draft_tokens[i] = torch.arange(K) + 100 * i
            self.draft_token_confidence_probs[i] = 0.5 + 0.1 * i
            if self.draft_logits is not None:
                self.draft_logits[slot] = float(slot)
        return self.draft_tokens[:n]


def _call(spec, batch, **kwargs):
    n = batch.num_reqs
    last_sampled = torch.tensor([7, 8, 9, 10, 11, 12, 13, 14])
    return spec.propose(
        batch,
        {},
        {},
        None,
        None,
        torch.ones(n, dtype=torch.int32),  # num_sampled
        torch.zeros(n, dtype=torch.int32),  # num_rejected
        last_sampled,
        last_sampled,
        None,
        None,
        **kwargs,
    )


@pytest.mark.parametrize("probabilistic", [False, True])
def test_recorder_reads_the_speculator_buffers(probabilistic):
    recorder = ProposalRecorder()
    batch = _Batch(["5-aaaaaaaa", "6-bbbbbbbb"], [3, 1], [5, 1])
    with recorder.installed(FakeSpeculator):
        assert "propose" in vars(FakeSpeculator)
        spec = FakeSpeculator(probabilistic)
        out = _call(spec, batch)
        out[:, 2:] = -1  # what the runner does with fewer scheduled tokens
        _call(spec, batch, dummy_run=True)
    assert FakeSpeculator.propose.__name__ == "propose"
    assert not hasattr(FakeSpeculator.propose, "__wrapped__")
    assert recorder.errors == []
    summary = recorder.summary()
    assert summary["propose_calls"] == 1
    assert summary["dummy_propose_calls"] == 1
    assert summary["speculator"]["noise_token_id"] == FakeSpeculator.NOISE
    assert summary["speculator"]["probabilistic"] is probabilistic
    first, second = recorder.proposals
    assert (first.req_id, first.req_state_idx, first.batch_index) == (
        "5-aaaaaaaa",
        3,
        0,
    )
    assert first.anchor_pos == 10 and first.anchor_token == 10  # last_sampled[3]
    assert first.block_tokens == [10] + [FakeSpeculator.NOISE] * (K - 1)
    assert first.block_positions == [10, 11, 12, 13] and first.seq_len == 14
    assert first.draft == [0, 1, 2, 3]  # copied before the runner's -1
    assert second.anchor_pos == 20 and second.anchor_token == 8
    assert second.draft == [100, 101, 102, 103]
    assert second.num_scheduled == 1 and second.num_sampled == 1
    assert second.confidence == pytest.approx([0.6] * K)
    assert not first.cuda_graph
    if probabilistic:
        assert first.logits.shape == (K, FakeSpeculator.VOCAB)
        assert float(first.logits[0, 0]) == 3.0 and float(second.logits[0, 0]) == 1.0
    else:
        assert first.logits is None
    assert first.to_json()["draft"] == [0, 1, 2, 3]


def test_recorder_notes_cuda_graph_replays():
    recorder = ProposalRecorder()
    batch = _Batch(["5-aaaaaaaa"], [0], [1])
    with recorder.installed(FakeSpeculator):
        spec = FakeSpeculator(False, graph=True)
        _call(spec, batch)
        _call(spec, batch)
    assert spec.query_cudagraph_manager.replays == 2
    assert recorder.graph_steps == 2
    assert all(p.cuda_graph for p in recorder.proposals)


def test_recorder_never_breaks_the_engine():
    recorder = ProposalRecorder()
    batch = _Batch(["5-aaaaaaaa"], [0], [1])
    del batch.num_scheduled_tokens  # only the recorder reads it
    with recorder.installed(FakeSpeculator):
        out = _call(FakeSpeculator(False), batch)
    assert out.tolist() == [[0, 1, 2, 3]]
    assert recorder.proposals == []
    assert len(recorder.errors) == 1
    assert "num_scheduled_tokens" in recorder.errors[0]


def _vllm_class(relative: str, name: str) -> tuple[ast.ClassDef, str]:
    """A class of vLLM's sources, parsed, not imported (importing the V2
    runner costs seconds)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vLLM is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node, source
    raise AssertionError(f"{name} not found in {path}")


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


def test_recorder_matches_vllm_speculator_sources():
    """What the recorder wraps and reads is where the docstring says it is."""
    gpu = "v1/worker/gpu/"
    dspark, dspark_src = _vllm_class(
        gpu + "spec_decode/dspark/speculator.py", "DSparkSpeculator"
    )
    assert [ast.unparse(b) for b in dspark.bases] == ["DFlashSpeculator"]
    assert "propose" not in _methods(dspark)  # inherited: wrapped on the subclass
    assert "self.draft_tokens[:num_reqs, i] = draft_sampled_i" in dspark_src
    assert "prev = self.input_buffers.input_ids[self._anchor_idx" in dspark_src
    assert "logits_cache=self.draft_logits" in dspark_src
    assert "self.draft_token_confidence_probs[:num_reqs] = " in dspark_src

    dflash, dflash_src = _vllm_class(
        gpu + "spec_decode/dflash/speculator.py", "DFlashSpeculator"
    )
    propose = _methods(dflash)["propose"]
    params = [a.arg for a in propose.args.args]
    assert params[:8] == [
        "self",
        "input_batch",
        "attn_metadata",
        "slot_mappings",
        "last_hidden_states",
        "aux_hidden_states",
        "num_sampled",
        "num_rejected",
    ]
    assert "dummy_run" in params
    assert "return self.draft_tokens[:num_reqs]" in dflash_src
    assert "self.query_cudagraph_manager.run_fullgraph(batch_desc)" in dflash_src
    assert "tl.store(out_input_ids_ptr + query_idx, input_id" in dflash_src

    _, base_src = _vllm_class(gpu + "spec_decode/speculator.py", "DraftModelSpeculator")
    for name in ("input_buffers", "draft_tokens", "draft_token_confidence_probs"):
        assert f"self.{name} = " in base_src
    _, runner_src = _vllm_class(gpu + "model_runner.py", "GPUModelRunner")
    assert "draft_tokens = self.speculator.propose(" in runner_src
