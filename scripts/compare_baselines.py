"""A pretrained model vs the non-learned baselines on its held-out matrices (paired).

    python scripts/compare_baselines.py MODEL --db records.sqlite [--width 64]

The model must have been trained with ``cognate pretrain --hold-out F``: its metadata names
the held-out (test) matrices, never trained on nor used for epoch selection. The baselines
(best fixed config, greedy fixed 5-set, the GBT selector, random search) are chosen on the
model's own training matrices, so both sides saw the same data. Prints per baseline the
geomean top-1 / best-of-5 as % of the oracle and the paired ratio model / baseline with a 95%
bootstrap CI over the held-out matrices.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from cognate.evaluate.baselines import all_baselines
from cognate.model.checkpoint import read_metadata
from cognate.model.cost_model import CostModel
from cognate.model.fixed_set import greedy_fixed_set
from cognate.model.portfolio import describe_portfolio
from cognate.records import load_runs
from cognate.stats import bootstrap_ci, mean_of_ratio
from cognate.targets import get_target


def model_picks(model: CostModel, scores: dict[str, np.ndarray], runs) -> tuple[dict, dict]:
    """Per matrix: speedup over the baseline of the model's top-1 and best of its top-5, in
    the model's own order (its portfolio first, when it has one)."""
    top1, top5 = {}, {}
    for run in runs:
        order = model.order(run.configs, scores[run.matrix.name])
        base = run.runtimes[run.baseline]
        top1[run.matrix.name] = float(base / run.runtimes[order[0]])
        top5[run.matrix.name] = float(base / run.runtimes[order[:5]].min())
    return top1, top5


def portfolio_picks(
    scores: dict[str, np.ndarray], runs, portfolio: list[str]
) -> tuple[dict[str, float], dict[str, float]]:
    """The model ranking only the configs of ``portfolio`` (a greedy fixed set chosen on the
    training matrices): per matrix the speedup of its top-1 and best of its top-5 there.
    Portfolio configs a matrix has no record of are left out (on spade every matrix has all
    256); none left: the baseline."""
    top1, top5 = {}, {}
    for run in runs:
        base = run.runtimes[run.baseline]
        index = {c.hash: i for i, c in enumerate(run.configs)}
        present = [index[h] for h in portfolio if h in index]
        order = sorted(present, key=lambda i: scores[run.matrix.name][i])
        speedups = [float(base / run.runtimes[i]) for i in order] or [1.0]
        top1[run.matrix.name], top5[run.matrix.name] = speedups[0], max(speedups[:5])
    return top1, top5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument(
        "--portfolio",
        type=int,
        nargs="*",
        default=[],
        metavar="M",
        help="also the model ranking only the greedy fixed M-set of the training matrices",
    )
    parser.add_argument(
        "--width",
        type=int,
        default=64,
        help="dense width of the records compared (a matrix may have several; default 64)",
    )
    args = parser.parse_args()
    meta = read_metadata(args.model)
    space = get_target(meta["target"]).space(meta["op"])
    split = {part: {m["sha256"] for m in meta["split"].get(part, [])} for part in ("train", "test")}
    if not split["test"]:
        raise SystemExit(f"{args.model}: no held-out matrices (train it with --hold-out)")
    # one width: the picks and baselines are keyed by matrix name
    runs = [
        r for r in load_runs(args.db, space) if r.baseline is not None and r.width == args.width
    ]
    train = [r for r in runs if r.key in split["train"]]
    test = [r for r in runs if r.key in split["test"]]
    model = CostModel.load(args.model, space)
    scores = {r.matrix.name: model.predict(r.matrix, r.configs, r.width) for r in test}
    mine1, mine5 = model_picks(model, scores, test)
    names = sorted(mine1)
    oracle = {r.matrix.name: float(r.runtimes[r.baseline] / r.runtimes.min()) for r in test}
    row = lambda d: np.array([[d[n] for n in names]])  # noqa: E731 - (1, matrices)
    pct = lambda d: bootstrap_ci([row(d), row(oracle)], mean_of_ratio).text("{:.1%}")  # noqa: E731
    print(
        f"{args.model.name}: {len(train)} training, {len(names)} held-out matrices "
        f"(width {args.width})"
    )
    print(f"model's {describe_portfolio(model.metadata)}")
    print(f"model  top-1 {pct(mine1)} of oracle, best of top-5 {pct(mine5)}")
    baselines = all_baselines(space, train, test, k=5)
    for size in args.portfolio:
        chosen = greedy_fixed_set(train, size)
        p1, p5 = portfolio_picks(scores, test, chosen)
        fixed = baselines["fixed"]
        r1 = bootstrap_ci([row(p1), row(fixed.top1)], mean_of_ratio).text()
        r5 = bootstrap_ci([row(p5), row(fixed.topk)], mean_of_ratio).text()
        print(
            f"model within the greedy {size}-set: top-1 {pct(p1)} of oracle, best of top-5 {pct(p5)}"
        )
        print(f"       / fixed: top-1 {r1}, top-5 / greedy 5-set {r5} (paired, 95% CI)")
    for name, picks in baselines.items():
        print(f"{name:<6} top-1 {pct(picks.top1)}, best of 5 {pct(picks.topk)}")
        r1 = bootstrap_ci([row(mine1), row(picks.top1)], mean_of_ratio).text()
        r5 = bootstrap_ci([row(mine5), row(picks.topk)], mean_of_ratio).text()
        print(f"       model / {name}: top-1 {r1}, top-5 {r5} (paired, 95% CI)")


if __name__ == "__main__":
    main()
