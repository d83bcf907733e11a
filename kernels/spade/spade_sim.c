/* SPADE-like accelerator simulator core (cognate, docs/architecture.md, Targets' facts).
 *
 * Trace-driven caches (set-associative LRU, write-back, write-allocate): a private L1 and
 * a bypass victim cache per PE, an L2 per group of PEs, one shared LLC, then DRAM. Each PE
 * has a tag-matched vector register file holding row-side lines (SpMM: output rows,
 * SDDMM: rows of X). The tiled-COO sparse stream goes through the bypass buffer and is
 * never cached. Timing is tile-level: per tile max(vector-op cycles, memory latency / MLP)
 * plus a tile overhead; PEs are interleaved in simulated-time order so the shared caches
 * see a realistic mix of accesses; per barrier epoch the slowest PE plus a sync cost,
 * never less than the epoch's DRAM bytes / bandwidth.
 *
 * Everything is integer / double arithmetic in a fixed order: the result is deterministic.
 * Written in plain C (not numba) because it is a tight per-nonzero loop over pointer-rich
 * state; the Python driver (cognate/targets/spade/simulator.py) owns the parameters.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LINE 64

/* ---------------------------------------------------------------- caches */

typedef struct {
    int64_t sets, ways;
    uint64_t mask; /* sets - 1 */
    int pow2;      /* sets is a power of two (always, with the shipped machine): the mask
                      gives the modulo's set without the division that dominated lookups */
    int hashed; /* shared caches hash the set index (as sliced LLCs do) to avoid the
                   power-of-two stride conflicts plain modulo indexing gives */
    int64_t *tag; /* sets * ways; -1 = invalid */
    uint64_t *stamp;
    uint8_t *dirty;
    uint64_t clock;
    int64_t hits, misses;
} cache_t;

static int cache_init(cache_t *c, int64_t lines, int64_t ways, int hashed) {
    if (ways < 1) ways = 1;
    c->hashed = hashed;
    if (lines < ways) lines = ways;
    c->ways = ways;
    c->sets = lines / ways;
    c->mask = (uint64_t)c->sets - 1;
    c->pow2 = (c->sets & (c->sets - 1)) == 0;
    int64_t n = c->sets * c->ways;
    c->tag = malloc(n * sizeof(int64_t));
    c->stamp = calloc(n, sizeof(uint64_t));
    c->dirty = calloc(n, 1);
    if (!c->tag || !c->stamp || !c->dirty) return -1;
    for (int64_t i = 0; i < n; i++) c->tag[i] = -1;
    c->clock = 0;
    c->hits = c->misses = 0;
    return 0;
}

static void cache_free(cache_t *c) {
    free(c->tag);
    free(c->stamp);
    free(c->dirty);
}

static inline int64_t set_base(const cache_t *c, int64_t line) {
    uint64_t key = (uint64_t)line;
    if (c->hashed) key = (key * 0x9E3779B97F4A7C15ull) >> 32; /* Fibonacci hashing */
    uint64_t set = c->pow2 ? key & c->mask : key % (uint64_t)c->sets;
    return (int64_t)set * c->ways;
}

/* Index of `line` in the cache, or -1. */
static inline int64_t cache_find(const cache_t *c, int64_t line) {
    int64_t base = set_base(c, line);
    for (int64_t w = 0; w < c->ways; w++)
        if (c->tag[base + w] == line) return base + w;
    return -1;
}

/* One pass over `line`'s set: the slot holding it, or -1 with *victim set to the slot an
 * insert would take (the first invalid way, else the least recently used one). */
static inline int64_t cache_lookup(const cache_t *c, int64_t line, int64_t *victim) {
    int64_t base = set_base(c, line), invalid = -1, lru = base;
    uint64_t oldest = UINT64_MAX; /* kept in a register: reloading stamp[lru] each way
                                     chained every comparison to a load */
    *victim = base; /* overwritten below on a miss; set so no caller reads garbage */
    for (int64_t s = base; s < base + c->ways; s++) {
        int64_t t = c->tag[s];
        if (t == line) return s;
        if (t < 0) {
            if (invalid < 0) invalid = s;
        } else if (c->stamp[s] < oldest) {
            oldest = c->stamp[s];
            lru = s;
        }
    }
    *victim = invalid >= 0 ? invalid : lru;
    return -1;
}

