"""``cognate tune`` and ``cognate.tune``: ranking, verify, emit, the cpu kernel, errors.

The models are trained here (tiny preset, few epochs) on real measurements of small shared
matrices: every spade config simulated, a few cpu configs timed on real kernels.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import yaml

import cognate
from cognate import synth
from cognate.build import compile_c
from cognate.cli import run as cli_run
from cognate.cli.pretrain import load_runs
from cognate.collect import collect
from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.model.preset import preset_from_dict
from cognate.model.train import train
from cognate.search import load_model
from cognate.store import Store
from cognate.targets import get_target
from cognate.targets.cpu.families import pack
from cognate.targets.spade.simulator import Machine, simulate, tile

WIDTH = 32
SPADE_TRAIN = ("494_bus", "olm500", "west0479", "bp_1200")
CPU_TRAIN = ("494_bus", "west0479", "olm500")
TUNED = "dwt_878"  # not in either training set


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors (see conftest)


def tiny_preset():
    return preset_from_dict(
        "tiny",
        {
            "featurizer": {"channels": [4, 4, 4], "embed_hidden": [16], "embedding_dim": 8},
            "predictor": {"hidden": [32]},
            "train": {"epochs": 3, "patience": 3, "configs_per_step": 64, "val_fraction": 0.34},
        },
    )


def _train_model(target: str, op: str, db: Path, out: Path) -> Path:
    space = get_target(target).space(op)
    result = train(load_runs(db, space), space, tiny_preset(), seed=0)
    return result.save(out)


def _files(shared: Path, names: tuple[str, ...]) -> list[Path]:
    return [shared / "matrices" / "suitesparse" / f"{n}.mtx.gz" for n in names]


@pytest.fixture(scope="module")
def spade_model(shared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("spade-model")
    files = _files(shared, SPADE_TRAIN)
    summary = collect("spade", "spmm", WIDTH, files, db_path=tmp / "r.db", all_configs=True, jobs=1)
    assert summary.exit_code == 0 and summary.statuses["ok"] == 448 * len(files)
    return _train_model("spade", "spmm", tmp / "r.db", tmp / "spade-spmm.safetensors")


@pytest.fixture(scope="module")
def cpu_model(shared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("cpu-model")
    files = _files(shared, CPU_TRAIN)
    options = {"repeats": 3}
    summary = collect(
        "cpu", "spmm", WIDTH, files, db_path=tmp / "r.db", n_configs=8, runner_options=options
    )
    assert summary.statuses["ok"] >= 2 * len(files)
    return _train_model("cpu", "spmm", tmp / "r.db", tmp / "cpu-spmm.safetensors")


@pytest.fixture(scope="module")
def tuned(shared: Path) -> Path:
    return _files(shared, (TUNED,))[0]


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        cli_run(args)
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


def tune_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    code, out, err = run_cli(["tune", *args, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


# --- ranking --------------------------------------------------------------------------------


def test_json_schema_and_top_k_are_the_lowest_scores(spade_model, tuned, capsys) -> None:
    args = [str(tuned), "--target", "spade", "--width", str(WIDTH), "--model", str(spade_model)]
    got = tune_json([*args, "--top-k", "7"], capsys)
    for key in ("matrix", "target", "op", "width", "baseline", "candidates", "best"):
        assert key in got
    assert "speedup_vs_baseline" in got and "speedup_vs_library" not in got  # spade: no library
    assert (got["matrix"], got["target"], got["op"], got["width"]) == (TUNED, "spade", "spmm", 32)
    assert got["scored"] == 448 and not got["verified"]
    space = get_target("spade").space("spmm")
    assert got["baseline"]["config"] == dict(space.baseline((1, 1)).knobs)
    cands = got["candidates"]
    assert [c["rank"] for c in cands] == list(range(1, 8))
    assert all({"rank", "config", "score"} <= set(c) and "runtime_s" not in c for c in cands)
    assert got["best"]["config"] == cands[0]["config"] and got["best"]["runtime_s"] is None

    # Independently: the model's own predict over the whole space, sorted.
    loaded = load_model(spade_model, space)
    configs = space.all_configs()
    scores = loaded.predict(load_matrix(tuned), configs, WIDTH)
    lowest = np.sort(scores)[:7]
    np.testing.assert_allclose([c["score"] for c in cands], lowest, rtol=1e-5, atol=1e-6)
    by_hash = {c.hash: s for c, s in zip(configs, scores, strict=True)}
    for c in cands:
        assert by_hash[c["hash"]] == pytest.approx(c["score"], rel=1e-5, abs=1e-6)
        assert space.validate(c["config"]).hash == c["hash"]


def test_top_k_holds_each_kernel_family_best_ranked(cpu_model) -> None:
    """cpu: the top-k is the model's best picks with each family's best-ranked runnable
    config swapped in for the lowest-ranked picks of an over-represented family."""
    from cognate.search import rank, runnable_top

    layer = synth.generate("kdiag", 256, 256, sparsity=0.9, seed=0)  # every family fits
    space = get_target("cpu").space("spmm")
    ranked, _ = rank(load_model(cpu_model, space), space, layer, WIDTH, 3000, 0)
    plain, _ = runnable_top(ranked, layer, "spmm", WIDTH, 5, "cpu")
    covered, _ = runnable_top(ranked, layer, "spmm", WIDTH, 5, "cpu", space.family)
    assert [c.config for c in plain] == [c.config for c in ranked[:5]]
    assert not any(c.family_pick for c in plain)
    assert [c.rank for c in covered] == [1, 2, 3, 4, 5]
    assert covered[0].config == plain[0].config  # the model's first pick always stays
    families = {"csr", "dia", "bcsr", "reordered", "panel"}
    assert {space.family(c.config) for c in covered} == families
    picks = [c for c in covered if c.family_pick]
    for c in picks:
        best = next(r for r in ranked if space.family(r.config) == space.family(c.config))
        assert c.config == best.config
        assert all(space.family(p.config) != space.family(c.config) for p in plain)
    kept = [c.config for c in covered if not c.family_pick]
    remaining = iter([c.config for c in plain])
    assert all(k in remaining for k in kept)  # picks of the top-k kept in order, others dropped
    dropped = [c.config for c in plain if c.config not in kept]
    assert len(dropped) == len(picks)  # one dropped per family pick swapped in
    assert [c.score for c in covered] == sorted(c.score for c in covered)
    assert runnable_top(ranked, layer, "spmm", WIDTH, 1, "cpu", space.family)[0][0].config == (
        plain[0].config
    )  # k = 1: nothing to swap


# --- verify and emit ------------------------------------------------------------------------


def test_spade_verify_is_consistent_and_emit_reproduces_the_runtime(
    spade_model, tuned, tmp_path, capsys
) -> None:
    args = [str(tuned), "--target", "spade", "--width", str(WIDTH), "--model", str(spade_model)]
    got = tune_json([*args, "--verify", "--emit", str(tmp_path)], capsys)
    cands = got["candidates"]
    assert got["verified"] and all(c["status"] == "ok" and c["runtime_s"] > 0 for c in cands)
    # The simulator is deterministic: the reported runtimes are the runner's own.
    matrix = load_matrix(tuned)
    space = get_target("spade").space("spmm")
    todo = [space.validate(c["config"]) for c in cands] + [space.baseline(matrix.shape)]
    direct = [m.runtime_s for m in get_target("spade").runner().measure(matrix, "spmm", 32, todo)]
    assert [c["runtime_s"] for c in cands] == direct[:-1]
    assert got["baseline"]["runtime_s"] == direct[-1]
    best = min(cands, key=lambda c: c["runtime_s"])
    assert got["best"]["runtime_s"] == best["runtime_s"]
    assert got["speedup_vs_baseline"] == pytest.approx(direct[-1] / best["runtime_s"])

    (path,) = (Path(p) for p in got["emitted"])
    doc = yaml.safe_load(path.read_text())
    assert doc["config"] == got["best"]["config"]
    schedule = space.schedule(space.validate(doc["config"]))
    assert doc["schedule"] == {**schedule.__dict__}
    machine = Machine.model_validate(doc["machine"])
    sim = simulate(
        matrix.csr, "spmm", WIDTH, schedule, machine, tile(matrix.csr, schedule.rp, schedule.cp)
    )
    assert sim.seconds == pytest.approx(got["best"]["runtime_s"], rel=1e-12)


def test_cpu_verify_measures_and_emits_compilable_c(cpu_model, tuned, tmp_path, capsys) -> None:
    db = tmp_path / "kept.sqlite"
    args = [str(tuned), "--target", "cpu", "--width", str(WIDTH), "--model", str(cpu_model)]
    got = tune_json(
        [*args, "--top-k", "2", "--candidates", "3000", "--verify", "--emit", str(tmp_path)]
        + ["--db", str(db), "--threads", "2"],
        capsys,
    )
    assert got["scored"] >= 3000 and got["timing"] == "interleaved"
    cands, base = got["candidates"], got["baseline"]
    # Layouts over the size limit are skipped before verify, never offered.
    assert 0 <= got["skipped_too_large"] < got["scored"]
    for c in cands:
        pack(load_matrix(tuned), "spmm", c["config"], width=WIDTH)  # TooLarge would raise
    # Every candidate ran and checked against scipy (a kernel error is a bug); a busy
    # machine may time one out, never all of them.
    assert all(c["status"] in ("ok", "timeout") for c in cands), [c["status"] for c in cands]
    ok_cands = [c for c in cands if c["status"] == "ok"]
    assert ok_cands, "no candidate was measured"
    assert base["status"] == "ok" and base["runtime_s"] > 0 and base["spread_s"] >= 0
    assert all(c["runtime_s"] > 0 and c["spread_s"] >= 0 for c in ok_cands)
    # Both library references, each checked against scipy and timed in the same rounds;
    # MKL's inspection is reported apart from its per-call time.
    # (and on a CPU not made by Intel, MKL on its Intel path, test_mkl_path.py)
    libs = got["libraries"]
    assert {"mkl-ie", "torch.sparse.mm"} <= set(libs), got["library_error"]
    assert set(libs) <= {"mkl-ie", "torch.sparse.mm", "mkl-ie, Intel path"}
    assert libs["mkl-ie"]["inspect_s"] > 0 and all(v["runtime_s"] > 0 for v in libs.values())
    assert got["library"] == min(libs, key=lambda n: libs[n]["runtime_s"])
    assert got["library_runtime_s"] == libs[got["library"]]["runtime_s"]
    assert got["load"]["threads"] == 2 and isinstance(got["unreliable"], bool)
    # The baseline is a candidate: best is never slower than the measured baseline.
    ok = [c for c in cands if c["status"] == "ok"] + [base]
    fastest = min(ok, key=lambda c: c["runtime_s"])
    assert got["best"]["runtime_s"] <= base["runtime_s"]
    if got["kept_baseline"]:
        assert got["best"]["is_baseline"] and got["best"]["config"] == base["config"]
        assert got["speedup_vs_baseline"] == pytest.approx(1.0)
    else:
        assert got["best"]["config"] == fastest["config"]
        assert base["runtime_s"] - fastest["runtime_s"] > max(fastest["spread_s"], base["spread_s"])
    best_s = got["best"]["runtime_s"]
    assert got["speedup_vs_baseline"] == pytest.approx(base["runtime_s"] / best_s)
    assert got["speedup_vs_library"] == pytest.approx(got["library_runtime_s"] / best_s)
    c_file = next(Path(p) for p in got["emitted"] if p.endswith(".c"))
    # The entry point of the chosen family: cognate_spmm (CSR family), cognate_dia_spmm, ...
    assert re.search(r"void cognate_(\w+_)?spmm\(", c_file.read_text())
    assert compile_c(c_file.read_text()).is_file()  # the real compiler accepts it
    # Every verified measurement went to the store, through the store's own write path.
    assert got["recorded"] == {
        "db": str(db),
        "rows": len({c["hash"] for c in cands} | {base["hash"]}),
    }
    stored = Store(db).frame(target="cpu", op="spmm")
    by_hash = dict(zip(stored["config_hash"], stored["runtime_s"], strict=True))
    assert by_hash[base["hash"]] == pytest.approx(base["runtime_s"])
    assert stored["is_baseline"].sum() == 1 and set(stored["width"]) == {WIDTH}


def test_cpu_verify_shows_progress_on_a_pipe_and_records_the_isa(
    cpu_model, tuned, tmp_path, capfd
) -> None:
    """Without --json, measuring prints a line per config checked and per round timed (count,
    elapsed, ETA), on a pipe too; the collector's and verify's cpu records carry the host's
    ISA and both spreads."""
    from cognate.targets.cpu.isa import host_isa

    db = tmp_path / "kept.sqlite"
    args = ["tune", str(tuned), "--target", "cpu", "--width", str(WIDTH), "--model"]
    args += [str(cpu_model), "--top-k", "2", "--verify", "--db", str(db), "--threads", "2"]
    with pytest.raises(SystemExit) as exit_info:
        cli_run(args)
    err = capfd.readouterr().err
    assert int(exit_info.value.code or 0) == 0, err
    checked = re.findall(r"^verify: compiled and checked: (\d+)/(\d+) ", err, re.M)
    rounds = re.findall(r"^verify: timing \d+ calls, rounds: (\d+)/(\d+) ", err, re.M)
    total = int(checked[0][1])
    assert [int(done) for done, _ in checked] == list(range(total + 1))
    assert [int(done) for done, _ in rounds] == list(range(1, int(rounds[0][1]) + 1))
    assert "ETA" in err
    isa = host_isa()
    collected = Store(cpu_model.parent / "r.db").frame(status="ok")
    for stored in (Store(db).frame(status="ok"), collected):
        assert set(stored["isa"]) == {isa.name}
        assert set(stored["vector_bits"]) == {isa.vector_bits}
        assert (stored["range_s"] >= stored["spread_s"]).all()


def test_verify_without_mkl_keeps_torch_and_the_measurements(
    cpu_model, tuned, tmp_path, monkeypatch, capsys
) -> None:
    """MKL missing (the [bench] extra not installed) is one line; the rest is still timed,
    and --no-record leaves the store alone."""
    monkeypatch.setenv("MKL_RT", str(tmp_path / "no-libmkl_rt.so"))
    db = tmp_path / "none.sqlite"
    args = [str(tuned), "--target", "cpu", "--width", str(WIDTH), "--model", str(cpu_model)]
    got = tune_json(
        [*args, "--top-k", "1", "--candidates", "200", "--verify", "--db", str(db), "--no-record"],
        capsys,
    )
    assert got["verified"] and got["baseline"]["status"] == "ok"
    assert got["baseline"]["runtime_s"] > 0
    assert set(got["libraries"]) == {"torch.sparse.mm"}
    assert got["library"] == "torch.sparse.mm" and got["library_runtime_s"] > 0
    assert "mkl-ie: MKL not found" in got["library_error"]
    assert "recorded" not in got and not db.exists()


def test_verify_falls_back_to_the_isolated_runner(cpu_model, tuned, monkeypatch, capsys) -> None:
    """If the interleaved process dies, each config is still timed (one by one, in the
    runner's worker) and the output says how; the library is then not timed."""

    def died(*_args: object, **_kwargs: object) -> dict:
        raise CognateError("interleaved verify process died (signal 11)")

    monkeypatch.setattr("cognate.targets.cpu.measure.verify.interleaved_verify", died)
    args = [str(tuned), "--target", "cpu", "--width", str(WIDTH), "--model", str(cpu_model)]
    got = tune_json(
        [*args, "--top-k", "1", "--candidates", "200", "--verify", "--no-record"], capsys
    )
    assert got["timing"] == "sequential" and got["baseline"]["status"] == "ok"
    assert got["baseline"]["runtime_s"] > 0 and got["library_runtime_s"] is None
    assert all(c["status"] == "ok" and c["runtime_s"] > 0 for c in got["candidates"])
    assert "signal 11" in got["library_error"]
    assert got["best"]["runtime_s"] <= got["baseline"]["runtime_s"]


def test_verify_under_load_says_the_timings_are_unreliable(cpu_model, tuned, capsys) -> None:
    """Two busy loops on the cores the kernels use: the output says so, and the JSON too."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.5)
        args = [str(tuned), "--target", "cpu", "--width", str(WIDTH), "--model", str(cpu_model)]
        args += ["--top-k", "1", "--candidates", "200", "--verify", "--no-record"]
        code, out, err = run_cli(["tune", *args, "--json"], capsys)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    assert code == 0, err
    got = json.loads(out)
    assert got["unreliable"] is True and got["load"]["unreliable"] is True
    assert "timings unreliable: load" in err


def test_best_is_the_baseline_unless_a_candidate_beats_it() -> None:
    """The rule behind "kept the baseline": a candidate is the pick only when its median +
    interquartile range is below the baseline's median - interquartile range; of those, the
    fastest."""
    from cognate.search import Candidate, Timings, TuneResult

    space = get_target("cpu").space("spmm")
    configs = space.sample(3, seed=1, shape=(100, 100))
    base_config = space.baseline((100, 100))

    def result(base: tuple, *cands: tuple) -> TuneResult:
        top = [
            Candidate(i, c, 0.0, "", "ok", t, None, False, s)
            for i, (c, (t, s)) in enumerate(zip(configs, cands, strict=False), 1)
        ]
        baseline = Candidate(9, base_config, 0.0, "", "ok", base[0], None, False, base[1])
        r = TuneResult(_tiny_matrix(), "cpu", "spmm", 8, top, baseline, 9, Path("-"), Timings())
        r.verified = True
        return r

    clear = result((1.0, 0.01), (0.8, 0.01), (0.5, 0.02))
    assert clear.best.rank == 2 and not clear.kept_baseline
    assert clear.speedup_vs_baseline == pytest.approx(2.0)
    slower = result((0.4, 0.01), (0.8, 0.01), (0.5, 0.02))
    assert slower.kept_baseline and slower.best is slower.baseline
    assert slower.speedup_vs_baseline == pytest.approx(1.0)
    within_noise = result((1.0, 0.05), (0.97, 0.01))
    assert within_noise.kept_baseline
    # the lead clears the larger spread but not the two together: the intervals overlap
    overlapping = result((1.0, 0.03), (0.96, 0.03))
    assert overlapping.kept_baseline and overlapping.closest_rival.rank == 1
    # the fastest median overlaps; a slower one with a tight spread clears: it is the pick
    tight = result((1.0, 0.01), (0.5, 0.6), (0.8, 0.01))
    assert tight.best.rank == 2 and tight.as_dict()["verdict"]["faster_than_baseline"]
    failed = result((1.0, 0.0), (0.5, 0.0))
    failed.candidates[0].status = "error"
    assert failed.kept_baseline and not failed.all_failed
    assert result((1.0, 0.0), (0.5, 0.0)).as_dict()["best"]["is_baseline"] is False


def test_the_issue_s_noise_win_is_not_a_win() -> None:
    """The numbers of a run on a busy machine: the pick led by 7.495 ms with a spread of
    7.453 ms and the baseline's as wide. The intervals overlap: the baseline is kept, the
    result line says why and carries the load caveat."""
    from cognate.search import Candidate, Timings, TuneResult

    space = get_target("cpu").space("spmm")
    base_config = space.baseline((100, 100))
    other = next(c for c in space.sample(6, seed=1, shape=(100, 100)) if c != base_config)
    top = [Candidate(1, other, 0.0, "other", "ok", 660.2e-6, None, False, 7.453e-3)]
    baseline = Candidate(7, base_config, 0.1, "csr", "ok", 8.155e-3, None, False, 7.2e-3)
    result = TuneResult(
        _tiny_matrix(), "cpu", "spmm", 8, top, baseline, 9, Path("-"), Timings(), verified=True
    )
    result.load = {"unreliable": True, "line": "timings unreliable: load 3.0 on 2 cores"}
    assert result.kept_baseline and result.speedup_vs_baseline == pytest.approx(1.0)
    text = " ".join(" ".join(_printed(result)).split())
    assert "best:" not in text and "not a measured win" in text
    assert "timings unreliable: load 3.0 on 2 cores: this verdict may not hold" in text


def test_summary_agrees_with_the_table_when_a_faster_candidate_is_within_the_spread() -> None:
    """rank 2 ran faster than the baseline in the table, within the spreads: the summary
    names it and both figures instead of saying that no candidate beat the baseline."""
    from cognate.search import Candidate, Timings, TuneResult

    space = get_target("cpu").space("spmm")
    base_config = space.baseline((100, 100))
    faster = next(c for c in space.sample(6, seed=1, shape=(100, 100)) if c != base_config)
    top = [
        Candidate(1, base_config, 0.0, "csr", "ok", 4.74e-3, None, False, 15.1e-3),
        Candidate(2, faster, 0.1, "other", "ok", 1.87e-3, None, False, 0.2e-3),
    ]
    result = TuneResult(
        _tiny_matrix(), "cpu", "spmm", 8, top, top[0], 2, Path("-"), Timings(), verified=True
    )
    assert result.kept_baseline
    text = " ".join(" ".join(_printed(result)).split())
    assert "2.535x" in text  # the table's vs-base column
    assert "no other candidate" not in text
    assert "rank 2 ran 2.535x faster (1.87 ms ±200 us)" in text
    assert "within the timing spread of the two" in text and "the intervals overlap" in text
    assert "keep it (4.74 ms ±15.1 ms)" in text
    top[1].variant, top[1].variant_of = True, base_config.hash  # shown under its config
    top[1].description = "csr | vec 512b"
    text = " ".join(" ".join(_printed(result)).split())
    assert "rank 1's variant (vec 512b) ran 2.535x faster" in text and "variant (" in text
    assert "\u21b3 vec 512b" in text
    top[1].runtime_s = 5.0e-3  # slower: nothing beat the baseline, and it says so
    text = " ".join(" ".join(_printed(result)).split())
    assert "rank 1 is the baseline config, and no other candidate ran faster" in text


def _tiny_matrix():
    from cognate.matrix import Matrix

    return Matrix("tiny", sp.random(100, 100, density=0.05, format="csr", random_state=0))


# --- the Python API -------------------------------------------------------------------------


def test_api_kernel_equals_scipy(cpu_model, tuned) -> None:
    a = sp.random(300, 200, density=0.03, format="csr", random_state=np.random.default_rng(1))
    result = cognate.tune(a, target="cpu", width=16, top_k=3, model=cpu_model, candidates=500)
    assert isinstance(result, cognate.TuneResult)
    assert [c.rank for c in result.candidates] == [1, 2, 3]
    assert result.config == result.candidates[0].config  # unverified: the predicted best
    rng = np.random.default_rng(2)
    for width in (16, 5):  # another width: packed and compiled again
        b = rng.uniform(-1, 1, (200, width)).astype(np.float32)
        np.testing.assert_allclose(result.kernel(b), a.astype(np.float32) @ b, rtol=1e-4, atol=1e-5)
    # Same width again: the packed kernel is reused, yet reads the new operand, never
    # writes into the caller's arrays, and returns results later calls do not overwrite.
    b1 = rng.uniform(-1, 1, (200, 16)).astype(np.float32)
    b2 = rng.uniform(-1, 1, (200, 16))
    b2_before = b2.copy()
    c1 = result.kernel(b1)
    c2 = result.kernel(b2)  # float64: converted, not aliased
    np.testing.assert_allclose(c1, a.astype(np.float32) @ b1, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(c2, a @ b2, rtol=1e-4, atol=1e-5)
    assert (b2 == b2_before).all() and result._kernel.widths == (5, 16)
    with pytest.raises(CognateError, match="dense operand"):
        result.kernel(np.zeros((7, 4), dtype=np.float32))
    from_path = cognate.tune(
        tuned, target="cpu", width=16, top_k=1, model=cpu_model, candidates=200
    )
    assert from_path.matrix.name == TUNED


# --- errors ---------------------------------------------------------------------------------


def test_missing_shipped_model_is_one_line(tuned, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr("cognate.model.shipped.data_dir", lambda: tmp_path)
    code, out, err = run_cli(["tune", str(tuned), "--target", "spade"], capsys)
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "no shipped model for target spade, op spmm" in err and "cognate pretrain" in err


def test_bad_inputs_are_one_line(spade_model, cpu_model, tuned, tmp_path, capsys) -> None:
    cases = [
        ([str(tuned), "--model", str(tmp_path / "none.safetensors")], "no such model file"),
        ([str(tuned), "--target", "spade", "--model", str(cpu_model)], "model is for target cpu"),
        ([str(tmp_path / "missing.mtx"), "--model", str(spade_model)], "missing.mtx"),
    ]
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not a model")
    cases.append(([str(tuned), "--model", str(garbage)], "garbage.safetensors"))
    for args, needle in cases:
        code, out, err = run_cli(["tune", *args], capsys)
        assert code == 1 and len(err.strip().splitlines()) == 1, err
        assert needle in err and "Traceback" not in err


def test_api_records_verified_measurements(spade_model, tuned, tmp_path) -> None:
    """cognate.tune(..., verify=True, record=DB) keeps the top-k and the baseline in the
    store through its public write path; unverified results record nothing."""
    db = tmp_path / "api.sqlite"
    result = cognate.tune(
        tuned, target="spade", width=WIDTH, top_k=3, model=spade_model, verify=True, record=db
    )
    stored = Store(db).frame(target="spade", op="spmm")
    expected = {c.config.hash for c in result.candidates} | {result.baseline.config.hash}
    assert set(stored["config_hash"]) == expected
    assert stored["is_baseline"].sum() == 1 and (stored["status"] == "ok").all()
    runtimes = {c.config.hash: c.runtime_s for c in [*result.candidates, result.baseline]}
    for h, runtime in zip(stored["config_hash"], stored["runtime_s"], strict=True):
        assert runtime == pytest.approx(runtimes[h])
    assert result.best.runtime_s <= result.baseline.runtime_s
    cognate.tune(tuned, target="spade", width=WIDTH, model=spade_model, record=tmp_path / "n.db")
    assert not (tmp_path / "n.db").exists()


def test_sddmm_kernel_of_a_result_equals_scipy(tuned) -> None:
    """The SDDMM path of result.kernel(X, Y), on the cpu space's baseline and a tiled config."""
    from cognate.search import Candidate, Timings, TuneResult

    matrix = load_matrix(tuned)
    space = get_target("cpu").space("sddmm")
    tiled = space.sample(40, seed=3, shape=matrix.shape)
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, (matrix.shape[0], 8)).astype(np.float32)
    y = rng.uniform(-1, 1, (matrix.shape[1], 8)).astype(np.float32)
    a = matrix.csr.astype(np.float64)
    want = a.multiply(x.astype(np.float64) @ y.astype(np.float64).T).tocsr()
    checked = 0
    for config in [space.baseline(matrix.shape), *tiled]:
        base = Candidate(1, config, 0.0, space.describe(config))
        result = TuneResult(matrix, "cpu", "sddmm", 8, [base], base, 1, Path("-"), Timings())
        try:
            got = result.kernel(x, y)
        except CognateError as err:  # a layout over the size limit: refused, never wrong
            assert "over the limit" in str(err)
            continue
        assert (got.indptr == want.indptr).all() and (got.indices == want.indices).all()
        np.testing.assert_allclose(got.data, want.data, rtol=1e-4, atol=1e-5)
        checked += 1
        if checked == 3:
            break
    assert checked == 3


