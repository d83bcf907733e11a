"""Generated cpu kernels and A's packing, checked against scipy on real shared matrices."""

from __future__ import annotations

import itertools
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.matrix import Matrix, canonicalize
from cognate.targets.cpu.codegen import (
    LoopStructure,
    generate_source,
    loop_nest_source,
    structure_of,
)
from cognate.targets.cpu.families import TooLarge, size_limit
from cognate.targets.cpu.measure.check import dense_operands, mismatch, reference
from cognate.targets.cpu.pipeline import bind, build, pack, prepare_kernel, run_config
from cognate.targets.cpu.space import make_space

WIDTH = 33  # not a multiple of any vector width: the dense loops have tails
ALL_FORMATS = [list(f) for f in itertools.product("UC", repeat=4)]


def _load(shared: Path, name: str) -> Matrix:
    return load_matrix(shared / "matrices" / "suitesparse" / f"{name}.mtx.gz")


def _assert_matches(
    csr: sp.csr_matrix, op: str, knobs: dict, width: int = WIDTH, unlimited: bool = False
) -> None:
    """The kernel of ``knobs`` agrees with scipy (``unlimited``: pack past the size limit)."""
    operands = dense_operands(op, csr.shape, width, seed=7)
    if unlimited:
        packed = pack(csr, op, knobs, max_entries=10**8, width=width)
        call = bind(packed, knobs, operands)
        call()
        values = call.result()
    else:
        result = run_config(csr, op, knobs, *operands)
        values = result if op == "spmm" else result.data
    ref, tol = reference(csr, op, operands)
    problem = mismatch(values, ref, tol)
    assert problem is None, f"{op} {knobs}: {problem}"


def _legal_configs(op: str, shape: tuple[int, int]) -> list[dict]:
    """Every legal order, each twice: odd splits (padded levels) and unit splits (loops
    removed); the formats cycle so that all 16 combinations occur."""
    space = make_space(op)
    orders = sorted(set(space.legal_orders(1)) | set(space.legal_orders(128)))
    dense_knob = space.split_knob[space.dense_var]
    s1, s2 = (space.split_knob[v] for v in space.sparse_vars)
    configs = []
    for n, order in enumerate(orders):
        dense = 4 if space.order_problem(order, 4) is None else 16
        for m, (a, b) in enumerate(((8, 16), (1, 1))):
            fmts = ALL_FORMATS[(2 * n + m) % 16]
            if fmts == ["U"] * 4 and op == "sddmm":
                fmts = ["U", "U", "U", "C"]
            knobs = {s1: a, s2: b, dense_knob: dense, "order": list(order), "formats": fmts}
            knobs["chunk"] = 1 << (n % 4)
            configs.append(space.validate(knobs).knobs)
    return configs


def _precompile(op: str, configs: list[dict], width: int = WIDTH) -> None:
    with ThreadPoolExecutor(2) as pool:  # the compiler runs outside the GIL
        list(pool.map(lambda knobs: build(op, knobs, width), configs))


@pytest.mark.slow  # 40-60 kernels compiled per op; test_sampled_configs_match_scipy is the fast one
@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_every_legal_order_and_format_matches_scipy(shared: Path, op: str) -> None:
    square, rectangular = _load(shared, "west0479"), _load(shared, "lp_share1b")
    configs = _legal_configs(op, square.shape)
    assert len({tuple(k["order"]) for k in configs}) == (20 if op == "spmm" else 30)
    assert len({tuple(k["formats"]) for k in configs}) >= 15
    _precompile(op, configs)
    for knobs in configs:
        for matrix in (square, rectangular):
            _assert_matches(matrix.csr, op, knobs, unlimited=True)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_sampled_configs_match_scipy(shared: Path, op: str) -> None:
    """The space's own sampler (WACO's recipe): each config validated or refused as too large."""
    matrix = _load(shared, "olm500")
    configs = make_space(op).sample_csr(12, seed=3, shape=matrix.shape)
    _precompile(op, [c.knobs for c in configs], width=64)
    ran = 0
    for config in configs:
        try:
            _assert_matches(matrix.csr, op, dict(config.knobs), width=64)
        except TooLarge:
            continue
        ran += 1
    assert ran > 0, f"none of the {len(configs)} sampled configs ran (all too large)"


