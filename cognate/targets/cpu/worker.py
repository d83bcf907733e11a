"""The cpu runner's worker process: pack, validate and time kernels for one matrix at a time.

Started by ``CpuRunner`` as ``python -m cognate.targets.cpu.worker FD PARENT_PID PDEATHSIG`` (a fresh
interpreter: no fork of a threaded driver, no re-import of the caller's main script, which
multiprocessing's spawn would do) and spoken to over a socket wrapped in a
multiprocessing Connection. Requests are plain tuples and dicts:

- ``("load", indptr, indices, data, shape, op, width[, row_perm, col_perm])`` ->
  ``("loaded",)``; the optional int32 permutations (None: identity) are the Matrix's
  ``row_perm`` / ``col_perm`` (A[row_perm[i], col_perm[j]] = S[i, j]), which DIA and BCSR
  configs absorb in their index maps
- ``("run", job)`` -> ``("too_large", why)`` | ``("packed", counters)`` then
  ``("error", why)`` | ``("checked", first_run_s, planned_s)`` then
  ``("timed", median_s, spread_s, counters)``; any failure -> ``("error", why)``
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
from cognate.targets.cpu.families import StructuredView, family_of, make_call, view_of
from cognate.targets.cpu.kernel import dense_operands, mismatch, reference
from cognate.targets.cpu.pack import TooLarge, pack

OPERAND_SEED = 20230325  # dense inputs are the same for every config of a matrix


def one_line(text: object) -> str:
    """A record's error text: one line of at most 400 characters."""
    return util.one_line(text, 400)


class _MatrixState:
    """The current matrix, its dense inputs and its scipy reference."""

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
        self.csr = sp.csr_matrix((data, indices, indptr), shape=shape)
        self.op, self.width = op, int(width)
        self.row_perm, self.col_perm = row_perm, col_perm
        self.operands = dense_operands(op, self.csr.shape, width, OPERAND_SEED)
        self.ref, self.tol = reference(self.csr, op, self.operands)
        self._view: StructuredView | None = None

    def source(self, knobs: dict[str, Any]) -> Any:
        """What ``pack`` takes for ``knobs``: A's CSR, or for DIA/BCSR the structured view
        (S and the index maps; built once per matrix)."""
        if family_of(knobs) == "csr":
            return self.csr
        if self._view is None:
            self._view = view_of(self)
        return self._view


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
        packed = pack(state.source(job["knobs"]), state.op, job["knobs"], width=state.width)
    except TooLarge as exc:
        conn.send(("too_large", str(exc)))
        return
    counters: dict[str, Any] = {
        "pack_s": time.perf_counter() - start,
        "stored_entries": packed.stored_entries,
    }
    call = make_call(job["lib_path"], packed, job["knobs"], state.operands)
    conn.send(("packed", counters))
    start = time.perf_counter()
    call()
    first_s = time.perf_counter() - start
    problem = mismatch(call.result(), state.ref, state.tol)
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
    conn.send(("timed", statistics.median(samples), max(samples) - min(samples), counters))


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
            conn.send(("error", f"{type(exc).__name__}: {one_line(exc)}"))


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
