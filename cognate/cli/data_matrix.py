"""``cognate data info`` (what a matrix file holds) and ``cognate data synth`` (generate one)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from cognate.errors import CognateError
from cognate.synth import (
    ALL_KINDS,
    LAYER_SHAPES,
    PERMUTE_CHOICES,
    PUBLISHED_KINDS,
    SCALE_KINDS,
    generate,
)
from cognate.synth.upscale import LAYOUTS

_LAYER_SHAPES = ", ".join(f"{m}x{n}" for m, n in LAYER_SHAPES)
_COLUMNS: tuple[tuple[str, str], ...] = (
    ("name", "name"),
    ("rows", "rows"),
    ("cols", "cols"),
    ("nnz", "nnz (symmetric expanded)"),
    ("field", "field"),
    ("symmetry", "symmetry"),
    ("density", "density"),
    ("row_mean", "row mean"),
    ("row_max", "row max"),
    ("row_cv", "row cv"),
    ("bandwidth", "bandwidth"),
    ("near_diag", "near diag"),
)


def register(main: click.Group, data: click.Group) -> None:
    """Attach ``info`` and ``synth`` to the ``data`` group."""
    data.add_command(info)
    data.add_command(synth)


@click.command("info")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def info(paths: tuple[Path, ...], as_json: bool) -> None:
    """Shape, nnz (symmetric files expanded), field, symmetry and row statistics of PATHS.

    A folder stands for the matrix files inside it (.mtx, .mtx.gz, .tar.gz, .tgz, .npz, .csr).
    """
    from cognate.formats.files import expand_matrix_paths
    from cognate.formats.read import load_matrix
    from cognate.matrix_stats import matrix_stats

    records = []
    for path in expand_matrix_paths(paths):
        stats = matrix_stats(load_matrix(path))
        records.append({"path": str(path), **stats})
    if as_json:
        click.echo(json.dumps(records, indent=2))
        return
    table = Table(show_lines=False)
    for _, title in _COLUMNS:
        table.add_column(
            title, justify="left" if title in ("name", "field", "symmetry") else "right"
        )
    for record in records:
        table.add_row(*(_cell(record[key]) for key, _ in _COLUMNS))
    console = Console()
    if not console.is_terminal:  # piped: do not squeeze the table into 80 columns
        console = Console(width=160)
    console.print(table)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


@click.command("synth")
@click.argument("kind", type=click.Choice(ALL_KINDS + PUBLISHED_KINDS))
@click.option("--rows", type=click.IntRange(min=1), help="Number of rows (M).")
@click.option("--cols", type=click.IntRange(min=1), help="Number of columns (N).")
@click.option(
    "--shape",
    metavar="MxN",
    help=f"Rows x columns instead of --rows/--cols; NN layer shapes: {_LAYER_SHAPES}.",
)
@click.option("--density", type=float, help="Fraction of entries kept, in (0, 1].")
@click.option("--sparsity", type=float, help="Fraction of entries dropped, in [0, 1).")
@click.option("--nnz", type=click.IntRange(min=1), help="Number of entries.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "--permute", type=click.Choice(PERMUTE_CHOICES), help="Random row/column permutation."
)
@click.option("--bandwidth", type=click.IntRange(min=0), help="banded: half-width |i - j| <= W.")
@click.option("--block", type=click.IntRange(min=1), help="block-diagonal / block: block size.")
@click.option("--n", "nm_n", type=click.IntRange(min=1), help="nm: entries kept per group (N).")
@click.option("--m", "nm_m", type=click.IntRange(min=1), help="nm: group width (M).")
@click.option("--a", "rmat_a", type=float, help="rmat: top-left quadrant probability.")
@click.option("--b", "rmat_b", type=float, help="rmat: top-right quadrant probability.")
@click.option("--c", "rmat_c", type=float, help="rmat: bottom-left quadrant probability.")
@click.option("--d", "rmat_d", type=float, help="rmat: bottom-right quadrant probability.")
@click.option("--p2", is_flag=True, default=None, help="mesh2d / mesh3d: P2 elements.")
@click.option(
    "--rcm", is_flag=True, default=None, help="mesh2d / mesh3d / road: reverse Cuthill-McKee order."
)
@click.option("--directed", is_flag=True, default=None, help="powerlaw: a directed graph.")
@click.option("--degree", type=float, help="powerlaw / circuit: mean entries per row.")
@click.option(
    "--base", type=click.Path(path_type=Path), help="kron: the real matrix file to upscale."
)
@click.option("--layout", type=click.Choice(LAYOUTS), help="kron: blocks (default) or tiles.")
@click.option(
    "--order",
    type=click.IntRange(min=2),
    help="mycielskian / delaunay / kron-g500: the order (17 for mycielskian17, 22 for "
    "delaunay_n22, 19 for kron_g500-logn19).",
)
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help=".npz or .mtx")
def synth(kind: str, output: Path, **args: Any) -> None:
    """Generate a synthetic KIND matrix (deterministic per seed) and write it to OUTPUT.

    The realistic kinds (mesh2d, mesh3d, powerlaw, road, circuit, lp, kron) are sized by
    --nnz alone (their shape follows) or by --rows/--cols; the published graphs
    (mycielskian, delaunay, kron-g500) by --order alone.
    """
    from cognate.formats.write import check_output_path, save_matrix

    renamed = {"nm_n": "n", "nm_m": "m", "rmat_a": "a", "rmat_b": "b", "rmat_c": "c", "rmat_d": "d"}
    options = {renamed.get(k, k): v for k, v in args.items() if v is not None}
    rows, cols = _shape(
        options.pop("rows", None),
        options.pop("cols", None),
        options.pop("shape", None),
        sized_by_nnz=kind in SCALE_KINDS + PUBLISHED_KINDS,
    )
    check_output_path(output)  # before generating: a big matrix should not be made in vain
    matrix = generate(kind, rows, cols, **options)
    save_matrix(matrix, output)
    rows, cols = matrix.shape
    density = matrix.nnz / (rows * cols)
    line = f"wrote {output}: {kind} {rows} x {cols}, nnz {matrix.nnz} (density {density:.4g})"
    if matrix.permuted:
        kept = output.name.lower().endswith(".npz")
        line += ", index maps " + ("saved" if kept else "dropped (only .npz keeps them)")
    click.echo(line)


def _shape(
    rows: int | None, cols: int | None, shape: str | None, sized_by_nnz: bool = False
) -> tuple[int | None, int | None]:
    """(rows, cols) from --rows/--cols or --shape MxN (exactly one of the two ways); a kind
    ``sized_by_nnz`` may give either or neither."""
    if shape is None:
        if sized_by_nnz:
            return rows, cols
        if rows is None or cols is None:
            raise CognateError("give --rows and --cols, or --shape MxN")
        return rows, cols
    if rows is not None or cols is not None:
        raise CognateError("give --shape or --rows/--cols, not both")
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", shape)
    if not match or min(int(match[1]), int(match[2])) < 1:
        raise CognateError(f"--shape must look like 768x3072 (positive M x N), got {shape!r}")
    return int(match[1]), int(match[2])
