"""The cost-model role: one interface for everything that ranks a space's configs.

As in TVM's meta_schedule, a cost model has four verbs: ``load`` / ``save``,
``update(runs)`` (learn from more measurements) and ``predict(matrix, configs, width)``
-> scores, lower = faster. Search, ``collect --from-model``, the Python API and evaluation
use only this interface; which kind of model a file holds (pretrained, or transferred with
its mapper and autoencoder) is decided once, in ``CostModel.load``, by the kinds of model
registered here (``register_model_kind``): ``learned.LearnedModel`` (checkpoints) and
``random_model.RandomModel`` (JSON), one module each; ``cognate.model`` imports both, so
every kind is registered before a file is loaded.

``predict`` is ``embed`` (once per matrix) then ``encode`` and ``score`` (per batch of
configs); search calls the three halves itself so that it can time them and embed in a
thread while it draws the candidates.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.space import Space

if TYPE_CHECKING:
    from cognate.records import MatrixRuns


class CostModel(ABC):
    """Scores the configs of one space for a matrix (lower = predicted faster)."""

    space: Space
    path: Path | None = None
    metadata: dict[str, Any]

    @classmethod
    def recognizes(cls, path: Path) -> bool:
        """Whether ``path`` holds a model of this kind (read by ``load_file``)."""
        return False

    @classmethod
    def load_file(cls, path: Path, space: Space) -> CostModel:
        """The model of this kind in ``path``, for ``space``."""
        raise NotImplementedError

    @staticmethod
    def load(path: str | Path, space: Space) -> CostModel:
        """The model in ``path`` for ``space``: a random model's JSON file, else a
        checkpoint, pretrained or fine-tuned (both carry their kind in their metadata)."""
        path = Path(path).expanduser()
        kind = next((k for k in _KINDS if k.recognizes(path)), _KINDS[-1])
        model = kind.load_file(path, space)
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


# The kinds of model file ``CostModel.load`` reads, tried in order; the last one registered
# with ``fallback=True`` stays last and reads every file no other kind recognizes.
_KINDS: list[type[CostModel]] = []


def register_model_kind(kind: type[CostModel], fallback: bool = False) -> None:
    """Let ``CostModel.load`` read files ``kind.recognizes`` with ``kind.load_file``."""
    if fallback:
        _KINDS.append(kind)
    else:
        _KINDS.insert(0, kind)


def check_for_space(path: Path, meta: dict[str, Any], space: Space) -> None:
    """A model file's metadata must name the target and op of ``space``."""
    if (meta.get("target"), meta.get("op")) != (space.target, space.op):
        raise CognateError(
            f"{path}: model is for target {meta.get('target')}, op {meta.get('op')}, "
            f"not {space.target}, {space.op}"
        )
