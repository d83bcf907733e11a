"""The record store: round trip, idempotent upsert, SIGKILL mid-batch, readers during writes."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.io
from click.testing import CliRunner

from cognate.cli import main, run
from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix, canonicalize
from cognate.runner import Measurement
from cognate.store import FRAME_COLUMNS, SCHEMA_VERSION, Store

REQUIRED_EXPORT_COLUMNS = [
    "matrix",
    "target",
    "op",
    "width",
    "config",
    "config_hash",
    "runtime_s",
    "status",
    "is_baseline",
]


def _load(path: Path) -> Matrix:
    return Matrix(path.name.removesuffix(".mtx.gz"), canonicalize(scipy.io.mmread(path)), str(path))


@pytest.fixture(scope="module")
def west(shared: Path) -> Matrix:
    return _load(shared / "matrices" / "suitesparse" / "west0479.mtx.gz")


@pytest.fixture(scope="module")
def bus(shared: Path) -> Matrix:
    return _load(shared / "matrices" / "suitesparse" / "494_bus.mtx.gz")


def _configs(n: int, op: str = "spmm") -> list[Config]:
    return [Config("cpu", op, {"isplit": 2 ** (i % 8), "chunk": i}) for i in range(n)]


def _batch() -> list[Measurement]:
    """One of each status; literal runtimes (the store does not care where they come from)."""
    c = _configs(4)
    return [
        Measurement(c[0], "ok", 1.5e-3, 2e-5, {"gflops": np.float32(2.5), "reps": np.int64(9)}),
        Measurement(c[1], "ok", 0.9e-3, 1e-5),
        Measurement(c[2], "timeout", None, None, {}, "over 2.0 s"),
        Measurement(c[3], "too_large", None, None, {}, "packed format exceeds 20 x nnz"),
    ]


def test_round_trip(tmp_path: Path, west: Matrix) -> None:
    batch = _batch()
    baseline = batch[1].config.hash
    with Store(tmp_path / "sub" / "r.sqlite") as store:
        written = store.record(
            west, "cpu", "spmm", 32, batch, space_version="v1", baseline_hash=baseline, host="h"
        )
        df = store.frame()
    assert written == 4
    assert list(df.columns) == list(FRAME_COLUMNS)
    assert df["matrix"].tolist() == ["west0479"] * 4
    assert (df["rows"].iloc[0], df["cols"].iloc[0], df["nnz"].iloc[0]) == (479, 479, west.nnz)
    assert df["matrix_sha256"].iloc[0] == west.sha256
    assert df["config"].tolist() == [m.config.json for m in batch]
    assert df["config_hash"].tolist() == [m.config.hash for m in batch]
    assert df["status"].tolist() == ["ok", "ok", "timeout", "too_large"]
    assert df["runtime_s"].iloc[0] == pytest.approx(1.5e-3)
    assert np.isnan(df["runtime_s"].iloc[2])
    assert df["error"].iloc[2] == "over 2.0 s"
    assert df["is_baseline"].tolist() == [False, True, False, False]
    assert json.loads(df["counters"].iloc[0]) == {"gflops": 2.5, "reps": 9}
    assert set(df["host"]) == {"h"} and set(df["space_version"]) == {"v1"}
    assert str(df["time"].dtype).startswith("datetime64")


def test_upsert_is_idempotent_and_replaces(tmp_path: Path, west: Matrix, bus: Matrix) -> None:
    batch = _batch()
    with Store(tmp_path / "r.sqlite") as store:
        first_id = store.add_matrix(west)
        renamed = Matrix("other-name", west.csr, "elsewhere")
        assert store.add_matrix(renamed) == first_id  # same content: same row, name kept
        for _ in range(2):
            store.record(west, "cpu", "spmm", 32, batch, space_version="v1", host="h")
        assert len(store.frame()) == 4
        remeasured = [Measurement(batch[2].config, "ok", 7e-3, 1e-4)]
        store.record(west, "cpu", "spmm", 32, remeasured, space_version="v1", host="h")
        df = store.frame()
        assert len(df) == 4
        row = df[df["config_hash"] == batch[2].config.hash].iloc[0]
        assert (row["status"], row["runtime_s"]) == ("ok", 7e-3) and pd.isna(row["error"])
        # Another host, width or matrix is another record.
        store.record(west, "cpu", "spmm", 32, batch, space_version="v1", host="h2")
        store.record(west, "cpu", "spmm", 64, batch, space_version="v1", host="h")
        store.record(bus, "cpu", "spmm", 32, batch[:1], space_version="v2", host="h")
        df = store.frame()
        assert len(df) == 13
        # Each record keeps the space version it was measured under.
        assert df.groupby("matrix")["space_version"].agg(set).to_dict() == {
            "west0479": {"v1"},
            "494_bus": {"v2"},
        }
        assert store.measured_hashes(west, "cpu", "spmm", 32, host="h") == {
            m.config.hash for m in batch
        }
        assert store.measured_hashes(bus, "cpu", "spmm", 32, host="h") == {batch[0].config.hash}
        assert store.measured_hashes(bus, "cpu", "spmm", 64, host="h") == set()
        mats = store.matrices()
        assert mats["name"].tolist() == ["west0479", "494_bus"]
        assert mats["measurements"].tolist() == [12, 1]
        assert len(store.frame(status="ok")) == 3 + 2 + 2 + 1
        assert len(store.frame(target="cpu", op="sddmm")) == 0


def test_record_rejects_mismatched_config(tmp_path: Path, west: Matrix) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        good = Measurement(_configs(1)[0], "ok", 1e-3)
        bad = Measurement(Config("cpu", "sddmm", {"x": 1}), "ok", 1e-3)
        with pytest.raises(CognateError, match="sddmm"):
            store.record(west, "cpu", "spmm", 32, [good, bad], space_version="v1")
        assert len(store.frame()) == 0  # the whole batch rolled back
        with pytest.raises(CognateError, match="width"):
            store.record(west, "cpu", "spmm", 0, [good], space_version="v1")


def test_refuses_newer_schema_and_foreign_files(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    Store(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (SCHEMA_VERSION + 1,)
        )
    with pytest.raises(CognateError, match="newer"):
        Store(path)
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(CognateError, match="garbage.sqlite"):
        Store(garbage)
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(CognateError, match="not a cognate record store"):
        Store(foreign)


def test_export_parquet_and_csv(tmp_path: Path, west: Matrix) -> None:
    db = tmp_path / "r.sqlite"
    with Store(db) as store:
        store.record(west, "cpu", "spmm", 32, _batch(), space_version="v1")
        store.record(west, "spade", "spmm", 32, [], space_version="v1")
    out = tmp_path / "runs.parquet"
    result = CliRunner().invoke(main, ["data", "export", "--db", str(db), "-o", str(out)])
    assert result.exit_code == 0, result.output
    df = pd.read_parquet(out)
    assert out.stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600: others may read it
    assert set(REQUIRED_EXPORT_COLUMNS) <= set(df.columns)
    assert len(df) == 4 and df["is_baseline"].dtype == bool
    assert json.loads(df["config"].iloc[0]) == _batch()[0].config.knobs
    csv = tmp_path / "ok.csv"
    args = ["data", "export", "--db", str(db), "-o", str(csv), "--status", "ok"]
    assert CliRunner().invoke(main, args).exit_code == 0
    assert len(pd.read_csv(csv)) == 2


def test_export_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.sqlite"
    with pytest.raises(SystemExit) as exit_info:
        run(["data", "export", "--db", str(missing), "-o", str(tmp_path / "x.parquet")])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.sqlite" in err and "Traceback" not in err
    assert not missing.exists()


@pytest.mark.parametrize("where", ["/proc/x.parquet", "file/x.csv"])
def test_export_to_an_unwritable_path_is_one_line(
    tmp_path: Path, west: Matrix, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """Used to print "internal error: FileNotFoundError"."""
    db = tmp_path / "r.sqlite"
    with Store(db) as store:
        store.record(west, "cpu", "spmm", 32, _batch(), space_version="v1")
    (tmp_path / "file").write_text("a file, not a folder")
    out = tmp_path / where  # an absolute ``where`` replaces tmp_path
    with pytest.raises(SystemExit) as exit_info:
        run(["data", "export", "--db", str(db), "-o", str(out)])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out}: cannot write" in err
    assert "internal error" not in err and "Traceback" not in err


# -- crash and concurrency: real processes ----------------------------------------------

BATCH = 200

_WRITER = textwrap.dedent(
    """
    import sys, time
    from collections.abc import Sequence
    import scipy.sparse as sp
    from cognate.config import Config
    from cognate.matrix import Matrix, canonicalize
    from cognate.runner import Measurement
    from cognate.store import Store

    db, first, batches, pause_at, nap = sys.argv[1], *map(int, sys.argv[2:5]), float(sys.argv[5])
    matrix = Matrix("m", canonicalize(sp.random(300, 300, density=0.02, random_state=1)))

    class Batch(Sequence):
        # Pauses halfway through iteration: record() iterates inside its transaction.
        def __init__(self, items, pause):
            self.items, self.pause = items, pause
        def __len__(self):
            return len(self.items)
        def __getitem__(self, i):
            return self.items[i]
        def __iter__(self):
            for i, m in enumerate(self.items):
                if self.pause and i == len(self.items) // 2:
                    print(f"mid {store._conn.in_transaction}", flush=True)
                    time.sleep(120)
                yield m

    with Store(db) as store:
        for k in range(first, first + batches):
            items = [Measurement(Config("cpu", "spmm", {"i": i}), "ok", 1e-3 * (i + 1), 0.0,
                                 {"batch": k}) for i in range(BATCH)]
            store.record(matrix, "cpu", "spmm", k + 1, Batch(items, k == pause_at),
                         space_version="v1", host="h")
            print(f"committed {k}", flush=True)
            time.sleep(nap)
    """
).replace("BATCH", str(BATCH))


def _writer(db: Path, first: int, batches: int, pause_at: int = -1, nap: float = 0.0):
    args = [sys.executable, "-c", _WRITER, str(db), str(first), str(batches), str(pause_at)]
    return subprocess.Popen(args + [str(nap)], stdout=subprocess.PIPE, text=True)


def _batch_sizes(db: Path) -> pd.Series:
    with Store(db) as store:
        return store.frame().groupby("width").size()


def test_sigkill_mid_batch_loses_nothing_committed(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    proc = _writer(db, first=0, batches=10, pause_at=3)
    try:
        lines = [proc.stdout.readline().strip() for _ in range(4)]
        assert lines == ["committed 0", "committed 1", "committed 2", "mid True"]
        proc.send_signal(signal.SIGKILL)  # in the middle of batch 3's open transaction
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    sizes = _batch_sizes(db)
    assert sizes.to_dict() == {1: BATCH, 2: BATCH, 3: BATCH}  # batch 3 (width 4): nothing
    # The collection resumes: the killed batch is written by the next writer.
    proc = _writer(db, first=3, batches=1)
    assert proc.wait(timeout=60) == 0
    assert _batch_sizes(db).to_dict() == {w: BATCH for w in (1, 2, 3, 4)}


def test_readers_see_whole_batches_during_writes(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    Store(db).close()
    batches = 15
    writers = [_writer(db, 0, batches, nap=0.02), _writer(db, 100, batches, nap=0.02)]
    seen: list[list[int]] = [[], []]
    problems: list[str] = []

    def read(totals: list[int]) -> None:
        with Store(db) as store:
            while any(w.poll() is None for w in writers) or not totals:
                sizes = store.frame().groupby("width").size()
                if (sizes != BATCH).any():
                    problems.append(f"partial batch visible: {sizes.to_dict()}")
                if totals and int(sizes.sum()) < totals[-1]:
                    problems.append("a committed batch disappeared")
                totals.append(int(sizes.sum()))

    readers = [threading.Thread(target=read, args=(totals,)) for totals in seen]
    for t in readers:
        t.start()
    for w in writers:
        assert w.wait(timeout=120) == 0  # concurrent writers queued, none failed
    for t in readers:
        t.join(timeout=60)
    assert problems == []
    assert _batch_sizes(db).sum() == 2 * batches * BATCH
    # The readers really overlapped the writes (they saw intermediate states).
    assert any(0 < t < 2 * batches * BATCH for totals in seen for t in totals)


# --- schema 2: host ids, attempts, load, repeats, migration, read-only ------------------------


def _spade_configs(n: int) -> list[Config]:
    return [Config("spade", "spmm", {"i": i}) for i in range(n)]


def _v1_store(path: Path, west: Matrix) -> None:
    """A store as schema 1 wrote it: spade records under two hostnames (a container that
    restarted) and cpu records under one."""
    from cognate.store import schema as store_module

    conn = sqlite3.connect(path)
    for statement in filter(str.strip, store_module.SCHEMA_SQL.split(";")):
        conn.execute(statement)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    rows, cols = west.shape
    conn.execute(
        "INSERT INTO matrices VALUES (1, ?, ?, ?, ?, ?, ?)",
        (west.name, west.source, west.sha256, rows, cols, west.nnz),
    )
    configs = _spade_configs(3) + _configs(2)
    for i, c in enumerate(configs):
        conn.execute(
            "INSERT INTO configs VALUES (?, ?, ?, 'v1', ?, ?)",
            (i + 1, c.target, c.op, c.json, c.hash),
        )
    rows_in = [
        (1, "spade", i + 1, host, t) for host, t in (("vm", 1.0), ("vm2", 2.0)) for i in range(3)
    ]
    rows_in += [(1, "cpu", 4 + i, "vm", 5.0) for i in range(2)]
    for matrix_id, target, config_id, host, runtime in rows_in:
        conn.execute(
            """INSERT INTO measurements (matrix_id, target, op, width, config_id, space_version,
               runtime_s, spread_s, counters, status, error, is_baseline, host, time)
               VALUES (?, ?, 'spmm', 32, ?, 'v1', ?, 0, '{}', 'ok', NULL, 0, ?, '2026-01-01')""",
            (matrix_id, target, config_id, runtime, host),
        )
    conn.commit()
    conn.close()


def test_v1_store_is_migrated_and_simulator_copies_fold_into_one(
    tmp_path: Path, west: Matrix
) -> None:
    db = tmp_path / "v1.sqlite"
    _v1_store(db, west)
    with Store(db, readonly=True) as store:  # read-only: read as it is, not migrated
        assert store.schema == 1 and len(store.frame()) == 8
    with Store(db) as store:
        assert store.schema == SCHEMA_VERSION == 4
        df = store.frame()
        spade = df[df["target"] == "spade"]
        # One host-independent copy per config, the newest (runtime 2.0) kept.
        assert len(spade) == 3 and set(spade["host"]) == {"sim"}
        assert set(spade["runtime_s"]) == {2.0}
        cpu = df[df["target"] == "cpu"]
        assert len(cpu) == 2 and set(cpu["host"]) == {"vm"}  # real timings keep their host
        assert (df["attempts"] == 1).all() and df["noisy"].isna().all()
        # A resume on any machine sees the simulator records as done.
        assert len(store.resume_state(west, "spade", "spmm", 32)) == 3
    # An older cognate that opened the store before the migration keeps writing hostname
    # rows: the next writable open folds them too.
    with sqlite3.connect(db) as conn:
        conn.execute(
            """INSERT INTO measurements (matrix_id, target, op, width, config_id, space_version,
               runtime_s, spread_s, counters, status, error, is_baseline, host, time)
               VALUES (1, 'spade', 'spmm', 32, 1, 'v1', 3.0, 0, '{}', 'ok', NULL, 0, 'vm',
                       '2026-01-02')"""
        )
    with Store(db) as store:
        spade = store.frame(target="spade")
        assert len(spade) == 3 and set(spade["host"]) == {"sim"}
        assert sorted(spade["runtime_s"]) == [2.0, 2.0, 3.0]
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_host_ids(tmp_path: Path, west: Matrix, monkeypatch: pytest.MonkeyPatch) -> None:
    from cognate.hostid import machine_id

    monkeypatch.delenv("COGNATE_HOST_ID", raising=False)
    spade = [Measurement(c, "ok", 1.0, 0.0) for c in _spade_configs(2)]
    cpu = [Measurement(c, "ok", 1.0, 0.0) for c in _configs(2)]
    with Store(tmp_path / "r.sqlite") as store:
        store.record(west, "spade", "spmm", 32, spade, space_version="v1", host="elsewhere")
        store.record(west, "cpu", "spmm", 32, cpu, space_version="v1")
        monkeypatch.setenv("COGNATE_HOST_ID", "lab-box-3")
        store.record(west, "cpu", "spmm", 32, cpu, space_version="v1")
        hosts = store.frame().groupby("target")["host"].agg(set).to_dict()
        assert hosts == {"spade": {"sim"}, "cpu": {machine_id(), "lab-box-3"}}
        assert machine_id().startswith("h-") and machine_id() != __import__("socket").gethostname()
        monkeypatch.setenv("COGNATE_HOST_ID", "two words")
        with pytest.raises(CognateError, match="COGNATE_HOST_ID 'two words'"):
            store.record(west, "cpu", "spmm", 32, cpu, space_version="v1")


def test_attempts_load_and_repeats(tmp_path: Path, west: Matrix) -> None:
    from cognate.timing import Load

    c = _configs(3)
    quiet = Load(load1=0.2, busy_cores=0.1, cores=2, threads=2)
    busy = Load(load1=3.9, busy_cores=1.9, cores=2, threads=2)
    with Store(tmp_path / "r.sqlite") as store:
        first = [
            Measurement(c[0], "timeout", None, None, {}, "over 1 s"),
            Measurement(c[1], "error", None, None, {}, "result differs from scipy at 3 of 9"),
            Measurement(c[2], "ok", 2e-3, 1e-5),
        ]
        store.record(
            west, "cpu", "spmm", 32, first, space_version="v1", host="h", load=(quiet, quiet)
        )
        store.record(
            west, "cpu", "spmm", 32, first[:1], space_version="v1", host="h", load=(quiet, busy)
        )
        state = store.resume_state(west, "cpu", "spmm", 32, host="h")
        assert state == {
            c[0].hash: ("timeout", 2),
            c[1].hash: ("mismatch", 1),
            c[2].hash: ("ok", 1),
        }
        df = store.frame().set_index("config_hash")
        assert df.loc[c[0].hash, "noisy"] and not df.loc[c[2].hash, "noisy"]
        assert df.loc[c[0].hash, "busy_after"] == 1.9 and df.loc[c[2].hash, "load1_before"] == 0.2
        again = [Measurement(c[2], "ok", 2.2e-3, 1e-5)]
        store.record(west, "cpu", "spmm", 32, again, space_version="v1", host="h", repeat=True)
        repeats = store.repeats()
        assert repeats[["config_hash", "first_s", "repeat_s"]].values.tolist() == [
            [c[2].hash, 2e-3, 2.2e-3]
        ]
        assert len(store.frame()) == 3  # a repeat is not a record of its own
        other = [Measurement(_configs(5)[4], "ok", 1.0, 0.0)]
        with pytest.raises(CognateError, match="repeat of config .* not stored"):
            store.record(west, "cpu", "spmm", 32, other, space_version="v1", host="h", repeat=True)


def test_read_only_media_export(
    tmp_path: Path, west: Matrix, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store on read-only media opens as immutable: export works, nothing is written."""
    folder = tmp_path / "media"
    folder.mkdir()
    _v1_store(folder / "r.sqlite", west)
    before = sorted(p.name for p in folder.iterdir())
    real_access = __import__("os").access
    monkeypatch.setattr(
        "os.access",
        lambda p, mode, **kw: False if mode & __import__("os").W_OK else real_access(p, mode, **kw),
    )
    out = tmp_path / "out.csv"
    code = _cli_code(["data", "export", "--db", str(folder / "r.sqlite"), "-o", str(out)])
    assert code == 0 and len(pd.read_csv(out)) == 8
    assert sorted(p.name for p in folder.iterdir()) == before  # no -wal, -shm, no migration
    with Store(folder / "r.sqlite", readonly=True) as store, pytest.raises(CognateError):
        store.record(west, "cpu", "spmm", 32, [], space_version="v1")


