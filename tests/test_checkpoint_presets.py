# SPDX-License-Identifier: Apache-2.0
"""The named checkpoint shapes of ``tools/make_checkpoint.py``.

The ``small`` preset (~1B parameters) is checked by its shape and parameter
formula only (writing it takes 2 GB); ``mini`` is the same recipe at tiny
sizes and is written, counted, tokenized and served by real vLLM on CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_generation_parity import assert_matches_reference
from vllm_helpers import GREEDY_KWARGS, generate_tokens, greedy_params, llm_engine

from vllm_spark2_5_plugin.names import FULL, SLIDING
from vllm_spark2_5_plugin.tools.in_tree_checkpoint import write_in_tree
from vllm_spark2_5_plugin.tools.make_checkpoint import (
    PRESETS,
    build_preset_tokenizer,
    make_checkpoint,
    parameter_count,
)


def _stored(path: Path) -> dict[str, tuple[int, ...]]:
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        return {
            name: tuple(f.get_slice(name).get_shape())
            for name in f.keys()  # noqa: SIM118 - safe_open has no __iter__
        }


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("presets")
    path = make_checkpoint(root / "mini", "mini", dtype=torch.float32)
    write_in_tree(path, root / "mini-llama", "llama")
    write_in_tree(path, root / "mini-gemma3", "gemma3")
    return path


def test_small_preset_has_the_realistic_shape():
    spec = PRESETS["small"]
    config = {**spec["config"], **spec["dspark"]}
    assert config["hidden_size"] >= 2048
    assert config["num_attention_heads"] == 16
    assert config["num_key_value_heads"] in (4, 8)
    assert config["head_dim"] == 128
    assert 6144 <= config["intermediate_size"] <= 8192
    assert 12 <= config["num_hidden_layers"] <= 16
    types = config["layer_types"]
    assert len(types) == config["num_hidden_layers"]
    assert types == [FULL if i % 4 == 3 else SLIDING for i in range(len(types))]
    assert config["sliding_window"] == 4096
    assert config["max_position_embeddings"] >= 4096
    assert config["dspark_block_size"] == 7
    assert config["dspark_layer_types"] == [SLIDING]
    ids = config["dspark_target_layer_ids"]
    assert len(ids) == 3 and ids[0] <= 2 and ids[-1] >= config["num_hidden_layers"] - 3
    counts = parameter_count(config)
    assert 0.95e9 <= counts["target"] <= 1.1e9, counts
    # Hand count: 16 layers of (q,k,v,o + g_proj + MLP + 2 norms), embed, head.
    layer = 2048 * 2048 * 2 + 2 * 2048 * 512 + 2048 * 16 + 3 * 2048 * 7168 + 2 * 2048
    assert counts["target"] == 16 * layer + 2 * 32768 * 2048 + 2048


def test_mini_parameter_formula_matches_the_stored_tensors(mini: Path):
    raw = json.loads((mini / "config.json").read_text())
    stored = _stored(mini)
    total = sum(torch.Size(shape).numel() for shape in stored.values())
    counts = parameter_count(raw)
    assert total == counts["total"]
    draft = sum(
        torch.Size(s).numel() for n, s in stored.items() if n.startswith("draft_model.")
    )
    assert draft == counts["draft"] > 0
    summary = json.loads((mini / "make_checkpoint.json").read_text())
    assert summary["parameters"] == counts
    # GPT-2's residual-branch scale, 1/sqrt(2 * layers), by default.
    assert summary["branch_scale"] == pytest.approx((2 * 4) ** -0.5)
    # Same recipe as small: 3 sliding : 1 full, block 7, rnn head.
    assert raw["layer_types"] == [SLIDING, SLIDING, SLIDING, FULL]
    assert raw["dspark_block_size"] == 7 and raw["dspark_markov_head_type"] == "rnn"


def test_mini_tokenizer_covers_and_decodes_every_id(mini: Path):
    from transformers import AutoTokenizer

    raw = json.loads((mini / "config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(mini)
    vocab = raw["vocab_size"]
    assert len(tokenizer) == vocab == tokenizer.vocab_size
    tokens = tokenizer.convert_ids_to_tokens(list(range(vocab)))
    assert all(t is not None for t in tokens)
    for i in range(vocab):
        assert isinstance(tokenizer.decode([i]), str)
    text = tokenizer.decode(list(range(vocab)), skip_special_tokens=True)
    assert len(text) > vocab
    assert raw["dspark_noise_token_id"] == tokenizer.convert_tokens_to_ids("<|mask|>")


def test_tokenizer_is_deterministic_and_exactly_vocab_size(monkeypatch):
    from vllm_spark2_5_plugin.tools import make_checkpoint as mc

    a = build_preset_tokenizer(512, seed=3)
    b = build_preset_tokenizer(512, seed=3)
    assert a.backend_tokenizer.to_str() == b.backend_tokenizer.to_str()
    assert len(a) == 512
    # A corpus too small for the vocabulary is refused, not silently short.
    monkeypatch.setattr(mc, "synthetic_corpus", lambda n, seed: ["ab ab ab"])
    with pytest.raises(ValueError, match="corpus is too small"):
        mc.build_preset_tokenizer(512)


def test_weights_stream_equals_the_tiny_makers_draws():
    from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import (
        iter_random_weights,
        random_weights,
    )

    spec = PRESETS["mini"]
    config = Spark2_5Config(
        **spec["config"], **spec["dspark"], dspark_noise_token_id=13
    )
    whole = random_weights(config, 5, "mtp.")
    streamed = list(iter_random_weights(config, 5, "mtp."))
    assert [n for n, _ in streamed] == list(whole)
    assert all(torch.equal(t, whole[n]) for n, t in streamed)
    scaled = dict(iter_random_weights(config, 5, "mtp.", branch_scale=0.5))
    for name, tensor in whole.items():
        target_branch = name.startswith("model.layers.") and name.endswith(
            ("o_proj.weight", "down_proj.weight")
        )
        want = tensor * 0.5 if target_branch else tensor
        assert torch.equal(scaled[name], want), name


def test_in_tree_copies_have_the_architectures_tensors(mini: Path):
    spark = _stored(mini)
    llama = _stored(mini.with_name("mini-llama"))
    assert set(llama) == {
        n for n in spark if not n.startswith("draft_model.") and ".g_proj." not in n
    }
    assert all(llama[n] == spark[n] for n in llama)
    gemma = _stored(mini.with_name("mini-gemma3"))
    extra = set(gemma) - set(llama)
    assert {n.split(".")[-2] for n in extra} == {
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
        "q_norm",
        "k_norm",
    }
    cfg = json.loads((mini.with_name("mini-llama") / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (
        cfg["layer_types"]
        == json.loads((mini / "config.json").read_text())["layer_types"]
    )
    assert (mini.with_name("mini-llama") / "tokenizer.json").read_text() == (
        mini / "tokenizer.json"
    ).read_text()


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ({"rope_theta": 500_000.0}, {"rope_type": "default", "rope_theta": 500_000.0}),
        (
            {
                "rope_theta": 500_000.0,
                "rope_scaling": {"rope_type": "linear", "factor": 2.0},
            },
            {"rope_type": "linear", "factor": 2.0, "rope_theta": 500_000.0},
        ),
    ],
    ids=["rope_theta", "rope_scaling"],
)
def test_in_tree_copies_keep_a_legacy_rope(tmp_path: Path, given, want):
    """config.json's legacy top-level rope_theta / rope_scaling (no
    rope_parameters) apply to both layer types; the copies used to be
    written with the default thetas (1e4 / 1e6): another model."""
    from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    src = make_tiny_checkpoint(tmp_path / "spark")
    raw = json.loads((src / "config.json").read_text())
    raw.pop("rope_parameters")
    (src / "config.json").write_text(json.dumps({**raw, **given}))
    served = Spark2_5Config.from_pretrained(src).rope_parameters
    assert served == {SLIDING: want, FULL: want}
    llama = write_in_tree(src, tmp_path / "llama", "llama")
    gemma = write_in_tree(src, tmp_path / "gemma3", "gemma3")
    llama_rope = json.loads((llama / "config.json").read_text())["rope_parameters"]
    gemma_rope = json.loads((gemma / "config.json").read_text())["rope_parameters"]
    assert llama_rope == served[SLIDING]
    assert gemma_rope == served


def test_command_line_preset_through_the_tiny_makers_command(tmp_path: Path):
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import main

    main([str(tmp_path / "m"), "--preset", "mini", "--no-dspark", "--dtype", "float32"])
    raw = json.loads((tmp_path / "m" / "config.json").read_text())
    assert raw["hidden_size"] == 128 and "dspark_block_size" not in raw
    assert parameter_count(raw)["draft"] == 0


def test_the_tiny_makers_preset_names_its_choices_and_itself(tmp_path: Path, capsys):
    """An unknown preset was reported with the other command's usage, under
    this command's name, without the choices."""
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import main

    said = _refused(capsys, main, [str(tmp_path / "x"), "--preset", "huge"])
    assert "invalid choice: 'huge' (choose from 'mini', 'small')" in said
    said = _refused(capsys, main, [str(tmp_path / "x"), "--preset", "mini", "--x"])
    assert " --preset NAME: error: unrecognized arguments: --x" in said
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("preset", [[], ["--preset", "mini"]], ids=["tiny", "mini"])
def test_makers_never_replace_a_directory_unasked(tmp_path: Path, capsys, preset):
    """``spark2_5-make-tiny-checkpoint /path/to/a/real/model`` used to write
    its random weights over that model."""
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import main

    target = tmp_path / "real-model"
    target.mkdir()
    (target / "config.json").write_text('{"model_type": "llama"}')
    (target / "model.safetensors").write_bytes(b"the real weights")
    with pytest.raises(SystemExit):
        main([str(target), *preset])
    assert "is not empty; pass --overwrite" in capsys.readouterr().err
    assert (target / "model.safetensors").read_bytes() == b"the real weights"
    # A checkpoint (it holds a config.json) is replaced when asked.
    main([str(target), *preset, "--overwrite", "--dtype", "float32"])
    assert json.loads((target / "config.json").read_text())["model_type"] == "spark2_5"


