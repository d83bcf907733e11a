"""The structured masks of pruned NN layers: DynaDiag k-diagonal, block and N:M."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from cognate.errors import CognateError
from cognate.synth.sampling import Positions, check_size, distinct_sample
from cognate.util import positive_int

_NM_CHUNK_CELLS = 1 << 22  # rows of an N:M mask are drawn in chunks of about this many cells


def kdiag(rows: int, cols: int, k: int, rng: np.random.Generator) -> Positions:
    length, count = (
        min(rows, cols),
        max(rows, cols),
    )  # D and P of docs/architecture.md, Facts measured here
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


def block(
    rows: int, cols: int, k: int, rng: np.random.Generator, block: int | None = None
) -> Positions:
    block = 4 if block is None else block
    block = positive_int(block, "block")
    grid_rows, grid_cols = -(-rows // block), -(-cols // block)
    kept = min(grid_rows * grid_cols, max(1, round(k / block**2)))
    tiles = distinct_sample(grid_rows * grid_cols, kept, rng)
    offset = np.arange(block, dtype=np.int64)
    row = ((tiles // grid_cols) * block)[:, None, None] + offset[None, :, None]
    col = ((tiles % grid_cols) * block)[:, None, None] + offset[None, None, :]
    row, col = np.broadcast_arrays(row, col)
    inside = (row < rows) & (col < cols)
    return row[inside], col[inside]


def nm(
    rows: int, cols: int, k: int | None, rng: np.random.Generator, n: int = 2, m: int = 4
) -> Positions:
    if not (isinstance(n, int) and isinstance(m, int) and 1 <= n <= m):
        raise CognateError(f"N:M needs integers 1 <= n <= m, got {n}:{m}")
    groups = -(-cols // m)
    expected = rows * _nm_row_count(cols, n, m)
    check_size(expected)
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


def nm_options_for(fraction: float) -> dict[str, int]:
    """n:m for a requested density: 2:4 when it is 1/2 (the default), else the fraction in
    lowest terms with m <= 100 (0.4 -> 2:5, 0.1 -> 1:10, 0.01 -> 1:100)."""
    if math.isclose(fraction, 0.5, abs_tol=1e-9):
        return {}
    ratio = Fraction(fraction).limit_denominator(100)
    if ratio.numerator < 1:
        raise CognateError(f"an N:M mask cannot have density {fraction:.4g} (m is at most 100)")
    return {"n": ratio.numerator, "m": ratio.denominator}
