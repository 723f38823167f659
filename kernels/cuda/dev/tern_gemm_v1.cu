/* dev/tern_gemm_v1.cu — v1 prefill GEMM (kept for reference; superseded by tern_mm.cuh).
 * Compile: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -std=c++17 -Isrc -Ikernels -I. -c kernels/cuda/dev/tern_gemm_v1.cu
 * Note: 2x4 warps of 64 rows x 32 tokens: each code is decoded by the 4 warps that share its rows, so
 * the integer pipe (LOP3/SHF/PRMT) limits it: H200 M=2048 ~250 TFLOP/s bf16 (0.31x cuBLAS), ~390 int8. */
/* tern_gemm.cu — ternary prefill GEMM on the tensor cores (mma.sync):
 * y (n, rows) = x (n, cols) @ W^T for large n, activations bf16 (A16, one
 * m16n8k16 term), f32 (three bf16 planes, tern_mma.cuh) or int8 (A8,
 * m16n8k32 s8 with exact s32 sums).
 *
 * Tiling.  A CTA of 8 warps computes BM = 128 weight rows x BN tokens (128,
 * or 64 for small n and for per-group scales, which need a second set of
 * accumulators).  The K loop walks the 256-column blocks; each stage holds
 * the codes of the block for BM rows (BM x 64 B, rows padded to 96 B) and
 * the activations of the block for BN tokens (rows padded by 64 B / 32 B so
 * the fragment loads are bank-conflict free), brought in with cp.async
 * (16 B, zero-filled past n / rows / cols) STAGES deep.  Each warp decodes
 * its rows' codes once per block into A fragments and reuses them across its
 * WN token tiles; the k order inside an MMA is the one of tern_mma.cuh, so
 * the B fragments are plain 16- / 8-byte shared loads.
 *
 * Scales: one group per row -> y = s_r * acc at the end; smaller groups ->
 * O += s_g * acc_g at every group end, in column order, with _rn intrinsics
 * so that the int8 path is bit-identical to tern_matmul_i8_ref.
 *
 * Requires x rows 16-byte aligned with cols a multiple of 8 (bf16) or 16
 * (int8); tern_cuda.cu pads other activations into a workspace first. */
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/cuda_util.h"
#include "cuda/tern_cuda.h"
#include "cuda/tern_mma.cuh"

