"""The collection driver behind ``cognate collect``: many matrices, one target, one store.

It knows a target only through ``Target`` (its space, its runner, ``exclusive``), so a
new target needs nothing here. Guarantees:

- Resumable: configs the store already has for (matrix, target, op, width) are skipped.
- A killed collector loses at most the batch in flight: runners are called on small
  chunks of configs and every chunk is committed before the next one starts.
- The baseline config is re-timed in every matrix batch that measures anything (the
  store upserts it), so speedups are ratios within one batch on a noisy machine.
- The driver alone writes the store, whichever way the measurements are made:
  sequentially (exclusive targets: wall-clock timings must not share cores), in a local
  process pool (non-exclusive targets such as a deterministic simulator), or as Ray
  tasks, one per matrix, that return their measurements to the driver.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import multiprocessing
import os
import pickle
import signal
import socket
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor
from concurrent.futures import wait as wait_futures
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from cognate import targets
from cognate.config import Config
from cognate.errors import CognateError
from cognate.hostid import check_host_id, host_for
from cognate.lifetime import (
    descendants,
    die_with_parent,
    exit_code_of,
    kill_all,
    prepare_process_pool,
    start_reaper,
    stop_signals_blocked,
    stop_signals_deferred,
    stop_signals_raise,
)
from cognate.matrix import Matrix
from cognate.runner import STATUSES, Measurement, Runner
from cognate.space import Space
from cognate.timing import Load, job_marker, machine_load, timing_lock
from cognate.util import describe, one_line

DEFAULT_CONFIGS = 100
DEFAULT_WIDTH = 64
DEFAULT_RETRIES = 2
LOAD_SAMPLE_S = 0.1  # the busy-core sample before and after each timed chunk


@dataclass(frozen=True)
class RetryPolicy:
    """Which stored records a resume measures again: ``timeout`` and ``error`` ones, up to
    ``retries`` times after the first attempt (``force``: whatever their attempt count);
    ``ok``, ``too_large`` and ``mismatch`` are done."""

    retries: int = DEFAULT_RETRIES
    force: bool = False

    def wants(self, stored: tuple[str, int] | None) -> bool:
        if stored is None:
            return True
        status, attempts = stored
        if status not in ("timeout", "error"):
            return False
        return self.force or attempts <= self.retries


@dataclass
class CollectSummary:
    """What a collection did; ``line()`` is the one-line report the CLI prints."""

    matrices: int = 0  # matrices whose planned work all reached the store
    written: int = 0  # records written, the re-timed baselines included
    skipped: int = 0  # configs the store already had
    statuses: Counter[str] = field(default_factory=Counter)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (path, one-line reason)
    retried: int = 0  # timeout / error records measured again
    noisy: int = 0  # records timed while the machine was busy (marked in the store)
    repeats: list[tuple[float, float]] = field(default_factory=list)  # (first, repeat) runtimes
    interrupted: bool = False
    stop_exit_code: int = 130  # 128 + the signal that stopped the run (SIGINT, TERM, HUP)

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return self.stop_exit_code
        return 1 if self.failures else 0

    def line(self) -> str:
        counts = ", ".join(f"{s} {self.statuses[s]}" for s in STATUSES if self.statuses[s])
        text = (
            f"collected {self.written} records ({counts or 'none new'}) over "
            f"{self.matrices} matrices; {self.skipped} configs already stored"
        )
        if self.retried:
            text += f"; {self.retried} failed record(s) retried"
        if self.noisy:
            text += f"; {self.noisy} timed on a busy machine (marked noisy)"
        if self.repeats:
            text += f"; {repeat_agreement(self.repeats)}"
        if self.failures:
            text += f"; {len(self.failures)} matrix file(s) failed: "
            text += ", ".join(path for path, _ in self.failures)
        if self.interrupted:
            text += "; interrupted (what was measured is stored; rerun to resume)"
        return text


def repeat_agreement(pairs: Sequence[tuple[float, float]]) -> str:
    """How well repeated timings agree: Spearman rank correlation of first vs repeat runtime
    over all repeated pairs, and the median relative spread |a - b| / mean(a, b)."""
    import numpy as np
    from scipy.stats import spearmanr

    first, again = (np.array(x, dtype=float) for x in zip(*pairs, strict=True))
    spread = float(np.median(np.abs(first - again) / ((first + again) / 2)))
    rho = spearmanr(first, again).statistic if len(pairs) > 1 else float("nan")
    rank = "n/a" if not np.isfinite(rho) else f"{rho:.3f}"
    return f"{len(pairs)} repeats: Spearman {rank}, median spread {100 * spread:.1f}%"


@dataclass
class _Plan:
    """One matrix's work: the configs still to measure, the baseline first."""

    path: Path
    matrix: Matrix
    baseline: Config
    todo: list[Config]
    repeat: set[str] = field(default_factory=set)  # config hashes to time again at the end
    # repeat picks stored by an earlier, killed run before their repeat was taken
    stored_repeats: list[Measurement] = field(default_factory=list)
    pending: int = 0  # chunks handed to workers and not yet written
    submitted: bool = False  # every chunk handed out
    failed: bool = False


