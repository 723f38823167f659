/* tern_mm.cuh — the ternary matmul kernel (v2) shared by the decode GEMV
 * launcher (tern_gemv.cu, n <= 16) and the prefill GEMM launcher
 * (tern_gemm.cu): y (n, rows) = x (n, cols) @ W^T on the tensor cores, codes
 * decoded in registers (tern_mma.cuh gives the k order and the decoding).
 *
 * CTA = WARPS warps; warp w owns rows [16*WM*w, 16*WM*(w+1)) of the CTA's
 * BM = 16*WM*WARPS rows and all BN = 8*WN tokens, so every code is decoded
 * exactly once per CTA and its A fragment feeds WN MMAs.  blockIdx.z is a
 * slice of the K loop (split-K, for grids that would not fill the GPU).
 *
 * Pipeline: per 256-column block a stage holds the codes (BM x 64 B, rows
 * padded to 96 B) and the activations (BN tokens x one block, padded rows),
 * copied with cp.async (16 B, zero-filled past n / rows / cols), STAGES deep:
 * the loads of STAGES-1 blocks are in flight while one is computed, which is
 * what a memory-bound decode needs (v1 kept 2 KB per warp in registers).
 *
 * Split-K reduction is deterministic: each CTA writes its partial to the
 * workspace, the last CTA of a tile (atomic counter) adds the partials in
 * split order, writes y and resets the counter (graph-replay safe).  int8
 * with one scale per row reduces exact integers. */
#ifndef TL_TERN_MM_CUH
#define TL_TERN_MM_CUH

#include <type_traits>

#include "cuda/tern_mbar.cuh"
#include "cuda/tern_mma.cuh"

namespace tern_mm {


__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
/* cp_async16, with the L2 eviction policy `policy` where hint
 * (tern_mbar::evict_first_policy) */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid, bool hint, uint64_t policy) {
    if (!hint) return cp_async16(smem, gmem, valid);
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(s), "l"(gmem), "r"(n),
                 "l"(policy));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* p / s rounded to nearest, bit for bit __fdiv_rn(p, s), from r = __frcp_rn(s)
 * taken once per token: without div.rn's range check and slow path, which in
 * an epilogue of 128 quotients per thread cost the int8 GEMM 15-20 % at
 * M = 2048 (H200).  q0 = RN(p r) is within 1.5 ulp of p / s; a correction
 * with the exact remainder p - s q0 (fma) makes it faithful, a second one
 * correctly rounded (Markstein: r within half an ulp of 1 / s, q within one
 * ulp of p / s).  Zero p gives p r, the signed zero __fdiv_rn gives.  Valid
 * while nothing under- or overflows: callers take it only where
 * div_scale_ok() holds for s and for the s_row of p = s_row * (a sum of
 * magnitude < 2^31), i.e. p = 0 or |p| in [2^-32, 2^63], |s| in [2^-32, 2^32]:
 * quotients >= 2^-64, remainders >= 2^-78, corrections >= 2^-110, all normal. */
__device__ __forceinline__ float div_rn_by(float p, float s, float r) {
    float q = __fmul_rn(p, r);
    float e = __fmaf_rn(-s, q, p);
    const float q1 = __fmaf_rn(e, r, q);
    e = __fmaf_rn(-s, q1, p);
    const float q2 = __fmaf_rn(e, r, q1);
    return p == 0.0f ? q : q2;
}
/* a scale for which div_rn_by is exact: |s| in [2^-32, 2^32] (or 0 where zero
 * is allowed: a row scale of 0 makes p = 0); false for inf and NaN */
__device__ __forceinline__ bool div_scale_ok(float s, bool zero_ok) {
    const float m = fabsf(s);
    return (zero_ok && m == 0.0f) || (m >= 0x1p-32f && m <= 0x1p32f);
}

/* y for one (row, token) from its exact sum v: one scale per row (GU = 0)
 * applies s_row here; grouped scales were applied per group already. */
