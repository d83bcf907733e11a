"""Target registry: a target is a runner plus its schedule spaces, nothing else.

Adding a target means adding ``cognate/targets/<name>.py`` (or a package) that defines
``TARGET`` and listing it here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cognate.errors import CognateError
from cognate.runner import Runner
from cognate.space import Space

OPS: tuple[str, ...] = ("spmm", "sddmm")
KNOWN_TARGETS: tuple[str, ...] = ("cpu", "spade", "gpu")


@dataclass(frozen=True)
class Target:
    name: str
    make_space: Callable[[str], Space]  # op -> Space
    make_runner: Callable[..., Runner]  # keyword options -> Runner
    description: str = ""
    # True when a measurement needs the whole machine (wall-clock timing on real cores);
    # False for deterministic simulators, whose runs may share the machine freely.
    exclusive: bool = True

    def space(self, op: str) -> Space:
        if op not in OPS:
            raise CognateError(f"unknown op {op!r}; expected one of {', '.join(OPS)}")
        return self.make_space(op)

    def runner(self, **options: Any) -> Runner:
        return self.make_runner(**options)


def get_target(name: str) -> Target:
    """Import ``cognate.targets.<name>`` (allow-listed) and return its TARGET."""
    if name not in KNOWN_TARGETS:
        raise CognateError(f"unknown target {name!r}; expected one of {', '.join(KNOWN_TARGETS)}")
    module = importlib.import_module(f"cognate.targets.{name}")
    return module.TARGET
