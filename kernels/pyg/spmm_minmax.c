/* (max, x) and (min, x) SpMM of a CSR matrix A with a dense row-major X, keeping the arg:
 *   out[i, j] = max_k A.val[k] * X[A.col[k], j] over row i's entries k (min: the minimum),
 *   arg[i, j] = the entry k that gave it (-1 and out = 0 for an empty row, as torch's
 *   spmm_reduce and PyG's scatter give; -2 where a product is NaN: out is NaN, as torch's
 *   scatter_reduce amax / amin give wherever one operand is NaN);
 * and the backward ("route") dX[A.col[arg[i, j]], j] += A.val[arg[i, j]] * dY[i, j] (a NaN
 * output sends NaN to every entry of its row, as scatter_reduce's backward does).
 * Ties keep the first entry in CSR order.
 *
 * A template of the cpu kernel pipeline's minmax family (cognate/targets/cpu/families/
 * minmax.py): ${width} (the dense width) and ${is_min} (0: max, 1: min) are integers checked
 * against the family's whitelists; nothing else reaches this source. Compiled with -O3
 * -march=native -fopenmp, no -ffast-math: the NaN handling relies on IEEE comparisons.
 * Signatures end with the dense operands then the output(s), as every cpu kernel's. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define WIDTH ${width}
#define IS_MIN ${is_min}
#define ARG_EMPTY (-1)
#define ARG_NAN (-2)

/* out, arg: rows x WIDTH. chunk: rows per OpenMP dynamic task. */
void cognate_minmax_spmm(const int32_t *indptr, const int32_t *indices, const float *values,
                         const float *x, float *out, int32_t *arg, int64_t rows,
                         int64_t cols, int64_t chunk) {
  (void)cols;
#pragma omp parallel for schedule(dynamic, chunk)
  for (int64_t i = 0; i < rows; i++) {
    /* out and arg rows written in place through restrict pointers (X, out and arg are
     * distinct buffers): row copies through a local array ran 5-8x slower (no aliasing
     * proof, so gcc kept the row in memory) */
    float *restrict o = out + i * WIDTH;
    int32_t *restrict a = arg + i * WIDTH;
    int32_t start = indptr[i], end = indptr[i + 1];
    if (start == end) {
      memset(o, 0, WIDTH * sizeof(float));
      for (int64_t j = 0; j < WIDTH; j++) a[j] = ARG_EMPTY;
      continue;
    }
    const float *restrict first = x + (int64_t)indices[start] * WIDTH;
    float v0 = values[start];
    for (int64_t j = 0; j < WIDTH; j++) {
      float t = v0 * first[j];
      o[j] = t;
      a[j] = t != t ? ARG_NAN : start;
    }
    for (int32_t k = start + 1; k < end; k++) {
      const float *restrict row = x + (int64_t)indices[k] * WIDTH;
      float v = values[k];
      /* a NaN product wins and stays (no comparison with NaN is true afterwards) */
      for (int64_t j = 0; j < WIDTH; j++) {
        float t = v * row[j];
        int nan = t != t;
        int take = IS_MIN ? t < o[j] : t > o[j];
        o[j] = (take | nan) ? t : o[j];
        a[j] = nan ? ARG_NAN : (take ? k : a[j]);
      }
    }
  }
}

/* dx (cols x WIDTH) = grad (rows x WIDTH) routed through arg. Threads own disjoint column
 * blocks of 16 (one cache line): each zeroes its block, then adds, no two write one element. */
void cognate_minmax_route(const int32_t *indptr, const int32_t *indices, const float *values,
                          const float *grad, const int32_t *arg, float *dx, int64_t rows,
                          int64_t cols, int64_t chunk) {
  const int64_t block = 16, blocks = (WIDTH + 15) / 16;
  (void)chunk;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; b++) {
    int64_t lo = b * block, hi = lo + block < WIDTH ? lo + block : WIDTH;
    for (int64_t r = 0; r < cols; r++) memset(dx + r * WIDTH + lo, 0, (size_t)(hi - lo) * 4);
    for (int64_t i = 0; i < rows; i++) {
      const int32_t *a = arg + i * WIDTH;
      const float *g = grad + i * WIDTH;
      for (int64_t j = lo; j < hi; j++) {
        int32_t k = a[j];
        if (k >= 0) {
          dx[(int64_t)indices[k] * WIDTH + j] += values[k] * g[j];
        } else if (k == ARG_NAN) {
          for (int32_t e = indptr[i]; e < indptr[i + 1]; e++)
            dx[(int64_t)indices[e] * WIDTH + j] = NAN;
        }
      }
    }
  }
}
