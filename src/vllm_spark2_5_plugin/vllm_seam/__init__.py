# SPDX-License-Identifier: Apache-2.0
"""The one place where the plugin relies on vLLM internals.

vLLM's documented plugin surface is used directly by the rest of the package:
``ModelRegistry.register_model``, ``ToolParserManager.register_lazy_module``,
``vllm.logger.init_logger``, the model layers and ``models.interfaces`` /
``models.utils`` helpers that in-tree models are built from, the ``ToolParser``
base class, and vLLM's config objects read as plain data.

Everything beyond that lives here, one function per assumption:

* reading vLLM's registries (who registered an architecture, a tool parser or
  a config class) and writing the config registry;
* two class-level wrappers: ``SpeculativeConfig.update_arch_`` (to undo the
  DeepSeek-V4 fallback for Spark2_5 drafts) and ``VllmConfig.__post_init__``
  (to refuse DSpark settings the draft cannot run, at start-up);
* two module-level wrappers of the OpenAI server: the chat-message parsers
  ``vllm.renderers.hf.parse_chat_messages(_async)`` (to refuse history the
  chat template cannot render, with a 400) and the Responses stream's
  ``split_delta`` (to keep a tool call's last arguments in its item);
* the attention internals the draft's fixed-history layers read: the per-layer
  attention context, the paged metadata fields, the KV-cache layout, the
  backend's KV write and a layer's fp8 KV-cache dtype and scales; and the
  quantization method behind those scales, whose parameters the weight check
  lets a checkpoint leave out;
* vLLM's DSpark Markov and confidence heads (defined in its Qwen3 DSpark
  model module), and the choice of a ``CustomOp``'s kernel (the draft, which
  is not compiled, runs vLLM's fused kernels);
* two rules of the hybrid KV-cache manager, mirrored as arithmetic: the size
  of a KV-cache group and the blocks a sliding-window group frees;
* an offline ``LLM``'s shutdown, which it has no public method for (the
  demo tool ends its engine with it).

The package has one module per area (``registries``, ``config_hooks``,
``attention``, ``dspark``, ``kv_cache``, ``responses``, ``engine``) and
``hooks`` for the
checking machinery; callers import this package and use the names it
re-exports.

The assumptions are :class:`HookPoint` objects in :data:`HOOK_POINTS`, but for
two plain attribute reads (a layer's ``kv_cache``, the compilation config's
``custom_ops``); :func:`check_hook_points` verifies them all against the
running vLLM, so a vLLM upgrade that breaks one fails in one place, with one
message. vLLM is
imported lazily: importing this package is free.
"""

from vllm_spark2_5_plugin.vllm_seam.attention import (
    KVCacheQuant,
    PagedAttentionInputs,
    full_attention_cache_config,
    is_kv_cache_scale_method,
    kv_cache_quant,
    layer_kv_cache,
    paged_attention_inputs,
    split_kv_cache,
    write_kv_cache,
)
from vllm_spark2_5_plugin.vllm_seam.config_hooks import (
    check_before_vllm_config,
    check_chat_messages,
    wrap_speculative_update_arch,
)
from vllm_spark2_5_plugin.vllm_seam.dspark import (
    dspark_heads,
    use_platform_kernels,
)
from vllm_spark2_5_plugin.vllm_seam.engine import shutdown_llm
from vllm_spark2_5_plugin.vllm_seam.hooks import (
    HOOK_POINTS,
    HookPoint,
    VllmSeamError,
    check_hook_points,
    require_hook_points,
)
from vllm_spark2_5_plugin.vllm_seam.kv_cache import (
    kv_cache_group_size,
    sliding_window_freed_blocks,
)
from vllm_spark2_5_plugin.vllm_seam.registries import (
    forget_resolved_tool_parser,
    register_config_class,
    registered_config_class,
    registered_model_module,
    registered_tool_parser_module,
)
from vllm_spark2_5_plugin.vllm_seam.responses import continue_open_call_first

__all__ = [
    "HOOK_POINTS",
    "HookPoint",
    "KVCacheQuant",
    "PagedAttentionInputs",
    "VllmSeamError",
    "check_before_vllm_config",
    "check_chat_messages",
    "check_hook_points",
    "continue_open_call_first",
    "dspark_heads",
    "forget_resolved_tool_parser",
    "full_attention_cache_config",
    "is_kv_cache_scale_method",
    "kv_cache_group_size",
    "kv_cache_quant",
    "layer_kv_cache",
    "paged_attention_inputs",
    "register_config_class",
    "registered_config_class",
    "registered_model_module",
    "registered_tool_parser_module",
    "require_hook_points",
    "shutdown_llm",
    "sliding_window_freed_blocks",
    "split_kv_cache",
    "use_platform_kernels",
    "wrap_speculative_update_arch",
    "write_kv_cache",
]
