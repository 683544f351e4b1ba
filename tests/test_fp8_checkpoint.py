# SPDX-License-Identifier: Apache-2.0
"""An FP8 Spark2_5 checkpoint made by llm-compressor, checked on CPU.

``python -m vllm_spark2_5_plugin.tools.quantize_fp8`` runs in its own
environment (``.venv-llmc``, built by ``tools/llmc-env.sh``: llm-compressor
pins other compressed-tensors/transformers releases than vLLM). If that
environment is missing, the first test builds it (about 2 minutes, 1.5 GB);
if it cannot be built, the tests FAIL: they are never skipped.

Checked here: which tensors are FP8 and which are copied byte for byte (every
DSpark draft tensor among them), the ``quantization_config``, that the FP8
weights dequantize to the source within FP8 precision, that vLLM's own
compressed-tensors matching keeps the draft unquantized, and that vLLM's CPU
build serves the checkpoint: it computes what the checkpoint means (the
reference with the same FP8 weights and per-token FP8 activations) and stays
close to the unquantized model (bounds below, measured values in
docs/quantization.md).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch
from vllm_helpers import LLM_KWARGS, REPO, build_dspark_models, run_llm

from vllm_spark2_5_plugin.names import FULL, SLIDING
from vllm_spark2_5_plugin.tools.quantize_fp8 import (
    dequantize,
    is_draft,
    quantized_linear,
)

LLMC_VENV = Path(os.environ.get("LLMC_VENV", REPO / ".venv-llmc"))
LLMC_PYTHON = LLMC_VENV / "bin" / "python"
FP8_MAX = 448.0
DRAFT_PREFIX = "model.mtp."  # the prefix that looks most like a target name
DRAFT_LAYER_TYPES = [SLIDING, FULL]

RNG = random.Random(0)
PROMPTS = [
    [RNG.randrange(20, 500) for _ in range(RNG.randrange(4, 40))] for _ in range(8)
]
MAX_TOKENS = 24


def _llmc_ready() -> bool:
    if not LLMC_PYTHON.is_file():
        return False
    probe = subprocess.run(
        [str(LLMC_PYTHON), "-c", "import llmcompressor, vllm_spark2_5_plugin"],
        capture_output=True,
        cwd=REPO,
    )
    return probe.returncode == 0


@pytest.fixture(scope="session")
def llmc_python() -> Path:
    """The llm-compressor environment's python; built when missing."""
    if not _llmc_ready():
        start = time.monotonic()
        built = subprocess.run(
            ["bash", str(REPO / "tools" / "llmc-env.sh")],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "LLMC_VENV": str(LLMC_VENV)},
            timeout=1800,
        )
        took = time.monotonic() - start
        if built.returncode != 0 or not _llmc_ready():
            pytest.fail(
                f"could not build the llm-compressor environment {LLMC_VENV} with "
                f"tools/llmc-env.sh (exit {built.returncode}, {took:.0f} s); "
                f"it needs PyPI. Output:\n{built.stdout[-3000:]}\n"
                f"{built.stderr[-3000:]}"
            )
        print(f"built {LLMC_VENV} in {took:.0f} s")
    return LLMC_PYTHON


@pytest.fixture(scope="module")
def pair(llmc_python, tmp_path_factory) -> tuple[Path, Path]:
    """(source fp32 checkpoint with a DSpark draft, its FP8 quantization)."""
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    root = tmp_path_factory.mktemp("fp8")
    src = make_tiny_checkpoint(
        root / "src",
        dspark={"dspark_layer_types": DRAFT_LAYER_TYPES},
        dspark_prefix=DRAFT_PREFIX,
    )
    dst = root / "fp8"
    run = subprocess.run(
        [
            str(llmc_python),
            "-m",
            "vllm_spark2_5_plugin.tools.quantize_fp8",
            str(src),
            str(dst),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        # This checkout's tool, whichever checkout .venv-llmc was built from.
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        timeout=600,
    )
    assert run.returncode == 0, f"quantize_fp8 failed:\n{run.stdout}\n{run.stderr}"
    return src, dst


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for file in sorted(path.glob("*.safetensors")):
        out.update(load_file(str(file)))
    return out


def _config(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(
            a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)
        )
    )


# -- the files --------------------------------------------------------------------


def test_fp8_tensors_and_scales(pair):
    src, dst = pair
    source, out = _tensors(src), _tensors(dst)
    quantized = sorted(n for n in source if quantized_linear(n))
    # 7 projections (q, k, v, o, gate, up, down) in each of the 4 target layers.
    assert len(quantized) == 7 * _config(src)["num_hidden_layers"]
    for name in quantized:
        weight = out[name]
        assert weight.dtype == torch.float8_e4m3fn, name
        assert weight.shape == source[name].shape, name
        scale = out[name.removesuffix("weight") + "weight_scale"]
        # FP8_DYNAMIC: one scale per output channel, no static input scale.
        assert scale.shape == (weight.shape[0], 1), name
        assert scale.dtype.is_floating_point and bool((scale > 0).all()), name
        assert name.removesuffix("weight") + "input_scale" not in out, name
    expected = set(source) | {
        n.removesuffix("weight") + "weight_scale" for n in quantized
    }
    assert set(out) == expected