def test_baseline_is_plain_csr(shared: Path) -> None:
    matrix = _load(shared, "west0479")
    for op in ("spmm", "sddmm"):
        base = make_space(op).baseline(matrix.shape)
        packed = pack(matrix.csr, op, base.knobs)
        assert [p is None for p in packed.pos] == [True, True, False, True]
        np.testing.assert_array_equal(packed.pos[2], matrix.csr.indptr)
        np.testing.assert_array_equal(packed.crd[2], matrix.csr.indices)
        np.testing.assert_array_equal(packed.vals, matrix.csr.data)
        nest = loop_nest_source(structure_of(op, base.knobs))
        # One loop over rows (parallel), one over the row's nonzeros, one vector loop.
        assert nest.count("for (") == 3, nest
        assert nest.count("#pragma omp parallel for schedule(dynamic, chunk)") == 1
        assert "#pragma omp simd" in nest
        _assert_matches(matrix.csr, op, dict(base.knobs), width=128)


@pytest.mark.parametrize("width", [1, 5, 8, 24, 33, 64, 100, 128, 200])
def test_plain_csr_runs_the_register_tiled_kernel(shared: Path, width: int) -> None:
    """The baseline's structure at a fixed width compiles kernels/cpu/spmm_csr.c (every tile
    width 64/32/16/8 and the scalar edge occur across these widths); other structures and a
    runtime width keep the generated nest. Checked on a small matrix with empty rows (one
    thread) and three past the one-thread threshold (nnz x width), split into weight-balanced
    row tasks, one of them 98% empty rows, one (watt_2: a few tasks' weight) cut into tasks
    per thread below the least task weight."""
    space = make_space("spmm")
    coo = _load(shared, "west0479").csr.tocoo()
    keep = coo.row % 3 != 0  # every third row empty
    holes = canonicalize(sp.coo_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), coo.shape))
    trec6 = load_matrix(shared / "matrices" / "waco" / "Trec6_16x16_9.csr").csr  # 98% empty rows
    for csr in (holes, _load(shared, "bcsstk13").csr, trec6, _load(shared, "watt_2").csr):
        base = dict(space.baseline(csr.shape).knobs)
        source = generate_source(structure_of("spmm", base, width))
        assert "always_inline" in source and "#pragma omp simd" not in source
        for knobs in (base, base | {"jsplit": 8, "chunk": 1}):
            _assert_matches(csr, "spmm", knobs, width=width)
    assert "#pragma omp simd" in generate_source(structure_of("spmm", base, None))
    blocked = base | {"isplit": 4, "formats": ["U", "U", "C", "U"]}
    assert "always_inline" not in generate_source(structure_of("spmm", blocked, width))
    sddmm = dict(make_space("sddmm").baseline(holes.shape).knobs)
    assert "always_inline" not in generate_source(structure_of("sddmm", sddmm, width))


def test_padded_dense_levels(shared: Path) -> None:
    csr = _load(shared, "lp_share1b").csr  # 117 x 253: no split below divides either
    knobs = {"isplit": 16, "ksplit": 8, "jsplit": 8, "chunk": 2}
    knobs |= {"order": ["i1", "k1", "i0", "k0", "j1", "j0"], "formats": ["U", "U", "C", "U"]}
    packed = pack(csr, "spmm", knobs)
    assert packed.extents == (8, 32, 16, 8)  # ceil(117/16), ceil(253/8), 16, 8
    assert packed.vals.size == packed.pos[1][-1] * 16 * 8  # levels i1:U k1:C i0:U k0:U
    assert np.count_nonzero(packed.vals) == np.count_nonzero(csr.data)
    _assert_matches(csr, "spmm", knobs)


