"""``cognate data export`` / ``cognate data import``: the record store as Parquet tables.

``export -o FILE`` writes one table; ``export --dataset DIR`` writes the portable data set
(one compressed file per target and op, matrix sources relative to the shared and corpus
folders) that data/records/ holds; ``import`` loads such files into a store.
"""

from __future__ import annotations

from pathlib import Path

import click

from cognate.cli.options import db_option
from cognate.errors import CognateError
from cognate.runner import STATUSES


def register(main: click.Group, data: click.Group) -> None:
    data.add_command(export)
    data.add_command(import_records)


@click.command()
@db_option("to export", "db_path")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Output file: .parquet, or .csv.",
)
@click.option(
    "--dataset",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write the portable data set instead: DIR/<target>-<op>.parquet (zstd).",
)
@click.option(
    "--drop-counters",
    default="spade",
    show_default=True,
    help="With --dataset: comma-separated targets whose counters are left out "
    "(a deterministic simulator's are recomputed by rerunning it).",
)
@click.option("--target", default=None, help="Only this target's records.")
@click.option("--op", default=None, help="Only this op's records (spmm, sddmm).")
@click.option("--status", type=click.Choice(STATUSES), default=None, help="Only this status.")
def export(
    db_path: Path,
    output: Path | None,
    dataset: Path | None,
    drop_counters: str,
    target: str | None,
    op: str | None,
    status: str | None,
) -> None:
    """Export every measurement, joined with its matrix and config, to one table (-o) or
    to the portable data set (--dataset)."""
    from cognate.store import Store  # pandas: only when the command runs

    if (output is None) == (dataset is None):
        raise click.UsageError("give exactly one of -o FILE and --dataset DIR")
    if not db_path.is_file():  # never create an empty store just to export it
        raise CognateError(f"{db_path}: no such record store")
    with Store(db_path, readonly=True) as store:
        if output is not None:
            rows = store.export(output, target=target, op=op, status=status)
            click.echo(f"wrote {rows} records to {output}")
            return
        frame = store.frame(target=target, op=op, status=status)
        repeats = store.repeats()
    from cognate.dataset import write_dataset

    drop = {t.strip() for t in drop_counters.split(",") if t.strip()}
    for name, rows in write_dataset(frame, dataset, drop, repeats).items():
        size = (dataset / name).stat().st_size
        click.echo(f"wrote {rows} records to {dataset / name} ({size / 1e6:.1f} MB)")


@click.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@db_option("to load into (created if new)", "db_path")
def import_records(paths: tuple[Path, ...], db_path: Path) -> None:
    """Load exported records (Parquet files or data-set folders, e.g. data/records) into a
    store. Records the store already holds are kept as they are. Every row is checked
    first: a data set with a bad row is refused, naming file and row, and nothing of it is
    stored."""
    from cognate.dataset import read_dataset, summary
    from cognate.progress import Ticker, say
    from cognate.store import Store

    frame = read_dataset(list(paths), log=say)  # read and checked before the store is touched
    added = kept = 0
    ticker = Ticker("stored", len(frame), every=0, unit="records")  # a line per chunk
    with Store(db_path) as store:
        # in chunks, each its own transaction, so a pipe sees it move; a killed import
        # keeps whole chunks and a rerun adds the rest (rows already there are kept)
        for start in range(0, len(frame), IMPORT_CHUNK):
            chunk_added, chunk_kept = store.import_frame(frame.iloc[start : start + IMPORT_CHUNK])
            added, kept = added + chunk_added, kept + chunk_kept
            ticker.update(min(start + IMPORT_CHUNK, len(frame)))
    click.echo(f"imported {added} records ({kept} already there): {summary(frame)}")


IMPORT_CHUNK = 100_000  # rows per transaction: a line every few seconds
