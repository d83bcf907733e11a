"""Row clustering for the bcsr family (docs/architecture.md, Structured sparsity): similar
rows next to each other.

``cluster_rows(csr, blend)`` returns ``order`` (int32, ``order[new_position] = old_row``)
that places rows with similar column sets consecutively, so that r consecutive rows pack
into few dense r x c blocks. The similarity of rows a and b is

    sim(a, b) = (1 - blend) * Jaccard(cols(a), cols(b)) + blend * proximity(a, b)

where ``proximity(a, b) = 1 - 2 * circdist(theta_a, theta_b)`` in [0, 1] and ``theta`` is a
row's *diagonal position*: the circular mean of its columns j as angles 2 pi j / ncols,
scaled to [0, 1). Along a (wrapped) diagonal band theta grows steadily with the row, also
when the rows are shuffled, so proximity keeps diagonal neighbours together; Jaccard alone
groups rows that share columns exactly, which is what blocks need but which scatters the
rows of a diagonal (row i and row i + 1 of a k-diagonal mask share few columns). The blend
is DynaDiag's: its BCSR path reorders rows by Jaccard similarity blended with diagonal
proximity; ``blend`` is a schedule knob.

Algorithm (deterministic, about O(nnz * (hashes + window)), no O(rows^2) pass):
1. MinHash signatures (``_HASHES`` hashes per row) and banded LSH: rows that agree on a
   band of ``_BAND`` hashes are linked; connected components of those links (scipy.sparse
   .csgraph) are candidate clusters (Jaccard side).
2. Presort: by component, then by theta (by signature when ``blend == 0``); with
   ``blend == 1`` by theta alone.
3. Greedy chaining: starting at the first presorted row, repeatedly append the unplaced row
   of highest ``sim`` (exact Jaccard) to the last placed one among the next ``_WINDOW``
   unplaced rows of the presort (ties: earliest in the presort).
Step 3 is sequential, so it is a small C routine compiled through ``cognate.build`` (a
Python loop is far slower); no library (scipy, sklearn, datasketch) offers a windowed
greedy chaining by a blended similarity, hence written here.

``cached_cluster_rows(csr, key, blend)`` caches the order on disk under
``cognate_home() / "reorder"`` keyed by the matrix hash, the blend and ``ALGORITHM_VERSION``.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from cognate.build import compile_c, load_library
from cognate.errors import CognateError
from cognate.homefiles import ignore, read_home
from cognate.paths import cognate_home
from cognate.util import atomic_path, one_line

ALGORITHM_VERSION = 1  # bump when the order for a given (matrix, blend) changes
_HASHES = 8
_BAND = 2  # hashes per LSH band: rows with Jaccard J collide in a band with about J**2
_WINDOW = 16
_PRIME = (1 << 31) - 1
_HASH_SEED = 0xC0FFEE

_CHAIN_SOURCE = r"""
#include <stdint.h>

static double jaccard(const int32_t *indptr, const int32_t *indices, int32_t a, int32_t b) {
    int32_t i = indptr[a], ie = indptr[a + 1], j = indptr[b], je = indptr[b + 1];
    int64_t na = ie - i, nb = je - j, common = 0;
    if (na + nb == 0) return 0.0;
    while (i < ie && j < je) {
        int32_t x = indices[i], y = indices[j];
        common += (x == y);
        i += (x <= y);
        j += (y <= x);
    }
    return (double)common / (double)(na + nb - common);
}

static double proximity(const double *theta, int32_t a, int32_t b) {
    double d = theta[a] - theta[b];
    if (d < 0) d = -d;
    if (d > 0.5) d = 1.0 - d;  /* circular distance in [0, 0.5] */
    return 1.0 - 2.0 * d;
}

