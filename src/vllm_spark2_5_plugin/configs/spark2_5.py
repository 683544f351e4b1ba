# SPDX-License-Identifier: Apache-2.0
"""Transformers configuration for Spark2_5 (``model_type: "spark2_5"``).

Imports only Transformers, so vLLM can register it at plugin load and pickle it
to its engine and worker processes.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any, ClassVar

from transformers import PreTrainedConfig

from vllm_spark2_5_plugin.configs.checks import (
    is_positive_int,
    is_positive_number,
    require_bool,
    require_choice,
    require_layer_types,
    require_positive_int,
    require_positive_number,
    require_token_id,
)
from vllm_spark2_5_plugin.names import (
    FULL,
    LAYER_TYPES,
    MODEL_TYPE,
    SLIDING,
    TARGET_ARCH,
)

HIDDEN_ACTS = ("gelu_pytorch_tanh", "gelu")
#: The ``rope_type`` values whose vLLM 0.32.0 embedding rotates this model's
#: flat ``[tokens, heads * head_dim]`` q and k by token positions. vLLM builds
#: more, which do not fit here: ``deepseek_yarn`` / ``deepseek_llama_scaling``
#: expect ``[tokens, heads, head_dim]`` (the output comes back misshapen),
#: ``mllama4`` is a vision embedding (its forward takes no keys), and
#: ``openpangu`` / ``bailing_mrope`` need multimodal positions. The reference
#: implements ``default`` and ``linear``.
ROPE_TYPES = (
    "default",
    "linear",
    "ntk",
    "dynamic",
    "yarn",
    "longrope",
    "llama3",
    "proportional",
)
#: The entries each type's embedding reads (vLLM's ``get_rope`` takes them by
#: key, so one that is missing stopped the worker with a bare ``KeyError``).
#: ``dynamic`` needs ``factor`` or ``alpha`` (checked apart).
ROPE_REQUIRED = {
    "linear": ("factor",),
    "ntk": ("factor",),
    "yarn": ("factor", "original_max_position_embeddings"),
    "longrope": ("short_factor", "long_factor", "original_max_position_embeddings"),
    "llama3": (
        "factor",
        "low_freq_factor",
        "high_freq_factor",
        "original_max_position_embeddings",
    ),
}
#: The types whose embedding does not read ``factor``, though vLLM 0.32.0
#: multiplies the context length it derives by a ``factor`` of theirs.
ROPE_TYPES_WITHOUT_FACTOR = ("default", "proportional")
#: Entries that turn vLLM's embedding into one for another kind of model.
ROPE_FOREIGN_KEYS = {
    "mrope_section": "multimodal (3-D) positions",
    "use_fope": "Fourier position embeddings",
}

# The model's sizes: positive ints that fix the weight and KV-cache shapes.
SIZE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "sliding_window",
)

# RoPE base frequency per layer type when the checkpoint names none.
DEFAULT_ROPE_THETA = {SLIDING: 10_000.0, FULL: 1_000_000.0}


#: The config attributes that hold RoPE settings: ``rope_scaling`` is
#: Transformers' legacy name of ``rope_parameters``, ``rope_theta`` the legacy
#: theta of both layer types, and ``original_max_position_embeddings`` the
#: legacy (Phi-3 style) top-level pretraining length of the scaled types.
ROPE_FIELDS = (
    "rope_parameters",
    "rope_scaling",
    "rope_theta",
    "original_max_position_embeddings",
)
#: The RoPE types whose entry takes ``original_max_position_embeddings``.
ROPE_TYPES_WITH_ORIGINAL = ("llama3", "yarn", "longrope")
#: Top-level keys that vLLM's ``patch_rope_parameters`` reads as RoPE settings
#: but Transformers (and so ``Spark2_5Config``, the reference and the DSpark
#: tools) ignores. They are refused when the config is read, naming the key;
#: the value is what vLLM applies to every layer type's RoPE.
#: ``rotary_emb_base`` is refused rather than read as a legacy ``rope_theta``:
#: vLLM would still find it on the config object and re-apply it as an
#: assigned ``rope_theta`` (which the plugin reads differently from a theta of
#: config.json when every layer type names its own), and any tool that reads
#: config.json without this class would not know the key at all, so only
#: refusing it keeps every reader on the same RoPE.
ROPE_ALIAS_THETA = "rotary_emb_base"
#: vLLM's spellings of the fraction of each head that RoPE rotates (it copies
#: the first one it finds into every layer type's RoPE); Spark2_5 rotates
#: whole heads, so only 1 is accepted.
ROPE_ALIAS_PARTIAL = ("partial_rotary_factor", "rotary_pct", "rotary_emb_fraction")
# Where a Spark2_5Config keeps its RoPE fields as given (not serialised).
_ROPE_GIVEN = "_rope_given"
# Set (to True) on a Spark2_5Config whose layer_types were derived from
# num_hidden_layers rather than given (not serialised).
_LAYER_TYPES_DERIVED = "_layer_types_derived"


def normalize_rope_parameters(
    params: Any,
    legacy_theta: Any,
    max_position_embeddings: Any,
    legacy_original: Any = None,
) -> dict[str, dict[str, Any]]:
    """Bring every accepted RoPE spelling to one dict per layer type.

    ``params`` is ``rope_parameters`` (or, without it, the legacy
    ``rope_scaling``): per layer type, or one flat set for both, or None;
    a missing type or theta gets the type's default, and a legacy
    ``legacy_theta`` only fills in a missing theta (docs/model.md, "RoPE
    parameters"). A ``llama3``/``yarn``/``longrope`` entry without its own
    ``original_max_position_embeddings`` takes the legacy top-level
    ``legacy_original`` (as Transformers' legacy reading does for Phi-3
    style configs, and as vLLM reads it for the default context length of
    ``longrope``), else ``max_position_embeddings``. The one reading of
    ``config.json`` and of fields assigned later (``--hf-overrides``).
    """
    params = copy.deepcopy(params)
    if params is None:
        per_type = {t: {"rope_type": "default"} for t in LAYER_TYPES}
    elif not isinstance(params, dict):
        raise ValueError(
            f"rope_parameters must be a dict, got {type(params).__name__}: {params!r}"
        )
    elif any(key in params for key in LAYER_TYPES):
        unknown = sorted(set(params) - set(LAYER_TYPES))
        if unknown:
            raise ValueError(
                f"rope_parameters mixes per-layer-type entries with other keys "
                f"{unknown}; use only {list(LAYER_TYPES)} as keys, or a flat "
                "dict that applies to both layer types"
            )
        for t in LAYER_TYPES:
            if not isinstance(params.get(t) or {}, dict):
                raise ValueError(
                    f"rope_parameters[{t!r}] must be a dict such as "
                    f'{{"rope_type": "default", "rope_theta": 10000.0}}, got '
                    f"{params[t]!r}"
                )
        per_type = {t: dict(params.get(t) or {}) for t in LAYER_TYPES}
    else:  # a flat dict applies to both layer types
        per_type = {t: dict(params) for t in LAYER_TYPES}

    for layer_type, entry in per_type.items():
        if "type" in entry and "rope_type" not in entry:
            entry["rope_type"] = entry.pop("type")
        entry.setdefault("rope_type", "default")
        if legacy_theta is not None:
            entry.setdefault("rope_theta", legacy_theta)
        entry.setdefault("rope_theta", DEFAULT_ROPE_THETA[layer_type])
        if entry["rope_type"] in ROPE_TYPES_WITH_ORIGINAL:
            entry.setdefault(
                "original_max_position_embeddings",
                max_position_embeddings if legacy_original is None else legacy_original,
            )
    return per_type


def default_layer_types(num_hidden_layers: int) -> list[str]:
    """Every fourth layer (i % 4 == 3) is full attention, the rest slide."""
    return [FULL if i % 4 == 3 else SLIDING for i in range(num_hidden_layers)]


class Spark2_5Config(PreTrainedConfig):
    r"""Configuration of a Spark2_5 decoder-only language model.

    Args:
        vocab_size (`int`, defaults to 151552): vocabulary size.
        hidden_size (`int`, defaults to 4096): width of the residual stream.
        intermediate_size (`int`, defaults to 12288): width of the gated MLP.
        num_hidden_layers (`int`, defaults to 40): number of decoder layers.
        num_attention_heads (`int`, defaults to 32): query heads per layer.
        num_key_value_heads (`int`, defaults to 8): key/value heads per layer
            (grouped-query attention); must divide `num_attention_heads`.
        head_dim (`int`, defaults to 128): size of each attention head.
        hidden_act (`str`, defaults to `"gelu_pytorch_tanh"`): MLP activation,
            `"gelu_pytorch_tanh"` (tanh approximation) or `"gelu"` (exact erf).
        max_position_embeddings (`int`, defaults to 131072): longest sequence.
        rms_norm_eps (`float`, defaults to 1e-6): RMSNorm epsilon.
        sliding_window (`int`, defaults to 4096): keys a sliding-attention query
            sees, itself included (positions t-W+1 .. t); may be null when no
            layer is a sliding layer.
        layer_types (`list[str]`, *optional*): `"sliding_attention"` or
            `"full_attention"` per layer; by default every fourth layer is
            full, a pattern that follows a `num_hidden_layers` assigned later.
        rope_parameters (`dict`, *optional*): RoPE settings per layer type,
            `{"sliding_attention": {...}, "full_attention": {...}}`. A flat dict
            (one `rope_type`/`rope_theta`/scaling set) applies to both types;
            the legacy top-level keys `rope_theta` and `rope_scaling` are
            accepted and also apply to both types, as is a top-level
            `original_max_position_embeddings` for the scaled types' entries
            that lack one. Assigned to a loaded config (`--hf-overrides`),
            they are read the same way. vLLM's other top-level spellings
            (`rotary_emb_base`, and a partial rotation under
            `partial_rotary_factor`/`rotary_pct`/`rotary_emb_fraction`) are
            refused, naming the key.
        attention_bias (`bool`, defaults to `False`): biases on q/k/v projections.
        attention_output_gate (`bool`, defaults to `True`): multiply each head's
            attention output by `sigmoid(x W_g)[head]` (`g_proj`).
        tie_word_embeddings (`bool`, defaults to `False`): share the LM head
            with the input embedding.
        initializer_range (`float`, defaults to 0.02): weight init std.
        pad_token_id, bos_token_id, eos_token_id: special token ids.

    DSpark draft settings (`dspark_*`, see the README) are kept as extra
    attributes and checked when a speculative config is built.
    """

    model_type = MODEL_TYPE
    keys_to_ignore_at_inference: ClassVar[list[str]] = ["past_key_values"]
    # Lets Transformers' RoPE helpers recognise the nested per-type layout even
    # when a model uses only one of the two layer types.
    _rope_type_labels: ClassVar[tuple[str, ...]] = LAYER_TYPES

    vocab_size: int = 151552
    hidden_size: int = 4096
    intermediate_size: int = 12288
    num_hidden_layers: int = 40
    num_attention_heads: int = 32
    num_key_value_heads: int = 8
    head_dim: int = 128
    hidden_act: str = "gelu_pytorch_tanh"
    max_position_embeddings: int = 131072
    rms_norm_eps: float = 1e-6
    sliding_window: int | None = 4096
    layer_types: list[str] | None = None
    rope_parameters: dict | None = None
    attention_bias: bool = False
    attention_output_gate: bool = True
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    use_cache: bool = True

    def __post_init__(self, **kwargs: Any) -> None:
        if self.layer_types is None and is_positive_int(self.num_hidden_layers):
            self.layer_types = default_layer_types(self.num_hidden_layers)
            # Remembered so that a num_hidden_layers assigned later
            # (--hf-overrides) gets the default pattern of its own length, as
            # the same value in config.json would (:meth:`__setattr__`).
            self.__dict__[_LAYER_TYPES_DERIVED] = True
        super().__post_init__(**kwargs)
        self._check_fields()

    # -- fields assigned after loading -----------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        """A field assigned to a loaded config (vLLM applies ``--hf-overrides``
        so, Transformers ``from_pretrained`` keyword arguments too) is read as
        the same field in config.json would be: RoPE fields through
        :meth:`_set_rope_field`, and ``num_hidden_layers`` /
        ``layer_types: null`` re-derive the default layer pattern when
        config.json gave no ``layer_types``. An explicitly given
        ``layer_types`` is kept as it is, so a length mismatch is still
        refused by :meth:`_check_fields`."""
        if self.__dict__.get(_ROPE_GIVEN) is None:
            super().__setattr__(name, value)  # still being built
            return
        if name in ROPE_FIELDS:
            self._set_rope_field(name, value)
        elif name == "layer_types":
            derived = value is None and is_positive_int(self.num_hidden_layers)
            super().__setattr__(
                name, default_layer_types(self.num_hidden_layers) if derived else value
            )
            self.__dict__[_LAYER_TYPES_DERIVED] = derived
        else:
            super().__setattr__(name, value)
            if (
                name == "num_hidden_layers"
                and self.__dict__.get(_LAYER_TYPES_DERIVED)
                and is_positive_int(value)
            ):
                super().__setattr__("layer_types", default_layer_types(value))

    # -- RoPE ---------------------------------------------------------------

    def convert_rope_params_to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """Bring the RoPE fields to one dict per layer type.

        Called by ``PreTrainedConfig.__post_init__`` with the keys that are not
        dataclass fields; the legacy ``rope_theta``/``rope_scaling`` are popped
        here. The fields as given are kept, so that one assigned later (vLLM's
        ``--hf-overrides``) is read with them (:meth:`__setattr__`).
        """
        legacy_scaling = kwargs.pop("rope_scaling", None)
        given = {
            "rope_parameters": copy.deepcopy(
                self.rope_parameters
                if self.rope_parameters is not None or not legacy_scaling
                else legacy_scaling
            ),
            "rope_theta": kwargs.pop("rope_theta", None),
            "original_max_position_embeddings": kwargs.pop(
                "original_max_position_embeddings", None
            ),
            "assigned": [],
        }
        self.rope_parameters = self._normalized_rope(given)
        if given["original_max_position_embeddings"] is not None:
            # Kept as an attribute too: vLLM reads it for the default context
            # length of longrope, and it is saved back as it was given.
            self.original_max_position_embeddings = given[
                "original_max_position_embeddings"
            ]
        self.__dict__[_ROPE_GIVEN] = given
        return kwargs

    def _normalized_rope(self, given: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return normalize_rope_parameters(
            given["rope_parameters"],
            given["rope_theta"],
            self.max_position_embeddings,
            given["original_max_position_embeddings"],
        )

    def _set_rope_field(self, name: str, value: Any) -> None:
        """A RoPE field assigned to a loaded config (vLLM applies
        ``--hf-overrides`` so) is read as config.json's would be:
        ``rope_parameters`` or ``rope_scaling`` (Transformers' other name for
        it) replaces the given RoPE settings, ``rope_theta`` the legacy
        top-level theta, ``original_max_position_embeddings`` the legacy
        top-level pretraining length (kept as an attribute too), and the
        result is normalised at once, before vLLM reads it."""
        given = self.__dict__[_ROPE_GIVEN]
        if name in ("rope_parameters", "rope_scaling") and value == (
            self.rope_parameters
        ):
            # Transformers' ``standardize_rope_params`` re-assigns the dict,
            # and ``--hf-overrides`` may repeat it in another order: kept in
            # the normalised order of the layer types, in place (vLLM takes
            # the last type's RoPE factor for the context length).
            if isinstance(value, dict) and list(value) != list(self.rope_parameters):
                ordered = {t: value[t] for t in self.rope_parameters}
                value.clear()
                value.update(ordered)
            super().__setattr__("rope_parameters", value)
            return
        key = "rope_parameters" if name == "rope_scaling" else name
        fields = {**given, key: copy.deepcopy(value)}
        try:
            per_type = self._normalized_rope(fields)
            for layer_type, entry in per_type.items():
                self._check_rope_entry(f"rope_parameters[{layer_type!r}]", entry)
        except ValueError as exc:
            raise ValueError(
                f"{exc} (from {name}={value!r} set on the loaded config, e.g. "
                "by --hf-overrides)"
            ) from None
        if name == "original_max_position_embeddings":
            super().__setattr__(name, value)
        # A new record, never an update in place: a shallow copy of the config
        # (copy.copy) shares the record's object, and must not see this.
        self.__dict__[_ROPE_GIVEN] = {
            **fields,
            "assigned": [*given["assigned"], name],
        }
        super().__setattr__("rope_parameters", per_type)

    def _check_rope_assignments(self) -> None:
        """Refuse RoPE fields assigned after loading that name one setting
        twice, or that would change nothing."""
        given = self.__dict__.get(_ROPE_GIVEN) or {"assigned": []}
        if {"rope_parameters", "rope_scaling"} <= set(given["assigned"]):
            raise ValueError(
                "rope_parameters and rope_scaling are both set; rope_scaling is "
                "the legacy name of rope_parameters: give one of them"
            )
        if "rope_theta" not in given["assigned"]:
            return
        theta = given["rope_theta"]
        with_theta, without = (
            self._normalized_rope({**given, "rope_theta": t}) for t in (theta, None)
        )
        if with_theta == without:
            per_type = {t: {**e, "rope_theta": theta} for t, e in without.items()}
            raise ValueError(
                f"rope_theta={theta!r} changes nothing: rope_parameters give "
                "every layer type its own rope_theta, which wins over the "
                "top-level rope_theta (as in config.json). Set the theta in "
                f"rope_parameters instead, e.g. "
                f'{{"rope_parameters": {json.dumps(per_type)}}}'
            )

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> Any:
        """As Transformers reads a config, then checks the fields again when
        keyword arguments were given: ``from_pretrained(path, head_dim=64)``
        assigns them after the config was built (and checked)."""
        given = bool(kwargs)
        result = super().from_dict(config_dict, **kwargs)
        if given:
            config = result[0] if isinstance(result, tuple) else result
            try:
                config._check_fields()
            except ValueError as exc:
                raise ValueError(
                    f"{exc} (in the Spark2_5 config with the keyword arguments "
                    "given to from_pretrained)"
                ) from None
        return result

    def to_dict(self) -> dict[str, Any]:
        output = super().to_dict()
        output.pop(_ROPE_GIVEN, None)  # how the fields were spelled, not a field
        output.pop(_LAYER_TYPES_DERIVED, None)  # how layer_types came about
        return output

    # -- validation -----------------------------------------------------------

    def _check_fields(self, *, window_disabled: bool = False) -> None:
        """Raise ``ValueError`` naming the first field that cannot work.

        ``window_disabled``: vLLM has turned the window off, set
        ``sliding_window`` to None, and the sliding layers attend to the
        whole (capped) context; the window is then not checked. vLLM does so
        for ``--disable-sliding-window`` and for a window of 0 given with
        ``--hf-overrides``. A window of 0 in config.json never gets that far:
        it is refused here when the file is read, as any window that is not
        a positive integer.

        ``sliding_window`` may be null (absent, it takes its default) when no
        layer of ``layer_types`` is a sliding layer: Hugging Face writes null
        for a window nothing uses.
        """
        for name in SIZE_FIELDS:
            if name == "sliding_window" and (
                window_disabled or self.sliding_window is None
            ):
                continue  # null: allowed only without sliding layers (below)
            require_positive_int(name, getattr(self, name))
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be divisible "
                f"by num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(
                f"head_dim must be even for rotary embeddings, got {self.head_dim}"
            )
        require_choice("hidden_act", self.hidden_act, HIDDEN_ACTS)
        require_positive_number("rms_norm_eps", self.rms_norm_eps)
        require_layer_types("layer_types", self.layer_types, "one entry per layer")
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"layer_types has {len(self.layer_types)} entries but "
                f"num_hidden_layers is {self.num_hidden_layers}; give one entry "
                "per layer"
            )
        sliding = [i for i, t in enumerate(self.layer_types) if t == SLIDING]
        if self.sliding_window is None and sliding and not window_disabled:
            raise ValueError(
                f"sliding_window is null, but layer_types makes {len(sliding)} "
                f"of the {len(self.layer_types)} layers {SLIDING} layers (layer "
                f"{sliding[0]} first), which need it: give the number of keys a "
                "sliding layer sees (a positive integer), or make every layer "
                f"{FULL}"
            )
        self._check_top_level_rope_keys()
        for layer_type, entry in self.rope_parameters.items():
            self._check_rope_entry(f"rope_parameters[{layer_type!r}]", entry)
        self._check_rope_assignments()
        for name in ("attention_bias", "attention_output_gate", "tie_word_embeddings"):
            require_bool(name, getattr(self, name))
        self._check_eos_token_id()

    def _check_top_level_rope_keys(self) -> None:
        """Top-level RoPE keys that Transformers and vLLM would read apart.

        Checked before the per-type entries, so that the message names the key
        the user wrote rather than the per-type entry vLLM copies it into.
        """
        base = getattr(self, ROPE_ALIAS_THETA, None)
        if base is not None:
            raise ValueError(
                f"{ROPE_ALIAS_THETA}={base!r}: Spark2_5 does not read this key "
                "(Transformers, the reference and the DSpark tools ignore it, "
                "while vLLM would apply it as the RoPE theta of every layer "
                "type, so the served model would differ from theirs). Write it "
                "as rope_theta instead (it fills in every layer type's theta "
                "that rope_parameters leave out), or set rope_theta inside "
                "rope_parameters"
            )
        for key in ROPE_ALIAS_PARTIAL:
            fraction = getattr(self, key, None)
            if fraction is not None and fraction != 1:
                raise ValueError(
                    f"{key}={fraction!r} would make vLLM rotate only part of each "
                    "head (it applies it to every layer type's RoPE); Spark2_5 "
                    "rotates whole heads, as the reference and the DSpark tools "
                    f"do: remove {key}"
                )
        original = getattr(self, "original_max_position_embeddings", None)
        if original is None:
            return
        require_positive_int("original_max_position_embeddings", original)
        for layer_type, entry in self.rope_parameters.items():
            own = entry.get("original_max_position_embeddings", original)
            if entry.get("rope_type") in ROPE_TYPES_WITH_ORIGINAL and own != original:
                # Transformers' legacy reading lets the top-level value win in
                # a flat dict, vLLM's default longrope context length follows
                # it, and the rotation follows the entry: refuse the choice.
                raise ValueError(
                    f"original_max_position_embeddings={original!r} (top level) "
                    f"and rope_parameters[{layer_type!r}]"
                    f"['original_max_position_embeddings']={own!r} disagree; "
                    "give the pretraining length once (inside rope_parameters, "
                    "or only at the top level)"
                )

    def _check_rope_entry(self, name: str, entry: dict[str, Any]) -> None:
        """One layer type's RoPE: a type this model's attention can use, with
        the entries vLLM's embedding of that type reads."""
        require_positive_number(f"{name}['rope_theta']", entry.get("rope_theta"))
        rope_type = entry.get("rope_type")
        require_choice(f"{name}['rope_type']", rope_type, ROPE_TYPES)
        for key, what in ROPE_FOREIGN_KEYS.items():
            if entry.get(key):
                raise ValueError(
                    f"{name}[{key!r}] asks for {what}, which Spark2_5 (a text "
                    f"model) does not use; remove it (got {entry[key]!r})"
                )
        partial = entry.get("partial_rotary_factor", 1.0)
        if partial != 1.0:
            raise ValueError(
                f"{name}['partial_rotary_factor'] = {partial!r} would rotate only "
                "part of each head; Spark2_5 rotates whole heads (vLLM would "
                "serve another model than the reference and the DSpark tools "
                "compute): remove it"
            )
        rope_dim = entry.get("rope_dim")
        if rope_dim and rope_dim != self.head_dim:
            # vLLM's get_rope takes it as the rotated width, before any
            # fraction; an empty one (None, 0) as the whole head.
            raise ValueError(
                f"{name}['rope_dim'] = {rope_dim!r} would rotate only that many "
                f"of each head's head_dim = {self.head_dim} dimensions; Spark2_5 "
                "rotates whole heads: remove it"
            )
        factor = entry.get("factor", 1.0)
        if rope_type in ROPE_TYPES_WITHOUT_FACTOR and factor != 1.0:
            raise ValueError(
                f"{name}['factor'] = {factor!r} with rope_type {rope_type!r}, "
                "which does not scale positions: the rotation would ignore it, "
                "but vLLM would multiply the context length by it. Remove it, "
                "or give the scaling type it is meant for (e.g. rope_type "
                "'linear')"
            )
        required = ROPE_REQUIRED.get(rope_type, ())
        if rope_type == "dynamic":
            required = tuple(k for k in ("factor", "alpha") if k in entry)
            if not required:
                raise ValueError(
                    f"{name} with rope_type 'dynamic' needs 'factor' or 'alpha' "
                    f"(it has {sorted(entry)})"
                )
        for key in required:
            field = f"{name}[{key!r}]"
            if key not in entry:
                raise ValueError(
                    f"{name} with rope_type {rope_type!r} needs {key!r} "
                    f"(it has {sorted(entry)})"
                )
            if key in ("short_factor", "long_factor"):
                self._check_longrope_factors(field, entry[key])
            elif key == "original_max_position_embeddings":
                require_positive_int(field, entry[key])
            else:
                require_positive_number(field, entry[key])

    def _check_longrope_factors(self, field: str, value: Any) -> None:
        """One positive factor per rotated pair of dimensions (whole heads)."""
        pairs = self.head_dim // 2
        if (
            not isinstance(value, list)
            or len(value) != pairs
            or not all(is_positive_number(v) for v in value)
        ):
            raise ValueError(
                f"{field} must be a list of {pairs} finite positive numbers (one per "
                f"rotated pair of dimensions), got {value!r}"
            )

    def _check_eos_token_id(self) -> None:
        """vLLM stops on these ids (when the checkpoint has no
        generation_config.json): one the model cannot produce never stops a
        request, and a string would be compared with token ids."""
        value = self.eos_token_id
        if value is None:
            return
        ids = value if isinstance(value, list) else [value]
        for i, token in enumerate(ids):
            require_token_id(
                f"eos_token_id[{i}]" if isinstance(value, list) else "eos_token_id",
                token,
                self.vocab_size,
                ": the model can only produce ids below vocab_size, so no "
                "request would ever stop on it. Use the id of the tokenizer's "
                "end-of-text token",
            )


def check_target_config(vllm_config: Any) -> None:
    """Check a Spark2_5 target's config again, as vLLM will build the model.

    ``Spark2_5Config`` checks ``config.json`` when it is read, but vLLM
    applies ``--hf-overrides`` to the config object afterwards, so an
    override such as ``{"num_hidden_layers": 2}`` (with four layer types)
    would otherwise surface as an ``IndexError`` inside the model's
    construction. Runs before ``VllmConfig`` validation; other models are
    untouched, except one whose ``config.json`` names the Spark2_5
    architecture under another ``model_type``: Transformers then reads it
    with that type's config class, none of the Spark2_5 fields is checked,
    and the model would be built from a config that lacks some of them or
    holds values it never validated.
    """
    model_config = getattr(vllm_config, "model_config", None)
    config = getattr(model_config, "hf_config", None)
    if not isinstance(config, Spark2_5Config):
        model_type = getattr(config, "model_type", None)
        architectures = getattr(config, "architectures", None) or []
        if TARGET_ARCH in architectures and model_type != MODEL_TYPE:
            raise ValueError(
                f"config.json names the architecture {TARGET_ARCH} but has "
                f'model_type {model_type!r}: set "model_type": "{MODEL_TYPE}" '
                "so that the Spark2_5 config reads and checks its fields"
            )
        return
    window_disabled = bool(getattr(model_config, "disable_sliding_window", False))
    try:
        config._check_fields(window_disabled=window_disabled)
    except ValueError as exc:
        raise ValueError(
            f"{exc} (in the Spark2_5 config as vLLM will build the model, "
            "--hf-overrides included)"
        ) from None
    _check_tokenizer_fits(model_config, config)  # vocab_size is an int now
    _check_kv_heads_split(vllm_config, config)
    _check_lora_dtype(vllm_config)
    _check_context_length(model_config, config, window_disabled)


def _context_limiting_types(config: Spark2_5Config, window_disabled: bool) -> list[str]:
    """The layer types whose RoPE bounds the context: the full-attention
    layers (and, with the window disabled, the sliding layers, which then
    attend to the whole context too); a model whose layers all slide has
    only its sliding layers' RoPE."""
    used = set(config.layer_types)
    limiting = [
        t for t in (FULL, SLIDING) if t in used and (t == FULL or window_disabled)
    ]
    return limiting or [SLIDING]


def _max_len_with_rope_of(
    model_config: Any, config: Spark2_5Config, layer_type: str, max_model_len: Any
) -> int:
    """vLLM's own ``max_model_len`` rule (``ModelConfig.get_and_verify_max_len``:
    the default length, or the check of a given one) as it reads a model
    whose every layer has ``layer_type``'s RoPE.

    The normalised RoPE settings are swapped for that one entry (a flat dict)
    while vLLM reads them, then restored; its "Using max model len" line is
    kept out of the log (vLLM logged the length it chose already).
    """
    saved = config.__dict__["rope_parameters"]
    logger = logging.getLogger("vllm.config.model")
    quiet = _WarningsOnly()
    config.__dict__["rope_parameters"] = saved[layer_type]
    logger.addFilter(quiet)
    try:
        return model_config.get_and_verify_max_len(max_model_len)
    finally:
        logger.removeFilter(quiet)
        config.__dict__["rope_parameters"] = saved


class _WarningsOnly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


def _describe_rope(config: Spark2_5Config) -> str:
    parts = []
    for layer_type, entry in config.rope_parameters.items():
        factor = f"factor {entry['factor']!r}" if "factor" in entry else "no factor"
        if "factor" in entry and entry.get("rope_type") in ROPE_TYPES_WITH_ORIGINAL:
            factor += " (vLLM counts it in max_position_embeddings)"
        parts.append(f"{layer_type}: rope_type {entry.get('rope_type')!r}, {factor}")
    return "; ".join(parts)


def _limiting_layers(layer_type: str, window_disabled: bool) -> str:
    if layer_type == FULL:
        return f"the {FULL} layers, which attend to the whole context,"
    if window_disabled:
        return (
            f"the {SLIDING} layers, which attend to the whole context with the "
            "window disabled,"
        )
    return f"the {SLIDING} layers (all the layers of layer_types)"


def _check_context_length(
    model_config: Any, config: Spark2_5Config, window_disabled: bool
) -> None:
    """Hold vLLM's ``max_model_len`` to what the RoPE of the layers that
    bound the context is scaled for (:func:`_context_limiting_types`).

    vLLM 0.32.0 multiplies ``max_position_embeddings`` by one RoPE ``factor``
    (``_get_and_verify_max_len``): that of the last layer type's entry that
    has one (yarn, llama3 and longrope excepted), assuming every type shares
    it. With a factor on the sliding layers only (they see a window, so it
    does not lengthen the context), it served the full-attention layers that
    factor times the positions they were scaled for, without a word.

    vLLM has derived (or checked) its length by now, and the scheduler and a
    draft's config have copied it, so it is not changed here:

    * no length given (or ``-1``): a derived length past the limiting layers'
      is refused, naming both and the ``--max-model-len`` to pass. A
      shorter one (a factor below 1 on the sliding layers) is kept: it is
      safe, and a longer explicit length would have been refused by vLLM
      already, before this check;
    * a length given: vLLM's own rule for a length past the model's applies
      against the limiting layers' (refused unless
      ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``, or allowed by ``model_max_length``).

    With the factors of the two types alike, vLLM's length is the limiting
    layers' one, and nothing changes.
    """
    if getattr(model_config, "hf_text_config", None) is not config:
        return  # vLLM reads the length off another config object
    given = getattr(model_config, "original_max_model_len", None)
    limiting = _context_limiting_types(config, window_disabled)
    if given is not None and given != -1:
        for layer_type in limiting:
            try:
                _max_len_with_rope_of(model_config, config, layer_type, given)
            except ValueError as exc:
                raise ValueError(
                    f"--max-model-len {given} is past the length that "
                    f"{_limiting_layers(layer_type, window_disabled)} are scaled "
                    f"for (rope_parameters: {_describe_rope(config)}); vLLM "
                    "checked it against another layer type's RoPE factor, which "
                    f"does not lengthen the context. {exc}"
                ) from None
        return
    lengths = {
        t: _max_len_with_rope_of(model_config, config, t, None) for t in limiting
    }
    layer_type = min(lengths, key=lengths.__getitem__)
    supported = lengths[layer_type]
    derived = model_config.max_model_len
    if derived <= supported:
        return
    instead = " in place of -1" if given == -1 else ""
    raise ValueError(
        f"vLLM derived max_model_len {derived} from the RoPE scaling of "
        f"rope_parameters ({_describe_rope(config)}), applying one layer "
        f"type's factor to the whole model, but "
        f"{_limiting_layers(layer_type, window_disabled)} are scaled for "
        f"{supported} positions: another layer type's factor does not lengthen "
        f"the context. Serve with --max-model-len {supported}{instead} (or "
        "shorter); a longer one is refused unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 "
        "or within config.json's model_max_length, as vLLM does for any length "
        "past the model's"
    )


def _check_lora_dtype(vllm_config: Any) -> None:
    """vLLM's LoRA kernels on GPUs (Triton, ``lora_shrink``) take float16 and
    bfloat16 only: a float32 model with ``--enable-lora`` starts, then the
    first request with an adapter fails an assertion inside the engine,
    which takes the server down. Refused at start-up instead (the CPU build
    runs LoRA in float32)."""
    if getattr(vllm_config, "lora_config", None) is None:
        return
    import torch
    from vllm.platforms import current_platform

    if not current_platform.is_cuda_alike():
        return
    dtype = vllm_config.model_config.dtype
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(
            f"--enable-lora with dtype {str(dtype).removeprefix('torch.')}: "
            "vLLM's LoRA kernels on GPUs take float16 or bfloat16 only (the "
            "first request with an adapter would stop the engine); serve with "
            "--dtype bfloat16 or --dtype float16"
        )


def _check_kv_heads_split(vllm_config: Any, config: Spark2_5Config) -> None:
    """KV heads are split across tensor-parallel ranks, or replicated when
    there are fewer than ranks; vLLM's own start-up check covers only the
    query heads, so a bad pair would otherwise stop the worker."""
    parallel = getattr(vllm_config, "parallel_config", None)
    tp = getattr(parallel, "tensor_parallel_size", 1) or 1
    kv = config.num_key_value_heads
    if kv % tp and tp % kv:
        raise ValueError(
            f"num_key_value_heads ({kv}) and the tensor parallel size ({tp}) "
            "must divide one another: each rank holds a whole share of the KV "
            "heads, or a copy of one"
        )


def largest_token_id(tokenizer_json: Path) -> int | None:
    """The largest id of a Hugging Face ``tokenizer.json`` (its model's
    vocabulary and its added tokens), or ``None`` if the file does not say."""
    try:
        data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # vLLM's own tokenizer loading reports a broken file
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        return None
    vocab = data["model"].get("vocab")
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        ids = [len(vocab) - 1] if vocab else []
    elif isinstance(vocab, dict):
        ids = [i for i in vocab.values() if isinstance(i, int)]
    else:
        ids = []
    for token in data.get("added_tokens") or []:
        if isinstance(token, dict) and isinstance(token.get("id"), int):
            ids.append(token["id"])
    return max(ids) if ids else None


def _check_tokenizer_fits(model_config: Any, config: Spark2_5Config) -> None:
    """Refuse a local tokenizer with ids past ``vocab_size``: vLLM accepts a
    prompt token up to the tokenizer's largest id, and one past the
    embedding stops the engine (an ``IndexError`` in the worker)."""
    if getattr(model_config, "skip_tokenizer_init", False):
        return
    tokenizer = getattr(model_config, "tokenizer", None)
    path = Path(str(tokenizer)) / "tokenizer.json" if tokenizer else None
    if path is None or not path.is_file():
        return
    largest = largest_token_id(path)
    if largest is not None and largest >= config.vocab_size:
        raise ValueError(
            f"the tokenizer ({path}) has token ids up to {largest}, but "
            f"vocab_size is {config.vocab_size}: a request holding one of the "
            "ids past the vocabulary would stop the engine. The embedding and "
            "the LM head need a row for every token of the tokenizer: set "
            "vocab_size (and those tensors) to at least "
            f"{largest + 1}, or use the tokenizer the model was trained with"
        )


__all__ = [
    "Spark2_5Config",
    "check_target_config",
    "default_layer_types",
    "largest_token_id",
]
