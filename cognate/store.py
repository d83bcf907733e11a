"""The record store: matrices, configs and measurements in one SQLite file (WAL).

One transaction per ``record`` call, an upsert keyed on (matrix, target, op, width,
config, host), so a collection can be killed at any moment and resumed: a batch is either
all in the store or not at all. WAL lets readers (export, training) run while a collector
writes; ``busy_timeout`` makes concurrent writers queue instead of failing.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.paths import cognate_home
from cognate.runner import STATUSES, Measurement

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 60_000

# Columns every export carries, in this order (later tools read any store through them).
FRAME_COLUMNS: tuple[str, ...] = (
    "matrix",
    "matrix_sha256",
    "source",
    "rows",
    "cols",
    "nnz",
    "target",
    "op",
    "width",
    "config",
    "config_hash",
    "space_version",
    "runtime_s",
    "spread_s",
    "status",
    "error",
    "is_baseline",
    "host",
    "time",
    "counters",
)

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS matrices (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    source TEXT NOT NULL,
    sha256 TEXT NOT NULL UNIQUE,
    rows INTEGER NOT NULL,
    cols INTEGER NOT NULL,
    nnz INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS configs (
    id INTEGER PRIMARY KEY,
    target TEXT NOT NULL,
    op TEXT NOT NULL,
    space_version TEXT NOT NULL,
    json TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY,
    matrix_id INTEGER NOT NULL REFERENCES matrices(id),
    target TEXT NOT NULL,
    op TEXT NOT NULL,
    width INTEGER NOT NULL,
    config_id INTEGER NOT NULL REFERENCES configs(id),
    space_version TEXT NOT NULL,
    runtime_s REAL,
    spread_s REAL,
    counters TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ({", ".join(repr(s) for s in STATUSES)})),
    error TEXT,
    is_baseline INTEGER NOT NULL,
    host TEXT NOT NULL,
    time TEXT NOT NULL,
    UNIQUE (matrix_id, target, op, width, config_id, host)
);
CREATE INDEX IF NOT EXISTS measurements_by_run ON measurements (target, op, width);
"""

_UPSERT_MATRIX = """
INSERT INTO matrices (name, source, sha256, rows, cols, nnz) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (sha256) DO NOTHING
"""
_UPSERT_CONFIG = """
INSERT INTO configs (target, op, space_version, json, hash) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (hash) DO UPDATE SET space_version = excluded.space_version
"""
_UPSERT_MEASUREMENT = """
INSERT INTO measurements (matrix_id, target, op, width, config_id, space_version, runtime_s,
                          spread_s, counters, status, error, is_baseline, host, time)
VALUES (?, ?, ?, ?, (SELECT id FROM configs WHERE hash = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (matrix_id, target, op, width, config_id, host) DO UPDATE SET
    space_version = excluded.space_version,
    runtime_s = excluded.runtime_s, spread_s = excluded.spread_s,
    counters = excluded.counters, status = excluded.status, error = excluded.error,
    is_baseline = excluded.is_baseline, time = excluded.time
"""
_FRAME_QUERY = """
SELECT m.name AS matrix, m.sha256 AS matrix_sha256, m.source, m.rows, m.cols, m.nnz,
       r.target, r.op, r.width, c.json AS config, c.hash AS config_hash, r.space_version,
       r.runtime_s, r.spread_s, r.status, r.error, r.is_baseline, r.host, r.time, r.counters
FROM measurements r
JOIN matrices m ON m.id = r.matrix_id
JOIN configs c ON c.id = r.config_id
"""


_FRAME_DTYPES = {
    **{c: "int64" for c in ("rows", "cols", "nnz", "width")},
    **{c: "float64" for c in ("runtime_s", "spread_s")},
    "is_baseline": "bool",
}


def default_db_path() -> Path:
    """The store a command uses when given no ``--db``: ``$COGNATE_HOME/records.sqlite``."""
    return cognate_home() / "records.sqlite"


