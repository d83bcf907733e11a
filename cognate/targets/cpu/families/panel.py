"""Column-panel packing (ASpT-style tiling, Hong et al., PPoPP'19), for kernels/cpu/panel_<op>.c.

S (A's structured matrix: A itself without row/column permutations) is cut into column
panels of ``pcols`` consecutive columns and row blocks of ``rblock`` consecutive rows. The
kernels give whole row blocks to a thread (dynamic OpenMP, ``chunk`` blocks per claim) and
run each block panel by panel, so the panel's slice of the dense operand (B for SpMM, Y for
SDDMM: pcols x width floats) stays in L2/LLC while the block's rows read it. A panel wider
than the matrix leaves one panel: plain CSR cut into blocks.

Packed arrays, entries sorted by (row block, panel, row, CSR order); a segment is one row's
entries in one panel:

- ``blk_seg`` int64 (nblocks + 1): the segments of each row block;
- ``seg_row`` int32 (S row) and ``seg_ptr`` int64 (nseg + 1: its entries);
- ``crd`` int32: per entry the dense operand's row, i.e. A's column (S's column through
  ``col_map``: a column permutation is applied here, at pack time);
- SpMM: ``vals`` float32 in packed order; ``nz_positions`` = each A entry's packed position.
- SDDMM: ``slot`` int64, each packed entry's index in A's CSR arrays, and ``vals`` float32 in
  A's CSR order. The kernel reads ``vals[slot[p]]`` and writes ``out[slot[p]]``: the output
  comes out in A's order (``out_slots`` = nnz, ``nz_positions`` the identity, also for a
  permuted matrix), so the user path writes the caller's array directly, and
  ``packed_values`` / ``value_slots`` (the identity) stay truthful: values trained in place
  in A's order are what the next call reads. The price is one indirection per entry on the
  values' read (on the cache line of the output write).
- ``row_map`` int32: C / X rows (the row permutation, absorbed in the kernel's index map).

SpMM writes a row's C tile in its first panel and accumulates (load, add in registers,
store) in later ones; rows without entries are zeroed at the end of their block.

Left out of ASpT: its split of each row panel into dense column segments (columns with
many entries in the panel, reordered to the front and run as a dense tile whose B rows are
reused from cache) and a sparse remainder run row by row. Here every panel is run row by
row; the reuse comes only from the panel's B slice staying in cache.

``pcols`` and ``rblock`` are pack-time / runtime values (not compiled in: one kernel per
dense width serves every panel shape). The size limit applies to any one array, as for the
csr family (families/csr.py); every array here is at most nnz + 1 or M + 1 long, so only a small
``max_entries`` refuses a matrix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cognate.targets.cpu.families import template
from cognate.targets.cpu.families.base import TooLarge, size_limit
from cognate.targets.cpu.families.template import FamilyKernel, FamilyPacked, index_maps
from cognate.targets.cpu.knobs import choice_knob
from cognate.targets.cpu.structured import StructuredView

PCOLS: tuple[int, ...] = (1024, 4096, 16384, 65536)
RBLOCKS: tuple[int, ...] = (32, 128, 512)  # MAX_RBLOCK in panel_spmm.c is the largest
# The family's own knobs and their legal values (the space YAML may list a subset).
KNOBS: dict[str, tuple[int, ...]] = {"pcols": PCOLS, "rblock": RBLOCKS}


def check_knobs(knobs: Mapping[str, Any]) -> tuple[int, int]:
    """(pcols, rblock) of a panel config, checked against their legal values (one line)."""
    pcols = choice_knob(knobs, "pcols", PCOLS, "cpu panel")
    return pcols, choice_knob(knobs, "rblock", RBLOCKS, "cpu panel")


def _check(size: int, limit: int, what: str) -> None:
    if size > limit:
        raise TooLarge(f"panel layout needs {size} entries in {what}, over the limit {limit}")


def pack_view(
    view: StructuredView,
    kernel: FamilyKernel,
    knobs: Mapping[str, Any],
    max_entries: int | None = None,
) -> FamilyPacked:
    """Pack S into row blocks of column-panel segments; TooLarge when an array exceeds the
    limit (the entry arrays and block pointers are checked before the sort)."""
    pcols, rblock = check_knobs(knobs)
    csr = view.csr
    rows, cols = csr.shape
    nnz = int(csr.nnz)
    limit = size_limit(csr) if max_entries is None else max_entries
    nblocks = -(-rows // rblock)
    npanels = max(1, -(-cols // pcols))
    _check(nnz, limit, "the entries")
    _check(nblocks + 1, limit, "the block pointers")
    row_of = np.repeat(np.arange(rows, dtype=np.int64), np.diff(csr.indptr))
    indices = csr.indices.astype(np.int64)
    starts = np.ones(nnz, dtype=bool)
    if npanels == 1:  # one panel: CSR order already is (block, row) order
        perm = np.arange(nnz, dtype=np.int64)
        row_s = row_of
        starts[1:] = row_s[1:] != row_s[:-1]
    else:
        panel = indices // pcols
        key = ((row_of // rblock) * npanels + panel) * rblock + row_of % rblock
        perm = np.argsort(key, kind="stable")  # stable: CSR order within a segment
        del key
        row_s, panel_s = row_of[perm], panel[perm]
        starts[1:] = (row_s[1:] != row_s[:-1]) | (panel_s[1:] != panel_s[:-1])
    first = np.flatnonzero(starts)
    _check(first.size + 1, limit, "the segment pointers")
    seg_ptr = np.empty(first.size + 1, dtype=np.int64)
    seg_ptr[:-1], seg_ptr[-1] = first, nnz
    seg_row = row_s[first]
    blk_seg = np.zeros(nblocks + 1, dtype=np.int64)
    np.cumsum(np.bincount(seg_row // rblock, minlength=nblocks), out=blk_seg[1:])
    col_map, row_map = index_maps(view)
    crd = col_map[indices[perm]]  # the dense operand's row: A's column
    s_to_a = view.s_to_a
    if kernel.op == "spmm":
        vals = csr.data[perm].astype(np.float32)  # a copy: training in place never
        nz_positions = np.empty(nnz, dtype=np.int64)  # touches the caller's matrix
        nz_positions[s_to_a[perm]] = np.arange(nnz, dtype=np.int64)
        arrays = [blk_seg, seg_row.astype(np.int32), seg_ptr, crd, vals, row_map]
        integers = [rows, rblock, nblocks]
    else:
        slot = np.ascontiguousarray(s_to_a[perm], dtype=np.int64)
        vals = np.empty(nnz, dtype=np.float32)  # A's CSR order
        vals[s_to_a] = csr.data
        nz_positions = np.arange(nnz, dtype=np.int64)
        arrays = [blk_seg, seg_row.astype(np.int32), seg_ptr, crd, slot, vals, row_map]
        integers = [nblocks]
    return FamilyPacked(
        kernel=kernel,
        shape=(rows, cols),
        arrays=[np.ascontiguousarray(a) for a in arrays],
        integers=integers,
        out_slots=nnz,
        nz_positions=nz_positions,
        stored_entries=int(sum(a.size for a in arrays[:-1])),  # row_map: an index map
    )


# The family protocol (families/__init__.py): kernel_of, pack, source, bind.
kernel_of, pack, source, bind = template.protocol(pack_view, check_knobs)
