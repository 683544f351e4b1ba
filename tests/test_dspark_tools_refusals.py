# SPDX-License-Identifier: Apache-2.0
"""Input the DSpark trainer and acceptance tool must refuse up front, in one
line (the trainer before ``--overwrite`` deletes anything), and config.json
fields they must read with ``Spark2_5Config``'s defaults.

The references implement only some RoPE types and read only unquantized
weights; ``--continuations vllm`` settings the vLLM child would refuse; draft
tensors under several prefixes; a config.json that omits defaulted fields.
"""

from __future__ import annotations

import json
import re
import shutil
import typing
from pathlib import Path

import pytest
import torch
from test_train_dspark import _refusal

from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
from vllm_spark2_5_plugin.references.dspark import DSparkReferenceConfig
from vllm_spark2_5_plugin.references.layers import ReferenceConfig
from vllm_spark2_5_plugin.tools import dspark_acceptance as acc
from vllm_spark2_5_plugin.tools import dspark_data, train_dspark
from vllm_spark2_5_plugin.tools.dspark_draft_config import DraftConfig
from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint
from vllm_spark2_5_plugin.tools.train_dspark import train

SMALL = ("--num-prompts", "2", "--eval-prompts", "1", "--prompt-len", "8")
SMALL += ("--gen-len", "8", "--steps", "2", "--device", "cpu")


def _no_work(*args, **kwargs):
    raise AssertionError("the command started its work before refusing")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), dspark=True)


def _edited(tiny: Path, dst: Path, **changes) -> Path:
    """A copy of ``tiny`` whose config.json has ``changes`` (None: removed)."""
    shutil.copytree(tiny, dst)
    raw = json.loads((dst / "config.json").read_text())
    for name, value in changes.items():
        if value is None:
            raw.pop(name, None)
        else:
            raw[name] = value
    (dst / "config.json").write_text(json.dumps(raw))
    return dst


def _trainer_refuses(capsys, tmp_path: Path, src: Path, *extra: str) -> str:
    """The message of a trainer run that must stop before deleting the
    earlier output (``--overwrite``) or doing any work."""
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "kept.txt").write_text("an earlier run")
    message = _refusal(
        capsys, lambda: train([str(src), str(dst), "--overwrite", *SMALL, *extra])
    )
    assert (dst / "kept.txt").read_text() == "an earlier run"
    return message


def _acceptance_refuses(capsys, ckpt: Path, *extra: str) -> str:
    """The error line of an acceptance run that must stop before any work."""
    with pytest.raises(SystemExit) as stopped:
        acc.run([str(ckpt), *extra])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert stopped.value.code == 2 and len(lines) == 1, err
    assert "Traceback" not in err, err
    return lines[0]


YARN = {
    "rope_type": "yarn",
    "factor": 2.0,
    "original_max_position_embeddings": 1024,
    "rope_theta": 10000.0,
}


@pytest.mark.parametrize(
    ("rope", "message"),
    [
        (YARN, r"sliding_attention layers use rope_type 'yarn'"),
        (
            {
                "sliding_attention": {"rope_type": "default"},
                "full_attention": {"rope_type": "dynamic", "factor": 2.0},
            },
            r"^[^,]*: full_attention layers use rope_type 'dynamic'; the "
            r"reference implements rope_type default/linear",
        ),
    ],
    ids=["yarn", "dynamic-full"],
)
@pytest.mark.parametrize("continuations", ["reference", "vllm"])
def test_a_rope_type_the_reference_lacks_is_refused_up_front(
    tmp_path, rope, message, continuations, monkeypatch, capsys
) -> None:
    src = make_tiny_checkpoint(tmp_path / "rope", dspark=True, rope_parameters=rope)
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    monkeypatch.setattr(acc, "target_and_sequences", _no_work)
    extra = ("--continuations", continuations)
    said = _trainer_refuses(capsys, tmp_path, src, *extra)
    assert re.search(message, said), said
    said = _acceptance_refuses(capsys, src, "--num-tokens", "4", *extra)
    assert re.search(message.lstrip("^"), said), said


