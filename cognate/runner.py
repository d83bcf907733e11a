"""The runner interface: measure configs of one matrix on one target.

A runner never raises for a bad candidate: each config gets a Measurement whose status
says what happened (as in TVM meta_schedule's RunnerResult).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cognate.config import Config
from cognate.matrix import Matrix

Status = Literal["ok", "timeout", "error", "too_large"]
STATUSES: tuple[str, ...] = ("ok", "timeout", "error", "too_large")


@dataclass
class Measurement:
    """Outcome of one (matrix, op, width, config) measurement."""

    config: Config
    status: Status
    runtime_s: float | None = None  # median over repeats, when status == "ok"
    spread_s: float | None = None  # (max - min) over repeats, when timed
    counters: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


ProgressFn = Callable[[Measurement], None]


class Runner(ABC):
    """Measures configs on a target. One instance may be reused across matrices."""

    target: str

    @abstractmethod
    def measure(
        self,
        matrix: Matrix,
        op: str,
        width: int,
        configs: Sequence[Config],
        progress: ProgressFn | None = None,
    ) -> list[Measurement]:
        """One Measurement per config, in order; ``progress`` is called after each."""