/* Put `line` into slot `victim` (from cache_lookup, with the set untouched since).
 * *ev / *ev_dirty describe the evicted line (-1 when none). */
static inline void cache_place(cache_t *c, int64_t victim, int64_t line, int dirty,
                               int64_t *ev, int *ev_dirty) {
    *ev = c->tag[victim];
    *ev_dirty = c->dirty[victim];
    c->tag[victim] = line;
    c->dirty[victim] = (uint8_t)dirty;
    c->stamp[victim] = ++c->clock;
}


/* Single-cache LRU on a trace of line numbers: hits[i] = 1 when access i hits.
 * The test entry point that pins the cache against a brute-force reference. */
int spade_cache_trace(int64_t lines, int64_t ways, int hashed, const int64_t *trace,
                      int64_t n, uint8_t *hits) {
    cache_t c;
    if (cache_init(&c, lines, ways, hashed)) return -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t victim, s = cache_lookup(&c, trace[i], &victim);
        if (s >= 0) {
            c.stamp[s] = ++c.clock;
            hits[i] = 1;
        } else {
            int64_t ev;
            int evd;
            cache_place(&c, victim, trace[i], 0, &ev, &evd);
            hits[i] = 0;
        }
    }
    cache_free(&c);
    return 0;
}

/* ---------------------------------------------------------------- machine */

/* Integer parameters (index into ip[]). */
enum {
    IP_OP, /* 0 spmm, 1 sddmm */
    IP_NROWS,
    IP_NCOLS,
    IP_WIDTH,
    IP_NPE,
    IP_PES_PER_L2,
    IP_REGS,
    IP_L1_LINES,
    IP_L1_WAYS,
    IP_VC_LINES,
    IP_VC_WAYS,
    IP_L2_LINES,
    IP_L2_WAYS,
    IP_LLC_LINES,
    IP_LLC_WAYS,
    IP_SPLIT,   /* dense passes per tile */
    IP_BARRIER, /* 0/1 */
    IP_BYPASS,  /* 0/1 */
    IP_DYNAMIC, /* 0 static round-robin, 1 dynamic earliest-free */
    IP_NPANELS,
    IP_NCPANELS,
    IP_STREAM_BUF_BYTES,
    IP_COUNT
};

/* Double parameters (cycles unless named otherwise). */
enum {
    DP_L1_LAT,
    DP_VC_LAT,
    DP_L2_LAT,
    DP_LLC_LAT,
    DP_DRAM_LAT,
    DP_MLP,
    DP_BW_BYTES_PER_CYCLE,
    DP_TILE_OVERHEAD,
    DP_DISPATCH_STATIC,
    DP_DISPATCH_DYNAMIC,
    DP_SYNC,
    DP_REDUCE,
    DP_COUNT
};

/* Outputs (index into out[]). */
enum {
    O_CYCLES,
    O_COMPUTE_CYCLES,
    O_STALL_CYCLES,
    O_BW_BOUND_EPOCHS,
    O_EPOCHS,
    O_REG_HITS,
    O_REG_MISSES,
    O_L1_HITS,
    O_L1_MISSES,
    O_VC_HITS,
    O_VC_MISSES,
    O_L2_HITS,
    O_L2_MISSES,
    O_LLC_HITS,
    O_LLC_MISSES,
    O_DRAM_READ,
    O_DRAM_WRITE,
    O_SPARSE_BYTES,
    O_NNZ_PASSES,
    O_TILES,
    O_COUNT
};

typedef struct {
    int64_t ip[IP_COUNT];
    double dp[DP_COUNT];
    int64_t npe, rowlines, row_region;
    int has_l2, has_llc; /* 0: the level is absent (a machine of L1 + bypass buffer only) */
    cache_t *l1, *vc, *l2, llc;
    cache_t **l2_of;  /* npe: the L2 of each PE */
    int64_t *reg_tag; /* npe * regs */
    uint8_t *reg_dirty;
    /* Each PE's registers in recency order, a doubly linked list over slots (head: most
     * recent). Slots fill in index order and are never invalidated, so "first free slot,
     * else least recently used" is slot reg_used[pe], else the list's tail: the same victim
     * as a scan of per-slot stamps, in O(1). */
    int32_t *reg_prev, *reg_next, *reg_head, *reg_tail, *reg_used;
    int32_t *where;   /* row-side line -> register slot, -1 */
    uint8_t *touched; /* row-side line has a value in memory (SpMM partial sums) */
    double dram_read, dram_write;
    int64_t reg_hits, reg_misses;
} sim_t;