template <bool I8, int GU, typename Red>
__device__ __forceinline__ float finalize_out(const TernKArgs &a, Red v, int64_t row, int64_t tok) {
    if constexpr (GU == 0) {
        const float s = a.scales[row * a.scale_stride];
        if constexpr (I8) return tern_i8_out(s, (float)v, a.sx[tok]);
        else return s * v;
    } else {
        if constexpr (I8) return __fdiv_rn(v, a.sx[tok]);
        else return v;
    }
}

/* The last CTA of a split-K tile: y = finalize(sum of the ksplit partials)
 * for the TR rows x TT tokens at (row0, tok0), the partials either in the
 * matrix's layout, part[(split * n + tok) * rows + row], or (TILE) the
 * tile's own, part[split * TR * TT + tok_in_tile * TR + row_in_tile] (only
 * the elements inside the matrix written).
 * JB elements per thread at a time, every split's loads of them
 * independent of the sums (one load per split and element in turn was a
 * chain of L2 round trips: 15-100 us at M = 8..256); each element is still
 * summed in split order, so the result does not depend on the schedule. */
template <bool I8, int GU, int THREADS, int TR, int TT, int JM, bool TILE = false, typename Red>
__device__ __forceinline__ void reduce_splits(const TernKArgs &a, const Red *part, int ksplit,
                                              int64_t row0, int64_t tok0) {
    constexpr int PER = TR * TT / THREADS, JB = PER < JM ? PER : JM;
    static_assert(TR * TT % THREADS == 0 && PER % JB == 0, "reduction tiling");
    const int64_t sstride = TILE ? (int64_t)TR * TT : a.n * a.rows;
    for (int j0 = 0; j0 < PER; j0 += JB) {
        Red v[JB];
        int64_t off[JB], src[JB];
#pragma unroll
        for (int j = 0; j < JB; j++) {
            const int e = threadIdx.x + (j0 + j) * THREADS;
            const int64_t row = row0 + e % TR, tok = tok0 + e / TR;
            off[j] = row < a.rows && tok < a.n ? tok * a.rows + row : -1;
            src[j] = off[j] < 0 ? 0 : TILE ? e : off[j]; /* element 0: (row0, tok0), written */
            v[j] = __ldcg(part + src[j]);
        }
#pragma unroll 2
        for (int sp = 1; sp < ksplit; sp++) {
            const Red *ps = part + sp * sstride;
#pragma unroll
            for (int j = 0; j < JB; j++) v[j] += __ldcg(ps + src[j]);
        }
#pragma unroll
        for (int j = 0; j < JB; j++)
            if (off[j] >= 0) {
                const int e = threadIdx.x + (j0 + j) * THREADS;
                a.y[off[j]] = finalize_out<I8, GU>(a, v[j], row0 + e % TR, tok0 + e / TR);
            }
    }
}

/* KBS: 256-column blocks per pipeline stage (longer contiguous reads per row).
 * NOCOMP: a diagnostic twin that moves the same bytes and skips the math. */
template <int ACT, int WARPS, int WM, int WN, int STAGES, int GU, int KBS = 1, bool NOCOMP = false>
struct Cfg {
    static constexpr bool I8 = ACT == TACT_I8;
    static constexpr int THREADS = 32 * WARPS;
    static constexpr int BM = 16 * WM * WARPS, BN = 8 * WN;
    /* row strides in shared memory, padded so fragment loads are conflict free */
    static constexpr int A_STRIDE = KBS * 64 + 32;
    static constexpr int X_STRIDE = I8 ? KBS * 256 + 32 : KBS * 512 + 64;
    static constexpr int A_BYTES = BM * A_STRIDE, X_BYTES = BN * X_STRIDE;
    static constexpr int STAGE_BYTES = A_BYTES + X_BYTES;
    static constexpr int SMEM = STAGES * STAGE_BYTES;
    using Acc = typename std::conditional<I8, int, float>::type;
    /* what partials carry: exact integers for int8 with one group per row */
    using Red = typename std::conditional<I8 && GU == 0, int, float>::type;
};

/* The math of one 256-column block kb for this warp: codes at sA (row
 * stride AS), activations at sX (token stride XS). */
