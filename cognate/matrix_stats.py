"""Cheap structure statistics of a sparse matrix, in one place: the summary ``cognate data
info`` shows, and the 12 statistics of WISE / Seer-style kernel selectors (the cheap-feature
baseline of ``cognate evaluate`` uses them raw; a featurizer preset with ``statistics: true``
feeds them, scaled by ``scaled_statistics``, into the embedding)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.matrix import Matrix

N_STATISTICS = 12
_STAT_CHUNK = 1 << 22  # entries per step of `matrix_stats`
_NEAR_DIAGONAL = 0.01  # data info's diagonal concentration: within 1% of the shape


def diagonal_offsets(csr: sp.csr_matrix, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """|i / rows - j / cols| of each entry (i, j) of rows [lo, hi): its distance from the
    diagonal as a fraction of the shape (rectangular matrices scaled)."""
    rows, cols = csr.shape
    hi = rows if hi is None else hi
    start, stop = int(csr.indptr[lo]), int(csr.indptr[hi])
    row_of = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(csr.indptr[lo : hi + 1]))
    cols_of = csr.indices[start:stop].astype(np.int64)
    return np.abs(cols_of * (rows / max(cols, 1)) - row_of) / max(rows, 1)


def matrix_stats(matrix: Matrix) -> dict[str, Any]:
    """The numbers ``cognate data info`` reports (row lengths over all rows, empty ones too).

    ``near_diag`` is the fraction of entries within 1% of the shape of the diagonal: about
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
        if start == stop:
            continue
        row_of = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(csr.indptr[lo : hi + 1]))
        bandwidth = max(bandwidth, int(np.abs(row_of - csr.indices[start:stop]).max()))
        near += int(np.count_nonzero(diagonal_offsets(csr, lo, hi) <= _NEAR_DIAGONAL))
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


def matrix_statistics(a: sp.csr_matrix) -> np.ndarray:
    """The 12 selector statistics, raw (float64): log2 sizes and density, row-length moments
    (load imbalance), empty rows, column-length spread, bandwidth profile, diagonal share."""
    rows, cols = a.shape
    nnz = max(a.nnz, 1)
    lengths = np.diff(a.indptr).astype(np.float64)
    col_lengths = np.bincount(a.indices, minlength=cols).astype(np.float64)
    offset = diagonal_offsets(a)
    mean = lengths.mean()
    return np.array(
        [
            np.log2(rows),
            np.log2(cols),
            np.log2(nnz),
            np.log2(nnz / (rows * cols)),
            mean,
            lengths.std() / max(mean, 1e-9),
            lengths.max() / max(mean, 1e-9),
            (lengths == 0).mean(),
            col_lengths.std() / max(col_lengths.mean(), 1e-9),
            offset.mean(),
            np.quantile(offset, 0.95),
            (offset < _NEAR_DIAGONAL).mean(),
        ]
    )


def scaled_statistics(a: sp.csr_matrix) -> np.ndarray:
    """The statistics on comparable scales for a neural network (float32, roughly 0..2):
    log2 sizes / 16, log2 density / 32, log2 (1 + moment) / 8 for the unbounded moments,
    fractions and offsets as they are."""
    s = matrix_statistics(a)
    out = np.empty(N_STATISTICS, dtype=np.float64)
    out[0:3] = s[0:3] / 16.0
    out[3] = s[3] / 32.0
    out[4:7] = np.log2(1.0 + s[4:7]) / 8.0
    out[7] = s[7]
    out[8] = np.log2(1.0 + s[8]) / 8.0
    out[9:12] = s[9:12]
    return out.astype(np.float32)