static void writeback(sim_t *s, int level, int pe, int64_t line);

/* Write a dirty line into cache `c`; a dirty victim goes one level further down. */
static void write_into(sim_t *s, cache_t *c, int level, int pe, int64_t line) {
    int64_t victim, slot = cache_lookup(c, line, &victim);
    if (slot >= 0) {
        c->dirty[slot] = 1;
        return;
    }
    int64_t ev;
    int evd;
    cache_place(c, victim, line, 1, &ev, &evd);
    if (ev >= 0 && evd) writeback(s, level + 1, pe, ev);
}

/* A dirty line leaving level-1 lands in `level` (1 = L2, 2 = LLC, 3 = DRAM). */
static void writeback(sim_t *s, int level, int pe, int64_t line) {
    if (level == 1 && !s->has_l2) level = 2;
    if (level == 2 && !s->has_llc) level = 3;
    if (level == 1)
        write_into(s, s->l2_of[pe], 1, pe, line);
    else if (level == 2)
        write_into(s, &s->llc, 2, pe, line);
    else
        s->dram_write += LINE;
}

/* Fill a clean line into slot `victim` of cache `c` (after a miss found it); dirty victims
 * are written back. Write-backs only go down, so a level's victim stays valid while the
 * levels below it are filled first. */
static inline void fill(sim_t *s, cache_t *c, int64_t victim, int level, int pe, int64_t line) {
    int64_t ev;
    int evd;
    cache_place(c, victim, line, 0, &ev, &evd);
    if (ev >= 0 && evd) writeback(s, level + 1, pe, ev);
}

/* Read one line through L1 -> L2 -> LLC -> DRAM; returns the latency in cycles. */
static inline double hier_read(sim_t *s, int pe, int64_t line) {
    cache_t *l1 = &s->l1[pe];
    int64_t v1, v2, v3, slot = cache_lookup(l1, line, &v1);
    if (slot >= 0) {
        l1->stamp[slot] = ++l1->clock;
        l1->hits++;
        return s->dp[DP_L1_LAT];
    }
    l1->misses++;
    if (!s->has_l2 && !s->has_llc) { /* L1 straight to memory */
        s->dram_read += LINE;
        fill(s, l1, v1, 0, pe, line);
        return s->dp[DP_DRAM_LAT];
    }
    cache_t *l2 = s->l2_of[pe];
    double lat;
    slot = s->has_l2 ? cache_lookup(l2, line, &v2) : -1;
    if (slot >= 0) {
        l2->stamp[slot] = ++l2->clock;
        l2->hits++;
        lat = s->dp[DP_L2_LAT];
    } else {
        if (s->has_l2) l2->misses++;
        slot = s->has_llc ? cache_lookup(&s->llc, line, &v3) : -1;
        if (slot >= 0) {
            s->llc.stamp[slot] = ++s->llc.clock;
            s->llc.hits++;
            lat = s->dp[DP_LLC_LAT];
        } else {
            s->dram_read += LINE;
            lat = s->dp[DP_DRAM_LAT];
            if (s->has_llc) {
                s->llc.misses++;
                fill(s, &s->llc, v3, 2, pe, line);
            }
        }
        if (s->has_l2) fill(s, l2, v2, 1, pe, line);
    }
    fill(s, l1, v1, 0, pe, line);
    return lat;
}

/* A row-side line leaves a register. Dirty output goes to the victim cache (bypass) or
 * into L1 (through the caches); a clean line (SDDMM's X) is kept as a victim only under
 * bypass, since without bypass it is still in the caches it came from. */
static void reg_evict(sim_t *s, int pe, int64_t line, int dirty) {
    if (s->ip[IP_BYPASS]) {
        cache_t *vc = &s->vc[pe];
        int64_t victim, slot = cache_lookup(vc, line, &victim);
        if (slot >= 0) {
            vc->dirty[slot] |= (uint8_t)dirty;
            vc->stamp[slot] = ++vc->clock;
            return;
        }
        int64_t ev;
        int evd;
        cache_place(vc, victim, line, dirty, &ev, &evd);
        if (ev >= 0 && evd) s->dram_write += LINE;
    } else if (dirty) {
        write_into(s, &s->l1[pe], 0, pe, line);
    }
}

