"""What preparing a kernel costs in memory, checked before it happens.

``result.kernel(B, out=C)`` and ``cognate.torch.TunedSparse`` pack A (and A^T for the
backward pass) on first use, inside a process that already holds A, the operands and
whatever else the caller keeps. So a preparation is priced as the bytes it adds, checked
with the process's current resident memory against the memory budget: over it, one
``InputError`` line instead of a swap storm or an OOM kill.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import scipy.sparse as sp

from cognate.budget import MEMORY_ENV, gib, memory_budget
from cognate.errors import InputError
from cognate.matrix import Matrix

# Peak bytes per nonzero of packing one config, by family: measured with tracemalloc on a
# 10^7-nnz powerlaw graph (csr 78, panel 90, reordered 23; bcsr 75 plus the row clustering's
# 37), dia bounded by its layout (up to 20 x nnz float values beside its index arrays).
PACK_PEAK_PER_ENTRY: dict[str, int] = {
    "csr": 78,
    "panel": 90,
    "reordered": 23,
    "bcsr": 112,
    "dia": 120,
}
TRANSPOSE_PER_ENTRY = 48  # A^T's CSR and the entry map, with the transposition's temporaries


def resident_bytes() -> int:
    """This process's resident memory now."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def kernel_bytes(matrix: Matrix, op: str, knobs: Mapping[str, Any], width: int) -> int:
    """Bytes preparing one kernel adds: the pack's peak, the kernel's output buffer and, for
    a ``bf16`` kernel, the bfloat16 copy of B it keeps (per calling thread)."""
    from cognate.targets.cpu.families import family_of

    rows, cols = matrix.shape
    out = 4 * rows * width if op == "spmm" else 4 * matrix.nnz
    rounded_b = 2 * cols * width if knobs.get("bf16") else 0
    return PACK_PEAK_PER_ENTRY[family_of(knobs)] * matrix.nnz + 8 * rows + out + rounded_b


def transpose_bytes(matrix: Matrix) -> int:
    return TRANSPOSE_PER_ENTRY * matrix.nnz + 8 * matrix.shape[1]


def check_room(matrix: Matrix, what: str, needed: int) -> None:
    """``InputError`` naming the matrix when ``needed`` more bytes beside what this process
    holds would pass the memory budget."""
    held, budget = resident_bytes(), memory_budget()
    if held + needed > budget:
        raise InputError(
            matrix.source or matrix.name,
            f"{what} needs about {gib(needed)} GiB beside the {gib(held)} GiB this process"
            f" holds, over the memory budget of {gib(budget)} GiB ({MEMORY_ENV} to change)",
        )


# A measurement's prices, before its configs' families are known (collect's worker,
# tune --verify): bytes per stored entry of one packed A kept for a kernel (csr family: crd,
# values and each nonzero's slot; the template families store less) and the peak of packing
# one (the csr family's 64-bit level coordinates, sort key and permutation).
PACKED_PER_ENTRY = 24
MEASURE_PACK_PEAK_PER_ENTRY = 72


def operand_bytes(csr: sp.csr_matrix, op: str, width: int) -> int:
    """A's CSR and the dense inputs of a measurement (float32)."""
    rows, cols = csr.shape
    dense = cols if op == "spmm" else rows + cols
    return 12 * int(csr.nnz) + 8 * rows + 4 * dense * width


def measured_kernel_bytes(csr: sp.csr_matrix, op: str, width: int) -> tuple[int, int]:
    """(bytes one prepared kernel holds: its packed A and output; the peak of packing it)."""
    rows = csr.shape[0]
    out = 4 * rows * width if op == "spmm" else 4 * int(csr.nnz)
    held = PACKED_PER_ENTRY * int(csr.nnz) + 8 * rows + out
    return held, MEASURE_PACK_PEAK_PER_ENTRY * int(csr.nnz)
