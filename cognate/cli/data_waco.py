"""``cognate data import-waco``: WACO's peer runtimes into the record store.

The records go in as target ``waco-xeon`` (the peer's own machine, also the host name),
dense width 256, with the cpu space's knobs, so external data and ours sit side by side
(same knobs, same space version; the config hash differs only by the target name).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from cognate.cli.options import db_option
from cognate.errors import CognateError

if TYPE_CHECKING:  # the readers, the store (pandas) and the space load when the command runs
    from cognate.matrix import Matrix
    from cognate.runner import Measurement
    from cognate.targets.cpu.waco import PeerFile, WacoLine


def register(main: click.Group, data: click.Group) -> None:
    data.add_command(import_waco)


def _measurements(lines: list[WacoLine]) -> list[Measurement]:
    from cognate.runner import Measurement
    from cognate.targets.cpu.waco import peer_config

    return [
        Measurement(
            config=peer_config(line.config),
            status="ok",
            runtime_s=line.runtime_s,
            counters={"threads": line.parnum},
        )
        for line in lines
    ]


def _check_shapes(peer: PeerFile, lines: list[WacoLine], matrix: Matrix) -> None:
    """A peer line whose splits do not fit the matrix means the wrong matrix file."""
    from cognate.targets.cpu.space import make_space

    space = make_space(peer.op)
    for number, line in enumerate(lines, start=1):
        try:
            space.check_shape(line.config, matrix.shape)
        except CognateError as exc:
            raise CognateError(f"{peer.path}:{number}: {exc} ({matrix.source})") from None


@click.command("import-waco")
@click.argument("peer_dir", type=click.Path(path_type=Path))
@click.option(
    "--matrices",
    "matrices_dir",
    type=click.Path(path_type=Path),
    required=True,
    help="Folder with the peer's matrices as <matrix>.csr (WACO's binary format).",
)
@db_option("to load into (created if new)", "db_path")
def import_waco(peer_dir: Path, matrices_dir: Path, db_path: Path | None) -> None:
    """Load WACO's <op>/<matrix>.txt runtimes under PEER_DIR into the record store."""
    from cognate.formats.read import load_matrix
    from cognate.store import Store
    from cognate.targets.cpu.space import make_space
    from cognate.targets.cpu.waco import (
        WACO_HOST,
        WACO_TARGET,
        WACO_WIDTH,
        peer_files,
        read_peer_file,
    )

    peers = peer_files(peer_dir)
    if not matrices_dir.is_dir():
        raise CognateError(f"{matrices_dir}: no such folder")
    # Parse and load everything first: bad input must leave the store untouched.
    parsed = [(peer, read_peer_file(peer.path, peer.op)) for peer in peers]
    matrices: dict[str, Matrix] = {}
    ready, skipped = [], []
    for peer, lines in parsed:
        path = matrices_dir / f"{peer.matrix}.csr"
        if not path.is_file():
            skipped.append(f"{peer.op}/{peer.matrix}")
            continue
        if peer.matrix not in matrices:
            matrices[peer.matrix] = load_matrix(path)
        _check_shapes(peer, lines, matrices[peer.matrix])
        ready.append((peer, lines, matrices[peer.matrix]))

    table = Table("op", "matrix", "shape", "nnz", "records")
    total = 0
    if ready:
        with Store(db_path) as store:
            for peer, lines, matrix in ready:
                written = store.record(
                    matrix,
                    WACO_TARGET,
                    peer.op,
                    WACO_WIDTH,
                    _measurements(lines),
                    space_version=make_space(peer.op).version,
                    host=WACO_HOST,
                )
                total += written
                shape = f"{matrix.shape[0]} x {matrix.shape[1]}"
                table.add_row(peer.op, matrix.name, shape, str(matrix.nnz), str(written))
        Console().print(table)
    click.echo(f"imported {total} records from {len(ready)} peer files as target {WACO_TARGET}")
    if skipped:
        click.echo(
            f"skipped {len(skipped)} peer files whose matrix is not in {matrices_dir}: "
            + ", ".join(skipped)
        )
