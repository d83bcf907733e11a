/* Reordered-BCSR SDDMM  out = A * (X @ Y^T) on A's pattern (cognate/targets/cpu/families/bcsr.py).
 *
 * Template filled by cognate/targets/cpu/families/bcsr.py (string.Template): block rows BR, block
 * columns BC and the dense width K are whitelisted integers. Layout as in bcsr_spmm.c; out
 * has the layout of vals (one slot per block entry). X rows are read through out_rows (the
 * reordering and any row permutation, -1 for padding rows), Y rows through col_map.
 */
#pragma GCC optimize("fp-contract=fast")
#include <stdint.h>

typedef float vf __attribute__((vector_size(32), aligned(4)));
enum { BR = ${brows}, BC = ${bcols} };
static const int64_t K = ${width};

${dot_product}

void cognate_bcsr_sddmm(const int64_t *restrict bptr, const int32_t *restrict bcol,
                        const float *restrict vals, const int32_t *restrict col_map,
                        const int32_t *restrict out_rows, const float *restrict X,
                        const float *restrict Y, float *restrict out, const int64_t N,
                        const int64_t nbrows, const int64_t chunk)
{
    #pragma omp parallel for schedule(dynamic, chunk)
    for (int64_t b = 0; b < nbrows; b++) {
        for (int64_t p = bptr[b]; p < bptr[b + 1]; p++) {
            const int64_t c0 = (int64_t)bcol[p] * BC;
            for (int r = 0; r < BR; r++) {
                const int32_t row = out_rows[b * BR + r];
                for (int cc = 0; cc < BC; cc++) {
                    const int64_t slot = p * (BR * BC) + r * BC + cc;
                    const float a = vals[slot];
                    /* padding rows, columns past N and empty slots hold 0: nothing to sample */
                    if (a == 0.0f || row < 0 || c0 + cc >= N) {
                        out[slot] = 0.0f;
                        continue;
                    }
                    const float *x = X + (int64_t)row * K;
                    out[slot] = a * dot(x, Y + (int64_t)col_map[c0 + cc] * K);
                }
            }
        }
    }
}
