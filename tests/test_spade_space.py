"""The spade spaces, the loop-nest mapping (docs/architecture.md, Transfer) and the runner."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.targets import get_target
from cognate.targets.spade.simulator import Schedule


@pytest.fixture(scope="module")
def target():
    return get_target("spade")


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_space_has_448_distinct_configs_with_the_paper_baseline(target, op):
    space = target.space(op)
    configs = space.candidates(0, 0, (100, 100))
    assert len(configs) == 448 == len({c.hash for c in configs})
    assert space.values["rp"] == [4, 8, 16, 32, 64, 256, 1024]
    base = space.baseline((100, 100))
    assert dict(base.knobs) == {
        "rp": 256, "cp": "all", "barrier": False, "bypass": False, "split": 1, "sched": "static"
    }  # fmt: skip
    assert base in configs
    assert target.exclusive is False
    sample = space.sample(10, seed=3, shape=(100, 100))
    assert sample == space.sample(10, seed=3, shape=(100, 100)) and len(set(sample)) == 10


def test_validate_rejects_illegal_knobs(target):
    space = target.space("spmm")
    good = dict(space.baseline().knobs)
    for bad in ({**good, "rp": 100}, {**good, "cp": "none"}, {**good, "barrier": 1},
                {**good, "sched": "guided"}, {k: v for k, v in good.items() if k != "split"},
                {**good, "extra": 1}):  # fmt: skip
        with pytest.raises(CognateError):
            space.validate(bad)
    assert space.validate(good) == space.baseline()


def test_loop_nest_mapping(target):
    space = target.space("spmm")
    config = space.validate(
        {"rp": 64, "cp": 256, "barrier": True, "bypass": True, "split": 2, "sched": "dynamic"}
    )
    nest = space.loop_nest(config, (1000, 5000), 32)
    assert (nest.i_split, nest.k_split, nest.j_split) == (64, 256, 16)
    assert nest.order == ("k1", "i1", "i0", "k0", "j1", "j0")
    base = space.loop_nest(space.baseline(), (1000, 5000), 32)
    assert (base.i_split, base.k_split, base.j_split) == (256, 5000, 32)
    assert base.order == ("i1", "k1", "i0", "k0", "j1", "j0")
    small = space.loop_nest(space.baseline(), (100, 40), 32)  # strips capped by dimension
    assert (small.i_split, small.k_split) == (100, 40)
    assert np.array_equal(space.knob_features(config), [1.0, 1.0])
    assert np.array_equal(space.knob_features(space.baseline()), [0.0, 0.0])
    assert space.schedule(config) == Schedule(64, 256, True, True, 2, True)


def test_runner_measures_a_real_matrix(target, shared):
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "bcspwr06.mtx.gz")
    space = target.space("spmm")
    configs = space.sample(6, seed=0, shape=matrix.shape) + [space.baseline()]
    seen = []
    results = target.runner().measure(matrix, "spmm", 32, configs, progress=seen.append)
    assert seen == results and [r.config for r in results] == configs
    for r in results:
        assert r.status == "ok" and r.runtime_s > 0 and r.spread_s == 0.0
        assert r.counters["dram_bytes"] > 0 and r.counters["pe_busy_max_s"] <= r.runtime_s
        assert r.counters["l1_hits"] + r.counters["l1_misses"] > 0
    assert len({r.runtime_s for r in results}) > 1  # the knobs matter
    sddmm = target.runner().measure(matrix, "sddmm", 16, [target.space("sddmm").baseline()])
    assert sddmm[0].status == "ok" and sddmm[0].counters["nnz_passes"] == matrix.nnz


def test_runner_reports_bad_config_as_error(target, shared):
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "bcspwr06.mtx.gz")
    space = target.space("spmm")
    bad = type(space.baseline())("spade", "spmm", {"rp": 3})
    good = space.baseline()
    results = target.runner().measure(matrix, "spmm", 32, [bad, good])
    assert results[0].status == "error" and "knobs" in results[0].error
    assert results[1].status == "ok"


def test_runner_takes_the_shared_options_and_rejects_typos(target):
    runner = target.runner(timeout_s=5.0, repeats=3)  # accepted, ignored: runs are deterministic
    assert runner.machine.pes >= 1
    with pytest.raises(CognateError, match=r"does not take these options \(repeat, warmup\)"):
        target.runner(repeat=3, warmup=1)


def test_reused_runner_matches_fresh_runners_across_matrices(target, shared):
    """Tilings are cached per batch: a second matrix must not reuse the first one's."""
    folder = shared / "matrices" / "suitesparse"
    first, second = (load_matrix(folder / f"{n}.mtx.gz") for n in ("bcspwr06", "494_bus"))
    configs = [target.space("spmm").baseline()]
    runner = target.runner()
    runner.measure(first, "spmm", 32, configs)
    reused = runner.measure(second, "spmm", 32, configs)
    fresh = target.runner().measure(second, "spmm", 32, configs)
    assert reused[0].status == "ok" and reused[0].runtime_s == fresh[0].runtime_s


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_the_earlier_256_config_space_stays_readable(target, op):
    """The rp 16/64/256/1024 space's records are this space's (compatible version), and a
    matrix measured on exactly its 256 configs counts as measured on every config."""
    space = target.space(op)
    (earlier,) = space.compatible_versions
    assert space.accepts_version(earlier) and space.reads_models_of(earlier)
    assert not space.accepts_version("000000000000")
    every, old = space.complete_config_sets()
    assert len(every) == 448 and len(old) == 256 and old < every
    assert old == {c.hash for c in space.all_configs() if c["rp"] in (16, 64, 256, 1024)}


def test_a_compatible_version_must_list_a_subset_of_the_knob_values(target, tmp_path, monkeypatch):
    from cognate.targets.spade.space import SpadeSpace

    text = (Path(__file__).parents[1] / "configs" / "spade-spmm.yaml").read_text()
    bad = text.replace("{rp: [16, 64, 256, 1024]}", "{rp: [16, 2048]}")
    assert bad != text
    (tmp_path / "spade-spmm.yaml").write_text(bad)
    monkeypatch.setattr("cognate.space.configs_dir", lambda: tmp_path)
    with pytest.raises(CognateError, match="subset of the knob values"):
        SpadeSpace("spmm")