def test_a_quantized_checkpoint_is_refused(tmp_path, tiny, monkeypatch, capsys):
    """config.json with ``quantization_config`` (as quantize_fp8 writes):
    the references would read FP8 codes without their scales."""
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    monkeypatch.setattr(acc, "target_and_sequences", _no_work)
    quant = {"quant_method": "compressed-tensors", "format": "float-quantized"}
    src = _edited(tiny, tmp_path / "fp8", quantization_config=quant)
    expected = (
        r"is a quantized checkpoint .*'compressed-tensors'.*train and measure on "
        r"the unquantized checkpoint and quantize afterwards"
    )
    assert re.search(expected, _trainer_refuses(capsys, tmp_path, src))
    assert re.search(expected, _acceptance_refuses(capsys, src))


def test_vllm_dtype_choices_are_vllms(tmp_path, tiny, monkeypatch, capsys) -> None:
    from vllm.config.model import ModelDType

    assert set(dspark_data.VLLM_DTYPES) == set(typing.get_args(ModelDType))
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    monkeypatch.setattr(acc, "target_and_sequences", _no_work)
    extra = ("--continuations", "vllm", "--vllm-dtype", "bf16")
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "kept.txt").write_text("an earlier run")
    with pytest.raises(SystemExit):
        train([str(tiny), str(dst), "--overwrite", *SMALL, *extra])
    assert "argument --vllm-dtype: invalid choice: 'bf16'" in capsys.readouterr().err
    assert (dst / "kept.txt").read_text() == "an earlier run"
    said = _acceptance_refuses(capsys, tiny, *extra)
    assert "argument --vllm-dtype: invalid choice: 'bf16'" in said


def test_length_check_matches_the_vllm_childs_max_model_len(
    tmp_path, monkeypatch, capsys
) -> None:
    """The child asks vLLM for max_model_len = P + G + VLLM_EXTRA_POSITIONS;
    the up-front check must refuse what vLLM would."""
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    monkeypatch.setattr(acc, "target_and_sequences", _no_work)
    src = make_tiny_checkpoint(
        tmp_path / "mpe", dspark=True, max_position_embeddings=64
    )
    extra = ("--prompt-len", "16", "--gen-len", "48", "--continuations", "vllm")
    expected = (
        r"--continuations vllm: --prompt-len 16 \+ --gen-len 48 \+ "
        rf"{dspark_data.VLLM_EXTRA_POSITIONS} = "
        rf"{64 + dspark_data.VLLM_EXTRA_POSITIONS} positions .* exceed the model's "
        r"max_position_embeddings 64"
    )
    assert re.search(expected, _trainer_refuses(capsys, tmp_path, src, *extra))
    assert re.search(expected, _acceptance_refuses(capsys, src, *extra))
    # The reference continuations need no more than P + G positions.
    dspark_data.check_length({"max_position_embeddings": 64}, 16, 48)


def test_a_failed_vllm_child_ends_in_one_line(tmp_path, tiny, monkeypatch) -> None:
    monkeypatch.setattr(dspark_data.sys, "executable", shutil.which("false"))
    with pytest.raises(SystemExit) as stopped:
        dspark_data.greedy_continuations(tiny, [[1, 2, 3]], 4, "vllm")
    said = str(stopped.value.code)
    assert said.startswith("the vLLM continuations failed") and "\n" not in said


def test_acceptance_refuses_draft_tensors_under_several_prefixes(
    tmp_path, tiny, monkeypatch, capsys
) -> None:
    from safetensors.torch import save_file

    monkeypatch.setattr(acc, "target_and_sequences", _no_work)
    path = tmp_path / "two-prefixes"
    shutil.copytree(tiny, path)
    save_file({"mtp.norm.weight": torch.ones(64)}, str(path / "extra.safetensors"))
    said = _acceptance_refuses(capsys, path)
    assert "has draft tensors under several prefixes" in said, said


