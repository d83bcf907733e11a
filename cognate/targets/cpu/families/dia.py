"""DIA packing: A (its structured S) as diagonals, for kernels/cpu/dia_<op>.c.

A diagonal is a class of entries with the same offset (j - i) mod cols: a plain diagonal
j = i + o and the wrapped diagonals of DynaDiag's k-diagonal masks (column (i + o) mod cols)
are both one offset each, so a wrapped mask of K diagonals packs into K value vectors. Per
diagonal: an int32 offset in [0, cols) and a float32 vector of length rows (0 where the
diagonal has no entry in that row), interleaved per row tile of ``rtile`` rows so a tile
reads its values as one stream. Stored: about ndiag * (rows + 1) entries; over the size limit
the config is ``too_large``, refused from a small sample of the nonzeros before anything of
that size is allocated (a general matrix with thousands of diagonals costs microseconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cognate.targets.cpu.families import template
from cognate.targets.cpu.families.base import TooLarge, size_limit
from cognate.targets.cpu.families.template import FamilyKernel, FamilyPacked, index_maps
from cognate.targets.cpu.structured import StructuredView

SAMPLE_PER_DIAGONAL = 4  # sampled nonzeros per allowed diagonal in the quick refusal
SIZE_WORDS = "base.SIZE_FACTOR x nnz stored entries"


def _offsets(col: np.ndarray, row: np.ndarray, cols: int) -> np.ndarray:
    """The wrapped diagonal (j - i) mod cols of entries at (row, col)."""
    return (col.astype(np.int64) - row % cols) % cols


def _refuse_early(view: StructuredView, max_diagonals: int) -> None:
    """Distinct offsets of an evenly strided sample bound the diagonal count from below."""
    csr = view.csr
    want = SAMPLE_PER_DIAGONAL * max_diagonals + 64
    if csr.nnz <= want:
        return
    sample = np.linspace(0, csr.nnz - 1, want).astype(np.int64)
    row = np.searchsorted(csr.indptr, sample, side="right") - 1
    found = np.unique(_offsets(csr.indices[sample], row, csr.shape[1])).size
    if found > max_diagonals:
        raise TooLarge(
            f"DIA needs at least {found} diagonals of {csr.shape[0]} rows, over the limit"
            f" of {max_diagonals} diagonals ({SIZE_WORDS})"
        )


def pack_view(
    view: StructuredView,
    kernel: FamilyKernel,
    knobs: Mapping[str, Any],
    max_entries: int | None = None,
) -> FamilyPacked:
    """Pack S into diagonals; TooLarge when ndiag * (padded rows + 1) exceeds the limit."""
    csr = view.csr
    rows, cols = csr.shape
    limit = size_limit(csr) if max_entries is None else max_entries
    rtile = dict(kernel.params)["rtile"]
    tiles = -(-rows // rtile)
    max_diagonals = limit // (tiles * rtile + 1)  # values (padded to whole tiles) + offset
    _refuse_early(view, max_diagonals)
    row_of = np.repeat(np.arange(rows, dtype=np.int64), np.diff(csr.indptr))
    offsets = _offsets(csr.indices, row_of, cols)
    present = np.flatnonzero(np.bincount(offsets, minlength=cols))
    if present.size > max_diagonals:
        raise TooLarge(
            f"DIA needs {present.size} diagonals of {rows} rows, over the limit of"
            f" {max_diagonals} diagonals ({SIZE_WORDS})"
        )
    diagonal_of = np.full(cols, -1, dtype=np.int64)
    diagonal_of[present] = np.arange(present.size)
    # Per row tile of rtile rows, diagonal by diagonal (the kernels stream a tile's values).
    slots = ((row_of // rtile) * present.size + diagonal_of[offsets]) * rtile + row_of % rtile
    vals = np.zeros(tiles * rtile * present.size, dtype=np.float32)
    vals[slots] = csr.data
    nz_positions = np.empty(csr.nnz, dtype=np.int64)
    nz_positions[view.s_to_a] = slots
    col_map, row_map = index_maps(view)
    return FamilyPacked(
        kernel=kernel,
        shape=(rows, cols),
        arrays=[present.astype(np.int32), vals, col_map, row_map],
        integers=[rows, cols, int(present.size)],  # M, K (SpMM) or N (SDDMM), ndiag
        out_slots=vals.size,
        nz_positions=nz_positions,
        stored_entries=int(vals.size + present.size),
    )


# The family protocol (families/__init__.py): kernel_of, pack, source, bind.
kernel_of, pack, source, bind = template.protocol(pack_view, None)
