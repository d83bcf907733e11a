"""Evaluate a tune model on real matrices: its measured top-k vs the best fixed configs.

Per matrix: the model ranks the space (``cognate.search.tune_matrix``, unverified), then its
top-k, the greedy fixed k-set and the baseline config are measured together with the
target's ``verify`` (cpu: interleaved rounds in one process, so every pick of one matrix
sees the same machine state); for spade, every config of the 256-config space is simulated
too (the oracle). The fixed set is chosen on the model's own training matrices from the
record store (``--db``; ``cognate.evaluate.baselines.greedy_fixed_set``), so both sides saw
the same data. Prints per matrix the speedups over the baseline config and at the end the
geomeans and the paired ratios model / fixed with a 95% bootstrap CI over the matrices
(the question: does the shipped model's verified top-5 beat the best fixed cpu config set of
the same size on held-out real matrices?).

    python scripts/eval_tune.py --target cpu --op spmm --width 64 --db records.sqlite \
        --exclude-training [--matrices ../shared/matrices/ngraph] [--min-nnz 10000]
    python scripts/eval_tune.py --target spade --op spmm --width 64 --db records.sqlite

Default matrices: the shared suitesparse/ and waco/ ones. ``--exclude-training`` leaves out
every matrix the model trained on or chose its epoch with (its metadata's split), so what
is printed is out of sample. cpu timings need a quiet machine (nothing else running).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cognate.bench.corpus import shared_paths
from cognate.config import Config
from cognate.formats.files import expand_matrix_paths
from cognate.formats.read import load_matrix
from cognate.matrix import Matrix
from cognate.model.cost_model import CostModel
from cognate.model.fixed_set import greedy_fixed_set
from cognate.model.portfolio import describe_portfolio
from cognate.records import load_runs
from cognate.runner import Measurement
from cognate.search import resolve_model_path, tune_matrix
from cognate.stats import bootstrap_ci, geomean, mean_of_ratio
from cognate.targets import Target, get_target


@dataclass
class Scores:
    """Per evaluated matrix, speedups over the baseline config (same order in every list)."""

    names: list[str] = field(default_factory=list)
    top1: list[float] = field(default_factory=list)
    topk: list[float] = field(default_factory=list)
    fixed1: list[float] = field(default_factory=list)
    fixedk: list[float] = field(default_factory=list)
    oracle: list[float] = field(default_factory=list)


def split_keys(model: CostModel, *parts: str) -> set[str]:
    """sha256 of the matrices in the given parts of the model's split."""
    split = model.metadata.get("split", {})
    return {m["sha256"] for part in parts for m in split.get(part, []) if isinstance(m, dict)}


def seen_matrices(model: CostModel) -> set[str]:
    """Every matrix the model trained on or selected its epoch with."""
    return split_keys(model, "train", "validation", "finetune")


def fixed_set(db: Path | None, model: CostModel, width: int, k: int) -> list[Config]:
    """The greedy fixed k-set (best single config first) over the model's training matrices'
    records at ``width``; empty without a store."""
    if db is None:
        return []
    space = model.space
    train = split_keys(model, "train")
    runs = [r for r in load_runs(db, space) if r.key in train and r.width == width]
    by_hash = {c.hash: c for r in runs for c in r.configs}
    chosen = [by_hash[h] for h in greedy_fixed_set(runs, k)]
    print(f"fixed {k}-set chosen on {len(runs)} training matrices of the model:")
    for config in chosen:
        print(f"  {space.describe(config)}")
    return chosen


def ok_times(measurements: Sequence[Measurement]) -> dict[str, float]:
    return {m.config.hash: m.runtime_s for m in measurements if m.status == "ok" and m.runtime_s}


def speedups(times: dict[str, float], base: float, configs: Sequence[Config]) -> list[float]:
    """Speedup over the baseline of each config, in order; a config that did not run counts
    as the baseline (a user falls back to it)."""
    return [base / times[c.hash] if c.hash in times else 1.0 for c in configs]


