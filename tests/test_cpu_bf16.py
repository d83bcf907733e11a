"""The plain CSR SpMM kernel's opt-in ``bf16`` knob (B rounded to bfloat16 at each call,
float32 sums): its whitelist, not in the encoding, every tile and schedule against scipy on
the rounded B (and within bf16's error of the float32 result), the rounding itself (nearest
even, NaN and overflow as torch), a fresh copy of B each call, and the opt-in path through
tune: variants only when asked, never recorded, one-line errors otherwise."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cases import PLAIN_CSR_SPMM

import cognate
from cognate.bench.corpus import shared_matrices
from cognate.cli import run as cli_run
from cognate.config import Config
from cognate.errors import CognateError
from cognate.store import Store
from cognate.targets.cpu import families, memory
from cognate.targets.cpu.codegen import structure_of
from cognate.targets.cpu.isa import host_isa
from cognate.targets.cpu.measure.check import Reference, mismatch, reference, round_bf16
from cognate.targets.cpu.operands import aligned_empty
from cognate.targets.cpu.space import make_space
from cognate.targets.cpu.tuned import ScheduleKernel
from cognate.targets.cpu.vector import vector_variants

SCHEDULES = (
    {},
    {"threads": 0, "prefetch": 16, "batch": 16, "nzsplit": 0},
    {"threads": 0, "prefetch": 4, "batch": 0, "nzsplit": 1},
    {"threads": 1, "prefetch": 0, "batch": 0, "nzsplit": 0},
)


@pytest.mark.parametrize("value", [2, True, 1.0, "1", '1); system("x"'])
def test_bad_bf16_values_never_reach_the_source(value) -> None:
    knobs = {**PLAIN_CSR_SPMM, "bf16": value}
    for attempt in (
        lambda: make_space("spmm").validate(knobs),
        lambda: structure_of("spmm", knobs, 64),
        lambda: families.kernel_source("spmm", knobs, 64),
    ):
        with pytest.raises(CognateError, match="bf16") as err:
            attempt()
        assert "\n" not in str(err.value)


def test_bf16_is_for_the_plain_csr_kernel_and_not_in_the_encoding() -> None:
    space = make_space("spmm")
    with pytest.raises(CognateError, match="plain CSR"):
        space.validate({**PLAIN_CSR_SPMM, "ksplit": 2, "bf16": 1})
    with pytest.raises(CognateError, match="plain CSR"):
        structure_of("spmm", {**PLAIN_CSR_SPMM, "ksplit": 2, "bf16": 1}, 64)
    rounded = space.validate({**PLAIN_CSR_SPMM, "bf16": 1})
    base = space.validate(PLAIN_CSR_SPMM)
    assert "B as bf16" in space.describe(rounded) and rounded.hash != base.hash
    assert np.array_equal(space.knob_features(rounded), space.knob_features(base))


def test_the_memory_price_counts_the_rounded_copy_of_b() -> None:
    (matrix,) = shared_matrices(names=["bp_1200"])
    plain = memory.kernel_bytes(matrix, "spmm", PLAIN_CSR_SPMM, 64)
    rounded = memory.kernel_bytes(matrix, "spmm", {**PLAIN_CSR_SPMM, "bf16": 1}, 64)
    assert rounded - plain == 2 * matrix.shape[1] * 64


def test_rounding_is_torch_s_bfloat16() -> None:
    rng = np.random.default_rng(0)
    scales = 10.0 ** rng.integers(-40, 38, 100_000)
    x = (rng.standard_normal(100_000) * scales).astype(np.float32)
    special = [np.nan, np.inf, -np.inf, 3.4e38, -3.4e38, -0.0, 1e-45, 1.00390625, 1.01171875]
    x = np.concatenate([x, np.array(special, dtype=np.float32)])
    expected = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    assert np.array_equal(round_bf16(x), expected, equal_nan=True)


def _b(rows: int, width: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (rows, width)).astype(np.float32)


@pytest.mark.parametrize("name", ["young1c", "bp_1200"])
def test_bf16_kernels_match_scipy_on_the_rounded_b(name: str) -> None:
    """Every host vector width, several register tiles and every schedule, at widths with
    and without tails, into aligned and misaligned outputs: scipy's result on the rounded B
    (float32's tolerance), within bf16's error of the float32 one, nothing outside C written."""
    (matrix,) = shared_matrices(names=[name])
    space = make_space("spmm")
    base = dict(space.baseline(matrix.shape).knobs)
    tiles = [{}] + [
        {"vbits": bits, "vregs": vregs, "unroll": 1}
        for bits in host_isa().widths
        for vregs in (1, 8)
    ]
    for width in (7, 20, 128):
        b = _b(matrix.shape[1], width, width)
        ref, tol = reference(matrix.csr, "spmm", (round_bf16(b),))
        exact, _ = reference(matrix.csr, "spmm", (b,))
        bound = np.abs(matrix.csr.astype(np.float64)) @ np.abs(b.astype(np.float64))
        size = matrix.shape[0] * width
        for tile in tiles:
            for extra in [*SCHEDULES, {"stream": 1}]:
                knobs = space.validate({**base, **tile, **extra, "bf16": 1}).knobs
                kernel = ScheduleKernel(matrix, "spmm", Config("cpu", "spmm", knobs))
                raw = aligned_empty((size + 32,))
                for skip in (0, 4):
                    raw[:] = 7.0
                    out = raw[skip : skip + size].reshape(matrix.shape[0], width)
                    kernel(b, out=out)
                    assert mismatch(out, ref, tol) is None, (width, tile, extra, skip)
                    assert (raw[:skip] == 7.0).all() and (raw[skip + size :] == 7.0).all()
                    assert (np.abs(out - exact) <= 2.0**-8 * bound + 1e-30).all()


def test_each_call_rounds_the_b_it_is_given() -> None:
    """The rounded copy is kept between calls; a new B (same shape, even the same array
    changed in place) is rounded again, and NaN / infinity propagate as float32's would."""
    (matrix,) = shared_matrices(names=["bp_1200"])
    knobs = make_space("spmm").validate({**PLAIN_CSR_SPMM, "bf16": 1}).knobs
    kernel = ScheduleKernel(matrix, "spmm", Config("cpu", "spmm", knobs))
    b = _b(matrix.shape[1], 64, 1)
    for change in (None, 2.0, 3.0):
        if change is not None:
            b *= change  # in place: the same buffer, new values
        ref, tol = reference(matrix.csr, "spmm", (round_bf16(b),))
        assert mismatch(kernel(b), ref, tol) is None
    column = matrix.csr.indices[0]
    b[column, 3] = np.nan
    out = kernel(b)
    touched = np.flatnonzero(matrix.csr.getcol(column).toarray().ravel())
    assert np.isnan(out[touched, 3]).all() and not np.isnan(np.delete(out, 3, axis=1)).any()


def test_the_reference_of_a_bf16_config_is_the_rounded_one() -> None:
    (matrix,) = shared_matrices(names=["bp_1200"])
    b = _b(matrix.shape[1], 16, 2)
    ref = Reference(matrix.csr, "spmm", (b,))
    assert ref.for_knobs(PLAIN_CSR_SPMM) is ref
    rounded = ref.for_knobs({**PLAIN_CSR_SPMM, "bf16": 1})
    assert rounded is ref.rounded() and np.array_equal(
        rounded.ref, reference(matrix.csr, "spmm", (round_bf16(b),))[0]
    )
    # a float32 result fails the bf16 check and the other way round: the two differ
    out = (matrix.csr @ b).astype(np.float32)
    assert ref.check(out) is None and rounded.check(out) is not None


def test_verify_times_bf16_variants_only_when_asked() -> None:
    space = make_space("spmm")
    base = space.validate(PLAIN_CSR_SPMM)
    assert not any(v.knobs.get("bf16") for _, v in vector_variants("spmm", 128, [base]))
    asked = [v for _, v in vector_variants("spmm", 128, [base], (100, 100), bf16=True)]
    rounded = [v for v in asked if v.knobs.get("bf16")]
    assert len(rounded) == 2 and all(space.validate(dict(v.knobs)) == v for v in rounded)
    big = vector_variants("spmm", 128, [base], (2_000_000, 2_000_000), bf16=True)
    assert sum(1 for _, v in big if v.knobs.get("bf16") and v.knobs.get("stream")) == 2


def test_tune_with_bf16_measures_checks_and_never_records_it(tmp_path) -> None:
    (matrix,) = shared_matrices(names=["bp_1200"])
    db = tmp_path / "r.sqlite"
    result = cognate.tune(matrix, width=64, top_k=2, verify=True, bf16=True, record=db)
    rounded = [c for c in result.candidates if c.config.knobs.get("bf16")]
    assert rounded and all(c.status == "ok" and c.runtime_s > 0 for c in rounded)
    assert all("B as bf16" in c.description for c in rounded)
    stored = set(Store(db).frame(target="cpu", op="spmm")["config_hash"])
    assert stored and not stored & {c.config.hash for c in rounded}
    b = _b(matrix.shape[1], 64, 3)
    wanted = round_bf16(b) if result.config.knobs.get("bf16") else b
    assert mismatch(result.kernel(b), *reference(matrix.csr, "spmm", (wanted,))) is None


def test_bf16_without_verify_or_off_cpu_spmm_is_one_line(capsys) -> None:
    (matrix,) = shared_matrices(names=["bp_1200"])
    for kwargs in ({}, {"verify": True, "op": "sddmm"}, {"verify": True, "target": "spade"}):
        with pytest.raises(CognateError, match="bf16.*--verify"):
            cognate.tune(matrix, width=16, bf16=True, **kwargs)
    with pytest.raises(SystemExit) as exit_info:
        cli_run(["tune", matrix.source, "--width", "16", "--bf16"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 1 and len(err.strip().splitlines()) == 1
    assert "bf16" in err and "Traceback" not in err
