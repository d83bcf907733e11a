"""Non-learned baselines a cost model must beat, chosen on training matrices only.

Each baseline gets the same budget as the learned model's top-k (k measured configs per
test matrix) and is scored like it: per test matrix, the speedup over the space's baseline
config of its first pick (``top1``) and of the best of its k picks (``topk``).

- ``fixed``: the single config with the best geomean speedup over the training matrices
  (top1), and the greedy fixed set of k configs (each step adds the config that most raises
  the geomean of the set's best), measured like top-k.
- ``gbt``: a cheap-feature selector of the WISE / Seer kind: gradient-boosted trees
  (scikit-learn's HistGradientBoostingRegressor) over matrix statistics and config knobs,
  predicting log(runtime / baseline runtime); its k lowest predictions are the picks.
- ``random``: random search with the same budget, in expectation (exact order statistics,
  no sampling noise).

A config a test matrix has no record of (not measured, or not runnable there) counts as the
baseline config's time: a user whose fixed config cannot run falls back to the baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln

from cognate.matrix_stats import matrix_statistics
from cognate.model.fixed_set import greedy_fixed_set, speedups_over_baseline, with_baseline
from cognate.records import MatrixRuns
from cognate.space import Space

BASELINES = ("fixed", "gbt", "random")


@dataclass(frozen=True)
class Picks:
    """Per test matrix: speedup over the baseline config of the first pick and of the best
    of the first k picks."""

    top1: dict[str, float]
    topk: dict[str, float]


# --- fixed configs -------------------------------------------------------------------------


def fixed_picks(train: Sequence[MatrixRuns], test: Sequence[MatrixRuns], k: int) -> Picks:
    """The best fixed config (top1) and the greedy fixed k-set (topk), scored on ``test``."""
    chosen = greedy_fixed_set(train, k)
    return _score_ordered(test, lambda run: chosen)


def _score_ordered(test: Sequence[MatrixRuns], order_of) -> Picks:
    top1, topk = {}, {}
    for run in with_baseline(test):
        s = speedups_over_baseline(run)
        picks = [s.get(h, 1.0) for h in order_of(run)] or [1.0]
        top1[run.matrix.name] = picks[0]
        topk[run.matrix.name] = max(picks)
    return Picks(top1, topk)


# --- cheap-feature selector ----------------------------------------------------------------


def config_features(space: Space, run: MatrixRuns) -> np.ndarray:
    """Per config: the loop-nest view (log2 strips, loop positions) and the target's own knobs."""
    shape = run.matrix.shape
    rows = []
    for config in run.configs:
        nest = space.loop_nest(config, shape, run.width)
        order = sorted(nest.order)
        rows.append(
            np.concatenate(
                [
                    np.log2([nest.i_split, nest.k_split, nest.j_split]),
                    [nest.order.index(name) for name in order],
                    np.asarray(space.knob_features(config), dtype=np.float64).ravel(),
                ]
            )
        )
    return np.asarray(rows)


def _design(space: Space, run: MatrixRuns, stats: np.ndarray) -> np.ndarray:
    knobs = config_features(space, run)
    context = np.tile(np.append(stats, np.log2(run.width)), (len(knobs), 1))
    return np.hstack([context, knobs])


def gbt_picks(
    space: Space,
    train: Sequence[MatrixRuns],
    test: Sequence[MatrixRuns],
    k: int,
    seed: int = 0,
) -> Picks:
    """Gradient-boosted trees over matrix statistics + knobs; picks its k lowest predictions."""
    from sklearn.ensemble import HistGradientBoostingRegressor  # heavy import: only here

    stats: dict[str, np.ndarray] = {}

    def stats_of(run: MatrixRuns) -> np.ndarray:
        if run.key not in stats:
            stats[run.key] = matrix_statistics(run.matrix.csr)
        return stats[run.key]

    runs = with_baseline(train)
    x = np.vstack([_design(space, r, stats_of(r)) for r in runs])
    y = np.concatenate([np.log(r.runtimes / r.runtimes[r.baseline]) for r in runs])
    model = HistGradientBoostingRegressor(max_iter=300, learning_rate=0.1, random_state=seed)
    model.fit(x, y)

    def order_of(run: MatrixRuns) -> list[str]:
        predicted = model.predict(_design(space, run, stats_of(run)))
        return [run.configs[i].hash for i in np.argsort(predicted, kind="stable")[:k]]

    return _score_ordered(test, order_of)


# --- random search -------------------------------------------------------------------------


def expected_best_of(speedups: np.ndarray, k: int) -> float:
    """Geometric expectation of the best of k distinct configs drawn uniformly at random.

    With the n log speedups sorted descending, the best of a k-subset is the i-th largest
    with probability C(n-1-i, k-1) / C(n, k); exact, so the floor carries no sampling noise.
    """
    logs = np.sort(np.log(speedups))[::-1]
    n = len(logs)
    k = min(k, n)
    i = np.arange(n)

    # C(n-1-i, k-1) / C(n, k), via log-gamma for large n
    def log_comb(a: np.ndarray, b: int) -> np.ndarray:
        return gammaln(a + 1) - gammaln(b + 1) - gammaln(a - b + 1)

    valid = (n - 1 - i) >= (k - 1)
    weights = np.zeros(n)
    weights[valid] = np.exp(log_comb(n - 1 - i[valid], k - 1) - log_comb(np.array(n), k))
    return float(np.exp(np.dot(weights, logs)))


def random_picks(test: Sequence[MatrixRuns], k: int) -> Picks:
    """Random search with k measurements, in expectation (top1 = one random config)."""
    top1, topk = {}, {}
    for run in with_baseline(test):
        s = run.runtimes[run.baseline] / run.runtimes
        top1[run.matrix.name] = expected_best_of(s, 1)
        topk[run.matrix.name] = expected_best_of(s, k)
    return Picks(top1, topk)


def all_baselines(
    space: Space, train: Sequence[MatrixRuns], test: Sequence[MatrixRuns], k: int = 5
) -> dict[str, Picks]:
    """Every baseline of this module, chosen on ``train``, scored on ``test``."""
    return {
        "fixed": fixed_picks(train, test, k),
        "gbt": gbt_picks(space, train, test, k),
        "random": random_picks(test, k),
    }
