"""Resuming a collection: what a resume measures again, and what it must not.

- A deterministic simulator's stored baseline is not simulated again on every resume (its
  ``attempts`` counted each resume: 6 after 5 kills), while a wall-clock target still re-times
  it in every batch (speedups stay ratios within one batch).
- A repeat (the second timing of 5% of a matrix's configs, taken at the end of the matrix)
  that a kill prevented is taken by the resume, not lost for good.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cognate.collect import collect


@pytest.fixture(scope="module")
def small(shared: Path) -> list[Path]:
    folder = shared / "matrices" / "suitesparse"
    return [folder / "494_bus.mtx.gz", folder / "west0479.mtx.gz"]


def _attempts(db: Path) -> list[int]:
    """The attempts of each matrix's baseline record."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT attempts FROM measurements WHERE is_baseline = 1").fetchall()
    return [n for (n,) in rows]


def test_a_simulator_resume_does_not_simulate_the_stored_baseline_again(
    small: list[Path], tmp_path: Path
) -> None:
    db = tmp_path / "r.db"
    first = collect("spade", "spmm", 16, small, db_path=db, n_configs=2, jobs=1)
    assert first.exit_code == 0 and len(_attempts(db)) == len(small)
    # each resume asks for more configs, so every matrix has something new to measure
    for n in (4, 6, 8):
        more = collect("spade", "spmm", 16, small, db_path=db, n_configs=n, jobs=1)
        assert more.exit_code == 0 and more.written == 2 * len(small), more.line()
    assert _attempts(db) == [1] * len(small)


def test_a_wall_clock_resume_re_times_the_baseline(small: list[Path], tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    assert collect("cpu", "spmm", 16, small[:1], db_path=db, n_configs=2).exit_code == 0
    more = collect("cpu", "spmm", 16, small[:1], db_path=db, n_configs=3)
    assert more.exit_code == 0 and more.written >= 2, more.line()  # new configs + baseline
    assert _attempts(db) == [2]


def test_a_repeat_lost_by_a_kill_is_taken_on_resume(small: list[Path], tmp_path: Path) -> None:
    """The state a kill between a matrix's last record and its repeat leaves: the records,
    no repeat. A resume with nothing left to measure still times the repeat picks again."""
    db = tmp_path / "r.db"
    first = collect("cpu", "spmm", 16, small[:1], db_path=db, n_configs=3)
    assert first.exit_code == 0 and len(first.repeats) == 1, first.line()
    with sqlite3.connect(db) as conn:
        (picked,) = conn.execute("SELECT measurement_id FROM repeats").fetchone()
        conn.execute("DELETE FROM repeats")
    resumed = collect("cpu", "spmm", 16, small[:1], db_path=db, n_configs=3)
    assert resumed.exit_code == 0 and resumed.written == 0, resumed.line()
    assert len(resumed.repeats) == 1 and "1 repeats" in resumed.line()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT measurement_id FROM repeats").fetchall() == [(picked,)]
    # and once taken, it is not taken again
    again = collect("cpu", "spmm", 16, small[:1], db_path=db, n_configs=3)
    assert again.repeats == [] and again.written == 0
