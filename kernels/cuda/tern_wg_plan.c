/* tern_wg_plan.c — the wgmma GEMM's tile, K split and launch choices
 * (tern_wg_plan.h).  Times quoted: H200, build/gpu/bench_gpu, int8 unless
 * said (kernels/cuda/dev/NOTES.md). */
#include "cuda/tern_wg_plan.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Waves in units of one tile's time, 10 % more per extra split (the
 * partials and their reduction; tern_wg_splits). */
static double split_cost(int64_t tiles, int64_t ks, int64_t slots) {
    return (double)((tiles * ks + slots - 1) / slots) / (double)ks * (1.0 + 0.1 * (double)(ks - 1));
}

/* Tiles of < 64 tokens (memory-bound): none when the tiles nearly cover
 * the SMs, else up to two CTAs per SM, never past one wave (filling every
 * resident slot left a partial second wave: 4096 x 14336 at M = 8 took
 * 17.0 us with 416 CTAs on 396 slots, 13.3 with 256; 14336 x 4096 15.6
 * us with 448, 12.4 with its 112 tiles unsplit).
 * Tiles of >= 64 tokens, fewer than half the SMs: within one wave (36
 * tiles at M = 64 on 4608 x 36864: ks = 3, 108 CTAs, 40.4 us int8 / 68.8
 * bf16; ks = 4, 144 CTAs on 132 SMs, 57.5 / 101.8); int8 only as far as
 * the partials (8 bytes per output and split) stay below the weight
 * bytes' order (ks <= cols / 4096 rounded up: 4096 x 4096 at M = 64 took
 * 17.1 us at ks = 9, 15.4 at 1; 4096 x 14336 21.5 at 4, 23.1 at 3), bf16
 * (twice the stages) at most 4 (25.6 us at 9, 17.4 at 4).  More tiles: bf16
 * (compute-bound) splits 2 or 3 ways when that fills the last wave
 * better, 10 % per extra split for the reduction (4608 x 36864 at
 * M = 2048: 288 tiles are 2.2 waves of 132; 1139 us at ks = 1, 1056 at 2
 * or 3); int8 does not split (no gain measured).  From one whole wave on,
 * last_wave_split (below) usually does better than either. */
int64_t tern_wg_splits(int i8, int nt, int64_t tiles, int64_t kt, int64_t cols, int n_sm,
                       int per_sm) {
    int64_t ks = 1;
    if (tiles < 1) tiles = 1;
    if (nt < 64) {
        if (tiles * 4 < (int64_t)n_sm * 3) ks = (per_sm < 2 ? per_sm : 2) * (int64_t)n_sm / tiles;
    } else if (tiles < n_sm / 2) {
        ks = i8 ? min64((int64_t)n_sm * per_sm / tiles, (cols + 4095) / 4096)
                : min64(n_sm / tiles, 4);
    } else if (!i8) {
        const int64_t slots = (int64_t)n_sm * per_sm;
        double best = 1e30;
        for (int64_t k = 1; k <= 3 && kt / k >= 64; k++) {
            const double cost = split_cost(tiles, k, slots);
            if (cost < best) best = cost, ks = k;
        }
    }
    return max64(1, min64(min64(ks, kt / 4), 64));
}

/* The KW kernel's K split: one wave (tiles x ks <= n_sm) at the ks that
 * minimises a CTA's share of the columns plus TERN_WG_KW_SPLIT_COLS for any
 * split (its partials, fence, counter and the last CTA's reduction), at
 * least 4 stages a split, at most 64 ways.  Fitted to H200 runs at M = 16 (us, ks = 1 / 2 /
 * 3 / 4, knobs 110K): a CTA's share of K costs ~1 us per 1024 columns, a
 * split ~3.5 us: 8192 x 4608 (64 tiles) 8.4 / 9.5; 8192 x 8192 12.1 /
 * 11.1; 4096 x 4096 (32 tiles) 7.4 / 8.5 / 8.0 / 7.9; 4096 x 8192 11.6 /
 * 10.4 / 9.5 / 9.0; 4096 x 11008 14.6 / 12.1 / 10.7 / 10.2; 4096 x 14336
 * 17.9 / 13.6 / 11.8 / 10.9; 4608 x 36864 (36 tiles) 40.7 / 25.4 / 19.9. */
