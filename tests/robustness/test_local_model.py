"""The local model ``tune --verify --learn`` keeps in ``$COGNATE_HOME/models``: validated,
never a reason for ``tune`` to fail, written by concurrent learners without losing one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.torch import save_file

from cognate.errors import CognateError
from cognate.model.checkpoint import parse_metadata, read_metadata

MATRIX = "west0479"
TUNE = ["tune", "--target", "spade", "--op", "spmm", "--top-k", "3"]


def _cognate(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COGNATE_HOME": str(home), "OMP_NUM_THREADS": "1"}
    code = "from cognate.cli import run; run()"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _run(home: Path, *args: str) -> subprocess.CompletedProcess:
    proc = _cognate(home, *args)
    out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> tuple[Path, Path]:
    """(a home holding one local model refined by --learn, the matrix)."""
    home = tmp_path_factory.mktemp("learned") / "home"
    matrix = shared / "matrices" / "suitesparse" / f"{MATRIX}.mtx.gz"
    done = _run(home, *TUNE, str(matrix), "--verify", "--learn", "--no-record", "--json")
    assert done.returncode == 0, done.stderr
    return home, matrix


def _copy_home(learned: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "home"
    shutil.copytree(learned[0], home)
    return home, home / "models" / "spade-spmm.safetensors"


def _rewrite_metadata(path: Path, change: dict) -> None:
    with safe_open(str(path), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - not a dict
        meta = json.loads(f.metadata()["cognate"])
    save_file(tensors, str(path), metadata={"cognate": json.dumps({**meta, **change})})


def test_updates_that_are_not_a_list_of_updates_fail_validation(learned, tmp_path) -> None:
    """``"updates": "x"`` passed validation, then ``internal error: AttributeError``."""
    home, local = _copy_home(learned, tmp_path)
    meta = read_metadata(local)
    for bad in ("x", [1], [{"measurements": -1, "epochs": 1, "seed": 0}]):
        with pytest.raises(CognateError, match="updates") as err:
            parse_metadata(local, json.dumps({**meta, "updates": bad}))
        assert "\n" not in str(err.value)
    _rewrite_metadata(local, {"updates": "x"})
    done = _run(home, *TUNE, str(learned[1]), "--model", str(local), "--verify", "--learn",
                "--no-record")  # fmt: skip
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "updates" in done.stderr and str(local) in done.stderr
    assert "internal error" not in done.stderr


@pytest.mark.parametrize("damage", ["updates_x", "truncated", "garbage", "folder", "fifo"])
def test_a_damaged_local_model_falls_back_to_the_shipped_one(
    learned, tmp_path: Path, damage: str
) -> None:
    """Every ``tune`` without --model exited 1 on a damaged local copy; now: one warning
    naming the file and how to remove it, then the shipped model."""
    home, local = _copy_home(learned, tmp_path)
    if damage == "updates_x":
        _rewrite_metadata(local, {"updates": "x"})
    elif damage == "truncated":
        local.write_bytes(local.read_bytes()[:5000])
    elif damage == "garbage":
        local.write_bytes(b"\x00" * 64)
    else:
        local.unlink()
        local.mkdir() if damage == "folder" else os.mkfifo(local)
    done = _run(home, *TUNE, str(learned[1]), "--json")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(local) in lines[0] and f"rm {local}" in lines[0], lines
    assert json.loads(done.stdout)["model"].endswith("data/models/spade-spmm.safetensors")


def test_two_learners_at_once_both_land_and_killed_writers_leave_nothing(
    learned, tmp_path: Path
) -> None:
    """Two ``tune --verify --learn`` at once: both refinements are in the local copy (the
    last writer used to win: 2 refinements, 1 kept); a temp file a killed writer left
    beside the copy is removed."""
    home, local = _copy_home(learned, tmp_path)
    before = read_metadata(local)["learned"]["updates"]
    leftover = local.with_name(f".{local.name}.k1ll3d.tmp")
    leftover.write_bytes(b"half a model")
    runs = [
        _cognate(home, *TUNE, str(learned[1]), "--verify", "--learn", "--no-record", "--json")
        for _ in range(2)
    ]
    outs = [proc.communicate(timeout=600) for proc in runs]
    assert all(proc.returncode == 0 for proc in runs), outs
    reported = sorted(json.loads(out)["learned"]["updates"] for out, _ in outs)
    assert reported == [before + 1, before + 2]
    assert read_metadata(local)["learned"]["updates"] == before + 2
    assert not leftover.exists()
    assert sorted(p.name for p in local.parent.iterdir()) == [local.name, f"{local.name}.lock"]
