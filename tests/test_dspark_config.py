# SPDX-License-Identifier: Apache-2.0
"""DSpark config: aliases, validation, and the restore after vLLM's DeepSeek-V4
fallback, through vLLM's real ModelConfig / SpeculativeConfig / EngineArgs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from vllm_helpers import gpu_vllm_available

from vllm_spark2_5_plugin.configs.dspark import (
    DSPARK_ALIASES,
    check_speculative_settings,
    normalize_dspark_config,
    read_dspark_settings,
)
from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
from vllm_spark2_5_plugin.names import FULL, SLIDING
from vllm_spark2_5_plugin.tools.tiny_checkpoint import TINY_CONFIG

NOISE_ID = 17


def dspark_config(**fields) -> Spark2_5Config:
    """A tiny Spark2_5 config with valid DSpark settings, overridden by ``fields``."""
    base = {
        **TINY_CONFIG,
        "dspark_block_size": 4,
        "dspark_markov_rank": 8,
        "dspark_target_layer_ids": [1, 3],
        "dspark_noise_token_id": NOISE_ID,
    }
    base.update(fields)
    return Spark2_5Config(**{k: v for k, v in base.items() if v is not None})


# ---------------------------------------------------------------------------
# Normalisation and validation (no engine)
# ---------------------------------------------------------------------------


def test_aliases_become_canonical_fields():
    config = dspark_config(
        dspark_block_size=None,
        dspark_markov_rank=None,
        dspark_target_layer_ids=None,
        dspark_noise_token_id=None,
        block_size=6,
        markov_rank=5,
        target_layer_ids=[0, 2],
        markov_head_type="rnn",
        enable_confidence_head=True,
        mask_token_id=NOISE_ID,
    )
    s = read_dspark_settings(config)
    assert (s.block_size, s.markov_rank, s.target_layer_ids) == (6, 5, (0, 2))
    assert (s.markov_head_type, s.enable_confidence_head) == ("rnn", True)
    assert s.noise_token_id == NOISE_ID
    for canonical, alias in DSPARK_ALIASES.items():
        assert getattr(config, canonical) == getattr(config, alias), canonical


def test_defaults_fill_optional_fields():
    config = dspark_config()
    s = read_dspark_settings(config)
    assert s.markov_head_type == "vanilla" and s.enable_confidence_head is False
    assert s.layer_types == (SLIDING,) and s.num_layers == 1
    assert s.sliding_window == TINY_CONFIG["sliding_window"]
    assert config.dspark_layer_types == [SLIDING]


def test_a_null_window_is_accepted_when_no_draft_layer_slides():
    """The window defaults to the target's, which may be null (no target
    layer slides); a draft of full layers needs none."""

    def config(draft_layer_types):
        # dspark_config() drops None values: the null window is given here.
        fields = dspark_config(dspark_layer_types=draft_layer_types).to_dict()
        fields.update(layer_types=[FULL] * 4, sliding_window=None)
        return Spark2_5Config(**fields)

    assert config([FULL]).sliding_window is None
    assert read_dspark_settings(config([FULL])).sliding_window is None
    with pytest.raises(
        ValueError,
        match=r"dspark_sliding_window is null .* makes draft layer 1 a "
        r"sliding_attention layer",
    ):
        read_dspark_settings(config([FULL, SLIDING]))


def test_normalisation_is_idempotent():
    config = dspark_config(markov_rank=8, dspark_layer_types=(SLIDING, FULL))
    normalize_dspark_config(config)
    first = config.to_dict()
    normalize_dspark_config(config)
    assert config.to_dict() == first
    assert config.dspark_layer_types == [SLIDING, FULL]


def test_alias_disagreeing_with_canonical_field_is_refused():
    config = dspark_config(markov_rank=3)
    with pytest.raises(ValueError, match=r"dspark_markov_rank=8 .* markov_rank=3"):
        normalize_dspark_config(config)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"dspark_markov_rank": 0},
            r"dspark_markov_rank must be a positive integer, got 0",
        ),
        ({"dspark_markov_rank": 2.5}, r"dspark_markov_rank .* got 2\.5"),
        (
            {"dspark_markov_rank": None},
            r"dspark_markov_rank \(alias markov_rank\) is missing",
        ),
        (
            {"dspark_target_layer_ids": []},
            r"dspark_target_layer_ids .* non-empty .* \[\]",
        ),
        (
            # Never set: a Transformers config has no such attribute at all.
            {"dspark_target_layer_ids": None},
            r"dspark_target_layer_ids .* non-empty .* None",
        ),
        (
            {"dspark_target_layer_ids": [1, 1]},
            r"dspark_target_layer_ids must not repeat .* \[1, 1\]",
        ),
        (
            {"dspark_target_layer_ids": [3, 1]},
            r"dspark_target_layer_ids must be strictly ascending .* \[3, 1\]",
        ),
        (
            {"dspark_target_layer_ids": [1, 4]},
            r"dspark_target_layer_ids=\[1, 4\] has \[4\] outside .* 0\.\.3",
        ),
        ({"dspark_target_layer_ids": [-1, 2]}, r"has \[-1\] outside"),
        (
            {"dspark_target_layer_ids": ["1"]},
            r"dspark_target_layer_ids must be a list of integers",
        ),
        (
            {"dspark_markov_head_type": "lstm"},
            r"dspark_markov_head_type must be one of .* 'lstm'",
        ),
        (
            {"dspark_enable_confidence_head": "yes"},
            r"dspark_enable_confidence_head must be true or false, got 'yes'",
        ),
        (
            {"dspark_noise_token_id": None},
            r"dspark_noise_token_id \(alias mask_token_id\) is missing",
        ),
        (
            {"dspark_noise_token_id": 512},
            r"dspark_noise_token_id must be a token id in 0\.\.511, got 512",
        ),
        (
            {"dspark_layer_types": ["sliding_attention", "local"]},
            r"dspark_layer_types\[1\] is 'local'",
        ),
        ({"dspark_layer_types": []}, r"dspark_layer_types must be a non-empty list"),
        (
            {"dspark_sliding_window": 0},
            r"dspark_sliding_window must be a positive integer, got 0",
        ),
        (
            {"dspark_block_size": -2},
            r"dspark_block_size \(alias block_size\) must be a positive .* got -2",
        ),
        (
            {"draft_vocab_size": 256},
            r"draft_vocab_size=256 differs from vocab_size=512",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_settings_raise_value_error_naming_field_and_value(fields, message):
    with pytest.raises(ValueError, match=message):
        read_dspark_settings(dspark_config(**fields))


def test_checkpoint_without_any_dspark_field_is_told_how_to_get_a_draft():
    config = Spark2_5Config(**TINY_CONFIG)
    with pytest.raises(ValueError, match=r"has no DSpark draft") as info:
        read_dspark_settings(config)
    text = str(info.value)
    assert "dspark_markov_rank, dspark_target_layer_ids" in text
    assert "spark2_5-train-dspark IN OUT --init-draft target" in text
    # The aliases alone are a DSpark config: the field-level message follows.
    with pytest.raises(ValueError, match=r"dspark_markov_rank .* is missing"):
        read_dspark_settings(Spark2_5Config(**TINY_CONFIG, target_layer_ids=[1]))


def test_draft_must_match_target_hidden_and_vocab():
    config = dspark_config()
    with pytest.raises(ValueError, match=r"hidden_size of the draft \(64\) .* \(128\)"):
        read_dspark_settings(config, target_hidden_size=128)
    with pytest.raises(
        ValueError, match=r"vocab_size of the draft \(512\) .* \(1024\)"
    ):
        read_dspark_settings(config, target_vocab_size=1024)


@pytest.mark.parametrize(
    ("k", "pp", "dcp", "message"),
    [
        # (vLLM 0.32 needs K for an in-checkpoint draft: the fix names it.)
        (
            5,
            1,
            1,
            r"num_speculative_tokens=5 does not match .* dspark_block_size=4; "
            r'set "num_speculative_tokens": 4 in --speculative-config$',
        ),
        (4, 2, 1, r"pipeline_parallel_size=2: .* pipeline_parallel_size=1 only"),
        (
            4,
            1,
            2,
            r"decode_context_parallel_size=2: .* decode_context_parallel_size=1 only",
        ),
    ],
)
def test_serving_flags_are_checked(k, pp, dcp, message):
    from types import SimpleNamespace

    settings = read_dspark_settings(dspark_config())
    parallel = SimpleNamespace(
        pipeline_parallel_size=pp, decode_context_parallel_size=dcp
    )
    with pytest.raises(ValueError, match=message):
        check_speculative_settings(settings, k, parallel)


def test_missing_block_size_needs_explicit_num_speculative_tokens():
    settings = read_dspark_settings(dspark_config(dspark_block_size=None))
    check_speculative_settings(settings, 3, None)  # any K is fine without a block
    with pytest.raises(ValueError, match="num_speculative_tokens is required"):
        check_speculative_settings(settings, None, None)


# ---------------------------------------------------------------------------
# Through vLLM's real config objects
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dspark_checkpoint(tmp_path_factory) -> Path:
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(
        tmp_path_factory.mktemp("dspark-config"),
        dspark={"dspark_layer_types": [SLIDING, FULL]},
    )


@pytest.fixture(scope="module")
def registered():
    import vllm_spark2_5_plugin

    vllm_spark2_5_plugin.register()


def variant(base: Path, tmp_path: Path, **changes) -> Path:
    """A copy of ``base`` whose config.json has ``changes`` (None deletes a key)."""
    out = tmp_path / "variant"
    shutil.copytree(base, out)
    config = json.loads((out / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (out / "config.json").write_text(json.dumps(config))
    return out


def build_spec(path: Path, *, pp: int = 1, **spec_fields):
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig

    target = ModelConfig(model=str(path), dtype="float32", max_model_len=256)
    return SpeculativeConfig(
        method="dspark",
        target_model_config=target,
        target_parallel_config=ParallelConfig(pipeline_parallel_size=pp),
        **spec_fields,
    )


def test_hook_restores_spark2_5_draft_after_deepseek_fallback(
    registered, dspark_checkpoint
):
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import (
        get_eagle3_aux_layers_from_config,
    )

    spec = build_spec(dspark_checkpoint, num_speculative_tokens=4)
    draft = spec.draft_model_config
    hf = draft.hf_config
    assert hf.model_type == "spark2_5"
    assert hf.architectures == ["Spark2_5DSparkForCausalLM"]
    # vLLM recomputed its architecture info from the restored config.
    assert draft.architectures == ["Spark2_5DSparkForCausalLM"]
    assert draft.architecture == "Spark2_5DSparkForCausalLM"
    assert hf.num_hidden_layers == 2 and hf.layer_types == [SLIDING, FULL]
    assert draft.get_total_num_hidden_layers() == 2
    assert hf.is_causal is False
    # The target keeps its own config.
    target_hf = spec.target_model_config.hf_config
    assert target_hf.num_hidden_layers == 4 and target_hf.model_type == "spark2_5"
    assert spec.target_model_config.architecture == "Spark2_5ForCausalLM"
    # What the runner derives from it.
    assert get_eagle3_aux_layers_from_config(spec) == (2, 4)
    assert spec.parallel_drafting is True
    assert spec.max_num_new_slots_for_drafting == 3


def test_draft_causality_as_vllm_reads_it(registered, dspark_checkpoint):
    from vllm.model_executor.models.qwen3_dflash import dflash_has_any_non_causal

    spec = build_spec(dspark_checkpoint, num_speculative_tokens=4)
    assert dflash_has_any_non_causal(spec.draft_model_config.hf_config)


def test_num_speculative_tokens_is_required(registered, dspark_checkpoint):
    # vLLM 0.32 fills in the in-checkpoint draft only when K is given, so the
    # README tells users to pass it (equal to dspark_block_size).
    with pytest.raises(ValueError, match="num_speculative_tokens must be provided"):
        build_spec(dspark_checkpoint)


@pytest.mark.parametrize("other", ["plain", "with-draft"])
def test_a_separate_draft_model_is_refused_naming_model(
    registered, dspark_checkpoint, tmp_path, other
):
    """With "model" set to a checkpoint without a draft, the message said the
    served checkpoint had none; with another draft, that draft was read."""
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / other, dspark=other == "with-draft")
    with pytest.raises(ValueError, match=r'sets "model": .* Remove "model"'):
        build_spec(dspark_checkpoint, num_speculative_tokens=4, model=str(path))
    # The served checkpoint's own path, spelled differently, is fine.
    spec = build_spec(
        dspark_checkpoint,
        num_speculative_tokens=4,
        model=str(dspark_checkpoint) + "/",
    )
    assert spec.draft_model_config.hf_config.model_type == "spark2_5"


def test_alias_only_checkpoint_through_vllm(registered, dspark_checkpoint, tmp_path):
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import (
        get_eagle3_aux_layers_from_config,
    )
    from vllm.v1.worker.gpu.spec_decode.utils import get_parallel_drafting_token_id

    raw = json.loads((dspark_checkpoint / "config.json").read_text())
    path = variant(
        dspark_checkpoint,
        tmp_path,
        dspark_block_size=None,
        dspark_markov_rank=None,
        dspark_target_layer_ids=None,
        dspark_markov_head_type=None,
        dspark_noise_token_id=None,
        block_size=4,
        markov_rank=8,
        target_layer_ids=[0, 2],
        markov_head_type="rnn",
        mask_token_id=raw["dspark_noise_token_id"],
    )
    spec = build_spec(path, num_speculative_tokens=4)
    hf = spec.draft_model_config.hf_config
    assert hf.dspark_markov_rank == 8 and hf.dspark_target_layer_ids == [0, 2]
    assert hf.dspark_markov_head_type == "rnn"
    assert hf.dspark_noise_token_id == raw["dspark_noise_token_id"]
    assert get_eagle3_aux_layers_from_config(spec) == (1, 3)
    assert get_parallel_drafting_token_id(hf) == raw["dspark_noise_token_id"]


@pytest.mark.parametrize(
    ("changes", "spec_fields", "message"),
    [
        (
            {},
            {"num_speculative_tokens": 7},
            r"num_speculative_tokens=7 does not match .* dspark_block_size=4",
        ),
        (
            {"dspark_markov_rank": -1},
            {"num_speculative_tokens": 4},
            r"dspark_markov_rank must be a positive integer, got -1",
        ),
        (
            {"dspark_target_layer_ids": [2, 9]},
            {"num_speculative_tokens": 4},
            r"dspark_target_layer_ids=\[2, 9\] has \[9\] outside",
        ),
        (
            {"dspark_layer_types": ["global"]},
            {"num_speculative_tokens": 4},
            r"dspark_layer_types\[0\] is 'global'",
        ),
    ],
    ids=["k-vs-block", "markov-rank", "layer-ids", "layer-types"],
)
def test_bad_checkpoint_fails_while_speculative_config_is_built(
    registered, dspark_checkpoint, tmp_path, changes, spec_fields, message
):
    path = (
        variant(dspark_checkpoint, tmp_path, **changes)
        if changes
        else dspark_checkpoint
    )
    # pydantic reports it as a ValidationError, which is a ValueError.
    with pytest.raises(ValueError, match=message):
        build_spec(path, **spec_fields)


def test_dspark_on_a_checkpoint_without_a_draft_is_refused_at_start_up(
    registered, tiny_checkpoint
):
    """The quick start's checkpoint has no draft: ``vllm serve`` with
    ``--speculative-config`` gets the message, not an AttributeError."""
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(
        model=str(tiny_checkpoint),
        max_model_len=256,
        speculative_config={"method": "dspark", "num_speculative_tokens": 4},
    )
    with pytest.raises(ValueError, match=r"has no DSpark draft.*without"):
        args.create_engine_config()


def spec_with_overrides(path: Path, hf_overrides: dict):
    """A DSpark SpeculativeConfig for a target built with ``hf_overrides``."""
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig

    target = ModelConfig(
        model=str(path), dtype="float32", max_model_len=256, hf_overrides=hf_overrides
    )
    return SpeculativeConfig(
        method="dspark",
        num_speculative_tokens=4,
        target_model_config=target,
        target_parallel_config=ParallelConfig(),
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("dspark_markov_rank", 4),
        ("markov_head_type", "rnn"),
        # Fields the draft shares with the target: the target alone would change.
        ("rope_parameters", {"rope_type": "linear", "factor": 2.0}),
        ("rope_scaling", {"rope_type": "linear", "factor": 2.0}),
        ("rms_norm_eps", 1e-5),
    ],
)
def test_hf_overrides_of_draft_fields_are_refused(
    registered, dspark_checkpoint, field, value
):
    """vLLM reads the draft's config.json again without the target's
    --hf-overrides: a DSpark field set there would be ignored silently."""
    overrides = {field: value, "max_position_embeddings": 4096}
    with pytest.raises(ValueError, match=rf"--hf-overrides sets {field}, .* ignore"):
        spec_with_overrides(dspark_checkpoint, overrides)


def test_hf_overrides_of_target_fields_pass_the_draft_hook(
    registered, dspark_checkpoint
):
    spec = spec_with_overrides(dspark_checkpoint, {"max_position_embeddings": 4096})
    draft = spec.draft_model_config.hf_config
    assert draft.architectures == ["Spark2_5DSparkForCausalLM"]


def spec_with_config_path(path: Path, config_dir: Path):
    """A DSpark SpeculativeConfig for a target read with --hf-config-path."""
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig

    target = ModelConfig(
        model=str(path),
        hf_config_path=str(config_dir),
        dtype="float32",
        max_model_len=256,
    )
    return SpeculativeConfig(
        method="dspark",
        num_speculative_tokens=4,
        target_model_config=target,
        target_parallel_config=ParallelConfig(),
    )


def config_dir(base: Path, out: Path, **changes) -> Path:
    """A directory holding only ``base``'s config.json with ``changes``."""
    out.mkdir()
    raw = json.loads((base / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    (out / "config.json").write_text(json.dumps(raw))
    return out


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"rms_norm_eps": 1e-5}, "rms_norm_eps"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"intermediate_size": 256}, "intermediate_size"),
        (
            {
                "rope_parameters": {
                    SLIDING: {"rope_type": "default", "rope_theta": 1e4},
                    FULL: {"rope_type": "default", "rope_theta": 5e5},
                }
            },
            "rope_parameters",
        ),
        ({"dspark_noise_token_id": NOISE_ID + 1}, "dspark_noise_token_id"),
        ({"dspark_markov_head_type": "rnn"}, "dspark_markov_head_type"),
        ({"dspark_layer_types": [FULL]}, "dspark_layer_types"),
    ],
)
def test_hf_config_path_that_differs_for_the_draft_is_refused(
    registered, dspark_checkpoint, tmp_path, changes, field
):
    """vLLM reads the draft's config from the checkpoint's config.json, not
    from --hf-config-path: the draft ran with the checkpoint's norms, RoPE and
    DSpark settings while the target ran with the other file's."""
    raw = json.loads((dspark_checkpoint / "config.json").read_text())
    other = config_dir(dspark_checkpoint, tmp_path / "cfg", **changes)
    with pytest.raises(ValueError) as info:
        spec_with_config_path(dspark_checkpoint, other)
    said = str(info.value)
    assert f"--hf-config-path {other} gives {field}=" in said, said
    assert "which gives " + field + "=" in said
    assert "Serve a checkpoint whose config.json is the config you want" in said
    if field in raw and not isinstance(raw[field], dict | list):
        # Both values are named.
        assert f"{field}={changes[field]!r}" in said
        assert f"{field}={raw[field]!r}" in said


