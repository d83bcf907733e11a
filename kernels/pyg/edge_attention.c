/* Attention aggregation in three row-parallel passes, fused: the edges' scores, their
 * softmax per target and the weighted SpMM (forward), and its backward. GATConv's additive
 * scores (SCORE 0) and TransformerConv's dot products (SCORE 1). A is the adjacency as PyG's
 * adj_t (row = target i, column = source j) in CSR; features are laid out (nodes, HEADS, CH)
 * row-major, as PyG's layers make them; per-edge arrays (edges, HEADS) in A's CSR order.
 * src / dst: the scores' source and target operands (GAT: a_src, a_dst, nodes x HEADS;
 * TransformerConv: k, q, nodes x HEADS * CH); param = params[0] (GAT: the negative slope;
 * TransformerConv: sqrt(CH)).
 *
 *   forward:   s[k, h] = leaky_relu(a_src[j, h] + a_dst[i, h]) or q[i, h, :] . k[j, h, :] /
 *              sqrt(CH) for entry k = (i, j);
 *              alpha[k, h] = exp(s - max_row s) / (sum_row exp(s - max_row s) + 1e-16)
 *              (PyG's softmax: the row maximum subtracted, 1e-16 added to the sum);
 *              out[i, h, :] = sum_k alpha[k, h] x[j, h, :]
 *   backward:  (A's rows) d[k, h] = dout[i, h, :] . x[j, h, :];
 *              ds = alpha (d - sum_row alpha d) (the maximum held constant, as PyG);
 *              dpre[k, h] = ds * leaky_relu'(a_src[j, h] + a_dst[i, h]) or ds / sqrt(CH);
 *              ddst[i] = sum_row dpre (GAT's da_dst) or sum_row dpre k[j] (dq)
 *   transpose: (A^T's rows: t_entry maps A^T's entries to A's) dx[j, h, :] = sum alpha[k, h]
 *              dout[i, h, :]; dsrc[j] = sum dpre (GAT's da_src) or sum dpre q[i] (dk)
 *
 * Why fused: run as torch ops on A's CSR order (gathers, segment reductions, the SDDMM and
 * SpMM of kron(A, I_heads)), the aggregation made about ten passes over the edges' arrays;
 * here each pass reads a row's entries once more with the row's output or gradient held in
 * registers. No atomics: every output element is written by the one task owning its row,
 * so results do not depend on the threads.
 *
 * A template of the cpu kernel pipeline's attention family (cognate/targets/cpu/families/
 * attention.py): ${heads}, ${channels}, ${score} and ${vbytes} are integers checked against
 * the family's whitelists; nothing else reaches this source.
 * Signatures end with the dense operands then the outputs, as every cpu kernel's. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define HEADS ${heads}
#define CH ${channels}
/* 0: GAT's additive scores leaky_relu(a_src[j] + a_dst[i]) (src, dst: nodes x HEADS);
 * 1: TransformerConv's q_i . k_j / sqrt(CH) (src = k, dst = q: nodes x HEADS * CH) */
#define SCORE ${score}
#define VBYTES ${vbytes}
#define LANES (VBYTES / 4)
enum { W = HEADS * CH, SW = SCORE == 0 ? HEADS : W };
/* a head's channels: whole vectors up to VEC, then scalars */
enum { VEC = CH / LANES * LANES };
typedef float vf __attribute__((vector_size(VBYTES), aligned(4)));
typedef int32_t vi __attribute__((vector_size(VBYTES), aligned(4)));

