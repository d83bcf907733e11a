"""Indices past 32 bits are refused in one line, never wrapped by the int32 cast."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.matrix import INT32_MAX, Matrix, canonicalize


def _one_entry(rows: int, cols: int, row: int, col: int) -> sp.csr_matrix:
    indptr = np.zeros(rows + 1, dtype=np.int64)
    indptr[row + 1 :] = 1
    return sp.csr_matrix(
        (np.ones(1, np.float32), np.array([col], np.int64), indptr), shape=(rows, cols)
    )


def test_a_column_past_int32_is_refused_not_wrapped():
    a = _one_entry(2, 2**32 + 2, 0, 2**32 + 1)  # wrapped, this would be column 1
    with pytest.raises(CognateError, match=r"4294967298 columns is over the 2147483647"):
        canonicalize(a)


def test_the_largest_int32_column_is_kept():
    csr = canonicalize(_one_entry(2, INT32_MAX, 1, INT32_MAX - 1))
    assert csr.indices.dtype == np.int32 and int(csr.indices[0]) == INT32_MAX - 1


def test_a_permutation_entry_past_int32_is_refused_not_wrapped():
    a = canonicalize(sp.eye(2, format="csr"))
    with pytest.raises(CognateError, match="outside"):
        Matrix("m", a, row_perm=np.array([2**32 + 1, 0], dtype=np.int64))  # would be [1, 0]