def _cli_code(args: list[str]) -> int:
    try:
        run(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@pytest.mark.parametrize("case", ["corrupt", "directory", "under_file"])
def test_unusable_store_paths_are_one_line(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 16)
    db = {"corrupt": corrupt, "directory": tmp_path, "under_file": blocker / "r.sqlite"}[case]
    matrix = Path(__file__).parent / "data" / "malformed" / "notes.txt"  # never reached
    for args in (
        ["data", "export", "--db", str(db), "-o", str(tmp_path / "o.csv")],
        ["collect", "--target", "spade", "--op", "spmm", "--db", str(db), str(matrix)],
    ):
        code = _cli_code(args)
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 1 and len(err) == 1, (args, err)
        assert str(db) in err[0] and "internal error" not in err[0], err


DAMAGE = {
    "dropped_column": (
        "ALTER TABLE measurements DROP COLUMN runtime_s",
        "damaged record store: table 'measurements' has no column(s) runtime_s",
    ),
    "dropped_table": ("DROP TABLE configs", "damaged record store: no table 'configs'"),
    "dropped_repeats": ("DROP TABLE repeats", "damaged record store: no table 'repeats'"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_store_says_what_is_missing(
    tmp_path: Path, west: Matrix, shared: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table or column dropped by hand is one line naming it, for every command that opens
    a store (before: `internal error: DatabaseError`, or KeyError 'runtime_s' in export)."""
    db = tmp_path / "r.sqlite"
    with Store(db) as store:
        ok = [Measurement(c, "ok", 1.0, 0.0) for c in _spade_configs(2)]
        store.record(west, "spade", "spmm", 16, ok, space_version="v1")
    sql, needle = DAMAGE[case]
    with sqlite3.connect(db) as conn:
        conn.execute(sql)
    matrix = str(shared / "matrices" / "suitesparse" / "494_bus.mtx.gz")
    spade = ["--target", "spade", "--op", "spmm"]
    commands = [
        ["data", "export", "--db", str(db), "-o", str(tmp_path / "out.parquet")],
        ["collect", *spade, "--configs", "2", "--db", str(db), matrix],
        ["pretrain", "--db", str(db), *spade, "--epochs", "1", "-o", str(tmp_path / "m")],
        ["tune", matrix, *spade, "--verify", "--db", str(db)],
    ]
    for args in commands if case == "dropped_column" else commands[:2]:
        code = _cli_code(args)
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 1 and len(err) == 1, (args, err)
        assert f"{db}: {needle}" in err[0] and "internal error" not in err[0], (args, err)
    assert not (tmp_path / "out.parquet").exists() and not (tmp_path / "m").exists()


def test_unrepeated_lists_ok_records_without_a_repeat(tmp_path: Path, west: Matrix) -> None:
    c = _configs(3)
    first = [
        Measurement(c[0], "ok", 1e-3, 0.0),
        Measurement(c[1], "ok", 2e-3, 0.0),
        Measurement(c[2], "timeout", None, None, {}, "over 1 s"),
    ]
    with Store(tmp_path / "r.sqlite") as store:
        store.record(west, "cpu", "spmm", 32, first, space_version="v1", host="h")
        assert store.unrepeated(west, "cpu", "spmm", 32, host="h") == {
            c[0].hash: 1e-3,
            c[1].hash: 2e-3,
        }
        again = [Measurement(c[0], "ok", 1.1e-3, 0.0)]
        store.record(west, "cpu", "spmm", 32, again, space_version="v1", host="h", repeat=True)
        assert store.unrepeated(west, "cpu", "spmm", 32, host="h") == {c[1].hash: 2e-3}
        assert store.unrepeated(west, "cpu", "spmm", 32, host="other") == {}
