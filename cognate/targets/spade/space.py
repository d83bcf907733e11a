"""The spade schedule spaces (configs/spade-spmm.yaml, configs/spade-sddmm.yaml): 448 configs.

Knobs: ``rp`` (rows per row panel), ``cp`` (columns per column panel, or "all"),
``barrier``, ``bypass``, ``split`` (dense passes per tile) and ``sched`` (static | dynamic).

Mapping into the CPU loop vocabulary (docs/architecture.md, Transfer): RP -> I, CP -> K (all -> ncols), the dense
split -> J = ceil(width / split) (the dense columns one pass over a tile covers; a strip
never exceeds its dimension, as in WACO), barrier -> order ``k1 i1 i0 k0 j1 j0`` (column
panels outermost), no barrier -> ``i1 k1 i0 k0 j1 j0``. The order is fixed by docs/architecture.md, Transfer; in
the simulator the pass loop j1 sits between the tile loops and the nonzeros of the tile.
``bypass`` and ``sched`` have no loop-nest meaning and are the raw knob features.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping
from typing import Any

import numpy as np

from cognate.config import Config
from cognate.errors import CognateError
from cognate.space import LoopNest, Space, load_space_yaml

from .simulator import Schedule

KNOB_NAMES: tuple[str, ...] = ("rp", "cp", "barrier", "bypass", "split", "sched")
ORDER_BARRIER: tuple[str, ...] = ("k1", "i1", "i0", "k0", "j1", "j0")
ORDER_NO_BARRIER: tuple[str, ...] = ("i1", "k1", "i0", "k0", "j1", "j0")
SCHEDS: tuple[str, ...] = ("static", "dynamic")


class SpadeSpace(Space):
    """The 448-config spade space of one op (``configs/<target>-<op>.yaml``); ``target``: a
    variant's name (its own YAML, the same knobs)."""

    target = "spade"

    def __init__(self, op: str, target: str = "spade") -> None:
        self.op, self.target = op, target
        self.name = f"{self.target}-{op}"
        data, self.version = load_space_yaml(self.name)
        where = f"configs/{self.name}.yaml"
        knobs = data.get("knobs")
        if not isinstance(knobs, dict) or tuple(knobs) != KNOB_NAMES:
            raise CognateError(f"{where}: knobs must be exactly {', '.join(KNOB_NAMES)}")
        self.values: dict[str, list[Any]] = {k: list(v) for k, v in knobs.items()}
        self.machine_name = str(data.get("machine", "spade"))
        for k, v in self.values.items():
            if not v or len(set(map(str, v))) != len(v):
                raise CognateError(f"{where}: knob {k} needs distinct values")
        for k in ("rp", "split"):
            if not all(type(x) is int and 1 <= x <= 1 << 20 for x in self.values[k]):
                raise CognateError(f"{where}: {k} values must be integers in 1..2^20")
        if not all(x == "all" or (type(x) is int and 1 <= x <= 1 << 24) for x in self.values["cp"]):
            raise CognateError(f"{where}: cp values must be positive integers or 'all'")
        if set(self.values["sched"]) - set(SCHEDS):
            raise CognateError(f"{where}: sched values must be static or dynamic")
        self._baseline = self.validate(data.get("baseline") or {})
        self._earlier = self._earlier_versions(data.get("compatible_versions") or {}, where)
        self.compatible_versions: tuple[str, ...] = tuple(self._earlier)

    def _earlier_versions(self, listed: Any, where: str) -> dict[str, dict[str, list[Any]]]:
        """``compatible_versions``: earlier version -> the knob values it had where they
        differ from this space's (each a subset of this space's values)."""
        if not isinstance(listed, dict):
            raise CognateError(f"{where}: compatible_versions must map versions to knob values")
        out = {}
        for version, values in listed.items():
            ok = isinstance(version, str) and isinstance(values, dict)
            ok = ok and all(
                k in self.values and isinstance(v, list) and v and set(v) <= set(self.values[k])
                for k, v in values.items()
            )
            if not ok:
                raise CognateError(
                    f"{where}: compatible version {version!r} must list a subset of the "
                    "knob values of this space"
                )
            out[version] = {**self.values, **values}
        return out

    def complete_config_sets(self) -> list[set[str]]:
        """The config hashes that make a matrix 'measured on every config': this space's,
        then each compatible version's. A matrix measured on every config of an earlier
        version (and nothing else) has its oracle over that version's space."""
        sets = [{c.hash for c in self.all_configs()}]
        for values in self._earlier.values():
            combos = itertools.product(*(values[k] for k in KNOB_NAMES))
            sets.append(
                {
                    Config(self.target, self.op, dict(zip(KNOB_NAMES, c, strict=True))).hash
                    for c in combos
                }
            )
        return sets

    def accepts_version(self, version: str) -> bool:
        """Current, or a listed earlier version: a subset of this space's configs on the
        same machine, so its records are measurements of this space's configs."""
        return version == self.version or version in self.compatible_versions

    def reads_models_of(self, version: str) -> bool:
        """A compatible version has the same knobs with fewer rp values, and rp reaches the
        model only as log2 of the row strip (``loop_nest``): its models rank this space,
        reading rp values they were not trained on as strip sizes between or below the
        ones they were."""
        return self.accepts_version(version)

    def _check(self, knobs: Mapping[str, Any]) -> dict[str, Any]:
        if set(knobs) != set(KNOB_NAMES):
            raise CognateError(
                f"{self.name}: a config needs exactly the knobs {', '.join(KNOB_NAMES)}, "
                f"got {', '.join(sorted(map(str, knobs))) or 'none'}"
            )
        clean = {}
        for k in KNOB_NAMES:
            v = knobs[k]
            legal = self.values[k]
            # bool is an int subclass: compare with types so True never passes for 1
            if not any(type(v) is type(x) and v == x for x in legal):
                raise CognateError(f"{self.name}: {k}={v!r} is not one of {legal}")
            clean[k] = v
        return clean

    def validate(self, knobs: Mapping[str, Any]) -> Config:
        return Config(self.target, self.op, self._check(knobs))

    def baseline(self, shape: tuple[int, int] | None = None) -> Config:
        return self._baseline

    def all_configs(self) -> list[Config]:
        """Every config, in the YAML's value order (deterministic)."""
        combos = itertools.product(*(self.values[k] for k in KNOB_NAMES))
        return [Config(self.target, self.op, dict(zip(KNOB_NAMES, c, strict=True))) for c in combos]

    def sample(self, n: int, seed: int, shape: tuple[int, int] | None = None) -> list[Config]:
        configs = self.all_configs()
        if n >= len(configs):
            return configs
        return random.Random(seed).sample(configs, n)

    def candidates(
        self, n: int = 0, seed: int = 0, shape: tuple[int, int] | None = None
    ) -> list[Config]:
        """The whole space: its 448 configs are scored exhaustively."""
        return self.all_configs()

    def schedule(self, config: Config) -> Schedule:
        """The config in the simulator's terms."""
        k = self._check(config.knobs)
        return Schedule(
            rp=k["rp"],
            cp=None if k["cp"] == "all" else k["cp"],
            barrier=k["barrier"],
            bypass=k["bypass"],
            split=k["split"],
            dynamic=k["sched"] == "dynamic",
        )

    def loop_nest(self, config: Config, shape: tuple[int, int], width: int) -> LoopNest:
        """The config mapper into the cpu loop vocabulary, both ops (matrix rows x cols =
        shape, dense width N = width):

        - I = min(rp, rows): a row panel is a strip of rows, the unit dealt to one PE;
        - K = min(cp, cols), cp = all -> K = cols: a column panel is a strip of A's columns
          (SpMM: the rows of B one tile touches, the reuse the caches see);
        - J = ceil(N / split): one pass over a tile covers that many dense columns;
        - barrier -> ``k1 i1 i0 k0 j1 j0``: all PEs finish column-panel group g before any
          starts g + 1, i.e. the column-panel loop is outermost;
          no barrier -> ``i1 k1 i0 k0 j1 j0``: each PE walks its row panel's tiles in turn.
        - bypass and sched have no loop meaning: they are the heterogeneous knobs.
        """
        s = self.schedule(config)
        nrows, ncols = shape
        return LoopNest(
            i_split=min(s.rp, nrows),
            k_split=ncols if s.cp is None else min(s.cp, ncols),
            j_split=-(-width // s.split),
            order=ORDER_BARRIER if s.barrier else ORDER_NO_BARRIER,
        )

    def knob_features(self, config: Config) -> np.ndarray:
        """[bypass, sched == dynamic] as 0/1: the knobs the loop-nest view does not carry."""
        k = self._check(config.knobs)
        return np.array([float(k["bypass"]), float(k["sched"] == "dynamic")], dtype=np.float32)


def map_spade(space: Space, config: Config, shape: tuple[int, int], width: int) -> LoopNest:
    """``SpadeSpace.loop_nest`` (the spade mapping), refusing another target's space."""
    if not isinstance(space, SpadeSpace):
        raise CognateError(f"the spade mapper got a config space of target {space.target}")
    return space.loop_nest(config, shape, width)