def test_everything_else_is_copied_byte_for_byte(pair):
    src, dst = pair
    source, out = _tensors(src), _tensors(dst)
    copied = [n for n in source if not quantized_linear(n)]
    draft = [n for n in source if is_draft(n)]
    # The whole draft (2 layers, main_proj, norms, Markov head) is among them.
    assert len(draft) == 5 + 10 * len(DRAFT_LAYER_TYPES)
    assert set(draft) <= set(copied)
    for name in (
        "model.embed_tokens.weight",
        "lm_head.weight",
        "model.norm.weight",
        "model.layers.0.self_attn.g_proj.weight",
        "model.layers.2.input_layernorm.weight",
    ):
        assert name in copied
    different = [n for n in copied if not _same_bytes(out[n], source[n])]
    assert different == []


def test_tokenizer_template_and_generation_config_are_copied(pair):
    src, dst = pair
    for name in (
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "generation_config.json",
    ):
        assert (dst / name).read_bytes() == (src / name).read_bytes(), name


def test_config_has_compressed_tensors_fp8(pair):
    src, dst = pair
    source, config = _config(src), _config(dst)
    q = config.pop("quantization_config")
    assert config == source  # nothing else changed
    assert q["quant_method"] == "compressed-tensors"
    assert q["format"] == "float-quantized"
    (group,) = q["config_groups"].values()
    assert group["targets"] == ["Linear"]
    w, a = group["weights"], group["input_activations"]
    assert (w["type"], w["num_bits"], w["strategy"], w["dynamic"]) == (
        "float",
        8,
        "channel",
        False,
    )
    assert (a["type"], a["num_bits"], a["strategy"], a["dynamic"]) == (
        "float",
        8,
        "token",
        True,
    )
    assert "lm_head" in q["ignore"]


def test_dequantized_weights_are_within_fp8_precision(pair):
    src, dst = pair
    source, out = _tensors(src), _tensors(dst)
    restored = dequantize(out)
    for name in (n for n in source if quantized_linear(n)):
        w = source[name].float()
        scale = out[name.removesuffix("weight") + "weight_scale"].float()
        # Per-channel absmax scaling: the largest entry of each row maps to 448.
        torch.testing.assert_close(
            scale[:, 0], w.abs().amax(dim=1) / FP8_MAX, rtol=1e-6, atol=0
        )
        # e4m3 keeps 3 mantissa bits: rounding is within 2^-4 of the value,
        # and within half the smallest subnormal step (2^-10 * scale) near 0.
        err = (restored[name].float() - w).abs()
        bound = torch.maximum(w.abs() * 2.0**-4, scale * 2.0**-10) * (1 + 1e-6)
        assert bool((err <= bound).all()), (name, float((err / bound).max()))
        # and it is a real rounding, not a copy
        assert float(err.max()) > 0, name


def test_vllm_keeps_the_draft_and_ignored_layers_unquantized(pair):
    """vLLM's own compressed-tensors config, read from the written config,
    applied to the module names vLLM gives the target and the draft."""
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (  # noqa: E501
        CompressedTensorsConfig,
    )
    from vllm.model_executor.layers.quantization.compressed_tensors.utils import (
        should_ignore_layer,
    )

    _, dst = pair
    q = CompressedTensorsConfig.from_config(_config(dst)["quantization_config"])
    fused = {
        "qkv_proj": ["q_proj", "k_proj", "v_proj"],
        "gate_up_proj": ["gate_proj", "up_proj"],
    }
    n = _config(dst)["num_hidden_layers"]
    quantized = [
        f"model.layers.{i}.{m}"
        for i in range(n)
        for m in (
            "self_attn.qkv_proj",
            "self_attn.o_proj",
            "mlp.gate_up_proj",
            "mlp.down_proj",
        )
    ]
    unquantized = ["lm_head", *(f"model.layers.{i}.self_attn.g_proj" for i in range(n))]
    # The plugin's draft: layers numbered after the target's, and its heads.
    for j in range(len(DRAFT_LAYER_TYPES)):
        unquantized += [
            f"model.layers.{n + j}.{m}"
            for m in (
                "self_attn.qkv_proj",
                "self_attn.g_proj",
                "self_attn.o_proj",
                "mlp.gate_up_proj",
                "mlp.down_proj",
            )
        ]
    unquantized += ["model.main_proj", "model.markov_head.rnn_proj"]
    for name in quantized:
        assert not should_ignore_layer(name, q.ignore, fused), name
    for name in unquantized:
        assert should_ignore_layer(name, q.ignore, fused), name


def test_dspark_draft_loads_from_the_fp8_checkpoint(pair, world):
    """vLLM builds and loads the draft from the FP8 checkpoint as its DSpark
    runner does: the quantization method adds KV-cache and query scales to
    every attention layer, which the checkpoint does not carry (vLLM then
    uses 1.0); the draft's own tensors, unquantized, load byte for byte."""
    _, dst = pair
    _, _, target, draft = build_dspark_models(dst, 4)
    main_proj = draft.model.main_proj
    assert main_proj.quant_config is not None  # loaded as a quantized model
    assert type(main_proj.quant_method).__name__ == "UnquantizedLinearMethod"
    # The method that adds (and after loading, drops) the scales.
    for layer in draft.model.layers:
        method = layer.self_attn.attn.quant_method
        assert "KVCacheMethod" in type(method).__name__, type(method)
    tensors = _tensors(dst)
    params = dict(draft.named_parameters())
    norm = params["model.main_norm.weight"]
    assert _same_bytes(
        norm.data, tensors[DRAFT_PREFIX + "main_norm.weight"].to(norm.dtype)
    )
    target_norm = dict(target.named_parameters())["model.norm.weight"]
    assert not torch.equal(norm.data, target_norm.data)