def matrix_seed(seed: int, matrix: Matrix) -> int:
    """The sampling seed of one matrix: each matrix gets its own configs (as in WACO's
    data), the same ones on every run, so a rerun resumes the same set."""
    digest = hashlib.sha256(f"{seed}:{matrix.sha256}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


ConfigPicker = Callable[[Matrix], list[Config]]


def choose_configs(
    space: Space,
    matrix: Matrix,
    n_configs: int,
    all_configs: bool,
    seed: int,
    picker: ConfigPicker | None = None,
) -> tuple[Config, list[Config]]:
    """(baseline, configs to have measured): the baseline first, no duplicates. A
    ``picker`` (a cost model's choice) replaces the seeded sample."""
    shape = matrix.shape
    per_matrix = matrix_seed(seed, matrix)
    if picker is not None:
        configs = picker(matrix)
    elif all_configs:
        configs = space.candidates(n_configs, per_matrix, shape)
    else:
        configs = space.sample(n_configs, per_matrix, shape)
    baseline = space.baseline(shape)
    unique = {baseline.hash: baseline}
    for config in configs:
        unique.setdefault(config.hash, config)
    if picker is None and not all_configs:
        # A sample may hold more than asked (cpu: the family grids come on top of n csr
        # configs): measure n, spread over the families (knob ``family``), plus the baseline.
        rest = spread_over_families([c for c in unique.values() if c != baseline], n_configs)
        return baseline, [baseline, *rest]
    return baseline, list(unique.values())


def spread_over_families(configs: Sequence[Config], n: int) -> list[Config]:
    """``n`` of ``configs`` taken round-robin over their families, each in its given order."""
    families: dict[str, deque[Config]] = {}
    for config in configs:
        families.setdefault(str(config.knobs.get("family", "")), deque()).append(config)
    chosen: list[Config] = []
    while len(chosen) < n and families:
        for name in list(families):
            if len(chosen) == n:
                break
            chosen.append(families[name].popleft())
            if not families[name]:
                del families[name]
    return chosen


REPEAT_FRACTION = 0.05


def repeat_picks(seed: int, matrix: Matrix, configs: Sequence[Config]) -> set[str]:
    """The fixed 5% (at least one) of a matrix's configs timed twice: the same ones for a
    given seed, whichever order they were measured in."""
    if not configs:
        return set()
    key = lambda c: hashlib.sha256(f"{seed}:{matrix.sha256}:{c.hash}".encode()).digest()  # noqa: E731
    count = math.ceil(REPEAT_FRACTION * len(configs))
    return {c.hash for c in sorted(configs, key=key)[:count]}


def model_picker(
    model_path: str | Path, target_name: str, space: Space, op: str, width: int, n: int
) -> ConfigPicker:
    """The ``n`` runnable candidates a cost model ranks best, from the same candidate set
    ``cognate tune`` searches: measuring them refines the model exactly where it searches
    (its top picks among 20k candidates lie where random samples are sparse)."""
    from cognate.model.cost_model import CostModel, resolve_model_path
    from cognate.search.rank import rank, runnable_top  # torch: only when a model is asked for

    model = CostModel.load(resolve_model_path(model_path, target_name, op), space)

    def pick(matrix: Matrix) -> list[Config]:
        ranked, _ = rank(model, space, matrix, width)
        top, _ = runnable_top(ranked, matrix, op, width, n, target_name, space.family)
        return [candidate.config for candidate in top]

    return pick


def check_batch(configs: Sequence[Config], measurements: Sequence[Measurement]) -> None:
    """A runner must answer every config asked, in order, with a known status."""
    asked = [c.hash for c in configs]
    got = [m.config.hash for m in measurements]
    if asked != got:
        raise CognateError(
            f"runner answered {len(got)} measurement(s) for {len(asked)} config(s) asked, "
            "or in another order"
        )
    for m in measurements:
        if m.status not in STATUSES:
            raise CognateError(f"runner returned unknown status {m.status!r}")


def _chunks(items: Sequence[Config], size: int) -> Iterator[list[Config]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


class _Collection:
    """The driver's state: the store, the progress bars and the summary."""

    def __init__(
        self,
        store: Any,
        target: targets.Target,
        space: Space,
        op: str,
        width: int,
        progress: Progress,
        choose: dict[str, Any],
        retry: RetryPolicy,
        host: str | None = None,
    ) -> None:
        self.store = store
        self.retry = retry
        self.host = host  # None: cognate.hostid decides (this machine's id, or sim)
        self.warned_busy = False
        self.target = target
        self.space = space
        self.op = op
        self.width = width
        self.progress = progress
        self.choose = choose
        self.summary = CollectSummary()
        self.matrix_bar = progress.add_task("matrices", total=None)
        self.config_bar = progress.add_task("configs", total=0)
        self.config_total = 0
        # Whose records count as done: this host's, or on Ray any host's ("*"), since a
        # matrix may land on any node when the collection resumes.
        self.any_host = False

    def plans(self, paths: Sequence[Path]) -> Iterator[_Plan]:
        """Load and plan matrix by matrix; yield those with something to measure."""
        self.progress.update(self.matrix_bar, total=len(paths))
        for path in paths:
            try:
                plan = self._plan(path)
            except CognateError as exc:
                self.fail(path, str(exc))
                continue
            if not plan.todo and not plan.stored_repeats:
                self.finish(plan)
                continue
            self.config_total += len(plan.todo)
            self.progress.update(self.config_bar, total=self.config_total)
            yield plan

    def _plan(self, path: Path) -> _Plan:
        from cognate.io import check_collect, load_matrix  # here: it pulls in scipy readers

        matrix = load_matrix(path)
        check_collect(matrix, self.target.name, self.width)  # before anything is allocated
        baseline, configs = choose_configs(self.space, matrix, **self.choose)
        host = "*" if self.any_host else self.host
        stored = self.store.resume_state(matrix, self.target.name, self.op, self.width, host)
        todo = [
            c for c in configs if c.hash != baseline.hash and self.retry.wants(stored.get(c.hash))
        ]
        self.summary.retried += sum(c.hash in stored for c in todo)
        # Re-time the baseline in every batch that measures anything, where timings are
        # wall clock; a simulator's stored baseline would come out the same (a resume of a
        # spade collection re-simulated it, counting one more attempt each time).
        if (todo and self.target.exclusive) or self.retry.wants(stored.get(baseline.hash)):
            todo.insert(0, baseline)
        self.summary.skipped += len(configs) - len(todo)
        plan = _Plan(path, matrix, baseline, todo)
        if self.target.exclusive:  # wall-clock timings: how reproducible are they?
            # Picked from the matrix's whole set: the same pairs on every run; those
            # measured in this run are timed again, and so are those an earlier run
            # measured but was stopped before it timed them again.
            plan.repeat = repeat_picks(self.choose["seed"], matrix, configs)
            plan.stored_repeats = self._stored_repeats(plan, configs)
        return plan

    def _stored_repeats(self, plan: _Plan, configs: Sequence[Config]) -> list[Measurement]:
        if self.any_host:  # on Ray no repeats are taken
            return []
        todo = {c.hash for c in plan.todo}
        first = self.store.unrepeated(plan.matrix, self.target.name, self.op, self.width, self.host)
        return [
            Measurement(c, "ok", runtime_s=first[c.hash])
            for c in configs
            if c.hash in plan.repeat and c.hash in first and c.hash not in todo
        ]

    def write(
        self,
        plan: _Plan,
        measurements: Sequence[Measurement],
        host: str | None = None,
        load: tuple[Load, Load] | None = None,
        repeat: bool = False,
    ) -> None:
        if not measurements:
            return
        with stop_signals_deferred():
            self.store.record(
                plan.matrix,
                self.target.name,
                self.op,
                self.width,
                list(measurements),
                space_version=self.space.version,
                baseline_hash=plan.baseline.hash,
                host=host or self.host,
                load=load,
                repeat=repeat,
            )
            # Counted inside the deferral, so the summary always matches the store.
            if repeat:
                return
            if load is not None and (load[0].busy or load[1].busy):
                self.summary.noisy += len(measurements)
            self.summary.written += len(measurements)
            self.summary.statuses.update(m.status for m in measurements)
        self.progress.advance(self.config_bar, len(measurements))

    def warn_busy(self, load: Load) -> None:
        """One line, once per collection, when timings run on a busy machine."""
        if load.busy and not self.warned_busy:
            self.warned_busy = True
            self.progress.console.print(
                f"cognate: warning: {load.line()}; such records are marked noisy",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )

    def fail(self, path: Path, reason: str, plan: _Plan | None = None) -> None:
        """One line for a matrix that could not be (fully) collected; carry on."""
        if plan is not None:
            if plan.failed:
                return
            plan.failed = True
        reason = one_line(reason)
        if not reason.startswith(str(path)):
            reason = f"{path}: {reason}"
        self.summary.failures.append((str(path), reason))
        self.progress.console.print(
            f"cognate: skipped {reason}", markup=False, highlight=False, soft_wrap=True
        )
        self.progress.advance(self.matrix_bar)

    def finish(self, plan: _Plan) -> None:
        if plan.failed:
            return
        self.summary.matrices += 1
        self.progress.advance(self.matrix_bar)


# --- sequential: one config at a time on this machine --------------------------------------


def _run_sequential(coll: _Collection, plans: Iterator[_Plan], runner: Runner, batch: int) -> None:
    """Exclusive targets, one chunk at a time, each timed under the machine-wide timing
    lock with the load read before and after; then the matrix's repeat picks again."""
    for plan in plans:
        first = {m.config.hash: m for m in plan.stored_repeats}
        for chunk in _chunks(plan.todo, batch):
            timed = _timed(coll, plan, runner, chunk)
            if timed is None:
                break
            measurements, load = timed
            coll.write(plan, measurements, load=load)
            first.update((m.config.hash, m) for m in measurements if m.config.hash in plan.repeat)
        _repeat(coll, plan, runner, first)
        coll.finish(plan)


def _timed(
    coll: _Collection, plan: _Plan, runner: Runner, chunk: list[Config]
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


def _repeat(coll: _Collection, plan: _Plan, runner: Runner, first: dict[str, Measurement]) -> None:
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


# --- local process pool: non-exclusive targets ---------------------------------------------

_WORKER_RUNNER: Runner | None = None


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


def _run_pool(
    coll: _Collection,
    plans: Iterator[_Plan],
    runner_options: dict[str, Any],
    jobs: int,
    batch: int,
) -> None:
    first = next(plans, None)
    if first is None:  # nothing to measure (all stored, or every file bad): no pool to start
        return
    plans = itertools.chain([first], plans)
    pool = _new_pool(coll.target, runner_options, jobs)
    inflight: dict[Future, tuple[_Plan, list[Config]]] = {}
    try:
        for plan in plans:
            for chunk in _chunks(plan.todo, batch):
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
        pool.shutdown(wait=True, cancel_futures=True)


def _drop_cancelled(inflight: dict[Future, tuple[_Plan, list[Config]]]) -> bool:
    """Forget the cancelled futures (their matrices stay unfinished); whether any remain."""
    for future in [f for f in inflight if f.cancelled()]:
        del inflight[future]
    return bool(inflight)


def _drain(
    coll: _Collection,
    inflight: dict[Future, tuple[_Plan, list[Config]]],
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


# --- Ray: one task per matrix, results back to the driver ----------------------------------


def _ray_measure(
    target: targets.Target,
    op: str,
    width: int,
    matrix: Matrix,
    configs: list[Config],
    runner_options: dict[str, Any],
) -> tuple[str, list[Measurement]]:
    """A Ray task: measure one matrix's batch; the host goes into the store's key."""
    runner = target.runner(**runner_options)
    try:
        return host_for(target.name), runner.measure(matrix, op, width, configs)
    finally:
        _close(runner)


def _ray_connect(address: str) -> tuple[Any] | None:
    """Connect to (or start, for ``local``) a Ray cluster. Returns None when the caller
    already had Ray running, else a one-tuple holding the reaper of a local cluster we
    started (or None): it kills the cluster's processes should this one be killed."""
    _check_reachable(address)  # before importing Ray: a second or two saved on a typo
    import ray

    if ray.is_initialized():
        return None
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
    reaper = None
    try:
        if address == "local":  # always a new cluster on this machine, never someone else's
            reaper = start_reaper()
            ray.init(address="local", include_dashboard=False, **quiet)
        else:
            ray.init(address=address, **quiet)
    except Exception as exc:  # noqa: BLE001 - Ray raises several types for a bad address
        if reaper is not None:
            reaper.kill()
        raise CognateError(f"ray: cannot connect to {address!r}: {one_line(exc)}") from exc
    return (reaper,)


def _ray_shutdown(reaper: Any) -> None:
    """Disconnect; a local cluster we started is ended whole (its agents linger otherwise)."""
    import ray

    cluster = descendants(os.getpid()) if reaper is not None else {}
    ray.shutdown()
    if reaper is not None:
        cluster.pop(reaper.pid, None)
        reaper.kill()
        reaper.wait()
        kill_all(cluster)


# A gRPC server (Ray's GCS is one) answers the HTTP/2 client preface with a SETTINGS frame
# (RFC 9113, 3.4): 9 bytes of frame header whose type byte (index 3) is 4.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
RAY_PROBE_TIMEOUT_S = 3.0


def _check_reachable(address: str, timeout_s: float = RAY_PROBE_TIMEOUT_S) -> None:
    """Fail fast on a HOST:PORT where no Ray cluster answers: Ray itself retries for
    minutes, printing a warning every few seconds. Nothing listening, no answer within
    ``timeout_s``, or an answer that is not gRPC's (HTTP/2) is one line."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return  # 'auto', 'local', ray:// client addresses: Ray answers quickly itself
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as conn:
            conn.settimeout(timeout_s)
            conn.sendall(_HTTP2_PREFACE)
            head = b""
            while len(head) < 9 and (chunk := conn.recv(9 - len(head))):
                head += chunk
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise CognateError(f"ray: nothing answers at {address} ({reason})") from None
    if len(head) < 9 or head[3] != 4:
        raise CognateError(f"ray: what answers at {address} is not a Ray cluster (no gRPC)")


def _ray_slots(exclusive: bool) -> list[dict[str, Any]]:
    """Task options, one per slot. Exclusive: one task per node holding all its CPUs."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [
        (node["NodeID"], int(node["Resources"]["CPU"]))
        for node in ray.nodes()
        if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) >= 1
    ]
    if not nodes:
        raise CognateError("ray: the cluster has no node with a CPU")
    if exclusive:
        return [
            {
                "num_cpus": cpus,
                "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False),
            }
            for node_id, cpus in nodes
        ]
    return [{"num_cpus": 1}] * (2 * sum(cpus for _, cpus in nodes))


def _run_ray(coll: _Collection, plans: Iterator[_Plan], runner_options: dict[str, Any]) -> None:
    import ray

    inflight: dict[Any, tuple[_Plan, dict[str, Any]]] = {}
    try:
        slots = deque(_ray_slots(coll.target.exclusive))
        coll.any_host = True
        task = ray.remote(_ray_measure)
        target_ref = ray.put(coll.target)
        while True:
            while slots and (plan := next(plans, None)) is not None:
                options = slots.popleft()
                ref = task.options(**options, max_retries=0).remote(
                    target_ref, coll.op, coll.width, ray.put(plan.matrix), plan.todo, runner_options
                )
                inflight[ref] = (plan, options)
            if not inflight:
                break
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
            for ref in ready:
                plan, options = inflight.pop(ref)
                slots.append(options)
                _take_ray_result(coll, plan, ref)
    except KeyboardInterrupt:
        for ref in inflight:
            ray.cancel(ref, force=True)
        raise


def _take_ray_result(coll: _Collection, plan: _Plan, ref: Any) -> None:
    import ray

    try:
        host, measurements = ray.get(ref)
        check_batch(plan.todo, measurements)
    except Exception as exc:  # noqa: BLE001 - a failed task costs its matrix, reported
        # A RayTaskError carries the worker's traceback; its cause is the one line we want.
        coll.fail(
            plan.path, f"ray task failed: {describe(getattr(exc, 'cause', None) or exc)}", plan
        )
        return
    coll.write(plan, measurements, host=host)
    coll.finish(plan)


# --- the entry point -----------------------------------------------------------------------


def _close(runner: Runner) -> None:
    close = getattr(runner, "close", None)
    if callable(close):
        close()


def _make_runner(target: targets.Target, runner_options: dict[str, Any]) -> Runner:
    try:
        return target.runner(**runner_options)
    except TypeError as exc:
        given = ", ".join(sorted(runner_options)) or "none"
        raise CognateError(
            f"target {target.name}: runner does not take these options ({given}): {exc}"
        ) from exc


def _matrix_files(matrix_paths: Sequence[str | Path]) -> list[Path]:
    from cognate.io import expand_matrix_paths

    if not matrix_paths:
        raise CognateError("no matrix files given")
    files = list(expand_matrix_paths([Path(p) for p in matrix_paths]))
    if not files:
        raise CognateError(f"no matrix files in {', '.join(str(p) for p in matrix_paths)}")
    return files


def _check_numbers(width: int, n_configs: int, jobs: int | None, batch: int) -> None:
    for name, value in (("width", width), ("configs", n_configs), ("batch", batch)):
        if value < 1:
            raise CognateError(f"--{name} must be at least 1, got {value}")
    if jobs is not None and jobs < 1:
        raise CognateError(f"--jobs must be at least 1, got {jobs}")
    if jobs is not None and jobs > max_jobs():
        # each worker is a Python process with its own copy of a matrix: past a few per
        # core they only add memory and start-up time
        raise CognateError(
            f"--jobs {jobs} is more than {max_jobs()} ({JOBS_PER_CORE} per core on the "
            f"{_cores()} cores here)"
        )


def _check_width(target: targets.Target, width: int) -> None:
    """Checked up front: past the limit every config would be stored as an error record,
    and a resume would then take those as done."""
    limit = target.max_width
    if limit is not None and width > limit:
        raise CognateError(f"--width {width} is over the {target.name} limit of {limit}")


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description:>8}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        redirect_stdout=False,
        redirect_stderr=False,
        # Bars only on a terminal: in a log file each redraw would be a stray line.
        disable=not console.is_terminal,
    )


