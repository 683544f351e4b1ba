# SPDX-License-Identifier: Apache-2.0
"""The DSpark trainer on CPU, on tiny checkpoints.

The batched draft forward against the pure-PyTorch references, the offline
acceptance replay, a short training run (loss and acceptance), determinism,
and the checkpoint it writes.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from vllm_spark2_5_plugin.configs.dspark import read_dspark_settings
from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
from vllm_spark2_5_plugin.names import DRAFT_WEIGHT_PREFIXES, FULL, SLIDING
from vllm_spark2_5_plugin.references.dspark import DSparkReference
from vllm_spark2_5_plugin.references.spark2_5 import Spark2_5Reference
from vllm_spark2_5_plugin.tools import dspark_acceptance as acc
from vllm_spark2_5_plugin.tools import train_dspark
from vllm_spark2_5_plugin.tools.dspark_checkpoint import (
    DRAFT_SHARD,
    INDEX,
    draft_prefix,
    read_tensors,
    write_checkpoint,
)
from vllm_spark2_5_plugin.tools.dspark_data import (
    greedy_continuations,
    prompt_token_pool,
    random_prompts,
    stacked_target_features,
    target_features,
)
from vllm_spark2_5_plugin.tools.dspark_draft_config import DraftConfig
from vllm_spark2_5_plugin.tools.dspark_draft_torch import (
    DSparkDraft,
    draft_loss,
    initial_state,
    load_state,
)
from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint
from vllm_spark2_5_plugin.tools.train_dspark import sequences_digest, train

PROMPT_LEN, GEN_LEN, N_TRAIN, N_EVAL = 8, 32, 12, 4
LAYER_NAMES = [
    "input_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.g_proj.weight",
    "self_attn.o_proj.weight",
    "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny tensors: one thread is faster than two fighting over shared cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def shard_tensors(path: Path) -> dict[str, torch.Tensor]:
    out = {}
    for shard in sorted(path.glob("*.safetensors")):
        out |= load_file(str(shard))
    return out


def expected_draft_names(layers: int, rnn: bool, confidence: bool) -> set[str]:
    names = {"main_proj.weight", "main_norm.weight", "norm.weight"}
    names |= {f"layers.{j}.{n}" for j in range(layers) for n in LAYER_NAMES}
    names |= {"markov_head.markov_w1.weight", "markov_head.markov_w2.weight"}
    if rnn:
        names.add("markov_head.rnn_proj.weight")
    if confidence:
        names |= {"confidence_head.proj.weight", "confidence_head.proj.bias"}
    return names


# -- (i) the batched forward equals the references -----------------------------------


def test_batched_forward_matches_reference(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(
        tmp_path / "ck",
        dspark={
            "dspark_markov_head_type": "rnn",
            "dspark_enable_confidence_head": True,
            "dspark_layer_types": [SLIDING, FULL],
            "dspark_sliding_window": 5,
        },
        dspark_prefix="mtp.",
        attention_bias=True,
    )
    raw = json.loads((path / "config.json").read_text())
    dtype = torch.float64
    target = Spark2_5Reference.from_checkpoint(path, dtype)
    ref = DSparkReference.from_checkpoint(path, dtype)
    cfg = DraftConfig.from_config(raw)
    draft = DSparkDraft(cfg, target.embed_tokens, target.lm_head).to(dtype)
    found = read_tensors(path, lambda n: n.startswith("mtp."))
    draft.load_state_dict({n[4:]: t for n, t in found.items()}, strict=True)

    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 500, (2, 24), generator=gen)
    feats = torch.stack(
        [target_features(target, s, cfg.target_layer_ids) for s in tokens.tolist()]
    )
    # Anchors inside and past the 5-token window, in any order, one per block.
    anchors = torch.tensor([[1, 6, 12, 20], [17, 3, 9, 4]])
    with torch.no_grad():
        out = draft(feats, tokens, anchors)
    block = cfg.block_size
    for s in range(2):
        c = ref.combine(list(feats[s].chunk(len(cfg.target_layer_ids), dim=-1)))
        for a, pos in enumerate(anchors[s].tolist()):
            ids = [int(tokens[s, pos])] + [cfg.noise_token_id] * (block - 1)
            hidden = ref.block_hidden(c[:pos], ids)
            base = ref.base_logits(hidden)
            e = ref.markov_embeds(tokens[s, pos : pos + block].tolist())
            logits = base + ref.markov_bias(e)
            conf = ref.confidence(hidden, e)
            torch.testing.assert_close(out.hidden[s, a], hidden, rtol=0, atol=1e-10)
            torch.testing.assert_close(out.base_logits[s, a], base, rtol=0, atol=1e-9)
            torch.testing.assert_close(out.markov_embeds[s, a], e, rtol=0, atol=1e-12)
            torch.testing.assert_close(out.logits[s, a], logits, rtol=0, atol=1e-9)
            torch.testing.assert_close(
                torch.sigmoid(out.confidence_logits[s, a]), conf, rtol=0, atol=1e-12
            )
            labels = tokens[s, pos + 1 : pos + 1 + block].tolist()
            labels += [-100] * (block - len(labels))
            assert out.labels[s, a].tolist() == labels
    loss, metrics = draft_loss(draft(feats, tokens, anchors))
    loss.backward()
    assert torch.isfinite(loss) and {"ce", "conf_bce", "tf_accept_len"} <= set(metrics)
    assert draft.main_proj.weight.grad.abs().sum() > 0


# -- offline acceptance bookkeeping --------------------------------------------------


def test_acceptance_replay_starts_at_the_first_output_token() -> None:
    """A fake draft that is wrong at draft position 1 whenever L is even."""
    seq = list(range(100, 140))
    k, prompt_len = 4, 6
    calls = []

    def draft_step(context, anchor, num_tokens):
        pos = len(context)
        calls.append((pos, anchor))
        tokens = seq[pos + 1 : pos + 1 + num_tokens]
        if pos % 2 == 0:
            tokens[1] = -1
        return SimpleNamespace(tokens=tokens)

    target = SimpleNamespace(residual_stream=lambda ids: [torch.zeros(len(ids), 2)] * 3)
    draft = SimpleNamespace(
        config=SimpleNamespace(target_layer_ids=[1], block_size=k),
        combine=lambda aux: aux[0],
        draft=draft_step,
    )
    report = acc.offline_acceptance(target, draft, [seq], prompt_len)
    assert calls[0] == (prompt_len, seq[prompt_len])  # L = P, anchor = 1st output
    for (pos, _), (nxt, _) in zip(calls, calls[1:], strict=False):
        assert nxt == pos + (1 if pos % 2 == 0 else k) + 1
    assert all(pos + k <= len(seq) - 1 for pos, _ in calls)
    accepted = [1 if pos % 2 == 0 else k for pos, _ in calls]
    assert report.num_drafts == len(calls)
    assert report.mean_acceptance_length == pytest.approx(
        1 + sum(accepted) / len(calls)
    )
    assert report.acceptance_rate_per_position[0] == 1.0
    assert report.acceptance_rate_per_position[1] == pytest.approx(
        sum(a > 1 for a in accepted) / len(calls)
    )


def test_acceptance_replay_refuses_zero_draft_tokens() -> None:
    """``num_tokens=0`` is no draft, not "the block size"."""
    draft = SimpleNamespace(config=SimpleNamespace(target_layer_ids=[1], block_size=4))
    with pytest.raises(ValueError, match="num_tokens must be at least 1, got 0"):
        acc.offline_acceptance(None, draft, [list(range(20))], 4, num_tokens=0)


# -- (ii)-(iv) training ---------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default tiny checkpoint with its random draft under ``draft_model.``."""
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), dspark=True)


