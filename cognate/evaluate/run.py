"""``run_evaluation``: data, models, cells, summaries, plots and report.md in one folder."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from cognate.errors import CognateError
from cognate.evaluate import baselines, harness, report
from cognate.evaluate.harness import TL, Log, OpData
from cognate.evaluate.preset import ExperimentPreset
from cognate.paths import shared_dir
from cognate.transfer.finetune import EmbeddingCache


def resolve_db(preset: ExperimentPreset, db: Path | None, out: Path, log: Log) -> Path:
    """Snapshot ``db`` into ``out`` when usable; else collect a small store (presets with a
    ``collect`` section only). The user's store is never written."""
    snapshot = out / "records.snapshot.db"
    if db is not None and harness.usable(db, preset) is None:
        log(f"snapshotting {db} -> {snapshot}")
        return harness.snapshot_db(db, snapshot)
    why = harness.usable(db, preset) if db is not None else "no --db given"
    collected = out / "records.collected.db"
    if preset.collect is None:
        raise CognateError(f"no usable records: {why}")
    if harness.usable(collected, preset) is None:
        log(f"reusing collected records {collected}")
        return collected
    log(f"no usable records ({why}); collecting a small {preset.target} store")
    return harness.collect_small_store(preset, collected, shared_dir(), log)


def git_revision() -> str:
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():  # an installed package: no checkout to name
        return "unknown (not a git checkout)"
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{rev}{' (with uncommitted changes)' if dirty else ''}"


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )


def evaluate_op(data: OpData, preset: ExperimentPreset, out: Path, log: Log) -> dict[str, Any]:
    models = out / "models"
    models.mkdir(parents=True, exist_ok=True)
    pretrained = harness.pretrained_model(data, preset, models, log)
    digest = harness.runs_digest(data.runs)
    # frozen-featurizer embeddings, shared by every fine-tune and kept for a rerun
    cache = EmbeddingCache(out / "embeddings")
    todo = harness.cells(preset, len(data.train))
    sources = {None: pretrained}  # per featurizer ablation, its own source model
    for featurizer in sorted({c.featurizer for c in todo} - {None}):
        sources[featurizer] = harness.pretrained_model(data, preset, models, log, featurizer)
    results = []
    op_started = time.time()
    with _progress() as progress:
        task = progress.add_task(data.op, total=len(todo))
        for i, cell in enumerate(todo, start=1):
            name = f"{data.op} {cell.variant} K={cell.k} seed {cell.seed}"
            progress.update(task, description=name)
            log(f"{data.op} [{i}/{len(todo)}] {cell.variant} K={cell.k} seed {cell.seed} ...")
            started = time.time()
            source = sources[cell.featurizer]
            result = harness.run_cell(data, preset, cell, source, models, digest, cache, log)
            results.append(result)
            progress.advance(task)
            val = result["chosen"]["validation"][preset.select.metric]
            log(
                f"{data.op} [{i}/{len(todo)}] {cell.variant} K={cell.k} seed {cell.seed}: "
                f"validation {preset.select.metric} {val:.3f} ({time.time() - started:.1f}s; "
                f"{progress_words(i, len(todo), time.time() - op_started)})"
            )
    results += harness.portfolio_results(results, len(data.train))
    fixed = harness.fixed_k_results(data, preset)
    harness.check_fixed_k_pairing(results, fixed)
    results += fixed
    log(f"{data.op}: embeddings {cache.hits} reused, {cache.misses} computed")
    fine_tunes = {
        "total": sum(r["candidates"] for r in results if "candidates" in r),
        "reused": sum(r.get("fine_tunes_reused", 0) for r in results),
    }
    floor = harness.random_pick(data.test_runs())
    rows = report.ordered(report.summarize(results, preset.bootstrap))
    log(f"{data.op}: non-learned baselines (chosen on all {len(data.train)} training matrices)")
    picks = baselines.all_baselines(data.space, data.train_runs(), data.test_runs(), k=5)
    k = tl_k(preset, rows)
    learned = next((r for r in rows if r["variant"] == TL and r["k"] == k), None)
    with_portfolio = next(
        (r for r in rows if r["variant"] == harness.TL_PORTFOLIO and r["k"] == k), None
    )
    compared = {name: vars(p) for name, p in picks.items()}
    return {
        "source": data.source_name,
        "data": _sizes(data),
        "split": {
            "seed": preset.split_seed,
            "train": data.names(data.train),
            "validation": data.names(data.validation),
            "test": data.names(data.test),
        },
        "source_matrices": sorted({r.matrix.name for r in data.source_runs}),
        "shortfalls": data.shortfalls,
        "sampled_left_out": data.sampled,
        "over_max_nnz": data.over_max_nnz,
        "pretrained": pretrained.name,
        "pretrained_ablations": {k: v.name for k, v in sources.items() if k is not None},
        "cells": results,
        "fine_tunes": fine_tunes,
        "random_pick": floor,
        "rows": rows,
        "baselines": report.baseline_comparison(compared, learned, preset.bootstrap),
        "baselines_portfolio": (
            report.baseline_comparison(compared, with_portfolio, preset.bootstrap)
            if with_portfolio
            else None
        ),
    }


