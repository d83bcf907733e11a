"""Synthetic sparse matrices: scale tests and the structured masks of pruned NN layers.

``generate(kind, rows, cols, density=|sparsity=|nnz=, seed=, **options)`` returns a
canonical ``Matrix`` with float32 standard-normal values. Every generator is vectorised
numpy and deterministic per seed. Kinds and their options:

- ``uniform``: positions uniformly at random, exactly the requested nnz.
- ``rmat``: power-law R-MAT (Chakrabarti et al. 2004); ``a, b, c, d`` quadrant
  probabilities (Graph500 defaults 0.57/0.19/0.19/0.05); exactly the requested nnz of
  distinct positions.
- ``banded``: positions uniformly inside ``|i - j| <= bandwidth`` (default: the narrowest
  band that holds the requested nnz).
- ``block-diagonal``: positions uniformly inside ``block`` x ``block`` diagonal blocks
  (default: the smallest block size that holds the requested nnz).
- ``kdiag``: DynaDiag's K wrapped diagonals (DESIGN sections 10, 11): with D = min(M, N),
  P = max(M, N), K = ceil((1 - S) * M * N / D) of the P diagonals are kept (chosen at
  random); diagonal p covers rows (t + p) % M, cols t for t < D when M >= N (transposed
  otherwise). nnz = K * D exactly, so the density is rounded up to whole diagonals.
- ``block``: a ``block`` x ``block`` tiling (default 4), round(nnz / block**2) tiles kept
  whole (chosen at random; edge tiles are clipped to the matrix).
- ``nm``: N:M along rows: in each row, every group of ``m`` consecutive columns keeps ``n``
  entries (default 2:4; a last partial group keeps min(n, its width)). The density is
  n / m; a density given too must agree.
  Without ``n``/``m``, a density other than 1/2 picks n:m = the density in lowest terms
  (m <= 100): sparsity 0.6 -> 2:5, 0.9 -> 1:10, 0.99 -> 1:100.
Every kind takes ``permute`` = rows | cols | both: a random row and/or column permutation
of the same matrix S (drawn from a separate stream, so S is identical). The result's
``csr`` is the permuted matrix A and it carries the index maps (``row_perm`` / ``col_perm``,
``A[row_perm[i], col_perm[j]] = S[i, j]``; ``Matrix.structured()`` gives S back).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.io import physical_memory
from cognate.matrix import Matrix, canonicalize

INT32_MAX = 2**31 - 1
KINDS: tuple[str, ...] = ("uniform", "rmat", "banded", "block-diagonal", "kdiag", "block", "nm")
PERMUTE_CHOICES: tuple[str, ...] = ("rows", "cols", "both")
# The layer workloads of DESIGN section 10 (issue 10): pruned NN weights (M x N) and the
# sparsities the structured-sparsity papers report.
LAYER_SHAPES: tuple[tuple[int, int], ...] = ((768, 768), (768, 3072), (3072, 768), (4096, 4096))
LAYER_SPARSITIES: tuple[float, ...] = (0.6, 0.8, 0.9, 0.95, 0.99)
STRUCTURED_KINDS: tuple[str, ...] = ("kdiag", "block", "nm")
_OPTIONS: dict[str, tuple[str, ...]] = {
    "uniform": (),
    "rmat": ("a", "b", "c", "d"),
    "banded": ("bandwidth",),
    "block-diagonal": ("block",),
    "kdiag": (),
    "block": ("block",),
    "nm": ("n", "m"),
}
_RMAT_DEFAULTS = {"a": 0.57, "b": 0.19, "c": 0.19, "d": 0.05}
_RMAT_MAX_ROUNDS = 64
_BYTES_PER_ENTRY = 64  # generous: positions, keys, values and the CSR built from them
_NM_CHUNK_CELLS = 1 << 22  # rows of an N:M mask are drawn in chunks of about this many cells

Positions = tuple[np.ndarray, np.ndarray]  # (row, col) int64 arrays of distinct positions


def generate(
    kind: str,
    rows: int,
    cols: int,
    *,
    density: float | None = None,
    sparsity: float | None = None,
    nnz: int | None = None,
    seed: int = 0,
    permute: str | None = None,
    **kind_options: Any,
) -> Matrix:
    """A synthetic matrix of the given kind; bad arguments raise ``CognateError``."""
    _check_args(kind, rows, cols, seed, permute, kind_options)
    target = _target_nnz(kind, rows, cols, density, sparsity, nnz)
    if kind == "kdiag" and nnz is None:  # K from the fraction itself, not a rounded count
        fraction = sparsity if sparsity is not None else 1 - density
        target = kdiag_count(rows, cols, fraction) * min(rows, cols)
    if kind == "nm" and target is not None and not kind_options:
        kind_options = _nm_options_for(target / (rows * cols))
    rng = np.random.default_rng(seed)
    row, col = _GENERATORS[kind](rows, cols, target, rng, **kind_options)
    values = rng.standard_normal(row.size, dtype=np.float32)
    maps: dict[str, np.ndarray] = {}
    if permute:
        maps = _permutation_maps(rows, cols, seed, permute)
        row = maps["row_perm"][row] if "row_perm" in maps else row
        col = maps["col_perm"][col] if "col_perm" in maps else col
    csr = canonicalize(sp.coo_matrix((values, (row, col)), shape=(rows, cols)))
    options = "".join(f" {k}={v}" for k, v in sorted(kind_options.items()))
    source = f"synth:{kind} {rows}x{cols} nnz={csr.nnz} seed={seed}{options}"
    if permute:
        source += f" permute={permute}"
    name = f"{kind}_{rows}x{cols}_seed{seed}" + (f"_perm-{permute}" if permute else "")
    return Matrix(name, csr, source=source, field="real", symmetry="general", **maps)


def _check_args(
    kind: str, rows: int, cols: int, seed: int, permute: str | None, options: dict[str, Any]
) -> None:
    if kind not in KINDS:
        raise CognateError(f"unknown synthetic kind {kind!r} (choose from {', '.join(KINDS)})")
    for label, value in (("rows", rows), ("cols", cols)):
        if not isinstance(value, int | np.integer) or not 1 <= value <= INT32_MAX:
            raise CognateError(f"{label} must be an integer in [1, {INT32_MAX}], got {value!r}")
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise CognateError(f"seed must be a non-negative integer, got {seed!r}")
    if permute not in (None, *PERMUTE_CHOICES):
        raise CognateError(f"permute must be one of {', '.join(PERMUTE_CHOICES)}, got {permute!r}")
    unknown = sorted(set(options) - set(_OPTIONS[kind]))
    if unknown:
        allowed = ", ".join(_OPTIONS[kind]) or "none"
        raise CognateError(
            f"{kind} does not take option(s) {', '.join(unknown)} (allowed: {allowed})"
        )


def _target_nnz(
    kind: str, rows: int, cols: int, density: float | None, sparsity: float | None, nnz: int | None
) -> int | None:
    """The requested number of entries from exactly one of density / sparsity / nnz."""
    given = [x for x in (density, sparsity, nnz) if x is not None]
    if len(given) > 1:
        raise CognateError("give only one of density, sparsity, nnz")
    cells = rows * cols
    if not given:
        if kind == "nm":  # N:M fixes its own density
            return None
        raise CognateError(f"{kind} needs one of density, sparsity, nnz")
    if density is not None:
        if not 0 < density <= 1:
            raise CognateError(f"density must be in (0, 1], got {density}")
        target = round(density * cells)
    elif sparsity is not None:
        if not 0 <= sparsity < 1:
            raise CognateError(f"sparsity must be in [0, 1), got {sparsity}")
        target = round((1 - sparsity) * cells)
    else:
        if not isinstance(nnz, int | np.integer) or not 1 <= nnz <= cells:
            raise CognateError(f"nnz must be an integer in [1, rows*cols = {cells}], got {nnz!r}")
        target = int(nnz)
    _check_size(target)
    return max(1, target)


def _check_size(entries: int) -> None:
    """Refuse what int32 CSR cannot index or this machine cannot hold, before allocating."""
    if entries > INT32_MAX:
        raise CognateError(f"{entries} entries exceed the int32 limit {INT32_MAX}")
    if entries * _BYTES_PER_ENTRY > physical_memory():
        raise CognateError(f"{entries} entries need more memory than this machine has")


# --- sampling helpers ------------------------------------------------------------------


def _distinct_sample(total: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """k distinct integers uniformly from [0, total), sorted (vectorised rejection)."""
    if k > total:
        raise CognateError(f"cannot place {k} entries in {total} positions")
    if total <= 4 * k:  # dense request: a permutation of the whole range is cheap enough
        return np.sort(rng.permutation(total)[:k])
    picked = _sorted_unique(rng.integers(0, total, size=k + k // 8 + 16))
    while picked.size < k:
        more = rng.integers(0, total, size=2 * (k - picked.size) + 16)
        picked = _sorted_unique(np.concatenate([picked, more]))
    if picked.size > k:  # a uniform subset of a uniform random set is uniform
        picked = np.sort(rng.choice(picked, size=k, replace=False))
    return picked


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values; sort + compare is several times faster than np.unique here."""
    values = np.sort(values)
    keep = np.empty(values.size, dtype=bool)
    keep[:1] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def _sample_in_row_ranges(
    lo: np.ndarray, hi: np.ndarray, k: int, rng: np.random.Generator, what: str
) -> Positions:
    """k distinct positions uniformly from the cells with lo[i] <= col < hi[i] in row i."""
    counts = np.maximum(hi - lo, 0)
    starts = np.concatenate([[0], np.cumsum(counts)])
    total = int(starts[-1])
    if k > total:
        raise CognateError(f"{what} holds at most {total} entries, {k} requested")
    picked = _distinct_sample(total, k, rng)
    row = np.searchsorted(starts, picked, side="right") - 1
    return row, lo[row] + (picked - starts[row])


