"""SpadeRunner: "measures" configs by simulating them (runtime_s = simulated seconds)."""

from __future__ import annotations

import numpy as np

from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.runner import Measurement, Runner
from cognate.targets import OPS

from .simulator import Machine, Tiling, load_machine, simulate, tile
from .space import SpadeSpace


class SpadeRunner(Runner):
    """Simulate each config on the SPADE-like machine; a failure is a record, never a raise.

    The simulator is deterministic, so one run per config is the measurement and
    ``spread_s`` and ``range_s`` are 0. Tilings are shared between configs with the same (rp, cp).
    """

    target = "spade"

    # Options other runners take; accepted so one collect command line fits every target.
    IGNORED_OPTIONS: tuple[str, ...] = ("timeout_s", "repeats")

    def __init__(
        self, machine: str | Machine | None = None, target: str = "spade", **options: object
    ) -> None:
        """``machine``: a machine file's name (default: the one the target's spaces name,
        ``machine:`` in configs/<target>-<op>.yaml). ``target``: spade or a variant of it
        (its spaces validate the configs). ``timeout_s`` and ``repeats`` are accepted and
        ignored: a simulation is deterministic, so one run is the measurement. Any other
        option is a typo."""
        self.target = target
        unknown = sorted(set(options) - set(self.IGNORED_OPTIONS))
        if unknown:
            known = ", ".join(("machine", *self.IGNORED_OPTIONS))
            raise CognateError(
                f"target {self.target}: runner does not take these options ({', '.join(unknown)}); "
                f"it takes {known}"
            )
        self._spaces: dict[str, SpadeSpace] = {op: SpadeSpace(op, target) for op in OPS}
        machine = self._spaces_machine() if machine is None else machine
        self.machine = load_machine(machine) if isinstance(machine, str) else machine
        self._tilings: dict[tuple[int, int | None], Tiling] = {}  # this batch's, by (rp, cp)

    def _spaces_machine(self) -> str:
        """The machine file the target's spaces name: one runner simulates both ops."""
        names = {space.machine_name for space in self._spaces.values()}
        if len(names) != 1:
            raise CognateError(
                f"target {self.target}: its spaces name different machines ({', '.join(sorted(names))})"
            )
        return names.pop()

    def _space(self, op: str) -> SpadeSpace:
        if op not in self._spaces:  # an op the target has no space for: the space says so
            self._spaces[op] = SpadeSpace(op, self.target)
        return self._spaces[op]

    def begin_batch(self, matrix: Matrix, op: str, width: int) -> None:
        self._tilings = {}  # tilings depend on the matrix only, so they live for one batch

    def end_batch(self) -> None:
        self._tilings = {}

    def measure_one(self, matrix: Matrix, op: str, width: int, config: Config) -> Measurement:
        try:
            sched = self._space(op).schedule(config)
            key = (sched.rp, sched.cp)
            if key not in self._tilings:
                self._tilings[key] = tile(matrix.csr, sched.rp, sched.cp)
            sim = simulate(matrix.csr, op, width, sched, self.machine, self._tilings[key])
        except (CognateError, MemoryError, ValueError) as exc:
            return Measurement(config, "error", error=" ".join(str(exc).split()))
        return Measurement(
            config,
            "ok",
            runtime_s=sim.seconds,
            spread_s=0.0,
            range_s=0.0,
            counters=_counters(sim, self.machine),
        )


def _counters(sim, machine: Machine) -> dict[str, float]:
    counters = {k: float(v) for k, v in sim.counters.items()}
    busy = sim.pe_busy_cycles / (machine.clock_ghz * 1e9)
    counters.update(
        dram_bytes=counters["dram_read_bytes"] + counters["dram_write_bytes"],
        pe_busy_max_s=float(busy.max()),
        pe_busy_mean_s=float(busy.mean()),
        pe_busy_min_s=float(busy.min()),
        pe_imbalance=float(busy.max() / busy.mean()) if busy.mean() > 0 else 1.0,
        pes_idle=float(np.count_nonzero(busy == 0)),
    )
    return counters
