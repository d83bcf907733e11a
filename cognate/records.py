"""Training data from the record store: a store's ok records of one space, grouped per
(matrix, width) as ``MatrixRuns``, with each matrix re-loaded from its source file and
checked against the hash it was measured with. ``pretrain``, ``finetune`` and
``evaluate`` all read their records through here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cognate.errors import CognateError

if TYPE_CHECKING:  # pandas and torch load only when records are read
    from collections.abc import Collection

    import pandas as pd

    from cognate.matrix import Matrix
    from cognate.model.train import MatrixRuns
    from cognate.space import Space


def load_record_matrix(row: pd.Series) -> Matrix:
    """Re-load a record's matrix from its source file and check it is the one measured."""
    from cognate.dataset import local_source  # imported records name portable sources
    from cognate.io import load_matrix

    source = local_source(str(row["source"]))
    if not source or not Path(source).is_file():
        raise CognateError(
            f"matrix {row['matrix']}: its source {source!r} is not a readable file "
            "(re-fetch or regenerate it at that path)"
        )
    matrix = load_matrix(source)
    if matrix.sha256 != row["matrix_sha256"]:
        raise CognateError(f"{source}: the file changed since matrix {row['matrix']} was measured")
    return matrix


def load_runs(
    db: Path, space: Space, max_nnz: int | None = None, matrices: Collection[str] | None = None
) -> list[MatrixRuns]:
    """The store's ok records for ``space`` (versions it accepts), grouped per matrix and width;
    ``max_nnz``: only matrices with at most that many nonzeros; ``matrices``: only those
    sha256s (the others are never read)."""
    from cognate.store import Store  # the store pulls in pandas/sqlite: only when needed

    if not db.is_file():
        raise CognateError(f"{db}: no such record store")
    with Store(db, readonly=True) as store:
        frame = store.frame(target=space.target, op=space.op, status="ok")
    if frame.empty:
        raise CognateError(f"{db}: no ok records for target {space.target}, op {space.op}")
    current = frame[frame["space_version"].map(space.accepts_version)]
    if current.empty:
        versions = ", ".join(sorted(set(frame["space_version"])))
        raise CognateError(
            f"{db}: records of {space.name} are from space version(s) {versions}, "
            f"not the current {space.version}; collect again"
        )
    if max_nnz is not None:
        current = current[current["nnz"] <= max_nnz]
        if current.empty:
            raise CognateError(f"{db}: no {space.name} records of a matrix with <= {max_nnz} nnz")
    if matrices is not None:
        current = current[current["matrix_sha256"].isin(set(matrices))]
        if current.empty:
            raise CognateError(f"{db}: no {space.name} records of the matrices asked for")
    from cognate.model.train import runs_from_frame

    return runs_from_frame(current, space, load_record_matrix)