#: A copy of the FP8 checkpoint with one edit -> words the load error must
#: hold. vLLM 0.32.0 checks loaded weights of unquantised models only; measured
#: without the plugin's checks of quantised loads, each of these served
#: token 0 with NaN logprobs (or other tokens) without a word.
UP_SCALE = "model.layers.0.mlp.up_proj.weight_scale"
Q_WEIGHT = "model.layers.0.self_attn.q_proj.weight"
Q_BIAS = "model.layers.0.self_attn.q_proj.bias"
FP8 = torch.float8_e4m3fn
K_WEIGHT = "model.layers.1.self_attn.k_proj.weight"
BROKEN_FP8 = {
    "no-up_proj-weight_scale": (
        lambda t: t.pop(UP_SCALE),
        [f"'{UP_SCALE}'", "fused into 'model.layers.0.mlp.gate_up_proj'"],
    ),
    "no-lm_head": (lambda t: t.pop("lm_head.weight"), ["'lm_head.weight'"]),
    "no-g_proj": (
        lambda t: t.pop("model.layers.1.self_attn.g_proj.weight"),
        ["'model.layers.1.self_attn.g_proj.weight'", "quantised or not"],
    ),
    "no-k_proj-at-all": (
        lambda t: [
            t.pop(n) for n in list(t) if n.startswith(K_WEIGHT[: -len("weight")])
        ],
        [f"'{K_WEIGHT}'", "quantised or not"],
    ),
    # 0x7F is e4m3fn's NaN code.
    "a-nan-code-in-an-fp8-weight": (
        lambda t: t.update(
            {
                K_WEIGHT: t[K_WEIGHT]
                .view(torch.uint8)
                .index_fill(0, torch.tensor([2]), 0x7F)
                .view(torch.float8_e4m3fn)
            }
        ),
        ["NaN or infinite", "'model.layers.1.self_attn.qkv_proj.weight'"],
    ),
    # The weight loader cut the 8 extra rows off without a word.
    "q_proj-with-extra-rows": (
        lambda t: t.update({Q_WEIGHT: torch.cat([t[Q_WEIGHT], t[Q_WEIGHT][:8]])}),
        [f"'{Q_WEIGHT}'", "has shape (136, 64)", "num_attention_heads*head_dim"],
    ),
    # vLLM's loader skips a bias without a parameter (GPTQ exports carry zero
    # ones, which pass); one with values would be lost.
    "a-bias-with-values-without-attention_bias": (
        lambda t: t.update({Q_BIAS: torch.ones(128, dtype=torch.bfloat16)}),
        [f"'{Q_BIAS}'", "attention_bias: true"],
    ),
    # The LM head is left out of the quantization: FP8 codes there were
    # served as numbers (absmax 416 where the head's is about 2).
    "an-unquantised-layer-in-fp8-codes": (
        lambda t: t.update({"lm_head.weight": t["lm_head.weight"].to(FP8)}),
        ["'lm_head.weight'", "its layer is not quantised"],
    ),
    "a-draft-tensor-missing": (
        lambda t: t.pop(DRAFT_PREFIX + "main_norm.weight"),
        ["lacks DSpark draft weights", f"'{DRAFT_PREFIX}main_norm.weight'"],
    ),
}


