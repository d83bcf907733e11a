"""``RandomModel``: scores drawn at random but fixed per (seed, matrix, config), kept in a
small JSON file."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.model.cost_model import CostModel, check_for_space, register_model_kind
from cognate.space import Space

if TYPE_CHECKING:
    from cognate.records import MatrixRuns

RANDOM_MODEL_FORMAT = "cognate-random-model"


class RandomModel(CostModel):
    """Scores drawn at random, but a fixed function of (seed, matrix, config): the floor
    every evaluation shows, and a cost model for tests that needs no training."""

    def __init__(self, space: Space, seed: int = 0, path: Path | None = None) -> None:
        self.space, self.seed, self.path = space, seed, path
        self.metadata = {"format": RANDOM_MODEL_FORMAT, "seed": seed, **_space_meta(space)}

    @classmethod
    def recognizes(cls, path: Path) -> bool:
        return _is_random_model_file(path)

    @classmethod
    def load_file(cls, path: Path, space: Space) -> RandomModel:
        meta = _read_random_model(path)
        check_for_space(path, meta, space)
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


register_model_kind(RandomModel)
