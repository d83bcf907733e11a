/* DIA SDDMM  out = A * (X @ Y^T) on A's pattern, A (M x N) stored as diagonals.
 *
 * Template filled by cognate/targets/cpu/families/dia.py (string.Template): the row tile RT
 * and the dense width K are whitelisted integers. The layout is dia_spmm.c's: per row tile
 * of RT rows, RT values per (tile, diagonal) entry, 0 where the diagonal has no entry in that
 * row; global (local = 0: entries t * ndiag + d, cols[d] the offset) or tile-local (local = 1:
 * entries tptr[t] .. tptr[t + 1], cols[e] the column of the tile's first row). Row i's entry
 * on an entry whose tile starts in column c is in column (c + i % RT) mod N. out has the
 * layout of vals. X rows are read through row_map, Y rows through col_map (a permutation
 * absorbed in the index maps).
 */
#pragma GCC optimize("fp-contract=fast")
#include <stdint.h>

typedef float vf __attribute__((vector_size(32), aligned(4)));
enum { RT = ${rtile} };
static const int64_t K = ${width};

static inline int64_t wrap(int64_t col, int64_t N) {
    while (col >= N) col -= N;
    return col;
}

${dot_product}

void cognate_dia_sddmm(const int64_t *restrict tptr, const int32_t *restrict cols,
                       const float *restrict vals, const int32_t *restrict col_map,
                       const int32_t *restrict row_map, const float *restrict X,
                       const float *restrict Y, float *restrict out, const int64_t M,
                       const int64_t N, const int64_t ndiag, const int64_t local,
                       const int64_t ident, const int64_t chunk)
{
    (void)ident;  /* the dot products' loads dominate: one kernel for both maps */
    const int64_t tiles = (M + RT - 1) / RT;
    #pragma omp parallel for schedule(dynamic, chunk)
    for (int64_t t = 0; t < tiles; t++) {
        const int64_t i0 = t * RT;
        const int64_t rows = M - i0 < RT ? M - i0 : RT;
        const int64_t e0 = local ? tptr[t] : t * ndiag;
        const int64_t e1 = local ? tptr[t + 1] : e0 + ndiag;
        for (int64_t e = e0; e < e1; e++) {
            const int64_t first = local ? cols[e] : i0 % N + cols[e - e0];
            for (int64_t r = 0; r < rows; r++) {
                const int64_t slot = e * RT + r;
                const float a = vals[slot];
                if (a == 0.0f) {  /* padding (or an explicit zero): nothing to sample */
                    out[slot] = 0.0f;
                    continue;
                }
                const float *x = X + (int64_t)row_map[i0 + r] * K;
                const float *y = Y + (int64_t)col_map[wrap(first + r, N)] * K;
                out[slot] = a * dot(x, y);
            }
        }
    }
}
