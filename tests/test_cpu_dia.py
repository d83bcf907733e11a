"""The DIA family's two layouts (families/dia.py): global and tile-local, pinned by counts,
and every layout's kernels checked against scipy (SpMM and SDDMM, permuted, odd shapes)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from cognate.matrix import Matrix
from cognate.synth import generate
from cognate.targets.cpu.families import TooLarge, pack
from cognate.targets.cpu.families.dia import GLOBAL, LOCAL
from cognate.targets.cpu.measure.check import dense_operands, mismatch, reference
from cognate.targets.cpu.pipeline import run_config


def spmm_knobs(rtile: int, jtile: int = 32) -> dict:
    return {"family": "dia", "rtile": rtile, "jtile": jtile, "chunk": 4}


def sddmm_knobs(rtile: int) -> dict:
    return {"family": "dia", "rtile": rtile, "chunk": 4}


def layout(packed) -> int:
    return packed.integers[3]


def values(packed) -> int:
    return packed.arrays[2].size


def check(matrix: Matrix, rtile: int, jtile: int = 32, width: int = 37) -> None:
    (b,) = dense_operands("spmm", matrix.shape, width, 0)
    ref, tol = reference(matrix.csr, "spmm", (b,))
    out = run_config(matrix, "spmm", spmm_knobs(rtile, jtile), b)
    assert mismatch(out, ref, tol) is None, (matrix.shape, rtile, jtile, width)
    x, y = dense_operands("sddmm", matrix.shape, 24, 0)
    ref, tol = reference(matrix.csr, "sddmm", (x, y))
    got = run_config(matrix, "sddmm", sddmm_knobs(rtile), x, y)
    assert np.array_equal(got.indices, matrix.csr.indices)
    assert mismatch(got.data, ref, tol) is None, (matrix.shape, rtile)


def test_dynadiag_tall_layer_packs_tile_local_near_nnz() -> None:
    """3072 x 768 at 90%: 308 diagonals of 768 rows in 258 offset classes of 3072 rows."""
    a = generate("kdiag", 3072, 768, sparsity=0.9, seed=3)
    assert a.nnz == 308 * 768
    for rtile, most in ((1, 2.02), (4, 1.27), (8, 1.15)):
        packed = pack(a, "spmm", spmm_knobs(rtile), width=128)
        assert layout(packed) == LOCAL and packed.integers[2] == 258
        assert values(packed) <= 1.01 * a.nnz  # padding only where a diagonal starts / ends
        assert packed.stored_entries <= most * a.nnz  # values + a column per (tile, diagonal)
    # the global layout would have stored 258 full vectors: 3.35x the nonzeros
    assert 258 * 3072 > 3.3 * a.nnz


@pytest.mark.parametrize("shape", [(768, 3072), (4096, 4096)])
def test_full_length_diagonals_keep_the_global_layout(shape) -> None:
    a = generate("kdiag", *shape, sparsity=0.9, seed=3)
    packed = pack(a, "spmm", spmm_knobs(4), width=128)
    ndiag = packed.integers[2]
    assert layout(packed) == GLOBAL and values(packed) == a.nnz  # no padding at all
    assert packed.stored_entries == ndiag * (shape[0] + 1) and packed.arrays[0].size == 0


def test_permuted_layer_packs_its_structured_view() -> None:
    plain = generate("kdiag", 3072, 768, sparsity=0.9, seed=3)
    permuted = generate("kdiag", 3072, 768, sparsity=0.9, seed=3, permute="both")
    a, b = (pack(m, "spmm", spmm_knobs(8), width=128) for m in (plain, permuted))
    assert a.stored_entries == b.stored_entries and layout(b) == LOCAL
    assert a.integers[4] == 1 and b.integers[4] == 0  # identity column map or not
    scattered = pack(permuted.csr, "spmm", spmm_knobs(8), width=128)  # without its maps
    assert scattered.integers[2] == 768 and scattered.stored_entries > 3 * b.stored_entries


def test_tile_local_entries_hold_the_right_columns() -> None:
    """A diagonal of 5 rows starting mid-tile, on a 10 x 4 matrix with tiles of 4 rows."""
    rows = np.arange(3, 8)
    cols = (rows + 1) % 4  # offset 1, wrapping at 4 columns
    a = sp.csr_matrix((np.arange(1, 6, dtype=np.float32), (rows, cols)), shape=(10, 4))
    packed = pack(Matrix("seg", a), "spmm", spmm_knobs(4, 8), width=8)
    tptr, first, vals = packed.arrays[:3]
    assert layout(packed) == LOCAL and tptr.tolist() == [0, 1, 2, 2]  # tile 2 is empty
    assert first.tolist() == [1, 1] and vals.reshape(2, 4).tolist() == [[0, 0, 0, 1], [2, 3, 4, 5]]
    # rows 10-11 on offset 0 (columns 2, 3)
    a2 = sp.vstack([a, sp.csr_matrix(np.eye(2, 4, k=2, dtype=np.float32))]).tocsr()
    packed = pack(Matrix("seg2", a2), "spmm", spmm_knobs(4, 8), width=8)
    tptr, first, vals = packed.arrays[:3]
    assert layout(packed) == LOCAL
    assert tptr.tolist() == [0, 1, 2, 3]  # tiles 0, 1: offset 1; tile 2: offset 0
    assert first.tolist() == [1, (4 + 1) % 4, (8 + 0) % 4]
    assert vals.reshape(3, 4).tolist() == [[0, 0, 0, 1], [2, 3, 4, 5], [0, 0, 1, 1]]
    check(Matrix("seg2", a2), 4, 8, width=8)


@pytest.mark.parametrize("rtile", [1, 2, 4, 8, 16])
def test_odd_shapes_match_scipy(rtile: int) -> None:
    cases = [
        generate("kdiag", 301, 100, sparsity=0.9, seed=2),  # rows not a multiple of the tile
        generate("kdiag", 301, 100, sparsity=0.9, seed=2, permute="both"),
        generate("kdiag", 77, 300, sparsity=0.8, seed=1, permute="both"),  # rows < cols
        generate("kdiag", 21, 5, sparsity=0.5, seed=4),  # tiles taller than A is wide
        generate("kdiag", 250, 50, sparsity=0.7, seed=5, permute="rows"),  # wrapped diagonals
    ]
    for matrix in cases:
        check(matrix, rtile, jtile=16 if rtile > 4 else 64)


def test_empty_tiles_and_an_empty_matrix() -> None:
    s = sp.lil_matrix((40, 24), dtype=np.float32)
    for i in list(range(0, 8)) + list(range(30, 37)):  # rows 8-29 and 37-39 hold nothing
        s[i, (i + 3) % 24] = 1.0 + i
        s[i, (i + 11) % 24] = -2.0 - i
    matrix = Matrix("gaps", s.tocsr())
    packed = pack(matrix, "spmm", spmm_knobs(4), width=16)
    assert layout(packed) == LOCAL and values(packed) == 5 * 2 * 4  # 5 tiles of 2 diagonals
    assert 0 in np.diff(packed.arrays[0])  # tiles without an entry
    for rtile in (1, 4, 8):
        check(matrix, rtile, jtile=16, width=19)
    empty = Matrix("empty", sp.csr_matrix((33, 17), dtype=np.float32))
    (b,) = dense_operands("spmm", empty.shape, 16, 0)
    assert not run_config(empty, "spmm", spmm_knobs(4, 16), b).any()


def test_refused_before_allocating_over_the_limit() -> None:
    a = generate("kdiag", 512, 512, sparsity=0.9, seed=0)
    packed = pack(a, "spmm", spmm_knobs(8), width=32)
    with pytest.raises(TooLarge):
        pack(a, "spmm", spmm_knobs(8), width=32, max_entries=packed.stored_entries // 2)
    # 4 wrapped diagonals of 64 rows less one entry: tile-local stores one value fewer but a
    # column per entry (2 x 255 + 65); where that is over the limit the global layout is packed
    rows = np.tile(np.arange(64), 4)
    cols = (rows + np.repeat([0, 5, 9, 30], 64)) % 64
    s = sp.csr_matrix((np.ones(256, dtype=np.float32), (rows, cols)), shape=(64, 64)).tolil()
    s[10, 15] = 0
    matrix = Matrix("gap", s.tocsr())
    assert matrix.nnz == 255
    assert layout(pack(matrix, "spmm", spmm_knobs(1), width=16)) == LOCAL
    fallback = pack(matrix, "spmm", spmm_knobs(1), width=16, max_entries=300)
    assert layout(fallback) == GLOBAL and fallback.stored_entries == 4 * 65
    with pytest.raises(TooLarge):
        pack(matrix, "spmm", spmm_knobs(1), width=16, max_entries=259)
