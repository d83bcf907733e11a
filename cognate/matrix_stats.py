"""The summary statistics ``cognate data info`` shows, and the row blocks that bound their
temporaries."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from cognate.matrix import Matrix

_STAT_CHUNK = 1 << 22  # entries per step of `matrix_stats`


# data info's diagonal concentration: entries within 1% of the shape of the diagonal.


_NEAR_DIAGONAL = 0.01


def matrix_stats(matrix: Matrix) -> dict[str, Any]:
    """The numbers ``cognate data info`` reports (row lengths over all rows, empty ones too).

    ``near_diag`` is the fraction of entries (i, j) with |i / rows - j / cols| <= 1%: about
    0.02 for a uniform matrix, near 1 for a banded or bandwidth-reduced one.
    """
    csr = matrix.csr
    rows, cols = matrix.shape
    lengths = np.diff(csr.indptr).astype(np.float64)
    mean = float(lengths.mean())
    bandwidth, near = 0, 0
    # Row blocks of about _STAT_CHUNK entries: per-entry int64 / float64 temporaries of
    # the whole matrix would cost ~40 bytes per nonzero (4 GB at 10^8).
    for lo, hi in row_blocks(csr.indptr, _STAT_CHUNK):
        start, stop = int(csr.indptr[lo]), int(csr.indptr[hi])
        row_of_entry = np.repeat(
            np.arange(lo, hi, dtype=np.int64), np.diff(csr.indptr[lo : hi + 1])
        )
        cols_of_entry = csr.indices[start:stop].astype(np.int64)
        if row_of_entry.size:
            bandwidth = max(bandwidth, int(np.abs(row_of_entry - cols_of_entry).max()))
            # Distance from the diagonal as a fraction of the shape (rectangular: scaled).
            scaled = np.abs(row_of_entry / rows - cols_of_entry / cols)
            near += int(np.count_nonzero(scaled <= _NEAR_DIAGONAL))
    return {
        "name": matrix.name,
        "rows": rows,
        "cols": cols,
        "nnz": matrix.nnz,
        "field": matrix.field,
        "symmetry": matrix.symmetry,
        "density": matrix.nnz / (rows * cols),
        "row_mean": mean,
        "row_max": int(lengths.max()),
        "row_cv": float(lengths.std() / mean) if mean > 0 else 0.0,
        "bandwidth": bandwidth,
        "near_diag": near / matrix.nnz if matrix.nnz else 0.0,
    }


def row_blocks(indptr: np.ndarray, entries: int) -> Iterator[tuple[int, int]]:
    """Consecutive row ranges ``[lo, hi)`` covering all rows, each holding about
    ``entries`` nonzeros (a single longer row is a block of its own)."""
    rows = len(indptr) - 1
    lo = 0
    while lo < rows:
        target = int(indptr[lo]) + entries
        hi = int(np.searchsorted(indptr, target, side="right")) - 1
        hi = min(rows, max(hi, lo + 1))
        yield lo, hi
        lo = hi
