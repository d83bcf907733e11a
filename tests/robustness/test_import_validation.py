"""``cognate data import`` never poisons a store: every column it stores is checked
(repeats included), a data set's repeats attach only to its own records, and a record whose
config the current space refuses is skipped with a count."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cognate.config import Config, canonical_json
from cognate.formats.read import load_matrix
from cognate.records import load_runs
from cognate.runner import Measurement
from cognate.store import Store
from cognate.targets import get_target


@pytest.fixture
def user_store(tmp_path: Path, shared: Path) -> Path:
    """A store with 6 spade records of west0479 (current space) and no repeats."""
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "west0479.mtx.gz")
    space = get_target("spade").space("spmm")
    configs = space.sample(6, seed=0, shape=matrix.shape)
    measured = [Measurement(c, "ok", (i + 1) * 1e-5, 0.0) for i, c in enumerate(configs)]
    db = tmp_path / "user.db"
    with Store(db) as store:
        store.record(matrix, "spade", "spmm", 16, measured, space_version=space.version)
    return db


def _export(db: Path, out: Path) -> Path:
    done = _cognate("data", "export", "--db", str(db), "--dataset", str(out))
    assert done.returncode == 0, done.stderr
    return out / "spade-spmm.parquet"


def _cognate(*args: str) -> subprocess.CompletedProcess:
    code = "from cognate.cli import run; run()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300
    )


def _with_repeats(frame: pd.DataFrame, runtime: float = 123.0) -> pd.DataFrame:
    return frame.assign(
        repeat_runtime_s=runtime,
        repeat_status="ok",
        repeat_noisy=False,
        repeat_time=pd.to_datetime(frame["time"], utc=True, format="ISO8601"),
    )


def test_a_data_set_never_attaches_repeats_to_the_users_records(user_store, tmp_path) -> None:
    """A data set naming the user's own records (same key, same time) with 123 s repeats:
    the records are kept, and no repeat is attached to them (before: all six were)."""
    file = _export(user_store, tmp_path / "set")
    _with_repeats(pd.read_parquet(file)).to_parquet(file, index=False)
    done = _cognate("data", "import", str(file), "--db", str(user_store))
    assert done.returncode == 0, done.stderr
    with Store(user_store, readonly=True) as store:
        assert store.repeats().empty
    # into a fresh store the data set's repeats come with their own records
    fresh = tmp_path / "fresh.db"
    assert _cognate("data", "import", str(file), "--db", str(fresh)).returncode == 0
    with Store(fresh, readonly=True) as store:
        assert len(store.repeats()) == 6


def _bad(column: str, value: object, repeats: bool = False):
    def corrupt(frame: pd.DataFrame) -> pd.DataFrame:
        frame = _with_repeats(frame, 1e-5) if repeats else frame
        frame[column] = frame[column].astype(object)
        frame[column] = [value] * len(frame)
        return frame

    return corrupt


BAD_COLUMNS = [
    (_bad("repeat_runtime_s", -1.0, repeats=True), "repeat_runtime_s -1.0 is not a runtime"),
    (_bad("repeat_runtime_s", "fast", repeats=True), "repeat_runtime_s 'fast' is not a runtime"),
    (_bad("repeat_time", "yesterday", repeats=True), "repeat_time 'yesterday' is not a time"),
    (_bad("repeat_time", 12.5, repeats=True), "repeat_time 12.5 is not a time"),
    (_bad("repeat_status", "great", repeats=True), "repeat_status 'great' is not one of"),
    (_bad("repeat_noisy", "maybe", repeats=True), "repeat_noisy 'maybe' is not empty"),
    (_bad("attempts", "x"), "attempts 'x' is not an integer >= 1"),
    (_bad("attempts", 0), "attempts 0 is not an integer >= 1"),
    (_bad("attempts", 2.5), "attempts 2.5 is not an integer >= 1"),
    (_bad("load1_before", "high"), "load1_before 'high' is not empty or a number >= 0"),
    (_bad("busy_after", -3.0), "busy_after -3.0 is not empty or a number >= 0"),
    (_bad("noisy", "maybe"), "noisy 'maybe' is not empty, true or false"),
    (_bad("error", 7), "error 7 is not empty or text"),
]


@pytest.mark.parametrize(("corrupt", "needle"), BAD_COLUMNS)
def test_a_wrong_column_is_one_line_naming_the_row(user_store, tmp_path, corrupt, needle):
    file = _export(user_store, tmp_path / "set")
    corrupt(pd.read_parquet(file)).to_parquet(file, index=False)
    fresh = tmp_path / "fresh.db"
    done = _cognate("data", "import", str(file), "--db", str(fresh))
    errors = [line for line in done.stderr.splitlines() if not line.startswith("read ")]
    assert done.returncode == 1 and len(errors) == 1, done.stderr
    assert f"{file}: row 1: {needle}" in errors[0], errors
    assert "internal error" not in done.stderr and not fresh.exists()


def _rehashed(frame: pd.DataFrame, row: int, change: dict) -> pd.DataFrame:
    knobs = {**json.loads(frame.at[row, "config"]), **change}
    frame.at[row, "config"] = canonical_json(knobs)
    frame.at[row, "config_hash"] = Config("spade", "spmm", knobs).hash
    return frame


@pytest.mark.parametrize(
    "change", [{"evil_knob": 1}, "out_of_range"], ids=["unknown_knob", "out_of_range"]
)
def test_a_config_the_space_refuses_is_skipped_with_a_count(user_store, tmp_path, change) -> None:
    """A config with an unknown knob (canonical JSON, correct hash) went in, after which
    training refused the whole store; now the record is skipped and counted."""
    file = _export(user_store, tmp_path / "set")
    frame = pd.read_parquet(file)
    if change == "out_of_range":
        knobs = json.loads(frame.at[1, "config"])
        name = next(k for k, v in knobs.items() if isinstance(v, int) and not isinstance(v, bool))
        change = {name: -7}
    _rehashed(frame, 1, change).to_parquet(file, index=False)
    fresh = tmp_path / "fresh.db"
    done = _cognate("data", "import", str(file), "--db", str(fresh))
    assert done.returncode == 0, done.stderr
    assert "skipped 1 record (config not in the current spade spmm space)" in done.stderr
    assert "imported 5 records" in done.stdout
    space = get_target("spade").space("spmm")
    runs = load_runs(fresh, space)  # raised on the poisoned store
    assert sum(len(r.configs) for r in runs) == 5


def test_a_store_poisoned_before_the_check_still_trains(user_store, tmp_path, capsys) -> None:
    """A store that already holds a refused config (written before import checked them, or
    through ``Store.import_frame`` directly): its other records still load, with one
    warning counting the skipped one (before: the whole store was refused)."""
    file = _export(user_store, tmp_path / "set")
    frame = _rehashed(pd.read_parquet(file), 1, {"evil_knob": 1})
    poisoned = tmp_path / "poisoned.db"
    with Store(poisoned) as store:
        store.import_frame(frame.assign(counters="{}"))
    runs = load_runs(poisoned, get_target("spade").space("spmm"))
    assert sum(len(r.configs) for r in runs) == 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "skipped 1 record whose config" in err and "evil_knob" in err
