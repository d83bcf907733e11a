"""The roofline's traffic model: the bytes an SpMM call must move per cache level and the lower
bound on its time at the host's peaks."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.bench.roofline.peaks import FLOAT, Caches, Peaks, compiled_function
from cognate.errors import CognateError
from cognate.timing import cores

# --- the traffic model -------------------------------------------------------------------------

WINDOW_SOURCE = """#include <stdint.h>
/* Greedy windows over rows lo..hi-1: a window grows while its distinct columns stay <= cap
   (a row alone over cap is a window of its own). Returns the sum over windows of their
   distinct columns; *windows gets how many windows. stamp: one int64 per column, all -1. */
int64_t window_scan(const int64_t *indptr, const int32_t *indices, int64_t lo, int64_t hi,
                    int64_t cap, int64_t *stamp, int64_t *windows) {
    int64_t w = 0, distinct = 0, total = 0, count = 0;
    for (int64_t r = lo; r < hi; r++) {
        int64_t fresh = 0;
        for (int64_t p = indptr[r]; p < indptr[r + 1]; p++) {
            int32_t c = indices[p];
            if (stamp[c] != w) { stamp[c] = w; fresh++; }
        }
        if (distinct > 0 && distinct + fresh > cap) {
            total += distinct; count++; w++; distinct = 0; fresh = 0;
            for (int64_t p = indptr[r]; p < indptr[r + 1]; p++) {
                int32_t c = indices[p];
                if (stamp[c] != w) { stamp[c] = w; fresh++; }
            }
        }
        distinct += fresh;
    }
    if (distinct > 0) { total += distinct; count++; }
    *windows = count;
    return total;
}
"""


class Pattern:
    """A CSR pattern checked once for the window scan (indices in range, indptr monotone),
    so the C scan never reads or writes out of bounds."""

    def __init__(self, csr: sp.csr_matrix | sp.csr_array) -> None:
        rows, cols = csr.shape
        if cols >= 2**31:
            raise CognateError("roofline: over 2^31 columns")
        self.shape = (rows, cols)
        self.indptr = np.ascontiguousarray(csr.indptr, dtype=np.int64)
        self.indices = np.ascontiguousarray(csr.indices, dtype=np.int32)
        nnz = len(self.indices)
        if len(self.indptr) != rows + 1 or self.indptr[0] != 0 or self.indptr[-1] != nnz:
            raise CognateError("roofline: indptr does not match the matrix")
        if rows and np.any(np.diff(self.indptr) < 0):
            raise CognateError("roofline: indptr is not monotone")
        if nnz and (self.indices.min() < 0 or self.indices.max() >= cols):
            raise CognateError("roofline: a column index out of range")
        self.nnz = nnz

    def windows(self, lo: int, hi: int, cap_rows: int) -> tuple[int, int]:
        """(sum over greedy windows of rows lo..hi-1 of their distinct columns, windows),
        a window holding at most ``cap_rows`` distinct columns unless one row has more."""
        if not 0 <= lo <= hi <= self.shape[0]:
            raise CognateError(f"roofline: rows {lo}..{hi} out of range")
        fn = compiled_function(
            WINDOW_SOURCE, "window_scan",
            [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
             ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)],
            ctypes.c_int64,
        )  # fmt: skip
        stamp = np.full(max(self.shape[1], 1), -1, dtype=np.int64)
        count = ctypes.c_int64(0)
        total = fn(
            self.indptr.ctypes.data, self.indices.ctypes.data, lo, hi, max(int(cap_rows), 0),
            stamp.ctypes.data, ctypes.byref(count),
        )  # fmt: skip
        return int(total), int(count.value)

    def distinct(self, lo: int, hi: int) -> int:
        """Distinct columns of rows lo..hi-1."""
        return self.windows(lo, hi, self.shape[1] + 1)[0]

    def parts(self, n: int) -> list[tuple[int, int]]:
        """``n`` contiguous row ranges of about equal nonzeros (the per-thread parts)."""
        rows = self.shape[0]
        n = max(1, min(n, max(rows, 1)))
        targets = [self.nnz * t // n for t in range(1, n)]
        cuts = [0, *(int(np.searchsorted(self.indptr, x, side="left")) for x in targets), rows]
        cuts = [min(max(c, 0), rows) for c in cuts]
        return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a] or [(0, rows)]


@dataclass(frozen=True)
class LevelTraffic:
    """What misses one cache level and its level below serves, per call, warm."""

    level: str  # the cache level whose misses these are
    served_by: str  # the level below: its bandwidth is the term's
    read_bytes: int  # A + B rows over the windows (0 where the footprint fits)
    write_bytes: int  # C (0 where the footprint fits)
    windows: int
    fits: bool  # every part's whole footprint fits: nothing comes from below

    @property
    def bytes(self) -> int:
        return self.read_bytes + self.write_bytes


@dataclass(frozen=True)
class Traffic:
    """The unavoidable work of one SpMM call at width N."""

    width: int
    flops: int  # 2 nnz N
    loads: int  # bytes registers load from L1: every nonzero's B row, and A
    levels: tuple[LevelTraffic, ...]
    compulsory_bytes: int  # a cold call: A + each distinct B row once + C

    def as_dict(self) -> dict[str, Any]:
        return {
            "flops": self.flops, "l1_loads": self.loads,
            "compulsory_bytes": self.compulsory_bytes,
            "levels": {t.served_by: t.__dict__ for t in self.levels},
        }  # fmt: skip


def a_bytes(rows: int, nnz: int) -> int:
    """A's CSR: row pointers, column indices and values, 4 bytes each."""
    return FLOAT * (rows + 1) + 2 * FLOAT * nnz


