# SPDX-License-Identifier: Apache-2.0
"""Fixed-history attention for the DSpark draft block (see ``docs/kernel.md``).

* ``fixed_history_attention(q, k_cache, v_cache, block_table, context_lens,
  query_start_loc, sliding_window, scale, out=None)``: the Triton kernel;
* ``fixed_history_attention_reference(...)``: the same in plain PyTorch
  (``fixed_history_attention(..., reference=True)``; no Triton needed);
* ``plan_launch(...)`` -> ``LaunchPlan``: the launch policy (pass a plan as
  ``fixed_history_attention(..., plan=plan)`` to run with another one);
* ``sm_count(device)``: the SM count the persistent grid is sized with.

These names load on first use, so that ``vllm_spark2_5_plugin.ops.limits``
(pure Python) imports neither torch nor triton.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# public name -> submodule defining it
_EXPORTS = {
    "LaunchPlan": "fixed_history_launch",
    "fixed_history_attention": "fixed_history",
    "fixed_history_attention_reference": "fixed_history",
    "plan_launch": "fixed_history_launch",
    "sm_count": "fixed_history_launch",
}
__all__ = [
    "LaunchPlan",
    "fixed_history_attention",
    "fixed_history_attention_reference",
    "plan_launch",
    "sm_count",
]

if TYPE_CHECKING:
    from vllm_spark2_5_plugin.ops.fixed_history import (
        fixed_history_attention,
        fixed_history_attention_reference,
    )
    from vllm_spark2_5_plugin.ops.fixed_history_launch import (
        LaunchPlan,
        plan_launch,
        sm_count,
    )


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
