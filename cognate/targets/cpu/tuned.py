"""The tuned cpu kernel as a user calls it: ``result.kernel(B, out=C)``, without copies.

A is packed and the kernel compiled once per dense width; each call reads the caller's dense
operands in place and writes into ``out`` (or one fresh array). numpy arrays and torch CPU
tensors are both accepted, so the kernel drops into a PyTorch layer. Copying B in and C out
on each call used to cost more than the SpMM itself on matrices under ~100k nnz (docs/architecture.md, Facts measured here).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.targets.cpu.kernel import BoundKernel, check_operands

_F32 = np.dtype(np.float32)


def is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "numpy")


def as_dense(value: Any, what: str) -> np.ndarray:
    """A float32, C-contiguous, aligned numpy view of ``value`` (numpy array or torch CPU
    tensor); copied only when it is not one already (another dtype, strided, on a device)."""
    if is_torch(value):
        if value.device.type != "cpu":
            raise CognateError(f"{what}: a torch tensor on {value.device}, the kernel runs on cpu")
        tensor = value.detach()
        if tensor.dtype != _torch().float32 or not tensor.is_contiguous():
            tensor = tensor.to(_torch().float32).contiguous()
        return tensor.numpy()
    return np.require(np.asarray(value), dtype=np.float32, requirements=("C", "A"))


def _torch() -> Any:
    import torch

    return torch


def _output(out: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``out`` as a writable numpy view: float32, C-contiguous, of ``shape``; else one line."""
    if is_torch(out) and out.device.type != "cpu":
        raise CognateError(f"out: a torch tensor on {out.device}, the kernel writes on cpu")
    array = out.detach().numpy() if is_torch(out) else out
    if not isinstance(array, np.ndarray):
        raise CognateError(f"out must be a numpy array or torch tensor, got {type(out).__name__}")
    if array.shape != shape or array.dtype != np.float32:
        raise CognateError(
            f"out has shape {array.shape} and dtype {array.dtype}; the kernel writes "
            f"float32 of shape {shape}"
        )
    if not (array.flags.c_contiguous and array.flags.aligned and array.flags.writeable):
        raise CognateError("out must be C-contiguous, aligned and writable")
    return array


