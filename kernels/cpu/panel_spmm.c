/* Column-panel SpMM  C = A @ B  (ASpT-style tiling; cognate/targets/cpu/families/panel.py).
 *
 * Template filled by cognate/targets/cpu/families/template.py (string.Template): only the dense width
 * N, a whitelisted integer, is substituted; the panel width and row block are pack-time /
 * runtime values.
 *
 * Layout: S's rows are cut into blocks of `rblock` consecutive rows, its columns into panels
 * of `pcols` consecutive columns. A segment is the entries of one row in one panel:
 * segments blk_seg[b] .. blk_seg[b+1]-1 belong to row block b, ordered by panel then row,
 * so a block runs through panel 0 (its rows), then panel 1, ... and each panel's slice of B
 * (pcols x N floats) stays in the cache while the block's rows read it. Segment s is S row
 * seg_row[s] (C row row_map[seg_row[s]]), entries seg_ptr[s] .. seg_ptr[s+1]-1; entry p is
 * B row crd[p] (the column permutation is applied at pack time) times vals[p].
 *
 * A task (dynamic OpenMP, `chunk` blocks per claim) owns whole row blocks, so each C row is
 * written by one thread. The first segment of a row stores its register tile (no zeroing
 * pass, no load); later panels' segments load the C tile, add in registers and store. A
 * per-block byte map tells the two apart, and at the block's end the rows it never saw (no
 * entries) are zeroed. Per segment the tiles are as in spmm_csr.c: the output tile summed in
 * vector registers, entries unrolled by two. Products too small to pay for waking a second
 * thread run on the calling thread alone (serial_below, as in spmm_csr.c).
 */
#pragma GCC optimize("fp-contract=fast")
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef float vf __attribute__((vector_size(32), aligned(4)));
static const int64_t N = ${width};
enum { MAX_RBLOCK = 512 };  /* the largest row block panel.py packs */

/* Columns [j, j + 8 * nv) of one segment (entries [lo, hi)) times B, summed in registers
 * (on top of c's tile when `add`: a later panel of the row), stored to c. */
static inline __attribute__((always_inline)) void tile(
    const int64_t lo, const int64_t hi, const int32_t *restrict col,
    const float *restrict val, const float *restrict B, float *restrict c, const int64_t j,
    const int nv, const int add)
{
    vf acc[8];
    if (add)
        for (int q = 0; q < nv; q++) acc[q] = *(const vf *)(c + 8 * q);
    else
        for (int q = 0; q < nv; q++) acc[q] = (vf){0};
    int64_t p = lo;
    for (; p + 1 < hi; p += 2) {
        const float a0 = val[p], a1 = val[p + 1];
        const float *restrict b0 = B + (int64_t)col[p] * N + j;
        const float *restrict b1 = B + (int64_t)col[p + 1] * N + j;
        for (int q = 0; q < nv; q++) {
            acc[q] += a0 * *(const vf *)(b0 + 8 * q);
            acc[q] += a1 * *(const vf *)(b1 + 8 * q);
        }
    }
    if (p < hi) {
        const float a0 = val[p];
        const float *restrict b0 = B + (int64_t)col[p] * N + j;
        for (int q = 0; q < nv; q++) acc[q] += a0 * *(const vf *)(b0 + 8 * q);
    }
    for (int q = 0; q < nv; q++) *(vf *)(c + 8 * q) = acc[q];
}

/* Columns [j, N) (fewer than 8) of one segment, scalar. */
static void edge(const int64_t lo, const int64_t hi, const int32_t *restrict col,
                 const float *restrict val, const float *restrict B, float *restrict c,
                 const int64_t j, const int add)
{
    if (!add)
        for (int64_t q = j; q < N; q++) c[q] = 0.0f;
    for (int64_t p = lo; p < hi; p++) {
        const float a = val[p];
        const float *restrict b = B + (int64_t)col[p] * N;
        for (int64_t q = j; q < N; q++) c[q] += a * b[q];
    }
}

/* One segment: every dense column of its C row. */
static void segment(const int64_t lo, const int64_t hi, const int32_t *restrict col,
                    const float *restrict val, const float *restrict B, float *restrict c,
                    const int add)
{
    int64_t j = 0;
    for (; j + 64 <= N; j += 64) tile(lo, hi, col, val, B, c + j, j, 8, add);
    if (j + 32 <= N) { tile(lo, hi, col, val, B, c + j, j, 4, add); j += 32; }
    if (j + 16 <= N) { tile(lo, hi, col, val, B, c + j, j, 2, add); j += 16; }
    if (j + 8 <= N) { tile(lo, hi, col, val, B, c + j, j, 1, add); j += 8; }
    if (j < N) edge(lo, hi, col, val, B, c, j, add);
}

/* Row block b (S rows [b * rblock, min(M, b * rblock + rblock))): its segments panel by
 * panel, then zeros for the rows without entries. */
static void block(const int64_t *restrict blk_seg, const int32_t *restrict seg_row,
                  const int64_t *restrict seg_ptr, const int32_t *restrict crd,
                  const float *restrict vals, const int32_t *restrict row_map,
                  const float *restrict B, float *restrict C, const int64_t M,
                  const int64_t rblock, const int64_t b)
{
    const int64_t r0 = b * rblock;
    const int64_t rows = M - r0 < rblock ? M - r0 : rblock;
    unsigned char seen[MAX_RBLOCK];
    memset(seen, 0, (size_t)rows);
    for (int64_t s = blk_seg[b]; s < blk_seg[b + 1]; s++) {
        const int64_t i = seg_row[s];
        const int add = seen[i - r0];
        seen[i - r0] = 1;
        segment(seg_ptr[s], seg_ptr[s + 1], crd, vals, B, C + (int64_t)row_map[i] * N, add);
    }
    for (int64_t r = 0; r < rows; r++)
        if (!seen[r]) memset(C + (int64_t)row_map[r0 + r] * N, 0, (size_t)N * sizeof(float));
}

${tasks}

void cognate_panel_spmm(const int64_t *restrict blk_seg, const int32_t *restrict seg_row,
                        const int64_t *restrict seg_ptr, const int32_t *restrict crd,
                        const float *restrict vals, const int32_t *restrict row_map,
                        const float *restrict B, float *restrict C, const int64_t M,
                        const int64_t rblock, const int64_t nblocks, const int64_t chunk)
{
    /* panel.py passes rblock in {32, 128, 512} and nblocks = ceil(M / rblock); anything
     * else would overrun the byte map: refuse it rather than write out of bounds. */
    if (rblock < 1 || rblock > MAX_RBLOCK || nblocks != (M + rblock - 1) / rblock) return;
    const int64_t nnz = seg_ptr[blk_seg[nblocks]];
    const int parallel = nnz * N >= serial_below();
    #pragma omp parallel for schedule(dynamic, chunk) if (parallel)
    for (int64_t b = 0; b < nblocks; b++)
        block(blk_seg, seg_row, seg_ptr, crd, vals, row_map, B, C, M, rblock, b);
}
