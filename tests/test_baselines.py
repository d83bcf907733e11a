"""Non-learned baselines: greedy fixed sets, the cheap-feature selector, exact random search."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from cognate.evaluate import baselines
from cognate.records import MatrixRuns
from cognate.synth import generate
from cognate.targets import get_target


@pytest.fixture(scope="module")
def space():
    return get_target("spade").space("spmm")


def _runs(space, matrix, runtime_of) -> MatrixRuns:
    configs = space.candidates(0, 0, matrix.shape)
    base = space.baseline(matrix.shape)
    runtimes = np.array([runtime_of(matrix, c) for c in configs])
    return MatrixRuns(matrix, 64, configs, runtimes, configs.index(base))


def _matrices(kind: str, n: int, rows: int = 2048):
    return [generate(kind, rows, rows, nnz=8000, seed=s) for s in range(n)]


def test_greedy_set_covers_two_populations_a_single_config_cannot(space):
    # two kinds of matrix, each with its own fast config: one fixed config serves one kind,
    # the greedy 2-set serves both
    configs = space.candidates(0, 0, (2048, 2048))
    fast = {"uniform": configs[7].hash, "banded": configs[42].hash}

    def runtime(matrix, config):
        kind = "uniform" if "uniform" in matrix.source else "banded"
        return 1.0 if config.hash == fast[kind] else 4.0

    train = [_runs(space, m, runtime) for m in _matrices("uniform", 3) + _matrices("banded", 2)]
    one = baselines.greedy_fixed_set(train, 1)
    two = baselines.greedy_fixed_set(train, 2)
    assert one == [fast["uniform"]]  # the majority's config has the better geomean
    assert set(two) == set(fast.values()) and two[0] == one[0]
    test = [_runs(space, m, runtime) for m in _matrices("banded", 2, rows=4096)]
    picks = baselines.fixed_picks(train, test, 2)
    assert space.baseline((4096, 4096)).hash not in fast.values()
    assert set(picks.top1.values()) == {1.0}  # the uniform config is no help here
    assert set(picks.topk.values()) == {4.0}  # the 2-set holds banded's fast config


def test_expected_best_of_matches_enumeration():
    rng = np.random.default_rng(3)
    speedups = rng.lognormal(0.0, 0.5, size=9)
    for k in (1, 2, 4, 9):
        exact = np.mean([np.log(max(c)) for c in itertools.combinations(speedups, k)])
        assert baselines.expected_best_of(speedups, k) == pytest.approx(math.exp(exact), rel=1e-9)


def test_gbt_selector_learns_a_structure_dependent_choice(space):
    # the fast row-panel size depends on the matrix's row count: a statistic the GBT sees and
    # no single fixed config can follow
    def runtime(matrix, config):
        want = 16 if matrix.shape[0] <= 4096 else 256
        return 1.0 + abs(math.log2(config["rp"]) - math.log2(want)) + 0.01 * config["split"]

    small = [generate("uniform", 4096, 4096, nnz=6000, seed=s) for s in range(4)]
    large = [generate("uniform", 32768, 32768, nnz=6000, seed=s) for s in range(4)]
    train = [_runs(space, m, runtime) for m in small[:3] + large[:3]]
    test = [_runs(space, m, runtime) for m in (small[3], large[3])]
    gbt = baselines.gbt_picks(space, train, test, k=5)
    fixed = baselines.fixed_picks(train, test, 1)
    oracle = {r.matrix.name: r.runtimes[r.baseline] / r.runtimes.min() for r in test}
    for name in oracle:
        assert gbt.top1[name] == pytest.approx(oracle[name], rel=0.02)
    assert min(fixed.top1[n] / oracle[n] for n in oracle) < 0.5


def test_matrix_statistics_tell_banded_from_uniform():
    banded = baselines.matrix_statistics(generate("banded", 4096, 4096, nnz=40000, seed=1).csr)
    uniform = baselines.matrix_statistics(generate("uniform", 4096, 4096, nnz=40000, seed=1).csr)
    # bandwidth (mean offset from the diagonal) and diagonal concentration
    assert banded[9] < 0.02 < uniform[9]
    assert banded[11] > 0.9 > 0.1 > uniform[11]
