/* tern_gemm.cu — the mma.sync GEMM (n > 16 tokens with grouped scales, or
 * forced 2; one scale per row goes to the wgmma GEMM, tern_gemm_wg.cu, which
 * was 1.8-2.3x faster at M = 2048 on the bench shapes): the v2 kernel of
 * tern_mm.cuh.  n > 64 with one scale per row: 8 warps x 32 rows (BM = 256)
 * x 128 tokens, 2 (bf16) / 3 (int8) cp.async stages, one CTA per SM; each
 * decoded A fragment feeds 16 MMAs.  n <= 64: 4 warps x 32 rows x 64 tokens;
 * per-group scales (a second accumulator set): 4 warps x 32 rows x 32 tokens.  Small grids are
 * split along K (deterministic, tern_mm.cuh).
 *
 * Versions: dev/tern_gemm_v1.cu (2x4 warps; every code decoded by 4 warps:
 * integer-pipe bound, 0.31x cuBLAS bf16 at M = 2048). */
#include <cuda_runtime.h>

#include "cuda/cuda_util.h"
#include "cuda/tern_mm.cuh"

namespace {

template <int ACT>
int by_group(const TernKArgs *a, cudaStream_t s) {
    using namespace tern_mm;
    constexpr int ST_BIG = ACT == TACT_I8 ? 3 : 2;
    switch (a->gu) {
    case 0:
        if (a->n > 64) return launch<ACT, 8, 2, 16, ST_BIG, 0>(a, s, 1);
        return launch<ACT, 4, 2, 8, 3, 0>(a, s, 1);
    case 1: return launch<ACT, 4, 2, 4, 3, 1>(a, s, 1);
    case 2: return launch<ACT, 4, 2, 4, 3, 2>(a, s, 1);
    case 4: return launch<ACT, 4, 2, 4, 3, 4>(a, s, 1);
    case 8: return launch<ACT, 4, 2, 4, 3, 8>(a, s, 1);
    default: return err_set("tern_gemm: unsupported group unit %d", a->gu);
    }
}

} // namespace

/* act: TACT_BF16 (planes >= 1; f32 arrives as 3 bf16 planes) or TACT_I8. */
int tern_gemm_launch(int act, const TernKArgs *a, cudaStream_t s) {
    if (a->n < 1) return err_set("tern_gemm: n = %lld", (long long)a->n);
    if (!a->x_vec)
        return err_set("tern_gemm: activations must be 16-byte aligned rows with cols a multiple of "
                       "%d (internal: pad them first)",
                       act == TACT_I8 ? 16 : 8);
    switch (act) {
    case TACT_BF16: return by_group<TACT_BF16>(a, s);
    case TACT_I8: return by_group<TACT_I8>(a, s);
    default: return err_set("tern_gemm: activation type %d has no GEMM (f32 goes as bf16 planes)", act);
    }
}
