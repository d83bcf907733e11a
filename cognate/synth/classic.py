"""The generic kinds: uniform random, banded, block-diagonal and power-law R-MAT."""

from __future__ import annotations

import math

import numpy as np

from cognate.errors import CognateError
from cognate.synth.sampling import (
    Positions,
    distinct_sample,
    sample_in_row_ranges,
    smallest_holding,
    sorted_unique,
)
from cognate.util import positive_int

RMAT_DEFAULTS = {"a": 0.57, "b": 0.19, "c": 0.19, "d": 0.05}
_RMAT_MAX_ROUNDS = 64


def uniform(rows: int, cols: int, k: int, rng: np.random.Generator) -> Positions:
    picked = distinct_sample(rows * cols, k, rng)
    return picked // cols, picked % cols


def banded(
    rows: int, cols: int, k: int, rng: np.random.Generator, bandwidth: int | None = None
) -> Positions:
    index = np.arange(rows, dtype=np.int64)

    def ranges(width: int) -> tuple[np.ndarray, np.ndarray]:
        return np.maximum(index - width, 0), np.minimum(index + width + 1, cols)

    def capacity(width: int) -> int:
        lo, hi = ranges(width)
        return int(np.maximum(hi - lo, 0).sum())

    if bandwidth is None:
        bandwidth = smallest_holding(capacity, k, max(rows, cols)) if capacity(0) < k else 0
    elif not isinstance(bandwidth, int) or bandwidth < 0:
        raise CognateError(f"bandwidth must be a non-negative integer, got {bandwidth!r}")
    lo, hi = ranges(bandwidth)
    return sample_in_row_ranges(lo, hi, k, rng, f"a band of half-width {bandwidth}")


def block_diagonal(
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
        block = smallest_holding(capacity, k, max(rows, cols))
        while capacity(block) < k:  # clipped edge blocks can make capacity non-monotone
            block += 1
    else:
        block = positive_int(block, "block")
    lo, hi = ranges(block)
    return sample_in_row_ranges(lo, hi, k, rng, f"block-diagonal with {block}x{block} blocks")


def rmat(
    rows: int,
    cols: int,
    k: int,
    rng: np.random.Generator,
    a: float = RMAT_DEFAULTS["a"],
    b: float = RMAT_DEFAULTS["b"],
    c: float = RMAT_DEFAULTS["c"],
    d: float = RMAT_DEFAULTS["d"],
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
        keys = sorted_unique(np.concatenate([keys, row[keep] * cols + col[keep]]))
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
