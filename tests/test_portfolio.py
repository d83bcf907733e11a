"""A model's portfolio: the greedy fixed M-set ranked first, M chosen on validation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cognate.cli import run as cli_run
from cognate.collect import collect
from cognate.model.checkpoint import read_metadata
from cognate.model.cost_model import CostModel
from cognate.model.fixed_set import greedy_fixed_set
from cognate.model.portfolio import (
    PORTFOLIO_KEY,
    RANKING_KEY,
    choose_portfolio,
    portfolio_anchor,
    portfolio_order,
    ranking_kind,
)
from cognate.model.preset import preset_from_dict
from cognate.model.train import train
from cognate.records import load_runs
from cognate.search.rank import with_portfolio
from cognate.targets import get_target

WIDTH = 32
MATRICES = ("494_bus", "olm500", "west0479", "bp_1200", "bcspwr06", "nnc1374")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def space():
    return get_target("spade").space("spmm")


@pytest.fixture(scope="module")
def trained(shared: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(record store, tiny model) on 6 real matrices, every spade config simulated."""
    tmp = tmp_path_factory.mktemp("portfolio")
    files = [shared / "matrices" / "suitesparse" / f"{n}.mtx.gz" for n in MATRICES]
    db = tmp / "r.db"
    summary = collect("spade", "spmm", WIDTH, files, db_path=db, all_configs=True, jobs=1)
    assert summary.exit_code == 0
    space = get_target("spade").space("spmm")
    preset = preset_from_dict(
        "tiny",
        {
            "featurizer": {"channels": [4, 4], "embed_hidden": [16], "embedding_dim": 8},
            "predictor": {"hidden": [32]},
            "train": {"epochs": 2, "patience": 2, "configs_per_step": 64, "val_fraction": 0.34},
        },
    )
    result = train(load_runs(db, space), space, preset, seed=0)
    return db, result.save(tmp / "model.safetensors")


def test_order_puts_the_portfolio_first_each_part_by_score() -> None:
    scores = np.array([0.5, 0.1, 0.9, 0.3, 0.7])
    positions = np.array([-1, -1, 0, -1, 1])
    assert portfolio_order(scores, positions).tolist() == [4, 2, 1, 3, 0]
    assert portfolio_order(scores, np.full(5, -1)).tolist() == [1, 3, 0, 4, 2]


def test_an_anchor_holds_the_greedy_order_against_small_gaps() -> None:
    """Members go by score + anchor x greedy position: the model overrides the greedy order
    only where its predicted gap is wider than the anchor; inf keeps the greedy order."""
    scores = np.array([0.50, 0.45, 0.10, 2.0])  # lower = faster
    positions = np.array([0, 1, 2, -1])
    assert portfolio_order(scores, positions, 0.0).tolist() == [2, 1, 0, 3]
    # 0.1 per position: 0.50 / 0.55 / 0.30: the big gap (config 2) still wins, the small not
    assert portfolio_order(scores, positions, 0.1).tolist() == [2, 0, 1, 3]
    assert portfolio_order(scores, positions, 0.3).tolist() == [0, 2, 1, 3]  # 0.5/0.75/0.7
    assert portfolio_order(scores, positions, np.inf).tolist() == [0, 1, 2, 3]
    meta = {PORTFOLIO_KEY: {"anchor": 0.0, "fixed_order": True}}
    assert portfolio_anchor(meta) == np.inf
    assert portfolio_anchor({PORTFOLIO_KEY: {"anchor": 0.25}}) == 0.25
    assert portfolio_anchor({}) == 0.0  # a model of before anchors: the model's order


def test_a_portfolio_config_the_sample_missed_is_added() -> None:
    cpu = get_target("cpu").space("spmm")
    sample = cpu.sample(50, 1, (5000, 5000))
    other = next(c for c in cpu.sample(50, 2, (5000, 5000)) if c not in set(sample))
    n = len(sample)
    configs, positions = with_portfolio(sample, [sample[3], other])
    assert configs[:n] == sample and configs[n:] == [other]
    assert np.flatnonzero(positions >= 0).tolist() == [3, n]
    assert positions[3] == 0 and positions[n] == 1
    assert with_portfolio(sample, [])[0] is sample


