"""Fine-tuning a pretrained cost model on a few target matrices (DESIGN 7, issue 6).

The target's matrices are split by matrix (``split_seed``) into train / validation /
test. ``matrices`` of the training split are picked with ``seed``; the model is trained on
all their measured configs with the ranking loss and early-stopped on the validation
split (the best validation epoch is kept); test is scored once, at the end, for the
report. Everything (options, the split, the picked matrices, the source model, the
autoencoder's hash, every epoch's validation metrics) goes into the checkpoint.

Weights carry over by slot: the featurizer, the predictor and the context and homogeneous
columns of the predictor's first layer come from the pretrained model. The heterogeneous
columns are copied only when the widths agree (an autoencoder latent on both sides);
otherwise they start at zero, so the zero-shot model ignores the target's own knobs rather
than reading noise. The normalisation of the homogeneous slot stays the source's when the
slot holds loop-nest images (mappers cognate and random: the same vocabulary), and is
recomputed on the target's configs otherwise (no runtimes are used for it).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cognate.errors import CognateError
from cognate.model.encoding import ConcatEncoder, make_encoder
from cognate.model.predictor import CostModel
from cognate.model.preset import ModelPreset
from cognate.model.train import (
    CHECKPOINT_FORMAT,
    MatrixRuns,
    ProgressFn,
    _Embedder,
    _encode_all,
    _fit,
    evaluate,
    load_checkpoint,
    read_metadata,
    split_matrices,
)
from cognate.space import Space
from cognate.targets import get_target
from cognate.transfer.autoencoder import transfer_settings  # also registers kind "ae"
from cognate.transfer.mapper import HOMOGENEOUS_DIM, MAPPERS, homogeneous_encoder

LATENTS: tuple[str, ...] = ("ae", "raw")


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
        if self.from_scratch and self.zero_shot:
            raise CognateError("--from-scratch and --zero-shot exclude each other")
        if not (isinstance(self.matrices, int) and self.matrices >= 1):
            raise CognateError(f"matrices must be a positive integer, got {self.matrices!r}")
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
    if k > len(train_keys):
        raise CognateError(
            f"--matrices {k}: the target training split has only {len(train_keys)} matrices"
        )
    chosen = np.random.default_rng(seed).choice(len(train_keys), k, replace=False)
    return sorted(train_keys[int(i)] for i in chosen)


def _first_layer(model: CostModel) -> torch.nn.Linear:
    return model.predictor[0]


def _transfer_weights(source: CostModel, target: CostModel, source_p_stats: bool) -> dict[str, Any]:
    """Copy the source's weights into ``target`` by slot; returns what was copied."""
    state = {k: v for k, v in source.state_dict().items() if not k.startswith("config_")}
    first = "predictor.0.weight"
    state.pop(first)
    target.load_state_dict(state, strict=False)
    context = source.featurizer.dim + 1
    src_w, dst_w = _first_layer(source).weight, _first_layer(target).weight
    copy_z = src_w.shape[1] == dst_w.shape[1]
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


@dataclass
class FinetuneResult:
    model: CostModel
    encoder: ConcatEncoder
    metadata: dict[str, Any]


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_pretrained(path: Path) -> tuple[CostModel, dict[str, Any]]:
    """A pretrained model of any target (its own space must still be current)."""
    meta = read_metadata(path)
    source_space = get_target(meta["target"]).space(meta["op"])
    model, _, meta = load_checkpoint(path, source_space)
    return model, meta


