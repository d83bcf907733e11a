"""The store's read path: what a resume needs, and every record as a typed pandas frame
(export writes it to Parquet or CSV)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from cognate.errors import CognateError
from cognate.hostid import host_for
from cognate.matrix import Matrix
from cognate.runner import MISMATCH_PREFIX
from cognate.store.database import Database
from cognate.store.frames import (
    FRAME_COLUMNS,
    FRAME_DTYPES,
    FRAME_QUERY,
    upgrade_frame,
    write_frame,
)
from cognate.store.schema import LOAD_COLUMNS, V3_COLUMNS, V4_COLUMNS

_RETRYABLE = ("timeout", "error")


class Reads(Database):
    """Reading records: resume state, frames, export."""

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
            v2 = ", ".join(f"r.{c}" for c in ("attempts", "noisy", *LOAD_COLUMNS))
        else:  # a v1 store opened read-only: the columns it lacks, as v1 rows migrate
            v2 = ", ".join(["1 AS attempts"] + [f"NULL AS {c}" for c in ("noisy", *LOAD_COLUMNS)])
        v3 = [f"r.{c}" if self.schema >= 3 else f"NULL AS {c}" for c, _ in V3_COLUMNS]
        v4 = [f"r.{c}" if self.schema >= 4 else f"NULL AS {c}" for c, _ in V4_COLUMNS]
        query = FRAME_QUERY.format(
            range_column=v3[0], v2_columns=v2, host_columns=", ".join(v3[1:] + v4)
        )
        query += " WHERE " + " AND ".join(clauses) if clauses else ""
        query += " ORDER BY r.id"
        # One statement = one consistent WAL snapshot, even while a writer commits.
        with self._reading():
            df = pd.read_sql_query(query, self._conn, params=params)
        if self.schema < 3:  # an older store opened read-only: its spreads as v3 reads them
            df = upgrade_frame(df.drop(columns=[c for c, _ in V3_COLUMNS]))
        return self._typed(df)[list(FRAME_COLUMNS)]

    def _typed(self, df: pd.DataFrame) -> pd.DataFrame:
        """Fixed dtypes, so an empty or all-null frame exports with the same schema; a value
        that is not of its column's type (text in ``runtime_s``, a bad ``time``, written by
        another tool) is one line naming the record and column."""
        for column, dtype in FRAME_DTYPES.items():
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
            write_frame(df, path, suffix)
        except OSError as e:  # a user's bad path is one line, not "internal error"
            raise CognateError(f"{path}: cannot write: {e.strerror or e}") from None
        return len(df)
