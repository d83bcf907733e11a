/* Reordered-BCSR SpMM  C = A @ B  (cognate/targets/cpu/families/bcsr.py).
 *
 * Template filled by cognate/targets/cpu/families/bcsr.py (string.Template): block rows BR, block
 * columns BC, dense tile JT and the dense width N are whitelisted integers.
 * Block row b holds BR consecutive rows of the reordered matrix; its blocks are
 * bptr[b] .. bptr[b+1]-1, block p covers columns bcol[p] * BC .. + BC - 1 and stores a dense
 * BR x BC tile at vals + p * BR * BC (row-major). The rows of block row b are written to C
 * rows out_rows[b * BR + r] (-1: a padding row): the reordering and any row permutation are
 * one index map, and B rows are read through col_map. Each B row slice loaded is reused by
 * the BR rows of the block from registers.
 * Vectors are the host's widest (512-bit where gcc -march=native defines __AVX512F__, else
 * 256-bit), never wider than the JT-column tile: with 256-bit vectors on an AVX-512 host, a
 * matrix of repeated rows (nemspmm1_16x4_0, 8 x 1 blocks) ran 1.18 ms, with 512-bit 0.83 ms.
 */
#pragma GCC optimize("fp-contract=fast")
#include <stdint.h>

enum { BR = ${brows}, BC = ${bcols}, JT = ${jtile} };
${host_vectors}
static const int64_t N = ${width};

/* Dense columns [j, j + JT) of block row b, in registers. */
static inline void tile(const int64_t *restrict bptr, const int32_t *restrict bcol,
                        const float *restrict vals, const int32_t *restrict col_map,
                        const int32_t *restrict out_rows, const float *restrict B,
                        float *restrict C, int64_t K, int64_t b, int64_t j)
{
    vf acc[BR][NV];
    for (int r = 0; r < BR; r++)
        for (int q = 0; q < NV; q++) acc[r][q] = (vf){0};
    for (int64_t p = bptr[b]; p < bptr[b + 1]; p++) {
        const float *restrict blk = vals + p * (BR * BC);
        const int64_t c0 = (int64_t)bcol[p] * BC;
        const int64_t width = K - c0 < BC ? K - c0 : BC;
        for (int64_t cc = 0; cc < width; cc++) {
            const float *restrict brow = B + (int64_t)col_map[c0 + cc] * N + j;
            vf bv[NV];
            for (int q = 0; q < NV; q++) bv[q] = *(const vf *)(brow + VL * q);
            for (int r = 0; r < BR; r++) {
                const float a = blk[r * BC + cc];
                for (int q = 0; q < NV; q++) acc[r][q] += a * bv[q];
            }
        }
    }
    for (int r = 0; r < BR; r++) {
        const int32_t row = out_rows[b * BR + r];
        if (row < 0) continue;
        float *restrict c = C + (int64_t)row * N + j;
        for (int q = 0; q < NV; q++) *(vf *)(c + VL * q) = acc[r][q];
    }
}

/* Dense columns [j, N) of block row b (the tail narrower than JT), scalar. */
static void edge(const int64_t *restrict bptr, const int32_t *restrict bcol,
                 const float *restrict vals, const int32_t *restrict col_map,
                 const int32_t *restrict out_rows, const float *restrict B,
                 float *restrict C, int64_t K, int64_t b, int64_t j)
{
    for (int r = 0; r < BR; r++) {
        const int32_t row = out_rows[b * BR + r];
        if (row < 0) continue;
        float *restrict c = C + (int64_t)row * N;
        for (int64_t q = j; q < N; q++) c[q] = 0.0f;
        for (int64_t p = bptr[b]; p < bptr[b + 1]; p++) {
            const int64_t c0 = (int64_t)bcol[p] * BC;
            const int64_t width = K - c0 < BC ? K - c0 : BC;
            for (int64_t cc = 0; cc < width; cc++) {
                const float a = vals[p * (BR * BC) + r * BC + cc];
                const float *restrict brow = B + (int64_t)col_map[c0 + cc] * N;
                for (int64_t q = j; q < N; q++) c[q] += a * brow[q];
            }
        }
    }
}

void cognate_bcsr_spmm(const int64_t *restrict bptr, const int32_t *restrict bcol,
                       const float *restrict vals, const int32_t *restrict col_map,
                       const int32_t *restrict out_rows, const float *restrict B,
                       float *restrict C, const int64_t K, const int64_t nbrows,
                       const int64_t chunk)
{
    const int64_t jfull = N - N % JT;
    #pragma omp parallel for schedule(dynamic, chunk)
    for (int64_t b = 0; b < nbrows; b++) {
        for (int64_t j = 0; j < jfull; j += JT)
            tile(bptr, bcol, vals, col_map, out_rows, B, C, K, b, j);
        if (jfull < N) edge(bptr, bcol, vals, col_map, out_rows, B, C, K, b, jfull);
    }
}
