"""The quiet-machine protocol for wall-clock timings (cpu collect, tune --verify, benches).

Two 2-thread kernels timed at once, or one timed beside a busy job, slow down many times
over on a small machine (docs/architecture.md, Facts measured here), and the record becomes
a label of what ran beside it. So:

- ``timing_lock()``: a machine-wide exclusive lock (``flock`` on one file under /tmp, not
  under a user's cache, so every cognate process on the machine sees the same lock) held
  around every timed region. Two cognate processes never time at once.
- ``job_marker()``: every cognate job that uses cores (a simulator collection, a pool of
  workers) holds a shared lock on a per-process file in a per-user folder, so a timing
  process can count the user's other cognate jobs even when the load average has not caught
  up. Other users' jobs are seen only through the busy-core sample (no shared folder another
  user could plant files or links in).
- ``machine_load(threads)``: the 1-minute load average against the cores a timing leaves
  free, with a one-line verdict ("timings unreliable: load 3.9 on 2 cores").
- ``time_interleaved(calls, rounds)``: what a benchmark script times with: prepared calls
  in interleaved rounds under the lock, the load read first, medians per call;
  ``early_threads(sys.argv)`` sets a script's thread count before any runtime loads.

``flock`` locks vanish with their process (kill -9 included), so a crashed job never leaves a
stale lock behind. /tmp is writable by everyone, so nothing there is trusted: files are opened
with ``O_NOFOLLOW`` (a planted link is never followed), only a regular file is used, a mode is
set only on a file this process just created, and an unusable lock or folder is one warning
line and a per-user fallback, never an error (see ``_open_lock``, ``_marker_dir``).
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import stat
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cognate.errors import CognateError
from cognate.lifetime import proc_stat, process_tree
from cognate.stats import timing_spread

LOCK_ENV = "COGNATE_TIMING_LOCK"  # override the lock file (tests use a private one)
JOBS_ENV = "COGNATE_JOBS_DIR"


def lock_path() -> Path:
    """The machine-wide timing lock file (``$COGNATE_TIMING_LOCK`` overrides)."""
    env = os.environ.get(LOCK_ENV)
    return Path(env) if env else Path(tempfile.gettempdir()) / "cognate-timing.lock"


def jobs_dir() -> Path:
    """Folder of this user's job markers (``$COGNATE_JOBS_DIR`` overrides): per user, since a
    folder shared in /tmp is one another user could make first and own."""
    env = os.environ.get(JOBS_ENV)
    if env:
        return Path(env)
    return Path(tempfile.gettempdir()) / f"cognate-jobs-{os.geteuid()}"


_OPEN = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # no link followed, no FIFO blocking
_WARNED: set[str] = set()


def _warn(line: str) -> None:
    """One stderr line, once per process (a loop of timings does not repeat it)."""
    if line not in _WARNED:
        _WARNED.add(line)
        print(f"cognate: warning: {line}", file=sys.stderr, flush=True)


class _Unusable(Exception):
    """A lock file or folder that is not safe to use (the message says why)."""


def _why(err: OSError) -> str:
    if err.errno == errno.ELOOP:
        return "is a symbolic link"
    return err.strerror or str(err)


def _open_regular(path: Path) -> int:
    """A descriptor of the lock file ``path``, created 0666 if absent (other users must be
    able to lock it too; the mode is set only on a file this call created). An existing file
    is opened as it is: read-only where we may not write it (``flock`` needs no write access),
    never chmod'ed. Raises ``_Unusable`` for a link, a non-regular file or no access."""
    for _ in range(3):  # an O_EXCL create that loses a race opens the winner's file
        try:
            try:
                fd = os.open(path, os.O_RDWR | _OPEN)
            except PermissionError:
                fd = os.open(path, os.O_RDONLY | _OPEN)
        except FileNotFoundError:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _OPEN, 0o666)
            except FileExistsError:
                continue
            except OSError as err:
                raise _Unusable(_why(err)) from None
            os.fchmod(fd, 0o666)  # ours, just made: the umask must not lock other users out
        except OSError as err:
            raise _Unusable(_why(err)) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise _Unusable("is not a regular file")
        return fd
    raise _Unusable("is created and removed by someone else")


