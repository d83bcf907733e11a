"""Synthetic matrices: determinism, requested sizes, and the structure each kind promises."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from cognate.errors import CognateError
from cognate.io import load_matrix
from cognate.synth import KINDS, generate, kdiag_count

SIZED_KINDS = ("uniform", "rmat", "banded", "block-diagonal")  # exact nnz


def _coords(matrix) -> tuple[np.ndarray, np.ndarray]:
    coo = matrix.csr.tocoo()
    return coo.row.astype(np.int64), coo.col.astype(np.int64)


@pytest.mark.parametrize("kind", KINDS)
def test_deterministic_per_seed(kind):
    density = None if kind == "nm" else 0.02
    first = generate(kind, 300, 200, density=density, seed=7)
    again = generate(kind, 300, 200, density=density, seed=7)
    other = generate(kind, 300, 200, density=density, seed=8)
    assert first.sha256 == again.sha256
    assert first.sha256 != other.sha256
    assert first.csr.data.dtype == np.float32 and first.csr.has_canonical_format
    assert first.shape == (300, 200) and first.field == "real"


@pytest.mark.parametrize("kind", SIZED_KINDS)
def test_requested_nnz_and_density_honoured(kind):
    assert generate(kind, 500, 700, nnz=12345, seed=1).nnz == 12345
    assert generate(kind, 500, 700, density=0.01, seed=1).nnz == 3500
    assert generate(kind, 500, 700, sparsity=0.99, seed=1).nnz == 3500


def test_uniform_dense_and_extreme_requests():
    assert generate("uniform", 30, 40, density=1.0, seed=0).nnz == 1200
    assert generate("uniform", 30, 40, nnz=1, seed=0).nnz == 1
    big = generate("uniform", 2_000_000, 3_000_000, nnz=5000, seed=0)
    assert big.nnz == 5000 and big.csr.indices.max() < 3_000_000


def test_uniform_is_spread_over_the_matrix():
    matrix = generate("uniform", 1000, 1000, density=0.05, seed=2)
    per_row = np.diff(matrix.csr.indptr)
    assert abs(per_row.mean() - 50) < 1e-9 and per_row.std() < 15  # binomial sd ~ 6.9


def test_rmat_is_skewed():
    rmat = generate("rmat", 4096, 4096, nnz=40000, seed=3)
    uniform = generate("uniform", 4096, 4096, nnz=40000, seed=3)
    assert np.diff(rmat.csr.indptr).max() > 5 * np.diff(uniform.csr.indptr).max()


def test_banded_stays_in_band():
    matrix = generate("banded", 400, 300, nnz=5000, seed=4, bandwidth=10)
    row, col = _coords(matrix)
    assert matrix.nnz == 5000 and np.abs(row - col).max() <= 10
    narrowest = generate("banded", 400, 400, nnz=400 * 3 - 2, seed=4)  # exactly tridiagonal
    row, col = _coords(narrowest)
    assert np.abs(row - col).max() == 1
    with pytest.raises(CognateError, match="holds at most"):
        generate("banded", 100, 100, nnz=500, seed=0, bandwidth=1)


def test_block_diagonal_stays_in_blocks():
    matrix = generate("block-diagonal", 100, 90, nnz=800, seed=5, block=10)
    row, col = _coords(matrix)
    assert np.array_equal(row // 10, col // 10)
    automatic = generate("block-diagonal", 100, 100, density=0.1, seed=5)
    row, col = _coords(automatic)
    assert automatic.nnz == 1000 and np.array_equal(row // 10, col // 10)  # smallest: 10


@pytest.mark.parametrize(("rows", "cols"), [(64, 48), (48, 64), (50, 50)])
def test_kdiag_count_and_layout(rows, cols):
    sparsity = 0.9
    kept = math.ceil((1 - sparsity) * rows * cols / min(rows, cols))
    assert kdiag_count(rows, cols, sparsity) == kept
    matrix = generate("kdiag", rows, cols, sparsity=sparsity, seed=6)
    length, count = min(rows, cols), max(rows, cols)
    assert matrix.nnz == kept * length
    row, col = _coords(matrix)
    # DynaDiag: out >= in -> rows (t + p) % out, cols t; otherwise transposed.
    offset = (row - col) % count if rows >= cols else (col - row) % count
    along = col if rows >= cols else row
    assert len(np.unique(offset)) == kept
    for p in np.unique(offset):
        assert np.array_equal(np.sort(along[offset == p]), np.arange(length))


def test_kdiag_from_density_and_nnz():
    assert generate("kdiag", 64, 32, density=0.25, seed=0).nnz == 16 * 32
    assert generate("kdiag", 64, 32, nnz=33, seed=0).nnz == 2 * 32  # whole diagonals


def test_block_mask_keeps_whole_blocks():
    matrix = generate("block", 64, 96, density=0.25, seed=8, block=8)
    dense = matrix.csr.toarray() != 0
    tiles = matrix.csr.copy()
    tiles.data[:] = 1
    assert matrix.nnz == round(0.25 * 64 * 96 / 64) * 64
    counts = (tiles.toarray().reshape(8, 8, 12, 8).sum(axis=(1, 3))).ravel()
    assert set(counts.tolist()) <= {0, 64}  # every tile empty or full
    assert dense.sum() == matrix.nnz


@pytest.mark.parametrize(("n", "m", "cols"), [(2, 4, 64), (1, 4, 30), (3, 8, 70)])
def test_nm_holds_per_group(n, m, cols):
    matrix = generate("nm", 40, cols, seed=9, n=n, m=m)
    mask = matrix.csr.toarray() != 0
    # Values are standard normal: a stored exact 0 is (almost) impossible, so mask = pattern.
    assert mask.sum() == matrix.nnz
    full = cols // m
    groups = mask[:, : full * m].reshape(40, full, m).sum(axis=2)
    assert (groups == n).all()
    rest = cols - full * m
    if rest:
        assert (mask[:, full * m :].sum(axis=1) == min(n, rest)).all()


def test_nm_density_must_agree():
    assert generate("nm", 16, 16, density=0.5, seed=0).nnz == 128
    with pytest.raises(CognateError, match="2:4"):
        generate("nm", 16, 16, density=0.1, seed=0)


def _entry_map(matrix) -> dict[float, tuple[int, int]]:
    row, col = _coords(matrix)
    values = matrix.csr.tocoo().data
    assert len(np.unique(values)) == len(values)  # random normal: values identify entries
    return {float(v): (int(r), int(c)) for v, r, c in zip(values, row, col, strict=True)}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("permute", ["rows", "cols", "both"])
def test_permuted_variant_is_a_permutation(kind, permute):
    density = None if kind == "nm" else 0.05
    base = generate(kind, 120, 80, density=density, seed=11)
    permuted = generate(kind, 120, 80, density=density, seed=11, permute=permute)
    assert permuted.nnz == base.nnz
    before, after = _entry_map(base), _entry_map(permuted)
    assert set(before) == set(after)
    row_map, col_map = {}, {}
    for value, (r, c) in before.items():
        new_r, new_c = after[value]
        assert row_map.setdefault(r, new_r) == new_r  # one row goes to one row
        assert col_map.setdefault(c, new_c) == new_c
    assert len(set(row_map.values())) == len(row_map)  # injective
    assert len(set(col_map.values())) == len(col_map)
    moved_rows = any(r != nr for r, nr in row_map.items())
    moved_cols = any(c != nc for c, nc in col_map.items())
    assert moved_rows == (permute in ("rows", "both"))
    assert moved_cols == (permute in ("cols", "both"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "uniform", "density": 0.1, "nnz": 5}, "only one"),
        ({"kind": "uniform"}, "needs one of"),
        ({"kind": "uniform", "density": 1.5}, "density must be"),
        ({"kind": "uniform", "sparsity": 1.0}, "sparsity must be"),
        ({"kind": "uniform", "nnz": 10**9}, "nnz must be"),
        ({"kind": "spiral", "density": 0.1}, "unknown synthetic kind"),
        ({"kind": "uniform", "density": 0.1, "block": 4}, "does not take"),
        ({"kind": "rmat", "density": 0.1, "a": 0.9}, "sum to 1"),
        ({"kind": "nm", "n": 5, "m": 4}, "1 <= n <= m"),
        ({"kind": "uniform", "density": 0.1, "permute": "diagonal"}, "permute must be"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs, message):
    kind = kwargs.pop("kind")
    with pytest.raises(CognateError, match=message):
        generate(kind, 100, 100, seed=0, **kwargs)


def test_million_nonzeros_is_fast():
    import time

    for kind in ("uniform", "rmat", "kdiag", "nm"):
        start = time.perf_counter()
        density = None if kind == "nm" else 1e6 / (200_000 * 200_000)
        cols = 200_000 if kind != "nm" else 400
        matrix = generate(kind, 200_000 if kind != "nm" else 5000, cols, density=density, seed=0)
        assert matrix.nnz >= 1_000_000
        assert time.perf_counter() - start < 10, kind  # ~0.2-0.8 s idle; the machine is shared


def test_cli_synth_writes_a_loadable_file(tmp_path):
    out = tmp_path / "kd.mtx"
    command = [sys.executable, "-m", "cognate", "data", "synth", "kdiag", "--rows", "64"]
    command += ["--cols", "32", "--sparsity", "0.75", "--seed", "3", "--permute", "rows"]
    command += ["-o", str(out)]
    env = {**os.environ, "COGNATE_HOME": str(tmp_path / "home")}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=180)
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stdout
    loaded = load_matrix(out)
    expected = generate("kdiag", 64, 32, sparsity=0.75, seed=3, permute="rows")
    assert loaded.shape == (64, 32) and loaded.nnz == 16 * 32  # K = 0.25 * 64 * 32 / 32
    assert np.array_equal(loaded.csr.toarray(), expected.csr.toarray())
