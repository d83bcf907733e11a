"""Store schema 3: ``spread_s`` is the interquartile range and ``range_s`` max - min, one
helper for every runner; a v2 store made of real published records migrates in place with
every row kept and each old spread in the column of its meaning; an old export imports the
same way."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from cognate.cli import main
from cognate.stats import timing_spread
from cognate.store import SCHEMA_VERSION, Store
from cognate.store import schema as store_module
from cognate.timing import Timed

RECORDS = Path(__file__).resolve().parents[1] / "data" / "records"
KEY = ["matrix_sha256", "target", "op", "width", "config_hash", "host"]


def test_one_helper_gives_both_spreads() -> None:
    samples = [1.0, 2.0, 3.0, 4.0, 10.0]
    spread = timing_spread(samples)
    assert spread.range_s == 9.0
    assert spread.iqr_s == 2.0  # inclusive quartiles 2 and 4
    assert timing_spread([5.0]) == (0.0, 0.0)
    timed = Timed("x", samples)
    assert (timed.spread, timed.range) == (spread.iqr_s, spread.range_s)


def _old_export() -> pd.DataFrame:
    """Real published records as an export before schema 3 wrote them: one ``spread_s``
    (max - min on cpu, 0 on the simulator), plus cpu rows as ``tune --verify`` stored them
    (counters say 'interleaved': their spread was the interquartile range)."""
    cpu = pd.read_parquet(RECORDS / "cpu-spmm.parquet").iloc[:300]
    spade = pd.read_parquet(RECORDS / "spade-spmm.parquet").iloc[:200]
    verified = pd.read_parquet(RECORDS / "cpu-sddmm.parquet").iloc[:20].copy()
    verified = verified[verified["status"] == "ok"].copy()
    verified["counters"] = json.dumps({"verify": "interleaved", "rounds": 15})
    verified["range_s"] = verified["range_s"] / 3  # an interquartile range, narrower
    verified[[c for c in verified if c.startswith("repeat_")]] = None
    frame = pd.concat([cpu, spade, verified], ignore_index=True)
    frame["spread_s"] = frame["spread_s"].fillna(frame["range_s"])
    frame["counters"] = frame["counters"].fillna("{}")
    return frame.drop(columns=["range_s", "isa", "vector_bits"])


def _v2_store(path: Path, frame: pd.DataFrame) -> None:
    """``frame`` written by plain SQL into a store of schema 2, repeats included."""
    conn = sqlite3.connect(path)
    for statement in filter(str.strip, store_module.SCHEMA_SQL.split(";")):
        conn.execute(statement)
    for name, kind in store_module.V2_COLUMNS:
        conn.execute(f"ALTER TABLE measurements ADD COLUMN {name} {kind}")
    conn.execute(store_module.V2_REPEATS)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '2')")
    for row in frame.drop_duplicates("matrix_sha256").itertuples():
        conn.execute(
            "INSERT INTO matrices (name, source, sha256, rows, cols, nnz) VALUES (?,?,?,?,?,?)",
            (row.matrix, row.source, row.matrix_sha256, row.rows, row.cols, row.nnz),
        )
    for row in frame.drop_duplicates("config_hash").itertuples():
        conn.execute(
            "INSERT INTO configs (target, op, space_version, json, hash) VALUES (?,?,?,?,?)",
            (row.target, row.op, row.space_version, row.config, row.config_hash),
        )
    for row in frame.itertuples():
        cursor = conn.execute(
            """INSERT INTO measurements (matrix_id, target, op, width, config_id,
                   space_version, runtime_s, spread_s, counters, status, error, is_baseline,
                   host, time, attempts)
               VALUES ((SELECT id FROM matrices WHERE sha256 = ?), ?, ?, ?,
                       (SELECT id FROM configs WHERE hash = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (
                row.matrix_sha256, row.target, row.op, row.width, row.config_hash,
                row.space_version, None if pd.isna(row.runtime_s) else row.runtime_s,
                None if pd.isna(row.spread_s) else row.spread_s, row.counters, row.status,
                None if pd.isna(row.error) else row.error, int(row.is_baseline), row.host,
                row.time.isoformat(), int(row.attempts),
            ),
        )  # fmt: skip
        if isinstance(row.repeat_status, str):  # collect's second timing, with a spread
            conn.execute(
                "INSERT INTO repeats (measurement_id, runtime_s, spread_s, status, time)"
                " VALUES (?, ?, ?, ?, ?)",
                (cursor.lastrowid, row.repeat_runtime_s, row.spread_s, row.repeat_status,
                 row.repeat_time.isoformat()),
            )  # fmt: skip
    conn.commit()
    conn.close()


def _check_migrated(old: pd.DataFrame, new: pd.DataFrame) -> None:
    """Every old row is there, unchanged but for its spread, which sits in its column."""
    assert len(new) == len(old)
    merged = old.merge(new, on=KEY, suffixes=("_old", ""), validate="one_to_one")
    assert len(merged) == len(old)
    for column in ("runtime_s", "status", "is_baseline", "config", "space_version"):
        a, b = merged[f"{column}_old"], merged[column]
        assert ((a == b) | (a.isna() & b.isna())).all(), column
    verified = merged["counters_old"].str.contains('"interleaved"')
    simulated = merged["target"] == "spade"
    timed = ~verified & ~simulated
    assert timed.sum() > 100 and verified.sum() > 5 and simulated.sum() == 200
    # collect's cpu spreads were max - min: range_s now, spread_s unknown
    assert (
        merged.loc[timed, "range_s"].fillna(-1) == merged.loc[timed, "spread_s_old"].fillna(-1)
    ).all()
    assert merged.loc[timed, "spread_s"].isna().all()
    # tune --verify's were interquartile ranges: spread_s stays, range_s unknown
    assert (merged.loc[verified, "spread_s"] == merged.loc[verified, "spread_s_old"]).all()
    assert merged.loc[verified, "range_s"].isna().all()
    # the simulator's 0 is both
    assert (merged.loc[simulated, ["spread_s", "range_s"]] == 0).all().all()
    assert new["isa"].isna().all() and new["vector_bits"].isna().all()


def test_v2_store_of_real_records_migrates_with_nothing_lost(tmp_path: Path) -> None:
    old = _old_export()
    db = tmp_path / "v2.sqlite"
    _v2_store(db, old)
    repeats_before = int(old["repeat_status"].notna().sum())
    assert repeats_before > 0
    with Store(db, readonly=True) as store:  # read as it is: v3's columns by the same rule
        assert store.schema == 2
        readonly = store.frame()
    with Store(db) as store:
        assert store.schema == SCHEMA_VERSION == 4
        migrated = store.frame()
        repeats = store.repeats()
    _check_migrated(old, migrated)
    pd.testing.assert_frame_equal(readonly, migrated)
    assert len(repeats) == repeats_before
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        spreads = conn.execute(
            "SELECT count(*) FROM repeats WHERE spread_s IS NULL AND range_s IS NOT NULL"
        ).fetchone()[0]
    assert spreads == repeats_before  # collect's repeats: max - min, moved like their records
    with Store(db) as store:  # a second open migrates nothing again
        pd.testing.assert_frame_equal(store.frame(), migrated)


def test_old_and_new_exports_import_alike(tmp_path: Path) -> None:
    old = _old_export()
    with Store(tmp_path / "a.sqlite") as store:
        assert store.import_frame(old) == (len(old), 0)
        from_old = store.frame()
    _check_migrated(old, from_old)
    with Store(tmp_path / "b.sqlite") as store:
        assert store.import_frame(from_old) == (len(old), 0)
        pd.testing.assert_frame_equal(store.frame()[from_old.columns].drop(columns="time"),
                                      from_old.drop(columns="time"))  # fmt: skip


@pytest.mark.parametrize("name", ["cpu-spmm", "spade-sddmm"])
def test_published_records_are_schema_3(name: str) -> None:
    frame = pd.read_parquet(RECORDS / f"{name}.parquet")
    assert {"spread_s", "range_s", "isa", "vector_bits"} <= set(frame.columns)
    assert frame["range_s"].notna().any()


def test_published_cpu_records_with_repeats_import_through_the_cli(tmp_path: Path) -> None:
    # A flag column with gaps reaches pandas as float64: repeat_noisy 0.0 is a flag, not junk.
    frame = pd.read_parquet(RECORDS / "cpu-spmm.parquet")
    with_repeats = frame[frame["repeat_noisy"].notna()].head(200)
    assert with_repeats["repeat_noisy"].dtype == "float64" and len(with_repeats) == 200
    part = tmp_path / "records"
    part.mkdir()
    with_repeats.to_parquet(part / "cpu-spmm.parquet")
    result = CliRunner().invoke(main, ["data", "import", str(part), "--db", str(tmp_path / "s.db")])
    assert result.exit_code == 0, result.output
    with Store(tmp_path / "s.db") as store:
        assert len(store.frame()) == 200
