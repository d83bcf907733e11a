/* DIA SpMM  C = A @ B  with A (M x K) stored as diagonals (cognate/targets/cpu/families/dia.py).
 *
 * Template filled by cognate/targets/cpu/families/dia.py (string.Template): the register tile
 * (RT rows x JT dense columns) and the dense width N are whitelisted integers.
 * Diagonal d has offset offs[d] in [0, K); row i's entry on it sits in column
 * (i + offs[d]) mod K (wrapped diagonals; plain ones are the case that never wraps). Values
 * are stored per row tile of RT rows, diagonal by diagonal: value (i, d) at
 * vals[((i / RT) * ndiag + d) * RT + i % RT] (0 where the diagonal has no entry), so a tile
 * streams its values contiguously. B is read through col_map (B row col_map[c] for A's
 * column c), C written through row_map (C row row_map[i] for A's row i): a permutation is
 * absorbed in the index maps, with no separate shuffle pass.
 * The dense tile loop is outermost: all threads sweep one JT-wide column slice of B at a
 * time, a slice small enough to stay in each core's L2 while every diagonal reads it.
 */
#pragma GCC optimize("fp-contract=fast")
#include <stdint.h>

typedef float vf __attribute__((vector_size(32), aligned(4)));
enum { RT = ${rtile}, JT = ${jtile}, NV = ${jtile} / 8, PF = 8 };
static const int64_t N = ${width};

/* One full register tile: rows [t * RT, t * RT + RT), dense columns [j, j + JT). */
static inline void tile(const int32_t *restrict offs, const float *restrict vals,
                        const int32_t *restrict col_map, const int32_t *restrict row_map,
                        const float *restrict B, float *restrict C, int64_t K,
                        int64_t ndiag, int64_t t, int64_t j)
{
    const int64_t i0 = t * RT;
    const int64_t base = i0 % K;
    const float *restrict v = vals + t * ndiag * RT;
    vf acc[RT][NV];
    for (int r = 0; r < RT; r++)
        for (int q = 0; q < NV; q++) acc[r][q] = (vf){0};
    for (int64_t d = 0; d < ndiag; d++, v += RT) {
        int64_t first = base + offs[d];
        first -= first >= K ? K : 0;  /* < K, and RT <= K (the caller checks): one wrap */
        /* Prefetch the B rows PF diagonals ahead: they are scattered (random offsets, and
         * random rows under a column permutation), so the hardware prefetcher cannot guess
         * them (measured: the permuted 4096 k-diagonal layer ran ~20% faster with it). With
         * narrow tiles the prefetches cost more than they save. */
        if (JT >= 32 && d + PF < ndiag) {
            int64_t ahead = base + offs[d + PF];
            ahead -= ahead >= K ? K : 0;
            #pragma GCC unroll 16
            for (int r = 0; r < RT; r++) {
                int64_t col = ahead + r;
                col -= col >= K ? K : 0;
                const float *p = B + (int64_t)col_map[col] * N + j;
                for (int q = 0; q < JT; q += 16) __builtin_prefetch(p + q, 0, 3);
            }
        }
        #pragma GCC unroll 16
        for (int r = 0; r < RT; r++) {
            int64_t col = first + r;
            col -= col >= K ? K : 0;
            const float *restrict b = B + (int64_t)col_map[col] * N + j;
            const float a = v[r];
            for (int q = 0; q < NV; q++) acc[r][q] += a * *(const vf *)(b + 8 * q);
        }
    }
    for (int r = 0; r < RT; r++) {
        float *restrict c = C + (int64_t)row_map[i0 + r] * N + j;
        for (int q = 0; q < NV; q++) *(vf *)(c + 8 * q) = acc[r][q];
    }
}

/* Rows [i0, i0 + rows) and dense columns [j, N): the edges (scalar, any sizes). */
static void edge(const int32_t *restrict offs, const float *restrict vals,
                 const int32_t *restrict col_map, const int32_t *restrict row_map,
                 const float *restrict B, float *restrict C, int64_t K, int64_t ndiag,
                 int64_t i0, int64_t rows, int64_t j)
{
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = i0 + r;
        float *restrict c = C + (int64_t)row_map[i] * N;
        for (int64_t q = j; q < N; q++) c[q] = 0.0f;
        for (int64_t d = 0; d < ndiag; d++) {
            const float a = vals[((i / RT) * ndiag + d) * RT + i % RT];
            int64_t col = (i % K + offs[d]) % K;
            const float *restrict b = B + (int64_t)col_map[col] * N;
            for (int64_t q = j; q < N; q++) c[q] += a * b[q];
        }
    }
}

void cognate_dia_spmm(const int32_t *restrict offs, const float *restrict vals,
                      const int32_t *restrict col_map, const int32_t *restrict row_map,
                      const float *restrict B, float *restrict C, const int64_t M,
                      const int64_t K, const int64_t ndiag, const int64_t chunk)
{
    const int64_t tiles = RT <= K ? M / RT : 0;  /* full register tiles */
    const int64_t jfull = N - N % JT;
    #pragma omp parallel
    {
        /* nowait: dense tiles write disjoint columns of C */
        for (int64_t j = 0; j < jfull; j += JT) {
            #pragma omp for schedule(dynamic, chunk) nowait
            for (int64_t t = 0; t < tiles; t++)
                tile(offs, vals, col_map, row_map, B, C, K, ndiag, t, j);
        }
        #pragma omp for schedule(dynamic, chunk)
        for (int64_t t = 0; t < tiles; t++)
            if (jfull < N) edge(offs, vals, col_map, row_map, B, C, K, ndiag, t * RT, RT, jfull);
        #pragma omp single
        edge(offs, vals, col_map, row_map, B, C, K, ndiag, tiles * RT, M - tiles * RT, 0);
    }
}
