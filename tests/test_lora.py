# SPDX-License-Identifier: Apache-2.0
"""LoRA adapters on Spark2_5ForCausalLM, through the real vLLM 0.32.0 CPU engine.

The tests write PEFT-format adapters (``adapter_config.json`` +
``adapter_model.safetensors``, PEFT's tensor names) with random non-zero A and
B for the tiny checkpoint. What vLLM generates with an adapter must equal the
pure-PyTorch reference run on a checkpoint whose weights have the adapter
merged in, ``W + (alpha / r) B A``, with the base-model parity test's
tolerances.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_generation_parity import LOGPROB_ATOL, assert_matches_reference, prompts
from vllm_helpers import (
    LLM_KWARGS,
    gpu_vllm_available,
    greedy_params,
    llm_engine,
    run_python,
    vllm_server,
)

from vllm_spark2_5_plugin.references.spark2_5 import Spark2_5Reference

# vLLM's GPU LoRA kernels take 16-bit activations, and the plugin refuses
# float32 with --enable-lora there; the GPU's LoRA test is
# tests/test_lora_gpu.py (bf16, teacher-forced against the same merged-weights
# reference), which imports this module's helpers, so a mark, not a
# module-level skip.
pytestmark = pytest.mark.skipif(
    gpu_vllm_available(),
    reason="float32 LoRA runs on the CPU build only; on GPUs see test_lora_gpu.py",
)

MAX_TOKENS = 12
RANK = 8
# Every linear layer of a decoder layer, by its checkpoint (PEFT) name.
TARGET_MODULES = (
    "q_proj",
    "k_proj",
    "v_proj",
    "g_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)


def write_peft_adapter(
    path: Path,
    checkpoint: Path,
    *,
    seed: int,
    lora_alpha: int = 16,
    target_modules: tuple[str, ...] = TARGET_MODULES,
    draft_tensor: bool = False,
) -> Path:
    """Write a PEFT LoRA adapter for ``checkpoint`` to ``path``.

    A and B are random and non-zero (PEFT initialises B to zero; a trained
    adapter's is not). ``draft_tensor`` adds a LoRA pair for a DSpark draft
    module, which the target must ignore.
    """
    base = load_file(str(checkpoint / "model.safetensors"))
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, weight in base.items():
        module, _, leaf = name.rpartition(".")
        if leaf != "weight" or module.rpartition(".")[2] not in target_modules:
            continue
        out_features, in_features = weight.shape
        # (alpha / r) B A comes out at ~10-15% of W's norm: enough to change
        # the greedy tokens (checked below), small enough to stay a fine-tune.
        a = torch.randn(RANK, in_features, generator=gen) / in_features**0.5
        b = torch.randn(out_features, RANK, generator=gen) * 0.02
        tensors[f"base_model.model.{module}.lora_A.weight"] = a
        tensors[f"base_model.model.{module}.lora_B.weight"] = b
    if draft_tensor:
        hidden = base["model.embed_tokens.weight"].shape[1]
        draft = "base_model.model.draft_model.layers.0.self_attn.q_proj"
        tensors[f"{draft}.lora_A.weight"] = torch.ones(RANK, hidden)
        tensors[f"{draft}.lora_B.weight"] = torch.ones(hidden, RANK)
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(checkpoint),
        "r": RANK,
        "lora_alpha": lora_alpha,
        "lora_dropout": 0.0,
        "target_modules": list(target_modules),
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "modules_to_save": None,
    }
    (path / "adapter_config.json").write_text(json.dumps(config, indent=2))
    return path


def merge_adapter(checkpoint: Path, adapter: Path, out: Path) -> Path:
    """A copy of ``checkpoint`` (float64) with ``W += (alpha / r) B A`` for every
    LoRA pair of ``adapter`` that names a checkpoint weight, as PEFT merges."""
    config = json.loads((adapter / "adapter_config.json").read_text())
    scale = config["lora_alpha"] / config["r"]
    weights = {
        name: tensor.double()
        for name, tensor in load_file(str(checkpoint / "model.safetensors")).items()
    }
    lora = load_file(str(adapter / "adapter_model.safetensors"))
    for key, a in lora.items():
        if not key.endswith(".lora_A.weight"):
            continue
        module = key.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
        if f"{module}.weight" not in weights:  # e.g. a draft module
            continue
        b = lora[key.replace(".lora_A.", ".lora_B.")]
        weights[f"{module}.weight"] += scale * (b.double() @ a.double())
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(checkpoint / "config.json", out / "config.json")
    save_file(weights, str(out / "model.safetensors"))
    return out


@pytest.fixture(scope="module")
def prompt_ids() -> list[list[int]]:
    return prompts()


@pytest.fixture(scope="module")
def adapters(tiny_checkpoint, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Two adapters (the second also carries a draft module's tensors), each
    with the checkpoint it merges into: ``{name: (adapter, merged)}``."""
    root = tmp_path_factory.mktemp("lora")
    made = {}
    for name, seed, draft in (("first", 1, False), ("second", 2, True)):
        adapter = write_peft_adapter(
            root / name, tiny_checkpoint, seed=seed, draft_tensor=draft
        )
        made[name] = (
            adapter,
            merge_adapter(tiny_checkpoint, adapter, root / f"{name}-merged"),
        )
    return made


def lora_generate(model: Path, requests, max_tokens: int = MAX_TOKENS, **llm_kwargs):
    """Greedy tokens and top-5 logprobs per step for ``(prompt, LoRARequest or
    None)`` pairs, all in one ``vllm.LLM`` batch (in-process, float32 and
    eager unless ``llm_kwargs`` say otherwise)."""
    from vllm.inputs import TokensPrompt

    kwargs = {
        **LLM_KWARGS,
        "distributed_executor_backend": "uni",
        "enable_lora": True,
        "max_lora_rank": RANK,
        **llm_kwargs,
    }
    with llm_engine(model, **kwargs) as llm:
        outputs = llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p, _ in requests],
            greedy_params(max_tokens),
            lora_request=[lora for _, lora in requests],
            use_tqdm=False,
        )
    return [
        (
            list(out.outputs[0].token_ids),
            [
                {t: lp.logprob for t, lp in step.items()}
                for step in out.outputs[0].logprobs
            ],
        )
        for out in outputs
    ]


