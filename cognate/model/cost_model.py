"""The cost-model role: one interface for everything that ranks a space's configs.

As in TVM's meta_schedule, a cost model has four verbs: ``load`` / ``save``,
``update(runs)`` (learn from more measurements) and ``predict(matrix, configs, width)``
-> scores, lower = faster. Search, ``collect --from-model``, the Python API and evaluation
use only this interface; which kind of model a file holds (pretrained, or transferred with
its mapper and autoencoder) is decided once, in ``CostModel.load``.

``predict`` is ``embed`` (once per matrix) then ``encode`` and ``score`` (per batch of
configs); search calls the three halves itself so that it can time them and embed in a
thread while it draws the candidates.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.paths import data_dir
from cognate.space import Space

if TYPE_CHECKING:
    from cognate.model.encoding import ConfigEncoder
    from cognate.model.predictor import RankingNetwork
    from cognate.records import MatrixRuns

RANDOM_MODEL_FORMAT = "cognate-random-model"
# Modules that register extras on import: config encoders (the transfer autoencoder "ae")
# and checkpoint loaders (a fine-tuned model's, for metadata section "transfer"). A
# checkpoint that needs one loads only after its module has been imported; this module
# names them and never imports them by code, so the model package does not depend on them.
PLUGIN_MODULES: tuple[str, ...] = ("cognate.transfer.autoencoder", "cognate.transfer.finetune")

# A checkpoint loader: (path, space) -> (network, encoder, validated metadata).
CheckpointLoader = Callable[[Path, Space], "tuple[RankingNetwork, ConfigEncoder, dict[str, Any]]"]
# Metadata section -> the loader of the checkpoints that have it (see register_loader).
_LOADERS: dict[str, CheckpointLoader] = {}
# Sections only a plugin can load: without its loader such a file must not load as plain.
PLUGIN_SECTIONS: tuple[str, ...] = ("transfer",)


def register_loader(section: str, loader: CheckpointLoader) -> None:
    """Load checkpoints whose metadata has ``section`` with ``loader`` (a plugin's own kind
    of model, as ``register_target_encoder`` adds a kind of encoder)."""
    _LOADERS[section] = loader


class CostModel(ABC):
    """Scores the configs of one space for a matrix (lower = predicted faster)."""

    space: Space
    path: Path | None = None
    metadata: dict[str, Any]

    @staticmethod
    def load(path: str | Path, space: Space) -> CostModel:
        """The model in ``path`` for ``space``: a random model's JSON file, else a
        checkpoint, pretrained or fine-tuned (both carry their kind in their metadata)."""
        path = Path(path).expanduser()
        if _is_random_model_file(path):
            model: CostModel = RandomModel.load_file(path, space)
        else:
            model = LearnedModel.load_file(path, space)
        try:  # a portfolio's knobs are checked now, not when a search first ranks
            _ = model.portfolio
        except CognateError as err:
            raise CognateError(f"{path}: portfolio: {err}") from None
        return model

    @abstractmethod
    def save(self, path: str | Path) -> Path:
        """Write the model so that ``CostModel.load`` gives it back."""

    @abstractmethod
    def update(self, runs: Sequence[MatrixRuns], seed: int = 0, epochs: int | None = None) -> None:
        """Learn from more measured runs of this model's space (``epochs``: at most this
        many passes, default the model's own training setting)."""

    @abstractmethod
    def embed(self, matrix: Matrix) -> Any:
        """The matrix part of the model's input, computed once per matrix."""

    @abstractmethod
    def encode(self, configs: Sequence[Config], shape: tuple[int, int], width: int) -> Any:
        """The configs part of the input (for a matrix of ``shape`` at dense ``width``)."""

    @abstractmethod
    def score(self, embedding: Any, encoded: Any, width: int) -> np.ndarray:
        """Scores of encoded configs for the embedded matrix (float32, lower = faster)."""

    @property
    def portfolio(self) -> list[Config]:
        """The fixed shortlist this model ranks ahead of every other config
        (``cognate.model.portfolio``); empty when it has none."""
        from cognate.model.portfolio import portfolio_configs

        if getattr(self, "_portfolio", None) is None:
            self._portfolio = portfolio_configs(self.metadata, self.space)
        return self._portfolio

    def set_portfolio(self, entry: dict[str, Any] | None) -> None:
        """Give the model a portfolio entry (``choose_portfolio``'s), or none (None)."""
        from cognate.model.portfolio import PORTFOLIO_KEY

        if entry is None:
            self.metadata.pop(PORTFOLIO_KEY, None)
        else:
            self.metadata[PORTFOLIO_KEY] = entry
        self._portfolio = None  # read again from the entry on first use

    @property
    def portfolio_anchor(self) -> float:
        """How firmly the portfolio keeps its greedy order (``cognate.model.portfolio``)."""
        from cognate.model.portfolio import portfolio_anchor

        return portfolio_anchor(self.metadata)

    def order(self, configs: Sequence[Config], scores: np.ndarray) -> np.ndarray:
        """Indices of ``configs`` best first: the portfolio's (by anchored score), then the
        rest by score."""
        from cognate.model.portfolio import portfolio_order, portfolio_positions

        positions = portfolio_positions(configs, self.portfolio)
        return portfolio_order(scores, positions, self.portfolio_anchor)

    def predict(
        self, matrix: Matrix, configs: Sequence[Config], width: int, batch: int = 8192
    ) -> np.ndarray:
        """Scores of ``configs`` for ``matrix`` at ``width`` (lower = faster)."""
        embedding = self.embed(matrix)
        out = [
            self.score(embedding, self.encode(configs[lo : lo + batch], matrix.shape, width), width)
            for lo in range(0, len(configs), batch)
        ]
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


