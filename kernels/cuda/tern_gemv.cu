/* tern_gemv.cu — the decode GEMV (n <= 16 tokens, except int8 activations
 * with one scale per row: the dp4a GEMVs at one token, the wgmma GEMM's
 * 8- / 16-token tiles from two; tern_cuda.cu run()): the v2 kernel of
 * tern_mm.cuh with 4 warps x 32 rows (BM = 128), one or two 8-token tiles,
 * 4 cp.async stages (68 / 86 KB shared memory: 3 / 2 CTAs per SM) and split-K until
 * the grid is ~4 CTAs per SM: the whole packed matrix is requested at once,
 * which is what streaming it near HBM bandwidth takes.
 *
 * Versions: dev/tern_gemv_v1.cu (warps split K; registers prefetch; B from
 * L2 per block: latency-bound, 31-45% of copy bandwidth at M = 1). */
#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_util.h"
#include "cuda/tern_mm.cuh"
#include "cuda/tern_wg_plan.h"

extern "C" int tern_cuda_decode_variant(int v);
extern "C" int tern_cuda_decode_variant_get(void);

namespace {

int g_variant = 0; /* tern_cuda_decode_variant (bench / development only) */

/* KBS blocks per stage, ST stages; NOCOMP: the no-math diagnostic twin
 * (the variants other than 0: tern_gemv_own_variant). */
template <int ACT, int WN, int GU>
int by_variant(const TernKArgs *a, cudaStream_t s) {
    using namespace tern_mm;
    if (g_variant == 0 || tern_wg_variant(g_variant)) /* 7KK / 8KK: the wgmma GEMM's */
        return launch<ACT, 4, 2, WN, 4, GU, 1>(a, s, 1);
    /* measured alternatives (H200, 2026-11-29; none beat variant 0):
     * 2 = 4 blocks (256 B per row) per stage; 20 = stream-K persistent grid
     * (8 warps, 2 blocks per stage); 10 = variant 0 without the math */
    if constexpr (GU == 0) {
        switch (g_variant) {
        case 2: return launch<ACT, 4, 2, WN, 3, GU, 4>(a, s, 1);
        case 20: return launch_sk<ACT, 8, 2, WN, WN == 1 ? 4 : 3, GU, 2>(a, s);
        }
        if constexpr (ACT == TACT_BF16 && WN == 1)
            if (g_variant == 10) return launch<ACT, 4, 2, WN, 4, GU, 1, true>(a, s, 1);
    }
    return err_set("tern_gemv: unknown decode variant %d", g_variant);
}

template <int ACT, int WN>
int by_group(const TernKArgs *a, cudaStream_t s) {
    switch (a->gu) {
    case 0: return by_variant<ACT, WN, 0>(a, s);
    case 1: return by_variant<ACT, WN, 1>(a, s);
    case 2: return by_variant<ACT, WN, 2>(a, s);
    case 4: return by_variant<ACT, WN, 4>(a, s);
    case 8: return by_variant<ACT, WN, 8>(a, s);
    default: return err_set("tern_gemv: unsupported group unit %d", a->gu);
    }
}

} // namespace

/* TERNLAB_CUDA_DECODE=v picks a variant for a whole process (tests). */
__attribute__((constructor)) static void decode_variant_from_env(void) {
    const char *e = getenv("TERNLAB_CUDA_DECODE");
    if (e && *e) g_variant = atoi(e);
}

int tern_cuda_decode_variant_get(void) { return g_variant; }

bool tern_gemv_own_variant(int v) { return v == 2 || v == 20 || v == 10; }


int tern_cuda_decode_variant(int v) {
    int old = g_variant;
    g_variant = v;
    return old;
}

/* act: TACT_BF16 (bf16 planes; f32 arrives as 3 planes) or TACT_I8; n <= 16. */
int tern_gemv_launch(int act, const TernKArgs *a, cudaStream_t s) {
    if (a->n < 1 || a->n > 16) return err_set("tern_gemv: n = %lld outside 1..16", (long long)a->n);
    if (!a->x_vec)
        return err_set("tern_gemv: activations must be 16-byte aligned rows (internal: pad first)");
    TernKArgs b = *a;
    /* all n tokens in one tile: with one plane each code is read once (l2ef -1: the caller
     * runs more chunks of tokens over the same codes) */
    b.l2ef = b.l2ef >= 0 && tern_cuda_l2ef_get() && b.planes <= 1;
    a = &b;
    switch (act) {
    case TACT_BF16: return a->n <= 8 ? by_group<TACT_BF16, 1>(a, s) : by_group<TACT_BF16, 2>(a, s);
    case TACT_I8: return a->n <= 8 ? by_group<TACT_I8, 1>(a, s) : by_group<TACT_I8, 2>(a, s);
    default: return err_set("tern_gemv: activation type %d (f32 goes as bf16 planes)", act);
    }
}
