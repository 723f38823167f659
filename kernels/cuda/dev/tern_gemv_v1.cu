/* dev/tern_gemv_v1.cu — v1 decode GEMV (kept for reference; superseded by tern_mm.cuh).
 * Compile: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -std=c++17 -Isrc -Ikernels -I. -c kernels/cuda/dev/tern_gemv_v1.cu
 * Note: warps split K inside a CTA, B fragments gathered from global per block, codes prefetched one
 * block ahead in registers. Correct (1578 tests) but latency-bound: H200, 14336x4096 M=1 bf16 17.2 us
 * (862 GB/s), 36864x4608 34.2 us (1252 GB/s): too few bytes in flight, L2 latency on every block. */
/* tern_gemv.cu — ternary decode GEMV: y (n, rows) = x (n, cols) @ W^T for
 * n <= 16 per launch, reading the packed codes (ternary_format.h) once.
 *
 * Work split.  A CTA (4 warps) owns MT = 2 row tiles of 16 rows (32 rows) and
 * one of `ksplit` interleaved slices of the 256-column blocks; its warps take
 * the blocks kb = split*4 + warp, + 4*ksplit, ...  Per block a warp loads
 * 32 rows x 64 bytes of codes (two 8-byte loads per row-half per thread,
 * prefetched one block ahead), gathers the activations of that block into
 * B fragments (tern_mma.cuh explains the k order), decodes the codes into A
 * fragments in registers and runs m16n8k16 bf16 (or m16n8k32 s8) MMAs with
 * the weight rows as M and the tokens as N: the tensor cores do the
 * multiply-adds, so the inner loop costs ~1 integer op per 2 weights.
 *
 * Reduction, deterministic: warps of a CTA are summed in warp order through
 * shared memory; with ksplit > 1 each CTA writes its partial to the matrix's
 * scratch and the last CTA to arrive for a row tile (atomic counter) sums the
 * partials in split order, writes y and resets the counter (so the kernel is
 * safe to replay in a CUDA graph).  int8 with one scale per row reduces the
 * exact integers, so y is bit-identical to tern_matmul_i8_ref.
 *
 * Versions: dev/tern_gemv_v1_naive.cu (one thread per output, scalar decode). */
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/cuda_util.h"
#include "cuda/tern_cuda.h"
#include "cuda/tern_mma.cuh"

