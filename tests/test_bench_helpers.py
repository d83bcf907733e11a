"""The package helpers the benchmark scripts use instead of their own copies: the MKL
lookup for sparse_dot_mkl, the generated matrix pair, bench_cpu's kernel call, and the
timing protocol (threads set early, interleaved rounds under the timing lock)."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

from cognate import timing
from cognate.synth import generate, synthetic_pair
from cognate.targets.cpu.measure import library
from cognate.targets.cpu.measure.check import dense_operands, mismatch, reference
from cognate.targets.cpu.space import make_space

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def test_export_mkl_rt_env_sets_the_variable_only_when_unset(monkeypatch, tmp_path) -> None:
    lib = tmp_path / "lib" / "libmkl_rt.so.2"
    lib.parent.mkdir()
    lib.write_bytes(b"")
    monkeypatch.setattr(library.sys, "prefix", str(tmp_path))
    monkeypatch.setenv(library.MKL_ENV, "unset")  # set-then-delete: removed afterwards
    monkeypatch.delenv(library.MKL_ENV)
    assert library.export_mkl_rt_env() == lib
    assert os.environ[library.MKL_ENV] == str(lib)  # what sparse_dot_mkl reads
    mine = tmp_path / "mine.so"
    mine.write_bytes(b"")
    monkeypatch.setenv(library.MKL_ENV, str(mine))
    assert library.export_mkl_rt_env() == mine  # the user's choice is kept
    assert os.environ[library.MKL_ENV] == str(mine)
    monkeypatch.setenv(library.MKL_ENV, str(tmp_path / "absent.so"))
    assert library.export_mkl_rt_env() is None


def test_synthetic_pair_is_the_benchmarks_uniform_and_rmat() -> None:
    pair = synthetic_pair(20_000)
    assert [m.name for m in pair] == ["synth-uniform", "synth-rmat"]
    assert [m.shape for m in pair] == [(2000, 2000)] * 2  # about 10 nonzeros per row
    assert [m.nnz for m in pair] == [20_000] * 2
    again = synthetic_pair(20_000)
    assert all((a.csr != b.csr).nnz == 0 for a, b in zip(pair, again, strict=True))
    assert synthetic_pair(5_000)[0].shape == (1000, 1000)  # at least 1000 rows


@pytest.fixture
def private_lock(tmp_path, monkeypatch):
    """A private timing lock: other cognate processes on the machine neither block us nor
    are blocked."""
    monkeypatch.setenv(timing.LOCK_ENV, str(tmp_path / "timing.lock"))
    monkeypatch.setenv(timing.JOBS_ENV, str(tmp_path / "jobs"))


def test_time_interleaved_times_every_call_under_the_lock(private_lock) -> None:
    held: list[bool] = []

    def probe() -> None:
        held.append(timing.lock_held_elsewhere())  # our own lock, seen through another fd

    def nap() -> None:
        time.sleep(0.005)

    timed = timing.time_interleaved({"probe": probe, "nap": nap}, rounds=4, min_sample_s=0.0)
    assert timed.rounds == 4 and set(timed.seconds) == {"probe", "nap"}
    assert held == [True] * 5  # a warm-up and one call a round, each under the lock
    assert not timing.lock_held_elsewhere()  # and released afterwards
    # A sleep lasts at least its time: a bound that no load breaks, unlike a speed.
    assert timed.seconds["nap"] >= 0.005 and timed.seconds["probe"] < timed.seconds["nap"]
    assert timed.load.cores == timing.cores()


def test_time_interleaved_budget_lowers_the_rounds_to_at_least_three(private_lock) -> None:
    def nap() -> None:
        time.sleep(0.02)

    calls = {"nap": nap}
    assert timing.time_interleaved(calls, 50, 0.0, budget_s=0.001).rounds == 3
    assert 3 <= timing.time_interleaved(calls, 50, 0.0, budget_s=0.1).rounds <= 5
    assert timing.time_interleaved(calls, 4, 0.0, budget_s=600.0).rounds == 4


def test_early_threads_reaches_the_runtimes_variables(monkeypatch) -> None:
    for name in (*timing.THREAD_VARIABLES, "OMP_WAIT_POLICY"):
        monkeypatch.setenv(name, "unset")  # set-then-delete: restored afterwards
        monkeypatch.delenv(name)
    assert timing.early_threads(["bench.py", "--rounds", "3"]) is None
    assert not any(name in os.environ for name in timing.THREAD_VARIABLES)
    assert timing.early_threads(["bench.py"], default=2) == 2
    assert [os.environ[name] for name in timing.THREAD_VARIABLES] == ["2", "2"]
    assert timing.early_threads(["bench.py", "--threads", "3", "--quick"], default=2) == 3
    assert [os.environ[name] for name in timing.THREAD_VARIABLES] == ["3", "3"]
    assert "OMP_WAIT_POLICY" not in os.environ
    # A bad value is left to the script's argument parser, which names it.
    assert timing.early_threads(["bench.py", "--threads", "two"], default=4) == 4
    assert os.environ["OMP_NUM_THREADS"] == "3"
    timing.early_threads(["bench.py"], passive=True)
    assert os.environ["OMP_WAIT_POLICY"] == "passive"
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")
    timing.early_threads(["bench.py"], passive=True)
    assert os.environ["OMP_WAIT_POLICY"] == "active"  # the user's choice is kept


@pytest.fixture
def bench_cpu(monkeypatch):
    # The import exports $MKL_RT: set-then-delete makes monkeypatch remove it afterwards.
    monkeypatch.setenv(library.MKL_ENV, "unset")
    monkeypatch.delenv(library.MKL_ENV)
    monkeypatch.setattr(sys, "argv", [str(SCRIPTS / "bench_cpu.py")])
    spec = importlib.util.spec_from_file_location("bench_cpu", SCRIPTS / "bench_cpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_cpu_kernel_call_runs_every_family(bench_cpu) -> None:
    """bench_cpu's kernels come from the package's prepare_kernel, so a sampled DIA or
    BCSR config runs as well as the CSR baseline, and reads B in place."""
    matrix = generate("banded", 1000, 1000, nnz=8_000, seed=0)  # DIA-friendly
    (b,) = dense_operands("spmm", matrix.shape, 16, seed=0)
    space = make_space("spmm")
    configs = [space.baseline(matrix.shape)]
    for family in ("dia", "bcsr"):
        configs.append(next(c for c in space.sample(0, 0, matrix.shape) if c["family"] == family))
    ref, tol = reference(matrix.csr, "spmm", (b,))
    for config in configs:
        call = bench_cpu.kernel_call(matrix, "spmm", dict(config.knobs), (b,))
        call()
        assert mismatch(call.result(), ref, tol) is None, space.describe(config)
    b[:] = 1.0
    call()
    ones, tol = reference(matrix.csr, "spmm", (b,))
    assert mismatch(call.result(), ones, tol) is None


def test_compare_baselines_ranks_only_the_portfolio(shared) -> None:
    """--portfolio: the model's scores order only the portfolio's configs (one the matrix has
    no record of is left out); top-5 is the best of the first five."""
    import numpy as np

    from cognate.config import Config
    from cognate.formats.read import load_matrix
    from cognate.records import MatrixRuns

    spec = importlib.util.spec_from_file_location("compare", SCRIPTS / "compare_baselines.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "west0479.mtx.gz")
    configs = [Config("spade", "spmm", {"rp": 2**i}) for i in range(4)]
    run = MatrixRuns(matrix, 64, configs, np.array([4.0, 1.0, 2.0, 8.0]), baseline=0)
    scores = {matrix.name: np.array([0.0, 3.0, 1.0, -1.0])}  # model prefers 3, then 0, 2, 1
    portfolio = [configs[1].hash, configs[2].hash, "absent"]
    top1, top5 = module.portfolio_picks(scores, [run], portfolio)
    assert top1 == {matrix.name: 2.0}  # config 2 (score 1.0) before config 1 (score 3.0)
    assert top5 == {matrix.name: 4.0}  # best of the portfolio: config 1


def test_corpus_report_label_noise_from_the_repeats_table(shared, tmp_path) -> None:
    """corpus_report's noise figures come from the store's repeats: quiet ok pairs only,
    speedups over each matrix's baseline; a busy repeat is left out and counted."""
    from cognate.config import Config
    from cognate.formats.read import load_matrix
    from cognate.runner import Measurement
    from cognate.store import Store
    from cognate.timing import Load

    spec = importlib.util.spec_from_file_location("corpus_report", SCRIPTS / "corpus_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    west = load_matrix(shared / "matrices" / "suitesparse" / "west0479.mtx.gz")
    configs = [Config("cpu", "spmm", {"isplit": 2**i, "chunk": 1}) for i in range(6)]
    quiet = Load(load1=0.2, busy_cores=0.1, cores=2, threads=2)
    busy = Load(load1=3.9, busy_cores=1.9, cores=2, threads=2)
    first = [Measurement(c, "ok", (i + 1) * 1e-3, 1e-5) for i, c in enumerate(configs)]
    with Store(tmp_path / "r.db") as store:
        store.record(
            west, "cpu", "spmm", 32, first, space_version="v", host="h",
            baseline_hash=configs[0].hash, load=(quiet, quiet),
        )  # fmt: skip
        again = [Measurement(c, "ok", (i + 1.1) * 1e-3, 1e-5) for i, c in enumerate(configs)]
        store.record(
            west, "cpu", "spmm", 32, again[1:5], space_version="v", host="h",
            load=(quiet, quiet), repeat=True,
        )  # fmt: skip
        store.record(
            west, "cpu", "spmm", 32, again[5:], space_version="v", host="h",
            load=(busy, busy), repeat=True,
        )  # fmt: skip
        lines = module.noise_section(store.frame(), store.repeats())
    assert lines[0].startswith("cpu spmm label noise, repeats on one host (quiet): 4 pairs")
    assert "Spearman of speedups pooled 1.000" in lines[0]
    assert lines[1].startswith("(1 repeated pairs left out")


def test_corpus_report_fixed_configs_on_sampled_matrices() -> None:
    """On matrices measured on a sample of the space, the fixed configs count only where they
    were measured, against the best measured config (an upper bound on the % of oracle)."""
    import pandas as pd

    spec = importlib.util.spec_from_file_location("corpus_report", SCRIPTS / "corpus_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = [  # matrix a: fixed "f1" at 2 s, best 1 s; matrix b: "f1" not measured
        ("a", "f1", 2.0), ("a", "f2", 4.0), ("a", "x", 1.0),
        ("b", "f2", 3.0), ("b", "x", 1.5),
    ]  # fmt: skip
    frame = pd.DataFrame(rows, columns=["matrix_sha256", "config_hash", "runtime_s"])
    (line,) = module._sampled_lines(frame, ["f1", "f2"])
    assert line.startswith("- sampled matrices (not on all configs, 2): best fixed config 50.0%")
    assert "on the 1 where it was measured, greedy fixed 5-set 50.0% on 1" in line
    assert module._sampled_lines(frame, ["y"]) == [
        "- sampled matrices (not on all configs, 2): the best fixed config was not measured "
        "on any of them"
    ]
    assert module._sampled_lines(frame.iloc[:0], ["f1"]) == []


def test_eval_tune_scores_the_model_and_the_fixed_set_on_one_matrix(shared, tmp_path) -> None:
    """eval_tune: the fixed set comes from the model's training matrices' records; the model's
    top-k, the fixed set and the baseline are measured together; spade's oracle bounds all."""
    import argparse
    import json

    from cognate.collect import collect
    from cognate.formats.read import load_matrix
    from cognate.model.cost_model import CostModel
    from cognate.model.fixed_set import greedy_fixed_set
    from cognate.model.random_model import RandomModel
    from cognate.records import load_runs
    from cognate.targets import get_target

    spec = importlib.util.spec_from_file_location("eval_tune", SCRIPTS / "eval_tune.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    root = shared / "matrices" / "suitesparse"
    files = [root / f"{n}.mtx.gz" for n in ("494_bus", "olm500", "west0479")]
    db = tmp_path / "r.db"
    assert collect("spade", "spmm", 32, files, db_path=db, all_configs=True, jobs=1).exit_code == 0
    target = get_target("spade")
    space = target.space("spmm")
    path = RandomModel(space, seed=3).save(tmp_path / "random.json")
    meta = json.loads(path.read_text())
    train = [load_matrix(f) for f in files[:2]]
    meta["split"] = {"train": [{"sha256": m.sha256, "name": m.name} for m in train]}
    path.write_text(json.dumps(meta))
    model = CostModel.load(path, space)
    assert module.seen_matrices(model) == {m.sha256 for m in train}

    fixed = module.fixed_set(db, model, 32, 5)
    runs = [r for r in load_runs(db, space) if r.key in module.seen_matrices(model)]
    assert [c.hash for c in fixed] == greedy_fixed_set(runs, 5) and len(fixed) == 5

    matrix = load_matrix(root / "dwt_878.mtx.gz")
    args = argparse.Namespace(target="spade", op="spmm", width=32, top_k=5, threads=None)
    top1, topk, fixed1, fixedk, oracle = module.evaluate_matrix(matrix, args, target, model, fixed)
    measured = module.ok_times(
        target.measure(matrix, "spmm", 32, [space.baseline(matrix.shape), fixed[0]])
    )
    base = measured[space.baseline(matrix.shape).hash]
    assert fixed1 == pytest.approx(base / measured[fixed[0].hash], rel=1e-9)  # deterministic
    assert topk >= top1 and fixedk >= fixed1
    assert oracle >= max(topk, fixedk) - 1e-12


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_locality_fixed_config_is_chosen_without_the_matrix_it_scores() -> None:
    bench = _load_script("bench_locality")
    # config "a" is best on two matrices, "b" on the third; library / kept / noise entries
    # are never configs.
    rows = [
        {"seconds": {"baseline": 1.0, "a": 0.5, "b": 0.9, "lib:mkl-ie": 0.1, "kept:rcm": 0.1}},
        {"seconds": {"baseline": 1.0, "a": 0.5, "b": 0.9, "noise:baseline": 0.2}},
        {"seconds": {"baseline": 1.0, "a": 2.0, "b": 0.25}},
    ]
    oracle, fixed, picks = bench.oracle_and_fixed(rows)
    assert oracle == [2.0, 2.0, 4.0]
    # row 0 chosen on rows 1, 2: a = geomean(2, 0.5) = 1, b = geomean(1.11, 4) > 1 -> b
    assert picks == ["b", "b", "a"]
    assert fixed == pytest.approx([1 / 0.9, 1 / 0.9, 0.5])


def test_report_families_counts_winners_and_a_leave_one_out_fixed_config(capsys) -> None:
    """report_families: per width, the oracle over the baseline, the family of each matrix's
    fastest config, and a fixed config chosen on the other matrices only."""
    import json

    import pandas as pd

    spec = importlib.util.spec_from_file_location("families", SCRIPTS / "report_families.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    base = json.dumps({"isplit": 1})
    panel = json.dumps({"family": "panel", "pcols": 1024})
    rcm = json.dumps({"family": "reordered", "by": "rcm"})
    times = {"a": (1.0, 0.5, 0.8), "b": (1.0, 0.8, 0.5), "c": (1.0, 0.5, 2.0)}  # base panel rcm
    rows = [
        {
            "matrix": m,
            "width": 128,
            "host": "h",
            "config": cfg,
            "config_hash": cfg,
            "runtime_s": t,
            "is_baseline": cfg == base,
        }  # fmt: skip
        for m, ts in times.items()
        for cfg, t in zip((base, panel, rcm), ts, strict=True)
    ]
    module.report(pd.DataFrame(rows), ["reordered", "panel"], min_matrices=3)
    out = capsys.readouterr().out.splitlines()
    # oracle 2x on every matrix; leave-one-out: a -> panel (b, c favour it), b -> panel
    # (a, c: 2 * 1.25 > 1.25 * 0.5), c -> panel: fixed speedups 2, 1.25, 2
    fixed = (2 * 1.25 * 2) ** (1 / 3)
    assert out[0] == (
        f"N=128 host h: 3 matrices; oracle/baseline 2.000x; leave-one-out fixed/baseline"
        f" {fixed:.3f}x; oracle/fixed {2 / fixed:.3f}x"
    )
    assert out[2].split()[:4] == ["panel", "fastest", "on", "2;"]
    assert out[3].split()[:4] == ["reordered", "fastest", "on", "1;"]


def test_bench_vs_library_sddmm_calls_check_every_result_before_timing(monkeypatch) -> None:
    """--op sddmm: the tuned SDDMM (a user's ``kernel(X, Y, out=values)``) and torch's
    sampled_addmm are checked against scipy first; a wrong result is left out, not timed."""
    from cognate.config import Config
    from cognate.targets.cpu.tuned import ScheduleKernel

    monkeypatch.setattr(sys, "argv", [str(SCRIPTS / "bench_vs_library.py")])
    bench = _load_script("bench_vs_library")
    matrix = generate("powerlaw", nnz=5_000, seed=0)
    x, y = dense_operands("sddmm", matrix.shape, 16, seed=0)
    base = make_space("sddmm").baseline(matrix.shape)
    kernel = ScheduleKernel(matrix, "sddmm", Config("cpu", "sddmm", dict(base.knobs)))
    prepared, missing = bench.sddmm_calls(matrix, kernel, x, y)
    assert sorted(prepared) == ["torch", "tuned"] and missing == {}
    out = prepared["tuned"]()  # a scipy CSR around the preallocated values, A's pattern
    assert out.nnz == matrix.nnz and (out.indices == matrix.csr.indices).all()

    def wrong(x, y, out):  # writes A's pattern with zeros: not the product
        out[:] = 0.0
        return out

    prepared, missing = bench.sddmm_calls(matrix, wrong, x, y)
    assert sorted(prepared) == ["torch"] and missing["tuned"].startswith("result wrong")
    assert bench.bytes_moved(matrix, 16, "sddmm") > bench.bytes_moved(matrix, 16)
