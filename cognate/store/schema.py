"""The record store's schema: the tables of schema 4, the columns each older schema lacks, and
the in-place migrations (v1 -> v2 -> v3 -> v4) run inside the transaction that opens a store.

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
  old value to the column of its meaning (``old_spread_meaning``) and leaves the other
  NULL (it cannot be recomputed without the samples). A simulator's 0 is both.
- ``isa`` / ``vector_bits``: the vector ISA the measuring host's kernels were built for
  (cpu: 'avx512' / 'avx2' / 'avx' / 'generic' and 512 / 256 / 128); NULL for other targets
  and for records made before schema 3.

Schema 4 (older stores are migrated in place the same way):
- ``cpu``, ``l1d_bytes``, ``l2_bytes``, ``llc_bytes``, ``cores``: the measuring host's CPU
  (model and family/model numbers), its cache sizes and cores (``cognate.hostid``), beside
  ``isa`` / ``vector_bits``: what a cost model reads of the host. NULL for simulators. The
  migration fills them for the records of this machine's own id (the id hashes exactly
  these facts, so a record with it was measured on a machine that has them); records of
  other hosts keep NULL until an import brings their facts.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from typing import Any

from cognate.hostid import SIMULATED_HOST, host_profile, is_simulated, machine_id
from cognate.runner import STATUSES

SCHEMA_VERSION = 4
LOAD_COLUMNS = ("load1_before", "busy_before", "load1_after", "busy_after")

SCHEMA_SQL = f"""
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


# Schema 2, applied to a new store after SCHEMA_SQL and to a v1 store as its migration.
V2_COLUMNS = (
    ("attempts", "INTEGER NOT NULL DEFAULT 1"),
    ("noisy", "INTEGER"),
    *((name, "REAL") for name in LOAD_COLUMNS),
)


V2_REPEATS = """
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
V3_COLUMNS = (("range_s", "REAL"), ("isa", "TEXT"), ("vector_bits", "INTEGER"))


V3_REPEAT_COLUMNS = (("range_s", "REAL"),)


# Schema 4: the measuring host's CPU, caches and cores.
V4_COLUMNS = (
    ("cpu", "TEXT"),
    ("l1d_bytes", "INTEGER"),
    ("l2_bytes", "INTEGER"),
    ("llc_bytes", "INTEGER"),
    ("cores", "INTEGER"),
)
# Every column that describes the measuring host (hostid.HostFacts, in its order).
HOST_COLUMNS: tuple[str, ...] = ("isa", "vector_bits", *(name for name, _ in V4_COLUMNS))


@functools.cache
def expected_tables(version: int) -> dict[str, tuple[str, ...]]:
    """table -> columns of a store of schema ``version`` (1 to 4), read off the schema this
    module creates (an in-memory store), so the check can never drift from it."""
    conn = sqlite3.connect(":memory:")
    try:
        for statement in filter(str.strip, SCHEMA_SQL.split(";")):
            conn.execute(statement)
        if version >= 2:
            for name, kind in V2_COLUMNS:
                conn.execute(f"ALTER TABLE measurements ADD COLUMN {name} {kind}")
            conn.execute(V2_REPEATS)
        if version >= 3:
            for table, columns in (("measurements", V3_COLUMNS), ("repeats", V3_REPEAT_COLUMNS)):
                for name, kind in columns:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
        if version >= 4:
            for name, kind in V4_COLUMNS:
                conn.execute(f"ALTER TABLE measurements ADD COLUMN {name} {kind}")
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: tuple(row[1] for row in conn.execute(f"PRAGMA table_info({t})")) for t in tables}
    finally:
        conn.close()


def old_spread_meaning(target: Any, counters: Any) -> str:
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


def migrate_to_v2(conn: sqlite3.Connection) -> None:
    """v1 -> v2 in the open transaction: new columns and the repeats table (the
    simulator records are folded by ``_fold_simulator_hosts`` right after)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(measurements)")}
    for name, kind in V2_COLUMNS:
        if name not in have:
            conn.execute(f"ALTER TABLE measurements ADD COLUMN {name} {kind}")
    conn.execute(V2_REPEATS)


def migrate_to_v3(conn: sqlite3.Connection) -> None:
    """v2 -> v3 in the open transaction: ``range_s``, ``isa`` and ``vector_bits``, and
    each old ``spread_s`` moved to the column of its meaning (the module docstring)."""
    for table, columns in (("measurements", V3_COLUMNS), ("repeats", V3_REPEAT_COLUMNS)):
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        for name, kind in columns:
            if name not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
    conn.create_function("old_spread_meaning", 2, old_spread_meaning, deterministic=True)
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


def migrate_to_v4(conn: sqlite3.Connection) -> None:
    """v3 -> v4 in the open transaction: the host columns, filled for this machine's own
    records (the module docstring)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(measurements)")}
    for name, kind in V4_COLUMNS:
        if name not in have:
            conn.execute(f"ALTER TABLE measurements ADD COLUMN {name} {kind}")
    profile = host_profile()
    conn.execute(
        """UPDATE measurements SET cpu = ?, l1d_bytes = ?, l2_bytes = ?, llc_bytes = ?, cores = ?
           WHERE host = ? AND isa IS NOT NULL AND cpu IS NULL""",
        (
            profile.cpu,
            profile.l1d_bytes,
            profile.l2_bytes,
            profile.llc_bytes,
            profile.cores,
            machine_id(),
        ),
    )


def fold_simulator_hosts(conn: sqlite3.Connection) -> None:
    """One host-independent copy of each simulator record, the newest kept. Run at every
    writable open, not only in the migration: an older cognate that had the store open
    before it was migrated may still have added rows under its hostname."""
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
        conn.execute("UPDATE measurements SET host = ? WHERE target = ?", (SIMULATED_HOST, target))
