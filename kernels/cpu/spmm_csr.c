/* SpMM  C = A @ B  for the plain-CSR loop structure of the WACO space (i1 i0 k1 k0 j1 j0,
 * rows dense, columns compressed, both sparse splits 1: the baseline's structure).
 *
 * Template filled by cognate/targets/cpu/codegen.py (string.Template): only the dense
 * width and the vector tile (vector bytes, registers per pass, unroll), whitelisted
 * integers, are substituted. Same signature as the generated kernels
 * (spmm.c), so the packed levels, runtime knobs and callers are unchanged; of A's levels
 * only level 2 is stored (pos2 = row pointer, crd2 = column of each nonzero, vals).
 *
 * Written by hand rather than generated because the generic loop nest accumulates into C
 * in memory (a load and a store of C per nonzero and vector) after a separate zeroing pass;
 * here each row's output tile is summed in vector registers and stored once, and the row's
 * nonzeros are unrolled (independent B rows in flight). The vector width is the config's
 * (gcc's -march=native does not widen an explicit vector type): 512-bit on AVX-512 hosts.
 * Software prefetching of the B rows a few nonzeros ahead is a knob (PREFETCH, 0 = off): it
 * pays only where B outgrows the caches. Measured against MKL's inspector-executor SpMM:
 * docs/benchmarks.md.
 *
 * The dense split does not change this structure's order (j1 j0 innermost either way): the
 * register tile is the vector knobs'. Rows are handed out dynamically in tasks of consecutive
 * rows balanced by weight (nonzeros + rows): `chunk` average rows per task, but at least
 * MIN_TASK, because on matrices of many short rows a claim per 32 rows cost more than the
 * rows (arrow: 2 threads slower than 1).
 * Products too small to pay for waking a second thread run on the calling thread alone
 * (under passive OpenMP waits a wake costs ~30 us here, more than a small SpMM), and so do
 * products whose rows make one task. A product of only a few tasks is cut into SPLIT tasks
 * per thread instead: with MIN_TASK-sized tasks, a product of 1.3 tasks left one thread
 * 3/4 of the work (bp_1200 at N=128: tasks of 4096 and 1452).
 * The schedule knobs replace these defaults: THREADS (one thread, or all of OpenMP's, instead
 * of the small-product rule), BATCH (rows claimed BATCH at a time through an atomic counter,
 * JitSpMM's schedule, instead of the weight-balanced tasks) and NZSPLIT (merge-path: each
 * thread an equal share of rows + nonzeros, the rows cut at the boundaries summed after).
 * STREAM 1 writes C's full vector tiles with non-temporal stores (x86): a plain store first
 * reads each line of C it writes (read-for-ownership), so a product whose C outgrows the
 * caches moves C's bytes twice; a streaming store moves them once, past the caches (arrow
 * at N=128, C 23 MB: 1.48 -> 1.10 ms). It loses where C would have stayed in cache, so it
 * is a knob that verify times (vector.py). Used only where C's rows are vector-aligned (C
 * aligned, N a multiple of the lanes), checked per call; plain stores otherwise.
 */
#pragma GCC optimize("fp-contract=fast")
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <strings.h>

/* The config's vector tile (codegen.py checks each against its whitelist): VBYTES-byte
 * vectors, up to VREGS of them (VREGS * LANES columns of C) summed in registers per pass
 * over a row's nonzeros, UNROLL nonzeros per step, ACCS independent sets of accumulators
 * (1, or UNROLL when they fit 8 registers: short FMA chains for narrow tiles). */
enum { VBYTES = ${vbytes}, VREGS = ${vregs}, UNROLL = ${unroll}, ACCS = ${accs} };
enum { LANES = VBYTES / 4 };
/* The config's schedule (codegen.py checks each against its whitelist): THREADS 0 = one
 * thread below serial_below() (the default rule), 1 = one thread, 2 = all of OpenMP's;
 * PREFETCH nonzeros ahead (0: none); BATCH rows per claim (0: weight-balanced tasks);
 * NZSPLIT 1: the merge-path split. */
enum { THREADS = ${threads}, PREFETCH = ${prefetch}, BATCH = ${batch}, NZSPLIT = ${nzsplit} };
#define STREAM ${stream}
#define VECTOR_BYTES ${vbytes}
typedef float vf __attribute__((vector_size(VBYTES), aligned(4)));
typedef float vf8 __attribute__((vector_size(32), aligned(4)));  /* tails: 8 columns */
typedef float vf4 __attribute__((vector_size(16), aligned(4)));  /* tails: 4 columns */
static const int64_t N = ${dense_extent};

