"""The tuned cpu kernel as a user calls it: ``result.kernel(B, out=C)``, without copies.

A is packed and the kernel compiled once per dense width; each call reads the caller's dense
operands in place and writes into ``out`` (or one fresh array). numpy arrays and torch CPU
tensors are both accepted, so the kernel drops into a PyTorch layer. Copying B in and C out
on each call would cost more than the SpMM itself on small matrices (docs/architecture.md,
Facts measured here).
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.targets.cpu import families, memory, pipeline
from cognate.targets.cpu.call import check_operands
from cognate.targets.cpu.operands import (
    aligned_empty,
    check_disjoint,
    check_live_tensor,
    overlap_error,
    tensor_extent,
)

_F32 = np.dtype(np.float32)


def is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "numpy")


def as_dense(value: Any, what: str) -> np.ndarray:
    """A float32, C-contiguous, aligned numpy view of ``value`` (numpy array or torch CPU
    tensor); copied only when it is not one already (another dtype, strided, on a device)."""
    if is_torch(value):
        if value.device.type != "cpu":
            raise CognateError(f"{what}: a torch tensor on {value.device}, the kernel runs on cpu")
        check_live_tensor(value, what)  # before any copy: torch's own copy of one crashes
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
    if is_torch(out) and out.requires_grad:  # as torch refuses an in-place op on such a leaf
        raise CognateError(
            "out requires grad: the kernel writes outside autograd (cognate.torch's operators"
            " differentiate)"
        )
    if is_torch(out):
        check_live_tensor(out, "out")
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
    Safe to call from several threads: calls of one kernel run one at a time (a lock around
    the argument vector and the SDDMM slot buffer of a padded layout, both shared between
    calls; the lock is far cheaper than a fresh vector per call: docs/reliability.md). Each
    call checks what it is handed (operands.py): shapes, dtype, contiguity, torch tensors'
    storage live and large enough, and ``out`` sharing no memory with an operand.

    The arguments live in one vector (``call.ArgvCall``), and only the operands' and output's
    addresses change in it, when the caller passes other arrays: converting every ctypes
    argument per call would cost more than the Python around the kernel does now
    (docs/benchmarks.md, "The call path").
    """

    def __init__(self, matrix: Matrix, op: str, config: Config, operands: tuple[Any, ...]) -> None:
        self.matrix, self.op = matrix, op
        arrays = tuple(as_dense(a, f"operand {i}") for i, a in enumerate(operands))
        self.width = check_operands(op, matrix.shape, arrays)
        knobs = config.knobs if isinstance(config, Config) else config
        family = families.family_of(knobs)
        needed = memory.kernel_bytes(matrix, op, knobs, self.width)
        memory.check_room(
            matrix, f"packing A for a {family} {op} kernel of width {self.width}", needed
        )
        self.call = pipeline.prepare(matrix, op, knobs, arrays)
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
        self._argv = self.call.argv
        self._kernel_run = self.call.run  # the pipeline's call, as the worker and verify time it
        self._lock = self._argv.lock
        # The arrays whose addresses the argument vector holds (kept alive by this reference).
        self._bound: tuple[Any, ...] | None = None
        self._torch_last: tuple[Any, ...] | None = None  # SpMM's last tensors and addresses

    def __call__(self, *operands: Any, out: Any = None) -> Any:
        with self._lock:
            return self._call(operands, out)

    def _call(self, operands: tuple[Any, ...], out: Any) -> Any:
        if self.op == "spmm" and len(operands) == 1:
            b = operands[0]
            if type(b) is np.ndarray:
                if self._repeat(b, out):  # SpMM into the same arrays as last call
                    self._kernel_run()
                    return out
            elif (self._torch_last is not None and b is self._torch_last[0]) or is_torch(b):
                done = self._torch_spmm(b, out)
                if done is not None:
                    return done
        arrays = self._plain(operands)
        as_torch = False
        if arrays is None:  # not float32 C-contiguous numpy arrays of the right shapes
            arrays = tuple(as_dense(a, f"operand {i}") for i, a in enumerate(operands))
            as_torch = any(is_torch(a) for a in operands)
        return self._run_checked(arrays, out, as_torch)

    def _repeat(self, b: np.ndarray, out: Any) -> bool:
        """Whether this SpMM call passes the very numpy arrays of the last one (checked then;
        the shape and dtype are checked again: both can be reassigned in place)."""
        bound = self._bound
        return (
            bound is not None
            and out is not None
            and b is bound[0]
            and out is bound[1]
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
        with self._lock:
            return self._run_checked(arrays, out, as_torch)

    def _run_checked(self, arrays: tuple[np.ndarray, ...], out: Any, as_torch: bool) -> Any:
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
            for index, array in enumerate(arrays):  # bounds test, exact: all contiguous
                if np.may_share_memory(values, array):
                    raise overlap_error(self.op, index)
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
        with self._lock:
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
        cache holds them, so their buffers and addresses stay valid). New arrays are checked
        once, when bound: ``out`` (the last) shares no memory with the operands."""
        bound = self._bound
        every = (*arrays, out)
        if (
            bound is None
            or len(bound) != len(every)
            or any(a is not b for a, b in zip(bound, every, strict=True))
        ):
            addresses = [_address(a) for a in every]
            extents = [(at, at + a.nbytes) for at, a in zip(addresses, every, strict=True)]
            check_disjoint(extents[:-1], extents[-1], self.op)
            self._point_at(addresses)
            self._bound, self._torch_last = every, None
        self._kernel_run()

    def _point_at(self, addresses: list[int]) -> None:
        """The dense operands' and the output's addresses into the argument vector (every
        kernel signature ends with them)."""
        self.call.point_at(addresses)

    def _torch_spmm(self, b: Any, out: Any) -> Any:
        """SpMM on float32 contiguous cpu tensors without a numpy view (``data_ptr`` is
        cheaper than ``.numpy()``); None when they are not such tensors."""
        last = self._torch_last
        if (  # the tensors of the last call, still at the same addresses and shapes
            last is not None
            and b is last[0]
            and out is last[1]
            and b.data_ptr() == last[2]
            and out.data_ptr() == last[3]
            and b.shape == self._shapes[0]
            and out.shape == self._out_shape
            and b.is_contiguous()
            and out.is_contiguous()
            # same addresses as last call (so still disjoint), but storage may be freed since
            # (then the full path below refuses it in one line); float32: 4 bytes an element
            and b.untyped_storage().nbytes() >= b.storage_offset() * 4 + last[4]
            and out.untyped_storage().nbytes() >= out.storage_offset() * 4 + last[5]
        ):
            self._kernel_run()
            return out
        torch = _torch()
        if not _plain_tensor(b, torch, self._shapes[0]):
            return None
        if out is None:
            out = torch.empty(self._out_shape, dtype=torch.float32)
        elif not (_plain_tensor(out, torch, self._out_shape) and not out.requires_grad):
            return None
        extents = [tensor_extent(b, "operand 0"), tensor_extent(out, "out")]
        check_disjoint(extents[:1], extents[1], self.op)
        pointers = [b.data_ptr(), out.data_ptr()]
        self._point_at(pointers)
        self._bound = (b, out)  # keeps them alive (_repeat takes numpy arrays only)
        self._torch_last = (
            b,
            out,
            *pointers,
            extents[0][1] - extents[0][0],
            extents[1][1] - extents[1][0],
        )
        self._kernel_run()
        return out

    @staticmethod
    def _fresh_or(out: Any, shape: tuple[int, ...]) -> np.ndarray:
        # empty: every kernel writes each output entry (SpMM zeroes C itself); aligned, so
        # a streamed kernel streams into it (the stream knob)
        if out is None:
            return aligned_empty(shape, np.float32)
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


def _plain_tensor(value: Any, torch: Any, shape: tuple[int, ...]) -> bool:
    return (
        type(value) is torch.Tensor
        and value.dtype is torch.float32
        and value.device.type == "cpu"
        and tuple(value.shape) == shape
        and value.is_contiguous()
        and value.layout is torch.strided
    )


def _address(array: np.ndarray) -> int:
    """The data address of an array (a writable buffer's address through ctypes is several
    times cheaper than ``ndarray.ctypes.data``: docs/benchmarks.md, "The call path")."""
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
        self._building = threading.Lock()  # two threads' first calls build one kernel

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
            with self._building:
                kernel = self._by_width.get(width)
                if kernel is None:
                    kernel = self._by_width[width] = TunedKernel(
                        self.matrix, self.op, self.config, arrays
                    )
        return kernel(*operands, out=out)
