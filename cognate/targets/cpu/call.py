"""A compiled cpu kernel bound to its arguments, and the one call path of every family.

``BoundKernel`` is what a family's ``bind`` returns (families/); ``argv_call`` gives its call
through one argument vector (``ArgvCall``), which pipeline.PreparedKernel holds: the call
collect's worker, tune --verify and result.kernel all run.

Why an argument vector: ctypes converts every argument on every call, and a kernel takes up
to 19 pointers and integers (docs/benchmarks.md, "The call path"). So each kernel's arguments
live in one int64 vector, and a tiny trampoline compiled per signature
(``cognate_argv_<P>_<I>``: P pointers, then I int64s) unpacks it into the real call. The
trampoline passes the pointers as ``void *``, exactly what ctypes with ``c_void_p`` argtypes
passes (every cpu kernel takes only pointers and int64s). Only the two counts reach the
generated source, and they are checked integers. Written here because neither ctypes nor
cffi's ABI mode offers a call with pre-converted arguments; an extension module would need
Python's headers, which a plain install does not have.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from functools import lru_cache, partial
from typing import Any

import numpy as np

from cognate.build import compile_c, load_library
from cognate.errors import CognateError

MAX_ARGUMENTS = 40  # every cpu kernel takes fewer; a bound on the generated source


def trampoline_source(pointers: int, integers: int) -> str:
    """C source of the trampoline for kernels of ``pointers`` pointers then ``integers``
    int64s."""
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (pointers, integers)):
        raise CognateError("fast call: argument counts must be integers")
    if pointers < 0 or integers < 0 or not 0 < pointers + integers <= MAX_ARGUMENTS:
        raise CognateError(
            f"fast call: {pointers} + {integers} arguments outside 1..{MAX_ARGUMENTS}"
        )
    params = ", ".join(["void *"] * pointers + ["int64_t"] * integers)
    args = [f"(void *)(intptr_t)a[{i}]" for i in range(pointers)]
    args += [f"a[{i}]" for i in range(pointers, pointers + integers)]
    return (
        "#include <stdint.h>\n"
        f"typedef void (*kernel_t)({params});\n"
        f"void cognate_argv_{pointers}_{integers}(void *fn, const int64_t *a)\n"
        f"{{\n    ((kernel_t)fn)({', '.join(args)});\n}}\n"
    )


@lru_cache(maxsize=64)
def trampoline(pointers: int, integers: int) -> Any:
    """The compiled trampoline for this signature (built once, cached on disk)."""
    lib = load_library(str(compile_c(trampoline_source(pointers, integers), openmp=False)))
    fn = getattr(lib, f"cognate_argv_{pointers}_{integers}")
    fn.restype, fn.argtypes = None, None  # called with two c_void_p only
    return fn


class ArgvCall:
    """A kernel entry point and its argument vector: ``self()`` runs it, ``set_pointer``
    swaps one array argument (the dense operands and the output) between calls.

    The caller keeps every array whose address is in the vector alive (a bound kernel owns
    its packed arrays; ``TunedKernel`` holds the last operands). The vector is shared by
    every call: a caller that may run on several threads holds ``lock`` from the first
    ``set_pointer`` to the end of the call (``TunedKernel`` does), or one thread's operands
    run with another's output."""

    keep: Any = None  # an owner of the arrays the vector points at, when the caller has one

    def __init__(self, function: Any, values: Sequence[int], pointers: int) -> None:
        address = ctypes.cast(function, ctypes.c_void_p).value
        if not address:
            raise CognateError("fast call: the kernel has no address")
        self.pointers = pointers
        self.lock = threading.Lock()
        self.argv = np.array([0 if v is None else int(v) for v in values], dtype=np.int64)
        self._fn = trampoline(pointers, len(values) - pointers)
        self._target = ctypes.c_void_p(address)
        self._vector = ctypes.c_void_p(self.argv.ctypes.data)
        # The call itself, arguments bound: calling a partial of a ctypes function skips the
        # Python frame of a method (docs/benchmarks.md, "The call path").
        self.run = partial(self._fn, self._target, self._vector)

    def set_pointer(self, index: int, address: int) -> None:
        if not 0 <= index < self.pointers:
            raise CognateError(f"fast call: argument {index} is not a pointer")
        self.argv[index] = address

    def __call__(self) -> None:
        self.run()


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

    def _bind(
        self, lib_path: str, function: str, pointers: list[np.ndarray], integers: list[int]
    ) -> None:
        """Bind entry point ``function`` of the library at ``lib_path`` to ``pointers`` (the
        arrays' addresses, as ``void *``) then ``integers`` (as int64): every cpu kernel's
        signature."""
        fn = getattr(load_library(lib_path), function)
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] * len(pointers) + [ctypes.c_int64] * len(integers)
        self._fn, self._args = fn, [a.ctypes.data for a in pointers] + integers
        self._pointers = len(pointers)

    def argv_call(self) -> ArgvCall:
        """This kernel called through one argument vector (``ArgvCall``), as the user path and
        tune --verify call it; the result keeps this bound kernel (its arrays) alive."""
        fast = ArgvCall(self._fn, self._args, self._pointers)
        fast.keep = self
        return fast

    def result(self) -> np.ndarray:
        """SpMM: C (M x width); SDDMM: the output values in A's CSR order."""
        if self.op == "spmm":
            return self.out
        return self.out[self.packed.nz_positions]