/* Streaming stores (STREAM): x86 intrinsics where this width has one, else plain stores
 * (the kernel then never streams: stream_of). A streaming store must be vector-aligned, so
 * a call streams only where C is (torch tensors are 64-byte aligned, cognate's own outputs
 * too; numpy's large arrays often only 16): realigning the tiles in registers was measured
 * and lost, since the partial lines' plain stores beside streamed ones cost more than the
 * streaming saved. */
#if STREAM && defined(__x86_64__) && \
    ((VECTOR_BYTES == 64 && defined(__AVX512F__)) || (VECTOR_BYTES == 32 && defined(__AVX__)) || \
     VECTOR_BYTES == 16)
#include <immintrin.h>
#define CAN_STREAM 1
static inline __attribute__((always_inline)) void stream_store(float *c, const vf v)
{
#if VECTOR_BYTES == 64
    _mm512_stream_ps(c, (__m512)v);
#elif VECTOR_BYTES == 32
    _mm256_stream_ps(c, (__m256)v);
#else
    _mm_stream_ps(c, (__m128)v);
#endif
}
static inline void stream_fence(const int stream) { if (stream) _mm_sfence(); }
#else
#define CAN_STREAM 0
static inline __attribute__((always_inline)) void stream_store(float *c, const vf v) { *(vf *)c = v; }
static inline void stream_fence(const int stream) { (void)stream; }
#endif

/* Whether this call streams C's full tiles: the knob, an ISA that can, rows a whole number
 * of vectors and C vector-aligned. */
static int stream_of(const float *C)
{
    return STREAM && CAN_STREAM && N % LANES == 0 && (uintptr_t)C % VBYTES == 0;
}

/* The cache lines of columns [j, j + floats) of the B row of nonzero f (< end), if PREFETCH. */
static inline __attribute__((always_inline)) void prefetch_b(
    const int64_t f, const int64_t end, const int32_t *restrict col, const float *restrict B,
    const int64_t j, const int64_t floats)
{
    if (PREFETCH == 0 || f >= end) return;
    const float *b = B + (int64_t)col[f] * N + j;
    for (int64_t x = 0; x < floats; x += 16) __builtin_prefetch(b + x, 0, 3);
}

/* Columns [j, j + L * nv) of row [lo, hi) of A times B, summed in registers, stored to c:
 * one function per vector type VT of L lanes (the config's, and the narrower tails'); end is
 * A's nonzero count (the prefetch reads no column past it). STORES writes the tile: the
 * config's tile streams where stream says so (stream_of), the tails never do (a streamed C
 * has none). */
#define PLAIN_STORES(VT, L) for (int q = 0; q < nv; q++) *(VT *)(c + L * q) = acc[0][q]
#define TILE_STORES(VT, L)                                                                    \
    if (STREAM && stream)                                                                     \
        for (int q = 0; q < nv; q++) stream_store(c + L * q, acc[0][q]);                      \
    else                                                                                      \
        PLAIN_STORES(VT, L)
#define DEFINE_TILE(NAME, VT, L, STORES)                                                      \
static inline __attribute__((always_inline)) void NAME(                                      \
    const int64_t lo, const int64_t hi, const int64_t end, const int32_t *restrict col,       \
    const float *restrict val, const float *restrict B, float *restrict c, const int64_t j,   \
    const int nv, const int stream)                                                           \
{                                                                                             \
    (void)stream;                                                                             \
    VT acc[ACCS][VREGS];                                                                      \
    for (int s = 0; s < ACCS; s++)                                                            \
        for (int q = 0; q < nv; q++) acc[s][q] = (VT){0};                                     \
    int64_t p = lo;                                                                           \
    for (; p + UNROLL <= hi; p += UNROLL) {                                                   \
        for (int u = 0; u < UNROLL; u++) {                                                    \
            prefetch_b(p + u + PREFETCH, end, col, B, j, L * nv);                             \
            const float a = val[p + u];                                                       \
            const float *restrict b = B + (int64_t)col[p + u] * N + j;                        \
            for (int q = 0; q < nv; q++) acc[u % ACCS][q] += a * *(const VT *)(b + L * q);    \
        }                                                                                     \
    }                                                                                         \
    for (; p < hi; p++) {                                                                     \
        prefetch_b(p + PREFETCH, end, col, B, j, L * nv);                                     \
        const float a = val[p];                                                               \
        const float *restrict b = B + (int64_t)col[p] * N + j;                                \
        for (int q = 0; q < nv; q++) acc[0][q] += a * *(const VT *)(b + L * q);               \
    }                                                                                         \
    for (int s = 1; s < ACCS; s++)                                                            \
        for (int q = 0; q < nv; q++) acc[0][q] += acc[s][q];                                  \
    STORES(VT, L);                                                                            \
}