def _fallback_lock() -> Path:
    """The per-user lock beside the shared one (``cognate-timing-<uid>.lock``)."""
    shared = lock_path()
    return shared.with_name(f"{shared.stem}-{os.geteuid()}{shared.suffix}")


def _open_lock() -> int | None:
    """The timing lock's descriptor: the machine-wide file, else (one warning) a per-user
    one that still keeps this user's processes apart; None (another warning) when neither is
    usable, and the timing goes on unlocked rather than failing."""
    path = lock_path()
    try:
        return _open_regular(path)
    except _Unusable as err:
        first = f"timing lock {path} {err}"
    fallback = _fallback_lock()
    try:
        fd = _open_regular(fallback)
    except _Unusable as err:
        _warn(f"{first}, and {fallback} {err}: timing without the lock (remove them)")
        return None
    _warn(f"{first}; using {fallback} (other users' timings may overlap; remove it)")
    return fd


@contextmanager
def timing_lock(
    wait_s: float | None = None, on_wait: Callable[[str], object] | None = None
) -> Iterator[None]:
    """Hold the machine-wide timing lock; wait for it (``wait_s`` None: forever).

    ``on_wait``: a callable given one line when another process holds the lock, so a
    user sees why nothing moves. Raises CognateError when ``wait_s`` runs out.
    """
    fd = _open_lock()
    if fd is None:
        yield
        return
    try:
        if not _try_lock(fd):
            if on_wait is not None:
                on_wait(
                    f"waiting for the timing lock {lock_path()} (another cognate process is timing)"
                )
            _wait_lock(fd, wait_s)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _wait_lock(fd: int, wait_s: float | None) -> None:
    deadline = None if wait_s is None else time.monotonic() + wait_s
    while not _try_lock(fd):
        if deadline is not None and time.monotonic() >= deadline:
            raise CognateError(
                f"timing lock {lock_path()}: still held by another process after {wait_s:g} s"
            )
        time.sleep(0.05)


def lock_held_elsewhere() -> bool:
    """Whether another process holds the timing lock right now."""
    fd = _open_lock()
    if fd is None:
        return False
    try:
        return not _try_lock(fd)
    finally:
        os.close(fd)


def _marker_dir() -> int | None:
    """A descriptor of the job-marker folder: a real folder (not a link) owned by us and
    writable by no one else, created 0700 if absent; every marker is then opened relative to
    it, so the folder cannot be swapped for a link midway. None, with one warning, where it is
    not such a folder (someone else made it first): jobs then go unmarked."""
    path = jobs_dir()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with suppress(FileExistsError):
            os.mkdir(path, 0o700)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        why = "is a symbolic link" if path.is_symlink() else _why(err)  # O_DIRECTORY: ENOTDIR
        _warn(f"job markers {path}: {why}; jobs are not marked (remove it)")
        return None
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        whose = "owned by another user" if info.st_uid != os.geteuid() else "writable by others"
        _warn(f"job markers {path}: {whose}; jobs are not marked (remove it)")
        return None
    return fd


@contextmanager
def job_marker(kind: str) -> Iterator[None]:
    """Mark this process as a running cognate job (``kind``: e.g. "collect-spade")."""
    folder = _marker_dir()
    if folder is None:
        yield
        return
    name = f"{os.getpid()}.{kind}"
    try:
        with suppress(FileNotFoundError):  # a marker of a dead process with our pid
            os.unlink(name, dir_fd=folder)
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | _OPEN, 0o644, dir_fd=folder)
    except OSError as err:
        os.close(folder)
        _warn(f"job marker {jobs_dir() / name}: {_why(err)}; this job is not marked")
        yield
        return
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        yield
    finally:
        os.close(fd)
        with suppress(OSError):
            os.unlink(name, dir_fd=folder)
        os.close(folder)


