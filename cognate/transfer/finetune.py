"""Fine-tuning a pretrained cost model on a few target matrices (docs/architecture.md, Transfer).

The target's matrices are split by matrix (``split_seed``) into train / validation /
test. ``matrices`` of the training split are picked with ``seed``; the model is trained on
all their measured configs with the ranking loss and early-stopped on the validation
split (the best validation epoch is kept); test is scored once, at the end, for the
report. Everything (options, the split, the picked matrices, the source model, the
autoencoder's hash, every epoch's validation metrics) goes into the checkpoint, and so do
the autoencoder's weights and codebook: a fine-tuned model loads with the autoencoder it
was trained with on any machine, whatever that machine's cache holds.

Weights carry over by slot: the featurizer, the predictor and the context and homogeneous
columns of the predictor's first layer come from the pretrained model. The heterogeneous
columns (the target's own knobs, z) are copied only when the source was trained on the
same space (same autoencoder, so the same latent meaning); across targets they start at
zero, even when both latents are 64-d autoencoder codes: the cpu autoencoder's latent
dimensions mean nothing in the spade autoencoder's code, so copied weights would make the
zero-shot model read noise. Zero columns make it ignore the target's own knobs instead.
The normalisation of the homogeneous slot stays the source's when the slot holds loop-nest
images (mappers cognate and random: the same vocabulary), and is recomputed on the target's
configs otherwise (no runtimes are used for it).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from cognate.errors import CognateError
from cognate.model.checkpoint import (
    check_space,
    checkpoint_metadata,
    load_weights,
    new_network,
    read_metadata,
)
from cognate.model.encoding import ConcatEncoder, make_encoder
from cognate.model.fit import Embedder, ProgressFn, encode_all, evaluate, fit, split_matrices
from cognate.model.learned import LearnedModel, register_loader
from cognate.model.portfolio import (
    RANKING_KEY,
    best_of_top,
    choose_portfolio,
    ranking_decision,
)
from cognate.model.predictor import RankingNetwork
from cognate.model.preset import ModelPreset
from cognate.records import MatrixRuns
from cognate.space import Space
from cognate.targets import get_target
from cognate.transfer.autoencoder import (  # also registers kind "ae"
    AESettings,
    AutoencoderEncoder,
    Codebook,
    KnobAutoencoder,
    transfer_settings,
)
from cognate.transfer.mapper import HOMOGENEOUS_DIM, MAPPERS, homogeneous_encoder
from cognate.transfer.schema import LATENTS, validate_transfer
from cognate.transfer.select import PICKERS, SELECTIONS, pick_random
from cognate.util import atomic_path, positive_int

AE_PREFIX = "ae"  # a fine-tuned model's autoencoder weights are saved as ae.*


@dataclass(frozen=True)
class FinetuneOptions:
    """One fine-tuning run; ``None`` fields take configs/transfer.yaml's finetune values."""

    matrices: int | None = None
    seed: int = 0
    freeze_featurizer: bool | None = None
    mapper: str = "cognate"
    latent: str = "ae"
    from_scratch: bool = False
    zero_shot: bool = False
    epochs: int | None = None
    patience: int | None = None
    lr: float | None = None
    val_fraction: float | None = None
    test_fraction: float | None = None
    split_seed: int | None = None
    select: str = "random"  # how the K target matrices are chosen (transfer/select.py)

    def resolved(self) -> FinetuneOptions:
        defaults = transfer_settings().get("finetune") or {}
        values = asdict(self)
        for key, value in values.items():
            if value is None:
                if key not in defaults:
                    raise CognateError(f"configs/transfer.yaml: finetune.{key} is missing")
                values[key] = defaults[key]
        opts = FinetuneOptions(**values)
        opts.check()
        return opts

    def check(self) -> None:
        if self.mapper not in MAPPERS:
            raise CognateError(f"unknown mapper {self.mapper!r}; expected {', '.join(MAPPERS)}")
        if self.latent not in LATENTS:
            raise CognateError(f"unknown latent {self.latent!r}; expected {', '.join(LATENTS)}")
        if self.select not in SELECTIONS:
            raise CognateError(
                f"unknown selection {self.select!r}; expected {', '.join(SELECTIONS)}"
            )
        if self.from_scratch and self.zero_shot:
            raise CognateError("--from-scratch and --zero-shot exclude each other")
        positive_int(self.matrices, "matrices")
        for name in ("val_fraction", "test_fraction"):
            if not 0 < float(getattr(self, name)) < 0.5:
                raise CognateError(f"{name} must be in (0, 0.5)")