namespace {

constexpr int A_STRIDE = 96; /* bytes per code row in shared memory (64 + pad) */

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <int ACT, int WM, int WN, int WARPS_M, int WARPS_N, int STAGES, int GU>
struct GemmCfg {
    static constexpr bool I8 = ACT == TACT_I8;
    static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr int BM = 16 * WM * WARPS_M, BN = 8 * WN * WARPS_N;
    static constexpr int X_STRIDE = I8 ? 256 + 32 : 512 + 64; /* bytes per token row */
    static constexpr int A_BYTES = BM * A_STRIDE, X_BYTES = BN * X_STRIDE;
    static constexpr int STAGE_BYTES = A_BYTES + X_BYTES;
    static constexpr int SMEM = STAGES * STAGE_BYTES;
    using Acc = typename std::conditional<I8, int, float>::type;
};

template <int ACT, int WM, int WN, int WARPS_M, int WARPS_N, int STAGES, int GU>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, 1)
    tern_gemm_kernel(const TernKArgs a) {
    using Cfg = GemmCfg<ACT, WM, WN, WARPS_M, WARPS_N, STAGES, GU>;
    using Acc = typename Cfg::Acc;
    constexpr bool I8 = Cfg::I8;
    extern __shared__ __align__(128) uint8_t smem[];

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int64_t row0 = (int64_t)blockIdx.x * Cfg::BM;
    const int64_t tok0 = (int64_t)blockIdx.y * Cfg::BN;
    const int64_t KT = (int64_t)a.planes * a.kblocks;
    const int esz = I8 ? 1 : 2;

    auto load_stage = [&](int64_t kt, int slot) {
        const int64_t plane = kt / a.kblocks, kb = kt % a.kblocks;
        uint8_t *sA = smem + slot * Cfg::STAGE_BYTES;
        uint8_t *sX = sA + Cfg::A_BYTES;
        for (int i = threadIdx.x; i < Cfg::BM * 4; i += Cfg::THREADS) {
            const int rl = i >> 2, ch = i & 3;
            const int64_t row = row0 + rl;
            const bool ok = row < a.rows;
            const uint8_t *src = ok ? a.codes + row * a.row_bytes + kb * 64 + ch * 16 : a.codes;
            cp_async16(sA + rl * A_STRIDE + ch * 16, src, ok);
        }
        constexpr int CH = I8 ? 16 : 32; /* 16-byte chunks per token row of a block */
        const uint8_t *xb = static_cast<const uint8_t *>(a.x) + plane * a.plane_stride * esz;
        for (int i = threadIdx.x; i < Cfg::BN * CH; i += Cfg::THREADS) {
            const int tl = i / CH, ch = i % CH;
            const int64_t tok = tok0 + tl;
            const int64_t col = kb * 256 + ch * (16 / esz);
            const bool ok = tok < a.n && col < a.cols;
            const uint8_t *src = ok ? xb + (tok * a.ldx + col) * esz : xb;
            cp_async16(sX + tl * Cfg::X_STRIDE + ch * 16, src, ok);
        }
    };

    Acc C[WM][WN][4];
    float O[WM][WN][GU ? 4 : 1];
#pragma unroll
    for (int mt = 0; mt < WM; mt++)
#pragma unroll
        for (int nt = 0; nt < WN; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                C[mt][nt][i] = 0;
                if constexpr (GU > 0) O[mt][nt][i] = 0.0f;
            }

    /* rows of this thread, clamped for scale reads */
    int64_t rs[WM][2];
#pragma unroll
    for (int mt = 0; mt < WM; mt++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            int64_t r = row0 + wm * 16 * WM + 16 * mt + g + 8 * hh;
            rs[mt][hh] = r < a.rows ? r : a.rows - 1;
        }

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < KT) load_stage(s, s);
        cp_async_commit();
    }

    for (int64_t kt = 0; kt < KT; kt++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        {
            const int64_t nk = kt + STAGES - 1;
            if (nk < KT) load_stage(nk, (int)(nk % STAGES));
            cp_async_commit();
        }
        const int slot = (int)(kt % STAGES);
        const uint8_t *sA = smem + slot * Cfg::STAGE_BYTES;
        const uint8_t *sX = sA + Cfg::A_BYTES;
        const int64_t kb = kt % a.kblocks;

        /* this warp's code words: w[mt][rowhalf*4 + h*2 + j] */
        uint32_t w[WM][8];
#pragma unroll
        for (int mt = 0; mt < WM; mt++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int rl = wm * 16 * WM + 16 * mt + g + 8 * hh;
                    uint2 v = *reinterpret_cast<const uint2 *>(sA + rl * A_STRIDE + 32 * h + 8 * t);
                    w[mt][hh * 4 + h * 2] = v.x;
                    w[mt][hh * 4 + h * 2 + 1] = v.y;
                }

        auto field = [&](auto Fc) {
            constexpr int F = decltype(Fc)::value;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                if constexpr (I8) {
                    uint32_t b[WN][2];
#pragma unroll
                    for (int nt = 0; nt < WN; nt++) {
                        const int tl = wn * 8 * WN + 8 * nt + g;
                        uint2 v = *reinterpret_cast<const uint2 *>(sX + tl * Cfg::X_STRIDE + 64 * F +
                                                                   32 * h + 8 * t);
                        b[nt][0] = v.x, b[nt][1] = v.y;
                    }
#pragma unroll
                    for (int mt = 0; mt < WM; mt++) {
                        uint32_t A[4] = {tern_dec_i8<F>(w[mt][h * 2]), tern_dec_i8<F>(w[mt][4 + h * 2]),
                                         tern_dec_i8<F>(w[mt][h * 2 + 1]),
                                         tern_dec_i8<F>(w[mt][4 + h * 2 + 1])};
#pragma unroll
                        for (int nt = 0; nt < WN; nt++) mma_s8_16832(C[mt][nt], A, b[nt][0], b[nt][1]);
                    }
                } else {
                    uint32_t b[WN][2][2];
#pragma unroll
                    for (int nt = 0; nt < WN; nt++) {
                        const int tl = wn * 8 * WN + 8 * nt + g;
                        uint4 v = *reinterpret_cast<const uint4 *>(sX + tl * Cfg::X_STRIDE +
                                                                   2 * (64 * F + 32 * h + 8 * t));
                        b[nt][0][0] = pair_even(v.x, v.y), b[nt][0][1] = pair_even(v.z, v.w);
                        b[nt][1][0] = pair_odd(v.x, v.y), b[nt][1][1] = pair_odd(v.z, v.w);
                    }
#pragma unroll
                    for (int p = 0; p < 2; p++)
#pragma unroll
                        for (int mt = 0; mt < WM; mt++) {
                            const uint32_t s0 = p ? w[mt][h * 2] >> 8 : w[mt][h * 2];
                            const uint32_t s1 = p ? w[mt][4 + h * 2] >> 8 : w[mt][4 + h * 2];
                            const uint32_t s2 = p ? w[mt][h * 2 + 1] >> 8 : w[mt][h * 2 + 1];
                            const uint32_t s3 = p ? w[mt][4 + h * 2 + 1] >> 8 : w[mt][4 + h * 2 + 1];
                            uint32_t A[4] = {tern_dec_bf16<F>(s0), tern_dec_bf16<F>(s1),
                                             tern_dec_bf16<F>(s2), tern_dec_bf16<F>(s3)};
#pragma unroll
                            for (int nt = 0; nt < WN; nt++)
                                mma_bf16_16816(C[mt][nt], A, b[nt][p][0], b[nt][p][1]);
                        }
                }
                if constexpr (GU > 0) {
                    if ((2 * F + h + 1) % GU == 0) {
                        const int64_t gi = (kb * 8 + 2 * F + h) / GU;
#pragma unroll
                        for (int mt = 0; mt < WM; mt++) {
                            const float slo = __ldg(a.scales + rs[mt][0] * a.scale_stride + gi);
                            const float shi = __ldg(a.scales + rs[mt][1] * a.scale_stride + gi);
#pragma unroll
                            for (int nt = 0; nt < WN; nt++)
#pragma unroll
                                for (int i = 0; i < 4; i++) {
                                    O[mt][nt][i] = __fadd_rn(
                                        O[mt][nt][i], __fmul_rn(i < 2 ? slo : shi, (float)C[mt][nt][i]));
                                    C[mt][nt][i] = 0;
                                }
                        }
                    }
                }
            }
        };
        field(std::integral_constant<int, 0>());
        field(std::integral_constant<int, 1>());
        field(std::integral_constant<int, 2>());
        field(std::integral_constant<int, 3>());
    }
    cp_async_wait<0>();

    /* epilogue: element i of a fragment is row g + 8*(i>>1), token 2t + (i&1) */