class TunedKernel:
    """One cpu schedule of one matrix, packed and compiled for one dense width.

    SpMM: ``self(B, out=None)`` -> C = A @ B (M x width). SDDMM: ``self(X, Y, out=None)`` ->
    A * (X @ Y.T) with A's pattern: a scipy CSR (a torch CSR tensor when X or Y is a torch
    tensor) whose values are ``out`` (A.nnz float32, in A's CSR order) when given.
    Not thread-safe: the SDDMM slot buffer of a padded layout is shared between calls.

    A call costs a few microseconds of Python around the kernel: converting 19 arguments and
    reading array addresses through ``ndarray.ctypes`` took 15-80 us per call, more than a
    small SpMM, so the ctypes arguments are built once and re-built only when the caller
    passes other arrays than last time.
    """

    def __init__(self, matrix: Matrix, op: str, config: Config, operands: tuple[Any, ...]) -> None:
        from cognate.targets.cpu.runner import prepare_kernel

        self.matrix, self.op = matrix, op
        arrays = tuple(as_dense(a, f"operand {i}") for i, a in enumerate(operands))
        self.width = check_operands(op, matrix.shape, arrays)
        self.call: BoundKernel = prepare_kernel(matrix, op, config, *arrays)
        rows, cols = matrix.shape
        self._shapes = (
            ((cols, self.width),) if op == "spmm" else ((rows, self.width), (cols, self.width))
        )
        self._out_shape = (rows, self.width) if op == "spmm" else (matrix.nnz,)
        self._direct = op == "spmm" or (
            self.call.out.size == matrix.nnz
            and _identity(self.call.packed.nz_positions, matrix.nnz)
        )
        csr = matrix.csr
        self._indptr, self._indices = _read_only(csr.indptr), _read_only(csr.indices)
        self._torch_index: tuple[Any, Any] | None = None
        pointers = self.call._pointers
        self._template = [
            ctypes.c_void_p(v) if i < pointers else ctypes.c_int64(v)
            for i, v in enumerate(self.call._args)
        ]
        self._bound: tuple[tuple[np.ndarray, ...], list[Any]] | None = None
        self._fn = _untyped(self.call._fn)

    def __call__(self, *operands: Any, out: Any = None) -> Any:
        bound = self._bound
        if self._repeat(bound, operands, out):  # SpMM into the same arrays as last call
            self._fn(*bound[1])  # type: ignore[index]
            return out
        arrays = self._plain(operands)
        as_torch = False
        if arrays is None:  # not float32 C-contiguous numpy arrays of the right shapes
            arrays = tuple(as_dense(a, f"operand {i}") for i, a in enumerate(operands))
            as_torch = any(is_torch(a) for a in operands)
        return self.run(arrays, out, as_torch)

    def _repeat(self, bound: Any, operands: tuple[Any, ...], out: Any) -> bool:
        """Whether this SpMM call passes the very arrays of the last one (checked then; the
        shape and dtype are checked again: both can be reassigned in place)."""
        if bound is None or out is None or self.op != "spmm" or len(operands) != 1:
            return False
        last_b, last_out = bound[0]
        b = operands[0]
        return (
            b is last_b
            and out is last_out
            and b.shape == self._shapes[0]
            and out.shape == self._out_shape
            and b.dtype == _F32
            and out.dtype == _F32
        )

    def _plain(self, operands: tuple[Any, ...]) -> tuple[np.ndarray, ...] | None:
        if len(operands) != len(self._shapes):
            return None
        for array, shape in zip(operands, self._shapes, strict=True):
            if type(array) is not np.ndarray or array.shape != shape or array.dtype != _F32:
                return None
            if not (array.flags.c_contiguous and array.flags.aligned):
                return None
        return operands

    def run(self, arrays: tuple[np.ndarray, ...], out: Any = None, as_torch: bool = False) -> Any:
        """``self(...)`` on operands already made dense by ``as_dense``; ``as_torch``: the
        caller passed torch tensors (a result without ``out`` is then a torch tensor)."""
        if len(arrays) != len(self._shapes) or any(
            a.shape != shape for a, shape in zip(arrays, self._shapes, strict=False)
        ):
            check_operands(self.op, self.matrix.shape, arrays)  # the one-line shape error
            raise CognateError(f"cpu {self.op}: kernel prepared for width {self.width}")
        if self.op == "spmm":
            target = self._fresh_or(out, self._out_shape)
            self._run(arrays, target)
            if out is not None:
                return out
            return _torch().from_numpy(target) if as_torch else target
        values = self._sddmm_into(arrays, self._fresh_or(out, self._out_shape))
        return self._sddmm_result(values, (out is None and as_torch) or is_torch(out))

    def _sddmm_into(self, arrays: tuple[np.ndarray, ...], values: np.ndarray) -> np.ndarray:
        if self._direct:
            self._run(arrays, values)
        else:  # a padded layout: run into its slots, gather A's entries
            self._run(arrays, self.call.out)
            np.take(self.call.out, self.call.packed.nz_positions, out=values)
        return values

    def sddmm_values(self, arrays: tuple[np.ndarray, ...], out: np.ndarray) -> np.ndarray:
        """SDDMM on operands already made dense by ``as_dense`` (checked shapes): only the
        values (A.nnz float32, A's CSR order) written into ``out`` (float32, C-contiguous, of
        that size), without a sparse matrix around them."""
        if (
            self.op != "sddmm"
            or len(arrays) != 2
            or any(a.shape != shape for a, shape in zip(arrays, self._shapes, strict=True))
        ):
            raise CognateError(f"cpu {self.op}: sddmm_values needs X, Y of shapes {self._shapes}")
        return self._sddmm_into(arrays, self._fresh_or(out, self._out_shape))

    @property
    def value_slots(self) -> np.ndarray:
        """A's CSR entry -> its slot in ``packed_values`` (int64)."""
        return self.call.packed.nz_positions

    @property
    def packed_values(self) -> np.ndarray:
        """A's values as the kernel reads them on every call (float32, in the schedule's
        layout, padding slots 0). New values written at ``value_slots`` are used from the next
        call on: a layer whose sparse values train changes them without packing A again."""
        packed = self.call.packed
        if isinstance(getattr(packed, "vals", None), np.ndarray):  # the csr family
            return packed.vals
        # DIA/BCSR: the one float32 array of the family's packed arrays is the values.
        found = [a for a in packed.arrays if a.dtype == _F32]
        if len(found) != 1:
            raise CognateError(f"cpu {self.op}: no single values array in the packed layout")
        return found[0]

    def _run(self, arrays: tuple[np.ndarray, ...], out: np.ndarray) -> None:
        """The kernel on these arrays; the ctypes arguments of the last arrays are reused (the
        cache holds them, so their buffers and addresses stay valid)."""
        bound = self._bound
        every = (*arrays, out)
        if (
            bound is None
            or len(bound[0]) != len(every)
            or any(a is not b for a, b in zip(bound[0], every, strict=True))
        ):
            args = list(self._template)
            first = self.call._pointers - len(every)
            for index, array in enumerate(every):
                args[first + index] = ctypes.c_void_p(_address(array))
            bound = self._bound = (every, args)
        self._fn(*bound[1])

    @staticmethod
    def _fresh_or(out: Any, shape: tuple[int, ...]) -> np.ndarray:
        # np.empty: every kernel writes each output entry (SpMM zeroes C itself).
        if out is None:
            return np.empty(shape, dtype=np.float32)
        if (
            type(out) is np.ndarray
            and out.shape == shape
            and out.dtype == _F32
            and out.flags.c_contiguous
            and out.flags.writeable
            and out.flags.aligned
        ):
            return out
        return _output(out, shape)

    def _sddmm_result(self, values: np.ndarray, as_torch: bool) -> Any:
        if as_torch:
            torch = _torch()
            if self._torch_index is None:  # once: torch wants writable index arrays
                self._torch_index = (
                    torch.from_numpy(self._indptr.copy()),
                    torch.from_numpy(self._indices.copy()),
                )
            return torch.sparse_csr_tensor(
                *self._torch_index, torch.from_numpy(values), size=self.matrix.shape
            )
        # A's index arrays are shared (read-only), not copied per call.
        return sp.csr_matrix((values, self._indices, self._indptr), shape=self.matrix.shape)


