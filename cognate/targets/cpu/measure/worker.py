"""The cpu runner's worker process: pack, validate and time kernels for one matrix at a time.

Started by ``CpuRunner`` as ``python -m cognate.targets.cpu.measure.worker FD PARENT_PID PDEATHSIG`` (a fresh
interpreter: no fork of a threaded driver, no re-import of the caller's main script, which
multiprocessing's spawn would do) and spoken to over a socket wrapped in a
multiprocessing Connection. Requests are plain tuples and dicts:

- ``("load", indptr, indices, data, shape, op, width[, row_perm, col_perm])`` ->
  ``("loaded",)``; the optional int32 permutations (None: identity) are the Matrix's
  ``row_perm`` / ``col_perm`` (A[row_perm[i], col_perm[j]] = S[i, j]), which DIA and BCSR
  configs absorb in their index maps
- ``("run", job)`` -> ``("too_large", why)`` | ``("packed", counters)`` then
  ``("error", why)`` | ``("checked", first_run_s, planned_s)`` then
  ``("timed", median_s, spread_s, range_s, counters)`` (``cognate.stats.timing_spread``);
  any failure -> ``("error", why)``
- ``("stop",)``
"""

from __future__ import annotations

import math
import signal
import statistics
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate import util
from cognate.lifetime import die_with_parent
from cognate.runner import ERROR_CHARS
from cognate.stats import timing_spread
from cognate.targets.cpu import families, pipeline
from cognate.targets.cpu.measure.check import OPERAND_SEED, dense_operands, reference_for
from cognate.targets.cpu.memory import measured_kernel_bytes, operand_bytes


class _MatrixState:
    """The current matrix (as every family packs it), its dense inputs and scipy reference."""

    def __init__(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        data: np.ndarray,
        shape: tuple[int, int],
        op: str,
        width: int,
        row_perm: np.ndarray | None = None,
        col_perm: np.ndarray | None = None,
    ) -> None:
        csr = sp.csr_matrix((data, indices, indptr), shape=shape)
        self.op, self.width = op, int(width)
        self.source = families.PackSource(csr, row_perm, col_perm)  # its view built once
        self.operands = dense_operands(op, csr.shape, width, OPERAND_SEED)
        packed, peak = measured_kernel_bytes(csr, op, width)  # one config packed at a time
        held = operand_bytes(csr, op, width) + packed + peak
        self.reference = reference_for(csr, op, self.operands, held)  # sampled if over budget


def plan_samples(job: dict[str, Any], first_s: float) -> tuple[int, int, int]:
    """(warmup, repeats, calls per sample): every sample lasts at least min_sample_s, and a
    slow kernel's timing stays within about its time limit."""
    first_s = max(first_s, 1e-7)
    number = max(1, math.ceil(job["min_sample_s"] / first_s))
    warmup, repeats = job["warmup"], job["repeats"]
    if (warmup + repeats) * number * first_s > job["timeout_s"]:
        warmup, repeats = 0, max(1, min(repeats, int(job["timeout_s"] / first_s)))
    return warmup, repeats, number


def _run_job(conn: Connection, state: _MatrixState, job: dict[str, Any]) -> None:
    start = time.perf_counter()
    try:
        packed = pipeline.pack(state.source, state.op, job["knobs"], state.width)
    except pipeline.TooLarge as exc:
        conn.send(("too_large", str(exc)))
        return
    counters: dict[str, Any] = {
        "pack_s": time.perf_counter() - start,
        "stored_entries": packed.stored_entries,
    }
    # The pipeline's call: the argument-vector call verify and result.kernel time too.
    call = pipeline.bind(packed, job["knobs"], state.operands, job["lib_path"])
    conn.send(("packed", counters))
    start = time.perf_counter()
    call()
    first_s = time.perf_counter() - start
    problem = state.reference.for_knobs(job["knobs"]).check(call.result())
    if problem:
        conn.send(("error", problem))
        return
    warmup, repeats, number = plan_samples(job, first_s)
    conn.send(("checked", first_s, (warmup + repeats) * number * first_s))
    for _ in range(warmup * number):
        call()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            call()
        samples.append((time.perf_counter() - start) / number)
    counters.update(first_run_s=first_s, warmup=warmup, repeats=repeats, number=number)
    spread = timing_spread(samples)
    conn.send(("timed", statistics.median(samples), spread.iqr_s, spread.range_s, counters))


def serve(conn: Connection) -> None:
    """Answer requests until ``("stop",)`` or the driver goes away."""
    state: _MatrixState | None = None
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if request[0] == "stop":
                return
            if request[0] == "load":
                state = None  # free the previous matrix first
                state = _MatrixState(*request[1:])
                conn.send(("loaded",))
            elif state is None:
                conn.send(("error", "worker has no matrix loaded"))
            else:
                _run_job(conn, state, request[1])
        except Exception as exc:  # noqa: BLE001 - a failure is reported, the worker lives on
            conn.send(("error", f"{type(exc).__name__}: {util.one_line(exc, ERROR_CHARS)}"))


def main(argv: list[str]) -> None:
    # A hung kernel never reads the socket again: only dying with the driver (a killed
    # collect or tune) keeps it from spinning on as an orphan.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # the driver's to handle
        signal.signal(signum, signal.SIG_IGN)
    if len(argv) > 2:
        die_with_parent(int(argv[2]), pdeathsig=len(argv) < 4 or argv[3] == "1")
    serve(Connection(int(argv[1])))


if __name__ == "__main__":
    main(sys.argv)
