"""``cognate data export``: the record store as a Parquet (or CSV) table."""

from __future__ import annotations

from pathlib import Path

import click

from cognate.errors import CognateError
from cognate.runner import STATUSES


def register(main: click.Group, data: click.Group) -> None:
    data.add_command(export)


@click.command()
@click.option(
    "--db",
    "db_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Record store (default: $COGNATE_HOME/records.sqlite).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Output file: .parquet, or .csv.",
)
@click.option("--target", default=None, help="Only this target's records.")
@click.option("--op", default=None, help="Only this op's records (spmm, sddmm).")
@click.option("--status", type=click.Choice(STATUSES), default=None, help="Only this status.")
def export(
    db_path: Path | None, output: Path, target: str | None, op: str | None, status: str | None
) -> None:
    """Export every measurement, joined with its matrix and config, to one table."""
    from cognate.store import Store, default_db_path  # pandas: only when the command runs

    db_path = db_path or default_db_path()
    if not db_path.is_file():  # never create an empty store just to export it
        raise CognateError(f"{db_path}: no such record store")
    with Store(db_path) as store:
        rows = store.export(output, target=target, op=op, status=status)
    click.echo(f"wrote {rows} records to {output}")