@pytest.fixture(scope="module")
def sequences(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The target's greedy continuations of seeded random prompts, generated once."""
    target = Spark2_5Reference.from_checkpoint(tiny, torch.float32)
    pool = prompt_token_pool(tiny, target.embed_tokens.shape[0])
    prompts = random_prompts(pool, N_TRAIN + N_EVAL, PROMPT_LEN, seed=0)
    conts = greedy_continuations(tiny, prompts, GEN_LEN, "reference", target)
    seqs = [p + c for p, c in zip(prompts, conts, strict=True)]
    path = tmp_path_factory.mktemp("seqs") / "sequences.json"
    path.write_text(json.dumps({"prompt_len": PROMPT_LEN, "sequences": seqs}))
    return path


def test_stacked_target_features_equal_one_sequence_at_a_time(tiny: Path) -> None:
    """The trainer's batched features (vmap over the reference forward, in
    chunks) are the per-sequence ones, in order, for a chunk size that does
    not divide the number of sequences."""
    target = Spark2_5Reference.from_checkpoint(tiny, torch.float64)
    layer_ids = [1, 0]  # in any order, as target_features takes them
    gen = torch.Generator().manual_seed(1)
    seqs = torch.randint(0, 500, (7, 30), generator=gen).tolist()
    got = stacked_target_features(target, seqs, layer_ids, chunk=3)
    want = torch.stack([target_features(target, s, layer_ids) for s in seqs])
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_vllm_continuations_belong_to_their_prompts(tiny: Path) -> None:
    """The trainer's vLLM path (a real CPU engine) with the held-out prompts
    generated as a batch of their own: every continuation is its own prompt's
    greedy continuation, in order (equal to the reference until a near-tie)."""
    target = Spark2_5Reference.from_checkpoint(tiny, torch.float32)
    pool = prompt_token_pool(tiny, target.embed_tokens.shape[0])
    prompts = random_prompts(pool, 5, PROMPT_LEN, seed=3)
    got = greedy_continuations(
        tiny, prompts, 12, "vllm", vllm_dtype="float32", first_alone=2
    )
    assert len(got) == len(prompts)
    compared = 0
    for prompt, cont in zip(prompts, got, strict=True):
        want, rows = target.greedy(prompt, len(cont))
        for step, (a, b) in enumerate(zip(cont, want, strict=True)):
            if a != b:
                gap = float(rows[step][b] - rows[step][a])
                assert gap < 1e-4, f"step {step}: vLLM {a}, reference {b} (gap {gap})"
                break
            compared += 1
    assert compared >= 40  # most tokens were compared, not cut by near-ties


def _train(src: Path, dst: Path, sequences: Path, *extra: str) -> dict:
    return train(
        [
            str(src),
            str(dst),
            "--sequences",
            str(sequences),
            "--num-prompts",
            str(N_TRAIN),
            "--eval-prompts",
            str(N_EVAL),
            "--steps",
            "50",
            "--lr",
            "3e-3",
            "--batch-anchors",
            "64",
            "--anchors-per-seq",
            "32",
            "--device",
            "cpu",
            "--log-every",
            "10",
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def runs(tiny, sequences, tmp_path_factory) -> list[tuple[Path, dict]]:
    """Two runs with the same seed."""
    out = []
    for name in ("a", "b"):
        dst = tmp_path_factory.mktemp("trained") / name
        out.append((dst, _train(tiny, dst, sequences, "--seed", "7")))
    return out


def test_training_lowers_loss_and_raises_acceptance(tiny, sequences, runs) -> None:
    dst, summary = runs[0]
    # The sequences file's lengths, not the ignored --prompt-len/--gen-len.
    given = json.loads(sequences.read_text())
    assert summary["prompt_len"] == given["prompt_len"] == PROMPT_LEN
    assert summary["sequence_length"] == len(given["sequences"][0])
    assert summary["args"]["prompt_len"] != PROMPT_LEN
    loss = summary["loss"]
    assert loss["end_mean10"] < 0.5 * loss["start_mean10"]
    tf = summary["teacher_forced_accept_len"]
    assert tf["end_mean10"] > tf["start_mean10"] + 0.5
    # Held-out sequences (the summary's before/after).
    before, after = summary["acceptance"]["before"], summary["acceptance"]["after"]
    assert after["mean_acceptance_length"] > before["mean_acceptance_length"]
    # The training sequences: the draft learned its target.
    seqs = json.loads(sequences.read_text())["sequences"][:N_TRAIN]
    target = Spark2_5Reference.from_checkpoint(tiny, torch.float32)
    random_draft = acc.checkpoint_acceptance(tiny, seqs, PROMPT_LEN, target=target)
    trained = acc.checkpoint_acceptance(dst, seqs, PROMPT_LEN, target=target)
    assert trained.mean_acceptance_length > random_draft.mean_acceptance_length + 0.5, (
        random_draft,
        trained,
    )


def test_same_seed_gives_identical_draft(runs) -> None:
    (a, summary_a), (b, summary_b) = runs
    ta, tb = shard_tensors(a), shard_tensors(b)
    assert ta.keys() == tb.keys()
    for name in ta:
        assert torch.equal(ta[name], tb[name]), name
    assert summary_a["loss_curve"] == summary_b["loss_curve"]
    assert summary_a["sequences_sha256"] == summary_b["sequences_sha256"]


def test_summary_names_the_data_it_trained_on(sequences, runs) -> None:
    _, summary = runs[0]
    seqs = json.loads(sequences.read_text())["sequences"]
    digest = summary["sequences_sha256"]
    # Held-out first, then the training sequences.
    assert digest["eval"] == sequences_digest(seqs[:N_EVAL])
    assert digest["train"] == sequences_digest(seqs[N_EVAL : N_EVAL + N_TRAIN])
    changed = [list(s) for s in seqs[N_EVAL : N_EVAL + N_TRAIN]]
    changed[-1][-1] += 1
    assert sequences_digest(changed) != digest["train"]


def test_held_out_set_does_not_depend_on_the_amount_of_training_data(
    tiny, sequences, runs, tmp_path
) -> None:
    """Fewer training sequences, same held-out ones: recipes that differ in
    --num-prompts are compared on one held-out set."""
    fewer = _train(
        tiny, tmp_path / "fewer", sequences, "--num-prompts", "2", "--seed", "7"
    )
    full = runs[0][1]
    assert fewer["sequences_sha256"]["eval"] == full["sequences_sha256"]["eval"]
    assert fewer["sequences_sha256"]["train"] != full["sequences_sha256"]["train"]
    # The same untrained draft on the same held-out sequences.
    assert fewer["acceptance"]["before"] == full["acceptance"]["before"]


def test_written_checkpoint(tiny, runs) -> None:
    dst, summary = runs[0]
    before, after = shard_tensors(tiny), shard_tensors(dst)
    draft = {n for n in after if n.startswith(DRAFT_WEIGHT_PREFIXES)}
    assert {n.removeprefix("draft_model.") for n in draft} == expected_draft_names(
        1, rnn=False, confidence=False
    )
    assert all(n.startswith("draft_model.") for n in draft)
    for name, tensor in before.items():  # target untouched, every draft tensor new
        assert after[name].dtype == tensor.dtype == torch.float32
        assert torch.equal(after[name], tensor) != (name in draft), name
    config = json.loads((dst / "config.json").read_text())
    assert {k: config[k] for k in summary["dspark"]} == summary["dspark"]
    assert json.loads((dst / "train_dspark.json").read_text()) == summary
    assert (dst / "tokenizer.json").exists()
    ref = DSparkReference.from_checkpoint(dst, torch.float32)
    target = Spark2_5Reference.from_checkpoint(dst, torch.float32)
    ids = list(range(20, 30))
    feats = target_features(target, ids, ref.config.target_layer_ids)
    c = ref.combine(list(feats.chunk(2, dim=-1)))
    assert len(ref.draft(c[:9], ids[9]).tokens) == 4


def test_target_init_copies_the_targets_layers_and_norm(tmp_path) -> None:
    """``--init-draft target``: each draft layer starts as the target's last
    layer of its type, the final norm as the target's, and ``main_proj``
    averages the target features; everything else starts as ``random``."""
    src = make_tiny_checkpoint(tmp_path / "plain")
    raw = json.loads((src / "config.json").read_text())
    target_types = Spark2_5Config.from_dict(raw).layer_types
    assert target_types == [SLIDING, SLIDING, SLIDING, FULL]
    cfg = DraftConfig.from_config(
        raw,
        layer_types=[FULL, SLIDING],
        target_layer_ids=[0, 2],
        block_size=3,
        markov_rank=4,
        noise_token_id=5,
    )
    target_weights = shard_tensors(src)
    embed = target_weights["model.embed_tokens.weight"].float()
    draft = DSparkDraft(cfg, embed, embed)
    state = initial_state(
        draft, "target", 0, target_weights=target_weights,
        target_layer_types=target_types,
    )  # fmt: skip
    random = initial_state(draft, "random", 0)
    for j in (0, 1):
        assert {n.split(".", 2)[2] for n in state if n.startswith(f"layers.{j}.")} == (
            set(LAYER_NAMES)
        )
    # Draft layer 0 (full) from target layer 3, layer 1 (sliding) from 2.
    for j, src_layer in ((0, 3), (1, 2)):
        for name in LAYER_NAMES:
            want = target_weights[f"model.layers.{src_layer}.{name}"].float()
            assert torch.equal(state[f"layers.{j}.{name}"], want), (j, name)
    assert torch.equal(
        state["norm.weight"], target_weights["model.norm.weight"].float()
    )
    h = torch.randn(3, cfg.hidden_size, dtype=torch.float64)
    averaged = torch.cat([h, 3 * h], dim=-1) @ state["main_proj.weight"].double().T
    torch.testing.assert_close(averaged, 2 * h)
    copied = {n for n in state if n.startswith("layers.")} | {
        "norm.weight",
        "main_proj.weight",
    }
    for name in set(state) - copied:
        assert torch.equal(state[name], random[name]), name
    load_state(draft, state)


@pytest.mark.parametrize("init", ["random", "target"])
def test_new_draft_on_a_checkpoint_without_one(tmp_path, tiny, sequences, init) -> None:
    src = make_tiny_checkpoint(tmp_path / "plain")
    dst = tmp_path / "out"
    summary = _train(
        src,
        dst,
        sequences,
        *([] if init == "random" else ["--init-draft", init]),
        *("--steps", "3", "--eval-prompts", "0", "--markov-head-type", "rnn"),
        *("--confidence-head", "--draft-layer-types", "sliding,full"),
        *("--block-size", "3", "--markov-rank", "4", "--target-layer-ids", "0,2"),
    )
    assert summary["init_draft"] == init and summary["prefix"] == "mtp."
    assert summary["loss"]["last"] < summary["loss"]["first"]
    tensors = shard_tensors(dst)
    draft = {n for n in tensors if n.startswith(DRAFT_WEIGHT_PREFIXES)}
    assert {n.removeprefix("mtp.") for n in draft} == expected_draft_names(
        2, rnn=True, confidence=True
    )
    assert tensors["mtp.markov_head.markov_w1.weight"].shape == (512, 4)
    assert tensors["mtp.main_proj.weight"].shape == (64, 128)
    config = json.loads((dst / "config.json").read_text())
    assert config["dspark_block_size"] == 3
    assert config["dspark_layer_types"] == [SLIDING, FULL]
    # From the tokenizer (<|mask|>), as make_tiny_checkpoint picks it.
    noise = json.loads((tiny / "config.json").read_text())["dspark_noise_token_id"]
    assert config["dspark_noise_token_id"] == noise
    settings = read_dspark_settings(Spark2_5Config.from_pretrained(dst))
    assert settings.markov_head_type == "rnn" and settings.target_layer_ids == (0, 2)
    ref = DSparkReference.from_checkpoint(dst, torch.float32)
    result = ref.draft(torch.zeros(5, 64), anchor=7)
    assert len(result.tokens) == 3 and result.confidence.shape == (3,)


def test_sharded_checkpoint_gets_a_draft_shard(tmp_path) -> None:
    src = make_tiny_checkpoint(
        tmp_path / "src", dspark=True, dspark_prefix="model.mtp."
    )
    tensors = load_file(str(src / "model.safetensors"))
    (src / "model.safetensors").unlink()
    names = sorted(tensors)
    weight_map = {}
    for i, part in enumerate((names[::2], names[1::2])):
        shard = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, str(src / shard))
        weight_map |= dict.fromkeys(part, shard)
    index = {"metadata": {}, "weight_map": weight_map}
    (src / INDEX).write_text(json.dumps(index))
    prefix = draft_prefix(src)
    assert prefix == "model.mtp."
    old = {n[len(prefix) :]: t for n, t in tensors.items() if n.startswith(prefix)}
    new = {n: 2 * t.double() for n, t in old.items()}
    dst = tmp_path / "dst"
    write_checkpoint(src, dst, new, prefix, {"dspark_block_size": 4})
    index = json.loads((dst / INDEX).read_text())["weight_map"]
    for shard in (
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ):
        with safe_open(str(dst / shard), framework="pt") as f:
            assert not any(n.startswith(prefix) for n in f.keys())  # noqa: SIM118
    written = load_file(str(dst / DRAFT_SHARD))
    assert set(written) == {prefix + n for n in old}
    assert all(index[n] == DRAFT_SHARD for n in written)
    assert set(index) == set(tensors)
    for name, t in old.items():
        assert written[prefix + name].dtype == torch.float32
        assert torch.equal(written[prefix + name], 2 * t)
    ref = DSparkReference.from_checkpoint(dst, torch.float32)
    assert ref.prefix == prefix


# ---------------------------------------------------------------------------
# Bad input to the command lines: a message, not a traceback
# ---------------------------------------------------------------------------


def _not_a_spark2_5_checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "llama"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return path


def _two_draft_prefixes(tmp_path: Path, tiny: Path) -> Path:
    """The tiny checkpoint plus one more draft tensor under ``mtp.``."""
    from safetensors.torch import save_file

    path = tmp_path / "two-prefixes"
    shutil.copytree(tiny, path)
    save_file({"mtp.norm.weight": torch.ones(64)}, str(path / "extra.safetensors"))
    return path


def _sequence_files(tmp: Path) -> None:
    """Sequences files the commands must refuse (the tiny model: 512 ids,
    block size 4), in ``tmp``."""
    seq = list(range(10, 50))
    files = {
        "not-json.json": "{nope",
        "no-prompt-len.json": json.dumps({"sequences": [seq]}),
        "big-id.json": json.dumps({"prompt_len": 8, "sequences": [seq[:-1] + [512]]}),
        "negative-id.json": json.dumps({"prompt_len": 8, "sequences": [[-3] + seq]}),
        "short.json": json.dumps({"prompt_len": 8, "sequences": [seq[:12]] * 20}),
        "few.json": json.dumps({"prompt_len": 8, "sequences": [seq] * 3}),
    }
    for name, text in files.items():
        (tmp / name).write_text(text)


def _no_work(*args, **kwargs):
    raise AssertionError("the command started its work before refusing")


def _refusal(capsys, call) -> str:
    """The message of a command that must stop on its input as argparse does:
    the usage line, one ``PROG: error: MESSAGE`` line, exit status 2."""
    with pytest.raises(SystemExit) as stopped:
        call()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert stopped.value.code == 2 and len(lines) == 1, err
    assert err.startswith("usage: ") and "Traceback" not in err, err
    prefix = f"{argparse.ArgumentParser().prog}: error: "
    assert lines[0].startswith(prefix), err
    return lines[0].removeprefix(prefix)


@pytest.mark.parametrize(
    ("make_src", "extra", "message"),
    [
        (lambda tmp, tiny: tmp / "missing", (), r"not a checkpoint directory"),
        (
            lambda tmp, tiny: _not_a_spark2_5_checkpoint(tmp),
            (),
            r"not a Spark2_5 checkpoint \(model_type 'llama'",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--markov-rank", "-3"),
            r"dspark_markov_rank must be a positive integer, got -3\. Set them",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--target-layer-ids", "1,9"),
            r"dspark_target_layer_ids=\[1, 9\] has \[9\] outside",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--target-layer-ids", "1,,3"),
            r"argument --target-layer-ids: expected comma-separated layer indices "
            r"such as 1,6,10, got '1,,3'",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--target-layer-ids=",),
            r"argument --target-layer-ids: expected comma-separated .* got ''",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--seed", "18446744073709551616"),
            r"argument --seed: must be from -9223372036854775808 to "
            r"18446744073709551614, got 18446744073709551616",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--draft-sliding-window", "0"),
            r"dspark_sliding_window must be a positive integer, got 0",
        ),
        (
            lambda tmp, tiny: make_tiny_checkpoint(tmp / "plain"),
            ("--init-draft", "checkpoint"),
            r"--init-draft checkpoint: .* has no draft tensors",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--init-draft", "checkpoint", "--markov-rank", "16"),
            r"--init-draft checkpoint: .*wrong shape markov_head\.markov_w1\.weight: "
            r"\(512, 8\) for \(512, 16\)",
        ),
        (
            _two_draft_prefixes,
            (),
            r"has draft tensors under several prefixes",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--log-every", "0"),
            r"argument --log-every: must be at least 1, got 0",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--anchors-per-seq", "0"),
            r"argument --anchors-per-seq: must be at least 1, got 0",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--gen-len", "1"),
            r"argument --gen-len: must be at least 2, got 1",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--gen-len", "4"),  # the block size: no step for the held-out replay
            r"--gen-len 4 leaves the held-out acceptance no draft step of 4 tokens",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--num-prompts", "0"),
            r"argument --num-prompts: must be at least 1, got 0",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--num-prompts", "2", "--eval-prompts", "-1"),
            r"argument --eval-prompts: must be at least 0, got -1",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--lr", "-1"),
            r"argument --lr: must be at least 0, got -1",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--clip", "-1"),
            r"argument --clip: must be above 0, got -1",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--device", "foo"),
            r"argument --device: expected cpu or cuda\[:N\], got 'foo'",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--device", "cuda"),
            r"argument --device: 'cuda': CUDA is not available on this machine",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--prompt-len", "2000", "--gen-len", "100"),
            r"--prompt-len 2000 \+ --gen-len 100 = 2100 tokens exceed the model's "
            r"max_position_embeddings 2048",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--sequences", "{tmp}/missing.json"),
            r"--sequences: .*missing\.json: no such file",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--sequences", "{tmp}/not-json.json"),
            r"--sequences: .*not-json\.json is not a readable JSON file",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--sequences", "{tmp}/no-prompt-len.json"),
            r'--sequences: .*: expected \{"prompt_len": P, "sequences"',
        ),
        (
            lambda tmp, tiny: tiny,
            ("--sequences", "{tmp}/big-id.json", "--num-prompts", "1",
             "--eval-prompts", "0"),
            r"--sequences: .*: sequence 0 has token id 512, outside the model's "
            r"0\.\.511",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--sequences", "{tmp}/negative-id.json", "--num-prompts", "1",
             "--eval-prompts", "0"),
            r"sequence 0 has token id -3, outside the model's 0\.\.511",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--sequences", "{tmp}/few.json"),
            r"--sequences: .*few\.json: need 72 sequences of one length",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--sequences", "{tmp}/short.json", "--num-prompts", "8"),
            r"sequence 0 has 12 tokens; prompt_len 8 and 5 more are needed",
        ),
        (
            lambda tmp, tiny: tiny,
            ("--save-sequences", "{tmp}/no-dir/sequences.json"),
            r"--save-sequences .*sequences\.json: name a file in an existing directory",
        ),
        (  # vLLM refuses sliding draft layers the kernel cannot run
            lambda tmp, tiny: make_tiny_checkpoint(tmp / "hd96", head_dim=96),
            ("--init-draft", "random", "--draft-layer-types", "sliding,full"),
            r"sliding layers and head_dim=96: .*power of two.*full-attention",
        ),
    ],
    ids=[
        "no-dir", "not-spark2_5", "rank", "layer-ids", "layer-ids-empty-item",
        "layer-ids-empty", "seed", "window", "no-draft",
        "init-shape", "two-prefixes", "log-every", "anchors-per-seq", "gen-len",
        "gen-len-eval", "num-prompts", "eval-prompts", "lr", "clip", "device",
        "no-cuda", "too-long",
        "seq-missing", "seq-not-json", "seq-no-key", "seq-big-id", "seq-negative-id",
        "seq-few",
        "seq-short", "save-no-dir", "head-dim",
    ],
)  # fmt: skip
@pytest.mark.parametrize("earlier_output", [False, True])
def test_trainer_refuses_bad_input_before_any_work(
    tmp_path, tiny, make_src, extra, message, earlier_output, monkeypatch, capsys
) -> None:
    # With --overwrite, an earlier output is deleted only once the input
    # and the settings passed their checks.
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _sequence_files(tmp_path)
    extra = tuple(a.replace("{tmp}", str(tmp_path)) for a in extra)
    dst = tmp_path / "out"
    if earlier_output:
        dst.mkdir()
        (dst / "kept.txt").write_text("an earlier run")
        extra = (*extra, "--overwrite")
    said = _refusal(
        capsys, lambda: train([str(make_src(tmp_path, tiny)), str(dst), *extra])
    )
    assert re.search(message, said), said
    if earlier_output:
        assert (dst / "kept.txt").read_text() == "an earlier run"
    else:
        assert not dst.exists() or not any(dst.iterdir())


def test_trainer_names_a_missing_input_before_a_non_empty_output(
    tmp_path, monkeypatch, capsys
) -> None:
    """The input is the first thing to fix: fixing the output first only led
    to the next refusal."""
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "kept.txt").write_text("an earlier run")
    said = _refusal(capsys, lambda: train([str(tmp_path / "missing"), str(dst)]))
    assert "missing is not a checkpoint directory" in said, said


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("where", ["output", "parent"])
def test_trainer_refuses_an_output_that_is_a_file(
    tmp_path, tiny, where, overwrite, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    file = tmp_path / "notes.txt"
    file.write_text("not a checkpoint")
    dst = file if where == "output" else file / "out"
    extra = ["--overwrite"] if overwrite else []
    said = _refusal(capsys, lambda: train([str(tiny), str(dst), *extra]))
    assert re.search(r"notes\.txt is a file, not a directory", said), said
    assert file.read_text() == "not a checkpoint"


@pytest.mark.parametrize(
    "where", ["in-output", "the-input-file", "in-input", "in-new-output", "existing"]
)
def test_trainer_refuses_a_save_sequences_path_it_would_lose(
    tmp_path, tiny, sequences, where, monkeypatch, capsys
) -> None:
    """--save-sequences inside an output that --overwrite deletes, onto the
    --sequences file (which would keep only the sequences used), onto any
    other file that exists, or inside the input or the output at all (one
    written over the input's tokenizer.json broke both checkpoints)."""
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    src = tmp_path / "in"
    shutil.copytree(tiny, src)
    before = {f.name: f.read_bytes() for f in src.iterdir()}
    dst = tmp_path / "out"
    dst.mkdir()
    overwrite = ()
    if where != "in-new-output":  # else a new, empty output
        (dst / "kept.txt").write_text("an earlier run")
        overwrite = ("--overwrite",)
    other = tmp_path / "notes.json"
    other.write_text("my notes")
    save, message = {
        "in-output": (dst / "seqs.json", "is inside the output.*--overwrite deletes"),
        "the-input-file": (sequences, "would overwrite the --sequences file"),
        "in-input": (src / "tokenizer.json", "is inside the input"),
        "in-new-output": (dst / "seqs.json", "is inside the output"),
        "existing": (other, "already exists"),
    }[where]
    text = sequences.read_text()
    extra = ("--save-sequences", str(save), *overwrite)
    said = _refusal(capsys, lambda: _train(src, dst, sequences, *extra))
    assert re.search(f"^--save-sequences .*{message}", said), said
    if overwrite:
        assert (dst / "kept.txt").read_text() == "an earlier run"
    else:
        assert not any(dst.iterdir())
    assert sequences.read_text() == text
    assert other.read_text() == "my notes"
    assert {f.name: f.read_bytes() for f in src.iterdir()} == before


def test_generating_the_training_sequences_is_announced(tiny, capsys) -> None:
    """The trainer's first output could be minutes away (with --steps 0, its
    only output the report at the end): a line on stderr says what runs."""
    from vllm_spark2_5_plugin.tools.dspark_data import target_and_sequences

    _, prompt_len, seqs = target_and_sequences(
        tiny, 2, 4, 3, 0, "reference", torch.float32, "cpu"
    )
    assert len(seqs) == 2 and all(len(s) == prompt_len + 3 for s in seqs)
    err = capsys.readouterr().err
    assert "generating 2 greedy continuations of 3 tokens with the reference" in err


def test_trainer_saves_sequences_to_a_new_file_only(tmp_path) -> None:
    """The file is opened to be created: one that appeared after the checks
    is not replaced either."""
    from vllm_spark2_5_plugin.tools.dspark_data import write_sequences

    path = tmp_path / "seqs.json"
    write_sequences(path, 2, [[1, 2, 3]])
    assert json.loads(path.read_text()) == {"prompt_len": 2, "sequences": [[1, 2, 3]]}
    with pytest.raises(FileExistsError):
        write_sequences(path, 2, [[4, 5, 6]])
    assert json.loads(path.read_text())["sequences"] == [[1, 2, 3]]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--num-tokens", "0"), r"argument --num-tokens: must be at least 1, got 0"),
        (("--num-tokens", "-2"), r"argument --num-tokens: must be at least 1, got -2"),
        (("--num-prompts", "0"), r"argument --num-prompts: must be at least 1, got 0"),
        (("--num-prompts", "-1"), r"argument --num-prompts: must be at least 1"),
        (("--gen-len", "0"), r"argument --gen-len: must be at least 1, got 0"),
        (("--gen-len", "-5"), r"argument --gen-len: must be at least 1, got -5"),
        (("--gen-len", "4"), r"--gen-len 4 leaves no draft step of K=4 tokens"),
        (
            ("--gen-len", "2", "--num-tokens", "2"),
            r"--gen-len 2 leaves no draft step of K=2 tokens: use --gen-len 3",
        ),
        (("--prompt-len", "0"), r"argument --prompt-len: must be at least 1, got 0"),
        (
            ("--prompt-len", "5000"),
            r"--prompt-len 5000 \+ --gen-len 128 = 5128 tokens exceed the model's "
            r"max_position_embeddings 2048",
        ),
        (("--sequences", "{tmp}/missing.json"), r"--sequences: .*: no such file"),
        (
            ("--sequences", "{tmp}/not-json.json"),
            r"--sequences: .* is not a readable JSON file",
        ),
        (
            ("--sequences", "{tmp}/no-prompt-len.json"),
            r'--sequences: .*: expected \{"prompt_len": P, "sequences"',
        ),
        (
            ("--sequences", "{tmp}/big-id.json"),
            r"sequence 0 has token id 512, outside the model's 0\.\.511",
        ),
        (
            ("--sequences", "{tmp}/negative-id.json"),
            r"sequence 0 has token id -3, outside the model's 0\.\.511",
        ),
        (
            ("--sequences", "{tmp}/short.json"),
            r"sequence 0 has 12 tokens; prompt_len 8 and 5 more are needed",
        ),
        (("--device", "cuda"), r"'cuda': CUDA is not available on this machine"),
    ],
    ids=[
        "num-tokens-0", "num-tokens-neg", "num-prompts-0", "num-prompts-neg",
        "gen-len-0", "gen-len-neg", "gen-len-block", "gen-len-k", "prompt-len-0",
        "too-long", "seq-missing", "seq-not-json", "seq-no-key", "seq-big-id",
        "seq-negative-id", "seq-short", "no-cuda",
    ],
)  # fmt: skip
def test_acceptance_refuses_bad_input_before_any_work(
    tmp_path, tiny, extra, message, monkeypatch, capsys
) -> None:
    """No report of zero drafts ("mean_acceptance_length": 1.0) and no
    traceback: a message naming the option."""
    monkeypatch.setattr(acc, "target_and_sequences", _no_work)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _sequence_files(tmp_path)
    extra = tuple(a.replace("{tmp}", str(tmp_path)) for a in extra)
    said = _refusal(capsys, lambda: acc.run([str(tiny), *extra]))
    assert re.search(message, said), said


