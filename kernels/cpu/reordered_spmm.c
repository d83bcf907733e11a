/* Reordered SpMM  C = A @ B : rows run in a chosen order (cognate/targets/cpu/families/reordered.py).
 *
 * Template filled by cognate/targets/cpu/families/template.py (string.Template): only the dense width
 * N, a whitelisted integer, is substituted; the order (`by`) never reaches C, and `strip`,
 * `symmetric` and `chunk` are runtime arguments.
 *
 * A is stored in its own CSR entry order (indptr, crd, vals: a row's entries are
 * crd/vals[indptr[r] .. indptr[r+1]-1]); rows[t] is the row run t-th (the order, with a
 * row permutation of a structured matrix folded in), so C row rows[t] is written when the
 * t-th row runs: the order is an index map, nothing is permuted. weights[t] is the prefix
 * of (entries + 1) over rows[0 .. t-1], so tasks are balanced by weight in run order.
 *
 * symmetric = 0: crd holds B's row of each entry (A's columns). symmetric = 1 (square A):
 * rows and columns are renumbered alike (A' = P A P^T), crd holds the new column numbers,
 * and the kernel first gathers Bp[u] = B[gather[u]] into `scratch` (K x N floats, owned by
 * the packed A) in parallel inside this call, then reads Bp: the copy is part of the call.
 *
 * `strip` dense columns per pass: a task runs all its rows over columns [0, strip), then
 * all of them over [strip, 2 strip), ... so the slices of B rows it touches (strip floats
 * each) stay in cache across the task's rows; strip >= N is one pass, as spmm_csr.c.
 * Within a strip each row's output tile is summed in vector registers and stored once, the
 * row's entries unrolled by two (two B rows in flight), as spmm_csr.c. Tasks are dynamic:
 * consecutive run positions of `chunk` average rows by weight but at least MIN_TASK, and
 * products too small to pay for waking a second thread run on the calling thread.
 */
#pragma GCC optimize("fp-contract=fast")
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef float vf __attribute__((vector_size(32), aligned(4)));
static const int64_t N = ${width};

/* Columns [j, j + 8 * nv) of one row (entries [lo, hi)) times Bs, summed in registers. */
static inline __attribute__((always_inline)) void tile(
    const int64_t lo, const int64_t hi, const int32_t *restrict col,
    const float *restrict val, const float *restrict Bs, float *restrict c, const int64_t j,
    const int nv)
{
    vf acc[8];
    for (int q = 0; q < nv; q++) acc[q] = (vf){0};
    int64_t p = lo;
    for (; p + 1 < hi; p += 2) {
        const float a0 = val[p], a1 = val[p + 1];
        const float *restrict b0 = Bs + (int64_t)col[p] * N + j;
        const float *restrict b1 = Bs + (int64_t)col[p + 1] * N + j;
        for (int q = 0; q < nv; q++) {
            acc[q] += a0 * *(const vf *)(b0 + 8 * q);
            acc[q] += a1 * *(const vf *)(b1 + 8 * q);
        }
    }
    if (p < hi) {
        const float a0 = val[p];
        const float *restrict b0 = Bs + (int64_t)col[p] * N + j;
        for (int q = 0; q < nv; q++) acc[q] += a0 * *(const vf *)(b0 + 8 * q);
    }
    for (int q = 0; q < nv; q++) *(vf *)(c + j + 8 * q) = acc[q];
}

/* Columns [j, end) (fewer than 8) of one row, scalar. */
static void edge(const int64_t lo, const int64_t hi, const int32_t *restrict col,
                 const float *restrict val, const float *restrict Bs, float *restrict c,
                 const int64_t j, const int64_t end)
{
    for (int64_t q = j; q < end; q++) c[q] = 0.0f;
    for (int64_t p = lo; p < hi; p++) {
        const float a = val[p];
        const float *restrict b = Bs + (int64_t)col[p] * N;
        for (int64_t q = j; q < end; q++) c[q] += a * b[q];
    }
}

/* Columns [j, end) of one row: register tiles of 64, 32, 16, 8 columns, then the edge. */
static void row(const int64_t lo, const int64_t hi, const int32_t *restrict col,
                const float *restrict val, const float *restrict Bs, float *restrict c,
                int64_t j, const int64_t end)
{
    for (; j + 64 <= end; j += 64) tile(lo, hi, col, val, Bs, c, j, 8);
    if (j + 32 <= end) { tile(lo, hi, col, val, Bs, c, j, 4); j += 32; }
    if (j + 16 <= end) { tile(lo, hi, col, val, Bs, c, j, 2); j += 16; }
    if (j + 8 <= end) { tile(lo, hi, col, val, Bs, c, j, 1); j += 8; }
    if (j < end) edge(lo, hi, col, val, Bs, c, j, end);
}

${tasks}

void cognate_reordered_spmm(const int64_t *restrict indptr, const int32_t *restrict rows,
                            const int64_t *restrict weights, const int32_t *restrict crd,
                            const float *restrict vals, const int32_t *restrict gather,
                            float *scratch, const float *B,
                            float *restrict C, const int64_t M, const int64_t K,
                            const int64_t strip_arg, const int64_t symmetric,
                            const int64_t chunk)
{
    const int64_t nnz = weights[M] - M;
    const int64_t strip = strip_arg < N ? strip_arg : N;
    const int64_t copied = symmetric ? K : 0;  /* B rows gathered into scratch */
    const int parallel = (nnz + copied) * N >= serial_below();
    const float *Bs = symmetric ? scratch : B;  /* not restrict: it may alias scratch */
    const int64_t weight = weights[M];
    const int64_t task = task_weight(chunk, weight, M);
    const int64_t tasks = (weight + task - 1) / task;
    #pragma omp parallel if (parallel)
    {
        if (symmetric) {
            #pragma omp for schedule(static)
            for (int64_t u = 0; u < K; u++)
                memcpy(scratch + u * N, B + (int64_t)gather[u] * N, sizeof(float) * N);
        }  /* the implicit barrier: every Bp row is in place before any row runs */
        #pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t first = first_position(weights, M, t * task);
            const int64_t last = first_position(weights, M, (t + 1) * task);
            for (int64_t j = 0; j < N; j += strip) {
                const int64_t end = j + strip < N ? j + strip : N;
                for (int64_t s = first; s < last; s++) {
                    const int64_t r = rows[s];
                    row(indptr[r], indptr[r + 1], crd, vals, Bs, C + r * N, j, end);
                }
            }
        }
    }
}
