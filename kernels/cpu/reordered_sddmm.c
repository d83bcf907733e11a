/* Reordered SDDMM  out = A * (X @ Y^T) on A's pattern, rows run in a chosen order
 * (cognate/targets/cpu/families/reordered.py).
 *
 * Template filled by cognate/targets/cpu/families/template.py (string.Template): only the dense width
 * K, a whitelisted integer, is substituted; `strip`, `symmetric` and `chunk` are runtime
 * arguments. Layout as in reordered_spmm.c: A in its own CSR entry order, rows[t] the row run
 * t-th, weights the prefix of (entries + 1) in run order; out has one slot per entry of A, in
 * A's CSR order, so it is A's values array (written directly, no gather). X row rows[t] is
 * read when the t-th row runs (the order is an index map).
 *
 * symmetric = 0: crd holds Y's row of each entry. symmetric = 1 (square A): crd holds the
 * renumbered columns and the kernel first gathers Yp[u] = Y[gather[u]] into `scratch`
 * (N x K floats, owned by the packed A) in parallel inside this call, then reads Yp.
 *
 * `strip` dense columns per pass: a task runs the dot products of all its entries over
 * columns [0, strip), then over [strip, 2 strip), ..., the partial sums accumulated in out
 * (the last strip scales by A's value), so the Y slices (strip floats per row) the task's
 * rows share stay in cache; strip >= K is one pass with the full-width dot product.
 * Tasks, MIN_TASK and the serial threshold as reordered_spmm.c (multiply-adds: entries x K).
 */
#pragma GCC optimize("fp-contract=fast")
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef float vf __attribute__((vector_size(32), aligned(4)));
static const int64_t K = ${width};

${dot_product}

/* dot(x, y) over n columns (one strip), the accumulators of dot_product.inc. */
static inline float dot_n(const float *restrict x, const float *restrict y, const int64_t n)
{
    vf acc[4] = {{0}, {0}, {0}, {0}};
    int64_t k = 0;
    for (; k + 32 <= n; k += 32)
        for (int q = 0; q < 4; q++)
            acc[q] += *(const vf *)(x + k + 8 * q) * *(const vf *)(y + k + 8 * q);
    for (; k + 8 <= n; k += 8) acc[0] += *(const vf *)(x + k) * *(const vf *)(y + k);
    const vf sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    float total = 0.0f;
    for (int q = 0; q < 8; q++) total += sum[q];
    for (; k < n; k++) total += x[k] * y[k];
    return total;
}

${tasks}

/* Run positions [first, last): one pass over all K columns. */
static void whole(const int64_t first, const int64_t last, const int64_t *restrict indptr,
                  const int32_t *restrict rows, const int32_t *restrict crd,
                  const float *restrict vals, const float *X, const float *Ys,
                  float *restrict out)
{
    for (int64_t s = first; s < last; s++) {
        const int64_t r = rows[s];
        const float *x = X + r * K;
        for (int64_t p = indptr[r]; p < indptr[r + 1]; p++)
            out[p] = vals[p] * dot(x, Ys + (int64_t)crd[p] * K);
    }
}

/* Run positions [first, last): strips of `strip` columns, partial sums kept in out. */
static void strips(const int64_t first, const int64_t last, const int64_t *restrict indptr,
                   const int32_t *restrict rows, const int32_t *restrict crd,
                   const float *restrict vals, const float *X, const float *Ys,
                   float *restrict out, const int64_t strip)
{
    for (int64_t k = 0; k < K; k += strip) {
        const int64_t n = k + strip < K ? strip : K - k;
        const int start = k == 0, finish = k + n >= K;
        for (int64_t s = first; s < last; s++) {
            const int64_t r = rows[s];
            const float *x = X + r * K + k;
            for (int64_t p = indptr[r]; p < indptr[r + 1]; p++) {
                const float part = dot_n(x, Ys + (int64_t)crd[p] * K + k, n);
                const float sum = start ? part : out[p] + part;
                out[p] = finish ? vals[p] * sum : sum;
            }
        }
    }
}

void cognate_reordered_sddmm(const int64_t *restrict indptr, const int32_t *restrict rows,
                             const int64_t *restrict weights, const int32_t *restrict crd,
                             const float *restrict vals, const int32_t *restrict gather,
                             float *scratch, const float *X, const float *Y,
                             float *restrict out, const int64_t M, const int64_t N,
                             const int64_t strip, const int64_t symmetric, const int64_t chunk)
{
    const int64_t nnz = weights[M] - M;
    const int64_t copied = symmetric ? N : 0;  /* Y rows gathered into scratch */
    const int parallel = (nnz + copied) * K >= serial_below();
    const float *Ys = symmetric ? scratch : Y;  /* not restrict: it may alias scratch */
    const int64_t weight = weights[M];
    const int64_t task = task_weight(chunk, weight, M);
    const int64_t tasks = (weight + task - 1) / task;
    #pragma omp parallel if (parallel)
    {
        if (symmetric) {
            #pragma omp for schedule(static)
            for (int64_t u = 0; u < N; u++)
                memcpy(scratch + u * K, Y + (int64_t)gather[u] * K, sizeof(float) * K);
        }  /* the implicit barrier: every Yp row is in place before any entry runs */
        #pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t first = first_position(weights, M, t * task);
            const int64_t last = first_position(weights, M, (t + 1) * task);
            if (strip >= K)
                whole(first, last, indptr, rows, crd, vals, X, Ys, out);
            else
                strips(first, last, indptr, rows, crd, vals, X, Ys, out, strip);
        }
    }
}