/* presort: rows in presorted order; out: the chained order. next/prev: scratch (n + 2). */
void chain_rows(int32_t n, const int32_t *indptr, const int32_t *indices, const double *theta,
                double blend, int32_t window, const int32_t *presort, int32_t *out,
                int32_t *next, int32_t *prev) {
    /* a doubly linked list over presort positions 0..n-1 of the rows not yet placed */
    for (int32_t p = 0; p < n; p++) { next[p] = p + 1; prev[p] = p - 1; }
    int32_t head = 0;
    int32_t cur = presort[0];
    out[0] = cur;
    head = next[0];
    if (head < n) prev[head] = -1;
    for (int32_t k = 1; k < n; k++) {
        int32_t best = head, seen = 0;
        double best_sim = -1.0;
        for (int32_t p = head; p < n && seen < window; p = next[p], seen++) {
            int32_t row = presort[p];
            double sim = (1.0 - blend) * jaccard(indptr, indices, cur, row)
                         + blend * proximity(theta, cur, row);
            if (sim > best_sim) { best_sim = sim; best = p; }
        }
        cur = presort[best];
        out[k] = cur;
        if (prev[best] >= 0) next[prev[best]] = next[best]; else head = next[best];
        if (next[best] < n) prev[next[best]] = prev[best];
    }
}
"""


def cluster_rows(csr: sp.csr_matrix, blend: float) -> np.ndarray:
    """``order`` (int32 permutation, ``order[new] = old``) grouping rows of similar columns."""
    blend = _check_blend(blend)
    csr = _as_csr(csr)
    rows = csr.shape[0]
    if rows <= 1:
        return np.arange(rows, dtype=np.int32)
    theta = diagonal_position(csr)
    presort = _presort(csr, theta, blend)
    return _chain(csr, theta, blend, presort)


def diagonal_position(csr: sp.csr_matrix) -> np.ndarray:
    """Per row, the circular mean of its columns' angles 2 pi j / ncols, scaled to [0, 1).

    Empty rows get 1.0 (after every real position, so they sort last).
    """
    rows, cols = csr.shape
    angle = (2 * np.pi / cols) * csr.indices.astype(np.float64)
    row_of = np.repeat(np.arange(rows), np.diff(csr.indptr))
    sin = np.bincount(row_of, weights=np.sin(angle), minlength=rows)
    cos = np.bincount(row_of, weights=np.cos(angle), minlength=rows)
    theta = (np.arctan2(sin, cos) / (2 * np.pi)) % 1.0
    theta[np.diff(csr.indptr) == 0] = 1.0
    return theta


def minhash_signatures(csr: sp.csr_matrix, count: int = _HASHES) -> np.ndarray:
    """(rows, count) int64 MinHash of each row's column set; empty rows get ``_PRIME``."""
    rng = np.random.default_rng(_HASH_SEED)
    mult = rng.integers(1, _PRIME, size=count, dtype=np.int64)
    add = rng.integers(0, _PRIME, size=count, dtype=np.int64)
    lengths = np.diff(csr.indptr)
    nonempty = np.flatnonzero(lengths)
    signature = np.full((csr.shape[0], count), _PRIME, dtype=np.int64)
    cols = csr.indices.astype(np.int64)
    for h in range(count):  # one hash at a time keeps memory at one nnz-long array
        hashed = (cols * mult[h] + add[h]) % _PRIME
        signature[nonempty, h] = np.minimum.reduceat(hashed, csr.indptr[nonempty])
    return signature


def _presort(csr: sp.csr_matrix, theta: np.ndarray, blend: float) -> np.ndarray:
    if blend >= 1.0:
        return np.argsort(theta, kind="stable").astype(np.int32)
    signature = minhash_signatures(csr)
    component = _lsh_components(signature, np.diff(csr.indptr) == 0)
    if blend > 0.0:
        keys = (theta, component)  # np.lexsort: the last key is the primary one
    else:
        keys = (*signature.T[::-1], component)
    return np.lexsort(keys).astype(np.int32)


def _lsh_components(signature: np.ndarray, empty: np.ndarray) -> np.ndarray:
    """Component ids (ordered by their first row) of the rows linked by a shared LSH band."""
    rows = signature.shape[0]
    sources, targets = [], []
    for start in range(0, signature.shape[1] - _BAND + 1, _BAND):
        band = signature[:, start : start + _BAND]
        order = np.lexsort(band.T[::-1])
        same = np.all(band[order[1:]] == band[order[:-1]], axis=1)
        same &= ~empty[order[1:]]  # empty rows share the sentinel, not columns
        sources.append(order[:-1][same])
        targets.append(order[1:][same])
    src, dst = np.concatenate(sources), np.concatenate(targets)
    graph = sp.coo_matrix((np.ones(src.size, dtype=np.int8), (src, dst)), shape=(rows, rows))
    _, labels = connected_components(graph, directed=False)
    first_row = np.full(labels.max() + 1, rows, dtype=np.int64)
    np.minimum.at(first_row, labels, np.arange(rows))
    rank = np.argsort(np.argsort(first_row, kind="stable"), kind="stable")
    component = rank[labels]
    component[empty] = rows  # empty rows last
    return component


