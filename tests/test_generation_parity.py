# SPDX-License-Identifier: Apache-2.0
"""vLLM + plugin greedy generation equals the pure-PyTorch reference (SPEC §3).

Each configuration is a tiny random checkpoint served by the real vLLM 0.32.0
CPU engine; the reference runs the same weights in float64 without any cache.
"""

import json

import pytest
import torch
from vllm_helpers import greedy_generate, run_python

from vllm_spark2_5_plugin.references.spark2_5 import Spark2_5Reference
from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

S, F = "sliding_attention", "full_attention"
MAX_TOKENS = 20
# fp32 engine vs float64 reference: logprobs were seen to agree to ~4e-6; the
# bound leaves a margin of 25x yet catches e.g. tanh-vs-erf GELU (~1e-3).
LOGPROB_ATOL = 1e-4
# Two greedy choices closer than this are a genuine tie for an fp32 engine.
NEAR_TIE = 1e-4


def prompts() -> list[list[int]]:
    gen = torch.Generator().manual_seed(1234)
    # Longer than every sliding window below, so windows really cut keys off.
    return [
        torch.randint(20, 500, (length,), generator=gen).tolist() for length in (41, 23)
    ]


def legacy_rope_keys(path):
    """Rewrite config.json with the pre-v5 top-level rope_theta spelling."""
    raw = json.loads((path / "config.json").read_text())
    del raw["rope_parameters"]
    raw["rope_theta"] = 50_000.0
    (path / "config.json").write_text(json.dumps(raw))


CONFIGS = {
    # mixed S,S,S,F layers; per-type RoPE theta; GQA 4/2; gate; untied; tanh GELU
    "mixed-gqa-gate-untied-tanh": ({}, None),
    "mha-tied-bias-nogate-erf-allsliding-legacyrope": (
        dict(
            num_key_value_heads=4,
            tie_word_embeddings=True,
            attention_bias=True,
            attention_output_gate=False,
            hidden_act="gelu",
            layer_types=[S, S, S, S],
            sliding_window=5,
        ),
        legacy_rope_keys,
    ),
    "mqa-full-first-linear-rope-on-sliding": (
        dict(
            num_key_value_heads=1,
            layer_types=[F, S, F, S],
            sliding_window=7,
            rope_parameters={
                S: {"rope_type": "linear", "factor": 2.0, "rope_theta": 10_000.0},
                F: {"rope_type": "default", "rope_theta": 500_000.0},
            },
        ),
        None,
    ),
}


def assert_matches_reference(path, results, prompt_ids):
    """Tokens equal the reference's until a genuine near-tie; logprobs close.
    Most steps must be compared: near-ties that cut every continuation short
    would leave the check with little to check."""
    reference = Spark2_5Reference.from_checkpoint(path)
    compared = total = 0
    for prompt, (tokens, step_logprobs) in zip(prompt_ids, results, strict=True):
        ref_tokens, ref_rows = reference.greedy(prompt, len(tokens))
        total += len(tokens)
        for step, (got, want) in enumerate(zip(tokens, ref_tokens, strict=True)):
            row = ref_rows[step]
            if got != want:
                gap = float(row[want] - row[got])
                assert gap < NEAR_TIE, (
                    f"step {step}: vLLM chose {got}, reference {want} "
                    f"(reference logprob gap {gap:.4f} is not a near-tie)"
                )
                break  # the continuations legitimately diverge from here
            # Every token vLLM reports (its top-5 and the chosen one).
            for token, logprob in step_logprobs[step].items():
                assert abs(logprob - float(row[token])) < LOGPROB_ATOL, (step, token)
            compared += 1
    print(f"compared {compared} of {total} steps")
    assert compared >= total / 2, f"only {compared} of {total} steps compared"


@pytest.fixture(scope="module")
def prompt_ids():
    return prompts()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
