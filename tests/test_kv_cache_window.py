# SPDX-License-Identifier: Apache-2.0
"""The KV-cache window the DSpark draft's sliding layers declare to vLLM.

The plugin evaluates vLLM's KV-cache grouping in closed form
(``configs/kv_cache_window.py``). Here the closed form is held against vLLM's
own ``get_kv_cache_groups`` and a real ``KVCacheManager`` on the layouts of
``benchmarks/kv_cache_grouping.py``, so a vLLM upgrade that changes the
grouping fails here; the picks are derived from vLLM's numbers and compared
with the table of ``benchmarks/kv_cache_grouping.md``; and a draft built in
vLLM declares a full cache while its sliding layer still computes with its
own window.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import NamedTuple

import pytest
import torch

from vllm_spark2_5_plugin import vllm_seam
from vllm_spark2_5_plugin.configs.kv_cache_window import (
    AS_IS,
    DECLARE_FULL,
    TARGET_WINDOW,
    KVCacheLayout,
    draft_kv_cache_window,
    num_kv_cache_groups,
)
from vllm_spark2_5_plugin.names import FULL, SLIDING

S, F = SLIDING, FULL
BLOCK_SIZE = 16  # the CUDA default
PREFILL_CHUNK = 8192


class Layout(NamedTuple):
    """A target (every fourth layer full unless ``all_sliding``) and its draft."""

    num_layers: int
    window: int  # W
    draft: tuple[str, ...]
    draft_window: int  # W_d
    num_spec: int  # K
    max_model_len: int
    all_sliding: bool = False

    @property
    def target(self) -> tuple[str, ...]:
        if self.all_sliding:
            return (S,) * self.num_layers
        return tuple(F if i % 4 == 3 else S for i in range(self.num_layers))

    def closed_form(self) -> KVCacheLayout:
        return KVCacheLayout(
            self.target, self.window, self.draft, self.num_spec, BLOCK_SIZE
        )

    def choose(self, **overrides):
        return draft_kv_cache_window(
            target_layer_types=self.target,
            target_window=self.window,
            draft_layer_types=self.draft,
            draft_window=self.draft_window,
            num_speculative_tokens=self.num_spec,
            block_size=BLOCK_SIZE,
            max_model_len=self.max_model_len,
            **overrides,
        )


# The layouts of benchmarks/kv_cache_grouping.py and the option its "Best
# option per layout" table picks (from vLLM's measured KV cache).
LAYOUTS = {
    "tiny": (Layout(4, 16, (S,), 16, 4, 2048), AS_IS),
    "tiny-SSF": (Layout(4, 16, (S, S, F), 16, 4, 2048), AS_IS),
    # tiny-oracle: the target's W ties with W_d on memory (3 groups instead
    # of 6); on a tie the rule keeps W_d.
    "tiny-oracle": (Layout(4, 16, (S, F), 8, 4, 2048), AS_IS),
    "small": (Layout(16, 4096, (S,), 4096, 7, 8192), AS_IS),
    "small-SF": (Layout(16, 4096, (S, F), 4096, 7, 8192), DECLARE_FULL),
    "40L": (Layout(40, 4096, (S,), 4096, 7, 131072), DECLARE_FULL),
    "40L-SF": (Layout(40, 4096, (S, F), 4096, 7, 131072), AS_IS),
    "40L-Wd1024": (Layout(40, 4096, (S,), 1024, 7, 131072), DECLARE_FULL),
}


def declarations(layout: Layout) -> dict[str, int | None]:
    """The rule's candidates, plus a window of the draft's own (a bucket no
    target layer shares) to cover the third kind of bucket."""
    options = {AS_IS: layout.draft_window, "own window": layout.window + 1}
    if F in layout.target:
        options[DECLARE_FULL] = None
    if layout.draft_window < layout.window:
        options[TARGET_WINDOW] = layout.window
    return options


def lengths(layout: Layout) -> list[int]:
    """Context lengths the rule evaluates, and one in between."""
    points = {layout.draft_window, layout.window, 1600, layout.max_model_len}
    return sorted(min(n, layout.max_model_len) for n in points)


# ---------------------------------------------------------------------------
# vLLM's side: specs, grouping, and the blocks a request holds
# ---------------------------------------------------------------------------


def vllm_config(hybrid: bool = True):
    from vllm.config import VllmConfig

    config = VllmConfig()
    # What the H200 runs resolve to: layer-outer, so a block costs the widest
    # group's pages. ``hybrid=False`` is --disable-hybrid-kv-cache-manager.
    config.cache_config.kv_cache_layout = "LBNHC"
    config.scheduler_config.disable_hybrid_kv_cache_manager = not hybrid
    return config


def specs(layout: Layout, declared: int | None) -> dict:
    """What ``Attention.get_kv_cache_spec`` gives every layer (target, then
    draft, named as the plugin names them)."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    def spec(window: int | None):
        common = dict(
            block_size=BLOCK_SIZE, num_kv_heads=2, head_size=64, dtype=torch.bfloat16
        )
        if window is None:
            return FullAttentionSpec(**common)
        return SlidingWindowSpec(**common, sliding_window=window)

    kinds = [(k, layout.window) for k in layout.target]
    kinds += [(k, declared) for k in layout.draft]
    return {
        f"model.layers.{i}.self_attn.attn": spec(window if kind == S else None)
        for i, (kind, window) in enumerate(kinds)
    }


