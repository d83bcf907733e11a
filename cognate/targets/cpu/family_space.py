"""The DIA and reordered-BCSR families in the cpu schedule space (configs/cpu-<op>.yaml).

A family config's knobs are ``family`` plus that family's knobs (their value sets are the
YAML's ``families.<name>.knobs``); a config without ``family`` is the WACO CSR family,
handled by space.py exactly as before. Seen in the CPU loop vocabulary (``loop_nest``):

- DIA SpMM: i1 over row tiles, j1 over dense tiles, k1 over diagonals (k0: the one column a
  diagonal has in a row), i0 over the tile's rows, j0 the dense tile: rtile = I, jtile = J,
  K = 1. DIA SDDMM: i1 row tiles, j1 diagonals, i0 rows, j0, then the dense k1 k0.
- BCSR SpMM: the block-CSR order i1 j1 k1 k0 i0 j0 with I = brows, K = bcols, J = jtile;
  BCSR SDDMM: i1 j1 i0 j0 k1 k0 with I = brows, J = bcols.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict

from cognate.config import Config
from cognate.errors import CognateError
from cognate.space import LoopNest
from cognate.targets.cpu.families import TEMPLATE_PARAMS

# Knobs bounded by a matrix dimension (like the CSR splits): knob -> 0 rows, 1 columns.
SHAPE_BOUND = {"rtile": 0, "brows": 0, "bcols": 1}
DENSE_FULL = 128  # the dense extent a loop nest shows for a loop over the whole width
ORDERS = {
    "spmm": ("i1", "j1", "k1", "k0", "i0", "j0"),
    "sddmm": ("i1", "j1", "i0", "j0", "k1", "k0"),
}
WORDS = {
    "rtile": "rows/tile",
    "jtile": "dense tile",
    "brows": "block rows",
    "bcols": "block cols",
    "blend": "blend",
    "chunk": "omp dynamic",
}


class FamilySpec(BaseModel):
    """One family in the YAML: every knob's legal values, and the subset ``sample`` draws."""

    model_config = ConfigDict(extra="forbid")
    knobs: dict[str, list[int | float]]
    sample: dict[str, list[int | float]] = {}


def _cap(dim: int) -> int:
    """The smallest power of two covering ``dim`` (as the CSR splits' shape check)."""
    return 1 << max(0, (int(dim) - 1).bit_length())


class KernelFamily(Protocol):
    """One kernel family of the cpu space (csr, dia, bcsr): its knobs' rules and views."""

    name: str

    def validate(self, knobs: Mapping[str, Any]) -> Config: ...

    def check_shape(self, config: Config, shape: tuple[int, int]) -> None: ...

    def loop_nest(self, config: Config, shape: tuple[int, int], width: int) -> LoopNest: ...

    def describe(self, config: Config) -> str: ...


@dataclass(frozen=True)
class TemplateFamily:
    """A DIA or BCSR family (a kernel template with tile knobs), as a ``KernelFamily``."""

    name: str
    families: Families

    def validate(self, knobs: Mapping[str, Any]) -> Config:
        return self.families.validate(knobs)

    def check_shape(self, config: Config, shape: tuple[int, int]) -> None:
        self.families.check_shape(config, shape)

    def loop_nest(self, config: Config, shape: tuple[int, int], width: int) -> LoopNest:
        return self.families.loop_nest(config, width)

    def describe(self, config: Config) -> str:
        return self.families.describe(config)


