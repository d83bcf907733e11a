"""The spade target: a simulated SPADE-like sparse accelerator (DESIGN 4.2).

Simulations are deterministic and CPU-bound, so they may share the machine
(``exclusive=False``): a collector can run many at once.
"""

from __future__ import annotations

from cognate.targets import Target

from .runner import SpadeRunner
from .space import SpadeSpace

TARGET = Target(
    "spade",
    make_space=SpadeSpace,
    make_runner=SpadeRunner,
    description="simulated SPADE-like accelerator (16 PEs, tag-matched registers, L1/L2/LLC)",
    exclusive=False,
)

__all__ = ["TARGET", "SpadeRunner", "SpadeSpace"]
