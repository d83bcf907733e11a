"""A STREAM-triad bandwidth probe: the memory ceiling benchmarks compare SpMM's GB/s against.

Hand-written (a dozen lines of C) because the point is this machine's bandwidth under the
same compiler, flags and OpenMP runtime as the generated kernels, measured in the same run.
"""

from __future__ import annotations

import ctypes
import statistics
import time

import numpy as np

from cognate.build import compile_c, load_library

STREAM_SOURCE = """
#include <stdint.h>
void triad(double *restrict a, const double *restrict b, const double *restrict c,
           double s, int64_t n) {
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}
"""


def stream_triad_gbs(n: int = 1 << 23, rounds: int = 15) -> float:
    """Median STREAM triad bandwidth in GB/s (24 bytes per element, as STREAM counts)."""
    fn = load_library(str(compile_c(STREAM_SOURCE))).triad
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_double, ctypes.c_int64]
    a, b, c = np.zeros(n), np.ones(n), np.full(n, 2.0)
    args = (a.ctypes.data, b.ctypes.data, c.ctypes.data, 3.0, n)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return 24 * n / statistics.median(times) / 1e9