@pytest.mark.parametrize("case", list(BROKEN_FP8))
def test_a_broken_fp8_checkpoint_is_refused_naming_the_tensor(
    pair, world, tmp_path, case
):
    from safetensors.torch import load_file, save_file

    _, dst = pair
    edit, words = BROKEN_FP8[case]
    copy = tmp_path / case
    shutil.copytree(dst, copy)
    tensors = load_file(str(copy / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(copy / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError) as excinfo:
        build_dspark_models(copy, 4)
    for word in words:
        assert word in str(excinfo.value), (word, str(excinfo.value))


def test_zero_biases_of_a_quantised_checkpoint_load(pair, world, tmp_path):
    """GPTQ exports carry a zero bias for every linear layer; vLLM skips
    them, and so must the checks (a bias with values is refused above)."""
    from safetensors.torch import load_file, save_file

    _, dst = pair
    copy = tmp_path / "zero-biases"
    shutil.copytree(dst, copy)
    tensors = load_file(str(copy / "model.safetensors"))
    for name in [n for n in tensors if n.endswith("_proj.weight")]:
        rows = tensors[name].shape[0]
        tensors[name.removesuffix("weight") + "bias"] = torch.zeros(rows)
    save_file(tensors, str(copy / "model.safetensors"), metadata={"format": "pt"})
    _, _, target, _ = build_dspark_models(copy, 4)
    assert not any(name.endswith(".bias") for name, _ in target.named_parameters())


def _copy_with_kv_cache_scheme(dst: Path, copy: Path) -> tuple[dict, dict]:
    """``dst`` copied to ``copy`` with a static per-tensor fp8
    ``kv_cache_scheme`` in its quantization_config; its config and tensors
    (to be given scales and saved by the caller)."""
    from safetensors.torch import load_file

    shutil.copytree(dst, copy)
    config = _config(copy)
    config["quantization_config"]["kv_cache_scheme"] = {
        "num_bits": 8,
        "type": "float",
        "strategy": "tensor",
        "dynamic": False,
        "symmetric": True,
    }
    (copy / "config.json").write_text(json.dumps(config))
    return config, load_file(str(copy / "model.safetensors"))


def test_kv_cache_scales_load_in_the_draft_and_on_a_stage_without_the_lm_head(
    pair, world, tmp_path, monkeypatch
):
    """An FP8 checkpoint with calibrated KV-cache scales (llm-compressor's
    ``self_attn.k_scale`` / ``v_scale``). vLLM maps them onto the attention
    layers with the quantization method's name mappings, which it applies
    only where the model carries ``quant_config``: a pipeline stage without
    the LM head (simulated: the only module that carried it) refused them
    ("no module or parameter named ...self_attn.k_scale"), and so did the
    draft's own check of its tensor names."""
    from safetensors.torch import save_file
    from vllm_helpers import load_model

    from vllm_spark2_5_plugin.models import spark2_5

    _, dst = pair
    copy = tmp_path / "kv-scales"
    config, tensors = _copy_with_kv_cache_scheme(dst, copy)
    layers = [f"model.layers.{i}." for i in range(config["num_hidden_layers"])]
    layers += [f"{DRAFT_PREFIX}layers.{j}." for j in range(len(DRAFT_LAYER_TYPES))]
    for prefix in layers:
        tensors[prefix + "self_attn.k_scale"] = torch.tensor(0.05)
        tensors[prefix + "self_attn.v_scale"] = torch.tensor(0.07)
    save_file(tensors, str(copy / "model.safetensors"), metadata={"format": "pt"})

    _, _, target, draft = build_dspark_models(copy, 4, dtype="bfloat16")
    for model in (target, draft):
        attn = model.model.layers[0].self_attn.attn
        assert float(attn._k_scale) == pytest.approx(0.05), type(model)
        assert float(attn._v_scale) == pytest.approx(0.07), type(model)

    from vllm.distributed import parallel_state

    real = parallel_state.get_pp_group

    class FirstOfTwoStages:
        """The first of two pipeline stages: layers 0-1 here, 2-3 and the
        LM head on the other (whose FP8 tensors this stage must skip)."""

        is_first_rank, is_last_rank, rank_in_group, world_size = True, False, 0, 2

        def __getattr__(self, name):
            return getattr(real(), name)

    monkeypatch.setattr(spark2_5, "get_pp_group", FirstOfTwoStages)
    monkeypatch.setattr(parallel_state, "get_pp_group", FirstOfTwoStages)
    stage = load_model(copy, dtype="bfloat16")
    kinds = [type(layer).__name__ for layer in stage.model.layers]
    assert kinds[2:] == ["PPMissingLayer"] * 2, kinds
    assert type(stage.lm_head).__name__ == "PPMissingLayer"
    attn = stage.model.layers[0].self_attn.attn
    assert float(attn._k_scale) == pytest.approx(0.05)


OLD_K_SCALE = "model.layers.0.self_attn.k_proj.output_scale"
OLD_DRAFT_K_SCALE = DRAFT_PREFIX + "layers.0.self_attn.k_proj.output_scale"


def _old_layout_kv_scales(dst: Path, copy: Path, draft: bool) -> dict[str, float]:
    """``dst`` copied to ``copy`` with KV-cache scales in the layout of older
    llm-compressor releases (compressed-tensors quantised the K/V cache as the
    output of ``k_proj`` / ``v_proj``: ``self_attn.k_proj.output_scale``,
    shape ``[1]``; the ``kv_cache_scheme`` is the same); the target's (and,
    with ``draft``, the draft's) layers get one. Returns name -> value."""
    from safetensors.torch import save_file

    config, tensors = _copy_with_kv_cache_scheme(dst, copy)
    layers = [f"model.layers.{i}." for i in range(config["num_hidden_layers"])]
    if draft:
        layers += [f"{DRAFT_PREFIX}layers.{j}." for j in range(len(DRAFT_LAYER_TYPES))]
    values = {}
    for i, prefix in enumerate(layers):
        for proj, value in (("k_proj", 0.05 + i / 100), ("v_proj", 0.07 + i / 100)):
            name = f"{prefix}self_attn.{proj}.output_scale"
            tensors[name] = torch.tensor([value])
            values[name] = value
    save_file(tensors, str(copy / "model.safetensors"), metadata={"format": "pt"})
    return values


@pytest.mark.parametrize(
    ("draft", "named"), [(False, OLD_K_SCALE), (True, OLD_DRAFT_K_SCALE)]
)
def test_kv_cache_scales_of_older_llm_compressor_are_refused_naming_the_tensor(
    pair, world, tmp_path, draft, named
):
    """Older llm-compressor releases stored the KV-cache scales as
    ``self_attn.k_proj.output_scale`` / ``v_proj.output_scale``. vLLM 0.32.0's
    compressed-tensors method no longer maps that name (its in-tree Llama
    fails on it too), and the plugin's q/k/v fusion turned it into
    ``qkv_proj.output_scale``, on which vLLM's loader stopped with
    "AttributeError: 'QKVParallelLinear' object has no attribute 'data'"
    (measured). Refused instead, before any weight loader runs, in one line
    naming the tensor and the two ways out."""
    _, dst = pair
    copy = tmp_path / "old-kv-scales"
    _old_layout_kv_scales(dst, copy, draft=draft)
    if draft:  # the target's tensors in the current layout: only the draft's fail
        _rename_old_kv_scales(copy, prefix="model.layers.")
    with pytest.raises(ValueError) as excinfo:
        build_dspark_models(copy, 4, dtype="bfloat16")
    text = str(excinfo.value)
    assert "\n" not in text
    for word in (repr(named), "llm-compressor", "self_attn.{q,k,v}_scale"):
        assert word in text, (word, text)


def test_query_scale_of_older_llm_compressor_names_its_own_rename(
    pair, world, tmp_path
):
    """``q_proj.output_scale`` (a query scale) gets the rename to
    ``self_attn.q_scale``, which loads."""
    from safetensors.torch import load_file, save_file

    _, dst = pair
    copy = tmp_path / "old-q-scale"
    _copy_with_kv_cache_scheme(dst, copy)
    tensors = load_file(str(copy / "model.safetensors"))
    tensors["model.layers.0.self_attn.q_proj.output_scale"] = torch.tensor([0.5])
    save_file(tensors, str(copy / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError) as excinfo:
        build_dspark_models(copy, 4, dtype="bfloat16")
    text = str(excinfo.value)
    assert "is a query scale" in text, text
    assert "'model.layers.0.self_attn.q_scale'" in text, text


@pytest.mark.parametrize(
    ("draft", "named"), [(False, OLD_K_SCALE), (True, OLD_DRAFT_K_SCALE)]
)
def test_old_kv_cache_scales_in_an_unquantised_checkpoint_are_refused(
    tmp_path, world, draft, named
):
    """Without a quantization_config there is no KV-cache scheme, so the
    rename (which loads only under one) is not the advice: the tensors are
    to be removed, or the config restored. The draft's own name check
    answered first with its generic "no matching parameter" line."""
    from safetensors.torch import load_file, save_file

    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    path = make_tiny_checkpoint(
        tmp_path / "plain",
        dspark={"dspark_layer_types": DRAFT_LAYER_TYPES},
        dspark_prefix=DRAFT_PREFIX,
    )
    tensors = load_file(str(path / "model.safetensors"))
    tensors[named] = torch.tensor([0.05])
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError) as excinfo:
        build_dspark_models(path, 4)
    text = str(excinfo.value)
    assert "\n" not in text and repr(named) in text, text
    assert "remove these tensors" in text and "rename" not in text, text


def _rename_old_kv_scales(path: Path, prefix: str) -> None:
    """The fix the error proposes, applied to the tensors under ``prefix``."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path / "model.safetensors"))
    for name in [n for n in tensors if n.startswith(prefix)]:
        for proj in ("k", "v"):
            old = f".self_attn.{proj}_proj.output_scale"
            if name.endswith(old):
                new = name.removesuffix(old) + f".self_attn.{proj}_scale"
                tensors[new] = tensors.pop(name)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})


def test_kv_cache_scales_renamed_as_the_error_says_load(pair, world, tmp_path):
    """The rename the refusal above proposes gives a checkpoint whose scales
    land on the attention layers."""
    _, dst = pair
    copy = tmp_path / "renamed-kv-scales"
    values = _old_layout_kv_scales(dst, copy, draft=False)
    _rename_old_kv_scales(copy, prefix="")
    _, _, target, _ = build_dspark_models(copy, 4, dtype="bfloat16")
    _assert_old_scales_loaded(target, "model.layers.", values)


def _assert_old_scales_loaded(model, layers: str, values: dict[str, float]) -> None:
    """Each attention layer of ``model`` holds the k/v scales ``values`` gave
    its checkpoint layer (``layers`` + index) as ``k_proj.output_scale`` /
    ``v_proj.output_scale``."""
    for i, layer in enumerate(model.model.layers):
        attn = layer.self_attn.attn
        prefix = f"{layers}{i}.self_attn."
        assert float(attn._k_scale) == pytest.approx(
            values[prefix + "k_proj.output_scale"]
        )
        assert float(attn._v_scale) == pytest.approx(
            values[prefix + "v_proj.output_scale"]
        )


@pytest.mark.parametrize("draft", [False, True])
def test_older_kv_cache_scales_load_where_the_method_maps_them(
    pair, world, tmp_path, monkeypatch, draft
):
    """Where the quantization method maps ``k_proj.output_scale`` onto the
    attention layer (vLLM 0.32.0's ``fp8`` and ``quark`` methods do; an
    in-tree model such as Llama then loads it), the target and the draft
    load it the same way: simulated by giving compressed-tensors the ``fp8``
    method's mapping. Before, the plugin's q/k/v fusion renamed the tensor to
    ``qkv_proj.output_scale`` before the method's mapping could see it."""
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (  # noqa: E501
        CompressedTensorsConfig,
    )
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    monkeypatch.setattr(
        CompressedTensorsConfig,
        "get_cache_scale_mapper",
        staticmethod(Fp8Config.get_cache_scale_mapper),
    )
    _, dst = pair
    copy = tmp_path / "old-kv-scales-mapped"
    values = _old_layout_kv_scales(dst, copy, draft=draft)
    _, _, target, drafter = build_dspark_models(copy, 4, dtype="bfloat16")
    models = [(target, "model.layers.")]
    if draft:
        models.append((drafter, DRAFT_PREFIX + "layers."))
    for model, layers in models:
        _assert_old_scales_loaded(model, layers, values)


# -- served by vLLM (CPU build) ---------------------------------------------------


def _teacher_forced(model: Path, sequences: list[list[int]]) -> list[list[dict]]:
    """Per sequence, per position t >= 1: {token id: logprob} of vLLM's
    prompt logprobs (the top-1 and the sequence's own token)."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=1)
    outputs, _ = run_llm(
        model, sequences, params, **LLM_KWARGS, distributed_executor_backend="uni"
    )
    return [
        [{t: lp.logprob for t, lp in step.items()} for step in out.prompt_logprobs[1:]]
        for out in outputs
    ]


def _fp8_reference_logprobs(
    dst: Path, sequences: list[list[int]]
) -> list[torch.Tensor]:
    """Log-softmax rows of the reference on the FP8 checkpoint's meaning:
    dequantized weights, and each quantized projection's input rounded to FP8
    per token (FP8_DYNAMIC), as vLLM computes it."""
    from vllm_spark2_5_plugin.references import layers
    from vllm_spark2_5_plugin.references.layers import read_checkpoint
    from vllm_spark2_5_plugin.references.spark2_5 import Spark2_5Reference

    config, weights = read_checkpoint(dst)
    fp8_inputs = {n.removesuffix(".weight") for n in weights if quantized_linear(n)}
    plain = layers.linear

    def linear(x, w, name, bias):
        if name in fp8_inputs:
            scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / FP8_MAX
            q = (x / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            x = q.to(x.dtype) * scale
        return plain(x, w, name, bias)

    ref = Spark2_5Reference(config, dequantize(weights), dtype=torch.float32)
    mp = pytest.MonkeyPatch()
    mp.setattr(layers, "linear", linear)
    try:
        return [torch.log_softmax(ref.logits(s), dim=-1)[:-1] for s in sequences]
    finally:
        mp.undo()


@pytest.mark.slow
def test_vllm_cpu_serves_the_fp8_checkpoint_close_to_the_source(pair):
    """Greedy continuations of the source define the sequences; on them
    (teacher forcing) vLLM's FP8 model must pick the same next token almost
    everywhere and give the source's token nearly the same logprob, and it
    must match the FP8 reference closely."""
    from vllm_helpers import greedy_generate

    src, dst = pair
    greedy_src = greedy_generate(src, PROMPTS, MAX_TOKENS, logprobs=1)
    greedy_fp8 = greedy_generate(dst, PROMPTS, MAX_TOKENS, logprobs=1)
    sequences = [p + toks for p, (toks, _) in zip(PROMPTS, greedy_src, strict=True)]
    tf_src = _teacher_forced(src, sequences)
    tf_fp8 = _teacher_forced(dst, sequences)
    ref = _fp8_reference_logprobs(dst, sequences)

    agree = ref_agree = 0
    diffs, ref_diffs = [], []
    for seq, rows_src, rows_fp8, rows_ref in zip(
        sequences, tf_src, tf_fp8, ref, strict=True
    ):
        for t, (a, b) in enumerate(zip(rows_src, rows_fp8, strict=True)):
            token = seq[t + 1]
            top_fp8 = max(b, key=b.get)
            agree += max(a, key=a.get) == top_fp8
            diffs.append(abs(a[token] - b[token]))
            ref_agree += int(rows_ref[t].argmax()) == top_fp8
            ref_diffs.append(abs(float(rows_ref[t][token]) - b[token]))
    total = len(diffs)
    diffs_t, ref_t = torch.tensor(diffs), torch.tensor(ref_diffs)
    prefix = [
        next(
            (i for i, (x, y) in enumerate(zip(s[0], f[0], strict=True)) if x != y),
            MAX_TOKENS,
        )
        for s, f in zip(greedy_src, greedy_fp8, strict=True)
    ]
    print(
        f"\nvLLM CPU, teacher-forced over {total} positions. FP8 vs fp32 source: "
        f"top-1 agreement {agree / total:.4f}, |dlogprob| of the source's token "
        f"mean {float(diffs_t.mean()):.4f} max {float(diffs_t.max()):.4f}; greedy "
        f"identical prefix {sum(prefix)}/{MAX_TOKENS * len(PROMPTS)} tokens "
        f"(per prompt {prefix}). FP8 vs FP8 reference: top-1 {ref_agree / total:.4f}, "
        f"|dlogprob| median {float(ref_t.median()):.2e} max {float(ref_t.max()):.4f}"
    )
    # vLLM computes what the FP8 checkpoint means: at most positions to float32
    # rounding; where an activation lands on an FP8 rounding boundary the two
    # round apart, and the random tiny model amplifies that (measured: top-1
    # 0.984, median 3e-6, max 0.36).
    assert ref_agree / total >= 0.97
    assert float(ref_t.median()) < 1e-4
    assert float(ref_t.max()) < 0.75
    # ... and that stays close to the unquantized model (measured: top-1
    # 0.916, mean 0.20, max 1.19 on this deliberately sensitive random model).
    assert agree / total >= 0.85
    assert float(diffs_t.mean()) < 0.3
    assert float(diffs_t.max()) < 2.0
    # Greedy decoding keeps the first tokens (the tiny random model has many
    # near-ties, so long continuations drift apart).
    assert min(prefix) >= 1


def test_the_tool_refuses_what_it_cannot_quantize_before_any_work(tmp_path, capsys):
    """Each used to end in a traceback from deep inside the run, or (another
    model type, an output inside the input) to go ahead."""
    from vllm_spark2_5_plugin.tools.quantize_fp8 import main
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    src = make_tiny_checkpoint(tmp_path / "src")
    config = json.loads((src / "config.json").read_text())

    def variant(name, edit):
        path = tmp_path / name
        shutil.copytree(src, path)
        edit(path)
        return path

    def write_config(path, text):
        (path / "config.json").write_text(text)

    cases = {
        "not valid JSON": variant("bad-json", lambda p: write_config(p, "{")),
        "not a Spark2_5 checkpoint (model_type 'llama'": variant(
            "llama",
            lambda p: write_config(p, json.dumps({**config, "model_type": "llama"})),
        ),
        "is already quantized": variant(
            "quantized",
            lambda p: write_config(
                p,
                json.dumps({**config, "quantization_config": {"quant_method": "fp8"}}),
            ),
        ),
        "has no model.safetensors": variant(
            "no-weights", lambda p: (p / "model.safetensors").unlink()
        ),
    }
    for message, path in cases.items():
        with pytest.raises(SystemExit):
            main([str(path), str(tmp_path / f"out-{path.name}")])
        assert message in capsys.readouterr().err, message
        assert not (tmp_path / f"out-{path.name}").exists()
    with pytest.raises(SystemExit):
        main([str(src), str(src / "fp8")])
    assert "must not contain or be inside the input" in capsys.readouterr().err
    assert not (src / "fp8").exists()


def test_the_tool_without_llm_compressor_says_where_to_get_it(
    tmp_path, capsys, monkeypatch
):
    """Run from vLLM's environment it used to end in a ModuleNotFoundError
    traceback."""
    import importlib.util

    from vllm_spark2_5_plugin.tools.quantize_fp8 import main
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llmcompressor" else real(name, *a),
    )
    src = make_tiny_checkpoint(tmp_path / "src")
    with pytest.raises(SystemExit):
        main([str(src), str(tmp_path / "out")])
    said = capsys.readouterr().err
    assert "llm-compressor is not installed" in said and "tools/llmc-env.sh" in said
    assert not (tmp_path / "out").exists()


def test_the_tool_never_writes_over_its_input(tmp_path, capsys):
    """Output == input used to overwrite the source checkpoint's weights and
    config before failing on a file copy. Refused before any work now (no
    llm-compressor needed to get there)."""
    from vllm_spark2_5_plugin.tools.quantize_fp8 import check_directories, main
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    src = make_tiny_checkpoint(tmp_path / "src")
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    for dst in (src, tmp_path / "src" / ".." / "src"):
        with pytest.raises(SystemExit):
            main([str(src), str(dst)])
        assert "must differ from the input" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="exists and is not an empty directory"):
        check_directories(src, busy)
    with pytest.raises(ValueError, match="not a checkpoint directory"):
        check_directories(tmp_path / "missing", tmp_path / "out")
    # A file, or a path below one, is refused before any work (it failed
    # when the quantized weights were saved, after the whole run).
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a directory"):
        check_directories(src, tmp_path / "afile")
    with pytest.raises(ValueError, match="afile is a file, not a directory"):
        check_directories(src, tmp_path / "afile" / "sub")
    check_directories(src, tmp_path / "new")  # a new directory is fine
    (tmp_path / "empty").mkdir()
    check_directories(src, tmp_path / "empty")


# -- a source the tool cannot quantize faithfully ------------------------------------


def _edit_tensors(path: Path, edit) -> None:
    """Rewrite ``path``'s single ``model.safetensors`` with ``edit`` applied
    to its tensors (a dict it changes in place)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})


