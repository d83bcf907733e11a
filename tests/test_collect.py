"""The collection driver and `cognate collect`: resume, kill, Ctrl-C, bad files, pool, Ray.

The driver is target-agnostic, so most tests use a small test-only target that really
measures something: scipy's SpMM through three storage formats, two layouts of B and
column chunking of B, each result checked against a reference before it is timed.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from cognate import targets
from cognate.collect import CollectSummary, collect
from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.runner import Measurement, ProgressFn, Runner
from cognate.space import Space
from cognate.store import Store

TESTS_DIR = Path(__file__).resolve().parent
MALFORMED = TESTS_DIR / "data" / "malformed"

# --- a test-only target: scipy SpMM variants ----------------------------------------------

IMPLS = ("csr", "csc", "coo")
LAYOUTS = ("C", "F")
CHUNKS = (16, 32, "all")  # columns of B per product


class ScipySpace(Space):
    """18 configs: storage format of A x memory layout of B x column chunk of B."""

    def __init__(self, op: str, target: str = "scipy-test") -> None:
        if op != "spmm":
            raise CognateError(f"{target} has no {op} space")
        self.target, self.op = target, op
        self.name, self.version = f"{target}-{op}", "test-1"

    def validate(self, knobs: Mapping[str, Any]) -> Config:
        if (
            knobs.get("impl") not in IMPLS
            or knobs.get("layout") not in LAYOUTS
            or knobs.get("chunk") not in CHUNKS
        ):
            raise CognateError(f"illegal config {dict(knobs)}")
        return Config(self.target, self.op, dict(knobs))

    def all(self) -> list[Config]:
        return [
            self.validate({"impl": i, "layout": lay, "chunk": c})
            for i, lay, c in itertools.product(IMPLS, LAYOUTS, CHUNKS)
        ]

    def baseline(self, shape: tuple[int, int]) -> Config:
        return self.validate({"impl": "csr", "layout": "C", "chunk": "all"})

    def sample(self, n: int, seed: int, shape: tuple[int, int]) -> list[Config]:
        configs = self.all()
        picks = np.random.default_rng(seed).permutation(len(configs))[:n]
        return [configs[i] for i in picks]

    def candidates(self, n: int, seed: int, shape: tuple[int, int]) -> list[Config]:
        return self.all()


class SimSpace(ScipySpace):
    def __init__(self, op: str) -> None:
        super().__init__(op, target="scipy-sim")


GATE_ENV = "COGNATE_TEST_GATE"  # "N:PATH": each runner measures N configs, then waits for PATH


class ScipyRunner(Runner):
    """Times ``A @ B`` as the config says; a wrong product is an error, never a timing."""

    target = "scipy-test"

    def __init__(self, repeats: int = 3, timeout_s: float | None = None) -> None:
        self.repeats = repeats
        self.measured = 0

    def begin_batch(self, matrix: Matrix, op: str, width: int) -> None:
        rng = np.random.default_rng(0)
        self.b = rng.standard_normal((matrix.shape[1], width)).astype(np.float32)
        self.reference = matrix.csr.astype(np.float64) @ self.b.astype(np.float64)
        # float32 error bound of each output entry: proportional to sum |a| |b|.
        self.scale = abs(matrix.csr.astype(np.float64)) @ abs(self.b.astype(np.float64))

    def measure_one(self, matrix: Matrix, op: str, width: int, config: Config) -> Measurement:
        self._gate()
        return self._one(matrix.csr, self.b, self.reference, self.scale, config)

    def _gate(self) -> None:
        """Under $COGNATE_TEST_GATE, stop before the (N+1)-th config until PATH exists: a test
        stops a collection at a known point, not in a time window a loaded machine can miss."""
        self.measured += 1
        spec = os.environ.get(GATE_ENV)
        if not spec:
            return
        count, path = spec.split(":", 1)
        deadline = time.monotonic() + 300  # a failed test leaves no collector behind for long
        while self.measured > int(count) and not os.path.exists(path):
            if time.monotonic() > deadline:
                raise RuntimeError(f"test gate {path} never opened")
            time.sleep(0.02)

    def _one(
        self,
        csr: sp.csr_matrix,
        b: np.ndarray,
        reference: np.ndarray,
        scale: np.ndarray,
        config: Config,
    ) -> Measurement:
        t0 = time.time()
        a = {"csr": csr.tocsr, "csc": csr.tocsc, "coo": csr.tocoo}[config["impl"]]()
        b = np.asarray(b, order=config["layout"])
        step = b.shape[1] if config["chunk"] == "all" else config["chunk"]

        def product() -> np.ndarray:
            return np.hstack([a @ b[:, j : j + step] for j in range(0, b.shape[1], step)])

        if (abs(product() - reference) > 1e-4 * scale + 1e-6).any():
            return Measurement(config, "error", error="result differs from the reference")
        times = []
        for _ in range(self.repeats):
            start = time.perf_counter()
            product()
            times.append(time.perf_counter() - start)
        counters = {"pid": os.getpid(), "t0": t0, "t1": time.time()}
        return Measurement(
            config, "ok", statistics.median(times), max(times) - min(times), counters
        )


class SimRunner(ScipyRunner):
    target = "scipy-sim"


EXCLUSIVE = targets.Target("scipy-test", ScipySpace, ScipyRunner, exclusive=True)
SHARED = targets.Target("scipy-sim", SimSpace, SimRunner, exclusive=False)
_real_get_target = targets.get_target


def fake_get_target(name: str) -> targets.Target:
    return {"scipy-test": EXCLUSIVE, "scipy-sim": SHARED}.get(name) or _real_get_target(name)


def install() -> None:
    """For CLI subprocesses: make the test targets known."""
    targets.get_target = fake_get_target


@pytest.fixture
def fake_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(targets, "get_target", fake_get_target)


@pytest.fixture
def small(suitesparse_files: list[Path]) -> list[Path]:
    by_name = {p.name: p for p in suitesparse_files}
    return [by_name["olm500.mtx.gz"], by_name["west0479.mtx.gz"]]


def records(db: Path) -> Any:
    with Store(db) as store:
        return store.frame()


def assert_one_record_per_config(db: Path, expected_per_matrix: dict[str, int]) -> None:
    df = records(db)
    assert not df.duplicated(["matrix_sha256", "config_hash", "host"]).any()
    assert df.groupby("matrix").size().to_dict() == expected_per_matrix
    assert (df.groupby("matrix")["is_baseline"].sum() == 1).all()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def cli(*args: str) -> list[str]:
    """A real `cognate` process that knows the test targets."""
    # A process started from a background shell inherits SIGINT ignored; the Ctrl-C tests
    # need Python's KeyboardInterrupt handler back.
    code = (
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        f"import sys; sys.path.insert(0, {str(TESTS_DIR)!r}); import test_collect; "
        "test_collect.install(); from cognate.cli import run; run(sys.argv[1:])"
    )
    return [sys.executable, "-c", code, *args]


# --- tests ---------------------------------------------------------------------------------


def test_collect_then_resume_measures_nothing_new(
    fake_targets: None, small: list[Path], tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    first = collect("scipy-test", "spmm", 32, small, db_path=db, n_configs=6, seed=1)
    assert first.exit_code == 0 and first.matrices == 2
    # 6 sampled + the baseline, unless the sample already holds it.
    df = records(db)
    per_matrix = df.groupby("matrix").size().to_dict()
    assert set(per_matrix) == {"olm500", "west0479"} and all(
        n in (6, 7) for n in per_matrix.values()
    )
    assert first.written == len(df) and (df["status"] == "ok").all()
    assert (df["runtime_s"] > 0).all() and (df["width"] == 32).all()

    again = collect("scipy-test", "spmm", 32, small, db_path=db, n_configs=6, seed=1)
    assert again.written == 0 and again.skipped == len(df) and again.exit_code == 0
    assert_one_record_per_config(db, per_matrix)
    assert records(db)["time"].tolist() == df["time"].tolist()  # nothing re-measured

    # More configs later: only the new ones are measured, plus the re-timed baseline.
    more = collect("scipy-test", "spmm", 32, small, db_path=db, all_configs=True, seed=1)
    new = 18 - per_matrix["olm500"] + 18 - per_matrix["west0479"]
    assert more.written == new + 2
    assert_one_record_per_config(db, {"olm500": 18, "west0479": 18})


def test_bad_matrix_file_is_skipped_with_one_line(
    fake_targets: None, small: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cognate.cli import run

    folder = tmp_path / "mats"
    folder.mkdir()
    shutil.copy(small[0], folder / small[0].name)
    (folder / "broken.mtx").write_text(
        "%%MatrixMarket matrix coordinate real general\n3 3 4\n1 1 1.0\n"
    )
    db = tmp_path / "runs.db"
    with pytest.raises(SystemExit) as exit_info:
        run(
            [
                "collect",
                "--target",
                "scipy-test",
                "--op",
                "spmm",
                "--configs",
                "3",
                "--db",
                str(db),
                str(folder),
            ]
        )
    assert exit_info.value.code == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    skipped = [line for line in err if "broken.mtx" in line]
    assert len(skipped) == 1 and skipped[0].startswith("cognate: skipped")
    assert "Traceback" not in "\n".join(err)
    assert set(records(db)["matrix"]) == {"olm500"}


class FlakyRunner(ScipyRunner):
    """Raises on one matrix: a runner bug must cost that matrix only."""

    def measure(
        self,
        matrix: Matrix,
        op: str,
        width: int,
        configs: Sequence[Config],
        progress: ProgressFn | None = None,
    ) -> list[Measurement]:
        if matrix.name == "olm500":
            raise RuntimeError("simulated runner bug")
        return super().measure(matrix, op, width, configs, progress)


def test_runner_failure_costs_only_its_matrix(
    monkeypatch: pytest.MonkeyPatch, small: list[Path], tmp_path: Path
) -> None:
    flaky = targets.Target("scipy-test", ScipySpace, FlakyRunner, exclusive=True)
    monkeypatch.setattr(targets, "get_target", lambda name: flaky)
    db = tmp_path / "runs.db"
    summary = collect("scipy-test", "spmm", 16, small, db_path=db, n_configs=3)
    assert summary.exit_code == 1 and summary.matrices == 1
    assert [p for p, _ in summary.failures] == [str(small[0])]
    assert "simulated runner bug" in summary.failures[0][1]
    assert set(records(db)["matrix"]) == {"west0479"}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--target", "tpu", "--op", "spmm"], "unknown target"),
        (["--target", "scipy-test", "--op", "gemm"], "gemm"),
        (["--target", "scipy-test", "--op", "spmm", "--width", "0"], "--width"),
        (["--target", "scipy-test", "--op", "spmm", "--ray", "127.0.0.1:1"], "nothing answers"),
    ],
)
def test_cli_rejects_bad_arguments_in_one_line(
    fake_targets: None,
    small: list[Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    needle: str,
) -> None:
    from cognate.cli import run

    with pytest.raises(SystemExit) as exit_info:
        run(["collect", *args, "--db", str(tmp_path / "r.db"), str(small[0])])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_cli_missing_file_is_one_line(
    fake_targets: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cognate.cli import run

    missing = tmp_path / "nope.mtx"
    with pytest.raises(SystemExit) as exit_info:
        run(
            [
                "collect",
                "--target",
                "scipy-test",
                "--op",
                "spmm",
                "--db",
                str(tmp_path / "r.db"),
                str(missing),
            ]
        )
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(missing) in err[0]
    assert not (tmp_path / "r.db").exists()  # nothing touched


def _start_and_wait(
    cmd: list[str], db: Path, at_least: int, gate: Path
) -> tuple[subprocess.Popen, int]:
    """Start a collector whose runners stop after ``at_least`` configs until ``gate`` exists;
    return it once the store holds ``at_least`` records (so a signal lands mid-collection
    however slow the machine is)."""
    env = {**os.environ, GATE_ENV: f"{at_least}:{gate}"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"collector ended early: {proc.communicate()}"
        if db.exists():
            try:
                with sqlite3.connect(db, timeout=5) as conn:
                    count = conn.execute("SELECT count(*) FROM measurements").fetchone()[0]
            except sqlite3.OperationalError:  # schema not created yet
                count = 0
            if count >= at_least:
                return proc, count
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("collector made no progress in 120 s")


def test_killed_collector_resumes_to_one_record_per_config(
    suitesparse_files: list[Path], tmp_path: Path, private_timing: Path
) -> None:
    by_name = {p.name: p for p in suitesparse_files}
    mats = [str(by_name["bcsstk13.mtx.gz"]), str(by_name["dwt_992.mtx.gz"])]
    db = tmp_path / "runs.db"
    args = [
        "collect",
        "--target",
        "scipy-test",
        "--op",
        "spmm",
        "--all-configs",
        "--repeats",
        "15",
        "--db",
        str(db),
        *mats,
    ]
    proc, _ = _start_and_wait(cli(*args), db, at_least=3, gate=tmp_path / "gate")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    killed_at = len(records(db))
    assert killed_at == 3, "the kill must land mid-collection, at the gate"

    done = subprocess.run(cli(*args), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert_one_record_per_config(db, {"bcsstk13": 18, "dwt_992": 18})
    assert (records(db)["status"] == "ok").all()


@pytest.mark.parametrize(
    ("target", "extra"), [("scipy-test", []), ("scipy-sim", ["--jobs", "2"])], ids=["seq", "pool"]
)
def test_ctrl_c_commits_what_is_done_and_exits_130(
    suitesparse_files: list[Path],
    tmp_path: Path,
    private_timing: Path,
    target: str,
    extra: list[str],
) -> None:
    by_name = {p.name: p for p in suitesparse_files}
    db = tmp_path / "runs.db"
    args = [
        "collect",
        *extra,
        "--target",
        target,
        "--op",
        "spmm",
        "--all-configs",
        "--repeats",
        "15",
        "--db",
        str(db),
        str(by_name["bcsstk13.mtx.gz"]),
    ]
    gate = tmp_path / "gate"
    proc, _ = _start_and_wait(cli(*args), db, at_least=2, gate=gate)
    proc.send_signal(signal.SIGINT)
    # Opened after the signal: pool workers finish the chunks they hold (then the driver
    # stores them), while the interrupted driver submits nothing new.
    gate.touch()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in out and "Traceback" not in err
    stored = len(records(db))
    assert 2 <= stored < 18
    assert f"collected {stored} records" in out  # the summary counts what reached the store
    assert_one_record_per_config(db, {"bcsstk13": stored})


def test_process_pool_for_non_exclusive_targets(
    fake_targets: None, small: list[Path], tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    summary = collect("scipy-sim", "spmm", 16, small, db_path=db, all_configs=True, jobs=2)
    assert summary.exit_code == 0 and summary.matrices == 2 and summary.written == 36
    df = records(db)
    assert_one_record_per_config(db, {"olm500": 18, "west0479": 18})
    pids = {json.loads(c)["pid"] for c in df["counters"]}
    assert os.getpid() not in pids  # measured in the pool, written by the driver


def test_ray_local_cluster_exclusive_tasks_never_overlap(
    fake_targets: None, small: list[Path], tmp_path: Path
) -> None:
    ray = pytest.importorskip("ray")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers lack tests/
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        db = tmp_path / "runs.db"
        summary = collect(
            "scipy-test", "spmm", 16, small, db_path=db, n_configs=4, ray_address="auto"
        )
        assert summary.exit_code == 0 and summary.matrices == 2, summary.line()
        df = records(db)
        assert_one_record_per_config(db, df.groupby("matrix").size().to_dict())
        # Each matrix reserved the whole (2-CPU) node: their time windows are disjoint.
        counters = df["counters"].map(json.loads)
        windows = sorted(
            (min(c["t0"] for c in group), max(c["t1"] for c in group))
            for _, group in counters.groupby(df["matrix"])
        )
        assert windows[0][1] <= windows[1][0]
        assert os.getpid() not in {c["pid"] for c in counters}

        again = collect(
            "scipy-test", "spmm", 16, small, db_path=db, n_configs=4, ray_address="auto"
        )
        assert again.written == 0 and again.skipped == len(df)
    finally:
        ray.shutdown()


# --- end to end on the real targets --------------------------------------------------------


def test_cpu_target_end_to_end_through_the_cli(small: list[Path], tmp_path: Path) -> None:
    db = tmp_path / "cpu.db"
    args = ["collect", "--target", "cpu", "--op", "spmm", "--width", "32", "--configs", "3"]
    args += ["--repeats", "2", "--db", str(db), *map(str, small)]
    cmd = [sys.executable, "-m", "cognate", *args]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    df = records(db)
    assert set(df["target"]) == {"cpu"} and set(df["status"]) <= {"ok", "too_large"}
    assert_one_record_per_config(db, df.groupby("matrix").size().to_dict())
    baselines = df[df["is_baseline"]]
    assert len(baselines) == 2 and (baselines["status"] == "ok").all()
    assert (df.loc[df["status"] == "ok", "runtime_s"] > 0).all()
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "collected 0 records" in again.stdout
    assert len(records(db)) == len(df)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_spade_target_end_to_end_in_a_process_pool(
    small: list[Path], tmp_path: Path, op: str
) -> None:
    db = tmp_path / "spade.db"
    summary = collect("spade", op, 32, small, db_path=db, n_configs=4, jobs=2)
    assert summary.exit_code == 0 and summary.matrices == 2, summary.line()
    df = records(db)
    assert set(df["target"]) == {"spade"} and (df["status"] == "ok").all()
    assert_one_record_per_config(db, df.groupby("matrix").size().to_dict())
    assert (df["runtime_s"] > 0).all()
    # Deterministic simulator: a rerun measures nothing, and the same seed picks the same set.
    assert collect("spade", op, 32, small, db_path=db, n_configs=4, jobs=2).written == 0


def test_cpu_width_over_the_limit_is_refused_before_measuring(
    small: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Past the codegen limit every config used to be stored as an error and exit 0."""
    from cognate.cli import run
    from cognate.targets.cpu.codegen import MAX_SPECIALISED_WIDTH

    db = tmp_path / "cpu.db"
    too_wide = str(MAX_SPECIALISED_WIDTH + 1)
    with pytest.raises(SystemExit) as exit_info:
        run(
            [
                "collect",
                "--target",
                "cpu",
                "--op",
                "spmm",
                "--width",
                too_wide,
                "--db",
                str(db),
                str(small[0]),
            ]
        )
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--width {too_wide} is over the cpu limit" in err[0]
    assert not db.exists() or records(db).empty