@pytest.mark.parametrize(
    "changes",
    [
        {},
        # Settings the draft does not read.
        {"max_position_embeddings": 4096, "eos_token_id": 3},
        # The same DSpark settings under their aliases.
        {"dspark_markov_rank": None, "markov_rank": 8},
    ],
    ids=["same", "target-only-fields", "aliases"],
)
def test_hf_config_path_that_agrees_for_the_draft_is_accepted(
    registered, dspark_checkpoint, tmp_path, changes
):
    raw = json.loads((dspark_checkpoint / "config.json").read_text())
    if "markov_rank" in changes:
        changes = {**changes, "markov_rank": raw["dspark_markov_rank"]}
    other = config_dir(dspark_checkpoint, tmp_path / "cfg", **changes)
    spec = spec_with_config_path(dspark_checkpoint, other)
    assert spec.draft_model_config.hf_config.architectures == [
        "Spark2_5DSparkForCausalLM"
    ]
    if "max_position_embeddings" in changes:
        target = spec.target_model_config.hf_config
        assert target.max_position_embeddings == 4096  # the target read it


@pytest.mark.ranks(2)
def test_pipeline_parallel_is_refused(registered, dspark_checkpoint):
    with pytest.raises(ValueError, match=r"pipeline_parallel_size=2"):
        build_spec(dspark_checkpoint, pp=2, num_speculative_tokens=4)


