"""``LearnedModel``: the featurizer + MLP ranking network read from a safetensors
checkpoint, and the loaders of checkpoint kinds a plugin adds (``register_loader``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.model.cost_model import CostModel, check_for_space, register_model_kind
from cognate.space import Space

if TYPE_CHECKING:
    from cognate.model.encoding import ConfigEncoder
    from cognate.model.predictor import RankingNetwork
    from cognate.records import MatrixRuns

# A checkpoint loader: (path, space) -> (network, encoder, validated metadata).
CheckpointLoader = Callable[[Path, Space], "tuple[RankingNetwork, ConfigEncoder, dict[str, Any]]"]
# Metadata section -> the loader of the checkpoints that have it (see register_loader).
_LOADERS: dict[str, CheckpointLoader] = {}
# Sections only a plugin can load: without its loader such a file must not load as plain.
# Plugins register from above (cognate.transfer.register(), called by whatever loads
# models: search, collect, evaluate, the CLI); the model package never imports them.
PLUGIN_SECTIONS: tuple[str, ...] = ("transfer",)


def register_loader(section: str, loader: CheckpointLoader) -> None:
    """Load checkpoints whose metadata has ``section`` with ``loader`` (a plugin's own kind
    of model, as ``register_target_encoder`` adds a kind of encoder)."""
    _LOADERS[section] = loader


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

    @classmethod
    def recognizes(cls, path: Path) -> bool:
        """Every file another kind does not recognize is read as a checkpoint."""
        return True

    @property
    def transferred(self) -> bool:
        return "transfer" in self.metadata

    @classmethod
    def load_file(cls, path: Path, space: Space) -> LearnedModel:
        from cognate.model.checkpoint import load_checkpoint, read_metadata

        meta = read_metadata(path)
        check_for_space(path, meta, space)
        # fine-tuned: the encoder is rebuilt from its transfer options, by transfer's loader
        section = next((s for s in (*_LOADERS, *PLUGIN_SECTIONS) if s in meta), None)
        if section is not None and section not in _LOADERS:
            raise CognateError(
                f"{path}: a model with {section!r} metadata needs its plugin"
                " (call cognate.transfer.register() first)"
            )
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


register_model_kind(LearnedModel, fallback=True)
