# The draft's cache writes per layer and step at the fp8 benchmark shapes
# (thirty-first session): R x B tokens of nKV heads (D = 128, page 16) into
# an fp8 cache of the shape's pages, by vLLM's reshape_and_cache_flash
# (V in rows), by the plugin's write_kv_cache in rows and with V's pages
# transposed; CUDA-graph replays, medians in microseconds, and whether
# each writer's bytes equal the reference writer's.
#   PYTHONPATH=src python3 writer_probe.py
import functools
import sys

sys.path[:0] = ["benchmarks", "src"]

import bench_fixed_history_attention as B  # noqa: E402
import torch  # noqa: E402
from vllm import _custom_ops as vllm_ops  # noqa: E402

from vllm_spark2_5_plugin.ops import write_kv_cache  # noqa: E402
from vllm_spark2_5_plugin.ops.v_pages import write_kv_cache_reference  # noqa: E402


def probe(shape):
    R, L, Bq, _, _, nKV, D = shape
    blocks = R * (-(-(L + Bq) // 16)) + 1
    raw = torch.zeros(blocks, nKV, 16, 2 * D, dtype=torch.uint8, device="cuda")
    k, v = (x.view(torch.float8_e4m3fn) for x in raw.transpose(1, 2).split(D, -1))
    T = R * Bq
    key = torch.randn(T, nKV, D, dtype=torch.bfloat16, device="cuda")
    value = torch.randn_like(key)
    # Each request's block: Bq consecutive slots from its L-th position.
    first = torch.randperm(blocks - 1, device="cuda")[:R] * 16 + L % 16
    slots = (first[:, None] + torch.arange(Bq, device="cuda")).reshape(-1)
    ks = torch.tensor(0.05, device="cuda")
    vs = torch.tensor(0.07, device="cuda")
    args = (key, value, k, v, slots)
    calls = {
        "vllm rows": functools.partial(
            vllm_ops.reshape_and_cache_flash, *args, "fp8", ks, vs
        ),
        "plugin rows": functools.partial(write_kv_cache, *args, ks, vs),
        "plugin V pages": functools.partial(
            write_kv_cache, *args, ks, vs, v_pages_transposed=True
        ),
    }
    line = [f"R {R} B {Bq} nKV {nKV}: {T} tokens"]
    for name, call in calls.items():
        raw.zero_()
        call()
        got = raw.clone()
        raw.zero_()
        pages = name.endswith("pages")
        write_kv_cache_reference(*args, ks, vs, v_pages_transposed=pages)
        same = "" if torch.equal(got, raw) else " (BYTES DIFFER)"
        line.append(f"{name} {B.bench_replayed(call):.1f} us{same}")
    print("; ".join(line), flush=True)


torch.manual_seed(0)
for shape in B.SHAPES[:4]:
    probe(shape)
