"""``run_evaluation``: data, models, cells and summaries in one folder; report.py writes report.md."""

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
from cognate.evaluate import baselines, harness, report, verdicts
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
    rows = verdicts.ordered(verdicts.summarize(results, preset.bootstrap))
    log(f"{data.op}: non-learned baselines (chosen on all {len(data.train)} training matrices)")
    picks = baselines.all_baselines(data.space, data.train_runs(), data.test_runs(), k=5)
    k = verdicts.tl_k(preset, rows)
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
        "baselines": verdicts.baseline_comparison(compared, learned, preset.bootstrap),
        "baselines_portfolio": (
            verdicts.baseline_comparison(compared, with_portfolio, preset.bootstrap)
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
    return report.write_report(results, preset, out)
