"""The spade-inverted target: spade with its barrier mechanism swapped (a falsification test).

The spade mapper says barrier -> ``k1`` outermost (column panels outermost) and no barrier
-> ``i1`` outermost. On this machine (configs/spade-inverted.yaml, ``barrier_inverted``) the
config labelled barrier=true runs without the barrier and barrier=false with it, while the
configs, their labels and the mapper's loop order stay those of spade. If transfer from the
cpu records still helps here as much as on spade, the mapping is not what carries it.
Everything else (knobs, machine parameters, the C core) is spade's.
"""

from __future__ import annotations

from cognate.targets.spade import SpadeRunner, SpadeSpace, simulated_target

NAME = "spade-inverted"


class InvertedSpace(SpadeSpace):
    """spade's space under this target's name (configs/spade-inverted-<op>.yaml)."""

    target = NAME


class InvertedRunner(SpadeRunner):
    """SpadeRunner on the inverted machine; its configs are validated by InvertedSpace."""

    target = NAME
    space_class = InvertedSpace


TARGET = simulated_target(
    NAME,
    InvertedSpace,
    InvertedRunner,
    "spade with the barrier mechanism inverted relative to its mapper (a test)",
)

__all__ = ["NAME", "TARGET", "InvertedRunner", "InvertedSpace"]
