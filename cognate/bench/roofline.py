"""A measured limit per (matrix, width) for the cpu SpMM C = A @ B: the host's peaks from small
probes, and a lower bound on a call's time from the bytes it must move and the FMAs it must do.

Host peaks (``measure_peaks``), each the best of several repeats under the timing lock, with
the kernels' thread count (OpenMP, every core by default) and the machine's load read first:

- FMA rate at each vector width the host has (GCC vector types of 128 / 256 / 512 bits,
  ``FMA_ACCUMULATORS`` independent accumulators per thread, enough to cover the FMA latency on
  two pipes);
- read bandwidth of L1, L2, the LLC and DRAM: each thread sums its own slice of a float array
  sized to sit in that level (half of L1 / L2 per thread; half of the LLC over all threads;
  DRAM: 8x the LLC), repeatedly; and a DRAM write bandwidth (C is written).

The traffic model (``spmm_traffic``), A CSR M x K, B K x N and C M x N float32:

- A is read once (indptr, indices, values: ``4 (M + 1) + 8 nnz`` bytes), C written once
  (``4 M N``), and the FMAs are ``nnz N`` (``2 nnz N`` flops, at the widest vector's rate).
- Registers load every nonzero's B row from L1 (``4 N nnz``) and A: the L1 term.
- For a cache level of capacity S, rows of A are cut into greedy windows of consecutive rows:
  a window grows while its distinct columns times ``4 N`` (its B rows) fit in S. Each window
  loads each of its distinct B rows once from the level below; a row whose own B rows exceed S
  is a window of its own. B bytes from below = sum over windows of distinct columns x 4 N,
  plus A and C. That traffic, over the measured bandwidth of the level below (L1 misses: L2's
  bandwidth; L2 misses: the LLC's; LLC misses: DRAM's, C's bytes at the write bandwidth), is
  that level's term.
- Per-core levels (L1, L2): the rows are split into one contiguous part per thread, of equal
  nonzeros, each scanned with one core's capacity; the LLC is one cache shared by every thread.
- Repeated calls, as benchmarks time them: where a part's whole footprint (A, its distinct B
  rows and C) fits in a level, that level keeps it across calls and the level below moves
  nothing for it. ``compulsory_bytes`` (A + distinct B rows + C) is what a cold call moves
  from DRAM; it is reported, not part of the warm bound.
- The limit is the largest term: the FMAs, the L1 loads, or one level's traffic. The binding
  term names the resource: ``fma``, ``L1``, ``L2``, ``LLC`` or ``DRAM``.

What it ignores, each of which can only make a real call slower than the bound: the cache
lines A and C occupy (the whole capacity is given to B), associativity and conflict misses,
TLB misses, write-allocate reads of C, latency (only bandwidth counts; the probes stream with
the prefetchers' help, gathered B rows may not), B rows shorter than a cache line (N < 16),
load imbalance, and the fixed cost of a call (ctypes, waking the OpenMP threads: measured and
printed with the peaks, not in the bound). What can make the bound too high: reuse of B rows
across a window boundary (an ideal cache keeps some), the per-thread parts (the kernels'
dynamic schedule hands rows out in chunks), and any schedule that visits A's rows in another
order or tiles its columns (reordered, panel): the windows are those of A's stored order. An
achieved / limit over 100% means the model, not the kernel, is wrong there.

The greedy window scan is sequential by nature, so it is a small constant C function
(``WINDOW_SOURCE``, compiled once with ``cognate.build.compile_c``): O(nnz), milliseconds on
1M nonzeros. No probe source holds anything but validated integers.
"""

from __future__ import annotations

import ctypes
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.build import compile_c, load_library
from cognate.errors import CognateError
from cognate.timing import cores, machine_load, timing_lock

