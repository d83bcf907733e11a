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
 * minmax.py): ${width} (the dense width), ${is_min} (0: max, 1: min), ${args} (0 / 1),
 * ${tile} and ${vbytes} are integers checked against the family's whitelists; nothing else
 * reaches this source. Compiled with -O3 -march=native -fopenmp, no -ffast-math: the NaN
 * handling relies on IEEE comparisons.
 * Signatures end with the dense operands then the output(s), as every cpu kernel's. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define WIDTH ${width}
#define IS_MIN ${is_min}
/* 1: keep the args (the backward needs them); 0: the output alone (an input that needs no
 * gradient, e.g. a first layer's features): no arg registers, selects or stores */
#define ARGS ${args}
#define ARG_EMPTY (-1)
#define ARG_NAN (-2)

/* The register tile of the forward (both whitelisted integers): VBYTES-byte vectors (the
 * host's widest: gcc never widens an explicit vector type), up to TILE of them (TILE * LANES
 * columns) of out and arg held in registers through one pass over a row's entries, stored
 * once. The first version updated out and arg in memory for every entry and ran 3-4x slower
 * than torch's spmm_reduce at width 128 (a store of 2 x 512 bytes per entry). */
enum { VBYTES = ${vbytes}, TILE = ${tile} };
enum { LANES = VBYTES / 4, PASS = TILE * LANES };
/* A row's columns: full passes up to FULL, then REST vectors, then scalar columns from TAIL */
enum { FULL = WIDTH / PASS * PASS, REST = (WIDTH - FULL) / LANES, TAIL = FULL + REST * LANES };
typedef float vf __attribute__((vector_size(VBYTES), aligned(4)));
typedef int32_t vi __attribute__((vector_size(VBYTES), aligned(4)));

/* m ? a : b lane by lane (m: all ones or zero per lane; C has no vector ?:) */
static inline __attribute__((always_inline)) vf pick_f(vi m, vf a, vf b) {
  return (vf)(((vi)a & m) | ((vi)b & ~m));
}
static inline __attribute__((always_inline)) vi pick_i(vi m, vi a, vi b) {
  return (a & m) | (b & ~m);
}

/* Columns [j0, j1) of row [start, end) (start < end), one at a time. */
static inline __attribute__((always_inline)) void row_tail(
    const int32_t start, const int32_t end, const int32_t *restrict indices,
    const float *restrict values, const float *restrict x, float *restrict o,
    int32_t *restrict a, const int64_t j0, const int64_t j1) {
  for (int64_t j = j0; j < j1; j++) {
    float best = values[start] * x[(int64_t)indices[start] * WIDTH + j];
    int32_t won = best != best ? ARG_NAN : start;
    for (int32_t k = start + 1; k < end; k++) {
      float t = values[k] * x[(int64_t)indices[k] * WIDTH + j];
      int nan = t != t;
      int take = IS_MIN ? t < best : t > best;
      best = (take | nan) ? t : best;
      won = nan ? ARG_NAN : (take ? k : won);
    }
    o[j] = best;
    if (ARGS) a[j] = won;
  }
}

#if defined(__AVX512F__) && VBYTES == 64
#include <immintrin.h>
/* t replaces the kept value where t > kept (max) / t < kept (min) or either is NaN: the
 * unordered predicates; ties keep the first entry. */
#define TAKE (IS_MIN ? _CMP_NGE_UQ : _CMP_NLE_UQ)

/* Columns [j, j + nv * LANES) of row [start, end) (start < end), in zmm registers with
 * AVX-512 masked moves: a product, a compare and one or two masked moves per vector (the
 * generic vectors' bit selects compiled to two xors each). NaN lanes are rare: one mask
 * tracks whether any product of the tile was NaN, and such a tile is redone one column at a
 * time (exact: the NaN wins and stays, its arg is ARG_NAN). */
