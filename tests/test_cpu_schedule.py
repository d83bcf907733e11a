"""The plain CSR SpMM kernel's schedule knobs (threads, prefetch, batch, nzsplit): whitelists,
the space's rules, the emitted prefetches, and every combination against scipy on real and
skewed matrices."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from cases import PLAIN_CSR_SPMM

from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.synth import generate
from cognate.targets.cpu import families
from cognate.targets.cpu.codegen import SCHEDULE_KNOBS, Schedule, structure_of
from cognate.targets.cpu.isa import host_isa
from cognate.targets.cpu.measure.check import mismatch, reference
from cognate.targets.cpu.pipeline import build as pipeline_build
from cognate.targets.cpu.pipeline import run_config
from cognate.targets.cpu.space import make_space
from cognate.targets.cpu.vector import SCHEDULES, row_tile, vector_variants

ALL = {"threads": 0, "prefetch": 0, "batch": 0, "nzsplit": 0}


def _schedules() -> list[dict]:
    """Every legal combination of the schedule knobs."""
    found = []
    for values in itertools.product(*SCHEDULE_KNOBS.values()):
        knobs = dict(zip(SCHEDULE_KNOBS, values, strict=True))
        if Schedule(**knobs).problem() is None:
            found.append(knobs)
    return found


def test_the_space_has_every_schedule_once() -> None:
    # threads=1 has no row schedule (3 prefetches); all threads: 3 prefetches x 5 schedules
    assert len(_schedules()) == 3 + 3 * 5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"threads": 2}, "threads"),
        ({"prefetch": 8}, "prefetch"),
        ({"batch": True}, "batch"),
        ({"nzsplit": '1); system("x"'}, "nzsplit"),
        ({"batch": 64.0}, "batch"),
    ],
)
def test_bad_schedule_knobs_never_reach_the_source(change: dict, message: str) -> None:
    knobs = {**PLAIN_CSR_SPMM, **ALL, **change}
    for attempt in (
        lambda: make_space("spmm").validate(knobs),
        lambda: structure_of("spmm", knobs, 64),
        lambda: families.kernel_source("spmm", knobs, 64),
    ):
        with pytest.raises(CognateError, match=message) as err:
            attempt()
        assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"threads": 1, "batch": 16}, "threads=1"),
        ({"threads": 1, "nzsplit": 1}, "threads=1"),
        ({"batch": 64, "nzsplit": 1}, "two schedules"),
    ],
)
def test_one_kernel_has_one_config(change: dict, message: str) -> None:
    knobs = {**PLAIN_CSR_SPMM, **ALL, **change}
    with pytest.raises(CognateError, match=message):
        make_space("spmm").validate(knobs)
    with pytest.raises(CognateError, match=message):
        structure_of("spmm", knobs, 64)


def test_schedule_knobs_come_together_and_only_on_plain_csr_spmm() -> None:
    space = make_space("spmm")
    with pytest.raises(CognateError, match="together"):
        space.validate({**PLAIN_CSR_SPMM, "prefetch": 4})
    blocked = {**PLAIN_CSR_SPMM, **ALL, "ksplit": 2}
    with pytest.raises(CognateError, match="plain CSR"):
        space.validate(blocked)
    with pytest.raises(CognateError, match="plain CSR"):
        structure_of("spmm", blocked, 64)
    config = space.validate({**PLAIN_CSR_SPMM, **ALL, "batch": 256, "prefetch": 16})
    assert "all threads batch 256 prefetch 16" in space.describe(config)
    # the shipped models' encoding is the base config's: the schedule knobs are not in it
    base = space.validate(PLAIN_CSR_SPMM)
    assert np.array_equal(space.knob_features(config), space.knob_features(base))
    assert config.hash != base.hash


def _objdump(path: Path) -> str:
    return subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) not installed")
def test_prefetch_is_in_the_object_code_only_when_asked() -> None:
    if not host_isa().name.startswith("avx"):
        pytest.skip(f"prefetcht0 is an x86 instruction ({host_isa().line()})")
    on = _objdump(pipeline_build("spmm", {**PLAIN_CSR_SPMM, **ALL, "prefetch": 16}, 128))
    off = _objdump(pipeline_build("spmm", {**PLAIN_CSR_SPMM, **ALL}, 128))
    assert "prefetcht0" in on and "prefetcht0" not in off


def _skewed() -> sp.csr_matrix:
    """A power-law graph with one row holding a third of the nonzeros (a cut row)."""
    a = generate("powerlaw", nnz=20000, seed=3).csr.tolil()
    a[7, :] = np.linspace(0.5, 1.5, a.shape[1], dtype=np.float32)
    return sp.csr_matrix(a, dtype=np.float32)


def _every_schedule_matches_scipy(a: sp.csr_matrix, widths: tuple[int, ...]) -> None:
    tiles = [{"vbits": bits, "vregs": 2, "unroll": 2} for bits in host_isa().widths]
    for width in widths:
        b = np.random.default_rng(width).uniform(-1, 1, (a.shape[1], width)).astype(np.float32)
        ref, tol = reference(a, "spmm", (b,))
        for schedule, tile in itertools.product(_schedules(), [{}, *tiles[-1:]]):
            out = run_config(a, "spmm", {**PLAIN_CSR_SPMM, **schedule, **tile}, b)
            assert mismatch(out, ref, tol) is None, (width, schedule, tile)


def test_every_schedule_matches_scipy_on_a_skewed_graph() -> None:
    _every_schedule_matches_scipy(_skewed(), (5, 32, 128))


def test_every_schedule_matches_scipy_on_real_matrices(shared: Path) -> None:
    for name in ("arrow", "dwt_878", "bcsstk13"):
        path = shared / "matrices" / "suitesparse" / f"{name}.mtx.gz"
        if not path.is_file():
            pytest.skip(f"needs {path}")
        _every_schedule_matches_scipy(load_matrix(path).csr, (32,))  # kernels shared above


def test_an_empty_matrix_and_empty_rows() -> None:
    empty = sp.csr_matrix((50, 30), dtype=np.float32)
    b = np.ones((30, 16), dtype=np.float32)
    for schedule in _schedules():
        out = run_config(empty, "spmm", {**PLAIN_CSR_SPMM, **schedule}, b)
        assert not out.any(), schedule


NZSPLIT_SCRIPT = """
import numpy as np, scipy.sparse as sp
from cognate.targets.cpu.measure.check import mismatch, reference
from cognate.targets.cpu.pipeline import run_config
a = sp.random(400, 300, density=0.01, format="lil", dtype=np.float32, random_state=1)
a[3, :] = 1.0  # one row cut across every part
a = sp.csr_matrix(a)
b = np.random.default_rng(0).uniform(-1, 1, (300, 24)).astype(np.float32)
ref, tol = reference(a, "spmm", (b,))
knobs = {"isplit": 1, "ksplit": 1, "jsplit": 128, "order": ["i1", "i0", "k1", "k0", "j1", "j0"],
         "formats": ["U", "U", "C", "U"], "chunk": 32,
         "threads": 0, "prefetch": 4, "batch": 0, "nzsplit": 1}
