"""Config encodings: what the predictor sees of a schedule.

One interface, ``ConfigEncoder.encode(configs, shape, width) -> float32 [n, dim]``, with
two parts (DESIGN section 6):

- the homogeneous part p, shared by every target: log2 of the I/J/K strip sizes and the
  6 x 6 loop-order permutation matrix, both from ``space.loop_nest`` (the CPU loop
  vocabulary, so a model trained on one target can read another's configs);
- the target-specific part: the knobs ``loop_nest`` does not express. Now the raw
  ``space.knob_features``; the transfer work plugs its autoencoder latent in through
  ``register_target_encoder`` without touching the predictor.

Encoders are stateless given the space; normalisation statistics live in the model.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

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
    if sorted(order) != sorted(LOOP_VARS):
        raise CognateError(f"loop order {' '.join(order)} is not a permutation of {LOOP_VARS}")
    matrix = np.zeros((len(LOOP_VARS), len(LOOP_VARS)), dtype=np.float32)
    for pos, var in enumerate(order):
        matrix[LOOP_VARS.index(var), pos] = 1.0
    return matrix


def homogeneous_features(nest: LoopNest) -> np.ndarray:
    """[log2 I, log2 J, log2 K, P.flatten()] (39 values)."""
    splits = (nest.i_split, nest.j_split, nest.k_split)
    if min(splits) < 1:
        raise CognateError(
            f"strip sizes must be >= 1, got I={splits[0]} J={splits[1]} K={splits[2]}"
        )
    logs = np.array([math.log2(s) for s in splits], dtype=np.float32)
    return np.concatenate([logs, permutation_matrix(nest.order).ravel()])


class LoopNestEncoder(ConfigEncoder):
    """The homogeneous part p."""

    kind = "loopnest"
    dim = 3 + len(LOOP_VARS) ** 2

    def __init__(self, space: Space) -> None:
        self.space = space

    def encode(self, configs: Sequence[Config], shape: tuple[int, int], width: int) -> torch.Tensor:
        rows = [homogeneous_features(self.space.loop_nest(c, shape, width)) for c in configs]
        return torch.from_numpy(np.stack(rows)) if rows else torch.zeros((0, self.dim))


class RawKnobEncoder(ConfigEncoder):
    """The target-specific part as the space's own one-hot / ordinal knob features."""

    kind = "raw"

    def __init__(self, space: Space) -> None:
        self.space = space
        self.dim = int(np.asarray(space.knob_features(space.baseline(_PROBE_SHAPE))).size)

    def encode(self, configs: Sequence[Config], shape: tuple[int, int], width: int) -> torch.Tensor:
        rows = [np.asarray(self.space.knob_features(c), dtype=np.float32) for c in configs]
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