def test_engine_args_report_the_field_before_anything_loads(
    registered, dspark_checkpoint
):
    """What a user of ``vllm serve``/``LLM`` sees: the message names the field."""
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(
        model=str(dspark_checkpoint),
        dtype="float32",
        max_model_len=256,
        speculative_config={"method": "dspark", "num_speculative_tokens": 3},
    )
    with pytest.raises(ValueError) as info:
        args.create_engine_config()
    text = str(info.value)
    assert "num_speculative_tokens=3" in text and "dspark_block_size=4" in text


def test_hooks_are_installed_once_and_only_act_on_spark2_5_dspark(registered):
    from types import SimpleNamespace

    from vllm.config import VllmConfig
    from vllm.config.speculative import SpeculativeConfig

    from vllm_spark2_5_plugin.configs.dspark import (
        install_dspark_config_hooks,
        is_spark2_5_dspark,
    )

    wrappers = (SpeculativeConfig.update_arch_, VllmConfig.__post_init__)
    install_dspark_config_hooks()
    install_dspark_config_hooks()
    assert (SpeculativeConfig.update_arch_, VllmConfig.__post_init__) == wrappers
    from vllm_spark2_5_plugin.vllm_seam.hooks import WRAPPED

    for wrapper in wrappers:  # one layer of wrapping per check around vLLM's
        checks = getattr(wrapper, WRAPPED)
        assert len(set(checks)) == len(checks)
        depth, inner = 0, wrapper
        while hasattr(inner, "__wrapped__"):
            depth, inner = depth + 1, inner.__wrapped__
        assert depth == len(checks)

    def spec(method, model_type):
        target = SimpleNamespace(hf_config=SimpleNamespace(model_type=model_type))
        return SimpleNamespace(
            method=method, target_model_config=target, draft_model_config=object()
        )

    assert is_spark2_5_dspark(spec("dspark", "spark2_5"))
    assert not is_spark2_5_dspark(spec("dspark", "qwen3"))
    assert not is_spark2_5_dspark(spec("eagle3", "spark2_5"))


