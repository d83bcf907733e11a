"""A model's portfolio: a fixed shortlist of configs it ranks first.

On a space where a few fixed configs are already near the oracle (spade: docs/benchmarks.md,
The shipped spade models vs non-learned baselines), a cost model's top-k over the whole space
loses to the greedy fixed k-set of the training matrices: its errors cost more than its
per-matrix choices gain. A portfolio keeps both: the greedy fixed M-set of the model's
training matrices (``cognate.evaluate.baselines.greedy_set``), ranked per matrix by the
model and placed ahead of every other config. M is chosen on the model's validation matrices
(the ones that chose its epoch; never its held-out ones), among sizes from k up and "no
portfolio" (the model alone), together with the anchor below. With M = k the top-k is the
fixed set, in the model's order.

Within the portfolio the model's order may be *anchored* to the greedy order: each member's
score gets ``anchor`` times its greedy position added (scores: lower = faster), so the model
overrides the greedy order only where it predicts a gap wider than the anchor; 0 is the
model's own order, ``fixed_order`` the greedy order itself (top-1 = the best fixed config).
Why: with a fixed config that close to the oracle, a model's unconfident reshuffles of the
portfolio cost its top-1 more than its confident ones gain. M and the anchor are chosen
together on validation by the product of the geomeans of the top-1 and the best of top-k (both
matter: top-1 is what an unverified pick gets, top-k what a verified search gets); a tie
keeps the larger M, then the smaller anchor (more left to the model).

The portfolio lives in the model's metadata as knob dicts in greedy order (each validated by
the space on load, like any config from a file) with the validation numbers that chose it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cognate.config import Config
from cognate.space import Space

if TYPE_CHECKING:
    from cognate.model.cost_model import CostModel
    from cognate.records import MatrixRuns

PORTFOLIO_KEY = "portfolio"
SIZE_FACTORS = (1.0, 1.2, 1.6, 2.0, 2.4, 3.2, 4.0, 6.4, 12.8)  # times k: the sizes tried
# anchors tried, in units of the validation matrices' median spread of member scores
ANCHOR_FACTORS = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, math.inf)


def portfolio_configs(metadata: dict[str, Any], space: Space) -> list[Config]:
    """The portfolio a model's metadata carries (empty: none, or "no portfolio" chosen)."""
    entry = metadata.get(PORTFOLIO_KEY) or {}
    return [space.validate(knobs) for knobs in entry.get("configs") or []]


def portfolio_anchor(metadata: dict[str, Any]) -> float:
    """The anchor a model's portfolio entry carries (0: the model's order; inf: fixed order)."""
    entry = metadata.get(PORTFOLIO_KEY) or {}
    return math.inf if entry.get("fixed_order") else float(entry.get("anchor") or 0.0)


def describe_portfolio(metadata: dict[str, Any]) -> str:
    """One phrase: the portfolio's size and how its order is kept."""
    entry = metadata.get(PORTFOLIO_KEY) or {}
    size = len(entry.get("configs") or [])
    if not size:
        return "no portfolio"
    anchor = portfolio_anchor(metadata)
    if math.isinf(anchor):
        return f"portfolio of {size}, in its greedy order"
    return f"portfolio of {size}, ranked by the model" + (
        f", anchor {anchor:.3g}" if anchor else ""
    )


def portfolio_positions(configs: Sequence[Config], portfolio: Sequence[Config]) -> np.ndarray:
    """Each of ``configs``' position in ``portfolio`` (its greedy order), -1 outside it (one
    pass over the configs' canonical JSON: cheaper than their sha256 over 20k candidates)."""
    position = {c.json: i for i, c in enumerate(portfolio)}
    if not position:
        return np.full(len(configs), -1, dtype=np.int64)
    return np.fromiter(
        (position.get(c.json, -1) for c in configs), dtype=np.int64, count=len(configs)
    )


