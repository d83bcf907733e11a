"""Engineering classes: circuit simulation (``circuit``) and LP constraints (``lp``).

``circuit`` imitates circuit-simulation matrices (SuiteSparse Freescale, Rajat, ASIC and
Hamm groups): a full diagonal, a symmetric pattern of mostly local couplings (offsets
log-normal, most within a few dozen rows; 10% anywhere) at about ``degree`` entries per
row, and ``dense`` supply/ground nets whose rows and columns are very dense (net sizes
power-law, the largest touching about half of the nodes; together about 15% of the nnz).

``lp`` imitates LP constraint matrices (SuiteSparse LPnetlib, Mittelmann): rectangular
(cols = ``ratio`` x rows), bordered block-angular. ``blocks`` diagonal blocks of random
size (sub-problems: each of their columns has entries only in the block's rows, one or
more), 3% linking rows at the bottom spanning all blocks (coupling constraints, about 10%
of the nnz, row lengths power-law) and 2% linking columns at the right (about 5% of it).
"""

from __future__ import annotations

import numpy as np

from cognate.errors import CognateError
from cognate.synth.sampling import (
    Pattern,
    check_number,
    check_size,
    fill_distinct,
    sorted_unique,
    square_size,
    symmetric,
)

_CIRCUIT_DENSE_SHARE = 0.15  # of the nnz in the dense nets' rows and columns
_CIRCUIT_FAR_SHARE = 0.1  # of the couplings between arbitrary nodes
_LP_PER_COLUMN = 4.0  # mean entries per column of a generated LP
_LP_LINK_ROWS, _LP_LINK_ROW_SHARE = 0.03, 0.10  # fraction of rows, fraction of nnz
_LP_LINK_COLS, _LP_LINK_COL_SHARE = 0.02, 0.05


