"""The cpu runner: validated timings of generated kernels, each run in an isolated worker.

Per config: generate and compile the kernel (here, in the driver process), then in a
worker process (worker.py) pack A, run once, compare with scipy (a mismatch is an
``error``, never a timing), warm up and take the median of repeated samples (with their interquartile range and
max - min, ``cognate.stats.timing_spread``). The worker is a separate process so a kernel
that crashes or hangs costs one record: the worker is killed or found dead and a fresh one starts for the
next config.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.runner import ERROR_CHARS, Measurement, Runner
from cognate.targets.cpu import pipeline
from cognate.util import one_line

# --- the driver side ------------------------------------------------------------------------


def omp_threads() -> int:
    """Threads the kernels run with: OMP_NUM_THREADS if set, else every core we may use."""
    setting = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(setting) if setting.isdigit() and int(setting) > 0 else len(os.sched_getaffinity(0))


class _Lost(Exception):
    """The worker died or missed a deadline; ``status`` says which record to write."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Worker:
    """One worker process (``python -m cognate.targets.cpu.measure.worker``) and its socket."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        quiet = not os.environ.get("COGNATE_DEBUG")
        # Passive OpenMP waiting unless the user chose otherwise: with spinning waits, every
        # barrier on a shared 2-core box waits out other processes' time slices, and a
        # 20-us kernel reads as 40 ms (measured here); passive costs little on an idle node.
        env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "passive")}
        # The worker dies with this process (cognate.lifetime); the parent-death signal only
        # where this thread is the main one (it fires when the starting thread exits).
        pdeathsig = int(threading.current_thread() is threading.main_thread())
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cognate.targets.cpu.measure.worker",
                str(theirs.fileno()),
                str(os.getpid()),
                str(pdeathsig),
            ],
            pass_fds=(theirs.fileno(),),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL if quiet else None,
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self.loaded: tuple[str, str, int] | None = None

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, message: tuple) -> None:
        try:
            self.conn.send(message)
        except OSError as exc:
            raise _Lost("error", f"worker gone: {exc}") from None

    def receive(self, timeout_s: float, phase: str) -> tuple:
        """The next message, or _Lost if the worker dies or takes longer than ``timeout_s``."""
        try:
            if self.conn.poll(timeout_s):
                return self.conn.recv()
        except (EOFError, OSError):  # the socket closed: the worker is exiting
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        else:
            self.kill()
            raise _Lost("timeout", f"{phase} exceeded {timeout_s:.3g} s")
        self.kill()
        code = self.process.returncode
        why = f"signal {-code}" if code < 0 else f"exit code {code}"
        raise _Lost("error", f"worker crashed in {phase} ({why})")

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait()
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(("stop",))
            self.process.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class CpuRunner(Runner):
    """Measures cpu configs: compile here, validate and time in an isolated worker process.

    ``timeout_s`` limits one kernel run (the validation run; timing of a slow kernel is
    shortened to fit about the same budget); ``setup_timeout_s`` limits loading a matrix
    (scipy reference) and packing A. A sample is one call, or several back to back when a
    call is shorter than ``min_sample_s``; short samples let the median reject the ones a
    busy machine preempted. Threads: OMP_NUM_THREADS, else all cores (on a shared machine
    OMP_WAIT_POLICY=passive keeps spinning threads from wasting descheduled peers' slices).
    """

    target = "cpu"

    def __init__(
        self,
        repeats: int = 7,
        warmup: int = 1,
        timeout_s: float = 10.0,
        min_sample_s: float = 5e-4,
        setup_timeout_s: float = 300.0,
    ) -> None:
        if repeats < 1 or warmup < 0 or timeout_s <= 0 or min_sample_s < 0:
            raise CognateError("cpu runner: need repeats >= 1, warmup >= 0, timeout_s > 0")
        self.repeats, self.warmup, self.timeout_s = int(repeats), int(warmup), float(timeout_s)
        self.min_sample_s, self.setup_timeout_s = float(min_sample_s), float(setup_timeout_s)
        self._worker: _Worker | None = None

    # The kernel for a config: tests override this to inject a deliberately bad library.
    def build(self, op: str, config: Config, width: int) -> tuple[str, dict[str, Any]]:
        """Compile (or find cached) the kernel of ``config`` specialised to ``width``; return
        its path and counters."""
        start = time.perf_counter()
        path = pipeline.build(op, config.knobs, width)
        return str(path), {"compile_s": time.perf_counter() - start}

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def _ready_worker(self, matrix: Matrix, op: str, width: int) -> _Worker:
        key = (matrix.sha256, op, int(width))  # the sha covers the matrix's index maps too
        if self._worker is None or not self._worker.alive():
            self._worker = _Worker()
        if self._worker.loaded != key:
            csr = matrix.csr
            # The worker drops its matrix before loading: if this load fails, the old key
            # must not make a later batch of the old matrix skip its reload.
            self._worker.loaded = None
            perms = (getattr(matrix, "row_perm", None), getattr(matrix, "col_perm", None))
            self._worker.send(
                ("load", csr.indptr, csr.indices, csr.data, csr.shape, op, width, *perms)
            )
            reply = self._worker.receive(self.setup_timeout_s, "loading the matrix")
            if reply[0] != "loaded":
                raise _Lost("error", f"loading the matrix: {reply[1]}")
            self._worker.loaded = key
        return self._worker

    def measure_one(self, matrix: Matrix, op: str, width: int, config: Config) -> Measurement:
        counters: dict[str, Any] = {"threads": omp_threads()}
        try:
            lib_path, build_counters = self.build(op, config, width)
        except CognateError as exc:
            return Measurement(config, "error", counters=counters, error=one_line(exc, ERROR_CHARS))
        counters.update(build_counters)
        job = {
            "lib_path": lib_path,
            "knobs": dict(config.knobs),
            "warmup": self.warmup,
            "repeats": self.repeats,
            "timeout_s": self.timeout_s,
            "min_sample_s": self.min_sample_s,
        }
        try:
            return self._run(self._ready_worker(matrix, op, width), job, config, counters)
        except _Lost as lost:
            if self._worker is not None and not self._worker.alive():
                self._worker.kill()
                self._worker = None  # a fresh worker for the next config
            return Measurement(
                config, lost.status, counters=counters, error=one_line(lost, ERROR_CHARS)
            )  # type: ignore[arg-type]

    def _run(
        self, worker: _Worker, job: dict[str, Any], config: Config, counters: dict[str, Any]
    ) -> Measurement:
        worker.send(("run", job))
        reply = worker.receive(self.setup_timeout_s, "packing")
        if reply[0] == "too_large":
            return Measurement(config, "too_large", counters=counters, error=reply[1])
        if reply[0] == "error":
            return Measurement(config, "error", counters=counters, error=reply[1])
        counters.update(reply[1])
        reply = worker.receive(self.timeout_s, "the validation run")
        if reply[0] == "error":
            return Measurement(config, "error", counters=counters, error=reply[1])
        planned_s = reply[2]
        reply = worker.receive(3 * planned_s + self.timeout_s + 5.0, "timing")
        if reply[0] == "error":
            return Measurement(config, "error", counters=counters, error=reply[1])
        _, runtime_s, spread_s, range_s, timing = reply
        counters.update(timing)
        return Measurement(config, "ok", runtime_s, spread_s, counters, range_s=range_s)
