"""Records as pandas frames: the columns every export carries, their dtypes, the upgrade of
an older export to schema 4's columns, and the atomic write of a frame to a file."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cognate.store.schema import HOST_COLUMNS, LOAD_COLUMNS, old_spread_meaning
from cognate.util import atomic_path

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
    "cpu",
    "l1d_bytes",
    "l2_bytes",
    "llc_bytes",
    "cores",
)


FRAME_QUERY = """
SELECT r.id AS record_id, m.name AS matrix, m.sha256 AS matrix_sha256, m.source, m.rows, m.cols, m.nnz,
       r.target, r.op, r.width, c.json AS config, c.hash AS config_hash, r.space_version,
       r.runtime_s, r.spread_s, {range_column}, r.status, r.error, r.is_baseline, r.host,
       r.time, r.counters, {v2_columns}, {host_columns}
FROM measurements r
JOIN matrices m ON m.id = r.matrix_id
JOIN configs c ON c.id = r.config_id
"""


FRAME_DTYPES = {
    **{c: "int64" for c in ("rows", "cols", "nnz", "width", "attempts")},
    **{c: "float64" for c in ("runtime_s", "spread_s", "range_s", *LOAD_COLUMNS)},
    "is_baseline": "bool",
    "noisy": "boolean",  # NULL where no load was recorded
    "isa": "object",  # NULL: not a cpu record, or one older than schema 3
    "vector_bits": "Int64",
    "cpu": "object",  # NULL: not a cpu record, or a host whose facts were never recorded
    **{c: "Int64" for c in ("l1d_bytes", "l2_bytes", "llc_bytes", "cores")},
}


# What an import needs: the v1 columns (counters may be absent: a dataset may drop them;
# schema-2 columns are taken where present).
IMPORT_COLUMNS = FRAME_COLUMNS[: FRAME_COLUMNS.index("counters")]


def finite_or_none(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def int_or_none(value: Any) -> int | None:
    value = none_if_nan(value)
    return None if value is None else int(value)


def is_missing(value: Any) -> bool:
    """None, pandas' NA / NaT, or a float NaN: a value a frame's cell does not hold."""
    return (
        value is None
        or value is pd.NA
        or value is pd.NaT
        or (isinstance(value, (float, np.floating)) and math.isnan(value))
    )


def none_if_nan(value: Any) -> Any:
    return None if is_missing(value) else value


def upgrade_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Records exported before schema 4 in schema 4's columns: before schema 3 (no
    ``range_s`` column) each old ``spread_s`` moves to the column of its meaning
    (``old_spread_meaning``; the other NULL); the host columns a file lacks (``isa``,
    ``vector_bits``, ``cpu``, the caches, ``cores``) are added empty. A frame that has them
    all (or lacks the columns the rules read: the import's check names them) is returned as
    it is."""
    if not {"spread_s", "target"} <= set(df.columns):
        return df
    if "range_s" not in df.columns:
        df = _split_old_spread(df)
    missing = [c for c in HOST_COLUMNS if c not in df.columns]
    if not missing:
        return df
    df = df.copy()
    at = df.columns.get_loc("busy_after") + 1 if "busy_after" in df.columns else len(df.columns)
    for column in HOST_COLUMNS:
        if column in df.columns:
            at = df.columns.get_loc(column) + 1
            continue
        empty = None if FRAME_DTYPES[column] == "object" else pd.NA
        df.insert(at, column, pd.Series([empty] * len(df), df.index, FRAME_DTYPES[column]))
        at += 1
    return df


def _split_old_spread(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    counters = df["counters"] if "counters" in df.columns else pd.Series(None, index=df.index)
    meaning = pd.Series(
        [old_spread_meaning(t, c) for t, c in zip(df["target"], counters, strict=True)],
        index=df.index,
        dtype=object,
    )
    old = df["spread_s"]
    df["spread_s"] = old.where(meaning != "range")
    df.insert(df.columns.get_loc("spread_s") + 1, "range_s", old.where(meaning != "iqr"))
    return df


def write_frame(
    df: pd.DataFrame, path: Path, suffix: str, parquet_options: dict[str, Any] | None = None
) -> None:
    """Write ``df`` to a temporary file beside ``path`` and rename it into place."""
    with atomic_path(path) as tmp:  # mode 0644: an export is meant to be read by others
        if suffix == ".csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, engine="pyarrow", index=False, **(parquet_options or {}))
