# SPDX-License-Identifier: Apache-2.0
"""On a GPU: every draft vLLM's DSpark speculator proposes is the reference's.

Rejection sampling repairs any draft, so equal outputs with and without
DSpark (``test_dspark_gpu_e2e.py``) say nothing about the draft itself. Here
``DSparkSpeculator.propose`` is wrapped (see :mod:`dspark_oracle`), real
requests run through an in-process engine, and every recorded proposal --
request, anchor position ``L``, anchor token, the ``K`` drafted tokens (and,
when vLLM materialises them, its draft logits and confidences) -- is
recomputed by the pure-PyTorch references from the request's final token
sequence. Greedy runs must agree on >= 99 % of the positions whose reference
top1-top2 margin exceeds a threshold measured from bf16/fp16 noise (and on
every position above 4x it); probabilistic runs must draft tokens that the
reference distribution explains; every anchor must match.

The matrix (8 engine runs on one GPU, each ~1 min on an H200, and one
tensor-parallel run on two GPUs) covers: vanilla and rnn
Markov heads (confidence head always in the checkpoint, used by vLLM in the
adaptive-verification run); sliding-only, sliding+full and full+sliding draft
layers with a draft window of 6-8 and a target window of 16 under 200-320
token prompts; chunked prefill (64-token budget); prefix-cache hits (the same
prompts twice); eager and CUDA graphs; greedy and probabilistic drafting
(temperature 1); bf16 and fp16; batches of 1, 4, 8, 16 and 64; tensor
parallel 2 (skipped with fewer than two GPUs). Under tensor parallelism every
worker records its own proposals (``collective_rpc``); the oracle checks rank
0's and every rank must have proposed the same drafts.

Needs an NVIDIA GPU and a CUDA build of vLLM 0.32.0; skipped elsewhere.

    SPARK2_5_ORACLE_OUT=/tmp/oracle pytest -m cuda tests/test_dspark_gpu_oracle.py

writes one ``<run>.json`` summary (and ``<run>.proposals.jsonl``) per run to
``$SPARK2_5_ORACLE_OUT``. ``SPARK2_5_DSPARK_CHECKPOINT`` (+
``SPARK2_5_DSPARK_NUM_SPEC_TOKENS``) runs the engine-side matrix on a real
checkpoint instead of the tiny random ones; its references then run on the
GPU in float32 (``SPARK2_5_ORACLE_REF_DEVICE`` overrides the device).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from dspark_oracle import (
    DSparkOracle,
    OracleSettings,
    ProposalRecorder,
    RequestSequence,
)
from dspark_oracle_recorder import collect_from_worker, install_in_worker
from vllm_helpers import skip_without_gpu_vllm

from vllm_spark2_5_plugin.names import FULL, SLIDING

pytestmark = [pytest.mark.cuda, pytest.mark.slow]


skip_without_gpu_vllm()

MAX_TOKENS = 64
MAX_MODEL_LEN = 1024
TINY_NUM_SPEC = 4  # the tiny checkpoint's dspark_block_size
CHECKPOINT_ENV = "SPARK2_5_DSPARK_CHECKPOINT"


@dataclass(frozen=True)
class Draft:
    """The DSpark fields of a tiny checkpoint."""

    markov: str
    layers: tuple[str, ...]
    window: int

    def fields(self) -> dict:
        return {
            "dspark_markov_head_type": self.markov,
            "dspark_enable_confidence_head": True,
            "dspark_layer_types": list(self.layers),
            "dspark_sliding_window": self.window,
        }


VANILLA_SLIDING = Draft("vanilla", (SLIDING,), 6)
RNN_HYBRID = Draft("rnn", (SLIDING, FULL), 8)
VANILLA_FULL_FIRST = Draft("vanilla", (FULL, SLIDING), 8)


@dataclass(frozen=True)
class Run:
    name: str
    draft: Draft
    dtype: str = "bfloat16"
    eager: bool = False
    batch: int = 64
    sampling: str = "greedy"  # or "probabilistic"
    chunked: bool = False  # 64-token prefill chunks
    prefix_cache: bool = False  # the same prompts twice
    adaptive: bool = False  # enable_adaptive_verification: vLLM runs the
    # confidence head and the oracle checks it
    tp: int = 1  # tensor_parallel_size (workers in other processes)


RUNS = [
    Run("greedy-vanilla-sliding-graph-b64", VANILLA_SLIDING),
    Run("greedy-rnn-hybrid-eager-b1", RNN_HYBRID, eager=True, batch=1),
    Run("greedy-rnn-hybrid-graph-b64-fp16", RNN_HYBRID, dtype="float16"),
    Run(
        "greedy-vanilla-fullfirst-chunked-graph-b4",
        VANILLA_FULL_FIRST,
        batch=4,
        chunked=True,
    ),
    Run(
        "greedy-rnn-hybrid-prefixcache-graph-b8x2",
        RNN_HYBRID,
        batch=8,
        prefix_cache=True,
    ),
    Run(
        "prob-vanilla-fullfirst-graph-b64", VANILLA_FULL_FIRST, sampling="probabilistic"
    ),
    Run(
        "prob-rnn-hybrid-eager-b16-fp16",
        RNN_HYBRID,
        dtype="float16",
        eager=True,
        batch=16,
        sampling="probabilistic",
    ),
    Run("greedy-rnn-hybrid-adaptive-graph-b16", RNN_HYBRID, batch=16, adaptive=True),
    Run("greedy-rnn-hybrid-graph-b16-tp2", RNN_HYBRID, batch=16, tp=2),
]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """``run -> (path, num_speculative_tokens)``; tiny checkpoints are made once
    per (draft, dtype) and stored in the engine's dtype, so that vLLM and the
    references use the very same weights."""
    made: dict[tuple[Draft, str], str] = {}

    def get(run: Run) -> tuple[str, int]:
        path = os.environ.get(CHECKPOINT_ENV)
        if path:
            return path, int(os.environ.get("SPARK2_5_DSPARK_NUM_SPEC_TOKENS", "7"))
        key = (run.draft, run.dtype)
        if key not in made:
            from vllm_spark2_5_plugin.tools.tiny_checkpoint import (
                make_tiny_checkpoint,
            )

            made[key] = str(
                make_tiny_checkpoint(
                    tmp_path_factory.mktemp("dspark-oracle"),
                    dtype=getattr(torch, run.dtype),
                    dspark=run.draft.fields(),
                    dspark_prefix="mtp.",
                )
            )
        return made[key], TINY_NUM_SPEC

    return get


def _prompts(run: Run, vocab_size: int, seed: int) -> list[list[int]]:
    """Random token prompts, most far longer than every attention window."""
    rng = np.random.default_rng(seed)
    # Skip the tiny tokenizer's special tokens (ids < 16); on a real
    # vocabulary stay among ordinary tokens.
    low, high = (16, vocab_size) if vocab_size <= 4096 else (1000, 30000)
    if run.batch == 1:
        lengths = [260]
    elif run.chunked:
        lengths = [300, 257, 130, 9][: run.batch]
    elif run.prefix_cache:
        lengths = rng.integers(200, 321, run.batch).tolist()
    else:
        short = [8, 17, 40]  # contexts shorter than / around the windows
        lengths = short + rng.integers(200, 321, run.batch - len(short)).tolist()
    return [rng.integers(low, high, n).tolist() for n in lengths]


def _engine_kwargs(run: Run, num_spec: int) -> dict:
    speculative = {"method": "dspark", "num_speculative_tokens": num_spec}
    if run.sampling == "probabilistic":
        speculative["draft_sample_method"] = "probabilistic"
    if run.adaptive:
        speculative["enable_adaptive_verification"] = True
    kwargs = dict(
        dtype=run.dtype,
        max_model_len=MAX_MODEL_LEN,
        gpu_memory_utilization=0.3,
        seed=0,
        speculative_config=speculative,
        # One GPU: the worker runs in this process and sees the class-level
        # patch. Tensor parallel: worker processes, patched through
        # collective_rpc (see _generate).
        distributed_executor_backend="uni" if run.tp == 1 else "mp",
        tensor_parallel_size=run.tp,
        enforce_eager=run.eager,
        enable_prefix_caching=run.prefix_cache,
    )
    if run.chunked:
        kwargs.update(
            enable_chunked_prefill=True, max_num_batched_tokens=64, max_num_seqs=8
        )
    return kwargs


def _sampling_params(run: Run, n: int):
    from vllm import SamplingParams

    if run.sampling == "greedy":
        return SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    # Distinct seeds: the draft's Gumbel noise is keyed by (seed, position).
    return [
        SamplingParams(
            temperature=1.0, max_tokens=MAX_TOKENS, ignore_eos=True, seed=1000 + i
        )
        for i in range(n)
    ]


def _generate(
    path: str, run: Run, kwargs: dict, prompts: list[list[int]]
) -> tuple[list[RequestSequence], dict, ProposalRecorder]:
    """Outputs, engine facts and the recorder that saw rank 0's proposals."""
    from vllm import LLM
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
    from vllm.inputs import TokensPrompt

    info: dict = {}
    recorder = ProposalRecorder()
    outputs = []
    # One GPU: patch the class here, the worker runs in this process.
    with recorder.installed() if run.tp == 1 else contextlib.nullcontext():
        start = time.perf_counter()
        llm = LLM(path, **kwargs)
        info["engine_start_s"] = time.perf_counter() - start
        try:
            if run.tp > 1:
                info["patched_ranks"] = llm.collective_rpc(install_in_worker)
            start = time.perf_counter()
            for batch in range(2 if run.prefix_cache else 1):
                # The second batch starts after the first finished: its
                # prompts are in the prefix cache.
                outs = llm.generate(
                    [TokensPrompt(prompt_token_ids=p) for p in prompts],
                    _sampling_params(run, len(prompts)),
                    use_tqdm=False,
                )
                info[f"batch{batch}_cached_tokens"] = sum(
                    o.num_cached_tokens or 0 for o in outs
                )
                outputs.extend(outs)
            info["generate_s"] = time.perf_counter() - start
            if run.tp > 1:
                collected = llm.collective_rpc(collect_from_worker)
                recorder = _rank0_recorder(collected, info)
        finally:
            del llm
            gc.collect()
            cleanup_dist_env_and_memory()
    info["output_lengths"] = sorted({len(o.outputs[0].token_ids) for o in outputs})
    return [RequestSequence.from_request_output(o) for o in outputs], info, recorder


