/* (max, x) and (min, x) SpMM of a CSR matrix A with a dense row-major X, keeping the arg:
 *   out[i, j] = max_k A.val[k] * X[A.col[k], j] over row i's entries k (min: the minimum),
 *   arg[i, j] = the entry k that gave it (-1 and out = 0 for an empty row, as torch's
 *   spmm_reduce and PyG's scatter give; -2 where a product is NaN: out is NaN, as torch's
 *   scatter_reduce amax / amin give wherever one operand is NaN);
 * and the backward dX[A.col[arg[i, j]], j] += A.val[arg[i, j]] * dY[i, j] (a NaN output
 * sends NaN to every entry of its row, as scatter_reduce's backward does).
 * Ties keep the first entry in CSR order. Compiled by cognate/build.py (-O3 -march=native
 * -fopenmp, no -ffast-math: the NaN tests rely on IEEE comparisons); called through ctypes
 * by cognate/pyg_minmax.py, which checks every shape and every tensor's storage. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define ARG_NAN (-2)

static void spmm_minmax(int64_t rows, int64_t width, const int32_t *indptr,
                        const int32_t *indices, const float *values, const float *x,
                        float *out, int32_t *arg, int is_min) {
#pragma omp parallel for schedule(dynamic, 32)
  for (int64_t i = 0; i < rows; i++) {
    float *o = out + i * width;
    int32_t *a = arg + i * width;
    int32_t start = indptr[i], end = indptr[i + 1];
    if (start == end) {
      memset(o, 0, (size_t)width * sizeof(float));
      for (int64_t j = 0; j < width; j++) a[j] = -1;
      continue;
    }
    const float *first = x + (int64_t)indices[start] * width;
    float v0 = values[start];
    for (int64_t j = 0; j < width; j++) {
      float t = v0 * first[j];
      o[j] = t;
      a[j] = t != t ? ARG_NAN : start;
    }
    for (int32_t k = start + 1; k < end; k++) {
      const float *row = x + (int64_t)indices[k] * width;
      float v = values[k];
      /* a NaN product wins and stays (no comparison with NaN is true afterwards) */
      if (is_min) {
        for (int64_t j = 0; j < width; j++) {
          float t = v * row[j];
          int nan = t != t;
          int take = t < o[j];
          o[j] = (take | nan) ? t : o[j];
          a[j] = nan ? ARG_NAN : (take ? k : a[j]);
        }
      } else {
        for (int64_t j = 0; j < width; j++) {
          float t = v * row[j];
          int nan = t != t;
          int take = t > o[j];
          o[j] = (take | nan) ? t : o[j];
          a[j] = nan ? ARG_NAN : (take ? k : a[j]);
        }
      }
    }
  }
}

void spmm_max(int64_t rows, int64_t width, const int32_t *indptr, const int32_t *indices,
              const float *values, const float *x, float *out, int32_t *arg) {
  spmm_minmax(rows, width, indptr, indices, values, x, out, arg, 0);
}

void spmm_min(int64_t rows, int64_t width, const int32_t *indptr, const int32_t *indices,
              const float *values, const float *x, float *out, int32_t *arg) {
  spmm_minmax(rows, width, indptr, indices, values, x, out, arg, 1);
}

/* dX (zeroed by the caller, cols x width) += the gradient routed through arg. Threads own
 * disjoint column blocks of dX's width, so no two write one element. */
void spmm_minmax_backward(int64_t rows, int64_t width, const int32_t *indptr,
                          const int32_t *indices, const float *values, const int32_t *arg,
                          const float *grad, float *dx) {
  const int64_t block = 16;
  int64_t blocks = (width + block - 1) / block;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; b++) {
    int64_t lo = b * block, hi = lo + block < width ? lo + block : width;
    for (int64_t i = 0; i < rows; i++) {
      const int32_t *a = arg + i * width;
      const float *g = grad + i * width;
      for (int64_t j = lo; j < hi; j++) {
        int32_t k = a[j];
        if (k >= 0) {
          dx[(int64_t)indices[k] * width + j] += values[k] * g[j];
        } else if (k == ARG_NAN) {
          for (int32_t e = indptr[i]; e < indptr[i + 1]; e++)
            dx[(int64_t)indices[e] * width + j] = NAN;
        }
      }
    }
  }
}