@pytest.mark.slow
def test_vllm_loads_and_generates_from_the_mini_checkpoint(mini: Path):
    prompt = list(range(20, 120))
    with llm_engine(mini, **GREEDY_KWARGS | {"max_model_len": 256}) as llm:
        assert llm.llm_engine.model_config.architectures == ["Spark2_5ForCausalLM"]
        (output,) = generate_tokens(llm, [prompt], greedy_params(12))
    out = output.outputs[0]
    assert len(out.token_ids) == 12
    assert isinstance(out.text, str) and out.text
    # The mini preset's shapes (not the tiny checkpoint's) against the
    # independent reference: tokens and reported logprobs.
    steps = [{t: lp.logprob for t, lp in step.items()} for step in out.logprobs]
    assert_matches_reference(mini, [(list(out.token_ids), steps)], [prompt])


# -- bad input: one clear line, nothing of the user's replaced ---------------------


def _refused(capsys, main, argv: list[str]) -> str:
    """The message of a command that must stop with an error (not a
    traceback, not exit 0)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code not in (0, None)
    code = exc.value.code if isinstance(exc.value.code, str) else ""
    return code + capsys.readouterr().err


@pytest.mark.parametrize(
    ("given", "named"),
    [
        (["--set", "hidden_size=abc"], "hidden_size"),
        (["--set", "dspark_target_layer_ids=[9]"], "dspark_target_layer_ids"),
        (["--set", "dspark_markov_head_type=foo"], "dspark_markov_head_type"),
        (["--set", "num_hidden_layer=2"], "num_hidden_layer"),
        (["--set", "num_hidden_layers=0"], "num_hidden_layers"),
        (["--set", "num_hidden_layers=-1"], "num_hidden_layers"),
        (["--set", "vocab_size=100"], "vocab_size"),
        (["--set", "dspark_block_size=0"], "dspark_block_size"),
        (["--set", "eos_token_id=3"], "eos_token_id"),
        (["--no-dspark", "--set", "dspark_block_size=4"], "dspark_block_size"),
        (["--branch-scale", "-1"], "branch-scale"),
    ],
)
def test_bad_fields_are_refused_before_overwrite_empties_the_path(
    tmp_path: Path, capsys, given, named
):
    from vllm_spark2_5_plugin.tools.make_checkpoint import main

    out = tmp_path / "out"
    out.mkdir()
    # An earlier checkpoint, which --overwrite may replace once all is checked.
    (out / "config.json").write_text("{}")
    (out / "keep.txt").write_text("mine")
    argv = [str(out), "--preset", "mini", "--dtype", "float32", "--overwrite"]
    assert named in _refused(capsys, main, [*argv, *given])
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "keep.txt"]


def test_set_overrides_give_a_checkpoint_the_plugin_reads(tmp_path: Path):
    """A new depth brings its own layer types and draft target layers; an
    alias sets the canonical field; a null draft field gets the default."""
    from vllm_spark2_5_plugin.configs.dspark import read_dspark_settings
    from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
    from vllm_spark2_5_plugin.tools.make_checkpoint import main

    sets = ["num_hidden_layers=2", "block_size=5", "dspark_layer_types=null"]
    argv = [str(tmp_path / "c"), "--preset", "mini", "--dtype", "float32"]
    main([*argv, *(a for s in sets for a in ("--set", s))])
    raw = json.loads((tmp_path / "c" / "config.json").read_text())
    settings = read_dspark_settings(Spark2_5Config.from_dict(raw))
    assert raw["layer_types"] == [SLIDING, SLIDING]
    assert settings.block_size == 5 and max(settings.target_layer_ids) <= 1
    assert settings.layer_types == (SLIDING,)
    assert parameter_count(raw)["draft"] > 0


def test_in_tree_only_needs_an_in_tree_architecture(tmp_path: Path, capsys):
    from vllm_spark2_5_plugin.tools.make_checkpoint import main

    assert "--in-tree" in _refused(capsys, main, [str(tmp_path), "--in-tree-only"])


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (None, "no config.json"),
        ("{bad", "not valid JSON"),
        ('{"model_type": "llama", "hidden_size": 64}', "not a Spark2_5 checkpoint"),
        ("copy", "not a Spark2_5 checkpoint"),  # complete, but not Spark2_5
    ],
)
def test_in_tree_refuses_what_is_not_a_spark2_5_checkpoint(
    tmp_path: Path, capsys, mini: Path, config, named
):
    import shutil

    from vllm_spark2_5_plugin.tools.make_checkpoint import main

    src = tmp_path / "src"
    if config == "copy":
        shutil.copytree(mini, src)
        raw = json.loads((src / "config.json").read_text())
        (src / "config.json").write_text(json.dumps({**raw, "model_type": "llama"}))
    elif config is not None:
        src.mkdir()
        (src / "config.json").write_text(config)
    argv = [str(src), "--in-tree-only", "--in-tree", "llama"]
    assert named in _refused(capsys, main, argv)
    assert not (tmp_path / "src-llama").exists()


def test_in_tree_output_is_checked_before_anything_is_written(tmp_path: Path, capsys):
    from vllm_spark2_5_plugin.tools.make_checkpoint import main

    (tmp_path / "m-llama").mkdir()
    (tmp_path / "m-llama" / "keep.txt").write_text("mine")
    argv = [str(tmp_path / "m"), "--preset", "mini", "--in-tree", "llama"]
    message = _refused(capsys, main, argv)
    assert "m-llama is not empty; pass --overwrite" in message
    assert not (tmp_path / "m").exists()
    assert (tmp_path / "m-llama" / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("under", [False, True], ids=["file", "below-a-file"])
def test_tiny_maker_refuses_a_path_that_is_or_is_below_a_file(
    tmp_path: Path, capsys, under
):
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import main

    afile = tmp_path / "afile"
    afile.write_text("mine")
    path = afile / "sub" if under else afile
    assert "is a file" in _refused(capsys, main, [str(path), "--overwrite"])
    assert afile.read_text() == "mine"


def test_tiny_makers_dspark_flag_with_a_preset_says_why(tmp_path: Path, capsys):
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import main

    argv = [str(tmp_path / "m"), "--preset", "mini", "--dspark"]
    assert "--dspark does not combine with --preset" in _refused(capsys, main, argv)
    assert not (tmp_path / "m").exists()


def test_a_dspark_prefix_means_a_draft_under_that_prefix(tmp_path: Path, capsys):
    """--dspark-prefix alone used to write a checkpoint without a draft."""
    from safetensors import safe_open

    from vllm_spark2_5_plugin.tools.tiny_checkpoint import main

    main([str(tmp_path / "t"), "--dspark-prefix", "mtp."])
    config = json.loads((tmp_path / "t" / "config.json").read_text())
    assert config["dspark_block_size"] > 0
    with safe_open(str(tmp_path / "t" / "model.safetensors"), "pt") as f:
        drafts = [n for n in f.keys() if n.startswith(("mtp.", "draft_model."))]  # noqa: SIM118
    assert drafts and all(n.startswith("mtp.") for n in drafts)
    # A preset's draft that --no-dspark leaves out has nowhere to go.
    argv = [str(tmp_path / "m"), "--preset", "mini", "--no-dspark"]
    argv += ["--dspark-prefix", "mtp."]
    assert "--dspark-prefix places the draft that --no-dspark leaves out" in (
        _refused(capsys, main, argv)
    )
    assert not (tmp_path / "m").exists()


def test_the_tiny_maker_says_which_dtype_to_serve_float32_weights_with(
    tmp_path: Path, capsys
):
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import main

    main([str(tmp_path / "f32")])
    assert "serve it with --dtype float32" in capsys.readouterr().out
    main([str(tmp_path / "bf16"), "--dtype", "bfloat16"])
    out = capsys.readouterr().out
    assert "wrote a tiny Spark2_5 checkpoint" in out and "--dtype" not in out


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1, 10**23])
@pytest.mark.parametrize("preset", [[], ["--preset", "mini"]], ids=["tiny", "mini"])
def test_a_seed_torch_cannot_take_is_refused_before_anything_is_written(
    tmp_path: Path, capsys, preset, seed
):
    """It used to be a traceback (or an error not naming --seed) after
    config.json was written."""
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import main, seed_value

    out = tmp_path / "out"
    message = _refused(capsys, main, [str(out), *preset, "--seed", str(seed)])
    assert f"error: argument --seed: must be from {-(2**63)} to {2**64 - 1}" in message
    assert not out.exists()
    # The ends of the range are seeds.
    assert seed_value()(str(2**64 - 1)) == 2**64 - 1
    assert seed_value()(str(-(2**63))) == -(2**63)
    # The library refuses it too, before the path is touched.
    with pytest.raises(ValueError, match="seed must be from"):
        make_checkpoint(out, "mini", seed=seed)
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    with pytest.raises(ValueError, match="seed must be from"):
        make_tiny_checkpoint(out, seed=seed)
    assert not out.exists()


def _earlier_checkpoint(out: Path) -> list[str]:
    """An earlier checkpoint at ``out``, which --overwrite may replace once
    every input is checked; the names of its files."""
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / "keep.txt").write_text("mine")
    return ["config.json", "keep.txt"]


def test_weights_larger_than_memory_are_refused_up_front(tmp_path: Path, capsys):
    """They used to be drawn after config.json was written (and the earlier
    checkpoint emptied), and fail with an allocator traceback."""
    from vllm_spark2_5_plugin.tools.make_checkpoint import main

    out = tmp_path / "out"
    before = _earlier_checkpoint(out)
    argv = [str(out), "--preset", "mini", "--dtype", "float32", "--overwrite"]
    message = _refused(capsys, main, [*argv, "--set", "intermediate_size=100000000000"])
    assert "error: the weights would take" in message
    assert "more than this machine's memory" in message
    assert sorted(p.name for p in out.iterdir()) == before


def test_weights_that_cannot_be_allocated_give_one_line(
    tmp_path: Path, capsys, monkeypatch
):
    """Under the memory bound but still too large (another process, a
    ulimit): the allocator's error in one line, before the path is touched."""
    from vllm_spark2_5_plugin.tools import make_checkpoint as mc

    def out_of_memory(*args, **kwargs):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't "
            "allocate memory: you tried to allocate 1024000000 bytes.\nmore"
        )
        yield

    monkeypatch.setattr(mc, "iter_random_weights", out_of_memory)
    out = tmp_path / "out"
    before = _earlier_checkpoint(out)
    argv = [str(out), "--preset", "mini", "--dtype", "float32", "--overwrite"]
    message = _refused(capsys, mc.main, argv)
    assert "error: the weights could not be made: [enforce fail" in message
    assert "more" not in message.splitlines()[-1]
    assert sorted(p.name for p in out.iterdir()) == before


