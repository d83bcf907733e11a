"""The plain CSR SpMM kernel's vector knobs: host ISA detection, whitelists, the emitted
instructions, results against scipy, and tune --verify's variants."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
import scipy.sparse as sp
from cases import PLAIN_CSR_SPMM

from cognate.config import Config
from cognate.errors import CognateError
from cognate.targets.cpu import families
from cognate.targets.cpu.codegen import VECTOR_KNOBS, structure_of
from cognate.targets.cpu.isa import HostIsa, check_vector_bits, host_isa, isa_from_macros
from cognate.targets.cpu.measure.check import mismatch, reference
from cognate.targets.cpu.pipeline import build as pipeline_build
from cognate.targets.cpu.pipeline import run_config
from cognate.targets.cpu.space import make_space
from cognate.targets.cpu.vector import tiles_for, vector_variants

PLAIN = PLAIN_CSR_SPMM


def _vector(vbits: int, vregs: int = 4, unroll: int = 2) -> dict:
    return {**PLAIN, "vbits": vbits, "vregs": vregs, "unroll": unroll}


def test_isa_from_the_compiler_macros() -> None:
    assert isa_from_macros("#define __AVX512F__ 1\n#define __AVX2__ 1\n") == HostIsa("avx512", 512)
    assert isa_from_macros("#define __AVX2__ 1\n#define __AVX__ 1\n") == HostIsa("avx2", 256)
    assert isa_from_macros("#define __ARM_NEON 1\n") == HostIsa("generic", 128)
    assert HostIsa("avx2", 256).widths == (128, 256)


def test_a_width_over_the_host_is_refused_in_one_line() -> None:
    widest = host_isa().vector_bits
    for bits in (128, 256, 512):
        if bits <= widest:
            assert check_vector_bits(bits) == bits
        else:
            with pytest.raises(CognateError, match="wider ISA") as err:
                check_vector_bits(bits)
            assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"vbits": 1024}, "vbits"),
        ({"vregs": 3}, "vregs"),
        ({"unroll": True}, "unroll"),
        ({"vbits": "512; system()"}, "vbits"),
    ],
)
def test_bad_vector_knobs_never_reach_the_source(change: dict, message: str) -> None:
    knobs = {**_vector(256), **change}
    for attempt in (
        lambda: make_space("spmm").validate(knobs),
        lambda: structure_of("spmm", knobs, 64),
        lambda: families.kernel_source("spmm", knobs, 64),
    ):
        with pytest.raises(CognateError, match=message):
            attempt()


def test_vector_knobs_come_together_and_only_on_plain_csr_spmm() -> None:
    space = make_space("spmm")
    with pytest.raises(CognateError, match="together"):
        space.validate({**PLAIN, "vbits": 256})
    blocked = {**_vector(256), "isplit": 2}
    with pytest.raises(CognateError, match="plain CSR"):
        space.validate(blocked)
    with pytest.raises(CognateError, match="plain CSR"):
        structure_of("spmm", blocked, 64)
    config = space.validate(_vector(256))
    assert {k: config[k] for k in VECTOR_KNOBS} == {"vbits": 256, "vregs": 4, "unroll": 2}
    assert "vec 256b x4" in space.describe(config)
    # the models' encoding is the base config's: the vector knobs are not in it
    base = space.validate(PLAIN)
    assert np.array_equal(space.knob_features(config), space.knob_features(base))


def _objdump(path: str) -> str:
    return subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", path], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) not installed")
def test_the_object_code_uses_the_width_the_config_names() -> None:
    if host_isa().vector_bits < 512:
        pytest.skip(f"this host has no AVX-512 ({host_isa().line()}): no zmm code to check")
    wide = _objdump(str(pipeline_build("spmm", _vector(512, 8, 2), 128)))
    narrow = _objdump(str(pipeline_build("spmm", _vector(256, 8, 2), 128)))
    assert "fmadd" in wide and "zmm" in wide
    fma_lines = [line for line in narrow.splitlines() if "fmadd" in line]
    assert fma_lines and not any("zmm" in line for line in fma_lines)
    assert any("ymm" in line for line in fma_lines)


@pytest.mark.parametrize("width", [1, 5, 12, 32, 40, 128])
def test_every_tile_matches_scipy(width: int) -> None:
    a = sp.random(300, 200, density=0.03, format="csr", dtype=np.float32, random_state=width)
    b = np.random.default_rng(width).uniform(-1, 1, (200, width)).astype(np.float32)
    ref, tol = reference(a, "spmm", (b,))
    for vbits in host_isa().widths:
        for vregs in VECTOR_KNOBS["vregs"]:
            for unroll in VECTOR_KNOBS["unroll"]:
                out = run_config(a, "spmm", _vector(vbits, vregs, unroll), b)
                assert mismatch(out, ref, tol) is None, (vbits, vregs, unroll)


def test_variants_cover_the_row_at_every_host_width() -> None:
    space = make_space("spmm")
    variants = space.kernel_variants()  # the sample's own variants of the baseline: not these
    other = [c for c in space.sample(5, 0, (500, 500)) if c not in variants]
    plain = space.validate(PLAIN)
    pairs = vector_variants("spmm", 128, [*other, plain])
    assert pairs and all(base == plain for base, _ in pairs)  # variants of the plain CSR pick
    found = [variant for _, variant in pairs if "nzsplit" not in variant.knobs]  # vector ones
    assert all(c["vbits"] in host_isa().widths for c in found)
    assert all(c["vbits"] >= 256 for c in found)
    assert plain not in found and len({c.hash for c in found}) == len(found)
    assert vector_variants("sddmm", 128, [plain]) == []
    # at N=32 with 512-bit vectors the row is 2 registers: no 4- or 8-register tile
    assert {t.vregs for t in tiles_for(32, [512])} == {1, 2}


def test_variants_can_be_turned_off(monkeypatch) -> None:
    monkeypatch.setenv("COGNATE_VECTOR_VARIANTS", "0")
    plain = Config("cpu", "spmm", make_space("spmm").validate(PLAIN).knobs)
    assert vector_variants("spmm", 128, [plain]) == []