def progress_words(done: int, total: int, elapsed_s: float) -> str:
    """Progress as "elapsed 12m03s, ETA 40m10s": the ETA extrapolates this run's mean time
    per cell (cells reused from an earlier run make it optimistic at first)."""
    eta = elapsed_s / done * (total - done) if done else float("nan")
    return f"elapsed {_clock(elapsed_s)}, ETA {_clock(eta)}"


def _clock(seconds: float) -> str:
    if seconds != seconds:
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _sizes(data: OpData) -> dict[str, Any]:
    counts = [len(r.configs) for r in data.runs]
    source_counts = [len(r.configs) for r in data.source_runs]
    return {
        "target_matrices": len({r.key for r in data.runs}),
        "target_records": sum(len(r.configs) for r in data.runs),
        "configs_per_matrix": [min(counts), max(counts)],
        "train": len(data.train),
        "validation": len(data.validation),
        "test": len(data.test),
        "source_matrices": len({r.key for r in data.source_runs}),
        "source_records": sum(len(r.configs) for r in data.source_runs),
        "source_configs_per_matrix": [min(source_counts), max(source_counts)],
    }


def run_evaluation(
    preset: ExperimentPreset,
    db: Path | None,
    out: Path,
    command: str,
    log: Log,
    max_nnz: int | None = None,
) -> Path:
    """Run the whole protocol; returns the path of report.md. ``max_nnz``: matrices with
    more nonzeros are left out of the target and the source (and counted in the report)."""
    started = time.time()
    out.mkdir(parents=True, exist_ok=True)
    records = resolve_db(preset, db, out, log)
    # every op's data first: a store short of the preset's minimum is refused before any work
    prepared = {op: harness.prepare_op(records, preset, op, log, max_nnz) for op in preset.ops}
    ops = {op: evaluate_op(data, preset, out, log) for op, data in prepared.items()}
    results = {
        "preset": preset.model_dump(),
        "command": command,
        "git": git_revision(),
        "db": str(db) if db else None,
        "max_nnz": max_nnz,
        "records": str(records),
        "wall_s": time.time() - started,
        "ops": ops,
    }
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return write_report(results, preset, out)


def tl_k(preset: ExperimentPreset, rows: list[dict[str, Any]]) -> int:
    """TL-5, or the K the data allows nearest below 5."""
    ks = sorted(r["k"] for r in rows if r["variant"] == TL)
    below = [k for k in ks if k <= 5]
    return below[-1] if below else ks[0]