int64_t tern_wg_kw_splits(int64_t tiles, int64_t cols, int64_t kt, int n_sm) {
    /* the cost falls with k: the most ways that fit, if that beats no split */
    const int64_t kmax = min64(min64(n_sm / max64(tiles, 1), kt / 4), 64);
    return kmax > 1 && (double)cols / (double)kmax + TERN_WG_KW_SPLIT_COLS < (double)cols ? kmax : 1;
}

/* 8-token tiles on the KW kernel (one A set) in part of the multi-token
 * GEMV's range (tern_cuda.cu's mt_rule): 3 x 2^24 .. 2^27 weights in one
 * wave of row tiles.  H200, M = 8, us, the GEMV / the KW kernel (knob
 * 1100), same run: 14336 x 4096 9.3 / 8.4, 12288 x 4096 9.1 / 8.2, 4096 x
 * 14336 10.7 / 10.2; below that range the GEMV: 8192 x 4608 7.2 / 8.6,
 * 4608 x 4096 6.3 / 7.6. */
int tern_wg_kw8(int64_t rows, int64_t cols, int n_sm) {
    const int64_t w = rows * cols;
    return w >= ((int64_t)3 << 24) && w <= ((int64_t)1 << 27) &&
           (rows + TERN_WG_ROWS - 1) / TERN_WG_ROWS <= n_sm;
}

/* The producer warpgroup from 64 tokens on (one CTA per SM either way for
 * int8; same run: int8 64-token tiles 3-14 % faster at M = 64 / 256, bf16
 * 6-21 % on four shapes, 7 % slower on 36864 x 4608 M = 64, where the two
 * CTAs per SM of the kernel without it fit its 288 tiles in one wave);
 * 128 / 256 tokens: bf16 M = 2048 0.86-0.91x -> 0.93-1.00x cuBLAS.
 * The token tile: the smallest of 8 .. 256 that holds n, but from 64
 * tokens on halved while the grid would cover less than half of the SMs
 * (more tiles instead of a split K with its reduction: M = 256 on
 * 4096 x 4096 took 44 us with 32 tiles of 256 tokens split 4 ways).
 * int8, 16 tokens: the kernel with two A register sets (2 CTAs per SM,
 * decoding overlapped with the wgmmas) where K is split — a few CTAs per
 * SM with long K, bound by each CTA's stage latency; one set (3 per SM)
 * for larger grids.  us, 16 tokens, one set / two: 36864 x 4608 21.7 /
 * 26.3, 14336 x 4096 11.6 / 11.9; split K: 4608 x 36864 24.3 / 22.9,
 * 4096 x 14336 15.7 / 14.2, 4096 x 4096 9.8 / 9.2.  8 tokens: one set
 * (equal or faster everywhere). */
void tern_wg_tile(int i8, int64_t rows, int64_t n, int64_t cols, int64_t kt, int n_sm,
                  int variant, TernWgPlan *p) {
    const int force_one_a = tern_wg_forced_one_a(variant);
    const int64_t gx = (rows + TERN_WG_ROWS - 1) / TERN_WG_ROWS;
    int nt = n > 128 ? 256 : n > 64 ? 128 : 64;
    while (nt > 64 && gx * ((n + nt - 1) / nt) < n_sm / 2) nt /= 2;
    int one_a = 0;
    if (n <= 32) nt = n > 16 ? 32 : n > 8 ? 16 : 8;
    if (i8 && nt == 8) one_a = 1;
    if (i8 && nt == 16)
        one_a = force_one_a || tern_wg_splits(1, 16, gx * ((n + 15) / 16), kt, cols, n_sm, 2) <= 1;
    /* Two warpgroup pairs on K (the KW kernel, two A sets, one CTA per SM,
     * K split by tern_wg_kw_splits): int8 16-token tiles that fit in one
     * wave.  H200, M = 16, us, the KW kernel unsplit (knob 1101) against the
     * rule before (a grid of >= 5/6 of the SMs only, split n_sm / tiles
     * ways), same run: 12288 x 4096 (96 tiles: one pair, 2 ways) 8.1 /
     * 11.8, 10240 x 4096 7.9 / 10.5, 8192 x 4608 (pairs split 2 ways) 8.4
     * / 9.5, 8192 x 4096 7.8 / 8.8, 6144 x 4096 (the multi-token GEMV) 7.7
     * / 9.6, 4608 x 4096 7.5 / 8.7; 4608 x 36864 (36 tiles, one pair 7
     * ways) 19.9 split 3 ways / 20.4.  Knobs 10KK / 11KK: the KW kernel
     * with one / two A sets (8 tokens: one) for any such tile. */
    int kw = 1;
    const int forced_kw = tern_wg_forced_kw(variant);
    if (i8 && nt <= 16 && forced_kw > 1) {
        kw = forced_kw;
        one_a = nt == 8 || variant < 1100; /* 10KK: one set */
    } else if (i8 && nt == 16 && !force_one_a && !tern_wg_variant(variant) && gx * ((n + 15) / 16) <= n_sm) {
        kw = 2, one_a = 0;
    } else if (i8 && nt == 8 && !tern_wg_variant(variant) && tern_wg_kw8(rows, cols, n_sm)) {
        kw = 2; /* one set */
    }
    p->nt = nt;
    p->one_a = one_a;
    p->kw = kw;
    p->pw = nt >= TERN_WG_PW_NT;
    p->gx = gx;
    p->gy = (n + nt - 1) / nt;
    p->ks = 1;
    p->full = p->gx * p->gy;
    p->pdl = 0;
    p->staged_y = 0;
}

