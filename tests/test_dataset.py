"""The portable data set: export per target/op, import into a fresh store, train from it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from cognate.cli import main
from cognate.collect import collect
from cognate.formats.write import save_matrix
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
    from cognate.formats.read import load_matrix
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


# --- generated corpus matrices come back from their recipes ---------------------------------

# a base-set file (20,972 nnz) and a scale-set file (15,223 nnz, a kron of a shared matrix)
REGENERATED = (
    "base/syn27_uniform_1024x1024_pboth.npz",
    "scale/sc262_kron-lp_qap12-blocks_15223.npz",
)


def _corpus_records(tmp_path: Path, monkeypatch) -> tuple[Path, dict[str, bytes]]:
    """A data set of spade records on two generated corpus files (written by the corpus's
    own recipes); returns it and the files' bytes."""
    from cognate.formats.read import load_matrix
    from cognate.runner import Measurement
    from cognate.synth.corpus import corpus_recipe

    corpus = tmp_path / "corpus"
    monkeypatch.setenv("COGNATE_CORPUS", str(corpus))
    space = get_target("spade").space("spmm")
    configs = space.sample(4, seed=0, shape=(1000, 1000))
    measured = [Measurement(c, "ok", (i + 1) * 1e-4, 0.0) for i, c in enumerate(configs)]
    db = tmp_path / "made.db"
    originals = {}
    with Store(db) as store:
        for relative in REGENERATED:
            (corpus / relative).parent.mkdir(parents=True, exist_ok=True)
            path = save_matrix(corpus_recipe(relative)[1](), corpus / relative)
            originals[relative] = path.read_bytes()
            matrix = load_matrix(path)
            store.record(
                matrix, "spade", "spmm", 16, measured, space_version=space.version, host="sim"
            )
    out = tmp_path / "records"
    assert _invoke("data", "export", "--db", str(db), "--dataset", str(out)).exit_code == 0
    return out, originals


@pytest.mark.usefixtures("shared")  # reads the real matrices a corpus recipe rebuilds from
def test_missing_corpus_matrices_come_back_from_their_recipes(tmp_path, monkeypatch, capsys):
    """A fresh machine has no corpus folder: reading the records regenerates exactly the
    files they name (byte-identical, checked against the records' sha256), only those a
    command reads, into the corpus folder; the import itself generates nothing."""
    from cognate.records import load_runs

    dataset, originals = _corpus_records(tmp_path, monkeypatch)
    fresh_corpus = tmp_path / "fresh-corpus"
    monkeypatch.setenv("COGNATE_CORPUS", str(fresh_corpus))
    db = tmp_path / "fresh.db"
    assert _invoke("data", "import", str(dataset), "--db", str(db)).exit_code == 0
    assert not fresh_corpus.exists()
    space = get_target("spade").space("spmm")
    (small,) = load_runs(db, space, max_nnz=16_000)
    assert small.matrix.name.startswith("sc262")
    assert (fresh_corpus / REGENERATED[1]).read_bytes() == originals[REGENERATED[1]]
    assert not (fresh_corpus / REGENERATED[0]).exists()  # not read: never generated
    assert len(load_runs(db, space)) == 2
    for relative, data in originals.items():
        assert (fresh_corpus / relative).read_bytes() == data
    err = capsys.readouterr().err
    assert err.count("regenerating corpus:") == 2  # each once: then it is cached


