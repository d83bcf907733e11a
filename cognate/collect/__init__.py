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

import os
from collections.abc import Sequence
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

from cognate import targets
from cognate.collect.plan import (
    DEFAULT_CONFIGS,
    DEFAULT_RETRIES,
    DEFAULT_WIDTH,
    RetryPolicy,
    model_picker,
)
from cognate.collect.pool import run_pool
from cognate.collect.ray_cluster import (
    ray_connect,
    ray_shutdown,
    run_ray,
)
from cognate.collect.sequential import run_sequential
from cognate.collect.state import Collection, close_runner
from cognate.collect.summary import CollectSummary
from cognate.errors import CognateError
from cognate.hostid import check_host_id
from cognate.lifetime import (
    exit_code_of,
    stop_signals_raise,
)
from cognate.runner import Runner
from cognate.timing import job_marker


def _make_runner(target: targets.Target, runner_options: dict[str, Any]) -> Runner:
    try:
        return target.runner(**runner_options)
    except TypeError as exc:
        given = ", ".join(sorted(runner_options)) or "none"
        raise CognateError(
            f"target {target.name}: runner does not take these options ({given}): {exc}"
        ) from exc


def _matrix_files(matrix_paths: Sequence[str | Path]) -> list[Path]:
    from cognate.formats.files import expand_matrix_paths

    if not matrix_paths:
        raise CognateError("no matrix files given")
    files = list(expand_matrix_paths([Path(p) for p in matrix_paths]))
    if not files:
        raise CognateError(f"no matrix files in {', '.join(str(p) for p in matrix_paths)}")
    # Absolute: the store keeps each matrix's source, and training reads a matrix back from
    # it, from whatever directory it runs in (a relative "g.npz" would name another file).
    return [Path(os.path.abspath(f)) for f in files]  # a link stays the path given


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
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        redirect_stdout=False,
        redirect_stderr=False,
        # Bars only on a terminal: in a log file each redraw would be a stray line (there
        # the collection prints a count / ETA line now and then: Collection.ticker).
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
    all_variants: bool = False,
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
    ``host_id`` names this machine in the records (default: cognate.hostid).
    ``all_variants``: every kernel variant of the baseline on top of the sample. Exclusive
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
        close_runner(runner)
    console = console or Console(stderr=True)
    if sequential and (jobs or 1) > 1:
        console.print(
            f"cognate: --jobs ignored: {target.name} timings take the whole machine",
            soft_wrap=True,
        )
    choose: dict[str, Any] = {
        "n_configs": n_configs,
        "all_configs": all_configs,
        "seed": seed,
        "all_variants": all_variants,
    }
    if from_model is not None:
        choose["picker"] = model_picker(from_model, target.name, space, op, width, n_configs)
    # SIGTERM / SIGHUP (schedulers, the OOM killer's first try, a closed terminal) stop the
    # run as Ctrl-C does: what is measured is stored, the summary printed.
    ray_started = ray_connect(ray_address) if ray_address is not None else None
    # After ray.init: Ray's driver installs a SIGTERM handler that aborts the process.
    # The job marker tells timing processes (another collect, tune --verify) we run here.
    with stop_signals_raise(), job_marker(f"collect-{target.name}"):
        try:
            with Store(db_path) as store, _progress(console) as progress:
                parallel = 1 if sequential or ray_address is not None else jobs or _cores()
                coll = Collection(
                    store, target, space, op, width, progress, choose, retry, host_id, parallel
                )
                plans = coll.plans(files)
                try:
                    if ray_address is not None:
                        run_ray(coll, plans, runner_options)
                    elif sequential:
                        run_sequential(coll, plans, runner, batch)
                    else:
                        run_pool(coll, plans, runner_options, jobs or _cores(), batch)
                except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM or SIGHUP (lifetime.Stopped)
                    coll.summary.interrupted = True
                    coll.summary.stop_exit_code = exit_code_of(exc)
        finally:
            if sequential:
                close_runner(runner)
            if ray_started:
                ray_shutdown(*ray_started)
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


__all__ = [
    "DEFAULT_CONFIGS",
    "DEFAULT_RETRIES",
    "DEFAULT_WIDTH",
    "CollectSummary",
    "collect",
    "max_jobs",
]