/* Staged y: +2-6 % at M = 2048 over direct stores (variant 900, H200,
 * same run); not for the small tiles, where it costs registers (the
 * 16-token one-set kernel 78 -> 97: 3 -> 2 CTAs per SM) and K is split. */
void tern_wg_epilogue(int64_t rows, int64_t n, int y_aligned16, int variant, TernWgPlan *p) {
    p->staged_y = p->nt >= TERN_WG_STAGED_NT && p->full > 0 && rows % 4 == 0 && rows <= INT32_MAX &&
                  n <= INT32_MAX && y_aligned16 && !tern_wg_direct_y(variant);
}

int tern_wg_variant(int v) {
    return (v >= 701 && v <= 864) || (v >= 900 && v <= 909) || tern_wg_forced_kw(v);
}
int64_t tern_wg_forced_ks(int v) {
    return (v >= 701 && v <= 764) || (v >= 801 && v <= 864) || (v >= 1001 && v <= 1064) ||
                   (v >= 1101 && v <= 1164)
               ? v % 100
               : 0;
}
int tern_wg_forced_one_a(int v) { return v >= 800 && v <= 864; }
int tern_wg_forced_kw(int v) { return (v >= 1000 && v <= 1064) || (v >= 1100 && v <= 1164) ? 2 : 0; }
int tern_wg_direct_y(int v) { return v == 900; }
int tern_wg_no_last_split(int v) { return v == 901; }
int tern_wg_no_multicast(int v) { return v == 909; }

/* Pairs of CTAs (2i, 2i + 1) of the producer kernel's flat grid (unsplit
 * tiles first, then the split ones, split after split, each row tile after
 * row tile within a token tile) take the same token tile and K range where
 * the row tiles per token tile, the unsplit tiles and the split ones are
 * even.  H200, bench_gpu, M = 2048, a timing probe that copied half the
 * activations (results wrong: what multicast could save at most): bf16 /
 * int8 14336 x 4096 337.9 -> 308.5 / 209.9 -> 195.6 us, 36864 x 4608 958.7
 * -> 882.0 / 594.6 -> 553.3, 4096 x 4096 97.5 -> 89.3 / 59.2 -> 56.1.  The
 * multicast kernel against the same without it (knob 909, two rounds, us):
 * bf16 M = 2048 14336 x 4096 332.6-342.0 vs 336.1-350.6, 36864 x 4608
 * 972.3-984.1 vs 1014.9-1026.0, 4608 x 36864 898.7-926.3 vs 905.5-926.6;
 * int8 M = 2048 within 1 %, M = 256 (256-token tiles) 2 % slower; tiles of
 * 64 tokens (M = 64) up to 1.6x slower with the consumers' remote arrivals
 * at cluster scope (.release.cluster), not measured since.  So: bf16,
 * 256-token tiles, more than one token tile. */