#: Fields with a Spark2_5Config default that a config.json may omit.
DEFAULTED = (
    "head_dim",
    "hidden_act",
    "rms_norm_eps",
    "sliding_window",
    "attention_bias",
    "attention_output_gate",
    "tie_word_embeddings",
)


def test_omitted_fields_get_spark2_5configs_defaults(tmp_path, tiny) -> None:
    raw = json.loads((tiny / "config.json").read_text())
    for name in DEFAULTED:
        raw.pop(name, None)
    ref = ReferenceConfig.from_dict(raw)
    draft = DraftConfig.from_config(raw)
    dspark = DSparkReferenceConfig.from_dict(raw)
    for name in DEFAULTED:
        assert getattr(ref, name) == getattr(Spark2_5Config, name), name
    assert draft.head_dim == dspark.head_dim == Spark2_5Config.head_dim
    # The draft's window defaults to the target's (here: Spark2_5Config's).
    assert "dspark_sliding_window" not in raw
    assert dspark.sliding_window == Spark2_5Config.sliding_window


def test_tools_read_a_config_without_head_dim(tmp_path, monkeypatch) -> None:
    """End to end: a checkpoint whose head_dim is the default, not written."""
    full = make_tiny_checkpoint(
        tmp_path / "hd", dspark=True, head_dim=Spark2_5Config.head_dim
    )
    src = _edited(full, tmp_path / "nohd", head_dim=None)
    small = ("--num-prompts", "1", "--prompt-len", "8", "--gen-len", "8")
    report = acc.run([str(src), *small])
    # The same model as the checkpoint that writes head_dim: the same replay.
    assert report["num_drafts"] >= 1
    assert report == acc.run([str(full), *small])
    summary = train([str(src), str(tmp_path / "out"), *SMALL])
    assert summary["dspark"]["dspark_block_size"] == 4


@pytest.mark.parametrize(
    "extra",
    [
        ("--vllm-dtype", "float32"),
        ("--vllm-dtype", "bfloat16", "--continuations", "reference"),
        ("--vllm-dtype", "float32", "--continuations", "vllm", "--sequences", "S"),
    ],
    ids=["default-continuations", "reference-continuations", "with-sequences"],
)
def test_vllm_options_without_vllm_continuations_are_refused(
    tmp_path, tiny, capsys, monkeypatch, extra
) -> None:
    """They set how the vLLM child writes the continuations, and were
    ignored without a word wherever no child runs."""
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    monkeypatch.setattr(acc, "target_and_sequences", _no_work)
    extra = tuple(str(tmp_path / "seqs.json") if a == "S" else a for a in extra)
    why = "--sequences supplies" if "--sequences" in extra else "continuations are"
    said = _trainer_refuses(capsys, tmp_path, tiny, *extra)
    assert said.startswith("--vllm-dtype set how vLLM writes"), said
    assert why in said, said
    line = _acceptance_refuses(capsys, tiny, *extra)
    assert "--vllm-dtype set how vLLM writes" in line and why in line, line


