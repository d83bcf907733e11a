"""The cpu target's column-panel family (ASpT-style tiling): SpMM and SDDMM.

Real kernels checked against the scipy reference, through prepare_kernel / run_config and
through the user path (ScheduleKernel / TunedKernel): real SuiteSparse matrices, a
rectangular random matrix, empty rows and empty column panels, several panels per row
(pcols below the column count), permuted matrices, values trained in place, bad knobs.
The family is not in the schedule space: configs are plain knob dicts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from cases import permuted

from cognate.config import Config
from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.matrix import Matrix, canonicalize
from cognate.targets.cpu.families import TooLarge, kernel_source
from cognate.targets.cpu.families import pack as pack_family
from cognate.targets.cpu.measure.check import dense_operands, mismatch, reference
from cognate.targets.cpu.pipeline import prepare_kernel, run_config
from cognate.targets.cpu.tuned import ScheduleKernel, TunedKernel

OPS = ("spmm", "sddmm")


def panel(pcols: int, rblock: int, chunk: int = 2) -> dict:
    return {"family": "panel", "pcols": pcols, "rblock": rblock, "chunk": chunk}


def random_csr(rows: int, cols: int, density: float, seed: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    a = sp.random(rows, cols, density=density, format="csr", random_state=rng)
    a.data = rng.uniform(-1.0, 1.0, a.nnz)
    return canonicalize(a)


def holey() -> sp.csr_matrix:
    """600 x 4500: empty rows (every third, a whole 32-row block, the last row) and empty
    column panels at pcols=1024 ([1024, 2048) and [3072, 4096))."""
    a = random_csr(600, 4500, 0.01, seed=7).tolil()
    a[::3, :] = 0
    a[64:96, :] = 0
    a[-1, :] = 0
    a[:, 1024:2048] = 0
    a[:, 3072:4096] = 0
    a = sp.csr_matrix(a)
    a.eliminate_zeros()
    return canonicalize(a)


def check(matrix, op: str, knobs: dict, width: int, seed: int = 0) -> None:
    """run_config(matrix, op, knobs) equals the scipy reference."""
    csr = getattr(matrix, "csr", matrix)
    operands = dense_operands(op, csr.shape, width, seed)
    ref, tol = reference(csr, op, operands)
    got = run_config(matrix, op, knobs, *operands)
    if op == "sddmm":
        assert np.array_equal(got.indices, csr.indices) and np.array_equal(got.indptr, csr.indptr)
        got = got.data
    assert mismatch(got, ref, tol) is None, (op, knobs, width)


def segments(packed) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(blk_seg, seg_row, seg_ptr, crd) of a packed panel layout."""
    blk_seg, seg_row, seg_ptr, crd = packed.arrays[:4]
    return blk_seg, seg_row, seg_ptr, crd


# --- real matrices ----------------------------------------------------------------------------


REAL = [  # (name, [(pcols, rblock, chunk)], widths)
    ("dwt_992", [(1024, 32, 1), (65536, 128, 4)], (13, 128)),
    ("west0479", [(1024, 512, 1), (4096, 32, 3)], (32,)),
    ("lp_share1b", [(1024, 32, 2)], (13, 32)),  # rectangular 117 x 253
    ("test_FW_2003", [(1024, 32, 2), (16384, 128, 1)], (13, 32)),  # 484 empty rows
    # 10592 x 3016, 48k nnz: pcols=1024 gives three panels
    ("Franz6_id1959_aug", [(1024, 32, 4), (1024, 512, 1), (4096, 128, 2)], (13, 512)),
]


@pytest.mark.parametrize(("name", "settings", "widths"), REAL, ids=[r[0] for r in REAL])
def test_real_matrices_match_scipy(name: str, settings: list, widths: tuple, shared: Path) -> None:
    matrix = load_matrix(shared / "matrices" / "suitesparse" / f"{name}.mtx.gz")
    assert matrix.nnz < 50_000
    for op in OPS:
        for width in widths:
            for pcols, rblock, chunk in settings:
                check(matrix, op, panel(pcols, rblock, chunk), width, seed=width)


