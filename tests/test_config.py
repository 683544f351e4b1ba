# SPDX-License-Identifier: Apache-2.0
"""Spark2_5Config: SPEC §3 defaults, RoPE spellings, and field validation."""

import json

import pytest

from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config, largest_token_id
from vllm_spark2_5_plugin.tools.tiny_checkpoint import TINY_CONFIG


def test_defaults_follow_spec():
    c = Spark2_5Config()
    assert c.model_type == "spark2_5"
    assert (c.vocab_size, c.hidden_size, c.intermediate_size) == (151552, 4096, 12288)
    assert (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads) == (
        40,
        32,
        8,
    )
    assert (c.head_dim, c.hidden_act, c.max_position_embeddings) == (
        128,
        "gelu_pytorch_tanh",
        131072,
    )
    assert c.rms_norm_eps == 1e-6 and c.sliding_window == 4096
    assert c.attention_bias is False and c.attention_output_gate is True
    assert c.tie_word_embeddings is False and c.initializer_range == 0.02
    full = [i for i, t in enumerate(c.layer_types) if t == "full_attention"]
    assert full == list(range(3, 40, 4))
    assert c.rope_parameters == {
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
    }


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param(
            {"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}},
            {"sliding_attention": 5e5, "full_attention": 5e5},
            id="flat-dict-applies-to-both",
        ),
        pytest.param(
            {"rope_theta": 2e5},
            {"sliding_attention": 2e5, "full_attention": 2e5},
            id="legacy-rope_theta",
        ),
        pytest.param(
            {"rope_parameters": {"full_attention": {"rope_theta": 3e6}}},
            {"sliding_attention": 1e4, "full_attention": 3e6},
            id="per-type-partial",
        ),
        pytest.param(
            {
                "rope_parameters": {"sliding_attention": {"rope_theta": 7.0}},
                "rope_theta": 9.0,
            },
            {"sliding_attention": 7.0, "full_attention": 9.0},
            id="explicit-wins-over-legacy",
        ),
    ],
)
def test_rope_spellings_resolve_per_layer_type(fields, expected):
    c = Spark2_5Config(num_hidden_layers=4, **fields)
    assert {t: p["rope_theta"] for t, p in c.rope_parameters.items()} == expected
    assert all(p["rope_type"] == "default" for p in c.rope_parameters.values())


def test_legacy_rope_scaling_applies_to_both_types():
    c = Spark2_5Config(
        num_hidden_layers=4, rope_scaling={"type": "linear", "factor": 4.0}
    )
    for params in c.rope_parameters.values():
        assert params["rope_type"] == "linear" and params["factor"] == 4.0


def test_round_trip_through_config_json(tmp_path):
    c = Spark2_5Config(
        num_hidden_layers=3,
        layer_types=["full_attention", "sliding_attention", "full_attention"],
        rope_theta=123.0,
        dspark_block_size=8,
    )
    c.save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["model_type"] == "spark2_5" and "rope_theta" not in raw
    again = Spark2_5Config.from_pretrained(tmp_path)
    assert again.layer_types == c.layer_types
    assert again.rope_parameters == c.rope_parameters
    assert again.dspark_block_size == 8


