"""Shared fixtures. Real data comes from ../shared (or $COGNATE_SHARED)."""

from __future__ import annotations

import os

# Triton kernels must see this before their module is imported (DESIGN section 11).
os.environ.setdefault("TRITON_INTERPRET", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from cognate.paths import shared_dir  # noqa: E402


@pytest.fixture(scope="session")
def shared() -> Path:
    """The shared data folder; its absence is a failure, not a skip."""
    path = shared_dir()
    if not (path / "matrices").is_dir():
        pytest.fail(f"shared data not found at {path}: set COGNATE_SHARED")
    return path


@pytest.fixture(scope="session")
def suitesparse_files(shared: Path) -> list[Path]:
    return sorted((shared / "matrices" / "suitesparse").glob("*.mtx.gz"))


@pytest.fixture(scope="session")
def waco_files(shared: Path) -> list[Path]:
    return sorted((shared / "matrices" / "waco").glob("*.csr"))


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gets its own COGNATE_HOME, so nothing leaks into the user's cache.

    The compiled-kernel cache is shared across the session to avoid recompiling.
    """
    monkeypatch.setenv("COGNATE_HOME", str(tmp_path_factory.getbasetemp() / "cognate-home"))