class LearnedModel(CostModel):
    """The featurizer + MLP ranking network with the config encoder it was trained with:
    a pretrained model (its own space's encoder) or a transferred one (the cpu-vocabulary
    mapper and the target's autoencoder inside its encoder)."""

    def __init__(
        self,
        network: RankingNetwork,
        encoder: ConfigEncoder,
        metadata: dict[str, Any],
        space: Space,
        path: Path | None = None,
    ) -> None:
        self.network, self.encoder, self.metadata = network, encoder, metadata
        self.space, self.path = space, path

    @property
    def transferred(self) -> bool:
        return "transfer" in self.metadata

    @classmethod
    def load_file(cls, path: Path, space: Space) -> LearnedModel:
        from cognate.model.checkpoint import load_checkpoint, read_metadata

        meta = read_metadata(path)
        _check_for_space(path, meta, space)
        _import_plugins()
        # fine-tuned: the encoder is rebuilt from its transfer options, by transfer's loader
        section = next((s for s in (*_LOADERS, *PLUGIN_SECTIONS) if s in meta), None)
        if section is not None and section not in _LOADERS:
            raise CognateError(f"{path}: a model with {section!r} metadata needs its plugin")
        load = _LOADERS[section] if section is not None else load_checkpoint
        network, encoder, meta = load(path, space)
        return cls(network, encoder, meta, space, path)

    def save(self, path: str | Path) -> Path:
        from cognate.model.checkpoint import save_checkpoint

        return save_checkpoint(path, self.network, self.metadata)

    def update(self, runs: Sequence[MatrixRuns], seed: int = 0, epochs: int | None = None) -> None:
        """Train on ``runs`` from the current weights, keep the best epoch, then note the
        update in the metadata. Runs of several matrices are split by matrix for that
        choice; one matrix's runs (``tune --verify --learn``: the configs just measured)
        are their own validation, so the kept epoch is the one that ranks them best."""
        import torch

        from cognate.model.fit import encode_all, fit, split_matrices

        runs = [r for r in runs if len(r.configs) >= 2]  # a single config ranks nothing
        if not runs:
            raise CognateError("an update needs at least 2 measured configs of a matrix")
        encode_all(runs, self.encoder)
        preset = self.network.preset
        if len({r.key for r in runs}) >= 2:
            keys, _ = split_matrices([r.key for r in runs], preset.train.val_fraction, seed)
            fit_runs = [r for r in runs if r.key in set(keys)]
            val_runs = [r for r in runs if r.key not in set(keys)]
        else:
            fit_runs = val_runs = list(runs)
        torch.manual_seed(seed)
        self.network.preset = preset.with_train(epochs=epochs)  # fit reads its epochs there
        try:
            history = fit(self.network, fit_runs, val_runs, seed, None)
        finally:
            self.network.preset = preset
        self.network.eval()
        names = sorted({r.matrix.name for r in runs})
        self.metadata.setdefault("updates", []).append(
            {
                "matrices": names,
                "measurements": sum(len(r.configs) for r in runs),
                "epochs": len(history) - 1,
                "seed": seed,
            }
        )

    def embed(self, matrix: Matrix) -> Any:
        import torch

        with torch.inference_mode():  # per thread: search embeds in a worker thread
            return self.network.featurizer.embed(matrix)

    def encode(self, configs: Sequence[Config], shape: tuple[int, int], width: int) -> Any:
        import torch

        with torch.inference_mode():
            return self.encoder.encode(configs, shape, width)

    def score(self, embedding: Any, encoded: Any, width: int) -> np.ndarray:
        import torch

        from cognate.model.checkpoint import finite_scores

        with torch.inference_mode():
            scores = self.network.score(embedding, width, encoded).float().numpy()
        return finite_scores(self.path, scores)