OFF_GPU_REFUSAL = (
    "method 'dspark' needs vLLM's GPU build on a GPU .* runs on the cpu platform"
)


def check_start_up(args, refusal: str) -> None:
    """``args.create_engine_config()`` refused with ``refusal``; where that is
    the CPU build's last refusal (the settings passed every other check), a
    CUDA build of vLLM builds the DSpark config instead."""
    if refusal == OFF_GPU_REFUSAL and gpu_vllm_available():
        assert args.create_engine_config().speculative_config.method == "dspark"
        return
    with pytest.raises(ValueError, match=refusal):
        args.create_engine_config()


def dspark_engine_args(checkpoint, spec_fields=(), **engine_fields):
    """``EngineArgs`` of a bf16 target with its DSpark draft (K = 4) and the
    given ``--speculative-config`` and engine fields."""
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(
        model=str(checkpoint),
        **{"dtype": "bfloat16", "max_model_len": 256} | engine_fields,
        speculative_config={
            "method": "dspark",
            "num_speculative_tokens": 4,
            **dict(spec_fields),
        },
    )


@pytest.mark.parametrize(
    ("engine_fields", "config_changes", "refusal"),
    [
        ({"dtype": "float32"}, {}, r"dtype=float32: .* --dtype bfloat16"),
        (
            {"dtype": "bfloat16", "kv_cache_dtype": "fp8_e5m2"},
            {},
            r"kv_cache_dtype=fp8_e5m2: .* --kv-cache-dtype auto or fp8_e4m3",
        ),
        (
            {"dtype": "bfloat16"},
            {"head_dim": 80},
            r"head_dim=80: .*power of two.*all full attention",
        ),
        # Settings the draft can run pass the draft's checks and reach the
        # last one, which on vLLM's CPU build is that DSpark needs a GPU (under
        # its CUDA build they are accepted).
        ({"dtype": "bfloat16"}, {}, OFF_GPU_REFUSAL),
        ({"dtype": "bfloat16", "kv_cache_dtype": "fp8"}, {}, OFF_GPU_REFUSAL),
        ({"dtype": "float16", "kv_cache_dtype": "fp8_e4m3"}, {}, OFF_GPU_REFUSAL),
        (
            {"dtype": "float32"},
            {"dspark_layer_types": [FULL]},  # no sliding layer, no kernel
            OFF_GPU_REFUSAL,
        ),
    ],
)
def test_settings_the_draft_cannot_run_are_refused_at_start_up(
    registered, dspark_checkpoint, tmp_path, engine_fields, config_changes, refusal
):
    """Refused while vLLM builds its config, before any process or weight."""
    path = variant(dspark_checkpoint, tmp_path, **config_changes)
    check_start_up(dspark_engine_args(path, **engine_fields), refusal)


