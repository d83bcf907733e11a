"""The cpu target: WACO's SuperSchedule and the DIA / reordered-BCSR families on generated,
compiled C kernels.

Imports are lazy so that the runner's worker process (which imports this package) stays
light and does not depend on the space module.
"""

from __future__ import annotations

from typing import Any

from cognate.runner import Runner
from cognate.space import Space
from cognate.targets import Target


def _make_space(op: str) -> Space:
    from cognate.targets.cpu.space import make_space

    return make_space(op)


def _make_runner(**options: Any) -> Runner:
    from cognate.targets.cpu.runner import CpuRunner

    return CpuRunner(**options)


TARGET = Target(
    "cpu",
    make_space=_make_space,
    make_runner=_make_runner,
    description=(
        "WACO SuperSchedule SpMM/SDDMM, DIA and reordered BCSR as generated C + OpenMP"
        " kernels on this machine"
    ),
    exclusive=True,
)
