"""The published graphs of HotTiles' SPADE calibration: the Mycielski graphs exactly, the
Delaunay and Graph500 Kronecker graphs in distribution, and their ``data synth`` command."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

from cognate.cli import main
from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.synth import generate
from cognate.synth.published import (
    KRON_LOGN19_NNZ,
    mycielskian,
    mycielskian_counts,
    published,
    published_matrix,
)


def _reference_mycielskian(order: int) -> sp.csr_matrix:
    """M_order from its block definition with scipy's bmat (small orders only)."""
    adjacency = sp.csr_matrix(np.array([[0, 1], [1, 0]], dtype=np.float32))
    for _ in range(order - 2):
        ones = sp.csr_matrix(np.ones((adjacency.shape[0], 1), dtype=np.float32))
        adjacency = sp.bmat(
            [[adjacency, adjacency, None], [adjacency, None, ones], [None, ones.T, None]]
        )
    return sp.csr_matrix(adjacency)


def _is_simple_undirected(csr: sp.csr_matrix) -> bool:
    pattern = csr.copy()
    pattern.data[:] = 1
    return (pattern != pattern.T).nnz == 0 and not pattern.diagonal().any()


@pytest.mark.parametrize("order", [2, 3, 4, 5, 6, 7, 8])
def test_mycielskian_counts_and_blocks(order):
    vertices, edges = mycielskian_counts(order)
    assert vertices == 3 * 2 ** (order - 2) - 1
    if order > 2:
        previous_vertices, previous_edges = mycielskian_counts(order - 1)
        assert edges == 3 * previous_edges + previous_vertices
    built = mycielskian(order)
    assert built.shape == (vertices, vertices) and built.nnz == 2 * edges
    assert built.has_canonical_format
    assert (built != _reference_mycielskian(order)).nnz == 0


def test_mycielskian_known_graphs():
    assert mycielskian_counts(4) == (11, 20)  # the Groetzsch graph
    assert mycielskian_counts(17) == (98_303, 100_245_742 // 2)  # SuiteSparse mycielskian17
    groetzsch = mycielskian(4)
    assert sorted(np.diff(groetzsch.indptr)) == [3] * 5 + [4] * 5 + [5]


def test_delaunay_is_a_planar_triangulation_and_deterministic():
    order = 12
    first = published("delaunay", order, seed=3)
    n = 2**order
    assert first.shape == (n, n) and first.csr.has_canonical_format
    assert _is_simple_undirected(first.csr)
    hull = first.nnz // 2  # edges of a triangulation: 3n - 3 - h, h hull vertices
    assert 3 * n - 3 - 100 <= hull <= 3 * n - 6
    assert (published("delaunay", order, seed=3).csr != first.csr).nnz == 0
    assert (published("delaunay", order, seed=4).csr != first.csr).nnz > 0


def test_delaunay_morton_numbering_is_the_same_graph_with_locality():
    drawn = published("delaunay", 12, seed=5).csr
    morton = published("delaunay", 12, seed=5, numbering="morton").csr
    assert morton.nnz == drawn.nnz and _is_simple_undirected(morton)
    assert sorted(np.diff(morton.indptr)) == sorted(np.diff(drawn.indptr))
    rows = np.repeat(np.arange(2**12), np.diff(morton.indptr))
    gap_morton = np.median(np.abs(morton.indices - rows))
    gap_drawn = np.median(
        np.abs(drawn.indices - np.repeat(np.arange(2**12), np.diff(drawn.indptr)))
    )
    assert gap_morton < gap_drawn / 10  # neighbours get nearby numbers
    with pytest.raises(CognateError, match="numbering applies to delaunay only"):
        published("kron-g500", 10, numbering="morton")


def test_kron_g500_density_skew_and_determinism():
    order = 14
    matrix = published("kron-g500", order, seed=1)
    n = 2**order
    expected = 2 * round(KRON_LOGN19_NNZ / 2**19 * n / 2)
    assert matrix.shape == (n, n) and matrix.nnz == expected
    assert _is_simple_undirected(matrix.csr) and matrix.csr.has_canonical_format
    degree = np.diff(matrix.csr.indptr)
    assert degree.max() > 20 * degree.mean()  # Kronecker graphs are heavily skewed
    assert (degree == 0).sum() > 0.05 * n  # and leave many vertices isolated
    assert (published("kron-g500", order, seed=1).csr != matrix.csr).nnz == 0


def test_generate_and_names():
    assert generate("mycielskian", order=5).nnz == 2 * 71
    with pytest.raises(CognateError, match="order alone"):
        generate("delaunay", rows=10, order=5)
    with pytest.raises(CognateError, match="needs an order"):
        generate("kron-g500")
    with pytest.raises(CognateError, match="order must be"):
        published("mycielskian", 40)
    with pytest.raises(CognateError, match="unknown published matrix"):
        published_matrix("as-Skitter")


def test_synth_command(tmp_path):
    out = tmp_path / "m6.npz"
    result = CliRunner().invoke(
        main, ["data", "synth", "mycielskian", "--order", "6", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert load_matrix(out).nnz == 2 * 236
    bad = CliRunner().invoke(main, ["data", "synth", "delaunay", "--nnz", "5", "-o", str(out)])
    assert bad.exit_code != 0 and isinstance(bad.exception, CognateError)
    assert "order alone" in str(bad.exception)


@pytest.mark.slow
def test_mycielskian17_matches_the_calibration_manifest():
    """The exact SuiteSparse size, and the sha256 scripts/calibrate_spade.py checks."""
    import json

    from cognate.paths import REPO_ROOT

    manifest = json.loads((REPO_ROOT / "scripts" / "calibrate_spade.manifest.json").read_text())
    matrix = published_matrix("mycielskian17")
    assert matrix.shape == (98_303, 98_303) and matrix.nnz == 100_245_742
    assert matrix.sha256 == manifest["mycielskian17"]["sha256"]
