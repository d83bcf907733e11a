/* DIA SDDMM  out = A * (X @ Y^T) on A's pattern, A (M x N) stored as diagonals.
 *
 * Template filled by cognate/targets/cpu/families/dia.py (string.Template): the row tile RT and the
 * dense width K are whitelisted integers. Diagonal d: offset offs[d] in [0, N), values
 * (0 where the diagonal has no entry in row i) stored per row tile of RT rows, diagonal by
 * diagonal: vals[((i / RT) * ndiag + d) * RT + i % RT]; row i's entry is in column
 * (i + offs[d]) mod N. out has the layout of vals. X rows are read through row_map, Y rows
 * through col_map (a permutation absorbed in the index maps).
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

void cognate_dia_sddmm(const int32_t *restrict offs, const float *restrict vals,
                       const int32_t *restrict col_map, const int32_t *restrict row_map,
                       const float *restrict X, const float *restrict Y, float *restrict out,
                       const int64_t M, const int64_t N, const int64_t ndiag,
                       const int64_t chunk)
{
    const int64_t tiles = (M + RT - 1) / RT;
    #pragma omp parallel for schedule(dynamic, chunk)
    for (int64_t t = 0; t < tiles; t++) {
        const int64_t i0 = t * RT;
        const int64_t rows = M - i0 < RT ? M - i0 : RT;
        for (int64_t d = 0; d < ndiag; d++) {
            const int64_t first = i0 % N + offs[d];
            for (int64_t r = 0; r < rows; r++) {
                const int64_t slot = (t * ndiag + d) * RT + r;
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
