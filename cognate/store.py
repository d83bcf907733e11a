"""The record store: matrices, configs and measurements in one SQLite file (WAL).

One transaction per ``record`` call, an upsert keyed on (matrix, target, op, width,
config, host), so a collection can be killed at any moment and resumed: a batch is either
all in the store or not at all. WAL lets readers (export, training) run while a collector
writes; ``busy_timeout`` makes concurrent writers queue instead of failing.

Schema 2 (a v1 store is migrated in place when opened for writing; read-only opens read
it as it is):
- ``host`` is a stable machine id (cognate.hostid), ``sim`` for deterministic simulators
  (the migration folds a simulator's per-hostname copies into one, the newest kept);
- ``attempts``: how many times the record was measured (a resume retries failures);
- ``noisy`` and ``load1_before`` / ``busy_before`` / ``load1_after`` / ``busy_after``: the
  machine's load around a wall-clock timing (NULL where not recorded: simulators, v1 rows);
- table ``repeats``: second measurements of some records (collect repeats 5% of each
  matrix's configs to report how reproducible the timings are), each linked to its record.

Schema 3 (a v1 or v2 store is migrated in place the same way; every row is kept):
- ``spread_s`` is the interquartile range of a record's timed samples and ``range_s`` their
  max - min, both from ``cognate.stats.timing_spread`` whichever runner wrote them. Before,
  ``spread_s`` held max - min for collect's and most runners' records and the
  interquartile range for ``tune --verify``'s interleaved ones; the migration moves each
  old value to the column of its meaning (``_old_spread_meaning``) and leaves the other
  NULL (it cannot be recomputed without the samples). A simulator's 0 is both.
- ``isa`` / ``vector_bits``: the vector ISA the measuring host's kernels were built for
  (cpu: 'avx512' / 'avx2' / 'avx' / 'generic' and 512 / 256 / 128); NULL for other targets
  and for records made before schema 3.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from cognate.errors import CognateError
from cognate.hostid import SIMULATED_HOST, host_for, is_simulated
from cognate.matrix import Matrix
from cognate.paths import cognate_home, default_db_path  # noqa: F401 - re-exported
from cognate.runner import MISMATCH_PREFIX, STATUSES, Measurement
from cognate.util import atomic_path

SCHEMA_VERSION = 3
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
    "range_s",
    "status",
    "error",
    "is_baseline",
    "host",
    "time",
    "counters",
    "attempts",
    "noisy",
    "load1_before",
    "busy_before",
    "load1_after",
    "busy_after",
    "isa",
    "vector_bits",
)
_LOAD_COLUMNS = ("load1_before", "busy_before", "load1_after", "busy_after")

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
# Schema 2, applied to a new store after _SCHEMA and to a v1 store as its migration.
_V2_COLUMNS = (
    ("attempts", "INTEGER NOT NULL DEFAULT 1"),
    ("noisy", "INTEGER"),
    *((name, "REAL") for name in _LOAD_COLUMNS),
)
_V2_REPEATS = """
CREATE TABLE IF NOT EXISTS repeats (
    id INTEGER PRIMARY KEY,
    measurement_id INTEGER NOT NULL REFERENCES measurements(id) ON DELETE CASCADE,
    runtime_s REAL,
    spread_s REAL,
    status TEXT NOT NULL,
    error TEXT,
    noisy INTEGER,
    load1_before REAL, busy_before REAL, load1_after REAL, busy_after REAL,
    time TEXT NOT NULL
)"""

# Schema 3, applied after schema 2 (to a new store and as the migration of an older one).
_V3_COLUMNS = (("range_s", "REAL"), ("isa", "TEXT"), ("vector_bits", "INTEGER"))
_V3_REPEAT_COLUMNS = (("range_s", "REAL"),)

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
                          spread_s, range_s, counters, status, error, is_baseline, host, time,
                          noisy, load1_before, busy_before, load1_after, busy_after,
                          isa, vector_bits)
VALUES (?, ?, ?, ?, (SELECT id FROM configs WHERE hash = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
        ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (matrix_id, target, op, width, config_id, host) DO UPDATE SET
    space_version = excluded.space_version,
    runtime_s = excluded.runtime_s, spread_s = excluded.spread_s, range_s = excluded.range_s,
    isa = excluded.isa, vector_bits = excluded.vector_bits,
    counters = excluded.counters, status = excluded.status, error = excluded.error,
    is_baseline = excluded.is_baseline, time = excluded.time,
    attempts = measurements.attempts + 1, noisy = excluded.noisy,
    load1_before = excluded.load1_before, busy_before = excluded.busy_before,
    load1_after = excluded.load1_after, busy_after = excluded.busy_after
"""
_INSERT_REPEAT = """
INSERT INTO repeats (measurement_id, runtime_s, spread_s, range_s, status, error, noisy,
                     load1_before, busy_before, load1_after, busy_after, time)
SELECT id, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM measurements
WHERE matrix_id = ? AND target = ? AND op = ? AND width = ? AND host = ?
  AND config_id = (SELECT id FROM configs WHERE hash = ?)
"""
_FRAME_QUERY = """
SELECT r.id AS record_id, m.name AS matrix, m.sha256 AS matrix_sha256, m.source, m.rows, m.cols, m.nnz,
       r.target, r.op, r.width, c.json AS config, c.hash AS config_hash, r.space_version,
       r.runtime_s, r.spread_s, {range_column}, r.status, r.error, r.is_baseline, r.host,
       r.time, r.counters, {v2_columns}, {isa_columns}
FROM measurements r
JOIN matrices m ON m.id = r.matrix_id
JOIN configs c ON c.id = r.config_id
"""