@pytest.mark.parametrize(
    ("fields", "field_named"),
    [
        ({"layer_types": ["sliding_attention"] * 3}, "layer_types"),
        (
            {"layer_types": ["sliding_attention"] * 39 + ["linear_attention"]},
            "layer_types",
        ),
        ({"layer_types": "full_attention"}, "layer_types"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"sliding_window": -4}, "sliding_window"),
        ({"num_key_value_heads": 5}, "num_key_value_heads"),
        ({"num_attention_heads": 0}, "num_attention_heads"),
        ({"head_dim": 33}, "head_dim"),
        ({"hidden_size": 1.5}, "hidden_size"),
        ({"vocab_size": -1}, "vocab_size"),
        ({"intermediate_size": None}, "intermediate_size"),
        ({"hidden_act": "silu"}, "hidden_act"),
        ({"rms_norm_eps": 0}, "rms_norm_eps"),
        # JSON's Infinity (or 1e999) reads as inf: the norms would output zeros.
        ({"rms_norm_eps": float("inf")}, "rms_norm_eps must be a finite positive"),
        ({"rope_parameters": {"full_attention": {"rope_theta": -1.0}}}, "rope_theta"),
        # An infinite base stops the rotation; NaN is no number above 0.
        (
            {"rope_parameters": {"full_attention": {"rope_theta": float("inf")}}},
            r"\['rope_theta'\] must be a finite positive number, got inf",
        ),
        ({"rope_parameters": {"rope_theta": float("nan")}}, "got nan"),
        ({"rope_parameters": "default"}, "rope_parameters"),
        (
            {"rope_parameters": {"full_attention": {}, "rope_theta": 1.0}},
            "rope_parameters",
        ),
        # Raw TypeErrors (dict() of a string / an int) before these checks.
        (
            {"rope_parameters": {"sliding_attention": "default"}},
            r"rope_parameters\['sliding_attention'\] must be a dict",
        ),
        (
            {"rope_parameters": {"full_attention": 5}},
            r"rope_parameters\['full_attention'\] must be a dict",
        ),
        # vLLM's get_rope refused it only inside the worker.
        (
            {"rope_parameters": {"rope_type": "foo"}},
            r"rope_parameters\['sliding_attention'\]\['rope_type'\] must be one of",
        ),
        # Types vLLM builds whose embedding does not take this model's flat
        # q/k (deepseek_*: misshapen output; mllama4: a vision embedding).
        (
            {"rope_parameters": {"rope_type": "deepseek_yarn", "factor": 2.0}},
            r"\['rope_type'\] must be one of .* got 'deepseek_yarn'",
        ),
        ({"rope_parameters": {"rope_type": "mllama4"}}, "got 'mllama4'"),
        # Entries vLLM's embedding reads by key (a bare KeyError in the worker).
        (
            {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4}},
            r"with rope_type 'linear' needs 'factor'",
        ),
        (
            {"rope_parameters": {"rope_type": "llama3", "factor": 8.0}},
            r"with rope_type 'llama3' needs 'low_freq_factor'",
        ),
        ({"rope_parameters": {"rope_type": "dynamic"}}, r"needs 'factor' or 'alpha'"),
        # The rotation ignores it; vLLM multiplied the context length by it
        # (a flat entry, or the full-attention layers' alone: 4x the length).
        (
            {"rope_parameters": {"rope_type": "default", "factor": 4.0}},
            r"\['factor'\] = 4.0 with rope_type 'default', which does not scale",
        ),
        (
            {
                "rope_parameters": {
                    "full_attention": {"rope_type": "proportional", "factor": 2.0}
                }
            },
            r"\['full_attention'\]\['factor'\] = 2.0 with rope_type 'proportional'",
        ),
        (
            {"rope_parameters": {"rope_type": "yarn", "factor": -2.0}},
            r"\['factor'\] must be a finite positive number, got -2.0",
        ),
        (
            {
                "rope_parameters": {
                    "rope_type": "longrope",
                    "short_factor": [1.0] * 3,
                    "long_factor": [1.0] * 64,
                    "original_max_position_embeddings": 4096,
                }
            },
            r"\['short_factor'\] must be a list of 64 finite positive numbers",
        ),
        (
            {
                "rope_parameters": {
                    "rope_type": "longrope",
                    "short_factor": [1.0] * 64,
                    "long_factor": [1.0] * 63 + [float("inf")],
                    "original_max_position_embeddings": 4096,
                }
            },
            r"\['long_factor'\] must be a list of 64 finite positive numbers",
        ),
        (
            {
                "rope_parameters": {
                    "rope_type": "default",
                    "mrope_section": [16, 24, 24],
                }
            },
            r"\['mrope_section'\] asks for multimodal",
        ),
        # vLLM would rotate part of each head; the reference rotates whole heads.
        (
            {
                "rope_parameters": {
                    "sliding_attention": {"partial_rotary_factor": 0.5},
                    "full_attention": {},
                }
            },
            r"\['sliding_attention'\]\['partial_rotary_factor'\] = 0.5",
        ),
        # vLLM's get_rope takes rope_dim as the rotated width.
        (
            {
                "rope_parameters": {
                    "sliding_attention": {},
                    "full_attention": {"rope_type": "default", "rope_dim": 64},
                }
            },
            r"\['full_attention'\]\['rope_dim'\] = 64 would rotate only .* 128",
        ),
        ({"attention_output_gate": "yes"}, "attention_output_gate"),
        ({"tie_word_embeddings": 1}, "tie_word_embeddings"),
        # Past the vocabulary (or not an id): no request would stop on it.
        ({"vocab_size": 512, "eos_token_id": 512}, r"eos_token_id must .* got 512"),
        ({"eos_token_id": -1}, r"eos_token_id must .* in 0\.\.151551, got -1"),
        ({"eos_token_id": "</s>"}, "eos_token_id must"),
        ({"eos_token_id": True}, "eos_token_id must"),
        ({"vocab_size": 512, "eos_token_id": [2, 600]}, r"eos_token_id\[1\] .* 600"),
    ],
)
def test_bad_field_raises_value_error_naming_it(fields, field_named):
    with pytest.raises(ValueError, match=field_named):
        Spark2_5Config(**fields)


def test_bad_config_json_fails_with_the_field_name(tmp_path):
    raw = Spark2_5Config(num_hidden_layers=2).to_dict()
    raw["layer_types"] = ["sliding_attention", "global"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"layer_types\[1\]"):
        Spark2_5Config.from_pretrained(tmp_path)


