"""The driver's side of a collection: it alone writes the store, chunk by chunk, and shows
the progress; the executors (sequential, pool, ray_cluster) hand it measurements."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.progress import (
    Progress,
)

from cognate import targets
from cognate.collect.plan import Plan, RetryPolicy, choose_configs, repeat_picks
from cognate.collect.summary import CollectSummary
from cognate.config import Config
from cognate.errors import CognateError
from cognate.hostid import HostFacts
from cognate.lifetime import (
    stop_signals_deferred,
)
from cognate.progress import EVERY_S, Ticker
from cognate.runner import Measurement, Runner
from cognate.space import Space
from cognate.timing import Load
from cognate.util import one_line

LINE_EVERY_S = EVERY_S  # off a terminal: a count / ETA line at least this often


class Collection:
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
        parallel: int = 1,
    ) -> None:
        self.store = store
        self.parallel = parallel  # measurements at once (a pool's workers): each holds its own
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
        self.matrices_done = 0
        # Not a terminal (a pipe, a log): no bars, so a count / ETA line every EVERY_S
        self.ticker: Ticker | None = None
        # Whose records count as done: this host's, or on Ray any host's ("*"), since a
        # matrix may land on any node when the collection resumes.
        self.any_host = False

    def plans(self, paths: Sequence[Path]) -> Iterator[Plan]:
        """Load and plan matrix by matrix; yield those with something to measure."""
        self.progress.update(self.matrix_bar, total=len(paths))
        if not self.progress.console.is_terminal:
            self.ticker = Ticker(
                "collect", len(paths), every=LINE_EVERY_S, unit="matrices", emit=self._line
            )
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

    def _plan(self, path: Path) -> Plan:
        from cognate.budget import Cost, check_work  # here: it pulls in scipy readers
        from cognate.formats.read import load_matrix

        matrix = load_matrix(path)
        cost = self.target.measure_cost(self.width)  # checked before anything is allocated
        if self.parallel > 1:  # each worker holds the matrix and its measurement at once
            cost = Cost(*(self.parallel * part for part in cost))
        what = f"collect --target {self.target.name}"
        check_work(matrix, what + (f" --jobs {self.parallel}" if self.parallel > 1 else ""), cost)
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
        plan = Plan(path, matrix, baseline, todo)
        if self.target.exclusive:  # wall-clock timings: how reproducible are they?
            # Picked from the matrix's whole set: the same pairs on every run; those
            # measured in this run are timed again, and so are those an earlier run
            # measured but was stopped before it timed them again.
            plan.repeat = repeat_picks(self.choose["seed"], matrix, configs)
            plan.stored_repeats = self._stored_repeats(plan, configs)
        return plan

    def _stored_repeats(self, plan: Plan, configs: Sequence[Config]) -> list[Measurement]:
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
        plan: Plan,
        measurements: Sequence[Measurement],
        host: str | None = None,
        load: tuple[Load, Load] | None = None,
        repeat: bool = False,
        facts: HostFacts | None = None,
    ) -> None:
        """Store one batch; ``host`` and ``facts``: the machine that measured it (a Ray
        worker's), else this one."""
        if not measurements:
            return
        if host is None:
            facts = self.target.host_facts()
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
                facts=facts,
            )
            # Counted inside the deferral, so the summary always matches the store.
            if repeat:
                return
            if load is not None and (load[0].busy or load[1].busy):
                self.summary.noisy += len(measurements)
            self.summary.written += len(measurements)
            self.summary.statuses.update(m.status for m in measurements)
        self.progress.advance(self.config_bar, len(measurements))
        self._tick()

    def _line(self, text: str) -> None:
        self.progress.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def _tick(self) -> None:
        """A count / ETA line (not on a terminal, where the bars show them)."""
        # the last matrix's line would repeat the summary printed right after it
        if self.ticker is not None and self.matrices_done < self.ticker.total:
            self.ticker.update(self.matrices_done, f"{self.summary.written} configs measured")

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

    def fail(self, path: Path, reason: str, plan: Plan | None = None) -> None:
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
        self.matrices_done += 1
        self._tick()

    def finish(self, plan: Plan) -> None:
        if plan.failed:
            return
        self.summary.matrices += 1
        self.progress.advance(self.matrix_bar)
        self.matrices_done += 1
        self._tick()


def close_runner(runner: Runner) -> None:
    close = getattr(runner, "close", None)
    if callable(close):
        close()
