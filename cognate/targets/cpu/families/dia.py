"""DIA packing: A (its structured S) as diagonals, for kernels/cpu/dia_<op>.c.

A diagonal is a class of entries with the same offset (j - i) mod cols: a plain diagonal
j = i + o and the wrapped diagonals of DynaDiag's k-diagonal masks (column (i + o) mod cols)
are both one offset each. Values are stored per row tile of ``rtile`` rows, ``rtile`` values
per (tile, diagonal) entry (0 where the diagonal has no entry in that row), so a tile reads
its values as one stream. Two layouts, the one storing fewer values is packed:

- **global** (classic DIA): every tile holds every diagonal; one int32 offset per diagonal.
  Values: ndiag x rows padded to whole tiles.
- **tile-local**: a tile holds only the diagonals with an entry in its rows; per entry the
  int32 column of the tile's first row, and an int64 pointer per tile into the entries.
  Values: rtile per (tile, diagonal present in the tile). A diagonal that covers only part
  of the rows pads just where it starts or ends inside a tile. DynaDiag's out > in layers
  (3072 x 768: 308 diagonals of 768 rows fall into ~258 offset classes of 3072 rows) store
  ~1.0x nnz this way against ~3.4x in the global layout, whose padding the kernel multiplies.

Admission (the DIA rule size_check.py checks too): A is refused (``too_large``) when its distinct
diagonals, as full vectors of the padded rows plus an offset each, exceed the size limit; a
general matrix with thousands of diagonals is refused from a small sample of the nonzeros,
before anything of that size is allocated (microseconds). The layout packed then stores at
most the limit: a tile-local layout is counted before its arrays are allocated and, where it
would exceed the limit (rtile 1 on full-length diagonals), the global one is packed instead.
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
GLOBAL, LOCAL = 0, 1  # the kernels' ``local`` argument


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
    """Pack S into diagonals (global or tile-local, whichever stores fewer values);
    TooLarge when ndiag * (padded rows + 1) exceeds the limit."""
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
    ndiag = int(present.size)
    if ndiag > max_diagonals:
        raise TooLarge(
            f"DIA needs {ndiag} diagonals of {rows} rows, over the limit of"
            f" {max_diagonals} diagonals ({SIZE_WORDS})"
        )
    diagonal_of = np.full(cols, -1, dtype=np.int64)
    diagonal_of[present] = np.arange(ndiag)
    # (tile, diagonal) of every entry, tile-major: its entry in the global layout.
    pair = (row_of // rtile) * ndiag + diagonal_of[offsets]
    used = np.zeros(tiles * ndiag, dtype=bool)  # at most limit / rtile: within the limit
    used[pair] = True
    pairs = np.flatnonzero(used)  # sorted: tile by tile, diagonals in offset order
    # Tile-local where it stores fewer values (fewer multiply-adds) and fits the limit; else
    # global, which the diagonal rule above admitted.
    local_entries = pairs.size * (rtile + 1) + tiles + 1
    if pairs.size < tiles * ndiag and local_entries <= limit:
        tile_of = pairs // ndiag
        tptr = np.searchsorted(tile_of, np.arange(tiles + 1, dtype=np.int64)).astype(np.int64)
        starts = (tile_of * rtile + present[pairs % ndiag]) % cols
        index, layout, entries = starts.astype(np.int32), LOCAL, np.searchsorted(pairs, pair)
        count = pairs.size
    else:
        tptr = np.zeros(0, dtype=np.int64)  # not read in the global layout
        index, layout, entries = present.astype(np.int32), GLOBAL, pair
        count = tiles * ndiag
    slots = entries * rtile + row_of % rtile
    vals = np.zeros(count * rtile, dtype=np.float32)
    vals[slots] = csr.data
    nz_positions = np.empty(csr.nnz, dtype=np.int64)
    nz_positions[view.s_to_a] = slots
    col_map, row_map = index_maps(view)
    identity = bool(np.array_equal(col_map, np.arange(cols, dtype=np.int32)))
    return FamilyPacked(
        kernel=kernel,
        shape=(rows, cols),
        arrays=[tptr, index, vals, col_map, row_map],
        # M, K (SpMM) or N (SDDMM), ndiag (distinct offsets), layout, col_map the identity
        integers=[rows, cols, ndiag, layout, int(identity)],
        out_slots=vals.size,
        nz_positions=nz_positions,
        stored_entries=int(vals.size + index.size + tptr.size),
    )


# The family protocol (families/__init__.py): kernel_of, pack, source, bind.
kernel_of, pack, source, bind = template.protocol(pack_view, None)