def test_the_vllm_memory_option_without_vllm_continuations_is_refused(
    tmp_path, tiny, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    said = _trainer_refuses(
        capsys, tmp_path, tiny, "--vllm-gpu-memory-utilization", "0.5"
    )
    assert said.startswith("--vllm-gpu-memory-utilization set how vLLM"), said


def test_a_confidence_weight_without_a_confidence_head_is_refused(
    tmp_path, tiny, monkeypatch, capsys
) -> None:
    """It weighs the head's loss; without a head it was ignored silently."""
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    said = _trainer_refuses(capsys, tmp_path, tiny, "--confidence-weight", "3")
    assert "--confidence-weight weighs the confidence head's loss" in said, said
    assert "--confidence-head" in said, said


@pytest.mark.parametrize(
    ("n_seq", "n_pos", "want"),
    [
        (1, 1, (1, 1)),  # was 256 copies of the one anchor
        (3, 10, (3, 10)),  # every anchor of every sequence, once
        (100, 10, (26, 10)),
        (2, 100, (4, 64)),  # 64 of 100 anchors: a sequence twice, other anchors
    ],
)
def test_a_step_takes_no_sequence_twice_when_it_takes_all_its_anchors(
    n_seq, n_pos, want
) -> None:
    args = train_dspark.build_parser().parse_args(["in", "out"])
    assert (args.batch_anchors, args.anchors_per_seq) == (256, 64)
    assert train_dspark.step_shape(args, n_seq, n_pos) == want


# -- input the trainer used to meet only after --overwrite had deleted the output --


def _earlier_checkpoint(tmp_path: Path) -> Path:
    """An earlier output that ``--overwrite`` may replace (it holds a
    config.json, as a checkpoint does)."""
    dst = tmp_path / "earlier"
    dst.mkdir()
    (dst / "config.json").write_text("{}")
    (dst / "kept.txt").write_text("an earlier run")
    return dst


def _trainer_keeps_the_earlier_checkpoint(
    tmp_path: Path, capsys, src: Path, *extra: str
) -> str:
    """The message of a trainer run with ``--overwrite`` over an earlier
    checkpoint, which must stop before deleting it."""
    dst = _earlier_checkpoint(tmp_path)
    message = _refusal(
        capsys, lambda: train([str(src), str(dst), "--overwrite", *SMALL, *extra])
    )
    assert (dst / "kept.txt").read_text() == "an earlier run"
    return message


def _broken_weights(tiny: Path, dst: Path, how: str) -> Path:
    """A copy of ``tiny`` whose weights are missing or damaged."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(tiny, dst)
    shard = dst / "model.safetensors"
    if how == "no-weights":  # an interrupted copy: config.json alone
        shard.unlink()
    elif how == "truncated":
        data = shard.read_bytes()
        shard.write_bytes(data[: len(data) // 2])
    else:
        tensors = load_file(str(shard))
        if how == "missing-tensor":
            del tensors["model.norm.weight"]
        elif how == "wrong-shape":
            tensors["model.norm.weight"] = torch.ones(32)
        elif how == "missing-draft-tensor":
            del tensors["draft_model.norm.weight"]
        save_file(tensors, str(shard), metadata={"format": "pt"})
    return dst


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("no-weights", r"has no weights \(no \*\.safetensors file"),
        (
            "truncated",
            r"model\.safetensors is not a readable safetensors file \(.*"
            r"incomplete metadata.*\); restore it",
        ),
        (
            "missing-tensor",
            r"lacks the tensor model\.norm\.weight \(\(64,\) = \(hidden_size\)\)",
        ),
        (
            "wrong-shape",
            r"model\.norm\.weight in .*model\.safetensors has shape \(32,\), but "
            r"config\.json gives \(64,\)",
        ),
    ],
)
def test_weights_the_tools_cannot_read_are_refused_up_front(
    tmp_path, tiny, how, message, monkeypatch, capsys
) -> None:
    """Every tensor the tools read is checked in the shard headers first:
    these ended in a KeyError or SafetensorError traceback, the trainer's
    after --overwrite had deleted the earlier output."""
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    monkeypatch.setattr(acc, "target_and_sequences", _no_work)
    src = _broken_weights(tiny, tmp_path / how, how)
    said = _trainer_keeps_the_earlier_checkpoint(tmp_path, capsys, src)
    assert re.search(message, said), said
    said = _acceptance_refuses(capsys, src)
    assert re.search(message, said), said


def test_acceptance_refuses_a_draft_tensor_that_is_missing(
    tmp_path, tiny, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(acc, "target_and_sequences", _no_work)
    src = _broken_weights(tiny, tmp_path / "no-norm", "missing-draft-tensor")
    said = _acceptance_refuses(capsys, src)
    assert "lacks the tensor draft_model.norm.weight" in said, said


@pytest.mark.parametrize(
    ("seed", "extra", "message"),
    [
        # The trainer seeds torch with --seed and --seed + 1.
        (2**64 - 1, (), rf"argument --seed: must be from {-(2**63)} to {2**64 - 2}"),
        (-(2**63) - 1, (), r"argument --seed: must be from"),
        (
            2**32,
            ("--continuations", "vllm"),
            r"argument --seed: with --continuations vllm, vLLM seeds NumPy with "
            r"it, which takes 0 to 4294967295; got 4294967296",
        ),
        (-1, ("--continuations", "vllm"), r"argument --seed: .* got -1"),
    ],
    ids=["too-big", "too-small", "vllm-too-big", "vllm-negative"],
)
def test_a_seed_that_cannot_seed_the_run_is_refused(
    tmp_path, tiny, seed, extra, message, monkeypatch, capsys
) -> None:
    """torch.manual_seed takes -2**63 .. 2**64-1, NumPy (the vLLM child's)
    0 .. 2**32-1; a seed beyond them ended the trainer in a traceback after
    --overwrite had deleted the earlier output."""
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    monkeypatch.setattr(acc, "target_and_sequences", _no_work)
    extra = ("--seed", str(seed), *extra)
    said = _trainer_keeps_the_earlier_checkpoint(tmp_path, capsys, tiny, *extra)
    assert re.search(message, said), said
    if seed == 2**64 - 1:  # the acceptance tool seeds torch with --seed alone
        seed = 2**64
    said = _acceptance_refuses(
        capsys, tiny, "--num-tokens", "4", "--seed", str(seed), *extra[2:]
    )
    assert re.search(message.replace(str(2**64 - 2), str(2**64 - 1)), said), said


def test_the_largest_seeds_torch_takes_are_accepted() -> None:
    parse = train_dspark.build_parser().parse_args
    assert parse(["in", "out", "--seed", str(2**64 - 2)]).seed == 2**64 - 2
    assert parse(["in", "out", "--seed", str(-(2**63))]).seed == -(2**63)
    torch.Generator().manual_seed(2**64 - 2 + 1)  # the trainer's seed + 1


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"num_hidden_layers": "4"},
            r"^\S*/config\.json: num_hidden_layers must be a positive integer, "
            r"got '4'$",
        ),
        (
            {"rope_parameters": [1]},
            r"^\S*/config\.json: rope_parameters must be a dict, got list: \[1\]$",
        ),
        (
            {"hidden_size": "64"},
            r"^\S*/config\.json: hidden_size must be a positive integer, got '64'$",
        ),
    ],
    ids=["layers", "rope", "hidden"],
)
def test_a_malformed_target_field_is_named_in_config_json(
    tmp_path, tiny, changes, message, monkeypatch, capsys
) -> None:
    """The trainer read the target's fields into the draft config before any
    check (a TypeError traceback), or blamed them on the draft's options."""
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    monkeypatch.setattr(acc, "target_and_sequences", _no_work)
    src = _edited(tiny, tmp_path / "bad", **changes)
    said = _trainer_keeps_the_earlier_checkpoint(tmp_path, capsys, src)
    assert re.search(message, said), said
    assert "--block-size" not in said, said
    said = _acceptance_refuses(capsys, src)
    assert re.search(message.lstrip("^"), said), said


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"dspark_target_layer_ids": "1,3"},
            r"dspark_target_layer_ids must be a list of integers, got '1,3'",
        ),
        (
            {"dspark_layer_types": "sliding_attention"},
            r"dspark_layer_types must be a non-empty list .* got 'sliding_attention'",
        ),
        (
            {"dspark_enable_confidence_head": "false"},
            r"dspark_enable_confidence_head must be true or false, got 'false'",
        ),
        # Falsy values took the trainer's defaults without a word.
        ({"dspark_block_size": 0}, r"dspark_block_size .*positive integer, got 0"),
        ({"dspark_markov_rank": 0}, r"dspark_markov_rank must be a positive"),
        ({"dspark_target_layer_ids": []}, r"dspark_target_layer_ids .* got \[\]"),
        ({"dspark_layer_types": []}, r"dspark_layer_types must be a non-empty"),
        ({"dspark_sliding_window": 0}, r"dspark_sliding_window must be a positive"),
    ],
    ids=[
        "layer-ids",
        "layer-types",
        "confidence",
        "block-0",
        "rank-0",
        "ids-empty",
        "types-empty",
        "window-0",
    ],
)
def test_a_malformed_draft_field_is_reported_as_given(
    tmp_path, tiny, changes, message, monkeypatch, capsys
) -> None:
    """A string was sorted into its characters (``[',', '1', '3']``), and a
    confidence head of "false" read as True."""
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    monkeypatch.setattr(acc, "target_and_sequences", _no_work)
    src = _edited(tiny, tmp_path / "bad", **changes)
    said = _trainer_keeps_the_earlier_checkpoint(tmp_path, capsys, src)
    assert said.startswith("the draft's settings cannot be served: "), said
    assert re.search(message, said), said
    said = _acceptance_refuses(capsys, src)
    assert re.search(rf"/config\.json: {message}", said), said


