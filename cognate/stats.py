"""Summary statistics: the spread of repeated timings, and the evaluation's geomeans and
two-level bootstrap CI.

Every runner reports the spread of its repeated samples through ``timing_spread``, so the
store's two columns mean one thing each whichever target wrote them: ``spread_s`` the
interquartile range (the noise a comparison must clear), ``range_s`` max - min.

Each reported cell holds, per seed, the speedups of the same test matrices (the split is
fixed, docs/architecture.md, Evaluation protocol). A seed's number is the geomean over the test matrices; the cell's number
is the mean over seeds. The 95% CI resamples both sources of variation (percentile
bootstrap): seeds with replacement and, paired across seeds and across the arrays of one
statistic, test matrices with replacement. numpy's Generator does the resampling; scipy's
``bootstrap`` resamples one level only, hence this small function.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

# statistic over arrays of shape (seeds, matrices) -> one number
Statistic = Callable[..., float]


class Spread(NamedTuple):
    """How far repeated timings of one thing spread, in seconds."""

    iqr_s: float  # interquartile range (inclusive quartiles): the store's spread_s
    range_s: float  # max - min: the store's range_s


def timing_spread(samples: Sequence[float]) -> Spread:
    """The interquartile range and the range of ``samples`` (0 for fewer than 2)."""
    if len(samples) < 2:
        return Spread(0.0, 0.0)
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return Spread(float(q3 - q1), float(max(samples) - min(samples)))


def geomean(values: Iterable[float] | np.ndarray) -> float:
    """The geometric mean (NaN of nothing); any iterable of positive numbers."""
    values = np.asarray(values if isinstance(values, np.ndarray) else list(values), np.float64)
    return float(math.exp(np.mean(np.log(values)))) if values.size else float("nan")


def mean_of_geomeans(speedups: np.ndarray) -> float:
    """Mean over seeds (rows) of the geomean over matrices (columns)."""
    return float(np.mean(np.exp(np.mean(np.log(speedups), axis=1))))


def mean_of_ratio(numerator: np.ndarray, denominator: np.ndarray) -> float:
    """Mean over seeds of geomean(numerator) / geomean(denominator) (e.g. % of oracle)."""
    ratio = np.exp(np.mean(np.log(numerator), axis=1) - np.mean(np.log(denominator), axis=1))
    return float(np.mean(ratio))


@dataclass(frozen=True)
class Estimate:
    mean: float
    low: float
    high: float
    seeds: int
    matrices: int

    def text(self, fmt: str = "{:.3f}x") -> str:
        return f"{fmt.format(self.mean)} [{fmt.format(self.low)}, {fmt.format(self.high)}]"


def bootstrap_ci(
    arrays: Sequence[np.ndarray],
    statistic: Statistic,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> Estimate:
    """``statistic(*arrays)`` and its percentile CI; every array is (seeds, matrices)."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    shape = arrays[0].shape
    if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
        raise ValueError(f"bootstrap needs (seeds, matrices) arrays, got shape {shape}")
    if any(a.shape != shape for a in arrays):
        raise ValueError("bootstrap arrays must share one (seeds, matrices) shape")
    rng = np.random.default_rng(seed)
    n_seeds, n_matrices = shape
    draws = np.empty(n_boot)
    for b in range(n_boot):
        rows = rng.integers(0, n_seeds, n_seeds)
        cols = rng.integers(0, n_matrices, n_matrices)
        draws[b] = statistic(*(a[np.ix_(rows, cols)] for a in arrays))
    tail = (1 - level) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])
    return Estimate(float(statistic(*arrays)), float(low), float(high), n_seeds, n_matrices)
