"""The record store: matrices, configs and measurements in one SQLite file (WAL).

schema.py (tables, migrations), database.py (opening the file), writes.py (record,
import), reads.py (resume state, frames, export), frames.py (records as pandas frames).

One transaction per ``record`` call, an upsert keyed on (matrix, target, op, width,
config, host), so a collection can be killed at any moment and resumed: a batch is either
all in the store or not at all. WAL lets readers (export, training) run while a collector
writes; ``busy_timeout`` makes concurrent writers queue instead of failing. What each schema
version adds and how an older store is migrated: schema.py.
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
