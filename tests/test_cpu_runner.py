"""The cpu runner: validated timings, and a crash, hang or wrong kernel costs one record."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cognate.build import compile_c
from cognate.config import Config
from cognate.formats.read import load_matrix
from cognate.matrix import Matrix
from cognate.runner import Measurement
from cognate.targets import get_target
from cognate.targets.cpu.measure.check import dense_operands, mismatch, reference
from cognate.targets.cpu.measure.runner import CpuRunner
from cognate.targets.cpu.pipeline import bind, pack
from cognate.targets.cpu.space import make_space

SPMM_SIGNATURE = """
#include <stdint.h>
void cognate_spmm(const int64_t *pos0, const int32_t *crd0, const int64_t *pos1,
                  const int32_t *crd1, const int64_t *pos2, const int32_t *crd2,
                  const int64_t *pos3, const int32_t *crd3, const float *vals,
                  const float *B, float *C, int64_t M, int64_t K, int64_t N, int64_t isplit,
                  int64_t ksplit, int64_t jsplit, int64_t chunk)
"""
BAD_BODIES = {
    "crash": "{ *(volatile int *)0 = 1; }",
    "hang": "{ volatile int spin = 1; while (spin) {} }",
    # A CSR SpMM that forgets the last nonzero of every row.
    "wrong": """{
        for (int64_t i = 0; i < M; i++) {
            for (int64_t j = 0; j < N; j++) C[i * N + j] = 0.0f;
            for (int64_t p = pos2[i]; p + 1 < pos2[i + 1]; p++)
                for (int64_t j = 0; j < N; j++) C[i * N + j] += vals[p] * B[crd2[p] * N + j];
        }
    }""",
}


class BadKernelRunner(CpuRunner):
    """Swaps in a deliberately bad library for the configs named in ``bad``."""

    def __init__(self, bad: dict[str, str], **options: Any) -> None:
        super().__init__(**options)
        self.bad = bad  # config hash -> key of BAD_BODIES

    def build(self, op: str, config: Config, width: int) -> tuple[str, dict[str, Any]]:
        if config.hash in self.bad:
            return str(compile_c(SPMM_SIGNATURE + BAD_BODIES[self.bad[config.hash]])), {}
        return super().build(op, config, width)


@pytest.fixture(scope="module")
def matrix(shared: Path) -> Matrix:
    return load_matrix(shared / "matrices" / "suitesparse" / "bcsstk13.mtx.gz")


def _distinct_configs(shape: tuple[int, int], n: int) -> list[Config]:
    space = make_space("spmm")
    base = space.baseline(shape)
    return [base] + [c for c in space.sample(n + 1, seed=5, shape=shape) if c != base][:n]


def test_target_builds_the_cpu_runner() -> None:
    target = get_target("cpu")
    assert target.exclusive and target.space("spmm").name == "cpu-spmm"
    runner = target.runner(repeats=2, timeout_s=3.0)
    assert isinstance(runner, CpuRunner) and runner.timeout_s == 3.0


def test_measures_validated_timings(matrix: Matrix) -> None:
    configs = _distinct_configs(matrix.shape, 3)
    seen: list[Measurement] = []
    runner = CpuRunner(repeats=3, warmup=1, timeout_s=20.0)
    try:
        results = runner.measure(matrix, "spmm", 32, configs, progress=seen.append)
    finally:
        runner.close()
    assert [m.config for m in results] == configs and seen == results
    base = results[0]
    assert base.status == "ok", base.error
    assert base.runtime_s > 0 and base.spread_s >= 0
    assert base.counters["repeats"] == 3 and base.counters["number"] >= 1
    assert base.counters["stored_entries"] == 2 * matrix.nnz + matrix.shape[0] + 1
    assert {m.status for m in results} <= {"ok", "too_large"}


def test_crash_hang_and_wrong_result_each_cost_one_record(matrix: Matrix) -> None:
    configs = _distinct_configs(matrix.shape, 5)
    bad = {configs[1].hash: "crash", configs[3].hash: "hang", configs[4].hash: "wrong"}
    runner = BadKernelRunner(bad, repeats=2, warmup=0, timeout_s=2.0)
    start = time.perf_counter()
    try:
        results = runner.measure(matrix, "spmm", 16, configs)
    finally:
        runner.close()
    assert time.perf_counter() - start < 120
    statuses = [m.status for m in results]
    assert (
        statuses[1] == "error" and "crashed" in results[1].error and "signal 11" in results[1].error
    )
    assert statuses[3] == "timeout" and "exceeded" in results[3].error
    assert statuses[4] == "error" and "differs from scipy" in results[4].error
    assert results[4].runtime_s is None  # a mismatch is never a timing
    for index in (0, 2, 5):  # the runner went on with a fresh worker each time
        assert statuses[index] in ("ok", "too_large"), results[index].error
    assert statuses[0] == "ok"


def test_too_large_and_malformed_configs_are_records(shared: Path) -> None:
    arrow = load_matrix(shared / "matrices" / "suitesparse" / "arrow.mtx.gz")
    space = make_space("spmm")
    base = space.baseline(arrow.shape)
    dense = Config("cpu", "spmm", dict(base.knobs) | {"formats": ["U", "U", "U", "U"]})
    broken = Config(
        "cpu", "spmm", dict(base.knobs) | {"order": ["i1", "i0", "k1", "k0", "j0", "j1"]}
    )
    runner = CpuRunner(repeats=1, warmup=0, timeout_s=20.0)
    try:
        results = runner.measure(arrow, "spmm", 8, [dense, broken])
    finally:
        runner.close()
    assert results[0].status == "too_large" and "over the limit" in results[0].error
    assert results[1].status == "error" and "j1 must come before j0" in results[1].error


def test_a_failed_load_does_not_leave_the_old_matrix_marked_loaded(matrix: Matrix) -> None:
    """The worker drops its matrix before a load; if that load fails, the next batch of the
    old matrix must load it again instead of getting "worker has no matrix loaded"."""
    config = make_space("spmm").baseline(matrix.shape)
    broken = Matrix("broken", matrix.csr.copy())
    broken.csr.indptr[-1] = matrix.nnz + 5  # past the arrays: scipy rejects it in the worker
    runner = CpuRunner(repeats=1, warmup=0, timeout_s=20.0)
    try:
        first = runner.measure(matrix, "spmm", 8, [config])
        failed = runner.measure(broken, "spmm", 8, [config])
        again = runner.measure(matrix, "spmm", 8, [config])
    finally:
        runner.close()
    assert first[0].status == "ok", first[0].error
    assert failed[0].status == "error" and "loading the matrix" in failed[0].error
    assert again[0].status == "ok", again[0].error


def test_mismatch_detects_a_single_wrong_entry(matrix: Matrix) -> None:
    base = make_space("sddmm").baseline(matrix.shape)
    packed = pack(matrix.csr, "sddmm", base.knobs)
    packed.vals[len(packed.vals) // 2] *= 1.001  # one value off by 0.1 %
    operands = dense_operands("sddmm", matrix.shape, 32, seed=0)
    call = bind(packed, base.knobs, operands)
    call()
    ref, tol = reference(matrix.csr, "sddmm", operands)
    problem = mismatch(call.result(), ref, tol)
    assert problem is not None and "1 of" in problem
    assert mismatch(np.full_like(ref, np.nan), ref, tol) is not None  # NaN is never close


# --- the kernel cache: manifest and partial builds -------------------------------------------


def test_kernel_cache_checks_its_manifest_and_cleans_partial_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys

    from cognate import build

    monkeypatch.setenv("COGNATE_HOME", str(tmp_path))
    build._clean_partial_builds.cache_clear()
    source = "int cognate_answer(void) { return 42; }\n"
    lib = compile_c(source, openmp=False)
    assert build.verified(lib) and lib.with_name(lib.name + ".sha256").is_file()
    again = compile_c(source, openmp=False)
    assert again == lib and lib.read_bytes() == again.read_bytes()  # deterministic build
    # A library that does not match its manifest entry is never loaded, and is rebuilt.
    good = lib.read_bytes()
    lib.write_bytes(good[:-16] + bytes(16))
    with pytest.raises(Exception, match="does not match the cache manifest"):
        build.load_library(str(lib))
    assert compile_c(source, openmp=False).read_bytes() == good
    assert build.load_library(str(lib)).cognate_answer() == 42
    # A compile killed mid-way leaves its build folder; the next process removes it.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    partial = lib.parent / f"build-{int(dead.stdout)}-abc"
    partial.mkdir()
    (partial / "kernel.c").write_text(source)
    live = lib.parent / f"build-{__import__('os').getpid()}-xyz"  # a build in progress stays
    live.mkdir()
    build._clean_partial_builds.cache_clear()
    build.kernel_cache_dir()
    assert not partial.exists() and live.exists()