FULL_ONLY = ["full_attention"] * 4


def test_a_null_window_is_accepted_when_no_layer_slides(tmp_path):
    """Hugging Face writes ``sliding_window: null`` for a window nothing uses;
    it was refused ("must be a positive integer, got None")."""
    config = Spark2_5Config(
        num_hidden_layers=4, layer_types=FULL_ONLY, sliding_window=None
    )
    assert config.sliding_window is None
    raw = {**config.to_dict(), "sliding_window": None}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert Spark2_5Config.from_pretrained(tmp_path).sliding_window is None


@pytest.mark.parametrize(
    "layer_types",
    [None, ["full_attention", "sliding_attention", "full_attention"]],
    ids=["default-types", "one-sliding"],
)
def test_a_null_window_is_refused_when_a_layer_slides(layer_types):
    n = 3
    with pytest.raises(ValueError) as info:
        Spark2_5Config(
            num_hidden_layers=n, layer_types=layer_types, sliding_window=None
        )
    said = str(info.value)
    sliding = 3 if layer_types is None else 1  # by default every 4th layer is full
    assert said.startswith(
        f"sliding_window is null, but layer_types makes {sliding} of the {n} "
        "layers sliding_attention layers"
    ), said
    assert "a positive integer" in said and "make every layer full_attention" in said


# ---------------------------------------------------------------------------
# Through vLLM: --hf-overrides are applied after config.json was checked
# ---------------------------------------------------------------------------


def _engine_config(checkpoint, **fields):
    from vllm.engine.arg_utils import EngineArgs

    import vllm_spark2_5_plugin

    vllm_spark2_5_plugin.register()
    return EngineArgs(model=str(checkpoint), **fields).create_engine_config()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # The tiny checkpoint has 4 layers: its 4 layer types no longer fit.
        ({"num_hidden_layers": 2}, r"layer_types has 4 entries but num_hidden"),
        ({"num_key_value_heads": 3}, r"divisible by num_key_value_heads \(3\)"),
        ({"sliding_window": -5}, r"sliding_window must be a positive .* -5"),
        # The tiny checkpoint's layers 0-2 slide.
        ({"sliding_window": None}, r"sliding_window is null, but layer_types .* 3 "),
    ],
)
def test_bad_hf_overrides_are_refused_at_start_up(tiny_checkpoint, overrides, message):
    """Without the check, these built the engine and failed inside the model
    (an IndexError, an assertion) or, for a negative window, not at all."""
    with pytest.raises(ValueError, match=message) as info:
        _engine_config(tiny_checkpoint, max_model_len=256, hf_overrides=overrides)
    assert "--hf-overrides" in str(info.value)


def test_a_tokenizer_past_the_vocabulary_is_refused_at_start_up(tiny_checkpoint):
    """The tiny tokenizer's ids go up to 511: with vocab_size 256, a prompt
    holding token 300 passed vLLM's check and stopped the engine."""
    with pytest.raises(ValueError, match="token ids up to 511, but vocab_size is 256"):
        _engine_config(
            tiny_checkpoint, max_model_len=256, hf_overrides={"vocab_size": 256}
        )
    # Without the tokenizer vLLM checks nothing against it, nor does the plugin.
    config = _engine_config(
        tiny_checkpoint,
        max_model_len=256,
        hf_overrides={"vocab_size": 256},
        skip_tokenizer_init=True,
    )
    assert config.model_config.hf_config.vocab_size == 256