/* Read a row-side line into a register (after a register miss); returns latency. */
static double row_read(sim_t *s, int pe, int64_t line) {
    if (!s->ip[IP_BYPASS]) return hier_read(s, pe, line);
    cache_t *vc = &s->vc[pe];
    int64_t slot = cache_find(vc, line);
    if (slot >= 0) { /* a victim cache hands the line back and forgets it */
        vc->hits++;
        vc->tag[slot] = -1;
        vc->dirty[slot] = 0;
        vc->stamp[slot] = 0;
        return s->dp[DP_VC_LAT];
    }
    vc->misses++;
    s->dram_read += LINE;
    return s->dp[DP_DRAM_LAT];
}

/* Access a row-side line in the PE's register file; returns memory latency (0 on hit). */
/* Make register slot k the most recent of PE pe (k already in the list unless `fresh`). */
static inline void reg_touch(sim_t *s, int pe, int32_t k, int fresh) {
    if (s->reg_head[pe] == k) return;
    if (!fresh) { /* unlink */
        int32_t pv = s->reg_prev[k], nx = s->reg_next[k];
        s->reg_next[pv] = nx; /* k is not the head, so it has a predecessor */
        if (nx >= 0)
            s->reg_prev[nx] = pv;
        else
            s->reg_tail[pe] = pv;
    }
    s->reg_prev[k] = -1;
    s->reg_next[k] = s->reg_head[pe];
    if (s->reg_head[pe] >= 0)
        s->reg_prev[s->reg_head[pe]] = k;
    else
        s->reg_tail[pe] = k;
    s->reg_head[pe] = k;
}

static inline double reg_access(sim_t *s, int pe, int64_t line, int write) {
    int64_t regs = s->ip[IP_REGS], base = (int64_t)pe * regs;
    int32_t w = s->where[line];
    if (w >= base && w < base + regs && s->reg_tag[w] == line) {
        reg_touch(s, pe, w, 0);
        s->reg_dirty[w] |= (uint8_t)write;
        s->reg_hits++;
        return 0.0;
    }
    s->reg_misses++;
    int fresh = s->reg_used[pe] < regs;
    int32_t victim = fresh ? (int32_t)base + s->reg_used[pe]++ : s->reg_tail[pe];
    int64_t old = s->reg_tag[victim];
    if (old >= 0) {
        if (s->where[old] == victim) s->where[old] = -1;
        reg_evict(s, pe, old, s->reg_dirty[victim]);
    }
    double lat = 0.0;
    if (!write || s->touched[line]) lat = row_read(s, pe, line); /* first write: zeros */
    s->touched[line] = 1;
    s->reg_tag[victim] = line;
    reg_touch(s, pe, victim, fresh);
    s->reg_dirty[victim] = (uint8_t)write;
    s->where[line] = victim;
    return lat;
}

/* At the end every dirty line reaches DRAM: registers, then L1s, L2s, LLC, victims. */
static void flush_all(sim_t *s) {
    int64_t regs = s->ip[IP_REGS];
    for (int64_t k = 0; k < s->npe * regs; k++)
        if (s->reg_tag[k] >= 0 && s->reg_dirty[k]) {
            int pe = (int)(k / regs);
            if (s->ip[IP_BYPASS])
                s->dram_write += LINE;
            else
                write_into(s, &s->l1[pe], 0, pe, s->reg_tag[k]);
            s->reg_dirty[k] = 0;
        }
    for (int pe = 0; pe < s->npe; pe++) {
        cache_t *c = &s->l1[pe];
        for (int64_t k = 0; k < c->sets * c->ways; k++)
            if (c->tag[k] >= 0 && c->dirty[k]) {
                c->dirty[k] = 0;
                writeback(s, 1, pe, c->tag[k]);
            }
    }
    int64_t ngroups = (s->npe + s->ip[IP_PES_PER_L2] - 1) / s->ip[IP_PES_PER_L2];
    for (int64_t g = 0; g < ngroups; g++) {
        cache_t *c = &s->l2[g];
        for (int64_t k = 0; k < c->sets * c->ways; k++)
            if (c->tag[k] >= 0 && c->dirty[k]) {
                c->dirty[k] = 0;
                writeback(s, 2, (int)(g * s->ip[IP_PES_PER_L2]), c->tag[k]);
            }
    }
    for (int64_t k = 0; k < s->llc.sets * s->llc.ways; k++)
        if (s->llc.tag[k] >= 0 && s->llc.dirty[k]) s->dram_write += LINE;
    for (int pe = 0; pe < s->npe; pe++) {
        cache_t *c = &s->vc[pe];
        for (int64_t k = 0; k < c->sets * c->ways; k++)
            if (c->tag[k] >= 0 && c->dirty[k]) s->dram_write += LINE;
    }
}