FLOAT = 4  # bytes of a float32 (A's values, B, C) and of an int32 index
FMA_ACCUMULATORS = 12  # independent vector FMAs in flight per thread (latency 4 x 2 pipes = 8)
READ_ACCUMULATORS = 8  # independent vector sums per thread in the read probe
PROBE_BITS = (128, 256, 512)
TARGET_S = 0.02  # each timed probe call lasts about this long
REPEATS = 5
SYS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
DEFAULT_CACHES = (32 << 10, 1 << 20, 32 << 20)  # L1d, L2 per core, LLC when /sys says nothing
DRAM_MIN_BYTES, DRAM_MAX_BYTES = 256 << 20, 1 << 30
TERMS = ("fma", "L1", "L2", "LLC", "DRAM")


# --- the host's caches -----------------------------------------------------------------------


@dataclass(frozen=True)
class Caches:
    """Data cache capacities in bytes: L1 and L2 per core, the LLC shared (None: no L3)."""

    l1: int
    l2: int
    llc: int | None
    source: str = "given"

    def levels(self) -> list[tuple[str, int, bool]]:
        """(name, capacity bytes, per core) from the core outwards."""
        found = [("L1", self.l1, True), ("L2", self.l2, True)]
        if self.llc:
            found.append(("LLC", self.llc, False))
        return found

    def line(self) -> str:
        llc = f"LLC {self.llc >> 10} KiB shared" if self.llc else "no L3"
        return f"L1d {self.l1 >> 10} KiB, L2 {self.l2 >> 10} KiB per core, {llc} ({self.source})"


def parse_size(text: str) -> int:
    """``32K`` / ``1024K`` / ``2M`` / ``512`` (sysfs cache sizes) in bytes."""
    text = text.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in "KMG" else text
    if not digits.isdigit():
        raise CognateError(f"cache size {text!r}: not a size")
    return int(digits) * scale


def host_caches(root: Path = SYS_CACHE) -> Caches:
    """This host's data caches from ``/sys/devices/system/cpu/cpu0/cache``; the common sizes
    (32 KiB, 1 MiB, 32 MiB), labelled as assumed, where it says nothing."""
    found: dict[int, int] = {}
    try:
        for index in sorted(root.glob("index*")):
            kind = (index / "type").read_text().strip()
            if kind not in ("Data", "Unified"):
                continue
            found[int((index / "level").read_text())] = parse_size((index / "size").read_text())
    except (OSError, ValueError, CognateError):
        found = {}
    if 1 not in found or 2 not in found:
        l1, l2, llc = DEFAULT_CACHES
        return Caches(l1, l2, llc, "assumed: no cache sizes in /sys")
    return Caches(found[1], found[2], found.get(3), str(root))


# --- probes ----------------------------------------------------------------------------------

_HEAD = """#include <stdint.h>
#include <omp.h>
#pragma GCC optimize("fp-contract=fast")
"""


def _vector_typedef(bits: int) -> str:
    if bits not in PROBE_BITS:
        raise CognateError(f"probe vector width {bits!r}: not one of {PROBE_BITS}")
    return f"typedef float vf __attribute__((vector_size({bits // 8}), aligned(4)));\n"


def fma_source(bits: int, accumulators: int = FMA_ACCUMULATORS) -> str:
    """``double fma_probe(int64_t iters, int threads, float m, float a)``: per thread
    ``iters`` x ``accumulators`` independent vector FMAs of ``bits`` bits."""
    if not isinstance(accumulators, int) or not 1 <= accumulators <= 32:
        raise CognateError(f"FMA probe accumulators {accumulators!r}: not 1-32")
    return (
        _HEAD
        + _vector_typedef(bits)
        + f"#define ACC {accumulators}\n#define LANES {bits // 32}\n"
        + """
double fma_probe(int64_t iters, int threads, float m, float a) {
    double total = 0.0;
    #pragma omp parallel num_threads(threads) reduction(+:total)
    {
        vf acc[ACC];
        vf vm = (vf){} + m, va = (vf){} + a;
        for (int j = 0; j < ACC; j++) acc[j] = (vf){} + (float)(j + 1 + omp_get_thread_num());
        for (int64_t i = 0; i < iters; i++) {
            for (int j = 0; j < ACC; j++) acc[j] = acc[j] * vm + va;
        }
        float s = 0.0f;
        for (int j = 0; j < ACC; j++)
            for (int l = 0; l < LANES; l++) s += acc[j][l];
        total += s;
    }
    return total;
}
"""
    )