def _smallest_holding(capacity: Callable[[int], int], k: int, high: int) -> int:
    """The smallest width w in [1, high] with capacity(w) >= k (capacity is non-decreasing)."""
    low = 0
    while high - low > 1:
        mid = (low + high) // 2
        if capacity(mid) >= k:
            high = mid
        else:
            low = mid
    return high


# --- generators ----------------------------------------------------------------------------


def _uniform(rows: int, cols: int, k: int, rng: np.random.Generator) -> Positions:
    picked = _distinct_sample(rows * cols, k, rng)
    return picked // cols, picked % cols


def _banded(
    rows: int, cols: int, k: int, rng: np.random.Generator, bandwidth: int | None = None
) -> Positions:
    index = np.arange(rows, dtype=np.int64)

    def ranges(width: int) -> tuple[np.ndarray, np.ndarray]:
        return np.maximum(index - width, 0), np.minimum(index + width + 1, cols)

    def capacity(width: int) -> int:
        lo, hi = ranges(width)
        return int(np.maximum(hi - lo, 0).sum())

    if bandwidth is None:
        bandwidth = _smallest_holding(capacity, k, max(rows, cols)) if capacity(0) < k else 0
    elif not isinstance(bandwidth, int) or bandwidth < 0:
        raise CognateError(f"bandwidth must be a non-negative integer, got {bandwidth!r}")
    lo, hi = ranges(bandwidth)
    return _sample_in_row_ranges(lo, hi, k, rng, f"a band of half-width {bandwidth}")


