"""The tuned kernel call refuses what would crash it or give a wrong result, and stays correct
when several threads call one kernel: ``result.kernel`` (numpy arrays and torch tensors) and
cognate.torch's operators (``spmm``, ``sddmm``, ``ts @ X``, the backward).

The freed-storage cases run in a subprocess: a regression there is a SIGSEGV, which must fail
one test, not kill pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import cognate
import cognate.torch as ct
from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.matrix import Matrix
from cognate.targets.cpu.measure.check import mismatch, reference

WIDTH = 16
CANDIDATES = 300  # a small candidate set: a fast ranking (any schedule must behave)


@pytest.fixture(scope="module")
def dwt(shared: Path) -> Matrix:
    return load_matrix(shared / "matrices" / "suitesparse" / "dwt_878.mtx.gz")  # square


@pytest.fixture(scope="module")
def spmm_kernel(dwt: Matrix):
    return cognate.tune(dwt, op="spmm", width=WIDTH, candidates=CANDIDATES).kernel


@pytest.fixture(scope="module")
def sddmm_kernel(dwt: Matrix):
    return cognate.tune(dwt, op="sddmm", width=WIDTH, candidates=CANDIDATES).kernel


def _dense(matrix: Matrix, seed: int, rows: int | None = None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (rows or matrix.shape[1], WIDTH)).astype(np.float32)


# --- freed storage: one clear error, no SIGSEGV ---------------------------------------------

_FREED = r"""
import sys
import numpy as np
import torch
import cognate
import cognate.torch as ct
from cognate.errors import CognateError
from cognate.formats.read import load_matrix

m = load_matrix(sys.argv[1])
n, w = m.shape[0], 16


def freed(shape=(n, w), keep=0, transpose=False):
    t = torch.ones(shape)
    view = t.t() if transpose else t  # a view made first: torch refuses one of a freed tensor
    t.untyped_storage().resize_(keep)
    return view


def case(name, call):
    try:
        call()
    except (CognateError, ValueError) as exc:
        print(f"{name}: refused: {exc}")
    else:
        print(f"{name}: accepted")
    sys.stdout.flush()


if sys.argv[2] == "kernel":
    kernel = cognate.tune(m, op="spmm", width=w, candidates=300).kernel
    b, c = torch.ones(n, w), torch.empty(n, w)
    case("freed out", lambda: kernel(b, out=freed()))
    case("freed B", lambda: kernel(freed(), out=c))
    case("freed B, no out", lambda: kernel(freed()))
    case("shrunk B", lambda: kernel(freed(keep=64), out=c))
    case("freed strided B", lambda: kernel(freed((w, n), transpose=True), out=c))
    kernel(b, out=c)  # then freed after a call: the repeat path

    def repeat_freed():
        c.untyped_storage().resize_(0)
        kernel(b, out=c)

    case("out freed after a call", repeat_freed)
    sddmm = cognate.tune(m, op="sddmm", width=w, candidates=300).kernel
    case("sddmm freed Y", lambda: sddmm(torch.ones(n, w), freed()))
else:
    ts = ct.TunedSparse(m, widths=(w,), requires_grad=True, candidates=300)
    case("ts @ freed X", lambda: ts @ freed())
    case("spmm freed strided X", lambda: ct.spmm(ts, freed((w, n), transpose=True)))
    case("sddmm freed X", lambda: ct.sddmm(ts, freed(), torch.ones(n, w)))

    def backward_freed():  # an offloading hook hands the backward freed saved tensors
        x = torch.ones(n, w, requires_grad=True)
        hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: tuple(t.shape), freed)
        with hooks:
            y = ts @ x
        y.sum().backward()

    case("backward, saved tensors freed", backward_freed)

    case("freed values", lambda: ct.spmm(ts, torch.ones(n, w), values=freed((ts.nnz,))))
