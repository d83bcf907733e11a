"""The structured matrix S behind a (possibly permuted) matrix A, and the maps between them.

A permuted structured matrix (docs/architecture.md, Structured sparsity) is A[row_perm[i], col_perm[j]] = S[i, j]:
the structure (diagonals, blocks) lives in S. The DIA and BCSR families pack S and absorb
the permutation in their kernels' index maps: B rows are read through ``col_map``
(= col_perm), C rows written through ``row_map`` (= row_perm), so no shuffle pass runs.
``s_to_a`` maps each of S's CSR entries to A's, so SDDMM values come back in A's order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError


@dataclass
class StructuredView:
    """S (canonical CSR), its entries' positions in A's CSR, and S -> A row/column maps."""

    csr: sp.csr_matrix
    s_to_a: np.ndarray  # int64, per S entry: its index in A's CSR arrays
    row_map: np.ndarray  # int32, S row -> A row
    col_map: np.ndarray  # int32, S column -> A column
    key: str  # sha256 of S's pattern and values (the reordering cache key)


def _checked_perm(perm: Any, size: int, what: str) -> np.ndarray:
    if perm is None:
        return np.arange(size, dtype=np.int32)
    arr = np.asarray(perm)
    if arr.shape != (size,) or arr.dtype.kind not in "iu":
        raise CognateError(f"{what} must be {size} integers, got shape {arr.shape} {arr.dtype}")
    seen = np.zeros(size, dtype=bool)
    if size and (arr.min() < 0 or arr.max() >= size):
        raise CognateError(f"{what} has an index outside 0..{size - 1}")
    seen[arr] = True
    if not seen.all():
        raise CognateError(f"{what} is not a permutation (repeated indices)")
    return arr.astype(np.int32)


def _sha(csr: sp.csr_matrix) -> str:
    h = hashlib.sha256(np.asarray(csr.shape, dtype=np.int64).tobytes())
    for arr in (csr.indptr, csr.indices, csr.data):
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def structured_view(a: sp.csr_matrix, row_perm: Any = None, col_perm: Any = None) -> StructuredView:
    """S with S[i, j] = A[row_perm[i], col_perm[j]] (identity maps where a perm is None)."""
    rows, cols = a.shape
    row_map = _checked_perm(row_perm, rows, "row_perm")
    col_map = _checked_perm(col_perm, cols, "col_perm")
    if row_perm is None and col_perm is None:
        s_to_a = np.arange(a.nnz, dtype=np.int64)
        return StructuredView(a, s_to_a, row_map, col_map, _sha(a))
    indptr = a.indptr.astype(np.int64)
    counts = np.diff(indptr)[row_map]
    s_indptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(counts, out=s_indptr[1:])
    # A's entries of S row i are A row row_map[i]: a run starting at indptr[row_map[i]].
    run_start = np.repeat(indptr[row_map] - s_indptr[:-1], counts)
    s_to_a = run_start + np.arange(a.nnz, dtype=np.int64)
    inv_col = np.empty(cols, dtype=np.int64)
    inv_col[col_map] = np.arange(cols)
    s_rows = np.repeat(np.arange(rows, dtype=np.int64), counts)
    s_cols = inv_col[a.indices[s_to_a]]
    order = np.argsort(s_rows * cols + s_cols, kind="stable")
    s_to_a, s_cols = s_to_a[order], s_cols[order]
    s = sp.csr_matrix(
        (a.data[s_to_a], s_cols.astype(np.int32), s_indptr.astype(np.int32)), shape=a.shape
    )
    return StructuredView(s, s_to_a, row_map, col_map, _sha(s))
