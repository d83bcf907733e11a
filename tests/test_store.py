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