print("survived")
"""


@pytest.mark.parametrize("surface", ["kernel", "torch"])
def test_freed_storage_is_refused_not_a_crash(shared: Path, surface: str) -> None:
    path = shared / "matrices" / "suitesparse" / "dwt_878.mtx.gz"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", _FREED, str(path), surface],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}{done.stderr[-2000:]}"
    lines = done.stdout.splitlines()
    assert lines[-1] == "survived"
    cases = lines[:-1]
    assert len(cases) >= 4 and all(": refused: " in line for line in cases), done.stdout
    assert all("storage holds" in line for line in cases), done.stdout
    assert "Traceback" not in done.stderr and "internal error" not in done.stdout + done.stderr


# --- out sharing memory with an input: refused ----------------------------------------------


def test_spmm_out_is_b_is_refused(dwt: Matrix, spmm_kernel) -> None:
    b = _dense(dwt, 0)
    with pytest.raises(CognateError, match="out shares memory with dense operand 0"):
        spmm_kernel(b, out=b)
    bt = torch.from_numpy(_dense(dwt, 1))
    with pytest.raises(CognateError, match="out shares memory"):
        spmm_kernel(bt, out=bt)


def test_spmm_out_overlapping_b_is_refused(dwt: Matrix, spmm_kernel) -> None:
    size = dwt.shape[0] * WIDTH
    buffer = np.zeros(2 * size, np.float32)
    b = buffer[:size].reshape(dwt.shape[0], WIDTH)
    b[:] = _dense(dwt, 2)
    out = buffer[size // 2 : size // 2 + size].reshape(dwt.shape[0], WIDTH)
    with pytest.raises(CognateError, match="out shares memory"):
        spmm_kernel(b, out=out)
    flat = torch.zeros(2 * size)
    with pytest.raises(CognateError, match="out shares memory"):
        spmm_kernel(flat[:size].view(-1, WIDTH), out=flat[WIDTH : WIDTH + size].view(-1, WIDTH))


def test_refusal_after_a_good_call_leaves_the_kernel_correct(dwt: Matrix, spmm_kernel) -> None:
    b, c = _dense(dwt, 3), np.empty((dwt.shape[0], WIDTH), np.float32)
    ref, tol = reference(dwt.csr, "spmm", (b,))
    spmm_kernel(b, out=c)
    spmm_kernel(b, out=c)  # the repeat path: same arrays
    with pytest.raises(CognateError, match="out shares memory"):
        spmm_kernel(c, out=c)
    c[:] = np.nan
    spmm_kernel(b, out=c)
    assert mismatch(c, ref, tol) is None


def test_sddmm_out_overlapping_x_or_y_is_refused(dwt: Matrix, sddmm_kernel) -> None:
    x, y = _dense(dwt, 4, dwt.shape[0]), _dense(dwt, 5)
    assert x.size >= dwt.nnz
    with pytest.raises(CognateError, match="out shares memory with dense operand 0"):
        sddmm_kernel(x, y, out=x.reshape(-1)[: dwt.nnz])
    with pytest.raises(CognateError, match="out shares memory with dense operand 1"):
        sddmm_kernel(x, y, out=y.reshape(-1)[-dwt.nnz :])
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    with pytest.raises(CognateError, match="out shares memory"):
        sddmm_kernel(xt, yt, out=yt.view(-1)[: dwt.nnz])
    values = sddmm_kernel(x, x, out=np.empty(dwt.nnz, np.float32))  # X = Y: reads only
    ref, tol = reference(dwt.csr, "sddmm", (x, x))
    assert mismatch(values.data, ref, tol) is None


# --- several threads, one kernel --------------------------------------------------------------


def _threads_wrong(kernel, matrix: Matrix, calls: int, load: bool) -> tuple[int, int]:
    """Two threads calling ``kernel`` ``calls`` times each with their own operands and
    outputs (one numpy, one torch), every result checked: (wrong results, calls made).

    A result is checked by its sum against the scipy reference's (a few us: a short loop
    makes the race window a large part of it); an output not written stays NaN, one
    computed from the other thread's operand sums to another value."""
    operands = [_dense(matrix, 10), _dense(matrix, 11)]
    refs = [reference(matrix.csr, "spmm", (b,))[0] for b in operands]
    sums = [float(ref.sum(dtype=np.float64)) for ref in refs]
    scale = [float(np.abs(ref).sum(dtype=np.float64)) for ref in refs]
    assert abs(sums[0] - sums[1]) > 1e-3 * max(scale)  # the two results tell apart
    wrong, made = [0, 0], [0, 0]
    stop = threading.Event()

    def worker(index: int) -> None:
        b = operands[index]
        out = np.empty((matrix.shape[0], WIDTH), np.float32)
        if index == 1:  # the torch path, on the same kernel
            b, out = torch.from_numpy(b), torch.from_numpy(out)
        view = out.numpy() if index == 1 else out
        for _ in range(calls):
            view.fill(np.nan)
            kernel(b, out=out)
            made[index] += 1
            if not abs(float(view.sum(dtype=np.float64)) - sums[index]) <= 1e-4 * scale[index]:
                wrong[index] += 1

    def burn() -> None:  # Python work competing for the interpreter: more thread switches
        while not stop.is_set():
            sum(range(1000))

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: a race shows within few calls
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    burner = threading.Thread(target=burn) if load else None
    try:
        for thread in threads + ([burner] if burner else []):
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        stop.set()
        if burner:
            burner.join()
        sys.setswitchinterval(switch)
    return sum(wrong), sum(made)


def _fresh_kernel(matrix: Matrix):
    """A tuned kernel not called yet: the threads' first calls race too (they pack and bind)."""
    return cognate.tune(matrix, op="spmm", width=WIDTH, candidates=CANDIDATES).kernel


def test_two_threads_one_kernel_no_wrong_result(dwt: Matrix) -> None:
    assert _threads_wrong(_fresh_kernel(dwt), dwt, 1000, load=False) == (0, 2000)


@pytest.mark.slow
def test_two_threads_one_kernel_under_load_no_wrong_result(dwt: Matrix) -> None:
    assert _threads_wrong(_fresh_kernel(dwt), dwt, 10_000, load=True) == (0, 20_000)


def test_cognate_torch_spmm_from_two_threads(dwt: Matrix) -> None:
    ts = ct.TunedSparse(dwt, widths=(WIDTH,), candidates=CANDIDATES)
    xs = [torch.from_numpy(_dense(dwt, 20 + i)) for i in range(2)]
    refs = [reference(dwt.csr, "spmm", (x.numpy(),)) for x in xs]
    wrong = [0, 0]

    def worker(index: int) -> None:
        for _ in range(200):
            if mismatch((ts @ xs[index]).numpy(), *refs[index]) is not None:
                wrong[index] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == [0, 0]
