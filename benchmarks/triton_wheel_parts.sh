#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Kernel leases on a bare H200 need only vLLM 0.32.0's Triton (3.7.1) beside
# the machine's torch, not the whole vLLM bundle. This script, run here from
# the repository root, writes that wheel (CPython 3.12, the lent machine's) in
# four parts that one device call each can carry:
#
#   bash benchmarks/triton_wheel_parts.sh
#
# -> .gpu-vllm/tw00 .. tw03 (tw00 also holds `sha`, the joined wheel's
# checksum), ignored by git through .git/info/exclude. On the lease, the
# per-lease scripts' steps `part twNN` (carry [".gpu-vllm/twNN"], one call
# each) and `wheel` (join, check, unpack into /tmp/t371) install it; see
# benchmarks/results/h200-2026-12-04d/next-gpu.sh.
set -euo pipefail
[ -e .git ] || { echo "run this in the repository root" >&2; exit 2; }
version=3.7.1
cache=${TRITON_PARTS_CACHE:-$HOME/.cache/triton-wheel-parts}
mkdir -p "$cache"
python3 -m pip download -q --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  -d "$cache" "triton==$version"
# The per-lease scripts join the parts under this name.
wheel=triton-$version-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
[ -f "$cache/$wheel" ] || { echo "pip left no $wheel in $cache" >&2; exit 3; }

exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu-vllm/' "$exclude" 2>/dev/null || echo '/.gpu-vllm/' >>"$exclude"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
size=$(stat -c %s "$cache/$wheel")
(cd "$work" && split -n 4 -d -a 2 "$cache/$wheel" tw \
  && (cd "$cache" && sha256sum "$wheel") >sha)
for n in 00 01 02 03; do
  rm -rf ".gpu-vllm/tw$n"
  mkdir -p ".gpu-vllm/tw$n"
  mv "$work/tw$n" ".gpu-vllm/tw$n/"
done
mv "$work/sha" .gpu-vllm/tw00/
echo "$wheel ($size bytes) in .gpu-vllm/tw00..tw03:"
du -sh .gpu-vllm/tw0?
