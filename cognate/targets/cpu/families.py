"""Kernel families of the cpu target beside the WACO CSR family: DIA and reordered BCSR.

A config with a ``family`` knob (``dia``, ``bcsr``) is packed by its family module
(cognate/targets/cpu/dia.py, bcsr.py) into a ``FamilyPacked`` and run by a kernel generated
from kernels/cpu/<family>_<op>.c. A config without one is the CSR family (pack.py,
codegen.py, kernel.py: unchanged). Every kernel signature has the same shape::

    cognate_<family>_<op>(packed arrays..., dense operands..., out, integers..., chunk)

Template parameters are integers checked against each family's whitelist here, even though
the space validated them (defence in depth): no config string reaches C source.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import import_module
from pathlib import Path
from string import Template
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.build import compile_c, load_library
from cognate.errors import CognateError
from cognate.paths import kernels_dir
from cognate.targets.cpu.codegen import MAX_SPECIALISED_WIDTH, include
from cognate.targets.cpu.kernel import BoundKernel, KernelCall, check_operands, runtime_knob
from cognate.targets.cpu.structured import StructuredView, structured_view

CSR = "csr"
FAMILIES: tuple[str, ...] = (CSR, "dia", "bcsr", "reordered", "panel")
POWERS_OF_TWO_TO_64 = (1, 2, 4, 8, 16, 32, 64)
# Compile-time parameters per (family, op) and their legal values (whitelists).
TEMPLATE_PARAMS: dict[tuple[str, str], dict[str, tuple[int, ...]]] = {
    ("dia", "spmm"): {"rtile": (1, 2, 4, 8, 16), "jtile": (8, 16, 32, 64)},
    ("dia", "sddmm"): {"rtile": (1, 2, 4, 8, 16, 32)},
    ("bcsr", "spmm"): {
        "brows": (1, 2, 4, 8, 16),
        "bcols": (1, 2, 4, 8, 16),
        "jtile": (8, 16, 32, 64),
    },
    ("bcsr", "sddmm"): {"brows": (1, 2, 4, 8, 16), "bcols": (1, 2, 4, 8, 16)},
    # Only the width is compiled in: by, symmetric, strip are runtime knobs (reordered.py).
    ("reordered", "spmm"): {},
    ("reordered", "sddmm"): {},
    # Only the width is compiled in: pcols, rblock are pack-time / runtime knobs (panel.py).
    ("panel", "spmm"): {},
    ("panel", "sddmm"): {},
}


def family_of(knobs: Mapping[str, Any]) -> str:
    """The config's family: its ``family`` knob, ``csr`` when absent."""
    family = knobs.get("family", CSR)
    if not isinstance(family, str) or family not in FAMILIES:
        raise CognateError(f"cpu config: family must be one of {', '.join(FAMILIES)}")
    return family


@dataclass(frozen=True)
class FamilyKernel:
    """The compile-time part of a DIA/BCSR config: family, op, tile sizes, dense width."""

    family: str
    op: str
    params: tuple[tuple[str, int], ...]
    width: int

    @property
    def function(self) -> str:
        return f"cognate_{self.family}_{self.op}"


def kernel_of(op: str, knobs: Mapping[str, Any], width: int, runtime: bool = True) -> FamilyKernel:
    """Check a family config's compile-time knobs against the whitelists (and, unless
    ``runtime`` is False, its runtime knobs: chunk, and the reordered family's own)."""
    family = family_of(knobs)
    allowed = TEMPLATE_PARAMS.get((family, op))
    if allowed is None:
        raise CognateError(f"cpu {op}: no {family} kernel family")
    if not isinstance(width, int) or isinstance(width, bool):
        raise CognateError(f"cpu kernels: the dense width must be an integer, got {width!r}")
    if not 1 <= width <= MAX_SPECIALISED_WIDTH:
        raise CognateError(f"cpu kernels: dense width {width} outside 1..{MAX_SPECIALISED_WIDTH}")
    params = []
    for name, values in allowed.items():
        value = knobs.get(name)
        if isinstance(value, bool) or value not in values:
            raise CognateError(f"cpu {op} {family}: {name} must be one of {values}")
        params.append((name, int(value)))
    runtime_knob(knobs, "chunk")
    check_own = getattr(family_module(family), "check_knobs", None) if runtime else None
    if check_own is not None:  # a family's runtime knobs of its own (reordered, panel)
        check_own(knobs)
    return FamilyKernel(family, op, tuple(params), width)


def family_module(family: str) -> Any:
    """The packing module of a non-CSR family (cognate/targets/cpu/<family>.py): its ``pack``
    and, where the family has runtime knobs of its own, their ``check_knobs``. Imported on
    use: those modules import this one. ``family`` is one of FAMILIES (family_of checked)."""
    if family not in FAMILIES or family == CSR:
        raise CognateError(f"cpu: no packing module for family {family!r}")
    return import_module(f"cognate.targets.cpu.{family}")


def generate_family_source(kernel: FamilyKernel) -> str:
    """C source of ``kernel`` (its template with the checked integers filled in)."""
    checked = kernel_of(
        kernel.op,
        {"family": kernel.family, "chunk": 1, **dict(kernel.params)},
        kernel.width,
        runtime=False,
    )
    if checked != kernel:
        raise CognateError(f"cpu {kernel.op}: inconsistent {kernel.family} kernel {kernel}")
    text = (kernels_dir() / "cpu" / f"{kernel.family}_{kernel.op}.c").read_text()
    return Template(text).substitute(
        dict(kernel.params), width=kernel.width, dot_product=include("dot_product"),
        tasks=include("tasks"),
    )  # fmt: skip


