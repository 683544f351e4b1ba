# SPDX-License-Identifier: Apache-2.0
"""On a GPU: a trained draft is accepted inside vLLM exactly as the references
predict offline.

The draft of a tiny Spark2_5 checkpoint is trained on the target's own greedy
continuations (``spark2_5-train-dspark``, vLLM generating them). vLLM then
serves the same prompts with DSpark, and its measured mean acceptance length
(``1 + accepted / drafts`` from its spec-decode counters) is compared with the
acceptance length that the pure-PyTorch references predict by replaying
greedy speculative decoding over vLLM's own output sequences. They must agree
within 3%; the draft must also be accepted often enough for the comparison to
mean something.

With ``--kv-cache-dtype fp8`` (target and draft caches in fp8 e4m3, the draft's
sliding layers read through the fixed-history kernel's fp8 path) the same
comparison must hold within ``FP8_TOLERANCE``: the references predict from
vLLM's own outputs without quantization, so the only gap is what fp8 rounding
of the cached keys and values (and serving the float16 checkpoint in bfloat16,
which FlashAttention 3 needs for fp8 caches) does to the draft's choices. A draft that
misread its fp8 cache would lose most of its acceptance.

The same comparison runs on a draft trained elsewhere (the ~1B ``small``
preset of ``benchmarks/dspark_serving.md``): ``SPARK2_5_ACCEPTANCE_CHECKPOINT``
names the trained checkpoint and ``SPARK2_5_ACCEPTANCE_SEQUENCES`` the file that
``spark2_5-train-dspark --save-sequences`` wrote; the first prompts of that file
(its held-out ones, then training ones) are served, ``SPARK2_5_ACCEPTANCE_PROMPTS``
of them (default 48). With 48 requests at once the draft's fixed-history
attention splits each request's keys and runs the Triton kernel; from about
128 requests on (D = 128, 4 query heads per KV head, one split) it runs the
Gluon kernel, whose fp8 scores (q rounded to e4m3 for ``Q K^T``; off under
``SPARK2_5_GLUON=f16-scores``) only then take part.

Skipped without CUDA and a CUDA build of vLLM. Results also go to
``$SPARK2_5_ORACLE_OUT/acceptance.json`` when that variable is set.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from vllm_helpers import run_llm, skip_without_gpu_vllm

pytestmark = [pytest.mark.cuda, pytest.mark.slow]


skip_without_gpu_vllm()

NUM_PROMPTS = int(os.environ.get("SPARK2_5_ACCEPTANCE_PROMPTS", "48"))
PROMPT_LEN = 48
GEN_LEN = 192
TOLERANCE = 0.03
FP8_TOLERANCE = 0.06


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, list[list[int]], list[list[int]]]:
    """(checkpoint, prompts, the target's continuations the draft trained on)."""
    given = os.environ.get("SPARK2_5_ACCEPTANCE_CHECKPOINT")
    if given:
        return _given_checkpoint(Path(given))
    import torch

    from vllm_spark2_5_plugin.names import FULL, SLIDING
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint
    from vllm_spark2_5_plugin.tools.train_dspark import train

    root = tmp_path_factory.mktemp("dspark-acceptance")
    target = make_tiny_checkpoint(
        root / "target",
        dtype=torch.float16,
        dspark={
            "dspark_layer_types": [SLIDING, FULL],
            "dspark_markov_head_type": "rnn",
            "dspark_enable_confidence_head": True,
        },
        dspark_prefix="mtp.",
    )
    out, sequences = root / "trained", root / "sequences.json"
    options = {
        "--num-prompts": NUM_PROMPTS,
        "--eval-prompts": 0,
        "--prompt-len": PROMPT_LEN,
        "--gen-len": GEN_LEN,
        "--steps": 600,
        "--seed": 0,
        "--device": "cuda",
        "--dtype": "float32",
        "--continuations": "vllm",
        "--save-sequences": sequences,
    }
    train([str(target), str(out), *(str(x) for kv in options.items() for x in kv)])
    saved = json.loads(sequences.read_text())
    p = saved["prompt_len"]
    return out, [s[:p] for s in saved["sequences"]], [s[p:] for s in saved["sequences"]]


def _given_checkpoint(path: Path) -> tuple[Path, list[list[int]], list[list[int]]]:
    """A draft trained outside this test, with the sequences it trained on."""
    name = os.environ.get("SPARK2_5_ACCEPTANCE_SEQUENCES")
    if not name:
        pytest.fail(
            "SPARK2_5_ACCEPTANCE_CHECKPOINT needs SPARK2_5_ACCEPTANCE_SEQUENCES: the "
            "file written by spark2_5-train-dspark --save-sequences"
        )
    saved = json.loads(Path(name).read_text())
    sequences, p = saved["sequences"][:NUM_PROMPTS], int(saved["prompt_len"])
    if len(sequences) < NUM_PROMPTS:
        pytest.fail(f"{name}: {len(sequences)} sequences, {NUM_PROMPTS} needed")
    return path, [s[:p] for s in sequences], [s[p : p + GEN_LEN] for s in sequences]


def _serve(path: Path, prompts: list[list[int]], num_spec: int, kv_cache_dtype: str):
    from vllm import SamplingParams

    # FlashAttention 3 (vLLM's backend on Hopper) reads fp8 caches only with
    # bfloat16 queries and outputs; it refuses float16 models ("For FP8 input,
    # output must have dtype BF16"), so the fp8 run serves in bfloat16.
    dtype = "auto" if kv_cache_dtype == "auto" else "bfloat16"
    outputs, metrics = run_llm(
        path,
        prompts,
        SamplingParams(temperature=0.0, max_tokens=GEN_LEN, ignore_eos=True),
        max_model_len=1024,
        gpu_memory_utilization=0.3,
        seed=0,
        speculative_config={"method": "dspark", "num_speculative_tokens": num_spec},
        kv_cache_dtype=kv_cache_dtype,
        dtype=dtype,
        disable_log_stats=False,
    )
    return [list(o.outputs[0].token_ids) for o in outputs], metrics


def _counter(metrics, name: str) -> float:
    metric = metrics[name]
    return float(getattr(metric, "value", 0))


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8"])
def test_vllm_acceptance_equals_offline_prediction(trained, kv_cache_dtype):
    import torch

    from vllm_spark2_5_plugin.tools.dspark_acceptance import checkpoint_acceptance

    path, prompts, trained_on = trained
    num_spec = json.loads((path / "config.json").read_text())["dspark_block_size"]
    outputs, metrics = _serve(path, prompts, num_spec, kv_cache_dtype)
    drafts = _counter(metrics, "vllm:spec_decode_num_drafts")
    accepted = _counter(metrics, "vllm:spec_decode_num_accepted_tokens")
    measured = 1.0 + accepted / drafts

    sequences = [p + o for p, o in zip(prompts, outputs, strict=True)]
    offline = checkpoint_acceptance(
        path, sequences, [len(p) for p in prompts], dtype=torch.float32, device="cuda"
    )
    same = sum(o == t for o, t in zip(outputs, trained_on, strict=True))
    result = {
        "checkpoint": str(path),
        "num_prompts": len(prompts),
        "gen_len": GEN_LEN,
        "num_speculative_tokens": num_spec,
        "kv_cache_dtype": kv_cache_dtype,
        "vllm": {"num_drafts": drafts, "num_accepted_tokens": accepted},
        "vllm_mean_acceptance_length": measured,
        "offline": offline.as_dict(),
        "relative_difference": measured / offline.mean_acceptance_length - 1.0,
        "outputs_equal_to_training_continuations": same,
    }
    print("ACCEPTANCE", json.dumps(result))
    out_dir = os.environ.get("SPARK2_5_ORACLE_OUT")
    if out_dir:
        name = "acceptance.json" if kv_cache_dtype == "auto" else "acceptance-fp8.json"
        Path(out_dir, name).write_text(json.dumps(result, indent=2))
    assert offline.mean_acceptance_length > 1.5, "the trained draft is rarely accepted"
    tolerance = TOLERANCE if kv_cache_dtype == "auto" else FP8_TOLERANCE
    assert abs(result["relative_difference"]) <= tolerance, result
