/* DIA SDDMM  out = A * (X @ Y^T) on A's pattern, A (M x N) stored as diagonals.
 *
 * Template filled by cognate/targets/cpu/dia.py (string.Template): the row tile RT and the
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

static inline float dot(const float *restrict x, const float *restrict y) {
    vf acc[4] = {{0}, {0}, {0}, {0}};
    int64_t k = 0;
    for (; k + 32 <= K; k += 32)
        for (int q = 0; q < 4; q++)
            acc[q] += *(const vf *)(x + k + 8 * q) * *(const vf *)(y + k + 8 * q);
    for (; k + 8 <= K; k += 8) acc[0] += *(const vf *)(x + k) * *(const vf *)(y + k);
    const vf sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    float total = 0.0f;
    for (int q = 0; q < 8; q++) total += sum[q];
    for (; k < K; k++) total += x[k] * y[k];
    return total;
}

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
