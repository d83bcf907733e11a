"""Process lifetime: workers die with their parent, and SIGTERM/SIGHUP stop a job like Ctrl-C.

A worker (cpu runner worker, simulator pool worker) calls ``die_with_parent`` once at
start. Two mechanisms, because each misses a case:

- Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGKILL)``) kills the worker even
  while it is stuck in a C kernel; it fires when the parent *thread* that started the
  worker exits, so callers only ask for it when that thread is the main thread.
- A daemon thread that polls ``os.getppid()`` and exits the process once the parent is gone
  (re-parented to init or a subreaper): works whatever thread started us and off Linux;
  ctypes releases the GIL around kernel calls, so it runs while a kernel spins.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

_PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_S = 0.5
# Signals that stop a job the way Ctrl-C does; exit status 128 + signal number.
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A stop signal (SIGINT, SIGTERM, SIGHUP) arrived; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


# Stop signals received inside stop_signals_raise(): libraries that catch the exception
# raised from a handler (Ray's wait does) re-raise a plain KeyboardInterrupt.
_received: list[int] = []


def exit_code_of(exc: KeyboardInterrupt) -> int:
    """128 + the signal that stopped us (a plain KeyboardInterrupt is SIGINT: 130)."""
    signum = getattr(exc, "signum", None) or (_received[-1] if _received else signal.SIGINT)
    return 128 + signum


def _set_pdeathsig() -> None:
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def die_with_parent(parent_pid: int, pdeathsig: bool = True) -> None:
    """Exit this process as soon as ``parent_pid`` is no longer our parent."""
    if pdeathsig:
        _set_pdeathsig()
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(WATCH_INTERVAL_S)
        os._exit(1)  # no cleanup: the parent that would read our results is gone

    threading.Thread(target=watch, name="cognate-parent-watch", daemon=True).start()


def _raise_stopped(signum: int, frame: object) -> None:
    _received.append(signum)
    raise Stopped(signum)


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Within the block SIGTERM and SIGHUP raise ``Stopped`` (a KeyboardInterrupt), as
    SIGINT raises KeyboardInterrupt, so a scheduler's kill gets the same clean stop as
    Ctrl-C. Main thread only (elsewhere signals cannot be handled): a no-op there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    previous = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup's choice stands
            previous[signum] = signal.signal(signum, _raise_stopped)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


@contextmanager
def stop_signals_deferred() -> Iterator[None]:
    """Hold stop signals while a batch is committed; raise the first one right after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {s: signal.signal(s, lambda n, f: caught.append(n)) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    if caught:
        if caught[0] == signal.SIGINT:
            raise KeyboardInterrupt
        raise Stopped(caught[0])


@contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """Block stop signals (pthread_sigmask) in this thread; they are delivered when the block
    ends, none is lost. A process started meanwhile inherits the block across exec, so a
    group signal cannot interrupt a pool worker while it is still importing (before its
    initializer ignores stop signals); the initializer's SIG_IGN then discards it there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


# --- process pools: multiprocessing's semaphores and resource tracker -------------------------
#
# A spawn-context pool names its semaphores in /dev/shm (sem.mp-<random>) and starts
# multiprocessing's resource tracker, a helper process that unlinks them when the pool's
# owner dies. Two gaps: the tracker ignores SIGINT and SIGTERM but not SIGHUP, so a hangup
# of the process group killed it and its restarted successor printed a KeyError traceback
# for every semaphore it had never seen; and a SIGKILL of the whole group kills the tracker
# too, leaving the semaphores behind. So pools are prepared here: the tracker is started
# with SIGHUP ignored, and the semaphores are named after their owner (pid and start time),
# so that the next start removes those whose owner is dead.

SHM_DIR = Path("/dev/shm")
SEM_PREFIX = "mp-cognate-"  # the name in /dev/shm is "sem." + this + "<pid>.<start>-<random>"


def prepare_process_pool() -> None:
    """Call before starting a multiprocessing pool in this process (main thread)."""
    clean_stale_semaphores()
    name_semaphores()
    start_resource_tracker()


def name_semaphores() -> None:
    """This process's multiprocessing semaphores are named after it from now on."""
    import multiprocessing

    stat = proc_stat(os.getpid())
    owner = f"{os.getpid()}.{stat.start if stat else 0}"
    # multiprocessing.synchronize.SemLock._make_name reads this prefix ('/mp' by default);
    # it is the documented-by-code hook, there is no public one.
    multiprocessing.current_process()._config["semprefix"] = f"/{SEM_PREFIX}{owner}"


def clean_stale_semaphores(shm: Path = SHM_DIR) -> list[Path]:
    """Remove the semaphores of cognate processes that are gone (killed with their resource
    tracker); returns what was removed. Others' semaphores are never touched."""
    removed = []
    for path in shm.glob(f"sem.{SEM_PREFIX}*"):
        owner = path.name[len(f"sem.{SEM_PREFIX}") :].split("-", 1)[0]
        pid, _, start = owner.partition(".")
        if not (pid.isdigit() and start.isdigit()):
            continue
        stat = proc_stat(int(pid))
        if stat is not None and stat.start == int(start):
            continue  # its owner still runs
        try:
            path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (if not yet running) with SIGHUP ignored: an
    ignored signal stays ignored across exec, and the tracker ignores SIGINT and SIGTERM
    itself. A stop of the job is the driver's business (lifetime.Stopped), not the tracker's."""
    from multiprocessing import resource_tracker

    if threading.current_thread() is not threading.main_thread():
        resource_tracker.ensure_running()
        return
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        resource_tracker.ensure_running()
    finally:
        signal.signal(signal.SIGHUP, previous if previous is not None else signal.SIG_DFL)


# --- process trees (Ray's local cluster) ------------------------------------------------------
#
# Ray's agents (dashboard, runtime-env) outlive a dead raylet by tens of seconds while they
# retry the dead GCS. A local cluster we started is ours to end: we kill what is left of our
# process tree after ray.shutdown(), and a small reaper process does the same if we are
# killed outright (SIGKILL gives us no chance to).

_REAP_INTERVAL_S = 0.5


class ProcStat(NamedTuple):
    """What we read of a process's /proc/<pid>/stat."""

    ppid: int
    start: int  # start time, clock ticks after boot (guards pid reuse)
    cpu: int  # utime + stime + cutime + cstime: its CPU time and its reaped children's, ticks


def proc_stat(pid: int) -> ProcStat | None:
    """The stat of a live, non-zombie process; None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after "(comm)": state ppid ... starttime (20th)
    if fields[0] == "Z":
        return None
    return ProcStat(int(fields[1]), int(fields[19]), sum(int(x) for x in fields[11:15]))


def process_tree(root: int) -> dict[int, ProcStat]:
    """pid -> stat of every live descendant of ``root`` (empty off Linux)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, ProcStat] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return {}
    for entry in proc.iterdir():
        if entry.name.isdigit() and (stat := proc_stat(int(entry.name))) is not None:
            children.setdefault(stat.ppid, []).append(int(entry.name))
            stats[int(entry.name)] = stat
    found: dict[int, ProcStat] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found[pid] = stats[pid]
            todo.extend(children.get(pid, []))
    return found


def descendants(root: int) -> dict[int, int]:
    """pid -> start time of every live descendant of ``root`` (empty off Linux)."""
    return {pid: stat.start for pid, stat in process_tree(root).items()}


def kill_all(processes: dict[int, int]) -> None:
    """SIGKILL each (pid, start time) that still runs (the start time guards pid reuse)."""
    for pid, start in processes.items():
        stat = proc_stat(pid)
        if stat is not None and stat.start == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def start_reaper() -> subprocess.Popen:
    """A process that, once this one dies, kills what was left of this one's process tree."""
    return subprocess.Popen(
        [sys.executable, "-m", "cognate.lifetime", str(os.getpid())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _reap(parent_pid: int) -> None:
    me = os.getpid()
    tree: dict[int, int] = {}
    while os.getppid() == parent_pid:
        tree = {pid: start for pid, start in descendants(parent_pid).items() if pid != me}
        time.sleep(_REAP_INTERVAL_S)
    kill_all(tree)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _reap(int(sys.argv[1]))
