/* tern_wg_plan.h — the host-side choices of the wgmma GEMM
 * (tern_gemm_wg.cu): the token tile, one or two A register sets, the
 * producer warpgroup, the K split, the programmatic dependent launch and
 * the staged epilogue.  Plain C with no CUDA, so
 * that the rules, each taken from a measurement (kernels/cuda/dev/NOTES.md),
 * are tested without a GPU (tests/test_wg_plan.c). */
#ifndef TL_TERN_WG_PLAN_H
#define TL_TERN_WG_PLAN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    TERN_WG_ROWS = 128,  /* weight rows per CTA: 2 warpgroups x 64 */
    TERN_WG_PW_NT = 64,  /* tiles of this many tokens and more: the kernel with a producer
                          * warpgroup (one CTA per SM; the smaller tiles keep 2 - 3) */
    TERN_WG_STAGED_NT = 64, /* ... and more: the staged epilogue is compiled in (below, the
                             * registers it costs take CTAs per SM) */
    /* the cost of splitting a tile's K k ways, in stages beyond its share
     * of K: TERN_WG_SPLIT_FIXED + TERN_WG_SPLIT_STAGES x k (the partials and
     * the last CTA's reduction; tern_wg_plan.c) */
    TERN_WG_SPLIT_FIXED = 30,
    TERN_WG_SPLIT_STAGES = 8,
    /* the KW kernel's: a split costs as much as this many more columns in
     * each CTA's share of K (tern_wg_kw_splits) */
    TERN_WG_KW_SPLIT_COLS = 3584
};

typedef struct {
    int nt;         /* tokens per CTA, the wgmma N: 8, 16, 32, 64, 128 or 256 */
    int one_a;      /* 1: the kernel with one A register set (int8, 8 / 16 tokens) */
    int kw;         /* warpgroup pairs on a tile's K (int8, 8 / 16 tokens; 1: one pair) */
    int pw;         /* 1: the kernel with a producer warpgroup (nt >= TERN_WG_PW_NT) */
    int64_t gx, gy; /* row tiles, token tiles */
    int64_t ks;     /* K split of the tiles from `full` on (1: none) */
    int64_t full;   /* tiles (in grid order) run unsplit: gx * gy when ks = 1, 0 for a uniform
                     * split, else the whole waves before a split last wave */
    int pdl;        /* 1: launched as a programmatic dependent */
    int staged_y;   /* 1: y staged in shared memory and stored by the copy engine */
} TernWgPlan;

/* How many ways K is split for a grid of `tiles` CTAs of nt tokens: kt
 * stages of K in all (int8: one per 64-byte code block; bf16: two), per_sm
 * resident CTAs per SM of the kernel, n_sm SMs.  1 .. min(kt / 4, 64). */
int64_t tern_wg_splits(int i8, int nt, int64_t tiles, int64_t kt, int64_t cols, int n_sm,
                       int per_sm);

/* The K split of the KW kernel (two warpgroup pairs on K, one CTA per SM)
 * for a grid of `tiles`: 1 .. min(n_sm / tiles, kt / 4, 64). */
int64_t tern_wg_kw_splits(int64_t tiles, int64_t cols, int64_t kt, int n_sm);

/* 1: int8 8-token tiles of a rows x cols matrix go to the KW kernel with
 * one A set (3 x 2^24 .. 2^27 weights, row tiles in one wave of n_sm) —
 * and not to the multi-token GEMV, whose range it overlaps. */
int tern_wg_kw8(int64_t rows, int64_t cols, int n_sm);

/* The tile for n >= 1 tokens of a rows x cols matrix with kt int8 stages
 * (code blocks) on n_sm SMs: sets nt, one_a, kw, pw, gx, gy (ks = 1, pdl =
 * 0, staged_y = 0).  variant: the bench knobs (tern_cuda_decode_variant;
 * 0 for the rules) — 8KK the one-set kernel for 16 tokens too, 10KK / 11KK
 * two warpgroup pairs on K with one / two A register sets. */
void tern_wg_tile(int i8, int64_t rows, int64_t n, int64_t cols, int64_t kt, int n_sm,
                  int variant, TernWgPlan *p);

/* The grid of a tile chosen by tern_wg_tile: ks and full (tern_wg_kw_splits
 * for the KW kernel — the knobs 1000 / 1100 too —, else tern_wg_splits,
 * or the whole waves unsplit and the last one's tiles split where that is
 * cheaper; the bench knobs of `variant`: 7KK / 8KK / 10KK / 11KK a uniform
 * split KK ways, at most kt; 901 no last wave split, 902..908 that split 2..8 ways where
 * there is one) and pdl (only when pdl_on); kt stages of K for this
 * activation type, per_sm resident CTAs per SM of the chosen kernel. */
void tern_wg_grid(int i8, int64_t cols, int64_t kt, int n_sm, int per_sm, int variant, int pdl_on,
                  TernWgPlan *p);

/* The epilogue of a planned grid (after tern_wg_grid): staged_y where a
 * tensor map can describe y — tiles of >= TERN_WG_STAGED_NT tokens, some
 * tiles without a K split (the only ones that use it), rows a multiple of
 * 4 (16-byte row stride), rows and n within int32, y 16-byte aligned
 * (y_aligned16) — unless the bench knob `variant` asks for direct stores
 * (tern_wg_direct_y). */
void tern_wg_epilogue(int64_t rows, int64_t n, int y_aligned16, int variant, TernWgPlan *p);

/* The bench knobs of tern_cuda_decode_variant that belong to this GEMM:
 * 7KK (701 .. 764) splits K into KK parts, 8KK (801 .. 864) the same with
 * the one-set kernel for 16 tokens, 800 that kernel with its own split,
 * 10KK / 11KK (1000 .. 1064 / 1100 .. 1164) int8 tiles of <= 16 tokens on
 * two warpgroup pairs that share K (one / two A register sets; KK the
 * split, 00 the rule's; tern_wg_forced_kw), 900
 * the epilogue's direct stores instead of the staged copy-engine store, 901
 * no last wave split, 902 .. 908 the last wave split 2 .. 8 ways (at most
 * as many as fit), 909 no multicast of the activations (tern_wg_multicast).
 * tern_wg_variant: v in 701 .. 864 or 900 .. 909 (the other kernels run as
 * with 0); tern_wg_forced_ks: the split forced (0: none);
 * tern_wg_forced_one_a; tern_wg_direct_y; tern_wg_no_last_split;
 * tern_wg_forced_last_split (0: none); tern_wg_no_multicast. */
int tern_wg_variant(int v);
int64_t tern_wg_forced_ks(int v);
int tern_wg_forced_one_a(int v);
int tern_wg_forced_kw(int v);
int tern_wg_direct_y(int v);
int tern_wg_no_last_split(int v);
int64_t tern_wg_forced_last_split(int v);
int tern_wg_no_multicast(int v);

/* 1: the producer kernel (pw) runs in clusters of 2 CTAs that share each
 * stage's activations (one copies each half into both: half the L2 reads) —
 * bf16 activations (not i8), 256-token tiles (nt), more than one token tile
 * (gy), and every pair of its flat grid on one token tile and K range: gx
 * (row tiles), `full` (unsplit tiles) and `tail` (split tiles) even; not
 * under the knob 909. */
int tern_wg_multicast(int pw, int i8, int nt, int64_t gx, int64_t gy, int64_t full, int64_t tail, int variant);

#ifdef __cplusplus
}
#endif

#endif