class Families:
    """Validation, enumeration and encodings of the non-CSR families of one op."""

    def __init__(self, op: str, specs: Mapping[str, FamilySpec], where: str) -> None:
        self.op, self.specs = op, dict(specs)
        for name, spec in self.specs.items():
            self._check_spec(name, spec, where)
        self.names: tuple[str, ...] = ("csr", *self.specs)

    def _check_spec(self, name: str, spec: FamilySpec, where: str) -> None:
        compiled = TEMPLATE_PARAMS.get((name, self.op))
        if compiled is None:
            raise CognateError(f"{where}: families.{name}: no such kernel family for {self.op}")
        expected = {*compiled, "chunk"} | ({"blend"} if name == "bcsr" else set())
        if set(spec.knobs) != expected:
            raise CognateError(f"{where}: families.{name}: knobs must be {sorted(expected)}")
        for knob, values in spec.knobs.items():
            allowed = compiled.get(knob)
            if allowed is not None and not set(values) <= set(allowed):
                raise CognateError(f"{where}: families.{name}.{knob}: values outside {allowed}")
            if knob == "chunk" and not all(isinstance(v, int) and v >= 1 for v in values):
                raise CognateError(f"{where}: families.{name}.chunk: positive integers only")
            if knob == "blend" and not all(0.0 <= v <= 1.0 for v in values):
                raise CognateError(f"{where}: families.{name}.blend: values in [0, 1] only")
            if not set(spec.sample.get(knob, values)) <= set(values):
                raise CognateError(f"{where}: families.{name}.sample.{knob}: not in its knobs")

    def family(self, name: str) -> TemplateFamily:
        """Family ``name`` of this op as a ``KernelFamily``."""
        return TemplateFamily(name, self)

    # --- validation ---------------------------------------------------------------------------

    def validate(self, knobs: Mapping[str, Any]) -> Config:
        family = knobs["family"]
        spec = self.specs.get(family) if isinstance(family, str) else None
        if spec is None:
            raise CognateError(
                f"cpu {self.op} config: family={str(family)[:40]!r} is not one of"
                f" {', '.join(self.names)}"
            )
        expected = ("family", *spec.knobs)
        unknown = sorted(str(k) for k in knobs if k not in expected)
        if unknown:
            raise CognateError(
                f"cpu {self.op} config: unknown knob(s) {', '.join(unknown)} for family"
                f" {family}; expected {', '.join(expected)}"
            )
        clean: dict[str, Any] = {"family": family}
        for knob, values in spec.knobs.items():
            clean[knob] = self._value(family, knob, knobs.get(knob), values)
        return Config("cpu", self.op, clean)

    def _value(self, family: str, knob: str, value: Any, values: list[int | float]) -> Any:
        where = f"cpu {self.op} config: {family} {knob}"
        if value is None:
            raise CognateError(f"{where} is missing")
        kinds = (int, float, np.integer, np.floating) if knob == "blend" else (int, np.integer)
        numeric = isinstance(value, kinds)
        if isinstance(value, bool | np.bool_) or not numeric or value not in values:
            raise CognateError(f"{where}={str(value)[:40]} is not one of {values}")
        return float(value) if knob == "blend" else int(value)

    def check_shape(self, config: Config, shape: tuple[int, int]) -> None:
        for knob, axis in SHAPE_BOUND.items():
            if knob in config.knobs and config[knob] > _cap(shape[axis]):
                raise CognateError(
                    f"cpu {self.op} config: {knob}={config[knob]} exceeds {_cap(shape[axis])},"
                    f" the matrix's {('rows', 'columns')[axis]} ({shape[axis]})"
                )

    # --- enumeration --------------------------------------------------------------------------

    def grid(self, shape: tuple[int, int], sampled: bool) -> list[Config]:
        """Every config of every family legal for ``shape``; ``sampled``: the sample subset's
        product, plus one config per value outside it (the first sample values with that one
        knob changed), so every knob value occurs in a sample (the autoencoder's codebook is
        learnt from a sample and must know every value a candidate can have)."""
        out = []
        for family, spec in self.specs.items():
            names = list(spec.knobs)
            pools = [spec.sample.get(k, v) if sampled else v for k, v in spec.knobs.items()]
            combos = list(itertools.product(*pools))
            if sampled:
                combos += _coverage(spec)
            for values in combos:
                knobs = {"family": family, **dict(zip(names, values, strict=True))}
                if all(knobs.get(k, 1) <= _cap(shape[a]) for k, a in SHAPE_BOUND.items()):
                    out.append(self.validate(knobs))
        return out

    # --- encodings ----------------------------------------------------------------------------

    def loop_nest(self, config: Config, width: int) -> LoopNest:
        knobs = config.knobs
        dense = knobs.get("jtile", DENSE_FULL)
        if config["family"] == "dia":
            i_split, sparse = knobs["rtile"], 1
        else:
            i_split, sparse = knobs["brows"], knobs["bcols"]
        if self.op == "spmm":
            return LoopNest(i_split=i_split, k_split=sparse, j_split=dense, order=ORDERS["spmm"])
        return LoopNest(i_split=i_split, k_split=DENSE_FULL, j_split=sparse, order=ORDERS["sddmm"])

    def features(self, config: Config) -> np.ndarray:
        """[family one-hot, per family and knob: a value in [0, 1] (0 for other families)]."""
        family = config.knobs.get("family", "csr")
        row = [1.0 if family == n else 0.0 for n in self.names]
        for name, spec in self.specs.items():
            for knob, values in spec.knobs.items():
                row.append(_scaled(knob, config[knob], values) if name == family else 0.0)
        return np.asarray(row, dtype=np.float32)

    def describe(self, config: Config) -> str:
        family = config["family"]
        parts = [f"{WORDS[k]} {v}" for k, v in config.knobs.items() if k not in ("family", "chunk")]
        what = "DIA (diagonals)" if family == "dia" else "reordered BCSR"
        maps = "rows out through the index map" if family == "bcsr" else "wrapped offsets"
        return f"{self.op} {what}: {', '.join(parts)} | {maps} | omp dynamic,{config['chunk']}"


def _coverage(spec: FamilySpec) -> list[tuple[int | float, ...]]:
    """Value tuples that add each knob value the sample subset lacks, one at a time."""
    names = list(spec.knobs)
    base = [spec.sample.get(k, v)[0] for k, v in spec.knobs.items()]
    extra = []
    for index, knob in enumerate(names):
        for value in spec.knobs[knob]:
            if value not in spec.sample.get(knob, spec.knobs[knob]):
                extra.append(tuple(value if n == index else b for n, b in enumerate(base)))
    return extra


def _scaled(knob: str, value: Any, values: list[int | float]) -> float:
    if knob == "blend":
        return float(value)
    top = max(values)
    return math.log2(value) / math.log2(top) if top > 1 else 0.0
