"""The csr family: WACO's SuperSchedule (a config without a ``family`` knob).

Pack a CSR matrix into the 4-level U/C layout a cpu config asks for (TACO-style levels),
generate its loop nest (codegen.py) and bind the compiled kernel (``KernelCall``).

Each of A's variables is split (x = x1 * split + x0) and the four split coordinates
become storage levels in the order they appear in the loop order. A U level stores no
arrays: its positions are parent * extent + coordinate over the padded extent
(ceil(dim / split) for x1, split for x0). A C level stores pos (int64, one more than
the parent's positions) and crd (int32, the level's coordinate of each position). The
values array has one slot per position of the last level; padding slots hold 0.

numpy-vectorised: one stable sort of a 64-bit key, then one pass per level.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.build import load_library
from cognate.errors import CognateError
from cognate.targets.cpu.call import BoundKernel, check_operands
from cognate.targets.cpu.codegen import OP_LOOPS, LoopStructure, generate_source, structure_of
from cognate.targets.cpu.families.base import PackSource, TooLarge, size_limit
from cognate.targets.cpu.knobs import runtime_knob
from cognate.targets.cpu.operands import zero_pages

RUNTIME_KNOBS = ("isplit", "ksplit", "jsplit", "chunk")


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
    source: PackSource,
    op: str,
    knobs: Mapping[str, Any],
    width: int | None,
    max_entries: int | None = None,
) -> PackedA:
    """Pack A's CSR for config ``knobs``; raise TooLarge before a big allocation.

    ``max_entries`` overrides the size limit of any one array (tests of padded layouts);
    ``width`` goes into the loop structure (a kernel specialised to that dense width).
    """
    csr = source.csr
    s = structure_of(op, knobs, width)
    splits = {var: int(knobs[f"{var}split"]) for var in OP_LOOPS[op].sparse}
    limit = size_limit(csr) if max_entries is None else max_entries
    if _is_row_major_csr(s, splits) and csr.has_canonical_format:
        return _pack_row_major(csr, s, splits, limit)
    return _pack_sorted(csr, s, splits, limit)


def _pack_sorted(
    csr: sp.csr_matrix, s: LoopStructure, splits: Mapping[str, int], limit: int
) -> PackedA:
    """Any layout: sort the nonzeros by their level coordinates, then one pass per level."""
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


def _is_row_major_csr(s: LoopStructure, splits: Mapping[str, int]) -> bool:
    """Plain CSR with padded row blocks: levels i1 U, i0 U, k1 C, k0 U with ksplit 1."""
    row, col = s.loops.sparse
    want = ((f"{row}1", "U"), (f"{row}0", "U"), (f"{col}1", "C"), (f"{col}0", "U"))
    return tuple(s.levels) == want and splits[col] == 1


def _pack_row_major(
    csr: sp.csr_matrix, s: LoopStructure, splits: Mapping[str, int], limit: int
) -> PackedA:
    """The general pack's result for plain CSR, read off A's own arrays. Why a fast path:
    a canonical CSR is already in this layout's order (no sort, no per-level pass), and a
    mini-batch packs a new adjacency every step (2 ms -> a copy of A's arrays)."""
    rows, cols = (int(d) for d in csr.shape)
    row_split = splits[s.loops.sparse[0]]
    blocks = -(-rows // row_split)
    padded = blocks * row_split
    # The general pack's checks, in its order: the same TooLarge for the same layout.
    _check(blocks, limit, f"level 0 ({s.levels[0][0]}, U)")
    _check(padded, limit, f"level 1 ({s.levels[1][0]}, U)")
    _check(padded + 1, limit, f"level 2 ({s.levels[2][0]}, C) pos")
    _check(csr.nnz, limit, f"level 3 ({s.levels[3][0]}, U)")
    pos = np.empty(padded + 1, dtype=np.int64)
    pos[: rows + 1] = csr.indptr
    pos[rows + 1 :] = csr.indptr[-1]  # the padding rows are empty
    return PackedA(
        s,
        (rows, cols),
        dict(splits),
        (blocks, row_split, cols, 1),
        [None, None, pos, None],
        [None, None, csr.indices.astype(np.int32), None],
        csr.data.astype(np.float32),
        np.arange(csr.nnz, dtype=np.int64),
    )


def source(op: str, knobs: Mapping[str, Any], width: int) -> tuple[str, str, dict[str, Any]]:
    """(C source, entry point, runtime arguments) of a csr config specialised to ``width``."""
    # structure_of re-validates every knob against the whitelists before codegen.
    structure = structure_of(op, knobs, width)
    args = {knob: runtime_knob(knobs, knob) for knob in RUNTIME_KNOBS}
    return generate_source(structure), OP_LOOPS[op].function, args


def bind(
    lib_path: str, packed: PackedA, knobs: Mapping[str, Any], operands: tuple[np.ndarray, ...]
) -> BoundKernel:
    return KernelCall(lib_path, packed, knobs, operands)


def _function(lib_path: str, op: str) -> Any:
    fn = getattr(load_library(lib_path), OP_LOOPS[op].function)
    fn.restype = None
    pointers = 11 if op == "spmm" else 12
    fn.argtypes = [ctypes.c_void_p] * pointers + [ctypes.c_int64] * (7 if op == "spmm" else 8)
    return fn


def _address(array: np.ndarray | None) -> int | None:
    return None if array is None else array.ctypes.data


class KernelCall(BoundKernel):
    """One CSR-family kernel bound to its packed A, dense inputs and output buffer."""

    def __init__(
        self,
        lib_path: str,
        packed: PackedA,
        knobs: Mapping[str, Any],
        operands: tuple[np.ndarray, ...],
    ) -> None:
        op = packed.structure.op
        self.op = op
        self.packed = packed
        self.operands = tuple(np.ascontiguousarray(a, dtype=np.float32) for a in operands)
        width = check_operands(op, packed.shape, self.operands)
        if packed.structure.width not in (None, width):  # a wrong width would overrun rows
            raise CognateError(
                f"cpu {op}: kernel built for dense width {packed.structure.width}, operands"
                f" have width {width}"
            )
        rows, cols = packed.shape
        dense_split = runtime_knob(knobs, "jsplit" if op == "spmm" else "ksplit")
        chunk = runtime_knob(knobs, "chunk")
        levels = [a for pair in zip(packed.pos, packed.crd, strict=True) for a in pair]
        if op == "spmm":
            self.out = zero_pages((rows, width), np.float32)
            tail = [rows, cols, width, packed.splits["i"], packed.splits["k"], dense_split, chunk]
            arrays = [*levels, packed.vals, self.operands[0], self.out]
        else:
            self.out = zero_pages((packed.vals.size,), np.float32)
            tail = [self.out.size, rows, cols, width, packed.splits["i"], packed.splits["j"]]
            tail += [dense_split, chunk]
            arrays = [*levels, packed.vals, *self.operands, self.out]
        self._fn = _function(lib_path, op)
        self._args = [_address(a) for a in arrays] + tail
        self._pointers = len(arrays)
