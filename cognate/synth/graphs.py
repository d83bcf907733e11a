"""Graph classes: social/web graphs with communities (``powerlaw``) and road networks (``road``).

``powerlaw`` imitates SNAP-like social and web graphs (SuiteSparse SNAP / LAW groups):
a degree-corrected stochastic block model (Karrer and Newman 2011). Every node gets power-
law weights (Pareto, exponent ``gamma``, capped at the structural cutoff sqrt(nnz)) and a
community (sizes log-normal); an edge's source is drawn by out-weight, its target by in-
weight inside the source's community, or anywhere with probability ``mixing``. Undirected
graphs store both directions; directed ones draw out- and in-weights independently. No
self loops; nodes are numbered at random (communities are not contiguous).

``road`` imitates road networks (SuiteSparse DIMACS10 / SNAP roadNet-*): a random geometric
planar graph. Points uniform in the unit square, their Delaunay triangulation's Euclidean
minimum spanning tree (connected, diameter ~ sqrt(n) hops), plus the shortest other
Delaunay edges whose endpoints stay at degree <= 4, up to a mean degree of about 2.7. Nodes
in random order, or in reverse Cuthill-McKee order with ``rcm``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.synth.sampling import (
    Pattern,
    check_flag,
    check_number,
    fill_distinct,
    node_order,
    renumber,
    square_size,
    symmetric,
)

ROAD_DEGREE = 2.7  # mean degree of roadNet-CA / -PA / -TX is 2.8, DIMACS10 road graphs ~2.5
_ROAD_MAX_DEGREE = 4


def powerlaw(
    rows: int | None,
    cols: int | None,
    nnz: int | None,
    rng: np.random.Generator,
    directed: bool = False,
    degree: float = 16.0,
    gamma: float = 2.3,
    communities: int | None = None,
    mixing: float = 0.1,
) -> Pattern:
    """A power-law community graph with about ``degree`` entries per row."""
    directed = check_flag(directed, "directed")
    degree = check_number(degree, "degree", 1.0, 1e6)
    gamma = check_number(gamma, "gamma", 2.01, 5.0)
    mixing = check_number(mixing, "mixing", 0.0, 1.0)
    n, target = square_size(rows, cols, nnz, degree, "powerlaw")
    if target > n * (n - 1):
        raise CognateError(f"powerlaw: {target} entries do not fit {n} nodes without self loops")
    if communities is None:
        communities = max(1, round(np.sqrt(n) / 4))
    elif not isinstance(communities, int) or not 1 <= communities <= n:
        raise CognateError(f"communities must be an integer in [1, {n}], got {communities!r}")
    block = _communities(n, communities, rng)
    cap = np.sqrt(target)
    out_weight = _pareto_weights(n, gamma, target, cap, rng)
    in_weight = _pareto_weights(n, gamma, target, cap, rng) if directed else out_weight
    sampler = _BlockSampler(block, in_weight)
    out_cumulative = np.cumsum(out_weight)

    def draw(count: int) -> np.ndarray:
        draw_out = rng.random(count) * out_cumulative[-1]
        source = np.searchsorted(out_cumulative, draw_out, side="right")
        source = np.minimum(source, n - 1)
        inside = rng.random(count) >= mixing
        target_node = np.where(inside, sampler.inside(source, rng), sampler.anywhere(count, rng))
        keep = source != target_node
        source, target_node = source[keep], target_node[keep]
        if directed:
            return source * n + target_node
        return np.minimum(source, target_node) * n + np.maximum(source, target_node)

    if directed:
        keys = fill_distinct(draw, target, rng, "powerlaw")
        return Pattern(keys // n, keys % n, (n, n))
    keys = fill_distinct(draw, max(1, target // 2), rng, "powerlaw")
    return symmetric(keys // n, keys % n, n)


def _communities(n: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """Each node's community: log-normal sizes (sigma 1), nodes assigned in random order."""
    sizes = rng.lognormal(0.0, 1.0, count)
    bounds = np.round(np.cumsum(sizes) / sizes.sum() * n).astype(np.int64)
    block = np.searchsorted(bounds, np.arange(n), side="right")
    return rng.permutation(np.minimum(block, count - 1))


def _pareto_weights(
    n: int, gamma: float, edges: int, cap: float, rng: np.random.Generator
) -> np.ndarray:
    """Expected degrees: Pareto(gamma - 1) draws scaled to sum to edges, capped at cap."""
    weight = (1.0 - rng.random(n)) ** (-1.0 / (gamma - 1.0))
    weight *= edges / weight.sum()
    return np.minimum(weight, max(cap, 1.0))