int tern_wg_multicast(int pw, int i8, int nt, int64_t gx, int64_t gy, int64_t full, int64_t tail, int variant) {
    return pw && !i8 && nt == 256 && gy > 1 && gx % 2 == 0 && full % 2 == 0 && tail % 2 == 0 &&
           !tern_wg_no_multicast(variant);
}
int64_t tern_wg_forced_last_split(int v) { return v >= 902 && v <= 908 ? v - 900 : 0; }

/* The last wave split: tiles of >= 64 tokens (compute-bound) with more
 * tiles than resident slots — the whole waves run unsplit (copy-engine
 * epilogue, no partials) and only the last wave's `rest` tiles split k
 * ways (k <= slots / rest, at most 8, at least 8 stages each).  Cost in
 * stages of one CTA: whole waves x kt + kt / k + TERN_WG_SPLIT_FIXED +
 * TERN_WG_SPLIT_STAGES x k (the partials and the last CTA's reduction),
 * taken where it is below the uniform plan's (split_cost x kt).  The
 * overhead is fitted to H200 runs (same run, 256-token tiles, us; the
 * bench knobs 901 / 90K): 4608 x 36864 at M = 2048 (288 tiles = 2 waves +
 * 24, k <= 5): int8 564 unsplit, k = 2..5 536 / 516 / 511 / 509; bf16
 * 1015 at the uniform ks = 2 (1088 unsplit), k = 2..5 969 / 935 / 905 /
 * 903 — 40-80 stages over the share of K, more with k; 36864 x 4608 (18
 * int8 / 36 bf16 stages, k <= 2): int8 M = 256 (2 waves + 24) 92 -> 132,
 * M = 2048 (17 + 60) 594 -> 628, bf16 M = 2048 930-972 -> 992, M = 256
 * 152 -> 149 (the one gain there the rule leaves). */
static void last_wave_split(int64_t tiles, int64_t kt, int64_t slots, int64_t forced, TernWgPlan *p) {
    const int64_t rest = tiles % slots;
    if (tiles < slots || rest == 0) return;
    const int64_t kmax = min64(min64(slots / rest, 8), kt / 8);
    double best = split_cost(tiles, p->ks, slots) * (double)kt;
    for (int64_t k = 2; k <= kmax; k++) {
        const double cost = (double)(tiles - rest) / (double)slots * (double)kt + (double)kt / (double)k +
                            (double)(TERN_WG_SPLIT_FIXED + TERN_WG_SPLIT_STAGES * k);
        if (forced ? k == min64(forced, kmax) : cost < best) best = cost, p->full = tiles - rest, p->ks = k;
    }
}

/* A programmatic dependent launch overlaps the grid's start with the
 * previous kernel's end (4096 x 4096 at 8 tokens: 7.8 -> 6.9 us), but its
 * first CTAs take the slots that kernel leaves free: where the grid fills
 * only part of the slots beyond one CTA per SM (a K split sized for 2 of 3
 * CTAs per SM), the SMs end up with unequal shares (4096 x 14336 at 8
 * tokens: 12.5 -> 13.6 us, 4608 x 36864 21.0 -> 23.6); those launch
 * plainly. */
void tern_wg_grid(int i8, int64_t cols, int64_t kt, int n_sm, int per_sm, int variant, int pdl_on,
                  TernWgPlan *p) {
    const int64_t forced_ks = tern_wg_forced_ks(variant);
    const int64_t tiles = p->gx * p->gy, slots = (int64_t)n_sm * per_sm;
    p->ks = forced_ks > 0 ? min64(forced_ks, kt)
            : p->kw > 1   ? tern_wg_kw_splits(tiles, cols, kt, n_sm)
                          : tern_wg_splits(i8, p->nt, tiles, kt, cols, n_sm, per_sm);
    p->full = p->ks == 1 ? tiles : 0;
    if (forced_ks <= 0 && p->pw && !tern_wg_no_last_split(variant)) /* the producer kernels' flat grid */
        last_wave_split(tiles, kt, slots, tern_wg_forced_last_split(variant), p);
    const int64_t ctas = p->full + (tiles - p->full) * p->ks;
    p->pdl = pdl_on && (ctas <= n_sm || slots - ctas < n_sm);
}