namespace {

constexpr int GEMV_WARPS = 4;
constexpr int GEMV_MT = 2; /* 16-row tiles per CTA */

/* 8 activations x[tok][c0 .. c0+7] (zero outside [0, cols) or tok >= n). */
template <int ACT>
struct Act8;

template <>
struct Act8<TACT_BF16> {
    uint32_t v[4];
    __device__ __forceinline__ void load(const TernKArgs &a, int64_t tok, int64_t c0) {
        const uint16_t *x = static_cast<const uint16_t *>(a.x);
        if (tok >= a.n) {
            v[0] = v[1] = v[2] = v[3] = 0;
        } else if (a.x_vec && c0 + 8 <= a.cols) {
            uint4 q = __ldg(reinterpret_cast<const uint4 *>(x + tok * a.ldx + c0));
            v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
        } else {
            uint16_t e[8];
#pragma unroll
            for (int i = 0; i < 8; i++) e[i] = c0 + i < a.cols ? x[tok * a.ldx + c0 + i] : 0;
#pragma unroll
            for (int i = 0; i < 4; i++) v[i] = (uint32_t)e[2 * i] | ((uint32_t)e[2 * i + 1] << 16);
        }
    }
};

template <>
struct Act8<TACT_F32> {
    float v[8];
    __device__ __forceinline__ void load(const TernKArgs &a, int64_t tok, int64_t c0) {
        const float *x = static_cast<const float *>(a.x);
        if (tok >= a.n) {
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = 0.0f;
        } else if (a.x_vec && c0 + 8 <= a.cols) {
            float4 p = __ldg(reinterpret_cast<const float4 *>(x + tok * a.ldx + c0));
            float4 q = __ldg(reinterpret_cast<const float4 *>(x + tok * a.ldx + c0 + 4));
            v[0] = p.x, v[1] = p.y, v[2] = p.z, v[3] = p.w;
            v[4] = q.x, v[5] = q.y, v[6] = q.z, v[7] = q.w;
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = c0 + i < a.cols ? x[tok * a.ldx + c0 + i] : 0.0f;
        }
    }
};

template <>
struct Act8<TACT_I8> {
    uint32_t v[2];
    __device__ __forceinline__ void load(const TernKArgs &a, int64_t tok, int64_t c0) {
        const int8_t *x = static_cast<const int8_t *>(a.x);
        if (tok >= a.n) {
            v[0] = v[1] = 0;
        } else if (a.x_vec && c0 + 8 <= a.cols) {
            uint2 q = __ldg(reinterpret_cast<const uint2 *>(x + tok * a.ldx + c0));
            v[0] = q.x, v[1] = q.y;
        } else {
            uint32_t e[8];
#pragma unroll
            for (int i = 0; i < 8; i++)
                e[i] = c0 + i < a.cols ? (uint32_t)(uint8_t)x[tok * a.ldx + c0 + i] : 0u;
            v[0] = e[0] | e[1] << 8 | e[2] << 16 | e[3] << 24;
            v[1] = e[4] | e[5] << 8 | e[6] << 16 | e[7] << 24;
        }
    }
};

template <int ACT, int NT, int GU>
struct GemvWarp {
    static constexpr bool I8 = ACT == TACT_I8;
    static constexpr int TERMS = ACT == TACT_F32 ? 3 : 1;
    using Acc = typename std::conditional<I8, int, float>::type;

    Acc C[GEMV_MT][NT][4];
    float O[GEMV_MT][NT][GU ? 4 : 1];
    /* B fragments of the current block: [term][nt][f][h][p][reg] (bf16) or
     * [nt][f][h][reg] (int8, in bq). */
    uint32_t b[TERMS][NT][4][2][2][2];
    uint32_t bq[NT][4][2][2];

