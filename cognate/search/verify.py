"""Verification: the top-k and the baseline measured on the target, and the measurements
kept in the store so that the next training sees them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from cognate.runner import Measurement, ProgressFn
from cognate.search.result import TuneResult
from cognate.targets import Target, get_target


def verify(
    result: TuneResult,
    target: Target,
    progress: ProgressFn | None,
    runner_options: dict[str, Any] | None,
    threads: int | None = None,
) -> None:
    """Measure the top-k and the baseline with the target's ``verify`` (cpu: interleaved
    rounds with the library references) and record the outcome on ``result``. The caller
    adds the target's variants first (``add_variants``)."""
    todo = [c.config for c in result.candidates]
    if result.baseline.config not in set(todo):
        todo.append(result.baseline.config)
    found = target.verify(
        result.matrix, result.op, result.width, todo, progress, runner_options, threads,
        baseline=result.baseline.config,
    )  # fmt: skip
    result.take(found)


def add_variants(result: TuneResult, target: Target, bf16: bool = False) -> None:
    """Append the target's variants of the candidates (and baseline) to ``result``'s
    candidates, each ranked and scored as the config it varies (``bf16``: those with B read
    as bfloat16 too, asked for)."""
    pool = [*result.candidates, result.baseline]
    configs = [c.config for c in pool]
    pairs = target.variants(result.op, result.width, configs, result.matrix.shape, bf16)
    if not pairs:
        return
    space = target.space(result.op)
    for base, config in pairs:
        parent = next(c for c in pool if c.config == base)
        result.candidates.append(
            replace(
                parent,
                config=config,
                description=space.describe(config),
                status=None,
                runtime_s=None,
                error=None,
                spread_s=None,
                range_s=None,
                family_pick=False,
                portfolio=False,
                variant=True,
                variant_of=base.hash,
            )
        )


def record_verified(result: TuneResult, db: str | Path) -> int:
    """Store a verified result's measurements (top-k and baseline) with the store's public
    write path (the one collect uses), so the next training sees them. Rows written."""
    from cognate.store import Store

    if not result.verified:
        return 0
    seen: dict[str, Measurement] = {}
    for c in [*result.candidates, result.baseline]:
        if c.status is None or c.config.hash in seen:
            continue
        if c.config.knobs.get("bf16"):  # another precision, encoded as its float32 twin
            continue
        counters: dict[str, Any] = {"verify": result.timing or "target runner"}
        if result.load is not None:
            counters["load"] = result.load
        if c.config.hash in result.remeasured:
            counters["remeasured"] = True
        seen[c.config.hash] = Measurement(
            c.config,
            c.status,  # type: ignore[arg-type]
            c.runtime_s,
            c.spread_s,
            counters,
            c.error,
            range_s=c.range_s,
        )
    facts = get_target(result.target).host_facts()
    with Store(db) as store:
        return store.record(
            result.matrix, result.target, result.op, result.width, list(seen.values()),
            space_version=result.space_version, baseline_hash=result.baseline.config.hash,
            facts=facts,
        )  # fmt: skip
