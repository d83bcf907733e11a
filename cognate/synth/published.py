"""Published graphs rebuilt without a download: the SuiteSparse matrices of HotTiles' SPADE
calibration (Gerogiannis et al., HPCA'24, Table V) that a generator can make.

- ``mycielskian`` (order k): the Mycielski graph M_k **exactly** (SuiteSparse's
  ``mycielskian17`` is order 17: 98,303 rows, 100,245,742 nonzeros). M_2 = K_2 and
  M_{k+1} = [[A, A, 0], [A, 0, 1], [0, 1^T, 0]] for the adjacency A of M_k: 3 * 2^(k-2) - 1
  vertices, e_{k+1} = 3 e_k + n_k edges. Built as CSR one order at a time (no COO, no dense
  block): order 17 peaks near 2 GB.
- ``delaunay`` (order k): **in distribution** like DIMACS10's ``delaunay_n{k}``: the
  Delaunay triangulation (scipy.spatial / qhull) of 2^k uniformly random points in the unit
  square, vertices numbered in the order the points were drawn, both edge directions stored,
  no diagonal. ``delaunay_n22`` lists 4,194,304 rows and 25,165,738 nonzeros.
- ``kron-g500`` (order k): **in distribution** like DIMACS10's ``kron_g500-logn{k}``: the
  Graph500 Kronecker generator (a, b, c = 0.57, 0.19, 0.19) on 2^k vertices, self-loops and
  duplicate edges dropped, both directions stored, vertices relabelled by a random
  permutation (as the Graph500 generator does). Edges are drawn until the distinct count
  reaches the published nnz (the edge factor that matches it): ``kron_g500-logn19`` lists
  524,288 rows and about 43.56 M nonzeros (43,562,264 here, the even count nearest to
  SuiteSparse's figure).

Every value is 1.0 (the SuiteSparse files are binary patterns). Deterministic per seed;
mycielskian takes no seed (it is one graph).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.synth.sampling import check_size, fill_distinct, sorted_unique

PUBLISHED_KINDS: tuple[str, ...] = ("mycielskian", "delaunay", "kron-g500")
# The SuiteSparse names of the HotTiles matrices and (kind, order) that rebuilds them.
PUBLISHED_MATRICES: dict[str, tuple[str, int]] = {
    "mycielskian17": ("mycielskian", 17),
    "delaunay_n22": ("delaunay", 22),
    "kron_g500-logn19": ("kron-g500", 19),
}
KRON_A, KRON_B, KRON_C = 0.57, 0.19, 0.19  # Graph500 initiator
KRON_LOGN19_NNZ = 43_562_264
_KRON_NNZ_PER_VERTEX = KRON_LOGN19_NNZ / 2**19  # other orders keep logn19's edge density
_ORDER_RANGE = {"mycielskian": (2, 20), "delaunay": (2, 26), "kron-g500": (2, 26)}


def mycielskian_counts(order: int) -> tuple[int, int]:
    """(vertices, undirected edges) of the Mycielski graph M_order (M_2 = K_2)."""
    vertices, edges = 2, 1
    for _ in range(order - 2):
        vertices, edges = 2 * vertices + 1, 3 * edges + vertices
    return vertices, edges


def published(kind: str, order: int, seed: int = 0) -> Matrix:
    """The published-graph ``kind`` of the given order (its SuiteSparse name's number)."""
    if kind not in PUBLISHED_KINDS:
        raise CognateError(f"unknown published kind {kind!r} (choose from {PUBLISHED_KINDS})")
    low, high = _ORDER_RANGE[kind]
    if (
        isinstance(order, bool)
        or not isinstance(order, int | np.integer)
        or not low <= order <= high
    ):
        raise CognateError(f"{kind} order must be an integer in [{low}, {high}], got {order!r}")
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise CognateError(f"seed must be a non-negative integer, got {seed!r}")
    order, seed = int(order), int(seed)
    if kind == "mycielskian":
        csr, name, source = (
            mycielskian(order),
            f"mycielskian{order}",
            f"synth:mycielskian order={order}",
        )
    elif kind == "delaunay":
        csr = delaunay(order, np.random.default_rng(seed))
        name, source = f"delaunay_n{order}_seed{seed}", f"synth:delaunay order={order} seed={seed}"
    else:
        csr = kron_g500(order, np.random.default_rng(seed))
        name = f"kron_g500-logn{order}_seed{seed}"
        source = f"synth:kron-g500 order={order} nnz={csr.nnz} seed={seed}"
    return Matrix(name, csr, source=source, field="pattern", symmetry="symmetric")


def published_matrix(name: str, seed: int = 0) -> Matrix:
    """One of ``PUBLISHED_MATRICES`` by its SuiteSparse name."""
    if name not in PUBLISHED_MATRICES:
        raise CognateError(
            f"unknown published matrix {name!r} (choose from {list(PUBLISHED_MATRICES)})"
        )
    kind, order = PUBLISHED_MATRICES[name]
    return published(kind, order, seed)


def mycielskian(order: int) -> sp.csr_matrix:
    """The adjacency of M_order as float32 CSR with int32 indices, built order by order."""
    vertices, edges = mycielskian_counts(order)
    check_size(2 * edges)
    indptr = np.array([0, 1, 2], dtype=np.int64)
    indices = np.array([1, 0], dtype=np.int32)
    for _ in range(order - 2):
        indptr, indices = _mycielski_step(indptr, indices)
    data = np.ones(indices.size, dtype=np.float32)
    return sp.csr_matrix((data, indices, indptr.astype(np.int32)), shape=(vertices, vertices))


def _mycielski_step(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR of [[A, A, 0], [A, 0, 1], [0, 1^T, 0]] from A's (indptr int64, indices int32).

    Rows i < n hold A's row then the same shifted by n (sorted: A's columns are < n); rows
    n + i hold A's row then column 2n; row 2n holds columns n .. 2n-1.
    """
    n, m = indptr.size - 1, indices.size
    degree = np.diff(indptr)
    new_indptr = np.zeros(2 * n + 2, dtype=np.int64)
    np.cumsum(np.concatenate([2 * degree, degree + 1, [n]]), out=new_indptr[1:])
    out = np.empty(3 * m + 2 * n, dtype=np.int32)
    row = np.repeat(np.arange(n, dtype=np.int64), degree)
    dest = np.arange(m, dtype=np.int64)
    dest += indptr[row]  # row i's first copy starts at 2 * indptr[i]
    out[dest] = indices
    dest += degree[row]
    out[dest] = indices + np.int32(n)
    dest -= indptr[row] + degree[row]  # back to arange(m)
    dest += 2 * m + row  # row n+i starts at 2m + indptr[i] + i
    out[dest] = indices
    del dest, row
    out[2 * m + indptr[1:] + np.arange(n)] = 2 * n
    out[3 * m + n :] = np.arange(n, 2 * n, dtype=np.int32)
    return new_indptr, out


def delaunay(order: int, rng: np.random.Generator) -> sp.csr_matrix:
    """The Delaunay graph of 2^order uniform points in the unit square."""
    from scipy.spatial import Delaunay, QhullError  # here: costly for every CLI start

    n = 2**order
    check_size(6 * n)
    points = rng.random((n, 2))
    try:
        triangles = Delaunay(points).simplices
    except QhullError as exc:
        raise CognateError(f"Delaunay triangulation failed: {exc}") from exc
    del points
    keys = []
    for u, v in ((0, 1), (1, 2), (0, 2)):
        a, b = triangles[:, u].astype(np.int64), triangles[:, v].astype(np.int64)
        keys.append(np.minimum(a, b) * n + np.maximum(a, b))
    del triangles
    return _symmetric_csr(sorted_unique(np.concatenate(keys)), n)


def kron_g500(order: int, rng: np.random.Generator, nnz: int | None = None) -> sp.csr_matrix:
    """Graph500 Kronecker graph on 2^order vertices with ``nnz`` stored entries (both
    directions; default: logn19's density), relabelled by a random vertex permutation."""
    n = 2**order
    target = nnz if nnz is not None else 2 * round(_KRON_NNZ_PER_VERTEX * n / 2)
    target = min(target, n * (n - 1))
    check_size(target)
    probs = np.array([KRON_A, KRON_B, KRON_C], dtype=np.float64)

    def draw(count: int) -> np.ndarray:
        source, dest = _kronecker_edges(order, count, probs, rng)
        keep = source != dest  # self-loops dropped
        source, dest = source[keep], dest[keep]
        return np.minimum(source, dest) * n + np.maximum(source, dest)

    edges = fill_distinct(draw, target // 2, rng, "kron-g500")
    label = rng.permutation(n).astype(np.int64)
    low, high = label[edges // n], label[edges % n]
    del edges
    return _symmetric_csr(np.minimum(low, high) * n + np.maximum(low, high), n)


def _kronecker_edges(
    order: int, count: int, probs: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """count Kronecker edges: one quadrant choice per bit, a (0,0) b (0,1) c (1,0) d (1,1)."""
    a_end, b_end, c_end = np.cumsum(probs)
    source = np.zeros(count, dtype=np.int64)
    dest = np.zeros(count, dtype=np.int64)
    for _ in range(order):
        draw = rng.random(count)
        source <<= 1
        source |= draw >= b_end
        dest <<= 1
        dest |= ((draw >= a_end) & (draw < b_end)) | (draw >= c_end)
    return source, dest


def _symmetric_csr(edges: np.ndarray, n: int) -> sp.csr_matrix:
    """CSR (float32 ones, int32 indices) of undirected edge keys low * n + high, both
    directions, sorted by row then column without a COO detour."""
    keys = np.concatenate([edges, (edges % n) * n + edges // n])
    del edges
    keys.sort()
    rows = keys // n
    indptr = np.searchsorted(rows, np.arange(n + 1, dtype=np.int64)).astype(np.int64)
    del rows
    indices = (keys % n).astype(np.int32)
    del keys
    data = np.ones(indices.size, dtype=np.float32)
    return sp.csr_matrix((data, indices, indptr.astype(np.int32)), shape=(n, n))