@pytest.mark.parametrize(
    ("key", "option"),
    [
        ("dtype", "--dtype"),
        ("seed", "--seed"),
        ("preset", "--preset"),
        ("overwrite", "--overwrite"),
        ("dspark", "--no-dspark"),
        ("dspark_prefix", "--dspark-prefix"),
        ("branch_scale", "--branch-scale"),
        ("path", "the PATH argument"),
    ],
)
def test_set_refuses_the_names_of_the_makers_own_options(
    tmp_path: Path, capsys, key, option
):
    """``--set dtype=...`` used to be a TypeError traceback (``got multiple
    values for keyword argument``)."""
    import inspect

    from vllm_spark2_5_plugin.tools.make_checkpoint import KEYWORD_OPTIONS, main

    out = tmp_path / "out"
    before = _earlier_checkpoint(out)
    argv = [str(out), "--preset", "mini", "--dtype", "float32", "--overwrite"]
    message = _refused(capsys, main, [*argv, "--set", f"{key}=1"])
    assert (
        f"error: argument --set: unknown config field {key!r} (use {option})" in message
    )
    assert sorted(p.name for p in out.iterdir()) == before
    # Every keyword argument of the function has its option named.
    keywords = set(inspect.signature(make_checkpoint).parameters) - {"overrides"}
    assert keywords == set(KEYWORD_OPTIONS)