def portfolio_order(scores: np.ndarray, positions: np.ndarray, anchor: float = 0.0) -> np.ndarray:
    """Indices best first: the portfolio's members (``positions`` >= 0), then the rest by
    score. Members go by score plus ``anchor`` per greedy position (0: by score alone; inf:
    in greedy order). Without members, a plain stable argsort of the scores."""
    order = np.argsort(scores, kind="stable")
    inside = positions[order] >= 0
    if not inside.any():
        return order
    members = order[inside]
    if anchor > 0:
        greedy = positions[members].astype(np.float64)
        key = greedy if math.isinf(anchor) else scores[members] + anchor * greedy
        members = members[np.argsort(key, kind="stable")]
    return np.concatenate([members, order[~inside]])


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
    from cognate.model.fixed_set import greedy_fixed_set
    from cognate.stats import geomean

    validation = [r for r in validation if r.baseline is not None]
    if not validation:
        raise ValueError("choosing a portfolio needs validation runs with a measured baseline")
    largest = max(k, round(k * SIZE_FACTORS[-1]))
    chosen = greedy_fixed_set(train, largest)
    by_hash = {c.hash: c for r in train for c in r.configs}
    scores = {id(r): model.predict(r.matrix, r.configs, r.width) for r in validation}
    largest_set = [by_hash[h] for h in chosen]
    positions = {id(r): portfolio_positions(r.configs, largest_set) for r in validation}
    scale = _member_spread(validation, scores, positions)
    sizes = sorted({min(len(chosen), max(k, round(k * f))) for f in SIZE_FACTORS})
    rows = []
    for size, factor in [(0, 0.0)] + [(s, f) for s in sizes for f in ANCHOR_FACTORS]:
        picks = []
        for r in validation:  # a prefix of the greedy set: positions past ``size`` drop out
            inside = np.where(positions[id(r)] < size, positions[id(r)], -1)
            picks.append(best_of_top(r, portfolio_order(scores[id(r)], inside, factor * scale), k))
        top1, topk = geomean([p[0] for p in picks]), geomean([p[1] for p in picks])
        rows.append({"size": size, "anchor": factor, "top1": top1, f"top{k}": topk})
    # the best product of the two geomeans; a tie keeps the larger M, then the smaller anchor
    best = max(rows, key=lambda w: (round(w["top1"] * w[f"top{k}"], 6), w["size"], -w["anchor"]))
    size, factor = best["size"], best["anchor"]
    return {
        "configs": [dict(by_hash[h].knobs) for h in chosen[:size]],
        "size": size,
        "anchor": 0.0 if math.isinf(factor) else factor * scale,
        "fixed_order": math.isinf(factor),
        "anchor_unit": scale,
        "k": k,
        "chosen_on": f"{len(validation)} validation matrices",
        "greedy_from": f"{len(train)} training runs",
        "validation": [
            {**w, "anchor": _anchor_name(w["anchor"]), "chosen": w is best} for w in rows
        ],
    }


def _member_spread(
    runs: Sequence[MatrixRuns], scores: dict[int, np.ndarray], positions: dict[int, np.ndarray]
) -> float:
    """The anchors' unit: the median over ``runs`` of the spread (std) of the scores of the
    portfolio members they have, so an anchor reads as "this many typical gaps"."""
    spreads = [
        float(np.std(scores[id(r)][positions[id(r)] >= 0]))
        for r in runs
        if (positions[id(r)] >= 0).sum() > 1
    ]
    spread = float(np.median(spreads)) if spreads else 0.0
    return spread if spread > 0 else 1.0


def _anchor_name(factor: float) -> float | str:
    """An anchor factor for JSON: "fixed" for the greedy order (JSON has no infinity)."""
    return "fixed" if math.isinf(factor) else factor


# --- which ranking a model uses: learned, fixed-K or their blend ----------------------------

RANKING_KEY = "ranking"
LEARNED, FIXED_K, BLEND = "learned", "fixed-K", "blend"
RANKINGS = (LEARNED, FIXED_K, BLEND)


def ranking_kind(entry: dict[str, Any]) -> str:
    """What a portfolio entry (``choose_portfolio``) amounts to: the learned ranking (no
    portfolio), the fixed lookup (the greedy order kept: top-1 is the best fixed config,
    top-k the greedy fixed k-set) or a blend (the model reorders the portfolio)."""
    if not entry.get("size"):
        return LEARNED
    return FIXED_K if entry.get("fixed_order") else BLEND


def order_words(entry: dict[str, Any]) -> str:
    """A portfolio entry's order: "fixed" (greedy) or its anchor in typical score gaps."""
    if entry["fixed_order"]:
        return "fixed"
    return f"anchor {entry['anchor'] / entry['anchor_unit']:g}"


def chooser_words(row: dict[str, Any]) -> str:
    """What a validated portfolio chose (a row with ``portfolio_size`` and
    ``portfolio_order``), in the tuner's terms: learned, fixed or blend."""
    if row["portfolio_size"] == 0:
        return "learned"
    if row["portfolio_order"] == "fixed":
        return f"fixed ({row['portfolio_size']} configs)"
    return f"blend ({row['portfolio_size']} configs, {row['portfolio_order']})"


