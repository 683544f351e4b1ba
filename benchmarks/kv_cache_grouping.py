# SPDX-License-Identifier: Apache-2.0
"""How vLLM 0.32.0 groups the KV cache of Spark2_5 + its DSpark draft.

vLLM puts every attention layer of the target and of the draft into one KV
cache manager. Layers whose ``KVCacheSpec``s are equal (or merge) form a
bucket; each bucket is cut into groups of ``group_size`` layers (the smallest
bucket's size, or the largest's when it is < 1.5x the smallest) and a bucket
that does not divide evenly is padded. Every block of every group costs
``group_size`` layer pages, padding included. This script builds the spec dict
the plugin's layers produce, runs vLLM's own ``get_kv_cache_groups`` and
``get_kv_cache_config_from_groups`` on it, then drives vLLM's ``KVCacheManager``
through a chunked prefill and one speculative decode step to count the blocks
one request holds. Everything runs on CPU; no model is loaded.

What the draft's sliding layers could declare to vLLM (``Attention``'s
``per_layer_sliding_window``; the fixed-history kernel reads its own window
``dspark_sliding_window`` = W_d in every option):

* ``as is``        W_d, today's plugin (merges with the target's sliding
  layers when W_d == W);
* ``SW->full``     no window: a ``FullAttentionSpec`` that merges with the
  target's full layers;
* ``SW->target W`` the target's window W (only when W_d < W);
* ``SW->own W``    a window no target layer has (W + 1 when W_d == W), so the
  draft's sliding layers form a bucket of their own.

For reference each layout also shows the target alone, the user-side switch
``--disable-hybrid-kv-cache-manager`` and ``as is`` charged without padding.
The report ends with a summary, the rule proposed in
``benchmarks/kv_cache_grouping.md``, what the plugin declares with that rule
(``configs/kv_cache_window.py``, before/after) and a cross-check against the
capacity vLLM logged for the small preset on the H200.

    .venv/bin/python benchmarks/kv_cache_grouping.py [--timing] [--from-model]

``--timing`` times the scheduler side (``KVCacheManager.allocate_slots`` per
request and decode step) for each option's group count. ``--from-model``
builds the tiny checkpoint's target and draft with vLLM's ``get_model`` on CPU
and checks that their ``Attention.get_kv_cache_spec`` results are the specs
assumed here (and what ``per_layer_sliding_window=None`` / ``W+1`` give).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import time
from dataclasses import dataclass, field, replace

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch  # noqa: E402

SLIDING, FULL = "S", "F"
BLOCK_SIZE = 16  # --block-size default on CUDA; SW layers take it too (FA)
LENGTHS = (128, 1600, 8192, 32768)
PREFILL_CHUNK = 8192  # max_num_batched_tokens of the chunked prefill
DTYPE_BYTES = 2  # bf16 cache


@dataclass(frozen=True)
class Layout:
    """A target and its draft, as config.json describes them."""

    name: str
    note: str
    num_layers: int  # target layers, every fourth full (Spark2_5's default)
    window: int  # target sliding_window, W
    draft: tuple[str, ...]  # dspark_layer_types
    draft_window: int  # dspark_sliding_window, W_d
    num_kv_heads: int
    head_dim: int
    num_spec: int  # num_speculative_tokens = dspark_block_size
    max_positions: int

    @property
    def target(self) -> tuple[str, ...]:
        return tuple(FULL if i % 4 == 3 else SLIDING for i in range(self.num_layers))

    def title(self) -> str:
        t = self.target
        return (
            f"{self.name}: target {len(t)} layers ({t.count(SLIDING)}S:"
            f"{t.count(FULL)}F, W={self.window}), draft {''.join(self.draft)} "
            f"(W_d={self.draft_window}), K={self.num_spec}, "
            f"{2 * self.num_kv_heads * self.head_dim * DTYPE_BYTES} B/token/layer"
        )


TINY = dict(num_layers=4, window=16, num_kv_heads=2, head_dim=32, num_spec=4)
TINY.update(max_positions=2048)
SMALL = dict(num_layers=16, window=4096, num_kv_heads=4, head_dim=128, num_spec=7)
SMALL.update(max_positions=8192)
L40 = dict(num_layers=40, window=4096, num_kv_heads=8, head_dim=128, num_spec=7)
L40.update(max_positions=131072)

LAYOUTS = [
    Layout(
        "tiny",
        "spark2_5-make-tiny-checkpoint --dspark defaults",
        draft=(SLIDING,),
        draft_window=16,
        **TINY,
    ),
    Layout(
        "tiny-SSF",
        "tiny target with a 3-layer draft: 'Add 1 padding layers ... 20.00%'",
        draft=(SLIDING, SLIDING, FULL),
        draft_window=16,
        **TINY,
    ),
    Layout(
        "tiny-oracle",
        "tests/test_dspark_gpu_oracle.py RNN_HYBRID draft (W_d=8 < W)",
        draft=(SLIDING, FULL),
        draft_window=8,
        **TINY,
    ),
    Layout(
        "small",
        "make_checkpoint --preset small, its default draft",
        draft=(SLIDING,),
        draft_window=4096,
        **SMALL,
    ),
    Layout(
        "small-SF",
        "small preset, sliding+full draft",
        draft=(SLIDING, FULL),
        draft_window=4096,
        **SMALL,
    ),
    Layout(
        "40L",
        "Spark2_5Config defaults (30S:10F), the presets' default draft",
        draft=(SLIDING,),
        draft_window=4096,
        **L40,
    ),
    Layout(
        "40L-SF",
        "Spark2_5Config defaults, sliding+full draft",
        draft=(SLIDING, FULL),
        draft_window=4096,
        **L40,
    ),
    Layout(
        "40L-Wd1024",
        "Spark2_5Config defaults, one sliding draft layer with a narrower window",
        draft=(SLIDING,),
        draft_window=1024,
        **L40,
    ),
]

OPTIONS = ("as is", "SW->full", "SW->target W", "SW->own W")
HYBRID_OFF = "hybrid manager off (user flag, as-is specs)"


def declared_window(layout: Layout, option: str) -> int | None:
    """What the draft's sliding layers tell vLLM (None: no window, full)."""
    w, w_d = layout.window, layout.draft_window
    return {
        "as is": w_d,
        "SW->full": None,
        "SW->target W": w,
        "SW->own W": w_d if w_d != w else w + 1,
    }[option]


