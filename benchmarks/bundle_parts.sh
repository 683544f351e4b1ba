#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A device call carries at most 64 MB: the repository's working tree plus
# the paths it names. The vLLM bundle in .gpu-vllm/ (part-00, part-01, ...,
# joined in name order on the lease and checked against
# .gpu-vllm/first/big.sha256) comes in parts that may no longer fit beside a
# grown tree. This script, run here from the repository root, joins the
# parts and cuts them again so that each fits with the tree and a margin:
#
#   bash benchmarks/bundle_parts.sh
#
# It prints the part size, the number of parts and the lease's calls.
set -euo pipefail
[ -e .git ] || { echo "run this in the repository root" >&2; exit 2; }
dir=.gpu-vllm
sum_file=$dir/first/big.sha256
ls "$dir"/part-* >/dev/null 2>&1 || { echo "no $dir/part-* here" >&2; exit 3; }
[ -f "$sum_file" ] || { echo "no $sum_file here" >&2; exit 3; }

mib=$((1024 * 1024))
# The cap counted as 64 MB, not MiB: on 2026-12-05, 56-MiB parts beside a
# 7.9-MB tree (63.5 MiB in all) were refused, 48-MiB parts were carried.
cap=64000000
# What every call carries besides its part: tracked files and untracked ones
# that git does not ignore.
tree=$( { git ls-files -z; git ls-files -z -o --exclude-standard; } \
  | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
margin=$((2 * mib))
size=$(((cap - tree - margin) / mib))
[ "$size" -ge 8 ] || { echo "the tree ($tree bytes) leaves no room for parts" >&2; exit 4; }

work=$(mktemp -d "$dir/recut.XXXX")
trap 'rm -rf "$work"' EXIT
cat "$dir"/part-* > "$work/big.tar"
want=$(awk '{print $1}' "$sum_file")
have=$(sha256sum "$work/big.tar" | awk '{print $1}')
[ "$want" = "$have" ] || { echo "the joined parts do not match $sum_file" >&2; exit 5; }
(cd "$work" && split -b "${size}M" -d -a 2 big.tar part- && rm big.tar)
rm -f "$dir"/part-*
mv "$work"/part-* "$dir/"
n=$(ls "$dir"/part-* | wc -l)
echo "tree $((tree / 1024)) KiB; $n parts of at most $size MiB in $dir"
echo "calls, back to back: carry [\"$dir/first\"]: bash $dir/first/on-gpu.sh receive;"
echo "  for each part NN: carry [\"$dir/part-NN\"]: bash /tmp/gpu-vllm/on-gpu.sh part part-NN;"
echo "  then: bash /tmp/gpu-vllm/on-gpu.sh install"
