"""cognate.bench: the matrix sets, provenance and grid summary the benchmark scripts share."""

from __future__ import annotations

import pytest

from cognate.bench.corpus import QUICK_MATRIX, generated_graphs, shared_matrices, shared_paths
from cognate.bench.oracle import BASELINE, oracle_and_fixed
from cognate.bench.provenance import OUT_OF_SAMPLE, model_data


def test_shared_matrices_filter_by_name_and_size() -> None:
    paths = shared_paths(names=[QUICK_MATRIX])
    if not paths:
        pytest.skip("shared matrices not present")
    assert [p.name for p in paths] == [f"{QUICK_MATRIX}.mtx.gz"]
    (matrix,) = shared_matrices(names=[QUICK_MATRIX])
    assert matrix.nnz > 0
    assert shared_matrices(min_nnz=matrix.nnz + 1, names=[QUICK_MATRIX]) == []


def test_a_file_that_does_not_load_is_reported_and_left_out(tmp_path, monkeypatch) -> None:
    root = tmp_path / "matrices" / "suitesparse"
    root.mkdir(parents=True)
    (root / "broken.mtx.gz").write_bytes(b"not gzip")
    monkeypatch.setenv("COGNATE_SHARED", str(tmp_path))
    skipped = []
    assert shared_matrices(on_skip=lambda path, exc: skipped.append(path.name)) == []
    assert skipped == ["broken.mtx.gz"]


def test_generated_graphs_are_named_by_kind_and_size() -> None:
    graphs = generated_graphs([5000], kinds=("powerlaw",), seed=0)
    assert [g.name for g in graphs] == [f"powerlaw-{graphs[0].nnz}"]


def test_oracle_and_leave_one_out_fixed_config() -> None:
    rows = [
        {"seconds": {BASELINE: 1.0, "a": 0.5, "b": 0.8, "lib:mkl-ie": 0.1}},
        {"seconds": {BASELINE: 1.0, "a": 0.9, "b": 0.5}},
        {"seconds": {BASELINE: 1.0, "a": 0.6, "b": 1.0}},
    ]
    oracle, fixed, picks = oracle_and_fixed(rows)
    assert oracle == [2.0, 2.0, 1 / 0.6]  # the library entry is not a config
    # row 0 held out: on rows 1 and 2, b (2, 1: geomean 1.41) beats a (1.11, 1.67: 1.36)
    assert picks[0] == "b" and fixed[0] == pytest.approx(1 / 0.8)
    assert picks[1] == "a" and fixed[1] == pytest.approx(1 / 0.9)


def test_model_data_names_a_split() -> None:
    assert model_data("no-such-matrix-anywhere") == "unseen"
    assert "unseen" in OUT_OF_SAMPLE