@pytest.mark.usefixtures("shared")  # reads the real matrices a corpus recipe rebuilds from
def test_a_recipe_that_changed_or_is_unknown_is_one_clear_error(tmp_path, monkeypatch, capsys):
    from cognate.cli import run

    dataset, _ = _corpus_records(tmp_path, monkeypatch)
    part = pd.read_parquet(dataset / "spade-spmm.parquet")
    changed = part["source"] == f"corpus:{REGENERATED[0]}"
    part.loc[changed, "matrix_sha256"] = "0" * 64  # as if the generator had changed since
    part.loc[~changed, "source"] = "corpus:scale/sc262_not_a_recipe.npz"
    part.to_parquet(dataset / "spade-spmm.parquet", index=False)
    fresh_corpus = tmp_path / "fresh-corpus"
    monkeypatch.setenv("COGNATE_CORPUS", str(fresh_corpus))
    db = tmp_path / "fresh.db"
    assert _invoke("data", "import", str(dataset), "--db", str(db)).exit_code == 0
    for nnz, needle in ((16_000, "is not a readable file"), (None, "the generator changed")):
        args = ["pretrain", "--db", str(db), "--target", "spade", "--op", "spmm", "-o", "m"]
        with pytest.raises(SystemExit) as exit_:
            run([*args, *(["--max-nnz", str(nnz)] if nnz else [])])
        err = capsys.readouterr().err
        assert exit_.value.code == 1 and needle in err.strip().splitlines()[-1], err
        assert "Traceback" not in err
    assert not (fresh_corpus / REGENERATED[0]).exists()  # a wrong matrix is never written


# --- every row of a data set is checked before any of it is stored ---------------------------


def _bad(column: str, value):
    def corrupt(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        if column == "time":  # a text column, as another tool might have written it
            frame[column] = frame[column].map(lambda t: t.isoformat())
        elif column == "is_baseline":  # 0/1, as another tool might have written it
            frame[column] = frame[column].astype(int)
        elif frame[column].dtype != object:
            frame[column] = frame[column].astype(object)
        frame.at[2, column] = value
        return frame

    return corrupt


BAD_ROWS = [
    (_bad("config", "{not json"), "config '{not json' is not JSON"),
    (_bad("config", "[1, 2]"), "not a JSON object of knobs"),
    (_bad("config", '{"rp": {"deep": 1}}'), "not a scalar or a list of scalars"),
    (_bad("config", '{"rp": NaN}'), "is not JSON"),
    (_bad("config_hash", "0123456789abcdef"), "config_hash is not the hash"),
    (_bad("status", "fine"), "status 'fine' is not one of ok, timeout, error, too_large"),
    (_bad("runtime_s", -1.0), "is not a runtime"),
    (_bad("runtime_s", float("inf")), "is not a runtime"),
    (_bad("nnz", 0), "nnz 0 is not an integer"),
    (_bad("width", 10**9), "width 1000000000 is not an integer in [1, 65536]"),
    (_bad("rows", 2.5), "rows 2.5 is not an integer"),
    (_bad("matrix_sha256", "xyz"), "is not 64 hex digits"),
    (_bad("target", "fpga"), "target 'fpga' is not one of"),
    (_bad("op", None), "op is missing or not text"),
    (_bad("time", "yesterday"), "is not a time"),
    (_bad("is_baseline", 2), "is_baseline 2 is not true or false"),
]


@pytest.mark.parametrize(("corrupt", "needle"), BAD_ROWS)
def test_a_bad_row_is_refused_naming_file_and_row(
    store, tmp_path, monkeypatch, capsys, corrupt, needle
):
    from cognate.cli import run

    db, corpus = store
    monkeypatch.setenv("COGNATE_CORPUS", str(corpus))
    out = tmp_path / "records"
    assert _invoke("data", "export", "--db", str(db), "--dataset", str(out)).exit_code == 0
    file = out / "spade-spmm.parquet"
    corrupt(pd.read_parquet(file)).to_parquet(file, index=False)
    fresh = tmp_path / "fresh.db"
    with pytest.raises(SystemExit) as exit_:
        run(["data", "import", str(out), "--db", str(fresh)])
    lines = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in lines if not line.startswith("read ")]  # progress: files read
    assert exit_.value.code == 1 and len(errors) == 1, lines
    assert f"{file}: row 3: " in errors[0] and needle in errors[0], errors
    assert not fresh.exists()  # nothing of the data set was stored, the other file neither


def test_a_data_set_without_the_record_columns_is_refused(store, tmp_path, capsys):
    from cognate.cli import run

    file = tmp_path / "other.parquet"
    pd.DataFrame({"a": [1, 2]}).to_parquet(file)
    with pytest.raises(SystemExit) as exit_:
        run(["data", "import", str(file), "--db", str(tmp_path / "x.db")])
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and "not a record data set: lacks column(s) matrix" in err
