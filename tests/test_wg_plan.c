/* The wgmma GEMM's host-side choices (kernels/cuda/tern_wg_plan.c), without
 * a GPU: the tile, the one- or two-A-set kernel, the K split and the
 * programmatic dependent launch for the shapes whose timings chose the
 * rules (H200: 132 SMs; kernels/cuda/dev/NOTES.md), worked out by hand from
 * the rules' statements, and the invariants every plan keeps. */
#include "test.h"
#include "cuda/tern_wg_plan.h"

#include <stdio.h>
#include <stdlib.h>

/* int8: kt = code blocks = ceil(cols / 256); bf16: twice that */
static int64_t kt_of(int i8, int64_t cols) { return (cols + 255) / 256 * (i8 ? 1 : 2); }

/* the plan under the bench knob `variant` (0: none) */
static TernWgPlan plan_at(int i8, int64_t rows, int64_t n, int64_t cols, int n_sm, int per_sm,
                          int variant, int pdl_on) {
    TernWgPlan p;
    tern_wg_tile(i8, rows, n, cols, kt_of(1, cols), n_sm, variant, &p);
    tern_wg_grid(i8, cols, kt_of(i8, cols), n_sm, per_sm, variant, pdl_on, &p);
    return p;
}
/* forced_ks > 0: the knob 7KK that forces it */
static TernWgPlan plan(int i8, int64_t rows, int64_t n, int64_t cols, int n_sm, int per_sm,
                       int64_t forced_ks, int pdl_on) {
    return plan_at(i8, rows, n, cols, n_sm, per_sm, forced_ks > 0 ? 700 + (int)forced_ks : 0, pdl_on);
}
/* one CTA per SM (the producer kernels), PDL on */
static TernWgPlan plan_v(int i8, int64_t rows, int64_t n, int64_t cols, int n_sm, int variant) {
    return plan_at(i8, rows, n, cols, n_sm, 1, variant, 1);
}

