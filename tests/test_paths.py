"""Where cognate finds what it ships: the wheel's package data first, the source tree else."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cognate.paths as paths

REPO = Path(__file__).resolve().parents[1]
# package-data folder under cognate/_data -> the repository folder it is copied from
SHIPPED = {"configs": "configs", "kernels": "kernels", "models": "data/models"}


def test_source_checkout_reads_the_repository_folders() -> None:
    assert paths.configs_dir() == REPO / "configs"
    assert paths.kernels_dir() == REPO / "kernels"
    assert (paths.configs_dir() / "cpu-spmm.yaml").is_file()
    assert (paths.kernels_dir() / "cpu" / "spmm.c").is_file()
    assert (paths.data_dir() / "models" / "cpu-spmm.safetensors").is_file()


def test_package_data_is_preferred_when_present(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(paths, "_package_data", lambda: tmp_path)
    assert paths.configs_dir() == tmp_path / "configs"
    assert paths.kernels_dir() == tmp_path / "kernels"
    assert paths.data_dir() / "models" == tmp_path / "models"


def test_build_copies_the_shipped_folders_into_the_package(tmp_path: Path) -> None:
    """What a (non-editable) wheel holds: setup.py's build_py copies every file of
    configs/, kernels/ and data/models/ to cognate/_data, and the built package reads them."""
    pytest.importorskip("setuptools")
    build = tmp_path / "lib"
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(build)],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    data = build / "cognate" / "_data"
    for name, source in SHIPPED.items():
        files = [
            p for p in (REPO / source).rglob("*") if p.is_file() and "__pycache__" not in p.parts
        ]
        assert files, source
        for path in files:
            copy = data / name / path.relative_to(REPO / source)
            assert copy.is_file(), copy
            assert filecmp.cmp(path, copy, shallow=False), copy
    assert not (REPO / "cognate" / "_data").exists()  # the source tree is left alone
    code = (
        "import cognate.paths as p; "
        "print(p.configs_dir()); print(p.kernels_dir()); print(p.data_dir() / 'models')"
    )
    env = {**os.environ, "PYTHONPATH": str(build)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(data / n) for n in ("configs", "kernels", "models")]