def read_source(bits: int) -> str:
    """``double read_probe(const float *a, int64_t per_thread, int64_t reps, int threads)``:
    thread t sums ``a[t * per_thread : (t + 1) * per_thread]`` ``reps`` times (per_thread a
    multiple of ``READ_ACCUMULATORS`` vectors)."""
    return (
        _HEAD
        + _vector_typedef(bits)
        + f"#define ACC {READ_ACCUMULATORS}\n#define LANES {bits // 32}\n"
        + """
double read_probe(const float *a, int64_t per_thread, int64_t reps, int threads) {
    double total = 0.0;
    #pragma omp parallel num_threads(threads) reduction(+:total)
    {
        const vf *p = (const vf *)(a + (int64_t)omp_get_thread_num() * per_thread);
        int64_t nv = per_thread / LANES;
        vf acc[ACC];
        for (int j = 0; j < ACC; j++) acc[j] = (vf){};
        for (int64_t r = 0; r < reps; r++) {
            for (int64_t i = 0; i < nv; i += ACC) {
                for (int j = 0; j < ACC; j++) acc[j] += p[i + j];
            }
        }
        float s = 0.0f;
        for (int j = 0; j < ACC; j++)
            for (int l = 0; l < LANES; l++) s += acc[j][l];
        total += s;
    }
    return total;
}
"""
    )


def write_source(bits: int) -> str:
    """``void write_probe(float *a, int64_t per_thread, int64_t reps, int threads)``: thread t
    stores its slice ``reps`` times (plain stores, as the kernels write C)."""
    return (
        _HEAD
        + _vector_typedef(bits)
        + f"#define LANES {bits // 32}\n"
        + """
void write_probe(float *a, int64_t per_thread, int64_t reps, int threads) {
    #pragma omp parallel num_threads(threads)
    {
        vf *p = (vf *)(a + (int64_t)omp_get_thread_num() * per_thread);
        int64_t nv = per_thread / LANES;
        for (int64_t r = 0; r < reps; r++) {
            vf x = (vf){} + (float)r;
            for (int64_t i = 0; i < nv; i++) p[i] = x;
            __asm__ volatile("" ::: "memory");
        }
    }
}
"""
    )


def _function(source: str, name: str, argtypes: list, restype: Any) -> Callable[..., Any]:
    fn = getattr(load_library(str(compile_c(source))), name)
    fn.argtypes, fn.restype = argtypes, restype
    return fn


def _aligned(floats: int, value: float = 1.0) -> np.ndarray:
    """A float32 array of ``floats`` elements starting on a 64-byte boundary."""
    raw = np.empty(floats + 16, dtype=np.float32)
    start = (-raw.ctypes.data % 64) // FLOAT
    out = raw[start : start + floats]
    out.fill(value)
    return out


def _best_seconds(run: Callable[[int], object], target_s: float, repeats: int) -> tuple[float, int]:
    """(best seconds of one call, the count it ran) for ``run(count)``: the count grown
    until a call lasts ``target_s`` and 4x a call of count 1 (its fixed cost: thread wake-up,
    which under load is a time slice), then ``repeats`` timed calls; the fastest counts."""
    overhead = math.inf
    for _ in range(3):  # the first also starts the OpenMP threads
        start = time.perf_counter()
        run(1)
        overhead = min(overhead, time.perf_counter() - start)
    count = 1
    while count < 1 << 40:
        start = time.perf_counter()
        run(count)
        took = time.perf_counter() - start
        if took >= max(target_s, 4 * overhead):
            break
        grow = max(target_s, 4 * overhead) / max(took - overhead, took / 2, 1e-7)
        count *= max(2, min(64, math.ceil(grow)))
    best = math.inf
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        run(count)
        best = min(best, time.perf_counter() - start)
    return best, count


