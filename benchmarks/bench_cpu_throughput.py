# SPDX-License-Identifier: Apache-2.0
"""vLLM-CPU throughput: Spark2_5 against vLLM's in-tree Llama of equal shapes.

Both checkpoints are random, with the same hidden/intermediate sizes, layer
count, heads, KV heads, head size, vocabulary, layer types and sliding window;
the Llama one is the Spark2_5 tensors minus the head gate (``g_proj``), with
SiLU instead of GELU. Each model is served by a fresh ``vllm.LLM`` in its own
process (same engine settings), and the runs alternate. Prints a markdown table
and the machine; the goal is Spark2_5 >= 0.95x Llama.

    .venv/bin/python benchmarks/bench_cpu_throughput.py [--rounds 3]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from machine import describe

SHAPES = dict(
    vocab_size=8192,
    hidden_size=512,
    intermediate_size=1536,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=64,
    sliding_window=128,
    max_position_embeddings=4096,
)
NUM_PROMPTS, PROMPT_LEN, OUTPUT_LEN = 32, 256, 64

RUN = """
import json, sys, time
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt

if __name__ == "__main__":
    path, n, prompt_len, output_len = sys.argv[1], *map(int, sys.argv[2:5])
    llm = LLM(path, dtype="bfloat16", enforce_eager=True, max_model_len=1024,
              seed=0, distributed_executor_backend="uni")
    prompts = [TokensPrompt(prompt_token_ids=[(7 * i + 13 * j) % 500 + 10
               for j in range(prompt_len)]) for i in range(n)]
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)
    llm.generate(prompts[:2], SamplingParams(max_tokens=4), use_tqdm=False)  # warm-up
    t = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - t
    generated = sum(len(o.outputs[0].token_ids) for o in outs)
    print("RESULT=" + json.dumps({"seconds": elapsed, "output_tokens": generated,
          "total_tokens": generated + n * prompt_len}))
"""


def make_checkpoints(root: Path) -> dict[str, Path]:
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    spark = make_tiny_checkpoint(root / "spark2_5", dtype=torch.bfloat16, **SHAPES)
    raw = json.loads((spark / "config.json").read_text())
    llama = root / "llama"
    llama.mkdir()
    LlamaConfig(
        architectures=["LlamaForCausalLM"],
        hidden_act="silu",
        rms_norm_eps=raw["rms_norm_eps"],
        layer_types=raw["layer_types"],
        rope_parameters={"rope_type": "default", "rope_theta": 10_000.0},
        tie_word_embeddings=False,
        eos_token_id=raw["eos_token_id"],
        dtype="bfloat16",
        **SHAPES,
    ).save_pretrained(llama)
    from safetensors.torch import load_file

    tensors = load_file(str(spark / "model.safetensors"))
    save_file(
        {k: v for k, v in tensors.items() if ".g_proj." not in k},
        str(llama / "model.safetensors"),
        metadata={"format": "pt"},
    )
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(spark / name, llama / name)
    # Diagnostic: the same Spark2_5 without the head gate, to show its share.
    no_gate = make_tiny_checkpoint(
        root / "spark2_5-nogate",
        dtype=torch.bfloat16,
        attention_output_gate=False,
        **SHAPES,
    )
    return {
        "Spark2_5ForCausalLM": spark,
        "LlamaForCausalLM (in-tree)": llama,
        "Spark2_5ForCausalLM, gate off (diagnostic)": no_gate,
    }


def run(path: Path) -> dict:
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "2",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    }
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            RUN,
            str(path),
            str(NUM_PROMPTS),
            str(PROMPT_LEN),
            str(OUTPUT_LEN),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    result = next(x for x in out.stdout.splitlines() if x.startswith("RESULT="))
    return json.loads(result.removeprefix("RESULT="))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds of the models (>= 1)"
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    with tempfile.TemporaryDirectory() as tmp:
        models = make_checkpoints(Path(tmp))
        samples = {name: [] for name in models}
        for _ in range(args.rounds):
            for name, path in models.items():
                r = run(path)
                samples[name].append(r["output_tokens"] / r["seconds"])
    print(describe())
    print(
        f"shapes: {SHAPES}; bf16, eager, {NUM_PROMPTS} prompts x {PROMPT_LEN} tokens, "
        f"{OUTPUT_LEN} output tokens each, {args.rounds} alternating rounds"
    )
    print()
    print("| model | output tok/s, median | best | runs |")
    print("|---|---:|---:|---|")
    medians, best = {}, {}
    for name, values in samples.items():
        medians[name], best[name] = statistics.median(values), max(values)
        runs = ", ".join(f"{v:.1f}" for v in values)
        print(f"| {name} | {medians[name]:.1f} | {best[name]:.1f} | {runs} |")
    spark, llama = list(samples)[:2]
    ratio = medians[spark] / medians[llama]
    verdict = "met" if ratio >= 0.95 else "missed"
    print(
        f"\nSpark2_5 / Llama = {ratio:.3f} by median (goal >= 0.95: {verdict}), "
        f"{best[spark] / best[llama]:.3f} by best run"
    )


if __name__ == "__main__":
    main()