def test_empty_rows_columns_and_explicit_zeros(shared: Path) -> None:
    coo = _load(shared, "west0479").csr.tocoo()
    keep = (coo.row % 3 != 0) & (coo.col % 5 != 1)  # every third row, every fifth column empty
    csr = canonicalize(sp.coo_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), coo.shape))
    assert (csr.data == 0).any() and (np.diff(csr.indptr) == 0).sum() >= 150
    for op, fmts in itertools.product(
        ("spmm", "sddmm"), (["C", "C", "C", "C"], ["U", "C", "U", "C"])
    ):
        space = make_space(op)
        knobs = dict(space.baseline(csr.shape).knobs) | {"formats": fmts, "isplit": 4}
        _assert_matches(csr, op, dict(space.validate(knobs).knobs), unlimited=True)


def test_rectangular_tall_matrix(shared: Path) -> None:
    csr = _load(shared, "Franz6_id1959_aug").csr  # 10592 x 3016
    for op in ("spmm", "sddmm"):
        space = make_space(op)
        knobs = dict(space.baseline(csr.shape).knobs) | {
            "isplit": 64,
            "formats": ["C", "U", "C", "C"],
        }
        _assert_matches(csr, op, dict(space.validate(knobs).knobs), width=64)


def test_sddmm_returns_a_pattern(shared: Path) -> None:
    csr = _load(shared, "olm500").csr
    x, y = dense_operands("sddmm", csr.shape, 16, seed=1)
    out = run_config(csr, "sddmm", make_space("sddmm").baseline(csr.shape), x, y)
    assert isinstance(out, sp.csr_matrix)
    np.testing.assert_array_equal(out.indptr, csr.indptr)
    np.testing.assert_array_equal(out.indices, csr.indices)
    dense = csr.toarray() * (x.astype(np.float64) @ y.T.astype(np.float64))
    np.testing.assert_allclose(out.toarray(), dense, rtol=1e-4, atol=1e-6 * np.abs(dense).max())


