"""The schedule-space interface every target implements (one YAML per target and op)."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ValidationError

from cognate.config import Config
from cognate.errors import CognateError
from cognate.paths import configs_dir
from cognate.util import MAX_YAML_BYTES, parse_yaml, read_bounded

SpecT = TypeVar("SpecT", bound=BaseModel)


def load_space_yaml(name: str) -> tuple[dict[str, Any], str]:
    """Read ``configs/<name>.yaml``; return its mapping and a version hash of its bytes."""
    path = configs_dir() / f"{name}.yaml"
    if not path.is_file():
        raise CognateError(f"{path}: no such schedule space")
    raw = read_bounded(path, MAX_YAML_BYTES, "schedule space")
    data = parse_yaml(raw, path, "schedule space")
    if not isinstance(data, dict):
        raise CognateError(f"{path}: a space file must be a YAML mapping")
    return data, hashlib.sha256(raw).hexdigest()[:12]


def load_space_spec(name: str, model: type[SpecT]) -> tuple[SpecT, str]:
    """Read ``configs/<name>.yaml`` into the pydantic ``model``; return it and the version.

    A malformed file raises one CognateError naming the file and the first bad field.
    """
    data, version = load_space_yaml(name)
    try:
        return model.model_validate(data), version
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CognateError(f"{space_file(name)}: {where}: {first['msg']}") from None


LOOP_VARS: tuple[str, ...] = ("i1", "i0", "k1", "k0", "j1", "j0")


@dataclass(frozen=True)
class LoopNest:
    """A config seen in the CPU loop vocabulary (the homogeneous part of the encoding).

    Strip sizes are the inner extents of the split loops (``i_split`` rows per i1
    iteration, ...); ``order`` is a permutation of LOOP_VARS, outermost first. For
    SDDMM the same names are used: i rows, j columns of A (dense output columns), k the
    reduction dimension.
    """

    i_split: int
    k_split: int
    j_split: int
    order: tuple[str, ...]


class Space(ABC):
    """A target's schedule space for one op.

    ``version`` changes whenever the space's YAML changes, so records and models can
    tell which space they were made in.
    """

    target: str
    op: str
    name: str
    version: str

    @abstractmethod
    def validate(self, knobs: Mapping[str, Any]) -> Config:
        """Return the canonical Config for ``knobs`` or raise CognateError if illegal."""

    @abstractmethod
    def baseline(self, shape: tuple[int, int]) -> Config:
        """The target's fixed reference config (speedups are relative to it)."""

    @abstractmethod
    def sample(self, n: int, seed: int, shape: tuple[int, int]) -> list[Config]:
        """``n`` distinct legal configs for a matrix of ``shape``; deterministic per seed."""

    def accepts_version(self, version: str) -> bool:
        """Whether records measured in space version ``version`` belong to this space: the
        current version only, unless a space lists compatible earlier versions."""
        return version == self.version

    def reads_models_of(self, version: str) -> bool:
        """Whether a model trained in space version ``version`` can rank this space: the
        current version only, unless a space's configs encode the same way in both."""
        return version == self.version

    def candidates(self, n: int, seed: int, shape: tuple[int, int]) -> list[Config]:
        """The set a search scores; small spaces override this to enumerate everything."""
        return self.sample(n, seed, shape)

    def loop_nest(self, config: Config, shape: tuple[int, int], width: int) -> LoopNest:
        """The config in the CPU loop vocabulary (identity on cpu; the mapper elsewhere)."""
        raise NotImplementedError(f"{self.name} has no loop-nest view")

    def knob_features(self, config: Config) -> np.ndarray:
        """Raw numeric encoding (one-hot / ordinal) of the knobs loop_nest does not express."""
        raise NotImplementedError(f"{self.name} has no knob features")

    def kernel_knob_features(self, config: Config) -> np.ndarray:
        """The knobs a kernel has beside the space's own (the ``knobs`` encoding); none here."""
        return np.zeros(0, dtype=np.float32)

    def kernel_variants(self) -> list[Config]:
        """Variants of the baseline's kernel a sample measures beside its draw; none here."""
        return []

    def family(self, config: Config) -> str:
        """The kernel family ``config`` belongs to ("" where a space has a single one).
        Families are different kernels, not knob settings of one: the search verifies the
        best-ranked config of each (``search.runnable_top``)."""
        return ""

    def describe(self, config: Config) -> str:
        """The config in the target's own words, one line."""
        return " ".join(f"{k}={v}" for k, v in sorted(config.knobs.items()))


def space_file(name: str) -> Path:
    return configs_dir() / f"{name}.yaml"