def finetune(
    pretrained: Path,
    runs: Sequence[MatrixRuns],
    space: Space,
    options: FinetuneOptions,
    progress: ProgressFn | None = None,
) -> FinetuneResult:
    """Adapt the model at ``pretrained`` to ``space`` with ``runs`` (the target's records)."""
    opts = options.resolved()
    source, source_meta = load_pretrained(pretrained)
    encoder = transfer_encoder(space, opts.mapper, opts.latent, opts.seed)
    train_keys, val_keys, test_keys = split_target(
        [r.key for r in runs], opts.val_fraction, opts.test_fraction, opts.split_seed
    )
    picked = pick_matrices(train_keys, opts.matrices, opts.seed)
    fit_runs = [r for r in runs if r.key in set(picked)]
    val_runs = [r for r in runs if r.key in set(val_keys)]
    test_runs = [r for r in runs if r.key in set(test_keys)]
    for run in runs:
        run.features = None  # encodings of another encoder must not leak in
    _encode_all([*fit_runs, *val_runs, *test_runs], encoder)

    torch.manual_seed(opts.seed)
    preset = _preset_for(source.preset, opts)
    model = CostModel(preset, encoder.dim)
    model.set_normalisation(torch.cat([r.features for r in fit_runs]))
    copied: dict[str, Any] = {}
    if not opts.from_scratch:
        copied = _transfer_weights(source, model, opts.mapper != "none")
    if opts.zero_shot:
        model.eval()
        history = [{"epoch": 0, **evaluate(model, val_runs, _Embedder(model).all(val_runs))}]
    else:
        start = copy.deepcopy(model.state_dict())
        history = _fit(model, fit_runs, val_runs, opts.seed, progress)
    # _fit keeps its best epoch >= 1; a transferred model may also stop at epoch 0 (no
    # step taken) when no fine-tuning epoch beats the pretrained model on validation.
    may_stop_at_0 = opts.zero_shot or not opts.from_scratch
    scored = history if may_stop_at_0 else history[1:]
    best = max(scored, key=lambda h: _finite(h[preset.train.early_stop_metric]))
    if best["epoch"] == 0 and not opts.zero_shot:
        model.load_state_dict(start)
    model.eval()
    # the torch backend, as in training (MinkowskiEngine's threads crawl on shared cores)
    test_metrics = evaluate(model, test_runs, _Embedder(model).all(test_runs))
    names = {r.key: r.matrix.name for r in runs}
    metadata = {
        "format": CHECKPOINT_FORMAT,
        "preset": preset.model_dump(),
        "target": space.target,
        "op": space.op,
        "space": {"name": space.name, "version": space.version},
        "encoder": {"kind": encoder.kind, "dim": encoder.dim},
        "normalisation": {
            "config_mean": model.config_mean.tolist(),
            "config_std": model.config_std.tolist(),
        },
        "seed": opts.seed,
        "transfer": {
            "options": asdict(opts),
            "copied": copied,
            "autoencoder_sha256": getattr(encoder.parts[1], "sha256", None),
            "source": {
                "path": str(pretrained),
                "sha256": _file_sha256(Path(pretrained)),
                "target": source_meta["target"],
                "op": source_meta["op"],
                "space": source_meta["space"],
                "encoder": source_meta["encoder"],
                "metrics": source_meta.get("metrics", {}).get("best"),
            },
        },
        "split": {
            "seed": opts.split_seed,
            "train": [{"sha256": k, "name": names[k]} for k in train_keys],
            "validation": [{"sha256": k, "name": names[k]} for k in val_keys],
            "test": [{"sha256": k, "name": names[k]} for k in test_keys],
            "finetune": [{"sha256": k, "name": names[k]} for k in picked],
        },
        "metrics": {
            "best_epoch": best["epoch"],
            "best": best,
            "history": history,
            "test": test_metrics,
        },
    }
    return FinetuneResult(model, encoder, metadata)


def _finite(value: float) -> float:
    return -float("inf") if value != value else value  # NaN sorts last


def load_transfer_model(
    path: str | Path, space: Space
) -> tuple[CostModel, ConcatEncoder, dict[str, Any]]:
    """Load a fine-tuned model with the encoder it was trained with (mapper and latent)."""
    from safetensors import safe_open

    from cognate.model.preset import preset_from_dict

    meta = read_metadata(path)
    if "transfer" not in meta:
        raise CognateError(f"{path}: not a fine-tuned model (no transfer metadata)")
    trained = meta["space"]
    if (trained["name"], trained["version"]) != (space.name, space.version):
        raise CognateError(
            f"{path}: model was fine-tuned for {trained['name']} version {trained['version']}, "
            f"not {space.name} version {space.version}"
        )
    opts = meta["transfer"]["options"]
    encoder = transfer_encoder(space, opts["mapper"], opts["latent"], opts["seed"])
    if encoder.dim != meta["encoder"]["dim"]:
        raise CognateError(f"{path}: encoder width {meta['encoder']['dim']} != {encoder.dim}")
    preset_data = {k: v for k, v in meta["preset"].items() if k != "name"}
    model = CostModel(preset_from_dict(meta["preset"]["name"], preset_data), encoder.dim)
    with safe_open(str(path), framework="pt") as f:
        model.load_state_dict({k: f.get_tensor(k) for k in f.keys()})  # noqa: SIM118
    model.eval()
    return model, encoder, meta


__all__ = [
    "FinetuneOptions",
    "FinetuneResult",
    "finetune",
    "load_pretrained",
    "load_transfer_model",
    "pick_matrices",
    "split_target",
    "transfer_encoder",
]