template <int ACT, int WARPS, int WM, int WN, int GU, int AS, int XS, typename Acc>
__device__ __forceinline__ void mm_block(const TernKArgs &a, const uint8_t *sA, const uint8_t *sX,
                                         int64_t kb, Acc (&C)[WM][WN][4],
                                         float (&O)[WM][WN][GU ? 4 : 1], const int64_t (&rs)[WM][2],
                                         int warp, int g, int t) {
    constexpr bool I8 = ACT == TACT_I8;
    constexpr int A_STRIDE = AS, X_STRIDE = XS;
        uint32_t w[WM][8], ws[WM][8]; /* words [rowhalf*4 + h*2 + j]; ws = w >> 8 */
#pragma unroll
        for (int mt = 0; mt < WM; mt++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int rl = warp * 16 * WM + 16 * mt + g + 8 * hh;
                    uint2 v = *reinterpret_cast<const uint2 *>(sA + rl * A_STRIDE + 32 * h + 8 * t);
                    w[mt][hh * 4 + h * 2] = v.x;
                    w[mt][hh * 4 + h * 2 + 1] = v.y;
                }
        if constexpr (!I8) {
#pragma unroll
            for (int mt = 0; mt < WM; mt++)
#pragma unroll
                for (int i = 0; i < 8; i++) ws[mt][i] = w[mt][i] >> 8;
        }

        auto field = [&](auto Fc) {
            constexpr int F = decltype(Fc)::value;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                if constexpr (I8) {
                    uint32_t A[WM][4];
#pragma unroll
                    for (int mt = 0; mt < WM; mt++) {
                        A[mt][0] = tern_dec_i8<F>(w[mt][h * 2]);
                        A[mt][1] = tern_dec_i8<F>(w[mt][4 + h * 2]);
                        A[mt][2] = tern_dec_i8<F>(w[mt][h * 2 + 1]);
                        A[mt][3] = tern_dec_i8<F>(w[mt][4 + h * 2 + 1]);
                    }
#pragma unroll
                    for (int nt = 0; nt < WN; nt++) {
                        const int tl = 8 * nt + g;
                        uint2 v = *reinterpret_cast<const uint2 *>(sX + tl * X_STRIDE + 64 * F +
                                                                   32 * h + 8 * t);
#pragma unroll
                        for (int mt = 0; mt < WM; mt++) mma_s8_16832(C[mt][nt], A[mt], v.x, v.y);
                    }
                } else {
                    uint32_t A[WM][2][4];
#pragma unroll
                    for (int mt = 0; mt < WM; mt++) {
                        A[mt][0][0] = tern_dec_bf16<F>(w[mt][h * 2]);
                        A[mt][0][1] = tern_dec_bf16<F>(w[mt][4 + h * 2]);
                        A[mt][0][2] = tern_dec_bf16<F>(w[mt][h * 2 + 1]);
                        A[mt][0][3] = tern_dec_bf16<F>(w[mt][4 + h * 2 + 1]);
                        A[mt][1][0] = tern_dec_bf16<F>(ws[mt][h * 2]);
                        A[mt][1][1] = tern_dec_bf16<F>(ws[mt][4 + h * 2]);
                        A[mt][1][2] = tern_dec_bf16<F>(ws[mt][h * 2 + 1]);
                        A[mt][1][3] = tern_dec_bf16<F>(ws[mt][4 + h * 2 + 1]);
                    }
#pragma unroll
                    for (int nt = 0; nt < WN; nt++) {
                        const int tl = 8 * nt + g;
                        uint4 v = *reinterpret_cast<const uint4 *>(sX + tl * X_STRIDE +
                                                                   2 * (64 * F + 32 * h + 8 * t));
                        const uint32_t e0 = pair_even(v.x, v.y), e1 = pair_even(v.z, v.w);
                        const uint32_t o0 = pair_odd(v.x, v.y), o1 = pair_odd(v.z, v.w);
#pragma unroll
                        for (int mt = 0; mt < WM; mt++) {
                            mma_bf16_16816(C[mt][nt], A[mt][0], e0, e1);
                            mma_bf16_16816(C[mt][nt], A[mt][1], o0, o1);
                        }
                    }
                }
                if constexpr (GU > 0) {
                    if ((2 * F + h + 1) % GU == 0) { /* group ends: O += s_g * partial */
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

template <int ACT, int WARPS, int WM, int WN, int STAGES, int GU, int KBS, bool NOCOMP>
__global__ void __launch_bounds__(32 * WARPS) tern_mm_kernel(const TernKArgs a, int ksplit) {
    using C_ = Cfg<ACT, WARPS, WM, WN, STAGES, GU, KBS, NOCOMP>;
    constexpr int A_STRIDE = C_::A_STRIDE;
    using Acc = typename C_::Acc;
    using Red = typename C_::Red;
    constexpr bool I8 = C_::I8;
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ int s_last;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t row0 = (int64_t)blockIdx.x * C_::BM;
    const int64_t tok0 = (int64_t)blockIdx.y * C_::BN;
    const int split = blockIdx.z;
    /* the K loop runs over stages of KBS blocks: SBP per plane, KT in all */
    const int64_t SBP = (a.kblocks + KBS - 1) / KBS;
    const int64_t KT = (int64_t)a.planes * SBP;
    const int64_t kt0 = KT * split / ksplit, kt1 = KT * (split + 1) / ksplit;
    const int esz = I8 ? 1 : 2;
    constexpr int BN_ = C_::BN;
    const int ntok = a.n - tok0 < BN_ ? (int)(a.n - tok0) : BN_; /* tokens of this tile */
    /* token rows past n are never loaded: zero them once in every stage (a
     * zero-filling cp.async per stage for them cost as many instructions as
     * the codes at n = 1) */
    for (int i = threadIdx.x; i < STAGES * (BN_ - ntok) * (C_::X_STRIDE / 16); i += C_::THREADS) {
        const int per = (BN_ - ntok) * (C_::X_STRIDE / 16);
        const int st = i / per, r = i % per;
        uint8_t *p = smem + st * C_::STAGE_BYTES + C_::A_BYTES +
                     (ntok + r / (C_::X_STRIDE / 16)) * C_::X_STRIDE + (r % (C_::X_STRIDE / 16)) * 16;
        *reinterpret_cast<uint4 *>(p) = make_uint4(0, 0, 0, 0);
    }

    /* (plane, stage-in-plane) of the next stage to load and to compute,
     * advanced incrementally: no 64-bit division in the loop */
    int64_t l_plane = kt0 / SBP, l_sb = kt0 % SBP, c_sb = l_sb;
    const uint64_t pol = a.l2ef ? tern_mbar::evict_first_policy() : 0;
    auto load_stage = [&](int slot) {
        uint8_t *sA = smem + slot * C_::STAGE_BYTES;
        uint8_t *sX = sA + C_::A_BYTES;
        const int64_t kb0 = l_sb * KBS;
        for (int i = threadIdx.x; i < C_::BM * 4 * KBS; i += C_::THREADS) {
            const int rl = i / (4 * KBS), ch = i % (4 * KBS);
            const int64_t row = row0 + rl;
            const bool ok = row < a.rows && kb0 + ch / 4 < a.kblocks;
            const uint8_t *src = ok ? a.codes + row * a.row_bytes + kb0 * 64 + ch * 16 : a.codes;
            cp_async16(sA + rl * A_STRIDE + ch * 16, src, ok, a.l2ef, pol);
        }
        constexpr int CH = (I8 ? 16 : 32) * KBS; /* 16-byte chunks per token row of a stage */
        const uint8_t *xb = static_cast<const uint8_t *>(a.x) + l_plane * a.plane_stride * esz;
        for (int i = threadIdx.x; i < ntok * CH; i += C_::THREADS) {
            const int tl = i / CH, ch = i % CH;
            const int64_t tok = tok0 + tl;
            const int64_t col = kb0 * 256 + ch * (16 / esz);
            const bool ok = tok < a.n && col < a.cols;
            const uint8_t *src = ok ? xb + (tok * a.ldx + col) * esz : xb;
            cp_async16(sX + tl * C_::X_STRIDE + ch * 16, src, ok);
        }
        if (++l_sb == SBP) l_sb = 0, l_plane++;
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
    int64_t rs[WM][2]; /* rows of this thread, clamped for scale reads */
#pragma unroll
    for (int mt = 0; mt < WM; mt++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            int64_t r = row0 + warp * 16 * WM + 16 * mt + g + 8 * hh;
            rs[mt][hh] = r < a.rows ? r : a.rows - 1;
        }

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (kt0 + s < kt1) load_stage(s);
        cp_async_commit();
    }
    int slot = 0, lslot = STAGES - 1;
    for (int64_t kt = kt0; kt < kt1; kt++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (kt + STAGES - 1 < kt1) load_stage(lslot);
        cp_async_commit();
        lslot = lslot + 1 == STAGES ? 0 : lslot + 1;
        const uint8_t *sA0 = smem + slot * C_::STAGE_BYTES;
        const uint8_t *sX0 = sA0 + C_::A_BYTES;
        slot = slot + 1 == STAGES ? 0 : slot + 1;
        const int64_t kbs = c_sb * KBS;
        if (++c_sb == SBP) c_sb = 0;
#pragma unroll 1
        for (int jb = 0; jb < (NOCOMP ? 0 : KBS); jb++) {
        const int64_t kb = kbs + jb;
        if (kb >= a.kblocks) break; /* past the last block of a row (uniform) */
        const uint8_t *sA = sA0 + jb * 64;
        const uint8_t *sX = sX0 + jb * 256 * esz;

        mm_block<ACT, WARPS, WM, WN, GU, A_STRIDE, C_::X_STRIDE>(a, sA, sX, kb, C, O, rs, warp, g, t);
        }
    }
    cp_async_wait<0>();

    auto finalize = [&](Red v, int64_t row, int64_t tok) { return finalize_out<I8, GU>(a, v, row, tok); };
    /* fragment element i: row g + 8*(i>>1), token 2t + (i&1) */
    Red *part = reinterpret_cast<Red *>(a.partial);
#pragma unroll
    for (int mt = 0; mt < WM; mt++)
#pragma unroll
        for (int nt = 0; nt < WN; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int64_t row = row0 + warp * 16 * WM + 16 * mt + g + 8 * (i >> 1);
                const int64_t tok = tok0 + 8 * nt + 2 * t + (i & 1);
                if (row >= a.rows || tok >= a.n) continue;
                Red v;
                if constexpr (GU > 0) v = O[mt][nt][i];
                else v = (Red)C[mt][nt][i];
                if (ksplit == 1) a.y[tok * a.rows + row] = finalize(v, row, tok);
                else part[((int64_t)split * a.n + tok) * a.rows + row] = v;
            }
    if (ksplit == 1) return;

    __threadfence();
    __syncthreads();
    int *ctr = a.counters + (int64_t)blockIdx.y * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0) s_last = atomicAdd(ctr, 1) == ksplit - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    reduce_splits<I8, GU, C_::THREADS, C_::BM, C_::BN, GU ? 8 : 16>(a, part, ksplit, row0, tok0);
    if (threadIdx.x == 0) *ctr = 0;
}

/* (scratch: split-K scratch, declared in tern_mma.cuh) */

template <int ACT, int WARPS, int WM, int WN, int STAGES, int GU, int KBS = 1, bool NOCOMP = false>
int launch(const TernKArgs *a0, cudaStream_t s, int ctas_per_sm) {
    using C_ = Cfg<ACT, WARPS, WM, WN, STAGES, GU, KBS, NOCOMP>;
    auto kern = tern_mm_kernel<ACT, WARPS, WM, WN, STAGES, GU, KBS, NOCOMP>;
    static int attr_dev = -1, per_sm = 1; /* the attribute is per function and device */
    int dev;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (attr_dev != dev) {
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C_::SMEM));
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, C_::THREADS, C_::SMEM));
        if (per_sm < 1)
            return err_set("tern_mm: a %d-thread CTA with %d bytes of shared memory does not fit "
                           "on this GPU",
                           C_::THREADS, C_::SMEM);
        attr_dev = dev;
    }
    int n_sm;
    CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    ctas_per_sm *= per_sm; /* waves of resident CTAs the split should fill */
    TernKArgs a = *a0;
    const int64_t gx = (a.rows + C_::BM - 1) / C_::BM, gy = (a.n + C_::BN - 1) / C_::BN;
    if (gx > 0x7fffffff || gy > 65535)
        return err_set("tern_mm: %lld rows x %lld tokens is too large for one launch; split the "
                       "tokens",
                       (long long)a.rows, (long long)a.n);
    /* split K until the grid fills the GPU about ctas_per_sm deep */
    const int64_t KT = (int64_t)a.planes * ((a.kblocks + KBS - 1) / KBS), tiles = gx * gy;
    int64_t ks = (n_sm * (int64_t)ctas_per_sm + tiles - 1) / tiles;
    if (ks > KT) ks = KT;
    if (ks > 64) ks = 64;
    if (ks < 1) ks = 1;
    if (ks > 1 && scratch(ks * a.n * a.rows, tiles, &a.partial, &a.counters) < 0) return -1;
    kern<<<dim3((unsigned)gx, (unsigned)gy, (unsigned)ks), C_::THREADS, C_::SMEM, s>>>(a, (int)ks);
    CUDA_CHECK_LAUNCH("tern_mm_kernel");
    return 0;
}


