"""(max, x) / (min, x) SpMM with the arg kept for the backward: SAGEConv(aggr="max") and
other max / min aggregations of a cognate adjacency (cognate.pyg).

``out[i, j] = max_k A[i, k] * x[k, j]`` over row i's stored entries (0 for an empty row, as
torch's ``spmm_reduce`` and PyG's scatter give); the backward routes ``dy[i, j]`` to
``dx[k*, j]`` times ``A[i, k*]`` for the entry k* that won (ties: the first in CSR order).
The kernel is kernels/pyg/spmm_minmax.c, compiled once by cognate/build.py; its results are
checked against a numpy reference in tests/test_pyg.py. One fixed schedule (rows in parallel,
the width innermost), not tuned.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from cognate.build import compile_c, load_library
from cognate.errors import CognateError
from cognate.paths import kernels_dir

REDUCES = ("max", "min")
_I64, _P = ctypes.c_int64, ctypes.c_void_p


@cache
def _library() -> ctypes.CDLL:
    lib = load_library(str(compile_c((kernels_dir() / "pyg" / "spmm_minmax.c").read_text())))
    for name in ("spmm_max", "spmm_min"):
        getattr(lib, name).argtypes = [_I64, _I64, _P, _P, _P, _P, _P, _P]
        getattr(lib, name).restype = None
    lib.spmm_minmax_backward.argtypes = [_I64, _I64, _P, _P, _P, _P, _P]
    lib.spmm_minmax_backward.restype = None
    return lib


class MinMaxCSR:
    """A's CSR arrays held as the kernel takes them (int32 indices, float32 values)."""

    def __init__(self, csr: sp.csr_matrix) -> None:
        if csr.nnz >= 2**31:  # the kernel's offsets and argmin/argmax entries are int32
            raise CognateError(f"min/max aggregation: {csr.nnz} entries, over 2^31 - 1")
        self.shape = csr.shape
        self.indptr = np.ascontiguousarray(csr.indptr, dtype=np.int32)
        self.indices = np.ascontiguousarray(csr.indices, dtype=np.int32)
        self.values = np.ascontiguousarray(csr.data, dtype=np.float32)

    def forward(self, x: torch.Tensor, reduce: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(out, arg) for a float32 contiguous x of A.cols rows."""
        rows, width = self.shape[0], x.shape[1]
        out = torch.empty((rows, width), dtype=torch.float32)
        arg = torch.empty((rows, width), dtype=torch.int32)
        kernel = _library().spmm_max if reduce == "max" else _library().spmm_min
        kernel(rows, width, _ptr(self.indptr), _ptr(self.indices), _ptr(self.values),
               x.data_ptr(), out.data_ptr(), arg.data_ptr())  # fmt: skip
        return out, arg

    def backward(self, grad: torch.Tensor, arg: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous()
        dx = torch.zeros((self.shape[1], grad.shape[1]), dtype=torch.float32)
        _library().spmm_minmax_backward(self.shape[0], grad.shape[1], _ptr(self.indices),
                                        _ptr(self.values), arg.data_ptr(), grad.data_ptr(),
                                        dx.data_ptr())  # fmt: skip
        return dx


def _ptr(array: np.ndarray) -> int:
    return array.ctypes.data


class _MinMaxSpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, operand: MinMaxCSR, reduce: str) -> torch.Tensor:
        out, arg = operand.forward(x.detach().contiguous(), reduce)
        ctx.operand = operand
        ctx.save_for_backward(arg)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        (arg,) = ctx.saved_tensors
        return ctx.operand.backward(grad, arg), None, None


def spmm_minmax(operand: MinMaxCSR, x: torch.Tensor, reduce: str) -> torch.Tensor:
    """``reduce`` ("max" / "min") over each row's entries of A * x, differentiable in x
    (x: float32 cpu, A.cols x width, checked by the caller)."""
    if reduce not in REDUCES:
        raise ValueError(f"reduce must be one of {', '.join(REDUCES)}, got {reduce!r}")
    return _MinMaxSpMM.apply(x, operand, reduce)


def reference(csr: sp.csr_matrix, x: np.ndarray, reduce: str) -> np.ndarray:
    """numpy reference of the forward (float64), for the tests."""
    out = np.zeros((csr.shape[0], x.shape[1]))
    pick = np.max if reduce == "max" else np.min
    for i in range(csr.shape[0]):
        lo, hi = csr.indptr[i], csr.indptr[i + 1]
        if hi > lo:
            out[i] = pick(csr.data[lo:hi, None].astype(np.float64) * x[csr.indices[lo:hi]], 0)
    return out