# --- the printed table ----------------------------------------------------------------------


def _printed(result) -> list[str]:
    """What ``cognate tune`` prints for ``result`` on an 80-column console."""
    import io

    from rich.console import Console

    from cognate.cli.tune_output import print_summary, print_table

    console = Console(width=80, file=io.StringIO(), record=True)
    print_table(console, result)
    print_summary(console, result)
    return console.export_text().splitlines()


def _table_result(target: str, base_at: int | None, verified: bool):
    """A result of 3 ranked configs (scored ranks 1, 2 and a family pick at 40); the
    baseline config is the one at ``base_at`` (a 1-based position) or, with None, outside
    the top-k at scored rank 9. Verified: runtimes 1, 2, 3 us, the baseline 1 us."""
    from cognate.search import Candidate, Timings, TuneResult

    space = get_target(target).space("spmm")
    configs = [
        c for c in space.sample(6, seed=1, shape=(100, 100)) if c != space.baseline((100, 100))
    ][:3]
    if base_at is not None:
        configs[base_at - 1] = space.baseline((100, 100))
    top = [
        Candidate(i, c, 0.1 * i, space.describe(c), scored_rank=r, family_pick=r == 40)
        for i, (c, r) in enumerate(zip(configs, (1, 2, 40), strict=True), 1)
    ]
    base_config = space.baseline((100, 100))
    base_rank = 9 if base_at is None else top[base_at - 1].scored_rank
    baseline = Candidate(base_rank, base_config, 0.5, space.describe(base_config))
    baseline.scored_rank = base_rank
    result = TuneResult(_tiny_matrix(), target, "spmm", 8, top, baseline, 256, Path("-"), Timings())
    if verified:
        for i, c in enumerate(top, 1):
            c.status, c.runtime_s, c.spread_s = "ok", i * 1e-6, 0.0
            if c.config == base_config:
                c.runtime_s = 1e-6
        baseline.status, baseline.runtime_s, baseline.spread_s = "ok", 1e-6, 0.0
        result.verified = True
    return result