def test_from_model_measures_the_models_top_picks(small: list[Path], tmp_path: Path) -> None:
    """--from-model measures what `cognate tune` would verify (plus the baseline)."""
    from cognate.formats.read import load_matrix
    from cognate.search import tune_matrix

    db = tmp_path / "picked.db"
    summary = collect(
        "spade", "spmm", 64, small[:1], db_path=db, n_configs=3, jobs=1, from_model=None
    )
    assert summary.exit_code == 0
    picked = tmp_path / "picked2.db"
    model = Path(__file__).resolve().parents[1] / "data" / "models" / "spade-spmm.safetensors"
    summary = collect(
        "spade", "spmm", 64, small[:1], db_path=picked, n_configs=3, jobs=1, from_model=model
    )
    assert summary.exit_code == 0, summary.line()
    tuned = tune_matrix(load_matrix(small[0]), target="spade", op="spmm", width=64, top_k=3)
    expected = {c.config.hash for c in tuned.candidates} | {tuned.baseline.config.hash}
    assert set(records(picked)["config_hash"]) == expected
    # A random sample of 3 is a different set (the model's picks are not the seeded sample).
    assert set(records(db)["config_hash"]) != expected


# --- reliability: retries, exact --configs, the quiet-machine protocol, one-line errors -------