def circuit(
    rows: int | None,
    cols: int | None,
    nnz: int | None,
    rng: np.random.Generator,
    degree: float = 5.0,
    dense: int | None = None,
) -> Pattern:
    """A circuit-like symmetric pattern with about nnz entries (or rows nodes)."""
    degree = check_number(degree, "degree", 1.5, 1e5)
    n, target = square_size(rows, cols, nnz, degree, "circuit")
    if dense is None:
        dense = max(2, round(np.log2(n) / 2))
    elif not isinstance(dense, int) or not 0 <= dense <= n:
        raise CognateError(f"dense must be an integer in [0, {n}], got {dense!r}")
    net_row, net_col = _dense_nets(n, dense, round(_CIRCUIT_DENSE_SHARE * target / 2), rng)
    fixed = symmetric(
        np.concatenate([np.arange(n), net_row]), np.concatenate([np.arange(n), net_col]), n
    )
    fixed_keys = fixed.row * n + fixed.col

    def draw(count: int) -> np.ndarray:
        node = rng.integers(0, n, count)
        offset = np.ceil(rng.lognormal(1.0, 1.2, count)).astype(np.int64)
        partner = np.where(rng.random(count) < 0.5, node + offset, node - offset)
        far = rng.random(count) < _CIRCUIT_FAR_SHARE
        partner = np.where(far, rng.integers(0, n, count), partner)
        keep = (partner >= 0) & (partner < n) & (partner != node)
        low = np.minimum(node, partner)[keep]
        high = np.maximum(node, partner)[keep]
        return low * n + high

    pairs = max(0, (target - fixed_keys.size) // 2)
    keys = fill_distinct(draw, pairs, rng, "circuit") if pairs else np.empty(0, np.int64)
    local = symmetric(keys // n, keys % n, n)
    merged = sorted_unique(np.concatenate([fixed_keys, local.row * n + local.col]))
    return Pattern(merged // n, merged % n, (n, n))


def _dense_nets(
    n: int, nets: int, entries: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(net node, member) pairs: nets hub nodes with power-law sizes summing to ~entries."""
    if nets == 0 or entries == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    hubs = rng.choice(n, size=nets, replace=False)
    share = 1.0 / np.arange(1, nets + 1)  # Zipf: the largest net is the supply rail
    sizes = np.minimum(np.round(share / share.sum() * entries), n // 2).astype(np.int64)
    members = rng.integers(0, n, int(sizes.sum()))
    return np.repeat(hubs, sizes), members


def lp(
    rows: int | None,
    cols: int | None,
    nnz: int | None,
    rng: np.random.Generator,
    blocks: int | None = None,
    ratio: float = 2.5,
) -> Pattern:
    """A bordered block-angular rows x cols LP matrix with about nnz entries."""
    ratio = check_number(ratio, "ratio", 0.1, 100.0)
    m, n = _lp_shape(rows, cols, nnz, ratio)
    target = nnz if nnz is not None else round(n * _LP_PER_COLUMN)
    check_size(target)
    link_rows = max(1, round(_LP_LINK_ROWS * m))
    link_cols = max(1, round(_LP_LINK_COLS * n))
    inner_m, inner_n = m - link_rows, n - link_cols
    if inner_m < 1 or inner_n < 1 or target > m * n // 2:
        raise CognateError(f"lp: {target} entries do not fit a {m} x {n} block-angular matrix")
    if blocks is None:
        blocks = max(2, round(np.sqrt(inner_m) / 3))
    elif not isinstance(blocks, int) or not 1 <= blocks <= min(inner_m, inner_n):
        raise CognateError(
            f"blocks must be an integer in [1, {min(inner_m, inner_n)}], got {blocks!r}"
        )
    blocks = min(blocks, inner_m, inner_n)
    row_start, col_start = _block_bounds(inner_m, blocks, rng), _block_bounds(inner_n, blocks, rng)
    col_block = np.searchsorted(col_start, np.arange(inner_n), side="right") - 1
    link_row_weight = (1.0 - rng.random(link_rows)) ** -1.0  # Pareto(1): a few dense rows
    link_row_cumulative = np.cumsum(link_row_weight)

    def in_block(col: np.ndarray) -> np.ndarray:
        block = col_block[col]
        low, high = row_start[block], row_start[block + 1]
        return low + (rng.random(col.size) * (high - low)).astype(np.int64)

    def draw(count: int) -> np.ndarray:
        part = rng.random(count)
        col = rng.integers(0, inner_n, count)
        row = in_block(col)
        linking_row = part < _LP_LINK_ROW_SHARE
        picked = np.searchsorted(link_row_cumulative, rng.random(count) * link_row_cumulative[-1])
        row = np.where(linking_row, inner_m + np.minimum(picked, link_rows - 1), row)
        linking_col = part > 1 - _LP_LINK_COL_SHARE
        col = np.where(linking_col, inner_n + rng.integers(0, link_cols, count), col)
        row = np.where(linking_col, rng.integers(0, m, count), row)
        return row * n + col

    every_column = np.arange(inner_n, dtype=np.int64)  # no empty sub-problem column
    fixed = sorted_unique(in_block(every_column) * n + every_column)
    more = fill_distinct(draw, max(0, target - fixed.size), rng, "lp")
    keys = sorted_unique(np.concatenate([fixed, more]))
    return Pattern(keys // n, keys % n, (m, n))


def _lp_shape(rows: int | None, cols: int | None, nnz: int | None, ratio: float) -> tuple[int, int]:
    if rows is not None and cols is not None:
        return rows, cols
    if rows is not None:
        return rows, max(2, round(rows * ratio))
    if cols is not None:
        return max(2, round(cols / ratio)), cols
    if nnz is None:
        raise CognateError("lp needs nnz or rows/cols")
    n = max(4, round(nnz / _LP_PER_COLUMN))
    return max(4, round(n / ratio)), n


def _block_bounds(size: int, blocks: int, rng: np.random.Generator) -> np.ndarray:
    """blocks + 1 increasing bounds from 0 to size: random block sizes, none empty."""
    shares = rng.gamma(2.0, 1.0, blocks)
    inner = np.floor(np.cumsum(shares)[:-1] / shares.sum() * (size - blocks)).astype(np.int64)
    return np.concatenate([[0], inner + np.arange(1, blocks), [size]]).astype(np.int64)