def other_jobs() -> list[str]:
    """Markers of other live cognate jobs (a marker whose lock is free is stale and removed)."""
    if not jobs_dir().is_dir():
        return []
    folder = _marker_dir()
    if folder is None:
        return []
    found = []
    try:
        for name in os.listdir(folder):
            if name.split(".", 1)[0] == str(os.getpid()):
                continue
            if _marker_alive(folder, name):
                found.append(name)
            else:
                with suppress(OSError):
                    os.unlink(name, dir_fd=folder)
    finally:
        os.close(folder)
    return sorted(found)


def _marker_alive(folder: int, name: str) -> bool:
    try:
        fd = os.open(name, os.O_RDONLY | _OPEN, dir_fd=folder)
    except OSError:
        return False
    try:  # a live job holds LOCK_SH, which blocks LOCK_EX
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Load:
    """The machine's load as a timing sees it."""

    load1: float  # 1-minute load average (what the user sees in `uptime`)
    busy_cores: float  # cores kept busy by other processes over a short sample just now
    cores: int
    threads: int  # threads the timing itself uses
    others: tuple[str, ...] = ()  # other cognate jobs running (job markers)

    @property
    def free_cores(self) -> int:
        return max(self.cores - self.threads, 0)

    @property
    def busy(self) -> bool:
        """Others keep more than the cores we leave free (plus half a core) busy, or another
        cognate job runs. The sample, not the 1-minute average, decides: the average still
        counts our own timing threads of the last minute.
        """
        return bool(self.others) or self.busy_cores > self.free_cores + 0.5

    def line(self) -> str:
        """One line for the user; empty when the machine is quiet."""
        if not self.busy:
            return ""
        why = f"load {self.load1:.1f} on {self.cores} cores ({self.busy_cores:.1f} busy now)"
        if self.others:
            why += f", {len(self.others)} other cognate job(s) running"
        return f"timings unreliable: {why}"

    def as_dict(self) -> dict[str, object]:
        return {
            "load1": round(self.load1, 2),
            "busy_cores": round(self.busy_cores, 2),
            "cores": self.cores,
            "threads": self.threads,
            "other_jobs": len(self.others),
            "unreliable": self.busy,
        }


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of the whole machine from /proc/stat; None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def own_jiffies() -> int:
    """CPU clock ticks used so far by this process and its descendants (reaped children
    included: a compile that exits during a sample moves its time into its parent's)."""
    me = proc_stat(os.getpid())
    return (me.cpu if me else 0) + sum(stat.cpu for stat in process_tree(os.getpid()).values())


def cpu_sample(sample_s: float = 0.25) -> tuple[float, float] | None:
    """(cores busy machine-wide, cores busy in our own process tree) over ``sample_s``;
    None off Linux."""
    first, own_first = _cpu_times(), own_jiffies()
    if first is None:
        return None
    time.sleep(sample_s)
    second, own_second = _cpu_times(), own_jiffies()
    total = second[1] - first[1]
    if total <= 0:
        return 0.0, 0.0
    n = cores()
    return n * (second[0] - first[0]) / total, n * (own_second - own_first) / total


def busy_cores(sample_s: float = 0.25) -> float:
    """Cores other processes keep busy, sampled while this process sleeps ``sample_s``.

    Our own descendants (a just-started timing worker, a kernel compile) are not "others".
    """
    sample = cpu_sample(sample_s)
    if sample is None:
        return os.getloadavg()[0]
    machine, own = sample
    return max(machine - own, 0.0)


def machine_load(threads: int | None = None, sample_s: float = 0.25) -> Load:
    """Read the load average, a short busy-core sample, the cores and other cognate jobs."""
    n = cores()
    return Load(
        load1=os.getloadavg()[0],
        busy_cores=busy_cores(sample_s),
        cores=n,
        threads=min(threads or n, n),
        others=tuple(other_jobs()),
    )


# --- the protocol for scripts: threads set early, interleaved rounds under the lock -----------

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def early_threads(
    argv: Sequence[str], default: int | None = None, passive: bool = False
) -> int | None:
    """Put a script's ``--threads N`` (else ``default``) into OMP_NUM_THREADS and
    MKL_NUM_THREADS; with ``passive``, passive OpenMP waits unless the user chose a policy.

    Call it before numpy, torch or MKL load: their runtimes read these variables once. This
    module imports none of them. Returns the threads set (None: none given, nothing set).
    """
    threads = default
    if "--threads" in argv[:-1]:
        value = argv[list(argv).index("--threads") + 1]
        if not value.isdigit():  # the script's argument parser says what is wrong
            return default
        threads = int(value)
    if passive:
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    if threads:
        for name in THREAD_VARIABLES:
            os.environ[name] = str(threads)
    return threads


