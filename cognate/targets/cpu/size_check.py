"""Whether a cpu config's packed layout stays within the size limit, decided from sizes.

``tune`` and ``collect`` check their top picks against the size limit (20 x nnz entries per
array, families/base.py) before measuring or returning them. Packing each pick to find out
would cost a pack's memory and time per pick (docs/benchmarks.md, "Scale"), so instead each
family's array sizes are bounded from the matrix's shape, nnz and row / column statistics:

- csr (WACO's levels): a U level stores parents x extent positions, a C level one position
  per distinct coordinate prefix among the nonzeros. A prefix's distinct count lies between
  what its row parts alone and its column parts alone give (from the row lengths and the
  column counts, cached per matrix) and the product of its extents, capped by nnz; where these
  bounds do not decide, the exact count is one chunked pass over the nonzeros (no pack).
- dia: one value vector per distinct wrapped diagonal; a strided sample of the nonzeros
  refuses most general matrices at once, else one chunked pass counts the diagonals.
- bcsr: between D / brows and D stored blocks, D the distinct (row, bcols-block) pairs (one
  chunked pass); the exact count needs the row clustering, so an undecided config is packed
  on small matrices (``EXACT_PACK_NNZ``) and refused on larger ones (conservative: a config
  ``tune`` returns always runs).
- reordered and panel: every array is at most nnz + 1 or M + 1 (or K) long.

Extra memory: the column counts (8 bytes per column) and chunks of ``CHUNK`` nonzeros; the
pack itself happens once, for the configs actually measured or returned as kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.targets.cpu import families, pipeline
from cognate.targets.cpu.codegen import OP_LOOPS, structure_of

CHUNK = 1 << 22  # nonzeros per pass chunk (~100 MB of int64 temporaries)
EXACT_PACK_NNZ = 1 << 21  # below this an undecided bcsr config is decided by packing it
DIA_SAMPLE_PER_DIAGONAL = 4
# (row parts, column parts, row split, column split) of a coordinate prefix; its bounds.
PartsKey = tuple[tuple[str, ...], tuple[str, ...], int, int]
Bounds = tuple[int, int, PartsKey | None]


class SizeCheck:
    """The size-only runnable check of one matrix (statistics computed once, on demand)."""

    def __init__(self, matrix: Any, op: str, width: int) -> None:
        self.source = families.pack_source(matrix)
        self.op, self.width = op, width
        self._exact: dict[Any, int] = {}

    # --- the matrix the families pack: A's CSR, or S (the structured view) if permuted ----

    @cached_property
    def csr(self) -> sp.csr_matrix:
        """The CSR the csr family packs: A's own."""
        return self.source.csr

    @cached_property
    def structured(self) -> sp.csr_matrix:
        """The CSR the template families pack: S, which is A where A has no permutations."""
        src = self.source
        if src.row_perm is None and src.col_perm is None:
            try:
                return src.csr  # no permutation: S is A (no view to build)
            except CognateError:  # a structured view was given, not A's CSR
                pass
        return src.view.csr

    def __call__(self, knobs: Mapping[str, Any]) -> bool:
        family = families.family_of(knobs)
        try:
            if family == families.CSR:
                self._check_csr(knobs)
            elif family == "dia":
                self._check_dia(knobs)
            elif family == "bcsr":
                return self._check_bcsr(knobs)
            elif family == "reordered":
                return self._check_reordered(knobs)
            else:  # panel: every array is at most nnz + 1 or M + 1 long
                families.module_of(family).kernel_of(self.op, knobs, self.width)
                self._need(max(self.structured.nnz, self.structured.shape[0]) + 1)
        except families.TooLarge:
            return False
        return True

    @cached_property
    def limit(self) -> int:
        """The size limit (A and S have the same shape and nnz)."""
        try:
            return families.size_limit(self.csr)
        except CognateError:
            return families.size_limit(self.structured)

    def _need(self, entries: int, what: str = "an array") -> None:
        if entries > self.limit:
            raise families.TooLarge(f"{what} needs {entries} entries, over the limit {self.limit}")

    # --- csr: WACO's U/C levels -------------------------------------------------------------

    def _check_csr(self, knobs: Mapping[str, Any]) -> None:
        s = structure_of(self.op, knobs, self.width)
        row_var, col_var = OP_LOOPS[self.op].sparse
        rows, cols = self.csr.shape
        isplit, csplit = int(knobs[f"{row_var}split"]), int(knobs[f"{col_var}split"])
        splits, dims = {row_var: isplit, col_var: csplit}, {row_var: rows, col_var: cols}
        prefix: list[str] = []  # the levels whose coordinates tell positions apart so far
        parents: Bounds = (1, 1, None)  # positions at the level above (lo, hi, what counts)
        multiplier = 1  # U levels below the last C level multiply its positions
        for name, fmt in s.levels:
            var, part = name[0], name[1]
            extent = -(-dims[var] // splits[var]) if part == "1" else splits[var]
            prefix.append(name)
            if fmt == "U":
                multiplier *= extent
                self._bound(parents, multiplier, 0, f"level {name} (U)")
                continue
            self._bound(parents, multiplier, 1, f"level {name} (C) pos")
            row_parts = tuple(sorted(p[1] for p in prefix if p[0] == row_var))
            col_parts = tuple(sorted(p[1] for p in prefix if p[0] != row_var))
            parents = self._distinct_bounds((row_parts, col_parts, isplit, csplit))
            multiplier = 1
        self._bound(parents, multiplier, 0, "values")

    def _bound(self, parents: Bounds, multiplier: int, plus: int, what: str) -> None:
        """Refuse when parents x multiplier + plus is over the limit, deciding by bounds first."""
        lo, hi, key = parents
        if hi * multiplier + plus <= self.limit:
            return
        if lo * multiplier + plus > self.limit or key is None:
            self._need(lo * multiplier + plus, what)
        self._need(self._exact_distinct(key) * multiplier + plus, what)

    def _distinct_bounds(self, key: PartsKey) -> Bounds:
        """(lo, hi, key): bounds on the distinct coordinate tuples of the key's row and column
        parts among the nonzeros (a C level's positions)."""
        if key in self._exact:
            return self._exact[key], self._exact[key], key
        row_parts, col_parts, isplit, csplit = key
        nnz = int(self.csr.nnz)
        if row_parts == ("0", "1") and col_parts == ("0", "1"):
            return nnz, nnz, key  # whole coordinates: every nonzero its own position
        by_rows = _distinct_of(self._row_lengths, row_parts, isplit)
        by_cols = _distinct_of(self._col_counts, col_parts, csplit) if col_parts else 1
        return max(by_rows, by_cols), min(nnz, by_rows * by_cols), key

    @cached_property
    def _row_lengths(self) -> np.ndarray:
        return np.diff(self.csr.indptr)

    @cached_property
    def _col_counts(self) -> np.ndarray:
        counts = np.zeros(self.csr.shape[1], dtype=np.int64)
        for lo in range(0, self.csr.nnz, CHUNK):
            chunk = self.csr.indices[lo : lo + CHUNK]
            counts += np.bincount(chunk, minlength=self.csr.shape[1])
        return counts

    def _exact_distinct(self, key: PartsKey) -> int:
        """The distinct coordinate tuples of the key's parts among the nonzeros, counted in
        chunks of rows (whole row blocks when the outer row part is among them: a chunk's
        tuples then never repeat in another chunk)."""
        if key in self._exact:
            return self._exact[key]
        row_parts, col_parts, isplit, csplit = key
        csr = self.csr
        col_blocks = -(-csr.shape[1] // csplit)
        by_block = "1" in row_parts
        seen = np.zeros(0, dtype=np.int64)
        total = 0
        for lo_row, hi_row in _row_chunks(csr.indptr, isplit if by_block else 1):
            lo, hi = int(csr.indptr[lo_row]), int(csr.indptr[hi_row])
            rows = _rows_of(csr.indptr, lo_row, hi_row)
            cols = csr.indices[lo:hi].astype(np.int64)
            k = np.zeros(hi - lo, dtype=np.int64)
            if "1" in row_parts:
                k = k * (csr.shape[0] // isplit + 1) + rows // isplit
            if "0" in row_parts:
                k = k * isplit + rows % isplit
            if "1" in col_parts:
                k = k * col_blocks + cols // csplit
            if "0" in col_parts:
                k = k * csplit + cols % csplit
            if by_block:
                total += np.unique(k).size
            else:
                seen = np.union1d(seen, k)
        self._exact[key] = total if by_block else int(seen.size)
        return self._exact[key]

    # --- the template families ---------------------------------------------------------------

    def _params(self, knobs: Mapping[str, Any]) -> dict[str, int]:
        kernel = families.module_of(families.family_of(knobs)).kernel_of(self.op, knobs, self.width)
        return dict(kernel.params)

    def _check_dia(self, knobs: Mapping[str, Any]) -> None:
        rtile = self._params(knobs)["rtile"]
        csr = self.structured
        rows, cols = csr.shape
        per_diagonal = -(-rows // rtile) * rtile + 1  # values padded to whole tiles + offset
        max_diagonals = self.limit // per_diagonal
        if min(cols, csr.nnz) <= max_diagonals:
            return
        want = DIA_SAMPLE_PER_DIAGONAL * max_diagonals + 64
        if csr.nnz > want:  # a strided sample's distinct diagonals bound the count from below
            sample = np.linspace(0, csr.nnz - 1, want).astype(np.int64)
            row = np.searchsorted(csr.indptr, sample, side="right") - 1
            found = np.unique(_offsets(csr.indices[sample], row, cols)).size
            self._need(found * per_diagonal, f"DIA's {found}+ diagonals")
        ndiag = self._diagonals()
        self._need(ndiag * per_diagonal, f"DIA's {ndiag} diagonals")

    def _diagonals(self) -> int:
        """S's distinct wrapped diagonals (one chunked pass, cached)."""
        if "diagonals" not in self._exact:
            csr = self.structured
            present = np.zeros(csr.shape[1], dtype=bool)
            for lo_row, hi_row in _row_chunks(csr.indptr, 1):
                lo, hi = int(csr.indptr[lo_row]), int(csr.indptr[hi_row])
                row = _rows_of(csr.indptr, lo_row, hi_row)
                present[_offsets(csr.indices[lo:hi], row, csr.shape[1])] = True
            self._exact["diagonals"] = int(present.sum())
        return self._exact["diagonals"]

    def _check_bcsr(self, knobs: Mapping[str, Any]) -> bool:
        params = self._params(knobs)
        br, bc = params["brows"], params["bcols"]
        pairs = self._row_block_pairs(bc)
        if pairs * br * bc <= self.limit:
            return True
        if -(-pairs // br) * br * bc > self.limit:
            return False
        if self.structured.nnz > EXACT_PACK_NNZ:
            return False  # deciding needs the row clustering: refused (see the module doc)
        return _packs(lambda: pipeline.pack(self.source, self.op, knobs, self.width))

    def _row_block_pairs(self, bc: int) -> int:
        """Distinct (row, column block of ``bc``) pairs of S (canonical: sorted columns)."""
        key = ("row-blocks", bc)
        if key not in self._exact:
            csr, total = self.structured, 0
            for lo_row, hi_row in _row_chunks(csr.indptr, 1):
                lo, hi = int(csr.indptr[lo_row]), int(csr.indptr[hi_row])
                block = csr.indices[lo:hi] // bc
                new = np.ones(hi - lo, dtype=bool)
                new[1:] = block[1:] != block[:-1]
                starts = csr.indptr[lo_row:hi_row] - lo
                new[starts[starts < hi - lo]] = True  # a row's first entry starts a pair
                total += int(new.sum())
            self._exact[key] = total
        return self._exact[key]

    def _check_reordered(self, knobs: Mapping[str, Any]) -> bool:
        from cognate.targets.cpu.families.reordered import check_knobs

        families.module_of("reordered").kernel_of(self.op, knobs, self.width)
        _, symmetric, _ = check_knobs(knobs)
        rows, cols = self.structured.shape
        if symmetric and rows != cols:
            return False  # symmetric renumbering needs a square matrix
        largest = max(self.structured.nnz, rows + 1, cols if symmetric else 1)
        return largest <= self.limit


def _rows_of(indptr: np.ndarray, lo_row: int, hi_row: int) -> np.ndarray:
    """The row of each nonzero of rows lo_row..hi_row - 1."""
    lengths = np.diff(indptr[lo_row : hi_row + 1])
    return np.repeat(np.arange(lo_row, hi_row, dtype=np.int64), lengths)


def _distinct_of(counts: np.ndarray, parts: tuple[str, ...], split: int) -> int:
    """Distinct values of the given parts (``1``: index // split, ``0``: index % split) among
    the indices with a nonzero count."""
    if not parts:
        return 1
    used = np.flatnonzero(counts)
    if parts == ("0", "1") or used.size == 0:
        return int(used.size)
    if parts == ("1",):  # ``used`` is sorted: count the changes of used // split
        return int(np.count_nonzero(np.diff(used // split))) + 1
    return int(np.count_nonzero(np.bincount(used % split, minlength=split)))


def _offsets(col: np.ndarray, row: np.ndarray, cols: int) -> np.ndarray:
    """The wrapped diagonal (j - i) mod cols (as families/dia.py stores it)."""
    return (col.astype(np.int64) - row % cols) % cols


def _row_chunks(indptr: np.ndarray, align: int) -> list[tuple[int, int]]:
    """Row ranges of about CHUNK nonzeros each, cut at multiples of ``align`` rows."""
    rows = indptr.size - 1
    chunks, start = [], 0
    while start < rows:
        target = int(indptr[start]) + CHUNK
        end = int(np.searchsorted(indptr, target, side="right")) - 1
        end = max(end, start + 1)
        end = min(rows, -(-end // align) * align)
        chunks.append((start, end))
        start = end
    return chunks


def _packs(pack: Callable[[], Any]) -> bool:
    try:
        pack()
    except families.TooLarge:
        return False
    return True


def size_check(matrix: Any, op: str, width: int) -> Callable[[Any], bool]:
    """config -> whether its layout fits the size limit (``CpuTarget.runnable``)."""
    check = SizeCheck(matrix, op, width)
    return lambda config: check(config.knobs)


__all__ = ["SizeCheck", "size_check"]
