# The forty-first session's parity probe (../h100-2026-12-05e/parity_probe.py)
# with each engine held to 40% of the GPU's memory, so that two probes (Triton's
# float32 dots as they default, and forced to IEEE) run side by side.
# PARITY_CONFIGS=a,b keeps only those configurations (for a short lease).
#   python3 probe_shared.py ROOT            (from the repository root)
import os
import sys

sys.path[:0] = ["tests", "src", "benchmarks/results/h100-2026-12-05e"]

import vllm_helpers  # noqa: E402

vllm_helpers.LLM_KWARGS["gpu_memory_utilization"] = 0.4

import parity_probe  # noqa: E402

if __name__ == "__main__":
    if only := os.environ.get("PARITY_CONFIGS"):
        names = only.split(",")
        parity_probe.CONFIGS = {n: parity_probe.CONFIGS[n] for n in names}
    parity_probe.main(sys.argv[1])
