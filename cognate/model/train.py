"""Training the cost model on measured runtimes (used by pretrain, later by finetune).

Data comes in ``MatrixRuns`` (``cognate.records``): all ok-measured configs of one matrix at one dense width.
The split is by matrix (every width of a matrix lands on the same side), seeded. Each step
scores the configs of one matrix (sampled down to ``configs_per_step``) and applies the
pairwise ranking loss; the validation split is scored after every epoch and the best epoch
(by ``early_stop_metric``) is kept. Everything random draws from the seed, so a run is
reproducible on the same machine.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save

from cognate.errors import CognateError
from cognate.model.checkpoint import (
    CHECKPOINT_FORMAT,
    check_fits,
    encoder_target_part,
    parse_metadata,
    read_state,
)
from cognate.model.cost_model import LearnedModel
from cognate.model.encoding import ConfigEncoder, make_encoder
from cognate.model.featurizer import matrix_points
from cognate.model.predictor import RankingNetwork, pairwise_accuracy, ranking_loss
from cognate.model.preset import ModelPreset, preset_from_dict
from cognate.model.sparseconv import KernelMap, PointSet
from cognate.records import MatrixRuns
from cognate.space import Space
from cognate.util import atomic_write


def split_matrices(
    keys: Sequence[str], val_fraction: float, seed: int
) -> tuple[list[str], list[str]]:
    """Seeded split of distinct matrix keys into (train, validation); both non-empty if >= 2."""
    distinct = sorted(set(keys))
    order = np.random.default_rng(seed).permutation(len(distinct))
    n_val = min(max(1, round(val_fraction * len(distinct))), len(distinct) - 1)
    val = sorted(distinct[i] for i in order[:n_val])
    return sorted(set(distinct) - set(val)), val


# --- evaluation ----------------------------------------------------------------------------


def _geomean(values: list[float]) -> float:
    return float(math.exp(np.mean(np.log(values)))) if values else float("nan")


@torch.no_grad()
def evaluate(
    model: RankingNetwork,
    runs: Sequence[MatrixRuns],
    embeddings: dict[str, torch.Tensor] | None = None,
) -> dict[str, float]:
    """Validation metrics: pairwise accuracy, ranking loss, and geomean speedups over the
    baseline config of the model's top-1, best of its top-5, and the oracle (best measured).
    ``top5_of_oracle`` = top5 / oracle. Speedups use only runs whose baseline was measured."""
    train_spec = model.preset.train
    accs, losses, top1, top5, oracle = [], [], [], [], []
    for run in runs:
        emb = (embeddings or {}).get(run.key)
        if emb is None:
            emb = model.featurizer.embed(run.matrix)
        scores = model.score(emb, run.width, run.features)
        runtimes = torch.from_numpy(run.runtimes)
        acc = pairwise_accuracy(scores, runtimes, train_spec.tie_rtol)
        if not math.isnan(acc):
            accs.append(acc)
        losses.append(float(ranking_loss(scores, runtimes, train_spec.margin, train_spec.tie_rtol)))
        if run.baseline is not None:
            base = run.runtimes[run.baseline]
            ranked = np.argsort(scores.numpy(), kind="stable")
            top1.append(base / run.runtimes[ranked[0]])
            top5.append(base / run.runtimes[ranked[:5]].min())
            oracle.append(base / run.runtimes.min())
    metrics = {
        "pairwise_accuracy": float(np.mean(accs)) if accs else float("nan"),
        "loss": float(np.mean(losses)) if losses else float("nan"),
        "top1": _geomean(top1),
        "top5": _geomean(top5),
        "oracle": _geomean(oracle),
    }
    metrics["top5_of_oracle"] = metrics["top5"] / metrics["oracle"]
    return metrics


# --- training ------------------------------------------------------------------------------


# (epoch, step, steps per epoch, validation metrics at the end of an epoch else None)
ProgressFn = Callable[[int, int, int, dict[str, float] | None], None]


def encode_all(runs: Sequence[MatrixRuns], encoder: ConfigEncoder) -> None:
    for run in runs:
        if run.features is None:
            run.features = encoder.encode(run.configs, run.matrix.shape, run.width)


def train(
    runs: Sequence[MatrixRuns],
    space: Space,
    preset: ModelPreset,
    seed: int = 0,
    encoder: ConfigEncoder | None = None,
    progress: ProgressFn | None = None,
    held_out: Sequence[MatrixRuns] = (),
) -> LearnedModel:
    """Train a fresh cost model on ``runs``; returns the best-validation model (its network,
    encoder and metadata: ``save`` writes the checkpoint).

    Fills in each run's ``features`` (its configs' encodings) when absent. ``held_out``
    runs (matrices outside ``runs``) never touch training or epoch selection: the chosen
    model is scored on them once, into the metadata's ``split.test`` / ``metrics.test``.
    """
    if len({r.key for r in runs}) < 2:
        raise CognateError("training needs measured configs of at least 2 matrices")
    encoder = encoder or make_encoder(space)
    encode_all(runs, encoder)
    train_keys, val_keys = split_matrices([r.key for r in runs], preset.train.val_fraction, seed)
    train_runs = [r for r in runs if r.key in set(train_keys)]
    val_runs = [r for r in runs if r.key in set(val_keys)]

    torch.manual_seed(seed)
    model = RankingNetwork(preset, encoder.dim)
    model.set_normalisation(torch.cat([r.features for r in train_runs]))
    history = fit(model, train_runs, val_runs, seed, progress)
    best = max(history[1:], key=lambda h: _metric(h, preset))
    names = {r.key: r.matrix.name for r in runs}
    metadata = {
        **checkpoint_metadata(model, space, encoder, seed),
        "split": {
            "seed": seed,
            "train": [{"sha256": k, "name": names[k]} for k in train_keys],
            "validation": [{"sha256": k, "name": names[k]} for k in val_keys],
        },
        "metrics": {"best_epoch": best["epoch"], "best": best, "history": history},
    }
    if held_out:
        _score_held_out(model, held_out, encoder, metadata)
    return LearnedModel(model, encoder, metadata, space)


def _score_held_out(
    model: RankingNetwork, held_out: Sequence[MatrixRuns], encoder: ConfigEncoder, metadata: dict
) -> None:
    if {r.key for r in held_out} & {
        m["sha256"] for part in ("train", "validation") for m in metadata["split"][part]
    }:
        raise CognateError("held-out matrices must not be among the training runs")
    encode_all(held_out, encoder)
    model.eval()
    with torch.no_grad():
        metrics = evaluate(model, held_out)
    names = {r.key: r.matrix.name for r in held_out}
    metadata["split"]["test"] = [{"sha256": k, "name": n} for k, n in sorted(names.items())]
    metadata["metrics"]["test"] = metrics


def checkpoint_metadata(
    model: RankingNetwork, space: Space, encoder: ConfigEncoder, seed: int
) -> dict[str, Any]:
    """The metadata every checkpoint carries (pretrained or fine-tuned): what loading needs
    to rebuild the model and its encoder, and to refuse another space."""
    return {
        "format": CHECKPOINT_FORMAT,
        "preset": model.preset.model_dump(),
        "target": space.target,
        "op": space.op,
        "space": {"name": space.name, "version": space.version},
        "encoder": {"kind": encoder.kind, "dim": encoder.dim},
        "normalisation": {
            "config_mean": model.config_mean.tolist(),
            "config_std": model.config_std.tolist(),
            "log_scale": "log2(rows, cols, nnz, width) / 16",
        },
        "seed": seed,
    }


def _metric(entry: dict[str, float], preset: ModelPreset) -> float:
    value = entry[preset.train.early_stop_metric]
    return -math.inf if math.isnan(value) else value


class Embedder:
    """Embeds training matrices, keeping each one's kernel maps while they fit a budget.

    The maps depend only on the matrix, so recomputing them every step would redo the
    neighbour search (most of a small layer's cost). Training uses the torch backend: with
    a plan it is the same arithmetic as MinkowskiEngine, and differentiable.
    """

    def __init__(self, model: RankingNetwork, budget_pairs: int = 50_000_000) -> None:
        self.model, self.budget = model, budget_pairs
        self.plans: dict[str, tuple[PointSet, list[KernelMap]]] = {}
        self.scalars: dict[str, torch.Tensor] = {}

    def __call__(self, run: MatrixRuns) -> torch.Tensor:
        cached = self.plans.get(run.key)
        if cached is None:
            points = matrix_points(run.matrix)
            cached = (points, self.model.featurizer.plan(points))
            cost = len(points) + sum(m.size for m in cached[1])
            if cost <= self.budget:
                self.plans[run.key] = cached
                self.budget -= cost
        scalars = self.scalars.get(run.key)
        if scalars is None:
            scalars = self.scalars[run.key] = self.model.featurizer.scalars(run.matrix)
        return self.model.featurizer(cached[0], scalars, plan=cached[1])

    def all(self, runs: Sequence[MatrixRuns]) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            return {r.key: self(r) for r in runs}


def fit(
    model: RankingNetwork,
    train_runs: Sequence[MatrixRuns],
    val_runs: Sequence[MatrixRuns],
    seed: int,
    progress: ProgressFn | None,
    frozen_embeddings: Callable[[Sequence[MatrixRuns]], dict[str, torch.Tensor]] | None = None,
) -> list[dict[str, float]]:
    """``frozen_embeddings`` (runs -> {key: embedding}) may stand in for the embedder while
    the featurizer is frozen (fine-tuning reuses one cache across many runs)."""
    spec = model.preset.train
    trainable = model.preset.featurizer.trainable
    model.featurizer.requires_grad_(trainable)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=spec.lr, weight_decay=spec.weight_decay)
    rng = np.random.default_rng(seed)
    embedder = Embedder(model)
    # A frozen featurizer gives the same embedding every step: compute each once.
    frozen = embedder.all if trainable or frozen_embeddings is None else frozen_embeddings
    train_cache = {} if trainable else frozen(train_runs)
    val_cache = frozen(val_runs)

    history = [{"epoch": 0, **evaluate(model, val_runs, val_cache)}]
    if progress:
        progress(0, 0, len(train_runs), history[-1])
    best_state, best_value, stale = copy.deepcopy(model.state_dict()), -math.inf, 0
    for epoch in range(1, spec.epochs + 1):
        model.train()
        for step, index in enumerate(rng.permutation(len(train_runs)), start=1):
            loss = _step_loss(model, train_runs[index], train_cache, embedder, rng)
            (loss / spec.matrices_per_step).backward()
            if step % spec.matrices_per_step == 0 or step == len(train_runs):
                optimizer.step()
                optimizer.zero_grad()
            if progress:
                progress(epoch, step, len(train_runs), None)
        model.eval()
        if trainable:
            val_cache = embedder.all(val_runs)
        history.append({"epoch": epoch, **evaluate(model, val_runs, val_cache)})
        if progress:
            progress(epoch, len(train_runs), len(train_runs), history[-1])
        value = _metric(history[-1], model.preset)
        if value > best_value:
            best_state, best_value, stale = copy.deepcopy(model.state_dict()), value, 0
        else:
            stale += 1
            if stale >= spec.patience:
                break
    model.load_state_dict(best_state)
    return history


def _step_loss(
    model: RankingNetwork,
    run: MatrixRuns,
    cache: dict[str, torch.Tensor],
    embedder: Embedder,
    rng: np.random.Generator,
) -> torch.Tensor:
    spec = model.preset.train
    n = len(run.configs)
    pick = (
        np.sort(rng.choice(n, spec.configs_per_step, replace=False))
        if n > spec.configs_per_step
        else np.arange(n)
    )
    emb = cache.get(run.key)
    if emb is None:
        emb = embedder(run)
    scores = model.score(emb, run.width, run.features[pick])
    runtimes = torch.from_numpy(run.runtimes[pick])
    return ranking_loss(scores, runtimes, spec.margin, spec.tie_rtol, spec.pair_weight)


# --- checkpoints ---------------------------------------------------------------------------


def save_checkpoint(path: str | Path, model: RankingNetwork, metadata: dict[str, Any]) -> Path:
    """Weights as safetensors; the metadata as JSON in the file's own metadata block."""
    path = Path(path).expanduser()
    tensors = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    atomic_write(path, save(tensors, metadata={"cognate": json.dumps(metadata)}))
    return path


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The metadata of a checkpoint, without loading its weights: bounded and validated
    against its schema (``cognate.model.checkpoint``) before anything reads it."""
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = (f.metadata() or {}).get("cognate")
    except (OSError, SafetensorError) as err:
        raise CognateError(f"{path}: not a readable cognate model: {err}") from None
    if raw is None:
        raise CognateError(f"{path}: safetensors file without cognate metadata")
    return parse_metadata(path, raw)


def check_space(path: str | Path, meta: dict[str, Any], space: Space) -> None:
    """A model is only valid for the space (name and version) it was trained for."""
    trained = meta["space"]
    if (trained["name"], trained["version"]) != (space.name, space.version):
        verb = "fine-tuned" if "transfer" in meta else "trained"
        raise CognateError(
            f"{path}: model was {verb} for space {trained['name']} version "
            f"{trained['version']}, but the space here is {space.name} version "
            f"{space.version}; retrain it"
        )


def new_network(
    path: str | Path,
    meta: dict[str, Any],
    encoder_dim: int,
    parts: dict[str, Callable[[], torch.nn.Module]] | None = None,
) -> RankingNetwork:
    """An untrained model of the checkpoint's preset, for weights read by ``load_weights``;
    ``encoder_dim`` is the width of the encoder rebuilt here, which must be the trained one.
    ``parts``: submodules the file also holds (name -> constructor), added to the model."""
    if encoder_dim != meta["encoder"]["dim"]:
        raise CognateError(f"{path}: encoder width {meta['encoder']['dim']} != {encoder_dim} here")
    try:
        preset = preset_from_dict(
            meta["preset"]["name"], {k: v for k, v in meta["preset"].items() if k != "name"}
        )
    except CognateError as err:
        raise CognateError(f"{path}: {err}") from None

    def build() -> RankingNetwork:
        network = RankingNetwork(preset, encoder_dim)
        for name, make in (parts or {}).items():
            network.add_module(name, make())
        return network

    # Sized on the meta device first (no memory): metadata claiming a huge layer is refused
    # before anything is allocated, since the weights it needs cannot be in the file.
    check_fits(path, build)
    return build()


def load_weights(path: str | Path, model: RankingNetwork) -> None:
    """Load the checkpoint's tensors into ``model`` (exactly its names and shapes, all
    finite), then switch it to eval."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    state = read_state(path, expected, model.preset.name)
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise CognateError(
            f"{path}: weights do not fit preset {model.preset.name}: {str(err).splitlines()[0]}"
        ) from None
    model.eval()


def load_checkpoint(
    path: str | Path, space: Space
) -> tuple[RankingNetwork, ConfigEncoder, dict[str, Any]]:
    """Load a model for ``space``; a model trained on another space or version is an error."""
    meta = read_metadata(path)
    check_space(path, meta, space)
    encoder = make_encoder(space, encoder_target_part(meta))
    model = new_network(path, meta, encoder.dim)
    load_weights(path, model)
    return model, encoder, meta
