#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build the separate llm-compressor environment (.venv-llmc) that
# `python -m vllm_spark2_5_plugin.tools.quantize_fp8` runs in. It is kept apart
# from .venv because llm-compressor pins its own compressed-tensors and
# transformers releases, which differ from the ones vLLM 0.32.0 wants.
#
# Versions (resolved together on 2026-11-30, Python 3.11, CPU torch):
#   llmcompressor==0.14.0.1, compressed-tensors==0.19.0, transformers==5.17.0,
#   torch==2.13.0+cpu; every other package is pinned by
#   tools/llmc-constraints.txt (a pip freeze of that environment).
# ~2 min and ~1.5 GB on the project's CPU machines. LLMC_VENV=path builds it elsewhere.
# Safe to re-run; a finished environment is reused.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${LLMC_VENV:-.venv-llmc}
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
LLMC_VERSION=0.14.0.1
TORCH_VERSION=2.13.0

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi

if ! "$VENV/bin/python" -c 'import llmcompressor, compressed_tensors' >/dev/null 2>&1; then
  # CPU torch first, so that llm-compressor's torch requirement is already
  # met and pip does not fetch a CUDA build (and its GBs of nvidia wheels).
  # PyPI has no +cpu build: where the machine's pip config does not find one,
  # PyTorch's CPU index is added (TORCH_CPU_INDEX=url names another).
  TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
  if ! "${PIP[@]}" install -q "torch==${TORCH_VERSION}+cpu" 2>/dev/null; then
    "${PIP[@]}" install -q --extra-index-url "$TORCH_CPU_INDEX" "torch==${TORCH_VERSION}+cpu"
  fi
  CONSTRAINTS=()
  if [ -f tools/llmc-constraints.txt ]; then
    CONSTRAINTS=(-c tools/llmc-constraints.txt)
  fi
  "${PIP[@]}" install -q "${CONSTRAINTS[@]}" "llmcompressor==${LLMC_VERSION}" "torch==${TORCH_VERSION}"
fi

# The plugin's sources, without its dependencies (vLLM is not wanted here):
# only the tool, the reference layers and the config helpers are used.
"${PIP[@]}" install -q --no-deps --no-build-isolation -e . 2>/dev/null \
  || "${PIP[@]}" install -q --no-deps -e .

"$VENV/bin/python" - <<'PY'
import importlib.metadata as md

import compressed_tensors  # noqa: F401
import llmcompressor  # noqa: F401
import torch

for name in ("llmcompressor", "compressed-tensors", "transformers", "torch"):
    print(f"{name}=={md.version(name)}")
print("llm-compressor environment ready")
PY
