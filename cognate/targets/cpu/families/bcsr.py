"""BCSR over clustered rows (rows with similar column sets packed next to each other), for kernels/cpu/bcsr_<op>.c.

S's rows are reordered by ``cognate.targets.cpu.row_clusters.cached_cluster_rows`` (rows with
similar column sets, Jaccard similarity blended with diagonal proximity by the ``blend``
knob, end up adjacent; computed once per matrix and blend, cached on disk), then cut into
block rows of ``brows`` consecutive reordered rows and ``bcols``-aligned block columns;
only blocks holding an entry are stored, each as a dense brows x bcols tile. The kernel
writes block row b's rows to C rows ``out_rows[b * brows + r]``: the reordering and a row
permutation of A are one index map (no permute pass). Over the size limit: ``too_large``,
decided from the block count before the tiles are allocated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cognate.targets.cpu.families import template
from cognate.targets.cpu.families.base import TooLarge, size_limit
from cognate.targets.cpu.families.template import FamilyKernel, FamilyPacked, index_maps
from cognate.targets.cpu.row_clusters import cached_cluster_rows
from cognate.targets.cpu.structured import StructuredView


def cluster_order(view: StructuredView, blend: float) -> np.ndarray:
    """order[new_position] = S row: the row clustering, cached on disk by S's sha256 (the
    cache returns only validated int32 permutations)."""
    return cached_cluster_rows(view.csr, view.key, float(blend))


def pack_view(
    view: StructuredView,
    kernel: FamilyKernel,
    knobs: Mapping[str, Any],
    max_entries: int | None = None,
) -> FamilyPacked:
    """Pack S's reordered rows into dense blocks; TooLarge when the tiles exceed the limit."""
    csr = view.csr
    rows, cols = csr.shape
    params = dict(kernel.params)
    br, bc = params["brows"], params["bcols"]
    limit = size_limit(csr) if max_entries is None else max_entries
    order = cluster_order(view, knobs["blend"])
    new_of_old = np.empty(rows, dtype=np.int64)
    new_of_old[order] = np.arange(rows)
    new_row = new_of_old[np.repeat(np.arange(rows), np.diff(csr.indptr))]
    block_rows, block_cols = -(-rows // br), -(-cols // bc)
    block_key = (new_row // br) * block_cols + csr.indices // bc
    blocks, block_of = np.unique(block_key, return_inverse=True)
    tile = br * bc
    if blocks.size * tile > limit:
        raise TooLarge(
            f"BCSR {br}x{bc} needs {blocks.size} blocks = {blocks.size * tile} values,"
            f" over the limit {limit}"
        )
    bptr = np.zeros(block_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(blocks // block_cols, minlength=block_rows), out=bptr[1:])
    slots = block_of * tile + (new_row % br) * bc + csr.indices % bc
    vals = np.zeros(blocks.size * tile, dtype=np.float32)
    vals[slots] = csr.data
    nz_positions = np.empty(csr.nnz, dtype=np.int64)
    nz_positions[view.s_to_a] = slots
    col_map, row_map = index_maps(view)
    out_rows = np.full(block_rows * br, -1, dtype=np.int32)
    out_rows[:rows] = row_map[order]
    return FamilyPacked(
        kernel=kernel,
        shape=(rows, cols),
        arrays=[bptr, (blocks % block_cols).astype(np.int32), vals, col_map, out_rows],
        integers=[cols, block_rows],
        out_slots=vals.size,
        nz_positions=nz_positions,
        stored_entries=int(vals.size + blocks.size + bptr.size),
    )


# The family protocol (families/__init__.py): kernel_of, pack, source, bind.
kernel_of, pack, source, bind = template.protocol(pack_view, None)
