"""Synthetic matrices: determinism, requested sizes, and the structure each kind promises."""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.matrix import Matrix
from cognate.synth import KINDS, LAYER_SHAPES, LAYER_SPARSITIES, generate, kdiag_count

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
        generate("nm", 16, 16, density=0.1, seed=0, n=2, m=4)


@pytest.mark.parametrize(
    ("sparsity", "n", "m"), [(0.6, 2, 5), (0.8, 1, 5), (0.9, 1, 10), (0.95, 1, 20), (0.99, 1, 100)]
)
def test_nm_from_sparsity_picks_the_ratio(sparsity, n, m):
    matrix = generate("nm", 8, 400, sparsity=sparsity, seed=0)
    assert f"m={m} n={n}" in matrix.source
    assert matrix.nnz == 8 * 400 * n // m
    groups = (matrix.csr.toarray() != 0).reshape(8, 400 // m, m).sum(axis=2)
    assert (groups == n).all()


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
    """CPU time, not wall time: what generation costs, whatever else runs on the machine."""
    import time

    for kind in ("uniform", "rmat", "kdiag", "nm"):
        start = time.process_time()
        density = None if kind == "nm" else 1e6 / (200_000 * 200_000)
        cols = 200_000 if kind != "nm" else 400
        matrix = generate(kind, 200_000 if kind != "nm" else 5000, cols, density=density, seed=0)
        assert matrix.nnz >= 1_000_000
        assert time.process_time() - start < 10, kind  # ~0.2-0.8 s of CPU


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


# --- pinned outputs and index maps ------------------------------------------------

# csr hashes (Matrix.sha256 without maps) recorded before index maps existed: the corpus and
# the stored records depend on the generators' outputs staying identical.
PINNED_CSR = [
    ("uniform", 300, 200, {"density": 0.05}, "373e37e81a7fadc7"),
    ("rmat", 256, 256, {"density": 0.02}, "7d36c1620278a87a"),
    ("banded", 300, 300, {"density": 0.02}, "61e00530905fc238"),
    ("block-diagonal", 300, 300, {"density": 0.02, "block": 16}, "973b9b87a25ad58d"),
    ("kdiag", 96, 384, {"sparsity": 0.9}, "5945be08d2b481e5"),
    ("block", 128, 96, {"density": 0.1, "block": 8}, "3aa102ec1f01c6ba"),
    ("nm", 64, 96, {"n": 2, "m": 4}, "7a92ec3103b03c7a"),
    ("kdiag", 96, 96, {"sparsity": 0.8, "permute": "both"}, "cdf374ac6757c377"),
    ("block", 128, 96, {"density": 0.1, "block": 8, "permute": "rows"}, "10a9324ab658452c"),
    ("nm", 64, 96, {"n": 1, "m": 4, "permute": "cols"}, "dbe5b400f4a5c41d"),
]


@pytest.mark.parametrize(("kind", "rows", "cols", "options", "digest"), PINNED_CSR)
def test_generator_outputs_are_pinned(kind, rows, cols, options, digest):
    matrix = generate(kind, rows, cols, seed=3, **options)
    assert Matrix("x", matrix.csr).sha256[:16] == digest


def _make_corpus_module():
    path = Path(__file__).resolve().parents[1] / "scripts" / "make_corpus.py"
    spec = importlib.util.spec_from_file_location("make_corpus", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# sha256 of files of the corpus the records were collected on (/work/corpus/synthetic).
PINNED_CORPUS_FILES = {
    20: "69c514b2982706c59e83d30af45bf51fc87579d89b713254bd72be0fa058f143",
    23: "ead909361e4088e00958ac222ce5dfa67ca0b4bc62c4ad2989dea66fc792b35b",
    24: "7052f112774e68460f08a81ced575c76ca643707c10faf2d2550c37c6272d545",
    27: "7edfa461c00d99a08ff139f0f3be8c6cbf1175b05ecc255e67efb28064ca9a7a",
}


def test_base_corpus_files_stay_byte_identical(tmp_path):
    paths = _make_corpus_module().write_set(tmp_path, "base", sorted(PINNED_CORPUS_FILES))
    for index, path in zip(sorted(PINNED_CORPUS_FILES), paths, strict=True):
        assert hashlib.sha256(path.read_bytes()).hexdigest() == PINNED_CORPUS_FILES[index]
        assert not load_matrix(path).permuted


def test_extra_corpus_keeps_index_maps(tmp_path):
    module = _make_corpus_module()
    permuted = [i for i, recipe in enumerate(module.EXTRA) if "permute" in recipe[4]][:2]
    assert len(module.EXTRA) >= 35 and permuted
    for path in module.write_set(tmp_path, "extra", permuted):
        matrix = load_matrix(path)
        assert matrix.permuted and path.name.startswith("ext")
        assert 20_000 <= matrix.nnz <= 400_000


@pytest.mark.parametrize("kind", ["kdiag", "block", "nm"])
@pytest.mark.parametrize("permute", ["rows", "cols", "both"])
def test_permuted_matrix_carries_its_index_maps(kind, permute):
    options = {"sparsity": 0.9} if kind != "block" else {"sparsity": 0.9, "block": 8}
    plain = generate(kind, 96, 160, seed=4, **options)
    permuted = generate(kind, 96, 160, seed=4, permute=permute, **options)
    assert (permuted.row_perm is not None) == (permute in ("rows", "both"))
    assert (permuted.col_perm is not None) == (permute in ("cols", "both"))
    s = permuted.structured()
    assert (s != plain.csr).nnz == 0 and np.array_equal(s.data, plain.csr.data)
    a = permuted.csr.toarray()
    rows = permuted.row_perm if permuted.row_perm is not None else np.arange(96)
    cols = permuted.col_perm if permuted.col_perm is not None else np.arange(160)
    assert np.array_equal(a[np.ix_(rows, cols)], plain.csr.toarray())
    assert permuted.sha256 != Matrix("a", permuted.csr).sha256


@pytest.mark.parametrize(("rows", "cols"), LAYER_SHAPES)
def test_layer_shapes_at_every_sparsity(rows, cols):
    if rows * cols > 768 * 3072:  # 4096 x 4096 at 90% only keeps this fast
        sparsities = (0.9,)
    else:
        sparsities = LAYER_SPARSITIES
    for sparsity in sparsities:
        k = kdiag_count(rows, cols, sparsity)
        assert generate("kdiag", rows, cols, sparsity=sparsity).nnz == k * min(rows, cols)
        block = generate("block", rows, cols, sparsity=sparsity, block=16)
        assert abs(block.nnz / (rows * cols) - (1 - sparsity)) < 0.01
        nm = generate("nm", rows, cols, sparsity=sparsity)
        assert abs(nm.nnz / (rows * cols) - (1 - sparsity)) < 0.01


def test_cli_synth_layer_shape_keeps_maps_in_npz(tmp_path):
    from click.testing import CliRunner

    from cognate.cli import main

    out = tmp_path / "layer.npz"
    args = ["data", "synth", "kdiag", "--shape", "768x3072", "--sparsity", "0.95"]
    result = CliRunner().invoke(main, [*args, "--permute", "both", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "index maps saved" in result.output
    loaded = load_matrix(out)
    expected = generate("kdiag", 768, 3072, sparsity=0.95, permute="both")
    assert np.array_equal(loaded.row_perm, expected.row_perm)
    assert loaded.sha256 == expected.sha256
    bad = CliRunner().invoke(main, [*args, "--rows", "5", "-o", str(out)])
    assert bad.exit_code != 0 and "not both" in str(bad.exception)