def test_several_panels_really_occur(shared: Path) -> None:
    """Franz6 at pcols=1024: rows split into segments of three panels, packed out of CSR order,
    every segment inside one panel and one row block, blocks panel by panel."""
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "Franz6_id1959_aug.mtx.gz")
    csr = matrix.csr
    assert csr.shape[1] > 3000
    for rblock in (32, 512):
        packed = pack_family(matrix, "spmm", panel(1024, rblock), 32)
        blk_seg, seg_row, seg_ptr, crd = segments(packed)
        nonempty = int((np.diff(csr.indptr) > 0).sum())
        assert seg_row.size > nonempty  # some rows have entries in several panels
        pos = packed.nz_positions
        assert not np.array_equal(pos, np.arange(csr.nnz))  # not CSR order
        seg_of = np.repeat(np.arange(seg_row.size), np.diff(seg_ptr))
        panel_of = crd // 1024  # plain matrix: crd is the column
        assert np.array_equal(panel_of, panel_of[seg_ptr[:-1]][seg_of])  # one panel a segment
        assert set(np.unique(panel_of)) == {0, 1, 2}
        block_of = seg_row // rblock
        assert np.array_equal(np.repeat(np.arange(blk_seg.size - 1), np.diff(blk_seg)), block_of)
        key = (block_of.astype(np.int64) * 3 + panel_of[seg_ptr[:-1]]) * rblock + seg_row % rblock
        assert (np.diff(key) > 0).all()  # (block, panel, row) order, one segment each
        # the packed entries are S's: row, column and value of each A entry
        rows = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
        assert np.array_equal(seg_row[seg_of][pos], rows)
        assert np.array_equal(crd[pos], csr.indices)
        assert np.array_equal(packed.arrays[4][pos], csr.data)
        assert packed.stored_entries == 2 * csr.nnz + 2 * seg_row.size + 1 + blk_seg.size
    one = pack_family(matrix, "spmm", panel(4096, 128), 32)  # one panel: plain CSR by blocks
    assert np.array_equal(one.nz_positions, np.arange(csr.nnz))
    assert segments(one)[1].size == int((np.diff(csr.indptr) > 0).sum())


# --- synthetic matrices -----------------------------------------------------------------------


def test_rectangular_random_matrix_matches_scipy() -> None:
    a = Matrix("rect", random_csr(700, 5000, 0.006, seed=3))
    for op in OPS:
        for width, (pcols, rblock, chunk) in [
            (13, (1024, 32, 1)),
            (24, (1024, 128, 3)),
            (32, (4096, 512, 1)),
            (77, (1024, 32, 7)),
            (128, (65536, 32, 2)),
            (512, (1024, 128, 1)),
        ]:
            check(a, op, panel(pcols, rblock, chunk), width, seed=width)
    tall = Matrix("tall", random_csr(5000, 1500, 0.004, seed=4))  # more rows than columns
    for op in OPS:
        check(tall, op, panel(1024, 32, 5), 40)


def test_empty_rows_and_empty_panels_are_written() -> None:
    """Every C entry is written (out starts as NaN): rows without entries are zero."""
    a = Matrix("holey", holey())
    csr = a.csr
    empty = np.diff(csr.indptr) == 0
    assert empty[64:96].all() and empty[-1] and empty.sum() > 200
    assert csr[:, 1024:2048].nnz == 0 and csr[:, 3072:4096].nnz == 0 and csr.nnz > 5000
    for width in (13, 32, 128):
        for knobs in (panel(1024, 32, 1), panel(1024, 512, 2), panel(65536, 128, 1)):
            for op in OPS:
                check(a, op, knobs, width, seed=1)
            kernel = ScheduleKernel(a, "spmm", Config("cpu", "spmm", knobs))
            (b,) = dense_operands("spmm", a.shape, width, 2)
            out = np.full((a.shape[0], width), np.nan, dtype=np.float32)
            assert kernel(b, out=out) is out
            ref, tol = reference(csr, "spmm", (b,))
            assert mismatch(out, ref, tol) is None
            assert not out[empty].any()
    nothing = Matrix("nothing", canonicalize(sp.csr_matrix((40, 2000), dtype=np.float32)))
    for op in OPS:
        check(nothing, op, panel(1024, 32), 16)
    spmm = ScheduleKernel(nothing, "spmm", Config("cpu", "spmm", panel(1024, 32)))
    out = spmm(np.ones((2000, 16), dtype=np.float32), out=np.full((40, 16), np.nan, np.float32))
    assert not out.any()