@pytest.mark.parametrize(
    ("fields", "refusal"),
    [
        # vLLM 0.32.0's DSpark path ignores these, or fails on them only after
        # loading: each refused naming the field.
        ({"quantization": "fp8"}, r"quantization='fp8' .* --quantization sets both"),
        ({"kv_cache_dtype": "fp8_e5m2"}, r"kv_cache_dtype='fp8_e5m2' .* 'auto'"),
        ({"kv_cache_dtype": "fp8"}, r"kv_cache_dtype='fp8' .*--kv-cache-dtype"),
        ({"kv_cache_dtype": "float16"}, r"kv_cache_dtype='float16' .* 'auto'"),
        ({"enforce_eager": True}, r"enforce_eager=True .* --enforce-eager"),
        ({"disable_padded_drafter_batch": True}, "disable_padded_drafter_batch"),
        ({"use_local_argmax_reduction": True}, "use_local_argmax_reduction"),
        ({"attention_backend": "FLEX_ATTENTION"}, r"attention_backend=FLEX_ATTENTION"),
        ({"max_model_len": 128}, r"max_model_len=128 .* 256; --max-model-len sets"),
        # The target's own settings, spelled again, pass to the last check.
        ({"kv_cache_dtype": "auto"}, OFF_GPU_REFUSAL),
        ({"kv_cache_dtype": "bfloat16"}, OFF_GPU_REFUSAL),  # what auto stores
        ({"draft_tensor_parallel_size": 1}, OFF_GPU_REFUSAL),
        ({"enforce_eager": False}, OFF_GPU_REFUSAL),
        ({"max_model_len": 256}, OFF_GPU_REFUSAL),
        ({"attention_backend": "TRITON_ATTN"}, OFF_GPU_REFUSAL),
    ],
)
def test_draft_only_speculative_fields_are_refused_naming_them(
    registered, dspark_checkpoint, fields, refusal
):
    check_start_up(dspark_engine_args(dspark_checkpoint, fields), refusal)