def test_size_and_anchor_are_the_best_product_on_validation(trained, space) -> None:
    db, path = trained
    model = CostModel.load(path, space)
    split = read_metadata(path)["split"]
    runs = load_runs(db, space)
    train_keys = {m["sha256"] for m in split["train"]}
    train = [r for r in runs if r.key in train_keys]
    validation = [r for r in runs if r.key not in train_keys]
    entry = choose_portfolio(model, train, validation, k=5)
    chosen = greedy_fixed_set(train, 64)
    rows = entry["validation"]
    assert rows[0]["size"] == 0 and len({r["size"] for r in rows}) > 3
    assert {r["anchor"] for r in rows if r["size"]} >= {0.0, 1.0, "fixed"}

    def brute(size: int, factor: float | str) -> tuple[float, float]:
        """(top-1, best of 5) geomeans: sort by (outside, score + anchor x position) by hand."""
        position = {h: i for i, h in enumerate(chosen[:size])}
        logs1, logs5 = [], []
        for run in validation:
            scores = model.predict(run.matrix, run.configs, run.width)
            keys = []
            for i, config in enumerate(run.configs):
                p = position.get(config.hash)
                if p is None:
                    keys.append((1, 0.0, scores[i], i))
                elif factor == "fixed":
                    keys.append((0, p, 0.0, i))
                else:
                    keys.append((0, scores[i] + factor * entry["anchor_unit"] * p, 0.0, i))
            keyed = sorted(range(len(run.configs)), key=keys.__getitem__)
            base = run.runtimes[run.baseline]
            logs1.append(np.log(base / run.runtimes[keyed[0]]))
            logs5.append(np.log(base / run.runtimes[keyed[:5]].min()))
        return float(np.exp(np.mean(logs1))), float(np.exp(np.mean(logs5)))

    for row in rows[:: max(1, len(rows) // 12)] + [r for r in rows if r["chosen"]]:
        top1, top5 = brute(row["size"], row["anchor"])
        assert row["top1"] == pytest.approx(top1, rel=1e-6)
        assert row["top5"] == pytest.approx(top5, rel=1e-6)
    best = max(r["top1"] * r["top5"] for r in rows)
    (picked,) = [r for r in rows if r["chosen"]]
    assert picked["top1"] * picked["top5"] == pytest.approx(best, rel=1e-5)
    assert picked["size"] == entry["size"]
    assert entry["fixed_order"] == (picked["anchor"] == "fixed")
    assert [space.validate(k).hash for k in entry["configs"]] == chosen[: entry["size"]]


def test_cli_writes_the_portfolio_and_tune_ranks_it_first(trained, space, tmp_path, capsys):
    db, path = trained
    out = tmp_path / "with-portfolio.safetensors"
    with pytest.raises(SystemExit) as exit_info:
        cli_run(["portfolio", str(path), "--db", str(db), "-o", str(out)])
    assert exit_info.value.code in (0, None)
    err = capsys.readouterr().err
    assert "portfolio size" in err and str(out) in err
    entry = read_metadata(out)[PORTFOLIO_KEY]
    # the choice in the tuner's terms, with the figures that made it, stored and printed
    decision = read_metadata(out)[RANKING_KEY]
    assert decision["chosen"] == ranking_kind(entry) and f"ranking: {decision['chosen']}" in err
    chosen_row = next(row for row in entry["validation"] if row["chosen"])
    assert decision["options"][decision["chosen"]]["top1"] == chosen_row["top1"]
    assert read_metadata(path).get(PORTFOLIO_KEY) is None  # the input is left as it was
    assert CostModel.load(out, space).portfolio == [space.validate(k) for k in entry["configs"]]

    # tune ranks a portfolio first whatever its size: set one of 3 by hand
    model = CostModel.load(out, space)
    picks = space.candidates(0, 0, (1000, 1000))[100:103]
    knobs = [dict(c.knobs) for c in picks]
    model.metadata[PORTFOLIO_KEY] = {**entry, "configs": knobs, "anchor": 0.0, "fixed_order": False}
    model.save(out)
    tuned = json.loads(_tune(out, capsys))
    top = [c["hash"] for c in tuned["candidates"][:3]]
    assert set(top) == {c.hash for c in picks}
    assert [c["score"] for c in tuned["candidates"][:3]] == sorted(
        c["score"] for c in tuned["candidates"][:3]
    )
    # a fixed order: tune's top 3 is the portfolio in its own order, whatever the scores
    model.metadata[PORTFOLIO_KEY] = {**entry, "configs": knobs[::-1], "fixed_order": True}
    model.save(out)
    tuned = json.loads(_tune(out, capsys))
    assert [c["hash"] for c in tuned["candidates"][:3]] == [c.hash for c in picks[::-1]]


def _tune(model: Path, capsys) -> str:
    from cognate.paths import shared_dir

    matrix = shared_dir() / "matrices" / "suitesparse" / "dwt_878.mtx.gz"
    args = ["tune", str(matrix), "--target", "spade", "--op", "spmm", "--width", str(WIDTH)]
    with pytest.raises(SystemExit) as exit_info:
        cli_run([*args, "--model", str(model), "--json"])
    out, err = capsys.readouterr()
    assert exit_info.value.code in (0, None), err
    return out


def test_bad_inputs_are_one_line(trained, tmp_path, capsys) -> None:
    db, path = trained
    random_model = tmp_path / "random.json"
    with pytest.raises(SystemExit) as exit_info:
        cli_run(["portfolio", str(path), "--db", str(tmp_path / "none.db")])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no such record store" in err
    random_model.write_text("{}")
    with pytest.raises(SystemExit) as exit_info:
        cli_run(["portfolio", str(random_model), "--db", str(db)])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.strip().count("\n") == 0