def test_greedy_generation_matches_reference(name, prompt_ids, tmp_path):
    overrides, edit = CONFIGS[name]
    path = make_tiny_checkpoint(tmp_path / name, seed=7, **overrides)
    if edit is not None:
        edit(path)
    results = greedy_generate(path, prompt_ids, MAX_TOKENS)
    assert all(len(tokens) == MAX_TOKENS for tokens, _ in results)
    assert_matches_reference(path, results, prompt_ids)


# The scaled RoPE types vLLM builds for this model, each with the parameters
# at which its rotation is plain RoPE (scale 1, original length = the model's
# 2048 positions, longrope's factors all 1): served by vLLM, they must give
# the reference's default-RoPE output. Two types per checkpoint (one per
# layer type); head_dim 32, so longrope has 16 factors.
UNIT_SCALE_ROPE = {
    "ntk": {"factor": 1.0},
    "dynamic": {"factor": 1.0},
    "yarn": {"factor": 1.0, "original_max_position_embeddings": 2048},
    "longrope": {
        "short_factor": [1.0] * 16,
        "long_factor": [1.0] * 16,
        "original_max_position_embeddings": 2048,
    },
    "llama3": {
        "factor": 1.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 2048,
    },
    "proportional": {},
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sliding_type", "full_type"),
    [("ntk", "dynamic"), ("yarn", "longrope"), ("llama3", "proportional")],
)
def test_scaled_rope_types_at_unit_scale_serve_plain_rope(
    sliding_type, full_type, prompt_ids, tmp_path
):
    theta = {S: 10_000.0, F: 1_000_000.0}
    chosen = {S: sliding_type, F: full_type}
    rope = {
        t: {
            "rope_type": chosen[t],
            "rope_theta": theta[t],
            **UNIT_SCALE_ROPE[chosen[t]],
        }
        for t in (S, F)
    }
    path = make_tiny_checkpoint(tmp_path / "scaled", seed=7, rope_parameters=rope)
    results = greedy_generate(path, prompt_ids[:1], MAX_TOKENS)
    # The reference implements default RoPE: the same weights, plain RoPE.
    raw = json.loads((path / "config.json").read_text())
    assert {p["rope_type"] for p in raw["rope_parameters"].values()} == {
        sliding_type,
        full_type,
    }
    raw["rope_parameters"] = {
        t: {"rope_type": "default", "rope_theta": theta[t]} for t in (S, F)
    }
    (path / "config.json").write_text(json.dumps(raw))
    assert_matches_reference(path, results, prompt_ids[:1])


@pytest.mark.slow
def test_positions_past_max_position_embeddings_when_one_type_is_scaled(
    tmp_path, monkeypatch
):
    """vLLM takes the longest context from the scaled type (64 x 2 = 128
    positions here), which the plugin refuses for a factor on the sliding
    layers alone (tests/test_config.py) unless the length is asked for with
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; then the unscaled type's RoPE must reach
    that far too (its table held 64 positions, and positions past it read
    outside it)."""
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    linear_on_sliding, _ = CONFIGS["mqa-full-first-linear-rope-on-sliding"]
    path = make_tiny_checkpoint(
        tmp_path / "scaled-one-type",
        seed=7,
        **{**linear_on_sliding, "max_position_embeddings": 64},
    )
    gen = torch.Generator().manual_seed(99)
    prompt = [torch.randint(20, 500, (100,), generator=gen).tolist()]
    results = greedy_generate(path, prompt, MAX_TOKENS, max_model_len=128)
    assert len(results[0][0]) == MAX_TOKENS
    assert_matches_reference(path, results, prompt)