@pytest.mark.parametrize(
    ("engine_fields", "fields", "refusal"),
    [
        # A quantised target with "model" naming the served checkpoint: vLLM
        # leaves the speculative quantization unset, and quantises the draft
        # as the target all the same.
        ({"quantization": "fp8"}, {"model": "SERVED"}, OFF_GPU_REFUSAL),
        ({"quantization": "fp8"}, {"quantization": "fp8"}, OFF_GPU_REFUSAL),
        # vLLM's fp8 is e4m3 on NVIDIA GPUs: the same cache.
        ({"kv_cache_dtype": "fp8_e4m3"}, {"kv_cache_dtype": "fp8"}, OFF_GPU_REFUSAL),
        (
            {"kv_cache_dtype": "fp8_e4m3"},
            {"kv_cache_dtype": "auto"},
            r"kv_cache_dtype='auto' .* 'fp8_e4m3'; --kv-cache-dtype sets both",
        ),
        (
            {"enforce_eager": True},
            {"enforce_eager": False},
            r"enforce_eager=False .* enforce_eager=True; --enforce-eager sets both"
            r".* Leave these fields out",
        ),
    ],
)
def test_the_draft_fields_are_compared_with_the_targets_own_settings(
    registered, dspark_checkpoint, engine_fields, fields, refusal
):
    if fields.get("model") == "SERVED":
        fields = {**fields, "model": str(dspark_checkpoint)}
    args = dspark_engine_args(dspark_checkpoint, fields, **engine_fields)
    check_start_up(args, refusal)


