"""The in-memory matrix every part of cognate works on.

Canonical form: CSR, sorted and de-duplicated int32 column indices, float32 values,
explicitly stored zeros kept. Readers for every file format live in cognate.io.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass
class Matrix:
    """A sparse matrix with the facts about where it came from."""

    name: str
    csr: sp.csr_matrix
    source: str = ""  # file path or generator description
    field: str = "real"  # real | integer | complex | pattern
    symmetry: str = "general"  # general | symmetric | skew-symmetric | hermitian
    _sha256: str | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.csr.shape[0]), int(self.csr.shape[1])

    @property
    def nnz(self) -> int:
        return int(self.csr.nnz)

    @property
    def sha256(self) -> str:
        """Hash of the canonical pattern and values: the matrix's identity in the store."""
        if self._sha256 is None:
            h = hashlib.sha256()
            h.update(np.asarray(self.shape, dtype=np.int64).tobytes())
            for arr in (self.csr.indptr, self.csr.indices, self.csr.data):
                h.update(np.ascontiguousarray(arr).tobytes())
            self._sha256 = h.hexdigest()
        return self._sha256


def canonicalize(a: sp.spmatrix | sp.sparray) -> sp.csr_matrix:
    """CSR with int32 sorted unique indices (duplicates summed), float32 values, zeros kept."""
    csr = sp.csr_matrix(a, dtype=np.float32, copy=True)
    csr.sum_duplicates()  # sorts too; keeps explicit zeros (unlike eliminate_zeros)
    csr.indptr = csr.indptr.astype(np.int32, copy=False)
    csr.indices = csr.indices.astype(np.int32, copy=False)
    return csr
