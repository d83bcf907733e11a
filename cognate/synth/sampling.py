"""Sampling helpers shared by the generators: distinct positions, fast unique, size checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.budget import physical_memory
from cognate.errors import CognateError

INT32_MAX = 2**31 - 1
_BYTES_PER_ENTRY = 64  # generous: positions, keys, values and the CSR built from them
_MAX_ROUNDS = 64  # fill_distinct gives up after this many draws (a request too dense)

Positions = tuple[np.ndarray, np.ndarray]  # (row, col) int64 arrays of distinct positions


def check_size(entries: int) -> None:
    """Refuse what int32 CSR cannot index or this machine cannot hold, before allocating."""
    if entries > INT32_MAX:
        raise CognateError(f"{entries} entries exceed the int32 limit {INT32_MAX}")
    if entries * _BYTES_PER_ENTRY > physical_memory():
        raise CognateError(f"{entries} entries need more memory than this machine has")


def distinct_sample(total: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """k distinct integers uniformly from [0, total), sorted (vectorised rejection)."""
    if k > total:
        raise CognateError(f"cannot place {k} entries in {total} positions")
    if total <= 4 * k:  # dense request: a permutation of the whole range is cheap enough
        return np.sort(rng.permutation(total)[:k])
    picked = sorted_unique(rng.integers(0, total, size=k + k // 8 + 16))
    while picked.size < k:
        more = rng.integers(0, total, size=2 * (k - picked.size) + 16)
        picked = sorted_unique(np.concatenate([picked, more]))
    if picked.size > k:  # a uniform subset of a uniform random set is uniform
        picked = np.sort(rng.choice(picked, size=k, replace=False))
    return picked


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values; sort + compare is several times faster than np.unique here."""
    values = np.sort(values)
    keep = np.empty(values.size, dtype=bool)
    keep[:1] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def sample_in_row_ranges(
    lo: np.ndarray, hi: np.ndarray, k: int, rng: np.random.Generator, what: str
) -> Positions:
    """k distinct positions uniformly from the cells with lo[i] <= col < hi[i] in row i."""
    counts = np.maximum(hi - lo, 0)
    starts = np.concatenate([[0], np.cumsum(counts)])
    total = int(starts[-1])
    if k > total:
        raise CognateError(f"{what} holds at most {total} entries, {k} requested")
    picked = distinct_sample(total, k, rng)
    row = np.searchsorted(starts, picked, side="right") - 1
    return row, lo[row] + (picked - starts[row])


def smallest_holding(capacity: Callable[[int], int], k: int, high: int) -> int:
    """The smallest width w in [1, high] with capacity(w) >= k (capacity is non-decreasing)."""
    low = 0
    while high - low > 1:
        mid = (low + high) // 2
        if capacity(mid) >= k:
            high = mid
        else:
            low = mid
    return high


# --- helpers of the realistic kinds (whole matrices whose shape follows from the size) ------


@dataclass(frozen=True)
class Pattern:
    """Distinct positions and the shape they live in."""

    row: np.ndarray
    col: np.ndarray
    shape: tuple[int, int]


def fill_distinct(
    draw: Callable[[int], np.ndarray], k: int, rng: np.random.Generator, what: str
) -> np.ndarray:
    """k distinct keys from ``draw(count)`` (candidate keys, repeats allowed), drawing more
    until k are distinct, then a uniform subset of exactly k; sorted."""
    keys = np.empty(0, dtype=np.int64)
    for _ in range(_MAX_ROUNDS):
        missing = k - keys.size
        if missing <= 0:
            break
        keys = sorted_unique(np.concatenate([keys, draw(missing + missing // 4 + 16)]))
    else:
        raise CognateError(f"{what} placed only {keys.size} distinct entries of {k} requested")
    if keys.size > k:
        keys = np.sort(rng.choice(keys, size=k, replace=False))
    return keys


def symmetric(row: np.ndarray, col: np.ndarray, n: int) -> Pattern:
    """The n x n pattern of undirected edges (row, col) with both directions, distinct."""
    keys = sorted_unique(np.concatenate([row * n + col, col * n + row]))
    return Pattern(keys // n, keys % n, (n, n))


def renumber(pattern: Pattern, order: np.ndarray) -> Pattern:
    """Symmetric renumbering: node ``order[i]`` becomes node i."""
    new = np.empty_like(order)
    new[order] = np.arange(order.size, dtype=order.dtype)
    return Pattern(new[pattern.row], new[pattern.col], pattern.shape)


def node_order(pattern: Pattern, rcm: bool, rng: np.random.Generator) -> np.ndarray:
    """Reverse Cuthill-McKee (scipy.sparse.csgraph) when ``rcm``, else a random order (the
    numbering of an unordered mesh or graph file)."""
    n = pattern.shape[0]
    if not rcm:
        return rng.permutation(n)
    from scipy.sparse.csgraph import reverse_cuthill_mckee  # only the rcm variants need it

    ones = np.ones(pattern.row.size, dtype=np.int8)
    graph = sp.csr_matrix((ones, (pattern.row, pattern.col)), shape=(n, n))
    return reverse_cuthill_mckee(graph, symmetric_mode=True).astype(np.int64)


def square_size(
    rows: int | None, cols: int | None, nnz: int | None, per_row: float, kind: str
) -> tuple[int, int]:
    """(nodes, target nnz) of a square kind from rows (= cols) or nnz at ``per_row``."""
    if rows is not None and cols is not None and rows != cols:
        raise CognateError(f"{kind} is square: rows and cols must agree, got {rows} x {cols}")
    nodes = rows if rows is not None else cols
    if nodes is None:
        if nnz is None:
            raise CognateError(f"{kind} needs nnz or rows")
        nodes = max(2, round(nnz / per_row))
    target = nnz if nnz is not None else round(nodes * per_row)
    check_size(target)
    return int(nodes), int(target)


def check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise CognateError(f"{name} must be true or false, got {value!r}")
    return bool(value)


def check_number(value: Any, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise CognateError(f"{name} must be a number in [{low}, {high}], got {value!r}")
    return float(value)