def write_report(results: dict[str, Any], preset: ExperimentPreset, out: Path) -> Path:
    lines = [
        f"# cognate evaluation: preset `{preset.name}`, target {preset.target}",
        "",
        f"- command: `{results['command']}`",
        f"- git revision: {results['git']}",
        f"- records: {results['db'] or 'collected here'} (read from `{results['records']}`)",
        f"- wall time: {results['wall_s'] / 60:.1f} min{_reuse_words(results)}",
        f"- featurizer: {_featurizer_words(preset)}",
        f"- NT-K (target only): {_target_only_words(preset)}",
        *_ablation_words(preset),
        f"- seeds: {preset.seeds}; split seed {preset.split_seed}; "
        f"validation {preset.val_fraction:.0%}, test {preset.test_fraction:.0%} of the matrices",
        f"- selected on validation ({preset.select.metric}): freeze_featurizer in "
        f"{preset.select.freeze_featurizer}, lr in {preset.select.lr}; epochs by early stopping "
        f"(<= {preset.finetune_epochs}, patience {preset.patience})",
        "",
        "Protocol: matrices are split once by matrix into train / validation / test. The source "
        "model is pretrained on source records minus the target's validation and test matrices. "
        "Each cell fine-tunes every candidate setting on K training matrices, keeps the one with "
        "the best validation score, and scores only that one on test. Numbers: geomean over the "
        "test matrices of the speedup over the space's baseline config, mean over seeds, and a "
        "95% percentile bootstrap CI resampling seeds and test matrices. % of oracle = geomean "
        "speedup / geomean oracle speedup.",
        "",
    ]
    for op, res in results["ops"].items():
        rows = res["rows"]
        k = tl_k(preset, rows)
        floor = report.floor_estimate(res["random_pick"], preset.bootstrap)
        d = res["data"]
        lines += [
            f"## {preset.target} {op}",
            "",
            f"Data: {d['target_matrices']} target matrices ({d['target_records']} ok records, "
            f"{d['configs_per_matrix'][0]}..{d['configs_per_matrix'][1]} configs per matrix): "
            f"train {d['train']}, validation {d['validation']}, test {d['test']}. Source: "
            f"{res['source']}, {d['source_matrices']} matrices outside the target's validation "
            f"and test splits ({d['source_records']} records, "
            f"{_span(d.get('source_configs_per_matrix'))} configs per matrix)."
            + _sampled_words(res.get("sampled_left_out", 0), preset)
            + _over_nnz_words(res.get("over_max_nnz") or {}, results.get("max_nnz")),
            "",
            *[f"**Below the preset's data minimum**: {line}.\n" for line in res["shortfalls"]],
            "### Answers",
            "",
            *[f"- {line}" for line in report.answers(rows, k)],
            *[f"- {line}" for line in report.transfer_answers(rows, k, preset.bootstrap)],
            *[f"- {line}" for line in report.active_answers(rows, preset.bootstrap)],
            *[f"- {line}" for line in report.ablation_answers(rows, preset.bootstrap)],
            "",
            "### Results (test split)",
            "",
            report.markdown_table(rows, floor),
            "",
            *_fixed_k_section(res, preset),
            *_baseline_section(res, k),
        ]
        capped = sorted({m for m in preset.matrices if m > d["train"]})
        if capped:
            lines += [f"K = {capped} capped at the {d['train']} training matrices.", ""]
        pngs = _plots(rows, k, op, out)
        lines += [f"![{p.stem}]({p.name})" for p in pngs] + [""]
    lines += [
        "## The paper's figures (docs/architecture.md, Evaluation protocol), for reference",
        "",
        report.paper_table(),
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def _fixed_k_section(res: dict[str, Any], preset: ExperimentPreset) -> list[str]:
    """The K-matched comparison: the learned rows against a lookup with the same data."""
    comparison = report.fixed_k_comparison(res["rows"], preset.bootstrap)
    if not comparison:
        return []
    return [
        "### At equal target data: TL-K and NT-K against fixed-K (test split)",
        "",
        "fixed-K is a lookup chosen on exactly the K training matrices TL-K and NT-K of the "
        "same seed fine-tune on (the same draw): its top-1 is the config with the best "
        "geomean speedup over those K matrices, its best of 5 the greedy fixed 5-set on them. "
        "Nothing is trained. Ratios are the learned row's per-seed geomean over fixed-K's, "
        "paired over seeds (draws) and test matrices, with a 95% bootstrap CI; above 1 the "
        "learned ranking earns its training.",
        "",
        *[f"- {line}" for line in report.fixed_k_answers(comparison)],
        "",
        report.fixed_k_table(comparison),
        "",
        *_k_portfolio_words(res),
    ]


def _k_portfolio_words(res: dict[str, Any]) -> list[str]:
    """What TL-K's validated K portfolio chose per seed (the tuner's choice, made on the
    validation matrices only): learned ranking, fixed-K, or a blend of the two."""
    cells = [c for c in res["cells"] if c["variant"] == harness.TL_K_PORTFOLIO]
    if not cells:
        return []
    by_k: dict[int, list[str]] = {}
    for c in sorted(cells, key=lambda c: (c["k"], c["seed"])):
        by_k.setdefault(c["k"], []).append(f"seed {c['seed']} {harness.chooser_words(c)}")
    return [
        f"`TL-{k} + K portfolio`: TL-{k}'s model with the greedy fixed set of its own {k} "
        "fine-tuning matrices ranked first, its size (0 = the learned ranking alone) and how "
        "firmly it keeps the greedy order (fixed = the fixed-K lookup) chosen on the "
        f"validation matrices; chosen: {'; '.join(words)}."
        for k, words in by_k.items()
    ] + [""]


def _baseline_section(res: dict[str, Any], k: int) -> list[str]:
    comparison = res.get("baselines")
    if not comparison:
        return []
    label = f"TL-{k}"
    n_train = res["data"]["train"]
    lines = [
        f"### Against non-learned baselines chosen on all {n_train} training matrices (test split)",
        "",
        f"Each baseline is chosen on all {n_train} training matrices (not K: the K-matched "
        "lookup is fixed-K above) and gets "
        "the same budget: one pick (top-1) or five measured picks (top-5). Ratios are "
        f"{label}'s per-seed geomean over the baseline's, paired on the same test matrices, "
        "with a 95% bootstrap CI.",
        "",
        *[f"- {line}" for line in report.baseline_answers(comparison, label)],
        "",
        report.baseline_table(comparison, label, n_train),
        "",
        *_headroom(res, comparison, k),
    ]
    with_portfolio = res.get("baselines_portfolio")
    if with_portfolio:
        label = f"TL-{k} + portfolio of all {n_train} training matrices"
        chosen = sorted(
            {
                f"{c['portfolio_size']} ({c.get('portfolio_order', 'anchor 0')})"
                for c in res["cells"]
                if c["variant"] == harness.TL_PORTFOLIO
            }
        )
        lines += [
            f"#### {label}",
            "",
            f"The same TL-{k} models ranking a portfolio first: the greedy fixed set of all "
            f"{n_train} training matrices (not only the K fine-tuning ones: this row uses more "
            f"target data than TL-{k}), its size chosen per seed on the validation matrices among "
            "5..64 configs and none, together with how firmly it keeps its greedy order (an "
            "anchor, in typical score gaps per position: 0 = the model's order, fixed = the "
            "greedy order), by the product of the top-1 and top-5 geomeans (chosen: "
            f"{', '.join(chosen)}; 0 = none).",
            "",
            *[f"- {line}" for line in report.baseline_answers(with_portfolio, label)],
            "",
            report.baseline_table(with_portfolio, label, n_train),
            "",
        ]
    return lines


def _headroom(res: dict[str, Any], comparison: list[dict[str, Any]], k: int) -> list[str]:
    """How much the fixed baselines leave to win: what a missed "beat the fixed config" goal
    means depends on it (a space a lookup nearly solves leaves a ranking almost nothing)."""
    fixed = next((c for c in comparison if c["baseline"] == "fixed"), None)
    learned = next((r for r in res["rows"] if r["variant"] == TL and r["k"] == k), None)
    if fixed is None or learned is None:
        return []
    oracle = learned["estimates"]["oracle"]["mean"]
    top1, top5 = fixed["top1"]["mean"], fixed["top5"]["mean"]
    return [
        f"Headroom: on these test matrices the best fixed config reaches {top1 / oracle:.1%} "
        f"of the oracle and the greedy fixed 5-set {top5 / oracle:.1%}, so no model can beat "
        f"them by more than {oracle / top1:.3f}x (top-1) and {oracle / top5:.3f}x (best of 5).",
        "",
    ]


def _reuse_words(results: dict[str, Any]) -> str:
    """How much of the work this run did: a rerun reuses the models an earlier run trained,
    so its wall time alone understates what the numbers cost."""
    counts = [op.get("fine_tunes") for op in results["ops"].values()]
    if not counts or None in counts:
        return ""
    total = sum(c["total"] for c in counts)
    reused = sum(c["reused"] for c in counts)
    if not reused:
        return f" ({total} fine-tunes, all trained by this run)"
    return (
        f" (this run trained {total - reused} of {total} fine-tunes; the other {reused}"
        " were trained by an earlier run into this output folder's models/ and reused)"
    )


def _featurizer_words(preset: ExperimentPreset) -> str:
    """Which featurizer the numbers used: trained with the predictor on the source, or not."""
    spec = harness.model_preset(preset).featurizer
    shape = f"{len(spec.channels)} sparse-conv layers, up to {max(spec.channels)} channels"
    if spec.trainable:
        return f"trained with the cost model on the source records ({shape}); fine-tuning " + (
            "keeps it frozen"
            if preset.select.freeze_featurizer == [True]
            else "may train it (chosen on validation)"
        )
    return f"a fixed, seeded random sparse-conv embedding, never trained ({shape})"


def _target_only_words(preset: ExperimentPreset) -> str:
    """Which featurizer the target-only rows used: theirs starts at a seeded random init."""
    frozen = preset.select.freeze_featurizer
    how = (
        "and stays there (only the predictor learns)"
        if frozen == [True]
        else "and is trained on the K matrices"
        if frozen == [False]
        else "and is frozen or trained on the K matrices (chosen on validation)"
    )
    return (
        f"the same network without the source; its featurizer starts at a seeded random init {how}"
    )


def _ablation_words(preset: ExperimentPreset) -> list[str]:
    names = harness.ablations(preset)
    if not names:
        return []
    ks = sorted(set(preset.ablation_matrices))
    lines = [f"- ablations at K = {ks}: {', '.join(names)}"]
    if "random featurizer" in names:
        lines.append(
            "- `TL random featurizer`: the same source model pretrained with its featurizer "
            "frozen at its seeded random initialisation (only the predictor learns), then "
            "fine-tuned like TL"
        )
    return lines


def _sampled_words(sampled: int, preset: ExperimentPreset) -> str:
    width = f" at width {preset.width}" if preset.width is not None else ""
    if not sampled:
        return f" Target records{width}." if width else ""
    return (
        f" Target records{width}; {sampled} more target matrices, measured on a sample of the "
        "space only, are left out (the oracle needs every config)."
    )


def _over_nnz_words(over: dict[str, int], max_nnz: int | None) -> str:
    if max_nnz is None:
        return ""
    return (
        f" Matrices with > {max_nnz} nnz are left out (--max-nnz): {over.get('target', 0)} "
        f"target and {over.get('source', 0)} source matrices."
    )


def _span(pair: list[int] | None) -> str:
    return f"{pair[0]}..{pair[1]}" if pair else "?"


def _plots(rows: list[dict[str, Any]], k: int, op: str, out: Path) -> list[Path]:
    pngs = [report.plot_efficiency(rows, op, out / f"{op}-efficiency.png")]
    tl = next((r for r in rows if r["variant"] == TL and r["k"] == k), None)
    if tl:
        pngs.append(report.plot_per_matrix(tl, op, out / f"{op}-per-matrix-TL-{k}.png"))
    pngs.append(report.plot_ablations(rows, k, op, out / f"{op}-ablations.png"))
    return pngs