_FRAME_DTYPES = {
    **{c: "int64" for c in ("rows", "cols", "nnz", "width", "attempts")},
    **{c: "float64" for c in ("runtime_s", "spread_s", "range_s", *_LOAD_COLUMNS)},
    "is_baseline": "bool",
    "noisy": "boolean",  # NULL where no load was recorded
    "isa": "object",  # NULL: not a cpu record, or one older than schema 3
    "vector_bits": "Int64",
}


def _finite_or_none(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


_RETRYABLE = ("timeout", "error")


def _load_values(load: tuple[Any, Any] | None) -> tuple[Any, ...]:
    """(noisy, load1_before, busy_before, load1_after, busy_after); all NULL without a load."""
    if load is None:
        return (None,) * 5
    before, after = (x.as_dict() if hasattr(x, "as_dict") else dict(x) for x in load)
    noisy = bool(before.get("unreliable") or after.get("unreliable"))
    return (
        int(noisy),
        before.get("load1"),
        before.get("busy_cores"),
        after.get("load1"),
        after.get("busy_cores"),
    )


def _json_default(value: Any) -> Any:
    """Counters may hold numpy scalars or arrays: store them as plain JSON numbers/lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"counter value of type {type(value).__name__} is not JSON-serialisable")


class Store:
    """A record store in one SQLite file; use as a context manager or call ``close()``."""

    def __init__(self, path: str | Path, readonly: bool = False) -> None:
        """Open (creating when writable and missing) the store at ``path``. ``readonly``:
        for export, info and training: never writes, works on read-only media, and reads a
        store of an older schema as it is."""
        self.path = Path(path).expanduser()
        self.readonly = readonly
        if self.path.exists() and self.path.is_dir():
            raise CognateError(f"{self.path}: is a directory, not a record store")
        if readonly and not self.path.is_file():
            raise CognateError(f"{self.path}: no such record store")
        if not readonly:
            self._refuse_links()
            self._make_parent()
        try:
            self._conn = self._connect()
            self._setup()
        except sqlite3.DatabaseError as exc:
            self._close_quietly()
            if "readonly" in str(exc):
                raise CognateError(
                    f"{self.path}: record store is read-only ({exc}); nothing can be recorded "
                    "into it (give a writable --db)"
                ) from None
            raise CognateError(f"{self.path}: not a usable record store ({exc})") from None
        except CognateError:
            self._close_quietly()
            raise

    def _refuse_links(self) -> None:
        """SQLite follows a symbolic link and writes the file it points at (and its -wal,
        -shm, -journal beside it): a store opened for writing is never a link, so a link
        planted at a store's path cannot make cognate write a file elsewhere."""
        for suffix in ("", "-wal", "-shm", "-journal"):
            path = Path(f"{self.path}{suffix}")
            if path.is_symlink():
                raise CognateError(
                    f"{path}: is a symbolic link; refusing to write a record store through "
                    "it (give the real path)"
                )

    def _make_parent(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # e.g. a parent that is a regular file
            raise CognateError(
                f"{self.path}: cannot create its folder: {exc.strerror or exc}"
            ) from None

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, one transaction per call.
        options = {"timeout": BUSY_TIMEOUT_MS / 1000, "isolation_level": None}
        if not self.readonly:
            return sqlite3.connect(self.path, **options)
        # Read-only: mode=ro still needs to write WAL's -shm file beside the store; where
        # the folder is not writable (read-only media) the file is opened as immutable.
        writable = os.access(self.path.parent, os.W_OK) and os.access(self.path, os.W_OK)
        query = "mode=ro" if writable else "immutable=1"
        uri = f"{self.path.resolve().as_uri()}?{query}"
        return sqlite3.connect(uri, uri=True, **options)

    # -- connection and schema -------------------------------------------------------

    def _setup(self) -> None:
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        if self.readonly:
            self.schema = self._readonly_version()
            self._check_tables()
            return
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
                self._migrate_to_v2()
                self._migrate_to_v3()
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
            elif version > SCHEMA_VERSION:
                raise self._too_new(version)
            elif version < SCHEMA_VERSION:
                if version < 2:
                    self._migrate_to_v2()
                self._migrate_to_v3()
                conn.execute(
                    "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
                )
            self._check_tables()
            self._fold_simulator_hosts()
            # A write now, inside this transaction: SQLite opens a file it may not write
            # read-only without a word, and the first record would fail after the work.
            conn.execute("UPDATE meta SET value = value WHERE key = 'schema_version'")
        self.schema = SCHEMA_VERSION

    def _check_tables(self) -> None:
        """Every table and column this schema version reads must be there: a damaged store
        (a table or column dropped by hand or by another tool) is one line naming what is
        missing, not a query failing later on."""
        version = self._schema_version() or SCHEMA_VERSION
        for table, columns in _expected_tables(version).items():
            have = {row[1] for row in self._conn.execute(f"PRAGMA table_info({table})")}
            if not have:
                raise CognateError(f"{self.path}: damaged record store: no table {table!r}")
            missing = [c for c in columns if c not in have]
            if missing:
                raise CognateError(
                    f"{self.path}: damaged record store: table {table!r} has no column(s) "
                    f"{', '.join(missing)}"
                )

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """A read that fails inside SQLite (a corrupt page) is one line, not a traceback."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            raise CognateError(f"{self.path}: cannot read the record store ({exc})") from None

    def _too_new(self, version: int) -> CognateError:
        return CognateError(
            f"{self.path}: record store schema version {version} is newer than this "
            f"cognate supports ({SCHEMA_VERSION}); upgrade cognate"
        )

    def _readonly_version(self) -> int:
        version = self._schema_version()
        if version is None:
            raise CognateError(f"{self.path}: an empty SQLite file, not a record store")
        if version > SCHEMA_VERSION:
            raise self._too_new(version)
        return version

    def _migrate_to_v2(self) -> None:
        """v1 -> v2 in the open transaction: new columns and the repeats table (the
        simulator records are folded by ``_fold_simulator_hosts`` right after)."""
        conn = self._conn
        have = {row[1] for row in conn.execute("PRAGMA table_info(measurements)")}
        for name, kind in _V2_COLUMNS:
            if name not in have:
                conn.execute(f"ALTER TABLE measurements ADD COLUMN {name} {kind}")
        conn.execute(_V2_REPEATS)

    def _migrate_to_v3(self) -> None:
        """v2 -> v3 in the open transaction: ``range_s``, ``isa`` and ``vector_bits``, and
        each old ``spread_s`` moved to the column of its meaning (the module docstring)."""
        conn = self._conn
        for table, columns in (("measurements", _V3_COLUMNS), ("repeats", _V3_REPEAT_COLUMNS)):
            have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            for name, kind in columns:
                if name not in have:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
        conn.create_function("old_spread_meaning", 2, _old_spread_meaning, deterministic=True)
        # repeats first: their meaning is their record's (collect's, never a verify's)
        conn.execute(
            """UPDATE repeats SET range_s = spread_s, spread_s = CASE
                   WHEN old_spread_meaning(
                       (SELECT target FROM measurements r WHERE r.id = measurement_id), '{}'
                   ) = 'range' THEN NULL ELSE spread_s END
               WHERE spread_s IS NOT NULL"""
        )
        conn.execute(
            """UPDATE measurements SET
                   range_s = CASE WHEN old_spread_meaning(target, counters) = 'iqr'
                                  THEN NULL ELSE spread_s END,
                   spread_s = CASE WHEN old_spread_meaning(target, counters) = 'range'
                                   THEN NULL ELSE spread_s END
               WHERE spread_s IS NOT NULL"""
        )

    def _fold_simulator_hosts(self) -> None:
        """One host-independent copy of each simulator record, the newest kept. Run at every
        writable open, not only in the migration: an older cognate that had the store open
        before it was migrated may still have added rows under its hostname."""
        conn = self._conn
        stored = [r[0] for r in conn.execute("SELECT DISTINCT target FROM measurements")]
        for target in filter(is_simulated, stored):
            stray = conn.execute(
                "SELECT 1 FROM measurements WHERE target = ? AND host != ? LIMIT 1",
                (target, SIMULATED_HOST),
            ).fetchone()
            if stray is None:
                continue
            conn.execute(
                """DELETE FROM measurements WHERE target = ? AND id NOT IN (
                       SELECT max(id) FROM measurements WHERE target = ?
                       GROUP BY matrix_id, op, width, config_id)""",
                (target, target),
            )
            conn.execute(
                "UPDATE measurements SET host = ? WHERE target = ?", (SIMULATED_HOST, target)
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
        load: tuple[Any, Any] | None = None,
        repeat: bool = False,
        isa: tuple[str, int] | None = None,
    ) -> int:
        """Store a batch of measurements in one transaction; returns the rows written.

        The one write path of the store (collect, tune --verify, imports). A
        re-measurement of the same (matrix, target, op, width, config, host) replaces the
        old row and counts one more attempt. ``host``: cognate.hostid.host_for decides
        (``sim`` for simulators, else the given host or this machine's id).
        ``is_baseline`` is set where the config's hash equals ``baseline_hash``;
        ``space_version`` (the space's YAML version) is kept per record. ``load``: the
        machine's load (timing.Load, or its ``as_dict()``) before and after the batch was
        timed; the records are marked noisy where either was busy. ``repeat``: the batch is
        a second measurement of stored records, kept in ``repeats`` beside them. ``isa``:
        (name, vector bits) of the measuring host (``Target.host_isa``), or None.
        """
        if self.readonly:
            raise CognateError(f"{self.path}: opened read-only")
        if int(width) != width or width < 1:
            raise CognateError(f"record: dense width must be a positive integer, got {width!r}")
        host = host_for(target, host)
        now = datetime.now(UTC).isoformat(timespec="microseconds")
        loads = _load_values(load)
        written = 0
        with self._transaction() as conn:
            matrix_id = self._matrix_id(matrix)
            # Iterated inside the transaction, so a crash mid-batch leaves nothing behind.
            for m in measurements:
                self._check(m, target, op)
                cfg = m.config
                runtimes = tuple(map(_finite_or_none, (m.runtime_s, m.spread_s, m.range_s)))
                if repeat:
                    cursor = conn.execute(
                        _INSERT_REPEAT,
                        (*runtimes, m.status, m.error, *loads, now)
                        + (matrix_id, target, op, int(width), host, cfg.hash),
                    )
                    if cursor.rowcount != 1:
                        raise CognateError(f"record: repeat of config {cfg.hash} not stored")
                    written += 1
                    continue
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
                        *runtimes,
                        json.dumps(m.counters or {}, sort_keys=True, default=_json_default),
                        m.status,
                        m.error,
                        int(baseline_hash is not None and cfg.hash == baseline_hash),
                        host,
                        now,
                        *loads,
                        *(isa or (None, None)),
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

    def resume_state(
        self, matrix: Matrix, target: str, op: str, width: int, host: str | None = None
    ) -> dict[str, tuple[str, int]]:
        """config hash -> (status, attempts) of the records stored for this run on ``host``
        (resolved as ``record`` does; ``"*"``: any host): what a resume decides by."""
        query = """SELECT c.hash, r.status, {attempts}, r.error FROM measurements r
               JOIN matrices m ON m.id = r.matrix_id JOIN configs c ON c.id = r.config_id
               WHERE m.sha256 = ? AND r.target = ? AND r.op = ? AND r.width = ?"""
        query = query.format(attempts="r.attempts" if self.schema >= 2 else "1")
        params: list[Any] = [matrix.sha256, target, op, int(width)]
        if host != "*":
            query += " AND r.host = ?"
            params.append(host_for(target, host))
        state: dict[str, tuple[str, int]] = {}
        with self._reading():
            rows = self._conn.execute(query, params).fetchall()
        for config_hash, status, attempts, error in rows:
            if status == "error" and str(error or "").startswith(MISMATCH_PREFIX):
                status = "mismatch"
            # Several hosts ("*"): a success anywhere counts; else the most attempts.
            old = state.get(config_hash)
            if old is None or (status not in _RETRYABLE, attempts) > (
                old[0] not in _RETRYABLE,
                old[1],
            ):
                state[config_hash] = (status, int(attempts))
        return state

    def unrepeated(
        self, matrix: Matrix, target: str, op: str, width: int, host: str | None = None
    ) -> dict[str, float]:
        """config hash -> runtime of this run's ok records on ``host`` that have no repeat
        yet (a collector killed before the end of a matrix took none): what a resume must
        still time again."""
        if self.schema < 2:
            return {}
        query = """SELECT c.hash, r.runtime_s FROM measurements r
               JOIN matrices m ON m.id = r.matrix_id JOIN configs c ON c.id = r.config_id
               WHERE m.sha256 = ? AND r.target = ? AND r.op = ? AND r.width = ?
                 AND r.host = ? AND r.status = 'ok' AND r.runtime_s > 0
                 AND NOT EXISTS (SELECT 1 FROM repeats p WHERE p.measurement_id = r.id)"""
        params = (matrix.sha256, target, op, int(width), host_for(target, host))
        with self._reading():
            return {h: float(t) for h, t in self._conn.execute(query, params).fetchall()}

    def measured_hashes(
        self, matrix: Matrix, target: str, op: str, width: int, host: str | None = None
    ) -> set[str]:
        """Hashes of configs already stored for this run (any status)."""
        return set(self.resume_state(matrix, target, op, width, host))

    def repeats(self) -> pd.DataFrame:
        """Each repeat beside the record it repeats: matrix, matrix_sha256, target, op, width,
        config_hash, host, first_s (the record's runtime), repeat_s, status, repeat_status,
        noisy, time (the repeat's)."""
        if self.schema < 2:
            return pd.DataFrame()
        with self._reading():
            return self._repeats_frame()

    def _repeats_frame(self) -> pd.DataFrame:
        return pd.read_sql_query(
            """SELECT m.name AS matrix, m.sha256 AS matrix_sha256, r.target, r.op, r.width,
                      c.hash AS config_hash, r.host, r.runtime_s AS first_s,
                      p.runtime_s AS repeat_s, r.status, p.status AS repeat_status, p.noisy,
                      p.time
               FROM repeats p JOIN measurements r ON r.id = p.measurement_id
               JOIN matrices m ON m.id = r.matrix_id JOIN configs c ON c.id = r.config_id
               ORDER BY p.id""",
            self._conn,
        )

    def frame(
        self, target: str | None = None, op: str | None = None, status: str | None = None
    ) -> pd.DataFrame:
        """All measurements joined with their matrix and config, one row each."""
        clauses, params = [], []
        for column, value in (("r.target", target), ("r.op", op), ("r.status", status)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if self.schema >= 2:
            v2 = ", ".join(f"r.{c}" for c in ("attempts", "noisy", *_LOAD_COLUMNS))
        else:  # a v1 store opened read-only: the columns it lacks, as v1 rows migrate
            v2 = ", ".join(["1 AS attempts"] + [f"NULL AS {c}" for c in ("noisy", *_LOAD_COLUMNS)])
        v3 = [f"r.{c}" if self.schema >= 3 else f"NULL AS {c}" for c, _ in _V3_COLUMNS]
        query = _FRAME_QUERY.format(
            range_column=v3[0], v2_columns=v2, isa_columns=", ".join(v3[1:])
        )
        query += " WHERE " + " AND ".join(clauses) if clauses else ""
        query += " ORDER BY r.id"
        # One statement = one consistent WAL snapshot, even while a writer commits.
        with self._reading():
            df = pd.read_sql_query(query, self._conn, params=params)
        if self.schema < 3:  # an older store opened read-only: its spreads as v3 reads them
            df = upgrade_frame(df.drop(columns=[c for c, _ in _V3_COLUMNS]))
        return self._typed(df)[list(FRAME_COLUMNS)]

    def _typed(self, df: pd.DataFrame) -> pd.DataFrame:
        """Fixed dtypes, so an empty or all-null frame exports with the same schema; a value
        that is not of its column's type (text in ``runtime_s``, a bad ``time``, written by
        another tool) is one line naming the record and column."""
        for column, dtype in _FRAME_DTYPES.items():
            try:
                df[column] = df[column].astype(dtype)
            except (ValueError, TypeError, OverflowError):
                self._bad_value(df, column, pd.to_numeric(df[column], errors="coerce"), "a number")
        try:
            df["time"] = pd.to_datetime(df["time"], utc=True, format="ISO8601")
        except (ValueError, TypeError, OverflowError):
            times = pd.to_datetime(df["time"], utc=True, format="ISO8601", errors="coerce")
            self._bad_value(df, "time", times, "an ISO 8601 time")
        return df

    def _bad_value(self, df: pd.DataFrame, column: str, parsed: pd.Series, kind: str) -> None:
        """Raise the line for the first row of ``column`` that ``parsed`` could not read."""
        bad = df[df[column].notna() & parsed.isna()]
        where = f"record {int(bad['record_id'].iloc[0])}: " if len(bad) else ""
        value = f"{bad[column].iloc[0]!r}" if len(bad) else "a value"
        raise CognateError(
            f"{self.path}: damaged record store: {where}column {column} holds {value[:60]}, "
            f"not {kind}"
        )

    def matrices(self) -> pd.DataFrame:
        """One row per stored matrix, with how many measurements it has."""
        with self._reading():
            return self._matrices_frame()

    def _matrices_frame(self) -> pd.DataFrame:
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
        df = upgrade_frame(df)
        missing = [c for c in _IMPORT_COLUMNS if c not in df.columns]
        if missing:
            raise CognateError(f"import: records lack column(s) {', '.join(missing)}")
        if "counters" not in df.columns:
            df = df.assign(counters="{}")
        before = self._count()
        with self._transaction() as conn:
            # matrices and configs repeat across rows: each is written once
            for row in df.drop_duplicates("matrix_sha256").itertuples(index=False):
                conn.execute(
                    _UPSERT_MATRIX,
                    (
                        row.matrix,
                        row.source,
                        row.matrix_sha256,
                        *map(int, (row.rows, row.cols, row.nnz)),
                    ),
                )
            for row in df.drop_duplicates("config_hash").itertuples(index=False):
                conn.execute(
                    "INSERT INTO configs (target, op, space_version, json, hash)"
                    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (hash) DO NOTHING",
                    (row.target, row.op, row.space_version, row.config, row.config_hash),
                )
            repeats = "repeat_status" in df.columns
            for row in df.itertuples(index=False):
                inserted = self._import_measurement(conn, row)
                # a repeat belongs to its own record only: never to a local record the
                # import kept (a data set could otherwise attach its timings to ours)
                if inserted is not None and repeats and not _is_missing(row.repeat_status):
                    self._import_repeat(conn, row, inserted)
        added = self._count() - before
        return added, len(df) - added

    def _count(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM measurements").fetchone()[0])

    @staticmethod
    def _import_repeat(conn: sqlite3.Connection, row: Any, measurement_id: int) -> None:
        """A data set row's repeat (a second timing of it, see ``repeats``), attached to the
        measurement this import just stored from the same row."""
        if row.repeat_status not in STATUSES:
            raise CognateError(f"import: unknown repeat status {row.repeat_status!r}")
        noisy = _none_if_nan(getattr(row, "repeat_noisy", None))
        conn.execute(
            "INSERT INTO repeats (measurement_id, runtime_s, status, noisy, time)"
            " VALUES (?, ?, ?, ?, ?)",
            (
                measurement_id,
                _finite_or_none(_none_if_nan(row.repeat_runtime_s)),
                row.repeat_status,
                None if noisy is None else int(bool(noisy)),
                pd.Timestamp(row.repeat_time).isoformat(timespec="microseconds"),
            ),
        )

    @staticmethod
    def _import_measurement(conn: sqlite3.Connection, row: Any) -> int | None:
        """Store one data set row unless the store holds its record; the new row's id, or
        None when it was kept as it was."""
        if row.status not in STATUSES:
            raise CognateError(f"import: unknown status {row.status!r}")
        # a simulator's records are host-independent, whatever an older export called them
        host = SIMULATED_HOST if is_simulated(row.target) else row.host
        noisy = _none_if_nan(getattr(row, "noisy", None))
        cursor = conn.execute(
            """INSERT INTO measurements (matrix_id, target, op, width, config_id, space_version,
                   runtime_s, spread_s, range_s, counters, status, error, is_baseline, host,
                   time, attempts, noisy, load1_before, busy_before, load1_after, busy_after,
                   isa, vector_bits)
               VALUES ((SELECT id FROM matrices WHERE sha256 = ?), ?, ?, ?,
                       (SELECT id FROM configs WHERE hash = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
                       ?, ?, ?, ?, ?, ?, ?, ?)
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
                _finite_or_none(_none_if_nan(row.range_s)),
                _none_if_nan(row.counters) or "{}",
                row.status,
                _none_if_nan(row.error),
                int(bool(row.is_baseline)),
                host,
                pd.Timestamp(row.time).isoformat(timespec="microseconds"),
                int(_none_if_nan(getattr(row, "attempts", None)) or 1),
                None if noisy is None or noisy is pd.NA else int(bool(noisy)),
                *(_finite_or_none(_none_if_nan(getattr(row, c, None))) for c in _LOAD_COLUMNS),
                _none_if_nan(getattr(row, "isa", None)),
                _int_or_none(getattr(row, "vector_bits", None)),
            ),
        )
        return cursor.lastrowid if cursor.rowcount == 1 else None


@functools.cache
def _expected_tables(version: int) -> dict[str, tuple[str, ...]]:
    """table -> columns of a store of schema ``version`` (1 to 3), read off the schema this
    module creates (an in-memory store), so the check can never drift from it."""
    conn = sqlite3.connect(":memory:")
    try:
        for statement in filter(str.strip, _SCHEMA.split(";")):
            conn.execute(statement)
        if version >= 2:
            for name, kind in _V2_COLUMNS:
                conn.execute(f"ALTER TABLE measurements ADD COLUMN {name} {kind}")
            conn.execute(_V2_REPEATS)
        if version >= 3:
            for table, columns in (("measurements", _V3_COLUMNS), ("repeats", _V3_REPEAT_COLUMNS)):
                for name, kind in columns:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: tuple(row[1] for row in conn.execute(f"PRAGMA table_info({t})")) for t in tables}
    finally:
        conn.close()


# What an import needs: the v1 columns (counters may be absent: a dataset may drop them;
# schema-2 columns are taken where present).
_IMPORT_COLUMNS = FRAME_COLUMNS[: FRAME_COLUMNS.index("counters")]


def _int_or_none(value: Any) -> int | None:
    value = _none_if_nan(value)
    return None if value is None else int(value)


def _old_spread_meaning(target: Any, counters: Any) -> str:
    """What a ``spread_s`` written before schema 3 measured: 'both' for a simulator's 0 (no
    spread at all), 'iqr' for ``tune --verify``'s interleaved timing (``Timed.spread``),
    else 'range' (max - min: collect's cpu worker, the sequential verify, the gpu runner)."""
    if isinstance(target, str) and is_simulated(target):
        return "both"
    try:
        verify = json.loads(counters).get("verify") if isinstance(counters, str) else None
    except (ValueError, AttributeError, RecursionError):  # deep nesting must not block
        verify = None  # the migration for good: such counters are no verify's
    return "iqr" if verify == "interleaved" else "range"


def upgrade_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Records exported before schema 3 (no ``range_s`` column) in schema 3's columns: each
    old ``spread_s`` in the column of its meaning (``_old_spread_meaning``; the other NULL),
    ``isa`` and ``vector_bits`` NULL. A frame that has ``range_s`` (or lacks the columns the
    rule reads: the import's check names them) is returned as it is."""
    if "range_s" in df.columns or not {"spread_s", "target"} <= set(df.columns):
        return df
    df = df.copy()
    counters = df["counters"] if "counters" in df.columns else pd.Series(None, index=df.index)
    meaning = pd.Series(
        [_old_spread_meaning(t, c) for t, c in zip(df["target"], counters, strict=True)],
        index=df.index,
        dtype=object,
    )
    old = df["spread_s"]
    df["spread_s"] = old.where(meaning != "range")
    df.insert(df.columns.get_loc("spread_s") + 1, "range_s", old.where(meaning != "iqr"))
    at = df.columns.get_loc("busy_after") + 1 if "busy_after" in df.columns else len(df.columns)
    for offset, (column, empty) in enumerate((("isa", None), ("vector_bits", pd.NA))):
        if column not in df.columns:
            dtype = _FRAME_DTYPES[column]
            df.insert(at + offset, column, pd.Series([empty] * len(df), df.index, dtype))
    return df


def _is_missing(value: Any) -> bool:
    return _none_if_nan(value) is None


def _none_if_nan(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    return None if isinstance(value, float) and math.isnan(value) else value


def _write_frame(
    df: pd.DataFrame, path: Path, suffix: str, parquet_options: dict[str, Any] | None = None
) -> None:
    """Write ``df`` to a temporary file beside ``path`` and rename it into place."""
    with atomic_path(path) as tmp:  # mode 0644: an export is meant to be read by others
        if suffix == ".csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, engine="pyarrow", index=False, **(parquet_options or {}))