/* the plan's K split and unsplit tiles are ks and full (both printed when not) */
static int split_is(TernWgPlan p, int64_t ks, int64_t full) {
    if (p.ks == ks && p.full == full) return 1;
    fprintf(stderr, "    plan: ks %lld full %lld, expected %lld %lld\n", (long long)p.ks,
            (long long)p.full, (long long)ks, (long long)full);
    return 0;
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
    /* 4608 x 36864: 36 tiles fit one wave -> two warpgroup pairs on K, two
     * sets, split 3 ways (36864 / 3 + 3584 < 36864 / 2 + 3584; 4 ways would
     * be 144 CTAs) — 19.9 us against one pair split 7 ways 20.4 */
    p = plan(1, 4608, 16, 36864, 132, 1, 0, 1);
    CHECK(p.nt == 16 && p.kw == 2 && p.one_a == 0 && p.ks == 3 && p.full == 0);
    CHECK(plan(1, 36864, 16, 4608, 132, 3, 0, 1).kw == 1); /* 288 tiles: more than one wave */
    /* 14336 x 4096: 112 tiles, not split (4096 / 1 < 4096 / 2 + 3584) -> pairs (8.4 us) */
    p = plan(1, 14336, 16, 4096, 132, 1, 0, 1);
    CHECK(p.kw == 2 && p.one_a == 0 && p.ks == 1 && p.full == p.gx);
    /* 4096 x 14336: 32 tiles split 4 ways (3584 + 3584 < 14336 / 3 + 3584) */
    p = plan(1, 4096, 16, 14336, 132, 1, 0, 1);
    CHECK(p.kw == 2 && p.one_a == 0 && p.ks == 4);
    /* the 7B's and 27B's q|k|v (96 / 64 tiles): unsplit; 8192 x 8192 split 2 ways
     * (4096 + 3584 < 8192); 4096 x 11008 4 ways; 4096^2 unsplit (1024 + 3584 > 4096) */
    CHECK(split_is(plan(1, 12288, 16, 4096, 132, 1, 0, 1), 1, 96));
    CHECK(plan(1, 12288, 16, 4096, 132, 1, 0, 1).kw == 2);
    CHECK(split_is(plan(1, 8192, 16, 4608, 132, 1, 0, 1), 1, 64));
    CHECK(split_is(plan(1, 8192, 16, 8192, 132, 1, 0, 1), 2, 0));
    CHECK(split_is(plan(1, 4096, 16, 11008, 132, 1, 0, 1), 4, 0));
    CHECK(split_is(plan(1, 4096, 16, 4096, 132, 1, 0, 1), 1, 32));
    /* tern_wg_kw_splits: one wave and >= 4 stages a split at most */
    CHECK(tern_wg_kw_splits(33, 100000, 400, 132) == 4);
    CHECK(tern_wg_kw_splits(33, 100000, 8, 132) == 2);
    CHECK(tern_wg_kw_splits(132, 100000, 400, 132) == 1);
    CHECK(tern_wg_kw_splits(66, 7168 * 2, 56, 132) == 2); /* 7168 + 3584 < 14336 */
    CHECK(tern_wg_kw_splits(66, 7168, 28, 132) == 1);     /* 3584 + 3584 = 7168: no gain */
    CHECK(tern_wg_kw_splits(1, 14336, 56, 132) == 14);   /* 1024 + 3584: as many as kt / 4 */
    /* not more tiles than SMs (133 of 128 rows), not 8 tokens, not 17 .. 32, not bf16,
     * not under a knob of the GEMM's */
    CHECK(plan(1, 133 * 128, 16, 4096, 132, 3, 0, 1).kw == 1);
    CHECK(plan(1, 132 * 128, 16, 4096, 132, 1, 0, 1).kw == 2);
    /* 8 tokens (one set) where tern_wg_kw8 takes them: 3 x 2^24 .. 2^27 weights in one wave */
    p = plan(1, 14336, 8, 4096, 132, 1, 0, 1);
    CHECK(p.nt == 8 && p.kw == 2 && p.one_a == 1 && p.ks == 1);
    CHECK(plan(1, 12288, 8, 4096, 132, 1, 0, 1).kw == 2);
    CHECK(split_is(plan(1, 4096, 8, 14336, 132, 1, 0, 1), 4, 0));
    CHECK(plan(1, 8192, 8, 4608, 132, 3, 0, 1).kw == 1);   /* 37.7M weights */
    CHECK(plan(1, 4608, 8, 36864, 132, 3, 0, 1).kw == 1);  /* 170M */
    CHECK(plan(1, 14336, 8, 4096, 100, 3, 0, 1).kw == 1);  /* 112 tiles on 100 SMs */
    CHECK(plan(1, 14336, 8, 4096, 132, 3, 2, 1).kw == 1);   /* a knob of the GEMM's (702) */
    CHECK(tern_wg_kw8(12288, 4096, 132) && !tern_wg_kw8(12287, 4096, 132) &&
          tern_wg_kw8(4096, 32768, 132) && !tern_wg_kw8(4096, 32769, 132) && !tern_wg_kw8(16896 + 1, 4096, 132));
    CHECK(plan(1, 14336, 17, 4096, 132, 1, 0, 1).kw == 1);
    CHECK(plan(0, 14336, 16, 4096, 132, 1, 0, 1).kw == 1);
    CHECK(plan(1, 14336, 16, 4096, 132, 3, 2, 1).kw == 1);
    /* on 34 SMs the 36 tiles of 4608 rows are more than one wave: one pair, unsplit */
    p = plan(1, 4608, 16, 36864, 34, 2, 0, 1);
    CHECK(p.kw == 1 && p.one_a == 1 && p.ks == 1);
    /* the bench knob 8KK forces one set */
    tern_wg_tile(1, 4608, 16, 36864, kt_of(1, 36864), 132, 801, &p);
    CHECK(p.one_a == 1 && p.kw == 1);
    /* 10KK / 11KK: two warpgroup pairs on K, one / two A sets (8 tokens: one) */
    tern_wg_tile(1, 4608, 16, 36864, kt_of(1, 36864), 132, 1000, &p);
    CHECK(p.kw == 2 && p.one_a == 1);
    tern_wg_tile(1, 4608, 16, 36864, kt_of(1, 36864), 132, 1104, &p);
    CHECK(p.kw == 2 && p.one_a == 0);
    tern_wg_tile(1, 4608, 8, 36864, kt_of(1, 36864), 132, 1100, &p);
    CHECK(p.kw == 2 && p.one_a == 1);
    tern_wg_tile(1, 4608, 17, 36864, kt_of(1, 36864), 132, 1100, &p); /* 32 tokens: no pairs */
    CHECK(p.kw == 1 && p.nt == 32);
    tern_wg_tile(0, 4608, 16, 36864, kt_of(0, 36864), 132, 1000, &p); /* bf16: none */
    CHECK(p.kw == 1);
}

