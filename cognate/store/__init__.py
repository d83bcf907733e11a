"""The record store: matrices, configs and measurements in one SQLite file (WAL).

schema.py (tables, migrations), database.py (opening the file), writes.py (record,
import), reads.py (resume state, frames, export), frames.py (records as pandas frames).

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

from cognate.paths import cognate_home, default_db_path
from cognate.store.database import BUSY_TIMEOUT_MS
from cognate.store.frames import (
    FRAME_COLUMNS,
    IMPORT_COLUMNS,
    is_missing,
    none_if_nan,
    upgrade_frame,
    write_frame,
)
from cognate.store.reads import Reads
from cognate.store.schema import LOAD_COLUMNS, SCHEMA_VERSION
from cognate.store.writes import Writes

__all__ = [
    "BUSY_TIMEOUT_MS",
    "FRAME_COLUMNS",
    "IMPORT_COLUMNS",
    "LOAD_COLUMNS",
    "SCHEMA_VERSION",
    "Store",
    "cognate_home",
    "default_db_path",
    "is_missing",
    "none_if_nan",
    "upgrade_frame",
    "write_frame",
]


class Store(Writes, Reads):
    """A record store in one SQLite file; use as a context manager or call ``close()``."""