@dataclass(frozen=True)
class Timings:
    """Median seconds per call of interleaved rounds, how many rounds ran, and the load read
    just before them."""

    seconds: dict[str, float]
    rounds: int
    load: Load


def time_interleaved(
    calls: Mapping[str, Callable[[], object]],
    rounds: int,
    min_sample_s: float | None = None,
    budget_s: float | None = None,
    threads: int | None = None,
    on_wait: Callable[[str], object] | None = None,
) -> Timings:
    """Time prepared ``calls`` in interleaved rounds (``interleaved``: a
    warm-up, samples of at least ``min_sample_s``, the order rotating each round) under the
    timing lock, with the load read first; medians per call.

    ``budget_s``: fewer rounds (at least 3) when ``rounds`` of them would take longer than
    that, as measured by the warm-up. ``on_wait`` defaults to a line on stderr.
    """
    min_sample_s = MIN_SAMPLE_S if min_sample_s is None else min_sample_s
    if budget_s is not None:
        rounds = _rounds_within(calls, rounds, min_sample_s, budget_s)
    with timing_lock(on_wait=on_wait or _to_stderr):
        load = machine_load(threads, sample_s=0.1)
        timed = interleaved(dict(calls), rounds, min_sample_s)
    return Timings({name: t.median for name, t in timed.items()}, rounds, load)


def _rounds_within(
    calls: Mapping[str, Callable[[], object]], rounds: int, min_sample_s: float, budget_s: float
) -> int:
    """``rounds``, lowered (to at least 3) so that they fit ``budget_s``: one call of each
    times a round (a sample lasts at least ``min_sample_s``)."""
    one_round = 0.0
    for fn in calls.values():
        start = time.perf_counter()
        fn()
        one_round += max(time.perf_counter() - start, min_sample_s)
    return max(3, min(rounds, int(budget_s / max(one_round, 1e-9))))


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --- interleaved rounds: prepared calls timed round by round (A B C base lib, ...) -----------
# Timing candidates one after another on a shared machine ranks them by whatever ran beside
# each; rounds that visit every call in turn let a disturbance hit all of them alike, and the
# median over rounds drops the rounds it hit hardest. Each call's result is checked against
# scipy before any of its timings count (the caller's job).

MIN_SAMPLE_S = 1e-3  # a sample is as many back-to-back calls as fill this
ROUNDS = 7


def wait_policy() -> str:
    """The OpenMP wait policy this process runs under, in words."""
    value = os.environ.get("OMP_WAIT_POLICY", "")
    return value.lower() if value.lower() in ("active", "passive") else "default"


@dataclass
class Timed:
    """Per-call seconds of one entry, one sample per round."""

    name: str
    samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return float(statistics.median(self.samples))

    @property
    def spread(self) -> float:
        """Interquartile range of the samples: the noise one comparison must clear."""
        return timing_spread(self.samples).iqr_s

    @property
    def range(self) -> float:
        """max - min of the samples."""
        return timing_spread(self.samples).range_s


def calls_per_sample(fn: Callable[[], Any], min_sample_s: float = MIN_SAMPLE_S) -> int:
    """Run ``fn`` once (a warm-up) and return how many calls fill ``min_sample_s``."""
    start = time.perf_counter()
    fn()
    first = max(time.perf_counter() - start, 1e-7)
    return max(1, math.ceil(min_sample_s / first))


