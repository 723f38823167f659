/* tern_wg_plan.h — the host-side choices of the wgmma GEMM
 * (tern_gemm_wg.cu): the token tile, one or two A register sets, the K
 * split and the programmatic dependent launch.  Plain C with no CUDA, so
 * that the rules, each taken from a measurement (kernels/cuda/dev/NOTES.md),
 * are tested without a GPU (tests/test_wg_plan.c). */
#ifndef TL_TERN_WG_PLAN_H
#define TL_TERN_WG_PLAN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { TERN_WG_ROWS = 128 }; /* weight rows per CTA: 2 warpgroups x 64 */

typedef struct {
    int nt;         /* tokens per CTA, the wgmma N: 8, 16, 32, 64, 128 or 256 */
    int one_a;      /* 1: the kernel with one A register set (int8, 8 / 16 tokens) */
    int64_t gx, gy; /* row tiles, token tiles */
    int64_t ks;     /* K split (1: none) */
    int pdl;        /* 1: launched as a programmatic dependent */
} TernWgPlan;

/* How many ways K is split for a grid of `tiles` CTAs of nt tokens: kt
 * stages of K in all (int8: one per 64-byte code block; bf16: two), per_sm
 * resident CTAs per SM of the kernel, n_sm SMs.  1 .. min(kt / 4, 64). */
int64_t tern_wg_splits(int i8, int nt, int64_t tiles, int64_t kt, int64_t cols, int n_sm,
                       int per_sm);

/* The tile for n >= 1 tokens of a rows x cols matrix with kt int8 stages
 * (code blocks) on n_sm SMs: sets nt, one_a, gx, gy (ks = 1, pdl = 0).
 * force_one_a: the one-set kernel for 16 tokens too (bench knob 8KK). */
void tern_wg_tile(int i8, int64_t rows, int64_t n, int64_t cols, int64_t kt, int n_sm,
                  int force_one_a, TernWgPlan *p);

/* The grid of a tile chosen by tern_wg_tile: ks (forced_ks > 0: that, at
 * most kt) and pdl (only when pdl_on); kt stages of K for this activation
 * type, per_sm resident CTAs per SM of the chosen kernel. */
void tern_wg_grid(int i8, int64_t cols, int64_t kt, int n_sm, int per_sm, int64_t forced_ks,
                  int pdl_on, TernWgPlan *p);

/* The bench knobs of tern_cuda_decode_variant that belong to this GEMM:
 * 7KK (701 .. 764) splits K into KK parts, 8KK (801 .. 864) the same with
 * the one-set kernel for 16 tokens, 800 that kernel with its own split, 900
 * the epilogue's direct stores instead of the staged copy-engine store.
 * tern_wg_variant: v in 701 .. 864 or 900 (the other kernels run as with
 * 0); tern_wg_forced_ks: the split forced (0: none); tern_wg_forced_one_a;
 * tern_wg_direct_y. */
int tern_wg_variant(int v);
int64_t tern_wg_forced_ks(int v);
int tern_wg_forced_one_a(int v);
int tern_wg_direct_y(int v);

#ifdef __cplusplus
}
#endif

#endif