def evaluate_matrix(
    matrix: Matrix, args: argparse.Namespace, target: Target, model: CostModel, fixed: list[Config]
) -> tuple[float, float, float, float, float] | None:
    """(top-1, top-k, fixed top-1, fixed best-of-k, oracle) speedups; None: the baseline
    config did not run."""
    ranked = tune_matrix(matrix, args.target, args.op, args.width, args.top_k, model)
    top = [c.config for c in ranked.candidates]
    base = ranked.baseline.config
    todo = list({c.hash: c for c in [*top, *fixed, base]}.values())
    times = ok_times(
        target.verify(matrix, args.op, args.width, todo, threads=args.threads).measurements
    )
    if base.hash not in times:
        return None
    mine = speedups(times, times[base.hash], top)
    kept = speedups(times, times[base.hash], fixed) or [1.0]
    oracle = max(mine)
    if args.target == "spade":  # cheap: simulate the whole space for the oracle
        every = target.measure(matrix, args.op, args.width, target.space(args.op).candidates())
        oracle = times[base.hash] / min(ok_times(every).values())
    return mine[0], max(mine), kept[0], max(kept), oracle


def paired(mine: list[float], theirs: list[float]) -> str:
    rows = [np.array([mine]), np.array([theirs])]
    return bootstrap_ci(rows, mean_of_ratio).text()


def report(scores: Scores, k: int, spade: bool) -> None:
    n = len(scores.names)
    print(f"geomean over {n} matrices: top-1 {geomean(scores.top1):.3f}x, ", end="")
    print(f"top-{k} {geomean(scores.topk):.3f}x", end="")
    if spade:
        go = geomean(scores.oracle)
        print(f", oracle {go:.3f}x, top-{k} / oracle {100 * geomean(scores.topk) / go:.1f}%")
    else:
        print(" (cpu oracle: not enumerable; see bench_cpu.py)")
    if not scores.fixedk or n < 2:
        return
    print(
        f"fixed config {geomean(scores.fixed1):.3f}x, fixed {k}-set {geomean(scores.fixedk):.3f}x"
    )
    print(f"model top-1 / fixed config: {paired(scores.top1, scores.fixed1)} (paired, 95% CI)")
    print(f"model top-{k} / fixed {k}-set: {paired(scores.topk, scores.fixedk)} (paired, 95% CI)")


def matrix_files(given: list[Path]) -> list[Path]:
    if given:
        return expand_matrix_paths(given)
    return shared_paths()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="spade")
    parser.add_argument("--op", default="spmm")
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--db", type=Path, default=None, help="store to choose the fixed set")
    parser.add_argument("--matrices", type=Path, nargs="*", default=[])
    parser.add_argument("--min-nnz", type=int, default=0)
    parser.add_argument("--max-nnz", type=int, default=2_000_000)
    parser.add_argument("--limit", type=int, default=None, help="at most this many matrices")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--exclude-training", action="store_true")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    target = get_target(args.target)
    path = resolve_model_path(args.model, args.target, args.op)
    model = CostModel.load(path, target.space(args.op))
    seen = seen_matrices(model)
    fixed = fixed_set(args.db, model, args.width, args.top_k)
    scores = Scores()
    k = args.top_k
    portfolio = describe_portfolio(model.metadata)
    print(f"model {path} ({portfolio}); {args.target} {args.op}, width {args.width}, top-{k}")
    print(f"{'matrix':<28}{'nnz':>9}{'top-1':>8}{f'top-{k}':>8}{'fix-1':>8}{f'fix-{k}':>8}", end="")
    print(f"{'oracle':>8}  note")
    for path in matrix_files(args.matrices):
        if args.limit is not None and len(scores.names) >= args.limit:
            break
        matrix = load_matrix(path)
        if not args.min_nnz <= matrix.nnz <= args.max_nnz:
            continue
        if matrix.sha256 in seen and args.exclude_training:
            continue
        got = evaluate_matrix(matrix, args, target, model, fixed)
        if got is None:
            print(f"{matrix.name:<28}{matrix.nnz:>9}  (the baseline did not run)")
            continue
        scores.names.append(matrix.name)
        for column, value in zip(
            (scores.top1, scores.topk, scores.fixed1, scores.fixedk, scores.oracle),
            got,
            strict=True,
        ):
            column.append(value)
        cells = "".join(f"{v:>8.3f}" for v in got[:4]) + (
            f"{got[4]:>8.3f}" if args.target == "spade" else f"{'':>8}"
        )
        print(f"{matrix.name:<28}{matrix.nnz:>9}{cells}  {'seen' if matrix.sha256 in seen else ''}")
    if not fixed:
        scores.fixed1, scores.fixedk = [], []
    report(scores, k, args.target == "spade")


if __name__ == "__main__":
    main()
