"""The in-memory matrix every part of cognate works on.

Canonical form: CSR, sorted and de-duplicated int32 column indices, float32 values,
explicitly stored zeros kept. Readers for every file format live in cognate.formats.

A permuted structured matrix (docs/architecture.md, Structured sparsity: y = S(P x)) carries its permutations as
index maps: ``A[row_perm[i], col_perm[j]] = S[i, j]`` where ``csr`` is the logical matrix
A that everything (references, baselines, featurizer) works on and ``structured()`` is S,
the unpermuted structured pattern a kernel can run over while reading B and writing C
through the maps. ``None`` means the identity map.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError


@dataclass
class Matrix:
    """A sparse matrix with the facts about where it came from."""

    name: str
    csr: sp.csr_matrix
    source: str = ""  # file path or generator description
    field: str = "real"  # real | integer | complex | pattern
    symmetry: str = "general"  # general | symmetric | skew-symmetric | hermitian
    row_perm: np.ndarray | None = None  # A[row_perm[i], col_perm[j]] = S[i, j]
    col_perm: np.ndarray | None = None
    _sha256: str | None = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        rows, cols = self.csr.shape
        self.row_perm = check_permutation(self.row_perm, int(rows), f"{self.name}: row_perm")
        self.col_perm = check_permutation(self.col_perm, int(cols), f"{self.name}: col_perm")

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.csr.shape[0]), int(self.csr.shape[1])

    @property
    def nnz(self) -> int:
        return int(self.csr.nnz)

    @property
    def permuted(self) -> bool:
        """Whether the matrix carries a row or column index map."""
        return self.row_perm is not None or self.col_perm is not None

    def structured(self) -> sp.csr_matrix:
        """S with ``A[row_perm[i], col_perm[j]] = S[i, j]`` (canonical CSR; ``csr`` if no maps)."""
        if not self.permuted:
            return self.csr
        s = self.csr
        if self.row_perm is not None:
            s = s[self.row_perm]
        if self.col_perm is not None:
            s = s[:, self.col_perm]
        return canonicalize(s)

    @property
    def sha256(self) -> str:
        """Hash of the canonical pattern and values: the matrix's identity in the store.

        The index maps are part of it when present (they change what a kernel does); a
        matrix without maps hashes exactly as before maps existed.
        """
        if self._sha256 is None:
            h = hashlib.sha256()
            h.update(np.asarray(self.shape, dtype=np.int64).tobytes())
            for arr in (self.csr.indptr, self.csr.indices, self.csr.data):
                h.update(np.ascontiguousarray(arr).tobytes())
            for label, perm in ((b"row_perm", self.row_perm), (b"col_perm", self.col_perm)):
                if perm is not None:
                    h.update(label)
                    h.update(np.ascontiguousarray(perm).tobytes())
            self._sha256 = h.hexdigest()
        return self._sha256


def check_permutation(perm: object, length: int, what: str) -> np.ndarray | None:
    """``perm`` as an int32 permutation of range(length) (None stays None); else CognateError."""
    if perm is None:
        return None
    array = np.asarray(perm)
    if array.ndim != 1 or array.size != length:
        raise CognateError(
            f"{what} must be a 1-d array of length {length}, got shape {array.shape}"
        )
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise CognateError(f"{what} must hold integers, got {array.dtype}")
    inside = (array >= 0) & (array < length)  # before the int32 cast, which would wrap
    if not inside.all():
        raise CognateError(f"{what} has an index outside [0, {length}): {int(array[~inside][0])}")
    array = array.astype(np.int32, copy=False)
    seen = np.zeros(length, dtype=bool)
    seen[array] = True
    if not seen.all():
        raise CognateError(f"{what} is not a permutation (index {int(np.argmin(seen))} missing)")
    return np.ascontiguousarray(array)


INT32_MAX = int(np.iinfo(np.int32).max)


def canonicalize(a: sp.spmatrix | sp.sparray) -> sp.csr_matrix:
    """CSR with int32 sorted unique indices (duplicates summed), float32 values, zeros kept.

    The kernels index rows, columns and entries with 32 bits: a larger matrix is refused in
    one line (a cast would wrap column 2^32 + 1 to column 1)."""
    check_int32(a.shape, int(a.nnz))
    csr = sp.csr_matrix(a, dtype=np.float32, copy=True)
    csr.sum_duplicates()  # sorts too; keeps explicit zeros (unlike eliminate_zeros)
    csr.indptr = csr.indptr.astype(np.int32, copy=False)
    csr.indices = csr.indices.astype(np.int32, copy=False)
    return csr


def check_int32(shape: tuple[int, ...], nnz: int) -> None:
    """CognateError unless the rows, columns and entries each fit a 32-bit index."""
    rows, cols = (int(n) for n in shape)
    for count, what in ((rows, "rows"), (cols, "columns"), (nnz, "entries")):
        if count > INT32_MAX:
            raise CognateError(
                f"a {rows} x {cols} matrix with {nnz} entries: {count} {what} is over "
                f"the {INT32_MAX} that cognate's 32-bit indices hold"
            )
