"""Per-host labels: records of two cpu hosts are two ranking tasks, never one median."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from cognate.formats.read import load_matrix
from cognate.records import load_runs
from cognate.runner import Measurement
from cognate.store import Store
from cognate.targets import get_target

HOSTS = {"h-fast": 1.0, "h-slow": 1.35}  # the second host times everything 1.35x slower


@pytest.fixture()
def two_host_store(tmp_path: Path, shared: Path):
    space = get_target("cpu").space("spmm")
    matrices = [
        load_matrix(shared / "matrices" / "suitesparse" / f"{name}.mtx.gz")
        for name in ("494_bus", "west0479")
    ]
    db = tmp_path / "records.sqlite"
    expected = {}
    with Store(db) as store:
        for m in matrices:
            base = space.baseline(m.shape)
            configs = [base, *[c for c in space.sample(8, 0, m.shape) if c.hash != base.hash][:5]]
            for host, factor in HOSTS.items():
                # each host its own order: the slow host swaps the last two configs
                times = [factor * (1.0 + 0.1 * i) for i in range(len(configs))]
                if host == "h-slow":
                    times[-2], times[-1] = times[-1], times[-2]
                store.record(
                    m,
                    "cpu",
                    "spmm",
                    64,
                    [
                        Measurement(c, "ok", runtime_s=t)
                        for c, t in zip(configs, times, strict=True)
                    ],
                    space_version=space.version,
                    baseline_hash=base.hash,
                    host=host,
                )
                expected[(m.sha256, host)] = {
                    c.hash: t for c, t in zip(configs, times, strict=True)
                }
    return db, space, expected


def test_each_host_is_its_own_run_with_its_own_baseline(two_host_store) -> None:
    db, space, expected = two_host_store
    runs = load_runs(db, space)
    assert len(runs) == 4  # 2 matrices x 2 hosts, not 2 medians
    seen = set()
    for run in runs:
        got = {c.hash: t for c, t in zip(run.configs, run.runtimes, strict=True)}
        # the run's runtimes are exactly one host's: no median, no mix
        host = next(h for (sha, h), times in expected.items() if sha == run.key and times == got)
        seen.add((run.key, host))
        assert run.baseline is not None
        speedups = run.runtimes[run.baseline] / run.runtimes
        # labels are speedups over the same host's baseline: the host factor cancels
        assert speedups[run.baseline] == 1.0 and speedups.max() == 1.0
        assert np.allclose(sorted(speedups, reverse=True), [1 / (1 + 0.1 * i) for i in range(6)])
    assert len(seen) == 4
    keys = [r.key for r in runs]
    assert keys == sorted(keys)  # a matrix's hosts stay together (splits go by matrix)


def _corpus_report():
    path = Path(__file__).parents[1] / "scripts" / "corpus_report.py"
    spec = importlib.util.spec_from_file_location("corpus_report", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_corpus_report_gives_label_noise_across_hosts(two_host_store) -> None:
    from scipy.stats import spearmanr

    db, _space, expected = two_host_store
    with Store(db, readonly=True) as store:
        frame, repeats = store.frame(), store.repeats()
    lines = _corpus_report().noise_section(frame, repeats)
    assert lines[0] == "cpu label noise: the store holds no repeated measurements."
    (line,) = [x for x in lines if "across hosts" in x]
    assert "h-fast / h-slow (runtime ratio 1.35x): 12 pairs over 2 matrices" in line
    # each host's labels over its own baseline: the slow host's swap is the only disagreement
    fast, slow = [], []
    for (_sha, host), times in sorted(expected.items()):
        base = next(iter(times.values()))  # the baseline is each batch's first config
        speeds = {h: base / t for h, t in times.items()}
        (fast if host == "h-fast" else slow).append([speeds[h] for h in sorted(speeds)])
    rho = spearmanr(np.ravel(fast), np.ravel(slow)).statistic
    assert f"pooled {rho:.3f}" in line and rho < 1
