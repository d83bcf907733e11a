"""Record stores: never written through a link, a read-only store refused before any work,
a value of the wrong type named by record and column, an old store always migratable."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import scipy.io

from cognate.cli import run
from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix, canonicalize
from cognate.runner import Measurement
from cognate.store import SCHEMA_VERSION, Store
from cognate.store import schema as store_module

SPADE = ["--target", "spade", "--op", "spmm"]


@pytest.fixture(scope="module")
def west(shared: Path) -> Matrix:
    path = shared / "matrices" / "suitesparse" / "west0479.mtx.gz"
    return Matrix("west0479", canonicalize(scipy.io.mmread(path)), str(path))


def _store(path: Path, west: Matrix) -> Path:
    with Store(path) as store:
        ok = [Measurement(Config("spade", "spmm", {"i": i}), "ok", 1.0 + i, 0.0) for i in range(2)]
        store.record(west, "spade", "spmm", 16, ok, space_version="v1")
    return path


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    try:
        run(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err.strip().splitlines()


def test_a_store_link_is_never_written_through(tmp_path, west, capsys, shared):
    target = _store(tmp_path / "elsewhere" / "real.sqlite", west)
    before = target.read_bytes()
    link = tmp_path / "home" / "records.sqlite"
    link.parent.mkdir()
    link.symlink_to(target)
    with pytest.raises(CognateError, match="is a symbolic link; refusing to write"):
        Store(link)
    matrix = str(shared / "matrices" / "suitesparse" / "494_bus.mtx.gz")
    code, err = _cli(["collect", *SPADE, "--configs", "1", "--db", str(link), matrix], capsys)
    assert code == 1 and len(err) == 1 and "symbolic link" in err[0], err
    assert target.read_bytes() == before
    assert sorted(p.name for p in target.parent.iterdir()) == ["real.sqlite"]
    with Store(link, readonly=True) as store:  # reading through it harms nothing
        assert len(store.frame()) == 2


def test_a_link_at_the_stores_wal_is_refused(tmp_path, west):
    db = _store(tmp_path / "r.sqlite", west)
    victim = tmp_path / "victim"
    victim.write_text("mine")
    Path(f"{db}-wal").unlink(missing_ok=True)
    Path(f"{db}-wal").symlink_to(victim)
    with pytest.raises(CognateError, match="-wal: is a symbolic link"):
        Store(db)
    assert victim.read_text() == "mine"


_OPEN = "from cognate.store import Store\nwith Store({path!r}): pass\nprint('opened')"


def _as_plain_user() -> list[str]:
    """A command prefix under which a read-only file is read-only: root writes any file
    unless it runs without CAP_DAC_OVERRIDE (setpriv), a plain user needs nothing."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: no way to make a file read-only")
    return ["setpriv", "--bounding-set=-dac_override", "--"]


def test_a_read_only_store_is_refused_when_opened_for_writing(tmp_path, west):
    """Opened for writing, a store this user may not write is one line at open time (before:
    it opened, a whole `tune --verify` ran, then `internal error: OperationalError`)."""
    db = _store(tmp_path / "ro.sqlite", west)  # its folder stays writable: only the file is not
    db.chmod(0o444)
    proc = subprocess.run(
        [*_as_plain_user(), sys.executable, "-c", _OPEN.format(path=str(db))],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0 and "opened" not in proc.stdout
    assert "record store is read-only" in proc.stderr.strip().splitlines()[-1], proc.stderr


@pytest.mark.parametrize(
    ("column", "value", "needle"),
    [
        ("runtime_s", "fast", "column runtime_s holds 'fast', not a number"),
        ("width", "wide", "column width holds 'wide', not a number"),
        ("time", "yesterday", "column time holds 'yesterday', not an ISO 8601 time"),
    ],
)
def test_a_value_of_the_wrong_type_names_its_record(tmp_path, west, capsys, column, value, needle):
    db = _store(tmp_path / "r.sqlite", west)
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE measurements SET {column} = ? WHERE id = 2", (value,))
    for args in (
        ["data", "export", "--db", str(db), "-o", str(tmp_path / "out.csv")],
        ["pretrain", "--db", str(db), *SPADE, "--epochs", "1", "-o", str(tmp_path / "m")],
    ):
        code, err = _cli(args, capsys)
        assert code == 1 and len(err) == 1, (args, err)
        assert f"{db}: damaged record store: record 2: {needle}" in err[0], err


def _v2_store(path: Path, west: Matrix, counters: str) -> None:
    conn = sqlite3.connect(path)
    for statement in filter(str.strip, store_module.SCHEMA_SQL.split(";")):
        conn.execute(statement)
    for name, kind in store_module.V2_COLUMNS:
        conn.execute(f"ALTER TABLE measurements ADD COLUMN {name} {kind}")
    conn.execute(store_module.V2_REPEATS)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '2')")
    rows, cols = west.shape
    conn.execute(
        "INSERT INTO matrices VALUES (1, ?, ?, ?, ?, ?, ?)",
        (west.name, west.source, west.sha256, rows, cols, west.nnz),
    )
    config = Config("cpu", "spmm", {"isplit": 2})
    conn.execute(
        "INSERT INTO configs VALUES (1, 'cpu', 'spmm', 'v1', ?, ?)", (config.json, config.hash)
    )
    conn.execute(
        """INSERT INTO measurements (matrix_id, target, op, width, config_id, space_version,
           runtime_s, spread_s, counters, status, error, is_baseline, host, time)
           VALUES (1, 'cpu', 'spmm', 32, 1, 'v1', 1e-3, 1e-5, ?, 'ok', NULL, 0, 'vm',
                   '2026-01-01')""",
        (counters,),
    )
    conn.commit()
    conn.close()


def test_deeply_nested_counters_do_not_block_the_migration(tmp_path, west):
    db = tmp_path / "v2.sqlite"
    _v2_store(db, west, "[" * 200_000 + "]" * 200_000)
    with Store(db) as store:
        assert store.schema == SCHEMA_VERSION
        df = store.frame()
    assert len(df) == 1 and df["range_s"].iloc[0] == 1e-5  # a collect's range, as any non-verify
