/* SpMM  C = A @ B  for the plain-CSR loop structure of the WACO space (i1 i0 k1 k0 j1 j0,
 * rows dense, columns compressed, both sparse splits 1: the baseline's structure).
 *
 * Template filled by cognate/targets/cpu/codegen.py (string.Template): only the dense
 * width, a whitelisted integer, is substituted. Same signature as the generated kernels
 * (spmm.c), so the packed levels, runtime knobs and callers are unchanged; of A's levels
 * only level 2 is stored (pos2 = row pointer, crd2 = column of each nonzero, vals).
 *
 * Written by hand rather than generated because the generic loop nest accumulates into C
 * in memory (a load and a store of C per nonzero and vector) after a separate zeroing pass;
 * here each row's output tile is summed in vector registers and stored once, and the row's
 * nonzeros are unrolled by two (two independent B rows in flight). Software prefetching of
 * the B rows a few nonzeros ahead was tried and measured no faster (slower on matrices
 * whose B fits the caches), so there is none. Measured against MKL's inspector-executor
 * SpMM: docs/benchmarks.md.
 *
 * The dense split does not change this structure's order (j1 j0 innermost either way): the
 * register tile is the kernel's. Rows are handed out dynamically in tasks of consecutive
 * rows balanced by weight (nonzeros + rows): `chunk` average rows per task, but at least
 * MIN_TASK, because on matrices of many short rows a claim per 32 rows cost more than the
 * rows (arrow: 2 threads slower than 1).
 * Products too small to pay for waking a second thread run on the calling thread alone
 * (under passive OpenMP waits a wake costs ~30 us here, more than a small SpMM), and so do
 * products whose rows make one task. A product of only a few tasks is cut into SPLIT tasks
 * per thread instead: with MIN_TASK-sized tasks, a product of 1.3 tasks left one thread
 * 3/4 of the work (bp_1200 at N=128: tasks of 4096 and 1452).
 */
#pragma GCC optimize("fp-contract=fast")
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <strings.h>

typedef float vf __attribute__((vector_size(32), aligned(4)));
static const int64_t N = ${dense_extent};

/* Columns [j, j + 8 * nv) of row [lo, hi) of A times B, summed in registers, stored to c. */
static inline __attribute__((always_inline)) void tile(
    const int64_t lo, const int64_t hi, const int32_t *restrict col,
    const float *restrict val, const float *restrict B, float *restrict c, const int64_t j,
    const int nv)
{
    vf acc[8];
    for (int q = 0; q < nv; q++) acc[q] = (vf){0};
    int64_t p = lo;
    for (; p + 1 < hi; p += 2) {
        const float a0 = val[p], a1 = val[p + 1];
        const float *restrict b0 = B + (int64_t)col[p] * N + j;
        const float *restrict b1 = B + (int64_t)col[p + 1] * N + j;
        for (int q = 0; q < nv; q++) {
            acc[q] += a0 * *(const vf *)(b0 + 8 * q);
            acc[q] += a1 * *(const vf *)(b1 + 8 * q);
        }
    }
    if (p < hi) {
        const float a0 = val[p];
        const float *restrict b0 = B + (int64_t)col[p] * N + j;
        for (int q = 0; q < nv; q++) acc[q] += a0 * *(const vf *)(b0 + 8 * q);
    }
    for (int q = 0; q < nv; q++) *(vf *)(c + 8 * q) = acc[q];
}

/* Columns [j, N) (fewer than 8) of one row, scalar. */
static void edge(const int64_t lo, const int64_t hi, const int32_t *restrict col,
                 const float *restrict val, const float *restrict B, float *restrict c,
                 const int64_t j)
{
    for (int64_t q = j; q < N; q++) c[q] = 0.0f;
    for (int64_t p = lo; p < hi; p++) {
        const float a = val[p];
        const float *restrict b = B + (int64_t)col[p] * N;
        for (int64_t q = j; q < N; q++) c[q] += a * b[q];
    }
}

static void row(const int64_t lo, const int64_t hi, const int32_t *restrict col, const float *restrict val,
                const float *restrict B, float *restrict c)
{
    int64_t j = 0;
    for (; j + 64 <= N; j += 64) tile(lo, hi, col, val, B, c + j, j, 8);
    if (j + 32 <= N) { tile(lo, hi, col, val, B, c + j, j, 4); j += 32; }
    if (j + 16 <= N) { tile(lo, hi, col, val, B, c + j, j, 2); j += 16; }
    if (j + 8 <= N) { tile(lo, hi, col, val, B, c + j, j, 1); j += 8; }
    if (j < N) edge(lo, hi, col, val, B, c, j);
}

/* The first row i in [0, M] with pos[i] + i >= w (rows weigh one, nonzeros one). */
static int64_t first_row(const int64_t *restrict pos, const int64_t M, const int64_t w)
{
    int64_t lo = 0, hi = M;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (pos[mid] + mid >= w) hi = mid; else lo = mid + 1;
    }
    return lo;
}

${tasks}

enum { SPLIT = 4, MIN_SPLIT_TASK = 256 };

/* A task weight that hands each thread SPLIT tasks when `task` would make fewer than that,
 * but no task under MIN_SPLIT_TASK (a claim stays cheap beside its rows). */
static int64_t balanced_task(const int64_t task, const int64_t weight)
{
    const int64_t parts = SPLIT * (int64_t)omp_get_max_threads();
    if (weight <= task || weight >= parts * task) return task;  /* one task, or enough */
    const int64_t even = (weight + parts - 1) / parts;
    return even < MIN_SPLIT_TASK ? MIN_SPLIT_TASK : even;
}

void cognate_spmm(const int64_t *restrict pos0, const int32_t *restrict crd0,
                  const int64_t *restrict pos1, const int32_t *restrict crd1,
                  const int64_t *restrict pos2, const int32_t *restrict crd2,
                  const int64_t *restrict pos3, const int32_t *restrict crd3,
                  const float *restrict vals, const float *restrict B, float *restrict C,
                  const int64_t M, const int64_t K, const int64_t N_arg, const int64_t isplit,
                  const int64_t ksplit, const int64_t jsplit, const int64_t chunk)
{
    (void)pos0; (void)crd0; (void)pos1; (void)crd1; (void)pos3; (void)crd3;
    (void)K; (void)N_arg; (void)isplit; (void)ksplit; (void)jsplit;
    const int64_t nnz = pos2[M];
    /* Dynamic tasks of consecutive rows balanced by weight (nonzeros + rows): `chunk` average
     * rows, at least MIN_TASK, so a claim stays cheap beside the work it hands out. */
    const int64_t weight = nnz + M;
    const int64_t task = balanced_task(task_weight(chunk, weight, M), weight);
    const int64_t tasks = (weight + task - 1) / task;
    /* One task: a second thread would only be woken to find nothing to do. */
    const int parallel = nnz * N >= serial_below() && tasks > 1;
    #pragma omp parallel for schedule(dynamic, 1) if (parallel)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t hi = first_row(pos2, M, (t + 1) * task);
        for (int64_t i = first_row(pos2, M, t * task); i < hi; i++)
            row(pos2[i], pos2[i + 1], crd2, vals, B, C + i * N);
    }
}
