"""Fitting a ranking network to measured runtimes: the split by matrix, the epochs, the
validation scores. ``train`` (a fresh model) and ``LearnedModel.update`` (more data) use it."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

from cognate.model.encoding import ConfigEncoder, encode_on
from cognate.model.featurizer import matrix_points
from cognate.model.predictor import RankingNetwork, pairwise_accuracy, ranking_loss
from cognate.model.preset import ModelPreset
from cognate.model.sparseconv import KernelMap, PointSet
from cognate.records import MatrixRuns
from cognate.stats import geomean


def split_matrices(
    keys: Sequence[str], val_fraction: float, seed: int
) -> tuple[list[str], list[str]]:
    """Seeded split of distinct matrix keys into (train, validation); both non-empty if >= 2."""
    distinct = sorted(set(keys))
    order = np.random.default_rng(seed).permutation(len(distinct))
    n_val = min(max(1, round(val_fraction * len(distinct))), len(distinct) - 1)
    val = sorted(distinct[i] for i in order[:n_val])
    return sorted(set(distinct) - set(val)), val


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
        "top1": geomean(top1),
        "top5": geomean(top5),
        "oracle": geomean(oracle),
    }
    metrics["top5_of_oracle"] = metrics["top5"] / metrics["oracle"]
    return metrics


# (epoch, step, steps per epoch, validation metrics at the end of an epoch else None)
ProgressFn = Callable[[int, int, int, dict[str, float] | None], None]


def encode_all(runs: Sequence[MatrixRuns], encoder: ConfigEncoder) -> None:
    """Each run's raw encodings (an encoder with a host part reads the run's host)."""
    for run in runs:
        if run.features is None:
            run.features = encode_on(encoder, run.configs, run.matrix.shape, run.width, run.host)


def early_stop_value(entry: dict[str, float], preset: ModelPreset) -> float:
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
        value = early_stop_value(history[-1], model.preset)
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