def _rows(lines: list[str]) -> list[list[str]]:
    """The table's data rows' cells (first line of each row)."""
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in lines if "│" in line]
    return [row for row in cells if row[0]]


def test_rank_1_baseline_is_shown_once_and_said(shared) -> None:
    lines = _printed(_table_result("spade", base_at=1, verified=True))
    rows = _rows(lines)
    assert [r[0] for r in rows] == ["1", "2", "40"]  # the baseline is not a row of its own
    assert sum("baseline" in r[-1] for r in rows) == 1 and "baseline" in rows[0][-1]
    text = "\n".join(lines)
    assert "rank 1 is the baseline config" in text and "no candidate beat it" not in text


def test_table_ranks_in_model_order_with_marks_and_a_title_that_fits(shared) -> None:
    lines = _printed(_table_result("cpu", base_at=None, verified=False))
    rows = _rows(lines)
    ranks = [int(r[0]) for r in rows]
    assert ranks == [1, 2, 40, 9][: len(ranks)] and ranks[:3] == sorted(ranks[:3])
    assert rows[-1][0] == "9" and rows[-1][-1] == "baseline"  # the baseline, once, at its rank
    assert rows[2][-1] == "family pick"
    scores = [float(r[2]) for r in rows[:3]]
    assert scores == sorted(scores)  # no portfolio here: rank order is score order
    assert lines[0] == "tiny: 100 x 100, 500 nnz"
    assert lines[1] == "cpu spmm, width 8: top 3 of 256 scored configs"
    assert all(len(line) <= 80 for line in lines)
    text = "\n".join(lines)
    assert "family pick: its kernel family's best-ranked config" in text
    assert "simulated" not in text and "predicted best (rank 1):" in text