    __device__ __forceinline__ void load_b(const TernKArgs &a, int64_t tok0, int64_t kb, int g,
                                           int t) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int64_t tok = tok0 + 8 * nt + g;
#pragma unroll
            for (int f = 0; f < 4; f++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t c0 = kb * 256 + 64 * f + 32 * h + 8 * t;
                    Act8<ACT> x;
                    x.load(a, tok, c0);
                    if constexpr (ACT == TACT_BF16) {
                        b[0][nt][f][h][0][0] = pair_even(x.v[0], x.v[1]);
                        b[0][nt][f][h][0][1] = pair_even(x.v[2], x.v[3]);
                        b[0][nt][f][h][1][0] = pair_odd(x.v[0], x.v[1]);
                        b[0][nt][f][h][1][1] = pair_odd(x.v[2], x.v[3]);
                    } else if constexpr (ACT == TACT_F32) {
                        float s[3][8];
#pragma unroll
                        for (int e = 0; e < 8; e++) split3(x.v[e], s[0][e], s[1][e], s[2][e]);
#pragma unroll
                        for (int tm = 0; tm < 3; tm++)
#pragma unroll
                            for (int p = 0; p < 2; p++) {
                                b[tm][nt][f][h][p][0] = pack_bf16(s[tm][p], s[tm][p + 2]);
                                b[tm][nt][f][h][p][1] = pack_bf16(s[tm][p + 4], s[tm][p + 6]);
                            }
                    } else {
                        bq[nt][f][h][0] = x.v[0];
                        bq[nt][f][h][1] = x.v[1];
                    }
                }
        }
    }

    /* One field F of block kb for row tile mt: w[8] are the tile's words
     * (index rowhalf*4 + h*2 + j), ws = w >> 8. */
    template <int F>
    __device__ __forceinline__ void field(const TernKArgs &a, int mt, const uint32_t *w,
                                          const uint32_t *ws, int64_t kb, int64_t rlo,
                                          int64_t rhi) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if constexpr (I8) {
                uint32_t A[4] = {tern_dec_i8<F>(w[h * 2 + 0]), tern_dec_i8<F>(w[4 + h * 2 + 0]),
                                 tern_dec_i8<F>(w[h * 2 + 1]), tern_dec_i8<F>(w[4 + h * 2 + 1])};
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
                    mma_s8_16832(C[mt][nt], A, bq[nt][F][h][0], bq[nt][F][h][1]);
            } else {
#pragma unroll
                for (int p = 0; p < 2; p++) {
                    const uint32_t *src = p ? ws : w;
                    uint32_t A[4] = {tern_dec_bf16<F>(src[h * 2 + 0]),
                                     tern_dec_bf16<F>(src[4 + h * 2 + 0]),
                                     tern_dec_bf16<F>(src[h * 2 + 1]),
                                     tern_dec_bf16<F>(src[4 + h * 2 + 1])};
#pragma unroll
                    for (int tm = 0; tm < TERMS; tm++)
#pragma unroll
                        for (int nt = 0; nt < NT; nt++)
                            mma_bf16_16816(C[mt][nt], A, b[tm][nt][F][h][p][0],
                                           b[tm][nt][F][h][p][1]);
                }
            }
            if constexpr (GU > 0) {
                if ((2 * F + h + 1) % GU == 0) { /* group ends: O += s_g * partial */
                    const int64_t gi = (kb * 8 + 2 * F + h) / GU;
                    const float slo = __ldg(a.scales + rlo * a.scale_stride + gi);
                    const float shi = __ldg(a.scales + rhi * a.scale_stride + gi);
#pragma unroll
                    for (int nt = 0; nt < NT; nt++)
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            const float s = i < 2 ? slo : shi;
                            O[mt][nt][i] = __fadd_rn(O[mt][nt][i], __fmul_rn(s, (float)C[mt][nt][i]));
                            C[mt][nt][i] = 0;
                        }
                }
            }
        }
    }
};

