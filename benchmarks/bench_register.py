# SPDX-License-Identifier: Apache-2.0
"""Extra start-up cost of the plugin's register() per vLLM process.

Each sample is a fresh interpreter that first imports what every vLLM process
imports anyway (engine arguments, worker base), then times the plugin's import
plus ``register()``: exactly the work the plugin adds to a process. Prints a
table and the machine; goal: < 50 ms.

    .venv/bin/python benchmarks/bench_register.py [--runs 15]
"""

import argparse
import statistics
import subprocess
import sys

from machine import describe

SAMPLE = """
import time
import vllm.engine.arg_utils, vllm.v1.worker.worker_base  # already paid by vLLM
t = time.perf_counter()
import vllm_spark2_5_plugin
vllm_spark2_5_plugin.register()
print("MS", (time.perf_counter() - t) * 1000)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=int, default=15, help="fresh interpreters timed (>= 1)"
    )
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    samples = []
    for _ in range(args.runs):
        out = subprocess.run(
            [sys.executable, "-c", SAMPLE], capture_output=True, text=True
        )
        if out.returncode:  # the child's own error (e.g. the plugin's import)
            raise SystemExit(
                f"bench_register.py: a sample failed (exit {out.returncode}):\n"
                + out.stderr[-3000:]
            )
        samples.append(float(out.stdout.split("MS", 1)[1].split()[0]))
    samples.sort()
    p90 = samples[min(len(samples) - 1, int(0.9 * len(samples)))]
    print(describe())
    print()
    print("| runs | min ms | median ms | p90 ms | max ms | goal < 50 ms |")
    print("|---:|---:|---:|---:|---:|:---:|")
    median = statistics.median(samples)
    print(
        f"| {len(samples)} | {samples[0]:.1f} | {median:.1f} | {p90:.1f} | "
        f"{samples[-1]:.1f} | {'met' if median < 50 else 'missed'} |"
    )


if __name__ == "__main__":
    main()