def lora_request(name: str, lora_id: int, path: Path):
    from vllm.lora.request import LoRARequest

    return LoRARequest(name, lora_id, str(path))


def test_adapter_deltas_change_the_reference(tiny_checkpoint, adapters, prompt_ids):
    """Guards the parity tests: merged weights give other greedy tokens."""
    base = Spark2_5Reference.from_checkpoint(tiny_checkpoint)
    for _, merged in adapters.values():
        with_lora = Spark2_5Reference.from_checkpoint(merged)
        ids = prompt_ids[0]
        gap = (with_lora.logits(ids) - base.logits(ids)).abs().max()
        assert gap > 0.5
        assert with_lora.greedy(ids, MAX_TOKENS)[0] != base.greedy(ids, MAX_TOKENS)[0]


@pytest.mark.slow
def test_one_adapter_matches_merged_reference(tiny_checkpoint, adapters, prompt_ids):
    adapter, merged = adapters["first"]
    request = lora_request("first", 1, adapter)
    results = lora_generate(tiny_checkpoint, [(p, request) for p in prompt_ids])
    assert all(len(tokens) == MAX_TOKENS for tokens, _ in results)
    assert_matches_reference(merged, results, prompt_ids)


@pytest.mark.slow
def test_two_adapters_and_base_in_one_batch(tiny_checkpoint, adapters, prompt_ids):
    """Each request of a mixed batch sees exactly its own weights."""
    first, second = (
        lora_request(name, i, adapters[name][0])
        for i, name in enumerate(("first", "second"), start=1)
    )
    p0, p1 = prompt_ids
    batch = [(p0, first), (p0, second), (p0, None), (p1, second), (p1, None)]
    # One LoRA slot more than adapters: vLLM 0.32.0's CPU LoRA ops read the
    # no-adapter index -1 as "the last slot", so a base request gets whatever
    # adapter sits there (upstream bug, vllm-project/vllm PR 48421).
    results = lora_generate(tiny_checkpoint, batch, max_loras=3)
    expected = {first: adapters["first"][1], second: adapters["second"][1]}
    for (prompt, lora), result in zip(batch, results, strict=True):
        model = tiny_checkpoint if lora is None else expected[lora]
        assert_matches_reference(model, [result], [prompt])
    # Against the base request on the same prompt, each adapter changed the
    # tokens and the first step's logprob of the base model's greedy token.
    base_tokens, base_steps = results[2]
    token = base_tokens[0]
    for tokens, steps in results[:2]:
        assert tokens != base_tokens
        moved = steps[0].get(token)
        assert moved is None or abs(moved - base_steps[0][token]) > 100 * LOGPROB_ATOL


@pytest.mark.slow
def test_adapter_for_the_lm_head_is_refused(tiny_checkpoint, prompt_ids, tmp_path):
    """No LoRA on the LM head or embedding: vLLM refuses the adapter when it
    loads it, listing the modules that do take LoRA (the head gate among them)."""
    adapter = write_peft_adapter(
        tmp_path / "lm-head", tiny_checkpoint, seed=5, target_modules=("lm_head",)
    )
    expected = (
        r"expected target modules in \{[^}]*'g_proj'[^}]*\} but received \['lm_head'"
    )
    with pytest.raises(ValueError, match=expected):
        lora_generate(
            tiny_checkpoint, [(prompt_ids[0], lora_request("lm-head", 1, adapter))]
        )