def transfer_encoder(space: Space, mapper: str, latent: str, seed: int = 0) -> ConcatEncoder:
    """[homogeneous slot by ``mapper`` || target part ``latent`` (ae | raw)]."""
    target_part = make_encoder(space, latent).parts[1]
    return ConcatEncoder([homogeneous_encoder(space, mapper, seed), target_part])


def split_target(
    keys: Sequence[str], val_fraction: float, test_fraction: float, seed: int
) -> tuple[list[str], list[str], list[str]]:
    """Seeded split of matrix keys into (train, validation, test), by matrix."""
    if len(set(keys)) < 4:
        raise CognateError("fine-tuning needs records of at least 4 target matrices")
    rest, test = split_matrices(keys, test_fraction, seed)
    train, val = split_matrices(rest, val_fraction / (1 - test_fraction), seed)
    return train, val, test


def pick_matrices(train_keys: Sequence[str], k: int, seed: int) -> list[str]:
    """``k`` of the training matrices, drawn with ``seed`` (sorted)."""
    return pick_random(train_keys, k, seed)


class EmbeddingCache:
    """Matrix embeddings of frozen featurizers, keyed by (featurizer weights, matrix).

    Why: with a frozen featurizer an embedding depends only on the featurizer's weights and
    the matrix, yet every fine-tune embeds its validation and test matrices again, and an
    evaluation runs hundreds of fine-tunes over a few featurizers (the pretrained one, one
    random initialisation per seed for target-only). Embedding is most of a fine-tune's time.
    Kept in memory, and in ``directory`` (one safetensors file per featurizer) when given.
    Entries are computed exactly as training computes them (``Embedder``), so a hit is
    bit-identical to a recomputation.
    """

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory
        self._by_weights: dict[str, dict[str, torch.Tensor]] = {}
        self.hits = 0
        self.misses = 0

    def embeddings(
        self, model: RankingNetwork, runs: Sequence[MatrixRuns]
    ) -> dict[str, torch.Tensor]:
        """{run key: embedding} of ``runs`` under ``model``'s featurizer as it is now."""
        weights = featurizer_sha256(model)
        known = self._known(weights)
        missing = [r for r in runs if r.key not in known]
        if missing:
            known.update(Embedder(model).all(missing))
            self._save(weights, known)
        self.misses += len({r.key for r in missing})
        self.hits += len({r.key for r in runs}) - len({r.key for r in missing})
        return {r.key: known[r.key] for r in runs}

    def _known(self, weights: str) -> dict[str, torch.Tensor]:
        if weights not in self._by_weights:
            path = self._path(weights)
            self._by_weights[weights] = load_file(path) if path and path.is_file() else {}
        return self._by_weights[weights]

    def _path(self, weights: str) -> Path | None:
        return self.directory / f"{weights}.safetensors" if self.directory else None

    def _save(self, weights: str, known: dict[str, torch.Tensor]) -> None:
        path = self._path(weights)
        if path is None:
            return
        with atomic_path(path) as tmp:  # a killed run leaves the old file or the new one
            save_file({k: v.contiguous() for k, v in known.items()}, str(tmp))