def test_spade_runtimes_are_marked_simulated(shared) -> None:
    lines = _printed(_table_result("spade", base_at=None, verified=True))
    header = next(line for line in lines if "rank" in line and "config" in line)
    assert "simulated" in header and "runtime" not in header
    text = "\n".join(lines)
    assert "runtimes are simulated" in text and "(simulated)" in text


@pytest.mark.parametrize(
    ("option", "value", "limit"),
    [("--candidates", "100000000", "at most 500,000"), ("--top-k", "100000", "at most 448")],
)
def test_work_sizing_options_are_bounded(tuned, option, value, limit, capsys) -> None:
    started = time.perf_counter()
    code, out, err = run_cli(["tune", str(tuned), option, value], capsys)
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"{option} {value}: {limit}" in err and "Traceback" not in err
    assert time.perf_counter() - started < 30  # refused before any work (8 GB once)


def test_gpu_ranks_with_the_shipped_zero_shot_model(tuned, capsys) -> None:
    code, out, err = run_cli(["tune", str(tuned), "--target", "gpu", "--top-k", "3"], capsys)
    assert code == 0, err
    text = " ".join((out + err).split())
    assert "top 3 of" in text and "Traceback" not in text
    assert "zero-shot: the shipped cpu model carried to gpu through the config mapper" in text
    assert "`--verify` on a gpu machine measures its picks" in text


def test_gpu_without_cuda_says_so_first(tuned, tmp_path, monkeypatch, capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    monkeypatch.setattr("cognate.model.shipped.data_dir", lambda: tmp_path)
    code, out, err = run_cli(["tune", str(tuned), "--target", "gpu"], capsys)
    lines = err.strip().splitlines()
    assert code == 1 and "no CUDA GPU" in lines[0] and "no shipped model" in lines[-1]
    code, out, err = run_cli(["tune", str(tuned), "--target", "gpu", "--verify"], capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1 and "no CUDA GPU" in err