/* ---- stream-K (decode) ---------------------------------------------------
 * A persistent grid of G CTAs (the resident slots of the GPU) walks the
 * sequence of units (tile, stage) tile-major; CTA c owns units
 * [c*U/G, (c+1)*U/G), so every CTA streams the same number of bytes with one
 * unbroken cp.async pipeline (no waves, no drain between tiles).  A tile
 * shared by several CTAs is finished by the last of them to arrive, which
 * adds the partials in CTA order (deterministic). */

__device__ __forceinline__ int64_t sk_cta_of(int64_t u, int64_t U, int64_t G) {
    return ((u + 1) * G + U - 1) / U - 1; /* the CTA whose range holds unit u */
}

template <int ACT, int WARPS, int WM, int WN, int STAGES, int GU, int KBS>
__global__ void __launch_bounds__(32 * WARPS) tern_mm_sk_kernel(const TernKArgs a, int64_t gx,
                                                                int64_t tiles) {
    using C_ = Cfg<ACT, WARPS, WM, WN, STAGES, GU, KBS, false>;
    using Acc = typename C_::Acc;
    using Red = typename C_::Red;
    constexpr bool I8 = C_::I8;
    constexpr int A_STRIDE = C_::A_STRIDE, BM = C_::BM, BN = C_::BN;
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ int s_last;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int esz = I8 ? 1 : 2;
    const int64_t SBP = (a.kblocks + KBS - 1) / KBS, KU = (int64_t)a.planes * SBP;
    const int64_t U = tiles * KU, G = gridDim.x, c = blockIdx.x;
    const int64_t u0 = c * U / G, u1 = (c + 1) * U / G;
    if (u0 >= u1) return;
    constexpr int BN_ = BN;
    const int ntok = a.n < BN ? (int)a.n : BN; /* decode: one token tile (gy == 1) */
    /* token rows past n are never loaded: zero them once in every stage (a
     * zero-filling cp.async per stage for them cost as many instructions as
     * the codes at n = 1) */
    for (int i = threadIdx.x; i < STAGES * (BN_ - ntok) * (C_::X_STRIDE / 16); i += C_::THREADS) {
        const int per = (BN_ - ntok) * (C_::X_STRIDE / 16);
        const int st = i / per, r = i % per;
        uint8_t *p = smem + st * C_::STAGE_BYTES + C_::A_BYTES +
                     (ntok + r / (C_::X_STRIDE / 16)) * C_::X_STRIDE + (r % (C_::X_STRIDE / 16)) * 16;
        *reinterpret_cast<uint4 *>(p) = make_uint4(0, 0, 0, 0);
    }

    /* load iterator (tile, plane, stage) */
    int64_t lt = u0 / KU, lp = (u0 % KU) / SBP, ls = (u0 % KU) % SBP;
    const uint64_t pol = a.l2ef ? tern_mbar::evict_first_policy() : 0;
    auto load_unit = [&](int slot) {
        const int64_t row0 = (lt % gx) * BM, tok0 = (lt / gx) * BN;
        uint8_t *sA = smem + slot * C_::STAGE_BYTES;
        uint8_t *sX = sA + C_::A_BYTES;
        const int64_t kb0 = ls * KBS;
        for (int i = threadIdx.x; i < BM * 4 * KBS; i += C_::THREADS) {
            const int rl = i / (4 * KBS), ch = i % (4 * KBS);
            const int64_t row = row0 + rl;
            const bool ok = row < a.rows && kb0 + ch / 4 < a.kblocks;
            const uint8_t *src = ok ? a.codes + row * a.row_bytes + kb0 * 64 + ch * 16 : a.codes;
            cp_async16(sA + rl * A_STRIDE + ch * 16, src, ok, a.l2ef, pol);
        }
        constexpr int CH = (I8 ? 16 : 32) * KBS;
        const uint8_t *xb = static_cast<const uint8_t *>(a.x) + lp * a.plane_stride * esz;
        for (int i = threadIdx.x; i < ntok * CH; i += C_::THREADS) {
            const int tl = i / CH, ch = i % CH;
            const int64_t tok = tok0 + tl;
            const int64_t col = kb0 * 256 + ch * (16 / esz);
            const bool ok = tok < a.n && col < a.cols;
            const uint8_t *src = ok ? xb + (tok * a.ldx + col) * esz : xb;
            cp_async16(sX + tl * C_::X_STRIDE + ch * 16, src, ok);
        }
        if (++ls == SBP) {
            ls = 0;
            if (++lp == a.planes) lp = 0, lt++;
        }
    };

    Acc C[WM][WN][4];
    float O[WM][WN][GU ? 4 : 1];
    int64_t rs[WM][2];
    int64_t ct = u0 / KU, cs = (u0 % KU) % SBP, cpl = (u0 % KU) / SBP; /* compute iterator */
    auto begin_tile = [&]() {
        const int64_t row0 = (ct % gx) * BM;
#pragma unroll
        for (int mt = 0; mt < WM; mt++) {
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                int64_t r = row0 + warp * 16 * WM + 16 * mt + g + 8 * hh;
                rs[mt][hh] = r < a.rows ? r : a.rows - 1;
            }
#pragma unroll
            for (int nt = 0; nt < WN; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    C[mt][nt][i] = 0;
                    if constexpr (GU > 0) O[mt][nt][i] = 0.0f;
                }
        }
    };
    auto finalize = [&](Red v, int64_t row, int64_t tok) { return finalize_out<I8, GU>(a, v, row, tok); };
    Red *part = reinterpret_cast<Red *>(a.partial);
    auto flush_tile = [&]() {
        const int64_t row0 = (ct % gx) * BM, tok0 = (ct / gx) * BN;
        const int64_t cf = sk_cta_of(ct * KU, U, G), cl = sk_cta_of(ct * KU + KU - 1, U, G);
        const int slot = (u0 / KU == ct) ? 0 : 1;
#pragma unroll
        for (int mt = 0; mt < WM; mt++)
#pragma unroll
            for (int nt = 0; nt < WN; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int rl = warp * 16 * WM + 16 * mt + g + 8 * (i >> 1);
                    const int tl = 8 * nt + 2 * t + (i & 1);
                    const int64_t row = row0 + rl, tok = tok0 + tl;
                    if (row >= a.rows || tok >= a.n) continue;
                    Red v;
                    if constexpr (GU > 0) v = O[mt][nt][i];
                    else v = (Red)C[mt][nt][i];
                    if (cf == cl) a.y[tok * a.rows + row] = finalize(v, row, tok);
                    else part[((c * 2 + slot) * BN + tl) * BM + rl] = v;
                }
        if (cf == cl) return;
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) s_last = atomicAdd(a.counters + ct, 1) == (int)(cl - cf);
        __syncthreads();
        if (!s_last) return;
        __threadfence();
        for (int e = threadIdx.x; e < BM * BN; e += C_::THREADS) {
            const int rl = e % BM, tl = e / BM;
            const int64_t row = row0 + rl, tok = tok0 + tl;
            if (row >= a.rows || tok >= a.n) continue;
            Red v = 0;
            for (int64_t cc = cf; cc <= cl; cc++) {
                const int sl = ((cc * U / G) / KU == ct) ? 0 : 1;
                v += __ldcg(part + ((cc * 2 + sl) * BN + tl) * BM + rl);
            }
            a.y[tok * a.rows + row] = finalize(v, row, tok);
        }
        if (threadIdx.x == 0) a.counters[ct] = 0;
    };

    begin_tile();
