"""A real matrix upscaled (kind ``kron``), so large matrices inherit real structure.

The pattern of the matrix file ``base`` (any format ``cognate.formats`` reads) is combined with
a small random s x s pattern S (full diagonal plus random off-diagonal cells), as in the
Kronecker graph models (Leskovec et al. 2010):

- ``layout="blocks"``: kron(B, S), every entry of B becomes an s x s block: the structure of
  a multi-dof FEM matrix (s unknowns per node) or a node-split graph;
- ``layout="tiles"``: kron(S, B), copies of B tiled where S has entries.

Then 5% of the entries (at least; more when S overshoots the request) are dropped at
random, so copies differ (the perturbation) and nnz is exactly the requested count. A base
larger than the request is subsampled (s = 1).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.synth.sampling import Pattern, check_size, distinct_sample

LAYOUTS: tuple[str, ...] = ("blocks", "tiles")
_PERTURBATION = 0.05  # fraction of the product's entries dropped at least


def kron(
    rows: int | None,
    cols: int | None,
    nnz: int | None,
    rng: np.random.Generator,
    base: str | Path | None = None,
    layout: str = "blocks",
) -> Pattern:
    """The base file's pattern upscaled to exactly nnz entries."""
    if base is None:
        raise CognateError("kron needs base (a real matrix file to upscale)")
    if rows is not None or cols is not None or nnz is None:
        raise CognateError("kron is sized by nnz only (its shape follows from the base)")
    if layout not in LAYOUTS:
        raise CognateError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    from cognate.formats.read import load_matrix  # a file reader: only this kind needs one

    pattern = load_matrix(base).csr.copy()
    pattern.data[:] = 1
    factor = _small_pattern(nnz / pattern.nnz, rng)
    check_size(pattern.nnz * factor.nnz)  # before the product is built
    product = sp.kron(pattern, factor) if layout == "blocks" else sp.kron(factor, pattern)
    product = product.tocoo()
    keep = distinct_sample(product.nnz, min(nnz, product.nnz), rng)
    return Pattern(
        product.row[keep].astype(np.int64), product.col[keep].astype(np.int64), product.shape
    )


def _small_pattern(growth: float, rng: np.random.Generator) -> sp.csr_matrix:
    """An s x s pattern with about growth / (1 - perturbation) entries, full diagonal."""
    if growth <= 1:
        return sp.csr_matrix(np.ones((1, 1), dtype=np.int8))
    count = math.ceil(growth / (1 - _PERTURBATION))
    size = max(2, math.ceil(math.sqrt(count)))
    off_diagonal = np.flatnonzero(~np.eye(size, dtype=bool))
    # count >= size always (ceil(sqrt(count)) <= count), so the diagonal fits the budget.
    extra = rng.choice(off_diagonal, size=min(count - size, off_diagonal.size), replace=False)
    cells = np.concatenate([np.arange(size) * (size + 1), extra])
    ones = np.ones(cells.size, dtype=np.int8)
    return sp.csr_matrix((ones, (cells // size, cells % size)), shape=(size, size))