def _untyped(fn: Any) -> Any:
    """Another function object for the same C entry point, without argtypes: called with
    ctypes instances of the right types only (the template), it skips converting 19 Python
    arguments per call. (The library's own object is shared, so its argtypes stay.)"""
    copy = type(fn)(ctypes.cast(fn, ctypes.c_void_p).value)
    copy.restype, copy.argtypes = None, None
    return copy


def _address(array: np.ndarray) -> int:
    """The data address of an array (``ndarray.ctypes.data`` costs ~3-5 us; a writable
    buffer's address through ctypes ~0.5 us)."""
    if array.flags.writeable and array.size:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    return int(array.ctypes.data)


def _identity(positions: np.ndarray, nnz: int) -> bool:
    """Whether slot i holds A's CSR entry i for every i (no padding, no reordering)."""
    return positions.size == nnz and bool((positions == np.arange(nnz)).all())


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


class ScheduleKernel:
    """A cpu schedule of one matrix for any dense width: ``self(*operands, out=None)``.

    A is packed and the kernel compiled (a ``TunedKernel``) on the first call at a width,
    and reused for every later call at that width."""

    def __init__(self, matrix: Matrix, op: str, config: Config) -> None:
        self.matrix, self.op, self.config = matrix, op, config
        self._by_width: dict[int, TunedKernel] = {}

    @property
    def widths(self) -> tuple[int, ...]:
        """The dense widths packed and compiled so far."""
        return tuple(sorted(self._by_width))

    def __call__(self, *operands: Any, out: Any = None) -> Any:
        shape = getattr(operands[0], "shape", None) if operands else None
        kernel = self._by_width.get(shape[1]) if shape is not None and len(shape) == 2 else None
        if kernel is None:  # first call at this width: pack and compile
            arrays = tuple(as_dense(a, f"operand {i}") for i, a in enumerate(operands))
            width = check_operands(self.op, self.matrix.shape, arrays)
            kernel = self._by_width.get(width)
            if kernel is None:
                kernel = self._by_width[width] = TunedKernel(
                    self.matrix, self.op, self.config, arrays
                )
        return kernel(*operands, out=out)
