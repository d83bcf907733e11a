"""SpMM and SDDMM of a ``TunedSparse`` as differentiable PyTorch operators.

Two ``torch.library`` custom ops do the work on cognate's tuned cpu kernels:

- ``cognate::spmm(x, values, handle, transpose)``: ``A @ x`` (``A^T @ x``) with A's values;
  backward: ``dx = A^T @ dy`` (``A @ dy``), ``dvalues = SDDMM(A's pattern, dy, x)``;
- ``cognate::sddmm(x, y, handle)``: ``(x @ y^T)`` sampled at A's pattern (A.nnz values in A's
  CSR order); backward: ``dx = (A∘g) @ y``, ``dy = (A∘g)^T @ x`` (the spmm op with values g).

The sparse operand travels as an integer handle (a custom op takes tensors and scalars, not
Python objects); the registry holds the operands weakly. Being custom ops with fake (meta)
implementations, they compose with ``torch.compile``: a compiled model keeps them as opaque
calls in its graph (with ``fullgraph=True`` too) when called as ``cognate.torch.spmm(ts, x)``
or ``ts.matmul(x)``. ``ts @ x`` is a graph break under ``torch.compile`` (dynamo does not trace
``@`` on a Python object): it still runs, in eager mode, with the same results.
Gradients of the backward (double backward) go through the same ops.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import torch

from cognate.errors import CognateError
from cognate.targets.cpu.operands import check_live_tensor

_OPERANDS: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_NEXT = itertools.count(1)


def register(operand: Any) -> int:
    """A handle for ``operand`` (a TunedSparse) that the custom ops take."""
    handle = next(_NEXT)
    _OPERANDS[handle] = operand
    return handle


def _operand(handle: int) -> Any:
    operand = _OPERANDS.get(handle)
    if operand is None:
        raise CognateError(f"cognate.torch: no live TunedSparse with handle {handle}")
    return operand


# --- the custom ops ------------------------------------------------------------------------


@torch.library.custom_op("cognate::spmm", mutates_args=())
def _spmm(x: torch.Tensor, values: torch.Tensor, handle: int, transpose: bool) -> torch.Tensor:
    return _operand(handle).run_spmm(x, values, transpose)


@_spmm.register_fake
def _spmm_fake(x: torch.Tensor, values: torch.Tensor, handle: int, transpose: bool) -> Any:
    rows, cols = _operand(handle).shape
    return x.new_empty((cols if transpose else rows, x.shape[1]))


@torch.library.custom_op("cognate::sddmm", mutates_args=())
def _sddmm(x: torch.Tensor, y: torch.Tensor, handle: int) -> torch.Tensor:
    return _operand(handle).run_sddmm(x, y)


@_sddmm.register_fake
def _sddmm_fake(x: torch.Tensor, y: torch.Tensor, handle: int) -> Any:
    return x.new_empty((_operand(handle).nnz,))


def _spmm_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, values, handle, transpose = inputs
    ctx.save_for_backward(x, values)
    ctx.handle, ctx.transpose = handle, transpose
    # the backward needs the operand: keep it alive while the graph lives (the registry holds
    # it weakly; a temporary one, e.g. a mini-batch's adjacency, is otherwise gone by then)
    ctx.operand = _OPERANDS.get(handle)


def _spmm_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, values = ctx.saved_tensors
    grad = grad.contiguous()
    dx = dvalues = None
    if ctx.needs_input_grad[0]:
        dx = _spmm(grad, values, ctx.handle, not ctx.transpose)
    if ctx.needs_input_grad[1]:
        # y = A x: dA_ij = dy_i . x_j; y = A^T x: dA_ij = x_i . dy_j
        pair = (x, grad) if ctx.transpose else (grad, x)
        dvalues = _sddmm(pair[0].contiguous(), pair[1].contiguous(), ctx.handle)
    return dx, dvalues, None, None


def _sddmm_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, y, handle = inputs
    ctx.save_for_backward(x, y)
    ctx.handle = handle
    ctx.operand = _OPERANDS.get(handle)  # alive for the backward (see _spmm_setup)


def _sddmm_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, y = ctx.saved_tensors
    grad = grad.contiguous()
    dx = _spmm(y, grad, ctx.handle, False) if ctx.needs_input_grad[0] else None
    dy = _spmm(x, grad, ctx.handle, True) if ctx.needs_input_grad[1] else None
    return dx, dy, None


_spmm.register_autograd(_spmm_backward, setup_context=_spmm_setup)
_sddmm.register_autograd(_sddmm_backward, setup_context=_sddmm_setup)


# --- the public functions ------------------------------------------------------------------


def _check_dense(name: str, x: Any, rows: int, what: str) -> torch.Tensor:
    """``x`` as a float32 cpu 2-D tensor with ``rows`` rows (contiguous: copied if it was
    not), else one line naming what is wrong."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: {what} must be a torch.Tensor, got {type(x).__name__}")
    if x.layout != torch.strided:
        raise TypeError(f"{name}: {what} must be a dense tensor, got {x.layout}")
    if x.dtype != torch.float32:
        raise TypeError(
            f"{name}: {what} has dtype {x.dtype}; cognate's cpu kernels are float32 only"
            " (convert with .float())"
        )
    if x.device.type != "cpu":
        raise ValueError(f"{name}: {what} is on {x.device}; cognate's kernels run on the cpu")
    if x.dim() != 2 or x.shape[0] != rows:
        raise ValueError(f"{name}: {what} has shape {tuple(x.shape)}, expected ({rows}, width)")
    _check_live(name, x, what)  # before .contiguous(): torch's copy of such a tensor crashes
    return x.contiguous()


