"""A compiled cpu kernel bound to its arguments: the one call path of every family.

``BoundKernel`` is what a family's ``bind`` returns (families/); ``argv_call`` gives its call
through one argument vector (fastcall.py), the one call path of every cpu kernel
(pipeline.PreparedKernel holds it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cognate.errors import CognateError
from cognate.targets.cpu.fastcall import ArgvCall


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


class BoundKernel:
    """A compiled kernel bound to its arguments (every family): ``argv_call`` runs it, then
    ``result()`` reads the output.

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
