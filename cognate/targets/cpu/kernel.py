"""Call a compiled cpu kernel on packed A, and check its result against scipy.

Used in-process by ``run_config`` (the Python API) and inside the runner's isolated
worker process (measurements).
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from numbers import Integral
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.build import load_library
from cognate.errors import CognateError
from cognate.targets.cpu.codegen import OP_LOOPS
from cognate.targets.cpu.fastcall import ArgvCall
from cognate.targets.cpu.pack import PackedA

# float32 unit roundoff: a sum of n products is exact to about n * u * sum(|terms|).
UNIT_ROUNDOFF = 2.0**-24
MAX_RUNTIME_KNOB = 2**31 - 1


def runtime_knob(knobs: Mapping[str, Any], name: str) -> int:
    """A positive integer knob passed to the kernel as a runtime argument."""
    value = knobs.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_RUNTIME_KNOB:
        raise CognateError(f"cpu config: {name} must be an integer in 1..{MAX_RUNTIME_KNOB}")
    return value


def choice_knob(knobs: Mapping[str, Any], name: str, values: tuple[int, ...], where: str) -> int:
    """An integer knob that must be one of ``values`` (a one-line CognateError otherwise)."""
    value = knobs.get(name)
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) not in values:
        legal = ", ".join(map(str, values))
        raise CognateError(f"{where}: {name} must be one of {legal}, got {name}={repr(value)[:40]}")
    return int(value)


def dense_operands(
    op: str, shape: tuple[int, int], width: int, seed: int
) -> tuple[np.ndarray, ...]:
    """Random dense inputs in [-1, 1): SpMM B (K x width); SDDMM X (M x width), Y (N x width)."""
    rng = np.random.default_rng(seed)
    rows, cols = shape
    if op == "spmm":
        return (rng.uniform(-1.0, 1.0, (cols, width)).astype(np.float32),)
    x = rng.uniform(-1.0, 1.0, (rows, width)).astype(np.float32)
    y = rng.uniform(-1.0, 1.0, (cols, width)).astype(np.float32)
    return x, y


def check_operands(op: str, shape: tuple[int, int], operands: tuple[np.ndarray, ...]) -> int:
    """Validate dense operand shapes for ``op``; return the dense width."""
    rows, cols = shape
    expected = 1 if op == "spmm" else 2
    if len(operands) != expected:
        raise CognateError(f"cpu {op}: expected {expected} dense operand(s), got {len(operands)}")
    arrays = [np.asarray(a) for a in operands]
    if any(a.ndim != 2 for a in arrays):
        raise CognateError(f"cpu {op}: dense operands must be 2-D")
    width = arrays[0].shape[1]
    want = [(cols, width)] if op == "spmm" else [(rows, width), (cols, width)]
    for index, (array, shape_wanted) in enumerate(zip(arrays, want, strict=True)):
        if array.shape != shape_wanted:
            raise CognateError(
                f"cpu {op}: dense operand {index} has shape {array.shape}, expected {shape_wanted}"
            )
    if width < 1:
        raise CognateError(f"cpu {op}: the dense width must be at least 1")
    return int(width)


def _function(lib_path: str, op: str) -> Any:
    fn = getattr(load_library(lib_path), OP_LOOPS[op].function)
    fn.restype = None
    pointers = 11 if op == "spmm" else 12
    fn.argtypes = [ctypes.c_void_p] * pointers + [ctypes.c_int64] * (7 if op == "spmm" else 8)
    return fn


def _address(array: np.ndarray | None) -> int | None:
    return None if array is None else array.ctypes.data


class BoundKernel:
    """A compiled kernel bound to its arguments (every family): call it, then read result().

    Subclasses set ``op``, ``packed`` (with ``nz_positions``), ``out``, ``_fn``, ``_args``
    and ``_pointers``: the number of pointer arguments, of which the last are the dense
    operands and then the output (every family's signature ends that way).
    """

    op: str
    packed: Any
    out: np.ndarray
    _fn: Any
    _args: list[Any]
    _pointers: int

    def __call__(self) -> None:
        self._fn(*self._args)

    def call_on(self, operands: tuple[np.ndarray, ...], out: np.ndarray) -> None:
        """Run on other dense operands and output buffer, read and written in place.

        The caller guarantees float32, C-contiguous, aligned arrays of this kernel's shapes
        (``out``: SpMM M x width; SDDMM one slot per stored value, ``self.out``'s size).
        """
        args = list(self._args)
        first = self._pointers - 1 - len(operands)
        for index, array in enumerate(operands):
            args[first + index] = array.ctypes.data
        args[self._pointers - 1] = out.ctypes.data
        self._fn(*args)

    def argv_call(self) -> ArgvCall:
        """This kernel called through one argument vector (fastcall.py), as the user path and
        tune --verify call it; the result keeps this bound kernel (its arrays) alive."""
        fast = ArgvCall(self._fn, self._args, self._pointers)
        fast.keep = self
        return fast

    def result(self) -> np.ndarray:
        """SpMM: C (M x width); SDDMM: the output values in A's CSR order."""
        if self.op == "spmm":
            return self.out
        return self.out[self.packed.nz_positions]


class KernelCall(BoundKernel):
    """One CSR-family kernel bound to its packed A, dense inputs and output buffer."""

    def __init__(
        self,
        lib_path: str,
        packed: PackedA,
        knobs: Mapping[str, Any],
        operands: tuple[np.ndarray, ...],
    ) -> None:
        op = packed.structure.op
        self.op = op
        self.packed = packed
        self.operands = tuple(np.ascontiguousarray(a, dtype=np.float32) for a in operands)
        width = check_operands(op, packed.shape, self.operands)
        if packed.structure.width not in (None, width):  # a wrong width would overrun rows
            raise CognateError(
                f"cpu {op}: kernel built for dense width {packed.structure.width}, operands"
                f" have width {width}"
            )
        rows, cols = packed.shape
        dense_split = runtime_knob(knobs, "jsplit" if op == "spmm" else "ksplit")
        chunk = runtime_knob(knobs, "chunk")
        levels = [a for pair in zip(packed.pos, packed.crd, strict=True) for a in pair]
        if op == "spmm":
            self.out = np.zeros((rows, width), dtype=np.float32)
            tail = [rows, cols, width, packed.splits["i"], packed.splits["k"], dense_split, chunk]
            arrays = [*levels, packed.vals, self.operands[0], self.out]
        else:
            self.out = np.zeros(packed.vals.size, dtype=np.float32)
            tail = [self.out.size, rows, cols, width, packed.splits["i"], packed.splits["j"]]
            tail += [dense_split, chunk]
            arrays = [*levels, packed.vals, *self.operands, self.out]
        self._fn = _function(lib_path, op)
        self._args = [_address(a) for a in arrays] + tail
        self._pointers = len(arrays)


def _tolerance(terms: np.ndarray | float, bound: np.ndarray) -> np.ndarray:
    """Error bound of a float32 sum of ``terms`` products whose absolute sum is ``bound``.

    Where ``bound`` exceeds float32's range (e.g. temp.mtx's values near 3.4e38), a float32
    kernel may legitimately overflow to inf or NaN in any summation order: such entries
    cannot be checked in float32 and get an infinite tolerance (``mismatch`` skips them).
    """
    tol = 4.0 * (terms + 1.0) * UNIT_ROUNDOFF * bound
    tol[bound > np.finfo(np.float32).max / 2] = np.inf
    return tol


def reference(
    csr: sp.csr_matrix, op: str, operands: tuple[np.ndarray, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Exact-ish float64 result and a per-entry float32 error bound (same layout as result())."""
    a64 = csr.astype(np.float64)
    if op == "spmm":
        b64 = operands[0].astype(np.float64)
        terms = np.diff(csr.indptr)[:, None].astype(np.float64)
        return np.asarray(a64 @ b64), _tolerance(terms, np.asarray(abs(a64) @ abs(b64)))
    x, y = (a.astype(np.float64) for a in operands)
    rows = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
    ref = np.empty(csr.nnz)
    bound = np.empty(csr.nnz)
    step = max(1, 2**22 // max(1, x.shape[1]))  # bounded temporaries for big matrices
    for lo in range(0, csr.nnz, step):
        hi = min(csr.nnz, lo + step)
        prod = x[rows[lo:hi]] * y[csr.indices[lo:hi]]
        ref[lo:hi] = a64.data[lo:hi] * prod.sum(axis=1)
        bound[lo:hi] = np.abs(a64.data[lo:hi]) * np.abs(prod).sum(axis=1)
    return ref, _tolerance(float(x.shape[1]), bound)


def mismatch(result: np.ndarray, ref: np.ndarray, tol: np.ndarray) -> str | None:
    """None when ``result`` is within ``tol`` of ``ref`` everywhere, else a one-line reason."""
    error = np.abs(result.astype(np.float64) - ref)
    # NaN counts as bad, except where float32 cannot represent the sums (infinite tol).
    bad = ~(error <= tol + np.finfo(np.float32).tiny) & np.isfinite(tol)
    if not bad.any():
        return None
    first = np.unravel_index(int(np.argmax(bad)), bad.shape)
    return (
        f"result differs from scipy at {int(bad.sum())} of {bad.size} entries"
        f" (first at {tuple(int(i) for i in first)}: {float(result[first])!r}"
        f" vs {float(ref[first])!r})"
    )