#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (u0 + st < u1) load_unit(st);
        cp_async_commit();
    }
    int slot = 0, lslot = STAGES - 1;
    for (int64_t u = u0; u < u1; u++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (u + STAGES - 1 < u1) load_unit(lslot);
        cp_async_commit();
        lslot = lslot + 1 == STAGES ? 0 : lslot + 1;
        const uint8_t *sA0 = smem + slot * C_::STAGE_BYTES;
        const uint8_t *sX0 = sA0 + C_::A_BYTES;
        slot = slot + 1 == STAGES ? 0 : slot + 1;
#pragma unroll 1
        for (int jb = 0; jb < KBS; jb++) {
            const int64_t kb = cs * KBS + jb;
            if (kb >= a.kblocks) break;
            mm_block<ACT, WARPS, WM, WN, GU, A_STRIDE, C_::X_STRIDE>(a, sA0 + jb * 64,
                                                                     sX0 + jb * 256 * esz, kb, C, O,
                                                                     rs, warp, g, t);
        }
        bool tile_done = false;
        if (++cs == SBP) {
            cs = 0;
            if (++cpl == a.planes) cpl = 0, tile_done = true;
        }
        if (tile_done || u + 1 == u1) {
            flush_tile();
            if (tile_done) {
                ct++;
                begin_tile();
            }
        }
    }
    cp_async_wait<0>();
}