template <int ACT, int NT, int GU>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    tern_gemv_kernel(const TernKArgs a, int ksplit) {
    using Warp = GemvWarp<ACT, NT, GU>;
    /* what is reduced: exact integers for int8 with one group, else f32 */
    using Acc = typename std::conditional<ACT == TACT_I8 && GU == 0, int, float>::type;
    constexpr int ROWS = 16 * GEMV_MT, TOKS = 8 * NT;
    __shared__ Acc red[GEMV_WARPS][ROWS][TOKS];
    __shared__ int s_last;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t row0 = (int64_t)blockIdx.x * ROWS;
    const int split = blockIdx.y;
    const int64_t tok0 = (int64_t)blockIdx.z * TOKS;

    /* rows of this thread (clamped for loads; results of rows >= a.rows are dropped) */
    int64_t r[GEMV_MT][2];
    const uint8_t *rp[GEMV_MT][2];
#pragma unroll
    for (int mt = 0; mt < GEMV_MT; mt++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            int64_t rr = row0 + 16 * mt + g + 8 * hh;
            r[mt][hh] = rr < a.rows ? rr : a.rows - 1;
            rp[mt][hh] = a.codes + r[mt][hh] * a.row_bytes + 8 * t;
        }

    Warp W;
#pragma unroll
    for (int mt = 0; mt < GEMV_MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                W.C[mt][nt][i] = 0;
                if constexpr (GU > 0) W.O[mt][nt][i] = 0.0f;
            }

    const int64_t kstride = (int64_t)ksplit * GEMV_WARPS;
    int64_t kb = (int64_t)split * GEMV_WARPS + warp;
    uint32_t wc[GEMV_MT][8];
    auto load_w = [&](int64_t k, uint32_t (&w)[GEMV_MT][8]) {
#pragma unroll
        for (int mt = 0; mt < GEMV_MT; mt++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    uint2 v = ldg_stream_u2(rp[mt][hh] + k * 64 + 32 * h);
                    w[mt][hh * 4 + h * 2 + 0] = v.x;
                    w[mt][hh * 4 + h * 2 + 1] = v.y;
                }
    };
    if (kb < a.kblocks) load_w(kb, wc);
    while (kb < a.kblocks) {
        const int64_t kn = kb + kstride;
        uint32_t wn[GEMV_MT][8];
        if (kn < a.kblocks) load_w(kn, wn);
        W.load_b(a, tok0, kb, g, t);
#pragma unroll
        for (int mt = 0; mt < GEMV_MT; mt++) {
            uint32_t ws[8];
#pragma unroll
            for (int i = 0; i < 8; i++) ws[i] = wc[mt][i] >> 8;
            W.template field<0>(a, mt, wc[mt], ws, kb, r[mt][0], r[mt][1]);
            W.template field<1>(a, mt, wc[mt], ws, kb, r[mt][0], r[mt][1]);
            W.template field<2>(a, mt, wc[mt], ws, kb, r[mt][0], r[mt][1]);
            W.template field<3>(a, mt, wc[mt], ws, kb, r[mt][0], r[mt][1]);
        }
        if (kn < a.kblocks) {
#pragma unroll
            for (int mt = 0; mt < GEMV_MT; mt++)
#pragma unroll
                for (int i = 0; i < 8; i++) wc[mt][i] = wn[mt][i];
        }
        kb = kn;
    }

    /* warp partials -> shared memory; fragment element i: row g + 8*(i>>1),
     * token 2t + (i&1) */
#pragma unroll
    for (int mt = 0; mt < GEMV_MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                Acc v;
                if constexpr (GU > 0) v = W.O[mt][nt][i];
                else v = (Acc)W.C[mt][nt][i];
                red[warp][16 * mt + g + 8 * (i >> 1)][8 * nt + 2 * t + (i & 1)] = v;
            }
    __syncthreads();

    float *y = a.y;
    auto finalize = [&](Acc v, int64_t row, int64_t tok) -> float {
        if constexpr (GU == 0) {
            const float s = a.scales[row * a.scale_stride];
            if constexpr (std::is_same<Acc, int>::value)
                return __fdiv_rn(__fmul_rn(s, (float)v), a.sx[tok]);
            else
                return s * v;
        } else {
            if constexpr (ACT == TACT_I8) return __fdiv_rn((float)v, a.sx[tok]);
            else return (float)v;
        }
    };

    if (ksplit == 1) {
        for (int e = threadIdx.x; e < ROWS * TOKS; e += blockDim.x) {
            const int rl = e % ROWS, tl = e / ROWS;
            const int64_t row = row0 + rl, tok = tok0 + tl;
            Acc v = red[0][rl][tl];
#pragma unroll
            for (int w = 1; w < GEMV_WARPS; w++) v += red[w][rl][tl];
            if (row < a.rows && tok < a.n) y[tok * a.rows + row] = finalize(v, row, tok);
        }
        return;
    }

    /* split-K: partial[(split*16 + tok) * rows + row], then the last CTA sums */
    for (int e = threadIdx.x; e < ROWS * TOKS; e += blockDim.x) {
        const int rl = e % ROWS, tl = e / ROWS;
        const int64_t row = row0 + rl, tok = tok0 + tl;
        Acc v = red[0][rl][tl];
#pragma unroll
        for (int w = 1; w < GEMV_WARPS; w++) v += red[w][rl][tl];
        if (row < a.rows && tok < a.n)
            reinterpret_cast<Acc *>(a.partial)[((int64_t)split * 16 + tok) * a.rows + row] = v;
    }
    __threadfence();
    __syncthreads();
    int *ctr = a.counters + (int64_t)blockIdx.z * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0) s_last = atomicAdd(ctr, 1) == ksplit - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    for (int e = threadIdx.x; e < ROWS * TOKS; e += blockDim.x) {
        const int rl = e % ROWS, tl = e / ROWS;
        const int64_t row = row0 + rl, tok = tok0 + tl;
        if (row >= a.rows || tok >= a.n) continue;
        const Acc *p = reinterpret_cast<const Acc *>(a.partial) + tok * a.rows + row;
        Acc v = __ldcg(p);
        for (int sp = 1; sp < ksplit; sp++) v += __ldcg(p + (int64_t)sp * 16 * a.rows);
        y[tok * a.rows + row] = finalize(v, row, tok);
    }
    if (threadIdx.x == 0) *ctr = 0;
}