def fma_gflops(
    bits: int, threads: int, target_s: float = TARGET_S, repeats: int = REPEATS
) -> float:
    """Best FMA rate in GFLOP/s (2 flops per lane per FMA) over ``threads`` threads."""
    fn = _function(
        fma_source(bits), "fma_probe",
        [ctypes.c_int64, ctypes.c_int, ctypes.c_float, ctypes.c_float], ctypes.c_double,
    )  # fmt: skip
    best, iters = _best_seconds(lambda n: fn(n, threads, 0.999999, 1e-6), target_s, repeats)
    return 2.0 * iters * FMA_ACCUMULATORS * (bits // 32) * threads / best / 1e9


def _slice_floats(per_thread_bytes: int, bits: int) -> int:
    """Floats per thread: ``per_thread_bytes`` rounded down to whole accumulator blocks."""
    block = READ_ACCUMULATORS * bits // 32
    return max(block, per_thread_bytes // FLOAT // block * block)


def read_gbs(
    per_thread_bytes: int, threads: int, bits: int, target_s: float = TARGET_S,
    repeats: int = REPEATS,
) -> float:  # fmt: skip
    """Best read bandwidth in GB/s of ``threads`` threads each summing its own slice of
    ``per_thread_bytes`` (rounded down to whole vector blocks)."""
    fn = _function(
        read_source(bits), "read_probe",
        [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int], ctypes.c_double,
    )  # fmt: skip
    per = _slice_floats(per_thread_bytes, bits)
    data = _aligned(per * threads)
    best, reps = _best_seconds(lambda n: fn(data.ctypes.data, per, n, threads), target_s, repeats)
    return per * FLOAT * threads * reps / best / 1e9


def write_gbs(
    per_thread_bytes: int, threads: int, bits: int, target_s: float = TARGET_S,
    repeats: int = REPEATS,
) -> float:  # fmt: skip
    """Best write bandwidth in GB/s (bytes stored; plain stores, so write-allocate reads are
    included in the time, as they are in a kernel writing C)."""
    fn = _function(
        write_source(bits), "write_probe",
        [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int], None,
    )  # fmt: skip
    per = _slice_floats(per_thread_bytes, bits)
    data = _aligned(per * threads, 0.0)
    best, reps = _best_seconds(lambda n: fn(data.ctypes.data, per, n, threads), target_s, repeats)
    return per * FLOAT * threads * reps / best / 1e9


CALL_SOURCE = (
    _HEAD
    + """
void empty_call(int threads) { (void)threads; }
void empty_parallel(int threads) {
    #pragma omp parallel num_threads(threads)
    { __asm__ volatile(""); }
}
"""
)


def call_overhead_us(threads: int, target_s: float = TARGET_S, repeats: int = REPEATS) -> dict:
    """Microseconds per call from Python of an empty C function through ctypes, and of one
    that opens an empty OpenMP parallel region of ``threads`` threads (the fixed cost every
    call of a kernel pays; not part of the bound)."""
    out = {}
    for name in ("empty_call", "empty_parallel"):
        fn = _function(CALL_SOURCE, name, [ctypes.c_int], None)

        def run(count: int, fn: Any = fn) -> None:
            for _ in range(count):
                fn(threads)

        best, count = _best_seconds(run, target_s, repeats)
        out["ctypes" if name == "empty_call" else "parallel"] = best / count * 1e6
    return out


def probe_sizes(caches: Caches, threads: int) -> dict[str, int]:
    """Bytes per thread of each read probe: half of L1 / L2, half the LLC over the threads
    (at least twice an L2), DRAM 8x the LLC (256 MiB - 1 GiB in all)."""
    sizes = {"L1": caches.l1 // 2, "L2": caches.l2 // 2}
    llc = caches.llc or caches.l2 * threads
    if caches.llc:
        sizes["LLC"] = max(caches.llc // 2 // threads, 2 * caches.l2)
    sizes["DRAM"] = min(max(8 * llc, DRAM_MIN_BYTES), DRAM_MAX_BYTES) // threads
    return sizes


@dataclass
class Peaks:
    """The host's measured peaks, all threads together."""

    threads: int
    caches: Caches
    gflops: dict[int, float]  # vector bits -> GFLOP/s
    read_gbs: dict[str, float]  # "L1", "L2", "LLC", "DRAM" -> GB/s
    write_gbs: float  # DRAM
    sizes: dict[str, int] = field(default_factory=dict)  # probe bytes per thread
    load: dict[str, Any] = field(default_factory=dict)
    load_line: str = ""  # empty: the machine was quiet
    call_us: dict[str, float] = field(default_factory=dict)  # fixed cost of a call (info)

    @property
    def fma_gflops(self) -> float:
        """The widest vector's rate (the bound's FMA term)."""
        return self.gflops[max(self.gflops)]

    @property
    def busy(self) -> bool:
        return bool(self.load_line)

    def lines(self) -> list[str]:
        fma = ", ".join(f"{bits}-bit {g:.1f}" for bits, g in sorted(self.gflops.items()))
        reads = ", ".join(
            f"{level} {gbs:.1f} ({_size_words(self.sizes.get(level, 0))}/thread)"
            for level, gbs in self.read_gbs.items()
        )
        out = [
            f"caches: {self.caches.line()}",
            f"peak FMA GFLOP/s ({self.threads} threads): {fma}",
            f"peak read GB/s: {reads}; DRAM write {self.write_gbs:.1f}",
        ]
        if self.call_us:
            out.append(
                f"call overhead (not in the bound): {self.call_us['ctypes']:.2f} us per ctypes"
                f" call, {self.call_us['parallel']:.2f} us with an empty OpenMP parallel region"
            )
        if self.load_line:
            out.append(f"[peaks {self.load_line}]")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "threads": self.threads, "caches": self.caches.__dict__,
            "gflops": {str(k): v for k, v in self.gflops.items()}, "read_gbs": self.read_gbs,
            "write_gbs": self.write_gbs, "probe_bytes_per_thread": self.sizes,
            "load": self.load, "busy": self.busy, "call_us": self.call_us,
        }  # fmt: skip


def _size_words(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def measure_peaks(
    threads: int | None = None,
    caches: Caches | None = None,
    widths: tuple[int, ...] | None = None,
    sizes: dict[str, int] | None = None,
    target_s: float = TARGET_S,
    repeats: int = REPEATS,
) -> Peaks:
    """Measure the host's FMA rate at each vector width it has and the read bandwidth of each
    level (``sizes``: bytes per thread per level, default ``probe_sizes``), best of
    ``repeats``, under the timing lock with the load read first."""
    from cognate.targets.cpu.isa import host_isa

    threads = threads or cores()
    caches = caches or host_caches()
    widths = widths or host_isa().widths
    sizes = dict(sizes or probe_sizes(caches, threads))
    widest = max(widths)
    with timing_lock(on_wait=lambda line: print(line, flush=True)):
        load = machine_load(threads, sample_s=0.1)
        gflops = {bits: fma_gflops(bits, threads, target_s, repeats) for bits in widths}
        reads = {
            level: read_gbs(size, threads, widest, target_s, repeats)
            for level, size in sizes.items()
        }
        write = write_gbs(sizes["DRAM"], threads, widest, target_s, repeats)
        calls = call_overhead_us(threads, target_s, repeats)
    return Peaks(threads, caches, gflops, reads, write, sizes, load.as_dict(), load.line(), calls)


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
        fn = _function(
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


# --- achieved / limit: the tuned pick, the baseline and MKL-IE, block-timed -------------------

KERNELS = ("tuned", "baseline", "mkl-ie")


def host_line(threads: int, mkl_path: str) -> str:
    """The header: CPU model, vector ISA, threads, OpenMP waits, MKL's code path."""
    from cognate.hostid import cpu_model
    from cognate.targets.cpu.isa import host_isa

    policy = os.environ.get("OMP_WAIT_POLICY", "")
    waits = f"OMP_WAIT_POLICY={policy}" if policy else "default (OMP_WAIT_POLICY unset)"
    return (
        f"host: {cpu_model()}; {host_isa().line()}; threads {threads}; OpenMP waits {waits};"
        f" MKL code path {mkl_path}"
    )


def mkl_path_now(threads: int) -> str:
    """MKL's code path in this process, after one tiny SpMM (the path is chosen at MKL's
    first call), or why MKL is not available."""
    from cognate.targets.cpu.measure import library

    try:
        call = library.mkl_spmm_call(sp.identity(4, dtype=np.float32, format="csr"),
                                     np.ones((4, 8), dtype=np.float32), threads)  # fmt: skip
        call.run()
    except CognateError as exc:
        return f"unavailable ({exc})"
    path = library.mkl_code_path()
    intel = os.environ.get(library.INTEL_PATH_ENV) == "1"
    vendor = library.cpu_vendor() or "unknown vendor"
    return f"{path} ({vendor}{', Intel path forced' if intel else ''})"


def _checked(prepared: dict, results: dict, csr: Any, b: np.ndarray, missing: dict) -> None:
    """Run each call once; drop (saying why) any whose result differs from scipy's float64."""
    from cognate.targets.cpu.measure.check import mismatch, reference

    ref, tol = reference(csr, "spmm", (b,))
    for name in list(prepared):
        try:
            prepared[name]()
            problem = mismatch(np.asarray(results[name]()), ref, 4 * tol)
        except CognateError as exc:
            problem = str(exc)
        if problem:
            missing[name] = f"result wrong: {problem}"
            del prepared[name]


def kernel_calls(
    matrix: Any, b: np.ndarray, threads: int, tune: bool = True, top_k: int = 5
) -> tuple[dict, dict, str]:
    """The checked calls of one (matrix, width): ``tuned`` (``cognate.tune(top_k, verify)``,
    then ``result.kernel(B, out=C)``), ``baseline`` (the cpu space's baseline config as a
    ``ScheduleKernel``) and ``mkl-ie`` (MKL's inspector-executor, handle built once); name ->
    why missing; the tuned pick in words."""
    import cognate
    from cognate.targets.cpu.measure import library
    from cognate.targets.cpu.space import make_space
    from cognate.targets.cpu.tuned import ScheduleKernel

    csr, width = matrix.csr, b.shape[1]
    outs = {name: np.empty((csr.shape[0], width), dtype=np.float32) for name in KERNELS}
    prepared: dict[str, Callable[[], object]] = {}
    missing: dict[str, str] = {}
    pick = "-"
    if tune:
        result = cognate.tune(matrix, width=width, top_k=top_k, verify=True, threads=threads)
        tuned = result.kernel
        prepared["tuned"] = lambda: tuned(b, out=outs["tuned"])
        pick = "baseline (kept)" if result.kept_baseline else result.best.description.split("|")[0]
    base = ScheduleKernel(matrix, "spmm", make_space("spmm").baseline(matrix.shape))
    prepared["baseline"] = lambda: base(b, out=outs["baseline"])
    try:
        mkl = library.mkl_spmm_call(csr, b, threads)
        prepared["mkl-ie"] = mkl.run
        outs["mkl-ie"] = mkl.result()
    except CognateError as exc:
        missing["mkl-ie"] = str(exc)
    results = {name: (lambda name=name: outs[name]) for name in KERNELS}
    _checked(prepared, results, csr, b, missing)
    return prepared, missing, pick.strip()


def measure_row(
    matrix: Any, width: int, peaks: Peaks, threads: int, rounds: int, tune: bool = True,
    top_k: int = 5, pattern: Pattern | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One row: the bound at ``peaks`` and each kernel's block-timed median with its
    achieved / limit (limit seconds / achieved seconds)."""
    from cognate.timing import time_blocks

    pattern = pattern or Pattern(matrix.csr)
    bound = spmm_bound(spmm_traffic(pattern, width, peaks.caches, threads), peaks)
    rng = np.random.default_rng(0)
    b = rng.uniform(-1, 1, (matrix.shape[1], width)).astype(np.float32)
    prepared, missing, pick = kernel_calls(matrix, b, threads, tune, top_k)
    seconds: dict[str, float] = {}
    spread: dict[str, float] = {}
    busy = False
    load_line = ""
    if prepared:
        timed, load = time_blocks(prepared, rounds, threads=threads)
        seconds = {name: t.median for name, t in timed.items()}
        spread = {name: t.spread / t.median for name, t in timed.items()}
        busy, load_line = load.busy, load.line()
    return {
        "matrix": matrix.name, "nnz": int(matrix.nnz), "shape": list(matrix.shape),
        "width": width, "limit_s": bound.limit_s, "binding": bound.binding,
        "bound": bound.as_dict(), "seconds": seconds, "spread": spread,
        "achieved_over_limit": {n: bound.limit_s / s for n, s in seconds.items()},
        "missing": missing, "pick": pick, "busy": busy, "load": load_line,
    }  # fmt: skip


ROW_HEADER = (
    f"{'matrix':<26}{'nnz':>9}{'N':>5}{'limit ms':>10} {'binds':<6}"
    f"{'tuned ms':>10}{'tuned %':>8}{'base ms':>10}{'base %':>8}{'mkl ms':>10}{'mkl %':>8}"
    "  tuned pick"
)


def format_row(row: dict[str, Any]) -> str:
    """One printed line of ``measure_row``'s row (``%``: limit time / achieved time)."""

    def cells(name: str) -> str:
        if name not in row["seconds"]:
            return f"{'-':>10}{'-':>8}"
        pct = 100 * row["achieved_over_limit"][name]
        return f"{row['seconds'][name] * 1e3:>10.3f}{pct:>7.1f}%"

    line = (
        f"{row['matrix'][:25]:<26}{row['nnz']:>9}{row['width']:>5}{row['limit_s'] * 1e3:>10.4f}"
        f" {row['binding']:<6}{cells('tuned')}{cells('baseline')}{cells('mkl-ie')}  {row['pick']}"
    )
    return line + (f"  [{row['load']}]" if row["busy"] else "")


def summary_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Per width: the geomean achieved / limit of each kernel and which terms bind."""
    from cognate.stats import geomean

    out = []
    for width in sorted({r["width"] for r in rows}):
        mine = [r for r in rows if r["width"] == width]
        parts = []
        for name in KERNELS:
            found = [r["achieved_over_limit"][name] for r in mine if name in r["seconds"]]
            if found:
                parts.append(
                    f"{name} {100 * geomean(found):.1f}% (min {100 * min(found):.1f}%,"
                    f" max {100 * max(found):.1f}%)"
                )
        binds = [r["binding"] for r in mine]
        counts = ", ".join(f"{t} {binds.count(t)}" for t in TERMS if t in binds)
        out.append(
            f"N={width}: achieved / limit geomean over {len(mine)}: {'; '.join(parts) or '-'};"
            f" binding term: {counts}"
        )
    return out