def _finite_or_none(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _json_default(value: Any) -> Any:
    """Counters may hold numpy scalars or arrays: store them as plain JSON numbers/lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"counter value of type {type(value).__name__} is not JSON-serialisable")


class Store:
    """A record store in one SQLite file; use as a context manager or call ``close()``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        if self.path.exists() and self.path.is_dir():
            raise CognateError(f"{self.path}: is a directory, not a record store")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, one transaction per call.
            self._conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None
            )
            self._setup()
        except sqlite3.DatabaseError as exc:
            self._close_quietly()
            raise CognateError(f"{self.path}: not a usable record store ({exc})") from None

    # -- connection and schema -------------------------------------------------------

    def _setup(self) -> None:
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
            raise sqlite3.DatabaseError("cannot switch the journal to WAL mode")
        # NORMAL is durable against a killed process in WAL mode (only power loss can drop
        # the last commits) and keeps one-config-per-transaction collection cheap.
        conn.execute("PRAGMA synchronous = NORMAL")
        with self._transaction():
            version = self._schema_version()
            if version is None:
                # One statement at a time: executescript() would commit our transaction.
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
            elif version > SCHEMA_VERSION:
                raise CognateError(
                    f"{self.path}: record store schema version {version} is newer than this "
                    f"cognate supports ({SCHEMA_VERSION}); upgrade cognate"
                )

    def _schema_version(self) -> int | None:
        has_meta = self._conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
        ).fetchone()
        if not has_meta:
            if self._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                raise CognateError(f"{self.path}: an SQLite file, but not a cognate record store")
            return None
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None or not str(row[0]).isdigit():
            raise CognateError(f"{self.path}: record store has no valid schema_version")
        return int(row[0])

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        # IMMEDIATE takes the write lock up front, so two writers queue on busy_timeout
        # instead of one failing when it upgrades a read lock.
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()

    def _close_quietly(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------

    def _matrix_id(self, matrix: Matrix) -> int:
        rows, cols = matrix.shape
        self._conn.execute(
            _UPSERT_MATRIX, (matrix.name, matrix.source, matrix.sha256, rows, cols, matrix.nnz)
        )
        row = self._conn.execute(
            "SELECT id FROM matrices WHERE sha256 = ?", (matrix.sha256,)
        ).fetchone()
        return int(row[0])

    def add_matrix(self, matrix: Matrix) -> int:
        """Insert a matrix (keyed by content hash; an existing row keeps its name/source)."""
        with self._transaction():
            return self._matrix_id(matrix)

    def record(
        self,
        matrix: Matrix,
        target: str,
        op: str,
        width: int,
        measurements: Sequence[Measurement],
        *,
        space_version: str,
        baseline_hash: str | None = None,
        host: str | None = None,
    ) -> int:
        """Store a batch of measurements in one transaction; returns the rows written.

        A re-measurement of the same (matrix, target, op, width, config, host) replaces the
        old row. ``is_baseline`` is set where the config's hash equals ``baseline_hash``.
        ``space_version`` (the space's YAML version) is kept per record.
        """
        if int(width) != width or width < 1:
            raise CognateError(f"record: dense width must be a positive integer, got {width!r}")
        host = host or socket.gethostname()
        now = datetime.now(UTC).isoformat(timespec="microseconds")
        written = 0
        with self._transaction() as conn:
            matrix_id = self._matrix_id(matrix)
            # Iterated inside the transaction, so a crash mid-batch leaves nothing behind.
            for m in measurements:
                self._check(m, target, op)
                cfg = m.config
                conn.execute(_UPSERT_CONFIG, (target, op, space_version, cfg.json, cfg.hash))
                conn.execute(
                    _UPSERT_MEASUREMENT,
                    (
                        matrix_id,
                        target,
                        op,
                        int(width),
                        cfg.hash,
                        space_version,
                        _finite_or_none(m.runtime_s),
                        _finite_or_none(m.spread_s),
                        json.dumps(m.counters or {}, sort_keys=True, default=_json_default),
                        m.status,
                        m.error,
                        int(baseline_hash is not None and cfg.hash == baseline_hash),
                        host,
                        now,
                    ),
                )
                written += 1
        return written

    @staticmethod
    def _check(m: Measurement, target: str, op: str) -> None:
        if m.status not in STATUSES:
            raise CognateError(f"record: unknown measurement status {m.status!r}")
        if (m.config.target, m.config.op) != (target, op):
            raise CognateError(
                f"record: config {m.config.hash} is for {m.config.target}/{m.config.op}, "
                f"not {target}/{op}"
            )

    # -- reading ---------------------------------------------------------------------

    def measured_hashes(
        self, matrix: Matrix, target: str, op: str, width: int, host: str | None = None
    ) -> set[str]:
        """Hashes of configs already stored for this run (any status): the resume check."""
        rows = self._conn.execute(
            """SELECT c.hash FROM measurements r
               JOIN matrices m ON m.id = r.matrix_id JOIN configs c ON c.id = r.config_id
               WHERE m.sha256 = ? AND r.target = ? AND r.op = ? AND r.width = ?
                 AND r.host = ?""",
            (matrix.sha256, target, op, int(width), host or socket.gethostname()),
        ).fetchall()
        return {r[0] for r in rows}

    def frame(
        self, target: str | None = None, op: str | None = None, status: str | None = None
    ) -> pd.DataFrame:
        """All measurements joined with their matrix and config, one row each."""
        clauses, params = [], []
        for column, value in (("r.target", target), ("r.op", op), ("r.status", status)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        query = _FRAME_QUERY + (" WHERE " + " AND ".join(clauses) if clauses else "")
        query += " ORDER BY r.id"
        # One statement = one consistent WAL snapshot, even while a writer commits.
        df = pd.read_sql_query(query, self._conn, params=params)
        # Fixed dtypes, so an empty or all-null frame exports with the same schema.
        df = df.astype(_FRAME_DTYPES)
        df["time"] = pd.to_datetime(df["time"], utc=True, format="ISO8601")
        return df[list(FRAME_COLUMNS)]

    def matrices(self) -> pd.DataFrame:
        """One row per stored matrix, with how many measurements it has."""
        return pd.read_sql_query(
            """SELECT m.id, m.name, m.source, m.sha256, m.rows, m.cols, m.nnz,
                      count(r.id) AS measurements
               FROM matrices m LEFT JOIN measurements r ON r.matrix_id = m.id
               GROUP BY m.id ORDER BY m.id""",
            self._conn,
        )

    def export(
        self,
        path: str | Path,
        target: str | None = None,
        op: str | None = None,
        status: str | None = None,
    ) -> int:
        """Write ``frame(...)`` to Parquet (or CSV when the suffix is .csv); returns rows.

        Written to a temporary file and renamed, so a reader never sees half a file.
        """
        path = Path(path).expanduser()
        suffix = path.suffix.lower()
        if suffix not in (".parquet", ".csv"):
            raise CognateError(f"{path}: export format must be .parquet or .csv")
        df = self.frame(target=target, op=op, status=status)
        try:
            _write_frame(df, path, suffix)
        except OSError as e:  # a user's bad path is one line, not "internal error"
            raise CognateError(f"{path}: cannot write: {e.strerror or e}") from None
        return len(df)

    def import_frame(self, df: pd.DataFrame) -> tuple[int, int]:
        """Load exported records (``frame`` columns) into this store, one transaction.

        Rows the store already holds (same matrix, target, op, width, config, host) are kept
        as they are: an import never overwrites a local measurement. Returns (added, kept).
        """
        missing = [c for c in _IMPORT_COLUMNS if c not in df.columns]
        if missing:
            raise CognateError(f"import: records lack column(s) {', '.join(missing)}")
        if "counters" not in df.columns:
            df = df.assign(counters="{}")
        before = self._count()
        with self._transaction() as conn:
            for row in df.itertuples(index=False):
                self._import_row(conn, row)
        added = self._count() - before
        return added, len(df) - added

    def _count(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM measurements").fetchone()[0])

    @staticmethod
    def _import_row(conn: sqlite3.Connection, row: Any) -> None:
        conn.execute(
            _UPSERT_MATRIX,
            (row.matrix, row.source, row.matrix_sha256, int(row.rows), int(row.cols), int(row.nnz)),
        )
        conn.execute(
            "INSERT INTO configs (target, op, space_version, json, hash) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (hash) DO NOTHING",
            (row.target, row.op, row.space_version, row.config, row.config_hash),
        )
        if row.status not in STATUSES:
            raise CognateError(f"import: unknown status {row.status!r}")
        conn.execute(
            """INSERT INTO measurements (matrix_id, target, op, width, config_id, space_version,
                   runtime_s, spread_s, counters, status, error, is_baseline, host, time)
               VALUES ((SELECT id FROM matrices WHERE sha256 = ?), ?, ?, ?,
                       (SELECT id FROM configs WHERE hash = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (matrix_id, target, op, width, config_id, host) DO NOTHING""",
            (
                row.matrix_sha256,
                row.target,
                row.op,
                int(row.width),
                row.config_hash,
                row.space_version,
                _finite_or_none(_none_if_nan(row.runtime_s)),
                _finite_or_none(_none_if_nan(row.spread_s)),
                _none_if_nan(row.counters) or "{}",
                row.status,
                _none_if_nan(row.error),
                int(bool(row.is_baseline)),
                row.host,
                pd.Timestamp(row.time).isoformat(timespec="microseconds"),
            ),
        )


# What an import needs (counters may be absent: a dataset may drop them).
_IMPORT_COLUMNS = tuple(c for c in FRAME_COLUMNS if c != "counters")


def _none_if_nan(value: Any) -> Any:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _write_frame(
    df: pd.DataFrame, path: Path, suffix: str, parquet_options: dict[str, Any] | None = None
) -> None:
    """Write ``df`` to a temporary file beside ``path`` and rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        if suffix == ".csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, engine="pyarrow", index=False, **(parquet_options or {}))
        # mkstemp makes the file 0600; an export is meant to be read by others.
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
