# SPDX-License-Identifier: Apache-2.0
"""The attention internals the draft's fixed-history layers read and write."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, NamedTuple

from vllm_spark2_5_plugin.vllm_seam.hooks import expect as _expect
from vllm_spark2_5_plugin.vllm_seam.hooks import hook_point as _hook_point
from vllm_spark2_5_plugin.vllm_seam.hooks import params as _params

if TYPE_CHECKING:
    import torch


# ---------------------------------------------------------------------------
# Attention internals read by the draft's fixed-history layers
# ---------------------------------------------------------------------------


class PagedAttentionInputs(NamedTuple):
    """What a layer needs to read and write its paged KV cache this step."""

    cache: torch.Tensor  # [blocks, nKV, block_size, 2*D] (see split_kv_cache)
    block_table: torch.Tensor  # [R, max_blocks] int32
    seq_lens: torch.Tensor  # [R] int32, context + this step's query tokens
    query_start_loc: torch.Tensor  # [R + 1] int32
    slot_mapping: torch.Tensor  # [T] int64, -1 = padding


_METADATA_FIELDS = ("block_table", "seq_lens", "query_start_loc", "slot_mapping")


def paged_attention_inputs(layer_name: str) -> PagedAttentionInputs | None:
    """This step's paged-cache inputs of attention layer ``layer_name``.

    ``None`` during profiling and dummy runs, which carry no metadata. Raises
    ``RuntimeError`` when the layer's backend keeps its metadata in another
    form (only FlashAttention/Triton-style metadata are understood).
    """
    from vllm.model_executor.layers.attention.attention import (
        get_attention_context,
    )

    metadata, _, kv_cache, slot_mapping = get_attention_context(layer_name)
    if metadata is None:
        return None
    if not all(hasattr(metadata, f) for f in _METADATA_FIELDS):
        raise RuntimeError(
            f"Spark2_5 DSpark sliding draft layers read the paged KV cache through "
            f"FlashAttention/Triton-style metadata, but the draft's attention "
            f"backend produced {type(metadata).__name__}; set "
            '"attention_backend": "FLASH_ATTN" (or "TRITON_ATTN") in '
            "--speculative-config"
        )
    return PagedAttentionInputs(
        kv_cache,
        metadata.block_table,
        metadata.seq_lens,
        metadata.query_start_loc,
        metadata.slot_mapping if slot_mapping is None else slot_mapping,
    )


@_hook_point(
    "get_attention_context(layer_name) -> (metadata, layer, kv_cache, "
    "slot_mapping); FlashAttention/Triton metadata carry block_table, seq_lens, "
    "query_start_loc and slot_mapping"
)
def _check_attention_context() -> None:
    from vllm.model_executor.layers.attention.attention import (
        get_attention_context,
    )
    from vllm.v1.attention.backends.flash_attn import FlashAttentionMetadata
    from vllm.v1.attention.backends.triton_attn import TritonAttentionMetadata

    _expect(_params(get_attention_context) == ["layer_name"], "one argument")
    for metadata in (FlashAttentionMetadata, TritonAttentionMetadata):
        fields = getattr(metadata, "__dataclass_fields__", {})
        for name in _METADATA_FIELDS:
            _expect(name in fields, f"{metadata.__name__}.{name}")


def split_kv_cache(
    kv_cache: torch.Tensor, head_dim: int, quant: KVCacheQuant | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[blocks, nKV, block_size, 2*D]`` -> K and V as ``[blocks, block_size,
    nKV, D]`` views (any strides), the layout FlashAttention and Triton use;
    with ``quant`` viewed as its dtype (vLLM allocates fp8 caches as uint8)."""
    k_cache, v_cache = kv_cache.transpose(1, 2).split(head_dim, dim=-1)
    if quant is None:
        return k_cache, v_cache
    return k_cache.view(quant.dtype), v_cache.view(quant.dtype)


def layer_kv_cache(attn: Any) -> torch.Tensor:
    """The paged cache vLLM bound to attention layer ``attn``."""
    return attn.kv_cache


