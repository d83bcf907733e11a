"""The runner interface: measure configs of one matrix on one target.

A runner never raises for a bad candidate: each config gets a Measurement whose status
says what happened (as in TVM meta_schedule's RunnerResult).
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cognate.config import Config
from cognate.matrix import Matrix

Status = Literal["ok", "timeout", "error", "too_large"]
STATUSES: tuple[str, ...] = ("ok", "timeout", "error", "too_large")
# An ``error`` whose message starts so is a wrong result (a mismatch), not a failed run:
# deterministic, so a resume does not retry it.
MISMATCH_PREFIX = "result differs from"


@dataclass
class Measurement:
    """Outcome of one (matrix, op, width, config) measurement."""

    config: Config
    status: Status
    runtime_s: float | None = None  # median over repeats, when status == "ok"
    # spread of the repeats, when timed (cognate.stats.timing_spread): interquartile range
    spread_s: float | None = None
    counters: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    range_s: float | None = None  # max - min of the repeats, when timed


ProgressFn = Callable[[Measurement], None]

# A record's error text is one line of at most this many characters (util.one_line).
ERROR_CHARS = 400


class Runner(ABC):
    """Measures configs on a target. One instance may be reused across matrices.

    A target implements ``measure_one`` and, when the configs of a batch share setup (a
    reference, cached tilings), ``begin_batch`` and ``end_batch``; ``measure`` drives the
    loop. A runner may instead override ``measure`` whole (tests' fake runners do).
    """

    target: str

    def measure(
        self,
        matrix: Matrix,
        op: str,
        width: int,
        configs: Sequence[Config],
        progress: ProgressFn | None = None,
    ) -> list[Measurement]:
        """One Measurement per config, in order; ``progress`` is called after each."""
        self.begin_batch(matrix, op, width)
        results = []
        try:
            for config in configs:
                result = self.measure_one(matrix, op, width, config)
                results.append(result)
                if progress is not None:
                    progress(result)
        finally:
            self.end_batch()
        return results

    def begin_batch(self, matrix: Matrix, op: str, width: int) -> None:  # noqa: B027 - a hook
        """Set up what every config of this (matrix, op, width) shares; nothing by default."""

    def end_batch(self) -> None:  # noqa: B027 - a hook
        """Release what begin_batch set up (e.g. device memory); nothing by default."""

    def measure_one(self, matrix: Matrix, op: str, width: int, config: Config) -> Measurement:
        """Measure one config of the current batch; never raises for a bad candidate."""
        raise NotImplementedError(
            f"{type(self).__name__} implements neither measure_one nor measure"
        )