def spmm_traffic(
    pattern: Pattern | sp.csr_matrix | sp.csr_array, width: int, caches: Caches, threads: int = 1
) -> Traffic:
    """The traffic model of the module docstring for C = A @ B with B of ``width`` columns."""
    if not isinstance(pattern, Pattern):
        pattern = Pattern(pattern)
    if width < 1:
        raise CognateError(f"roofline: width {width!r} must be positive")
    rows, _ = pattern.shape
    row_bytes = FLOAT * width
    nnz = pattern.nnz
    a_all = a_bytes(rows, nnz)
    names = [name for name, _, _ in caches.levels()] + ["DRAM"]
    levels = []
    for i, (name, capacity, per_core) in enumerate(caches.levels()):
        parts = pattern.parts(threads) if per_core else [(0, rows)]
        read = write = windows = 0
        fits = True
        for lo, hi in parts:
            part_nnz = int(pattern.indptr[hi] - pattern.indptr[lo])
            a_part, c_part = a_bytes(hi - lo, part_nnz), row_bytes * (hi - lo)
            if a_part + c_part + row_bytes * pattern.distinct(lo, hi) <= capacity:
                continue
            fits = False
            b_rows, count = pattern.windows(lo, hi, capacity // row_bytes)
            read += a_part + b_rows * row_bytes
            write += c_part
            windows += count
        levels.append(LevelTraffic(name, names[i + 1], read, write, windows, fits))
    return Traffic(
        width=width,
        flops=2 * nnz * width,
        loads=nnz * row_bytes + a_all,
        levels=tuple(levels),
        compulsory_bytes=a_all + pattern.distinct(0, rows) * row_bytes + rows * row_bytes,
    )


@dataclass(frozen=True)
class Bound:
    """Seconds per term and the limit (the largest)."""

    terms: dict[str, float]
    traffic: Traffic
    cold_s: float  # a cold call's compulsory bytes at DRAM bandwidth (reported, not bound)

    @property
    def limit_s(self) -> float:
        return max(self.terms.values())

    @property
    def binding(self) -> str:
        return max(self.terms, key=lambda name: self.terms[name])

    def as_dict(self) -> dict[str, Any]:
        return {
            "limit_s": self.limit_s, "binding": self.binding, "terms_s": self.terms,
            "cold_s": self.cold_s, "traffic": self.traffic.as_dict(),
        }  # fmt: skip


def spmm_bound(traffic: Traffic, peaks: Peaks) -> Bound:
    """Each term's seconds at the measured peaks: FMAs at the widest vector's rate, L1 loads
    at L1's read bandwidth, each level's misses at the bandwidth of the level below (DRAM:
    reads at its read, C at its write bandwidth)."""
    gb = 1e9
    terms = {
        "fma": traffic.flops / (peaks.fma_gflops * gb),
        "L1": traffic.loads / (peaks.read_gbs["L1"] * gb),
    }
    for level in traffic.levels:
        below = level.served_by
        if below == "DRAM":
            seconds = level.read_bytes / (peaks.read_gbs["DRAM"] * gb)
            seconds += level.write_bytes / (peaks.write_gbs * gb)
        else:
            seconds = level.bytes / (peaks.read_gbs[below] * gb)
        terms[below] = seconds
    cold = traffic.compulsory_bytes / (peaks.read_gbs["DRAM"] * gb)
    return Bound(terms, traffic, cold)


def threads_default() -> int:
    """The kernels' thread count: OMP_NUM_THREADS where set, else every core."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else cores()