def _check_live(name: str, x: torch.Tensor, what: str) -> None:
    if torch.compiler.is_compiling():  # fake tensors have no storage; the op checks at run
        return
    try:
        check_live_tensor(x, f"{name}: {what}")
    except CognateError as exc:  # the ValueError of this module's other argument checks
        raise ValueError(str(exc)) from None


def _check_values(name: str, ts: Any, values: Any) -> torch.Tensor:
    if values is None:
        return ts.values
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"{name}: values must be a torch.Tensor, got {type(values).__name__}")
    if values.dtype != torch.float32 or values.device.type != "cpu":
        raise TypeError(
            f"{name}: values must be float32 on the cpu, got {values.dtype} on {values.device}"
        )
    if tuple(values.shape) != (ts.nnz,):
        raise ValueError(
            f"{name}: values has shape {tuple(values.shape)}, expected ({ts.nnz},): one per"
            " stored entry of A, in A's canonical CSR order"
        )
    _check_live(name, values, "values")
    return values


class SparseOperand:
    """What the operators take as A: ``TunedSparse`` derives from it. Defined here so that
    this module checks its operand without importing operand.py (which imports this one);
    an isinstance check, unlike a registry lookup, traces under ``torch.compile``."""


def _check_operand(name: str, ts: Any) -> None:
    if not isinstance(ts, SparseOperand):
        raise TypeError(
            f"{name}: the sparse operand must be a TunedSparse, got {type(ts).__name__}"
        )


def spmm(ts: Any, x: torch.Tensor, values: torch.Tensor | None = None) -> torch.Tensor:
    """``A @ x`` on A's tuned schedule, differentiable in ``x`` and in A's values.

    ``x``: float32 cpu tensor (A.cols x width; a non-contiguous one is copied once).
    ``values``: A's values (A.nnz, canonical CSR order), default ``ts.values``; when they
    require grad, their gradient is the SDDMM ``dY @ x^T`` at A's pattern.
    """
    _check_operand("cognate.torch.spmm", ts)
    x = _check_dense("cognate.torch.spmm", x, ts.shape[1], "X")
    values = _check_values("cognate.torch.spmm", ts, values)
    return _spmm(x, values, ts.handle, False)


def spmm_t(ts: Any, x: torch.Tensor, values: torch.Tensor | None = None) -> torch.Tensor:
    """``A^T @ x`` (A^T's tuned kernel), differentiable like ``spmm``."""
    _check_operand("cognate.torch.spmm_t", ts)
    x = _check_dense("cognate.torch.spmm_t", x, ts.shape[0], "X")
    values = _check_values("cognate.torch.spmm_t", ts, values)
    return _spmm(x, values, ts.handle, True)


def sddmm(
    ts: Any, x: torch.Tensor, y: torch.Tensor, values: torch.Tensor | None = None
) -> torch.Tensor:
    """``A * (x @ y^T)`` sampled at A's pattern: a tensor of A.nnz values in A's canonical CSR
    order (``ts.to_torch(result)`` makes it a sparse CSR tensor). ``x``: A.rows x k, ``y``:
    A.cols x k, float32 cpu. Differentiable in ``x``, ``y`` and A's values (default
    ``ts.values``).
    """
    _check_operand("cognate.torch.sddmm", ts)
    rows, cols = ts.shape
    x = _check_dense("cognate.torch.sddmm", x, rows, "X")
    y = _check_dense("cognate.torch.sddmm", y, cols, "Y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(
            f"cognate.torch.sddmm: X has width {x.shape[1]} and Y width {y.shape[1]}; they"
            " must agree"
        )
    values = _check_values("cognate.torch.sddmm", ts, values)
    return values * _sddmm(x, y, ts.handle)
