"""The config mapper: every target's configs seen in the CPU loop vocabulary (docs/architecture.md, Transfer).

The image of a config is a ``LoopNest``: strip sizes I (rows), K (sparse columns / SDDMM
reduction), J (dense columns / SDDMM sparse columns) and a loop order over
``i1 i0 k1 k0 j1 j0`` (outermost first). A model pretrained on cpu records reads the
target's configs through this image (the homogeneous part p of the encoding), so the
mapping decides what transfers. Each target's mapper is its ``Space.loop_nest`` (its
docstring there is the specification; the tests pin each with a table), so a new target
brings its mapping with its space and nothing here changes.

Ablations, each selected by name in ``homogeneous_encoder``:
- ``cognate``: the mapping below;
- ``none``: no mapper: the target's raw knob values fill the homogeneous slot (zero
  padded to its width), so the pretrained weights of p read unrelated numbers;
- ``random``: the mapper's outputs permuted across the configs of the space with a fixed
  seed (config c is encoded as the image of config pi(c)): the reviewer's falsification
  test — if the mapping carries meaning, this must do worse.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

from cognate.config import Config
from cognate.errors import CognateError
from cognate.model.encoding import ConfigEncoder, LoopNestEncoder, homogeneous_features
from cognate.space import LoopNest, Space

MAPPERS: tuple[str, ...] = ("cognate", "none", "random")
HOMOGENEOUS_DIM = LoopNestEncoder.dim  # 3 log2 strips + the 6 x 6 order matrix


Mapper = Callable[[Space, Config, tuple[int, int], int], LoopNest]


def map_config(space: Space, config: Config, shape: tuple[int, int], width: int) -> LoopNest:
    """A config's image in the cpu loop vocabulary: its own space's ``loop_nest``, whose
    docstring in cognate/targets/<name>/space.py is that target's mapping specification."""
    return space.loop_nest(config, shape, width)


class MappedEncoder(ConfigEncoder):
    """p = homogeneous features of the cognate mapper's image (same as LoopNestEncoder)."""

    kind = "loopnest"
    dim = HOMOGENEOUS_DIM

    def __init__(self, space: Space) -> None:
        self.space = space
        self.mapper: Mapper = map_config

    def image(self, config: Config, shape: tuple[int, int], width: int) -> LoopNest:
        return self.mapper(self.space, config, shape, width)

    def encode(self, configs: Sequence[Config], shape: tuple[int, int], width: int) -> torch.Tensor:
        rows = [homogeneous_features(self.image(c, shape, width)) for c in configs]
        return torch.from_numpy(np.stack(rows)) if rows else torch.zeros((0, self.dim))


def _enumerated(space: Space) -> list[Config]:
    configs = getattr(space, "all_configs", None)
    if configs is None:
        raise CognateError(f"{space.name}: the random mapper needs an enumerable space")
    return configs()


class RandomMappedEncoder(MappedEncoder):
    """The mapper's images permuted across the enumerated space with a fixed seed."""

    kind = "loopnest-random"

    def __init__(self, space: Space, seed: int = 0) -> None:
        super().__init__(space)
        self.seed = seed
        configs = _enumerated(space)
        order = np.random.default_rng(seed).permutation(len(configs))
        self._source = {c.hash: configs[int(j)] for c, j in zip(configs, order, strict=True)}

    def image(self, config: Config, shape: tuple[int, int], width: int) -> LoopNest:
        if config.hash not in self._source:
            raise CognateError(f"{self.space.name}: config {config.json} is not in the space")
        return self.mapper(self.space, self._source[config.hash], shape, width)


def raw_knob_values(space: Space, config: Config, shape: tuple[int, int]) -> list[float]:
    """Every knob of ``config`` as a number, in the space's knob order: integers as log2,
    booleans as 0/1, "all" (spade cp) as log2 cols, other strings as their index in the
    knob's value list. What a model without a mapper would be fed."""
    values = getattr(space, "values", None)
    if not isinstance(values, dict):
        raise CognateError(f"{space.name}: no knob value lists for the raw encoding")
    out = []
    for name, legal in values.items():
        v = config[name]
        if isinstance(v, bool):
            out.append(float(v))
        elif isinstance(v, int):
            out.append(math.log2(max(v, 1)))
        elif v == "all":
            out.append(math.log2(max(shape[1], 1)))
        else:
            out.append(float(legal.index(v)))
    return out


class RawSlotEncoder(ConfigEncoder):
    """No mapper: raw knob values in the homogeneous slot, zero padded to its width."""

    kind = "rawslot"
    dim = HOMOGENEOUS_DIM

    def __init__(self, space: Space) -> None:
        self.space = space

    def encode(self, configs: Sequence[Config], shape: tuple[int, int], width: int) -> torch.Tensor:
        out = torch.zeros((len(configs), self.dim))
        for row, config in enumerate(configs):
            values = raw_knob_values(self.space, config, shape)
            if len(values) > self.dim:
                raise CognateError(f"{self.space.name}: more knobs than the slot holds")
            out[row, : len(values)] = torch.tensor(values)
        return out


def homogeneous_encoder(space: Space, mapper: str, seed: int = 0) -> ConfigEncoder:
    """The encoder of the homogeneous slot for mapper ``cognate``, ``none`` or ``random``."""
    if mapper == "cognate":
        return MappedEncoder(space)
    if mapper == "random":
        return RandomMappedEncoder(space, seed)
    if mapper == "none":
        return RawSlotEncoder(space)
    raise CognateError(f"unknown mapper {mapper!r}; expected one of {', '.join(MAPPERS)}")
