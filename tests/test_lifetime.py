"""No orphans: a collect killed with SIGTERM or SIGKILL leaves no process behind.

Each test starts a real collector (or a cpu runner stuck in a hanging kernel) in its own
session, waits until its workers run, kills the main process and then looks, through
/proc, for any process of that session still alive 10 s later. SIGTERM must also give the
same clean stop as Ctrl-C: what was measured is stored, the summary printed, exit 143.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

GRACE_S = 10.0


def _session_processes(sid: int) -> set[int]:
    """Live (not zombie) processes of session ``sid``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "(comm)": state ppid pgrp session
        if fields[0] != "Z" and int(fields[3]) == sid:
            found.add(int(entry.name))
    return found


def _assert_none_left(sid: int) -> None:
    deadline = time.monotonic() + GRACE_S
    while (left := _session_processes(sid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    names = {pid: _cmdline(pid) for pid in left}
    for pid in left:  # clean up before failing, so one failure does not load the machine
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes still alive {GRACE_S:g} s after the kill: {names}"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
    except OSError:
        return "?"


def _count(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return conn.execute("SELECT count(*) FROM measurements").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


def _running(started: list[int], text: str) -> bool:
    """Whether a process of the session of ``started[0]`` has ``text`` in its command line."""
    for pid in _session_processes(started[0]):
        try:
            if text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def _default_stop_signals() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _start(
    cmd: list[str], ready: object, workers: int, started: list[int] | None = None
) -> subprocess.Popen:
    """Start ``cmd`` in a new session, with the stop signals' default dispositions (a job
    started from a terminal; under nohup or as a background job of a script the test runner
    ignores SIGHUP or SIGINT, and the collector rightly keeps an ignored signal ignored);
    return once ``ready()`` and ``workers`` children run."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_default_stop_signals,
    )
    if started is not None:
        started.append(proc.pid)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"ended early: {proc.communicate()}"
        if len(_session_processes(proc.pid)) > workers and ready():  # type: ignore[operator]
            return proc
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("no progress in 180 s")


def _collect_cmd(db: Path, matrix: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "cognate", "collect", "--op", "spmm", "--db", str(db)] + [
        *extra,
        str(matrix),
    ]


@pytest.fixture
def bcsstk13(suitesparse_files: list[Path]) -> Path:
    return next(p for p in suitesparse_files if p.name == "bcsstk13.mtx.gz")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_spade_pool_leaves_no_process(bcsstk13: Path, tmp_path: Path, sig: int) -> None:
    db = tmp_path / "r.db"
    cmd = _collect_cmd(db, bcsstk13, "--target", "spade", "--all-configs", "--jobs", "2")
    proc = _start(cmd, lambda: _count(db) >= 2, workers=2)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    _assert_none_left(proc.pid)
    if sig == signal.SIGTERM:  # the same clean stop as Ctrl-C
        assert proc.returncode == 143, err
        assert "interrupted" in out and "Traceback" not in err
        assert f"collected {_count(db)} records" in out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_cpu_collect_leaves_no_process(bcsstk13: Path, tmp_path: Path, sig: int) -> None:
    db = tmp_path / "r.db"
    cmd = _collect_cmd(db, bcsstk13, "--target", "cpu", "--configs", "40", "--repeats", "50")
    proc = _start(cmd, lambda: _count(db) >= 1, workers=1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    _assert_none_left(proc.pid)
    if sig == signal.SIGTERM:
        assert proc.returncode == 143, err
        assert "interrupted" in out and "Traceback" not in err


_HUNG_RUNNER = """
import sys, time
sys.path.insert(0, {tests!r})
from test_cpu_runner import BadKernelRunner, _distinct_configs
from cognate.formats.read import load_matrix
matrix = load_matrix({matrix!r})
config = _distinct_configs(matrix.shape, 1)[1]
runner = BadKernelRunner({{config.hash: "hang"}}, timeout_s=600)
runner.measure(matrix, "spmm", 16, [config])
"""


def _cpu_ticks(pid: int) -> int:
    """User + system clock ticks of ``pid`` (0 once it is gone)."""
    try:
        fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def _wait_for_spinning_worker(driver: int, timeout_s: float = 180) -> None:
    """Return once a worker of ``driver``'s session burns CPU steadily (the hung kernel runs):
    an event, not a sleep, since loading, packing and compiling take long under load."""
    deadline = time.monotonic() + timeout_s
    before: dict[int, int] = {}
    busy = 0  # consecutive half-seconds in which the one worker burned CPU
    while time.monotonic() < deadline:
        now = {p: _cpu_ticks(p) for p in _session_processes(driver) if p != driver}
        grew = len(now) == 1 and all(now[p] - before.get(p, now[p]) >= 3 for p in now)
        busy = busy + 1 if grew and before.keys() == now.keys() else 0
        if busy >= 4:
            return
        before = now
        time.sleep(0.5)
    raise AssertionError("the worker never entered the spinning kernel")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_hung_cpu_kernel_dies_with_its_driver(bcsstk13: Path, sig: int) -> None:
    """The worker spins in C and never reads its socket: only dying with the parent works."""
    code = _HUNG_RUNNER.format(tests=str(Path(__file__).parent), matrix=str(bcsstk13))
    proc = _start([sys.executable, "-c", textwrap.dedent(code)], lambda: True, workers=1)
    _wait_for_spinning_worker(proc.pid)
    assert len(_session_processes(proc.pid)) == 2
    proc.send_signal(sig)
    proc.wait(timeout=30)
    _assert_none_left(proc.pid)


# SIGKILL of a ray collector (a cluster start, ~10 s) is slow; the kill case stays in the
# default suite for the spade pool and the cpu runner, the ray case with SIGTERM.
@pytest.mark.parametrize(
    "sig",
    [signal.SIGTERM, pytest.param(signal.SIGKILL, marks=pytest.mark.slow)],
    ids=["term", "kill"],
)
def test_ray_local_cluster_leaves_no_process(bcsstk13: Path, tmp_path: Path, sig: int) -> None:
    pytest.importorskip("ray")
    db = tmp_path / "r.db"
    cmd = _collect_cmd(db, bcsstk13, "--target", "spade", "--all-configs", "--ray", "local")
    # Ray's cluster processes (gcs, raylet, workers) run once a task is in flight.
    started: list[int] = []  # the collector's pid, once known
    proc = _start(cmd, lambda: _running(started, "_ray_measure"), workers=3, started=started)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    _assert_none_left(proc.pid)
    if sig == signal.SIGTERM:
        assert proc.returncode == 143, err
        assert "interrupted" in out and "Traceback" not in err


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_stop_signals_raise_like_ctrl_c(sig: int, code: int) -> None:
    # Run as if started from a terminal: under nohup SIGHUP arrives ignored, and that
    # choice is kept (the next test); here the signal must be handled.
    inherited = signal.signal(sig, signal.SIG_DFL)
    try:
        _stop_signal_raises(sig, code)
    finally:
        signal.signal(sig, inherited)


def _stop_signal_raises(sig: int, code: int) -> None:
    from cognate.lifetime import exit_code_of, stop_signals_deferred, stop_signals_raise

    before = signal.getsignal(sig)
    with pytest.raises(KeyboardInterrupt) as raised, stop_signals_raise():
        os.kill(os.getpid(), sig)
        time.sleep(5)  # the handler raises before this ends
    assert exit_code_of(raised.value) == code
    # During a commit the signal waits for the end of the block, then raises.
    done = []
    with pytest.raises(KeyboardInterrupt), stop_signals_raise():
        with stop_signals_deferred():
            os.kill(os.getpid(), sig)
            done.append("committed")
    assert done == ["committed"]
    assert signal.getsignal(sig) == before  # handlers restored


def test_a_hangup_ignored_by_nohup_stays_ignored() -> None:
    from cognate.lifetime import stop_signals_raise

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with stop_signals_raise():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.2)
    finally:
        signal.signal(signal.SIGHUP, previous)


# --- the process pool's resource tracker and semaphores ---------------------------------------


def _own_semaphores(pid: int) -> list[Path]:
    from cognate.lifetime import SEM_PREFIX, SHM_DIR

    return sorted(SHM_DIR.glob(f"sem.{SEM_PREFIX}{pid}.*"))


@pytest.mark.parametrize(
    ("sig", "code"),
    [(signal.SIGHUP, 129), (signal.SIGTERM, 143), (signal.SIGINT, 130)],
    ids=["hup", "term", "int"],
)
def test_group_stop_signal_of_a_spade_pool_prints_no_traceback(
    bcsstk13: Path, tmp_path: Path, sig: int, code: int
) -> None:
    """The whole process group gets the signal, as from a closed terminal or Ctrl-C: the
    resource tracker must survive it (a SIGHUP killed it, and its successor printed a KeyError
    traceback per semaphore) and the pool's semaphores must be gone afterwards."""
    db = tmp_path / "r.db"
    cmd = _collect_cmd(db, bcsstk13, "--target", "spade", "--all-configs", "--jobs", "2")
    proc = _start(cmd, lambda: _count(db) >= 2, workers=2)
    assert _own_semaphores(proc.pid), "the pool's semaphores carry cognate's name"
    os.killpg(proc.pid, sig)
    out, err = proc.communicate(timeout=60)
    _assert_none_left(proc.pid)
    assert proc.returncode == code, err
    assert err == "", err  # not one line from the resource tracker
    assert "interrupted" in out and f"collected {_count(db)} records" in out
    assert not _own_semaphores(proc.pid)


def test_semaphores_left_by_a_group_kill_go_at_the_next_start(
    bcsstk13: Path, suitesparse_files: list[Path], tmp_path: Path
) -> None:
    """SIGKILL of the whole group kills the resource tracker too; the semaphores it would
    have removed are recognised by their name and removed by the next collect's pool."""
    db = tmp_path / "r.db"
    cmd = _collect_cmd(db, bcsstk13, "--target", "spade", "--all-configs", "--jobs", "2")
    proc = _start(cmd, lambda: _count(db) >= 2, workers=2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    _assert_none_left(proc.pid)
    left = _own_semaphores(proc.pid)
    assert left, "a group SIGKILL leaves the semaphores behind (what this test is about)"
    small = next(p for p in suitesparse_files if p.name == "494_bus.mtx.gz")
    again = _collect_cmd(tmp_path / "s.db", small, "--target", "spade", "--configs", "2")
    done = subprocess.run([*again, "--jobs", "1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not [p for p in left if p.exists()]


def test_only_dead_owners_semaphores_are_removed(tmp_path: Path) -> None:
    from cognate.lifetime import SEM_PREFIX, clean_stale_semaphores, proc_stat

    me = proc_stat(os.getpid())
    assert me is not None
    mine = tmp_path / f"sem.{SEM_PREFIX}{os.getpid()}.{me.start}-abc"
    reused = tmp_path / f"sem.{SEM_PREFIX}{os.getpid()}.{me.start + 1}-abc"  # pid reused
    dead = tmp_path / f"sem.{SEM_PREFIX}{2**22 + 1}.5-xyz"  # above Linux's pid_max
    foreign = tmp_path / "sem.mp-abcdefgh"  # another program's: never touched
    for path in (mine, reused, dead, foreign):
        path.write_bytes(b"")
    assert sorted(clean_stale_semaphores(tmp_path)) == sorted([reused, dead])
    assert mine.exists() and foreign.exists()


def test_a_pool_worker_spawned_with_stop_signals_blocked_survives_an_early_sigint(capfd) -> None:
    """A SIGINT that reaches a spawn-pool worker while it is still starting (before its
    initializer ignores stop signals) stays pending and is discarded by the initializer's
    SIG_IGN: the task runs, no traceback. Without the block the worker dies or raises
    KeyboardInterrupt in its bootstrap and the pool breaks."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from cognate.lifetime import stop_signals_blocked

    ctx = multiprocessing.get_context("spawn")
    ignore = (signal.SIGINT, signal.SIG_IGN)
    with ProcessPoolExecutor(1, mp_context=ctx, initializer=signal.signal, initargs=ignore) as pool:
        with stop_signals_blocked():
            future = pool.submit(os.getpid)
        (pid,) = list(pool._processes)
        os.kill(pid, signal.SIGINT)  # it is still importing: Python's start takes >= 20 ms
        assert future.result(timeout=120) == pid
    assert "KeyboardInterrupt" not in capfd.readouterr().err
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == set()  # our own mask is restored


def test_a_stopped_pools_manager_thread_is_joined_before_exit() -> None:
    """A stop shuts the pool down without waiting, which makes the executor forget its
    manager thread; left listed, CPython 3.11's exit hook can write to the pipe that thread
    is closing and print an OSError traceback. The pool's cleanup joins and unlists it."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, process

    from cognate.collect.pool import _join_and_forget_executors

    pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))
    assert pool.submit(abs, -3).result(timeout=60) == 3
    pool.shutdown(wait=False, cancel_futures=True)
    pool.shutdown(wait=True)  # joins nothing now: the thread was forgotten above
    _join_and_forget_executors()
    assert not process._threads_wakeups, "a manager thread is still listed for the exit hook"