def test_permuted_matrices_run_through_their_index_maps() -> None:
    s = random_csr(400, 3000, 0.01, seed=5)
    a = permuted(s, "perm")
    assert a.row_perm is not None and a.col_perm is not None
    for op in OPS:
        for width, knobs in [(13, panel(1024, 32, 1)), (32, panel(4096, 128, 2))]:
            check(a, op, knobs, width, seed=width)
    # the layout is S's: the same segments as the unpermuted matrix
    packed, plain = (pack_family(m, "spmm", panel(1024, 32), 32) for m in (a, s))
    assert packed.stored_entries == plain.stored_entries
    assert np.array_equal(segments(packed)[2], segments(plain)[2])
    # SDDMM writes A's CSR order directly, also through the maps
    sddmm = pack_family(a, "sddmm", panel(1024, 32), 32)
    assert sddmm.out_slots == a.nnz and np.array_equal(sddmm.nz_positions, np.arange(a.nnz))
    assert np.array_equal(np.sort(sddmm.arrays[4]), np.arange(a.nnz))  # slot: a permutation


# --- the user path ----------------------------------------------------------------------------


@pytest.mark.parametrize("perm", [False, True], ids=["plain", "permuted"])
def test_schedule_kernel_writes_into_the_callers_arrays(perm: bool) -> None:
    s = random_csr(300, 2500, 0.01, seed=8)
    a = permuted(s, "p") if perm else Matrix("m", s)
    knobs = panel(1024, 32, 1)
    spmm = ScheduleKernel(a, "spmm", Config("cpu", "spmm", knobs))
    for width, seed in ((32, 1), (13, 2), (32, 3)):  # back to a width already compiled
        (b,) = dense_operands("spmm", a.shape, width, seed)
        out = np.full((a.shape[0], width), np.nan, dtype=np.float32)
        assert spmm(b, out=out) is out
        ref, tol = reference(a.csr, "spmm", (b,))
        assert mismatch(out, ref, tol) is None
        b *= -2.0  # the same arrays again: read in place
        assert spmm(b, out=out) is out
        assert mismatch(out, -2.0 * ref, 2.0 * tol) is None
    assert spmm.widths == (13, 32)
    sddmm = ScheduleKernel(a, "sddmm", Config("cpu", "sddmm", knobs))
    for width, seed in ((32, 1), (128, 2)):
        x, y = dense_operands("sddmm", a.shape, width, seed)
        ref, tol = reference(a.csr, "sddmm", (x, y))
        out = np.full(a.nnz, np.nan, dtype=np.float32)
        got = sddmm(x, y, out=out)
        assert np.shares_memory(got.data, out) and np.array_equal(got.indices, a.csr.indices)
        assert mismatch(out, ref, tol) is None
        assert sddmm._by_width[width]._direct  # the kernel wrote out itself, no gather


