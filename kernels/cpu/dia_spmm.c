/* DIA SpMM  C = A @ B  with A (M x K) stored as diagonals (cognate/targets/cpu/families/dia.py).
 *
 * Template filled by cognate/targets/cpu/families/dia.py (string.Template): the register tile
 * (RT rows x JT dense columns) and the dense width N are whitelisted integers.
 *
 * Layout. Row i's entry on a diagonal of offset o sits in column (i + o) mod K (wrapped
 * diagonals; plain ones are the case that never wraps). Values are stored per row tile of RT
 * rows, RT values per (tile, diagonal) entry (0 where the diagonal has no entry in that row):
 * entry e of tile t holds rows [t * RT, t * RT + RT) at vals[e * RT + r], the last tile padded
 * with zeros. Two layouts share this kernel (`local`, chosen by the packer: whichever stores
 * fewer values):
 * - global (local = 0): every tile holds all ndiag diagonals, entries t * ndiag + d, and
 *   cols[d] is diagonal d's offset (the classic DIA; no per-tile index);
 * - tile-local (local = 1): tile t holds only the diagonals with an entry in its rows,
 *   entries tptr[t] .. tptr[t + 1], and cols[e] is the column of the tile's first row on
 *   entry e ((t * RT + offset) mod K). A diagonal shorter than the matrix (DynaDiag's out > in
 *   layers) pads only where it starts or ends inside a tile, where the global layout pads it
 *   to all M rows (3.4x the nonzeros on the 90% 3072 x 768 layer, every padded value costing
 *   its multiply-adds).
 * B is read through col_map (B row col_map[c] for A's column c; not read when `ident`, the
 * identity map), C written through row_map (C row row_map[i] for A's row i): a permutation is
 * absorbed in the index maps, with no separate shuffle pass.
 * The dense tile loop is outermost: all threads sweep one JT-wide column slice of B at a
 * time, a slice small enough to stay in each core's L2 while every diagonal reads it.
 * Vectors are the host's widest (512-bit where gcc -march=native defines __AVX512F__, else
 * 256-bit), never wider than the JT-column tile.
 */
#pragma GCC optimize("fp-contract=fast")
#include <stdint.h>

enum { RT = ${rtile}, JT = ${jtile}, PF = 8 };
${host_vectors}
static const int64_t N = ${width};

/* One full register tile: rows [t * RT, t * RT + RT), dense columns [j, j + JT). LOCAL and
 * IDENT are constants at every call (the four variants are compiled apart). */
static inline __attribute__((always_inline)) void
tile(const int64_t *restrict tptr, const int32_t *restrict cols, const float *restrict vals,
     const int32_t *restrict col_map, const int32_t *restrict row_map, const float *restrict B,
     float *restrict C, const int64_t K, const int64_t ndiag, const int64_t t, const int64_t j,
     const int LOCAL, const int IDENT)
{
    const int64_t i0 = t * RT;
    const int64_t base = i0 % K;
    const int64_t e0 = LOCAL ? tptr[t] : t * ndiag;
    const int64_t e1 = LOCAL ? tptr[t + 1] : e0 + ndiag;
    const int32_t *restrict col = LOCAL ? cols + e0 : cols;
    const float *restrict v = vals + e0 * RT;
    vf acc[RT][NV];
    for (int r = 0; r < RT; r++)
        for (int q = 0; q < NV; q++) acc[r][q] = (vf){0};
    for (int64_t e = 0; e < e1 - e0; e++, v += RT) {
        int64_t first = col[e];
        if (!LOCAL) {
            first += base;
            first -= first >= K ? K : 0;  /* < K, and RT <= K (the caller checks): one wrap */
        }
        /* Under a column permutation B's rows are scattered and the hardware prefetcher
         * cannot guess them: fetch the rows PF entries ahead (measured: the permuted 4096
         * k-diagonal layer ran ~20% faster with it; with narrow tiles it costs more than it
         * saves). In order (ident) a tile's RT rows are one run of B the prefetcher follows. */
        if (!IDENT && JT >= 32 && e + PF < e1 - e0) {
            int64_t ahead = col[e + PF];
            if (!LOCAL) {
                ahead += base;
                ahead -= ahead >= K ? K : 0;
            }
            #pragma GCC unroll 16
            for (int r = 0; r < RT; r++) {
                int64_t c = ahead + r;
                c -= c >= K ? K : 0;
                const float *p = B + (int64_t)col_map[c] * N + j;
                for (int q = 0; q < JT; q += 16) __builtin_prefetch(p + q, 0, 3);
            }
        }
        #pragma GCC unroll 16
        for (int r = 0; r < RT; r++) {
            int64_t c = first + r;
            c -= c >= K ? K : 0;
            const float *restrict b = B + (IDENT ? c : (int64_t)col_map[c]) * N + j;
            const float a = v[r];
            for (int q = 0; q < NV; q++) acc[r][q] += a * *(const vf *)(b + VL * q);
        }
    }
    for (int r = 0; r < RT; r++) {
        float *restrict c = C + (int64_t)row_map[i0 + r] * N + j;
        for (int q = 0; q < NV; q++) *(vf *)(c + VL * q) = acc[r][q];
    }
}

