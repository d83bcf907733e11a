"""Ctrl-C during `tune --verify` is one line from tune, not the verify job's traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cognate import timing


def _hold_lock(env: dict[str, str]) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom cognate import timing\n"
         "with timing.timing_lock():\n    print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    return holder


def _interruptible() -> None:
    """SIGINT at its default in tune, as in a terminal's foreground job: a suite started in
    the background of a non-interactive shell (`pytest ... &`) inherits SIGINT ignored, and
    tune, like any program, keeps ignoring it then."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_verify_prints_no_traceback(tmp_path: Path, shared: Path) -> None:
    """The verify job waits for a timing lock another process holds (so it is surely running,
    past its imports); then the terminal's SIGINT goes to tune's whole process group."""
    env = {
        **os.environ,
        timing.LOCK_ENV: str(tmp_path / "timing.lock"),
        timing.JOBS_ENV: str(tmp_path / "jobs"),
    }
    holder = _hold_lock(env)
    matrix = shared / "matrices" / "suitesparse" / "494_bus.mtx.gz"
    tune = subprocess.Popen(
        [sys.executable, "-m", "cognate", "tune", str(matrix), "--target", "cpu",
         "--width", "8", "--verify", "--no-record"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,  # its own group, as a shell's foreground job is
        preexec_fn=_interruptible,
    )  # fmt: skip
    try:
        lines = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = tune.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "waiting for the timing lock" in line:
                break
        assert any("waiting for the timing lock" in line for line in lines), lines
        os.killpg(tune.pid, signal.SIGINT)
        rest = tune.stderr.read()
        code = tune.wait(timeout=60)
    finally:
        holder.kill()
        holder.wait()
        if tune.poll() is None:
            os.killpg(tune.pid, signal.SIGKILL)
            tune.wait()
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest, rest
    assert code == 130 and len(rest.strip().splitlines()) == 1, rest