def test_acceptance_needs_a_block_size_or_num_tokens(
    tmp_path, tiny, monkeypatch, capsys
) -> None:
    """A draft config without ``dspark_block_size``: K must be given, and a
    bad DSpark field is named before any work."""
    monkeypatch.setattr(acc, "target_and_sequences", _no_work)
    ckpt = tmp_path / "no-block"
    shutil.copytree(tiny, ckpt)
    raw = json.loads((ckpt / "config.json").read_text())
    raw.pop("dspark_block_size", None)
    raw.pop("block_size", None)
    (ckpt / "config.json").write_text(json.dumps(raw))
    said = _refusal(capsys, lambda: acc.run([str(ckpt)]))
    assert "sets no dspark_block_size; pass --num-tokens" in said, said
    (ckpt / "config.json").write_text(json.dumps({**raw, "dspark_markov_rank": 0}))
    said = _refusal(capsys, lambda: acc.run([str(ckpt), "--num-tokens", "4"]))
    assert "dspark_markov_rank must be a positive integer, got 0" in said, said


@pytest.mark.parametrize("where", ["parent", "child"])
def test_trainer_output_never_contains_or_sits_inside_the_input(
    tmp_path, where, capsys
) -> None:
    """With --overwrite, an output that holds the input would delete it."""
    src = make_tiny_checkpoint(tmp_path / "models" / "spark")
    dst = tmp_path / "models" if where == "parent" else src / "trained"
    said = _refusal(capsys, lambda: train([str(src), str(dst), "--overwrite"]))
    assert "must not contain or be inside" in said, said
    assert (src / "model.safetensors").is_file()


def test_acceptance_refuses_a_checkpoint_without_a_draft(tmp_path, capsys) -> None:
    plain = make_tiny_checkpoint(tmp_path / "plain")
    said = _refusal(capsys, lambda: acc.run([str(plain)]))
    assert "has no DSpark draft tensors" in said, said
    said = _refusal(capsys, lambda: acc.run([str(tmp_path / "missing")]))
    assert "missing is not a checkpoint directory: no config.json" in said, said
    llama = _not_a_spark2_5_checkpoint(tmp_path)
    said = _refusal(capsys, lambda: acc.run([str(llama)]))
    assert "is not a Spark2_5 checkpoint (model_type 'llama'" in said, said