static inline __attribute__((always_inline)) void row_tile(
    const int32_t start, const int32_t end, const int32_t *restrict indices,
    const float *restrict values, const float *restrict x, float *restrict o,
    int32_t *restrict a, const int64_t j, const int nv) {
  __m512 best[TILE];
  __m512i won[TILE];
  __mmask16 ok = 0xFFFF;
  const float *first = x + (int64_t)indices[start] * WIDTH + j;
  const __m512 v0 = _mm512_set1_ps(values[start]);
  for (int q = 0; q < nv; q++) {
    best[q] = _mm512_mul_ps(_mm512_loadu_ps(first + q * LANES), v0);
    ok = _mm512_mask_cmp_ps_mask(ok, best[q], best[q], _CMP_ORD_Q);
    if (ARGS) won[q] = _mm512_set1_epi32(start);
  }
  for (int32_t k = start + 1; k < end; k++) {
    const float *row = x + (int64_t)indices[k] * WIDTH + j;
    const __m512 v = _mm512_set1_ps(values[k]);
    const __m512i kk = _mm512_set1_epi32(k);
    for (int q = 0; q < nv; q++) {
      const __m512 t = _mm512_mul_ps(_mm512_loadu_ps(row + q * LANES), v);
      const __mmask16 take = _mm512_cmp_ps_mask(t, best[q], TAKE);
      best[q] = _mm512_mask_mov_ps(best[q], take, t);
      if (ARGS) won[q] = _mm512_mask_mov_epi32(won[q], take, kk);
      ok = _mm512_mask_cmp_ps_mask(ok, t, t, _CMP_ORD_Q);
    }
  }
  if (ok != 0xFFFF) {
    row_tail(start, end, indices, values, x, o, a, j, j + (int64_t)nv * LANES);
    return;
  }
  for (int q = 0; q < nv; q++) {
    _mm512_storeu_ps(o + j + q * LANES, best[q]);
    if (ARGS) _mm512_storeu_si512((void *)(a + j + q * LANES), won[q]);
  }
}
#else
/* Columns [j, j + nv * LANES) of row [start, end) (start < end), in registers. A NaN
 * product wins and stays: no comparison with NaN is true afterwards. */
static inline __attribute__((always_inline)) void row_tile(
    const int32_t start, const int32_t end, const int32_t *restrict indices,
    const float *restrict values, const float *restrict x, float *restrict o,
    int32_t *restrict a, const int64_t j, const int nv) {
  vf best[TILE];
  vi won[TILE];
  const float *first = x + (int64_t)indices[start] * WIDTH + j;
  for (int q = 0; q < nv; q++) {
    vf t;
    memcpy(&t, first + q * LANES, sizeof t);
    t *= values[start];
    best[q] = t;
    if (ARGS) won[q] = pick_i(t != t, (vi){} + ARG_NAN, (vi){} + start);
  }
  for (int32_t k = start + 1; k < end; k++) {
    const float *row = x + (int64_t)indices[k] * WIDTH + j;
    const float v = values[k];
    for (int q = 0; q < nv; q++) {
      vf t;
      memcpy(&t, row + q * LANES, sizeof t);
      t *= v;
      vi nan = t != t;
      vi take = IS_MIN ? t < best[q] : t > best[q];
      best[q] = pick_f(take | nan, t, best[q]);
      if (ARGS) won[q] = pick_i(nan, (vi){} + ARG_NAN, pick_i(take, (vi){} + k, won[q]));
    }
  }
  for (int q = 0; q < nv; q++) {
    memcpy(o + j + q * LANES, &best[q], sizeof best[q]);
    if (ARGS) memcpy(a + j + q * LANES, &won[q], sizeof won[q]);
  }
}

#endif

/* out, arg: rows x WIDTH (arg untouched when ARGS is 0). chunk: rows per OpenMP dynamic task. */
void cognate_minmax_spmm(const int32_t *indptr, const int32_t *indices, const float *values,
                         const float *x, float *out, int32_t *arg, int64_t rows,
                         int64_t cols, int64_t chunk) {
  (void)cols;
#pragma omp parallel for schedule(dynamic, chunk)
  for (int64_t i = 0; i < rows; i++) {
    float *restrict o = out + i * WIDTH;
    int32_t *restrict a = arg + i * WIDTH;
    const int32_t start = indptr[i], end = indptr[i + 1];
    if (start == end) {
      memset(o, 0, WIDTH * sizeof(float));
      for (int64_t j = 0; ARGS && j < WIDTH; j++) a[j] = ARG_EMPTY;
      continue;
    }
    for (int64_t j = 0; j < FULL; j += PASS) row_tile(start, end, indices, values, x, o, a, j, TILE);
    if (REST) row_tile(start, end, indices, values, x, o, a, FULL, REST);
    if (TAIL < WIDTH) row_tail(start, end, indices, values, x, o, a, TAIL, WIDTH);
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
