"""The greedy fixed set of configs: the k configs that, as a set, serve a group of matrices
best (each matrix takes the best of the set). Its first member is the best single config.
The evaluation's fixed-config baseline and a model's portfolio are both this set."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cognate.records import MatrixRuns

# A fixed config must be measured on this share of the training matrices to be eligible:
# a config seen on 2 matrices has a geomean of noise.
MIN_COVERAGE = 0.9


def speedups_over_baseline(run: MatrixRuns) -> dict[str, float]:
    base = run.runtimes[run.baseline]
    return {c.hash: float(base / t) for c, t in zip(run.configs, run.runtimes, strict=True)}


def with_baseline(runs: Sequence[MatrixRuns]) -> list[MatrixRuns]:
    return [r for r in runs if r.baseline is not None]


def greedy_fixed_set(train: Sequence[MatrixRuns], k: int) -> list[str]:
    """Config hashes of the greedy fixed set of size ``k`` (its first is the best single one)."""
    return greedy_set([speedups_over_baseline(r) for r in with_baseline(train)], k)


def greedy_set(speedups: Sequence[dict[str, float]], k: int) -> list[str]:
    """Greedy fixed set over per-matrix {config hash: speedup over the baseline} maps."""
    if not speedups:
        return []
    counts: dict[str, int] = {}
    for s in speedups:
        for h in s:
            counts[h] = counts.get(h, 0) + 1
    eligible = sorted(h for h, n in counts.items() if n >= MIN_COVERAGE * len(speedups))
    # log speedup matrix (configs x matrices); a missing record is the baseline (log 1 = 0)
    logs = np.array([[np.log(s.get(h, 1.0)) for s in speedups] for h in eligible])
    chosen: list[int] = []
    best = np.full(len(speedups), -np.inf)
    for _ in range(min(k, len(eligible))):
        gains = np.maximum(logs, best).mean(axis=1)
        gains[chosen] = -np.inf
        pick = int(np.argmax(gains))
        chosen.append(pick)
        best = np.maximum(best, logs[pick])
    return [eligible[i] for i in chosen]
