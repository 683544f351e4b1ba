# SPDX-License-Identifier: Apache-2.0
"""Field checks shared by the model and DSpark configs.

Each raises ``ValueError`` naming the field and the value it got, so a bad
``config.json`` fails at load time with a message that says what to fix.
"""

from __future__ import annotations

import math
from typing import Any

from vllm_spark2_5_plugin.names import LAYER_TYPES


def is_int(value: Any) -> bool:
    """An ``int`` that is not a ``bool`` (JSON ``true`` is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_positive_int(value: Any) -> bool:
    return is_int(value) and value > 0


def require_positive_int(name: str, value: Any) -> None:
    if not is_positive_int(value):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def require_token_id(name: str, value: Any, vocab_size: int, why: str = "") -> None:
    """An id the model can produce: an int in ``0 .. vocab_size - 1``."""
    if not is_int(value) or not 0 <= value < vocab_size:
        raise ValueError(
            f"{name} must be a token id in 0..{vocab_size - 1}, got {value!r}{why}"
        )


def is_positive_number(value: Any) -> bool:
    """A finite int or float above 0 (a ``bool`` is not a number here; JSON's
    ``Infinity`` or ``1e999`` reads as an infinite float)."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and value > 0
        and math.isfinite(value)
    )


def require_positive_number(name: str, value: Any) -> None:
    if not is_positive_number(value):
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")


def require_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")


def require_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def require_layer_types(name: str, value: Any, what: str) -> None:
    """A non-empty list of layer types; ``what`` says what each entry is for."""
    if not isinstance(value, list | tuple) or not value:
        raise ValueError(
            f"{name} must be a non-empty list of {list(LAYER_TYPES)} ({what}), "
            f"got {value!r}"
        )
    for i, layer_type in enumerate(value):
        if layer_type not in LAYER_TYPES:
            raise ValueError(
                f"{name}[{i}] is {layer_type!r}; expected one of {list(LAYER_TYPES)}"
            )
