"""Non-exclusive targets (deterministic simulators): a local process pool of spawned
workers, each building its runner once; the driver stores what they return."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import signal
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor
from concurrent.futures import wait as wait_futures
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from cognate import targets
from cognate.collect.plan import Plan, check_batch, chunks
from cognate.collect.state import Collection
from cognate.config import Config
from cognate.lifetime import (
    die_with_parent,
    prepare_process_pool,
    stop_signals_blocked,
)
from cognate.matrix import Matrix
from cognate.runner import Measurement, Runner
from cognate.util import describe

_WORKER_RUNNER: Runner | None = None
_MANAGER_JOIN_S = 30.0  # a manager thread ends once its idle workers exit


def _pool_init(
    target: targets.Target | str, runner_options: dict[str, Any], parent_pid: int
) -> None:
    """Worker start: stop signals are the driver's business (it finishes the running chunks
    and stores them); the worker dies with the driver; build the runner once."""
    global _WORKER_RUNNER
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    # Workers are started by the driver's main thread (submit), so the parent-death signal
    # is safe to arm; it also kills a worker stuck in the simulator's C code.
    die_with_parent(parent_pid)
    if isinstance(target, str):
        target = targets.get_target(target)
    _WORKER_RUNNER = target.runner(**runner_options)


def _pool_measure(matrix: Matrix, op: str, width: int, configs: list[Config]) -> list[Measurement]:
    assert _WORKER_RUNNER is not None, "pool worker not initialised"
    return _WORKER_RUNNER.measure(matrix, op, width, configs)


def _picklable_target(target: targets.Target) -> targets.Target | str:
    """Send the Target itself when it pickles (test doubles), else its registry name."""
    try:
        pickle.dumps(target)
    except Exception:  # noqa: BLE001 - lambdas and closures do not pickle
        return target.name
    return target


def _new_pool(
    target: targets.Target, runner_options: dict[str, Any], jobs: int
) -> ProcessPoolExecutor:
    # spawn, not fork: the driver has threads (progress bar, SQLite) by now.
    prepare_process_pool()  # its semaphores named and cleaned up, its tracker deaf to SIGHUP
    return ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_pool_init,
        initargs=(_picklable_target(target), runner_options, os.getpid()),
    )


def run_pool(
    coll: Collection,
    plans: Iterator[Plan],
    runner_options: dict[str, Any],
    jobs: int,
    batch: int,
) -> None:
    first = next(plans, None)
    if first is None:  # nothing to measure (all stored, or every file bad): no pool to start
        return
    plans = itertools.chain([first], plans)
    pool = _new_pool(coll.target, runner_options, jobs)
    inflight: dict[Future, tuple[Plan, list[Config]]] = {}
    try:
        for plan in plans:
            for chunk in chunks(plan.todo, batch):
                while len(inflight) >= 2 * jobs:  # bounded: the driver's memory stays small
                    pool = _drain(coll, inflight, pool, runner_options, jobs)
                with stop_signals_blocked():  # a worker spawned here starts deaf to them
                    future = pool.submit(_pool_measure, plan.matrix, coll.op, coll.width, chunk)
                inflight[future] = (plan, chunk)
                plan.pending += 1
            plan.submitted = True
            if plan.pending == 0:  # every chunk already written while submitting
                coll.finish(plan)
        while inflight:
            pool = _drain(coll, inflight, pool, runner_options, jobs)
    except KeyboardInterrupt:
        # Finish the configs already running, store them, drop the rest. The executor's
        # thread cancels queued futures after shutdown() returns, and wait() never reports a
        # cancelled future as done, so they are dropped every round, not once (else: a hang).
        pool.shutdown(wait=False, cancel_futures=True)
        while _drop_cancelled(inflight):
            _drain(coll, inflight, pool, runner_options, jobs, rebuild=False)
        raise
    finally:
        try:
            pool.shutdown(wait=True, cancel_futures=True)
        finally:  # a stop signal may land inside shutdown's join
            _join_and_forget_executors()


def _join_and_forget_executors() -> None:
    """Join the executors' manager threads, then drop their wake-up pipes. Why: at exit,
    CPython 3.11's concurrent.futures wakes every executor it still lists, and if a manager
    thread closes its pipe at that moment the write fails with an ``OSError`` traceback
    ("Exception ignored in: threading") after collect's own last line. A stop calls
    ``shutdown(wait=False)`` first, which forgets the thread, so a later ``shutdown(wait=True)``
    no longer joins it: join every listed one here (the running chunks are drained by now)."""
    from concurrent.futures import process

    wakeups = getattr(process, "_threads_wakeups", None)
    if wakeups is None:
        return
    for thread in list(wakeups):
        thread.join(timeout=_MANAGER_JOIN_S)
        if not thread.is_alive():
            wakeups.pop(thread, None)


def _drop_cancelled(inflight: dict[Future, tuple[Plan, list[Config]]]) -> bool:
    """Forget the cancelled futures (their matrices stay unfinished); whether any remain."""
    for future in [f for f in inflight if f.cancelled()]:
        del inflight[future]
    return bool(inflight)


def _drain(
    coll: Collection,
    inflight: dict[Future, tuple[Plan, list[Config]]],
    pool: ProcessPoolExecutor,
    runner_options: dict[str, Any],
    jobs: int,
    rebuild: bool = True,
) -> ProcessPoolExecutor:
    """Write what has finished; a dead worker fails its matrices and the pool is rebuilt."""
    done, _ = wait_futures(list(inflight), timeout=1.0, return_when=FIRST_COMPLETED)
    broken = False
    for future in done:
        plan, chunk = inflight.pop(future)
        plan.pending -= 1
        try:
            measurements = future.result()
            check_batch(chunk, measurements)
        except Exception as exc:  # noqa: BLE001 - one matrix's failure, reported by name
            broken |= isinstance(exc, BrokenProcessPool)
            if broken and not rebuild:
                # Stopping and a worker died (workers are spawned with stop signals blocked,
                # so not from the group signal): its matrix stays unfinished for the resume.
                continue
            coll.fail(plan.path, f"worker failed: {describe(exc)}", plan)
        else:
            if not plan.failed:
                coll.write(plan, measurements)
        if plan.pending == 0 and plan.submitted:
            coll.finish(plan)
    if broken and rebuild:
        pool.shutdown(wait=False, cancel_futures=True)
        return _new_pool(coll.target, runner_options, jobs)
    return pool
