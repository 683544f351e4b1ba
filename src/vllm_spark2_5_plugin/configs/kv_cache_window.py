# SPDX-License-Identifier: Apache-2.0
"""The KV-cache window the DSpark draft's sliding layers declare to vLLM.

A sliding draft layer reads the last W_d context positions with the
fixed-history kernel, whatever it tells vLLM. What it tells vLLM's KV-cache
manager (``Attention``'s ``per_layer_sliding_window``, hence its KV-cache
spec) only decides which blocks the manager keeps and how it groups the
layers, and any window >= W_d, or none, keeps every block the kernel reads.

vLLM buckets layers with equal specs, cuts every bucket into groups of one
common size and pads the buckets that do not divide evenly; every block of
every group costs ``group_size`` layer pages, padding included. One sliding
draft layer next to a 40-layer target (30 sliding, 10 full) thus adds a whole
padded sliding group: +25% KV cache per request, where declaring it full
costs +10%. No single declaration is best for every layout
(``benchmarks/kv_cache_grouping.md``), so :func:`draft_kv_cache_window`
evaluates vLLM's grouping in closed form for the three safe candidates and
picks one. Torch-free; the two vLLM rules it mirrors are in the seam
(:func:`vllm_seam.kv_cache_group_size`,
:func:`vllm_seam.sliding_window_freed_blocks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from vllm_spark2_5_plugin import vllm_seam
from vllm_spark2_5_plugin.names import FULL, SLIDING

#: ``Spark2_5LayerSpec.kv_cache_window`` default: declare the layer's own
#: ``sliding_window`` (None there means a full cache, so it cannot be the
#: default).
SAME_WINDOW: Final = "same"
KVCacheWindow = int | None | Literal["same"]

AS_IS, DECLARE_FULL, TARGET_WINDOW = "as is", "full", "target window"
#: vLLM's ``CacheConfig.DEFAULT_BLOCK_SIZE``, for a config whose block size is
#: not resolved yet.
DEFAULT_BLOCK_SIZE = 16


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class KVCacheLayout:
    """What vLLM's KV-cache manager sees of a Spark2_5 target and its draft.

    ``target_window`` is the target's ``sliding_window`` (W) and
    ``num_speculative_tokens`` K: at a decode step vLLM gives a request of
    L context tokens slots for ``L + 1 + K`` verified tokens plus K lookahead.
    The draft's sliding layers' window is what each method is asked about
    (``declared``).
    """

    target_layer_types: tuple[str, ...]
    target_window: int | None
    draft_layer_types: tuple[str, ...]
    num_speculative_tokens: int
    block_size: int

    def buckets(
        self, declared: int | None, with_draft: bool = True
    ) -> dict[int | None, int]:
        """Layer count per declared window (None: full attention) when the
        draft's sliding layers declare ``declared``; these are vLLM's buckets
        (full specs with no or one window merge; sliding ones merge only when
        their windows are equal). ``with_draft=False``: the target alone."""
        counts: dict[int | None, int] = {}
        kinds = [(k, self.target_window) for k in self.target_layer_types]
        if with_draft:
            kinds += [(k, declared) for k in self.draft_layer_types]
        for kind, window in kinds:
            key = window if kind == SLIDING else None
            counts[key] = counts.get(key, 0) + 1
        return counts

    def request_pages(self, buckets: dict[int | None, int], length: int) -> int:
        """Layer pages of the shared pool one request holds at a decode step
        with ``length`` tokens of context, padding included."""
        group_size = vllm_seam.kv_cache_group_size(list(buckets.values()))
        return group_size * sum(
            _cdiv(layers, group_size) * self.blocks_held(window, length)
            for window, layers in buckets.items()
        )

    def blocks_held(self, window: int | None, length: int) -> int:
        """Blocks one group holds for a request at a decode step with
        ``length`` context tokens: slots for the verified block and the
        lookahead, less what a sliding group has freed."""
        blocks = _cdiv(length + 2 * self.num_speculative_tokens + 1, self.block_size)
        if window is None:
            return blocks
        freed = vllm_seam.sliding_window_freed_blocks(length, window, self.block_size)
        return blocks - min(blocks, freed)


def num_kv_cache_groups(buckets: dict[int | None, int]) -> int:
    """How many KV-cache groups vLLM makes of ``buckets``."""
    group_size = vllm_seam.kv_cache_group_size(list(buckets.values()))
    return sum(_cdiv(layers, group_size) for layers in buckets.values())


@dataclass(frozen=True)
class KVCacheWindowChoice:
    """The window the draft's sliding layers declare (None: full), and why.

    ``reason`` is set when a setting decided it; otherwise the rule did, and
    the other fields say how: KV-cache group counts (``groups`` for the
    choice, ``as_is_groups`` for W_d, at most ``group_limit`` allowed),
    worst-case extra KV cache per request over the target alone
    (``overhead``, ``as_is_overhead``) and the share of a short request's
    KV cache saved over declaring W_d (``saving``).
    """

    window: int | None
    option: str
    reason: str | None = None
    groups: int = 0
    as_is_groups: int = 0
    group_limit: int = 0
    overhead: float = 0.0
    as_is_overhead: float = 0.0
    saving: float = 0.0

    def describe(self, draft_window: int) -> str:
        """One log line: what is declared, and why."""
        declared = (
            "a full KV cache"
            if self.window is None
            else f"a {self.window}-token window"
        )
        text = (
            f"DSpark draft sliding layers (kernel window {draft_window}) declare "
            f"{declared} to vLLM's KV-cache manager"
        )
        if self.reason is not None:
            return f"{text}: {self.reason}"
        text += (
            f": {self.groups} KV-cache groups, worst-case KV cache per request "
            f"{self.overhead:+.1%} over the target alone"
        )
        if self.option == AS_IS:
            return text
        text += (
            f"; declaring {draft_window} would give {self.as_is_groups} groups"
            + (
                f" (more than {self.group_limit})"
                if self.as_is_groups > self.group_limit
                else ""
            )
            + f" and {self.as_is_overhead:+.1%}"
        )
        if self.saving > 0.0005:
            text += f", so this saves {self.saving:.1%} of a short request's KV cache"
        return text


def draft_kv_cache_window(
    *,
    target_layer_types: Sequence[str],
    target_window: int | None,
    draft_layer_types: Sequence[str],
    draft_window: int,
    num_speculative_tokens: int,
    block_size: int,
    max_model_len: int,
    hybrid_manager_disabled: bool = False,
    sliding_layers_skip_quantization: bool = False,
) -> KVCacheWindowChoice:
    """The window the draft's sliding layers declare to vLLM (None: full).

    Candidates, each >= W_d and so safe: W_d (``as is``); no window
    (``full``), only when the target has a full layer (a layer that declares
    no window joins the full bucket; without one it would form a bucket of
    its own); the target's W when W_d < W (``target window``). With the
    hybrid KV-cache manager on:

    1. vLLM's buckets per candidate (:meth:`KVCacheLayout.buckets`), its
       group size (smallest bucket, or largest when < 1.5x the smallest) and
       group count; a candidate with more groups than the target alone plus
       the number of draft layers is dropped (each group costs scheduler and
       worker time every step).
    2. Its overhead at L tokens of context: ``pages(L) / target pages(L) - 1``
       with ``pages(L) = group_size * sum_b cdiv(n_b, group_size) *
       blocks_b(L)``; ``blocks_b`` counts the slots of the step
       (``L + 2K + 1``) less what a sliding bucket has freed.
    3. The pick: the smallest worst case over L = W_d, W and max_model_len
       (below the windows the overhead is constant, beyond them it moves
       monotonically), then the smaller sum over those lengths. Another
       declaration than W_d is taken only when it saves memory: on a tie W_d
       stays (fewer groups would save some scheduler time per step, which
       has not been measured against running a different cache layout),
       then fewer groups and the candidate order above.

    Two settings override the rule:

    * ``hybrid_manager_disabled``: vLLM then keeps all layers in one group;
      with a full layer among them, every sliding spec becomes a full one
      that frees nothing. W_d is kept when it equals W (or the target has no
      sliding layer); otherwise vLLM refuses two windows in its one group,
      so the layers declare full when the target has a full layer (the
      memory is the same whatever is declared), else W when W_d < W (one
      sliding group that frees below W >= W_d), else full (the target's
      sliding layers are then made full as well: nothing is freed).
    * ``sliding_layers_skip_quantization`` (``"sliding_window"`` in
      ``kv_cache_dtype_skip_layers``): W_d is kept. vLLM skips the quantized
      cache for layers that declare a window, so a layer declared full would
      get another page size than the target's sliding layers, which the
      closed form does not model.
    """
    layout = KVCacheLayout(
        tuple(target_layer_types),
        target_window,
        tuple(draft_layer_types),
        num_speculative_tokens,
        block_size,
    )
    target_slides = SLIDING in layout.target_layer_types
    target_full = FULL in layout.target_layer_types
    if SLIDING not in layout.draft_layer_types:
        return KVCacheWindowChoice(draft_window, AS_IS, "the draft has none")
    if sliding_layers_skip_quantization:
        return KVCacheWindowChoice(
            draft_window, AS_IS, "kv_cache_dtype_skip_layers names sliding_window"
        )
    if hybrid_manager_disabled:
        if not target_slides or draft_window == target_window:
            return KVCacheWindowChoice(
                draft_window, AS_IS, "the hybrid KV-cache manager is disabled"
            )
        reason = "the hybrid KV-cache manager is disabled and refuses a second window"
        if not target_full and draft_window < target_window:
            return KVCacheWindowChoice(target_window, TARGET_WINDOW, reason)
        return KVCacheWindowChoice(None, DECLARE_FULL, reason)

    candidates: dict[str, int | None] = {AS_IS: draft_window}
    if target_full:
        candidates[DECLARE_FULL] = None
    if target_slides and draft_window < target_window:
        candidates[TARGET_WINDOW] = target_window
    target = layout.buckets(None, with_draft=False)
    limit = num_kv_cache_groups(target) + len(layout.draft_layer_types)
    lengths = sorted(
        {
            min(n, max_model_len)
            for n in (draft_window, target_window if target_slides else None)
            if n is not None
        }
        | {max_model_len}
    )
    base = [layout.request_pages(target, n) for n in lengths]
    ranked = []
    for order, (option, declared) in enumerate(candidates.items()):
        buckets = layout.buckets(declared)
        groups = num_kv_cache_groups(buckets)
        if groups > limit and option != AS_IS:
            continue
        pages = [layout.request_pages(buckets, n) for n in lengths]
        overhead = [p / b - 1 for p, b in zip(pages, base, strict=True)]
        # W_d stays the fallback when nothing else keeps the group count, and
        # the pick whenever another declaration would not save memory.
        worst, total = round(max(overhead), 9), round(sum(overhead), 9)
        key = (groups > limit, worst, total, option != AS_IS, groups, order)
        ranked.append((key, option, declared, groups, max(overhead), pages[0]))
    ranked.sort()
    _, option, declared, groups, worst, short = ranked[0]
    _, _, _, as_is_groups, as_is_worst, as_is_short = next(
        r for r in ranked if r[1] == AS_IS
    )
    return KVCacheWindowChoice(
        declared,
        option,
        groups=groups,
        as_is_groups=as_is_groups,
        group_limit=limit,
        overhead=worst,
        as_is_overhead=as_is_worst,
        saving=1 - short / as_is_short,
    )


def choose_draft_kv_cache_window(
    vllm_config: Any, settings: Any
) -> KVCacheWindowChoice:
    """:func:`draft_kv_cache_window` for the engine ``vllm_config`` (the
    target's model config, as the draft's constructor sees it) and the
    draft's ``DSparkSettings``; vLLM's configs are read as plain data."""
    target = vllm_config.model_config.hf_config
    spec_config = vllm_config.speculative_config
    cache_config = vllm_config.cache_config
    num_speculative_tokens = (
        getattr(spec_config, "num_speculative_tokens", None) or settings.block_size
    )
    return draft_kv_cache_window(
        target_layer_types=target.layer_types,
        target_window=target.sliding_window,
        draft_layer_types=settings.layer_types,
        draft_window=settings.sliding_window,
        num_speculative_tokens=num_speculative_tokens or 1,
        block_size=cache_config.block_size or DEFAULT_BLOCK_SIZE,
        max_model_len=vllm_config.model_config.max_model_len,
        hybrid_manager_disabled=bool(
            vllm_config.scheduler_config.disable_hybrid_kv_cache_manager
        ),
        sliding_layers_skip_quantization="sliding_window"
        in (cache_config.kv_cache_dtype_skip_layers or ()),
    )


__all__ = [
    "SAME_WINDOW",
    "KVCacheLayout",
    "KVCacheWindow",
    "KVCacheWindowChoice",
    "choose_draft_kv_cache_window",
    "draft_kv_cache_window",
    "num_kv_cache_groups",
]