TEST(wg_plan_k_split) {
    /* tiles of < 64 tokens: up to two CTAs per SM, within kt / 4 */
    TernWgPlan p = plan(1, 4096, 8, 8192, 132, 3, 0, 1);
    CHECK(p.ks == 8); /* 2 * 132 / 32 = 8 <= 32 / 4 */
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
    /* between half a wave and one: bf16 (compute-bound) splits when the
     * split fills the wave better, 10 % per extra split (10240 x 36864 at
     * M = 256: 80 tiles of 256 tokens on 132 SMs: 1 unsplit, 2 / 2 * 1.1
     * at ks = 2, 2 / 3 * 1.2 = 0.8 at 3); int8 does not split */
    p = plan(0, 10240, 256, 36864, 132, 1, 0, 1);
    CHECK(p.nt == 256 && p.ks == 3 && p.full == 0);
    CHECK(plan(1, 10240, 256, 36864, 132, 1, 0, 1).ks == 1);
    /* ... not when a split would leave < 64 stages: 8192 columns are 64
     * bf16 stages */
    CHECK(plan(0, 10240, 256, 8192, 132, 1, 0, 1).ks == 1);
    /* (more tiles than slots: wg_plan_last_wave_split) */
    /* forced (bench knob 7KK): that many, at most the stages */
    CHECK(plan(1, 4096, 64, 4096, 132, 1, 2, 1).ks == 2);
    CHECK(plan(1, 300, 40, 5000, 132, 1, 64, 1).ks == kt_of(1, 5000));
}

TEST(wg_plan_last_wave_split) {
    /* 4608 x 36864 at M = 2048 on 132 SMs: 288 tiles of 256 tokens = 2
     * whole waves + 24 tiles, k <= 132 / 24 = 5; the split costs 30 + 8 k
     * stages.  bf16 (kt 288): 576 + 288 / k + 30 + 8 k = 766, 726, 710,
     * 703.6 for k = 2..5 against 792 (the uniform ks = 2: 5 waves of 144
     * stages + 10 %) -> 5; int8 (kt 144): 288 + 144 / k + 30 + 8 k = 406,
     * 390, 386, 386.8 against 432 (3 waves unsplit) -> 4 */
    TernWgPlan p = plan(0, 4608, 2048, 36864, 132, 1, 0, 1);
    CHECK(p.nt == 256 && p.full == 264 && p.ks == 5);
    CHECK(split_is(plan(1, 4608, 2048, 36864, 132, 1, 0, 1), 4, 264));
    /* short K: 36864 x 4608 (int8 18 stages, 2304 tiles = 17 waves + 60,
     * k <= 2): 306 + 9 + 46 = 361 > 324 unsplit -> none (measured 594 ->
     * 628 us split); M = 256 (288 tiles): 36 + 9 + 46 > 54 -> none (92 ->
     * 132 us); bf16 M = 256 (36 stages, k <= 4): 72 + 18 + 46 = 136, ... >
     * 108 unsplit (the uniform rule wants >= 64 stages) -> none (measured
     * 152 us unsplit, 149 at k = 2: a gain the rule leaves) */
    CHECK(split_is(plan(1, 36864, 2048, 4608, 132, 1, 0, 1), 1, 2304));
    CHECK(split_is(plan(1, 36864, 256, 4608, 132, 1, 0, 1), 1, 288));
    CHECK(split_is(plan(0, 36864, 256, 4608, 132, 1, 0, 1), 1, 288));
    /* 8500 x 36864 at 300 tokens: 134 tiles, 2 over: k <= min(66, 8,
     * 144 / 8): 144 + 144 / k + 30 + 8 k: 262, 246, 242, 242.8, ... against
     * 288 -> 4; 8500 x 2056 (9 int8 stages): none (k <= 9 / 8) */
    CHECK(split_is(plan(1, 8500, 300, 36864, 132, 1, 0, 1), 4, 132));
    CHECK(split_is(plan(1, 8500, 300, 2056, 132, 1, 0, 1), 1, 134));
    /* test_gpu's case: (n_sm + 5) row tiles, 6000 columns (int8 24
     * stages: 24 + 12 + 46 > 48 -> none; forced 3 ways by its knob) */
    p = plan(1, 128 * 137 - 36, 130, 6000, 132, 1, 0, 1);
    CHECK(p.nt == 256 && p.ks == 1 && p.full == 137);
    CHECK(split_is(plan_v(1, 128 * 137 - 36, 130, 6000, 132, 903), 3, 132));
    CHECK(split_is(plan_v(0, 128 * 137 - 36, 130, 6000, 132, 908), 6, 132)); /* bf16 48 stages: at most 6 */
    /* the fitted cost at its margin: (n_sm + 5) tiles = one whole wave + 5,
     * so a split k ways costs kt + kt / k + 30 + 8 k against 2 kt unsplit:
     * 80 int8 stages (20480 columns) 160.67 at k = 3 (the cheapest) > 160 ->
     * none; 82 stages 163.33 < 164 -> 3 ways (a fixed cost outside 29.3 ..
     * 30.7 stages, or another per-split cost, changes one of the two) */
    CHECK(split_is(plan(1, 128 * 137 - 36, 130, 80 * 256, 132, 1, 0, 1), 1, 137));
    CHECK(split_is(plan(1, 128 * 137 - 36, 130, 82 * 256, 132, 1, 0, 1), 3, 132));
    /* whole waves or less than one: unchanged (4096 x 4096 at 2048: 256
     * tiles, 124 over -> k <= 1; 4608 x 36864 at M = 256: 72 tiles of 128
     * tokens, under one wave) */
    CHECK(split_is(plan(1, 4096, 2048, 4096, 132, 1, 0, 1), 1, 256));
    p = plan(1, 4608, 256, 36864, 132, 1, 0, 1);
    CHECK(p.nt == 128 && p.ks == 1 && p.full == 72);
    /* 36 x 66 tiles of 256 tokens: exactly 18 waves of 132 slots (66 SMs x 2) */
    CHECK(split_is(plan(1, 4608, 256 * 66, 36864, 66, 2, 0, 1), 1, 36 * 66));
    /* only for tiles of >= 64 tokens (the producer kernel's flat grid) */
    p = plan(1, 18176, 32, 36864, 132, 1, 0, 1); /* 142 tiles of 32 */
    CHECK(p.nt == 32 && (p.ks == 1 || p.full == 0));
    /* the knobs: a forced uniform split (7KK); 901 none; 90K K ways, at
     * most what fits */
    CHECK(split_is(plan(0, 4608, 2048, 36864, 132, 1, 2, 1), 2, 0));
    p = plan_v(0, 4608, 2048, 36864, 132, 901);
    CHECK(p.ks == 2 && p.full == 0); /* bf16's uniform rule */
    CHECK(split_is(plan_v(1, 4608, 2048, 36864, 132, 901), 1, 288));
    CHECK(split_is(plan_v(1, 4608, 2048, 36864, 132, 902), 2, 264));
    CHECK(split_is(plan_v(1, 4608, 2048, 36864, 132, 908), 5, 264));
    CHECK(split_is(plan_v(1, 36864, 2048, 4608, 132, 902), 2, 2244)); /* forced where the rule says no */
    CHECK(split_is(plan_v(1, 4096, 2048, 4096, 132, 905), 1, 256)); /* no room for a split */
    /* the staged epilogue stays for the unsplit tiles */
    p = plan(0, 4608, 2048, 36864, 132, 1, 0, 1);
    tern_wg_epilogue(4608, 2048, 1, 0, &p);
    CHECK(p.staged_y == 1);
    p = plan(0, 4608, 2048, 36864, 132, 1, 2, 1);
    tern_wg_epilogue(4608, 2048, 1, 0, &p);
    CHECK(p.staged_y == 0);
    /* PDL: 264 + 120 CTAs, more than the slots */
    CHECK(plan(0, 4608, 2048, 36864, 132, 1, 0, 1).pdl == 1);
}