def options_for(layout: Layout) -> list[str]:
    """The options that differ from ``as is`` and are safe (window >= W_d)."""
    if SLIDING not in layout.draft:
        return ["as is"]
    options = ["as is", "SW->full"]
    if layout.draft_window < layout.window:
        options.append("SW->target W")
    if layout.draft_window == layout.window:
        options.append("SW->own W")
    return options


# ---------------------------------------------------------------------------
# Specs: what Attention.get_kv_cache_spec returns for each layer on CUDA
# (model_executor/layers/attention/attention.py:606-677)
# ---------------------------------------------------------------------------


def attention_spec(layout: Layout, window: int | None):
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    common = dict(
        block_size=BLOCK_SIZE,
        num_kv_heads=layout.num_kv_heads,
        head_size=layout.head_dim,
        dtype=torch.bfloat16,
    )
    if window is None:
        return FullAttentionSpec(**common)
    return SlidingWindowSpec(**common, sliding_window=window)


def layer_specs(layout: Layout, option: str | None) -> dict:
    """Layer name -> KVCacheSpec in registration order (target, then draft).

    ``option=None``: the target alone. Draft layer j is
    ``model.layers.{num_target_layers + j}`` as the plugin names it.
    """
    specs = {}
    for i, kind in enumerate(layout.target):
        window = layout.window if kind == SLIDING else None
        specs[f"model.layers.{i}.self_attn.attn"] = attention_spec(layout, window)
    if option is None:
        return specs
    for j, kind in enumerate(layout.draft):
        window = declared_window(layout, option) if kind == SLIDING else None
        name = f"model.layers.{layout.num_layers + j}.self_attn.attn"
        specs[name] = attention_spec(layout, window)
    return specs


# ---------------------------------------------------------------------------
# vLLM's grouping and block accounting
# ---------------------------------------------------------------------------


