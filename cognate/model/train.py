"""Training a fresh cost model on measured runtimes (``cognate pretrain``).

Data comes in ``MatrixRuns`` (``cognate.records``): all ok-measured configs of one matrix at
one dense width. The split is by matrix (every width of a matrix lands on the same side),
seeded; the epochs and the validation scores are ``cognate.model.fit``'s, the checkpoint's
metadata ``cognate.model.checkpoint``'s. Everything random draws from the seed, so a run is
reproducible on the same machine.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from cognate.errors import CognateError
from cognate.model.checkpoint import checkpoint_metadata
from cognate.model.encoding import (
    ConfigEncoder,
    hosts_of_runs,
    make_encoder,
    neutral_host_weights,
)
from cognate.model.fit import (
    ProgressFn,
    early_stop_value,
    encode_all,
    evaluate,
    fit,
    split_matrices,
)
from cognate.model.learned import LearnedModel
from cognate.model.predictor import RankingNetwork
from cognate.model.preset import ModelPreset
from cognate.records import MatrixRuns
from cognate.space import Space


def train(
    runs: Sequence[MatrixRuns],
    space: Space,
    preset: ModelPreset,
    seed: int = 0,
    encoder: ConfigEncoder | None = None,
    progress: ProgressFn | None = None,
    held_out: Sequence[MatrixRuns] = (),
    featurizer_from: RankingNetwork | None = None,
) -> LearnedModel:
    """Train a fresh cost model on ``runs``; returns the best-validation model (its network,
    encoder and metadata: ``save`` writes the checkpoint).

    Fills in each run's ``features`` (its configs' encodings) when absent. ``held_out``
    runs (matrices outside ``runs``) never touch training or epoch selection: the chosen
    model is scored on them once, into the metadata's ``split.test`` / ``metrics.test``.
    ``featurizer_from``: take that network's featurizer (architecture and weights), frozen,
    and train the predictor only (a new encoding or new hosts' records in minutes: each
    matrix is embedded once).
    """
    if len({r.key for r in runs}) < 2:
        raise CognateError("training needs measured configs of at least 2 matrices")
    if featurizer_from is not None:
        preset = frozen_featurizer_preset(preset, featurizer_from)
    encoder = encoder or make_encoder(space)
    encode_all(runs, encoder)
    train_keys, val_keys = split_matrices([r.key for r in runs], preset.train.val_fraction, seed)
    train_runs = [r for r in runs if r.key in set(train_keys)]
    val_runs = [r for r in runs if r.key in set(val_keys)]

    torch.manual_seed(seed)
    model = RankingNetwork(preset, encoder.dim)
    if featurizer_from is not None:
        model.featurizer.load_state_dict(featurizer_from.featurizer.state_dict())
    neutral_host_weights(model, encoder)
    model.set_normalisation(torch.cat([r.features for r in train_runs]))
    frozen = _embedded_once(model) if featurizer_from is not None else None
    history = fit(model, train_runs, val_runs, seed, progress, frozen)
    best = max(history[1:], key=lambda h: early_stop_value(h, preset))
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
    if encoder.uses_host:
        metadata["hosts"] = hosts_of_runs(runs)
    if held_out:
        _score_held_out(model, held_out, encoder, metadata)
    return LearnedModel(model, encoder, metadata, space)


def _embedded_once(model: RankingNetwork):
    """runs -> {key: embedding} for a frozen featurizer, each matrix embedded once with the
    fastest backend (MinkowskiEngine where installed: the same numbers as the torch one)."""
    cache: dict[str, torch.Tensor] = {}

    def embeddings(runs: Sequence[MatrixRuns]) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            for run in runs:
                if run.key not in cache:
                    cache[run.key] = model.featurizer.embed(run.matrix).clone()
        return {r.key: cache[r.key] for r in runs}

    return embeddings


def frozen_featurizer_preset(preset: ModelPreset, source: RankingNetwork) -> ModelPreset:
    """``preset`` with ``source``'s featurizer architecture, frozen (its weights are loaded
    by the caller): the predictor and training settings stay ``preset``'s."""
    featurizer = source.preset.featurizer.model_copy(update={"trainable": False})
    return preset.model_copy(update={"featurizer": featurizer})


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


# --- checkpoints ---------------------------------------------------------------------------


# --- what the validation figures can and cannot say (pretrain's and finetune's messages) ---

METRIC_WORDS = {"pairwise_accuracy": "pairwise accuracy", "top1": "top-1", "top5": "top-5"}


def top1_note(history: Sequence[dict[str, float]], kept: int, metric: str) -> str:
    """When an epoch other than the kept one had a higher validation top-1: which, and why it
    was not kept (the epoch is chosen on ``metric``, the preset's ``early_stop_metric``);
    empty otherwise. ``history[e]`` is epoch ``e`` (0: before training)."""
    if metric == "top1" or not history:
        return ""
    scored = [(e, h.get("top1", float("nan"))) for e, h in enumerate(history) if e > 0]
    finite = [(e, t) for e, t in scored if t == t]  # NaN: no baseline measured
    if not finite:
        return ""
    epoch, top1 = max(finite, key=lambda item: item[1])
    kept_top1 = history[kept].get("top1", float("nan"))
    if epoch == kept or not top1 > kept_top1:
        return ""
    words = METRIC_WORDS.get(metric, metric)
    return (
        f"; epoch {epoch} had a higher top-1 ({top1:.3f}x vs {kept_top1:.3f}x), but epochs are "
        f"chosen on {words} (the preset's early_stop_metric), which weighs the order of every "
        "measured config, not only the first: one matrix's top-1 moves with one config"
    )


def validation_caveat(runs: Sequence[MatrixRuns], validation: set[str]) -> str:
    """A line when the validation split cannot tell configs apart (every validation matrix
    has one measured config, e.g. only the baseline): its pairwise accuracy is undefined and
    top-1 = top-5 = oracle = 1.000x whatever the model. Empty when it can."""
    val = [r for r in runs if r.key in validation]
    if not val or any(len(r.configs) > 1 for r in val):
        return ""
    matrices = len({r.key for r in val})
    return (
        f"validation cannot discriminate: each of its {matrices} matrices has one measured "
        "config, so pairwise accuracy is undefined and top-1 = top-5 = oracle = 1.000x "
        "whatever the model; the epoch kept is no better than any other. Measure several "
        "configs per matrix (`cognate collect --configs N`) for a validation that compares"
    )