TEST(wg_plan_dependent_launch) {
    /* one CTA per SM or fewer: PDL (4096^2, 8 tokens: 128 CTAs) */
    CHECK(plan(1, 4096, 8, 4096, 132, 3, 0, 1).pdl == 1);
    /* a split sized for 2 of 3 slots per SM: 256 CTAs on 396 slots leave
     * 140 >= 132 free -> plain launch (4096 x 14336 before the KW kernel
     * took its 8 tokens: 13.6 vs 12.5 us with PDL) */
    CHECK(plan(1, 4096, 8, 8192, 132, 3, 0, 1).pdl == 0);
    CHECK(plan(1, 4608, 8, 36864, 132, 3, 0, 1).pdl == 0);
    /* nearly every slot taken: PDL (36864 x 4608, 16 tokens, 288 of 396) */
    CHECK(plan(1, 36864, 16, 4608, 132, 3, 0, 1).pdl == 1);
    /* the KW kernel's one wave: PDL (4608 x 36864, 16 tokens, 108 CTAs) */
    CHECK(plan(1, 4608, 16, 36864, 132, 1, 0, 1).pdl == 1);
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
    CHECK(tern_wg_variant(1000) && tern_wg_forced_kw(1000) == 2 && tern_wg_forced_ks(1000) == 0);
    CHECK(tern_wg_forced_ks(1004) == 4 && tern_wg_forced_kw(1004) == 2 && tern_wg_forced_ks(1164) == 64);
    CHECK(tern_wg_forced_kw(1164) == 2 && !tern_wg_variant(1165) && !tern_wg_forced_kw(1165));
    CHECK(!tern_wg_forced_kw(0) && !tern_wg_forced_kw(864) && !tern_wg_variant(999) && !tern_wg_variant(1065));
    CHECK(tern_wg_forced_ks(31000) == 0 && !tern_wg_variant(51100)); /* the GEMVs' knobs */
    CHECK(tern_wg_variant(900) && tern_wg_direct_y(900) && tern_wg_forced_ks(900) == 0 &&
          !tern_wg_forced_one_a(900));
    CHECK(!tern_wg_direct_y(0) && !tern_wg_direct_y(899) && !tern_wg_direct_y(901));
    /* 901: no last wave split; 902 .. 908: forced 2 .. 8 ways */
    CHECK(tern_wg_variant(901) && tern_wg_no_last_split(901) && !tern_wg_no_last_split(900) &&
          !tern_wg_no_last_split(0) && tern_wg_forced_last_split(901) == 0);
    CHECK(tern_wg_forced_last_split(902) == 2 && tern_wg_forced_last_split(908) == 8 &&
          tern_wg_variant(908) && tern_wg_forced_last_split(909) == 0 &&
          tern_wg_forced_last_split(0) == 0 && tern_wg_forced_ks(905) == 0);
    /* 909: no multicast */
    CHECK(tern_wg_variant(909) && tern_wg_no_multicast(909) && !tern_wg_no_multicast(0) &&
          !tern_wg_no_multicast(908) && !tern_wg_variant(910) && tern_wg_forced_ks(909) == 0 &&
          !tern_wg_no_last_split(909) && !tern_wg_direct_y(909));
}