def test_rope_tables_lengthen_only_where_the_rotation_stays(tiny_checkpoint):
    """Default and dynamic NTK tables grow with the same rows first (dynamic
    takes its trained length from the table's); longrope keeps two tables of
    lengths that enter its scaling, so a longer context is refused."""
    from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config

    import vllm_spark2_5_plugin
    from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
    from vllm_spark2_5_plugin.models.spark2_5 import build_rope

    vllm_spark2_5_plugin.register()
    # longrope reads the engine's max_model_len from the current config.
    engine = VllmConfig(model_config=ModelConfig(model=str(tiny_checkpoint)))
    config = Spark2_5Config(
        max_position_embeddings=64,
        head_dim=32,
        rope_parameters={
            S: {
                "rope_type": "longrope",
                "rope_theta": 10_000.0,
                "short_factor": [1.0] * 16,
                "long_factor": [2.0] * 16,
                "original_max_position_embeddings": 32,
            },
            F: {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10_000.0},
        },
    )
    with set_current_vllm_config(engine):
        short = build_rope(32, config, F, None).cos_sin_cache
        longer = build_rope(32, config, F, 300).cos_sin_cache
        assert longer.shape[0] >= 300 > short.shape[0]
        assert torch.equal(longer[: short.shape[0]], short)
        build_rope(32, config, S, 64)
        with pytest.raises(ValueError, match=r"sliding_attention .*max-model-len 64\)"):
            build_rope(32, config, S, 300)


def test_sliding_window_changes_the_output(prompt_ids, tmp_path):
    """Guards the parity test: the window must matter for these prompts."""
    path = make_tiny_checkpoint(tmp_path / "w", seed=7, layer_types=[S] * 4)
    reference = Spark2_5Reference.from_checkpoint(path)
    windowed = reference.logits(prompt_ids[0])[-1]
    reference.config.sliding_window = 10_000
    unwindowed = reference.logits(prompt_ids[0])[-1]
    assert (windowed - unwindowed).abs().max() > 1e-2


@pytest.mark.slow
@pytest.mark.parametrize("prefix", ["draft_model.", "mtp.", "model.mtp."])
def test_checkpoint_with_draft_tensors_serves_target_only(prefix, prompt_ids, tmp_path):
    path = make_tiny_checkpoint(
        tmp_path / "with-draft", seed=7, dspark=True, dspark_prefix=prefix
    )
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), "pt") as f:
        assert any(name.startswith(prefix + "main_proj") for name in f.keys())  # noqa: SIM118
    results = greedy_generate(path, prompt_ids[:1], MAX_TOKENS)
    # The target weights are those of the plain checkpoint with the same seed.
    assert_matches_reference(path, results, prompt_ids[:1])
    plain = Spark2_5Reference.from_checkpoint(
        make_tiny_checkpoint(tmp_path / "plain", seed=7)
    )
    assert results[0][0] == plain.greedy(prompt_ids[0], MAX_TOKENS)[0]


# A separate interpreter with vLLM's default multiprocessing: the engine-core
# and worker processes are spawned and must discover the plugin themselves.
ENGINE_SCRIPT = """
import json, sys
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt

if __name__ == "__main__":
    path, prompts, kwargs = sys.argv[1], *map(json.loads, sys.argv[2:4])
    max_tokens = int(sys.argv[4])
    llm = LLM(path, **{"dtype": "float32", "max_model_len": 512, "seed": 0, **kwargs})
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    outs = llm.generate(
        [TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False
    )
    print("TOKENS=" + json.dumps([list(o.outputs[0].token_ids) for o in outs]))
"""


def start_engine(path, prompt_ids, env, **llm_kwargs):
    """``ENGINE_SCRIPT``'s finished process (multiprocess engine)."""
    return run_python(
        ENGINE_SCRIPT,
        env={"VLLM_ENABLE_V1_MULTIPROCESSING": "1", **env},
        timeout=900,
        args=[
            str(path),
            json.dumps(prompt_ids),
            json.dumps(llm_kwargs),
            str(MAX_TOKENS),
        ],
    )


def run_engine(path, prompt_ids, env, **llm_kwargs):
    result = start_engine(path, prompt_ids, env, **llm_kwargs)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    tokens = next(
        line for line in result.stdout.splitlines() if line.startswith("TOKENS=")
    )
    return json.loads(tokens.removeprefix("TOKENS=")), log