def test_set_without_equals_is_an_argparse_error(tmp_path: Path, capsys):
    from vllm_spark2_5_plugin.tools.make_checkpoint import main

    argv = [str(tmp_path / "out"), "--preset", "mini", "--set", "foo"]
    message = _refused(capsys, main, argv)
    assert "error: argument --set: expected KEY=JSON, got 'foo'" in message
    assert not (tmp_path / "out").exists()


def test_in_tree_refuses_a_truncated_weights_file(tmp_path: Path, capsys, mini: Path):
    """It used to be a SafetensorError traceback."""
    import shutil

    from vllm_spark2_5_plugin.tools.make_checkpoint import main

    src = tmp_path / "src"
    shutil.copytree(mini, src)
    weights = src / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    message = _refused(capsys, main, [str(src), "--in-tree-only", "--in-tree", "llama"])
    assert f"{weights} is not a readable safetensors file (" in message
    assert "; restore it" in message and "Traceback" not in message
    assert not (tmp_path / "src-llama").exists()


@pytest.mark.parametrize(
    "given",
    [
        ["--dtype", "float16"],
        ["--dtype", "bfloat16"],  # the default, given
        ["--preset", "small"],
        ["--seed", "7"],
        ["--seed", "0"],
    ],
)
def test_in_tree_only_refuses_the_options_it_ignores(
    tmp_path: Path, capsys, mini: Path, given
):
    """The copies keep the source's weights: ``--dtype float16`` used to
    give float32 copies, exit 0 and no word."""
    from vllm_spark2_5_plugin.tools.make_checkpoint import main

    argv = [str(mini), "--in-tree-only", "--in-tree", "llama", *given]
    message = _refused(capsys, main, [*argv, "--overwrite"])
    assert f"error: {given[0]} does not apply with --in-tree-only" in message


@pytest.mark.parametrize(
    ("cwd", "path", "only"),
    [
        (None, "/", []),
        (None, "/", ["--in-tree-only"]),
        ("/", ".", ["--in-tree-only"]),
        ("/", ".", []),
    ],
)
def test_in_tree_refuses_the_root_directory(
    tmp_path: Path, capsys, monkeypatch, cwd, path, only
):
    """The copy goes beside PATH, and the root has nothing beside it: it
    used to be a ``ValueError: PosixPath('/') has an empty name``
    traceback."""
    from vllm_spark2_5_plugin.tools.make_checkpoint import main

    if cwd is not None:
        monkeypatch.chdir(cwd)
    message = _refused(capsys, main, [path, *only, "--in-tree", "llama"])
    assert f"error: {path} is the root directory" in message
    assert "give a named directory as PATH" in message