@pytest.mark.parametrize(
    ("tokenizer", "largest"),
    [
        ({"model": {"vocab": {"a": 0, "b": 7}}, "added_tokens": [{"id": 9}]}, 9),
        ({"model": {"vocab": [["a", 0.0], ["b", -1.0]]}}, 1),
        ({"model": {}}, None),
        ([1, 2], None),
        ("not json", None),
    ],
)
def test_largest_token_id(tokenizer, largest, tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text(tokenizer if isinstance(tokenizer, str) else json.dumps(tokenizer))
    assert largest_token_id(path) == largest


def test_spark2_5_architecture_under_another_model_type_is_refused(
    tiny_checkpoint, tmp_path
):
    """Read as a LlamaConfig, none of the Spark2_5 fields was checked: with a
    negative window the model loaded and generated token 0 every step."""
    import shutil

    path = tmp_path / "llama-typed"
    shutil.copytree(tiny_checkpoint, path)
    raw = json.loads((path / "config.json").read_text())
    raw.update(model_type="llama", sliding_window=-5)
    (path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="model_type 'llama'") as info:
        _engine_config(path, max_model_len=256)
    assert '"model_type": "spark2_5"' in str(info.value)


@pytest.mark.parametrize(
    ("fields", "window", "positions"),
    [
        # vLLM turns the window off (sliding_window None) and caps the context.
        ({"max_model_len": 16, "disable_sliding_window": True}, None, None),
        # vLLM reads a window of 0 as "no sliding window".
        ({"max_model_len": 256, "hf_overrides": {"sliding_window": 0}}, None, None),
        (
            {"max_model_len": 256, "hf_overrides": {"max_position_embeddings": 4096}},
            TINY_CONFIG["sliding_window"],
            4096,
        ),
    ],
)
def test_valid_overrides_and_a_disabled_window_still_start(
    tiny_checkpoint, fields, window, positions
):
    model_config = _engine_config(tiny_checkpoint, **fields).model_config
    assert model_config.hf_config.model_type == "spark2_5"
    assert model_config.get_sliding_window() == window
    assert model_config.max_model_len == fields["max_model_len"]
    if positions is not None:
        assert model_config.hf_config.max_position_embeddings == positions


@pytest.fixture(scope="module")
def three_kv_heads(tmp_path_factory):
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(
        tmp_path_factory.mktemp("kv3"), num_attention_heads=6, num_key_value_heads=3
    )


@pytest.mark.ranks(2)
def test_kv_heads_that_tensor_parallelism_cannot_split_are_refused_at_start_up(
    three_kv_heads,
):
    """vLLM checks only the query heads against the tensor parallel size; 3 KV
    heads on 2 ranks stopped the worker while it built the model."""
    with pytest.raises(
        ValueError,
        match=r"num_key_value_heads \(3\) and the tensor parallel size \(2\) must "
        "divide one another",
    ):
        _engine_config(three_kv_heads, max_model_len=256, tensor_parallel_size=2)


@pytest.mark.parametrize(
    "tp",
    [
        pytest.param(1, id="tp1-every-head-on-one-rank"),
        pytest.param(3, id="tp3-one-kv-head-per-rank", marks=pytest.mark.ranks(3)),
    ],
)
def test_kv_heads_that_tensor_parallelism_splits_are_accepted(three_kv_heads, tp):
    config = _engine_config(three_kv_heads, max_model_len=256, tensor_parallel_size=tp)
    assert config.parallel_config.tensor_parallel_size == tp


def _full_only_checkpoint(path):
    """A tiny checkpoint whose layers are all full attention, with the
    ``sliding_window: null`` Hugging Face writes for an unused window."""
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    path = make_tiny_checkpoint(path, seed=7, layer_types=FULL_ONLY)
    raw = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**raw, "sliding_window": None}))
    return path


def test_a_null_window_without_sliding_layers_starts(tmp_path):
    path = _full_only_checkpoint(tmp_path / "full")
    model_config = _engine_config(path, max_model_len=256).model_config
    assert model_config.get_sliding_window() is None
    assert model_config.max_model_len == 256


@pytest.mark.slow
def test_a_null_window_without_sliding_layers_generates_as_the_reference(tmp_path):
    """The real engine serves it, and greedy tokens and logprobs equal the
    independent reference's."""
    from test_generation_parity import (
        MAX_TOKENS,
        assert_matches_reference,
        prompts,
    )
    from vllm_helpers import greedy_generate

    path = _full_only_checkpoint(tmp_path / "full")
    prompt_ids = prompts()
    results = greedy_generate(path, prompt_ids, MAX_TOKENS)
    assert all(len(tokens) == MAX_TOKENS for tokens, _ in results)
    assert_matches_reference(path, results, prompt_ids)


# ---------------------------------------------------------------------------
# Top-level keys that Transformers and vLLM would read apart
# ---------------------------------------------------------------------------


def _config_json_with(path, tiny_checkpoint, **fields):
    """A copy of the tiny checkpoint whose config.json has ``fields`` too
    (a None value deletes the key)."""
    import shutil

    shutil.copytree(tiny_checkpoint, path)
    raw = json.loads((path / "config.json").read_text())
    for key, value in fields.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    (path / "config.json").write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param(
            {"rotary_emb_base": 50000, "rope_parameters": None},
            r"rotary_emb_base=50000: .* Write it as rope_theta .* rope_parameters",
            id="rotary_emb_base",
        ),
        pytest.param(
            {"rotary_emb_base": 50000},
            r"rotary_emb_base=50000: .* Write it as rope_theta",
            id="rotary_emb_base-beside-per-type-thetas",
        ),
        pytest.param(
            {"partial_rotary_factor": 0.5},
            r"partial_rotary_factor=0\.5 would .* remove partial_rotary_factor",
            id="partial_rotary_factor",
        ),
        pytest.param(
            {"rotary_pct": 0.25},
            r"rotary_pct=0\.25 would .* remove rotary_pct",
            id="rotary_pct",
        ),
        pytest.param(
            {"rotary_emb_fraction": 0.5},
            r"rotary_emb_fraction=0\.5 would .* remove rotary_emb_fraction",
            id="rotary_emb_fraction",
        ),
    ],
)
def test_top_level_rope_aliases_are_refused_when_read_naming_the_key(
    tiny_checkpoint, tmp_path, fields, message
):
    """vLLM's patch_rope_parameters reads these top-level keys, Transformers
    (and so the reference and the DSpark tools) does not. Before, vLLM served
    rotary_emb_base as the theta of both layer types without a word (or was
    refused as a 'rope_theta' the user never gave), and a partial rotation
    passed the load and was refused under a per-type rope_parameters entry
    the file does not contain."""
    path = _config_json_with(tmp_path / "ckpt", tiny_checkpoint, **fields)
    with pytest.raises(ValueError, match=message) as info:
        Spark2_5Config.from_pretrained(path)
    assert "rope_parameters[" not in str(info.value)  # not where vLLM copies it
    assert "--hf-overrides" not in str(info.value)
    # vLLM reads config.json with the same class, so it stops there too,
    # under the same name.
    with pytest.raises(ValueError, match=message) as info:
        _engine_config(path, max_model_len=256)
    assert "rope_parameters[" not in str(info.value)


