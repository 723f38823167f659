/* The wgmma GEMM's host-side choices (kernels/cuda/tern_wg_plan.c), without
 * a GPU: the tile, the one- or two-A-set kernel, the K split and the
 * programmatic dependent launch for the shapes whose timings chose the
 * rules (H200: 132 SMs; kernels/cuda/dev/NOTES.md), worked out by hand from
 * the rules' statements, and the invariants every plan keeps. */
#include "test.h"
#include "cuda/tern_wg_plan.h"

#include <stdlib.h>

/* int8: kt = code blocks = ceil(cols / 256); bf16: twice that */
static int64_t kt_of(int i8, int64_t cols) { return (cols + 255) / 256 * (i8 ? 1 : 2); }

static TernWgPlan plan(int i8, int64_t rows, int64_t n, int64_t cols, int n_sm, int per_sm,
                       int64_t forced_ks, int pdl_on) {
    TernWgPlan p;
    tern_wg_tile(i8, rows, n, cols, kt_of(1, cols), n_sm, 0, &p);
    tern_wg_grid(i8, cols, kt_of(i8, cols), n_sm, per_sm, forced_ks, pdl_on, &p);
    return p;
}

TEST(wg_plan_token_tiles) {
    TernWgPlan p;
    /* n <= 32: the smallest tile that holds n */
    p = plan(1, 4096, 1, 4096, 132, 3, 0, 1);
    CHECK(p.nt == 8 && p.one_a == 1 && p.gx == 32 && p.gy == 1);
    p = plan(1, 4096, 9, 4096, 132, 2, 0, 1);
    CHECK(p.nt == 16);
    p = plan(0, 4096, 8, 4096, 132, 2, 0, 1);
    CHECK(p.nt == 8 && p.one_a == 0); /* bf16: two A sets always */
    p = plan(1, 4096, 17, 4096, 132, 1, 0, 1);
    CHECK(p.nt == 32 && p.one_a == 0 && p.gy == 1);
    /* 256 tokens on 4096 rows: 32 row tiles < 66, halved to 128 (64 tiles
     * < 66), then 64 (128 tiles) */
    p = plan(1, 4096, 256, 4096, 132, 1, 0, 1);
    CHECK(p.nt == 64 && p.gy == 4);
    /* 8500 rows = 67 row tiles >= 66: 128 tokens for n = 100, 256 for 129
     * and 300 (test_gpu's big-tile case) — on up to 134 SMs */
    CHECK(plan(1, 8500, 100, 2056, 132, 1, 0, 1).nt == 128);
    CHECK(plan(1, 8500, 129, 2056, 132, 1, 0, 1).nt == 256);
    p = plan(1, 8500, 300, 2056, 132, 1, 0, 1);
    CHECK(p.nt == 256 && p.gx == 67 && p.gy == 2);
    CHECK(plan(1, 8500, 129, 2056, 134, 1, 0, 1).nt == 256);
    CHECK(plan(1, 8500, 129, 2056, 136, 1, 0, 1).nt == 128); /* 67 tiles < 68: halved */
    CHECK(plan(1, 8500, 300, 2056, 136, 1, 0, 1).nt == 256); /* 67 x 2 tiles */
    /* M = 2048 on 4096 x 4096: 32 x 8 tiles of 256 */
    p = plan(1, 4096, 2048, 4096, 132, 1, 0, 1);
    CHECK(p.nt == 256 && p.gx == 32 && p.gy == 8 && p.ks == 1);
}

TEST(wg_plan_sixteen_token_kernel) {
    /* 36864 x 4608, 16 tokens: 288 tiles cover the SMs, no split -> one
     * A set (3 CTAs per SM, 21.7 vs 26.3 us) */
    TernWgPlan p = plan(1, 36864, 16, 4608, 132, 3, 0, 1);
    CHECK(p.nt == 16 && p.one_a == 1 && p.ks == 1);
    /* 4608 x 36864: 36 tiles, split 2 * 132 / 36 = 7 ways -> two sets
     * (22.9 vs 24.3 us) */
    p = plan(1, 4608, 16, 36864, 132, 2, 0, 1);
    CHECK(p.nt == 16 && p.one_a == 0 && p.ks == 7);
    /* 14336 x 4096: 112 tiles, not split -> one set */
    p = plan(1, 14336, 16, 4096, 132, 3, 0, 1);
    CHECK(p.one_a == 1 && p.ks == 1);
    /* the bench knob 8KK forces one set */
    tern_wg_tile(1, 4608, 16, 36864, kt_of(1, 36864), 132, 1, &p);
    CHECK(p.one_a == 1);
}

