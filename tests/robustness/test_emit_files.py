"""``tune --emit``: file names never hidden, and a schedule's files are written all or none."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TUNE = ["tune", "--target", "cpu", "--op", "spmm", "--top-k", "2", "--json"]


def _cognate(*args: str) -> subprocess.CompletedProcess:
    code = "from cognate.cli import run; run()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def dot_matrix(tmp_path: Path, shared: Path) -> Path:
    """west0479 under the file name ``..mtx.gz``: its matrix name is ``.``."""
    path = tmp_path / "..mtx.gz"
    shutil.copy(shared / "matrices" / "suitesparse" / "west0479.mtx.gz", path)
    return path


def test_a_dot_stem_gives_visible_names(dot_matrix: Path, tmp_path: Path) -> None:
    out = tmp_path / "emitted"
    done = _cognate(*TUNE, str(dot_matrix), "--emit", str(out))
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 2 and not [n for n in names if n.startswith(".")], names
    assert all(n.startswith("matrix-cpu-spmm-") for n in names), names


def test_a_failed_json_write_leaves_no_source(dot_matrix: Path, tmp_path: Path) -> None:
    out = tmp_path / "emitted"
    first = _cognate(*TUNE, str(dot_matrix), "--emit", str(out))
    assert first.returncode == 0, first.stderr
    emitted = [Path(p) for p in json.loads(first.stdout)["emitted"]]
    for path in emitted:
        path.unlink()
    json_path = next(p for p in emitted if p.suffix == ".json")
    json_path.mkdir()  # the .json cannot be written
    done = _cognate(*TUNE, str(dot_matrix), "--emit", str(out))
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert str(json_path) in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in out.iterdir()) == [json_path.name]  # no .c left behind