def _block_diagonal(
    rows: int, cols: int, k: int, rng: np.random.Generator, block: int | None = None
) -> Positions:
    index = np.arange(rows, dtype=np.int64)

    def ranges(size: int) -> tuple[np.ndarray, np.ndarray]:
        first = (index // size) * size  # block k spans rows and cols [k*size, (k+1)*size)
        return np.minimum(first, cols), np.minimum(first + size, cols)

    def capacity(size: int) -> int:
        lo, hi = ranges(size)
        return int((hi - lo).sum())

    if block is None:
        block = _smallest_holding(capacity, k, max(rows, cols))
        while capacity(block) < k:  # clipped edge blocks can make capacity non-monotone
            block += 1
    elif not isinstance(block, int) or block < 1:
        raise CognateError(f"block must be a positive integer, got {block!r}")
    lo, hi = ranges(block)
    return _sample_in_row_ranges(lo, hi, k, rng, f"block-diagonal with {block}x{block} blocks")


def _rmat(
    rows: int,
    cols: int,
    k: int,
    rng: np.random.Generator,
    a: float = _RMAT_DEFAULTS["a"],
    b: float = _RMAT_DEFAULTS["b"],
    c: float = _RMAT_DEFAULTS["c"],
    d: float = _RMAT_DEFAULTS["d"],
) -> Positions:
    probs = np.array([a, b, c, d], dtype=np.float64)
    if np.any(probs < 0) or not math.isclose(probs.sum(), 1.0, abs_tol=1e-6):
        raise CognateError(f"R-MAT a, b, c, d must be >= 0 and sum to 1, got {a}, {b}, {c}, {d}")
    keys = np.empty(0, dtype=np.int64)
    for _ in range(_RMAT_MAX_ROUNDS):
        missing = k - keys.size
        if missing <= 0:
            break
        row, col = _rmat_draw(rows, cols, missing + missing // 4 + 16, probs, rng)
        keep = (row < rows) & (col < cols)
        keys = _sorted_unique(np.concatenate([keys, row[keep] * cols + col[keep]]))
    else:
        raise CognateError(
            f"R-MAT placed only {keys.size} distinct entries of {k} requested: lower the density"
        )
    if keys.size > k:
        keys = np.sort(rng.choice(keys, size=k, replace=False))
    return keys // cols, keys % cols


def _rmat_draw(
    rows: int, cols: int, count: int, probs: np.ndarray, rng: np.random.Generator
) -> Positions:
    """count R-MAT edges in a 2^lr x 2^lc grid, one recursion level per bit (vectorised)."""
    row_bits, col_bits = max(1, math.ceil(math.log2(rows))), max(1, math.ceil(math.log2(cols)))
    row = np.zeros(count, dtype=np.int64)
    col = np.zeros(count, dtype=np.int64)
    a_end, b_end, c_end = np.cumsum(probs)[:-1]
    p_row_one, p_col_one = probs[2] + probs[3], probs[1] + probs[3]
    for level in range(max(row_bits, col_bits)):
        draw = rng.random(count)
        if level < min(row_bits, col_bits):  # joint quadrant: a (0,0) b (0,1) c (1,0) d (1,1)
            row = (row << 1) | (draw >= b_end)
            col = (col << 1) | (((draw >= a_end) & (draw < b_end)) | (draw >= c_end))
        elif row_bits > col_bits:  # only rows left to split: their marginal
            row = (row << 1) | (draw < p_row_one)
        else:
            col = (col << 1) | (draw < p_col_one)
    return row, col


def _kdiag(rows: int, cols: int, k: int, rng: np.random.Generator) -> Positions:
    length, count = min(rows, cols), max(rows, cols)  # D and P of DESIGN section 11
    kept = min(count, max(1, math.ceil(k / length)))
    offsets = np.sort(rng.choice(count, size=kept, replace=False)).astype(np.int64)
    t = np.arange(length, dtype=np.int64)
    wrapped = (t[None, :] + offsets[:, None]) % count
    straight = np.broadcast_to(t, wrapped.shape)
    if rows >= cols:
        return wrapped.ravel(), straight.ravel()
    return straight.ravel(), wrapped.ravel()


def kdiag_count(rows: int, cols: int, sparsity: float) -> int:
    """DynaDiag's K = ceil((1 - S) * M * N / min(M, N)), at least 1, at most max(M, N)."""
    k = math.ceil(round((1 - sparsity) * rows * cols / min(rows, cols), 9))
    return min(max(rows, cols), max(1, k))


def _block(
    rows: int, cols: int, k: int, rng: np.random.Generator, block: int | None = None
) -> Positions:
    block = 4 if block is None else block
    if not isinstance(block, int) or block < 1:
        raise CognateError(f"block must be a positive integer, got {block!r}")
    grid_rows, grid_cols = -(-rows // block), -(-cols // block)
    kept = min(grid_rows * grid_cols, max(1, round(k / block**2)))
    tiles = _distinct_sample(grid_rows * grid_cols, kept, rng)
    offset = np.arange(block, dtype=np.int64)
    row = ((tiles // grid_cols) * block)[:, None, None] + offset[None, :, None]
    col = ((tiles % grid_cols) * block)[:, None, None] + offset[None, None, :]
    row, col = np.broadcast_arrays(row, col)
    inside = (row < rows) & (col < cols)
    return row[inside], col[inside]


def _nm(
    rows: int, cols: int, k: int | None, rng: np.random.Generator, n: int = 2, m: int = 4
) -> Positions:
    if not (isinstance(n, int) and isinstance(m, int) and 1 <= n <= m):
        raise CognateError(f"N:M needs integers 1 <= n <= m, got {n}:{m}")
    groups = -(-cols // m)
    expected = rows * _nm_row_count(cols, n, m)
    _check_size(expected)
    if k is not None and abs(k - rows * cols * n / m) > rows * n + 1:  # partial groups differ
        raise CognateError(
            f"an {n}:{m} mask of {rows}x{cols} has {expected} entries (density {n}/{m}), "
            f"{k} requested: omit the density or make it match"
        )
    chunk = max(1, _NM_CHUNK_CELLS // (groups * m))
    parts = [
        _nm_rows(start, min(rows, start + chunk), cols, n, m, rng)
        for start in range(0, rows, chunk)
    ]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _nm_row_count(cols: int, n: int, m: int) -> int:
    full, rest = divmod(cols, m)
    return full * n + min(n, rest)


def _nm_rows(
    first: int, stop: int, cols: int, n: int, m: int, rng: np.random.Generator
) -> Positions:
    groups = -(-cols // m)
    keys = rng.random((stop - first, groups, m), dtype=np.float32)
    column = np.arange(groups * m, dtype=np.int64).reshape(groups, m)
    keys[:, column >= cols] = 2.0  # padding past the last column is never picked first
    chosen = (
        np.argpartition(keys, n - 1, axis=2)[:, :, :n]
        if n < m
        else np.broadcast_to(np.arange(m), keys.shape)
    )
    col = (np.arange(groups, dtype=np.int64) * m)[None, :, None] + chosen
    row = np.broadcast_to(np.arange(first, stop, dtype=np.int64)[:, None, None], col.shape)
    inside = col < cols
    return row[inside], col[inside]


_GENERATORS: dict[str, Callable[..., Positions]] = {
    "uniform": _uniform,
    "rmat": _rmat,
    "banded": _banded,
    "block-diagonal": _block_diagonal,
    "kdiag": _kdiag,
    "block": _block,
    "nm": _nm,
}


def _permutation_maps(rows: int, cols: int, seed: int, permute: str) -> dict[str, np.ndarray]:
    """The index maps of a permuted variant: A[row_perm[i], col_perm[j]] = S[i, j].

    Drawn from a stream independent of the pattern's, so S is the unpermuted matrix. The
    draws are those the generator has always made (entry (i, j) of S lands at
    (argsort(pi_r)[i], argsort(pi_c)[j])), so permuted outputs are unchanged.
    """
    rng = np.random.default_rng([seed, 0x9E3779B9])
    maps = {}
    if permute in ("rows", "both"):
        maps["row_perm"] = np.argsort(rng.permutation(rows)).astype(np.int32)
    if permute in ("cols", "both"):
        maps["col_perm"] = np.argsort(rng.permutation(cols)).astype(np.int32)
    return maps


def _nm_options_for(fraction: float) -> dict[str, int]:
    """n:m for a requested density: 2:4 when it is 1/2 (the default), else the fraction in
    lowest terms with m <= 100 (0.4 -> 2:5, 0.1 -> 1:10, 0.01 -> 1:100)."""
    if math.isclose(fraction, 0.5, abs_tol=1e-9):
        return {}
    ratio = Fraction(fraction).limit_denominator(100)
    if ratio.numerator < 1:
        raise CognateError(f"an N:M mask cannot have density {fraction:.4g} (m is at most 100)")
    return {"n": ratio.numerator, "m": ratio.denominator}
