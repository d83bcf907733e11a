"""The spade target: a simulated SPADE-like sparse accelerator (docs/architecture.md).

Simulations are deterministic and CPU-bound, so they may share the machine
(``exclusive=False``): a collector can run many at once.
"""

from __future__ import annotations

import dataclasses
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


def simulated_target(
    name: str, space: type[SpadeSpace], runner: type[SpadeRunner], description: str
) -> SpadeTarget:
    """spade or a variant of it (same knobs, another machine): simulations may share the
    host and cost what ``simulation_cost`` says."""
    return SpadeTarget(
        name,
        make_space=space,
        make_runner=runner,
        description=description,
        exclusive=False,
        measure_cost=simulation_cost,
    )


TARGET = simulated_target(
    "spade",
    SpadeSpace,
    SpadeRunner,
    "simulated SPADE-like accelerator (16 PEs, tag-matched registers, L1/L2/LLC)",
)

__all__ = ["TARGET", "SpadeRunner", "SpadeSpace", "SpadeTarget", "simulated_target"]
