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
 * BF16 1 (opt-in, never chosen unless asked: it changes the result) rounds B to bfloat16 at
 * the start of the call (to nearest even, NaN kept) into a buffer kept per calling thread,
 * and the rows read that copy: half of B's bytes where the loads of B rows bind (a 90%
 * k-diagonal 3072 x 768 layer at N = 128: 0.80 -> 0.38 ms, MKL's Intel path 0.91 ms:
 * docs/benchmarks.md). A bfloat16 is a float32's high half, so a vector of 2L bf16 read as
 * L 32-bit lanes gives the even columns as floats by a shift and the odd ones by a mask: two
 * accumulators per 2L columns, interleaved once at the row's store, and no widening shuffle
 * per nonzero (widening each load ran 1.5-2.3x slower).
 */
#pragma GCC optimize("fp-contract=fast")
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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
#define BF16 ${bf16}
#define VECTOR_BYTES ${vbytes}
typedef float vf __attribute__((vector_size(VBYTES), aligned(4)));
typedef float vf8 __attribute__((vector_size(32), aligned(4)));  /* tails: 8 columns */
typedef float vf4 __attribute__((vector_size(16), aligned(4)));  /* tails: 4 columns */
static const int64_t N = ${dense_extent};
/* The B the rows read: float32, or its bfloat16 copy (BF16). */
#if BF16
typedef uint16_t bval;
#else
typedef float bval;
#endif

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
    const int64_t f, const int64_t end, const int32_t *restrict col, const bval *restrict B,
    const int64_t j, const int64_t floats)
{
    if (PREFETCH == 0 || f >= end) return;
    const bval *b = B + (int64_t)col[f] * N + j;
    for (int64_t x = 0; x < floats; x += 64 / (int64_t)sizeof(bval)) __builtin_prefetch(b + x, 0, 3);
}

/* A B element as a float: itself, or the float32 a bfloat16 stands for (its high half). */
static inline float b_value(const bval v)
{
#if BF16
    const uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#else
    return v;
#endif
}

/* Columns [j, N) of one row, past the last vector tile (fewer than 4, BF16: 8), scalar. */
static void edge(const int64_t lo, const int64_t hi, const int32_t *restrict col,
                 const float *restrict val, const bval *restrict B, float *restrict c,
                 const int64_t j)
{
    for (int64_t q = j; q < N; q++) c[q] = 0.0f;
    for (int64_t p = lo; p < hi; p++) {
        const float a = val[p];
        const bval *restrict b = B + (int64_t)col[p] * N;
        for (int64_t q = j; q < N; q++) c[q] += a * b_value(b[q]);
    }
}

#if !BF16
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
#else /* BF16: the rows read B's bfloat16 copy */

typedef uint32_t vu __attribute__((vector_size(VBYTES), aligned(2)));
typedef uint32_t vu8 __attribute__((vector_size(32), aligned(2)));
typedef uint32_t vu4 __attribute__((vector_size(16), aligned(2)));
typedef int32_t vi __attribute__((vector_size(VBYTES)));
typedef int32_t vi8 __attribute__((vector_size(32)));
typedef int32_t vi4 __attribute__((vector_size(16)));
/* The lanes of (even, odd) that are C's first L columns of a 2L-column block (LO) and its
 * next L (HI), per lane count. */
#define LO_16 {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23}
#define HI_16 {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}
#define LO_8 {0, 8, 1, 9, 2, 10, 3, 11}
#define HI_8 {4, 12, 5, 13, 6, 14, 7, 15}
#define LO_4 {0, 4, 1, 5}
#define HI_4 {2, 6, 3, 7}
#if VECTOR_BYTES == 64
#define LO_MAIN LO_16
#define HI_MAIN HI_16
#elif VECTOR_BYTES == 32
#define LO_MAIN LO_8
#define HI_MAIN HI_8
#else
#define LO_MAIN LO_4
#define HI_MAIN HI_4
#endif

/* Columns [j, j + 2L * np) of row [lo, hi) of A times B's bf16 copy, in float32: one x lane
 * holds columns 2t (low half) and 2t + 1 (high half), summed into even and odd; STORES writes
 * the interleaved pair as the config's tile (streamed where stream says) or a tail's. */
#define PLAIN_PAIR(VT, L) *(VT *)(c + 2 * L * q) = first; *(VT *)(c + 2 * L * q + L) = second
#define TILE_PAIR(VT, L)                                                                      \
    if (STREAM && stream) {                                                                   \
        stream_store(c + 2 * L * q, first);                                                   \
        stream_store(c + 2 * L * q + L, second);                                              \
    } else {                                                                                  \
        PLAIN_PAIR(VT, L);                                                                    \
    }
#define DEFINE_BF16_TILE(NAME, VT, UT, IT, L, LO, HI, STORES)                                 \
static inline __attribute__((always_inline)) void NAME(                                      \
    const int64_t lo, const int64_t hi, const int64_t end, const int32_t *restrict col,       \
    const float *restrict val, const bval *restrict B, float *restrict c, const int64_t j,    \
    const int np, const int stream)                                                           \
{                                                                                             \
    (void)stream;                                                                             \
    VT even[NP], odd[NP];                                                                     \
    for (int q = 0; q < np; q++) even[q] = odd[q] = (VT){0};                                  \
    for (int64_t p = lo; p < hi; p++) {                                                       \
        prefetch_b(p + PREFETCH, end, col, B, j, 2 * L * np);                                 \
        const float a = val[p];                                                               \
        const bval *restrict b = B + (int64_t)col[p] * N + j;                                 \
        for (int q = 0; q < np; q++) {                                                        \
            const UT x = *(const UT *)(b + 2 * L * q);                                        \
            even[q] += a * (VT)(x << 16);                                                     \
            odd[q] += a * (VT)(x & 0xffff0000u);                                              \
        }                                                                                     \
    }                                                                                         \
    for (int q = 0; q < np; q++) {                                                            \
        const VT first = __builtin_shuffle(even[q], odd[q], (IT)LO);                          \
        const VT second = __builtin_shuffle(even[q], odd[q], (IT)HI);                         \
        STORES(VT, L);                                                                        \
    }                                                                                         \
}

