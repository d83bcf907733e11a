"""SpadeRunner: "measures" configs by simulating them (runtime_s = simulated seconds)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.runner import Measurement, ProgressFn, Runner

from .simulator import Machine, Tiling, load_machine, simulate, tile
from .space import SpadeSpace


class SpadeRunner(Runner):
    """Simulate each config on the SPADE-like machine; a failure is a record, never a raise.

    The simulator is deterministic, so one run per config is the measurement and
    ``spread_s`` is 0. Tilings are shared between configs with the same (rp, cp).
    """

    target = "spade"

    def __init__(self, machine: str | Machine = "spade", **_options: object) -> None:
        self.machine = load_machine(machine) if isinstance(machine, str) else machine
        self._spaces: dict[str, SpadeSpace] = {}

    def _space(self, op: str) -> SpadeSpace:
        if op not in self._spaces:
            self._spaces[op] = SpadeSpace(op)
        return self._spaces[op]

    def measure(
        self,
        matrix: Matrix,
        op: str,
        width: int,
        configs: Sequence[Config],
        progress: ProgressFn | None = None,
    ) -> list[Measurement]:
        tilings: dict[tuple[int, int | None], Tiling] = {}
        results = []
        for config in configs:
            result = self._measure_one(matrix, op, width, config, tilings)
            results.append(result)
            if progress is not None:
                progress(result)
        return results

    def _measure_one(
        self,
        matrix: Matrix,
        op: str,
        width: int,
        config: Config,
        tilings: dict[tuple[int, int | None], Tiling],
    ) -> Measurement:
        try:
            sched = self._space(op).schedule(config)
            key = (sched.rp, sched.cp)
            if key not in tilings:
                tilings[key] = tile(matrix.csr, sched.rp, sched.cp)
            sim = simulate(matrix.csr, op, width, sched, self.machine, tilings[key])
        except (CognateError, MemoryError, ValueError) as exc:
            return Measurement(config, "error", error=" ".join(str(exc).split()))
        return Measurement(
            config, "ok", runtime_s=sim.seconds, spread_s=0.0, counters=_counters(sim, self.machine)
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
