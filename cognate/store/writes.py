"""The store's write path: measurements recorded one transaction per batch (an upsert keyed on
matrix, target, op, width, config and host), and exported records imported without
overwriting local ones."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from cognate.errors import CognateError
from cognate.hostid import SIMULATED_HOST, HostFacts, host_for, is_simulated
from cognate.matrix import Matrix
from cognate.runner import STATUSES, Measurement
from cognate.store.database import Database
from cognate.store.frames import (
    IMPORT_COLUMNS,
    finite_or_none,
    int_or_none,
    is_missing,
    none_if_nan,
    upgrade_frame,
)
from cognate.store.schema import HOST_COLUMNS, LOAD_COLUMNS

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
                          isa, vector_bits, cpu, l1d_bytes, l2_bytes, llc_bytes, cores)
VALUES (?, ?, ?, ?, (SELECT id FROM configs WHERE hash = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
        ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (matrix_id, target, op, width, config_id, host) DO UPDATE SET
    space_version = excluded.space_version,
    runtime_s = excluded.runtime_s, spread_s = excluded.spread_s, range_s = excluded.range_s,
    isa = excluded.isa, vector_bits = excluded.vector_bits, cpu = excluded.cpu,
    l1d_bytes = excluded.l1d_bytes, l2_bytes = excluded.l2_bytes,
    llc_bytes = excluded.llc_bytes, cores = excluded.cores,
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


class Writes(Database):
    """Recording and importing measurements."""

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
        facts: HostFacts | None = None,
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
        a second measurement of stored records, kept in ``repeats`` beside them. ``facts``:
        the measuring host's ISA, CPU, caches and cores (``Target.host_facts``), or None.
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
                runtimes = tuple(map(finite_or_none, (m.runtime_s, m.spread_s, m.range_s)))
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
                        *(facts or (None,) * len(HOST_COLUMNS)),
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

    def import_frame(self, df: pd.DataFrame) -> tuple[int, int]:
        """Load exported records (``frame`` columns) into this store, one transaction.

        Rows the store already holds (same matrix, target, op, width, config, host) are kept
        as they are: an import never overwrites a local measurement. Returns (added, kept).
        """
        df = upgrade_frame(df)
        missing = [c for c in IMPORT_COLUMNS if c not in df.columns]
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
                if inserted is not None and repeats and not is_missing(row.repeat_status):
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
        noisy = none_if_nan(getattr(row, "repeat_noisy", None))
        conn.execute(
            "INSERT INTO repeats (measurement_id, runtime_s, status, noisy, time)"
            " VALUES (?, ?, ?, ?, ?)",
            (
                measurement_id,
                finite_or_none(none_if_nan(row.repeat_runtime_s)),
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
        noisy = none_if_nan(getattr(row, "noisy", None))
        cursor = conn.execute(
            """INSERT INTO measurements (matrix_id, target, op, width, config_id, space_version,
                   runtime_s, spread_s, range_s, counters, status, error, is_baseline, host,
                   time, attempts, noisy, load1_before, busy_before, load1_after, busy_after,
                   isa, vector_bits, cpu, l1d_bytes, l2_bytes, llc_bytes, cores)
               VALUES ((SELECT id FROM matrices WHERE sha256 = ?), ?, ?, ?,
                       (SELECT id FROM configs WHERE hash = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
                       ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (matrix_id, target, op, width, config_id, host) DO NOTHING""",
            (
                row.matrix_sha256,
                row.target,
                row.op,
                int(row.width),
                row.config_hash,
                row.space_version,
                finite_or_none(none_if_nan(row.runtime_s)),
                finite_or_none(none_if_nan(row.spread_s)),
                finite_or_none(none_if_nan(row.range_s)),
                none_if_nan(row.counters) or "{}",
                row.status,
                none_if_nan(row.error),
                int(bool(row.is_baseline)),
                host,
                pd.Timestamp(row.time).isoformat(timespec="microseconds"),
                int(none_if_nan(getattr(row, "attempts", None)) or 1),
                None if noisy is None or noisy is pd.NA else int(bool(noisy)),
                *(finite_or_none(none_if_nan(getattr(row, c, None))) for c in LOAD_COLUMNS),
                none_if_nan(getattr(row, "isa", None)),
                int_or_none(getattr(row, "vector_bits", None)),
                none_if_nan(getattr(row, "cpu", None)),
                *(int_or_none(getattr(row, c, None)) for c in HOST_COLUMNS[3:]),
            ),
        )
        return cursor.lastrowid if cursor.rowcount == 1 else None
