# How far a float32 engine on the GPU is from the float64 reference, for the
# configurations of tests/test_generation_parity.py: per configuration, the
# largest |logprob difference| over the steps before the first token that
# differs, the steps compared, and the first difference (with the
# reference's logprob gap there). Run it twice, with and without
# TRITON_F32_DEFAULT=ieee, to see whether TF32 in Triton's kernels is what
# exceeds the tests' 1e-4.
#   python3 parity_probe.py            (from the repository root)
import json
import sys

sys.path[:0] = ["tests", "src"]

from test_generation_parity import CONFIGS, MAX_TOKENS, prompts  # noqa: E402
from vllm_helpers import greedy_generate  # noqa: E402

from vllm_spark2_5_plugin.references.spark2_5 import Spark2_5Reference  # noqa: E402
from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint  # noqa: E402


def compare(path, prompt_ids):
    results = greedy_generate(path, prompt_ids, MAX_TOKENS)
    reference = Spark2_5Reference.from_checkpoint(path)
    worst, compared, first = 0.0, 0, None
    for prompt, (tokens, steps) in zip(prompt_ids, results, strict=True):
        want, rows = reference.greedy(prompt, len(tokens))
        for step, (got, ref) in enumerate(zip(tokens, want, strict=True)):
            row = rows[step]
            if got != ref:
                gap = float(row[ref] - row[got])
                first = first or {"step": step, "gap": gap}
                break
            for token, logprob in steps[step].items():
                worst = max(worst, abs(logprob - float(row[token])))
            compared += 1
    return {"max_abs_dlogprob": worst, "steps_compared": compared, "first_split": first}


def main(root):
    from pathlib import Path

    prompt_ids = prompts()
    for name, (overrides, edit) in CONFIGS.items():
        path = make_tiny_checkpoint(Path(root) / name, seed=7, **overrides)
        if edit is not None:
            edit(path)
        print("PARITY", name, json.dumps(compare(path, prompt_ids)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/parity")