class _BlockSampler:
    """Draws nodes with probability proportional to weight, inside a community or anywhere."""

    def __init__(self, block: np.ndarray, weight: np.ndarray) -> None:
        self.order = np.argsort(block, kind="stable")
        self.block = block
        self.cumulative = np.cumsum(weight[self.order])
        padded = np.concatenate([[0.0], self.cumulative])
        counts = np.bincount(block)
        ends = np.cumsum(counts)
        self.low, self.high = padded[ends - counts], padded[ends]

    def inside(self, source: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        community = self.block[source]
        low, high = self.low[community], self.high[community]
        draw = low + rng.random(source.size) * (high - low)
        picked = np.searchsorted(self.cumulative, draw, side="right")
        return self.order[np.minimum(picked, self.order.size - 1)]

    def anywhere(self, count: int, rng: np.random.Generator) -> np.ndarray:
        draw = rng.random(count) * self.cumulative[-1]
        picked = np.searchsorted(self.cumulative, draw, side="right")
        return self.order[np.minimum(picked, self.order.size - 1)]


def road(
    rows: int | None,
    cols: int | None,
    nnz: int | None,
    rng: np.random.Generator,
    rcm: bool = False,
) -> Pattern:
    """A planar road-like graph with about nnz entries (2 per edge) or rows nodes."""
    # Imported here: scipy.sparse.csgraph costs ~0.3 s, too much for every CLI start.
    from scipy.sparse.csgraph import minimum_spanning_tree

    rcm = check_flag(rcm, "rcm")
    n, target = square_size(rows, cols, nnz, ROAD_DEGREE, "road")
    if n < 4:
        raise CognateError(f"road needs at least 4 nodes, got {n}")
    points = rng.random((n, 2))
    low, high = _delaunay_edges(points)
    length = np.linalg.norm(points[low] - points[high], axis=1)
    tree = minimum_spanning_tree(sp.coo_matrix((length, (low, high)), shape=(n, n))).tocoo()
    in_tree = np.zeros(low.size, dtype=bool)
    in_tree[np.searchsorted(low * n + high, _pair_keys(tree.row, tree.col, n))] = True
    degree = np.bincount(np.concatenate([tree.row, tree.col]), minlength=n)
    extra = max(0, target // 2 - tree.row.size)
    low_extra, high_extra = _short_edges(
        low[~in_tree], high[~in_tree], length[~in_tree], degree, extra
    )
    pattern = symmetric(
        np.concatenate([tree.row, low_extra]).astype(np.int64),
        np.concatenate([tree.col, high_extra]).astype(np.int64),
        n,
    )
    return renumber(pattern, node_order(pattern, rcm, rng))


def _pair_keys(row: np.ndarray, col: np.ndarray, n: int) -> np.ndarray:
    row, col = row.astype(np.int64), col.astype(np.int64)
    return np.minimum(row, col) * n + np.maximum(row, col)


def _delaunay_edges(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The triangulation's edges (low < high), sorted by low * n + high."""
    from scipy.spatial import Delaunay  # lazily, like csgraph in road()

    n = points.shape[0]
    triangles = Delaunay(points).simplices.astype(np.int64)
    first = triangles[:, [0, 1, 2]].ravel()
    second = triangles[:, [1, 2, 0]].ravel()
    keys = np.unique(_pair_keys(first, second, n))
    return keys // n, keys % n


def _short_edges(
    low: np.ndarray, high: np.ndarray, length: np.ndarray, degree: np.ndarray, count: int
) -> tuple[np.ndarray, np.ndarray]:
    """Up to count shortest candidate edges whose endpoints stay at degree <= 4.

    Greedy by length, vectorised conservatively: an edge is kept when it ranks among the
    first (4 - tree degree) candidates of both its endpoints (rank counted over all
    shorter candidates, kept or not).
    """
    by_length = np.argsort(length, kind="stable")
    low, high = low[by_length], high[by_length]
    ends = np.concatenate([low, high])
    edge = np.concatenate([np.arange(low.size), np.arange(low.size)])
    order = np.lexsort((edge, ends))
    first = np.searchsorted(ends[order], ends[order], side="left")
    rank = np.empty(ends.size, dtype=np.int64)
    rank[order] = np.arange(ends.size) - first
    room = _ROAD_MAX_DEGREE - degree[ends]
    fits = rank < room
    keep = fits[: low.size] & fits[low.size :]
    return low[keep][:count], high[keep][:count]