@pytest.mark.ranks(2)
@pytest.mark.parametrize(
    ("draft_tp", "refusal"),
    [(1, r"draft_tensor_parallel_size=1 .* parallelism, 2"), (2, OFF_GPU_REFUSAL)],
)
def test_a_draft_tensor_parallelism_other_than_the_targets_is_refused(
    registered, dspark_checkpoint, draft_tp, refusal
):
    """vLLM accepts 1 beside TP 2; the draft's layers shard over the target's
    group anyway (a config only: no worker starts)."""
    spec_fields = {"draft_tensor_parallel_size": draft_tp}
    args = dspark_engine_args(dspark_checkpoint, spec_fields, tensor_parallel_size=2)
    check_start_up(args, refusal)


@pytest.mark.parametrize("layer_types", [[SLIDING, FULL], [FULL]])
def test_lora_with_dspark_is_refused_at_start_up(
    registered, dspark_checkpoint, tmp_path, layer_types
):
    """Whatever the draft's layers, ``--enable-lora`` and DSpark together are
    refused before anything loads, naming both settings."""
    from vllm.engine.arg_utils import EngineArgs

    path = variant(dspark_checkpoint, tmp_path, dspark_layer_types=layer_types)
    args = EngineArgs(
        model=str(path),
        dtype="bfloat16",
        max_model_len=256,
        enable_lora=True,
        speculative_config={"method": "dspark", "num_speculative_tokens": 4},
    )
    with pytest.raises(ValueError, match=r"enable_lora=True .* 'dspark'"):
        args.create_engine_config()


def test_lora_without_speculation_passes_the_dspark_check(
    registered, dspark_checkpoint
):
    """The refusal is about the pair: a DSpark checkpoint serves LoRA alone."""
    from vllm.engine.arg_utils import EngineArgs

    config = EngineArgs(
        model=str(dspark_checkpoint), max_model_len=256, enable_lora=True
    ).create_engine_config()
    assert config.lora_config is not None and config.speculative_config is None
