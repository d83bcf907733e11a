"""Config encodings: what the predictor sees of a schedule.

One interface, ``ConfigEncoder.encode(configs, shape, width) -> float32 [n, dim]``, with
two parts (docs/architecture.md, Cost model):

- the homogeneous part p, shared by every target: log2 of the I/J/K strip sizes and the
  6 x 6 loop-order permutation matrix, both from ``space.loop_nest`` (the CPU loop
  vocabulary, so a model trained on one target can read another's configs);
- the target-specific part: the knobs ``loop_nest`` does not express. Now the raw
  ``space.knob_features``; the transfer work plugs its autoencoder latent in through
  ``register_target_encoder`` without touching the predictor.

Encoders are stateless given the space; normalisation statistics live in the model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from functools import cache

import numpy as np
import torch

from cognate.config import Config
from cognate.errors import CognateError
from cognate.space import LOOP_VARS, LoopNest, Space

# A shape every space accepts, used only to learn a target part's width.
_PROBE_SHAPE = (1024, 1024)


class ConfigEncoder(ABC):
    """Maps configs of one space to feature rows."""

    kind: str
    dim: int

    @abstractmethod
    def encode(self, configs: Sequence[Config], shape: tuple[int, int], width: int) -> torch.Tensor:
        """float32 [len(configs), dim]."""


def permutation_matrix(order: Sequence[str]) -> np.ndarray:
    """P[v, pos] = 1 when loop variable LOOP_VARS[v] is at position ``pos`` (outermost 0)."""
    return _permutation_matrix(tuple(order)).copy()


@cache
def _permutation_matrix(order: tuple[str, ...]) -> np.ndarray:
    # Cached: a space has few loop orders, and 20k candidates share them.
    if sorted(order) != sorted(LOOP_VARS):
        raise CognateError(f"loop order {' '.join(order)} is not a permutation of {LOOP_VARS}")
    matrix = np.zeros((len(LOOP_VARS), len(LOOP_VARS)), dtype=np.float32)
    for pos, var in enumerate(order):
        matrix[LOOP_VARS.index(var), pos] = 1.0
    matrix.flags.writeable = False
    return matrix


def homogeneous_features(nest: LoopNest) -> np.ndarray:
    """[log2 I, log2 J, log2 K, P.flatten()] (39 values)."""
    return homogeneous_rows([nest])[0]


def homogeneous_rows(nests: Sequence[LoopNest]) -> np.ndarray:
    """``homogeneous_features`` of many nests at once (float32 [len(nests), 39])."""
    # Vectorised: per-nest numpy calls cost more than the arithmetic for 20k candidates.
    splits = np.array([(n.i_split, n.j_split, n.k_split) for n in nests], dtype=np.float64)
    splits = splits.reshape(len(nests), 3)
    bad = np.flatnonzero((splits < 1).any(axis=1))
    if bad.size:
        i, j, k = (int(v) for v in splits[bad[0]])
        raise CognateError(f"strip sizes must be >= 1, got I={i} J={j} K={k}")
    orders: dict[tuple[str, ...], int] = {}
    which = np.array([orders.setdefault(tuple(n.order), len(orders)) for n in nests], dtype=int)
    perms = np.stack([_permutation_matrix(o).ravel() for o in orders] or [np.zeros(36)])
    out = np.empty((len(nests), 3 + len(LOOP_VARS) ** 2), dtype=np.float32)
    out[:, :3] = np.log2(splits)
    out[:, 3:] = perms[which]
    return out


class LoopNestEncoder(ConfigEncoder):
    """The homogeneous part p."""

    kind = "loopnest"
    dim = 3 + len(LOOP_VARS) ** 2

    def __init__(self, space: Space) -> None:
        self.space = space

    def encode(self, configs: Sequence[Config], shape: tuple[int, int], width: int) -> torch.Tensor:
        nests = [self.space.loop_nest(c, shape, width) for c in configs]
        return torch.from_numpy(homogeneous_rows(nests)) if nests else torch.zeros((0, self.dim))


class RawKnobEncoder(ConfigEncoder):
    """The target-specific part as the space's own one-hot / ordinal knob features."""

    kind = "raw"

    def __init__(self, space: Space) -> None:
        self.space = space
        self.dim = int(np.asarray(space.knob_features(space.baseline(_PROBE_SHAPE))).size)

    def encode(self, configs: Sequence[Config], shape: tuple[int, int], width: int) -> torch.Tensor:
        rows = [self.space.knob_features(c) for c in configs]
        try:  # one conversion for all rows; ragged or wrong-width rows are reported below
            table = np.array(rows, dtype=np.float32)
            if table.shape == (len(configs), self.dim):
                return torch.from_numpy(table)
        except ValueError:
            pass
        rows = [np.asarray(row, dtype=np.float32) for row in rows]
        for config, row in zip(configs, rows, strict=True):
            if row.shape != (self.dim,):
                raise CognateError(
                    f"{self.space.name}: knob features of {config.json} have shape "
                    f"{row.shape}, expected ({self.dim},)"
                )
        return torch.from_numpy(np.stack(rows)) if rows else torch.zeros((0, self.dim))


class ConcatEncoder(ConfigEncoder):
    """[p || target part]: the encoding the predictor consumes."""

    def __init__(self, parts: Sequence[ConfigEncoder]) -> None:
        self.parts = list(parts)
        self.kind = "+".join(p.kind for p in self.parts)
        self.dim = sum(p.dim for p in self.parts)

    def encode(self, configs: Sequence[Config], shape: tuple[int, int], width: int) -> torch.Tensor:
        return torch.cat([p.encode(configs, shape, width) for p in self.parts], dim=1)


TargetEncoderFactory = Callable[[Space], ConfigEncoder]
_TARGET_ENCODERS: dict[str, TargetEncoderFactory] = {"raw": RawKnobEncoder}


def register_target_encoder(kind: str, factory: TargetEncoderFactory) -> None:
    """Make a target-part encoder (e.g. an autoencoder latent) available by name."""
    _TARGET_ENCODERS[kind] = factory


def make_encoder(space: Space, target_part: str = "raw") -> ConcatEncoder:
    """The standard encoder: [LoopNestEncoder || target part ``target_part``]."""
    if target_part not in _TARGET_ENCODERS:
        raise CognateError(
            f"unknown target encoding {target_part!r}; expected one of "
            + ", ".join(sorted(_TARGET_ENCODERS))
        )
    return ConcatEncoder([LoopNestEncoder(space), _TARGET_ENCODERS[target_part](space)])