def collect(
    target_name: str,
    op: str,
    width: int,
    matrix_paths: Sequence[str | Path],
    *,
    db_path: str | Path,
    n_configs: int = DEFAULT_CONFIGS,
    all_configs: bool = False,
    seed: int = 0,
    ray_address: str | None = None,
    jobs: int | None = None,
    runner_options: dict[str, Any] | None = None,
    batch: int = 1,
    console: Console | None = None,
    from_model: str | Path | None = None,
    retries: int = DEFAULT_RETRIES,
    retry_failed: bool = False,
    host_id: str | None = None,
) -> CollectSummary:
    """Measure configs of every matrix on one target into the store at ``db_path``.

    ``n_configs`` are sampled per matrix (``all_configs``: the space's search candidates,
    which is the whole space where the space is small enough to enumerate; ``n_configs``
    then caps sampled spaces). The baseline is always added. ``jobs`` sizes the local
    process pool of non-exclusive targets (default: all cores). ``batch`` configs are
    measured and committed at a time. ``from_model``: measure that cost model's top
    ``n_configs`` candidates per matrix instead of a sample. Ctrl-C, SIGTERM and SIGHUP
    stop the run; the summary says so. A resume measures stored ``timeout`` / ``error``
    records again, up to ``retries`` more times (``retry_failed``: whatever their count).
    ``host_id`` names this machine in the records (default: cognate.hostid). Exclusive
    targets time each chunk under the machine-wide timing lock, record the load around it
    and time 5% of each matrix's configs twice (the summary reports their agreement).
    """
    from cognate.store import Store  # imported where needed (pandas, sqlite)

    runner_options = dict(runner_options or {})
    _check_numbers(width, n_configs, jobs, batch)
    if retries < 0:
        raise CognateError(f"--retries must be at least 0, got {retries}")
    if host_id is not None:
        check_host_id(host_id)
    retry = RetryPolicy(retries, retry_failed)
    target = targets.get_target(target_name)
    _check_width(target, width)
    space = target.space(op)
    files = _matrix_files(matrix_paths)
    runner = _make_runner(target, runner_options)  # fails early (e.g. gpu without CUDA)
    sequential = ray_address is None and target.exclusive
    if not sequential:  # the workers build their own
        _close(runner)
    console = console or Console(stderr=True)
    if sequential and (jobs or 1) > 1:
        console.print(
            f"cognate: --jobs ignored: {target.name} timings take the whole machine",
            soft_wrap=True,
        )
    choose: dict[str, Any] = {"n_configs": n_configs, "all_configs": all_configs, "seed": seed}
    if from_model is not None:
        choose["picker"] = model_picker(from_model, target.name, space, op, width, n_configs)
    # SIGTERM / SIGHUP (schedulers, the OOM killer's first try, a closed terminal) stop the
    # run as Ctrl-C does: what is measured is stored, the summary printed.
    ray_started = _ray_connect(ray_address) if ray_address is not None else None
    # After ray.init: Ray's driver installs a SIGTERM handler that aborts the process.
    # The job marker tells timing processes (another collect, tune --verify) we run here.
    with stop_signals_raise(), job_marker(f"collect-{target.name}"):
        try:
            with Store(db_path) as store, _progress(console) as progress:
                coll = _Collection(
                    store, target, space, op, width, progress, choose, retry, host_id
                )
                plans = coll.plans(files)
                try:
                    if ray_address is not None:
                        _run_ray(coll, plans, runner_options)
                    elif sequential:
                        _run_sequential(coll, plans, runner, batch)
                    else:
                        _run_pool(coll, plans, runner_options, jobs or _cores(), batch)
                except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM or SIGHUP (lifetime.Stopped)
                    coll.summary.interrupted = True
                    coll.summary.stop_exit_code = exit_code_of(exc)
        finally:
            if sequential:
                _close(runner)
            if ray_started:
                _ray_shutdown(*ray_started)
    return coll.summary


JOBS_PER_CORE = 4


def max_jobs() -> int:
    """The most local worker processes ``--jobs`` may ask for."""
    return JOBS_PER_CORE * _cores()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
