"""The structured-layer benchmark: its workload selection, and one tiny run end to end."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cognate.synth import LAYER_SHAPES, LAYER_SPARSITIES

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_structured.py"


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_structured", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    saved = sys.argv
    sys.argv = [str(SCRIPT)]  # the module reads --threads from argv at import
    try:
        spec.loader.exec_module(module)
    finally:
        sys.argv = saved
    return module


@pytest.fixture(scope="module")
def bench():
    threads = {var: os.environ.get(var) for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    try:
        yield _bench_module()
    finally:  # the import sets thread variables for the libraries: restore them
        for var, value in threads.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def test_default_workloads_are_the_issues(bench):
    loads = bench.workloads(bench.parse_args([]))
    plain = [w for w in loads if not w.permuted]
    permuted = [w for w in loads if w.permuted]
    assert {(w.rows, w.cols) for w in plain} == set(LAYER_SHAPES)
    assert {w.kind for w in plain} == {"kdiag", "block", "nm"}
    assert {w.sparsity for w in loads} == {0.9}
    assert len(plain) == 12 and [w.kind for w in permuted] == ["kdiag"] * 4
    full = bench.workloads(bench.parse_args(["--full", "--kinds", "kdiag", "--permuted-kinds"]))
    assert sorted({w.sparsity for w in full}) == sorted(LAYER_SPARSITIES) and len(full) == 20


def test_permuted_workload_is_the_unpermuted_one_behind_index_maps(bench):
    load = bench.Workload("kdiag", 96, 192, 0.9, permuted=True)
    permuted = bench.make_matrix(load, block=16)
    plain = bench.make_matrix(load.unpermuted(), block=16)
    assert permuted.row_perm is not None and permuted.col_perm is not None
    assert (permuted.structured() != plain.csr).nnz == 0
    assert not np.array_equal(permuted.csr.indices, plain.csr.indices)


def test_tiny_run_end_to_end(tmp_path):
    command = [sys.executable, str(SCRIPT), "--shapes", "96x192", "--kinds", "kdiag"]
    command += ["--widths", "16", "--search", "sample", "--sample", "2", "--rounds", "3"]
    command += ["--threads", "1", "--dia", "2x16", "8x16"]
    env = {**os.environ, "COGNATE_HOME": str(tmp_path / "home")}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    out = result.stdout
    assert "1 threads" in out
    line = (
        r"kdiag 96x192 90% N=16: dense [\d.]+ mkl [\d.]+ base [\d.]+ dia [\d.]+ \([28]x16\) tuned"
    )
    assert re.search(line, out)
    assert re.search(r"mkl-ie (avx10|avx512|avx2|mc3|def) path", out)  # MKL's code path named
    assert "MKL = mkl-ie, its" in out and "DIA vs MKL" in out
    perm_row = next(line for line in out.splitlines() if "kdiag 96x192 90% perm │" in line)
    assert re.search(r"│\s+\d+%\s+│", perm_row)  # the permuted row's speed relative to plain


def test_bad_shape_is_rejected():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--shapes", "96by192"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "shape must look like 768x3072" in result.stderr
