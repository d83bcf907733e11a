"""A model's portfolio: a fixed shortlist of configs it ranks first (issue 18).

On a space where a few fixed configs are already near the oracle (spade: the best single
config reaches ~98% of it on held-out matrices), a cost model's top-k over the whole space
loses to the greedy fixed k-set of the training matrices: its errors cost more than its
per-matrix choices gain. A portfolio keeps both: the greedy fixed M-set of the model's
training matrices (``cognate.evaluate.baselines.greedy_set``), ranked per matrix by the
model and placed ahead of every other config. M is chosen on the model's validation matrices
(the ones that chose its epoch; never its held-out ones), among sizes from k up and "no
portfolio" (the model alone), by the geomean of the best of the top-k; a tie keeps the larger
M (more left to the model). With M = k the top-k is the fixed set, in the model's order.

The portfolio lives in the model's metadata as knob dicts (each validated by the space on
load, like any config from a file) with the validation numbers that chose it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cognate.config import Config
from cognate.space import Space

if TYPE_CHECKING:
    from cognate.model.cost_model import CostModel
    from cognate.model.train import MatrixRuns

PORTFOLIO_KEY = "portfolio"
SIZE_FACTORS = (1.0, 1.2, 1.6, 2.0, 2.4, 3.2, 4.0, 6.4, 12.8)  # times k: the sizes tried


def portfolio_configs(metadata: dict[str, Any], space: Space) -> list[Config]:
    """The portfolio a model's metadata carries (empty: none, or "no portfolio" chosen)."""
    entry = metadata.get(PORTFOLIO_KEY) or {}
    return [space.validate(knobs) for knobs in entry.get("configs") or []]


def portfolio_mask(configs: Sequence[Config], portfolio: Sequence[Config]) -> np.ndarray:
    """Which of ``configs`` are in ``portfolio`` (one pass over the configs' canonical JSON:
    cheaper than their sha256 over 20k candidates)."""
    wanted = {c.json for c in portfolio}
    if not wanted:
        return np.zeros(len(configs), dtype=bool)
    return np.fromiter((c.json in wanted for c in configs), dtype=bool, count=len(configs))


def portfolio_order(scores: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Indices best first: the portfolio ``members`` (a mask) by score, then the rest by
    score. Without members, a plain stable argsort of the scores."""
    order = np.argsort(scores, kind="stable")
    if not members.any():
        return order
    inside = members[order]
    return np.concatenate([order[inside], order[~inside]])


def best_of_top(run: MatrixRuns, order: np.ndarray, k: int) -> tuple[float, float]:
    """(top-1, best of top-k) speedup over the run's baseline for a ranking of its configs."""
    base = run.runtimes[run.baseline]
    return float(base / run.runtimes[order[0]]), float(base / run.runtimes[order[:k]].min())


def choose_portfolio(
    model: CostModel,
    train: Sequence[MatrixRuns],
    validation: Sequence[MatrixRuns],
    k: int = 5,
) -> dict[str, Any]:
    """The metadata entry of ``model``'s portfolio: the greedy fixed M-set of ``train`` with
    M chosen on ``validation`` (see the module doc). ``configs`` is empty when the model alone
    ranks best on validation."""
    from cognate.evaluate.baselines import greedy_fixed_set
    from cognate.evaluate.stats import geomean

    validation = [r for r in validation if r.baseline is not None]
    if not validation:
        raise ValueError("choosing a portfolio needs validation runs with a measured baseline")
    largest = max(k, round(k * SIZE_FACTORS[-1]))
    chosen = greedy_fixed_set(train, largest)
    by_hash = {c.hash: c for r in train for c in r.configs}
    scores = {id(r): model.predict(r.matrix, r.configs, r.width) for r in validation}
    sizes = sorted({min(len(chosen), max(k, round(k * f))) for f in SIZE_FACTORS})
    table: dict[str, dict[str, float]] = {}
    for size in [0, *sizes]:  # 0: no portfolio
        members = [by_hash[h] for h in chosen[:size]]
        picks = [
            best_of_top(r, portfolio_order(scores[id(r)], portfolio_mask(r.configs, members)), k)
            for r in validation
        ]
        table[str(size)] = {
            "top1": geomean([p[0] for p in picks]),
            f"top{k}": geomean([p[1] for p in picks]),
        }
    best = max(table, key=lambda s: (round(table[s][f"top{k}"], 6), s == "0", int(s)))
    size = int(best)
    return {
        "configs": [dict(by_hash[h].knobs) for h in chosen[:size]],
        "size": size,
        "k": k,
        "chosen_on": f"{len(validation)} validation matrices",
        "greedy_from": f"{len(train)} training runs",
        "validation": table,
    }