TEST(wg_plan_k_split) {
    /* tiles of < 64 tokens: up to two CTAs per SM, within kt / 4 */
    TernWgPlan p = plan(1, 4096, 8, 14336, 132, 3, 0, 1);
    CHECK(p.ks == 8); /* 2 * 132 / 32 = 8 <= 56 / 4 */
    p = plan(1, 4096, 8, 4096, 132, 3, 0, 1);
    CHECK(p.ks == 4); /* 8, capped at 16 / 4 */
    /* >= 64 tokens, few tiles: within one wave (4608 x 36864, M = 64:
     * 36 tiles, ks 3 -> 108 CTAs; 4 would make 144 on 132 SMs) */
    p = plan(1, 4608, 64, 36864, 132, 1, 0, 1);
    CHECK(p.nt == 64 && p.gx == 36 && p.ks == 3);
    p = plan(0, 4608, 64, 36864, 132, 1, 0, 1);
    CHECK(p.ks == 3);
    /* int8 at most cols / 4096 rounded up: 4096 x 14336 -> 4, 4096^2 -> 1 */
    CHECK(plan(1, 4096, 64, 14336, 132, 1, 0, 1).ks == 4);
    CHECK(plan(1, 4096, 64, 4096, 132, 1, 0, 1).ks == 1);
    /* bf16 at most 4: 2048 rows (16 tiles) at M = 64 -> 132 / 16 = 8, capped */
    CHECK(plan(0, 2048, 64, 4096, 132, 1, 0, 1).ks == 4);
    CHECK(plan(0, 4096, 64, 4096, 132, 1, 0, 1).ks == 4); /* 132 / 32 */
    /* many tiles: bf16 fills the last wave (4608 x 36864, M = 2048: 288
     * tiles, 3 waves unsplit, 5 waves of half the work at ks = 2 with
     * 10 %: 2.75 < 3, ks = 3: 7 / 3 * 1.2 = 2.8) */
    CHECK(plan(0, 4608, 2048, 36864, 132, 1, 0, 1).ks == 2);
    CHECK(plan(1, 4608, 2048, 36864, 132, 1, 0, 1).ks == 1); /* int8 does not split */
    /* ... nor bf16 when a split would leave < 64 stages: 8192 columns are
     * 64 bf16 stages (the wave rule alone would take 2 here) */
    CHECK(plan(0, 4608, 2048, 8192, 132, 1, 0, 1).ks == 1);
    /* forced (bench knob 7KK): that many, at most the stages */
    CHECK(plan(1, 4096, 64, 4096, 132, 1, 2, 1).ks == 2);
    CHECK(plan(1, 300, 40, 5000, 132, 1, 64, 1).ks == kt_of(1, 5000));
}

TEST(wg_plan_dependent_launch) {
    /* one CTA per SM or fewer: PDL (4096^2, 8 tokens: 128 CTAs) */
    CHECK(plan(1, 4096, 8, 4096, 132, 3, 0, 1).pdl == 1);
    /* a split sized for 2 of 3 slots per SM: 256 CTAs on 396 slots leave
     * 140 >= 132 free -> plain launch (13.6 vs 12.5 us with PDL) */
    CHECK(plan(1, 4096, 8, 14336, 132, 3, 0, 1).pdl == 0);
    CHECK(plan(1, 4608, 8, 36864, 132, 3, 0, 1).pdl == 0);
    /* nearly every slot taken: PDL (4608 x 36864, 16 tokens, 252 of 264) */
    CHECK(plan(1, 4608, 16, 36864, 132, 2, 0, 1).pdl == 1);
    /* more CTAs than slots: PDL */
    CHECK(plan(1, 4096, 2048, 4096, 132, 1, 0, 1).pdl == 1);
    /* never when PDL is off (TERNLAB_CUDA_PDL=0) */
    CHECK(plan(1, 4096, 8, 4096, 132, 3, 0, 0).pdl == 0);
}

TEST(wg_plan_bench_knobs) {
    /* 7KK: split KK; 8KK: split KK with one A set; 800: one set, own split */
    CHECK(tern_wg_forced_ks(0) == 0 && !tern_wg_forced_one_a(0) && !tern_wg_variant(0));
    CHECK(tern_wg_forced_ks(700) == 0 && !tern_wg_variant(700));
    CHECK(tern_wg_forced_ks(701) == 1 && tern_wg_forced_ks(719) == 19 && tern_wg_forced_ks(764) == 64);
    CHECK(!tern_wg_forced_one_a(719) && tern_wg_variant(719));
    CHECK(tern_wg_forced_ks(765) == 0 && tern_wg_forced_ks(800) == 0 && tern_wg_forced_one_a(800));
    CHECK(tern_wg_forced_ks(805) == 5 && tern_wg_forced_one_a(805) && tern_wg_variant(864));
    CHECK(tern_wg_forced_ks(865) == 0 && !tern_wg_forced_one_a(865) && !tern_wg_variant(865));
    CHECK(tern_wg_forced_ks(31000) == 0 && !tern_wg_variant(51100)); /* the GEMVs' knobs */
    CHECK(tern_wg_variant(900) && tern_wg_direct_y(900) && tern_wg_forced_ks(900) == 0 &&
          !tern_wg_forced_one_a(900));
    CHECK(!tern_wg_direct_y(0) && !tern_wg_direct_y(899) && !tern_wg_direct_y(901) && !tern_wg_variant(901));
}