/* Rows [t * RT, t * RT + rows) and dense columns [j, N): the edges (scalar, any sizes). */
static void edge(const int64_t *restrict tptr, const int32_t *restrict cols,
                 const float *restrict vals, const int32_t *restrict col_map,
                 const int32_t *restrict row_map, const float *restrict B, float *restrict C,
                 const int64_t K, const int64_t ndiag, const int64_t local, const int64_t t,
                 const int64_t rows, const int64_t j)
{
    const int64_t e0 = local ? tptr[t] : t * ndiag;
    const int64_t e1 = local ? tptr[t + 1] : e0 + ndiag;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = t * RT + r;
        float *restrict c = C + (int64_t)row_map[i] * N;
        for (int64_t q = j; q < N; q++) c[q] = 0.0f;
        for (int64_t e = e0; e < e1; e++) {
            const float a = vals[e * RT + r];
            const int64_t first = local ? cols[e] : (t * RT) % K + cols[e - e0];
            const float *restrict b = B + (int64_t)col_map[(first + r) % K] * N;
            for (int64_t q = j; q < N; q++) c[q] += a * b[q];
        }
    }
}

/* The full tiles of every dense slice, shared out among the threads (no barrier between
 * slices: they write disjoint columns of C). */
#define SLICES(LOCAL, IDENT)                                                                \
    for (int64_t j = 0; j < jfull; j += JT) {                                               \
        _Pragma("omp for schedule(dynamic, chunk) nowait")                                  \
        for (int64_t t = 0; t < tiles; t++)                                                 \
            tile(tptr, cols, vals, col_map, row_map, B, C, K, ndiag, t, j, LOCAL, IDENT);   \
    }

void cognate_dia_spmm(const int64_t *restrict tptr, const int32_t *restrict cols,
                      const float *restrict vals, const int32_t *restrict col_map,
                      const int32_t *restrict row_map, const float *restrict B,
                      float *restrict C, const int64_t M, const int64_t K, const int64_t ndiag,
                      const int64_t local, const int64_t ident, const int64_t chunk)
{
    const int64_t tiles = RT <= K ? M / RT : 0;  /* full register tiles */
    const int64_t jfull = N - N % JT;
    #pragma omp parallel
    {
        if (local && ident) SLICES(1, 1)
        else if (local) SLICES(1, 0)
        else if (ident) SLICES(0, 1)
        else SLICES(0, 0)
        #pragma omp for schedule(dynamic, chunk)
        for (int64_t t = 0; t < tiles; t++)
            if (jfull < N)
                edge(tptr, cols, vals, col_map, row_map, B, C, K, ndiag, local, t, RT, jfull);
        #pragma omp single
        for (int64_t t = tiles; t * RT < M; t++) {
            const int64_t rows = M - t * RT < RT ? M - t * RT : RT;
            edge(tptr, cols, vals, col_map, row_map, B, C, K, ndiag, local, t, rows, 0);
        }
    }
}