def test_a_whole_head_rotation_under_a_top_level_alias_is_accepted(tiny_checkpoint):
    config = Spark2_5Config(**TINY_CONFIG, partial_rotary_factor=1.0, rotary_pct=1)
    assert config.rope_parameters == TINY_CONFIG["rope_parameters"]


@pytest.mark.parametrize("rope_dim", [0, None, 32])
def test_a_rope_dim_of_the_whole_head_is_accepted(rope_dim):
    """vLLM's get_rope rotates the whole head for an empty rope_dim (0 or
    null) and for head_dim itself: Spark2_5's rotation either way."""
    import copy

    fields = copy.deepcopy(TINY_CONFIG)
    assert fields["head_dim"] == 32
    fields["rope_parameters"]["full_attention"]["rope_dim"] = rope_dim
    config = Spark2_5Config(**fields)
    assert config.rope_parameters["full_attention"]["rope_dim"] == rope_dim


YARN_4 = {"type": "yarn", "factor": 4.0}


def test_a_top_level_original_max_position_embeddings_is_the_rope_entries_one():
    """Transformers' legacy reading (the Phi-3 case) puts a top-level
    original_max_position_embeddings into the RoPE dict; the plugin filled in
    max_position_embeddings (2048) instead, while vLLM's default context of
    longrope followed the top-level value."""
    from transformers import LlamaConfig

    legacy = {
        "rope_scaling": dict(YARN_4),  # LlamaConfig writes into it
        "original_max_position_embeddings": 512,
        "max_position_embeddings": 2048,
    }
    config = Spark2_5Config(num_hidden_layers=4, **legacy)
    for entry in config.rope_parameters.values():
        assert entry["original_max_position_embeddings"] == 512
    # Transformers' standardize_rope_params (which vLLM runs on every config
    # it loads) gives the top-level value priority in a flat RoPE dict.
    llama = LlamaConfig(**legacy)
    llama.standardize_rope_params()
    assert llama.rope_parameters["original_max_position_embeddings"] == 512
    # An entry's own value (here equal) is kept; without a top-level value,
    # max_position_embeddings fills in as before.
    per_type = {
        "sliding_attention": {**YARN_4, "original_max_position_embeddings": 512}
    }
    config = Spark2_5Config(
        num_hidden_layers=4,
        rope_parameters=per_type,
        original_max_position_embeddings=512,
    )
    assert (
        config.rope_parameters["sliding_attention"]["original_max_position_embeddings"]
        == 512
    )
    assert (
        "original_max_position_embeddings"
        not in config.rope_parameters["full_attention"]
    )  # a default type takes none
    plain = Spark2_5Config(num_hidden_layers=4, rope_scaling=YARN_4)
    assert plain.rope_parameters["full_attention"][
        "original_max_position_embeddings"
    ] == (plain.max_position_embeddings)


def test_a_top_level_original_max_position_embeddings_disagreeing_with_an_entry():
    per_type = {"full_attention": {**YARN_4, "original_max_position_embeddings": 1024}}
    with pytest.raises(
        ValueError,
        match=r"original_max_position_embeddings=512 \(top level\) and "
        r"rope_parameters\['full_attention'\]\['original_max_position_embeddings'\]"
        r"=1024 disagree",
    ):
        Spark2_5Config(
            num_hidden_layers=4,
            rope_parameters=per_type,
            original_max_position_embeddings=512,
        )


