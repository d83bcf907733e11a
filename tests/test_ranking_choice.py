"""The tuner uses what validation shows: ``finetune`` chooses between the learned ranking,
fixed-K (the greedy fixed set of its K fine-tuning matrices) and their blend on its
validation matrices and stores why; ``tune --json`` reports it; ``tune --verify --learn``
refines a local copy of the model. On a small store of the published spade records
(data/records) of real shared matrices."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from cognate.cli import main
from cognate.errors import CognateError
from cognate.model.checkpoint import parse_metadata, read_metadata
from cognate.model.cost_model import CostModel
from cognate.model.portfolio import (
    PORTFOLIO_KEY,
    RANKING_KEY,
    RANKINGS,
    ranking_kind,
    ranking_line,
    ranking_used,
)
from cognate.model.preset import preset_from_dict
from cognate.model.train import train
from cognate.records import load_runs
from cognate.search.learn import local_model_path
from cognate.store import Store
from cognate.targets import get_target
from cognate.transfer.finetune import transfer_encoder

RECORDS = Path(__file__).parents[1] / "data" / "records"
MAX_NNZ = 12_000  # 20 shared SuiteSparse matrices with every spade config at width 64
TUNED = "dwt_878"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _complete(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame[(frame["width"] == 64) & frame["source"].str.startswith("shared:matrices/suite")]
    frame = frame[frame["nnz"] <= MAX_NNZ]
    counts = frame.groupby("matrix_sha256")["config_hash"].nunique()
    return frame[frame["matrix_sha256"].isin(counts[counts == 256].index)]


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    """The published spade spmm and sddmm rows of the matrices complete in both."""
    parts = {
        op: _complete(pd.read_parquet(RECORDS / f"spade-{op}.parquet")) for op in ("spmm", "sddmm")
    }
    both = set(parts["spmm"]["matrix_sha256"]) & set(parts["sddmm"]["matrix_sha256"])
    out = pd.concat([p[p["matrix_sha256"].isin(both)] for p in parts.values()], ignore_index=True)
    assert out["matrix_sha256"].nunique() >= 16
    return out


@pytest.fixture(scope="module")
def store(frame: pd.DataFrame, shared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ranking") / "records.sqlite"
    rows = frame.copy()
    rows["counters"] = "{}"
    with Store(path) as s:
        s.import_frame(rows)
    return path


@pytest.fixture(scope="module")
def finetuned(store: Path) -> tuple[Path, str]:
    """A tiny model pretrained on the sddmm records, fine-tuned by the CLI on 3 spmm matrices:
    (model file, the command's output)."""
    space = get_target("spade").space("sddmm")
    preset = preset_from_dict(
        "tiny",
        {
            "featurizer": {"channels": [4, 4], "embed_hidden": [16], "embedding_dim": 8},
            "predictor": {"hidden": [32]},
            "train": {"epochs": 2, "patience": 2, "configs_per_step": 64},
        },
    )
    encoder = transfer_encoder(space, "cognate", "ae")
    pretrained = train(load_runs(store, space), space, preset, seed=0, encoder=encoder)
    source = pretrained.save(store.parent / "pretrained.safetensors")
    out = store.parent / "finetuned.safetensors"
    args = ["finetune", "--model", str(source), "--db", str(store), "--target", "spade"]
    args += ["--op", "spmm", "--matrices", "3", "--epochs", "2", "-o", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return out, result.output


def _speedups(frame: pd.DataFrame, shas: set[str]) -> dict[str, dict[str, float]]:
    """{matrix sha: {config hash: speedup over its baseline}} from the spmm rows."""
    rows = frame[(frame["op"] == "spmm") & frame["matrix_sha256"].isin(shas)]
    out = {}
    for sha, part in rows.groupby("matrix_sha256"):
        base = float(part.loc[part["is_baseline"].astype(bool), "runtime_s"].iloc[0])
        out[sha] = {
            h: base / float(t) for h, t in zip(part["config_hash"], part["runtime_s"], strict=True)
        }
    return out


def _geomean(values: list[float]) -> float:
    return math.exp(float(np.mean(np.log(values))))


@pytest.fixture(scope="module")
def spmm_runs(store: Path) -> list:
    return load_runs(store, get_target("spade").space("spmm"))


def test_finetune_chooses_on_validation_and_stores_why(
    finetuned, frame: pd.DataFrame, spmm_runs: list
) -> None:
    path, output = finetuned
    meta = read_metadata(path)  # the stored decision passes the checkpoint schema
    ranking, split = meta["ranking"], meta["split"]
    assert ranking["chosen"] in RANKINGS and set(ranking["options"]) == set(RANKINGS)
    assert ranking["greedy_from"] == "greedy set chosen on the 3 fine-tuning matrices"
    val = {m["sha256"] for m in split["validation"]}
    fit = {m["sha256"] for m in split["finetune"]}
    assert ranking["validation_matrices"] == len(val)
    # fixed-K's top-1, recomputed from the Parquet rows: the config of the best geomean
    # speedup over the 3 fine-tuning matrices, scored on the validation matrices
    on_fit, on_val = _speedups(frame, fit), _speedups(frame, val)
    hashes = sorted(next(iter(on_fit.values())))
    best = max(
        hashes, key=lambda h: (np.mean([np.log(s[h]) for s in on_fit.values()]), -hashes.index(h))
    )
    fixed = ranking["options"]["fixed-K"]
    assert fixed["top1"] == pytest.approx(_geomean([s[best] for s in on_val.values()]), rel=1e-9)
    oracle = _geomean([max(s.values()) for s in on_val.values()])
    assert ranking["oracle"] == pytest.approx(oracle, rel=1e-9)
    assert fixed["top1_of_oracle"] == pytest.approx(fixed["top1"] / oracle, rel=1e-9)
    # the learned option is the model's own ranking (no portfolio) on the same matrices
    model = CostModel.load(path, get_target("spade").space("spmm"))
    runs = [r for r in spmm_runs if r.key in val]
    top1 = [
        r.runtimes[r.baseline]
        / r.runtimes[np.argsort(model.predict(r.matrix, r.configs, r.width), kind="stable")[0]]
        for r in runs
    ]
    assert ranking["options"]["learned"]["top1"] == pytest.approx(_geomean(top1), rel=1e-5)
    # chosen: the best product of top-1 and best-of-5, and the portfolio the model ships
    products = {k: o["top1"] * o["best_of_k"] for k, o in ranking["options"].items()}
    assert products[ranking["chosen"]] == pytest.approx(max(products.values()), rel=1e-6)
    assert (len(model.portfolio) == 0) == (ranking["chosen"] == "learned")
    assert f"ranking: {ranking['chosen']}" in output and "% of their oracle" in output
    test = ranking["test"]  # the shipped ranking, scored once on test after the choice
    assert test["matrices"] == len(split["test"])
    assert test["top1"] <= test["best_of_k"] <= test["oracle"] + 1e-12
    assert "the ranking shipped" in output


def test_bad_ranking_metadata_is_one_line(finetuned) -> None:
    path, _ = finetuned
    meta = read_metadata(path)
    for change, field in (
        ({"chosen": "oracle"}, "ranking.chosen"),
        ({"oracle": -1.0}, "ranking.oracle"),
        (
            {
                "options": {
                    "learned": {**meta["ranking"]["options"]["learned"], "top1_of_oracle": 1.5}
                }
            },
            "top1_of_oracle",
        ),
        (
            {"options": {"blend": meta["ranking"]["options"]["blend"]}, "chosen": "learned"},
            "no validation figures",
        ),
    ):
        bad = {**meta, "ranking": {**meta["ranking"], **change}}
        with pytest.raises(CognateError, match=field) as err:
            parse_metadata(path, json.dumps(bad))
        assert "\n" not in str(err.value)


def test_bad_learned_provenance_is_one_line(finetuned) -> None:
    path, _ = finetuned
    meta = read_metadata(path)
    good = {"from": str(path), "measurements": 6, "updates": 1, "matrices": [TUNED]}
    parse_metadata(path, json.dumps({**meta, "learned": good}))
    for change, field in (
        ({"measurements": -1}, "learned.measurements"),
        ({"updates": 0}, "learned.updates"),
    ):
        with pytest.raises(CognateError, match=field):
            parse_metadata(path, json.dumps({**meta, "learned": {**good, **change}}))


def test_a_model_without_a_stored_choice_says_what_its_portfolio_implies() -> None:
    """The shipped spade model's portfolio came from ``cognate portfolio`` before choices
    were stored: tune reports its kind and the validation row that chose it."""
    meta = read_metadata(Path(__file__).parents[1] / "data" / "models" / "spade-spmm.safetensors")
    entry = meta[PORTFOLIO_KEY]
    used = ranking_used({k: v for k, v in meta.items() if k != RANKING_KEY})
    assert used["used"] == ranking_kind(entry) != "learned"
    row = next(r for r in entry["validation"] if r["chosen"])
    assert used["validation"]["top1"] == row["top1"] and "validation" in used["why"]
    assert ranking_line(used).startswith(f"ranking: {used['used']} (portfolio of {entry['size']}")
    bare = ranking_used({k: v for k, v in meta.items() if k not in (PORTFOLIO_KEY, RANKING_KEY)})
    assert bare == {
        "used": "learned",
        "portfolio": "no portfolio",
        "why": "the model carries no validated choice",
    }


def _tune(args: list[str]) -> tuple[dict, str]:
    result = CliRunner().invoke(
        main, ["tune", *args, "--target", "spade", "--op", "spmm", "--json"]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def test_tune_json_says_which_ranking_and_why(finetuned, shared: Path) -> None:
    path, _ = finetuned
    matrix = shared / "matrices" / "suitesparse" / f"{TUNED}.mtx.gz"
    out, _ = _tune([str(matrix), "--model", str(path)])
    stored = read_metadata(path)["ranking"]
    assert out["ranking"]["used"] == stored["chosen"]
    opts = out["ranking"]["validation"]["options"]
    assert {n: o["top1_speedup_vs_baseline"] for n, o in opts.items()} == {
        n: o["top1"] for n, o in stored["options"].items()
    }
    assert out["candidates"][0]["portfolio"] == (stored["chosen"] != "learned")


def test_tune_learn_refines_a_local_copy_that_later_runs_use(
    finetuned, shared: Path, tmp_path: Path, monkeypatch
) -> None:
    path, _ = finetuned
    monkeypatch.setenv("COGNATE_HOME", str(tmp_path))
    matrix = shared / "matrices" / "suitesparse" / f"{TUNED}.mtx.gz"
    db = tmp_path / "verified.sqlite"
    result = CliRunner().invoke(
        main, ["tune", str(matrix), "--target", "spade", "--op", "spmm", "--learn"]
    )
    assert isinstance(result.exception, CognateError) and "add --verify" in str(result.exception)
    out, _ = _tune([str(matrix), "--model", str(path), "--verify", "--learn", "--db", str(db)])
    local = local_model_path("spade", "spmm")
    ok = [c for c in [*out["candidates"], out["baseline"]] if c.get("status") == "ok"]
    assert out["learned"]["path"] == str(local) and local.is_file()
    learned = read_metadata(local)["learned"]
    assert learned == {
        k: out["learned"][k] for k in ("from", "measurements", "updates", "matrices")
    }
    assert learned["from"] == str(path) and learned["updates"] == 1
    assert learned["measurements"] == out["learned"]["added"] == len({c["hash"] for c in ok}) >= 2
    assert not np.array_equal(  # the refined weights differ from the fine-tuned ones
        CostModel.load(local, get_target("spade").space("spmm"))
        .network.predictor[0]
        .weight.detach()
        .numpy(),
        CostModel.load(path, get_target("spade").space("spmm"))
        .network.predictor[0]
        .weight.detach()
        .numpy(),
    )
    # without --model the local copy is used, and the run says so; --model still wins
    again, note = _tune([str(matrix)])
    assert again["model"] == str(local) and "using the local model" in note
    assert again["model_note"].startswith("using the local model")
    explicit, note = _tune([str(matrix), "--model", str(path)])
    assert explicit["model"] == str(path) and "local model" not in note
    # a second refinement counts on from the first
    out, _ = _tune([str(matrix), "--verify", "--learn", "--db", str(db)])
    assert out["learned"]["updates"] == 2
    assert out["learned"]["measurements"] == learned["measurements"] + out["learned"]["added"]
    assert out["learned"]["from"] == str(path)