def write_kv_cache(
    attn: Any,
    key: torch.Tensor,
    value: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write ``[T, nKV, D]`` keys/values at ``slot_mapping`` with the backend."""
    attn.impl.do_kv_cache_update(attn, key, value, kv_cache, slot_mapping)


def full_attention_cache_config(cache_config: Any) -> Any:
    """``cache_config`` for a full-attention layer: without the model-level
    sliding window.

    ``Attention`` falls back to ``CacheConfig.sliding_window`` for a layer that
    passes no window of its own, and vLLM sets that field when every layer of
    the *target* slides. A DSpark draft's full layer would then be declared,
    cached and (by FlashAttention) computed as a sliding one.
    """
    if cache_config is None or cache_config.sliding_window is None:
        return cache_config
    import dataclasses

    return dataclasses.replace(cache_config, sliding_window=None)


@_hook_point(
    "Attention(per_layer_sliding_window=None) takes CacheConfig.sliding_window, "
    "which EngineArgs sets when every layer of the model slides"
)
def _check_model_level_sliding_window() -> None:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.layers.attention import attention

    init = inspect.getsource(attention.Attention.__init__)
    _expect(
        "sliding_window = cache_config.sliding_window" in init,
        "Attention falls back to cache_config.sliding_window",
    )
    _expect(
        "sliding_window = model_config.get_sliding_window()"
        in inspect.getsource(EngineArgs.create_engine_config),
        "EngineArgs sets the model-level window",
    )


class KVCacheQuant(NamedTuple):
    """How a layer's KV cache is quantized: per-tensor fp8 (e4m3)."""

    dtype: torch.dtype  # what the cache's bytes hold (vLLM allocates uint8)
    k_scale: torch.Tensor  # float32, one element, on the cache's device
    v_scale: torch.Tensor


def kv_cache_quant(attn: Any) -> KVCacheQuant | None:
    """``None`` when attention layer ``attn`` keeps its cache in the model
    dtype; for an fp8 e4m3 cache, its byte dtype and the layer's K/V scales
    (the tensors vLLM's cache writer divides by). Other quantized caches
    raise ``ValueError``: the DSpark config check refuses them at start-up."""
    import torch

    from vllm_spark2_5_plugin.ops.limits import FP8_KV_CACHE_DTYPES

    cache_dtype = attn.kv_cache_dtype
    if cache_dtype in FP8_KV_CACHE_DTYPES:
        return KVCacheQuant(torch.float8_e4m3fn, attn._k_scale, attn._v_scale)
    if cache_dtype in ("auto", "float16", "bfloat16"):
        return None
    raise ValueError(
        f"attention layer {getattr(attn, 'layer_name', '?')} has "
        f"kv_cache_dtype={cache_dtype}, which the fixed-history kernel cannot "
        "read; use --kv-cache-dtype auto or fp8_e4m3"
    )


@_hook_point(
    "Attention keeps its --kv-cache-dtype string in .kv_cache_dtype and "
    "per-tensor float32 K/V scales in its _k_scale/_v_scale buffers"
)
def _check_kv_cache_scales() -> None:
    from vllm.model_executor.layers.attention import attention

    init = inspect.getsource(attention.Attention.__init__)
    _expect("self.kv_cache_dtype = kv_cache_dtype" in init, "Attention.kv_cache_dtype")
    defaults = inspect.getsource(attention.set_default_quant_scales)
    for name in ("_k_scale", "_v_scale"):
        _expect(f'register_buffer("{name}"' in defaults, f"buffer {name}")


def is_kv_cache_scale_method(method: Any) -> bool:
    """Whether ``method`` (a module's ``quant_method``) is vLLM's KV-cache
    scale method, whose parameters (``q_scale``, ``k_scale``, ``v_scale``,
    ``prob_scale``) a checkpoint may leave out: vLLM then keeps the default
    scales."""
    from vllm.model_executor.layers.quantization.kv_cache import BaseKVCacheMethod

    return isinstance(method, BaseKVCacheMethod)


@_hook_point(
    "quantization.kv_cache.BaseKVCacheMethod gives an attention layer its "
    "optional q/k/v/prob scale parameters"
)
def _check_kv_cache_scale_method() -> None:
    from vllm.model_executor.layers.quantization import kv_cache

    method = getattr(kv_cache, "BaseKVCacheMethod", None)
    _expect(isinstance(method, type), "quantization.kv_cache.BaseKVCacheMethod")
    source = inspect.getsource(method.create_weights)
    for name in ("q_scale", "k_scale", "v_scale", "prob_scale"):
        _expect(f"layer.{name} = " in source, f"BaseKVCacheMethod creates {name}")


@_hook_point(
    "FlashAttention/Triton impl.do_kv_cache_update(layer, key, value, kv_cache, "
    "slot_mapping) over a [blocks, nKV, block_size, 2*D] cache split with "
    "transpose(1, 2).split(D, -1), quantizing with the layer's _k_scale/_v_scale"
)
def _check_kv_cache_layout() -> None:
    from vllm.v1.attention.backends.flash_attn import FlashAttentionImpl
    from vllm.v1.attention.backends.triton_attn import TritonAttentionImpl

    for impl in (FlashAttentionImpl, TritonAttentionImpl):
        update = impl.do_kv_cache_update
        params = _params(update)
        _expect(
            params == ["self", "layer", "key", "value", "kv_cache", "slot_mapping"],
            f"{impl.__name__}.do_kv_cache_update{params}",
        )
        source = inspect.getsource(update)
        _expect(
            "kv_cache.transpose(1, 2).split(self.head_size" in source,
            f"{impl.__name__} splits K/V with transpose(1, 2).split(head_size, -1)",
        )
        _expect(
            "layer._k_scale" in source and "layer._v_scale" in source,
            f"{impl.__name__} writes with layer._k_scale/_v_scale",
        )
