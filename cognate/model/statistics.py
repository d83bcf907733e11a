"""Cheap structure statistics of a sparse matrix (the inputs of WISE / Seer-style kernel
selectors): shape, density, row-length moments, bandwidth, diagonal concentration.

The cheap-feature baseline selector of ``cognate evaluate`` uses them raw; a featurizer
preset with ``statistics: true`` feeds them, scaled by ``scaled_statistics``, into the
embedding next to the sparse-convolution features.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

N_STATISTICS = 12


def matrix_statistics(a: sp.csr_matrix) -> np.ndarray:
    """The 12 statistics, raw (float64)."""
    rows, cols = a.shape
    nnz = max(a.nnz, 1)
    lengths = np.diff(a.indptr).astype(np.float64)
    col_lengths = np.bincount(a.indices, minlength=cols).astype(np.float64)
    row_of = np.repeat(np.arange(rows), np.diff(a.indptr))
    # distance from the diagonal, in units of the longer side (rectangular matrices too)
    offset = np.abs(a.indices * (rows / max(cols, 1)) - row_of) / max(rows, 1)
    mean = lengths.mean()
    return np.array(
        [
            np.log2(rows),
            np.log2(cols),
            np.log2(nnz),
            np.log2(nnz / (rows * cols)),
            mean,
            lengths.std() / max(mean, 1e-9),  # row-length CV: load imbalance
            lengths.max() / max(mean, 1e-9),
            (lengths == 0).mean(),
            col_lengths.std() / max(col_lengths.mean(), 1e-9),
            offset.mean(),  # bandwidth profile
            np.quantile(offset, 0.95),
            (offset < 0.01).mean(),  # diagonal concentration
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
