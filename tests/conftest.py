"""Shared fixtures. Real data comes from ../shared (or $COGNATE_SHARED)."""

from __future__ import annotations

import os
from collections.abc import Iterator

# Triton kernels must see this before their module is imported (docs/architecture.md, Facts measured here).
os.environ.setdefault("TRITON_INTERPRET", "1")
# Tests check results, not times: passive OpenMP waits keep kernel threads from spinning
# through the time slices of a loaded CI machine (tune --verify now keeps the caller's policy).
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from cognate.paths import shared_dir  # noqa: E402


@pytest.fixture(scope="session")
def shared() -> Path:
    """The shared data folder. Without it the tests that read real matrices are skipped
    with one reason; under CI (CI=true, as .ci/run runs) its absence is a failure, so a CI
    run can never pass by skipping them."""
    path = shared_dir()
    if not (path / "matrices").is_dir():
        reason = f"needs the shared real matrices at {path} (set COGNATE_SHARED to their folder)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def suitesparse_files(shared: Path) -> list[Path]:
    return sorted((shared / "matrices" / "suitesparse").glob("*.mtx.gz"))


@pytest.fixture(scope="session")
def west0479_empty_row(shared: Path):
    """west0479 (a real unsymmetric pattern) with row 5 emptied: the kernels' empty-row path."""
    from cognate.formats.read import load_matrix

    a = load_matrix(shared / "matrices" / "suitesparse" / "west0479.mtx.gz").csr.tolil()
    a[5, :] = 0
    a = a.tocsr()
    a.eliminate_zeros()
    return a


@pytest.fixture(scope="session")
def waco_files(shared: Path) -> list[Path]:
    return sorted((shared / "matrices" / "waco").glob("*.csr"))


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point COGNATE_HOME at one folder under the session's temp dir, so nothing leaks into
    the user's cache.

    All tests of a session share that folder (and so the compiled-kernel cache, which avoids
    recompiling); a test that needs an empty home must make its own.
    """
    monkeypatch.setenv("COGNATE_HOME", str(tmp_path_factory.getbasetemp() / "cognate-home"))


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Torch on one thread for a module of tiny tensors: on a shared 2-core machine OpenMP
    spinning costs far more than it gives. Request it with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch  # here, so that modules without torch tests never import it

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
