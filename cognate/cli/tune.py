"""``cognate tune``: rank schedules for one matrix with a cost model, optionally verify them.

torch and the model load inside the command, so ``cognate --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from cognate.cli.options import TARGET
from cognate.targets import OPS


def register(main: click.Group, data: click.Group) -> None:
    main.add_command(tune)


def _time(seconds: float | None) -> str:
    """Seconds in a readable unit (simulated spade runtimes are microseconds)."""
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds * 1e9:.4g} ns"


def _print_table(console: Console, result: Any) -> None:
    verified = result.verified
    table = Table(
        title=f"{result.matrix.name} ({result.matrix.shape[0]}x{result.matrix.shape[1]}, "
        f"{result.matrix.nnz} nnz): {result.target} {result.op}, width {result.width}, "
        f"top {len(result.candidates)} of {result.n_scored} scored"
    )
    table.add_column("rank", justify="right")
    table.add_column("config")
    table.add_column("score", justify="right")
    if verified:
        table.add_column("runtime", justify="right")
        table.add_column("vs base", justify="right")
    base_s = result.baseline.runtime_s
    rows = [*result.candidates, result.baseline]
    for c in rows:
        label = "base" if c is result.baseline else f"{c.rank}{'*' if c.family_pick else ''}"
        cells = [label, c.description, f"{c.score:.4f}"]
        if verified:
            ok = c.status == "ok" and c.runtime_s
            spread = f" ±{_time(c.spread_s)}" if ok and c.spread_s else ""  # interquartile
            cells.append(_time(c.runtime_s) + spread if ok else c.status or "-")
            cells.append(f"{base_s / c.runtime_s:.3f}x" if ok and base_s else "-")
        table.add_row(*cells)
    console.print(table)
    if any(c.family_pick for c in result.candidates):
        console.print("* its kernel family's best-ranked config, below the model's top-k")


def _print_summary(console: Console, result: Any) -> None:
    best = result.best
    if not result.verified:
        console.print(f"predicted best (rank 1): {best.description}")
        return
    if best.status != "ok":
        console.print("no top-k candidate ran successfully; see the table")
        return
    if result.kept_baseline:
        text = f"kept the baseline: no candidate beat it ({_time(best.runtime_s)})"
    else:
        text = f"best: rank {best.rank}, {_time(best.runtime_s)}, {best.description}"
        if result.speedup_vs_baseline is not None:
            text += f"; {result.speedup_vs_baseline:.3f}x vs baseline"
    if result.speedup_vs_library is not None:
        text += f"; {result.speedup_vs_library:.3f}x vs {result.library}"
    console.print(text)
    if result.libraries:
        times = ", ".join(
            f"{name} {_time(t['runtime_s'])}"
            + (f" (+ {_time(t['inspect_s'])} inspection, once)" if t.get("inspect_s") else "")
            for name, t in result.libraries.items()
        )
        console.print(f"library references: {times}")
    if result.library_error:
        console.print(f"library reference not timed: {result.library_error}")
    if result.timing == "sequential":
        console.print("timed one config after another (the interleaved verify failed)")


@click.command()
@click.argument("matrix", type=click.Path(path_type=Path))
@click.option("--target", type=TARGET, default="cpu", show_default=True)
@click.option("--op", type=click.Choice(OPS), default="spmm", show_default=True)
@click.option("--width", type=click.IntRange(1, 4096), default=64, show_default=True)
@click.option(
    "--model",
    type=click.Path(path_type=Path),
    default=None,
    help="Cost model (default: the shipped data/models/<target>-<op>.safetensors).",
)
@click.option("--top-k", "top_k", type=click.IntRange(min=1), default=5, show_default=True)
@click.option(
    "--candidates",
    type=click.IntRange(min=1),
    default=20_000,
    show_default=True,
    help="Sampled candidates (spaces small enough are scored whole).",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "--verify",
    is_flag=True,
    help="Measure the top-k, the baseline and (cpu) the library references on the target "
    "(cpu: interleaved rounds, medians); record them in the store.",
)
@click.option(
    "--cover-families/--no-cover-families",
    default=True,
    show_default=True,
    help="Include each kernel family's best-ranked config in the top-k (cpu: csr, dia, bcsr).",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Threads of the verified kernels and library references (default: all cores).",
)
@click.option(
    "--db",
    type=click.Path(path_type=Path),
    default=None,
    help="Record --verify measurements here (default: $COGNATE_HOME/records.sqlite).",
)
@click.option("--no-record", is_flag=True, help="Do not record the --verify measurements.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.option(
    "--emit",
    type=click.Path(path_type=Path),
    default=None,
    help="Write the chosen schedule here (cpu: C source; spade: simulator config YAML).",
)
def tune(
    matrix: Path,
    target: str,
    op: str,
    width: int,
    model: Path | None,
    top_k: int,
    candidates: int,
    seed: int,
    verify: bool,
    cover_families: bool,
    threads: int | None,
    db: Path | None,
    no_record: bool,
    as_json: bool,
    emit: Path | None,
) -> None:
    """Rank schedules of MATRIX for TARGET with a cost model (lower score = faster)."""
    from cognate.api import tune as tune_api
    from cognate.io import load_matrix
    from cognate.search import emit as emit_files

    console = Console(stderr=as_json)
    loaded = load_matrix(matrix)
    with console.status("measuring") if verify else contextlib.nullcontext():
        result = tune_api(
            loaded,
            target=target,
            op=op,
            width=width,
            top_k=top_k,
            model=model,
            verify=verify,
            candidates=candidates,
            seed=seed,
            cover_families=cover_families,
            threads=threads,
        )
    recorded = _record(result, db, no_record)
    files = emit_files(result, emit) if emit is not None else []
    if result.unreliable:  # with --json on stderr (and "unreliable": true in the JSON)
        console.print(result.load.get("line") or "timings unreliable: the machine was busy")
    if as_json:
        out = result.as_dict()
        if emit is not None:
            out["emitted"] = [str(p) for p in files]
        if recorded is not None:
            out["recorded"] = {"db": str(recorded[0]), "rows": recorded[1]}
        click.echo(json.dumps(out, indent=2))
        return
    _print_table(console, result)
    _print_summary(console, result)
    if recorded is not None:
        console.print(f"recorded {recorded[1]} measurements in {recorded[0]}")
    for path in files:
        console.print(f"wrote {path}")


def _record(result: Any, db: Path | None, no_record: bool) -> tuple[Path, int] | None:
    """Keep the verified measurements in the store (the next training uses them)."""
    if not result.verified or no_record:
        return None
    from cognate.search import record_verified
    from cognate.store import default_db_path

    path = db if db is not None else default_db_path()
    return path, record_verified(result, path)
