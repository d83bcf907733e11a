"""``cognate evaluate``: the evaluation protocol of docs/architecture.md, Evaluation protocol, written as report.md."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click
from rich.console import Console

from cognate.cli.options import db_option
from cognate.paths import cognate_home


def register(main: click.Group, data: click.Group) -> None:
    main.add_command(evaluate)


@click.command()
@click.option("--preset", default=None, help="Preset of configs/experiments/ (default: default).")
@click.option("--quick", is_flag=True, help="The small CI preset (same as --preset quick).")
@db_option(
    "to read (snapshotted first; never written); default: a small store the preset collects",
    default=False,
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Output folder (report.md, PNGs, results.json, cached models). "
    "Default: $COGNATE_HOME/evaluate/<preset>.",
)
@click.option(
    "--op",
    "ops",
    multiple=True,
    type=click.Choice(["spmm", "sddmm"]),
    help="Evaluate only this op of the preset (repeatable). Two processes, one per op, may "
    "share one --out: a run with every op afterwards reuses their cells and writes the whole report.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="torch threads (on a shared 2-core machine 1 is fastest).",
)
@click.option(
    "--max-nnz",
    type=click.IntRange(min=1),
    default=None,
    help="Leave matrices above this many nonzeros out of the target and the source "
    "(counted in the report): a bounded, quicker evaluation.",
)
@click.option(
    "--width",
    type=click.IntRange(min=1, max=4096),
    default=None,
    help="Evaluate the target's records of this dense width only (overrides the preset's).",
)
def evaluate(
    preset: str | None,
    quick: bool,
    db: Path | None,
    out: Path | None,
    ops: tuple[str, ...],
    threads: int,
    max_nnz: int | None,
    width: int | None,
) -> None:
    """Evaluate transfer (TL) vs target-only (NT), zero-shot and the ablations on test
    matrices, with every choice made on validation and 95% bootstrap CIs over seeds.

    Rerunning with the same --out reuses its trained models (keyed by their inputs).
    """
    import torch

    from cognate.errors import CognateError
    from cognate.evaluate import load_experiment, run_evaluation

    if quick and preset not in (None, "quick"):
        raise CognateError(f"--quick and --preset {preset} exclude each other")
    spec = load_experiment("quick" if quick else preset or "default")
    if ops:
        spec = spec.only_ops(list(ops))
    if width is not None:
        spec = spec.model_copy(update={"width": width})
    torch.set_num_threads(threads)
    out = (out or cognate_home() / "evaluate" / spec.name).expanduser()
    console = Console(stderr=True)
    command = _command_line(preset, quick, db, out, ops, threads, width)
    report = run_evaluation(
        spec, db, out, command, lambda line: console.print(line, soft_wrap=True), max_nnz=max_nnz
    )
    click.echo(report.read_text())
    console.print(f"report written to {report}")


def _command_line(
    preset: str | None,
    quick: bool,
    db: Path | None,
    out: Path,
    ops: tuple[str, ...],
    threads: int,
    width: int | None = None,
) -> str:
    """The exact command when run as ``cognate``; else (a Python caller) its equivalent."""
    program = Path(sys.argv[0])
    # `cognate ...` or `python -m cognate ...` (not another module's __main__, e.g. pytest's)
    if program.name == "cognate" or program.parts[-2:] == ("cognate", "__main__.py"):
        return shlex.join(["cognate", *sys.argv[1:]])
    args = ["cognate", "evaluate", *(["--quick"] if quick else []), "--out", str(out)]
    args += ["--preset", preset] if preset else []
    args += ["--db", str(db)] if db else []
    args += [arg for op in ops for arg in ("--op", op)]
    args += ["--width", str(width)] if width is not None else []
    return shlex.join([*args, "--threads", str(threads)])
