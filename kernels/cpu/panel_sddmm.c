/* Column-panel SDDMM  out = A * (X @ Y^T)  on A's pattern (cognate/targets/cpu/families/panel.py).
 *
 * Template filled by cognate/targets/cpu/families/template.py (string.Template): only the dense width
 * K, a whitelisted integer, is substituted.
 *
 * Layout as in panel_spmm.c: row blocks of segments, each block panel by panel, so the
 * panel's slice of Y (pcols x K floats) stays in the cache while the block's rows read it;
 * segment s is S row seg_row[s] (X row row_map[seg_row[s]]), entry p is Y row crd[p]. No
 * accumulation: every entry is one dot product. The output is A's CSR order, written
 * directly: entry p goes to out[slot[p]] (slot = its index in A's CSR arrays). The values
 * are kept in A's CSR order as well and read as vals[slot[p]] (one more indirection, on the
 * cache line the write touches anyway): the user path's packed_values / value_slots then
 * stay the identity, so values trained in place in A's order are what the next call reads.
 * Entries are taken two at a time, sharing the loads of the X row (dot2). Products too
 * small to pay for waking a second thread run on the calling thread alone.
 */
#pragma GCC optimize("fp-contract=fast")
#include <stdint.h>
#include <stdlib.h>
#include <strings.h>

typedef float vf __attribute__((vector_size(32), aligned(4)));
static const int64_t K = ${width};

${dot_product}

static inline float hsum(const vf v)
{
    float total = 0.0f;
    for (int q = 0; q < 8; q++) total += v[q];
    return total;
}

/* dot(x, y0) and dot(x, y1) in one pass over x: 4 accumulators each (8 chains). */
static inline void dot2(const float *restrict x, const float *restrict y0,
                        const float *restrict y1, float *restrict d0, float *restrict d1)
{
    vf a0[4] = {{0}, {0}, {0}, {0}}, a1[4] = {{0}, {0}, {0}, {0}};
    int64_t k = 0;
    for (; k + 32 <= K; k += 32)
        for (int q = 0; q < 4; q++) {
            const vf xv = *(const vf *)(x + k + 8 * q);
            a0[q] += xv * *(const vf *)(y0 + k + 8 * q);
            a1[q] += xv * *(const vf *)(y1 + k + 8 * q);
        }
    for (; k + 8 <= K; k += 8) {
        const vf xv = *(const vf *)(x + k);
        a0[0] += xv * *(const vf *)(y0 + k);
        a1[0] += xv * *(const vf *)(y1 + k);
    }
    float t0 = hsum((a0[0] + a0[1]) + (a0[2] + a0[3]));
    float t1 = hsum((a1[0] + a1[1]) + (a1[2] + a1[3]));
    for (; k < K; k++) {
        t0 += x[k] * y0[k];
        t1 += x[k] * y1[k];
    }
    *d0 = t0;
    *d1 = t1;
}

${tasks}

void cognate_panel_sddmm(const int64_t *restrict blk_seg, const int32_t *restrict seg_row,
                         const int64_t *restrict seg_ptr, const int32_t *restrict crd,
                         const int64_t *restrict slot, const float *restrict vals,
                         const int32_t *restrict row_map, const float *restrict X,
                         const float *restrict Y, float *restrict out, const int64_t nblocks,
                         const int64_t chunk)
{
    const int64_t nnz = seg_ptr[blk_seg[nblocks]];
    const int parallel = nnz * K >= serial_below();
    #pragma omp parallel for schedule(dynamic, chunk) if (parallel)
    for (int64_t b = 0; b < nblocks; b++) {
        for (int64_t s = blk_seg[b]; s < blk_seg[b + 1]; s++) {
            const float *restrict x = X + (int64_t)row_map[seg_row[s]] * K;
            const int64_t hi = seg_ptr[s + 1];
            int64_t p = seg_ptr[s];
            for (; p + 1 < hi; p += 2) {
                float d0, d1;
                dot2(x, Y + (int64_t)crd[p] * K, Y + (int64_t)crd[p + 1] * K, &d0, &d1);
                const int64_t s0 = slot[p], s1 = slot[p + 1];
                out[s0] = vals[s0] * d0;
                out[s1] = vals[s1] * d1;
            }
            if (p < hi) out[slot[p]] = vals[slot[p]] * dot(x, Y + (int64_t)crd[p] * K);
        }
    }
}
