"""``cognate finetune``: adapt a pretrained cost model to a target with a few matrices."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from cognate.cli.options import TARGET, db_option
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
@db_option("with the target's records")
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
@click.option(
    "--without-records",
    is_flag=True,
    help="With --zero-shot: read no target record at all and score nothing (a target nobody "
    "measured yet, e.g. the gpu): the model is carried over through the config mapper and the "
    "target's autoencoder, and labelled zero-shot.",
)
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Override the default.")
@click.option(
    "--max-nnz",
    type=click.IntRange(min=1),
    default=None,
    help="Leave target matrices above this many nonzeros out (picking, validation, test). "
    "Default: the pretrained model's own --max-nnz when it was trained with one (its "
    "featurizer never saw larger matrices), else none.",
)
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
    without_records: bool,
    epochs: int | None,
    max_nnz: int | None,
    output: Path,
) -> None:
    """Fine-tune a pretrained cost model on K target matrices (the COGNATE transfer).

    The target's matrices are split by matrix into train / validation / test; K training
    matrices are picked with --seed, training early-stops on validation, and test is scored
    once (the learned ranking). Then the validation matrices choose the ranking the model
    ships with: the learned one, fixed-K (the greedy fixed set of the K matrices, in its
    order) or their blend (a portfolio, as `cognate portfolio`). The model and everything
    about the run, the choice and its validation figures included, are written to -o.
    """
    from cognate.model.checkpoint import read_metadata
    from cognate.model.train import validation_caveat
    from cognate.progress import EpochReporter, plural
    from cognate.records import (
        read_runs,
        record_frame,  # torch and the model: only when run
    )
    from cognate.targets import get_target
    from cognate.transfer.finetune import (
        FinetuneOptions,
        choose_ranking,
        matrices_needed,
        score_chosen_on_test,
    )
    from cognate.transfer.finetune import finetune as run_finetune

    if not pretrained.is_file():
        raise CognateError(f"{pretrained}: no such model file")
    if without_records:
        _zero_shot_without_records(pretrained, target, op, seed, output, zero_shot)
        return
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
    console = Console(stderr=True, soft_wrap=True)  # a pipe gets whole lines
    trained_max = read_metadata(pretrained).get("max_nnz")
    inherited = max_nnz is None and isinstance(trained_max, int) and trained_max > 0
    if inherited:
        max_nnz = trained_max
    space = get_target(target).space(op)
    frame = record_frame(db, space, max_nnz)
    frame = frame[frame["runtime_s"] > 0]  # what training reads (runs_from_frame)
    names = frame.drop_duplicates("matrix_sha256").set_index("matrix_sha256")["matrix"]
    names = names.to_dict()
    needed = matrices_needed(names, options)
    size = ""
    if max_nnz is not None:
        why = " (the pretrained model's --max-nnz)" if inherited else ""
        size = f" of at most {max_nnz} nnz{why}"
    console.print(
        f"{len(names)} {target} {op} matrices{size} in {db}; "
        + (
            f"reading the {len(needed)} this run uses ({options.matrices} to fine-tune on, "
            "the validation and test splits)"
            if needed is not None
            else f"reading all of them (--select {selection} embeds every training matrix)"
        )
    )
    if needed is not None:
        frame = frame[frame["matrix_sha256"].isin(needed)]
    runs = read_runs(frame, space)
    if not zero_shot:
        console.print(
            f"fine-tuning up to {plural(options.epochs, 'epoch')} "
            f"(early stop after {options.patience} "
            "without a better validation score), a line per epoch; epoch 0 embeds the "
            "validation matrices and scores the pretrained model first"
        )
    progress = EpochReporter(options.epochs, before="fine-tuning")
    model = run_finetune(pretrained, runs, space, options, progress, names=names)
    console.print(
        "choosing on the validation matrices between the learned ranking, fixed-K (the greedy "
        f"fixed set of the {options.matrices} fine-tuning matrices) and their blend"
    )
    try:
        choose_ranking(model, runs)
        score_chosen_on_test(model, runs)
    except CognateError as err:  # the fine-tuned model is still good: it ranks alone
        console.print(f"ranking: learned, nothing chosen ({err})", soft_wrap=True, markup=False)
    model.save(output)
    _summary(console, model.metadata, output)
    caveat = validation_caveat(runs, {m["sha256"] for m in model.metadata["split"]["validation"]})
    if caveat:
        console.print(caveat, markup=False)


def _zero_shot_without_records(
    pretrained: Path, target: str, op: str, seed: int, output: Path, zero_shot: bool
) -> None:
    from cognate.targets import get_target
    from cognate.transfer.finetune import zero_shot_model

    if not zero_shot:
        raise CognateError("--without-records needs --zero-shot (nothing to fine-tune on)")
    model = zero_shot_model(pretrained, get_target(target).space(op), seed)
    model.save(output)
    Console(stderr=True, soft_wrap=True).print(
        f"zero-shot {target} {op} model written to {output}: {pretrained.name} carried over "
        f"through the config mapper; no {target} record read, none scored",
        markup=False,
    )


def _summary(console: Console, meta: dict, output: Path) -> None:
    from cognate.model.portfolio import RANKING_KEY, ranking_line, ranking_used

    opts = meta["transfer"]["options"]
    picked = ", ".join(m["name"] for m in meta["split"]["finetune"])
    console.print(f"fine-tune matrices: {picked}")
    console.print(kept_epoch_line(meta))
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
    decision = meta.get(RANKING_KEY)
    if decision:
        console.print(ranking_line(ranking_used(meta)), soft_wrap=True, markup=False)
        test = decision.get("test")
        if test:
            console.print(
                f"test ({test['matrices']} matrices), the ranking shipped ({decision['chosen']}): "
                f"top-1 {test['top1']:.3f}x, top-{decision['k']} {test['best_of_k']:.3f}x, "
                f"oracle {test['oracle']:.3f}x",
                soft_wrap=True,
            )
    console.print(f"model written to {output}")


def kept_epoch_line(meta: dict) -> str:
    """Which epoch's weights the model holds, and why (from the metadata's history)."""
    from cognate.model.train import top1_note

    opts, metrics = meta["transfer"]["options"], meta["metrics"]
    history, best = metrics["history"], metrics["best_epoch"]
    key = meta["preset"]["train"]["early_stop_metric"]
    label = "validation " + key.replace("pairwise_", "")
    values = [h[key] for h in history]
    if opts["zero_shot"]:
        return f"zero-shot: no fine-tuning; the pretrained model scores {label} {values[0]:.3f}"
    tuned = values[1:]
    run = len(tuned)
    stopped = f"; stopped after {run} of {opts['epochs']} epochs" if run < opts["epochs"] else ""
    if best == 0:
        if not tuned:
            trend = "no fine-tuning epoch ran"
        elif all(b < a for a, b in zip(values, tuned, strict=False)):
            trend = f"fell every epoch ({values[0]:.3f} -> {values[-1]:.3f})"
        else:
            trend = f"no fine-tuning epoch beat it (best {max(tuned):.3f})"
        return (
            f"kept epoch 0 (before fine-tuning, the pretrained weights): {label} "
            f"{values[0]:.3f}; {trend}{stopped}{top1_note(history, 0, key)}"
        )
    start = "" if opts["from_scratch"] else f", up from {values[0]:.3f} before fine-tuning"
    why = top1_note(history, best, key)
    return f"kept epoch {best} of {run}: best {label} {values[best]:.3f}{start}{stopped}{why}"
