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


def _start(
    cmd: list[str], ready: object, workers: int, started: list[int] | None = None
) -> subprocess.Popen:
    """Start ``cmd`` in a new session; return once ``ready()`` and ``workers`` children run."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
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
from cognate.io import load_matrix
matrix = load_matrix({matrix!r})
config = _distinct_configs(matrix.shape, 1)[1]
runner = BadKernelRunner({{config.hash: "hang"}}, timeout_s=600)
runner.measure(matrix, "spmm", 16, [config])
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_hung_cpu_kernel_dies_with_its_driver(bcsstk13: Path, sig: int) -> None:
    """The worker spins in C and never reads its socket: only dying with the parent works."""
    code = _HUNG_RUNNER.format(tests=str(Path(__file__).parent), matrix=str(bcsstk13))
    proc = _start([sys.executable, "-c", textwrap.dedent(code)], lambda: True, workers=1)
    time.sleep(3)  # let the worker load, pack and enter the spinning kernel
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
