"""The check of kernel results on a sample of rows (measure/check.py), used where the
whole-matrix float64 reference is over the memory budget, and the one-at-a-time verify job."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cognate.formats.read import load_matrix
from cognate.targets import get_target
from cognate.targets.cpu import families, pipeline
from cognate.targets.cpu.measure import check
from cognate.targets.cpu.measure.check import (
    OPERAND_SEED,
    dense_operands,
    reference_for,
    sample_rows,
)
from cognate.targets.cpu.vector import vector_variants

MATRIX = "bcsstk13.mtx.gz"  # 2003 rows, uneven row lengths (heaviest rows stand out)


@pytest.fixture(scope="module")
def matrix(shared: Path):
    return load_matrix(shared / "matrices" / "suitesparse" / MATRIX)


def _small_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample well below the row count, so that rows outside it exist."""
    monkeypatch.setattr(check, "RANDOM_ROWS", 64)


def test_sample_covers_the_heaviest_first_and_last_rows(matrix, monkeypatch) -> None:
    _small_sample(monkeypatch)
    rows = sample_rows(matrix.csr)
    lengths = np.diff(matrix.csr.indptr)
    assert rows.size < matrix.shape[0] and np.all(np.diff(rows) > 0)
    assert {0, 1, matrix.shape[0] - 1} <= set(rows.tolist())
    heaviest = np.argsort(lengths)[-check.HEAVIEST_ROWS :]
    assert lengths[heaviest].min() >= np.sort(lengths)[-check.HEAVIEST_ROWS]
    assert set(heaviest.tolist()) <= set(rows.tolist()) or (
        lengths[rows].max() == lengths.max()
    )  # ties at the cut may pick other rows of the same length
    assert np.array_equal(rows, sample_rows(matrix.csr))  # fixed: seeded


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_sampled_check_passes_a_right_result_and_refuses_a_wrong_row(
    matrix, op, monkeypatch
) -> None:
    _small_sample(monkeypatch)
    operands = dense_operands(op, matrix.shape, 16, OPERAND_SEED)
    call = pipeline.prepare(
        matrix, op, dict(get_target("cpu").space(op).baseline(matrix.shape).knobs), operands
    )
    call()
    result = np.array(call.result())
    sampled = reference_for(matrix.csr, op, operands, budget=1)  # nothing fits: the sample
    assert sampled.sampled and "of 2003 rows" in sampled.describe()
    assert sampled.check(result) is None
    row = int(sampled.rows[len(sampled.rows) // 2])
    wrong = result.copy()
    if op == "spmm":
        wrong[row] = -2.0 * wrong[row] - 1.0  # wrong whatever the values' scale
    else:
        slot = matrix.csr.indptr[row]
        wrong[slot] = -2.0 * wrong[slot] - 1.0
    problem = sampled.check(wrong)
    assert problem is not None and f"first bad row {row}" in problem
    # Below the budget the whole matrix is checked, by the same tolerance rule.
    full = reference_for(matrix.csr, op, operands)
    assert not full.sampled and full.check(result) is None and full.check(wrong) is not None


def test_one_at_a_time_job_refuses_a_kernel_wrong_on_a_sampled_row(
    matrix, tmp_path, monkeypatch
) -> None:
    """Over the budget the verify job checks sampled rows and times configs one at a time;
    a kernel whose output is wrong on one sampled row gets an error, never a time."""
    from cognate import timing
    from cognate.targets.cpu.measure import interleave

    _small_sample(monkeypatch)
    monkeypatch.setenv(timing.LOCK_ENV, str(tmp_path / "timing.lock"))
    monkeypatch.setenv(timing.JOBS_ENV, str(tmp_path / "jobs"))
    monkeypatch.setenv("COGNATE_MAX_MEMORY", "1M")  # every reference and layout over it
    space = get_target("cpu").space("spmm")
    base = dict(space.baseline(matrix.shape).knobs)
    bad_row = int(sample_rows(matrix.csr)[5])
    bind, pack = families.bind, families.pack
    packed_layouts = []

    def counting(source, op, knobs, width, max_entries=None):
        packed_layouts.append(dict(knobs))
        return pack(source, op, knobs, width, max_entries)

    def corrupting(packed, knobs, operands, lib_path=None):
        call = bind(packed, knobs, operands, lib_path)
        if knobs.get("chunk") == 64:  # the broken config: one sampled row comes out wrong
            result = call.result

            def wrong():
                out = result().copy()
                out[bad_row] = -2.0 * out[bad_row] - 1.0
                return out

            call.result = wrong
        return call

    monkeypatch.setattr(families, "pack", counting)
    monkeypatch.setattr(families, "bind", corrupting)
    (_, variant), *_ = vector_variants("spmm", 16, [space.validate(base)])
    interleave.save_job_matrix(matrix, tmp_path / "a.npz")
    job = {
        "npz": str(tmp_path / "a.npz"),
        "op": "spmm",
        "width": 16,
        "threads": 1,
        "library": False,
        "rounds": 2,
        "configs": [
            {"key": "base", "knobs": base},
            {"key": "broken", "knobs": {**base, "chunk": 64}},
            {"key": "variant", "knobs": dict(variant.knobs)},
        ],
    }
    outcome = interleave.run_job(job)
    assert outcome["timing"] == "one at a time" and "of 2003 rows" in outcome["checked"]
    good, broken = outcome["configs"]["base"], outcome["configs"]["broken"]
    assert good["status"] == "ok" and good["runtime_s"] > 0 and good["rounds"] == 2
    assert broken["status"] == "error" and f"first bad row {bad_row}" in broken["error"]
    assert "runtime_s" not in broken
    # The vector variant ran on the base config's packed A: two layouts packed, not three.
    assert outcome["configs"]["variant"]["status"] == "ok"
    assert len(packed_layouts) == 2


def test_kernel_preparation_over_the_budget_is_one_clear_error(matrix, monkeypatch) -> None:
    """result.kernel / cognate.torch price a pack (and A^T) beside what the process holds."""
    from cognate.errors import InputError
    from cognate.targets.cpu import memory
    from cognate.targets.cpu.tuned import TunedKernel
    from cognate.torch.operand import TunedSparse

    knobs = dict(get_target("cpu").space("spmm").baseline(matrix.shape).knobs)
    b = np.ones((matrix.shape[1], 16), dtype=np.float32)
    needed = memory.kernel_bytes(matrix, "spmm", knobs, 16)
    held = memory.resident_bytes()
    monkeypatch.setenv("COGNATE_MAX_MEMORY", str(held + needed // 2))
    with pytest.raises(InputError, match="packing A for a csr spmm kernel of width 16"):
        TunedKernel(matrix, "spmm", knobs, (b,))
    monkeypatch.setenv("COGNATE_MAX_MEMORY", str(held + 4 * needed))
    assert np.allclose(TunedKernel(matrix, "spmm", knobs, (b,))(b), matrix.csr @ b, rtol=1e-4)
    monkeypatch.setenv("COGNATE_MAX_MEMORY", str(memory.resident_bytes() + 1024))
    with pytest.raises(InputError, match="building A\\^T"):
        TunedSparse(matrix)._transpose()


def _path_point(indptr: np.ndarray, d: int) -> tuple[int, int]:
    """kernels/cpu/spmm_csr.c's path_point, literally (its first_row's binary search)."""
    rows = indptr.size - 1
    if d >= rows + indptr[-1]:
        return rows, int(indptr[-1])
    lo, hi = 0, rows
    while lo < hi:
        mid = (lo + hi) // 2
        if indptr[mid] + mid >= d + 1:
            hi = mid
        else:
            lo = mid + 1
    return lo - 1, d - (lo - 1)


def _carry_rows(indptr: np.ndarray, parts: int) -> list[tuple[int, int, int]]:
    """(row, first nonzero, split nonzero) of each nzsplit part that stops inside a row."""
    rows, total = indptr.size - 1, indptr.size - 1 + int(indptr[-1])
    found = []
    for t in range(parts - 1):
        start_row, start_nz = _path_point(indptr, t * total // parts)
        row, split = _path_point(indptr, (t + 1) * total // parts)
        if row < rows and indptr[row] < split:  # a carry holding some of the row's entries
            found.append((row, start_nz if start_row == row else int(indptr[row]), split))
    return found


def _spmm(matrix) -> tuple[np.ndarray, np.ndarray]:
    (b,) = dense_operands("spmm", matrix.shape, 16, OPERAND_SEED)
    return b, np.asarray(matrix.csr @ b, dtype=np.float32)


def test_a_lost_nzsplit_carry_is_caught(matrix, monkeypatch) -> None:
    """A kernel that drops a merge-path part's carry (the row a thread stops inside comes out
    with only the other part's nonzeros) fails the check at 2, 4 and 8 threads: every such
    row is in the sample (before: a fixed sample seldom held them)."""
    _small_sample(monkeypatch)
    b, result = _spmm(matrix)
    sampled = reference_for(matrix.csr, "spmm", (b,), budget=1)
    assert sampled.check(result) is None
    csr = matrix.csr
    for parts in (2, 4, 8):
        carries = _carry_rows(csr.indptr, parts)
        assert carries, parts
        for row, lo, split in carries:
            assert row in set(sampled.rows.tolist()), (parts, row)
            wrong = result.copy()  # the carry's entries [lo, split) lost
            wrong[row] -= csr.data[lo:split] @ b[csr.indices[lo:split]]
            problem = sampled.check(wrong)
            assert problem is not None and f"first bad row {row}" in problem


def test_a_wrong_row_outside_the_sample_fails_the_row_sums(matrix, monkeypatch) -> None:
    """Every row is checked through C @ 1 against A @ (B @ 1): a row the sample does not
    hold, wrong by a little (one entry of it off by 1%), still fails."""
    _small_sample(monkeypatch)
    b, result = _spmm(matrix)
    sampled = reference_for(matrix.csr, "spmm", (b,), budget=1)
    outside = np.setdiff1d(np.arange(matrix.shape[0]), sampled.rows)
    lengths = np.diff(matrix.csr.indptr)
    row = int(outside[np.argmax(lengths[outside])])
    wrong = result.copy()
    col = int(np.argmax(np.abs(wrong[row])))
    wrong[row, col] *= 1.01
    problem = sampled.check(wrong)
    assert problem is not None and f"first bad row {row}" in problem and "row sums" in problem
    assert sampled.check(result) is None and "every row's sum" in sampled.describe()