def _rank0_recorder(
    collected: list[tuple[int, ProposalRecorder | None]], info: dict
) -> ProposalRecorder:
    """Rank 0's recorder; the ranks that drafted other tokens go to
    ``info["ranks_disagreeing"]`` (a failure, see _run_failures)."""
    by_rank = dict(collected)
    info["collected_ranks"] = sorted(by_rank)
    first = by_rank.get(0)
    if first is None:
        raise AssertionError(f"no recorder came back from rank 0: {collected}")

    def drafts(rec: ProposalRecorder) -> list[tuple]:
        return [(p.step, p.req_id, p.anchor_pos, tuple(p.draft)) for p in rec.proposals]

    info["ranks_disagreeing"] = [
        rank
        for rank, rec in sorted(by_rank.items())
        if rank != 0 and (rec is None or drafts(rec) != drafts(first))
    ]
    return first


def _reference_device() -> str:
    device = os.environ.get("SPARK2_5_ORACLE_REF_DEVICE")
    if device:
        return device
    return "cuda" if os.environ.get(CHECKPOINT_ENV) else "cpu"


@contextlib.contextmanager
def _reference_math(device: str):
    """Exact float32 matmuls on the GPU; one CPU thread for the tiny model."""
    threads = torch.get_num_threads()
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if device == "cpu" and not os.environ.get(CHECKPOINT_ENV):
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def _run_failures(
    run: Run,
    recorder: ProposalRecorder,
    oracle: DSparkOracle,
    summary: dict,
    engine: dict,
) -> list[str]:
    """What this run must have exercised, beyond the oracle's own criteria."""
    fails = []
    rec = recorder.summary()
    spec = rec["speculator"]
    counts = summary["counts"]
    if recorder.errors:
        fails.append(f"recording failed: {recorder.errors[:3]}")
    if recorder.steps == 0:
        fails.append(
            "DSparkSpeculator.propose was never called: the engine must run "
            "in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) on Model Runner V2"
        )
        return fails
    if spec.get("sample_from_anchor") is not True:
        fails.append(f"expected the anchor-as-first block layout, got {spec}")
    if spec.get("noise_token_id") != oracle.refs.noise_token_id:
        fails.append(
            f"vLLM's noise token {spec.get('noise_token_id')} != the checkpoint's "
            f"{oracle.refs.noise_token_id}"
        )
    if engine["output_lengths"] != [MAX_TOKENS]:
        fails.append(f"output lengths {engine['output_lengths']} != [{MAX_TOKENS}]")
    if run.eager and rec["propose_calls_from_cuda_graph"]:
        fails.append("an eager run replayed the draft from a CUDA graph")
    if not run.eager and not counts.get("proposals_from_cuda_graph"):
        fails.append(
            "no checked proposal came from a CUDA graph replay: the draft ran "
            "eagerly although CUDA graphs were enabled"
        )
    if run.chunked and not counts.get("prefill_chunk_proposals"):
        fails.append("no proposal was made for a partial prefill chunk")
    if run.prefix_cache and not engine.get("batch1_cached_tokens"):
        fails.append("the second batch hit no prefix-cache block")
    if run.tp > 1:
        if sorted(engine.get("collected_ranks", [])) != list(range(run.tp)):
            fails.append(
                f"recorders came back from ranks {engine.get('collected_ranks')}"
            )
        if engine.get("ranks_disagreeing"):
            fails.append(
                f"ranks {engine['ranks_disagreeing']} drafted other tokens than rank 0"
            )
    if run.adaptive and "confidence" not in summary:
        fails.append(
            "vLLM did not use the confidence head (use_confidence_head is False)"
        )
    if run.sampling == "probabilistic" and "vllm_logits" not in summary:
        fails.append("no draft logits were recorded in a probabilistic run")
    if (summary["context_length_max"] or 0) < 150:
        fails.append(
            f"longest checked context {summary['context_length_max']} is not far "
            "beyond the attention windows"
        )
    return fails


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_dspark_proposals_match_the_reference(run: Run, checkpoints, monkeypatch):
    import vllm.envs as envs

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    envs.disable_envs_cache()  # an earlier in-process engine may have cached env

    path, num_spec = checkpoints(run)
    config = json.loads((Path(path) / "config.json").read_text())
    prompts = _prompts(run, config["vocab_size"], seed=zlib.crc32(run.name.encode()))
    kwargs = _engine_kwargs(run, num_spec)

    if run.tp > 1:
        if torch.cuda.device_count() < run.tp:
            pytest.skip(f"needs {run.tp} GPUs, {torch.cuda.device_count()} visible")
        # This process has touched CUDA already, so the TP workers must be
        # spawned (a forked one cannot initialise CUDA again).
        monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        # The worker processes import the recorder from this directory.
        here = str(Path(__file__).parent)
        monkeypatch.setenv(
            "PYTHONPATH",
            os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])),
        )
    sequences, engine, recorder = _generate(path, run, kwargs, prompts)

    device = _reference_device()
    start = time.perf_counter()
    with _reference_math(device):
        oracle = DSparkOracle.from_checkpoint(
            path, device=device, noise_dtype=getattr(torch, run.dtype)
        )
        report = oracle.compare(
            recorder.proposals,
            sequences,
            OracleSettings(sampling=run.sampling, temperature=1.0),
            num_speculative_tokens=num_spec,
            max_model_len=MAX_MODEL_LEN,
        )
        summary = report.summary()
        failures = report.failures()
    engine["oracle_s"] = time.perf_counter() - start
    failures += _run_failures(run, recorder, oracle, summary, engine)

    result = {
        "run": asdict(run),
        "checkpoint": path,
        "num_speculative_tokens": num_spec,
        "engine_kwargs": kwargs,
        "prompt_lengths": [len(p) for p in prompts],
        "reference_device": device,
        "engine": engine,
        "recorder": recorder.summary(),
        "oracle": summary,
        "failures": failures,
        "passed": not failures,
    }
    out_dir = os.environ.get("SPARK2_5_ORACLE_OUT")
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{run.name}.json").write_text(
            json.dumps(result, indent=2, default=str) + "\n"
        )
        with (out / f"{run.name}.proposals.jsonl").open("w") as f:
            for prop in recorder.proposals:
                f.write(json.dumps(prop.to_json()) + "\n")
    print(f"\nORACLE {run.name}: " + json.dumps(_headline(result), default=str))
    assert not failures, f"{run.name}:\n" + "\n".join(failures)


def _headline(result: dict) -> dict:
    """The numbers worth a glance, one line per run (``pytest -s``)."""
    oracle = result["oracle"]
    side = oracle.get("greedy") or oracle.get("probabilistic") or {}
    keys = (
        "threshold",
        "positions_included",
        "excluded_share",
        "agreement",
        "disagreements",
        "max_margin_at_disagreement",
        "positions_compared",
        "top_p_violation_share",
        "z_statistic",
    )
    line = {"passed": result["passed"], **oracle["counts"]}
    line.update({k: side[k] for k in keys if k in side})
    line["anchor_mismatches"] = oracle["anchor_mismatches"]
    line["noise_flip_q0.999"] = oracle["noise"]["flip_noise_q0.999"]
    if "vllm_logits" in oracle:
        line["vllm_flip_q0.999"] = oracle["vllm_logits"]["flip_noise_q0.999"]
    if "confidence" in oracle:
        line["confidence_max_error"] = oracle["confidence"]["max_error"]
    line.update(
        {k: v for k, v in result["engine"].items() if k.endswith(("_s", "tokens"))}
    )
    return line