def _chain(csr: sp.csr_matrix, theta: np.ndarray, blend: float, presort: np.ndarray) -> np.ndarray:
    rows = csr.shape[0]
    library = load_library(str(compile_c(_CHAIN_SOURCE, openmp=False)))
    function = library.chain_rows
    function.restype = None
    order = np.empty(rows, dtype=np.int32)
    scratch_next = np.empty(rows + 2, dtype=np.int32)
    scratch_prev = np.empty(rows + 2, dtype=np.int32)
    indptr = np.ascontiguousarray(csr.indptr, dtype=np.int32)
    indices = np.ascontiguousarray(csr.indices, dtype=np.int32)
    theta = np.ascontiguousarray(theta, dtype=np.float64)
    presort = np.ascontiguousarray(presort, dtype=np.int32)
    function(
        ctypes.c_int32(rows),
        _pointer(indptr),
        _pointer(indices),
        _pointer(theta),
        ctypes.c_double(blend),
        ctypes.c_int32(_WINDOW),
        _pointer(presort),
        _pointer(order),
        _pointer(scratch_next),
        _pointer(scratch_prev),
    )
    return order


def _pointer(array: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(array.ctypes.data)


def _check_blend(blend: float) -> float:
    try:
        value = float(blend)
    except (TypeError, ValueError):
        raise CognateError(f"reorder blend must be a number in [0, 1], got {blend!r}") from None
    if not 0.0 <= value <= 1.0:
        raise CognateError(f"reorder blend must be in [0, 1], got {blend!r}")
    return value


def _as_csr(csr: sp.csr_matrix) -> sp.csr_matrix:
    """Sorted int32 indices (the chaining's merge needs them), without copying canonical CSR."""
    if not sp.issparse(csr):
        raise CognateError(f"cluster_rows needs a scipy sparse matrix, got {type(csr).__name__}")
    csr = sp.csr_matrix(csr)
    if not csr.has_sorted_indices:
        csr = csr.sorted_indices()
    return csr


# --- the disk cache ------------------------------------------------------------------------


def cache_path(key: str, blend: float) -> Path:
    """Where the order of matrix ``key`` (its sha256) at ``blend`` is cached."""
    blend = _check_blend(blend)
    digest = hashlib.sha256(f"{key}|{blend!r}|v{ALGORITHM_VERSION}".encode()).hexdigest()[:24]
    return cognate_home() / "reorder" / f"{digest}.npy"


def cached_cluster_rows(csr: sp.csr_matrix, key: str, blend: float) -> np.ndarray:
    """``cluster_rows`` through a disk cache; a missing or corrupt file is recomputed."""
    path = cache_path(key, blend)
    rows = csr.shape[0]
    cached = _read_order(path, rows)
    if cached is not None:
        return cached
    order = cluster_rows(csr, blend)
    try:  # atomic: concurrent readers see the old file or the new one
        with atomic_path(path) as tmp, open(tmp, "wb") as stream:
            np.save(stream, order, allow_pickle=False)  # a file object: no .npy appended
    except OSError:
        pass  # a cache that cannot be written costs only the recomputation next time
    return order


def _read_order(path: Path, rows: int) -> np.ndarray | None:
    """The cached order if it is a valid permutation of range(rows), else None (a file
    that is not a regular one, too large, or whose header is not an int32 vector of ``rows``
    is ignored with one warning before its body is read: see ``cognate.homefiles``)."""
    raw = read_home(path, _NPY_HEADER_MAX + 4 * rows)
    if raw is None:
        return None
    try:
        stream = io.BytesIO(raw)
        version = np.lib.format.read_magic(stream)
        read_header = _NPY_HEADERS.get(version)
        if read_header is None:
            raise ValueError(f"format version {version}")
        shape, fortran, dtype = read_header(stream)
    except (OSError, ValueError, EOFError, SyntaxError, TypeError) as err:
        ignore(path, f"not a .npy file ({one_line(err, 80)})")
        return None
    if dtype != np.dtype(np.int32) or shape != (rows,) or fortran:
        ignore(path, f"holds {dtype} {shape}, not the order of {rows} rows")
        return None
    if len(raw) - stream.tell() != 4 * rows:
        ignore(path, f"{len(raw) - stream.tell()} bytes of data, not {4 * rows}")
        return None
    order = np.frombuffer(raw, dtype=np.int32, count=rows, offset=stream.tell()).copy()
    if rows and (order.min() < 0 or order.max() >= rows):
        ignore(path, "not a permutation of the rows")
        return None
    if np.bincount(order, minlength=rows).max(initial=0) > 1:
        ignore(path, "not a permutation of the rows")
        return None
    return order


_NPY_HEADER_MAX = 65536 + 16  # a .npy header is at most this long (format 2.0)
_NPY_HEADERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}
