# SPDX-License-Identifier: Apache-2.0
"""How vLLM's hybrid KV-cache manager groups layers and frees sliding blocks.

Pure arithmetic mirrors of two vLLM rules, for the plugin's choice of the
window the DSpark draft's sliding layers declare
(:mod:`vllm_spark2_5_plugin.configs.kv_cache_window`). Each mirror is a hook
point; ``tests/test_kv_cache_window.py`` also checks the rule built on them
against vLLM's real grouping and ``KVCacheManager``.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from vllm_spark2_5_plugin.vllm_seam.hooks import expect as _expect
from vllm_spark2_5_plugin.vllm_seam.hooks import hook_point as _hook_point


def kv_cache_group_size(bucket_sizes: Sequence[int]) -> int:
    """Layers per KV-cache group for buckets of ``bucket_sizes`` layers.

    vLLM puts layers with equal (or mergeable) specs in one bucket, then cuts
    every bucket into groups of this many layers, padding the last group of a
    bucket that does not divide evenly. The size is the smallest bucket's, or
    the largest bucket's when that is less than 1.5 times the smallest.
    """
    smallest, largest = min(bucket_sizes), max(bucket_sizes)
    return largest if largest < smallest * 1.5 else smallest


@_hook_point(
    "kv_cache_utils._get_kv_cache_groups_uniform_page_size: group_size is the "
    "smallest bucket's layer count, or the largest's when it is < 1.5x the "
    "smallest; each bucket is padded to cdiv(n, group_size) groups"
)
def _check_kv_cache_group_size() -> None:
    from vllm.v1.core import kv_cache_utils

    source = inspect.getsource(kv_cache_utils._get_kv_cache_groups_uniform_page_size)
    for line in (
        "group_size = min_num_layers",
        "if max_num_layers < min_num_layers * 1.5:",
        "group_size = max_num_layers",
        "num_groups = cdiv(len(layers), group_size)",
    ):
        _expect(line in source, line)


def sliding_window_freed_blocks(
    num_computed_tokens: int, window: int, block_size: int
) -> int:
    """Leading blocks of a request that a sliding-window group has freed once
    ``num_computed_tokens`` tokens are processed: every whole block below
    ``num_computed_tokens - window + 1``."""
    return max(0, num_computed_tokens - window + 1) // block_size


@_hook_point(
    "SlidingWindowManager.get_num_skipped_tokens frees tokens below "
    "num_computed_tokens - sliding_window + 1 (whole blocks only)"
)
def _check_sliding_window_freed_blocks() -> None:
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    manager = SlidingWindowManager.__new__(SlidingWindowManager)
    manager.sliding_window, manager.extra_retained_tokens = 8, 0
    for computed, skipped in ((0, 0), (7, 0), (8, 1), (100, 93)):
        got = manager.get_num_skipped_tokens(computed)
        _expect(got == skipped, f"{computed} tokens, window 8: {got} skipped")
