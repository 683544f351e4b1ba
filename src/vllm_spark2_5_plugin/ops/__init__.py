# SPDX-License-Identifier: Apache-2.0
"""Fixed-history attention for the DSpark draft block (see ``docs/kernel.md``).

* ``fixed_history_attention(q, k_cache, v_cache, block_table, context_lens,
  query_start_loc, sliding_window, scale, out=None, *, plan=None,
  reference=False, k_scale=None, v_scale=None, v_pages_transposed=False)``:
  the Triton kernel, on float16/bfloat16 caches or on float8_e4m3fn caches
  with their scales (on Hopper, the Gluon kernel where the plan says
  ``gluon``), V in rows or in transposed pages (``ops.v_pages``);
* ``fixed_history_attention_reference(...)``: the same in plain PyTorch
  (``fixed_history_attention(..., reference=True)``; no Triton needed);
* ``plan_launch(...)`` -> ``LaunchPlan``: the launch policy (pass a plan as
  ``fixed_history_attention(..., plan=plan)`` to run with another one);
* ``uniform_batch_plan(shape, device=...)``: ``plan_launch``'s plan for R
  requests of L cached and B draft tokens each, ``shape = (R, L, B, W, nH,
  nKV, D)`` (the benchmark shapes);
* ``sm_count(device)``: the SM count the persistent grid is sized with;
* ``gluon_supported(device)``: whether the Gluon kernel can run there (an
  sm_90 GPU under Triton 3.7);
* ``write_kv_cache(key, value, k_cache, v_cache, slot_mapping, k_scale=None,
  v_scale=None, *, v_pages_transposed=False)``: K/V rows into a paged cache
  (Triton), in vLLM's layout or with V's pages transposed (``ops.v_pages``);
  ``write_kv_cache_reference(...)``: the same in plain PyTorch;
* ``v_pages_preferred(device, *, kv_fp8, head_dim, page_size)``: whether a
  cache the plugin alone writes should hold V's pages transposed;
* what the kernel runs, from ``vllm_spark2_5_plugin.ops.limits`` (pure
  Python): ``SUPPORTED_DTYPES``, ``SUPPORTED_KV_CACHE_DTYPES``,
  ``FP8_KV_CACHE_DTYPES``, ``FP8_CACHE_DTYPE``, ``MIN_HEAD_DIM``,
  ``MAX_HEAD_DIM``, ``unsupported_dtype_reason``,
  ``unsupported_kv_cache_dtype_reason`` and ``unsupported_head_dim_reason``.

These names load on first use, so that ``vllm_spark2_5_plugin.ops.limits``
(pure Python) imports neither torch nor triton, and neither does reading a
``limits`` name through this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__all__ = [
    "FP8_CACHE_DTYPE",
    "FP8_KV_CACHE_DTYPES",
    "MAX_HEAD_DIM",
    "MIN_HEAD_DIM",
    "SUPPORTED_DTYPES",
    "SUPPORTED_KV_CACHE_DTYPES",
    "LaunchPlan",
    "fixed_history_attention",
    "fixed_history_attention_reference",
    "gluon_supported",
    "plan_launch",
    "sm_count",
    "uniform_batch_plan",
    "unsupported_dtype_reason",
    "unsupported_head_dim_reason",
    "unsupported_kv_cache_dtype_reason",
    "v_pages_preferred",
    "write_kv_cache",
    "write_kv_cache_reference",
]

# public name -> submodule defining it; every other name of __all__ is in limits
_MODULES = {
    "LaunchPlan": "fixed_history_launch",
    "fixed_history_attention": "fixed_history",
    "fixed_history_attention_reference": "fixed_history",
    "gluon_supported": "fixed_history_launch",
    "plan_launch": "fixed_history_launch",
    "sm_count": "fixed_history_launch",
    "uniform_batch_plan": "fixed_history_launch",
    "v_pages_preferred": "fixed_history_launch",
    "write_kv_cache": "kv_cache_write",
    "write_kv_cache_reference": "v_pages",
}

if TYPE_CHECKING:
    from vllm_spark2_5_plugin.ops.fixed_history import (
        fixed_history_attention,
        fixed_history_attention_reference,
    )
    from vllm_spark2_5_plugin.ops.fixed_history_launch import (
        LaunchPlan,
        gluon_supported,
        plan_launch,
        sm_count,
        uniform_batch_plan,
        v_pages_preferred,
    )
    from vllm_spark2_5_plugin.ops.kv_cache_write import write_kv_cache
    from vllm_spark2_5_plugin.ops.limits import (
        FP8_CACHE_DTYPE,
        FP8_KV_CACHE_DTYPES,
        MAX_HEAD_DIM,
        MIN_HEAD_DIM,
        SUPPORTED_DTYPES,
        SUPPORTED_KV_CACHE_DTYPES,
        unsupported_dtype_reason,
        unsupported_head_dim_reason,
        unsupported_kv_cache_dtype_reason,
    )
    from vllm_spark2_5_plugin.ops.v_pages import write_kv_cache_reference


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _MODULES.get(name, "limits")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
