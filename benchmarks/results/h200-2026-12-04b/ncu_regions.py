# Summarizes an Nsight Compute SASS page (ncu --page source --csv
# --print-source sass) of the fixed-history Gluon kernel per partition: the
# code between two register reallocations (USETMAXREG) is one partition's.
# For each: warp samples, stall reasons, samples by opcode, and executed
# instructions per warp and key tile (ITEMS programs' items x TILES tiles,
# 4 warps per partition).
#   python3 ncu_regions.py SASS.csv [TILES_PER_WARP]
import collections
import csv
import sys

path = sys.argv[1]
tiles = float(sys.argv[2]) if len(sys.argv) > 2 else 128 * 32 * 4
with open(path) as f:
    rows = list(csv.reader(f))
head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
cols = rows[head]
stall_cols = [
    (i, c[6:]) for i, c in enumerate(cols) if c.startswith("stall_") and "(" not in c
]
samples_col = cols.index("Warp Stall Sampling (All Samples)")
exec_col = cols.index("Instructions Executed")
regions = []
for r in rows[head + 1 :]:
    if len(r) < len(cols):
        continue
    src = r[1].strip()
    if src.startswith("USETMAXREG") or not regions:
        regions.append(
            dict(name=src, samples=0, stalls=collections.Counter(),
                 ops=collections.Counter(), execd=collections.Counter())
        )  # fmt: skip
    reg = regions[-1]
    op = src.split()[0] if src else "?"
    if op.startswith("@"):
        op = src.split()[1]
    n = int(r[samples_col] or 0)
    reg["samples"] += n
    reg["ops"][op.split(".")[0]] += n
    reg["execd"][op] += int(r[exec_col] or 0)
    for i, name in stall_cols:
        reg["stalls"][name] += int(r[i] or 0)
total = sum(reg["samples"] for reg in regions)
print(f"{path}: {total} warp samples")
for reg in regions:
    if reg["samples"] < total * 0.05:
        continue
    per_tile = sum(reg["execd"].values()) / tiles
    print(f"\n  region from {reg['name']!r}: {reg['samples']} samples, "
          f"{per_tile:.0f} instructions per warp per tile")  # fmt: skip
    print("    stall reasons: " + ", ".join(
        f"{k} {v}" for k, v in reg["stalls"].most_common(8)))  # fmt: skip
    print("    samples by opcode: " + ", ".join(
        f"{k} {v}" for k, v in reg["ops"].most_common(10)))  # fmt: skip
    print("    executed per warp per tile: " + ", ".join(
        f"{k} {v / tiles:.1f}" for k, v in reg["execd"].most_common(14)))  # fmt: skip