def ranking_decision(
    entry: dict[str, Any], validation: Sequence[MatrixRuns], greedy_from: str
) -> dict[str, Any]:
    """The provenance of a portfolio entry's choice: what was chosen (``ranking_kind``) and,
    per option, its validation top-1 and best of top-k as geomean speedups over the baseline
    and as shares of the validation oracle. Each option is its best row of ``entry``'s
    validation table (by the product ``choose_portfolio`` maximises); the chosen option is
    the chosen row. ``greedy_from`` says which matrices the greedy set was chosen on."""
    from cognate.stats import geomean

    runs = [r for r in validation if r.baseline is not None]
    oracle = geomean([float(r.runtimes[r.baseline] / r.runtimes.min()) for r in runs])
    k, chosen = entry["k"], ranking_kind(entry)

    def kind(row: dict[str, Any]) -> str:
        if row["size"] == 0:
            return LEARNED
        return FIXED_K if row["anchor"] == "fixed" else BLEND

    def rank(row: dict[str, Any]) -> tuple[bool, float, int]:
        return bool(row.get("chosen")), round(row["top1"] * row[f"top{k}"], 6), row["size"]

    best: dict[str, dict[str, Any]] = {}
    for row in entry["validation"]:
        kept = best.get(kind(row))
        if kept is None or rank(row) > rank(kept):
            best[kind(row)] = row
    options = {
        name: {
            "top1": row["top1"],
            "best_of_k": row[f"top{k}"],
            "top1_of_oracle": min(1.0, row["top1"] / oracle),
            "best_of_k_of_oracle": min(1.0, row[f"top{k}"] / oracle),
            "size": row["size"],
            "anchor": row["anchor"],
        }
        for name, row in sorted(best.items(), key=lambda item: RANKINGS.index(item[0]))
    }
    return {
        "chosen": chosen,
        "why": f"best product of validation top-1 and best of top-{k} (geomean speedups)",
        "k": k,
        "oracle": oracle,
        "validation_matrices": len({r.key for r in runs}),
        "greedy_from": greedy_from,
        "options": options,
    }


def ranking_used(metadata: dict[str, Any]) -> dict[str, Any]:
    """Which ranking a model's metadata makes ``tune`` use (from its portfolio), and why:
    the stored validation decision (``ranking_decision``: ``chosen`` and each option's
    figures) when it has one, else what its portfolio entry says."""
    entry = metadata.get(PORTFOLIO_KEY) or {}
    used = ranking_kind({**entry, "size": len(entry.get("configs") or [])})
    out: dict[str, Any] = {"used": used, "portfolio": describe_portfolio(metadata)}
    decision = metadata.get(RANKING_KEY)
    if decision:
        out.update(decision)
        if decision["chosen"] != used:  # a portfolio edited after the choice
            out["why"] = f"the portfolio was changed after validation chose {decision['chosen']}"
        return out
    if not entry.get("chosen_on"):
        return {**out, "why": _unvalidated_why(metadata)}
    out["why"] = f"portfolio chosen on {entry['chosen_on']} (cognate portfolio)"
    chosen = next((row for row in entry.get("validation") or [] if row.get("chosen")), None)
    if chosen is not None:  # its validation geomean speedups over the baseline
        k = entry.get("k", 5)
        out["validation"] = {"top1": chosen["top1"], "best_of_k": chosen[f"top{k}"], "k": k}
    return out


def _unvalidated_why(metadata: dict[str, Any]) -> str:
    """Why a model has no validated choice, in words: a zero-shot transfer says so."""
    transfer = metadata.get("transfer") or {}
    if not transfer.get("without_records"):
        return "the model carries no validated choice"
    source, target = (transfer.get("source") or {}).get("target", "source"), metadata["target"]
    return (
        f"zero-shot: the shipped {source} model carried to {target} through the config mapper; "
        f"no {target} runtime trained or checked it, so `--verify` on a {target} machine "
        "measures its picks and `--verify --learn` refines it there"
    )


def ranking_line(used: dict[str, Any]) -> str:
    """One line: the ranking used and the validation figures that chose it."""
    line = f"ranking: {used['used']} ({used['portfolio']})"
    options = used.get("options")
    if not options:
        figures = used.get("validation")
        if figures:
            line += (
                f"; validation top-1 {figures['top1']:.3f}x, best-of-{figures['k']} "
                f"{figures['best_of_k']:.3f}x over the baseline"
            )
        return f"{line}; {used['why']}"
    k = used["k"]
    figures = ", ".join(
        f"{name} top-1 {100 * o['top1_of_oracle']:.1f}% / best-of-{k} "
        f"{100 * o['best_of_k_of_oracle']:.1f}%"
        for name, o in options.items()
    )
    return (
        f"{line}, chosen on {used['validation_matrices']} validation matrices "
        f"(% of their oracle): {figures}; {used['greedy_from']}"
    )
