/* SpMM  C(i,j) = sum_k A(i,k) * B(k,j)  for one WACO SuperSchedule loop structure.
 *
 * Template filled by cognate/targets/cpu/codegen.py (string.Template: the loop_nest field below);
 * the loop nest is generated from validated loop names and U/C level formats only.
 * A is a 4-level tensor (levels in the order its variables appear in the loop order):
 * a U level has no arrays (position = parent * extent + coordinate), a C level has
 * pos (int64, parent positions + 1) and crd (int32, the level's coordinate).
 * B is K x N, C is M x N, both dense row-major float32. Splits and chunk are runtime
 * arguments, so one compiled variant serves every split of a structure (and width).
 */
/* The build flags include -std=c11, under which GCC does not contract a*b+c into an FMA;
 * the kernels want FMAs (one uop instead of two in the inner loop). */
#pragma GCC optimize("fp-contract=fast")
#include <stdint.h>
#include <string.h>

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

void cognate_spmm(const int64_t *restrict pos0, const int32_t *restrict crd0,
                  const int64_t *restrict pos1, const int32_t *restrict crd1,
                  const int64_t *restrict pos2, const int32_t *restrict crd2,
                  const int64_t *restrict pos3, const int32_t *restrict crd3,
                  const float *restrict vals, const float *restrict B, float *restrict C,
                  const int64_t M, const int64_t K, const int64_t N_arg, const int64_t isplit,
                  const int64_t ksplit, const int64_t jsplit, const int64_t chunk)
{
    /* The dense width: a literal when the kernel is specialised to one width (the j loop
     * then unrolls fully: about 3x faster at N=32 than a runtime trip count), else N_arg. */
    const int64_t N = ${dense_extent};
    (void)N_arg;
    (void)pos0; (void)crd0; (void)pos1; (void)crd1;
    (void)pos2; (void)crd2; (void)pos3; (void)crd3;
    const int64_t ext_i1 = (M + isplit - 1) / isplit;
    const int64_t ext_k1 = (K + ksplit - 1) / ksplit;
    const int64_t ext_j1 = (N + jsplit - 1) / jsplit;
    (void)ext_i1; (void)ext_k1; (void)ext_j1;

    /* C = 0: every schedule accumulates into C. */
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < M; r++) memset(C + r * N, 0, (size_t)N * sizeof(float));

${loop_nest}
}
