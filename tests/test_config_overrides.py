# SPDX-License-Identifier: Apache-2.0
"""RoPE fields given through ``--hf-overrides`` read as config.json's.

vLLM assigns the overrides to the config object it loaded from config.json;
each spelling must give the RoPE parameters of a checkpoint whose config.json
spells its RoPE settings that way (docs/model.md, "RoPE parameters"), or a
``ValueError`` naming the field before any process starts.
"""

import json
import shutil

import pytest
import torch
from vllm_helpers import greedy_generate

S, F = "sliding_attention", "full_attention"
LINEAR_2 = {"rope_type": "linear", "factor": 2.0}
YARN_4 = {"type": "yarn", "factor": 4.0}
# The tiny checkpoint's head_dim is 32: 16 rotated pairs.
LONGROPE = {
    "rope_type": "longrope",
    "short_factor": [1.0] * 16,
    "long_factor": [2.0] * 16,
}


def _engine_config(checkpoint, **fields):
    from vllm.engine.arg_utils import EngineArgs

    import vllm_spark2_5_plugin

    vllm_spark2_5_plugin.register()
    return EngineArgs(model=str(checkpoint), **fields).create_engine_config()


def _spelled(tiny_checkpoint, path, rope_fields):
    """A copy of the tiny checkpoint whose config.json holds exactly
    ``rope_fields`` as its RoPE settings (none of its own)."""
    shutil.copytree(tiny_checkpoint, path)
    raw = json.loads((path / "config.json").read_text())
    del raw["rope_parameters"]
    raw.update(rope_fields)
    (path / "config.json").write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize(
    ("checkpoint_rope", "overrides", "config_json_rope"),
    [
        pytest.param(
            None,
            {"rope_parameters": LINEAR_2},
            {"rope_parameters": LINEAR_2},
            id="flat-dict",
        ),
        pytest.param(
            None,
            {"rope_scaling": LINEAR_2},
            {"rope_scaling": LINEAR_2},
            id="legacy-rope_scaling",
        ),
        pytest.param(
            None, {"rope_parameters": None}, {"rope_parameters": None}, id="null"
        ),
        pytest.param(
            None,
            {"rope_parameters": {F: {"rope_type": "default", "rope_theta": 5e5}}},
            {"rope_parameters": {F: {"rope_type": "default", "rope_theta": 5e5}}},
            id="one-layer-type",
        ),
        pytest.param(
            None,
            {"rope_parameters": {S: {}, F: {"type": "linear", "factor": 2.0}}},
            {"rope_parameters": {S: {}, F: {"type": "linear", "factor": 2.0}}},
            id="legacy-type-key",
        ),
        pytest.param(
            None,
            {"rope_parameters": LINEAR_2, "rope_theta": 5e5},
            {"rope_parameters": LINEAR_2, "rope_theta": 5e5},
            id="flat-dict-and-rope_theta",
        ),
        pytest.param(
            {},
            {"rope_theta": 5e5},
            {"rope_theta": 5e5},
            id="rope_theta-over-no-rope-settings",
        ),
        pytest.param(
            {"rope_parameters": {F: LINEAR_2}},
            {"rope_theta": 5e5},
            {"rope_parameters": {F: LINEAR_2}, "rope_theta": 5e5},
            id="rope_theta-fills-the-missing-thetas",
        ),
        # A legacy top-level original_max_position_embeddings goes into the
        # scaled entries that have none of their own.
        pytest.param(
            {"rope_scaling": YARN_4},
            {"original_max_position_embeddings": 512},
            {"rope_scaling": YARN_4, "original_max_position_embeddings": 512},
            id="original_max_position_embeddings-yarn",
        ),
        # vLLM's default max_model_len of longrope is the top-level value.
        pytest.param(
            {"rope_parameters": LONGROPE},
            {"original_max_position_embeddings": 512},
            {"rope_parameters": LONGROPE, "original_max_position_embeddings": 512},
            id="original_max_position_embeddings-longrope",
        ),
    ],
)
def test_rope_overrides_resolve_as_the_same_spelling_in_config_json(
    tiny_checkpoint, tmp_path, checkpoint_rope, overrides, config_json_rope
):
    """Before, these stopped the front end with an AttributeError or vLLM's
    KeyError('rope_type'), stopped the worker (a missing layer type), or
    were ignored (rope_theta)."""
    base = tiny_checkpoint
    if checkpoint_rope is not None:
        base = _spelled(tiny_checkpoint, tmp_path / "base", checkpoint_rope)
    overridden = _engine_config(base, hf_overrides=overrides).model_config
    spelled = _spelled(tiny_checkpoint, tmp_path / "spelled", config_json_rope)
    expected = _engine_config(spelled).model_config
    assert overridden.hf_config.rope_parameters == expected.hf_config.rope_parameters
    # vLLM derived the context length (RoPE factor included) from the same.
    assert overridden.max_model_len == expected.max_model_len
    if "original_max_position_embeddings" in overrides:
        for entry in overridden.hf_config.rope_parameters.values():
            assert entry["original_max_position_embeddings"] == 512