class Grouping(NamedTuple):
    groups: list
    group_size: int  # layer pages one block costs
    bytes_per_block: int


def group(layout: Layout, declared: int | None, hybrid: bool = True) -> Grouping:
    from vllm.v1.core import kv_cache_utils as ku

    config = vllm_config(hybrid)
    layer_specs = specs(layout, declared)
    logger = logging.getLogger(ku.__name__)
    level = logger.level
    logger.setLevel(logging.ERROR)  # "Add %d padding layers ..."
    try:
        groups = ku.get_kv_cache_groups(config, layer_specs)
    finally:
        logger.setLevel(level)
    layout_kind = config.cache_config.get_resolved_kv_cache_layout()
    bytes_per_block = ku._get_kv_cache_bytes_per_block(groups, layout_kind)
    (page,) = {s.page_size_bytes for s in layer_specs.values()}
    return Grouping(groups, bytes_per_block // page, bytes_per_block)


@functools.cache
def measured_pages(layout: Layout, declared: int | None, length: int) -> int:
    """Layer pages of the shared pool one request holds in vLLM's
    ``KVCacheManager`` after a chunked prefill of ``length`` tokens and one
    DSpark decode step (``1 + K`` tokens and ``K`` lookahead slots)."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.core import kv_cache_utils as ku
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.request import Request

    k = layout.num_spec
    g = group(layout, declared)
    per_group = -(-(length + 2 * k + 1) // BLOCK_SIZE) + 2
    config = ku.get_kv_cache_config_from_groups(
        vllm_config(), g.groups, g.bytes_per_block * per_group * len(g.groups)
    )
    manager = KVCacheManager(
        config,
        max_model_len=1 << 20,
        scheduler_block_size=BLOCK_SIZE,
        hash_block_size=BLOCK_SIZE,
        max_in_flight_tokens=PREFILL_CHUNK,
        enable_caching=False,
        use_eagle=True,  # "dspark" is in SpeculativeConfig.use_eagle()
        num_prefill_lookahead=1,
    )
    request = Request("r", [1] * length, SamplingParams(max_tokens=1 << 16), None)
    free = manager.block_pool.get_num_free_blocks()
    for done in range(0, length, PREFILL_CHUNK):
        n = min(PREFILL_CHUNK, length - done)
        assert manager.allocate_slots(request, n, num_lookahead_tokens=k)
        request.num_computed_tokens = done + n
    request.append_output_token_ids(1)
    assert manager.allocate_slots(request, 1 + k, num_lookahead_tokens=k)
    return (free - manager.block_pool.get_num_free_blocks()) * g.group_size


# ---------------------------------------------------------------------------
# The closed form against vLLM
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_closed_form_groups_like_vllm(name):
    """Group count and group size of every declaration, and the target's."""
    layout = LAYOUTS[name][0]
    form = layout.closed_form()
    target_only = layout._replace(draft=())
    cases = [(target_only, None, form.buckets(None, with_draft=False))]
    cases += [(layout, d, form.buckets(d)) for d in declarations(layout).values()]
    for case, declared, buckets in cases:
        g = group(case, declared)
        assert num_kv_cache_groups(buckets) == len(g.groups), (declared, buckets)
        assert vllm_seam.kv_cache_group_size(list(buckets.values())) == g.group_size
        # The buckets are vLLM's: each group holds layers of one window, and
        # the groups of a window hold that bucket's layers.
        layer_specs = specs(case, declared)
        held: dict[int | None, int] = {}
        for x in g.groups:
            (window,) = {
                getattr(layer_specs[n], "sliding_window", None) for n in x.layer_names
            }
            held[window] = held.get(window, 0) + len(x.layer_names)
        assert held == buckets


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_closed_form_counts_the_pages_vllms_manager_holds(name):
    layout = LAYOUTS[name][0]
    form = layout.closed_form()
    for declared in declarations(layout).values():
        buckets = form.buckets(declared)
        for n in lengths(layout):
            want = measured_pages(layout, declared, n)
            assert form.request_pages(buckets, n) == want, (declared, n)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_picks_are_the_best_by_vllms_own_numbers(name):
    """The rule applied to vLLM's measured KV cache (smallest worst-case
    overhead over the target alone among candidates that keep the group
    count; then the sum; W_d on a memory tie; then fewer groups, candidate
    order) picks what the benchmark's table says, and so does the plugin's
    closed form."""
    layout, table_pick = LAYOUTS[name]
    target_only = layout._replace(draft=())
    points = sorted(
        {min(n, layout.max_model_len) for n in (layout.draft_window, layout.window)}
        | {layout.max_model_len}
    )
    base = [measured_pages(target_only, None, n) for n in points]
    limit = len(group(target_only, None).groups) + len(layout.draft)
    ranked = []
    candidates = {k: v for k, v in declarations(layout).items() if k != "own window"}
    for order, (option, declared) in enumerate(candidates.items()):
        groups = len(group(layout, declared).groups)
        if groups > limit:
            continue
        over = [
            measured_pages(layout, declared, n) / b - 1
            for n, b in zip(points, base, strict=True)
        ]
        worst, total = round(max(over), 9), round(sum(over), 9)
        ranked.append(((worst, total, option != AS_IS, groups, order), option))
    vllm_pick = min(ranked)[1]
    assert vllm_pick == table_pick
    choice = layout.choose()
    assert (choice.option, choice.window) == (vllm_pick, candidates[vllm_pick])


# ---------------------------------------------------------------------------
# The settings that override the rule
# ---------------------------------------------------------------------------


OVERRIDDEN = {
    # hybrid manager off: W_d == W stays, otherwise a window vLLM accepts
    "mixed, W_d == W": (Layout(40, 4096, (S,), 4096, 7, 131072), 4096),
    "mixed, W_d < W": (Layout(4, 16, (S, F), 8, 4, 2048), None),
    "mixed, W_d > W": (Layout(4, 16, (S,), 32, 4, 2048), None),
    "all sliding, W_d < W": (Layout(4, 16, (S,), 8, 4, 2048, True), 16),
    "all sliding, W_d > W": (Layout(4, 16, (S, F), 32, 4, 2048, True), None),
}


@pytest.mark.parametrize("case", sorted(OVERRIDDEN))
def test_without_the_hybrid_manager_vllm_accepts_the_declaration(case):
    """vLLM refuses two windows in its single group; the chosen declaration
    goes through, and frees no block the kernel reads."""
    layout, window = OVERRIDDEN[case]
    choice = layout.choose(hybrid_manager_disabled=True)
    assert choice.window == window
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    (single,) = group(layout, window, hybrid=False).groups
    spec = single.kv_cache_spec
    if isinstance(spec, SlidingWindowSpec):  # the one group still frees
        assert spec.sliding_window >= layout.draft_window
    if layout.draft_window != layout.window:
        with pytest.raises(ValueError):
            group(layout, layout.draft_window, hybrid=False)


def test_sliding_layers_kept_out_of_kv_cache_quantization_keep_their_window():
    layout = LAYOUTS["40L"][0]
    assert layout.choose().window is None
    choice = layout.choose(sliding_layers_skip_quantization=True)
    assert (choice.option, choice.window) == (AS_IS, 4096)
    assert "kv_cache_dtype_skip_layers" in choice.describe(4096)


def test_full_is_offered_only_when_the_target_has_a_full_layer():
    # Like 40L, where full wins, but with an all-sliding target.
    layout = Layout(40, 4096, (S,), 4096, 7, 131072, all_sliding=True)
    assert layout.choose().window == 4096
    assert Layout(40, 4096, (F,), 4096, 7, 131072).choose().option == AS_IS


def test_the_log_line_says_what_is_declared_and_what_it_saves():
    text = LAYOUTS["40L"][0].choose().describe(4096)
    assert "declare a full KV cache" in text
    assert "+10.0%" in text and "+25.0%" in text and "saves 12.0%" in text
    text = LAYOUTS["40L-Wd1024"][0].choose().describe(1024)
    assert "41 groups (more than 5)" in text


def test_a_layer_never_declares_less_than_it_reads():
    from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config
    from vllm_spark2_5_plugin.models.spark2_5 import (
        Spark2_5LayerSpec,
        declared_kv_cache_window,
    )

    config = Spark2_5Config(num_hidden_layers=4)
    for declared, want in (("same", 16), (None, None), (32, 32)):
        spec = Spark2_5LayerSpec(config, S, 16, kv_cache_window=declared)
        assert declared_kv_cache_window(spec) == want
        assert declared_kv_cache_window(dataclasses.replace(spec, layer_type=F)) is None
    with pytest.raises(ValueError, match="cannot declare a 8-token"):
        declared_kv_cache_window(Spark2_5LayerSpec(config, S, 16, kv_cache_window=8))


# ---------------------------------------------------------------------------
# End to end: a draft built in vLLM declares full, computes with W_d
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def declared_full(world, tmp_path_factory):
    """An 8-layer tiny target (6 sliding, 2 full, W = 16) with a one-layer
    sliding draft, max_model_len 32, built with the hybrid manager on: as is
    would pad a fourth sliding group (+25%), full costs +12.5%."""
    from test_dspark_model import build

    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    path = make_tiny_checkpoint(
        tmp_path_factory.mktemp("declared-full"),
        seed=3,
        dspark=True,
        num_hidden_layers=8,
        layer_types=[S, S, S, F] * 2,
    )
    return build(path, max_model_len=32)


@pytest.mark.cpu_build  # the draft on the CPU, as in test_dspark_model.py
def test_a_draft_declared_full_keeps_its_window_for_the_math(
    declared_full, monkeypatch
):
    from test_dspark_model import check_block_forward_and_base_logits
    from vllm.model_executor.layers.attention import Attention
    from vllm.v1.core import kv_cache_utils as ku
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    built = declared_full
    draft = built.draft
    assert draft.kv_cache_choice.option == DECLARE_FULL
    (layer,) = draft.model.layers
    assert layer.self_attn.sliding_window == 16  # what the kernel reads
    assert layer.self_attn.attn.sliding_window is None  # what vLLM is told
    spec = layer.self_attn.attn.get_kv_cache_spec(built.vllm_config)
    assert type(spec) is FullAttentionSpec, spec

    # vLLM groups the real specs without padding: 2 sliding groups and 1 full
    # group of 3 layers each, where declaring 16 gave 5 groups of 2.
    real = {
        m.layer_name: m.get_kv_cache_spec(built.vllm_config)
        for model in (built.target, draft)
        for m in model.modules()
        if isinstance(m, Attention)
    }
    # (The engine core resolves the layout; the H200 runs resolved LBNHC.)
    monkeypatch.setattr(built.vllm_config.cache_config, "kv_cache_layout", "LBNHC")
    groups = ku.get_kv_cache_groups(built.vllm_config, real)
    assert [len(g.layer_names) for g in groups] == [3, 3, 3]
    assert layer.self_attn.attn.layer_name in groups[-1].layer_names

    # The math is unchanged: the block forward matches the reference, which
    # reads the last 16 context positions (and tells 17 apart).
    check_block_forward_and_base_logits(built)
