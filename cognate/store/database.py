"""The store's SQLite file: opening it (never through a link; read-only opens that never
write), creating or migrating its schema, transactions, and one-line errors for a damaged,
foreign, read-only or too-new file."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from cognate.errors import CognateError
from cognate.store.schema import (
    SCHEMA_SQL,
    SCHEMA_VERSION,
    expected_tables,
    fold_simulator_hosts,
    migrate_to_v2,
    migrate_to_v3,
    migrate_to_v4,
)

BUSY_TIMEOUT_MS = 60_000


class Database:
    """A record store's SQLite connection; use as a context manager or call ``close()``."""

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
                for statement in filter(str.strip, SCHEMA_SQL.split(";")):
                    conn.execute(statement)
                migrate_to_v2(conn)
                migrate_to_v3(conn)
                migrate_to_v4(conn)
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
            elif version > SCHEMA_VERSION:
                raise self._too_new(version)
            elif version < SCHEMA_VERSION:
                if version < 2:
                    migrate_to_v2(conn)
                if version < 3:
                    migrate_to_v3(conn)
                migrate_to_v4(conn)
                conn.execute(
                    "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
                )
            self._check_tables()
            fold_simulator_hosts(conn)
            # A write now, inside this transaction: SQLite opens a file it may not write
            # read-only without a word, and the first record would fail after the work.
            conn.execute("UPDATE meta SET value = value WHERE key = 'schema_version'")
        self.schema = SCHEMA_VERSION

    def _check_tables(self) -> None:
        """Every table and column this schema version reads must be there: a damaged store
        (a table or column dropped by hand or by another tool) is one line naming what is
        missing, not a query failing later on."""
        version = self._schema_version() or SCHEMA_VERSION
        for table, columns in expected_tables(version).items():
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
