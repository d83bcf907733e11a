"""Row processing orders for the ``reordered`` cpu kernel family (reordered.py).

``row_order(view, by)`` returns ``order`` (int32, ``order[t]`` = the row of S processed
t-th), a validated permutation of S's rows:

- ``rcm``: reverse Cuthill-McKee (scipy.sparse.csgraph) of the symmetrised pattern
  A + A^T of a square matrix, so rows that share columns (and, renumbered symmetrically,
  nonzeros near the diagonal) run close together. A rectangular M x K matrix has no
  A + A^T: RCM of its bipartite graph [[0, A], [A^T, 0]] (rows and columns as vertices),
  restricted to the row vertices in their relative order: rows meeting the same columns
  stay adjacent.
- ``degree``: rows by stored-entry count, longest first; ties keep index order (stable).
- ``cluster``: Jaccard row clustering, ``row_clusters.cached_cluster_rows`` at blend 0 (cached
  on disk by S's sha256, as reordered BCSR uses it).

Orders are computed on S (the structure of a permuted matrix, see structured.py): its row
and column numbering is the meaningful one. ``rcm`` and ``degree`` cost one pass over the
pattern; they are kept in memory for the last few matrices (``_MEMORY``, by S's sha256),
read-only, so a kernel packed again for another dense width does not recompute them.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from cognate.errors import CognateError
from cognate.targets.cpu.row_clusters import cached_cluster_rows
from cognate.targets.cpu.structured import StructuredView

ORDERS: tuple[str, ...] = ("rcm", "degree", "cluster")
CLUSTER_BLEND = 0.0  # Jaccard similarity only: no diagonal-proximity term
_MEMORY_SIZE = 8
_MEMORY: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()


def check_by(by: object) -> str:
    """``by`` if it names an order, else a one-line CognateError."""
    if not isinstance(by, str) or by not in ORDERS:
        raise CognateError(f"cpu reordered: by={repr(by)[:40]} is not one of {', '.join(ORDERS)}")
    return by


def row_order(view: StructuredView, by: str) -> np.ndarray:
    """The processing order of S's rows for ``by`` (int32 permutation, read-only)."""
    by = check_by(by)
    csr = view.csr
    if by == "cluster":  # the disk cache returns only validated int32 permutations
        return _validated(cached_cluster_rows(csr, view.key, CLUSTER_BLEND), csr.shape[0], by)
    key = (view.key, by)
    found = _MEMORY.get(key)
    if found is not None:
        _MEMORY.move_to_end(key)
        return found
    order = _validated(rcm_order(csr) if by == "rcm" else degree_order(csr), csr.shape[0], by)
    order.flags.writeable = False
    _MEMORY[key] = order
    while len(_MEMORY) > _MEMORY_SIZE:
        _MEMORY.popitem(last=False)
    return order


def rcm_order(csr: sp.csr_matrix) -> np.ndarray:
    """Reverse Cuthill-McKee of the symmetrised pattern (square) or the bipartite row/column
    graph restricted to its rows (rectangular)."""
    rows, cols = csr.shape
    pattern = sp.csr_matrix(
        (np.ones(csr.nnz, dtype=np.int8), csr.indices, csr.indptr), shape=csr.shape
    )
    if rows == cols:
        graph = (pattern + pattern.T).tocsr()
        return reverse_cuthill_mckee(graph, symmetric_mode=True).astype(np.int32)
    graph = sp.bmat([[None, pattern], [pattern.T, None]], format="csr")
    order = reverse_cuthill_mckee(graph, symmetric_mode=True)
    return order[order < rows].astype(np.int32)


def degree_order(csr: sp.csr_matrix) -> np.ndarray:
    """Rows by stored-entry count descending, ties in index order."""
    return np.argsort(-np.diff(csr.indptr).astype(np.int64), kind="stable").astype(np.int32)


def _validated(order: np.ndarray, rows: int, by: str) -> np.ndarray:
    order = np.ascontiguousarray(order, dtype=np.int32)
    seen = np.zeros(rows, dtype=bool)
    if order.shape != (rows,) or (rows and (order.min() < 0 or order.max() >= rows)):
        raise CognateError(f"cpu reordered: the {by} order is not a permutation of {rows} rows")
    seen[order] = True
    if not seen.all():
        raise CognateError(f"cpu reordered: the {by} order repeats a row")
    return order
