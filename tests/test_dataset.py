"""The portable data set: export per target/op, import into a fresh store, train from it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from cognate.cli import main
from cognate.collect import collect
from cognate.io import save_matrix
from cognate.store import Store
from cognate.synth import generate
from cognate.targets import get_target


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> tuple[Path, Path]:
    """A real spade store over two shared matrices and one generated corpus matrix."""
    root = tmp_path_factory.mktemp("dataset")
    corpus = root / "corpus"
    (corpus / "scale").mkdir(parents=True)
    generated = corpus / "scale" / "uniform-1.npz"
    save_matrix(generate("uniform", 1500, 1500, nnz=6000, seed=1), generated)
    db = root / "records.db"
    files = [shared / "matrices" / "suitesparse" / f for f in ("494_bus.mtx.gz", "arrow.mtx.gz")]
    for op in ("spmm", "sddmm"):
        summary = collect("spade", op, 16, [*files, generated], db_path=db, n_configs=12, jobs=1)
        assert summary.exit_code == 0
    return db, corpus


def _invoke(*args: str) -> object:
    return CliRunner().invoke(main, list(args))


def test_round_trip_keeps_every_record(store, tmp_path, monkeypatch):
    db, corpus = store
    monkeypatch.setenv("COGNATE_CORPUS", str(corpus))
    out = tmp_path / "records"
    result = _invoke("data", "export", "--db", str(db), "--dataset", str(out))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["spade-sddmm.parquet", "spade-spmm.parquet"]
    spmm = pd.read_parquet(out / "spade-spmm.parquet")
    assert "counters" not in spmm  # the simulator's counters are left out by default
    assert set(spmm["source"]) == {
        "shared:matrices/suitesparse/494_bus.mtx.gz",
        "shared:matrices/suitesparse/arrow.mtx.gz",
        "corpus:scale/uniform-1.npz",
    }
    fresh = tmp_path / "fresh.db"
    result = _invoke("data", "import", str(out), "--db", str(fresh))
    assert result.exit_code == 0, result.output
    with Store(db) as a, Store(fresh) as b:
        before, after = a.frame(), b.frame()
    key = ["matrix_sha256", "op", "width", "config_hash", "host"]
    cols = ["runtime_s", "spread_s", "status", "is_baseline", "space_version", "time"]
    merged = before.merge(after, on=key, suffixes=("", "_imported"), validate="one_to_one")
    assert len(merged) == len(before) == len(after)
    for col in cols:
        assert merged[col].equals(merged[f"{col}_imported"]), col


def test_imported_records_train_on_a_machine_with_other_folders(store, tmp_path, monkeypatch):
    # the corpus regenerated elsewhere: portable sources resolve against COGNATE_CORPUS
    from cognate.cli.pretrain import load_runs

    db, corpus = store
    monkeypatch.setenv("COGNATE_CORPUS", str(corpus))
    out = tmp_path / "records"
    assert _invoke("data", "export", "--db", str(db), "--dataset", str(out)).exit_code == 0
    moved = tmp_path / "elsewhere"
    (moved / "scale").mkdir(parents=True)
    (moved / "scale" / "uniform-1.npz").write_bytes(
        (corpus / "scale" / "uniform-1.npz").read_bytes()
    )
    monkeypatch.setenv("COGNATE_CORPUS", str(moved))
    fresh = tmp_path / "fresh.db"
    assert _invoke("data", "import", str(out), "--db", str(fresh)).exit_code == 0
    runs = load_runs(fresh, get_target("spade").space("spmm"))
    assert len(runs) == 3 and all(r.baseline is not None for r in runs)


def test_import_never_overwrites_and_is_idempotent(store, tmp_path, monkeypatch):
    db, corpus = store
    monkeypatch.setenv("COGNATE_CORPUS", str(corpus))
    out = tmp_path / "records"
    assert _invoke("data", "export", "--db", str(db), "--dataset", str(out)).exit_code == 0
    edited = pd.read_parquet(out / "spade-spmm.parquet")
    edited["runtime_s"] = 1.0
    edited.to_parquet(out / "spade-spmm.parquet", index=False)
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.read_bytes())
    result = _invoke("data", "import", str(out), "--db", str(copy))
    assert result.exit_code == 0 and "imported 0 records" in result.output
    with Store(copy) as s:
        assert (s.frame(op="spmm")["runtime_s"] != 1.0).all()


def test_bad_dataset_is_one_line_and_leaves_the_store_alone(store, tmp_path, capsys):
    from cognate.cli import run

    db, _ = store
    bad = tmp_path / "broken.parquet"
    bad.write_bytes(b"PAR1 not really parquet")
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.read_bytes())
    before = copy.read_bytes()
    for args in (
        ["data", "import", str(bad), "--db", str(copy)],
        ["data", "import", str(tmp_path / "missing"), "--db", str(copy)],
    ):
        with pytest.raises(SystemExit) as exit_:
            run(args)
        assert exit_.value.code == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and args[2] in err, err
    assert copy.read_bytes() == before


def test_repeats_travel_with_the_data_set(tmp_path, shared):
    """The collect protocol's second timings (label noise) survive export and import, beside
    the records they repeat; an import twice adds no second repeat."""
    from cognate.config import Config
    from cognate.io import load_matrix
    from cognate.runner import Measurement

    west = load_matrix(shared / "matrices" / "suitesparse" / "west0479.mtx.gz")
    configs = [Config("cpu", "spmm", {"isplit": 2**i, "chunk": 1}) for i in range(4)]
    first = [Measurement(c, "ok", (i + 1) * 1e-3, 1e-5) for i, c in enumerate(configs)]
    db = tmp_path / "a.db"
    with Store(db) as store:
        store.record(west, "cpu", "spmm", 32, first, space_version="v1", host="h")
        again = [Measurement(configs[1], "ok", 2.3e-3, 1e-5), Measurement(configs[3], "error")]
        store.record(west, "cpu", "spmm", 32, again, space_version="v1", host="h", repeat=True)
        before = store.repeats()
    out = tmp_path / "records"
    assert _invoke("data", "export", "--db", str(db), "--dataset", str(out)).exit_code == 0
    part = pd.read_parquet(out / "cpu-spmm.parquet")
    assert part["repeat_runtime_s"].notna().sum() == 1 and part["repeat_status"].notna().sum() == 2
    fresh = tmp_path / "b.db"
    for _ in range(2):
        result = _invoke("data", "import", str(out), "--db", str(fresh))
        assert result.exit_code == 0, result.output
    with Store(fresh) as store:
        after = store.repeats()
    columns = ["matrix_sha256", "config_hash", "first_s", "repeat_s", "repeat_status"]
    assert after[columns].equals(before[columns])
    assert len(after) == 2
