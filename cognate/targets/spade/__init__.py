"""The spade target: a simulated SPADE-like sparse accelerator (docs/architecture.md).

Simulations are deterministic and CPU-bound, so they may share the machine
(``exclusive=False``): a collector can run many at once.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from cognate.budget import Cost
from cognate.config import Config
from cognate.targets import Target

from .runner import SpadeRunner
from .simulator import row_region_bytes
from .space import SpadeSpace


@dataclass(frozen=True)
class SpadeTarget(Target):
    def artifacts(
        self, op: str, width: int, config: Config, info: dict[str, Any]
    ) -> list[tuple[str, str]]:
        """The simulator configuration (the machine and the chosen schedule) as YAML."""
        import yaml

        from cognate.targets.spade.simulator import load_machine

        space = self.space(op)  # a variant target's space names its own machine
        machine = load_machine(space.machine_name).model_dump(mode="json")
        schedule = dataclasses.asdict(space.schedule(config))
        doc = {**info, "schedule": schedule, "machine": machine}
        return [(".yaml", yaml.safe_dump(doc, sort_keys=False))]


def simulation_cost(width: int) -> Cost:
    """Memory of simulating at ``width``: tiles are streamed from the canonical CSR
    (measured per row, column and nonzero as docs/reliability.md, matrix inputs, says) and
    the simulator's row region holds 5 bytes per row per line of a float32 row of C (a
    10^7-row matrix at width 4096: 12.8 GB, whatever its nonzeros)."""
    return Cost(32 + row_region_bytes(1, width), 16, 96)


def simulated_target(name: str, description: str) -> SpadeTarget:
    """spade or a variant of it (the same knobs on another machine: configs/<name>.yaml and
    configs/<name>-<op>.yaml): simulations may share the host and cost what
    ``simulation_cost`` says."""
    return SpadeTarget(
        name,
        make_space=functools.partial(SpadeSpace, target=name),
        make_runner=functools.partial(SpadeRunner, target=name),
        description=description,
        exclusive=False,
        measure_cost=simulation_cost,
    )


TARGET = simulated_target(
    "spade",
    "simulated SPADE-like accelerator (16 PEs, tag-matched registers, L1/L2/LLC)",
)

# spade's variants: its knobs, labels, baseline and mapping on another machine (docs/spade.md).
# spade-calibrated: the machine checked against HotTiles' SST simulation of SPADE PEs
#   (configs/spade-hottiles.yaml, scripts/calibrate_spade.py) with its L1 and victim cache
#   divided by 8, so the record matrices (10^2-10^6 nonzeros) overflow them as the
#   calibration matrices (10^7-10^8) overflow the full-size ones.
# spade-inverted: the barrier mechanism swapped (barrier=true runs without one): a
#   falsification test of the mapper; if transfer helps as much here, the mapping does not
#   carry it.
VARIANTS: dict[str, str] = {
    "spade-calibrated": "spade on the machine calibrated against HotTiles' SPADE PEs (L1 scaled)",
    "spade-inverted": "spade with the barrier mechanism inverted relative to its mapper (a test)",
}
TARGETS: dict[str, SpadeTarget] = {
    "spade": TARGET,
    **{name: simulated_target(name, words) for name, words in VARIANTS.items()},
}

__all__ = ["TARGET", "TARGETS", "VARIANTS", "SpadeRunner", "SpadeSpace", "SpadeTarget"]