template <int ACT, int WARPS, int WM, int WN, int STAGES, int GU, int KBS>
int launch_sk(const TernKArgs *a0, cudaStream_t s) {
    using C_ = Cfg<ACT, WARPS, WM, WN, STAGES, GU, KBS, false>;
    auto kern = tern_mm_sk_kernel<ACT, WARPS, WM, WN, STAGES, GU, KBS>;
    static int attr_dev = -1, per_sm = 1;
    int dev;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (attr_dev != dev) {
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C_::SMEM));
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, C_::THREADS, C_::SMEM));
        if (per_sm < 1)
            return err_set("tern_mm_sk: a %d-thread CTA with %d bytes of shared memory does not fit",
                           C_::THREADS, C_::SMEM);
        attr_dev = dev;
    }
    int n_sm;
    CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    TernKArgs a = *a0;
    const int64_t gx = (a.rows + C_::BM - 1) / C_::BM, gy = (a.n + C_::BN - 1) / C_::BN;
    const int64_t tiles = gx * gy;
    const int64_t U = tiles * (int64_t)a.planes * ((a.kblocks + KBS - 1) / KBS);
    int64_t G = (int64_t)n_sm * per_sm;
    if (G > U) G = U; /* every CTA must own at least one unit */
    if (scratch(G * 2 * C_::BN * C_::BM, tiles, &a.partial, &a.counters) < 0) return -1;
    kern<<<(unsigned)G, C_::THREADS, C_::SMEM, s>>>(a, gx, tiles);
    CUDA_CHECK_LAUNCH("tern_mm_sk_kernel");
    return 0;
}

} // namespace tern_mm

#endif