def as_results(choice_tokens, choice_steps):
    """JSON-decoded ``(tokens, [{token: logprob}])`` with integer token ids."""
    return (
        [int(t) for t in choice_tokens],
        [{int(t): lp for t, lp in step.items()} for step in choice_steps],
    )


# A separate interpreter: TP=2 needs vLLM's multiprocess executor, whose
# spawned workers must discover the plugin and build its LoRA layers.
TP2_SCRIPT = """
import json, sys
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
from vllm.lora.request import LoRARequest

if __name__ == "__main__":
    path, requests, max_tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    llm = LLM(
        path, dtype="float32", enforce_eager=True, max_model_len=512, seed=0,
        tensor_parallel_size=2, enable_lora=True, max_lora_rank=8, max_loras=2,
    )
    params = SamplingParams(
        temperature=0.0, max_tokens=max_tokens, logprobs=5, ignore_eos=True
    )
    ids = {}
    loras = [
        LoRARequest(name, ids.setdefault(name, len(ids) + 1), adapter)
        for _, name, adapter in requests
    ]
    outs = llm.generate(
        [TokensPrompt(prompt_token_ids=p) for p, _, _ in requests],
        params, lora_request=loras, use_tqdm=False,
    )
    print("RESULTS=" + json.dumps([
        [list(o.outputs[0].token_ids),
         [{t: lp.logprob for t, lp in s.items()} for s in o.outputs[0].logprobs]]
        for o in outs
    ]))
"""


@pytest.mark.ranks(2)
@pytest.mark.slow
def test_two_adapters_under_tensor_parallelism(tiny_checkpoint, adapters, prompt_ids):
    """TP=2 slices B (column-parallel q/k/v, g_proj, gate/up) and A (row-parallel
    o_proj, down_proj) per rank; each request still matches its merged weights."""
    p0, p1 = prompt_ids
    requests = [(p0, "first"), (p1, "second")]
    result = run_python(
        TP2_SCRIPT,
        # One OpenMP thread per rank; the default binding fails on 2 cores.
        env={"VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_CPU_OMP_THREADS_BIND": "0|1"},
        timeout=900,
        args=[
            str(tiny_checkpoint),
            json.dumps([(p, n, str(adapters[n][0])) for p, n in requests]),
            str(MAX_TOKENS),
        ],
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULTS="))
    results = [as_results(*r) for r in json.loads(line.removeprefix("RESULTS="))]
    for (prompt, name), got in zip(requests, results, strict=True):
        assert len(got[0]) == MAX_TOKENS
        assert_matches_reference(adapters[name][1], [got], [prompt])


def post_json(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


@pytest.fixture
def lora_server(tiny_checkpoint, adapters, tmp_path):
    """``vllm serve`` with ``--enable-lora --lora-modules first=PATH``."""
    args = [
        "--dtype", "float32", "--enforce-eager", "--max-model-len", "512",
        "--enable-lora", "--max-lora-rank", str(RANK),
        "--lora-modules", f"first={adapters['first'][0]}",
    ]  # fmt: skip
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    with vllm_server(tiny_checkpoint, args, tmp_path / "server.log", env=env) as s:
        yield s["base"]


@pytest.mark.slow
def test_served_adapter_matches_merged_reference(lora_server, adapters, prompt_ids):
    """The OpenAI server's ``--lora-modules`` adapter is a model of its own."""
    with urllib.request.urlopen(lora_server + "/v1/models", timeout=30) as r:
        served = {m["id"] for m in json.loads(r.read())["data"]}
    assert "first" in served
    prompt = prompt_ids[0]
    body = post_json(
        lora_server + "/v1/completions",
        {
            "model": "first",
            "prompt": prompt,
            "max_tokens": MAX_TOKENS,
            "temperature": 0.0,
            "logprobs": 5,
            "ignore_eos": True,
            "return_tokens_as_token_ids": True,
        },
    )
    logprobs = body["choices"][0]["logprobs"]
    got = as_results(
        [t.removeprefix("token_id:") for t in logprobs["tokens"]],
        [
            {t.removeprefix("token_id:"): lp for t, lp in step.items()}
            for step in logprobs["top_logprobs"]
        ],
    )
    assert len(got[0]) == MAX_TOKENS
    assert_matches_reference(adapters["first"][1], [got], [prompt])
