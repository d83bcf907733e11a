"""What every cpu kernel family shares: the size limit and the matrix a family packs.

A family packs either A's canonical CSR (the csr family) or A's structured view (S and the
row / column index maps, structured.py: the DIA, BCSR, reordered and panel families absorb a
Matrix's permutations there). ``PackSource`` holds both for one matrix, the view built once on
first use, so callers hand every family the same object and never branch on the family.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.targets.cpu.structured import StructuredView, structured_view

# WACO refuses formats that store more than 20 x nnz entries.
SIZE_FACTOR = 20


class TooLarge(CognateError):
    """The packed format would exceed the size limit (status ``too_large``)."""


def size_limit(csr: sp.csr_matrix) -> int:
    """Largest allowed array: 20 x nnz, but never below plain CSR's row pointer (M + 1)."""
    return max(SIZE_FACTOR * int(csr.nnz), int(csr.shape[0]) + 1)


class PackSource:
    """A's CSR and its optional row / column permutations; ``view`` built on first use."""

    def __init__(
        self,
        csr: sp.csr_matrix | None,
        row_perm: np.ndarray | None = None,
        col_perm: np.ndarray | None = None,
    ) -> None:
        self._csr, self.row_perm, self.col_perm = csr, row_perm, col_perm

    @property
    def shape(self) -> tuple[int, int]:
        rows, cols = (self._csr if self._csr is not None else self.view.csr).shape
        return (int(rows), int(cols))

    @property
    def csr(self) -> sp.csr_matrix:
        if self._csr is None:
            raise CognateError("cpu csr family: needs A's CSR, got a permuted structured view")
        return self._csr

    @cached_property
    def view(self) -> StructuredView:
        return structured_view(self.csr, self.row_perm, self.col_perm)


def pack_source(matrix: Any) -> PackSource:
    """A Matrix, a canonical CSR, a StructuredView or a PackSource as a PackSource."""
    if isinstance(matrix, PackSource):
        return matrix
    if isinstance(matrix, StructuredView):
        # The view's S is A itself only where both maps are the identity; otherwise A's own
        # CSR is not at hand and the csr family (which packs it) refuses this source.
        plain = _identity(matrix.row_map) and _identity(matrix.col_map)
        source = PackSource(matrix.csr if plain else None)
        source.__dict__["view"] = matrix  # the view is already built: use it as it is
        return source
    csr = getattr(matrix, "csr", matrix)
    if not isinstance(csr, sp.csr_matrix):
        raise CognateError("cpu families: expected a canonical CSR matrix")
    return PackSource(csr, getattr(matrix, "row_perm", None), getattr(matrix, "col_perm", None))


def _identity(perm: np.ndarray) -> bool:
    return bool((perm == np.arange(perm.size)).all())


def view_of(matrix: Any) -> StructuredView:
    """The structured view of a Matrix (its optional row_perm / col_perm) or a plain CSR."""
    return pack_source(matrix).view
