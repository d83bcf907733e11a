"""The kernel families (dia, bcsr, reordered, panel) in the cpu schedule space (configs/cpu-<op>.yaml).

A family config's knobs are ``family`` plus that family's knobs (their value sets are the
YAML's ``families.<name>.knobs``); a config without ``family`` is the WACO CSR family,
handled by space.py exactly as before. Seen in the CPU loop vocabulary (``loop_nest``):

- DIA SpMM: i1 over row tiles, j1 over dense tiles, k1 over diagonals (k0: the one column a
  diagonal has in a row), i0 over the tile's rows, j0 the dense tile: rtile = I, jtile = J,
  K = 1. DIA SDDMM: i1 row tiles, j1 diagonals, i0 rows, j0, then the dense k1 k0.
- BCSR SpMM: the block-CSR order i1 j1 k1 k0 i0 j0 with I = brows, K = bcols, J = jtile;
  BCSR SDDMM: i1 j1 i0 j0 k1 k0 with I = brows, J = bcols.
- reordered: the CSR baseline's nest with the dense strip as J (SpMM) or K (SDDMM); the row
  order itself (``by``, ``symmetric``) has no loop counterpart and is seen only in the knob
  features.
- panel SpMM: i1 (row blocks) k1 (column panels) i0 k0 j1 j0 with I = rblock, K = pcols;
  panel SDDMM: i1 j1 i0 j0 k1 k0 with I = rblock, J = pcols.

Knob values are integers, ``blend`` a float in [0, 1], and ``by`` a name (one-hot in the
features); the legal values of the reordered and panel knobs are their modules' ``KNOBS``.
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
from cognate.targets.cpu.families import module_of
from cognate.targets.cpu.families.template import TEMPLATE_PARAMS

# Knobs bounded by a matrix dimension (like the CSR splits): knob -> 0 rows, 1 columns.
SHAPE_BOUND = {"rtile": 0, "brows": 0, "bcols": 1, "rblock": 0, "pcols": 1}
# Bounded knobs whose smallest listed value stays legal on any shape: a panel or row block
# wider than the matrix is one panel / block, the family's plain form, kept for small matrices.
FLOORED = {"rblock", "pcols"}
LINEAR = {"blend", "symmetric"}  # features as the value itself (not log2-scaled)
DENSE_FULL = 128  # the dense extent a loop nest shows for a loop over the whole width
ORDERS = {
    "spmm": ("i1", "j1", "k1", "k0", "i0", "j0"),
    "sddmm": ("i1", "j1", "i0", "j0", "k1", "k0"),
}
CSR_ORDERS = {  # the CSR baseline's loops (the reordered family runs them)
    "spmm": ("i1", "i0", "k1", "k0", "j1", "j0"),
    "sddmm": ("i1", "i0", "j1", "j0", "k1", "k0"),
}
PANEL_ORDERS = {  # row block, column panel, rows of the block, its entries in the panel
    "spmm": ("i1", "k1", "i0", "k0", "j1", "j0"),
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
    knobs: dict[str, list[int | float | str]]
    sample: dict[str, list[int | float | str]] = {}


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
        legal = {**compiled, **getattr(module_of(name), "KNOBS", {})}
        expected = {*legal, "chunk"} | ({"blend"} if name == "bcsr" else set())
        if set(spec.knobs) != expected:
            raise CognateError(f"{where}: families.{name}: knobs must be {sorted(expected)}")
        for knob, values in spec.knobs.items():
            allowed = legal.get(knob)
            if allowed is not None and not set(values) <= set(allowed):
                raise CognateError(f"{where}: families.{name}.{knob}: values outside {allowed}")
            if allowed is None and not all(isinstance(v, int | float) for v in values):
                raise CognateError(f"{where}: families.{name}.{knob}: numbers only")
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
        if isinstance(values[0], str):  # a name (the reordered family's ``by``)
            kinds: tuple[type, ...] = (str,)
        elif knob == "blend":
            kinds = (int, float, np.integer, np.floating)
        else:
            kinds = (int, np.integer)
        if (
            isinstance(value, bool | np.bool_)
            or not isinstance(value, kinds)
            or value not in values
        ):
            raise CognateError(f"{where}={str(value)[:40]} is not one of {values}")
        if isinstance(value, str):
            return value
        return float(value) if knob == "blend" else int(value)

    def check_shape(self, config: Config, shape: tuple[int, int]) -> None:
        problem = self._shape_problem(config.knobs, shape)
        if problem:
            raise CognateError(f"cpu {self.op} config: {problem}")

    def _shape_problem(self, knobs: Mapping[str, Any], shape: tuple[int, int]) -> str | None:
        """Why a family config does not fit a matrix of ``shape``, or None."""
        spec = self.specs[knobs["family"]]
        for knob, axis in SHAPE_BOUND.items():
            if knob not in knobs:
                continue
            cap = _cap(shape[axis])
            if knob in FLOORED:
                cap = max(cap, int(min(spec.knobs[knob])))  # type: ignore[type-var]
            if knobs[knob] > cap:
                return (
                    f"{knob}={knobs[knob]} exceeds {cap}, the matrix's"
                    f" {('rows', 'columns')[axis]} ({shape[axis]})"
                )
        if knobs.get("symmetric") == 1 and shape[0] != shape[1]:
            return f"symmetric=1 renumbers rows and columns alike: {shape[0]} x {shape[1]} is not square"
        return None

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
                if self._shape_problem(knobs, shape) is None:
                    out.append(self.validate(knobs))
        return out

    # --- encodings ----------------------------------------------------------------------------

    def loop_nest(self, config: Config, width: int) -> LoopNest:
        knobs = config.knobs
        if config["family"] == "reordered":
            strip = min(int(knobs["strip"]), DENSE_FULL)
            if self.op == "spmm":
                return LoopNest(i_split=1, k_split=1, j_split=strip, order=CSR_ORDERS["spmm"])
            return LoopNest(i_split=1, k_split=strip, j_split=1, order=CSR_ORDERS["sddmm"])
        if config["family"] == "panel":
            rows, cols = knobs["rblock"], knobs["pcols"]
            if self.op == "spmm":
                return LoopNest(rows, k_split=cols, j_split=DENSE_FULL, order=PANEL_ORDERS["spmm"])
            return LoopNest(rows, k_split=DENSE_FULL, j_split=cols, order=PANEL_ORDERS["sddmm"])
        dense = knobs.get("jtile", DENSE_FULL)
        if config["family"] == "dia":
            i_split, sparse = knobs["rtile"], 1
        else:
            i_split, sparse = knobs["brows"], knobs["bcols"]
        if self.op == "spmm":
            return LoopNest(i_split=i_split, k_split=sparse, j_split=dense, order=ORDERS["spmm"])
        return LoopNest(i_split=i_split, k_split=DENSE_FULL, j_split=sparse, order=ORDERS["sddmm"])

    def features(self, config: Config) -> np.ndarray:
        """[family one-hot, per family and knob: a value in [0, 1], or a one-hot for a named
        knob (zeros for other families)]."""
        family = config.knobs.get("family", "csr")
        row = [1.0 if family == n else 0.0 for n in self.names]
        for name, spec in self.specs.items():
            for knob, values in spec.knobs.items():
                if isinstance(values[0], str):
                    row += [1.0 if name == family and config[knob] == v else 0.0 for v in values]
                else:
                    row.append(_scaled(knob, config[knob], values) if name == family else 0.0)
        return np.asarray(row, dtype=np.float32)

    def describe(self, config: Config) -> str:
        family = config["family"]
        if family == "reordered":
            operand = "B" if self.op == "spmm" else "Y"
            how = (
                f"rows and columns renumbered, {operand} gathered per call"
                if config["symmetric"]
                else "rows only"
            )
            return (
                f"{self.op} CSR, rows run in {config['by']} order ({how}), dense strip"
                f" {config['strip']} | omp dynamic,{config['chunk']}"
            )
        if family == "panel":
            return (
                f"{self.op} column panels: {config['pcols']} columns x {config['rblock']}-row"
                f" blocks | omp dynamic,{config['chunk']}"
            )
        parts = [f"{WORDS[k]} {v}" for k, v in config.knobs.items() if k not in ("family", "chunk")]
        what = "DIA (diagonals)" if family == "dia" else "reordered BCSR"
        maps = "rows out through the index map" if family == "bcsr" else "wrapped offsets"
        return f"{self.op} {what}: {', '.join(parts)} | {maps} | omp dynamic,{config['chunk']}"


def _coverage(spec: FamilySpec) -> list[tuple[int | float | str, ...]]:
    """Value tuples that add each knob value the sample subset lacks, one at a time."""
    names = list(spec.knobs)
    base = [spec.sample.get(k, v)[0] for k, v in spec.knobs.items()]
    extra = []
    for index, knob in enumerate(names):
        for value in spec.knobs[knob]:
            if value not in spec.sample.get(knob, spec.knobs[knob]):
                extra.append(tuple(value if n == index else b for n, b in enumerate(base)))
    return extra


def _scaled(knob: str, value: Any, values: list[int | float | str]) -> float:
    if knob in LINEAR:
        return float(value)
    top = max(values)
    return math.log2(value) / math.log2(top) if top > 1 else 0.0
