"""The evaluation harness: bootstrap CIs on known data, split hygiene, --quick end to end."""

from __future__ import annotations

import json
import math
import re
import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from cognate.cli import main, run
from cognate.errors import CognateError
from cognate.evaluate import harness
from cognate.evaluate.harness import Candidate, Cell, select_candidate
from cognate.evaluate.preset import load_experiment
from cognate.model.checkpoint import read_metadata
from cognate.model.fit import Embedder
from cognate.stats import bootstrap_ci, mean_of_geomeans, mean_of_ratio
from cognate.targets import get_target
from cognate.transfer.finetune import (
    EmbeddingCache,
    FinetuneOptions,
    featurizer_sha256,
    finetune,
    load_pretrained,
)

# --- bootstrap ------------------------------------------------------------------------------


def test_bootstrap_of_constant_data_is_degenerate() -> None:
    data = np.full((3, 10), 1.5)
    est = bootstrap_ci([data], mean_of_geomeans, n_boot=200)
    assert est.mean == pytest.approx(1.5) and est.low == pytest.approx(1.5)
    assert est.high == pytest.approx(1.5)
    ratio = bootstrap_ci([data, data], mean_of_ratio, n_boot=200)
    assert (ratio.mean, ratio.low, ratio.high) == pytest.approx((1.0, 1.0, 1.0))


def test_bootstrap_ci_matches_the_normal_theory_interval() -> None:
    # log-normal speedups: the log of the geomean is a mean, its 95% CI mean +- 1.96 s/sqrt(n)
    logs = np.random.default_rng(7).normal(0.2, 0.5, 400)
    est = bootstrap_ci([np.exp(logs)[None, :]], mean_of_geomeans, n_boot=4000, seed=1)
    half = 1.96 * logs.std(ddof=1) / math.sqrt(logs.size)
    assert math.log(est.mean) == pytest.approx(logs.mean())
    assert math.log(est.low) == pytest.approx(logs.mean() - half, abs=0.1 * half)
    assert math.log(est.high) == pytest.approx(logs.mean() + half, abs=0.1 * half)


def test_bootstrap_resamples_seeds_too() -> None:
    # every matrix equal within a seed: all the spread comes from the seeds
    per_seed = np.array([1.0, 2.0, 4.0])
    data = np.repeat(per_seed[:, None], 8, axis=1)
    est = bootstrap_ci([data], mean_of_geomeans, n_boot=2000)
    assert est.mean == pytest.approx(per_seed.mean())
    assert 1.0 <= est.low < est.mean < est.high <= 4.0
    assert (est.seeds, est.matrices) == (3, 8)


def test_bootstrap_refuses_mismatched_arrays() -> None:
    with pytest.raises(ValueError, match="shape"):
        bootstrap_ci([np.ones((2, 3)), np.ones((2, 4))], mean_of_ratio)
    with pytest.raises(ValueError, match="seeds, matrices"):
        bootstrap_ci([np.ones(5)], mean_of_geomeans)


# --- selection only sees validation ----------------------------------------------------------


def _candidate(key: str, acc: float) -> Candidate:
    return Candidate(key, {}, {"pairwise_accuracy": acc}, 1, [], Path(key))


def test_selection_uses_validation_only() -> None:
    assert "test" not in {f.name for f in fields(Candidate)}
    picked = select_candidate(
        [_candidate("a", 0.6), _candidate("b", float("nan")), _candidate("c", 0.7)],
        "pairwise_accuracy",
    )
    assert picked.key == "c"
    assert (
        select_candidate([_candidate("a", 0.5), _candidate("b", 0.5)], "pairwise_accuracy").key
        == "a"
    )