@lru_cache(maxsize=256)
def compile_family(kernel: FamilyKernel) -> Path:
    return compile_c(generate_family_source(kernel))


@dataclass
class FamilyPacked:
    """A packed for a DIA/BCSR kernel: pointer arrays and integers in signature order."""

    kernel: FamilyKernel
    shape: tuple[int, int]  # A's
    arrays: list[np.ndarray]
    integers: list[int]
    out_slots: int  # SDDMM: size of the output array (one slot per stored value)
    nz_positions: np.ndarray = field(repr=False)  # SDDMM: A's CSR entry -> its slot
    stored_entries: int = 0

    @property
    def structure(self) -> FamilyKernel:  # the name KernelCall's users read
        return self.kernel


def view_of(source: Any) -> StructuredView:
    """The structured view of a Matrix (its optional row_perm / col_perm) or a plain CSR."""
    if isinstance(source, StructuredView):
        return source
    csr = getattr(source, "csr", source)
    if not isinstance(csr, sp.csr_matrix):
        raise CognateError("cpu families: expected a canonical CSR matrix")
    return structured_view(
        csr, getattr(source, "row_perm", None), getattr(source, "col_perm", None)
    )


def pack_family(
    source: Any,
    op: str,
    knobs: Mapping[str, Any],
    width: int,
    max_entries: int | None = None,
) -> FamilyPacked:
    """Pack a Matrix / CSR / StructuredView for a DIA or BCSR config (TooLarge if over the
    size limit, decided before the packed arrays are allocated)."""
    kernel = kernel_of(op, knobs, width)
    return family_module(kernel.family).pack(view_of(source), kernel, knobs, max_entries)


class FamilyCall(BoundKernel):
    """A DIA/BCSR kernel bound to its packed A, operands and output."""

    def __init__(
        self,
        lib_path: str,
        packed: FamilyPacked,
        knobs: Mapping[str, Any],
        operands: tuple[np.ndarray, ...],
    ) -> None:
        self.op, self.packed = packed.kernel.op, packed
        self.operands = tuple(np.ascontiguousarray(a, dtype=np.float32) for a in operands)
        width = check_operands(self.op, packed.shape, self.operands)
        if width != packed.kernel.width:  # a wrong width would overrun rows
            raise CognateError(
                f"cpu {self.op}: kernel built for dense width {packed.kernel.width},"
                f" operands have width {width}"
            )
        if self.op == "spmm":
            self.out = np.zeros((packed.shape[0], width), dtype=np.float32)
        else:
            self.out = np.zeros(packed.out_slots, dtype=np.float32)
        pointers = [*packed.arrays, *self.operands, self.out]
        integers = [*packed.integers, runtime_knob(knobs, "chunk")]
        fn = getattr(load_library(lib_path), packed.kernel.function)
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] * len(pointers) + [ctypes.c_int64] * len(integers)
        self._fn, self._args = fn, [a.ctypes.data for a in pointers] + integers
        self._pointers = len(pointers)


def index_maps(view: StructuredView) -> tuple[np.ndarray, np.ndarray]:
    """Contiguous int32 (col_map, row_map) for a kernel."""
    return (
        np.ascontiguousarray(view.col_map, dtype=np.int32),
        np.ascontiguousarray(view.row_map, dtype=np.int32),
    )


# --- one entry point per step for every family (the runner, worker, search and emit) --------


def build_kernel(op: str, knobs: Mapping[str, Any], width: int) -> Path:
    """Compile (or find cached) the kernel of any cpu config specialised to ``width``."""
    if family_of(knobs) != CSR:
        return compile_family(kernel_of(op, knobs, width))
    from cognate.targets.cpu.codegen import compile_structure, structure_of

    structure = structure_of(op, knobs, width)
    for knob in ("isplit", "jsplit", "ksplit", "chunk"):
        runtime_knob(knobs, knob)
    return compile_structure(structure)


def make_call(
    lib_path: str, packed: Any, knobs: Mapping[str, Any], operands: tuple[np.ndarray, ...]
) -> BoundKernel:
    """The callable kernel for a packed A of any family (KernelCall for the csr family)."""
    if isinstance(packed, FamilyPacked):
        return FamilyCall(lib_path, packed, knobs, operands)
    return KernelCall(lib_path, packed, knobs, operands)


def kernel_source(op: str, knobs: Mapping[str, Any], width: int) -> tuple[str, str, dict]:
    """(C source, entry point, runtime arguments) of any cpu config, for ``tune --emit``."""
    if family_of(knobs) != CSR:
        kernel = kernel_of(op, knobs, width)
        return generate_family_source(kernel), kernel.function, {"chunk": knobs["chunk"]}
    from cognate.targets.cpu.codegen import OP_LOOPS, generate_source, structure_of

    # structure_of re-validates every knob against the whitelists before codegen.
    source = generate_source(structure_of(op, knobs, width))
    args = {k: knobs[k] for k in ("isplit", "ksplit", "jsplit", "chunk")}
    return source, OP_LOOPS[op].function, args
