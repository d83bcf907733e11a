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

from cognate.bench.roofline.achieved import (
    KERNELS,
    ROW_HEADER,
    format_row,
    host_line,
    kernel_calls,
    measure_row,
    mkl_path_now,
    summary_lines,
)
from cognate.bench.roofline.bound import (
    WINDOW_SOURCE,
    Bound,
    LevelTraffic,
    Pattern,
    Traffic,
    a_bytes,
    spmm_bound,
    spmm_traffic,
    threads_default,
)
from cognate.bench.roofline.peaks import (
    CALL_SOURCE,
    DEFAULT_CACHES,
    FLOAT,
    FMA_ACCUMULATORS,
    PROBE_BITS,
    READ_ACCUMULATORS,
    REPEATS,
    SYS_CACHE,
    TARGET_S,
    TERMS,
    Caches,
    Peaks,
    call_overhead_us,
    fma_gflops,
    fma_source,
    host_caches,
    measure_peaks,
    parse_size,
    probe_sizes,
    read_gbs,
    read_source,
    write_gbs,
    write_source,
)

__all__ = [
    "Bound",
    "CALL_SOURCE",
    "Caches",
    "DEFAULT_CACHES",
    "FLOAT",
    "FMA_ACCUMULATORS",
    "KERNELS",
    "LevelTraffic",
    "PROBE_BITS",
    "Pattern",
    "Peaks",
    "READ_ACCUMULATORS",
    "REPEATS",
    "ROW_HEADER",
    "SYS_CACHE",
    "TARGET_S",
    "TERMS",
    "Traffic",
    "WINDOW_SOURCE",
    "a_bytes",
    "call_overhead_us",
    "fma_gflops",
    "fma_source",
    "format_row",
    "host_caches",
    "host_line",
    "kernel_calls",
    "measure_peaks",
    "measure_row",
    "mkl_path_now",
    "parse_size",
    "probe_sizes",
    "read_gbs",
    "read_source",
    "spmm_bound",
    "spmm_traffic",
    "summary_lines",
    "threads_default",
    "write_gbs",
    "write_source",
]