enum { NP = VREGS > 1 ? VREGS / 2 : 1 };  /* 2L-column blocks per pass: VREGS accumulators */
DEFINE_BF16_TILE(tile, vf, vu, vi, LANES, LO_MAIN, HI_MAIN, TILE_PAIR)
DEFINE_BF16_TILE(tile8, vf8, vu8, vi8, 8, LO_8, HI_8, PLAIN_PAIR)
DEFINE_BF16_TILE(tile4, vf4, vu4, vi4, 4, LO_4, HI_4, PLAIN_PAIR)

/* One row of C: passes of NP 2L-column blocks, then fewer, then 16 and 8 columns of
 * narrower vectors, then scalar columns. */
static void row(const int64_t lo, const int64_t hi, const int64_t end, const int32_t *restrict col,
                const float *restrict val, const bval *restrict B, float *restrict c,
                const int stream)
{
    int64_t j = 0;
    for (; j + NP * 2 * LANES <= N; j += NP * 2 * LANES) tile(lo, hi, end, col, val, B, c + j, j, NP, stream);
    if (NP > 2 && j + 4 * LANES <= N) { tile(lo, hi, end, col, val, B, c + j, j, 2, stream); j += 4 * LANES; }
    if (NP > 1 && j + 2 * LANES <= N) { tile(lo, hi, end, col, val, B, c + j, j, 1, stream); j += 2 * LANES; }
    if (LANES > 8 && j + 16 <= N) { tile8(lo, hi, end, col, val, B, c + j, j, 1, 0); j += 16; }
    if (LANES > 4 && j + 8 <= N) { tile4(lo, hi, end, col, val, B, c + j, j, 1, 0); j += 8; }
    if (j < N) edge(lo, hi, col, val, B, c, j);
}

/* float32 -> bfloat16, to nearest even; a NaN stays a (quiet) NaN. Branch-free, so the
 * conversion loop vectorizes. */
static inline uint16_t bf16_round(const float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : nearest);
}

/* B's bf16 copy: one buffer per calling thread, grown as needed and kept between calls
 * (converting costs a pass over B; allocating fresh pages each call cost more), freed after
 * a call when over KEEP_BYTES. */
enum { KEEP_BYTES = 64 << 20 };
static _Thread_local uint16_t *b_copy;
static _Thread_local int64_t b_copy_count;

static uint16_t *bf16_copy(const float *restrict B, const int64_t count, const int parallel)
{
    if (count > b_copy_count) {
        free(b_copy);
        const size_t bytes = ((size_t)count * 2 + 63) / 64 * 64;
        b_copy = aligned_alloc(64, bytes);
        b_copy_count = b_copy ? count : 0;
        if (!b_copy) return NULL;
    }
    uint16_t *restrict out = b_copy;
    #pragma omp parallel for simd schedule(static) if (parallel)
    for (int64_t x = 0; x < count; x++) out[x] = bf16_round(B[x]);
    return b_copy;
}

static void bf16_release(void)
{
    if (b_copy_count * 2 > KEEP_BYTES) { free(b_copy); b_copy = NULL; b_copy_count = 0; }
}

/* No room for the copy: one thread, each B element rounded as it is read (the same sums in
 * the same order as the vector tiles). */
static void rows_rounding(const int64_t *restrict pos, const int32_t *restrict col,
                          const float *restrict val, const float *restrict B, float *restrict C,
                          const int64_t M)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t q = 0; q < N; q++) {
            float sum = 0.0f;
            for (int64_t p = pos[i]; p < pos[i + 1]; p++)
                sum += val[p] * b_value(bf16_round(B[(int64_t)col[p] * N + q]));
            C[i * N + q] = sum;
        }
}
#endif


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
                        const float *restrict val, const bval *restrict B, float *restrict C,
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
                       const float *restrict val, const bval *restrict B, float *restrict C,
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

/* The rows of C, on the config's schedule. */
static void run_rows(const int64_t *restrict pos, const int32_t *restrict col,
                     const float *restrict val, const bval *restrict B, float *restrict C,
                     const int64_t M, const int64_t task, const int64_t tasks, const int parallel,
                     const int stream)
{
    const int64_t nnz = pos[M];
    if (NZSPLIT && parallel && run_nzsplit(pos, col, val, B, C, M, stream)) return;
    if (BATCH) { run_batches(pos, col, val, B, C, M, parallel, stream); return; }
    #pragma omp parallel if (parallel)
    {
        #pragma omp for schedule(dynamic, 1) nowait
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t hi = first_row(pos, M, (t + 1) * task);
            for (int64_t i = first_row(pos, M, t * task); i < hi; i++)
                row(pos[i], pos[i + 1], nnz, col, val, B, C + i * N, stream);
        }
        stream_fence(stream);  /* each thread's streamed tiles, before the region's barrier */
    }
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
#if BF16
    const bval *restrict Bv = bf16_copy(B, K * N, parallel);
    if (!Bv) { rows_rounding(pos2, crd2, vals, B, C, M); return; }
#else
    const bval *restrict Bv = B;
#endif
    run_rows(pos2, crd2, vals, Bv, C, M, task, tasks, parallel, stream);
#if BF16
    bf16_release();
#endif
}
