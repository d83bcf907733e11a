"""The row-band sketch featurizer and the reading / statistics paths sized for 10^8 nnz."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from cognate import matrix_stats as stats_module
from cognate.errors import CognateError, InputError
from cognate.formats.read import load_matrix
from cognate.matrix import Matrix, canonicalize
from cognate.matrix_stats import matrix_stats, row_blocks
from cognate.model import featurizer as fz
from cognate.model.featurizer import Featurizer, matrix_points, sketch_bands, sketch_points
from cognate.model.preset import FeaturizerSpec

REAL = "matrices/suitesparse/bcsstk13.mtx.gz"  # 2003 rows, 83883 nnz: many bands' worth of rows


@pytest.fixture
def real(shared) -> Matrix:
    return load_matrix(shared / REAL)


def test_bands_are_the_whole_matrix_when_it_fits():
    indptr = np.array([0, 2, 5, 9])
    assert sketch_bands(indptr, max_points=9) == [(0, 3)]


def test_bands_hold_at_most_the_budget_one_per_stratum(real):
    indptr = real.csr.indptr
    for budget in (500, 5000, 40_000):
        spans = sketch_bands(indptr, budget, bands=8)
        rows = real.shape[0]
        assert len(spans) == 8
        assert sum(int(indptr[b]) - int(indptr[a]) for a, b in spans) <= budget
        heights = {b - a for a, b in spans}
        assert len(heights) == 1 and heights.pop() >= 1
        for i, (a, b) in enumerate(spans):  # inside its stratum, in order
            assert rows * i // 8 <= a < b <= rows * (i + 1) // 8


def test_sketch_points_are_whole_rows_of_the_matrix(real):
    full = matrix_points(real)
    points = sketch_points(real, 10_000, bands=4)
    assert 0 < len(points) <= 10_000
    assert torch.all(points.keys[1:] > points.keys[:-1])  # sorted, distinct
    assert torch.isin(points.keys, full.keys).all()
    kept_rows = torch.unique(points.rows)
    lengths = np.diff(real.csr.indptr)
    assert int(lengths[kept_rows.numpy()].sum()) == len(points)  # every kept row whole


def test_a_row_longer_than_the_budget_keeps_a_prefix():
    dense_row = sp.csr_matrix(np.ones((1, 50_000), dtype=np.float32))
    matrix = Matrix("row", canonicalize(dense_row))
    points = sketch_points(matrix, 1000, bands=1)
    assert len(points) == 1000 and int(points.cols[-1]) == 999


def _shipped(name: str = "cpu-spmm") -> Featurizer:
    from tests.test_featurizer_fast import shipped_featurizer

    return shipped_featurizer(name)


def test_sketch_embedding_is_near_the_full_one(real, monkeypatch):
    """The shipped model's embedding of a 12% row-band sketch points the same way as the
    full one (the held-out ranking comparison is scripts/eval_sketch.py)."""
    featurizer = _shipped()
    full = featurizer.embed(real)
    monkeypatch.setenv(fz.FEATURIZER_ENV, "sketch")
    monkeypatch.setattr(fz, "SKETCH_POINTS", 10_000)
    # ~60-row bands, as a 10^8-nnz graph's sketch has ~1500-row ones (this one has 2003 rows)
    monkeypatch.setattr(fz, "SKETCH_BANDS", 4)
    assert featurizer.uses_sketch(real)
    sketch = featurizer.embed(real)
    assert not torch.equal(sketch, full)
    cosine = torch.nn.functional.cosine_similarity(full, sketch, dim=0)
    assert cosine > 0.95, float(cosine)


def test_auto_uses_the_sketch_only_over_the_budget(real, monkeypatch):
    featurizer = Featurizer(FeaturizerSpec(channels=[4, 4]))
    monkeypatch.setattr(fz, "SKETCH_POINTS", 1000)
    monkeypatch.setenv("COGNATE_MAX_MEMORY", "16G")
    assert not featurizer.uses_sketch(real)
    full_bytes = featurizer.memory_cost().bytes(*real.shape, real.nnz)
    monkeypatch.setenv("COGNATE_MAX_MEMORY", str(full_bytes - 1))
    assert featurizer.uses_sketch(real)
    assert featurizer.embed(real).shape == (featurizer.dim,)  # the sketch fits that budget
    monkeypatch.setenv("COGNATE_MAX_MEMORY", "1M")
    with pytest.raises(InputError, match="featurizing a 2003 x 2003 matrix with sketch nnz 1000"):
        featurizer.embed(real)


def test_full_mode_and_bad_mode(real, monkeypatch):
    featurizer = Featurizer(FeaturizerSpec(channels=[4]))
    monkeypatch.setenv("COGNATE_MAX_MEMORY", "1M")
    monkeypatch.setenv(fz.FEATURIZER_ENV, "full")
    assert not featurizer.uses_sketch(real)
    with pytest.raises(InputError, match="featurizing a 2003 x 2003 matrix with nnz 83883"):
        featurizer.embed(real)
    monkeypatch.setenv(fz.FEATURIZER_ENV, "tiny")
    with pytest.raises(CognateError, match="COGNATE_FEATURIZER='tiny'"):
        featurizer.embed(real)


# --- reading and statistics ----------------------------------------------------------------


def test_canonical_npz_loads_like_the_general_path(real, tmp_path):
    """A canonical CSR .npz skips the COO round trip; the matrix is the same either way."""
    as_csr, as_coo = tmp_path / "a.npz", tmp_path / "b.npz"
    sp.save_npz(as_csr, real.csr)
    sp.save_npz(as_coo, real.csr.tocoo())
    fast, general = load_matrix(as_csr), load_matrix(as_coo)
    assert fast.sha256 == general.sha256 == real.sha256
    assert fast.csr.indptr.dtype == fast.csr.indices.dtype == np.int32


def test_canonical_npz_values_are_converted(tmp_path):
    a = sp.csr_matrix(np.array([[np.nan, 0, 1e39], [0, 2.0, 0]]))
    a.eliminate_zeros()
    path = tmp_path / "v.npz"
    sp.save_npz(path, a)
    loaded = load_matrix(path).csr
    assert loaded.data.dtype == np.float32
    assert loaded.data.tolist() == [0.0, float(np.finfo(np.float32).max), 2.0]


def _stats_reference(matrix: Matrix) -> tuple[int, float]:
    csr = matrix.csr
    rows, cols = matrix.shape
    row_of = np.repeat(np.arange(rows), np.diff(csr.indptr))
    distance = np.abs(row_of - csr.indices)
    scaled = np.abs(row_of / rows - csr.indices / cols)
    return int(distance.max()), float(np.mean(scaled <= 0.01))


def test_chunked_stats_match_the_whole_array_ones(real, monkeypatch):
    monkeypatch.setattr(stats_module, "_STAT_CHUNK", 1000)  # ~84 blocks
    stats = matrix_stats(real)
    bandwidth, near = _stats_reference(real)
    assert stats["bandwidth"] == bandwidth
    assert stats["near_diag"] == pytest.approx(near, rel=1e-12)


def test_row_blocks_cover_every_row_once(real):
    indptr = real.csr.indptr
    blocks = list(row_blocks(indptr, 5000))
    assert blocks[0][0] == 0 and blocks[-1][1] == real.shape[0]
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:], strict=False))
    assert all(int(indptr[hi]) - int(indptr[lo]) <= 5000 for lo, hi in blocks if hi - lo > 1)