template <int ACT, int NT, int GU>
int launch_one(const TernKArgs *a, cudaStream_t s) {
    constexpr int ROWS = 16 * GEMV_MT;
    const int64_t row_tiles = (a->rows + ROWS - 1) / ROWS;
    const int64_t zt = (a->n + 8 * NT - 1) / (8 * NT);
    static int n_sm = 0;
    if (!n_sm) {
        int dev;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    }
    /* enough CTAs for ~4 per SM, each warp keeping >= 1 block */
    const int64_t want = 4LL * n_sm;
    int64_t ksplit = (want + row_tiles * zt - 1) / (row_tiles * zt);
    const int64_t kmax = a->kblocks / GEMV_WARPS > 1 ? a->kblocks / GEMV_WARPS : 1;
    if (ksplit > kmax) ksplit = kmax;
    if (ksplit > 8 /* v1: TERN_CUDA_KSPLIT_MAX */) ksplit = 8 /* v1: TERN_CUDA_KSPLIT_MAX */;
    if (ksplit < 1) ksplit = 1;
    if (row_tiles > 0x7fffffff)
        return err_set("tern_gemv: %lld rows is too many for one launch", (long long)a->rows);
    dim3 grid((unsigned)row_tiles, (unsigned)ksplit, (unsigned)zt);
    tern_gemv_kernel<ACT, NT, GU><<<grid, GEMV_WARPS * 32, 0, s>>>(*a, (int)ksplit);
    CUDA_CHECK_LAUNCH("tern_gemv_kernel");
    return 0;
}

template <int ACT, int NT>
int launch_gu(const TernKArgs *a, cudaStream_t s) {
    switch (a->gu) {
    case 0: return launch_one<ACT, NT, 0>(a, s);
    case 1: return launch_one<ACT, NT, 1>(a, s);
    case 2: return launch_one<ACT, NT, 2>(a, s);
    case 4: return launch_one<ACT, NT, 4>(a, s);
    case 8: return launch_one<ACT, NT, 8>(a, s);
    default: return err_set("tern_gemv: unsupported group unit %d", a->gu);
    }
}

} // namespace

/* n <= 16 (<= 8 per z-tile for f32); the caller chunks larger n. */
int tern_gemv_v1_launch(int act, const TernKArgs *a, cudaStream_t s) {
    if (a->n < 1 || a->n > 16) return err_set("tern_gemv: n = %lld outside 1..16", (long long)a->n);
    switch (act) {
    case TACT_BF16: return a->n <= 8 ? launch_gu<TACT_BF16, 1>(a, s) : launch_gu<TACT_BF16, 2>(a, s);
    case TACT_I8: return a->n <= 8 ? launch_gu<TACT_I8, 1>(a, s) : launch_gu<TACT_I8, 2>(a, s);
    case TACT_F32: return launch_gu<TACT_F32, 1>(a, s);
    default: return err_set("tern_gemv: unknown activation type %d", act);
    }
}