def test_longrope_with_a_top_level_original_gives_vllm_and_the_rope_one_length(
    tiny_checkpoint, tmp_path
):
    """vLLM's default max_model_len for longrope is the top-level
    original_max_position_embeddings; the rotary embedding now takes the same
    (it took max_position_embeddings, so the long factors were never used)."""
    pairs = TINY_CONFIG["head_dim"] // 2
    longrope = {
        "rope_type": "longrope",
        "short_factor": [1.0] * pairs,
        "long_factor": [2.0] * pairs,
    }
    path = _config_json_with(
        tmp_path / "longrope",
        tiny_checkpoint,
        rope_parameters=longrope,
        original_max_position_embeddings=512,
    )
    model_config = _engine_config(path).model_config
    assert model_config.max_model_len == 512
    for entry in model_config.hf_config.rope_parameters.values():
        assert entry["original_max_position_embeddings"] == 512


# ---------------------------------------------------------------------------
# layer_types derived from num_hidden_layers, through --hf-overrides
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config_json", "overrides", "same_config_json"),
    [
        pytest.param(
            {"layer_types": None},
            {"num_hidden_layers": 8},
            {"layer_types": None, "num_hidden_layers": 8},
            id="num_hidden_layers-without-layer_types",
        ),
        pytest.param(
            {},
            {"layer_types": None},
            {"layer_types": None},
            id="layer_types-null",
        ),
        pytest.param(
            {},
            {"layer_types": None, "num_hidden_layers": 6},
            {"layer_types": None, "num_hidden_layers": 6},
            id="layer_types-null-and-num_hidden_layers",
        ),
        pytest.param(
            {},
            {"num_hidden_layers": 6, "layer_types": None},
            {"layer_types": None, "num_hidden_layers": 6},
            id="num_hidden_layers-and-layer_types-null",
        ),
    ],
)
def test_derived_layer_types_follow_an_overridden_layer_count(
    tiny_checkpoint, tmp_path, config_json, overrides, same_config_json
):
    """Before, these were refused over a layer_types the user never gave
    ("layer_types has 4 entries but num_hidden_layers is 8", "layer_types
    must be a non-empty list ... got None")."""
    base = _config_json_with(tmp_path / "base", tiny_checkpoint, **config_json)
    overridden = _engine_config(base, max_model_len=256, hf_overrides=overrides)
    spelled = _config_json_with(
        tmp_path / "spelled", tiny_checkpoint, **same_config_json
    )
    expected = _engine_config(spelled, max_model_len=256)
    got, want = overridden.model_config.hf_config, expected.model_config.hf_config
    assert got.num_hidden_layers == want.num_hidden_layers
    assert got.layer_types == want.layer_types
    assert len(got.layer_types) == got.num_hidden_layers


def test_explicit_layer_types_stay_strict_under_an_overridden_layer_count(
    tiny_checkpoint, tmp_path
):
    base = _config_json_with(tmp_path / "base", tiny_checkpoint, layer_types=None)
    four = ["sliding_attention"] * 3 + ["full_attention"]
    with pytest.raises(
        ValueError, match=r"layer_types has 4 entries but num_hidden_layers is 8"
    ):
        _engine_config(
            base,
            max_model_len=256,
            hf_overrides={"layer_types": four, "num_hidden_layers": 8},
        )


def test_from_pretrained_num_hidden_layers_derives_the_layer_types(
    tiny_checkpoint, tmp_path
):
    """Transformers applies from_pretrained keyword arguments after the
    config is built; derived layer types now follow them (4 types for 2
    layers before)."""
    base = _config_json_with(tmp_path / "base", tiny_checkpoint, layer_types=None)
    config = Spark2_5Config.from_pretrained(base, num_hidden_layers=2)
    assert config.layer_types == ["sliding_attention"] * 2
    assert "_layer_types_derived" not in config.to_dict()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"head_dim": 3}, r"head_dim must be even"),
        ({"num_key_value_heads": 3}, r"divisible by num_key_value_heads \(3\)"),
        ({"hidden_act": "relu"}, r"hidden_act must be one of"),
        ({"num_hidden_layers": 8}, r"layer_types has 4 entries"),
    ],
)
@pytest.mark.parametrize("reader", ["Spark2_5Config", "AutoConfig"])
def test_bad_from_pretrained_keyword_arguments_are_refused(
    tiny_checkpoint, fields, message, reader
):
    """Transformers assigns from_pretrained keyword arguments after the
    config was built and checked: they were taken without a check
    (head_dim=3 gave a config whose RoPE cannot be built)."""
    from transformers import AutoConfig

    import vllm_spark2_5_plugin

    vllm_spark2_5_plugin.register()
    read = Spark2_5Config if reader == "Spark2_5Config" else AutoConfig
    with pytest.raises(ValueError, match=message) as info:
        read.from_pretrained(tiny_checkpoint, **fields)
    assert "keyword arguments given to from_pretrained" in str(info.value)
    # Valid ones still apply, and unknown ones come back as Transformers says.
    config, unused = read.from_pretrained(
        tiny_checkpoint, rms_norm_eps=1e-5, foo=1, return_unused_kwargs=True
    )
    assert config.rms_norm_eps == 1e-5
    assert unused == {"foo": 1}


