"""Reordered-CSR packing: rows run in a chosen order, for kernels/cpu/reordered_<op>.c.

Knobs (all runtime, none reaches C source as text): ``by`` the row order (row_orders.py:
``rcm``, ``degree``, ``cluster``; computed here in Python), ``symmetric`` (0: only the order
rows run in changes; 1: rows and columns renumbered alike, A' = P A P^T, square matrices
only), ``strip`` (dense columns per pass: 32, 128, 1024; for SpMM the columns of C and B,
for SDDMM the columns of the dot products, whose partial sums accumulate in the output) and
``chunk`` (average rows per dynamic task, balanced by entries + 1 per row).

Layout (pointer arrays in signature order):

- ``indptr`` int64 (M + 1), ``crd`` int32 and ``vals`` float32 (nnz): A in its own CSR
  entry order, so the SDDMM output is A's values array (``nz_positions`` is the identity: the
  user path writes straight into the caller's output, and values trained in place at
  ``value_slots`` are A's entries). For a permuted Matrix the order is computed on S (the
  structure, structured.py) and folded into the index maps: the kernel runs A row
  ``row_map[order[t]]`` t-th, and ``crd`` holds ``col_map`` applied to S's columns, which
  are A's own columns; so no map is read per entry and no slot permutation is needed.
  symmetric = 1: ``crd`` holds the renumbered columns ``new_of_old[S column]`` instead.
- ``rows`` int32 (M): the A row run t-th; ``weights`` int64 (M + 1): prefix of entries + 1
  over the rows in run order (the kernel's weight-balanced tasks).
- ``gather`` int32 (K; symmetric = 1): B's row (SDDMM: Y's row) that becomes row u of the
  renumbered operand, ``col_map[order[u]]``; one unused entry otherwise.
- ``scratch`` (K x width; symmetric = 1): the buffer the kernel gathers B (Y) into at the
  start of every call. Allocated once here, beside the arrays it serves, rather than per call
  (a fresh allocation each call would pay page faults on every call) or in the shared call
  classes (template.FamilyCall, tuned.TunedKernel bind only ``packed.arrays``, so the
  buffer travels with them unchanged). Its dtype is uint32 (4-byte words the kernel reads as
  float): the packed layout's one float32 array stays A's values, which ``packed_values``
  looks for. Like the SDDMM slots of padded layouts it makes a packed A single-threaded (two
  concurrent calls would share it). It is operand-sized, not part of A's format: it is not
  counted in ``stored_entries`` nor held to the size limit (B itself has this size).

Integers: M, K (A's rows, columns), strip, symmetric (then FamilyCall appends chunk).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cognate.errors import CognateError
from cognate.targets.cpu.families import template
from cognate.targets.cpu.families.base import TooLarge, size_limit
from cognate.targets.cpu.families.template import FamilyKernel, FamilyPacked
from cognate.targets.cpu.knobs import choice_knob
from cognate.targets.cpu.row_orders import ORDERS, check_by, row_order
from cognate.targets.cpu.structured import StructuredView

STRIPS: tuple[int, ...] = (32, 128, 1024)
SYMMETRIC: tuple[int, ...] = (0, 1)
WHERE = "cpu reordered"
# The family's own knobs and their legal values (the space YAML may list a subset).
KNOBS: dict[str, tuple[str | int, ...]] = {"by": ORDERS, "symmetric": SYMMETRIC, "strip": STRIPS}


def check_knobs(knobs: Mapping[str, Any]) -> tuple[str, int, int]:
    """(by, symmetric, strip) of a reordered config, each checked (one-line CognateError);
    ``chunk`` is checked by template.kernel_of."""
    by = check_by(knobs.get("by"))
    symmetric = choice_knob(knobs, "symmetric", SYMMETRIC, WHERE)
    return by, symmetric, choice_knob(knobs, "strip", STRIPS, WHERE)


def pack_view(
    view: StructuredView,
    kernel: FamilyKernel,
    knobs: Mapping[str, Any],
    max_entries: int | None = None,
) -> FamilyPacked:
    """Pack A (through its structured view) for a reordered kernel."""
    by, symmetric, strip = check_knobs(knobs)
    csr = view.csr
    rows, cols = csr.shape
    nnz = int(csr.nnz)
    if symmetric and rows != cols:
        raise CognateError(
            f"cpu {kernel.op} reordered: symmetric=1 renumbers rows and columns alike and needs"
            f" a square matrix, got {rows}x{cols}"
        )
    limit = size_limit(csr) if max_entries is None else max_entries
    largest = max(nnz, rows + 1, cols if symmetric else 1)  # the largest array of A's layout
    if largest > limit:
        raise TooLarge(f"reordered CSR needs an array of {largest} entries, over the limit {limit}")
    order = row_order(view, by).astype(np.int64)
    counts = np.diff(csr.indptr).astype(np.int64)  # S's row lengths = A's, by row_map
    row_map = np.asarray(view.row_map, dtype=np.int64)
    col_map = np.asarray(view.col_map, dtype=np.int32)
    indptr = np.zeros(rows + 1, dtype=np.int64)
    a_counts = np.empty(rows, dtype=np.int64)
    a_counts[row_map] = counts
    np.cumsum(a_counts, out=indptr[1:])
    weights = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(counts[order] + 1, out=weights[1:])
    if symmetric:
        new_of_old = np.empty(cols, dtype=np.int32)
        new_of_old[order] = np.arange(rows, dtype=np.int32)
        s_cols = new_of_old[csr.indices]
        gather = np.ascontiguousarray(col_map[order])
        scratch = np.empty(cols * kernel.width, dtype=np.uint32)
    else:
        s_cols = col_map[csr.indices]
        gather = np.zeros(1, dtype=np.int32)
        scratch = np.zeros(1, dtype=np.uint32)
    # S's entry s is A's entry s_to_a[s]: store both arrays in A's CSR entry order.
    crd = np.empty(nnz, dtype=np.int32)
    crd[view.s_to_a] = s_cols
    vals = np.empty(nnz, dtype=np.float32)
    vals[view.s_to_a] = csr.data
    run_rows = row_map[order].astype(np.int32)
    return FamilyPacked(
        kernel=kernel,
        shape=(rows, cols),
        arrays=[indptr, run_rows, weights, crd, vals, gather, scratch],
        integers=[rows, cols, strip, symmetric],
        out_slots=nnz,
        nz_positions=np.arange(nnz, dtype=np.int64),
        stored_entries=int(indptr.size + run_rows.size + weights.size + 2 * nnz + gather.size),
    )


# The family protocol (families/__init__.py): kernel_of, pack, source, bind.
kernel_of, pack, source, bind = template.protocol(pack_view, check_knobs)