def interleaved(
    calls: dict[str, Callable[[], Any]],
    rounds: int = ROUNDS,
    min_sample_s: float = MIN_SAMPLE_S,
    lead_in: bool = False,
    on_round: Callable[[int], None] | None = None,
) -> dict[str, Timed]:
    """Time every call once per round, ``rounds`` rounds; the order rotates by one each round
    so no call always runs right after the same neighbour (whose cache footprint it sees).

    ``lead_in``: each sample is preceded by as many untimed calls. Under default OpenMP waits
    a runtime's threads spin a while after its last call; torch's bundled runtime is not the
    one MKL and the kernels share, so its spinning threads would take a core from the first
    calls after it. After the lead-in each call runs as in a user's own loop. ``on_round``:
    called with the number of rounds done after each round (a progress line)."""
    names = list(calls)
    numbers = {name: calls_per_sample(calls[name], min_sample_s) for name in names}
    timed = {name: Timed(name) for name in names}
    for round_index in range(rounds):
        shift = round_index % max(len(names), 1)
        for name in names[shift:] + names[:shift]:
            fn, number = calls[name], numbers[name]
            for _ in range(number if lead_in else 0):
                fn()
            start = time.perf_counter()
            for _ in range(number):
                fn()
            timed[name].samples.append((time.perf_counter() - start) / number)
        if on_round is not None:
            on_round(round_index + 1)
    return timed


def tied(a: Timed, b: Timed) -> bool:
    """Whether two medians are closer than the larger of their spreads."""
    return abs(a.median - b.median) <= max(a.spread, b.spread)


def leaders(timed: dict[str, Timed], among: list[str]) -> list[str]:
    """The two fastest names of ``among`` by median."""
    return sorted(among, key=lambda name: timed[name].median)[:2]


# --- blocks: each call timed alone, after the other runtimes' threads have gone quiet -------
# Intel OpenMP (MKL) keeps its threads spinning for KMP_BLOCKTIME = 200 ms after each parallel
# region, libgomp (the kernels, torch) a shorter while: a call timed right after another
# runtime's competes with those threads for the cores. So each call runs alone for a lead-in
# longer than that spin, untimed, then a block of consecutive calls is timed.

LEAD_IN_S = 0.25
BLOCK_S = 0.02  # a block is as many consecutive calls as fill this


def blocks(
    calls: Mapping[str, Callable[[], Any]],
    rounds: int = ROUNDS,
    block_s: float = BLOCK_S,
    lead_in_s: float = LEAD_IN_S,
    runtime: Callable[[str], str] | None = None,
    on_round: Callable[[int], None] | None = None,
) -> dict[str, Timed]:
    """Per round, each call in turn (the order rotating by one each round): its own calls,
    untimed, for at least ``lead_in_s``, then a timed block of consecutive calls; a sample is
    the block's seconds per call.

    ``runtime`` (name -> which threading runtime the call uses): the timed lead-in only where
    the previous call's runtime differs (only another runtime's threads can still spin); after
    a call of the same runtime the lead-in is one block's worth of calls. ``on_round`` as in
    ``interleaved``."""
    names = list(calls)
    numbers = {name: calls_per_sample(calls[name], block_s) for name in names}
    timed = {name: Timed(name) for name in names}
    previous = None
    for round_index in range(rounds):
        shift = round_index % max(len(names), 1)
        for name in names[shift:] + names[:shift]:
            fn, number = calls[name], numbers[name]
            own = runtime(name) if runtime is not None else None
            if runtime is None or own != previous:
                quiet_at = time.perf_counter() + lead_in_s
                while time.perf_counter() < quiet_at:
                    fn()
            else:
                for _ in range(number):
                    fn()
            previous = own
            start = time.perf_counter()
            for _ in range(number):
                fn()
            timed[name].samples.append((time.perf_counter() - start) / number)
        if on_round is not None:
            on_round(round_index + 1)
    return timed


def time_blocks(
    calls: Mapping[str, Callable[[], object]],
    rounds: int,
    threads: int | None = None,
    on_wait: Callable[[str], object] | None = None,
    runtime: Callable[[str], str] | None = None,
) -> tuple[dict[str, Timed], Load]:
    """``blocks`` under the timing lock, with the load read first (``runtime``: as in
    ``blocks``, the long lead-in only where the threading runtime changes)."""
    with timing_lock(on_wait=on_wait or _to_stderr):
        load = machine_load(threads, sample_s=0.1)
        timed = blocks(dict(calls), rounds, runtime=runtime)
    return timed, load