def featurizer_sha256(model: RankingNetwork) -> str:
    """Hash of the featurizer's architecture and current weights (16 hex)."""
    h = hashlib.sha256(json.dumps(model.preset.featurizer.model_dump(), sort_keys=True).encode())
    for name, tensor in sorted(model.featurizer.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _first_layer(model: RankingNetwork) -> torch.nn.Linear:
    return model.predictor[0]


def _transfer_weights(
    source: RankingNetwork, target: RankingNetwork, source_p_stats: bool, same_space: bool
) -> dict[str, Any]:
    """Copy the source's weights into ``target`` by slot; returns what was copied."""
    state = {k: v for k, v in source.state_dict().items() if not k.startswith("config_")}
    first = "predictor.0.weight"
    state.pop(first)
    target.load_state_dict(state, strict=False)
    context = source.featurizer.dim + 1
    src_w, dst_w = _first_layer(source).weight, _first_layer(target).weight
    copy_z = same_space and src_w.shape[1] == dst_w.shape[1]
    keep = context + HOMOGENEOUS_DIM
    with torch.no_grad():
        dst_w.zero_()
        dst_w[:, :keep] = src_w[:, :keep]
        if copy_z:
            dst_w[:, keep:] = src_w[:, keep:]
        if source_p_stats:
            target.config_mean[:HOMOGENEOUS_DIM] = source.config_mean[:HOMOGENEOUS_DIM]
            target.config_std[:HOMOGENEOUS_DIM] = source.config_std[:HOMOGENEOUS_DIM]
    return {"homogeneous": True, "heterogeneous": copy_z, "source_p_normalisation": source_p_stats}


def _preset_for(preset: ModelPreset, opts: FinetuneOptions) -> ModelPreset:
    # from scratch too: same architecture, same trainable parts, same budget
    featurizer = preset.featurizer.model_copy(update={"trainable": not opts.freeze_featurizer})
    tuned = preset.with_train(epochs=opts.epochs, patience=opts.patience, lr=opts.lr)
    return tuned.model_copy(update={"featurizer": featurizer})


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_pretrained(path: Path) -> tuple[RankingNetwork, dict[str, Any]]:
    """A pretrained model of any target (its own space must still be current)."""
    meta = read_metadata(path)
    source_space = get_target(meta["target"]).space(meta["op"])
    model = LearnedModel.load_file(Path(path), source_space)
    return model.network, model.metadata


@dataclass
class _TargetData:
    """The target's runs split by matrix, encoded with the fine-tuning encoder."""

    encoder: ConcatEncoder
    keys: dict[str, list[str]]  # train, validation, test, finetune (the picked ones)
    fit: list[MatrixRuns]
    val: list[MatrixRuns]
    test: list[MatrixRuns]
    names: dict[str, str]


def matrices_needed(keys: Collection[str], options: FinetuneOptions) -> set[str] | None:
    """The target matrices (of ``keys``, all the target's) a fine-tune with ``options``
    reads: the picked ones, validation and test; None (all) when the picker embeds the
    training matrices. The caller reads only these and passes ``names`` to ``finetune``."""
    opts = options.resolved()
    if opts.select in PICKERS:
        return None
    train, val, test = split_target(
        list(keys), opts.val_fraction, opts.test_fraction, opts.split_seed
    )
    return {*pick_matrices(train, opts.matrices, opts.seed), *val, *test}


def _prepare(
    runs: Sequence[MatrixRuns],
    space: Space,
    opts: FinetuneOptions,
    embed: Embeddings | None = None,
    names: Mapping[str, str] | None = None,
) -> _TargetData:
    """Split the target's matrices, pick the fine-tuning ones, encode every split.
    ``embed``: the source model's embeddings, which the ``select`` pickers other than random use.
    ``names``: {key: name} of all the target's matrices when ``runs`` holds only the ones
    ``matrices_needed`` lists (the split is drawn over all of them)."""
    encoder = transfer_encoder(space, opts.mapper, opts.latent, opts.seed)
    names = dict(names) if names is not None else {r.key: r.matrix.name for r in runs}
    train_keys, val_keys, test_keys = split_target(
        list(names), opts.val_fraction, opts.test_fraction, opts.split_seed
    )
    if opts.select in PICKERS:
        train_set = set(train_keys)
        train_runs = list({r.key: r for r in runs if r.key in train_set}.values())
        picker = PICKERS[opts.select]
        picked = picker(train_keys, opts.matrices, opts.seed, embed(train_runs))
    else:
        picked = pick_matrices(train_keys, opts.matrices, opts.seed)
    keys = {"train": train_keys, "validation": val_keys, "test": test_keys, "finetune": picked}
    data = _TargetData(
        encoder,
        keys,
        fit=[r for r in runs if r.key in set(picked)],
        val=[r for r in runs if r.key in set(val_keys)],
        test=[r for r in runs if r.key in set(test_keys)],
        names=names,
    )
    missing = {*picked, *val_keys, *test_keys} - {r.key for r in runs}
    if missing:
        raise CognateError(f"fine-tuning: {len(missing)} needed matrices are not among the runs")
    for run in runs:
        run.features = None  # encodings of another encoder must not leak in
    encode_all([*data.fit, *data.val, *data.test], encoder)
    return data


def _fit_best(
    source: RankingNetwork,
    data: _TargetData,
    opts: FinetuneOptions,
    progress: ProgressFn | None,
    cache: EmbeddingCache | None = None,
    same_space: bool = False,
) -> tuple[RankingNetwork, dict[str, Any], list[dict[str, float]], dict[str, float]]:
    """Build the target model, carry the source's weights over, fine-tune, keep the best
    validation epoch. Returns (model, copied, history, best)."""
    torch.manual_seed(opts.seed)
    preset = _preset_for(source.preset, opts)
    model = RankingNetwork(preset, data.encoder.dim)
    model.set_normalisation(torch.cat([r.features for r in data.fit]))
    copied: dict[str, Any] = {}
    if not opts.from_scratch:
        copied = _transfer_weights(source, model, opts.mapper != "none", same_space)
    start = copy.deepcopy(model.state_dict())
    embed = _frozen_embeddings(model, opts, cache)
    if opts.zero_shot:
        model.eval()
        history = [{"epoch": 0, **evaluate(model, data.val, embed(data.val))}]
    else:
        history = fit(model, data.fit, data.val, opts.seed, progress, embed)
    # fit keeps its best epoch >= 1; a transferred model may also stop at epoch 0 (no
    # step taken) when no fine-tuning epoch beats the pretrained model on validation.
    may_stop_at_0 = opts.zero_shot or not opts.from_scratch
    scored = history if may_stop_at_0 else history[1:]
    best = max(scored, key=lambda h: _finite(h[preset.train.early_stop_metric]))
    if best["epoch"] == 0 and not opts.zero_shot:
        model.load_state_dict(start)
    model.eval()
    return model, copied, history, best


Embeddings = Callable[[Sequence[MatrixRuns]], dict[str, torch.Tensor]]


def _source_embeddings(source: RankingNetwork, cache: EmbeddingCache | None) -> Embeddings:
    """runs -> {key: embedding} under the pretrained featurizer (what active selection uses)."""
    if cache is not None:
        return lambda runs: cache.embeddings(source, runs)
    return lambda runs: Embedder(source).all(runs)


def _frozen_embeddings(
    model: RankingNetwork, opts: FinetuneOptions, cache: EmbeddingCache | None
) -> Embeddings:
    """runs -> {key: embedding}: from ``cache`` while the featurizer stays frozen, else
    computed (the torch backend, as in training: MinkowskiEngine's threads crawl on shared
    cores)."""
    if cache is not None and opts.freeze_featurizer:
        return lambda runs: cache.embeddings(model, runs)
    return lambda runs: Embedder(model).all(runs)


def finetune(
    pretrained: Path,
    runs: Sequence[MatrixRuns],
    space: Space,
    options: FinetuneOptions,
    progress: ProgressFn | None = None,
    cache: EmbeddingCache | None = None,
    names: Mapping[str, str] | None = None,
) -> LearnedModel:
    """Adapt the model at ``pretrained`` to ``space`` with ``runs`` (the target's records).

    The returned ``LearnedModel`` carries its autoencoder (when the latent is ``ae``) as
    submodule ``ae``, so the checkpoint its ``save`` writes is self-contained. ``cache``
    reuses embeddings across calls while the featurizer is frozen (same numbers).
    ``names`` ({key: name} of every target matrix): ``runs`` then need only hold the
    matrices ``matrices_needed`` lists, so the others are never read."""
    opts = options.resolved()
    source, source_meta = load_pretrained(pretrained)
    data = _prepare(runs, space, opts, _source_embeddings(source, cache), names)
    same_space = (source_meta.get("space") or {}).get("name") == space.name
    model, copied, history, best = _fit_best(source, data, opts, progress, cache, same_space)
    test_metrics = evaluate(model, data.test, _frozen_embeddings(model, opts, cache)(data.test))
    transfer = {
        "options": asdict(opts),
        "copied": copied,
        **_ship_autoencoder(model, data.encoder),
        "source": _source_record(Path(pretrained), source_meta),
    }
    metadata = {
        **checkpoint_metadata(model, space, data.encoder, opts.seed),
        "transfer": transfer,
        "split": {"seed": opts.split_seed, **_named_keys(data)},
        "metrics": {
            "best_epoch": best["epoch"],
            "best": best,
            "history": history,
            "test": test_metrics,
        },
    }
    return LearnedModel(model, data.encoder, metadata, space)


# The shapes and widths whose config encodings set a zero-shot model's normalisation: the
# square sizes of the corpus (2^10-2^20 rows) and the widths tune offers. Encodings only
# (a config's knobs mapped into the loop vocabulary at that size): no runtime is read.
ZERO_SHOT_SIZES: tuple[int, ...] = (1 << 10, 1 << 13, 1 << 16, 1 << 20)
ZERO_SHOT_WIDTHS: tuple[int, ...] = (32, 64, 128, 256)


def zero_shot_model(pretrained: Path, space: Space, seed: int = 0) -> LearnedModel:
    """The model at ``pretrained`` carried to ``space`` with no target measurement at all:
    its weights by slot through the config mapper (``_transfer_weights``), the target's own
    knobs through the target's autoencoder (trained on the space, without runtimes), and
    the normalisation of the target's slot from the encodings of the space's configs at the
    corpus' sizes and widths. What a target with no records (a GPU nobody measured) can
    honestly ship: its metadata says zero-shot, and ``tune`` says so."""
    opts = FinetuneOptions(zero_shot=True, seed=seed).resolved()
    source, source_meta = load_pretrained(pretrained)
    encoder = transfer_encoder(space, opts.mapper, opts.latent, opts.seed)
    torch.manual_seed(opts.seed)
    model = RankingNetwork(_preset_for(source.preset, opts), encoder.dim)
    model.set_normalisation(_space_encodings(space, encoder))
    same_space = (source_meta.get("space") or {}).get("name") == space.name
    copied = _transfer_weights(source, model, opts.mapper != "none", same_space)
    model.eval()
    options = {**asdict(opts), "matrices": 0}  # no target matrix was read
    transfer = {
        "options": options,
        "copied": copied,
        "without_records": True,
        **_ship_autoencoder(model, encoder),
        "source": _source_record(Path(pretrained), source_meta),
    }
    metadata = {**checkpoint_metadata(model, space, encoder, opts.seed), "transfer": transfer}
    return LearnedModel(model, encoder, metadata, space)


def _space_encodings(space: Space, encoder: ConcatEncoder) -> torch.Tensor:
    """Encodings of the space's candidates at ``ZERO_SHOT_SIZES`` x ``ZERO_SHOT_WIDTHS``."""
    parts = []
    for size in ZERO_SHOT_SIZES:
        configs = space.candidates(4096, 0, (size, size))
        parts += [encoder.encode(configs, (size, size), w) for w in ZERO_SHOT_WIDTHS]
    return torch.cat(parts)


def choose_ranking(model: LearnedModel, runs: Sequence[MatrixRuns], k: int = 5) -> dict[str, Any]:
    """Choose, on the fine-tuned ``model``'s validation matrices, between its learned
    ranking, ``fixed-K`` (the greedy fixed set of its K fine-tuning matrices, in greedy
    order) and their blend, as ``cognate evaluate``'s "TL + K portfolio" row does
    (``choose_portfolio``). Stores the portfolio and the decision with each option's
    validation figures (``ranking_decision``) in the metadata; returns the decision.
    ``runs`` must hold the fine-tuning and validation matrices (test ones are not read)."""
    split = model.metadata["split"]
    fit_keys = {m["sha256"] for m in split["finetune"]}
    val_keys = {m["sha256"] for m in split["validation"]}
    fit_runs = [r for r in runs if r.key in fit_keys]
    val_runs = [r for r in runs if r.key in val_keys and r.baseline is not None]
    if not fit_runs or not val_runs:
        raise CognateError(
            "choosing the ranking needs records of the fine-tuning and validation matrices "
            f"(found {len(fit_runs)} and {len(val_runs)} groups)"
        )
    model.set_portfolio(None)  # the learned ranking is scored on its own
    entry = choose_portfolio(model, fit_runs, val_runs, k)
    greedy_from = f"greedy set chosen on the {len(fit_keys)} fine-tuning matrices"
    entry["greedy_from"] = greedy_from
    decision = ranking_decision(entry, val_runs, greedy_from)
    model.set_portfolio(entry)
    model.metadata[RANKING_KEY] = decision
    return decision


def score_chosen_on_test(model: LearnedModel, runs: Sequence[MatrixRuns]) -> dict[str, Any]:
    """The shipped ranking (the model with the portfolio ``choose_ranking`` gave it) scored
    once on its test matrices, after the choice: top-1 and best of top-k geomean speedups
    over the baseline and the oracle. Stored as ``ranking.test``; nothing reads it to choose."""
    from cognate.stats import geomean

    decision = model.metadata[RANKING_KEY]
    test_keys = {m["sha256"] for m in model.metadata["split"]["test"]}
    picks, oracle = [], []
    for run in runs:
        if run.key not in test_keys or run.baseline is None:
            continue
        order = model.order(run.configs, model.predict(run.matrix, run.configs, run.width))
        picks.append(best_of_top(run, order, decision["k"]))
        oracle.append(float(run.runtimes[run.baseline] / run.runtimes.min()))
    if not picks:
        return {}
    test = {
        "top1": geomean([p[0] for p in picks]),
        "best_of_k": geomean([p[1] for p in picks]),
        "oracle": geomean(oracle),
        "matrices": len({r.key for r in runs if r.key in test_keys}),
    }
    decision["test"] = test
    return test


def _named_keys(data: _TargetData) -> dict[str, list[dict[str, str]]]:
    return {
        split: [{"sha256": k, "name": data.names[k]} for k in keys]
        for split, keys in data.keys.items()
    }


def _source_record(pretrained: Path, source_meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "path": str(pretrained),
        "sha256": _file_sha256(pretrained),
        "target": source_meta["target"],
        "op": source_meta["op"],
        "space": source_meta["space"],
        "encoder": source_meta["encoder"],
        "metrics": source_meta.get("metrics", {}).get("best"),
    }


def _ship_autoencoder(model: RankingNetwork, encoder: ConcatEncoder) -> dict[str, Any]:
    """Attach the autoencoder to ``model`` (its weights are saved under ``ae.``) and return
    the metadata that rebuilds it: without them a model loaded on another machine would
    silently encode with whatever autoencoder that machine's cache holds or retrains."""
    part = encoder.parts[1]
    if not isinstance(part, AutoencoderEncoder):
        return {"autoencoder_sha256": None, "autoencoder": None}
    part.model.requires_grad_(False)  # fine-tuning is over; it is shipped, not trained
    model.add_module(AE_PREFIX, part.model)
    shipped = {
        "settings": asdict(part.settings),
        "columns": [c.tolist() for c in part.codebook.columns],
    }
    return {"autoencoder_sha256": part.sha256, "autoencoder": shipped}


def _finite(value: float) -> float:
    return -float("inf") if value != value else value  # NaN sorts last


def load_transfer_model(
    path: str | Path, space: Space
) -> tuple[RankingNetwork, ConcatEncoder, dict[str, Any]]:
    """Load a fine-tuned model with the encoder it was trained with (mapper and latent).

    The autoencoder comes from the file itself when it ships one; an older file without
    one rebuilds it from the cache, which must then be the one it was fine-tuned with."""
    meta = read_metadata(path)
    transfer = validate_transfer(path, meta)  # before any of it is used
    check_space(path, meta, space)
    if transfer.get("autoencoder"):
        model, encoder = _load_shipped(path, meta, space)
    else:
        opts = transfer["options"]
        encoder = transfer_encoder(space, opts["mapper"], opts["latent"], opts["seed"])
        _check_autoencoder(path, transfer, encoder)
        model = new_network(path, meta, encoder.dim)
        load_weights(path, model)
    return model, encoder, meta


def _load_shipped(
    path: str | Path, meta: dict[str, Any], space: Space
) -> tuple[RankingNetwork, ConcatEncoder]:
    """Model and encoder of a file that ships its autoencoder (weights ``ae.*``)."""
    opts, shipped = meta["transfer"]["options"], meta["transfer"]["autoencoder"]
    try:
        settings = AESettings(**shipped["settings"])
        codebook = Codebook(shipped["columns"])
    except (TypeError, KeyError, ValueError) as err:
        raise CognateError(f"{path}: corrupt autoencoder metadata: {err}") from None
    homogeneous = homogeneous_encoder(space, opts["mapper"], opts["seed"])

    def autoencoder() -> KnobAutoencoder:
        return KnobAutoencoder(codebook.sizes, settings.latent, settings.hidden)

    # sized together with the network on the meta device, before either is allocated
    model = new_network(path, meta, homogeneous.dim + settings.latent, {AE_PREFIX: autoencoder})
    ae = model.get_submodule(AE_PREFIX)
    load_weights(path, model)  # the autoencoder's weights too, strictly
    encoder = ConcatEncoder(
        [homogeneous, AutoencoderEncoder.embedded(space, settings, ae, codebook)]
    )
    _check_autoencoder(path, meta["transfer"], encoder)
    return model, encoder


def _check_autoencoder(path: str | Path, transfer: dict[str, Any], encoder: ConcatEncoder) -> None:
    """The autoencoder in use must be the one the model was fine-tuned with (by sha256)."""
    expected = transfer.get("autoencoder_sha256")
    got = getattr(encoder.parts[1], "sha256", None)
    if expected and got != expected:
        raise CognateError(
            f"{path}: model was fine-tuned with autoencoder {expected[:12]}, but the one "
            f"here is {str(got)[:12]}; fine-tune it again"
        )


# the cost-model role loads fine-tuned checkpoints through this (cognate.model.cost_model)
register_loader("transfer", load_transfer_model)

__all__ = [
    "choose_ranking",
    "score_chosen_on_test",
    "EmbeddingCache",
    "FinetuneOptions",
    "featurizer_sha256",
    "finetune",
    "load_pretrained",
    "load_transfer_model",
    "matrices_needed",
    "pick_matrices",
    "split_target",
    "transfer_encoder",
    "zero_shot_model",
]