DEFINE_TILE(tile, vf, LANES, TILE_STORES)
DEFINE_TILE(tile8, vf8, 8, PLAIN_STORES)
DEFINE_TILE(tile4, vf4, 4, PLAIN_STORES)

/* Columns [j, N) (fewer than 4) of one row, scalar. */
static void edge(const int64_t lo, const int64_t hi, const int32_t *restrict col,
                 const float *restrict val, const float *restrict B, float *restrict c,
                 const int64_t j)
{
    for (int64_t q = j; q < N; q++) c[q] = 0.0f;
    for (int64_t p = lo; p < hi; p++) {
        const float a = val[p];
        const float *restrict b = B + (int64_t)col[p] * N;
        for (int64_t q = j; q < N; q++) c[q] += a * b[q];
    }
}

/* One row of C: passes of VREGS vectors, then fewer (halving), then narrower vectors, then
 * scalar columns; N is a constant, so only the steps this width needs remain. stream 1
 * (stream_of): the full tiles are streamed. */
static void row(const int64_t lo, const int64_t hi, const int64_t end, const int32_t *restrict col,
                const float *restrict val, const float *restrict B, float *restrict c,
                const int stream)
{
    int64_t j = 0;
    for (; j + VREGS * LANES <= N; j += VREGS * LANES) tile(lo, hi, end, col, val, B, c + j, j, VREGS, stream);
    if (VREGS > 4 && j + 4 * LANES <= N) { tile(lo, hi, end, col, val, B, c + j, j, 4, stream); j += 4 * LANES; }
    if (VREGS > 2 && j + 2 * LANES <= N) { tile(lo, hi, end, col, val, B, c + j, j, 2, stream); j += 2 * LANES; }
    if (VREGS > 1 && j + LANES <= N) { tile(lo, hi, end, col, val, B, c + j, j, 1, stream); j += LANES; }
    if (LANES > 8 && j + 8 <= N) { tile8(lo, hi, end, col, val, B, c + j, j, 1, 0); j += 8; }
    if (LANES > 4 && j + 4 <= N) { tile4(lo, hi, end, col, val, B, c + j, j, 1, 0); j += 4; }
    if (j < N) edge(lo, hi, col, val, B, c, j);
}

/* The first row i in [0, M] with pos[i] + i >= w (rows weigh one, nonzeros one). */
static int64_t first_row(const int64_t *restrict pos, const int64_t M, const int64_t w)
{
    int64_t lo = 0, hi = M;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (pos[mid] + mid >= w) hi = mid; else lo = mid + 1;
    }
    return lo;
}

${tasks}

enum { SPLIT = 4, MIN_SPLIT_TASK = 256 };

/* A task weight that hands each thread SPLIT tasks when `task` would make fewer than that,
 * but no task under MIN_SPLIT_TASK (a claim stays cheap beside its rows). */
static int64_t balanced_task(const int64_t task, const int64_t weight)
{
    const int64_t parts = SPLIT * (int64_t)omp_get_max_threads();
    if (weight <= task || weight >= parts * task) return task;  /* one task, or enough */
    const int64_t even = (weight + parts - 1) / parts;
    return even < MIN_SPLIT_TASK ? MIN_SPLIT_TASK : even;
}

/* BATCH rows at a time, claimed through an atomic counter until none are left. */
static void run_batches(const int64_t *restrict pos, const int32_t *restrict col,
                        const float *restrict val, const float *restrict B, float *restrict C,
                        const int64_t M, const int parallel, const int stream)
{
    int64_t next = 0;
    #pragma omp parallel if (parallel)
    {
        for (;;) {
            const int64_t lo = __atomic_fetch_add(&next, (int64_t)BATCH, __ATOMIC_RELAXED);
            if (lo >= M) break;
            const int64_t hi = lo + BATCH < M ? lo + BATCH : M;
            for (int64_t i = lo; i < hi; i++)
                row(pos[i], pos[i + 1], pos[M], col, val, B, C + i * N, stream);
        }
        stream_fence(stream);
    }
}

