# The public launch (its own plan: the Gluon kernel where it applies) at one
# benchmark shape, called a few times, for a profiler to pick one launch.
#   PYTHONPATH=/tmp/t371:src python3 launch_probe.py SHAPE_INDEX bf16|fp8
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402

from vllm_spark2_5_plugin import ops  # noqa: E402

shape, inputs, _, _ = B.probe_args([*sys.argv[:3], "[]"])
raw, q, k, v, bt, ctx, qsl, sc = inputs
W, s = shape[3], shape[6] ** -0.5
out = torch.empty_like(q)
for _ in range(5):
    ops.fixed_history_attention(q, k, v, bt, ctx, qsl, W, s, out, **sc)
torch.cuda.synchronize()
print(f"shape {shape}: 5 launches", flush=True)
