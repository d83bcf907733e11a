"""What a call of the tuned cpu SpMM costs around its kernel, and what an MKL-IE call costs.

On a small real matrix (default dwt_878, 3.5k nnz) and a 1k-nnz random one, dense width N:

- c-loop: the kernel called from a C loop through its argument vector (no Python at all);
- tuned numpy / tuned torch: ``kernel(B, out=C)`` from a Python loop, numpy arrays or torch
  tensors, the same arrays every call (as a training loop passes them);
- mkl-ie: ``mkl_sparse_s_mm`` through ctypes (handle built and optimized once), as in
  scripts/bench_vs_library.py.

The Python-side cost of a call is its time minus the c-loop time (the same kernel). Medians
of interleaved rounds; OpenMP settings as the caller has them (nothing set here).

``--threading`` adds, per matrix, what making the call safe from several threads costs, on
the bare argument-vector call (``ArgvCall.run``, nanoseconds per call above it, median and
interquartile spread): ``lock`` holds a per-kernel lock around it (what ``TunedKernel``
does), ``fresh-argv`` builds a private copy of the vector per call instead (the alternative:
a numpy copy and its address handed to the trampoline).

    python scripts/bench_call_overhead.py [--width 128] [--rounds 15] [--threading]
"""

from __future__ import annotations

import argparse
import ctypes
import threading

import numpy as np
import scipy.sparse as sp
import torch

from cognate.build import compile_c, load_library
from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.matrix import Matrix
from cognate.paths import shared_dir
from cognate.targets.cpu.measure import library
from cognate.targets.cpu.measure.check import mismatch, reference
from cognate.targets.cpu.space import make_space
from cognate.targets.cpu.tuned import ScheduleKernel
from cognate.timing import interleaved, time_interleaved, timing_lock

_LOOP = r"""
#include <stdint.h>
typedef void (*argv_t)(void *, const int64_t *);
void cognate_call_loop(void *trampoline, void *fn, const int64_t *argv, int64_t n) {
    for (int64_t i = 0; i < n; i++) ((argv_t)trampoline)(fn, argv);
}
"""


def _c_loop(kernel: ScheduleKernel, width: int, calls: int) -> callable:
    """``calls`` kernel calls from C, through the bound kernel's argument vector."""
    tuned = kernel._by_width[width]
    argv = tuned._argv
    loop = load_library(str(compile_c(_LOOP, openmp=False))).cognate_call_loop
    loop.restype, loop.argtypes = None, None
    tramp = ctypes.c_void_p(ctypes.cast(argv._fn, ctypes.c_void_p).value)
    n = ctypes.c_int64(calls)
    return lambda: loop(tramp, argv._target, argv._vector, n)


def matrices(width: int) -> list[Matrix]:
    small = load_matrix(shared_dir() / "matrices" / "suitesparse" / "dwt_878.mtx.gz")
    rng = np.random.default_rng(0)
    a = sp.random(400, 400, density=1000 / 160000, format="csr", dtype=np.float32, random_state=rng)
    return [Matrix("random-1k", a), small]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=200, help="calls per timed sample")
    parser.add_argument("--threading", action="store_true", help="time lock vs fresh argv")
    args = parser.parse_args()
    print(f"dense width {args.width}; microseconds per call (median of {args.rounds} rounds)")
    print("numpy-c / torch-c: the call's cost above the kernel (numpy / torch minus c-loop)")
    print(
        f"{'matrix':<12} {'nnz':>6} {'c-loop':>8} {'numpy':>8} {'torch':>8} {'mkl-ie':>8}"
        f" {'numpy-c':>8} {'torch-c':>8}"
    )
    for matrix in matrices(args.width):
        row(matrix, args)


def row(matrix: Matrix, args: argparse.Namespace) -> None:
    """Check, time and print one matrix."""
    csr = matrix.csr
    kernel = ScheduleKernel(matrix, "spmm", make_space("spmm").baseline(matrix.shape))
    b = np.random.default_rng(1).uniform(-1, 1, (csr.shape[1], args.width)).astype(np.float32)
    c = np.empty((csr.shape[0], args.width), np.float32)
    bt, ct = torch.from_numpy(b.copy()), torch.empty(c.shape)
    kernel(b, out=c)
    ref, tol = reference(csr, "spmm", (b,))
    bad = mismatch(c, ref, tol) or mismatch(kernel(bt, out=ct).numpy(), ref, tol)
    if bad:
        raise SystemExit(f"{matrix.name}: {bad}")
    batch = args.batch
    calls = {
        "c-loop": _c_loop(kernel, args.width, batch),
        "numpy": lambda: [kernel(b, out=c) for _ in range(batch)],
        "torch": lambda: [kernel(bt, out=ct) for _ in range(batch)],
    }
    try:
        mkl = library.mkl_spmm_call(csr, b)
        calls["mkl-ie"] = lambda: [mkl.run() for _ in range(batch)]
    except CognateError as exc:
        print(f"  mkl-ie: {exc}")
    timed = time_interleaved(calls, args.rounds)
    us = {k: v / batch * 1e6 for k, v in timed.seconds.items()}
    if timed.load.busy:
        print(f"  {timed.load.line()}")
    mkl_us = us.get("mkl-ie", float("nan"))
    print(
        f"{matrix.name:<12} {csr.nnz:>6} {us['c-loop']:>8.2f} {us['numpy']:>8.2f}"
        f" {us['torch']:>8.2f} {mkl_us:>8.2f} {us['numpy'] - us['c-loop']:>8.2f}"
        f" {us['torch'] - us['c-loop']:>8.2f}"
    )
    if args.threading:
        thread_safety(kernel, args)


def thread_safety(kernel: ScheduleKernel, args: argparse.Namespace) -> None:
    """Nanoseconds per call that a lock, or a fresh argument vector, adds to the bare call."""
    argv = next(iter(kernel._by_width.values()))._argv
    lock, run, batch = threading.Lock(), argv.run, args.batch

    def locked() -> None:
        for _ in range(batch):
            with lock:
                run()

    def fresh() -> None:
        for _ in range(batch):
            private = argv.argv.copy()
            argv._fn(argv._target, ctypes.c_void_p(private.__array_interface__["data"][0]))

    calls = {"bare": lambda: [run() for _ in range(batch)], "lock": locked, "fresh-argv": fresh}
    try:  # the storage check cognate.torch's operators make per tensor (absent before)
        from cognate.targets.cpu.operands import check_live_tensor

        tensor = torch.ones(kernel.matrix.shape[1], args.width)

        def checked() -> None:
            for _ in range(batch):
                check_live_tensor(tensor, "X")
                run()

        calls["live-check"] = checked
    except ImportError:
        pass
    with timing_lock():
        timed = interleaved(calls, args.rounds)
    base = timed["bare"].median
    cells = [
        f"{name} +{(timed[name].median - base) / batch * 1e9:.0f} ns"
        f" (spread {timed[name].spread / batch * 1e9:.0f})"
        for name in ("lock", "fresh-argv", "live-check")
        if name in timed
    ]
    print(f"  thread safety, above the bare call ({base / batch * 1e9:.0f} ns): {'; '.join(cells)}")


if __name__ == "__main__":
    main()
