"""The template families (DIA, BCSR, reordered, panel): what they share.

Each is one module beside this one (dia.py, bcsr.py, reordered.py, panel.py) that packs A's
structured view into a ``FamilyPacked``; its kernel is generated from
kernels/cpu/<family>_<op>.c. Every such kernel signature has the same shape::

    cognate_<family>_<op>(packed arrays..., dense operands..., out, integers..., chunk)

Template parameters are integers checked against each family's whitelist here, even though
the space validated them (defence in depth): no config string reaches C source.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from string import Template
from typing import Any

import numpy as np

from cognate.errors import CognateError
from cognate.paths import kernels_dir
from cognate.targets.cpu.call import BoundKernel, check_operands
from cognate.targets.cpu.codegen import MAX_SPECIALISED_WIDTH, include
from cognate.targets.cpu.knobs import runtime_knob
from cognate.targets.cpu.structured import StructuredView

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


CheckKnobs = Callable[[Mapping[str, Any]], Any]


def kernel_of(
    op: str,
    knobs: Mapping[str, Any],
    width: int,
    check_knobs: CheckKnobs | None = None,
    runtime: bool = True,
) -> FamilyKernel:
    """Check a family config's compile-time knobs against the whitelists (and, unless
    ``runtime`` is False, its runtime knobs: chunk, and with ``check_knobs`` the family's
    own, e.g. the reordered family's)."""
    family = knobs.get("family")
    allowed = TEMPLATE_PARAMS.get((family, op)) if isinstance(family, str) else None
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
    if runtime:
        runtime_knob(knobs, "chunk")
        if check_knobs is not None:  # a family's runtime knobs of its own (reordered, panel)
            check_knobs(knobs)
    return FamilyKernel(family, op, tuple(params), width)


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
        tasks=include("tasks"), host_vectors=include("host_vectors"),
    )  # fmt: skip


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
        self._bind(lib_path, packed.kernel.function, pointers, integers)


def index_maps(view: StructuredView) -> tuple[np.ndarray, np.ndarray]:
    """Contiguous int32 (col_map, row_map) for a kernel."""
    return (
        np.ascontiguousarray(view.col_map, dtype=np.int32),
        np.ascontiguousarray(view.row_map, dtype=np.int32),
    )


# --- the family protocol's pack / source / bind, shared by the template families -------------


PackView = Callable[[StructuredView, FamilyKernel, Mapping[str, Any], int | None], FamilyPacked]


def protocol(pack_view: PackView, check_knobs: CheckKnobs | None) -> tuple[Callable, ...]:
    """A template family's (kernel_of, pack, source, bind) from its own ``pack_view`` (S in
    its layout) and ``check_knobs`` (its runtime knobs, if it has some)."""

    def family_kernel(op: str, knobs: Mapping[str, Any], width: int) -> FamilyKernel:
        """The checked compile-time part of a config (its runtime knobs checked too)."""
        return kernel_of(op, knobs, width, check_knobs)

    def pack(
        source: Any, op: str, knobs: Mapping[str, Any], width: int, max_entries: int | None = None
    ) -> FamilyPacked:
        """A (a PackSource) packed through its structured view."""
        return pack_view(source.view, family_kernel(op, knobs, width), knobs, max_entries)

    def family_source(
        op: str, knobs: Mapping[str, Any], width: int
    ) -> tuple[str, str, dict[str, Any]]:
        return source(family_kernel(op, knobs, width), knobs)

    return family_kernel, pack, family_source, bind


def source(kernel: FamilyKernel, knobs: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(C source, entry point, runtime arguments) of a checked template-family kernel."""
    return generate_family_source(kernel), kernel.function, {"chunk": runtime_knob(knobs, "chunk")}


def bind(
    lib_path: str, packed: FamilyPacked, knobs: Mapping[str, Any], operands: tuple[np.ndarray, ...]
) -> BoundKernel:
    return FamilyCall(lib_path, packed, knobs, operands)
