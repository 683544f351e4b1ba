# SPDX-License-Identifier: Apache-2.0
"""The shape of the DSpark draft the trainer builds, from a checkpoint's config.json.

See ``docs/dspark_training.md``; the fields are described in ``docs/dspark.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_spark2_5_plugin.names import DRAFT_SHARED_FIELDS, DSPARK_ALIASES
from vllm_spark2_5_plugin.names import SLIDING as SLIDING_TYPE
from vllm_spark2_5_plugin.references.layers import (
    ReferenceConfig,
    with_config_defaults,
)


def _dspark(raw: dict[str, Any], name: str) -> Any:
    value = raw.get(name)
    return (
        raw.get(DSPARK_ALIASES[name])
        if value is None and name in DSPARK_ALIASES
        else value
    )


def _as_tuple(value: Any, sort: bool = False) -> Any:
    """A list (or tuple) as a tuple, sorted with ``sort`` where its items
    compare; anything else as given, so that the settings check reports the
    value config.json holds (``sorted`` of a string gives its characters:
    ``"1,3"`` would be reported as ``[',', '1', '3']``)."""
    if not isinstance(value, (list, tuple)):
        return value
    if sort:
        try:
            return tuple(sorted(value))
        except TypeError:  # items that do not compare: checked later
            pass
    return tuple(value)


@dataclass(frozen=True)
class DraftConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_act: str
    rms_norm_eps: float
    attention_bias: bool
    attention_output_gate: bool
    rope_parameters: dict[str, dict[str, Any]]
    block_size: int
    markov_rank: int
    target_layer_ids: tuple[int, ...]
    markov_head_type: str
    enable_confidence_head: bool
    noise_token_id: int | None
    layer_types: tuple[str, ...]
    sliding_window: int

    @classmethod
    def from_config(cls, raw: dict[str, Any], **overrides: Any) -> DraftConfig:
        """Target fields + ``dspark_*`` fields of config.json (``Spark2_5Config``'s
        defaults for the fields it omits); ``overrides`` win."""
        raw = with_config_defaults(raw)
        n = raw["num_hidden_layers"]
        default_ids = sorted(
            {min(n - 1, 1 + round(k * max(n - 3, 0) / 2)) for k in range(3)}
        )

        def given(value: Any, default: Any) -> Any:
            # Only an omitted (null) field takes the default: a 0, [] or
            # "false" is kept as given, for the settings check to refuse by
            # name (it was replaced by the default without a word).
            return default if value is None else value

        dspark = {
            "block_size": given(_dspark(raw, "dspark_block_size"), 8),
            "markov_rank": given(_dspark(raw, "dspark_markov_rank"), 32),
            "target_layer_ids": given(
                _dspark(raw, "dspark_target_layer_ids"), default_ids
            ),
            "markov_head_type": given(
                _dspark(raw, "dspark_markov_head_type"), "vanilla"
            ),
            "enable_confidence_head": given(
                _dspark(raw, "dspark_enable_confidence_head"), False
            ),
            "noise_token_id": _dspark(raw, "dspark_noise_token_id"),
            "layer_types": given(raw.get("dspark_layer_types"), [SLIDING_TYPE]),
            "sliding_window": given(
                raw.get("dspark_sliding_window"), raw["sliding_window"]
            ),
        }
        dspark.update({k: v for k, v in overrides.items() if v is not None})
        dspark["target_layer_ids"] = _as_tuple(dspark["target_layer_ids"], sort=True)
        dspark["layer_types"] = _as_tuple(dspark["layer_types"])
        # The target's attention/MLP fields, read (with docs/model.md's
        # defaults) as the reference reads them.
        target = ReferenceConfig.from_dict(raw)
        return cls(
            vocab_size=raw["vocab_size"],
            intermediate_size=raw["intermediate_size"],
            **{name: getattr(target, name) for name in DRAFT_SHARED_FIELDS},
            **dspark,
        )

    def config_fields(self) -> dict[str, Any]:
        """The canonical ``dspark_*`` fields of config.json (a value that is
        not a list is kept as given, for the settings check to name)."""

        def as_list(value: Any) -> Any:
            return list(value) if isinstance(value, tuple) else value

        return {
            "dspark_block_size": self.block_size,
            "dspark_markov_rank": self.markov_rank,
            "dspark_target_layer_ids": as_list(self.target_layer_ids),
            "dspark_markov_head_type": self.markov_head_type,
            "dspark_enable_confidence_head": self.enable_confidence_head,
            "dspark_noise_token_id": self.noise_token_id,
            "dspark_layer_types": as_list(self.layer_types),
            "dspark_sliding_window": self.sliding_window,
        }