@pytest.mark.parametrize("perm", [False, True], ids=["plain", "permuted"])
@pytest.mark.parametrize("op", OPS)
def test_values_trained_in_place_are_read_by_the_next_call(op: str, perm: bool) -> None:
    s = random_csr(300, 3300, 0.01, seed=9)
    a = permuted(s, "p") if perm else Matrix("m", s)
    operands = dense_operands(op, a.shape, 24, 4)
    original = a.csr.data.copy()
    kernel = TunedKernel(a, op, Config("cpu", op, panel(1024, 32, 1)), operands)
    before = np.array(kernel(*operands) if op == "spmm" else kernel(*operands).data)
    new = np.random.default_rng(5).uniform(-2.0, 2.0, a.nnz).astype(np.float32)
    kernel.packed_values[kernel.value_slots] = new
    after = kernel(*operands) if op == "spmm" else kernel(*operands).data
    trained = sp.csr_matrix((new, a.csr.indices, a.csr.indptr), shape=a.shape)
    ref, tol = reference(trained, op, operands)
    assert mismatch(after, ref, tol) is None
    assert mismatch(before, ref, tol) is not None  # the check can fail: old values differ
    assert np.array_equal(a.csr.data, original)  # the caller's matrix is not trained
    old_ref, old_tol = reference(a.csr, op, operands)
    assert mismatch(before, old_ref, old_tol) is None


def test_prepare_kernel_runs_again_on_new_operands() -> None:
    a = Matrix("m", random_csr(500, 4200, 0.008, seed=10))
    for op in OPS:
        operands = dense_operands(op, a.shape, 48, 0)
        call = prepare_kernel(a, op, panel(1024, 128, 3), *operands)
        for seed in (1, 2):
            fresh = dense_operands(op, a.shape, 48, seed)
            size = (a.shape[0], 48) if op == "spmm" else (call.packed.out_slots,)
            out = np.full(size, np.nan, dtype=np.float32)
            call.point_at([a.ctypes.data for a in (*fresh, out)])
            call()
            ref, tol = reference(a.csr, op, fresh)
            assert mismatch(out, ref, tol) is None


# --- knobs and limits -------------------------------------------------------------------------


BAD = [
    ({"pcols": 1000}, "pcols must be one of"),
    ({"pcols": True}, "pcols must be one of"),
    ({"rblock": 0}, "rblock must be one of"),
    ({"rblock": "32"}, "rblock must be one of"),
    ({"rblock": 64}, "rblock must be one of"),
    ({"chunk": 0}, "chunk must be an integer"),
    ({"chunk": 2.0}, "chunk must be an integer"),
]


@pytest.mark.parametrize(("change", "message"), BAD)
@pytest.mark.parametrize("op", OPS)
def test_bad_knobs_are_one_line_errors(op: str, change: dict, message: str) -> None:
    a = Matrix("m", random_csr(50, 60, 0.1, seed=0))
    operands = dense_operands(op, a.shape, 8, 0)
    knobs = {**panel(1024, 32), **change}
    for attempt in (
        lambda: run_config(a, op, knobs, *operands),
        lambda: kernel_source(op, knobs, 8),
        lambda: pack_family(a, op, knobs, 8),
    ):
        with pytest.raises(CognateError) as err:
            attempt()
        assert message in str(err.value) and "\n" not in str(err.value)
    missing = {k: v for k, v in panel(1024, 32).items() if k != "pcols"}
    with pytest.raises(CognateError, match="pcols must be one of"):
        run_config(a, op, missing, *operands)


def test_emitted_source_has_only_the_width_compiled_in() -> None:
    for op in OPS:
        source, entry, args = kernel_source(op, panel(4096, 128, 6), 40)
        assert entry == f"cognate_panel_{op}" and entry in source and args == {"chunk": 6}
        assert "${width}" not in source and "= 40;" in source
        other, _, _ = kernel_source(op, panel(1024, 512, 1), 40)
        assert other == source  # pcols, rblock: not compiled in


def test_too_large_over_the_size_limit() -> None:
    a = random_csr(200, 3000, 0.01, seed=11)
    for op in OPS:
        with pytest.raises(TooLarge, match="over the limit"):
            pack_family(a, op, panel(1024, 32), 16, max_entries=a.nnz - 1)
        packed = pack_family(a, op, panel(1024, 32), 16, max_entries=a.nnz + 1)
        assert packed.out_slots == a.nnz
