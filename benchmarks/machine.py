# SPDX-License-Identifier: Apache-2.0
"""One line describing the machine and versions, for benchmark records."""

import os
import platform


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> str:
    import torch
    import vllm

    return (
        f"machine: {cpu_name()}, {os.cpu_count()} cores; "
        f"python {platform.python_version()}, vLLM {vllm.__version__}, "
        f"torch {torch.__version__}"
    )