#pragma unroll
    for (int mt = 0; mt < WM; mt++)
#pragma unroll
        for (int nt = 0; nt < WN; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int64_t row = row0 + wm * 16 * WM + 16 * mt + g + 8 * (i >> 1);
                const int64_t tok = tok0 + wn * 8 * WN + 8 * nt + 2 * t + (i & 1);
                if (row >= a.rows || tok >= a.n) continue;
                float v;
                if constexpr (GU == 0) {
                    const float s = a.scales[row * a.scale_stride];
                    if constexpr (I8) v = __fdiv_rn(__fmul_rn(s, (float)C[mt][nt][i]), a.sx[tok]);
                    else v = s * C[mt][nt][i];
                } else {
                    v = I8 ? __fdiv_rn(O[mt][nt][i], a.sx[tok]) : O[mt][nt][i];
                }
                a.y[tok * a.rows + row] = v;
            }
}

template <int ACT, int WM, int WN, int WARPS_M, int WARPS_N, int STAGES, int GU>
int launch_cfg(const TernKArgs *a, cudaStream_t s) {
    using Cfg = GemmCfg<ACT, WM, WN, WARPS_M, WARPS_N, STAGES, GU>;
    auto kern = tern_gemm_kernel<ACT, WM, WN, WARPS_M, WARPS_N, STAGES, GU>;
    static bool attr_set = false; /* per instantiation; the attribute is per function */
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::SMEM));
        attr_set = true;
    }
    const int64_t gx = (a->rows + Cfg::BM - 1) / Cfg::BM, gy = (a->n + Cfg::BN - 1) / Cfg::BN;
    if (gx > 0x7fffffff || gy > 65535)
        return err_set("tern_gemm: %lld rows x %lld tokens is too large for one launch (grid %lld x "
                       "%lld); split the tokens",
                       (long long)a->rows, (long long)a->n, (long long)gx, (long long)gy);
    kern<<<dim3((unsigned)gx, (unsigned)gy), Cfg::THREADS, Cfg::SMEM, s>>>(*a);
    CUDA_CHECK_LAUNCH("tern_gemm_kernel");
    return 0;
}

template <int ACT, int GU>
int launch_small(const TernKArgs *a, cudaStream_t s) {
    /* 128 rows x 64 tokens */
    return launch_cfg<ACT, 2, 4, 4, 2, ACT == TACT_I8 ? 4 : 3, GU>(a, s);
}

template <int ACT>
int launch_act(const TernKArgs *a, cudaStream_t s) {
    switch (a->gu) {
    case 0:
        if (a->n > 64) return launch_cfg<ACT, 4, 4, 2, 4, ACT == TACT_I8 ? 3 : 2, 0>(a, s);
        return launch_small<ACT, 0>(a, s);
    case 1: return launch_small<ACT, 1>(a, s);
    case 2: return launch_small<ACT, 2>(a, s);
    case 4: return launch_small<ACT, 4>(a, s);
    case 8: return launch_small<ACT, 8>(a, s);
    default: return err_set("tern_gemm: unsupported group unit %d", a->gu);
    }
}

} // namespace

/* act: TACT_BF16 (planes >= 1 bf16 planes; f32 arrives as 3 planes) or TACT_I8. */
int tern_gemm_v1_launch(int act, const TernKArgs *a, cudaStream_t s) {
    if (a->n < 1) return err_set("tern_gemm: n = %lld", (long long)a->n);
    if (!a->x_vec)
        return err_set("tern_gemm: activations must be 16-byte aligned rows with cols a multiple of "
                       "%d (internal: pad them first)",
                       act == TACT_I8 ? 16 : 8);
    switch (act) {
    case TACT_BF16: return launch_act<TACT_BF16>(a, s);
    case TACT_I8: return launch_act<TACT_I8>(a, s);
    default: return err_set("tern_gemm: activation type %d has no GEMM (f32 goes as bf16 planes)", act);
    }
}
