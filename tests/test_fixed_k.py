"""fixed-K, the K-matched lookup of `cognate evaluate`, checked on a small store of the
published spade records (data/records) against a direct computation from the Parquet rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from cognate.errors import CognateError
from cognate.evaluate import harness, report, verdicts
from cognate.evaluate.preset import load_experiment
from cognate.store import Store

RECORDS = Path(__file__).parents[1] / "data" / "records"
SMALL, BIG = 24_000, 100_000  # nnz: the store's matrices, and the ones max_nnz leaves out


def _complete(frame: pd.DataFrame) -> pd.DataFrame:
    """Width-64 records of the shared SuiteSparse matrices measured on all 256 configs."""
    frame = frame[(frame["width"] == 64) & frame["source"].str.startswith("shared:matrices/suite")]
    counts = frame.groupby("matrix_sha256")["config_hash"].nunique()
    return frame[frame["matrix_sha256"].isin(counts[counts == 256].index)]


@pytest.fixture(scope="module")
def frames() -> dict[str, pd.DataFrame]:
    out = {
        op: _complete(pd.read_parquet(RECORDS / f"spade-{op}.parquet")) for op in ("spmm", "sddmm")
    }
    both = set(out["spmm"]["matrix_sha256"]) & set(out["sddmm"]["matrix_sha256"])
    return {
        op: f[f["matrix_sha256"].isin(both) & (f["nnz"] <= BIG)].reset_index(drop=True)
        for op, f in out.items()
    }


@pytest.fixture(scope="module")
def db(frames: dict[str, pd.DataFrame], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fixed-k") / "records.sqlite"
    frame = pd.concat(frames.values(), ignore_index=True)
    frame["counters"] = "{}"
    with Store(path) as store:
        store.import_frame(frame)
    return path


@pytest.fixture(scope="module")
def preset():
    return load_experiment("quick").model_copy(
        update={
            "seeds": [0, 1, 2, 3],
            "matrices": [1, 3, 5],
            "width": 64,
            "target_all_configs": True,
            "source": "other-op",
            "collect": None,
        }
    )


@pytest.fixture(scope="module")
def data(db: Path, preset, shared: Path) -> harness.OpData:
    return harness.prepare_op(db, preset, "spmm", lambda line: None, max_nnz=SMALL)


def _speedups(frame: pd.DataFrame) -> dict[str, dict[str, float]]:
    """matrix name -> {config hash: baseline runtime / runtime}, straight from the rows."""
    out = {}
    for name, rows in frame.groupby("matrix"):
        base = rows.loc[rows["is_baseline"].astype(bool), "runtime_s"]
        assert len(base) == 1
        out[name] = dict(zip(rows["config_hash"], base.iloc[0] / rows["runtime_s"], strict=True))
    return out


def _gain(best: list[float], train: list[dict[str, float]], h: str) -> float:
    return sum(max(b, math.log(s[h])) for b, s in zip(best, train, strict=True)) / len(train)


def _direct_greedy(train: list[dict[str, float]], size: int) -> list[str]:
    """Greedy fixed set written out plainly: each step the config whose addition gives the
    best mean log best-speedup over the K matrices; exact ties go to the smallest hash."""
    hashes = sorted(train[0])
    chosen: list[str] = []
    best = [-math.inf] * len(train)
    for _ in range(size):
        rest = [h for h in hashes if h not in chosen]
        pick = max(rest, key=lambda h: (_gain(best, train, h), -hashes.index(h)))
        chosen.append(pick)
        best = [max(b, math.log(s[pick])) for b, s in zip(best, train, strict=True)]
    return chosen


def test_fixed_k_matches_a_direct_computation_from_the_records(
    data: harness.OpData, preset, frames: dict[str, pd.DataFrame]
) -> None:
    speedups = _speedups(frames["spmm"])
    results = harness.fixed_k_results(data, preset)
    train, test = set(data.names(data.train)), data.names(data.test)
    assert {(r["k"], r["seed"]) for r in results} == {
        (k, s) for k in (1, 3, 5) for s in preset.seeds
    }
    draws = set()
    for r in results:
        picked = r["finetune_matrices"]
        assert len(picked) == r["k"] and set(picked) <= train  # K training matrices only
        draws.add(tuple(picked))
        chosen = _direct_greedy([speedups[m] for m in picked], 5)
        assert sorted(r["test"]) == test
        for name in test:
            s = speedups[name]
            assert r["test"][name]["top1"] == pytest.approx(s[chosen[0]], rel=1e-12)
            assert r["test"][name]["top5"] == pytest.approx(max(s[h] for h in chosen), rel=1e-12)
            assert r["test"][name]["oracle"] == pytest.approx(max(s.values()), rel=1e-12)
        knobs = frames["spmm"].drop_duplicates("config_hash").set_index("config_hash")["config"]
        assert [json.loads(knobs[h]) for h in chosen] == r["configs"]
    assert len(draws) > 4  # seeds draw different matrices: the rows are not one lookup


def test_max_nnz_leaves_big_matrices_out_and_counts_them(
    data: harness.OpData, frames: dict[str, pd.DataFrame]
) -> None:
    nnz = frames["spmm"].drop_duplicates("matrix_sha256").set_index("matrix_sha256")["nnz"]
    assert data.over_max_nnz["target"] == int((nnz > SMALL).sum()) > 0
    assert data.over_max_nnz["source"] == data.over_max_nnz["target"]  # sddmm: same matrices
    assert max(r.matrix.nnz for r in data.runs + data.source_runs) <= SMALL
    kept = len(data.train) + len(data.validation) + len(data.test)
    assert kept == int((nnz <= SMALL).sum())


def test_fixed_k_rows_pair_with_learned_rows_of_the_same_draws(
    data: harness.OpData, preset
) -> None:
    fixed = harness.fixed_k_results(data, preset)
    # a stand-in learned row: fixed-K's own picks with every top-1 10% faster
    learned = [
        {
            **r,
            "variant": harness.TL,
            "chosen": {"finetune_matrices": r["finetune_matrices"]},
            "test": {n: {**v, "top1": v["top1"] * 1.1} for n, v in r["test"].items()},
        }
        for r in fixed
    ]
    harness.check_fixed_k_pairing(learned, fixed)
    rows = verdicts.summarize(fixed + learned, n_boot=200)
    comparison = verdicts.fixed_k_comparison(rows, n_boot=200)
    assert [c["k"] for c in comparison] == [1, 3, 5]
    for c in comparison:
        assert c["TL_top1"]["mean"] == pytest.approx(1.1) and c["TL_top1"]["low"] > 1.09
        assert c["TL_top5"]["mean"] == pytest.approx(1.0)
        assert "NT_top1" not in c  # no NT rows: no claim
    table = report.fixed_k_table(comparison)
    assert table.count("\n") == 4 and "1.100x [1.100x, 1.100x]" in table
    assert any("**Yes**" in line for line in verdicts.fixed_k_answers(comparison))
    # another draw for one cell: the comparison would not be paired, so the run stops
    other = sorted(set(data.names(data.train)) - set(learned[0]["finetune_matrices"]))
    learned[0]["chosen"] = {"finetune_matrices": other[: learned[0]["k"]]}
    with pytest.raises(CognateError, match="not be paired"):
        harness.check_fixed_k_pairing(learned, fixed)
