# SPDX-License-Identifier: Apache-2.0
"""Hook points: the seam's assumptions about vLLM, and their checks."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Marks our class-level wrappers so that installing twice never wraps twice.
WRAPPED = "_spark2_5_plugin_wrapper"


@dataclass(frozen=True)
class HookPoint:
    """One assumption about vLLM's internals and how to check it."""

    name: str
    relies_on: str
    check: Callable[[], None]


HOOK_POINTS: list[HookPoint] = []


def hook_point(relies_on: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    def add(check: Callable[[], None]) -> Callable[[], None]:
        name = check.__name__.removeprefix("_check_")
        HOOK_POINTS.append(HookPoint(name, relies_on, check))
        return check

    return add


class VllmSeamError(RuntimeError):
    """The running vLLM does not provide what the plugin relies on."""


def check_hook_points() -> list[str]:
    """Check every hook point; return one line per broken assumption."""
    problems = []
    for hook in HOOK_POINTS:
        try:
            hook.check()
        except Exception as exc:  # noqa: BLE001 - report every kind of breakage
            problems.append(f"{hook.name} ({hook.relies_on}): {exc!r}")
    return problems


def require_hook_points() -> None:
    """Raise :class:`VllmSeamError` listing every broken hook point."""
    problems = check_hook_points()
    if problems:
        raise VllmSeamError(
            "this vLLM differs from the one the plugin was written for in "
            f"{len(problems)} place(s): " + "; ".join(problems)
        )


def params(fn: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(fn).parameters)


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)
