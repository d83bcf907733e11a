"""The plain CSR SpMM kernel's ``stream`` knob (C's full tiles written with non-temporal
stores): its whitelist, the streaming stores in the object code only when asked and only where
C is vector-aligned, every schedule and tile against scipy at aligned and misaligned outputs
(nothing written outside C), aligned outputs from the kernel itself, and verify's variants."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from cases import PLAIN_CSR_SPMM

from cognate.bench.corpus import shared_matrices
from cognate.config import Config
from cognate.errors import CognateError
from cognate.targets.cpu import families
from cognate.targets.cpu.codegen import structure_of
from cognate.targets.cpu.isa import host_isa
from cognate.targets.cpu.measure.check import mismatch, reference
from cognate.targets.cpu.operands import aligned_empty
from cognate.targets.cpu.pipeline import build as pipeline_build
from cognate.targets.cpu.space import make_space
from cognate.targets.cpu.tuned import ScheduleKernel
from cognate.targets.cpu.vector import streaming_may_pay, vector_variants

SCHEDULES = (
    {},
    {"threads": 0, "prefetch": 0, "batch": 64, "nzsplit": 0},
    {"threads": 0, "prefetch": 4, "batch": 0, "nzsplit": 1},
    {"threads": 1, "prefetch": 0, "batch": 0, "nzsplit": 0},
)


@pytest.mark.parametrize("value", [2, True, 1.0, "1", '1); system("x"'])
def test_bad_stream_values_never_reach_the_source(value) -> None:
    knobs = {**PLAIN_CSR_SPMM, "stream": value}
    for attempt in (
        lambda: make_space("spmm").validate(knobs),
        lambda: structure_of("spmm", knobs, 64),
        lambda: families.kernel_source("spmm", knobs, 64),
    ):
        with pytest.raises(CognateError, match="stream") as err:
            attempt()
        assert "\n" not in str(err.value)


def test_stream_is_for_the_plain_csr_kernel_and_not_in_the_encoding() -> None:
    space = make_space("spmm")
    with pytest.raises(CognateError, match="plain CSR"):
        space.validate({**PLAIN_CSR_SPMM, "ksplit": 2, "stream": 1})
    with pytest.raises(CognateError, match="plain CSR"):
        structure_of("spmm", {**PLAIN_CSR_SPMM, "ksplit": 2, "stream": 1}, 64)
    streamed = space.validate({**PLAIN_CSR_SPMM, "stream": 1})
    base = space.validate(PLAIN_CSR_SPMM)
    assert "C streamed" in space.describe(streamed)
    assert streamed.hash != base.hash
    # the shipped models' inputs predate the knob: a streamed kernel ranks as its plain twin
    assert np.array_equal(space.knob_features(streamed), space.knob_features(base))


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) not installed")
def test_streaming_stores_are_in_the_object_code_only_when_asked() -> None:
    if not host_isa().name.startswith("avx"):
        pytest.skip(f"movntps is an x86 instruction ({host_isa().line()})")

    def code(knobs: dict) -> str:
        path = pipeline_build("spmm", knobs, 128)
        return subprocess.run(
            ["objdump", "-d", str(path)], capture_output=True, text=True, check=True
        ).stdout

    assert "movntps" in code({**PLAIN_CSR_SPMM, "stream": 1})
    assert "movntps" not in code(PLAIN_CSR_SPMM)


def test_aligned_empty_is_aligned_and_the_kernel_allocates_it() -> None:
    for shape in [(3,), (1000, 33), (4096, 128)]:
        array = aligned_empty(shape)
        assert array.shape == shape and array.dtype == np.float32
        assert array.flags.c_contiguous and array.ctypes.data % 64 == 0
    (matrix,) = shared_matrices(names=["young1c"])
    kernel = ScheduleKernel(matrix, "spmm", Config("cpu", "spmm", PLAIN_CSR_SPMM))
    out = kernel(np.ones((matrix.shape[1], 128), np.float32))
    assert out.ctypes.data % 64 == 0


@pytest.mark.parametrize("name", ["young1c", "bp_1200"])
def test_streamed_kernels_match_scipy_at_any_alignment(name: str) -> None:
    """Aligned outputs stream; misaligned ones (numpy's usual 16 bytes past a line, or
    unaligned floats) take plain stores; both right, and no byte outside C is touched."""
    (matrix,) = shared_matrices(names=[name])
    space = make_space("spmm")
    base = dict(space.baseline(matrix.shape).knobs)
    tiles = [{}] + [{"vbits": bits, "vregs": 8, "unroll": 2} for bits in host_isa().widths[-1:]]
    for width in (20, 128):
        b = np.random.default_rng(width).uniform(-1, 1, (matrix.shape[1], width))
        b = b.astype(np.float32)
        ref, tol = reference(matrix.csr, "spmm", (b,))
        size = matrix.shape[0] * width
        for tile in tiles:
            for schedule in SCHEDULES:
                knobs = space.validate({**base, **tile, **schedule, "stream": 1}).knobs
                kernel = ScheduleKernel(matrix, "spmm", Config("cpu", "spmm", knobs))
                raw = aligned_empty((size + 32,))
                for skip in (0, 1, 4, 16):
                    raw[:] = 7.0
                    out = raw[skip : skip + size].reshape(matrix.shape[0], width)
                    kernel(b, out=out)
                    assert mismatch(out, ref, tol) is None, (width, tile, schedule, skip)
                    assert (raw[:skip] == 7.0).all() and (raw[skip + size :] == 7.0).all()


def test_verify_times_streamed_variants_only_where_c_outgrows_l2() -> None:
    space = make_space("spmm")
    base = space.validate(PLAIN_CSR_SPMM)
    small, big = (100, 100), (2_000_000, 2_000_000)  # C 51 KB, 1 GB: under / over any L2
    assert not streaming_may_pay(small[0], 128) and streaming_may_pay(big[0], 128)
    assert not any(v.knobs.get("stream") for _, v in vector_variants("spmm", 128, [base], small))
    streamed = [v for _, v in vector_variants("spmm", 128, [base], big) if v.knobs.get("stream")]
    assert len(streamed) == 2 and all(space.validate(dict(v.knobs)) == v for v in streamed)
    assert vector_variants("spmm", 128, [base]) == vector_variants("spmm", 128, [base], small)
