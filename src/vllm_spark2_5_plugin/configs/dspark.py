# SPDX-License-Identifier: Apache-2.0
"""DSpark draft settings for Spark2_5: aliases, validation and vLLM's config hooks.

DSpark settings live in the target checkpoint's ``config.json`` (see
``docs/dspark.md``). This module

* brings the accepted spellings to one canonical set of ``dspark_*`` fields
  (:func:`normalize_dspark_config`),
* checks them and returns them as plain values (:func:`read_dspark_settings`),
  raising ``ValueError`` that names the field, the value and the fix, and
* hooks vLLM's config building (:func:`install_dspark_config_hooks`, through
  :mod:`vllm_spark2_5_plugin.vllm_seam`): the Spark2_5 draft is put back after
  vLLM's DeepSeek-V4 fallback, and settings the draft cannot run are refused
  before any process starts.

Why the hook: vLLM 0.32.0 sends every ``{"method": "dspark"}`` draft whose
architecture it does not know to its DeepSeek-V4 fallback, which renames the
draft config to ``model_type="deepseek_v4"`` / ``["DSparkDraftModel"]`` and then
calls ``update_arch_()``. Wrapping ``update_arch_`` puts the Spark2_5 draft back
(model type, architecture, the draft's own layer count and layer types) right
there, *before* vLLM derives the draft's architecture info, tensor-parallel size
and parallel config, and long before any weight is loaded: a bad checkpoint
fails while ``SpeculativeConfig`` is built, at start-up.

Only Transformers-free, torch-free code lives here; vLLM is imported lazily.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_spark2_5_plugin.configs.checks import (
    is_int,
    require_bool,
    require_choice,
    require_layer_types,
    require_positive_int,
    require_token_id,
)
from vllm_spark2_5_plugin.names import (
    DRAFT_ARCH,
    DRAFT_SHARED_FIELDS,
    DSPARK_ALIASES,
    DSPARK_FIELDS,
    DSPARK_METHOD,
    MARKOV_HEAD_TYPES,
    MODEL_TYPE,
    PLUGIN_NAME,
    SLIDING,
)


@dataclass(frozen=True)
class DSparkSettings:
    """Validated DSpark settings of one Spark2_5 checkpoint."""

    block_size: int | None
    markov_rank: int
    target_layer_ids: tuple[int, ...]
    markov_head_type: str
    enable_confidence_head: bool
    #: Checked here (an id the draft can embed); vLLM reads it from the
    #: config itself when it fills the block's slots.
    noise_token_id: int
    layer_types: tuple[str, ...]
    #: None only where no draft layer slides.
    sliding_window: int | None

    @property
    def num_layers(self) -> int:
        return len(self.layer_types)


def _missing(config: Any, name: str) -> bool:
    return getattr(config, name, None) is None


#: The fields without a default: a checkpoint that sets neither these nor
#: their aliases has no DSpark draft at all.
DSPARK_REQUIRED = ("dspark_markov_rank", "dspark_target_layer_ids")


def _aliases(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(DSPARK_ALIASES[name] for name in names)


def normalize_dspark_config(config: Any) -> None:
    """Rewrite accepted aliases to the canonical ``dspark_*`` fields, in place.

    A value given under both spellings must agree. The alias is kept (with the
    same value), because vLLM itself reads some aliases first (``block_size``
    for the default number of speculative tokens, ``mask_token_id`` for the
    noise token). The documented defaults fill the optional fields. Idempotent.
    """
    for canonical, alias in DSPARK_ALIASES.items():
        value = getattr(config, canonical, None)
        alias_value = getattr(config, alias, None)
        if value is None and alias_value is not None:
            setattr(config, canonical, alias_value)
        elif value is not None and alias_value is not None and alias_value != value:
            raise ValueError(
                f"{canonical}={value!r} and its alias {alias}={alias_value!r} "
                "disagree in the checkpoint's config.json; keep one of them"
            )
    if _missing(config, "dspark_markov_head_type"):
        config.dspark_markov_head_type = "vanilla"
    if _missing(config, "dspark_enable_confidence_head"):
        config.dspark_enable_confidence_head = False
    if _missing(config, "dspark_layer_types"):
        config.dspark_layer_types = [SLIDING]
    if _missing(config, "dspark_sliding_window"):
        config.dspark_sliding_window = getattr(config, "sliding_window", None)
    # Lists, not tuples: the config stays JSON-serialisable and compares equal
    # after a round trip.
    for name in ("dspark_target_layer_ids", "dspark_layer_types"):
        # A Transformers config raises AttributeError for a field it never
        # had; a missing field is reported by read_dspark_settings instead.
        value = getattr(config, name, None)
        if isinstance(value, tuple):
            setattr(config, name, list(value))


def read_dspark_settings(
    config: Any,
    *,
    num_target_layers: int | None = None,
    target_hidden_size: int | None = None,
    target_vocab_size: int | None = None,
) -> DSparkSettings:
    """Normalise ``config`` and return its validated DSpark settings.

    ``num_target_layers``, ``target_hidden_size`` and ``target_vocab_size``
    default to the config's own values (the draft config is a copy of the
    target's, so they agree unless a separate draft config was given).
    """
    if all(
        _missing(config, name)
        for name in (*DSPARK_REQUIRED, *_aliases(DSPARK_REQUIRED))
    ):
        raise ValueError(
            "this Spark2_5 checkpoint has no DSpark draft: its config.json sets "
            f"none of {', '.join(DSPARK_REQUIRED)}. Serve it without "
            "--speculative-config, or write a copy with a trained draft: "
            "spark2_5-train-dspark IN OUT --init-draft target (see the "
            "plugin README, 'Training a draft')"
        )
    normalize_dspark_config(config)
    num_target_layers = num_target_layers or config.num_hidden_layers
    vocab_size = config.vocab_size

    rank = getattr(config, "dspark_markov_rank", None)
    if rank is None:
        raise ValueError(
            "dspark_markov_rank (alias markov_rank) is missing from the "
            "checkpoint's config.json; DSpark needs the rank of its Markov head"
        )
    require_positive_int("dspark_markov_rank", rank)

    ids = getattr(config, "dspark_target_layer_ids", None)
    if ids is None or (isinstance(ids, list | tuple) and len(ids) == 0):
        raise ValueError(
            f"dspark_target_layer_ids (alias target_layer_ids) must be a non-empty "
            f"list of target layer indices, got {ids!r}"
        )
    if not isinstance(ids, list | tuple) or not all(is_int(i) for i in ids):
        raise ValueError(
            f"dspark_target_layer_ids must be a list of integers, got {ids!r}"
        )
    if len(set(ids)) != len(ids):
        raise ValueError(
            f"dspark_target_layer_ids must not repeat a layer, got {list(ids)!r}"
        )
    if list(ids) != sorted(ids):
        raise ValueError(
            f"dspark_target_layer_ids must be strictly ascending (main_proj's "
            f"columns follow ascending layer order), got {list(ids)!r}"
        )
    bad = [i for i in ids if not 0 <= i < num_target_layers]
    if bad:
        raise ValueError(
            f"dspark_target_layer_ids={list(ids)!r} has {bad!r} outside the target's "
            f"layers 0..{num_target_layers - 1}; ids are zero-based decoder layer "
            "indices"
        )

    head_type = config.dspark_markov_head_type
    require_choice("dspark_markov_head_type", head_type, MARKOV_HEAD_TYPES)
    confidence = config.dspark_enable_confidence_head
    require_bool("dspark_enable_confidence_head", confidence)

    noise = getattr(config, "dspark_noise_token_id", None)
    if noise is None:
        raise ValueError(
            "dspark_noise_token_id (alias mask_token_id) is missing from the "
            "checkpoint's config.json; DSpark fills the draft block with it"
        )
    require_token_id("dspark_noise_token_id", noise, vocab_size)

    layer_types = config.dspark_layer_types
    require_layer_types("dspark_layer_types", layer_types, "one entry per draft layer")
    window = config.dspark_sliding_window
    sliding = [j for j, kind in enumerate(layer_types) if kind == SLIDING]
    if window is None and sliding:
        # It defaults to the target's sliding_window, which may be null where
        # no target layer slides (Hugging Face writes null for it).
        raise ValueError(
            f"dspark_sliding_window is null (it defaults to the target's "
            f"sliding_window), but dspark_layer_types makes draft layer "
            f"{sliding[0]} a {SLIDING} layer; give dspark_sliding_window a "
            "positive integer, or make every draft layer full_attention"
        )
    if window is not None:
        require_positive_int("dspark_sliding_window", window)
    block_size = getattr(config, "dspark_block_size", None)
    if block_size is not None:
        require_positive_int("dspark_block_size (alias block_size)", block_size)

    draft_vocab = getattr(config, "draft_vocab_size", None)
    if draft_vocab is not None and draft_vocab != vocab_size:
        raise ValueError(
            f"draft_vocab_size={draft_vocab!r} differs from vocab_size={vocab_size}; "
            "the Spark2_5 DSpark draft predicts over the full target vocabulary"
        )
    if target_vocab_size is not None and vocab_size != target_vocab_size:
        raise ValueError(
            f"vocab_size of the draft ({vocab_size}) must equal the target's "
            f"({target_vocab_size}); the draft shares the target's embedding and "
            "LM head"
        )
    if target_hidden_size is not None and config.hidden_size != target_hidden_size:
        raise ValueError(
            f"hidden_size of the draft ({config.hidden_size}) must equal the "
            f"target's ({target_hidden_size})"
        )

    return DSparkSettings(
        block_size=block_size,
        markov_rank=rank,
        target_layer_ids=tuple(ids),
        markov_head_type=head_type,
        enable_confidence_head=confidence,
        noise_token_id=noise,
        layer_types=tuple(layer_types),
        sliding_window=window,
    )


def check_speculative_settings(
    settings: DSparkSettings,
    num_speculative_tokens: int | None,
    parallel_config: Any | None,
) -> None:
    """Checks that depend on the serving flags rather than the checkpoint."""
    if num_speculative_tokens is None and settings.block_size is None:
        raise ValueError(
            "num_speculative_tokens is required: the checkpoint sets no "
            "dspark_block_size to take it from; pass "
            '--speculative-config \'{"method": "dspark", '
            '"num_speculative_tokens": N}\''
        )
    if (
        num_speculative_tokens is not None
        and settings.block_size is not None
        and num_speculative_tokens != settings.block_size
    ):
        raise ValueError(
            f"num_speculative_tokens={num_speculative_tokens} does not match the "
            f"draft's trained dspark_block_size={settings.block_size}; set "
            f'"num_speculative_tokens": {settings.block_size} in --speculative-config'
        )
    if parallel_config is None:
        return
    pp = getattr(parallel_config, "pipeline_parallel_size", 1)
    if pp != 1:
        raise ValueError(
            f"pipeline_parallel_size={pp}: Spark2_5 DSpark speculative decoding "
            "supports pipeline_parallel_size=1 only; use tensor parallelism "
            "instead or drop --speculative-config"
        )
    dcp = getattr(parallel_config, "decode_context_parallel_size", 1)
    if dcp != 1:
        raise ValueError(
            f"decode_context_parallel_size={dcp}: Spark2_5 DSpark speculative "
            "decoding supports decode_context_parallel_size=1 only"
        )


# ---------------------------------------------------------------------------
# The SpeculativeConfig hook
# ---------------------------------------------------------------------------


def is_spark2_5_dspark(spec_config: Any) -> bool:
    """Whether ``spec_config`` drafts with DSpark for a Spark2_5 target."""
    if getattr(spec_config, "method", None) != DSPARK_METHOD:
        return False
    target = getattr(spec_config, "target_model_config", None)
    draft = getattr(spec_config, "draft_model_config", None)
    if target is None or draft is None:
        return False
    return getattr(target.hf_config, "model_type", None) == MODEL_TYPE


def refuse_separate_draft(spec_config: Any) -> None:
    """Refuse a ``"model"`` other than the served checkpoint.

    A Spark2_5 DSpark draft lives in the target's checkpoint (vLLM uses the
    target's path when ``"model"`` is left out and ``num_speculative_tokens``
    is given, which vLLM requires anyway). Another path would be read
    for the draft's config and tensors, and a path without a draft would be
    reported as the served checkpoint having none.
    """
    draft = getattr(spec_config.draft_model_config, "model", None)
    target = getattr(spec_config.target_model_config, "model", None)
    if draft == target or (
        draft is not None
        and target is not None
        and Path(draft).exists()
        and Path(draft).resolve() == Path(target).resolve()
    ):
        return
    raise ValueError(
        f'--speculative-config sets "model": {draft!r}, but a Spark2_5 DSpark '
        f"draft is read from the served checkpoint ({target!r}). Remove "
        '"model"; to serve the draft of another checkpoint (e.g. one written '
        "by spark2_5-train-dspark), serve that checkpoint"
    )


#: Target fields the draft reads as they are (``DRAFT_SHARED_FIELDS``), with
#: the MLP's size and the legacy spellings of the RoPE settings.
_SHARED_WITH_DRAFT = (
    *DRAFT_SHARED_FIELDS,
    "intermediate_size",
    "rope_scaling",
    "rope_theta",
)
#: The DSpark settings under one name each (after normalize_dspark_config,
#: which also fills their defaults).
_DSPARK_CANONICAL = (
    *DSPARK_ALIASES,
    "dspark_layer_types",
    "dspark_sliding_window",
    "draft_vocab_size",
)


def refuse_draft_overrides(target_model_config: Any) -> None:
    """Refuse ``--hf-overrides`` of fields the draft reads, which it would
    not see.

    vLLM 0.32.0 builds the draft's config by reading the checkpoint's
    ``config.json`` again, without the target's dict ``--hf-overrides``
    (hook point ``draft_hf_overrides``): a DSpark field set there would
    change nothing the draft does, and a field the draft shares with the
    target (RoPE, norms, ...) would change the target only.
    """
    overrides = getattr(target_model_config, "hf_overrides", None)
    if not isinstance(overrides, dict):
        return  # a callable override: its effect on the draft is vLLM's
    shared_fields = set(_SHARED_WITH_DRAFT)
    named = sorted(set(overrides) & {*DSPARK_FIELDS, *shared_fields})
    if named:
        shared = [name for name in named if name in shared_fields]
        raise ValueError(
            f"--hf-overrides sets {', '.join(named)}, but vLLM builds the "
            "DSpark draft from the checkpoint's config.json without "
            "--hf-overrides, so the draft would ignore it"
            + (
                f" ({', '.join(shared)}: the target would take it and the draft, "
                "which shares it, would not)"
                if shared
                else ""
            )
            + ". Set the field in config.json (in a copy of the checkpoint) instead"
        )


def _draft_read_values(config: Any) -> dict[str, Any]:
    """The values of ``config`` the draft reads, DSpark aliases and defaults
    resolved (on a copy: the config itself is left as it is)."""
    config = copy.deepcopy(config)
    normalize_dspark_config(config)
    # The embedding and the LM head are the target's, so the vocabulary too.
    names = (*_SHARED_WITH_DRAFT, "vocab_size", *_DSPARK_CANONICAL)
    return {name: getattr(config, name, None) for name in names}


def refuse_separate_config_path(target_model_config: Any, draft_hf: Any) -> None:
    """Refuse ``--hf-config-path`` when its config and the checkpoint's
    ``config.json`` differ in anything the draft reads.

    vLLM 0.32.0 builds the DSpark draft's config from the checkpoint's
    ``config.json`` (``ModelConfig(model=...)`` without ``hf_config_path``),
    while the target reads the config at ``--hf-config-path``: where they
    differ in a field the draft shares with the target (norms, RoPE, ...) or
    in a DSpark setting, the draft would run with settings the user did not
    point at. Configs that agree in all of them are accepted.
    """
    path = getattr(target_model_config, "hf_config_path", None)
    model = getattr(target_model_config, "model", None)
    if path is None or path == model:
        return
    here, there = Path(str(path)), Path(str(model))
    if here.exists() and there.exists() and here.resolve() == there.resolve():
        return  # the checkpoint's own config.json
    target_values = _draft_read_values(target_model_config.hf_config)
    draft_values = _draft_read_values(draft_hf)
    for name, value in target_values.items():
        if value != draft_values[name]:
            raise ValueError(
                f"--hf-config-path {path} gives {name}={value!r}, but vLLM "
                "builds the DSpark draft from the checkpoint's own config.json "
                f"({model}), which gives {name}={draft_values[name]!r}: the "
                "draft would run with settings the target does not use. Serve "
                "a checkpoint whose config.json is the config you want (e.g. a "
                "copy of the checkpoint with that config.json) and drop "
                "--hf-config-path"
            )


def restore_spark2_5_draft(spec_config: Any) -> DSparkSettings:
    """Turn the draft config of a Spark2_5 DSpark spec config into ours.

    Undoes vLLM's DeepSeek-V4 fallback: ``model_type`` back to ``spark2_5``
    and ``architectures`` to ``[Spark2_5DSparkForCausalLM]``; the draft gets
    its own layer count and layer types (the copied target values would make
    vLLM mis-size and mis-classify the draft), and ``is_causal=False`` because
    every draft layer attends to its whole block. Validates all settings
    first, so nothing is changed when they are bad. The caller must let vLLM
    recompute the architecture info afterwards (``update_arch_``).
    """
    target_hf = spec_config.target_model_config.hf_config
    draft_hf = spec_config.draft_model_config.hf_config
    refuse_separate_draft(spec_config)
    refuse_draft_overrides(spec_config.target_model_config)
    refuse_separate_config_path(spec_config.target_model_config, draft_hf)
    settings = read_dspark_settings(
        draft_hf,
        num_target_layers=target_hf.num_hidden_layers,
        target_hidden_size=target_hf.hidden_size,
        target_vocab_size=target_hf.vocab_size,
    )
    check_speculative_settings(
        settings,
        spec_config.num_speculative_tokens,
        getattr(spec_config, "target_parallel_config", None),
    )
    draft_hf.model_type = MODEL_TYPE
    draft_hf.architectures = [DRAFT_ARCH]
    draft_hf.num_hidden_layers = settings.num_layers
    draft_hf.layer_types = list(settings.layer_types)
    draft_hf.is_causal = False
    return settings


def check_dspark_engine_config(vllm_config: Any) -> None:
    """Refuse, at start-up, DSpark settings the draft cannot run.

    Sliding draft layers attend through the fixed-history Triton kernel, which
    runs fp16/bf16 models with power-of-two head sizes over paged caches in
    the model dtype or fp8 e4m3. Without this
    check such a setting loads the whole model and then kills the engine in
    its warm-up, with the real reason buried in the engine log.

    LoRA is refused too: vLLM 0.32.0 would run the draft without the adapter
    and verify with the adapted target, a combination that is not tested for
    this draft (vLLM runs DSpark on GPUs only; see ``docs/model.md``).
    """
    from vllm_spark2_5_plugin.ops.limits import (
        unsupported_dtype_reason,
        unsupported_head_dim_reason,
        unsupported_kv_cache_dtype_reason,
    )

    spec = getattr(vllm_config, "speculative_config", None)
    if spec is None or not is_spark2_5_dspark(spec):
        return
    if getattr(vllm_config, "lora_config", None) is not None:
        raise ValueError(
            "enable_lora=True with speculative_config method 'dspark': the "
            "Spark2_5 DSpark draft is not supported with LoRA adapters on the "
            "target (the draft would run without the adapter, and this "
            "combination is untested). Serve with --enable-lora or with "
            "--speculative-config, not both"
        )
    refuse_draft_only_settings(spec, vllm_config)
    draft_hf = spec.draft_model_config.hf_config
    normalize_dspark_config(draft_hf)
    if SLIDING not in draft_hf.dspark_layer_types:
        return  # full draft layers use vLLM's own attention backend
    backend = getattr(spec, "attention_backend", None)
    backend = getattr(backend, "name", backend)
    if backend is not None and backend not in SLIDING_DRAFT_BACKENDS:
        raise ValueError(
            f"--speculative-config attention_backend={backend}: "
            "Spark2_5 DSpark's sliding draft layers read the paged cache and "
            "metadata of FlashAttention or Triton attention ("
            + " or ".join(SLIDING_DRAFT_BACKENDS)
            + "); leave attention_backend out (vLLM then chooses the draft's "
            "backend)"
        )
    dtype = str(spec.draft_model_config.dtype).removeprefix("torch.")
    kernel = "Spark2_5 DSpark's sliding draft layers run on the fixed-history kernel"
    reason = unsupported_dtype_reason(dtype)
    if reason is not None:
        raise ValueError(
            f"dtype={dtype}: {reason}. {kernel}: serve with --dtype bfloat16 (or "
            "float16), or without --speculative-config"
        )
    cache_dtype = getattr(vllm_config.cache_config, "cache_dtype", "auto")
    reason = unsupported_kv_cache_dtype_reason(cache_dtype, dtype)
    if reason is not None:
        raise ValueError(
            f"kv_cache_dtype={cache_dtype}: {reason}. {kernel}: use "
            "--kv-cache-dtype auto or fp8_e4m3, or serve without "
            "--speculative-config"
        )
    reason = unsupported_head_dim_reason(draft_hf.head_dim)
    if reason is not None:
        raise ValueError(
            f"head_dim={draft_hf.head_dim}: {reason}. {kernel}: give the "
            "checkpoint a draft whose layers are all full attention "
            '(dspark_layer_types ["full_attention", ...]; spark2_5-train-dspark '
            "--draft-layer-types full), or serve it without --speculative-config"
        )


#: vLLM attention backends whose paged cache and metadata the sliding draft
#: layers' fixed-history kernel reads (``vllm_seam.attention``).
SLIDING_DRAFT_BACKENDS = ("FLASH_ATTN", "TRITON_ATTN")


def refuse_draft_only_settings(spec: Any, vllm_config: Any) -> None:
    """Refuse ``--speculative-config`` fields that would give the draft other
    settings than the target's, where vLLM 0.32.0's DSpark path ignores them
    or fails on them only once the model is loaded (read in its source):

    * ``quantization``: vLLM replaces the draft's by the target's (for a
      Spark2_5 draft, its DeepSeek-V4 fallback runs first); unset is the
      target's (vLLM fills it in only where ``model`` is left out);
    * ``kv_cache_dtype``: the draft's sliding layers share the target's
      KV-cache layout (and the kernel reads only fp8 e4m3 or the model
      dtype); compared as stored (``fp8`` is e4m3, ``auto`` the model dtype);
    * ``draft_tensor_parallel_size``: the draft's layers shard over the
      target's tensor-parallel group whatever it says;
    * ``enforce_eager``: the V2 model runner gives the draft the target's
      CUDA-graph mode;
    * ``disable_padded_drafter_batch``: DSpark never reads it, but vLLM turns
      asynchronous scheduling off for it;
    * ``use_local_argmax_reduction``: DSpark takes the argmax of the full
      logits; vLLM asks the draft for a method it does not have, after loading;
    * ``max_model_len``: checked by vLLM, then never used on the DSpark path
      (the draft runs to the target's length).

    ``revision`` is not compared: vLLM resolves a Hub checkpoint's revision
    to a commit for the target, so an unset draft revision would differ from
    it although both read the same commit (see ``docs/dspark.md``).
    """
    target = spec.target_model_config
    problems = []
    quantization = getattr(spec, "quantization", None)
    # Unset means the target's: vLLM copies it only where "model" is left
    # out, and quantises the draft as the target either way.
    if quantization is not None and quantization != target.quantization:
        problems.append(
            f"quantization={quantization!r} (the draft is quantised as the target "
            f"is, {target.quantization!r}; --quantization sets both)"
        )
    cache_dtype = getattr(spec, "kv_cache_dtype", None)
    target_cache = getattr(vllm_config.cache_config, "cache_dtype", "auto")
    if cache_dtype is not None and _cache_dtype(cache_dtype, target) != _cache_dtype(
        target_cache, target
    ):
        problems.append(
            f"kv_cache_dtype={cache_dtype!r} (the draft shares the target's "
            f"KV-cache layout, {target_cache!r}; --kv-cache-dtype sets both)"
        )
    tp = vllm_config.parallel_config.tensor_parallel_size
    draft_tp = getattr(spec, "draft_tensor_parallel_size", None)
    if draft_tp is not None and draft_tp != tp:
        problems.append(
            f"draft_tensor_parallel_size={draft_tp} (the draft runs at the "
            f"target's tensor parallelism, {tp})"
        )
    eager = getattr(spec, "enforce_eager", None)
    if eager is not None and eager != target.enforce_eager:
        problems.append(
            f"enforce_eager={eager} (the draft runs in the target's CUDA-graph "
            f"mode, enforce_eager={target.enforce_eager}; --enforce-eager sets both)"
        )
    if getattr(spec, "disable_padded_drafter_batch", False):
        problems.append(
            "disable_padded_drafter_batch=true (DSpark does not read it, and "
            "vLLM would turn asynchronous scheduling off for it)"
        )
    if getattr(spec, "use_local_argmax_reduction", False):
        problems.append(
            "use_local_argmax_reduction=true (DSpark drafts from the full "
            "logits; the Spark2_5 draft has no top-tokens method)"
        )
    max_len = getattr(spec, "max_model_len", None)
    if max_len is not None and max_len != target.max_model_len:
        problems.append(
            f"max_model_len={max_len} (the draft runs to the target's "
            f"max_model_len, {target.max_model_len}; --max-model-len sets both)"
        )
    if problems:
        raise ValueError(
            "--speculative-config for a Spark2_5 DSpark draft: "
            + "; ".join(problems)
            + ". Leave these fields out: the draft takes the target's settings"
        )


def _cache_dtype(name: str, target: Any) -> str:
    """A KV-cache dtype as stored: vLLM's ``fp8`` is e4m3 on NVIDIA GPUs, and
    ``auto`` is the model's dtype."""
    from vllm_spark2_5_plugin.ops.limits import FP8_KV_CACHE_DTYPES

    if name == "auto":
        return str(target.dtype).removeprefix("torch.")
    return "fp8_e4m3" if name in FP8_KV_CACHE_DTYPES else name  # one cache


def _restore_if_spark2_5(spec_config: Any) -> None:
    if is_spark2_5_dspark(spec_config):
        restore_spark2_5_draft(spec_config)


def widen_dspark_capture_sizes(vllm_config: Any) -> None:
    """CUDA graphs for every batch size of a Spark2_5 DSpark server, unless
    the user chose the capture sizes (``configs.cudagraph.widen_capture_sizes``;
    logged at start-up)."""
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is None or not is_spark2_5_dspark(spec):
        return
    from vllm.logger import init_logger
    from vllm.platforms import current_platform

    from vllm_spark2_5_plugin.configs.cudagraph import (
        widen_capture_sizes,
        widened_message,
    )

    sizes = widen_capture_sizes(vllm_config, cuda=current_platform.is_cuda())
    if sizes is not None:
        message = widened_message(sizes, spec.num_speculative_tokens)
        init_logger("vllm.spark2_5_plugin").info("%s: %s", PLUGIN_NAME, message)


def refuse_dspark_off_gpu(vllm_config: Any) -> None:
    """Refuse a Spark2_5 DSpark draft where vLLM has no GPU model runner.

    vLLM 0.32.0 runs DSpark only in its V2 GPU model runner; elsewhere (the
    CPU build) it refuses with "Model Runner V1 does not support: dspark
    speculative decoding", naming a runner the user never chose. Run after
    the draft's own checks, so that those still name a setting the draft
    could not run on any platform."""
    from vllm.platforms import current_platform

    spec = getattr(vllm_config, "speculative_config", None)
    if spec is None or not is_spark2_5_dspark(spec):
        return
    if current_platform.is_cuda_alike():
        return
    platform = getattr(current_platform, "device_type", None) or "this"
    raise ValueError(
        "--speculative-config method 'dspark' needs vLLM's GPU build on a GPU "
        "(vLLM 0.32.0 runs DSpark only in its GPU model runner); this vLLM "
        f"runs on the {platform} platform. Serve without --speculative-config "
        "here: the target model runs alone"
    )


def _check_engine_config(vllm_config: Any) -> None:
    from vllm_spark2_5_plugin.configs.spark2_5 import check_target_config

    check_target_config(vllm_config)
    check_dspark_engine_config(vllm_config)
    refuse_dspark_off_gpu(vllm_config)
    widen_dspark_capture_sizes(vllm_config)


def install_dspark_config_hooks() -> None:
    """Hook the two config steps (idempotent; other models are untouched).

    * ``SpeculativeConfig.update_arch_``: undo vLLM's DeepSeek-V4 fallback
      for Spark2_5 drafts (:func:`restore_spark2_5_draft`);
    * before ``VllmConfig`` validation: the target's config again, with
      ``--hf-overrides`` applied (``configs.spark2_5.check_target_config``),
      then :func:`check_dspark_engine_config` and
      :func:`refuse_dspark_off_gpu`, then :func:`widen_dspark_capture_sizes`
      (before vLLM derives its default capture sizes).
    """
    from vllm_spark2_5_plugin import vllm_seam

    vllm_seam.wrap_speculative_update_arch(_restore_if_spark2_5)
    vllm_seam.check_before_vllm_config(_check_engine_config)


__all__ = [
    "DSparkSettings",
    "check_dspark_engine_config",
    "check_speculative_settings",
    "install_dspark_config_hooks",
    "is_spark2_5_dspark",
    "normalize_dspark_config",
    "read_dspark_settings",
    "restore_spark2_5_draft",
    "widen_dspark_capture_sizes",
]