# ---------------------------------------------------------------------------
# Copies
# ---------------------------------------------------------------------------


def test_a_shallow_copy_does_not_share_the_given_rope_fields():
    """copy.copy shared the record of the RoPE fields as given: a rope_theta
    set on the copy gave the original's next RoPE override its theta."""
    import copy

    original = Spark2_5Config(num_hidden_layers=4)
    shallow = copy.copy(original)
    shallow.rope_theta = 7e5
    assert {p["rope_theta"] for p in shallow.rope_parameters.values()} == {7e5}
    original.rope_parameters = {"rope_type": "linear", "factor": 2.0}
    thetas = {t: p["rope_theta"] for t, p in original.rope_parameters.items()}
    assert thetas == {"sliding_attention": 1e4, "full_attention": 1e6}


# ---------------------------------------------------------------------------
# LoRA on GPUs takes 16-bit activations
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "refused"),
    [("float32", True), ("bfloat16", False), ("float16", False)],
)
def test_float32_lora_is_refused_where_vllm_runs_lora_on_gpus(
    tiny_checkpoint, monkeypatch, dtype, refused
):
    """On the H100, a float32 model with --enable-lora started and the first
    request with an adapter failed ``assert inputs.dtype in [torch.float16,
    torch.bfloat16]`` in vLLM's Triton LoRA kernel, inside the engine. The
    platform is made to answer as CUDA's here; the CPU build runs float32
    LoRA (tests/test_lora.py), so there nothing is refused."""
    from vllm.platforms import current_platform

    fields = {"max_model_len": 256, "enable_lora": True, "dtype": dtype}
    _engine_config(tiny_checkpoint, **fields)  # the CPU build: accepted
    monkeypatch.setattr(current_platform, "is_cuda_alike", lambda: True)
    if not refused:
        from vllm_spark2_5_plugin.configs.spark2_5 import _check_lora_dtype

        _check_lora_dtype(_engine_config(tiny_checkpoint, **fields))
        return
    with pytest.raises(
        ValueError, match="--enable-lora with dtype float32: .*bfloat16"
    ):
        _engine_config(tiny_checkpoint, **fields)


# ---------------------------------------------------------------------------
# The default context length follows the full-attention layers' RoPE
# ---------------------------------------------------------------------------

# The tiny checkpoint: max_position_embeddings 2048, layers S, S, S, F.
S, F = "sliding_attention", "full_attention"
DEFAULT = {"rope_type": "default"}
LINEAR_4 = {"rope_type": "linear", "factor": 4.0}
LINEAR_2 = {"rope_type": "linear", "factor": 2.0}
YARN_4_ENTRY = {"rope_type": "yarn", "factor": 4.0}
LLAMA3_4 = {
    "rope_type": "llama3",
    "factor": 4.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
}


@pytest.mark.parametrize(
    ("fields", "engine_fields", "expected"),
    [
        pytest.param({}, {}, 2048, id="no-factor"),
        pytest.param({"rope_parameters": LINEAR_4}, {}, 8192, id="same-factor"),
        pytest.param(
            {"rope_parameters": {S: LINEAR_4, F: LINEAR_4}},
            {},
            8192,
            id="same-factor-per-type",
        ),
        pytest.param(
            {"rope_parameters": {S: DEFAULT, F: LINEAR_4}}, {}, 8192, id="full-only"
        ),
        pytest.param(
            {"rope_parameters": {F: LINEAR_4, S: DEFAULT}},
            {},
            8192,
            id="full-only-written-first",
        ),
        pytest.param(
            {"rope_parameters": {S: LINEAR_2, F: LINEAR_4}},
            {},
            8192,
            id="full-larger",
        ),
        # vLLM took the full layers' factor (the last one) already.
        pytest.param(
            {"rope_parameters": {F: LINEAR_2, S: LINEAR_4}},
            {},
            4096,
            id="full-smaller",
        ),
        pytest.param({"rope_parameters": YARN_4_ENTRY}, {}, 2048, id="yarn"),
        pytest.param(
            {"rope_parameters": {S: DEFAULT, F: YARN_4_ENTRY}}, {}, 2048, id="yarn-full"
        ),
        pytest.param({"rope_parameters": LLAMA3_4}, {}, 2048, id="llama3"),
        # Every layer slides: the sliding layers' factor is the model's.
        pytest.param(
            {"rope_parameters": {S: LINEAR_4, F: DEFAULT}, "layer_types": [S] * 4},
            {},
            8192,
            id="sliding-only-model",
        ),
        # A length in config.json's model_max_length still limits it.
        pytest.param({"model_max_length": 1024}, {}, 1024, id="model_max_length"),
        pytest.param(
            {"rope_parameters": LINEAR_4, "model_max_length": 1024},
            {},
            4096,
            id="model_max_length-same-factor",
        ),
        # vLLM caps a disabled window's context at sliding_window (16) times
        # its factor, below what either layer type's RoPE reaches.
        pytest.param(
            {"rope_parameters": {S: LINEAR_4, F: DEFAULT}},
            {"disable_sliding_window": True},
            64,
            id="disabled-window",
        ),
        pytest.param({}, {"max_model_len": 1024}, 1024, id="explicit-shorter"),
        pytest.param(
            {"rope_parameters": {S: LINEAR_4, F: DEFAULT}},
            {"max_model_len": 2048},
            2048,
            id="sliding-only-factor-explicit-full-length",
        ),
    ],
)
def test_default_context_lengths_vllm_derives_right_stay(
    tiny_checkpoint, tmp_path, fields, engine_fields, expected
):
    path = _config_json_with(tmp_path / "ck", tiny_checkpoint, **fields)
    model_config = _engine_config(path, **engine_fields).model_config
    assert model_config.max_model_len == expected


