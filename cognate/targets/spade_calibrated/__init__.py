"""The spade-calibrated target: spade's schedules on the calibrated machine (docs/spade.md).

The machine (configs/spade-calibrated.yaml) is the calibration machine, whose runtimes were
checked against HotTiles' SST simulation of SPADE PEs (configs/spade-hottiles.yaml,
scripts/calibrate_spade.py), with its L1 and victim cache divided by 8 so that the record
matrices (10^2-10^6 nonzeros) overflow them the way the calibration matrices (10^7-10^8)
overflow the full-size ones.
The knobs, labels, baseline and mapping are spade's; only the machine differs.
"""

from __future__ import annotations

from cognate.targets.spade import SpadeRunner, SpadeSpace, simulated_target

NAME = "spade-calibrated"


class CalibratedSpace(SpadeSpace):
    """spade's space under this target's name (configs/spade-calibrated-<op>.yaml)."""

    target = NAME


class CalibratedRunner(SpadeRunner):
    """SpadeRunner on the calibrated machine; its configs are validated by CalibratedSpace."""

    target = NAME
    space_class = CalibratedSpace


TARGET = simulated_target(
    NAME,
    CalibratedSpace,
    CalibratedRunner,
    "spade on the machine calibrated against HotTiles' SPADE PEs (L1 scaled)",
)

__all__ = ["NAME", "TARGET", "CalibratedRunner", "CalibratedSpace"]
