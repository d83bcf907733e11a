"""Exclusive targets: one config chunk at a time on this machine (wall-clock timings must
not share cores), with the machine's load sampled around each chunk."""

from __future__ import annotations

from collections.abc import Iterator

from cognate.collect.plan import Plan, check_batch, chunks
from cognate.collect.state import Collection
from cognate.config import Config
from cognate.runner import Measurement, Runner
from cognate.timing import Load, machine_load, timing_lock
from cognate.util import describe

LOAD_SAMPLE_S = 0.1  # the busy-core sample before and after each timed chunk


def run_sequential(coll: Collection, plans: Iterator[Plan], runner: Runner, batch: int) -> None:
    """Exclusive targets, one chunk at a time, each timed under the machine-wide timing
    lock with the load read before and after; then the matrix's repeat picks again."""
    for plan in plans:
        first = {m.config.hash: m for m in plan.stored_repeats}
        for chunk in chunks(plan.todo, batch):
            timed = _timed(coll, plan, runner, chunk)
            if timed is None:
                break
            measurements, load = timed
            coll.write(plan, measurements, load=load)
            first.update((m.config.hash, m) for m in measurements if m.config.hash in plan.repeat)
        _repeat(coll, plan, runner, first)
        coll.finish(plan)


def _timed(
    coll: Collection, plan: Plan, runner: Runner, chunk: list[Config]
) -> tuple[list[Measurement], tuple[Load, Load]] | None:
    """Measure ``chunk`` holding the timing lock; None when the runner failed (reported)."""
    threads = coll.target.timing_threads()

    def waiting(line: str) -> None:
        coll.progress.console.print(f"cognate: {line}", markup=False, soft_wrap=True)

    with timing_lock(on_wait=waiting):
        before = machine_load(threads, sample_s=LOAD_SAMPLE_S)
        coll.warn_busy(before)
        try:
            measurements = runner.measure(plan.matrix, coll.op, coll.width, chunk)
            check_batch(chunk, measurements)
        except Exception as exc:  # noqa: BLE001 - a runner bug costs its matrix, not the run
            coll.fail(plan.path, f"runner failed: {describe(exc)}", plan)
            return None
        after = machine_load(threads, sample_s=LOAD_SAMPLE_S)
    coll.warn_busy(after)
    return list(measurements), (before, after)


def _repeat(coll: Collection, plan: Plan, runner: Runner, first: dict[str, Measurement]) -> None:
    """Time the matrix's repeat picks that measured ok once more; keep the pairs."""
    again = [m.config for m in first.values() if m.status == "ok"]
    if plan.failed or not again:
        return
    timed = _timed(coll, plan, runner, again)
    if timed is None:
        return
    measurements, load = timed
    coll.write(plan, measurements, load=load, repeat=True)
    for m in measurements:
        if m.status == "ok" and m.runtime_s and first[m.config.hash].runtime_s:
            coll.summary.repeats.append((first[m.config.hash].runtime_s, m.runtime_s))