def test_too_large_is_refused_before_allocating(shared: Path) -> None:
    csr = _load(shared, "arrow").csr  # 46500 x 46500: all-U would be 2.2e9 values
    knobs = {"isplit": 1, "ksplit": 1, "jsplit": 128, "chunk": 32}
    knobs |= {"order": ["i1", "i0", "k1", "k0", "j1", "j0"], "formats": ["U", "U", "U", "U"]}
    tracemalloc.start()
    try:
        with pytest.raises(TooLarge, match="over the limit"):
            pack(csr, "spmm", knobs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Nothing of the refused layout's size (2.2e9 entries): at most a few index arrays
    # within the limit.
    assert peak < 8 * size_limit(csr) * 4, f"{peak / 1e6:.0f} MB allocated before refusing"
    assert size_limit(csr) == 20 * csr.nnz
    # A little padding stays within the limit.
    assert pack(csr, "spmm", knobs | {"formats": ["U", "U", "C", "U"], "ksplit": 4}) is not None


@pytest.mark.parametrize(
    "bad",
    [
        {"order": ["i1", "i0", "k1", "k0", "j1", 'j0); system("rm -rf /"); (void)(0']},
        {"order": ["i1", "i0", "k1", "k0", "j1", "j1"]},
        {"order": ["i0", "i1", "k1", "k0", "j1", "j0"]},
        {"formats": ["U", "U", "C", "U\n#include <stdlib.h>"]},
        {"formats": ["U", "U", "C"]},
        {"isplit": "1; abort()"},
        {"isplit": True},
        {"ksplit": 0},
    ],
)
def test_codegen_rejects_malicious_or_malformed_knobs(bad: dict) -> None:
    knobs = dict(make_space("spmm").baseline((10, 10)).knobs) | bad
    with pytest.raises(CognateError):
        structure_of("spmm", knobs)


def test_codegen_rechecks_a_hand_built_structure() -> None:
    evil = LoopStructure("spmm", ("i1", "i0", "k1", "k0", "j1", "j0 */ abort(); /*"), ("U",) * 4)
    with pytest.raises(CognateError):
        generate_source(evil)
    with pytest.raises(CognateError):
        generate_source(
            LoopStructure("spmm", ("i1", "i0", "k1", "k0", "j1", "j0"), ("U",) * 4, ("x",))
        )


def test_run_config_rejects_bad_operands(shared: Path) -> None:
    csr = _load(shared, "olm500").csr
    base = make_space("spmm").baseline(csr.shape)
    with pytest.raises(CognateError, match="shape"):
        run_config(csr, "spmm", base, np.ones((csr.shape[1] + 1, 8), np.float32))
    with pytest.raises(CognateError, match="operand"):
        run_config(csr, "spmm", base)


def test_width_specialised_kernel_refuses_another_width(shared: Path) -> None:
    csr = _load(shared, "olm500").csr
    knobs = dict(make_space("spmm").baseline(csr.shape).knobs)
    packed = pack(csr, "spmm", knobs, width=32)
    assert "const int64_t N = 32;" in generate_source(packed.structure)
    (b,) = dense_operands("spmm", csr.shape, 16, seed=0)
    with pytest.raises(CognateError, match="width 32"):
        bind(packed, knobs, (b,))
    with pytest.raises(CognateError, match="dense width"):
        structure_of("spmm", knobs, width="32; abort()")


def test_prepared_kernel_is_reusable(shared: Path) -> None:
    csr = _load(shared, "olm500").csr
    (b,) = dense_operands("spmm", csr.shape, 64, seed=0)
    call = prepare_kernel(csr, "spmm", make_space("spmm").baseline(csr.shape), b)
    for scale in (1.0, -2.0):
        b *= scale  # the kernel reads B in place
        call()
        ref, tol = reference(csr, "spmm", (b,))
        assert mismatch(call.result(), ref, tol) is None


def test_sums_beyond_float32_range_are_not_checked(shared: Path) -> None:
    """temp.mtx stores values up to 4.8e38 (loaded clipped to 3.4e38): its float32 products
    overflow in any order, so those entries are skipped; every other entry is checked."""
    csr = _load(shared, "temp").csr
    operands = dense_operands("spmm", csr.shape, 32, seed=0)
    ref, tol = reference(csr, "spmm", operands)
    unchecked = ~np.isfinite(tol)
    assert 0 < unchecked.sum() < tol.size // 2
    _assert_matches(csr, "spmm", dict(make_space("spmm").baseline(csr.shape).knobs), width=32)
    with np.errstate(over="ignore"):
        wrong = ref.astype(np.float32)
    wrong[np.unravel_index(int(np.argmin(unchecked)), ref.shape)] *= 1.001  # a checked entry
    assert mismatch(wrong, ref, tol) is not None


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_plain_csr_fast_pack_equals_the_general_pack(shared: Path, op: str) -> None:
    """Plain CSR (i1 U, i0 U, k1 C, k0 U, ksplit 1) is read off A's arrays instead of sorted:
    the same layout, arrays and refusals as the general pack, padded row blocks included."""
    from cognate.targets.cpu.families import csr as csr_family

    tall = canonicalize(sp.random(300, 7, density=0.3, format="csr", random_state=3))
    for csr in (_load(shared, "west0479").csr, tall):
        for isplit in (1, 3, 16, 512):
            knobs = dict(make_space(op).baseline(csr.shape).knobs) | {"isplit": isplit}
            s = structure_of(op, knobs, WIDTH)
            splits = {var: int(knobs[f"{var}split"]) for var in s.loops.sparse}
            assert csr_family._is_row_major_csr(s, splits)
            limit = 20 * csr.nnz if isplit < 512 else csr.shape[0]  # 512: refused by both
            results = []
            for packer in (csr_family._pack_row_major, csr_family._pack_sorted):
                try:
                    results.append(packer(csr, s, splits, limit))
                except TooLarge as exc:
                    results.append(str(exc))
            fast, general = results
            if isinstance(general, str):
                assert fast == general
                continue
            assert fast.extents == general.extents and fast.splits == general.splits
            for a, b in zip(fast.pos + fast.crd, general.pos + general.crd, strict=True):
                assert (a is None) == (b is None)
                if a is not None:
                    assert a.dtype == b.dtype
                    np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(fast.vals, general.vals)
            np.testing.assert_array_equal(fast.nz_positions, general.nz_positions)
        _assert_matches(csr, op, knobs | {"isplit": 3})