/* ---------------------------------------------------------------- PEs */

typedef struct {
    double done;      /* cycles of finished tiles in this epoch */
    double comp, mem; /* accumulators of the tile in flight */
    int64_t cursor;   /* static: next position in the epoch's unit list */
    int64_t tile, tile_end, nz, nz_end;
    int pass, active;
} pe_t;

static inline double pe_clock(const pe_t *p) {
    return p->done + (p->comp > p->mem ? p->comp : p->mem);
}

/* Which PE runs next: the active one with the earliest clock, the lowest index on ties.
 * A tournament tree over the PEs (inactive ones at +inf) answers in O(1) and updates in
 * O(log npe) after each step of one PE; a scan of every PE per nonzero cost a fifth of
 * the run time. node[1] is the winner; leaves are implicit (slot size + q is PE q). */
typedef struct {
    int size;    /* a power of two >= npe */
    int *node;   /* [2 * size]: winner of each subtree */
    double *key; /* [size]: clock of each PE, +inf when inactive (or padding) */
} pe_tree_t;

static inline int pe_better(const pe_tree_t *t, int a, int b) {
    return t->key[a] < t->key[b] || (t->key[a] == t->key[b] && a < b) ? a : b;
}

static void pe_tree_set(pe_tree_t *t, int q, double key) {
    t->key[q] = key;
    int i = (t->size + q) >> 1;
    t->node[t->size + q] = q;
    for (; i >= 1; i >>= 1) t->node[i] = pe_better(t, t->node[2 * i], t->node[2 * i + 1]);
}

/* Give PE `pe` its next unit (a range of tiles) of the epoch; returns 0 when none left. */
static int next_unit(sim_t *s, pe_t *p, int pe, const int64_t *units, int64_t nunits,
                     int64_t *queue, const int32_t *unit_panel, const int64_t *unit_lo,
                     const int64_t *unit_hi) {
    int64_t u = -1;
    if (s->ip[IP_DYNAMIC]) {
        if (*queue < nunits) u = (*queue)++;
        p->done += s->dp[DP_DISPATCH_DYNAMIC];
    } else {
        while (p->cursor < nunits) {
            int64_t c = p->cursor++;
            if (unit_panel[units[c]] % s->npe == pe) {
                u = c;
                break;
            }
        }
        if (u >= 0) p->done += s->dp[DP_DISPATCH_STATIC];
    }
    if (u < 0) return 0;
    p->tile = unit_lo[units[u]];
    p->tile_end = unit_hi[units[u]];
    p->nz = -1; /* tile not started */
    return 1;
}

static void free_sim(sim_t *s) {
    if (s->l1)
        for (int i = 0; i < s->npe; i++) cache_free(&s->l1[i]);
    if (s->vc)
        for (int i = 0; i < s->npe; i++) cache_free(&s->vc[i]);
    if (s->l2) {
        int64_t ng = (s->npe + s->ip[IP_PES_PER_L2] - 1) / s->ip[IP_PES_PER_L2];
        for (int64_t i = 0; i < ng; i++) cache_free(&s->l2[i]);
    }
    cache_free(&s->llc);
    free(s->l1);
    free(s->vc);
    free(s->l2);
    free(s->l2_of);
    free(s->reg_tag);
    free(s->reg_dirty);
    free(s->reg_prev), free(s->reg_next), free(s->reg_head), free(s->reg_tail);
    free(s->reg_used);
    free(s->where);
    free(s->touched);
}

/* Simulate one configuration.
 *   nz_row, nz_col: nonzeros in tiled-COO order (tiles by row panel, then column panel;
 *                   row-major inside a tile)
 *   tile_ptr[ntiles+1], tile_panel[ntiles], tile_cpanel[ntiles]
 *   panel_ptr[npanels+1]: tiles of each row panel
 * out[O_COUNT] gets the counters, pe_busy[npe] the busy cycles of each PE.
 * Returns 0, or a negative code (-1 out of memory, -2 bad parameters). */