@pytest.fixture
def private_timing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private timing lock and job folder: other cognate jobs on this machine neither block
    these tests nor make their records noisy, and the tests' own helpers are seen."""
    from cognate import timing

    monkeypatch.setenv(timing.LOCK_ENV, str(tmp_path / "timing.lock"))
    monkeypatch.setenv(timing.JOBS_ENV, str(tmp_path / "jobs"))
    return tmp_path


class TimeoutRunner(ScipyRunner):
    """Config hashes in ``FAILS`` time out until measured ``FAILS[hash]`` times; those in
    ``WRONG`` are always a mismatch. ``SEEN`` counts measurements per hash."""

    FAILS: dict[str, int] = {}
    WRONG: set[str] = set()
    SEEN: Counter = Counter()

    def measure_one(self, matrix: Matrix, op: str, width: int, config: Config) -> Measurement:
        TimeoutRunner.SEEN[config.hash] += 1
        if config.hash in self.WRONG:
            return Measurement(config, "error", error="result differs from the reference")
        if TimeoutRunner.SEEN[config.hash] <= self.FAILS.get(config.hash, 0):
            return Measurement(config, "timeout", error="over 1 s")
        return super().measure_one(matrix, op, width, config)


def test_resume_retries_timeouts_and_errors_up_to_retries(
    small: list[Path], private_timing: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flaky = targets.Target("scipy-test", ScipySpace, TimeoutRunner, exclusive=True)
    monkeypatch.setattr(targets, "get_target", lambda name: flaky)
    configs = [c for c in ScipySpace("spmm").all() if c != ScipySpace("spmm").baseline((1, 1))]
    once, always, wrong = configs[0].hash, configs[1].hash, configs[2].hash
    TimeoutRunner.FAILS = {once: 1, always: 99}
    TimeoutRunner.WRONG = {wrong}
    TimeoutRunner.SEEN = Counter()
    db = private_timing / "r.db"

    def run_once(**options: Any) -> CollectSummary:
        return collect(
            "scipy-flaky", "spmm", 16, small[:1], db_path=db, all_configs=True, **options
        )

    first = run_once()
    assert first.statuses["timeout"] == 2 and first.statuses["error"] == 1
    # Resume: the two timeouts are measured again (with the baseline); the mismatch is done.
    second = run_once()
    assert second.retried == 2 and second.written == 3 and second.statuses["ok"] == 2
    third = run_once()  # `always` is on its third attempt: still within --retries 2
    assert third.retried == 1 and TimeoutRunner.SEEN[always] == 3
    assert run_once().written == 0  # attempts used up: done
    assert run_once(retry_failed=True).retried == 1  # forced
    assert TimeoutRunner.SEEN[wrong] == 1 and TimeoutRunner.SEEN[once] == 2
    df = records(db).set_index("config_hash")
    assert df.loc[always, "attempts"] == 4 and df.loc[once, "status"] == "ok"
    assert df.loc[wrong, "attempts"] == 1
    assert run_once(retries=0).written == 0


def test_configs_n_is_exact_and_spread_over_families(shared: Path) -> None:
    from cognate.collect.plan import choose_configs
    from cognate.formats.read import load_matrix
    from cognate.targets.cpu.space import make_space

    matrix = load_matrix(shared / "matrices" / "suitesparse" / "bcsstk13.mtx.gz")
    space = make_space("spmm")
    assert len(space.sample(8, 0, matrix.shape)) > 9  # the sample alone holds more than 8
    for n in (1, 8, 20):
        baseline, configs = choose_configs(space, matrix, n, False, seed=0)
        assert configs[0] == baseline and len({c.hash for c in configs}) == n + 1
    families = {c.knobs.get("family", "csr") for c in configs}
    assert families == {"csr", "dia", "bcsr", "reordered", "panel"}  # all present in 20


def test_quiet_machine_protocol(
    small: list[Path], fake_targets: None, private_timing: Path
) -> None:
    """A cpu-like (exclusive) collection waits for the timing lock, records the load around
    each timing, marks records noisy (one warning line) while another cognate job runs, and
    times a fixed 5% of each matrix's configs twice.

    The holder keeps the lock until the collector's console says it waits (an event, not a
    delay that a loaded machine could outlast)."""
    from rich.console import Console

    console_path = private_timing / "console.txt"
    console_path.touch()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import pathlib, sys, time\n"
            "from cognate.timing import job_marker, timing_lock\n"
            "console = pathlib.Path(sys.argv[1])\n"
            "with job_marker('collect-spade'):\n"
            "    with timing_lock():\n"
            "        print('holding', flush=True)\n"
            "        deadline = time.monotonic() + 300\n"
            "        while 'waiting for the timing lock' not in console.read_text():\n"
            "            assert time.monotonic() < deadline, 'the collector never waited'\n"
            "            time.sleep(0.02)\n"
            "        print(time.time(), flush=True)  # still held: no record may be older\n"
            "    time.sleep(300)\n",
            str(console_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        db = private_timing / "r.db"
        with console_path.open("w") as out:
            summary = collect(
                "scipy-test", "spmm", 16, small, db_path=db, all_configs=True,
                console=Console(file=out, width=300),
            )  # fmt: skip
        released = float(holder.stdout.readline())
    finally:
        holder.kill()
        holder.wait()
    lines = console_path.read_text().splitlines()
    assert any("waiting for the timing lock" in line for line in lines)
    assert sum("timings unreliable" in line for line in lines) == 1, lines
    df = records(db)
    assert (df["time"].map(lambda t: t.timestamp()) > released).all()  # none timed under the lock
    assert df["noisy"].all() and summary.noisy == summary.written == 36
    assert df[["load1_before", "busy_before", "load1_after", "busy_after"]].notna().all().all()
    # 5% of 18 configs, rounded up: one per matrix, the same ones for the same seed.
    with Store(db) as store:
        repeats = store.repeats()
    assert len(repeats) == 2 and (repeats["repeat_status"] == "ok").all()
    assert "2 repeats: Spearman" in summary.line() and "median spread" in summary.line()


@pytest.mark.parametrize("name", sorted(p.name for p in MALFORMED.iterdir()))
def test_spade_collect_on_a_malformed_file_is_one_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cognate.cli import run

    path = MALFORMED / name
    args = ["collect", "--target", "spade", "--op", "spmm", "--db", str(tmp_path / "r.db")]
    with pytest.raises(SystemExit) as exit_info:
        run([*args, str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 1 and len(err) == 1, err
    assert str(path) in err[0] and "internal error" not in err[0]