TEST(wg_plan_multicast_pairs) {
    /* the producer kernel, bf16, 256-token tiles, several token tiles, every count even: on */
    CHECK(tern_wg_multicast(1, 0, 256, 112, 8, 896, 0, 0)); /* 14336 rows, 8 token tiles, no split */
    CHECK(tern_wg_multicast(1, 0, 256, 36, 8, 264, 24, 0)); /* 4608 rows: a last wave of split tiles */
    CHECK(tern_wg_multicast(1, 0, 256, 66, 2, 0, 132, 0));  /* every tile split */
    /* off: the plain kernel, int8, smaller tiles, one token tile, an odd count anywhere, the knob */
    CHECK(!tern_wg_multicast(0, 0, 256, 112, 8, 896, 0, 0));
    CHECK(!tern_wg_multicast(1, 1, 256, 112, 8, 896, 0, 0));
    CHECK(!tern_wg_multicast(1, 0, 128, 112, 8, 896, 0, 0));
    CHECK(!tern_wg_multicast(1, 0, 256, 288, 1, 288, 0, 0));
    CHECK(!tern_wg_multicast(1, 0, 256, 67, 2, 134, 0, 0)); /* a pair would span two token tiles */
    CHECK(!tern_wg_multicast(1, 0, 256, 138, 2, 269, 7, 0));
    CHECK(!tern_wg_multicast(1, 0, 256, 138, 2, 270, 6, 909));
    CHECK(tern_wg_multicast(1, 0, 256, 138, 2, 270, 6, 0));
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
        const int64_t rows = 1 + rand() % 40000, cols = 1 + rand() % 40000;
        const int64_t n = it & 1 ? 1 + rand() % 16 : 1 + rand() % 3000; /* half of them <= 16 tokens */
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
        /* the KW kernel: int8, 16 tokens (two sets) or 8 in kw8's range (one set), one wave */
        CHECK_MSG(p.kw == 1 || (i8 && p.kw == 2 && p.gx * p.gy * p.ks <= n_sm &&
                                ((p.nt == 16 && p.one_a == 0) ||
                                 (p.nt == 8 && p.one_a == 1 && tern_wg_kw8(rows, cols, n_sm)))),
                  "kw %d nt %d one_a %d tiles %lld ks %lld on %d SMs", p.kw, p.nt, p.one_a,
                  (long long)(p.gx * p.gy), (long long)p.ks, n_sm);
        /* full: every tile when unsplit, none for a uniform split, else the
         * whole waves (the producer kernel only) */
        const int64_t tiles = p.gx * p.gy, slots = (int64_t)n_sm * per_sm;
        if (p.ks == 1) CHECK(p.full == tiles);
        else
            CHECK_MSG(p.full == 0 || (p.pw && p.full > 0 && p.full % slots == 0 && tiles - p.full < slots &&
                                      p.ks <= 8 && kt / p.ks >= 8),
                      "tiles %lld full %lld ks %lld slots %lld", (long long)tiles, (long long)p.full,
                      (long long)p.ks, (long long)slots);
    }
}
