"""MKL's code path: which ISA library it runs, and the override that makes it take its Intel
path on another vendor's CPU (cognate.targets.cpu.measure.library)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cognate.targets.cpu.measure import library

pytestmark = pytest.mark.skipif(library.find_mkl_rt() is None, reason="mkl not installed")

PROBE = """
import json, numpy as np, scipy.sparse as sp
from cognate.targets.cpu.measure import library
a = sp.random(700, 500, density=0.02, format="csr", dtype=np.float32, random_state=0)
b = np.random.default_rng(0).uniform(-1, 1, (500, 64)).astype(np.float32)
before = library.mkl_code_path()
call = library.mkl_spmm_call(a, b)
call.run()
ref = a.astype(np.float64) @ b.astype(np.float64)
err = float(np.abs(call.result() - ref).max() / np.abs(ref).max())
print(json.dumps({"before": before, "path": library.mkl_code_path(), "err": err}))
"""


def _probe(intel_path: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != library.INTEL_PATH_ENV}
    if intel_path:
        env[library.INTEL_PATH_ENV] = "1"
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _has_avx2() -> bool:
    with open("/proc/cpuinfo") as handle:
        return " avx2" in handle.read()


def test_the_code_path_is_named_and_the_result_right() -> None:
    found = _probe(intel_path=False)
    assert found["before"] == "not loaded"
    assert found["path"] in library.CODE_PATHS
    assert found["err"] < 1e-5
    if library.intel_path_differs():  # another vendor: MKL's generic code
        assert found["path"] == "def"


def test_the_override_takes_the_intel_path_and_stays_right() -> None:
    found = _probe(intel_path=True)
    assert found["err"] < 1e-5
    if _has_avx2():
        assert found["path"] in ("avx10", "avx512", "avx2")


def test_the_override_is_refused_once_mkl_is_loaded() -> None:
    code = (
        "from cognate.targets.cpu.measure import library\n"
        "from cognate.errors import CognateError\n"
        "library.mkl_runtime()\n"
        "try:\n    library.load_intel_path_shim()\nexcept CognateError as e:\n    print('refused:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != library.INTEL_PATH_ENV}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert "refused: MKL's Intel path: MKL is loaded already" in out.stdout


@pytest.mark.skipif(not library.intel_path_differs(), reason="MKL's Intel path is the plain one")
def test_tune_verify_times_mkl_on_its_intel_path_as_its_own_reference(shared) -> None:
    """On another vendor's CPU, tune --verify's library references hold MKL-IE as users get
    it and, labelled, MKL-IE on its Intel path (a second process); each names its path."""
    import cognate
    from cognate.formats.read import load_matrix
    from cognate.targets.cpu.measure.verify import INTEL_PATH

    matrix = load_matrix(shared / "matrices" / "suitesparse" / "dwt_878.mtx.gz")
    result = cognate.tune(matrix, width=16, top_k=1, verify=True, threads=1)
    assert result.libraries["mkl-ie"]["code_path"] == "def"
    if _has_avx2():
        assert result.libraries[INTEL_PATH]["code_path"] in ("avx10", "avx512", "avx2")
    assert result.libraries[INTEL_PATH]["runtime_s"] > 0