class _Capture(logging.Filter):
    """Keeps (and hides) kv_cache_utils' padding warnings."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.messages.append(record.getMessage())
        return False


def make_vllm_config():
    from vllm.config import VllmConfig

    config = VllmConfig()
    # What H200 runs resolve to ("Using LBNHC KV cache layout" in
    # benchmarks/results/h200-2026-11-30-serving/acceptance.log): layer-outer,
    # so a block costs the widest group's pages.
    config.cache_config.kv_cache_layout = "LBNHC"
    return config


@dataclass
class Grouping:
    groups: list  # list[KVCacheGroupSpec]
    bytes_per_block: int
    page: int
    warnings: list[str] = field(default_factory=list)

    @property
    def slots(self) -> int:
        """Layer pages one block of any group costs (group_size)."""
        return self.bytes_per_block // self.page

    @property
    def padding(self) -> int:
        layers = sum(len(g.layer_names) for g in self.groups)
        return len(self.groups) * self.slots - layers

    def describe(self) -> str:
        counts: dict[str, list[int]] = {}
        for g in self.groups:
            window = getattr(g.kv_cache_spec, "sliding_window", None)
            sliding = type(g.kv_cache_spec).__name__ == "SlidingWindowSpec"
            key = f"SW{window}" if sliding else "F"
            counts.setdefault(key, []).append(len(g.layer_names))
        return ", ".join(
            f"{key}[{'+'.join(map(str, sizes))}]" for key, sizes in counts.items()
        )


def group(vllm_config, specs: dict) -> Grouping:
    """vLLM's grouping of ``specs`` (kv_cache_utils.get_kv_cache_groups)."""
    from vllm.v1.core import kv_cache_utils as ku

    capture = _Capture()
    logger = logging.getLogger(ku.__name__)
    logger.addFilter(capture)
    try:
        groups = ku.get_kv_cache_groups(vllm_config, dict(specs))
    finally:
        logger.removeFilter(capture)
    layout = vllm_config.cache_config.get_resolved_kv_cache_layout()
    bytes_per_block = ku._get_kv_cache_bytes_per_block(groups, layout)
    pages = {s.page_size_bytes for s in specs.values()}
    assert len(pages) == 1, pages
    return Grouping(groups, bytes_per_block, pages.pop(), capture.messages)


@dataclass(frozen=True)
class Usage:
    blocks: int  # blocks taken from the shared pool
    bytes: int  # blocks * bytes_per_block
    unpadded_bytes: int  # the same blocks, each charged only its real layers


def make_manager(vllm_config, grouping: Grouping, num_blocks: int):
    from vllm.v1.core import kv_cache_utils as ku
    from vllm.v1.core.kv_cache_manager import KVCacheManager

    config = ku.get_kv_cache_config_from_groups(
        vllm_config, grouping.groups, grouping.bytes_per_block * num_blocks
    )
    return KVCacheManager(
        config,
        max_model_len=1 << 20,
        scheduler_block_size=BLOCK_SIZE,
        hash_block_size=BLOCK_SIZE,
        max_in_flight_tokens=PREFILL_CHUNK,
        enable_caching=False,
        use_eagle=True,  # "dspark" is in SpeculativeConfig.use_eagle()
        num_prefill_lookahead=1,  # VllmConfig.num_prefill_lookahead_tokens
    )


def new_request(request_id: str, length: int):
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    return Request(request_id, [1] * length, SamplingParams(max_tokens=1 << 16), None)


def prefill_and_decode(manager, request, num_spec: int) -> None:
    """Chunked prefill of the prompt, then one decode step that verifies
    ``1 + num_spec`` tokens with ``num_spec`` lookahead slots (DSpark's
    ``VllmConfig.num_lookahead_tokens``), as the scheduler asks for them."""
    length = request.num_prompt_tokens
    done = 0
    while done < length:
        n = min(PREFILL_CHUNK, length - done)
        assert manager.allocate_slots(request, n, num_lookahead_tokens=num_spec)
        done += n
        request.num_computed_tokens = done
    request.append_output_token_ids(1)
    assert manager.allocate_slots(request, 1 + num_spec, num_lookahead_tokens=num_spec)


_USAGE: dict = {}


def request_usage(vllm_config, grouping: Grouping, length: int, num_spec: int):
    """Blocks one request holds in vLLM's manager at a decode step with
    ``length`` tokens of context (sliding groups have freed what left the
    window: SlidingWindowManager.remove_skipped_blocks). Memoised."""
    key = (
        tuple((tuple(g.layer_names), g.kv_cache_spec) for g in grouping.groups),
        length,
        num_spec,
    )
    if key not in _USAGE:
        _USAGE[key] = _request_usage(vllm_config, grouping, length, num_spec)
    return _USAGE[key]


