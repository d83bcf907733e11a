"""Config encodings: what the predictor sees of a schedule.

One interface, ``ConfigEncoder.encode(configs, shape, width) -> float32 [n, dim]``, with
two parts (docs/architecture.md, Cost model):

- the homogeneous part p, shared by every target: log2 of the I/J/K strip sizes and the
  6 x 6 loop-order permutation matrix, both from ``space.loop_nest`` (the CPU loop
  vocabulary, so a model trained on one target can read another's configs);
- the target-specific part: the knobs ``loop_nest`` does not express: ``raw`` (the
  space's ``knob_features``), ``knobs`` (those and the kernel knobs a space has beside them:
  the cpu SpMM kernel's vector tile and row schedule); the transfer work plugs its
  autoencoder latent in through ``register_target_encoder`` without touching the predictor;
- optionally the host part (``+host``): what decides a timing on the measuring machine
  (vector width, cache sizes, cores), the same for every config of a run, so one model ranks
  for several hosts. A run's host comes from its records; at search time it is this machine.

Encoders are stateless given the space; normalisation statistics live in the model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from functools import cache
from typing import TYPE_CHECKING

import numpy as np
import torch

from cognate.config import Config
from cognate.errors import CognateError
from cognate.hostid import HostProfile, host_profile
from cognate.space import LOOP_VARS, LoopNest, Space

if TYPE_CHECKING:
    from cognate.records import MatrixRuns

# A shape every space accepts, used only to learn a target part's width.
_PROBE_SHAPE = (1024, 1024)


class ConfigEncoder(ABC):
    """Maps configs of one space to feature rows."""

    kind: str
    dim: int
    uses_host = False  # True: ``encode`` takes ``host`` (HostEncoder)

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


class KernelKnobEncoder(ConfigEncoder):
    """``raw`` and the kernel knobs the space encodes beside them (``kernel_knob_features``:
    the cpu SpMM kernel's vector tile and row schedule); ``raw`` alone where it has none."""

    kind = "knobs"

    def __init__(self, space: Space) -> None:
        self.raw = RawKnobEncoder(space)
        self.kernel = space.kernel_knob_features
        self.dim = self.raw.dim + int(self.kernel(space.baseline(_PROBE_SHAPE)).size)

    def encode(self, configs: Sequence[Config], shape: tuple[int, int], width: int) -> torch.Tensor:
        raw = self.raw.encode(configs, shape, width)
        if self.dim == self.raw.dim or not configs:
            return raw if configs else torch.zeros((0, self.dim))
        kernel = np.array([self.kernel(c) for c in configs], dtype=np.float32)
        return torch.cat([raw, torch.from_numpy(kernel)], dim=1)


# Reference points of the host part: 0 is a 256-bit, 32 KiB L1d / 1 MiB L2 / 32 MiB LLC,
# 2-core machine; each feature is log2(value / reference). A fact the records lack is 0.
_HOST_REFERENCE = {
    "vector_bits": 256,
    "l1d_bytes": 32 << 10,
    "l2_bytes": 1 << 20,
    "llc_bytes": 32 << 20,
    "cores": 2,
}


def host_features(profile: HostProfile | None) -> np.ndarray:
    """float32 [5]: log2 of the host's vector width, L1d, L2, LLC and cores over the
    reference machine's (``_HOST_REFERENCE``); ``None`` is this machine."""
    profile = profile or host_profile()
    values = {name: getattr(profile, name) or 0 for name in _HOST_REFERENCE}
    return np.array(
        [np.log2(v / _HOST_REFERENCE[n]) if v > 0 else 0.0 for n, v in values.items()],
        dtype=np.float32,
    )


class HostEncoder(ConfigEncoder):
    """The host part: ``host_features`` of the measuring (or searching) host, one row per
    config."""

    kind = "host"
    dim = len(_HOST_REFERENCE)
    uses_host = True

    def __init__(self, space: Space) -> None:
        self.space = space

    def encode(
        self,
        configs: Sequence[Config],
        shape: tuple[int, int],
        width: int,
        host: HostProfile | None = None,
    ) -> torch.Tensor:
        row = torch.from_numpy(host_features(host))
        return row.expand(len(configs), -1).clone()


def encode_on(
    encoder: ConfigEncoder,
    configs: Sequence[Config],
    shape: tuple[int, int],
    width: int,
    host: HostProfile | None,
) -> torch.Tensor:
    """``encoder.encode`` for configs measured on ``host`` (None: this machine): an encoder
    with a host part reads it, any other encodes as always."""
    if encoder.uses_host:
        return encoder.encode(configs, shape, width, host=host)
    return encoder.encode(configs, shape, width)


def hosts_of_runs(runs: Sequence[MatrixRuns]) -> list[dict[str, object]]:
    """The distinct hosts of training runs (``MatrixRuns.host``; None: this machine), as a
    model's metadata keeps them: CPU name and ``host_features``."""
    seen: dict[tuple[float, ...], dict[str, object]] = {}
    for run in runs:
        profile = run.host or host_profile()
        features = tuple(round(float(v), 4) for v in host_features(profile))
        seen.setdefault(features, {"cpu": profile.cpu_model, "features": list(features)})
    return list(seen.values())


def never_trained_here(encoder: ConfigEncoder, metadata: dict) -> bool:
    """Whether a host-aware model never trained on a host like this machine: its facts
    differ from every training host's (metadata ``hosts``). False for models without a host
    part or a host list."""
    hosts = metadata.get("hosts")
    if not encoder.uses_host or not isinstance(hosts, list) or not hosts:
        return False
    here = host_features(None)
    for host in hosts:
        known = np.asarray(host.get("features", []) if isinstance(host, dict) else [], float)
        if known.shape == here.shape and np.allclose(known, here, atol=1e-3):
            return False
    return True


def new_host_note(encoder: ConfigEncoder, metadata: dict) -> str | None:
    """One line when ``never_trained_here``: rank-only picks there are less sure
    (docs/evaluation/hosts.md), and what an unverified tune picks. None otherwise."""
    if not never_trained_here(encoder, metadata):
        return None
    profile = host_profile()
    names = ", ".join(str(h.get("cpu")) for h in metadata["hosts"] if isinstance(h, dict))
    if new_host_picks_baseline(metadata):
        rank_only = (
            "On a host it never saw, its rank 1 lost to the baseline config, so an unverified"
            " tune picks the baseline here"
        )
    else:
        rank_only = "On a host it never saw, its rank-only pick is less sure"
    return (
        f"note: the model never trained on a host like this one ({profile.cpu}, "
        f"{profile.vector_bits}-bit vectors, {profile.l2_bytes >> 10} KiB L2); it trained on "
        f"{names}. {rank_only}: --verify times the picks, --verify --learn adapts the model"
        " here"
    )


# The metadata key of a model's new-host rule (scripts/eval_hosts.py --write-pick).
NEW_HOST_PICK_KEY = "new_host_pick"


def new_host_picks_baseline(metadata: dict) -> bool:
    """Whether the model's leave-one-host-out evaluation (metadata ``new_host_pick``,
    written by scripts/eval_hosts.py --write-pick) found its zero-shot rank 1 below the
    baseline config: then an unverified tune on a new host picks the baseline."""
    rule = metadata.get(NEW_HOST_PICK_KEY)
    return isinstance(rule, dict) and rule.get("pick") == "baseline"


def neutral_host_weights(network: torch.nn.Module, encoder: ConfigEncoder) -> None:
    """Zero the predictor's first-layer weights on the host part (the encoding's last
    columns). Trained on one host, those inputs never vary, so their weights would keep their
    random start and turn another host's facts into noise; from zero they stay zero until the
    records hold two hosts whose facts differ."""
    if not encoder.uses_host:
        return
    with torch.no_grad():
        network.predictor[0].weight[:, -HostEncoder.dim :] = 0.0


class ConcatEncoder(ConfigEncoder):
    """[p || target part (|| host part)]: the encoding the predictor consumes."""

    def __init__(self, parts: Sequence[ConfigEncoder]) -> None:
        self.parts = list(parts)
        self.kind = "+".join(p.kind for p in self.parts)
        self.dim = sum(p.dim for p in self.parts)
        self.uses_host = any(p.uses_host for p in self.parts)

    def encode(
        self,
        configs: Sequence[Config],
        shape: tuple[int, int],
        width: int,
        host: HostProfile | None = None,
    ) -> torch.Tensor:
        """``host``: the measuring host's profile (None: this machine); read by a host part
        only."""
        return torch.cat(
            [
                p.encode(configs, shape, width, host=host)
                if p.uses_host
                else p.encode(configs, shape, width)
                for p in self.parts
            ],
            dim=1,
        )


TargetEncoderFactory = Callable[[Space], ConfigEncoder]
_TARGET_ENCODERS: dict[str, TargetEncoderFactory] = {
    "raw": RawKnobEncoder,
    "knobs": KernelKnobEncoder,
}
HOST_PART = "host"


def register_target_encoder(kind: str, factory: TargetEncoderFactory) -> None:
    """Make a target-part encoder (e.g. an autoencoder latent) available by name."""
    _TARGET_ENCODERS[kind] = factory


def make_encoder(space: Space, target_part: str = "raw") -> ConcatEncoder:
    """The standard encoder: [LoopNestEncoder || target part], ``target_part`` naming a
    registered target part, optionally followed by ``+host`` (the host part last)."""
    name, _, rest = target_part.partition("+")
    if name not in _TARGET_ENCODERS or rest not in ("", HOST_PART):
        raise CognateError(
            f"unknown target encoding {target_part!r}; expected one of "
            + ", ".join(sorted(_TARGET_ENCODERS))
            + f", each optionally with +{HOST_PART}"
        )
    parts = [LoopNestEncoder(space), _TARGET_ENCODERS[name](space)]
    if rest:
        parts.append(HostEncoder(space))
    return ConcatEncoder(parts)
