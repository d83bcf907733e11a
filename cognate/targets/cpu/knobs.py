"""Checks of the knobs a cpu kernel receives: integers at run time (never as source text), and
the names a template family turns into whitelisted integers."""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Integral
from typing import Any

from cognate.errors import CognateError

MAX_RUNTIME_KNOB = 2**31 - 1


def runtime_knob(knobs: Mapping[str, Any], name: str) -> int:
    """A positive integer knob passed to the kernel as a runtime argument."""
    value = knobs.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_RUNTIME_KNOB:
        raise CognateError(f"cpu config: {name} must be an integer in 1..{MAX_RUNTIME_KNOB}")
    return value


def choice_knob(knobs: Mapping[str, Any], name: str, values: tuple[int, ...], where: str) -> int:
    """An integer knob that must be one of ``values`` (a one-line CognateError otherwise)."""
    value = knobs.get(name)
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) not in values:
        legal = ", ".join(map(str, values))
        raise CognateError(f"{where}: {name} must be one of {legal}, got {name}={repr(value)[:40]}")
    return int(value)


def named_knob(knobs: Mapping[str, Any], name: str, table: Mapping[str, int], where: str) -> int:
    """The integer ``table`` gives a string knob that must be one of its keys (a one-line
    CognateError otherwise): what a template receives instead of the string."""
    value = knobs.get(name)
    if not isinstance(value, str) or value not in table:
        raise CognateError(f"{where}: {name} must be one of {', '.join(table)}")
    return table[value]


def ranged_knob(knobs: Mapping[str, Any], name: str, top: int, where: str) -> int:
    """An integer knob in 1..``top`` (a one-line CognateError otherwise)."""
    value = knobs.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= top:
        raise CognateError(f"{where}: {name} must be an integer in 1..{top}")
    return value
