"""The quiet-machine protocol: one timing at a time machine-wide, other jobs seen, load read."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from cognate import timing
from cognate.errors import CognateError
from cognate.lifetime import proc_stat

_HOLD = """
import sys, time
from cognate import timing
with timing.{what}:
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
"""


@pytest.fixture(autouse=True)
def private_locks(tmp_path, monkeypatch):
    monkeypatch.setenv(timing.LOCK_ENV, str(tmp_path / "timing.lock"))
    monkeypatch.setenv(timing.JOBS_ENV, str(tmp_path / "jobs"))


def _holder(what: str, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD.format(what=what), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_timing_lock_excludes_another_process_until_it_exits():
    proc = _holder("timing_lock()", 30)
    try:
        assert timing.lock_held_elsewhere()
        with pytest.raises(CognateError, match="still held"):
            with timing.timing_lock(wait_s=0.3):
                pass
    finally:
        proc.kill()
        proc.wait()
    # a killed holder leaves no stale lock behind
    messages = []
    with timing.timing_lock(wait_s=5, on_wait=messages.append):
        pass
    assert not timing.lock_held_elsewhere()


def test_waiting_for_the_lock_says_why():
    """The holder keeps the lock until the waiting line has been given (an event, not a
    delay that a loaded machine could outlast); then it ends and the lock comes."""
    proc = _holder("timing_lock()", 600)
    messages = []

    def release(line: str) -> None:
        messages.append(line)
        proc.kill()

    try:
        with timing.timing_lock(wait_s=60, on_wait=release):
            pass
    finally:
        proc.kill()
        proc.wait()
    assert len(messages) == 1 and "another cognate process is timing" in messages[0]


def test_other_jobs_sees_live_markers_and_drops_dead_ones():
    proc = _holder("job_marker('collect-spade')", 30)
    try:
        others = timing.other_jobs()
        assert others == [f"{proc.pid}.collect-spade"]
        load = timing.machine_load(threads=1, sample_s=0.05)
        assert load.busy and "1 other cognate job(s)" in load.line()
    finally:
        proc.kill()
        proc.wait()
    assert timing.other_jobs() == []
    assert not (timing.jobs_dir() / f"{proc.pid}.collect-spade").exists()


def _foreign_busy_loop() -> int:
    """A busy loop that is not our descendant (the shell that starts it exits): another job."""
    started = subprocess.run(
        ["sh", "-c", f'{sys.executable} -c "while True: pass" >/dev/null 2>&1 & echo $!'],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(started.stdout)


def test_busy_loops_make_the_machine_busy():
    loops = [_foreign_busy_loop() for _ in range(timing.cores())]
    try:
        time.sleep(0.3)
        load = timing.machine_load(sample_s=0.5)
    finally:
        for pid in loops:
            os.kill(pid, signal.SIGKILL)
    assert load.busy_cores > timing.cores() - 0.7
    assert load.busy and load.line().startswith("timings unreliable: load ")
    assert load.as_dict()["unreliable"] is True


def _ticks(pid: int) -> int:
    stat = proc_stat(pid)
    assert stat is not None, f"process {pid} is gone"
    return stat.cpu


def test_our_own_workers_are_not_other_jobs():
    """A worker we started (a timing worker warming up, a compile) spins during the sample: its
    jiffies count as ours, so it does not make the machine look busy.

    Compared with the CPU share the worker itself got over a window holding the sample, not
    with a fixed share: on a loaded machine it gets less than a core (0.49 was seen)."""
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for _ in range(20):  # until the worker got enough ticks in a window to compare
            child_before, machine_before = _ticks(loop.pid), timing._cpu_times()
            machine, own = timing.cpu_sample(0.5)
            child_ticks = _ticks(loop.pid) - child_before
            machine_ticks = timing._cpu_times()[1] - machine_before[1]
            if child_ticks >= 10:
                break
        else:
            pytest.fail("the busy child got under 10 ticks in each of 20 samples")
    finally:
        loop.kill()
        loop.wait()
    child = timing.cores() * child_ticks / machine_ticks  # same units as cpu_sample's
    # The window around the sample is a little wider than the sample itself, hence the half;
    # without the child's ticks `own` would be our own few ticks of reading /proc.
    assert own >= 0.5 * child
    assert own <= machine + 0.1  # and it is part of what the machine did
