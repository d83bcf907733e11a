"""Matrices and configs the cpu tests share (imported by name: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from cognate.matrix import Matrix, canonicalize


def permuted(s: sp.csr_matrix, name: str, seed: int = 1) -> Matrix:
    """A with A[row_perm[i], col_perm[j]] = S[i, j], carrying the maps."""
    rng = np.random.default_rng(seed)
    row_perm, col_perm = rng.permutation(s.shape[0]), rng.permutation(s.shape[1])
    coo = s.tocoo()
    a = sp.csr_matrix((coo.data, (row_perm[coo.row], col_perm[coo.col])), shape=s.shape)
    return Matrix(name, canonicalize(a), row_perm=row_perm, col_perm=col_perm)


# The plain CSR SpMM config (the baseline's loop structure) as knobs.
PLAIN_CSR_SPMM = {
    "isplit": 1,
    "ksplit": 1,
    "jsplit": 128,
    "order": ["i1", "i0", "k1", "k0", "j1", "j0"],
    "formats": ["U", "U", "C", "U"],
    "chunk": 32,
}
