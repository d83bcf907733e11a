"""The gpu schedule spaces (configs/gpu-spmm.yaml, configs/gpu-sddmm.yaml) and their mapping
into the CPU loop vocabulary.

Every knob value ends up in compiled code (Triton constexprs and launch options), so the
YAML's value sets are themselves checked against hard limits here, and a config is legal
only if each knob holds a value from its set.

Mapping (docs/architecture.md, Transfer), by the role each knob plays in the kernel's loops:

    SpMM   rows_per_program -> I,  dense_tile -> J,  nnz_step -> K
           kernel nest  i1 j1 i0 k1 k0 j0  (grid over row blocks x dense tiles, the rows of
           a block, nonzero steps, nonzero lanes, dense lanes)
    SDDMM  rows_per_program -> I,  nnz_step -> J,  dense_tile -> K
           kernel nest  i1 i0 j1 k1 j0 k0  (grid over row blocks, the rows of a block,
           nonzero steps, reduction tiles, nonzero lanes, reduction lanes)

In the CPU SDDMM vocabulary j is A's column (the nonzeros of a row) and k the dense
reduction, so the nonzero step is the J strip and the dense tile the K strip there.
Strip sizes are clamped to the loop's real extent (rows to M, dense tiles to the width,
nonzero steps to A's column count). A level the kernel lacks for a given (config, shape,
width) is a unit-length loop, and it is inserted next to its partner, where it changes
nothing: a unit i0 (one row per program) right after i1, a unit j1 (SpMM: one dense tile
covers the width) or k1 (SDDMM: one reduction tile) right before its inner loop. So
``rows_per_program=1, dense_tile>=width`` gives the CSR nest ``i1 i0 k1 k0 j1 j0``.
Split, reorder, num_warps and num_stages have no loop-nest meaning: they are the
knob features.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from cognate.config import Config
from cognate.errors import CognateError
from cognate.space import LoopNest, Space, load_space_spec, space_file

KNOB_NAMES: tuple[str, ...] = (
    "rows_per_program",
    "dense_tile",
    "nnz_step",
    "split",
    "reorder",
    "num_warps",
    "num_stages",
)
MAX_BLOCK = 1024  # tl.arange extents: powers of two; larger tiles exhaust registers
MAX_ROWS = 1024
WARPS = (1, 2, 4, 8, 16, 32)
MAX_STAGES = 8


def _power_of_two(values: list[int]) -> list[int]:
    for v in values:
        if v < 1 or v > MAX_BLOCK or v & (v - 1):
            raise ValueError(f"{v} is not a power of two in 1..{MAX_BLOCK}")
    return values


class _Knobs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    rows_per_program: list[int] = Field(min_length=1)
    dense_tile: list[int] = Field(min_length=1)
    nnz_step: list[int] = Field(min_length=1)
    split: list[Literal["row", "nnz"]] = Field(min_length=1)
    reorder: list[Literal["none", "length"]] = Field(min_length=1)
    num_warps: list[int] = Field(min_length=1)
    num_stages: list[int] = Field(min_length=1)

    @field_validator("rows_per_program")
    @classmethod
    def _rows(cls, v: list[int]) -> list[int]:
        if any(r < 1 or r > MAX_ROWS for r in v):
            raise ValueError(f"values must be in 1..{MAX_ROWS}")
        return v

    _tiles = field_validator("dense_tile", "nnz_step")(_power_of_two)

    @field_validator("num_warps")
    @classmethod
    def _warps(cls, v: list[int]) -> list[int]:
        if any(w not in WARPS for w in v):
            raise ValueError(f"values must be among {WARPS}")
        return v

    @field_validator("num_stages")
    @classmethod
    def _stages(cls, v: list[int]) -> list[int]:
        if any(s < 1 or s > MAX_STAGES for s in v):
            raise ValueError(f"values must be in 1..{MAX_STAGES}")
        return v


class _Rules(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    reorder_needs_split: Literal["row"] | None = None


class _SpaceFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    target: Literal["gpu"]
    op: Literal["spmm", "sddmm"]
    knobs: _Knobs
    rules: _Rules = _Rules()
    baseline: dict[str, Any]


class GpuSpace(Space):
    """All legal combinations of the YAML's knob value sets (a few hundred per op)."""

    target = "gpu"

    def __init__(self, op: str) -> None:
        self.op = op
        self.name = f"gpu-{op}"
        spec, self.version = load_space_spec(self.name, _SpaceFile)
        if spec.op != op:
            raise CognateError(f"{space_file(self.name)}: op is {spec.op!r}, expected {op!r}")
        self.values: dict[str, list[Any]] = spec.knobs.model_dump()
        self.reorder_needs_split = spec.rules.reorder_needs_split
        self._all = [Config("gpu", op, k) for k in self._enumerate()]
        self._baseline = self.validate(spec.baseline)

    def _enumerate(self) -> list[dict[str, Any]]:
        combos = itertools.product(*(self.values[k] for k in KNOB_NAMES))
        knobs = (dict(zip(KNOB_NAMES, c, strict=True)) for c in combos)
        return [k for k in knobs if self._rule_problem(k) is None]

    def _rule_problem(self, knobs: Mapping[str, Any]) -> str | None:
        need = self.reorder_needs_split
        if need and knobs["reorder"] != "none" and knobs["split"] != need:
            return f"reorder={knobs['reorder']} needs split={need}"
        return None

    def validate(self, knobs: Mapping[str, Any]) -> Config:
        if not isinstance(knobs, Mapping):
            raise CognateError(f"{self.name}: a config must be a mapping of knobs")
        extra = sorted(set(knobs) - set(KNOB_NAMES))
        missing = [k for k in KNOB_NAMES if k not in knobs]
        if extra or missing:
            raise CognateError(f"{self.name}: unknown knobs {extra}, missing knobs {missing}")
        for name in KNOB_NAMES:
            value = knobs[name]
            # bool is an int in Python; True must not pass for 1
            legal = [v for v in self.values[name] if type(v) is type(value) and v == value]
            if not legal:
                raise CognateError(
                    f"{self.name}: {name}={value!r} is not one of {self.values[name]}"
                )
        problem = self._rule_problem(knobs)
        if problem:
            raise CognateError(f"{self.name}: {problem}")
        return Config("gpu", self.op, {k: knobs[k] for k in KNOB_NAMES})

    def baseline(self, shape: tuple[int, int]) -> Config:
        return self._baseline

    def all_configs(self) -> list[Config]:
        return list(self._all)

    def sample(self, n: int, seed: int, shape: tuple[int, int]) -> list[Config]:
        order = np.random.default_rng(seed).permutation(len(self._all))
        return [self._all[i] for i in order[: max(0, n)]]

    def candidates(self, n: int, seed: int, shape: tuple[int, int]) -> list[Config]:
        """The whole space: a few hundred configs are cheap to score exhaustively."""
        return self.all_configs()

    def loop_nest(self, config: Config, shape: tuple[int, int], width: int) -> LoopNest:
        """The config mapper into the cpu loop vocabulary (Triton): rows_per_program -> I;
        SpMM: dense_tile -> J, nnz_step -> K, order ``i1 j1 i0 k1 k0 j0``; SDDMM: nnz_step
        -> J, dense_tile -> K, order ``i1 i0 j1 k1 j0 k0``. Strips are clamped to their
        extents (rows, width, cols); a level the kernel lacks is a unit loop next to its
        partner: one row per program puts i0 right after i1, a dense tile covering the width
        puts j1 (SpMM) / k1 (SDDMM) right before its inner loop. split, reorder, num_warps,
        num_stages are the heterogeneous knobs.
        """
        rows, cols = shape
        i_split = max(1, min(int(config["rows_per_program"]), rows))
        step = max(1, min(int(config["nnz_step"]), cols))
        tile = max(1, min(int(config["dense_tile"]), width))
        order = ["i1", "j1", "i0", "k1", "k0", "j0"]  # SpMM kernel nest
        dense = "j"
        if self.op == "sddmm":
            order = ["i1", "i0", "j1", "k1", "j0", "k0"]
            dense = "k"
        if i_split == 1:
            _reinsert(order, "i0", after="i1")
        if tile >= width:
            _reinsert(order, f"{dense}1", before=f"{dense}0")
        if self.op == "sddmm":
            return LoopNest(i_split=i_split, k_split=tile, j_split=step, order=tuple(order))
        return LoopNest(i_split=i_split, k_split=step, j_split=tile, order=tuple(order))

    def knob_features(self, config: Config) -> np.ndarray:
        """[split is nnz, reorder is length, log2 num_warps, num_stages]."""
        return np.array(
            [
                float(config["split"] == "nnz"),
                float(config["reorder"] == "length"),
                math.log2(int(config["num_warps"])),
                float(config["num_stages"]),
            ],
            dtype=np.float32,
        )

    def describe(self, config: Config) -> str:
        k = config.knobs
        text = (
            f"{k['split']} split, {k['rows_per_program']} rows/program, "
            f"dense tile {k['dense_tile']}, {k['nnz_step']} nonzeros/step"
        )
        if k["reorder"] != "none":
            text += f", rows by {k['reorder']}"
        return text + f", {k['num_warps']} warps, {k['num_stages']} stages"


def _reinsert(order: list[str], loop: str, *, after: str = "", before: str = "") -> None:
    """Reinsert ``loop`` (a unit-length loop) right after ``after`` or right before ``before``."""
    order.remove(loop)
    index = order.index(after) + 1 if after else order.index(before)
    order.insert(index, loop)


def map_gpu(space: Space, config: Config, shape: tuple[int, int], width: int) -> LoopNest:
    """``GpuSpace.loop_nest`` (the gpu mapping), refusing another target's space."""
    if space.target != "gpu":
        raise CognateError(f"the gpu mapper got a config space of target {space.target}")
    return space.loop_nest(config, shape, width)