@pytest.mark.parametrize(
    ("fields", "engine_fields", "derived", "supported"),
    [
        pytest.param(
            {"rope_parameters": {S: LINEAR_4, F: DEFAULT}}, {}, 8192, 2048, id="linear"
        ),
        pytest.param(
            {"rope_parameters": {F: DEFAULT, S: LINEAR_4}},
            {},
            8192,
            2048,
            id="full-written-first",
        ),
        pytest.param(
            {"rope_parameters": {S: {"rope_type": "dynamic", "factor": 4.0}}},
            {},
            8192,
            2048,
            id="dynamic",
        ),
        # yarn's max_position_embeddings is the scaled length: vLLM skips its
        # factor and took the sliding layers' one.
        pytest.param(
            {"rope_parameters": {S: LINEAR_4, F: YARN_4_ENTRY}},
            {},
            8192,
            2048,
            id="yarn-full",
        ),
        pytest.param(
            {"rope_parameters": {S: LINEAR_4, F: LLAMA3_4}},
            {},
            8192,
            2048,
            id="llama3-full",
        ),
        pytest.param(
            {"rope_parameters": {S: LINEAR_4, F: DEFAULT}, "model_max_length": 1024},
            {},
            4096,
            1024,
            id="model_max_length",
        ),
        # Every layer is full: the unused sliding entry's factor still
        # lengthened vLLM's default.
        pytest.param(
            {"rope_parameters": {S: LINEAR_4, F: DEFAULT}, "layer_types": [F] * 4},
            {},
            8192,
            2048,
            id="full-only-model",
        ),
        # Every layer slides: the unused full entry's factor lengthened it.
        pytest.param(
            {"rope_parameters": {S: DEFAULT, F: LINEAR_4}, "layer_types": [S] * 4},
            {},
            8192,
            2048,
            id="sliding-only-model",
        ),
        pytest.param(
            {"rope_parameters": {S: LINEAR_4, F: DEFAULT}},
            {"max_model_len": -1},
            8192,
            2048,
            id="auto-fit",
        ),
    ],
)
def test_a_default_context_from_the_sliding_layers_factor_is_refused(
    tiny_checkpoint, tmp_path, fields, engine_fields, derived, supported
):
    """vLLM multiplies max_position_embeddings by the last layer type's RoPE
    factor, assuming every type shares it: a factor only the sliding layers
    have made it serve the full-attention layers 4x the positions they were
    scaled for (8192 for 2048), without a word."""
    path = _config_json_with(tmp_path / "ck", tiny_checkpoint, **fields)
    with pytest.raises(ValueError) as info:
        _engine_config(path, **engine_fields)
    said = str(info.value)
    assert f"vLLM derived max_model_len {derived} " in said
    assert f"scaled for {supported} positions" in said
    assert f"--max-model-len {supported}" in said
    assert (
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 or within config.json's model_max_length"
        in said
    )
    # The suggested length starts.
    config = _engine_config(path, **{**engine_fields, "max_model_len": supported})
    assert config.model_config.max_model_len == supported
    assert config.scheduler_config.max_num_batched_tokens >= 1


def test_an_explicit_length_past_the_full_layers_rope_follows_vllms_rule(
    tiny_checkpoint, tmp_path, monkeypatch
):
    """vLLM accepted --max-model-len 4096 because it read the sliding layers'
    factor 4 as the model's; its own rule for a length longer than the
    model's now applies against the full layers' 2048."""
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    path = _config_json_with(
        tmp_path / "ck", tiny_checkpoint, rope_parameters={S: LINEAR_4, F: DEFAULT}
    )
    with pytest.raises(ValueError) as info:
        _engine_config(path, max_model_len=4096)
    said = str(info.value)
    assert "full_attention layers" in said
    assert "User-specified max_model_len (4096) is greater than the derived" in said
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in said
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    assert _engine_config(path, max_model_len=4096).model_config.max_model_len == 4096