@pytest.fixture(scope="module")
def reference_tokens(tiny_checkpoint, prompt_ids):
    reference = Spark2_5Reference.from_checkpoint(tiny_checkpoint)
    return [reference.greedy(p, MAX_TOKENS)[0] for p in prompt_ids]


@pytest.mark.slow
def test_multiprocess_engine_discovers_plugin_through_entry_point(
    tiny_checkpoint, prompt_ids, reference_tokens
):
    from vllm.platforms import current_platform

    tokens, log = run_engine(tiny_checkpoint, prompt_ids, {}, enforce_eager=True)
    assert tokens == reference_tokens
    lines = log.splitlines()
    said = "vllm-spark2_5-plugin: registered"
    # The front end says it once, when its engine config is built.
    front = [ln for ln in lines if ln.startswith("(MainProcess") and said in ln]
    assert len(front) == 1, "the front end said:\n" + "\n".join(front or lines[-40:])
    core = [line for line in lines if line.startswith("(EngineCore")]
    assert core, "no engine-core process logged: " + log[-2000:]
    if current_platform.is_cpu():
        # The CPU build spawns the engine core, which loads the plugin through
        # its entry point again (a forked one, the CUDA build's default,
        # inherits the front end's registration and says nothing).
        registered = [line for line in core if said in line]
        assert registered, "the engine core logged no registration:\n" + "\n".join(core)


@pytest.mark.ranks(2)
@pytest.mark.slow
@pytest.mark.parametrize(
    "parallel",
    [
        pytest.param(dict(tensor_parallel_size=2, enforce_eager=True), id="TP2"),
        # The CPU runner needs compiled mode for PP (ENVIRONMENT.md).
        pytest.param(dict(pipeline_parallel_size=2, enforce_eager=False), id="PP2"),
    ],
)
def test_two_way_parallelism_gives_the_same_tokens(
    parallel, tiny_checkpoint, prompt_ids, reference_tokens
):
    # One OpenMP thread per rank; the default binding fails on this 2-core VM.
    tokens, _ = run_engine(
        tiny_checkpoint, prompt_ids, {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}, **parallel
    )
    assert tokens == reference_tokens


@pytest.mark.ranks(2)
@pytest.mark.slow
def test_quantised_load_checks_hold_on_every_tensor_parallel_rank(
    tiny_checkpoint, prompt_ids, tmp_path
):
    """Online quantization at TP=2, each rank holding half of every sharded
    parameter: the checks of quantised loads let a whole checkpoint through
    and refuse a copy without one k_proj, naming it (vLLM 0.32.0 itself
    checks no quantised load). The CPU build serves only
    ``int8_per_channel_weight_only``, which quantises MoE layers alone: this
    model's linear layers stay 16-bit, but vLLM loads it as a quantised model
    (its own checks off), which is the path under test. FP8 linear layers:
    ``test_strict_loading.py`` (loaded) and ``test_fp8_gpu.py`` (served)."""
    import shutil

    from safetensors.torch import load_file, save_file

    env = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    quantised = dict(
        tensor_parallel_size=2,
        enforce_eager=True,
        quantization="int8_per_channel_weight_only",
        dtype="bfloat16",  # online quantization is of a 16-bit model
    )
    tokens, _ = run_engine(tiny_checkpoint, prompt_ids, env, **quantised)
    assert [len(t) for t in tokens] == [MAX_TOKENS] * len(prompt_ids)

    broken = tmp_path / "no-k_proj"
    shutil.copytree(tiny_checkpoint, broken)
    name = "model.layers.2.self_attn.k_proj.weight"
    tensors = load_file(str(broken / "model.safetensors"))
    del tensors[name]
    save_file(tensors, str(broken / "model.safetensors"), metadata={"format": "pt"})
    result = start_engine(broken, prompt_ids, env, **quantised)
    log = result.stdout + result.stderr
    assert result.returncode != 0, log[-4000:]
    assert f"{name!r} of shape" in log, log[-4000:]
