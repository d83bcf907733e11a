"""The schedule-space interface every target implements (one YAML per target and op)."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from cognate.config import Config
from cognate.errors import CognateError
from cognate.paths import configs_dir


def load_space_yaml(name: str) -> tuple[dict[str, Any], str]:
    """Read ``configs/<name>.yaml``; return its mapping and a version hash of its bytes."""
    path = configs_dir() / f"{name}.yaml"
    if not path.is_file():
        raise CognateError(f"{path}: no such schedule space")
    raw = path.read_bytes()
    data = yaml.safe_load(raw)
    if not isinstance(data, dict):
        raise CognateError(f"{path}: a space file must be a YAML mapping")
    return data, hashlib.sha256(raw).hexdigest()[:12]


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

    def candidates(self, n: int, seed: int, shape: tuple[int, int]) -> list[Config]:
        """The set a search scores; small spaces override this to enumerate everything."""
        return self.sample(n, seed, shape)

    def describe(self, config: Config) -> str:
        """The config in the target's own words, one line."""
        return " ".join(f"{k}={v}" for k, v in sorted(config.knobs.items()))


def space_file(name: str) -> Path:
    return configs_dir() / f"{name}.yaml"