def test_a_factor_on_the_sliding_layers_only_is_refused_as_in_config_json(
    tiny_checkpoint, tmp_path
):
    """vLLM took the sliding layers' factor for the whole model's context
    (4096 for the tiny checkpoint's 2048); the full-attention layers are not
    scaled, so the default length is refused, naming the one to pass."""
    rope = {"rope_parameters": {S: LINEAR_2}}
    spelled = _spelled(tiny_checkpoint, tmp_path / "spelled", rope)
    for path, overrides in ((tiny_checkpoint, rope), (spelled, {})):
        with pytest.raises(
            ValueError,
            match=r"vLLM derived max_model_len 4096 .* full_attention layers, "
            r"which attend to the whole context, are scaled for 2048 positions"
            r".* --max-model-len 2048 ",
        ):
            _engine_config(path, hf_overrides=overrides)
        config = _engine_config(path, hf_overrides=overrides, max_model_len=2048)
        assert config.model_config.max_model_len == 2048
        assert config.model_config.hf_config.rope_parameters[S]["factor"] == 2.0


def test_rope_parameters_repeated_in_another_order_keep_the_context_length(
    tiny_checkpoint, tmp_path
):
    """``--hf-overrides`` repeating config.json's RoPE with the full-attention
    layers first: vLLM takes the last type's factor for the context length,
    so the overrides' order was refused (8192 from the sliding layers') where
    config.json's starts at 4096 (the full-attention layers' factor)."""
    linear_4 = {**LINEAR_2, "factor": 4.0}
    rope = {"rope_parameters": {S: linear_4, F: LINEAR_2}}
    spelled = _spelled(tiny_checkpoint, tmp_path / "spelled", rope)
    from_file = _engine_config(spelled).model_config
    assert from_file.max_model_len == 4096
    written = from_file.hf_config.rope_parameters  # as normalised, thetas too
    repeated = {"rope_parameters": {F: dict(written[F]), S: dict(written[S])}}
    config = _engine_config(spelled, hf_overrides=repeated).model_config
    assert config.max_model_len == 4096
    assert list(config.hf_config.rope_parameters) == [S, F]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # config.json's per-type thetas win over a top-level rope_theta.
        ({"rope_theta": 5e5}, r"rope_theta=500000.0 changes nothing"),
        (
            {"rope_parameters": LINEAR_2, "rope_scaling": LINEAR_2},
            r"rope_parameters and rope_scaling are both set",
        ),
        ({"rope_parameters": "linear"}, r"rope_parameters must be a dict, got str"),
        (
            {"rope_parameters": {"rope_type": "linear"}},
            r"rope_parameters\['sliding_attention'\] with rope_type 'linear' "
            r"needs 'factor'",
        ),
        (
            {"rope_parameters": {F: {"type": "linear"}}},
            r"rope_parameters\['full_attention'\] with rope_type 'linear' "
            r"needs 'factor'",
        ),
        (
            {"rope_parameters": {**LINEAR_2, F: {"rope_type": "default"}}},
            r"rope_parameters mixes per-layer-type entries with other keys",
        ),
        (
            {
                "rope_parameters": {
                    **LONGROPE,
                    "original_max_position_embeddings": 1024,
                },
                "original_max_position_embeddings": 2048,
            },
            r"original_max_position_embeddings=2048 \(top level\) and "
            r"rope_parameters\['sliding_attention'\]"
            r"\['original_max_position_embeddings'\]=1024 disagree",
        ),
        (
            {"rope_scaling": {"rope_type": "mrope", "mrope_section": [8, 4, 4]}},
            r"rope_parameters\['sliding_attention'\]\['rope_type'\] must be one of",
        ),
    ],
)
def test_bad_rope_overrides_are_refused_naming_the_field(
    tiny_checkpoint, overrides, message
):
    with pytest.raises(ValueError, match=message) as info:
        _engine_config(tiny_checkpoint, max_model_len=256, hf_overrides=overrides)
    assert "--hf-overrides" in str(info.value)


@pytest.mark.slow
def test_a_flat_rope_override_generates_as_the_same_config_json(
    tiny_checkpoint, tmp_path
):
    """Linear RoPE (factor 2) through --hf-overrides and through config.json
    give the same greedy tokens, and not those of the unscaled checkpoint."""
    gen = torch.Generator().manual_seed(7)
    prompt = [torch.randint(20, 500, (40,), generator=gen).tolist()]
    spelled = _spelled(
        tiny_checkpoint, tmp_path / "spelled", {"rope_parameters": LINEAR_2}
    )
    overridden = greedy_generate(
        tiny_checkpoint, prompt, 12, hf_overrides={"rope_parameters": LINEAR_2}
    )
    from_config_json = greedy_generate(spelled, prompt, 12)
    plain = greedy_generate(tiny_checkpoint, prompt, 12)
    assert overridden[0][0] == from_config_json[0][0]
    assert overridden[0][0] != plain[0][0]
    for step, expected in zip(overridden[0][1], from_config_json[0][1], strict=True):
        assert step == pytest.approx(expected, abs=1e-5)
