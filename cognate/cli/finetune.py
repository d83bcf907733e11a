"""``cognate finetune``: adapt a pretrained cost model to a target with a few matrices."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from cognate.cli.options import TARGET
from cognate.errors import CognateError
from cognate.targets import OPS
from cognate.transfer.select import SELECTIONS


def register(main: click.Group, data: click.Group) -> None:
    main.add_command(finetune)


@click.command()
@click.option(
    "--model",
    "pretrained",
    type=click.Path(path_type=Path),
    required=True,
    help="Pretrained model (cognate pretrain).",
)
@click.option(
    "--db",
    "db",
    type=click.Path(path_type=Path),
    required=True,
    help="Record store with the target's records.",
)
@click.option("--target", type=TARGET, required=True)
@click.option("--op", type=click.Choice(OPS), required=True)
@click.option(
    "--matrices",
    type=click.IntRange(min=1),
    default=None,
    help="Target matrices to fine-tune on (default: configs/transfer.yaml).",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Picks the matrices and seeds training.",
)
@click.option(
    "--freeze-featurizer/--no-freeze-featurizer",
    default=None,
    help="Keep the pretrained featurizer fixed (default: configs/transfer.yaml).",
)
@click.option(
    "--mapper",
    type=click.Choice(["cognate", "none", "random"]),
    default="cognate",
    show_default=True,
    help="Ablation: how target configs fill the homogeneous slot.",
)
@click.option(
    "--latent",
    type=click.Choice(["ae", "raw"]),
    default="ae",
    show_default=True,
    help="Ablation: autoencoder latent or raw knob features as the target part.",
)
@click.option(
    "--select",
    "selection",
    type=click.Choice(SELECTIONS),
    default="random",
    show_default=True,
    help="How the K target matrices are chosen: seeded random; active (diverse in the "
    "pretrained featurizer's embedding space: greedy k-center); or representative (where "
    "the training matrices are dense: greedy k-medoids). No runtimes needed.",
)
@click.option("--from-scratch", is_flag=True, help="No pretrained weights (same architecture).")
@click.option("--zero-shot", is_flag=True, help="No fine-tuning: score the pretrained model.")
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Override the default.")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Model file.")
def finetune(
    pretrained: Path,
    db: Path,
    target: str,
    op: str,
    matrices: int | None,
    seed: int,
    freeze_featurizer: bool | None,
    mapper: str,
    latent: str,
    selection: str,
    from_scratch: bool,
    zero_shot: bool,
    epochs: int | None,
    output: Path,
) -> None:
    """Fine-tune a pretrained cost model on K target matrices (the COGNATE transfer).

    The target's matrices are split by matrix into train / validation / test; K training
    matrices are picked with --seed, training early-stops on validation, and test is scored
    once. The model and everything about the run are written to -o.
    """
    from cognate.model.train import save_checkpoint
    from cognate.records import load_runs  # torch and the model: only when run
    from cognate.targets import get_target
    from cognate.transfer.finetune import FinetuneOptions
    from cognate.transfer.finetune import finetune as run_finetune

    if not pretrained.is_file():
        raise CognateError(f"{pretrained}: no such model file")
    options = FinetuneOptions(
        matrices=matrices,
        seed=seed,
        freeze_featurizer=freeze_featurizer,
        mapper=mapper,
        latent=latent,
        select=selection,
        from_scratch=from_scratch,
        zero_shot=zero_shot,
        epochs=epochs,
    ).resolved()
    console = Console(stderr=True)
    space = get_target(target).space(op)
    runs = load_runs(db, space)
    console.print(f"{len({r.key for r in runs})} {target} {op} matrices in {db}")

    def progress(epoch: int, step: int, total: int, metrics: dict[str, float] | None) -> None:
        if metrics is not None:
            console.print(
                f"epoch {epoch}: val acc {metrics['pairwise_accuracy']:.3f} "
                f"top1 {metrics['top1']:.3f}x top5 {metrics['top5']:.3f}x"
            )

    result = run_finetune(pretrained, runs, space, options, progress)
    save_checkpoint(output, result.model, result.metadata)
    _summary(console, result.metadata, output)


def _summary(console: Console, meta: dict, output: Path) -> None:
    opts = meta["transfer"]["options"]
    picked = ", ".join(m["name"] for m in meta["split"]["finetune"])
    console.print(f"fine-tune matrices: {picked}")
    table = Table(
        title=f"mapper {opts['mapper']}, latent {opts['latent']}"
        + (", from scratch" if opts["from_scratch"] else "")
        + (", zero-shot" if opts["zero_shot"] else "")
    )
    for column in ("split", "pairwise acc", "top-1", "top-5", "oracle"):
        table.add_column(column, justify="right")
    for name, m in (("validation", meta["metrics"]["best"]), ("test", meta["metrics"]["test"])):
        table.add_row(
            name,
            f"{m['pairwise_accuracy']:.3f}",
            f"{m['top1']:.3f}x",
            f"{m['top5']:.3f}x",
            f"{m['oracle']:.3f}x",
        )
    console.print(table)
    console.print(f"model written to {output}")
