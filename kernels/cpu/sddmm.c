/* SDDMM  C(i,j) = A(i,j) * sum_k X(i,k) * Y(j,k)  for one WACO SuperSchedule loop structure.
 *
 * Template filled by cognate/targets/cpu/codegen.py (string.Template: the loop_nest field below);
 * the loop nest is generated from validated loop names and U/C level formats only.
 * A is a 4-level tensor (levels in the order its variables i1 i0 j1 j0 appear in the loop
 * order): a U level has no arrays (position = parent * extent + coordinate), a C level
 * has pos (int64) and crd (int32). X is M x K, Y is N x K, dense row-major float32 (K is
 * the dense width). The output has A's layout: out[p] belongs to A's stored value p.
 */
/* The build flags include -std=c11, under which GCC does not contract a*b+c into an FMA. */
#pragma GCC optimize("fp-contract=fast")
#include <stdint.h>
#include <string.h>

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

void cognate_sddmm(const int64_t *restrict pos0, const int32_t *restrict crd0,
                   const int64_t *restrict pos1, const int32_t *restrict crd1,
                   const int64_t *restrict pos2, const int32_t *restrict crd2,
                   const int64_t *restrict pos3, const int32_t *restrict crd3,
                   const float *restrict vals, const float *restrict X,
                   const float *restrict Y, float *restrict out, const int64_t nvals,
                   const int64_t M, const int64_t N, const int64_t K_arg, const int64_t isplit,
                   const int64_t jsplit, const int64_t ksplit, const int64_t chunk)
{
    /* The dense width: a literal when the kernel is specialised to one width, else K_arg. */
    const int64_t K = ${dense_extent};
    (void)K_arg;
    (void)pos0; (void)crd0; (void)pos1; (void)crd1;
    (void)pos2; (void)crd2; (void)pos3; (void)crd3;
    const int64_t ext_i1 = (M + isplit - 1) / isplit;
    const int64_t ext_j1 = (N + jsplit - 1) / jsplit;
    const int64_t ext_k1 = (K + ksplit - 1) / ksplit;
    (void)ext_i1; (void)ext_j1; (void)ext_k1;

    /* out = 0: schedules with k outside A's loops accumulate partial dot products. */
    #pragma omp parallel for simd schedule(static)
    for (int64_t p = 0; p < nvals; p++) out[p] = 0.0f;

${loop_nest}
}