@pytest.mark.parametrize("tokenizer", ["broken", "absent"])
def test_no_noise_token_says_why_the_tokenizer_gave_none(
    tmp_path, tiny, tokenizer, monkeypatch, capsys
) -> None:
    """Without ``dspark_noise_token_id`` the trainer takes the tokenizer's
    mask token; where the tokenizer does not load, the refusal says why as
    well as naming ``--noise-token-id``."""
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    src = _edited(tiny, tmp_path / "no-noise", dspark_noise_token_id=None)
    if tokenizer == "broken":
        (src / "tokenizer.json").write_text('{"model": ')
    else:
        (src / "tokenizer.json").unlink()
        (src / "tokenizer_config.json").unlink()
    said = _trainer_keeps_the_earlier_checkpoint(tmp_path, capsys, src)
    assert "dspark_noise_token_id (alias mask_token_id) is missing" in said, said
    assert "(its tokenizer did not load: " in said, said
    if tokenizer == "broken":
        assert "JSONDecodeError" in said, said
    assert said.endswith("or --noise-token-id"), said
    assert "\n" not in said


@pytest.fixture(scope="module")
def default_vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny checkpoint of Spark2_5Config's default vocabulary whose
    config.json leaves vocab_size out."""
    full = make_tiny_checkpoint(
        tmp_path_factory.mktemp("v") / "full",
        dspark=True,
        vocab_size=Spark2_5Config.vocab_size,
    )
    return _edited(full, full.parent / "no-vocab", vocab_size=None)


def test_tools_read_a_config_without_vocab_size(default_vocab, tmp_path) -> None:
    """Both tools drew prompts with ``raw["vocab_size"]``: a KeyError."""
    small = ("--num-prompts", "1", "--prompt-len", "8", "--gen-len", "8")
    report = acc.run([str(default_vocab), *small])
    # The same model as the checkpoint that writes vocab_size: the same replay.
    assert report["num_drafts"] >= 1
    assert report == acc.run([str(default_vocab.parent / "full"), *small])
    summary = train([str(default_vocab), str(tmp_path / "out"), *SMALL])
    assert summary["steps"] == 2


def test_sequences_are_checked_against_the_default_vocab_size(
    tmp_path, default_vocab, monkeypatch, capsys
) -> None:
    """An id past the default vocabulary was let through unchecked when
    config.json left vocab_size out (``raw.get`` gave None)."""
    monkeypatch.setattr(train_dspark, "target_and_sequences", _no_work)
    monkeypatch.setattr(acc, "target_and_sequences", _no_work)
    big = Spark2_5Config.vocab_size
    seqs = tmp_path / "seqs.json"
    seqs.write_text(json.dumps({"prompt_len": 2, "sequences": [[1] * 9 + [big]] * 3}))
    extra = ("--sequences", str(seqs))
    message = rf"sequence 0 has token id {big}, outside the model's 0\.\.{big - 1}"
    said = _trainer_keeps_the_earlier_checkpoint(
        tmp_path, capsys, default_vocab, *extra
    )
    assert re.search(message, said), said
    said = _acceptance_refuses(capsys, default_vocab, *extra)
    assert re.search(message, said), said