TEST(wg_plan_producer_and_epilogue) {
    /* the producer warpgroup from 64 tokens on */
    CHECK(plan(1, 4096, 256, 4096, 132, 1, 0, 1).pw == 1);       /* nt 64 */
    CHECK(plan(0, 8500, 300, 2056, 132, 1, 0, 1).pw == 1);       /* nt 256 */
    CHECK(plan(1, 4096, 17, 4096, 132, 1, 0, 1).pw == 0);        /* nt 32 */
    CHECK(plan(1, 4096, 16, 4096, 132, 1, 0, 1).pw == 0);        /* nt 16 */
    /* staged y: test_gpu's big-tile case (8500 rows, 256 tokens, no split) */
    TernWgPlan p = plan(1, 8500, 300, 2056, 132, 1, 0, 1);
    CHECK(p.staged_y == 0 && p.ks == 1); /* not before tern_wg_epilogue */
    tern_wg_epilogue(8500, 300, 1, 0, &p);
    CHECK(p.staged_y == 1);
    tern_wg_epilogue(8500, 300, 0, 0, &p); /* y not 16-byte aligned */
    CHECK(p.staged_y == 0);
    tern_wg_epilogue(8500, 300, 1, 900, &p); /* the direct-store knob */
    CHECK(p.staged_y == 0);
    tern_wg_epilogue(8499, 300, 1, 0, &p); /* row stride not a multiple of 16 bytes */
    CHECK(p.staged_y == 0);
    tern_wg_epilogue(8500, (int64_t)1 << 31, 1, 0, &p); /* past a tensor-map coordinate */
    CHECK(p.staged_y == 0);
    tern_wg_epilogue(8500, 300, 1, 702, &p); /* the knob of a K split is not this function's */
    CHECK(p.staged_y == 1);
    p = plan(1, 8500, 300, 2056, 132, 1, 2, 1); /* a K split */
    tern_wg_epilogue(8500, 300, 1, 0, &p);
    CHECK(p.ks == 2 && p.staged_y == 0);
    p = plan(1, 4096, 17, 4096, 132, 1, 0, 1); /* 32-token tiles: direct */
    tern_wg_epilogue(4096, 17, 1, 0, &p);
    CHECK(p.nt == 32 && p.staged_y == 0);
}

TEST(wg_plan_invariants) {
    /* random shapes: tiles cover the matrix and the tokens, the split stays
     * in 1 .. max(1, min(kt / 4, 64)), n <= 32 takes the smallest tile */
    srand(7);
    const int sms[] = {1, 8, 66, 114, 132, 144};
    for (int it = 0; it < 20000; it++) {
        const int i8 = rand() & 1, n_sm = sms[rand() % 6], per_sm = 1 + rand() % 3;
        const int64_t rows = 1 + rand() % 40000, cols = 1 + rand() % 40000, n = 1 + rand() % 3000;
        const TernWgPlan p = plan(i8, rows, n, cols, n_sm, per_sm, 0, 1);
        const int64_t kt = kt_of(i8, cols), cap = kt / 4 < 64 ? kt / 4 : 64;
        const int nt_ok = p.nt == 8 || p.nt == 16 || p.nt == 32 || p.nt == 64 || p.nt == 128 ||
                          p.nt == 256;
        CHECK_MSG(nt_ok && p.gx * TERN_WG_ROWS >= rows && (p.gx - 1) * TERN_WG_ROWS < rows &&
                      p.gy * p.nt >= n && (p.gy - 1) * p.nt < n,
                  "i8 %d %lld x %lld n %lld: nt %d gx %lld gy %lld", i8, (long long)rows,
                  (long long)cols, (long long)n, p.nt, (long long)p.gx, (long long)p.gy);
        CHECK_MSG(p.ks >= 1 && p.ks <= (cap > 1 ? cap : 1), "ks %lld (kt %lld)", (long long)p.ks,
                  (long long)kt);
        if (n <= 32) CHECK(p.nt == (n > 16 ? 32 : n > 8 ? 16 : 8));
        if (!i8 || p.nt > 16) CHECK(p.one_a == 0);
        if (i8 && p.nt == 8) CHECK(p.one_a == 1);
        CHECK(p.pw == (p.nt >= 64) && !(p.pw && p.one_a));
    }
}
