"""FEM stiffness patterns of unstructured meshes (kinds ``mesh2d`` and ``mesh3d``).

Imitates the 2D/3D problem and structural classes of SuiteSparse (e.g. the FEM matrices of
the GHS_psdef and Schenk groups): the nodes of a Delaunay triangulation (tetrahedralisation)
of uniformly random points in the unit square (cube), via scipy.spatial's qhull, and entry
(i, j) wherever nodes i and j share an element. P1 elements have the vertices as nodes; P2
elements add one node per edge (6 per triangle, 10 per tetrahedron). The nodes come in random
order (an unordered mesh file) or, with ``rcm``, in reverse Cuthill-McKee order (a bandwidth-
reduced one). The pattern is symmetric with a full diagonal.

Cost: qhull dominates (docs/benchmarks.md, "How it was collected"). A jittered grid
tetrahedralisation would be faster but gives every interior node the same 14 neighbours,
losing the row-length spread of real unstructured meshes, so Delaunay stays.
"""

from __future__ import annotations

import itertools

import numpy as np

from cognate.errors import CognateError
from cognate.synth.sampling import (
    Pattern,
    check_flag,
    check_size,
    node_order,
    renumber,
    sorted_unique,
)

# nnz per mesh vertex of an unbounded random mesh, and the boundary's relative loss b in
# nnz ~ a * v * (1 - b * v**(-1/d)) (fitted on meshes of 10^3..10^5 vertices, seed 0).
_PER_VERTEX = {
    (2, False): (7.0, 0.2),
    (2, True): (46.0, 0.2),
    (3, False): (16.55, 0.35),
    (3, True): (258.0, 0.35),
}
# nodes per mesh vertex: P2 adds the edges (about 3 per vertex in 2D, 7.7 in 3D).
_NODES_PER_VERTEX = {(2, False): 1.0, (2, True): 4.0, (3, False): 1.0, (3, True): 8.75}
_SIZE_TOLERANCE = 0.03  # a mesh further off the requested nnz is rebuilt, rescaled
_RESIZE_ATTEMPTS = 6


def mesh(
    dim: int,
    rows: int | None,
    cols: int | None,
    nnz: int | None,
    rng: np.random.Generator,
    p2: bool = False,
    rcm: bool = False,
) -> Pattern:
    """The mesh of ``dim`` dimensions with about nnz entries (or about rows nodes)."""
    kind = f"mesh{dim}d"
    p2, rcm = check_flag(p2, "p2"), check_flag(rcm, "rcm")
    if rows is not None and cols is not None and rows != cols:
        raise CognateError(f"{kind} is square: rows and cols must agree, got {rows} x {cols}")
    nodes = rows if rows is not None else cols
    if nodes is None and nnz is None:
        raise CognateError(f"{kind} needs nnz or rows")
    if nnz is not None:
        check_size(nnz)
        vertices = _vertices_for_nnz(dim, p2, nnz)
    else:
        vertices = max(dim + 2, round(nodes / _NODES_PER_VERTEX[(dim, p2)]))
        check_size(round(vertices * _PER_VERTEX[(dim, p2)][0]))
    pattern = _assemble(rng.random((vertices, dim)), p2)
    if nnz is not None:
        pattern = _resized(pattern, dim, vertices, nnz, p2, rng)
    return renumber(pattern, node_order(pattern, rcm, rng))


def _resized(
    pattern: Pattern, dim: int, vertices: int, nnz: int, p2: bool, rng: np.random.Generator
) -> Pattern:
    """The mesh rebuilt, rescaled, while it misses nnz by more than the tolerance (small
    meshes vary: a 10^4-nnz P2 tetrahedral mesh has ~60 vertices); the closest one."""
    best = pattern
    for _ in range(_RESIZE_ATTEMPTS):
        if abs(pattern.row.size - nnz) <= _SIZE_TOLERANCE * nnz:
            break
        vertices = max(dim + 2, round(vertices * nnz / pattern.row.size))
        pattern = _assemble(rng.random((vertices, dim)), p2)
        if abs(pattern.row.size - nnz) < abs(best.row.size - nnz):
            best = pattern
    return best


def _vertices_for_nnz(dim: int, p2: bool, nnz: int) -> int:
    """Vertices whose mesh has about nnz entries (solves the boundary-corrected estimate)."""
    per_vertex, loss = _PER_VERTEX[(dim, p2)]
    vertices = nnz / per_vertex
    for _ in range(8):  # fixed point of v = nnz / (a * (1 - b * v**(-1/d))): converges fast
        vertices = nnz / (per_vertex * max(0.2, 1 - loss * vertices ** (-1 / dim)))
    return max(dim + 2, round(vertices))


def _assemble(points: np.ndarray, p2: bool) -> Pattern:
    """Entry (i, j) for every pair of nodes sharing an element, the diagonal included."""
    from scipy.spatial import Delaunay, QhullError  # here: costly for every CLI start

    vertices, dim = points.shape
    try:
        elements = Delaunay(points).simplices.astype(np.int64)
    except QhullError as exc:  # degenerate (tiny or flat) point sets
        raise CognateError(f"Delaunay triangulation failed: {exc}") from exc
    nodes = vertices
    if p2:
        edge_ids, edges = _edge_nodes(elements)
        elements = np.concatenate([elements, vertices + edge_ids], axis=1)
        nodes += edges
    local = elements.shape[1]
    first, second = np.array(list(itertools.product(range(local), repeat=2))).T
    keys = sorted_unique((elements[:, first] * nodes + elements[:, second]).ravel())
    return Pattern(keys // nodes, keys % nodes, (nodes, nodes))


def _edge_nodes(elements: np.ndarray) -> tuple[np.ndarray, int]:
    """Per element, the ids of its edges (numbered over the whole mesh), and their count."""
    pairs = list(itertools.combinations(range(elements.shape[1]), 2))
    first = elements[:, [a for a, _ in pairs]]
    second = elements[:, [b for _, b in pairs]]
    low, high = np.minimum(first, second), np.maximum(first, second)
    keys = low * (int(elements.max()) + 1) + high
    unique, ids = np.unique(keys.ravel(), return_inverse=True)
    return ids.reshape(keys.shape).astype(np.int64), int(unique.size)


def expected_nnz(dim: int, p2: bool, vertices: int) -> float:
    """The estimate the sizing solves (exposed for the calibration check in the tests)."""
    per_vertex, loss = _PER_VERTEX[(dim, p2)]
    return per_vertex * vertices * (1 - loss * vertices ** (-1 / dim))