static inline __attribute__((always_inline)) vf load(const float *p) {
  vf v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline __attribute__((always_inline)) void store(float *p, vf v) {
  memcpy(p, &v, sizeof v);
}

/* the sum of v's lanes by halving (a lane-by-lane sum is one long chain of adds: it made
 * the backward's dot products its slowest part) */
static inline __attribute__((always_inline)) float hsum(vf v) {
#if LANES == 16
  v += __builtin_shuffle(v, (vi){8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7});
#endif
#if LANES >= 8
  v += __builtin_shuffle(v, LANES == 16 ? (vi){4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3}
                                        : (vi){4, 5, 6, 7, 0, 1, 2, 3});
#endif
  return (v[0] + v[2]) + (v[1] + v[3]);
}

/* exp(x) lane by lane (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, a degree-6 polynomial
 * in r, 2^n put in the exponent bits; within 2 ulp of expf): the softmax's exponentials are
 * a row's contiguous scores, and a scalar expf per score cost as much as the rest of the
 * forward. 0 below -87.3 (-inf included), NaN for NaN. */
static inline __attribute__((always_inline)) vf vexp(vf x) {
  const vf magic = (vf){} + 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  const vf t = x * 1.44269504088896341f + magic;
  const vf n = t - magic;
  const vf r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  vf p = (vf){} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const vf y = p * r * r + r + 1.0f;
  const vi scale = (((vi)t - (vi)magic) + 127) << 23;
  return (vf)((vi)(y * (vf)scale) & ~(x < -87.3f));
}

/* leaky_relu's slope at v (1 above 0, as torch's), selected by a mask: the scores' signs
 * are random, and the branch gcc makes of a ?: mispredicted on half of them (most of the
 * backward's time) */
static inline __attribute__((always_inline)) float leaky_slope(float v, float slope) {
  const uint32_t above = -(uint32_t)(v > 0.0f);
  uint32_t bits;
  memcpy(&bits, &slope, sizeof bits);
  bits = (0x3f800000u & above) | (bits & ~above); /* 0x3f800000: 1.0f */
  float out;
  memcpy(&out, &bits, sizeof out);
  return out;
}

/* acc[0 .. W) += w[h] * row[h * CH ...] for every head */
static inline __attribute__((always_inline)) void axpy_heads(
    float *restrict acc, const float *restrict w, const float *restrict row) {
  for (int h = 0; h < HEADS; h++) {
    const float *r = row + h * CH;
    float *a = acc + h * CH;
    const vf wv = (vf){} + w[h];
    for (int c = 0; c < VEC; c += LANES) store(a + c, load(a + c) + wv * load(r + c));
    for (int c = VEC; c < CH; c++) a[c] += w[h] * r[c];
  }
}

/* dot[h] = g[h, :] . row[h, :] */
static inline __attribute__((always_inline)) void dot_heads(
    float *restrict dot, const float *restrict g, const float *restrict row) {
  for (int h = 0; h < HEADS; h++) {
    const float *a = g + h * CH, *b = row + h * CH;
    float s = 0.0f;
    if (VEC) {
      vf v = load(a) * load(b);
      for (int c = LANES; c < VEC; c += LANES) v += load(a + c) * load(b + c);
      s = hsum(v);
    }
    for (int c = VEC; c < CH; c++) s += a[c] * b[c];
    dot[h] = s;
  }
}

/* s[q] = exp(s[q] - top[q % HEADS]) for q < n (a row's scores, heads interleaved) */
static inline __attribute__((always_inline)) void row_exp(
    float *restrict s, const int64_t n, const float *restrict top) {
  float tops[LANES + HEADS]; /* tops[m] = top[m % HEADS]: the lanes' maxima from any head */
  for (int m = 0; m < LANES + HEADS; m++) tops[m] = top[m % HEADS];
  int64_t q = 0;
  for (; q + LANES <= n; q += LANES) store(s + q, vexp(load(s + q) - load(tops + q % HEADS)));
  if (q < n) {
    float part[LANES] = {0};
    memcpy(part, s + q, (n - q) * sizeof(float));
    vf v = vexp(load(part) - load(tops + q % HEADS));
    memcpy(s + q, &v, (n - q) * sizeof(float));
  }
}

/* The score of entry (i, j) per head into s[0 .. HEADS) */
static inline __attribute__((always_inline)) void scores(
    float *restrict s, const float *restrict src_j, const float *restrict dst_i,
    const float param) {
#if SCORE == 0
  for (int h = 0; h < HEADS; h++) {
    const float v = src_j[h] + dst_i[h];
    s[h] = v * leaky_slope(v, param);
  }
#else
  dot_heads(s, dst_i, src_j);
  for (int h = 0; h < HEADS; h++) s[h] /= param;
#endif
}

void cognate_attention_forward(
    const int32_t *restrict indptr, const int32_t *restrict indices,
    const float *restrict src, const float *restrict dst, const float *restrict x,
    const float *restrict params, float *restrict out, float *restrict alpha,
    const int64_t rows, const int64_t cols, const int64_t chunk) {
  (void)cols;
  const float param = params[0];
#pragma omp parallel for schedule(dynamic, chunk)
  for (int64_t i = 0; i < rows; i++) {
    const int32_t start = indptr[i], end = indptr[i + 1];
    float top[HEADS], total[HEADS], acc[W];
    for (int h = 0; h < HEADS; h++) top[h] = -INFINITY, total[h] = 0.0f;
    for (int c = 0; c < W; c++) acc[c] = 0.0f;
    for (int32_t k = start; k < end; k++) {
      float *s = alpha + (int64_t)k * HEADS;
      scores(s, src + (int64_t)indices[k] * SW, dst + i * SW, param);
      for (int h = 0; h < HEADS; h++) top[h] = s[h] > top[h] ? s[h] : top[h];
    }
    row_exp(alpha + (int64_t)start * HEADS, (int64_t)(end - start) * HEADS, top);
    for (int32_t k = start; k < end; k++) {
      const float *s = alpha + (int64_t)k * HEADS;
      for (int h = 0; h < HEADS; h++) total[h] += s[h];
      axpy_heads(acc, s, x + (int64_t)indices[k] * W);
    }
    for (int h = 0; h < HEADS; h++) total[h] += 1e-16f;
    for (int32_t k = start; k < end; k++)
      for (int h = 0; h < HEADS; h++) alpha[(int64_t)k * HEADS + h] /= total[h];
    float *o = out + i * W;
    for (int h = 0; h < HEADS; h++)
      for (int c = 0; c < CH; c++) o[h * CH + c] = acc[h * CH + c] / total[h];
  }
}

void cognate_attention_backward(
    const int32_t *restrict indptr, const int32_t *restrict indices,
    const float *restrict src, const float *restrict dst, const float *restrict x,
    const float *restrict alpha, const float *restrict dout, const float *restrict params,
    float *restrict dpre, float *restrict ddst, const int64_t rows, const int64_t cols,
    const int64_t chunk) {
  (void)cols;
  const float param = params[0];
#pragma omp parallel for schedule(dynamic, chunk)
  for (int64_t i = 0; i < rows; i++) {
    const int32_t start = indptr[i], end = indptr[i + 1];
    const float *g = dout + i * W;
    float r[HEADS], acc[SW];
    for (int h = 0; h < HEADS; h++) r[h] = 0.0f;
    for (int c = 0; c < SW; c++) acc[c] = 0.0f;
    for (int32_t k = start; k < end; k++) {
      float *d = dpre + (int64_t)k * HEADS;
      dot_heads(d, g, x + (int64_t)indices[k] * W);
      for (int h = 0; h < HEADS; h++) r[h] += alpha[(int64_t)k * HEADS + h] * d[h];
    }
    for (int32_t k = start; k < end; k++) {
      const float *a = alpha + (int64_t)k * HEADS, *src_j = src + (int64_t)indices[k] * SW;
      float *d = dpre + (int64_t)k * HEADS;
      for (int h = 0; h < HEADS; h++) {
        const float ds = a[h] * (d[h] - r[h]);
#if SCORE == 0
        d[h] = ds * leaky_slope(src_j[h] + dst[i * SW + h], param);
        acc[h] += d[h];
#else
        d[h] = ds / param;
#endif
      }
#if SCORE == 1
      axpy_heads(acc, d, src_j); /* dq_i += dpre k_j */
#endif
    }
    memcpy(ddst + i * SW, acc, sizeof acc);
  }
}

void cognate_attention_transpose(
    const int32_t *restrict t_indptr, const int32_t *restrict t_indices,
    const int32_t *restrict t_entry, const float *restrict alpha, const float *restrict dpre,
    const float *restrict dout, const float *restrict dst, float *restrict dx,
    float *restrict dsrc, const int64_t rows, const int64_t cols, const int64_t chunk) {
  (void)cols;
#if SCORE == 0
  (void)dst; /* additive scores: their source side's gradient needs no target operand */
#endif
#pragma omp parallel for schedule(dynamic, chunk)
  for (int64_t j = 0; j < rows; j++) {
    float acc[W], sacc[SW];
    for (int c = 0; c < W; c++) acc[c] = 0.0f;
    for (int c = 0; c < SW; c++) sacc[c] = 0.0f;
    for (int32_t e = t_indptr[j]; e < t_indptr[j + 1]; e++) {
      const int64_t k = t_entry[e], i = t_indices[e];
      axpy_heads(acc, alpha + k * HEADS, dout + i * W);
#if SCORE == 0
      for (int h = 0; h < HEADS; h++) sacc[h] += dpre[k * HEADS + h];
#else
      axpy_heads(sacc, dpre + k * HEADS, dst + i * SW); /* dk_j += dpre q_i */
#endif
    }
    memcpy(dx + j * W, acc, sizeof acc);
    memcpy(dsrc + j * SW, sacc, sizeof sacc);
  }
}