class RandomModel(CostModel):
    """Scores drawn at random, but a fixed function of (seed, matrix, config): the floor
    every evaluation shows, and a cost model for tests that needs no training."""

    def __init__(self, space: Space, seed: int = 0, path: Path | None = None) -> None:
        self.space, self.seed, self.path = space, seed, path
        self.metadata = {"format": RANDOM_MODEL_FORMAT, "seed": seed, **_space_meta(space)}

    @classmethod
    def load_file(cls, path: Path, space: Space) -> RandomModel:
        meta = _read_random_model(path)
        _check_for_space(path, meta, space)
        seed = meta.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise CognateError(f"{path}: random model without an integer seed")
        model = cls(space, seed, path)
        # a random ranking may still name its matrices and carry a portfolio (a baseline:
        # the portfolio in random order)
        model.metadata.update({k: meta[k] for k in ("split", "portfolio") if k in meta})
        return model

    def save(self, path: str | Path) -> Path:
        from cognate.util import atomic_write

        path = Path(path).expanduser()
        atomic_write(path, json.dumps(self.metadata, indent=2) + "\n")
        return path

    def update(self, runs: Sequence[MatrixRuns], seed: int = 0, epochs: int | None = None) -> None:
        """Nothing to learn: a random ranking stays random."""

    def embed(self, matrix: Matrix) -> Any:
        return matrix.sha256

    def encode(self, configs: Sequence[Config], shape: tuple[int, int], width: int) -> Any:
        return [c.hash for c in configs]

    def score(self, embedding: Any, encoded: Any, width: int) -> np.ndarray:
        def draw(config_hash: str) -> float:
            key = f"{self.seed}:{embedding}:{width}:{config_hash}".encode()
            return int.from_bytes(hashlib.sha256(key).digest()[:4], "little") / 2**32

        return np.array([draw(h) for h in encoded], dtype=np.float32)


def _read_random_model(path: Path) -> dict[str, Any]:
    """A random model's JSON, bounded in size and depth before parsing and its portfolio
    checked like a checkpoint's."""
    from pydantic import ValidationError

    from cognate.model.checkpoint import (
        MAX_METADATA_BYTES,
        MAX_METADATA_DEPTH,
        PortfolioMeta,
        first_error,
        json_depth,
    )
    from cognate.util import read_bounded

    raw = read_bounded(path, MAX_METADATA_BYTES, "random model")
    try:
        text = raw.decode("utf-8")
        if json_depth(text) > MAX_METADATA_DEPTH:
            raise CognateError(f"{path}: random model nested deeper than {MAX_METADATA_DEPTH}")
        meta = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise CognateError(f"{path}: not a readable random model: {err}") from None
    if not isinstance(meta, dict):
        raise CognateError(f"{path}: a random model must be a JSON object")
    try:
        PortfolioMeta.model_validate(meta.get("portfolio") or {})
    except ValidationError as err:
        raise CognateError(f"{path}: random model {first_error(err, 'portfolio.')}") from None
    return meta


def _check_for_space(path: Path, meta: dict[str, Any], space: Space) -> None:
    """A model file's metadata must name the target and op of ``space``."""
    if (meta.get("target"), meta.get("op")) != (space.target, space.op):
        raise CognateError(
            f"{path}: model is for target {meta.get('target')}, op {meta.get('op')}, "
            f"not {space.target}, {space.op}"
        )


def _space_meta(space: Space) -> dict[str, Any]:
    return {"target": space.target, "op": space.op, "space": space.name}


def _is_random_model_file(path: Path) -> bool:
    """A random model is a small JSON file; checkpoints are safetensors (binary header)."""
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and RANDOM_MODEL_FORMAT.encode() in head


def _import_plugins() -> None:
    import importlib

    for name in PLUGIN_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


# --- where models are ----------------------------------------------------------------------


def shipped_model_path(target: str, op: str) -> Path:
    """Where the shipped model for (target, op) lives: data/models/<target>-<op>.safetensors."""
    return data_dir() / "models" / f"{target}-{op}.safetensors"


def resolve_model_path(model: str | Path | None, target: str, op: str) -> Path:
    """The model file to use; a missing file is a one-line error saying how to get one."""
    if model is not None:
        path = Path(model).expanduser()
        if not path.is_file():
            raise CognateError(f"{path}: no such model file")
        return path
    path = shipped_model_path(target, op)
    if not path.is_file():
        raise CognateError(
            f"no shipped model for target {target}, op {op} ({path}); train one with "
            f"`cognate pretrain --db STORE --target {target} --op {op} -o {path}` "
            "(or scripts/train_shipped_models.sh), or pass --model PATH"
        )
    return path
