"""Pack a CSR matrix into the 4-level U/C layout a cpu config asks for (TACO-style levels).

Each of A's variables is split (x = x1 * split + x0) and the four split coordinates
become storage levels in the order they appear in the loop order. A U level stores no
arrays: its positions are parent * extent + coordinate over the padded extent
(ceil(dim / split) for x1, split for x0). A C level stores pos (int64, one more than
the parent's positions) and crd (int32, the level's coordinate of each position). The
values array has one slot per position of the last level; padding slots hold 0.

numpy-vectorised: one stable sort of a 64-bit key, then one pass per level.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.targets.cpu.codegen import OP_LOOPS, LoopStructure, structure_of

# WACO refuses formats that store more than 20 x nnz entries.
SIZE_FACTOR = 20


class TooLarge(CognateError):
    """The packed format would exceed the size limit (status ``too_large``)."""


@dataclass
class PackedA:
    """A in one config's layout, ready for the kernel."""

    structure: LoopStructure
    shape: tuple[int, int]
    splits: dict[str, int]  # sparse variable -> split
    extents: tuple[int, ...]  # per level (padded for U levels; parent-free for C levels)
    pos: list[np.ndarray | None]  # per level, int64 (C levels only)
    crd: list[np.ndarray | None]  # per level, int32 (C levels only)
    vals: np.ndarray  # float32, one per position of the last level
    nz_positions: np.ndarray = field(repr=False)  # CSR nonzero -> its slot in vals

    @property
    def stored_entries(self) -> int:
        """All stored numbers: values plus pos/crd entries."""
        arrays = [a for a in (*self.pos, *self.crd) if a is not None]
        return int(self.vals.size + sum(a.size for a in arrays))


def size_limit(csr: sp.csr_matrix) -> int:
    """Largest allowed array: 20 x nnz, but never below plain CSR's row pointer (M + 1)."""
    return max(SIZE_FACTOR * int(csr.nnz), int(csr.shape[0]) + 1)


def _level_coords(
    csr: sp.csr_matrix, s: LoopStructure, splits: Mapping[str, int]
) -> tuple[list[np.ndarray], list[int]]:
    """Per level: every nonzero's coordinate (CSR order) and the level's padded extent."""
    rows = np.repeat(np.arange(csr.shape[0], dtype=np.int64), np.diff(csr.indptr))
    full = {s.loops.sparse[0]: rows, s.loops.sparse[1]: csr.indices.astype(np.int64)}
    dims = {s.loops.sparse[0]: csr.shape[0], s.loops.sparse[1]: csr.shape[1]}
    coords, extents = [], []
    for name, _ in s.levels:
        var, part = name[0], name[1]
        split = splits[var]
        if part == "1":
            coords.append(full[var] // split)
            extents.append(-(-dims[var] // split))
        else:
            coords.append(full[var] % split)
            extents.append(split)
    return coords, extents


def _check(size: int, limit: int, what: str) -> None:
    if size > limit:
        raise TooLarge(f"packed A needs {size} entries in {what}, over the limit {limit}")


def pack(
    csr: Any,
    op: str,
    knobs: Mapping[str, Any],
    max_entries: int | None = None,
    width: int | None = None,
) -> Any:
    """Pack canonical CSR ``csr`` for config ``knobs``; raise TooLarge before a big allocation.

    ``max_entries`` overrides the size limit of any one array (tests of padded layouts);
    ``width`` goes into the loop structure (a kernel specialised to that dense width).
    A DIA/BCSR config (a ``family`` knob) is packed by its family (families.py: a
    ``FamilyPacked``; ``csr`` may then be a Matrix, whose row/column permutations it absorbs).
    """
    if knobs.get("family", "csr") != "csr":
        from cognate.targets.cpu.families import pack_family

        if width is None:
            raise CognateError(f"cpu {op}: a {knobs['family']} kernel needs the dense width")
        return pack_family(csr, op, knobs, width, max_entries)
    csr = getattr(csr, "csr", csr)  # a Matrix: its CSR
    s = structure_of(op, knobs, width)
    splits = {var: int(knobs[f"{var}split"]) for var in OP_LOOPS[op].sparse}
    limit = size_limit(csr) if max_entries is None else max_entries
    coords, extents = _level_coords(csr, s, splits)
    # Lexicographic order of the level coordinates as one int64 key: the product of the
    # padded extents is below (M + split) * (K + split) < 2**63.
    key = np.zeros(csr.nnz, dtype=np.int64)
    for coord, extent in zip(coords, extents, strict=True):
        key = key * extent + coord
    perm = np.argsort(key, kind="stable")
    del key
    parent = np.zeros(csr.nnz, dtype=np.int64)  # each nonzero's position at the level above
    parents = 1  # number of positions at the level above
    pos: list[np.ndarray | None] = []
    crd: list[np.ndarray | None] = []
    for level, ((name, fmt), coord, extent) in enumerate(
        zip(s.levels, coords, extents, strict=True)
    ):
        coord = coord[perm]
        if fmt == "U":
            _check(parents * extent, limit, f"level {level} ({name}, U)")
            parent = parent * extent + coord
            parents *= extent
            pos.append(None)
            crd.append(None)
            continue
        _check(parents + 1, limit, f"level {level} ({name}, C) pos")
        starts = np.ones(csr.nnz, dtype=bool)
        starts[1:] = (parent[1:] != parent[:-1]) | (coord[1:] != coord[:-1])
        counts = np.bincount(parent[starts], minlength=parents)
        level_pos = np.zeros(parents + 1, dtype=np.int64)
        np.cumsum(counts, out=level_pos[1:])
        pos.append(level_pos)
        crd.append(coord[starts].astype(np.int32))
        parent = np.cumsum(starts) - 1
        parents = int(level_pos[-1])
    _check(parents, limit, "values")
    vals = np.zeros(parents, dtype=np.float32)
    vals[parent] = csr.data[perm]
    nz_positions = np.empty(csr.nnz, dtype=np.int64)
    nz_positions[perm] = parent
    return PackedA(
        s,
        (int(csr.shape[0]), int(csr.shape[1])),
        splits,
        tuple(extents),
        pos,
        crd,
        vals,
        nz_positions,
    )
