"""``cognate data search`` and ``cognate data fetch``: the SuiteSparse Matrix Collection."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from cognate import suitesparse
from cognate.errors import CognateError

# The collection counts a symmetric matrix's stored half; `data info` counts both halves.
STORED = "nnz: entries stored (one half of a symmetric matrix; data info expands it)"


def register(main: click.Group, data: click.Group) -> None:
    data.add_command(search)
    data.add_command(fetch)


def _mirror_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "--mirror",
            default=None,
            metavar="URL|DIR",
            help="Collection base URL, a local copy of the collection, or any folder of "
            "Matrix Market files (.mtx, .mtx.gz: indexed from their headers, group = subfolder, "
            "nnz = entries stored; fetch then names the file itself; works offline). "
            f"Default: ${suitesparse.URL_ENV}, else {suitesparse.DEFAULT_URL}.",
        ),
        click.option("--refresh-index", is_flag=True, help="Download the index again."),
        click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _filter_options(limit: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        count = click.IntRange(min=0)
        options = [
            click.option("--name", default=None, help="[GROUP/]NAME: substring, or glob (* ?)."),
            click.option("--kind", default=None, help="Problem kind contains this text."),
            click.option("--dtype", type=click.Choice(["real", "complex", "binary"])),
            click.option("--nnz-min", type=count, default=None),
            click.option("--nnz-max", type=count, default=None),
            click.option("--rows-min", type=count, default=None),
            click.option("--rows-max", type=count, default=None),
            click.option("--square", is_flag=True, help="Only square matrices."),
            click.option("--limit", type=count, default=limit, show_default=True),
        ]
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def _search(base: str, refresh: bool, f: dict[str, Any]) -> list[suitesparse.IndexEntry]:
    return suitesparse.search(
        base,
        name=f["name"],
        kind=f["kind"],
        dtype=f["dtype"],
        rows=(f["rows_min"], f["rows_max"]),
        nnz=(f["nnz_min"], f["nnz_max"]),
        square=f["square"],
        limit=f["limit"],
        refresh=refresh,
    )


@click.command()
@_filter_options(limit=20)
@_mirror_options
def search(mirror: str | None, refresh_index: bool, as_json: bool, **filters: Any) -> None:
    """Search the collection's index (ssgetpy) for matrices."""
    base = suitesparse.resolve_base(mirror)
    found = _search(base, refresh_index, filters)
    if as_json:
        click.echo(json.dumps([e.to_dict() for e in found], indent=2))
        return
    table = Table(
        "id", "matrix", "rows", "cols", "nnz", "dtype", "kind", title=base, caption=STORED
    )
    for e in found:
        table.add_row(
            str(e.id), e.full_name, f"{e.rows:,}", f"{e.cols:,}", f"{e.nnz:,}", e.dtype, e.kind
        )
    Console().print(table)


@click.command()
@click.argument("names", nargs=-1)
@click.option("--from-search", is_flag=True, help="Fetch what the filter options select.")
@_filter_options(limit=10)
@click.option(
    "--max-mb",
    type=click.FloatRange(min=0, min_open=True),
    default=2048,
    show_default=True,
    help="Refuse any download larger than this.",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
@_mirror_options
def fetch(
    names: tuple[str, ...],
    from_search: bool,
    max_mb: float,
    quiet: bool,
    mirror: str | None,
    refresh_index: bool,
    as_json: bool,
    **filters: Any,
) -> None:
    """Download matrices (NAME or GROUP/NAME) into $COGNATE_HOME/suitesparse, verified."""
    if bool(names) == from_search:
        raise CognateError("fetch: give matrix names or --from-search (one of the two)")
    base = suitesparse.resolve_base(mirror)
    if from_search:
        entries = _search(base, refresh_index, filters)
        if not entries:
            raise CognateError(f"fetch: no matrix in the index at {base} matches the filters")
    else:
        entries = suitesparse.lookup(base, names, refresh=refresh_index)
    fetched = suitesparse.fetch(
        entries, base, max_bytes=int(max_mb * 1e6), progress=not quiet and not as_json
    )
    if as_json:
        rows = [{**f.entry.to_dict(), "path": str(f.path), "status": f.status} for f in fetched]
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("matrix", "rows", "cols", "nnz", "MB", "status", caption=STORED)
    table.add_column("path", overflow="fold")  # paths are for copying: never truncated
    for f in fetched:
        e = f.entry
        table.add_row(
            e.full_name,
            f"{e.rows:,}",
            f"{e.cols:,}",
            f"{e.nnz:,}",
            f"{f.size / 1e6:.2f}",
            f.status,
            str(f.path),
        )
    Console().print(table)