int spade_simulate(const int64_t *ip, const double *dp, const int32_t *nz_row,
                   const int32_t *nz_col, const int64_t *tile_ptr, const int32_t *tile_panel,
                   const int32_t *tile_cpanel, int64_t ntiles, const int64_t *panel_ptr,
                   double *out, double *pe_busy) {
    sim_t S;
    memset(&S, 0, sizeof S);
    sim_t *s = &S;
    memcpy(s->ip, ip, sizeof s->ip);
    memcpy(s->dp, dp, sizeof s->dp);
    int64_t npe = ip[IP_NPE], width = ip[IP_WIDTH], split = ip[IP_SPLIT];
    int64_t nrows = ip[IP_NROWS], ncols = ip[IP_NCOLS], regs = ip[IP_REGS];
    int64_t npanels = ip[IP_NPANELS], ncpanels = ip[IP_NCPANELS];
    if (npe < 1 || width < 1 || split < 1 || regs < 1 || ip[IP_PES_PER_L2] < 1 || nrows < 1 ||
        ncols < 1 || npanels < 1 || ncpanels < 1 || dp[DP_MLP] <= 0 ||
        dp[DP_BW_BYTES_PER_CYCLE] <= 0)
        return -2;
    int sddmm = ip[IP_OP] == 1;
    s->npe = npe;
    s->has_l2 = ip[IP_L2_LINES] > 0;
    s->has_llc = ip[IP_LLC_LINES] > 0;
    s->rowlines = (width * 4 + LINE - 1) / LINE; /* rows padded to whole lines */
    s->row_region = nrows * s->rowlines;
    int64_t ngroups = (npe + ip[IP_PES_PER_L2] - 1) / ip[IP_PES_PER_L2];
    s->l1 = calloc(npe, sizeof(cache_t));
    s->vc = calloc(npe, sizeof(cache_t));
    s->l2 = calloc(ngroups, sizeof(cache_t));
    s->l2_of = calloc(npe, sizeof(cache_t *));
    s->reg_tag = malloc(npe * regs * sizeof(int64_t));
    s->reg_dirty = calloc(npe * regs, 1);
    s->reg_prev = malloc(npe * regs * sizeof(int32_t));
    s->reg_next = malloc(npe * regs * sizeof(int32_t));
    s->reg_head = malloc(npe * sizeof(int32_t));
    s->reg_tail = malloc(npe * sizeof(int32_t));
    s->reg_used = calloc(npe, sizeof(int32_t));
    s->where = malloc(s->row_region * sizeof(int32_t));
    s->touched = calloc(s->row_region, 1);
    int bad = !s->l1 || !s->vc || !s->l2 || !s->l2_of || !s->reg_tag || !s->reg_dirty ||
              !s->reg_prev || !s->reg_next || !s->reg_head || !s->reg_tail || !s->reg_used ||
              !s->where || !s->touched || npe * regs > INT32_MAX;
    for (int64_t i = 0; !bad && i < npe; i++)
        bad = cache_init(&s->l1[i], ip[IP_L1_LINES], ip[IP_L1_WAYS], 0) ||
              cache_init(&s->vc[i], ip[IP_VC_LINES], ip[IP_VC_WAYS], 0);
    for (int64_t i = 0; !bad && i < ngroups; i++)
        bad = cache_init(&s->l2[i], ip[IP_L2_LINES], ip[IP_L2_WAYS], 1);
    if (!bad) bad = cache_init(&s->llc, ip[IP_LLC_LINES], ip[IP_LLC_WAYS], 1);
    if (bad) {
        free_sim(s);
        return -1;
    }
    for (int64_t k = 0; k < npe * regs; k++) s->reg_tag[k] = -1;
    for (int64_t pe = 0; pe < npe; pe++) {
        s->reg_head[pe] = s->reg_tail[pe] = -1;
        s->l2_of[pe] = &s->l2[pe / ip[IP_PES_PER_L2]];
    }
    for (int64_t k = 0; k < s->row_region; k++) s->where[k] = -1;

    /* Work units. No barrier: one epoch, a unit = all tiles of a row panel. Barrier: one
     * epoch per column panel, a unit = the one tile of a row panel in that column panel. */
    int barrier = (int)ip[IP_BARRIER];
    int64_t nepochs = barrier ? ncpanels : 1;
    int64_t nunits_all = barrier ? ntiles : npanels;
    int64_t *unit_lo = malloc(nunits_all * sizeof(int64_t));
    int64_t *unit_hi = malloc(nunits_all * sizeof(int64_t));
    int32_t *unit_panel = malloc(nunits_all * sizeof(int32_t));
    int64_t *units = malloc(nunits_all * sizeof(int64_t));    /* grouped by epoch */
    int64_t *epoch_ptr = calloc(nepochs + 1, sizeof(int64_t)); /* into units */
    pe_t *pes = calloc(npe, sizeof(pe_t));
    pe_tree_t tree = {1, NULL, NULL};
    while (tree.size < npe) tree.size <<= 1;
    tree.node = malloc(2 * tree.size * sizeof(int));
    tree.key = malloc(tree.size * sizeof(double));
    int64_t *fillp = barrier ? malloc(nepochs * sizeof(int64_t)) : NULL;
    int rc = 0;
    if (!unit_lo || !unit_hi || !unit_panel || !units || !epoch_ptr || !pes || !tree.node ||
        !tree.key || (barrier && !fillp)) {
        rc = -1;
        goto done;
    }
    if (barrier) {
        for (int64_t t = 0; t < ntiles; t++) {
            unit_lo[t] = t;
            unit_hi[t] = t + 1;
            unit_panel[t] = tile_panel[t];
            epoch_ptr[tile_cpanel[t] + 1]++;
        }
        for (int64_t e = 0; e < nepochs; e++) epoch_ptr[e + 1] += epoch_ptr[e];
        memcpy(fillp, epoch_ptr, nepochs * sizeof(int64_t));
        for (int64_t t = 0; t < ntiles; t++) units[fillp[tile_cpanel[t]]++] = t;
    } else {
        int64_t n = 0;
        for (int64_t p = 0; p < npanels; p++)
            if (panel_ptr[p + 1] > panel_ptr[p]) {
                unit_lo[n] = panel_ptr[p];
                unit_hi[n] = panel_ptr[p + 1];
                unit_panel[n] = (int32_t)p;
                units[n] = n;
                n++;
            }
        epoch_ptr[1] = n;
    }

    double mlp = dp[DP_MLP], total = 0, comp_total = 0, stall_total = 0;
    int64_t jw = (width + split - 1) / split; /* dense columns per pass */
    int64_t stream_buf = ip[IP_STREAM_BUF_BYTES];
    double sparse_bytes = 0, bw_epochs = 0, nnz_passes = 0;
    for (int64_t e = 0; e < nepochs; e++) {
        const int64_t *eu = units + epoch_ptr[e];
        int64_t nu = epoch_ptr[e + 1] - epoch_ptr[e];
        if (nu == 0) continue;
        double dram0 = s->dram_read + s->dram_write;
        int64_t queue = 0;
        for (int q = 0; q < tree.size; q++) tree.key[q] = INFINITY, tree.node[tree.size + q] = q;
        for (int i = tree.size - 1; i >= 1; i--)
            tree.node[i] = pe_better(&tree, tree.node[2 * i], tree.node[2 * i + 1]);
        for (int pe = 0; pe < npe; pe++) {
            pe_t *p = &pes[pe];
            memset(p, 0, sizeof *p);
            p->active = next_unit(s, p, pe, eu, nu, &queue, unit_panel, unit_lo, unit_hi);
            if (p->active) pe_tree_set(&tree, pe, pe_clock(p));
        }
        for (int last = -1;;) {
            if (last >= 0) /* only the PE that just ran changed its clock */
                pe_tree_set(&tree, last, pes[last].active ? pe_clock(&pes[last]) : INFINITY);
            int pe = tree.node[1];
            if (tree.key[pe] == INFINITY) break; /* the winner is inactive: every PE is */
            last = pe;
            pe_t *p = &pes[pe];
            int64_t t = p->tile;
            if (p->nz < 0) { /* start the tile: stream its COO through the bypass buffer */
                p->nz = tile_ptr[t];
                p->nz_end = tile_ptr[t + 1];
                p->pass = 0;
                p->comp = p->mem = 0;
                double b = 12.0 * (double)(p->nz_end - p->nz);
                sparse_bytes += b;
                s->dram_read += b;
            }
            /* one nonzero, one dense pass */
            int64_t r = nz_row[p->nz], c = nz_col[p->nz];
            int64_t j0 = p->pass * jw, j1 = j0 + jw < width ? j0 + jw : width;
            int64_t lo = (j0 * 4) / LINE, hi = (j1 * 4 - 1) / LINE;
            double mem = 0;
            for (int64_t l = lo; l <= hi; l++) {
                mem += reg_access(s, pe, r * s->rowlines + l, !sddmm);
                mem += hier_read(s, pe, s->row_region + c * s->rowlines + l);
            }
            p->mem += mem / mlp;
            p->comp += (double)(((j1 - j0) * 4 + LINE - 1) / LINE);
            if (sddmm) p->comp += dp[DP_REDUCE];
            nnz_passes += 1;
            if (++p->nz < p->nz_end) continue;
            if (++p->pass < split) { /* next dense pass over the same tile */
                p->nz = tile_ptr[t];
                double b = 12.0 * (double)(p->nz_end - p->nz);
                if (b > (double)stream_buf) { /* the tile no longer sits in the buffer */
                    sparse_bytes += b;
                    s->dram_read += b;
                }
                continue;
            }
            if (sddmm) s->dram_write += 4.0 * (double)(p->nz_end - tile_ptr[t]);
            p->done += (p->comp > p->mem ? p->comp : p->mem) + dp[DP_TILE_OVERHEAD];
            comp_total += p->comp;
            stall_total += p->mem;
            p->comp = p->mem = 0;
            p->nz = -1;
            if (++p->tile >= p->tile_end)
                p->active = next_unit(s, p, pe, eu, nu, &queue, unit_panel, unit_lo, unit_hi);
        }
        double slowest = 0;
        for (int pe = 0; pe < npe; pe++) {
            pe_busy[pe] += pes[pe].done;
            if (pes[pe].done > slowest) slowest = pes[pe].done;
        }
        double bw_time = (s->dram_read + s->dram_write - dram0) / dp[DP_BW_BYTES_PER_CYCLE];
        if (bw_time > slowest) {
            slowest = bw_time;
            bw_epochs += 1;
        }
        total += slowest + (barrier ? dp[DP_SYNC] : 0.0);
    }
    flush_all(s); /* the final write-back is part of the DRAM traffic */
    double bw_all = (s->dram_read + s->dram_write) / dp[DP_BW_BYTES_PER_CYCLE];
    if (bw_all > total) total = bw_all;

    out[O_CYCLES] = total;
    out[O_COMPUTE_CYCLES] = comp_total;
    out[O_STALL_CYCLES] = stall_total;
    out[O_BW_BOUND_EPOCHS] = bw_epochs;
    out[O_EPOCHS] = (double)nepochs;
    out[O_REG_HITS] = (double)s->reg_hits;
    out[O_REG_MISSES] = (double)s->reg_misses;
    int64_t l1h = 0, l1m = 0, vh = 0, vm = 0, l2h = 0, l2m = 0;
    for (int pe = 0; pe < npe; pe++) {
        l1h += s->l1[pe].hits, l1m += s->l1[pe].misses;
        vh += s->vc[pe].hits, vm += s->vc[pe].misses;
    }
    for (int64_t g = 0; g < ngroups; g++) l2h += s->l2[g].hits, l2m += s->l2[g].misses;
    out[O_L1_HITS] = (double)l1h;
    out[O_L1_MISSES] = (double)l1m;
    out[O_VC_HITS] = (double)vh;
    out[O_VC_MISSES] = (double)vm;
    out[O_L2_HITS] = (double)l2h;
    out[O_L2_MISSES] = (double)l2m;
    out[O_LLC_HITS] = (double)s->llc.hits;
    out[O_LLC_MISSES] = (double)s->llc.misses;
    out[O_DRAM_READ] = s->dram_read;
    out[O_DRAM_WRITE] = s->dram_write;
    out[O_SPARSE_BYTES] = sparse_bytes;
    out[O_NNZ_PASSES] = nnz_passes;
    out[O_TILES] = (double)ntiles;
done:
    free(unit_lo), free(unit_hi), free(unit_panel), free(units), free(epoch_ptr), free(pes);
    free(tree.node), free(tree.key), free(fillp);
    free_sim(s);
    return rc;
}
