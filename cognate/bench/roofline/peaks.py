"""The host's peaks for the roofline: its caches, and small compiled probes of the FMA rate
at each vector width and of each level's read bandwidth (and DRAM's write bandwidth)."""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

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


def compiled_function(source: str, name: str, argtypes: list, restype: Any) -> Callable[..., Any]:
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
    fn = compiled_function(
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
    fn = compiled_function(
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
    fn = compiled_function(
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
        fn = compiled_function(CALL_SOURCE, name, [ctypes.c_int], None)

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