# --- end to end on simulated spade records ---------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def quick_out(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> Path:
    out = tmp_path_factory.mktemp("evaluate") / "quick"
    result = CliRunner().invoke(main, ["evaluate", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    (out / "cli-output.txt").write_text(result.output)  # the progress lines, for a test
    return out


def test_quick_writes_report_plots_and_results(quick_out: Path) -> None:
    report = (quick_out / "report.md").read_text()
    for text in (
        "git revision",
        "wall time",
        "### Answers",
        "TL-1",
        "NT-3",
        "zero-shot",
        "random mapper",
        "no mapper",
        "raw latent",
        "1.47x",
        "stand-in source",
        "### Against non-learned baselines",
        "cheap-feature GBT selector",
        "greedy fixed 5-set",
        "TL active-1",
        "Does TL-1-active (best of top-5) reach TL-1-random?",
        "TL representative-1",
        "Does TL-1-representative (best of top-5) reach TL-1-random?",
        "featurizer: a fixed, seeded random sparse-conv embedding",
        "NT-K (target only): the same network without the source; its featurizer starts at a "
        "seeded random init and stays there",
        "TL-3 + portfolio (all 7 training matrices)",
        "#### TL-3 + portfolio of all 7 training matrices",
        "### At equal target data: TL-K and NT-K against fixed-K",
        "Does TL-3 (top-1) beat fixed-K (K=3)?",
        "Does NT-1 (best of top-5) beat fixed-K 5-set (K=1)?",
        "| fixed-1 |",
        "| TL-3 + K portfolio (its 3 fine-tuning matrices) |",
        "Does TL-3 + K portfolio (best of top-5) beat fixed-K 5-set (K=3)?",
        "`TL-3 + K portfolio`: TL-3's model with the greedy fixed set of its own 3",
        "### Against non-learned baselines chosen on all 7 training matrices",
        "fine-tunes, all trained by this run",
        "Headroom: on these test matrices the best fixed config reaches",
    ):
        assert text in report, text
    # the fixed baselines never pass the oracle; the 5-set never falls below its first pick
    fixed1, fixed5 = map(float, re.findall(r"config reaches ([\d.]+)%.*5-set ([\d.]+)%", report)[0])
    assert 0 < fixed1 <= fixed5 <= 100.0
    pngs = sorted(p.name for p in quick_out.glob("*.png"))
    assert pngs == ["spmm-ablations.png", "spmm-efficiency.png", "spmm-per-matrix-TL-3.png"]
    for png in quick_out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = json.loads((quick_out / "results.json").read_text())["ops"]["spmm"]["rows"]
    tl = next(r for r in rows if r["variant"] == "TL" and r["k"] == 3)
    assert tl["seeds"] == [0, 1, 2]
    est = tl["estimates"]["top1"]
    assert est["low"] <= est["mean"] <= est["high"]
    assert 0 < tl["estimates"]["pct_top5"]["mean"] <= 1.0 + 1e-9  # best of top-5 <= oracle
    compared = json.loads((quick_out / "results.json").read_text())["ops"]["spmm"]["baselines"]
    assert [c["baseline"] for c in compared] == ["fixed", "gbt", "random"]
    for c in compared:
        assert c["matrices"] == tl["matrices"]  # paired: the same test matrices
        # a greedy set's best of 5 is never below its own first pick
        assert c["top5"]["mean"] >= c["top1"]["mean"] - 1e-9
        assert c["ratio_top5"]["low"] <= c["ratio_top5"]["mean"] <= c["ratio_top5"]["high"]


def test_quick_fixed_k_rows_pair_with_tl_and_nt_and_progress_has_an_eta(quick_out: Path) -> None:
    res = json.loads((quick_out / "results.json").read_text())["ops"]["spmm"]
    fixed = [c for c in res["cells"] if c["variant"] == "fixed"]
    assert {(c["k"], c["seed"]) for c in fixed} == {(k, s) for k in (1, 3) for s in (0, 1, 2)}
    draws = {(c["k"], c["seed"]): c["finetune_matrices"] for c in fixed}
    for cell in res["cells"]:
        if cell["variant"] in ("TL", "NT"):  # the same K matrices as the lookup of its seed
            assert sorted(cell["chosen"]["finetune_matrices"]) == draws[(cell["k"], cell["seed"])]
    for c in fixed:
        for scores in c["test"].values():
            assert scores["top1"] <= scores["top5"] <= scores["oracle"] + 1e-12
    output = (quick_out / "cli-output.txt").read_text()
    cells = re.findall(r"spmm \[(\d+)/(\d+)\] .*: validation .*elapsed \S+, ETA (\S+)\)", output)
    assert cells and int(cells[-1][0]) == int(cells[-1][1]) and cells[-1][2] == "0m00s"
    assert "  fine-tune 2/2 (freeze_featurizer True, lr 0.002)" in output


def test_quick_portfolio_size_is_the_best_on_validation(quick_out: Path) -> None:
    res = json.loads((quick_out / "results.json").read_text())["ops"]["spmm"]
    cells = [c for c in res["cells"] if c["variant"] == "TL" and c["k"] == 3]
    assert len(cells) == 3 and all("portfolio" in c for c in cells)
    for cell in cells:
        rows = cell["portfolio"]["validation"]
        best = max(row["top1"] * row["top5"] for row in rows)
        (chosen,) = [row for row in rows if row["chosen"]]
        assert chosen["top1"] * chosen["top5"] == pytest.approx(best, rel=1e-5)
        assert chosen["size"] == cell["portfolio"]["size"]
        assert set(cell["portfolio"]["test"]) == set(cell["test"])  # the same test matrices
    compared = res["baselines_portfolio"]
    assert [c["baseline"] for c in compared] == ["fixed", "gbt", "random"]
    assert all("ratio_top1" in c for c in compared)


def test_quick_split_hygiene(quick_out: Path) -> None:
    res = json.loads((quick_out / "results.json").read_text())["ops"]["spmm"]
    train, val, test = (set(res["split"][k]) for k in ("train", "validation", "test"))
    assert test and val and not (test & val) and not (test & train) and not (val & train)
    assert not (set(res["source_matrices"]) & (test | val))  # pretraining never saw them
    for cell in res["cells"]:
        # fixed-K rows: a lookup of the K matrices, no model (so no "chosen" candidate)
        used = cell["chosen"] if "chosen" in cell else cell
        assert set(used["finetune_matrices"]) <= train
        assert set(cell["test"]) == test
    for saved in (quick_out / "models").glob("*.json"):
        if not saved.name.endswith(".test.json"):
            assert "test" not in json.loads(saved.read_text())
    for model in (quick_out / "models").glob("[!p]*.safetensors"):  # fine-tuned models
        assert "test" not in read_metadata(model)["metrics"]


def test_selection_is_blind_to_test_runtimes(quick_out: Path, tmp_path: Path) -> None:
    preset = load_experiment("quick")
    db = quick_out / "records.collected.db"
    data = harness.prepare_op(db, preset, "spmm", lambda _: None)
    pretrained = next((quick_out / "models").glob("pretrained-spmm-*.safetensors"))
    cell = Cell("TL", 1, 0)
    chosen = []
    for scramble in (False, True):
        if scramble:  # the test matrices' runtimes reversed: a leak would change the choice
            test = set(data.test)
            data.runs = [
                replace(r, runtimes=r.runtimes[::-1].copy()) if r.key in test else r
                for r in data.runs
            ]
        models = tmp_path / f"models-{scramble}"
        models.mkdir()
        result = harness.run_cell(
            data, preset, cell, pretrained, models, harness.runs_digest(data.runs)
        )
        chosen.append(result["chosen"])
    assert chosen[0]["options"] == chosen[1]["options"]
    assert chosen[0]["validation"] == chosen[1]["validation"]


def test_rerun_on_a_given_store_reuses_models_and_leaves_the_store_alone(quick_out: Path) -> None:
    models = {p: p.stat().st_mtime_ns for p in (quick_out / "models").iterdir()}
    store = quick_out / "records.collected.db"
    before = store.read_bytes()
    args = ["evaluate", "--quick", "--db", str(store), "--out", str(quick_out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "snapshotting" in result.output and "reusing pretrained model" in result.output
    assert {p: p.stat().st_mtime_ns for p in (quick_out / "models").iterdir()} == models
    assert "spmm: embeddings" in result.output and " 0 computed" in result.output
    assert store.read_bytes() == before
    report = (quick_out / "report.md").read_text()
    assert "records.snapshot.db" in report
    # its wall time is a rerun's: the report says the models came from the first run
    assert "this run trained 0 of" in report and "reused" in report


def test_one_op_runs_alone_in_a_shared_folder_and_reuses_its_cells(
    quick_out: Path, tmp_path: Path
) -> None:
    out = tmp_path / "quick"
    shutil.copytree(quick_out, out)
    models = {p.name: p.stat().st_mtime_ns for p in (out / "models").iterdir()}
    args = ["evaluate", "--quick", "--op", "spmm", "--db", str(out / "records.collected.db")]
    result = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert {p.name: p.stat().st_mtime_ns for p in (out / "models").iterdir()} == models
    assert " 0 computed" in result.output
    assert "--op spmm" in json.loads((out / "results.json").read_text())["command"]


def test_only_ops_keeps_every_other_setting() -> None:
    preset = load_experiment("default")
    one = preset.only_ops(["sddmm"])
    assert one.ops == ["sddmm"]
    assert one.model_dump(exclude={"ops"}) == preset.model_dump(exclude={"ops"})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "nosuch"], "unknown experiment preset 'nosuch'"),
        (["--quick", "--op", "sddmm"], "evaluates ['spmm'], not ['sddmm']"),
        (["--quick", "--preset", "default"], "exclude each other"),
        (["--preset", "default", "--db", "/nonexistent/records.db"], "no usable records"),
    ],
)
def test_bad_input_is_one_line(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run(["evaluate", *args, "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 1
    assert len(err.splitlines()) == 1 and message in err, err


# --- the embedding cache: same numbers, keyed by the featurizer's weights ---------------------


def _quick_data(quick_out: Path) -> tuple[harness.OpData, Path]:
    data = harness.prepare_op(
        quick_out / "records.collected.db", load_experiment("quick"), "spmm", lambda _: None
    )
    return data, next((quick_out / "models").glob("pretrained-spmm-*.safetensors"))


def test_embedding_cache_is_exact_keyed_by_weights_and_persists(
    quick_out: Path, tmp_path: Path
) -> None:
    data, pretrained = _quick_data(quick_out)
    model, _ = load_pretrained(pretrained)
    runs = data.runs[:4]
    cache = EmbeddingCache(tmp_path)
    got = cache.embeddings(model, runs)
    fresh = Embedder(model).all(runs)
    assert all(torch.equal(got[k], fresh[k]) for k in fresh)
    assert (cache.misses, cache.hits) == (4, 0)
    cache.embeddings(model, runs[:2])
    assert (cache.misses, cache.hits) == (4, 2)
    reopened = EmbeddingCache(tmp_path)  # a rerun reads them from disk
    again = reopened.embeddings(model, runs)
    assert reopened.misses == 0 and all(torch.equal(again[k], fresh[k]) for k in fresh)
    before = featurizer_sha256(model)
    with torch.no_grad():
        model.featurizer.weights[0].add_(0.5)
    assert featurizer_sha256(model) != before
    moved = reopened.embeddings(model, runs[:1])
    assert reopened.misses == 1
    assert not torch.equal(moved[runs[0].key], fresh[runs[0].key])


@pytest.mark.parametrize("variant", ["TL", "NT", "zero-shot"])
def test_finetune_with_the_cache_trains_the_same_model(quick_out: Path, variant: str) -> None:
    data, pretrained = _quick_data(quick_out)
    opts = FinetuneOptions(
        matrices=3,
        seed=1,
        epochs=3,
        patience=2,
        from_scratch=variant == "NT",
        zero_shot=variant == "zero-shot",
    )
    cache = EmbeddingCache()
    plain = finetune(pretrained, data.runs, data.space, opts)
    cached = finetune(pretrained, data.runs, data.space, opts, cache=cache)
    assert cache.misses > 0
    assert cached.metadata["metrics"] == plain.metadata["metrics"]
    state, other = plain.network.state_dict(), cached.network.state_dict()
    assert state.keys() == other.keys()
    assert all(torch.equal(state[k], other[k]) for k in state)
    again = finetune(pretrained, data.runs, data.space, opts, cache=cache)  # all hits
    assert again.metadata["metrics"] == plain.metadata["metrics"]


# --- the data minimum ------------------------------------------------------------------------


def _preset_file(tmp_path: Path, **fields: object) -> Path:
    import yaml

    spec = yaml.safe_load(
        (Path(__file__).parents[1] / "configs/experiments/quick.yaml").read_text()
    )
    path = tmp_path / "short.yaml"
    path.write_text(yaml.safe_dump({**spec, **fields}))
    return path


def test_a_store_below_the_minimum_is_refused_in_one_line(
    quick_out: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    preset = _preset_file(tmp_path, min_matrices=100, min_configs=300, short_data="refuse")
    db = quick_out / "records.collected.db"
    with pytest.raises(SystemExit) as exit_info:
        run(["evaluate", "--preset", str(preset), "--db", str(db), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    errors = [line for line in err.splitlines() if "error" in line]  # after the snapshot line
    assert exit_info.value.code == 1 and len(errors) == 1 and "Traceback" not in err, err
    assert "too little data" in errors[0] and "have >= 300 measured configs" in errors[0]
    assert "12 spade-spmm matrices; the preset needs 100" in err
    assert not (tmp_path / "o" / "models").exists()  # refused before any training


def test_a_store_below_the_minimum_warns_when_asked(quick_out: Path) -> None:
    preset = load_experiment("quick").model_copy(
        update={"min_matrices": 13, "short_data": "warn", "target_all_configs": True}
    )
    lines: list[str] = []
    data = harness.prepare_op(quick_out / "records.collected.db", preset, "spmm", lines.append)
    # the stand-in source (spade sddmm) has 12 matrices too; spade's space is complete
    assert data.shortfalls == [
        "12 spade sddmm (stand-in source: no cpu records) matrices have >= 1 measured configs "
        "(of 12); the preset needs 13",
        "12 spade-spmm matrices; the preset needs 13",
    ]
    assert sum("below the preset's data minimum" in line for line in lines) == 2
    complete = preset.model_copy(update={"min_matrices": 4})
    assert (
        harness.prepare_op(
            quick_out / "records.collected.db", complete, "spmm", lines.append
        ).shortfalls
        == []
    )


def test_matrices_measured_on_a_sample_are_left_out_and_counted(
    quick_out: Path, tmp_path: Path
) -> None:
    import sqlite3

    db = tmp_path / "partial.db"
    shutil.copy(quick_out / "records.collected.db", db)
    with sqlite3.connect(db) as con:  # one matrix keeps only half of its spmm configs
        (matrix,) = con.execute("SELECT id FROM matrices ORDER BY name LIMIT 1").fetchone()
        con.execute(
            "DELETE FROM measurements WHERE matrix_id = ? AND op = 'spmm' AND is_baseline = 0 "
            "AND id % 2 = 0",
            (matrix,),
        )
    preset = load_experiment("quick").model_copy(update={"target_all_configs": True})
    lines: list[str] = []
    data = harness.prepare_op(db, preset, "spmm", lines.append)
    assert data.sampled == 1 and len({r.key for r in data.runs}) == 11
    assert "1 target matrices measured on a sample of the space left out" in " ".join(lines)
    every = harness.prepare_op(db, load_experiment("quick"), "spmm", lines.append)
    assert every.sampled == 0 and len({r.key for r in every.runs}) == 12


def test_the_preset_width_selects_the_target_records(quick_out: Path) -> None:
    db = quick_out / "records.collected.db"
    at16 = load_experiment("quick").model_copy(update={"width": 16})
    assert {r.width for r in harness.prepare_op(db, at16, "spmm", lambda _: None).runs} == {16}
    at64 = at16.model_copy(update={"width": 64})
    with pytest.raises(CognateError, match="no spade-spmm records at width 64"):
        harness.prepare_op(db, at64, "spmm", lambda _: None)


def test_the_width_option_overrides_the_preset_width(quick_out: Path, tmp_path: Path) -> None:
    """`--width` picks the target records of that width, as the preset's width field does."""
    db = quick_out / "records.collected.db"
    args = ["evaluate", "--quick", "--db", str(db), "--out", str(tmp_path), "--width", "64"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0  # `cognate` (cli.run) prints a CognateError as one line
    assert isinstance(result.exception, CognateError)
    assert "no spade-spmm records at width 64" in str(result.exception)


def test_transfer_answers_pair_tl_with_nt() -> None:
    from cognate.evaluate import verdicts

    seeds, names = [0, 1], ["a", "b", "c"]
    tl = {"variant": "TL", "k": 5, "seeds": seeds, "matrices": names}
    tl["per_seed"] = {m: [[2.0, 2.0, 2.0]] * 2 for m in ("top1", "top5")}
    nt5 = {**tl, "variant": "NT", "per_seed": {m: [[1.0, 1.0, 1.0]] * 2 for m in ("top1", "top5")}}
    nt20 = {**tl, "variant": "NT", "k": 20}
    lines = verdicts.transfer_answers([tl, nt5, nt20], 5, 200)
    assert any("beat NT-5? **Yes**: TL / NT 2.000x" in line for line in lines)
    assert any("match NT-20? **Yes**: TL / NT 1.000x" in line for line in lines)
    other = {**nt5, "k": 10, "matrices": ["a"]}  # not paired: no claim
    assert not any("NT-10" in line for line in verdicts.transfer_answers([tl, other], 5, 200))


def test_baseline_answers_call_a_ci_at_one_a_tie() -> None:
    from cognate.evaluate import verdicts

    def row(low: float, mean: float, high: float) -> dict:
        ratio = {"mean": mean, "low": low, "high": high, "seeds": 1, "matrices": 3}
        return {"baseline": "fixed", "ratio_top1": ratio, "ratio_top5": ratio}

    def verdict(low: float, mean: float, high: float) -> str:
        (line, _) = verdicts.baseline_answers([row(low, mean, high)], "TL-5")
        return line.split("**")[1]

    assert verdict(1.0, 1.0, 1.0) == "No, a tie (the same picks, or nearly)"
    assert verdict(1.0001, 1.0002, 1.0003) == "No, a tie (the same picks, or nearly)"
    assert verdict(1.001, 1.005, 1.011) == "Yes"
    assert verdict(0.97, 0.98, 0.99) == "No, it loses"
    assert verdict(0.99, 1.001, 1.01) == "Not conclusively (the CI spans 1)"


# --- ablations at several K, and the random-featurizer source model -------


def test_quick_runs_the_ablations_at_every_k_and_answers_them(quick_out: Path) -> None:
    report_md = (quick_out / "report.md").read_text()
    for name in ("random mapper", "no mapper", "raw latent (no AE)"):
        for k in (1, 3):
            assert f"| TL {name}-{k} |" in report_md, (name, k)
    assert "Does TL-1 (best of top-5) beat TL-1 with no mapper?" in report_md
    assert "ablations at K = [1, 3]" in report_md
    # the quick preset's featurizer is random already: that ablation would repeat TL
    assert "random featurizer" not in report_md.split("### Answers")[1]
    cells = json.loads((quick_out / "results.json").read_text())["ops"]["spmm"]["cells"]
    zero = [c for c in cells if c["variant"] == "zero-shot"]
    assert len(zero) == 3 and {c["k"] for c in zero} == {3}  # once per seed, at the largest K


def test_cells_of_the_default_preset_include_the_random_featurizer() -> None:
    preset = load_experiment("default")
    assert preset.ablation_matrices == [1, 3, 5]
    todo = harness.cells(preset, n_train=300)
    ablated = {(c.variant, c.k) for c in todo if c.variant.startswith("TL ") and c.extra}
    for k in (1, 3, 5):
        assert ("TL random featurizer", k) in ablated and ("TL no mapper", k) in ablated
    (cell,) = [c for c in todo if c.variant == "TL random featurizer" and c.k == 1 and c.seed == 0]
    assert cell.featurizer == "random" and cell.finetune_extra() == {}
    assert harness.cells(preset, n_train=2)[-1].k == 2  # K capped at the training split
    spec, random = harness.model_preset(preset), harness.model_preset(preset, "random")
    assert spec.featurizer.trainable and not random.featurizer.trainable
    assert random.featurizer.channels == spec.featurizer.channels  # the same network


def test_one_ablation_k_is_read_as_a_list() -> None:
    preset = load_experiment("modest")
    assert preset.ablation_matrices == [5]
    with pytest.raises(ValueError, match="positive"):
        preset.model_validate({**preset.model_dump(), "ablation_matrices": [0, 3]})


def test_the_random_featurizer_source_model_keeps_its_featurizer_untrained(
    quick_out: Path, tmp_path: Path
) -> None:
    quick = load_experiment("quick")
    model = {**quick.model, "featurizer": {**quick.model["featurizer"], "trainable": True}}
    preset = quick.model_validate({**quick.model_dump(), "model": model})
    data = harness.prepare_op(quick_out / "records.collected.db", preset, "spmm", lambda _: None)
    trained = harness.pretrained_model(data, preset, tmp_path, lambda _: None)
    random = harness.pretrained_model(data, preset, tmp_path, lambda _: None, "random")
    assert trained != random
    one_epoch = preset.model_validate({**preset.model_dump(), "pretrain_epochs": 1})
    random_1 = harness.pretrained_model(data, one_epoch, tmp_path, lambda _: None, "random")

    def weights(path: Path, prefix: str) -> dict[str, torch.Tensor]:
        net, _ = load_pretrained(path)
        return {k: v for k, v in net.state_dict().items() if k.startswith(prefix)}

    frozen, frozen_1 = weights(random, "featurizer."), weights(random_1, "featurizer.")
    assert frozen and all(torch.equal(frozen[k], frozen_1[k]) for k in frozen)  # never trained
    if read_metadata(trained)["metrics"]["best_epoch"] > 0:  # else it kept the init too
        learned = weights(trained, "featurizer.")
        assert any(not torch.equal(frozen[k], learned[k]) for k in frozen)


def test_ablation_answers_pair_tl_with_its_ablation() -> None:
    from cognate.evaluate import verdicts

    seeds, names = [0, 1], ["a", "b", "c"]
    tl = {"variant": "TL", "k": 3, "seeds": seeds, "matrices": names}
    tl["per_seed"] = {m: [[2.0, 2.0, 2.0]] * 2 for m in ("top1", "top5")}
    worse = {
        **tl,
        "variant": "TL no mapper",
        "per_seed": {m: [[1.0] * 3] * 2 for m in tl["per_seed"]},
    }
    unpaired = {**worse, "variant": "TL random mapper", "matrices": ["a"]}
    active = {**worse, "variant": "TL active"}
    lines = verdicts.ablation_answers([tl, worse, unpaired, active], 200)
    assert len(lines) == 2  # top-5 and top-1 of the one paired ablation
    assert "beat TL-3 with no mapper? **Yes**: TL / ablation 2.000x" in lines[0]


def test_source_max_nnz_keeps_big_matrices_out_of_pretraining(quick_out: Path) -> None:
    db = quick_out / "records.collected.db"
    every = harness.prepare_op(db, load_experiment("quick"), "spmm", lambda _: None)
    sizes = sorted({r.key: r.matrix.nnz for r in every.source_runs}.values())
    cap = sizes[len(sizes) // 2]
    preset = load_experiment("quick").model_copy(update={"source_max_nnz": cap})
    capped = harness.prepare_op(db, preset, "spmm", lambda _: None)
    assert capped.source_runs and all(r.matrix.nnz <= cap for r in capped.source_runs)
    assert len({r.key for r in capped.source_runs}) < len({r.key for r in every.source_runs})
    assert f"(matrices <= {cap} nnz)" in capped.source_name
    assert [r.key for r in capped.runs] == [
        r.key for r in every.runs
    ]  # the target's matrices are not capped


def test_target_all_configs_keeps_only_complete_matrices_and_never_reads_the_others(
    quick_out: Path, tmp_path: Path
) -> None:
    space = get_target("spade").space("spmm")
    every = {c.hash for c in space.all_configs()}
    measured = {"complete": set(every), "sampled": set(list(every)[:5])}
    preset = load_experiment("quick").model_copy(update={"target_all_configs": True})
    assert harness._complete_matrices(measured, space, preset) == ({"complete"}, 1)
    assert harness._complete_matrices(measured, space, load_experiment("quick")) == (None, 0)
    with pytest.raises(CognateError, match="measured on every config"):
        harness._complete_matrices({"sampled": measured["sampled"]}, space, preset)
    # a matrix left out is never read: its file may be gone (a big generated one, say)
    db = shutil.copy(quick_out / "records.collected.db", tmp_path / "records.db")
    keys = sorted(harness.measured_configs(db, space))
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE matrices SET source = ? WHERE sha256 = ?", ("/gone.npz", keys[0]))
    kept = harness.load_op_runs(db, space, matrices=set(keys[1:]))
    assert {r.key for r in kept} == set(keys[1:])
    with pytest.raises(CognateError, match="not a readable file"):
        harness.load_op_runs(db, space)
