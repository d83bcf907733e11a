"""The quiet-machine protocol for wall-clock timings (cpu collect, tune --verify, benches).

Two 2-thread kernels timed at once, or one timed beside a busy job, slow 10-40x on a small
machine and the record becomes a label of what ran beside it. So:

- ``timing_lock()``: a machine-wide exclusive lock (``flock`` on one file under /tmp, not
  under a user's cache, so every cognate process on the machine sees the same lock) held
  around every timed region. Two cognate processes never time at once.
- ``job_marker()``: every cognate job that uses cores (a simulator collection, a pool of
  workers) holds a shared lock on a per-process file in one folder, so a timing process can
  count the other cognate jobs running beside it even when the load average has not caught up.
- ``machine_load(threads)``: the 1-minute load average against the cores a timing leaves
  free, with a one-line verdict ("timings unreliable: load 3.9 on 2 cores").

``flock`` locks vanish with their process (kill -9 included), so a crashed job never leaves a
stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cognate.errors import CognateError
from cognate.lifetime import proc_stat, process_tree

LOCK_ENV = "COGNATE_TIMING_LOCK"  # override the lock file (tests use a private one)
JOBS_ENV = "COGNATE_JOBS_DIR"


def lock_path() -> Path:
    """The machine-wide timing lock file (``$COGNATE_TIMING_LOCK`` overrides)."""
    env = os.environ.get(LOCK_ENV)
    return Path(env) if env else Path(tempfile.gettempdir()) / "cognate-timing.lock"


def jobs_dir() -> Path:
    """Folder of per-process job markers (``$COGNATE_JOBS_DIR`` overrides)."""
    env = os.environ.get(JOBS_ENV)
    return Path(env) if env else Path(tempfile.gettempdir()) / "cognate-jobs"


def _open_shared(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:  # other users' cognate processes must be able to take the same lock
        os.fchmod(fd, 0o666)
    except OSError:
        pass
    return fd


@contextmanager
def timing_lock(
    wait_s: float | None = None, on_wait: Callable[[str], object] | None = None
) -> Iterator[None]:
    """Hold the machine-wide timing lock; wait for it (``wait_s`` None: forever).

    ``on_wait``: a callable given one line when another process holds the lock, so a
    user sees why nothing moves. Raises CognateError when ``wait_s`` runs out.
    """
    fd = _open_shared(lock_path())
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
    fd = _open_shared(lock_path())
    try:
        return not _try_lock(fd)
    finally:
        os.close(fd)


@contextmanager
def job_marker(kind: str) -> Iterator[None]:
    """Mark this process as a running cognate job (``kind``: e.g. "collect-spade")."""
    path = jobs_dir() / f"{os.getpid()}.{kind}"
    fd = _open_shared(path)
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        yield
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def other_jobs() -> list[str]:
    """Markers of other live cognate jobs (a marker whose lock is free is stale and removed)."""
    folder = jobs_dir()
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        pid = path.name.split(".", 1)[0]
        if pid == str(os.getpid()):
            continue
        if _marker_alive(path):
            found.append(path.name)
        else:
            path.unlink(missing_ok=True)
    return sorted(found)


def _marker_alive(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
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
