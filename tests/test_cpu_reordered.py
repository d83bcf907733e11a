"""The cpu target's ``reordered`` kernel family: rows run in a chosen order (index maps).

Every result is compared with scipy's (kernel.reference + mismatch), never with another
run of the kernel: real SuiteSparse matrices, rectangular and empty-row random matrices,
permuted matrices (row_perm / col_perm), through run_config and through the user path
(ScheduleKernel). The family is not in the schedule space yet: configs are plain dicts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from cases import permuted

from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.matrix import Matrix, canonicalize
from cognate.targets.cpu.families import TooLarge, kernel_of, kernel_source, view_of
from cognate.targets.cpu.families import build as build_kernel
from cognate.targets.cpu.families import pack as pack_family
from cognate.targets.cpu.families.reordered import STRIPS
from cognate.targets.cpu.families.template import generate_family_source
from cognate.targets.cpu.measure.check import dense_operands, mismatch, reference
from cognate.targets.cpu.pipeline import run_config
from cognate.targets.cpu.row_clusters import cached_cluster_rows
from cognate.targets.cpu.row_orders import ORDERS, row_order
from cognate.targets.cpu.tuned import ScheduleKernel

SETTINGS = [(by, sym, strip) for by in ORDERS for sym in (0, 1) for strip in STRIPS]
REAL = ["west0479", "dwt_878", "nnc1374", "lp_share1b"]  # lp_share1b: 117 x 253


def knobs(by: str = "rcm", symmetric: int = 0, strip: int = 32, chunk: int = 4) -> dict:
    return {"family": "reordered", "by": by, "symmetric": symmetric, "strip": strip, "chunk": chunk}


def random_csr(
    rows: int, cols: int, density: float, seed: int, empty_rows: float = 0.0
) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    a = sp.random(rows, cols, density=density, random_state=rng, format="csr")
    a.data = rng.uniform(-1.0, 1.0, a.nnz)
    if empty_rows:
        keep = (rng.random(rows) >= empty_rows).astype(float)
        a = sp.diags(keep) @ a
    return canonicalize(a)


def values_of(op: str, result) -> np.ndarray:
    return result if op == "spmm" else result.data


def check_settings(matrix: Matrix, op: str, width: int, chunk: int = 4, seed: int = 0) -> int:
    """Every by x symmetric x strip through run_config against scipy; returns the runs."""
    operands = dense_operands(op, matrix.shape, width, seed)
    ref, tol = reference(matrix.csr, op, operands)
    square = matrix.shape[0] == matrix.shape[1]
    runs = 0
    for by, sym, strip in SETTINGS:
        config = knobs(by, sym, strip, chunk)
        if sym and not square:
            with pytest.raises(CognateError, match="square") as err:
                run_config(matrix, op, config, *operands)
            assert "\n" not in str(err.value)
            continue
        result = run_config(matrix, op, config, *operands)
        if op == "sddmm":  # A's pattern, values in A's CSR order
            assert np.array_equal(result.indices, matrix.csr.indices)
            assert np.array_equal(result.indptr, matrix.csr.indptr)
        problem = mismatch(values_of(op, result), ref, tol)
        assert problem is None, (matrix.name, op, width, config, problem)
        runs += 1
    return runs


# --- the orders ----------------------------------------------------------------------------


def _is_permutation(order: np.ndarray, rows: int) -> bool:
    return order.dtype == np.int32 and np.array_equal(np.sort(order), np.arange(rows))


def _bandwidth(a: sp.csr_matrix) -> int:
    coo = a.tocoo()
    return int(np.abs(coo.row - coo.col).max())


@pytest.mark.parametrize("shape", [(300, 300), (240, 90), (90, 240)])
def test_orders_are_permutations(shape: tuple[int, int]) -> None:
    a = random_csr(*shape, 0.03, seed=3, empty_rows=0.2)
    view = view_of(a)
    for by in ORDERS:
        order = row_order(view, by)
        assert _is_permutation(order, shape[0]), by
        assert np.array_equal(row_order(view, by), order)  # the same again (cached or not)


def test_degree_is_by_row_length_descending_ties_in_index_order() -> None:
    a = random_csr(400, 300, 0.02, seed=4, empty_rows=0.1)
    lengths = np.diff(a.indptr)
    order = row_order(view_of(a), "degree")
    expected = sorted(range(a.shape[0]), key=lambda i: (-lengths[i], i))
    assert order.tolist() == expected
    assert (np.diff(lengths[order]) <= 0).all()


def test_rcm_recovers_a_scrambled_band() -> None:
    n, band = 400, 3
    offsets = range(-band, band + 1)
    s = sp.diags([np.ones(n - abs(o)) for o in offsets], list(offsets), format="csr")
    p = np.random.default_rng(0).permutation(n)
    a = canonicalize(s[p][:, p])
    assert _bandwidth(a) > 100  # scrambled
    order = row_order(view_of(a), "rcm")
    assert _is_permutation(order, n)
    assert _bandwidth(a[order][:, order]) <= 2 * band


def test_rcm_of_a_rectangular_matrix_keeps_blocks_of_rows_together() -> None:
    """Rows sharing columns form one component of the bipartite graph: contiguous."""
    rng = np.random.default_rng(1)
    blocks = [rng.uniform(0.5, 1.0, (12, 7)) for _ in range(6)]  # dense: connected
    s = sp.block_diag(blocks, format="csr")  # 72 x 42, one component per block
    p = rng.permutation(s.shape[0])
    a = canonicalize(s[p])
    block_of = (np.arange(s.shape[0]) // 12)[p]  # a's row i is s's row p[i]
    order = row_order(view_of(a), "rcm")
    assert _is_permutation(order, a.shape[0])
    runs = block_of[order]
    assert np.count_nonzero(np.diff(runs)) == len(blocks) - 1  # each block in one run


def test_cluster_is_the_jaccard_clustering(shared: Path) -> None:
    a = load_matrix(shared / "matrices" / "suitesparse" / "west0479.mtx.gz")
    view = view_of(a)
    order = row_order(view, "cluster")
    assert _is_permutation(order, a.shape[0])
    assert np.array_equal(order, cached_cluster_rows(view.csr, view.key, 0.0))


def test_orders_of_a_permuted_matrix_are_orders_of_its_structure() -> None:
    a = permuted(random_csr(150, 150, 0.04, seed=5), "p", seed=2)
    view = view_of(a)
    for by in ORDERS:
        packed = pack_family(a, "spmm", knobs(by), 16)
        run_rows = packed.arrays[1]  # the A row run t-th
        assert np.array_equal(run_rows, view.row_map[row_order(view, by)])


# --- results against scipy -------------------------------------------------------------------


@pytest.mark.parametrize("name", REAL)
@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_real_matrices_match_scipy(name: str, op: str, shared: Path) -> None:
    matrix = load_matrix(shared / "matrices" / "suitesparse" / f"{name}.mtx.gz")
    runs = check_settings(matrix, op, 32)
    assert runs == (len(SETTINGS) if matrix.shape[0] == matrix.shape[1] else len(SETTINGS) // 2)


@pytest.mark.parametrize("width", [13, 45, 128, 512])
@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_widths_and_strips(width: int, op: str, shared: Path) -> None:
    """Strips narrower and wider than the width, widths off the 8-column tiles."""
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "dwt_878.mtx.gz")
    check_settings(matrix, op, width, chunk=1)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_many_parallel_tasks(op: str) -> None:
    """Weight ~55k: several MIN_TASK tasks and the parallel path (with its gather)."""
    matrix = Matrix("big", random_csr(5000, 5000, 0.002, seed=6))
    for chunk in (1, 64, 100000):
        check_settings(matrix, op, 40, chunk=chunk, seed=chunk)


@pytest.mark.parametrize("shape", [(300, 170), (170, 300)])
@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_rectangular_random_matrices(shape: tuple[int, int], op: str) -> None:
    matrix = Matrix("rect", random_csr(*shape, 0.05, seed=7, empty_rows=0.1))
    assert check_settings(matrix, op, 32) == len(SETTINGS) // 2  # symmetric=1 refused
    with pytest.raises(CognateError) as err:
        pack_family(matrix, op, knobs("degree", 1, 128), 32)
    assert "symmetric=1" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_empty_rows_and_columns(op: str) -> None:
    a = random_csr(260, 260, 0.04, seed=8, empty_rows=0.35)
    a = canonicalize(a @ sp.diags((np.arange(260) % 5 != 0).astype(float)))  # empty columns
    assert (np.diff(a.indptr) == 0).sum() > 50
    check_settings(Matrix("holes", a), op, 24)
    empty = Matrix("empty", canonicalize(sp.csr_matrix((40, 30), dtype=np.float32)))
    check_settings(empty, op, 16)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_permuted_matrices_run_through_their_index_maps(op: str) -> None:
    square = permuted(random_csr(220, 220, 0.03, seed=9, empty_rows=0.1), "sq", seed=3)
    check_settings(square, op, 37)
    wide = permuted(random_csr(90, 200, 0.05, seed=10), "wide", seed=4)
    check_settings(wide, op, 20)


# --- the user path ---------------------------------------------------------------------------


@pytest.mark.parametrize("symmetric", [0, 1])
@pytest.mark.parametrize("permute", [False, True])
def test_schedule_kernel_spmm_writes_into_out(symmetric: int, permute: bool) -> None:
    s = random_csr(300, 300, 0.03, seed=11, empty_rows=0.1)
    matrix = permuted(s, "p", seed=5) if permute else Matrix("a", s)
    kernel = ScheduleKernel(matrix, "spmm", knobs("rcm", symmetric, 32, chunk=2))
    for seed in (1, 2):  # new B each call: the symmetric gather runs on every call
        (b,) = dense_operands("spmm", matrix.shape, 48, seed)
        out = np.full((300, 48), np.nan, dtype=np.float32)  # every entry must be written
        assert kernel(b, out=out) is out
        ref, tol = reference(matrix.csr, "spmm", (b,))
        assert mismatch(out, ref, tol) is None
        b[:] = -b  # read in place: the same arrays again
        kernel(b, out=out)
        assert mismatch(out, -ref, tol) is None


@pytest.mark.parametrize("symmetric", [0, 1])
@pytest.mark.parametrize("permute", [False, True])
def test_schedule_kernel_sddmm_values_in_a_order(symmetric: int, permute: bool) -> None:
    s = random_csr(250, 250, 0.03, seed=12, empty_rows=0.1)
    matrix = permuted(s, "p", seed=6) if permute else Matrix("a", s)
    kernel = ScheduleKernel(matrix, "sddmm", knobs("degree", symmetric, 32, chunk=3))
    x, y = dense_operands("sddmm", matrix.shape, 72, 1)
    result = kernel(x, y)
    tuned = kernel._by_width[72]
    assert tuned._direct  # A's own CSR order: no slot permutation
    ref, tol = reference(matrix.csr, "sddmm", (x, y))
    assert np.array_equal(result.indices, matrix.csr.indices)
    assert mismatch(result.data, ref, tol) is None
    out = np.full(matrix.nnz, np.nan, dtype=np.float32)
    kernel(x, y, out=out)  # written straight into out
    assert mismatch(out, ref, tol) is None
    # values trained in place: new values at value_slots are used by the next call
    trained = matrix.csr.copy()
    trained.data = np.random.default_rng(2).uniform(-1, 1, matrix.nnz).astype(np.float32)
    tuned.packed_values[tuned.value_slots] = trained.data
    ref, tol = reference(trained, "sddmm", (x, y))
    assert mismatch(kernel(x, y).data, ref, tol) is None


def test_trained_values_reach_spmm() -> None:
    matrix = Matrix("a", random_csr(200, 200, 0.05, seed=13))
    kernel = ScheduleKernel(matrix, "spmm", knobs("cluster", 1, 128))
    (b,) = dense_operands("spmm", matrix.shape, 32, 0)
    kernel(b)
    tuned = kernel._by_width[32]
    trained = matrix.csr.copy()
    trained.data = -2.0 * trained.data
    tuned.packed_values[tuned.value_slots] = trained.data
    ref, tol = reference(trained, "spmm", (b,))
    assert mismatch(kernel(b), ref, tol) is None


# --- knobs and the C source ------------------------------------------------------------------

BAD = [
    ({"by": "x"}, "by='x'"),
    ({"by": None}, "by=None"),
    ({"strip": 7}, "strip=7"),
    ({"strip": "32"}, "strip='32'"),
    ({"symmetric": 2}, "symmetric=2"),
    ({"symmetric": True}, "symmetric=True"),
    ({"symmetric": 1.0}, "symmetric=1.0"),
    ({"chunk": 0}, "chunk"),
]


@pytest.mark.parametrize(("change", "message"), BAD)
def test_bad_knobs_are_one_line_errors(change: dict, message: str) -> None:
    config = {**knobs(), **change}
    a = random_csr(50, 50, 0.1, seed=14)
    (b,) = dense_operands("spmm", a.shape, 8, 0)
    for attempt in (
        lambda: kernel_of("spmm", config, 8),
        lambda: build_kernel("sddmm", config, 8),
        lambda: pack_family(a, "spmm", config, 8),
        lambda: run_config(a, "spmm", config, b),
    ):
        with pytest.raises(CognateError) as err:
            attempt()
        assert message in str(err.value) and "\n" not in str(err.value)


def test_missing_knob_is_an_error() -> None:
    config = knobs()
    del config["strip"]
    with pytest.raises(CognateError, match="strip=None"):
        kernel_of("spmm", config, 8)


def test_only_the_width_reaches_the_source() -> None:
    sources = {
        generate_family_source(kernel_of("spmm", knobs(by, sym, strip), 24))
        for by, sym, strip in SETTINGS
    }
    assert len(sources) == 1  # by, symmetric, strip: runtime, never text
    source, entry, args = kernel_source("sddmm", knobs("cluster", 1, 1024, 9), 24)
    assert entry == "cognate_reordered_sddmm" and entry in source and args == {"chunk": 9}
    assert "cluster" not in source


def test_layout_sizes_and_the_size_limit() -> None:
    a = random_csr(120, 120, 0.05, seed=15, empty_rows=0.2)
    rows, nnz = a.shape[0], a.nnz
    plain = pack_family(a, "sddmm", knobs("degree", 0, 32), 16)
    assert plain.stored_entries == 3 * rows + 2 + 2 * nnz + 1
    assert np.array_equal(plain.nz_positions, np.arange(nnz)) and plain.out_slots == nnz
    assert [x.dtype for x in plain.arrays].count(np.float32) == 1  # the values, only
    sym = pack_family(a, "spmm", knobs("degree", 1, 32), 16)
    assert sym.arrays[-1].size == 120 * 16 and sym.integers == [rows, 120, 32, 1]
    with pytest.raises(TooLarge):
        pack_family(a, "spmm", knobs(), 16, max_entries=nnz - 1)


def test_the_isolated_runner_measures_reordered_configs(shared: Path) -> None:
    """Through CpuRunner's worker (pack, check against scipy, time): Configs built by hand,
    as the family is not in the schedule space yet."""
    from cognate.config import Config
    from cognate.targets.cpu.measure.runner import CpuRunner

    runner = CpuRunner(repeats=1, warmup=0, timeout_s=20.0)
    try:
        square = load_matrix(shared / "matrices" / "suitesparse" / "west0479.mtx.gz")
        rect = load_matrix(shared / "matrices" / "suitesparse" / "lp_share1b.mtx.gz")
        for op in ("spmm", "sddmm"):
            configs = [Config("cpu", op, knobs(by, sym, 32)) for by in ORDERS for sym in (0, 1)]
            found = runner.measure(square, op, 40, configs)
            assert [m.status for m in found] == ["ok"] * len(configs), [m.error for m in found]
            found = runner.measure(rect, op, 40, configs)
            statuses = [m.status for m in found]
            assert statuses == ["ok", "error"] * len(ORDERS), [m.error for m in found]
            assert all("square" in m.error for m in found if m.status == "error")
    finally:
        runner.close()