/* Where the merge path's diagonal d crosses: *i rows ended, *p nonzeros consumed (i + p = d),
 * on the walk that takes a row's nonzeros, then ends the row. */
static void path_point(const int64_t *restrict pos, const int64_t M, const int64_t d,
                       int64_t *i, int64_t *p)
{
    if (d >= M + pos[M]) { *i = M; *p = pos[M]; return; }
    *i = first_row(pos, M, d + 1) - 1;  /* the first row with pos[i + 1] + i >= d */
    *p = d - *i;
}

/* The merge-path split: part t walks diagonals [t, t + 1) * total / parts, stores the rows it
 * ends (the first from where it starts) and leaves the row it stops inside in its carry
 * row; the carries are added once every part is done. Skewed rows are cut, not queued.
 * 0 if the carries could not be allocated (the caller runs its tasks instead). */
static int run_nzsplit(const int64_t *restrict pos, const int32_t *restrict col,
                       const float *restrict val, const float *restrict B, float *restrict C,
                       const int64_t M, const int stream)
{
    const int64_t parts = omp_get_max_threads(), total = M + pos[M];
    float *carry = malloc(sizeof(float) * parts * N);
    int64_t *carry_row = malloc(sizeof(int64_t) * parts);
    if (!carry || !carry_row) { free(carry); free(carry_row); return 0; }
    #pragma omp parallel for schedule(static, 1)
    for (int64_t t = 0; t < parts; t++) {
        int64_t i0, p0, i1, p1;
        path_point(pos, M, t * total / parts, &i0, &p0);
        path_point(pos, M, (t + 1) * total / parts, &i1, &p1);
        for (int64_t i = i0; i < i1; i++)
            row(i == i0 ? p0 : pos[i], pos[i + 1], pos[M], col, val, B, C + i * N, stream);
        carry_row[t] = i1;
        if (i1 < M) row(i1 == i0 ? p0 : pos[i1], p1, pos[M], col, val, B, carry + t * N, 0);
        stream_fence(stream);  /* before the carries are added to rows other parts wrote */
    }
    for (int64_t t = 0; t < parts; t++)
        if (carry_row[t] < M)
            for (int64_t q = 0; q < N; q++) C[carry_row[t] * N + q] += carry[t * N + q];
    free(carry);
    free(carry_row);
    return 1;
}

void cognate_spmm(const int64_t *restrict pos0, const int32_t *restrict crd0,
                  const int64_t *restrict pos1, const int32_t *restrict crd1,
                  const int64_t *restrict pos2, const int32_t *restrict crd2,
                  const int64_t *restrict pos3, const int32_t *restrict crd3,
                  const float *restrict vals, const float *restrict B, float *restrict C,
                  const int64_t M, const int64_t K, const int64_t N_arg, const int64_t isplit,
                  const int64_t ksplit, const int64_t jsplit, const int64_t chunk)
{
    (void)pos0; (void)crd0; (void)pos1; (void)crd1; (void)pos3; (void)crd3;
    (void)K; (void)N_arg; (void)isplit; (void)ksplit; (void)jsplit;
    const int64_t nnz = pos2[M];
    /* Dynamic tasks of consecutive rows balanced by weight (nonzeros + rows): `chunk` average
     * rows, at least MIN_TASK, so a claim stays cheap beside the work it hands out. */
    const int64_t weight = nnz + M;
    const int64_t task = balanced_task(task_weight(chunk, weight, M), weight);
    const int64_t tasks = (weight + task - 1) / task;
    /* One task: a second thread would only be woken to find nothing to do. */
    const int parallel = THREADS == 1 ? 0
                       : THREADS == 2 ? 1
                       : nnz * N >= serial_below() && tasks > 1;
    const int stream = stream_of(C);
    if (NZSPLIT && parallel && run_nzsplit(pos2, crd2, vals, B, C, M, stream)) return;
    if (BATCH) { run_batches(pos2, crd2, vals, B, C, M, parallel, stream); return; }
    #pragma omp parallel if (parallel)
    {
        #pragma omp for schedule(dynamic, 1) nowait
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t hi = first_row(pos2, M, (t + 1) * task);
            for (int64_t i = first_row(pos2, M, t * task); i < hi; i++)
                row(pos2[i], pos2[i + 1], nnz, crd2, vals, B, C + i * N, stream);
        }
        stream_fence(stream);  /* each thread's streamed tiles, before the region's barrier */
    }
}
