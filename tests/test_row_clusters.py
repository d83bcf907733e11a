"""Row clustering for reordered BCSR: blocks come back, the blend matters, the cache is safe."""

from __future__ import annotations

import time

import numpy as np
import pytest
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.synth import generate
from cognate.targets.cpu import row_clusters
from cognate.targets.cpu.row_clusters import cache_path, cached_cluster_rows, cluster_rows


def nonempty_blocks(csr: sp.csr_matrix, r: int = 8, c: int = 8) -> int:
    """How many r x c blocks of a BCSR tiling hold at least one entry."""
    coo = csr.tocoo()
    block_cols = -(-csr.shape[1] // c)
    keys = (coo.row // r).astype(np.int64) * block_cols + coo.col // c
    return int(np.unique(keys).size)


def _is_permutation(order: np.ndarray, n: int) -> bool:
    return order.dtype == np.int32 and np.array_equal(np.sort(order), np.arange(n))


@pytest.mark.parametrize("blend", [0.0, 0.5, 1.0])
def test_row_permuted_block_mask_gets_its_blocks_back(blend):
    matrix = generate("block", 768, 768, sparsity=0.9, block=8, seed=1, permute="rows")
    unpermuted = nonempty_blocks(matrix.structured())
    assert nonempty_blocks(matrix.csr) > 4 * unpermuted  # the shuffle really scatters rows
    order = cluster_rows(matrix.csr, blend)
    assert _is_permutation(order, 768)
    assert nonempty_blocks(matrix.csr[order]) <= 1.05 * unpermuted


def test_row_permuted_block_diagonal_gets_its_blocks_back():
    matrix = generate("block-diagonal", 1024, 1024, density=0.02, block=32, seed=2, permute="rows")
    unpermuted = nonempty_blocks(matrix.structured())
    for blend in (0.0, 1.0):
        reordered = nonempty_blocks(matrix.csr[cluster_rows(matrix.csr, blend)])
        assert reordered <= 1.3 * unpermuted, blend
    assert nonempty_blocks(matrix.csr[cluster_rows(matrix.csr, 1.0)]) <= 1.02 * unpermuted


def test_diagonal_proximity_restores_a_shuffled_kdiag_and_jaccard_alone_does_not():
    # Rows of a k-diagonal mask share few columns with their neighbours: Jaccard alone cannot
    # see the diagonal order, the proximity term restores it (the reason for the blend).
    matrix = generate("kdiag", 768, 768, sparsity=0.95, seed=3, permute="rows")
    unpermuted = nonempty_blocks(matrix.structured())  # 5568 blocks of 8 x 8
    shuffled = nonempty_blocks(matrix.csr)  # 8970
    by_jaccard = nonempty_blocks(matrix.csr[cluster_rows(matrix.csr, 0.0)])  # 8902
    half = nonempty_blocks(matrix.csr[cluster_rows(matrix.csr, 0.5)])  # 7446
    by_proximity = nonempty_blocks(matrix.csr[cluster_rows(matrix.csr, 1.0)])  # 4896
    assert shuffled > 1.5 * unpermuted
    assert by_proximity <= unpermuted
    assert by_jaccard > 1.5 * unpermuted
    assert by_proximity < half < by_jaccard


def test_blend_changes_the_order_on_a_real_matrix(shared):
    csr = load_matrix(shared / "matrices" / "suitesparse" / "bcspwr06.mtx.gz").csr
    orders = {blend: cluster_rows(csr, blend) for blend in (0.0, 0.5, 1.0)}
    for order in orders.values():
        assert _is_permutation(order, csr.shape[0])
    assert not np.array_equal(orders[0.0], orders[1.0])
    assert not np.array_equal(orders[0.0], orders[0.5])
    assert np.array_equal(orders[0.5], cluster_rows(csr, 0.5))  # deterministic


def test_identical_rows_end_up_adjacent():
    rng = np.random.default_rng(0)
    patterns = [rng.choice(500, size=30, replace=False) for _ in range(20)]
    rows = [patterns[i % 20] for i in range(200)]  # row i repeats pattern i % 20
    indptr = np.arange(0, 30 * 201, 30)
    csr = sp.csr_matrix((np.ones(6000), np.concatenate(rows), indptr), shape=(200, 500))
    csr.sort_indices()
    order = cluster_rows(csr, 0.0)
    groups = order % 20
    assert int(np.count_nonzero(groups[1:] != groups[:-1])) == 19


def test_empty_rows_and_tiny_matrices():
    csr = sp.csr_matrix(np.array([[0, 0, 0], [1, 0, 1], [0, 0, 0], [1, 0, 1]], dtype=np.float32))
    order = cluster_rows(csr, 0.3)
    assert _is_permutation(order, 4) and set(order[2:]) == {0, 2}  # empty rows last
    assert cluster_rows(sp.csr_matrix((1, 5), dtype=np.float32), 0.0).tolist() == [0]


@pytest.mark.parametrize("blend", [-0.1, 1.5, "x", None])
def test_bad_blend_is_a_clear_error(blend):
    with pytest.raises(CognateError, match="blend"):
        cluster_rows(sp.identity(4, format="csr"), blend)


def test_a_million_nonzeros_is_fast():
    """CPU time, not wall time: what the algorithm costs, whatever else runs on the machine
    (a Python loop or an O(rows^2) pass would take minutes)."""
    matrix = generate("uniform", 100_000, 100_000, nnz=1_000_000, seed=0)
    cluster_rows(matrix.csr[:100], 0.5)  # compile the chaining routine outside the timing
    for blend in (0.0, 0.5):
        start = time.process_time()
        cluster_rows(matrix.csr, blend)
        assert time.process_time() - start < 5, blend  # ~0.4 s of CPU


def test_cache_hit_and_corrupt_file_recomputed(monkeypatch):
    matrix = generate("block", 256, 256, sparsity=0.9, block=8, seed=5, permute="rows")
    fresh = cached_cluster_rows(matrix.csr, matrix.sha256, 0.25)
    path = cache_path(matrix.sha256, 0.25)
    assert path.is_file() and np.array_equal(np.load(path), fresh)
    assert path.parent.name == "reorder"

    def refuse(*args: object) -> None:
        raise AssertionError("recomputed despite a valid cache file")

    with monkeypatch.context() as patch:  # (undo() would also drop the isolated COGNATE_HOME)
        patch.setattr(row_clusters, "cluster_rows", refuse)
        assert np.array_equal(cached_cluster_rows(matrix.csr, matrix.sha256, 0.25), fresh)

    corrupt = fresh.copy()
    corrupt[0] = corrupt[1]  # right length and type, not a permutation
    for bad in (b"garbage", None, np.arange(10, dtype=np.int32)):
        if bad is None:
            np.save(path, corrupt)
        elif isinstance(bad, bytes):
            path.write_bytes(bad)
        else:
            np.save(path, bad)
        assert np.array_equal(cached_cluster_rows(matrix.csr, matrix.sha256, 0.25), fresh)
        assert np.array_equal(np.load(path), fresh)  # rewritten
    assert cache_path(matrix.sha256, 0.5) != path  # blend is part of the key
    assert not list(path.parent.glob(".*tmp"))
