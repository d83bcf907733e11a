"""Per-target autoencoders over the heterogeneous knobs (docs/architecture.md, Cost model).

The heterogeneous knobs of a target are those its config mapper does not express
(``space.knob_features``: cpu formats and chunk, spade bypass and scheduling, gpu split,
reorder, warps, stages). Each feature column takes a few discrete values; the autoencoder
reads them one-hot, squeezes them into a latent code of fixed width (configs/transfer.yaml,
default 64: the same width for every target, so a predictor trained on one target's z
slot has the right shape on another), and decodes one categorical per column.
Training needs no runtimes: the enumerated space (or a seeded sample of a large one) is
the whole data set, and it stops once every distinct row reconstructs exactly.

Trained autoencoders are cached as safetensors under ``cognate_home()/autoencoders``,
keyed by space name, space version and settings; the file's sha256 goes into every model
that uses it, and a fine-tuned model also ships the weights (``AutoencoderEncoder.embedded``
rebuilds the encoder from them). The encoder is registered as target-encoder kind ``ae``.
A cache file is read through ``homefiles.read_home``; one that is not a regular file, is
empty, foreign or damaged is one warning line and trained again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load, save
from torch import nn

from cognate.config import Config
from cognate.errors import CognateError
from cognate.homefiles import ignore, make_room, read_home
from cognate.model.encoding import ConfigEncoder, register_target_encoder
from cognate.paths import cognate_home, configs_dir
from cognate.space import Space
from cognate.util import load_yaml

# The cpu space caps splits, blocks and panels by the shape: one wide enough for every
# value (the panel family's widest is 65536 columns).
_PROBE_SHAPE = (65536, 65536)
MAX_CACHE_BYTES = 64 << 20  # a cached autoencoder is a few MiB at the widest settings
_RETRAIN = "trained again"


def transfer_settings() -> dict[str, Any]:
    """configs/transfer.yaml as a mapping (CognateError when unreadable)."""
    path = configs_dir() / "transfer.yaml"
    data = load_yaml(path, "transfer settings")
    if not isinstance(data, dict):
        raise CognateError(f"{path}: expected a mapping")
    return data


@dataclass(frozen=True)
class AESettings:
    latent: int = 64
    hidden: int = 128
    lr: float = 0.01
    max_steps: int = 3000
    sample: int = 4096
    seed: int = 0

    @classmethod
    def from_config(cls) -> AESettings:
        raw = transfer_settings().get("autoencoder") or {}
        unknown = set(raw) - set(cls.__dataclass_fields__)
        if unknown:
            raise CognateError(f"configs/transfer.yaml: unknown autoencoder keys {sorted(unknown)}")
        settings = cls(**raw)
        if not (1 <= settings.latent <= 4096 and 1 <= settings.hidden <= 65536):
            raise CognateError("configs/transfer.yaml: autoencoder latent/hidden out of range")
        return settings


def space_rows(space: Space, sample: int, seed: int) -> np.ndarray:
    """Distinct knob-feature rows of the space: all configs where enumerable, else a sample."""
    enumerate_all = getattr(space, "all_configs", None)
    configs = enumerate_all() if enumerate_all else space.sample(sample, seed, _PROBE_SHAPE)
    rows = np.stack([np.asarray(space.knob_features(c), dtype=np.float32) for c in configs])
    return np.unique(rows, axis=0)


class Codebook:
    """The distinct values of each feature column; rows <-> per-column value indices."""

    def __init__(self, columns: Sequence[Sequence[float]]) -> None:
        self.columns = [np.asarray(sorted(set(c)), dtype=np.float32) for c in columns]
        self.sizes = [len(c) for c in self.columns]

    @classmethod
    def of(cls, rows: np.ndarray) -> Codebook:
        return cls([rows[:, j].tolist() for j in range(rows.shape[1])])

    def indices(self, rows: np.ndarray) -> np.ndarray:
        out = np.empty(rows.shape, dtype=np.int64)
        for j, values in enumerate(self.columns):
            idx = np.clip(np.searchsorted(values, rows[:, j]), 0, len(values) - 1)
            bad = values[idx] != rows[:, j]
            if bad.any():
                raise CognateError(
                    f"knob feature {j} value {rows[bad, j][0]} was not in the autoencoder's space"
                )
            out[:, j] = idx
        return out

    def onehot(self, rows: np.ndarray) -> torch.Tensor:
        idx = torch.from_numpy(self.indices(rows))
        parts = [nn.functional.one_hot(idx[:, j], n) for j, n in enumerate(self.sizes)]
        return torch.cat(parts, dim=1).float()

    def values(self, indices: torch.Tensor) -> np.ndarray:
        cols = [self.columns[j][indices[:, j].numpy()] for j in range(len(self.columns))]
        return np.stack(cols, axis=1)


class KnobAutoencoder(nn.Module):
    """one-hot knobs -> tanh latent -> one categorical (logits) per feature column."""

    def __init__(self, sizes: Sequence[int], latent: int, hidden: int) -> None:
        super().__init__()
        self.sizes = list(sizes)
        total = sum(self.sizes)
        self.encoder = nn.Sequential(
            nn.Linear(total, hidden), nn.ReLU(), nn.Linear(hidden, latent), nn.Tanh()
        )
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, total))

    def logits(self, latent: torch.Tensor) -> list[torch.Tensor]:
        return list(torch.split(self.decoder(latent), self.sizes, dim=1))

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """Per-column value indices [n, columns]."""
        return torch.stack([part.argmax(1) for part in self.logits(latent)], dim=1)


def _loss(model: KnobAutoencoder, onehot: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    parts = model.logits(model.encoder(onehot))
    return sum(nn.functional.cross_entropy(p, targets[:, j]) for j, p in enumerate(parts))


def train_autoencoder(rows: np.ndarray, settings: AESettings) -> tuple[KnobAutoencoder, Codebook]:
    """Full-batch training on the distinct rows; stops as soon as all reconstruct exactly."""
    codebook = Codebook.of(rows)
    torch.manual_seed(settings.seed)
    model = KnobAutoencoder(codebook.sizes, settings.latent, settings.hidden)
    onehot = codebook.onehot(rows)
    targets = torch.from_numpy(codebook.indices(rows))
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    for step in range(settings.max_steps):
        optimizer.zero_grad()
        _loss(model, onehot, targets).backward()
        optimizer.step()
        if step % 25 == 24:
            with torch.no_grad():
                if torch.equal(model.decode(model.encoder(onehot)), targets):
                    break
    model.eval()
    with torch.no_grad():
        if not torch.equal(model.decode(model.encoder(onehot)), targets):
            raise CognateError(
                f"autoencoder did not reach exact reconstruction in {settings.max_steps} steps"
            )
    return model, codebook


def _cache_path(space: Space, settings: AESettings) -> Path:
    key = json.dumps([space.name, space.version, settings.__dict__], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cognate_home() / "autoencoders" / f"{space.name}-{digest}.safetensors"


def ae_file_bytes(model: KnobAutoencoder, codebook: Codebook, space: Space) -> bytes:
    """The cache file's exact bytes (safetensors serialises deterministically), so the
    sha256 of a cache file can be recomputed from weights embedded in a model file."""
    meta = {
        "space": space.name,
        "version": space.version,
        "columns": [c.tolist() for c in codebook.columns],
    }
    tensors = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    return save(tensors, metadata={"cognate-ae": json.dumps(meta)})


def _save(path: Path, raw: bytes) -> None:
    from cognate.util import atomic_write

    make_room(path)
    atomic_write(path, raw)


def _load(raw: bytes, settings: AESettings) -> tuple[KnobAutoencoder, Codebook]:
    """The autoencoder of a cache file's bytes; any exception means a damaged or foreign file
    (its bytes are untrusted: safetensors, JSON and the shapes all may fail)."""
    header = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
    meta = json.loads(header["__metadata__"]["cognate-ae"])
    codebook = Codebook(meta["columns"])
    model = KnobAutoencoder(codebook.sizes, settings.latent, settings.hidden)
    model.load_state_dict(load(raw))
    model.eval()
    return model, codebook


class AutoencoderEncoder(ConfigEncoder):
    """The heterogeneous part z: the latent code of the target's knob features."""

    kind = "ae"

    def __init__(self, space: Space, settings: AESettings | None = None) -> None:
        self.space = space
        self.settings = settings or AESettings.from_config()
        self.dim = self.settings.latent
        path = _cache_path(space, self.settings)
        self.path: Path | None = path  # None: weights embedded in a model file
        raw = read_home(path, MAX_CACHE_BYTES, then=_RETRAIN)
        if raw is not None:
            try:
                self.model, self.codebook = _load(raw, self.settings)
            except Exception as err:  # noqa: BLE001 - any defect of an untrusted file
                ignore(path, f"not an autoencoder cognate wrote: {type(err).__name__}", _RETRAIN)
                raw = None
        if raw is None:
            raw = self._train(path)
        self.sha256 = hashlib.sha256(raw).hexdigest()

    @classmethod
    def embedded(
        cls, space: Space, settings: AESettings, model: KnobAutoencoder, codebook: Codebook
    ) -> AutoencoderEncoder:
        """The encoder of weights shipped inside a model file: no cache read, no training,
        so a fine-tuned model scores the same on any machine."""
        self = cls.__new__(cls)
        self.space, self.settings, self.dim = space, settings, settings.latent
        self.path = None
        self.model, self.codebook = model, codebook
        model.eval()
        self.sha256 = hashlib.sha256(ae_file_bytes(model, codebook, space)).hexdigest()
        return self

    def _train(self, path: Path) -> bytes:
        """Train, cache and return the cache file's bytes (a cache that cannot be written,
        e.g. a folder in its place, is one warning: the encoder works uncached)."""
        rows = space_rows(self.space, self.settings.sample, self.settings.seed)
        self.model, self.codebook = train_autoencoder(rows, self.settings)
        raw = ae_file_bytes(self.model, self.codebook, self.space)
        try:
            _save(path, raw)
        except OSError as err:
            ignore(path, f"cannot write: {err.strerror or err}", "not cached")
        return raw

    def features(self, configs: Sequence[Config]) -> np.ndarray:
        rows = [np.asarray(self.space.knob_features(c), dtype=np.float32) for c in configs]
        return np.stack(rows) if rows else np.zeros((0, len(self.codebook.sizes)), np.float32)

    @torch.no_grad()
    def encode(self, configs: Sequence[Config], shape: tuple[int, int], width: int) -> torch.Tensor:
        if not configs:
            return torch.zeros((0, self.dim))
        return self.model.encoder(self.codebook.onehot(self.features(configs)))

    @torch.no_grad()
    def reconstruct(self, features: np.ndarray) -> np.ndarray:
        """Knob-feature rows -> latent -> rows (exact on the space it was trained on)."""
        latent = self.model.encoder(self.codebook.onehot(features))
        return self.codebook.values(self.model.decode(latent))


register_target_encoder("ae", AutoencoderEncoder)
