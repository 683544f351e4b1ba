# The public launch (its own plan) at shapes that differ in how many of each
# item's key tiles are edge tiles (keys outside the window: copied by
# cp.async, the others by TMA), rounds alternating: CUDA-graph replays,
# do_bench medians in us, the L2 emptied by reading.
#   PYTHONPATH=/tmp/t371:src python3 edge_probe.py '[[R,L,B,W,nH,nKV,D]]' fp8 ROUNDS
import functools
import json
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402

shapes = [tuple(s) for s in json.loads(sys.argv[1])]
built = {s: B.build(s, seed=7, kv_dtype=sys.argv[2]) for s in shapes}
for _ in range(int(sys.argv[3])):
    for shape in shapes:
        raw, q, k, v, bt, ctx, qsl, sc = built[shape]
        R, L, Bq, W, *_ = shape
        lo, hi = max(L - W, 0), L + Bq
        first = lo - lo % B.PAGE
        tiles = -(-(hi - first) // 64)
        edges = int(first < lo) + int((hi - first) % 64 != 0)
        fn = functools.partial(
            ops.fixed_history_attention, q, k, v, bt, ctx, qsl, W, shape[6] ** -0.5,
            torch.empty_like(q), **sc,
        )  # fmt: skip
        fn()
        torch.cuda.synchronize()
        t = B.bench_replayed(fn, 300)
        print(
            f"{shape}: keys {first}..{hi - 1} from lo {lo}, {tiles} tiles of 64, "
            f"{edges} edge: {t:7.1f} us",
            flush=True,
        )