def _request_usage(vllm_config, grouping: Grouping, length: int, num_spec: int):
    per_group = -(-(length + 2 * num_spec + 1) // BLOCK_SIZE) + 2
    manager = make_manager(vllm_config, grouping, per_group * len(grouping.groups))
    free = manager.block_pool.get_num_free_blocks()
    prefill_and_decode(manager, new_request("r", length), num_spec)
    used = free - manager.block_pool.get_num_free_blocks()
    held = [
        sum(not b.is_null for b in blocks)
        for blocks in manager.coordinator.get_blocks("r")
    ]
    assert sum(held) == used, (held, used)
    unpadded = sum(
        n * len(g.layer_names) * grouping.page
        for n, g in zip(held, grouping.groups, strict=True)
    )
    return Usage(used, used * grouping.bytes_per_block, unpadded)


def time_allocate(vllm_config, grouping: Grouping, num_spec: int) -> float:
    """Microseconds of ``allocate_slots`` per request per decode step: 64
    requests with 1600 tokens of context, every draft token accepted; the
    fastest of 16 steps after 2 untimed ones, garbage collection off."""
    num_reqs, length, warmup, steps = 64, 1600, 2, 16
    per_req = -(-(length + (warmup + steps + 2) * (num_spec + 1)) // BLOCK_SIZE)
    manager = make_manager(
        vllm_config, grouping, (per_req + 2) * num_reqs * len(grouping.groups)
    )
    requests = [new_request(f"r{i}", length) for i in range(num_reqs)]
    for request in requests:
        prefill_and_decode(manager, request, num_spec)
    step_times = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(warmup + steps):
            elapsed = 0.0
            for request in requests:
                request.num_computed_tokens += 1 + num_spec
                request.append_output_token_ids([1] * (1 + num_spec))
                start = time.perf_counter()
                ok = manager.allocate_slots(
                    request, 1 + num_spec, num_lookahead_tokens=num_spec
                )
                elapsed += time.perf_counter() - start
                assert ok is not None
            step_times.append(elapsed)
    finally:
        gc.enable()
    return min(step_times[warmup:]) / num_reqs * 1e6


def recommend(layout: Layout, vllm_config) -> tuple[str, list]:
    """The declaration the proposed rule picks for ``layout``.

    Candidates: every option of :func:`options_for`. One whose group count
    exceeds the target's plus the number of draft layers is dropped (each
    KV-cache group costs scheduler and worker time every step). For the rest,
    the draft's overhead (KV cache of one request over the target's alone) is
    taken at L = W and at L = max_position_embeddings: for L <= W every group
    holds all L tokens, so the overhead is the one at W, and beyond W it moves
    monotonically to the one at the longest request, so the larger of the two
    is the worst case over all lengths. The rule picks the smallest worst
    case, then the smaller sum of the two, ``as is`` on a tie, then fewer
    groups, ``OPTIONS`` order.
    """
    base = group(vllm_config, layer_specs(layout, None))
    lengths = (layout.window, layout.max_positions)
    base_bytes = [
        request_usage(vllm_config, base, n, layout.num_spec).bytes for n in lengths
    ]
    limit = len(base.groups) + len(layout.draft)
    ranked = []
    for option in options_for(layout):
        g = group(vllm_config, layer_specs(layout, option))
        if len(g.groups) > limit:
            ranked.append((option, len(g.groups), None))
            continue
        overhead = tuple(
            request_usage(vllm_config, g, n, layout.num_spec).bytes / b - 1
            for n, b in zip(lengths, base_bytes, strict=True)
        )
        ranked.append((option, len(g.groups), overhead))
    pick = min(
        (r for r in ranked if r[2] is not None),
        key=lambda r: (
            round(max(r[2]), 9),
            round(sum(r[2]), 9),
            r[0] != "as is",  # another declaration only if it saves memory
            r[1],
            OPTIONS.index(r[0]),
        ),
    )
    return pick[0], ranked


def print_recommendations(vllm_config, layouts: list[Layout]) -> None:
    print(
        "\n## The proposed rule: smallest worst-case overhead\n\n(extra KV cache "
        "per request over the target alone at L = W and at L = "
        "max_position_embeddings; '-': too many groups)\n\n"
        "| layout | option | groups | L=W | L=max | worst | picked |"
        "\n|---|---|---|---|---|---|---|"
    )
    for layout in layouts:
        pick, ranked = recommend(layout, vllm_config)
        for option, groups, overhead in ranked:
            cells = (
                ["-"] * 3
                if overhead is None
                else [f"{x * 100:+.1f}%" for x in (*overhead, max(overhead))]
            )
            mark = "**yes**" if option == pick else ""
            print(
                f"| {layout.name} | {option} | {groups} | "
                + " | ".join(cells)
                + f" | {mark} |"
            )


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def fmt_size(num_bytes: float) -> str:
    if num_bytes < 1 << 20:
        return f"{num_bytes / 1024:.0f} KiB"
    mib = num_bytes / (1 << 20)
    return f"{mib:.2f} MiB" if mib < 100 else f"{mib:.0f} MiB"


def short(message: str, width: int = 70) -> str:
    return message if len(message) <= width else message[: width - 3] + "..."


def pct(a: float, b: float) -> str:
    return f"{(a / b - 1) * 100:+.1f}%"


def report_layout(layout: Layout, vllm_config, timing: bool, summary: list) -> None:
    print(f"\n## {layout.title()}\n\n{layout.note}.")
    rows = [("target only", None)] + [(o, o) for o in options_for(layout)]
    groupings = {name: group(vllm_config, layer_specs(layout, o)) for name, o in rows}
    # For comparison, the user-side switch: --disable-hybrid-kv-cache-manager
    # turns every sliding layer into full attention for the cache
    # (kv_cache_utils.unify_hybrid_kv_cache_specs): one group, nothing freed.
    hybrid_off = make_vllm_config()
    hybrid_off.scheduler_config.disable_hybrid_kv_cache_manager = True
    refused = None
    try:
        groupings[HYBRID_OFF] = group(hybrid_off, layer_specs(layout, "as is"))
        rows.append((HYBRID_OFF, "as is"))
    except ValueError as e:  # windows that differ cannot share one full group
        refused = f"{HYBRID_OFF}: vLLM refuses the specs: ValueError: {e}"
    print(
        "\n| option | groups (layers per group) | group_size | padding | "
        "bytes/block | vLLM's warning |\n|---|---|---|---|---|---|"
    )
    for name, _ in rows:
        g = groupings[name]
        print(
            f"| {name} | {len(g.groups)}: {g.describe()} | {g.slots} | {g.padding} "
            f"| {g.bytes_per_block} | {'; '.join(map(short, g.warnings)) or '-'} |"
        )
    if refused:
        print(f"\n{refused}")
    header = " | ".join(
        f"L={n}{'*' if n > layout.max_positions else ''}" for n in LENGTHS
    )
    print(
        "\nKV cache one request holds at a decode step with L tokens of context "
        "(vs target only)\n\n"
        f"| option | {header} |\n|---|" + "---|" * len(LENGTHS)
    )
    usage = {
        name: [
            request_usage(vllm_config, groupings[name], n, layout.num_spec)
            for n in LENGTHS
        ]
        for name, _ in rows
    }
    base = usage["target only"]
    for name, _ in rows:
        cells = [
            fmt_size(u.bytes)
            + ("" if name == "target only" else f" ({pct(u.bytes, b.bytes)})")
            for u, b in zip(usage[name], base, strict=True)
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
        if name != "target only":
            summary.append((layout.name, name, groupings[name], usage[name], base))
    floor = usage["as is"]
    cells = [
        f"{fmt_size(u.unpadded_bytes)} ({pct(u.unpadded_bytes, b.bytes)})"
        for u, b in zip(floor, base, strict=True)
    ]
    print("| as is without padding | " + " | ".join(cells) + " |")
    summary.append((layout.name, "as is without padding", None, floor, base))
    if any(n > layout.max_positions for n in LENGTHS):
        print(f"\n\\* longer than max_position_embeddings={layout.max_positions}")
    if timing:
        print(
            "\n| option | groups | allocate_slots, us per request and step "
            "(best of 3) |"
        )
        print("|---|---|---|")
        for name, _ in rows:
            us = min(
                time_allocate(vllm_config, groupings[name], layout.num_spec)
                for _ in range(3)
            )
            print(f"| {name} | {len(groupings[name].groups)} | {us:.1f} |")


def print_summary(summary: list) -> None:
    header = " | ".join(f"L={n}" for n in LENGTHS)
    print(
        "\n## Summary: extra KV cache per request over the target alone\n\n"
        f"| layout | option | groups | padding | {header} |\n|---|---|---|---|"
        + "---|"
        * len(LENGTHS)
    )
    for name, option, grouping, usage, base in summary:
        if grouping is None:
            groups, padding = "-", "0"
            cells = [
                pct(u.unpadded_bytes, b.bytes) for u, b in zip(usage, base, strict=True)
            ]
        else:
            groups, padding = str(len(grouping.groups)), str(grouping.padding)
            cells = [pct(u.bytes, b.bytes) for u, b in zip(usage, base, strict=True)]
        print(
            f"| {name} | {option} | {groups} | {padding} | " + " | ".join(cells) + " |"
        )


# ---------------------------------------------------------------------------
# What the plugin declares (configs/kv_cache_window.py)
# ---------------------------------------------------------------------------

PLUGIN_OPTIONS = {"as is": "as is", "full": "SW->full", "target window": "SW->target W"}


def plugin_choice(layout: Layout):
    """``draft_kv_cache_window`` for ``layout`` with the hybrid manager on."""
    from vllm_spark2_5_plugin.configs.kv_cache_window import draft_kv_cache_window
    from vllm_spark2_5_plugin.names import FULL as FULL_TYPE
    from vllm_spark2_5_plugin.names import SLIDING as SLIDING_TYPE

    types = {SLIDING: SLIDING_TYPE, FULL: FULL_TYPE}
    return draft_kv_cache_window(
        target_layer_types=[types[k] for k in layout.target],
        target_window=layout.window,
        draft_layer_types=[types[k] for k in layout.draft],
        draft_window=layout.draft_window,
        num_speculative_tokens=layout.num_spec,
        block_size=BLOCK_SIZE,
        max_model_len=layout.max_positions,
    )


def print_plugin_choice(vllm_config, layouts: list[Layout]) -> None:
    """Before (``as is``) and after (the plugin's declaration): KV cache one
    request holds, and whether the plugin's closed form picks what the rule
    picks from vLLM's measured numbers."""
    header = " | ".join(f"L={n}" for n in LENGTHS)
    print(
        "\n## What the plugin declares (configs/kv_cache_window.py)\n\nKV cache "
        "one request holds, before (declaring W_d) -> after (the plugin's "
        "declaration), with the hybrid manager on\n\n"
        f"| layout | plugin declares | = rule above | groups | {header} |\n"
        "|---|---|---|---|" + "---|" * len(LENGTHS)
    )
    for layout in layouts:
        option = PLUGIN_OPTIONS[plugin_choice(layout).option]
        pick, _ = recommend(layout, vllm_config)
        before = group(vllm_config, layer_specs(layout, "as is"))
        after = group(vllm_config, layer_specs(layout, option))
        cells = []
        for n in LENGTHS:
            a = request_usage(vllm_config, before, n, layout.num_spec).bytes
            b = request_usage(vllm_config, after, n, layout.num_spec).bytes
            cells.append(
                fmt_size(a)
                if a == b
                else f"{fmt_size(a)} -> {fmt_size(b)} ({pct(b, a)})"
            )
        groups = f"{len(before.groups)} -> {len(after.groups)}"
        print(
            f"| {layout.name} | {option} | {'yes' if pick == option else '**no**'} "
            f"| {groups} | " + " | ".join(cells) + " |"
        )


# What benchmarks/results/h200-2026-11-30-serving/acceptance.log reports for the
# small preset + default draft (max_model_len 1024, max_num_batched_tokens
# 16384): "GPU KV cache size: 971,858 tokens, Maximum concurrency for 1,024
# tokens per request: 949.08x", with 5 groups of 4 slots (131072 B per block).
H200_MAX_MODEL_LEN = 1024
H200_BATCHED_TOKENS = 16384
H200_NUM_BLOCKS = 307_502  # 949.08 * 324 blocks per request: ~37.54 GiB


def print_h200_crosscheck(vllm_config) -> None:
    """vLLM's get_max_concurrency_for_kv_cache_config on the H200 run's memory,
    for each declaration of the small preset's draft layer."""
    from types import SimpleNamespace

    from vllm.v1.core import kv_cache_utils as ku

    layout = next(x for x in LAYOUTS if x.name == "small")
    planning = SimpleNamespace(  # what max_memory_usage_bytes reads
        model_config=SimpleNamespace(max_model_len=H200_MAX_MODEL_LEN),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
        max_in_flight_tokens=H200_BATCHED_TOKENS,
    )
    as_is = group(vllm_config, layer_specs(layout, "as is"))
    memory = H200_NUM_BLOCKS * as_is.bytes_per_block
    print(
        f"\n## Cross-check: the small preset on the H200 ({memory / 2**30:.2f} GiB "
        f"of KV cache, max_model_len {H200_MAX_MODEL_LEN})\n\nvLLM's "
        "get_max_concurrency_for_kv_cache_config; the log of the real run says "
        "949.08x for 'as is'.\n\n| option | blocks | KV cache tokens | max "
        "concurrency |\n|---|---|---|---|"
    )
    rows = [("target only", None)] + [(o, o) for o in options_for(layout)]
    for name, option in rows:
        g = group(vllm_config, layer_specs(layout, option))
        config = ku.get_kv_cache_config_from_groups(vllm_config, g.groups, memory)
        concurrency = ku.get_max_concurrency_for_kv_cache_config(planning, config)
        tokens = int(concurrency * H200_MAX_MODEL_LEN)
        print(f"| {name} | {config.num_blocks} | {tokens:,} | {concurrency:.2f}x |")


# ---------------------------------------------------------------------------
# --from-model: the specs the real layers produce
# ---------------------------------------------------------------------------


def _show(spec) -> str:
    window = getattr(spec, "sliding_window", None)
    return f"{type(spec).__name__}(sliding_window={window}, block={spec.block_size})"


def check_from_model() -> None:
    """Build tiny targets and drafts as the worker does (CPU, gloo) and read
    each attention layer's get_kv_cache_spec.

    1. The tiny checkpoint: compare with :func:`layer_specs` and show what a
       draft-like ``Attention`` declares with ``per_layer_sliding_window`` None
       or W+1 (the two alternative declarations).
    2. An all-sliding tiny target with a sliding+full draft, with
       ``cache_config.sliding_window`` set as ``EngineArgs`` sets it for such
       a model (engine/arg_utils.py:2247-2253): what the full draft layer
       declares.
    """
    import tempfile

    import vllm_spark2_5_plugin

    vllm_spark2_5_plugin.register()
    from vllm.config import (
        ModelConfig,
        ParallelConfig,
        SpeculativeConfig,
        VllmConfig,
        set_current_vllm_config,
    )
    from vllm.distributed import init_distributed_environment
    from vllm.distributed import initialize_model_parallel as init_model_parallel
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.layers.attention import Attention
    from vllm.model_executor.model_loader import get_model
    from vllm.utils.network_utils import get_open_port

    from vllm_spark2_5_plugin.names import FULL as FULL_TYPE
    from vllm_spark2_5_plugin.names import SLIDING as SLIDING_TYPE
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    layout = LAYOUTS[0]

    def build(tmp: str, engine_window: bool, **checkpoint):
        """(config, draft, {layer name: spec}) of a tiny checkpoint."""
        path = str(make_tiny_checkpoint(tmp, **checkpoint))
        target_config = ModelConfig(
            model=path, dtype="bfloat16", max_model_len=256, enforce_eager=True
        )
        parallel = ParallelConfig()
        spec_config = SpeculativeConfig(
            method="dspark",
            num_speculative_tokens=layout.num_spec,
            target_model_config=target_config,
            target_parallel_config=parallel,
        )
        config = VllmConfig(model_config=target_config, parallel_config=parallel)
        config.speculative_config = spec_config  # VllmConfig refuses it on CPU
        if engine_window:
            engine = EngineArgs(model=path, max_model_len=256).create_engine_config()
            config.cache_config.sliding_window = engine.cache_config.sliding_window
        with set_current_vllm_config(config):
            target = get_model(vllm_config=config, model_config=target_config)
            draft = get_model(
                vllm_config=config, model_config=spec_config.draft_model_config
            )
        specs = {
            m.layer_name: m.get_kv_cache_spec(config)
            for model in (target, draft)
            for m in model.modules()
            if isinstance(m, Attention)
        }
        return config, draft, specs

    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method=f"tcp://127.0.0.1:{get_open_port()}",
            backend="gloo",
        )
        init_model_parallel(1, 1)
    empty_cache = torch.accelerator.empty_cache
    torch.accelerator.empty_cache = lambda *a, **k: None  # as the CPU worker
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config, draft, built = build(f"{tmp}/tiny", False, dspark=True)
            probe = draft.model.layers[0].self_attn
            alternatives = {}
            with set_current_vllm_config(config):
                for option in ("SW->full", "SW->own W"):
                    attn = Attention(
                        probe.num_heads,
                        probe.head_dim,
                        probe.scale,
                        num_kv_heads=probe.num_kv_heads,
                        cache_config=config.cache_config,
                        per_layer_sliding_window=declared_window(layout, option),
                        prefix=f"probe.{option}.attn",
                    )
                    alternatives[option] = attn.get_kv_cache_spec(config)
            all_sliding = build(
                f"{tmp}/all-sliding",
                True,
                dspark={"dspark_layer_types": [SLIDING_TYPE, FULL_TYPE]},
                layer_types=[SLIDING_TYPE] * 4,
            )
    finally:
        torch.accelerator.empty_cache = empty_cache
        cleanup_dist_env_and_memory()

    (block,) = {s.block_size for s in built.values()}  # the CPU backend's
    expected = {
        name: replace(s, block_size=block)
        for name, s in layer_specs(layout, "as is").items()
    }
    print("\n## --from-model: the tiny checkpoint built with get_model on CPU\n")
    print("| layer | Attention.get_kv_cache_spec | = assumed spec |\n|---|---|---|")
    for name, spec in built.items():
        print(f"| {name} | {_show(spec)} | {expected.get(name) == spec} |")
    for option, spec in alternatives.items():
        print(f"| draft-like layer, {option} | {_show(spec)} | - |")
    if built != expected:
        raise SystemExit("the layers' specs differ from the assumed ones")
    vllm_config = make_vllm_config()
    print("\nvLLM's grouping of these specs (CPU block size):\n")
    target = {k: v for k, v in built.items() if k != "model.layers.4.self_attn.attn"}
    for label, specs in (("target only", target), ("as is", built)) + tuple(
        (o, {**target, "model.layers.4.self_attn.attn": s})
        for o, s in alternatives.items()
    ):
        g = group(vllm_config, specs)
        print(f"- {label}: {len(g.groups)} groups {g.describe()}, padding {g.padding}")

    config, draft, _ = all_sliding
    print(
        "\nAll-sliding tiny target (4 x sliding_attention), draft sliding+full; "
        f"cache_config.sliding_window = {config.cache_config.sliding_window} as "
        "EngineArgs sets it:\n\n| draft layer | type | kernel window | "
        "Attention.get_kv_cache_spec |\n|---|---|---|---|"
    )
    for layer in draft.model.layers:
        attn = layer.self_attn
        spec = attn.attn.get_kv_cache_spec(config)
        print(
            f"| {attn.attn.layer_name} | {attn.layer_type} | {attn.sliding_window} "
            f"| {_show(spec)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--timing", action="store_true", help="time allocate_slots per option"
    )
    parser.add_argument(
        "--from-model",
        action="store_true",
        help="also build the tiny checkpoint and check its layers' specs",
    )
    parser.add_argument(
        "--layouts", nargs="*", metavar="NAME", help="only these layouts"
    )
    args = parser.parse_args()
    names = [x.name for x in LAYOUTS]
    if args.layouts is not None and (
        not args.layouts or set(args.layouts) - set(names)
    ):
        parser.error(f"--layouts {' '.join(args.layouts)}: use some of {names}")

    import datetime

    from machine import describe  # benchmarks/machine.py

    import vllm_spark2_5_plugin

    # The tables are vLLM's arithmetic (the same on any machine with these
    # versions); only --timing measures, on this machine, at this date.
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(
        f"# KV-cache grouping of Spark2_5 + DSpark\n\n{describe()}, plugin "
        f"{vllm_spark2_5_plugin.__version__}; {date}; block_size "
        f"{BLOCK_SIZE}, bf16 cache, LBNHC layout, prefill chunk {PREFILL_CHUNK}\n\n"
        "Computed with vLLM's own grouping and KV-cache manager, not measured: "
        "the tables depend only on the vLLM and plugin versions"
        + ("; the --timing figures are measured here." if args.timing else ".")
    )
    vllm_config = make_vllm_config()
    summary: list = []
    for layout in LAYOUTS:
        if args.layouts is None or layout.name in args.layouts:
            report_layout(layout, vllm_config, args.timing, summary)
    if summary:
        print_summary(summary)
        chosen = [x for x in LAYOUTS if args.layouts is None or x.name in args.layouts]
        print_recommendations(vllm_config, chosen)
        print_plugin_choice(vllm_config, chosen)
    if args.layouts is None:
        print_h200_crosscheck(vllm_config)
    if args.from_model:
        check_from_model()


if __name__ == "__main__":
    main()