problem = mismatch(run_config(a, "spmm", knobs, b), ref, tol)
assert problem is None, problem
print("ok")
"""


def test_nzsplit_cuts_a_row_across_many_parts() -> None:
    # 7 parts on any host: the dense row spans several parts' carries
    env = {**os.environ, "OMP_NUM_THREADS": "7"}
    done = subprocess.run(
        [sys.executable, "-c", NZSPLIT_SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_verify_tries_the_two_schedules_on_the_base_kernel_and_the_row_tile() -> None:
    space = make_space("spmm")
    plain = space.validate(PLAIN_CSR_SPMM)
    found = [variant for _, variant in vector_variants("spmm", 128, [plain])]
    scheduled = [c for c in found if "nzsplit" in c.knobs]
    on_base = [c for c in scheduled if "vbits" not in c.knobs]  # the base config's own kernel
    assert [Schedule(**{k: c[k] for k in SCHEDULE_KNOBS}) for c in on_base] == list(SCHEDULES)
    # and on the widest whole-row tile, so that the best of both knob groups is timed together
    whole_row = row_tile(128, host_isa().variant_widths).knobs
    on_row = [c for c in scheduled if "vbits" in c.knobs]
    assert [Schedule(**{k: c[k] for k in SCHEDULE_KNOBS}) for c in on_row] == list(SCHEDULES)
    assert all({k: c[k] for k in whole_row} == whole_row for c in on_row)
    assert len(found) == len({c.hash for c in found}) <= 11  # verify time matters
