"""``cognate pretrain``: train the cost model on a store's ok records of one target and op."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from cognate.cli.options import TARGET, db_option
from cognate.errors import CognateError
from cognate.records import load_record_matrix, load_runs  # noqa: F401 - re-exported
from cognate.targets import OPS

if TYPE_CHECKING:  # torch and pandas load only when a command runs: `cognate --help` stays fast
    from cognate.model.learned import LearnedModel
    from cognate.records import MatrixRuns
    from cognate.space import Space


def register(main: click.Group, data: click.Group) -> None:
    main.add_command(pretrain)


@click.command()
@db_option("with the training records")
@click.option("--target", type=TARGET, required=True)
@click.option("--op", type=click.Choice(OPS), required=True)
@click.option("--preset", default="waco", show_default=True, help="Preset of configs/model.yaml.")
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Override the preset.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="torch threads (default: torch's). On a busy machine 1 is often fastest.",
)
@click.option(
    "--hold-out",
    type=click.FloatRange(0, 0.5, max_open=True),
    default=0.0,
    show_default=True,
    help="Fraction of the matrices (seeded by --seed, split by matrix as `cognate evaluate` "
    "splits its test set) never used for training or epoch selection; scored once at the end "
    "and named in the model's metadata.",
)
@click.option(
    "--max-nnz",
    type=click.IntRange(min=1),
    default=None,
    help="Leave matrices above this many nonzeros out of the model's data (training, "
    "validation and --hold-out): training the featurizer holds every layer's gathered inputs "
    "for the backward pass, ~2.3 KB per nonzero with the waco preset (11 GB at 4.7M nnz).",
)
@click.option(
    "--encoding",
    default=None,
    metavar="PART[+host]",
    help="The configs' target part: raw (the space's knobs) or knobs (those and the kernel's "
    "vector and schedule knobs), with +host for the measuring host's vector width, caches and "
    "cores (one model for several hosts). Default: knobs+host for real machines (cpu, gpu), "
    "raw for simulators.",
)
@click.option(
    "--featurizer-from",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="MODEL",
    help="Take MODEL's featurizer (architecture and weights), frozen, and train only the "
    "predictor: each matrix is embedded once, so new records or a new --encoding train in "
    "minutes, not hours.",
)
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Model file.")
def pretrain(
    db: Path,
    target: str,
    op: str,
    preset: str,
    epochs: int | None,
    seed: int,
    threads: int | None,
    hold_out: float,
    max_nnz: int | None,
    encoding: str | None,
    featurizer_from: Path | None,
    output: Path,
) -> None:
    """Train a cost model (featurizer + ranking predictor) on measured runtimes.

    Matrices are split into train and validation by a seeded draw; the model of the best
    validation epoch is written as safetensors with its metadata. Scores: lower = faster.
    """
    import torch

    from cognate.model.encoding import make_encoder
    from cognate.model.preset import load_preset, preset_names
    from cognate.model.train import train, validation_caveat
    from cognate.progress import EpochReporter, plural
    from cognate.records import read_runs, record_frame
    from cognate.targets import get_target

    if preset not in preset_names():
        raise CognateError(
            f"unknown preset {preset!r}; expected one of {', '.join(preset_names())}"
        )
    spec = load_preset(preset).with_train(epochs=epochs)
    if threads:
        torch.set_num_threads(threads)
    space = get_target(target).space(op)
    if encoding is None:
        encoding = "knobs+host" if get_target(target).exclusive else "raw"
    encoder = make_encoder(space, encoding)
    source = _featurizer_source(featurizer_from, space) if featurizer_from else None
    console = Console(stderr=True, soft_wrap=True)  # a pipe gets whole lines
    frame = record_frame(db, space, max_nnz)
    runs, held_out = _hold_out(read_runs(frame, space), hold_out, seed)
    n_matrices = len({r.key for r in runs})
    console.print(
        f"{n_matrices} matrices, {len(runs)} (matrix, width) groups, "
        f"{sum(len(r.configs) for r in runs)} configs; preset {preset}, seed {seed}, "
        f"encoding {encoder.kind}" + (f"; matrices above {max_nnz} nnz left out" if max_nnz else "")
    )
    console.print(
        f"training up to {plural(spec.train.epochs, 'epoch')} "
        f"(early stop after {spec.train.patience} "
        "without a better validation score; --epochs to change), a line per epoch; "
        "epoch 0 scores the untrained model on the validation split first"
    )
    progress = EpochReporter(spec.train.epochs)
    model = train(
        runs,
        space,
        spec,
        seed=seed,
        encoder=encoder,
        progress=progress,
        held_out=held_out,
        featurizer_from=source.network if source else None,
    )
    if source is not None:  # the featurizer's own training matrices: not held out from it
        model.metadata["featurizer_from"] = {
            "model": str(featurizer_from),
            "train": source.metadata.get("split", {}).get("train", []),
        }
    if max_nnz is not None:
        model.metadata["max_nnz"] = max_nnz
    model.save(output)
    _print_summary(console, model.metadata, output, spec.train.early_stop_metric)
    validation = {m["sha256"] for m in model.metadata["split"]["validation"]}
    caveat = validation_caveat(runs, validation)
    if caveat:
        console.print(caveat, markup=False)


def _featurizer_source(path: Path, space: Space) -> LearnedModel:
    """The model whose featurizer a model takes (``--featurizer-from``)."""
    from cognate.model.cost_model import CostModel
    from cognate.model.learned import LearnedModel

    model = CostModel.load(path, space)
    if not isinstance(model, LearnedModel):
        raise CognateError(f"{path}: --featurizer-from needs a trained model, not a random one")
    return model


def _hold_out(
    runs: list[MatrixRuns], fraction: float, seed: int
) -> tuple[list[MatrixRuns], list[MatrixRuns]]:
    """(training runs, held-out runs): ``fraction`` of the matrices set aside by matrix."""
    if not fraction:
        return runs, []
    from cognate.model.fit import split_matrices

    _, test = split_matrices(sorted({r.key for r in runs}), fraction, seed)
    test = set(test)
    return [r for r in runs if r.key not in test], [r for r in runs if r.key in test]


def _print_summary(console: Console, meta: dict, output: Path, metric: str) -> None:
    from cognate.model.train import METRIC_WORDS, top1_note

    best = meta["metrics"]["best"]
    console.print(
        f"kept epoch {best['epoch']}: best validation {METRIC_WORDS.get(metric, metric)} "
        f"({best[metric]:.3f})" + top1_note(meta["metrics"]["history"], best["epoch"], metric),
        markup=False,
    )
    table = Table(title=f"validation, best epoch {best['epoch']}")
    for column in ("pairwise acc", "top-1", "top-5", "oracle", "top-5 / oracle"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{best['pairwise_accuracy']:.3f}",
        f"{best['top1']:.3f}x",
        f"{best['top5']:.3f}x",
        f"{best['oracle']:.3f}x",
        f"{100 * best['top5_of_oracle']:.1f}%",
    )
    console.print(table)
    test = meta["metrics"].get("test")
    if test:
        console.print(
            f"held out ({len(meta['split']['test'])} matrices, never trained on): "
            f"top-1 {test['top1']:.3f}x, top-5 {test['top5']:.3f}x, oracle {test['oracle']:.3f}x, "
            f"top-5 / oracle {100 * test['top5_of_oracle']:.1f}%"
        )
    console.print(f"model written to {output}")