def _shard(path: Path, index_text: str | None = None, drop_second=False) -> None:
    """Split ``path``'s weights into two shards and an index (its text
    replaced by ``index_text`` if given); ``drop_second`` deletes shard 2."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path / "model.safetensors"))
    (path / "model.safetensors").unlink()
    names = sorted(tensors)
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    halves = (names[: len(names) // 2], names[len(names) // 2 :])
    weight_map = {}
    for file, half in zip(files, halves, strict=True):
        save_file({n: tensors[n] for n in half}, str(path / file))
        weight_map |= dict.fromkeys(half, file)
    index = json.dumps({"metadata": {}, "weight_map": weight_map})
    (path / "model.safetensors.index.json").write_text(index_text or index)
    if drop_second:
        (path / files[1]).unlink()


def _drop(*names: str):
    return lambda p: _edit_tensors(p, lambda t: [t.pop(n) for n in names])


def _resize(name: str, *shape: int):
    return lambda p: _edit_tensors(p, lambda t: t.update({name: torch.ones(shape)}))


def _set_config(**fields):
    def edit(path: Path) -> None:
        raw = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**raw, **fields}))

    return edit


def _unset_config(name: str):
    def edit(path: Path) -> None:
        raw = json.loads((path / "config.json").read_text())
        del raw[name]
        (path / "config.json").write_text(json.dumps(raw))

    return edit


SOURCE_REFUSALS = {
    "no-norm": (
        _drop("model.norm.weight"),
        "lacks the tensor model.norm.weight ((64,) = (hidden_size)) that vLLM reads",
    ),
    "no-k-proj": (
        _drop("model.layers.2.self_attn.k_proj.weight"),
        "lacks the tensor model.layers.2.self_attn.k_proj.weight ((64, 64) = "
        "(num_key_value_heads*head_dim, hidden_size))",
    ),
    "no-lm-head": (
        _drop("lm_head.weight"),
        "lacks the tensor lm_head.weight ((512, 64) = (vocab_size, hidden_size)) "
        "that vLLM reads; if the LM head is the input embedding, set "
        "tie_word_embeddings: true",
    ),
    "two-missing": (
        _drop("model.norm.weight", "model.layers.0.input_layernorm.weight"),
        "(2 tensors missing)",
    ),
    "norm-shape": (
        _resize("model.norm.weight", 65),
        "model.norm.weight in {src}/model.safetensors has shape (65,), but "
        "config.json gives (64,) = (hidden_size)",
    ),
    "no-head_dim": (
        _unset_config("head_dim"),
        "config.json gives (512, 64) = "
        "(num_attention_heads*head_dim, hidden_size): the checkpoint and config.json "
        "disagree; fix whichever is wrong; head_dim is not in config.json: its "
        "default, 128, applies",
    ),
    "draft-missing": (
        _drop(f"{DRAFT_PREFIX}layers.1.mlp.up_proj.weight"),
        f"lacks the tensor {DRAFT_PREFIX}layers.1.mlp.up_proj.weight ((128, 64) = "
        "(intermediate_size, hidden_size))",
    ),
    "draft-shape": (
        _resize(f"{DRAFT_PREFIX}markov_head.markov_w1.weight", 512, 4),
        f"{DRAFT_PREFIX}markov_head.markov_w1.weight in {{src}}/model.safetensors "
        "has shape (512, 4), but config.json gives (512, 8) = (vocab_size, "
        "dspark_markov_rank)",
    ),
    "draft-config": (
        _set_config(dspark_target_layer_ids=[9]),
        "{src}/config.json: dspark_target_layer_ids",
    ),
    "config-field": (
        _set_config(num_attention_heads=3),
        "{src}/config.json: num_attention_heads (3) must be divisible by "
        "num_key_value_heads (2)",
    ),
    "index-missing-shard": (
        lambda p: _shard(p, drop_second=True),
        "{src}/model.safetensors.index.json names the weight file "
        "model-00002-of-00002.safetensors, which {src} lacks",
    ),
    "index-not-json": (
        lambda p: _shard(p, index_text="{"),
        "{src}/model.safetensors.index.json is not valid JSON",
    ),
    "index-no-map": (
        lambda p: _shard(p, index_text='{"metadata": {}}'),
        "{src}/model.safetensors.index.json has no weight_map",
    ),
    "truncated": (
        lambda p: (p / "model.safetensors").write_bytes(b"\x10\x00"),
        "{src}/model.safetensors is not a readable safetensors file",
    ),
}


@pytest.fixture(scope="module")
def draft_source(tmp_path_factory) -> Path:
    """A complete source with a DSpark draft (as ``pair``'s), to be broken."""
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(
        tmp_path_factory.mktemp("fp8-sources") / "src",
        dspark={"dspark_layer_types": DRAFT_LAYER_TYPES},
        dspark_prefix=DRAFT_PREFIX,
    )


def _broken(draft_source: Path, tmp_path: Path, case: str) -> tuple[Path, str]:
    edit, message = SOURCE_REFUSALS[case]
    src = tmp_path / "src"
    shutil.copytree(draft_source, src)
    edit(src)
    return src, message.replace("{src}", str(src))


@pytest.mark.parametrize("case", sorted(SOURCE_REFUSALS))
def test_the_tool_refuses_an_incomplete_or_misshapen_source_before_any_work(
    draft_source, tmp_path, capsys, case
):
    """Each used to end in a traceback from inside the run (a shard the index
    names, a malformed index), or, for a missing or misshapen tensor, to be
    quantized into an FP8 checkpoint that vLLM served with NaN or garbage."""
    from vllm_spark2_5_plugin.tools.quantize_fp8 import main

    src, message = _broken(draft_source, tmp_path, case)
    with pytest.raises(SystemExit):
        main([str(src), str(tmp_path / "out")])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in error, error
    assert not (tmp_path / "out").exists()


def test_the_source_check_runs_in_llm_compressors_environment(
    llmc_python, draft_source, tmp_path
):
    """The tool runs without vLLM; the table of tensors it checks against is
    the one vLLM's loader checks (models/checkpoint_tables.py), which must
    import no vLLM."""
    src, message = _broken(draft_source, tmp_path, "draft-missing")
    run = subprocess.run(
        [str(llmc_python), "-m", "vllm_spark2_5_plugin.tools.quantize_fp8"]
        + [str(src), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        timeout=300,
    )
    assert run.returncode == 2, run.stderr
    assert message in run.stderr.strip().splitlines()[-1], run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists()
