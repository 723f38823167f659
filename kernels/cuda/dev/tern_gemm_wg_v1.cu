/* dev/tern_gemm_wg_v1.cu (kept, not built; the first version of
 * tern_gemm_wg.cu) — the ternary GEMM for prefill and batches (n > 16 tokens,
 * one scale per row) on Hopper's warpgroup tensor cores (wgmma).
 *
 * y (n, rows) = x (n, cols) @ W^T as D = A B with A = the activations
 * (tokens x K, the wgmma M side, 64 tokens per warpgroup) and B = the
 * weights (rows x K, N = 128 rows per CTA), both K-major in shared memory
 * with the 128-byte swizzle.  A CTA is WGS warpgroups (BM = 64 * WGS tokens)
 * over 128 weight rows; every stage covers 256 bytes of K per row: 256 int8
 * columns (one 64-byte code block) or 128 bf16 columns (half a block).
 *
 * The 2-bit codes are decoded in registers: every thread fetches 16 code
 * bytes per stage and row share (global -> registers, two stages ahead),
 * turns them into 4 fields x 16 int8 (or 2 fields x 16 bf16) weights and
 * stores them, swizzled, into the B tile that the wgmmas read; each code is
 * decoded once per CTA and feeds BM tokens.  Pipeline, per stage kt (4 slots
 * of activations filled by cp.async three stages ahead, 2 decoded tiles):
 *   copies of kt + 3 into kt - 1's slot | wgmmas of kt (asynchronous) |
 *   while they run: decode kt + 1 into the other tile, codes of kt + 3 into
 *   registers | wait for the wgmmas | fence, one barrier.
 * (Measured, H200: with the codes only one stage ahead every stage waited
 * for their load; with 64-bit stage arithmetic the loop issued ~675
 * instructions per thread and stage, and only copying the activations,
 * without decoding or wgmma, already took 80 % of the time.)
 *
 * int8 accumulates exact s32 sums (y = s_row * sum / s_tok, bit-identical to
 * tern_matmul_i8_ref); bf16 (f32 = three bf16 planes, one after the other
 * along K) accumulates f32.  Small grids split K; the partials are reduced
 * in split order (tern_mm.cuh), so results do not depend on the schedule.
 *
 * Versions: the mma.sync kernel of tern_mm.cuh (tern_gemm.cu) was bound
 * near 530 int8 TOPS (16 clocks per m16n8k32 per SM sub-partition). */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "cuda/cuda_util.h"
#include "cuda/tern_mbar.cuh"
#include "cuda/tern_mm.cuh"

namespace {

constexpr int WG_BN = 128;   /* weight rows per CTA */
constexpr int WG_ST = 4;     /* pipeline slots (activations + codes) */
constexpr int WG_CBYTES = WG_BN * 64; /* codes of one stage (one 64-byte block per row) */

template <int WGS>
struct WgCfg {
    static constexpr int THREADS = 128 * WGS;
    static constexpr int BM = 64 * WGS;                /* tokens */
    static constexpr int X_BYTES = BM * 256;           /* two 128-byte swizzle columns */
    static constexpr int W_BYTES = WG_BN * 256;
    static constexpr int SLOT = X_BYTES + WG_CBYTES;   /* a multiple of 1024 */
    static constexpr int SMEM = WG_ST * SLOT + 2 * W_BYTES + 1024; /* + alignment */
    static_assert(SLOT % 1024 == 0, "swizzle atoms need 1024-byte alignment");
};

/* Byte offset of 16-byte chunk ch (0..15) of row r in a tile of R rows x
 * 256 bytes stored as two K-major 128-byte-swizzled halves. */
__device__ __forceinline__ uint32_t swz(int r, int ch, int R) {
    return (uint32_t)((ch >> 3) * R * 128 + (r >> 3) * 1024 + (r & 7) * 128 +
                      (((ch & 7) ^ (r & 7)) << 4));
}

/* wgmma shared-memory descriptor: K-major, 128-byte swizzle, 8-row groups
 * 1024 bytes apart. */
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* keeps the compiler from moving accumulator accesses across the async MMA */
__device__ __forceinline__ void keep(int (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+r"(d[i])::"memory");
}
__device__ __forceinline__ void keep(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ void wgmma_s8(int (&d)[64], uint64_t da, uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, 1;\n"
        "}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
          "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
          "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
          "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
          "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
          "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
          "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
        : "l"(da), "l"(db));
}

__device__ __forceinline__ void wgmma_bf16(float (&d)[64], uint64_t da, uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, 1, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db));
}

/* tmx: the activations as (planes * n rows, cols) with 128-byte boxes of BM
 * rows, 128-byte swizzle; tmc: the codes as (rows, row_bytes) with 64-byte
 * boxes of 128 rows, 64-byte swizzle.  Both zero-fill outside the tensor. */
template <int ACT, int WGS>
__global__ void __launch_bounds__(128 * WGS)
    tern_gemm_wg_kernel(const TernKArgs a, int ksplit, const __grid_constant__ CUtensorMap tmx,
                        const __grid_constant__ CUtensorMap tmc) {
    using C_ = WgCfg<WGS>;
    constexpr bool I8 = ACT == TACT_I8;
    constexpr int THREADS = C_::THREADS, BM = C_::BM;
    constexpr int NC = WG_BN * 4 / THREADS; /* 16-byte code chunks per thread and stage */
    using Acc = typename std::conditional<I8, int, float>::type;
    extern __shared__ uint8_t smem_raw[];
    __shared__ int s_last;
    __shared__ float s_scale[WG_BN], s_sx[BM]; /* the tile's row and token scales */
    __shared__ __align__(8) uint64_t s_full[WG_ST]; /* a slot's copies have landed */
    /* 1024-byte aligned base (the swizzle pattern repeats every 1024 bytes) */
    const uint32_t raw_s = (uint32_t)__cvta_generic_to_shared(smem_raw);
    uint8_t *smem = smem_raw + ((1024 - (raw_s & 1023)) & 1023);
    const uint32_t smem_s = (uint32_t)__cvta_generic_to_shared(smem);
    uint8_t *const wtile = smem + WG_ST * C_::SLOT;
    const uint32_t full_s = (uint32_t)__cvta_generic_to_shared(s_full);

    const int tid = threadIdx.x, wg = tid >> 7;
    const int64_t row0 = (int64_t)blockIdx.x * WG_BN, tok0 = (int64_t)blockIdx.y * BM;
    const int split = blockIdx.z;
    constexpr int SPB = I8 ? 1 : 2; /* stages per code block */
    constexpr int esz = I8 ? 1 : 2;
    /* 32-bit stage counters, advanced incrementally: no 64-bit division in
     * the loop (it cost more instructions than the decoding) */
    const int SPP = (int)a.kblocks * SPB, KT = a.planes * SPP;
    const int kt0 = (int)((int64_t)KT * split / ksplit), kt1 = (int)((int64_t)KT * (split + 1) / ksplit);

    if (tid == 0) {
        for (int i = 0; i < WG_ST; i++) tern_mbar::init(full_s + 8 * i, 1);
        tern_mbar::init_fence();
    }
    /* scales for the epilogue */
    for (int i = tid; i < WG_BN; i += THREADS)
        s_scale[i] = row0 + i < a.rows ? a.scales[(row0 + i) * a.scale_stride] : 0.0f;
    if constexpr (I8)
        for (int i = tid; i < BM; i += THREADS) s_sx[i] = tok0 + i < a.n ? a.sx[tok0 + i] : 1.0f;
    __syncthreads();

    /* thread 0 issues a stage's copies: two 128-byte halves of activations
     * and the codes of its block */
    int i_plane = kt0 / SPP, i_sp = kt0 % SPP; /* the next stage to issue */
    auto issue = [&](int slot) {
        const uint32_t dst = smem_s + slot * C_::SLOT, bar = full_s + 8 * slot;
        tern_mbar::expect_tx(bar, C_::SLOT);
        const int col0 = i_sp * (256 / esz), xrow = i_plane * (int)a.n + (int)tok0;
        tern_mbar::tma_load_2d(dst, &tmx, col0, xrow, bar);
        tern_mbar::tma_load_2d(dst + BM * 128, &tmx, col0 + 128 / esz, xrow, bar);
        tern_mbar::tma_load_2d(dst + C_::X_BYTES, &tmc, (i_sp / SPB) * 64, (int)row0, bar);
        if (++i_sp == SPP) i_sp = 0, i_plane++;
    };
    /* code chunks of this thread: rows cr0 + k * THREADS / 4, bytes 16 cc..;
     * 8 consecutive lanes take 8 rows of one chunk: conflict-free reads of
     * the 64-byte-swizzled codes and stores into the 128-byte-swizzled tile */
    const int cr0 = ((tid >> 5) << 3) | (tid & 7), cc = (tid >> 3) & 3;
    constexpr int CROWS = THREADS / 4;
    auto codes_at = [&](int slot, uint4 (&v)[NC]) {
        const uint8_t *c = smem + slot * C_::SLOT + C_::X_BYTES;
#pragma unroll
        for (int k = 0; k < NC; k++) {
            const int r = cr0 + k * CROWS;
            v[k] = *reinterpret_cast<const uint4 *>(c + r * 64 + ((cc ^ ((r >> 1) & 3)) << 4));
        }
    };

    /* 16 code bytes per chunk -> int8 (4 fields) or bf16 (2 fields) weights in w */
    auto decode = [&](const uint4 (&v)[NC], int st, uint8_t *w) {
        const int hs = I8 ? 0 : st & 1; /* bf16: which half of the block (SPP is even) */
#pragma unroll
        for (int k = 0; k < NC; k++) {
            const int r = cr0 + k * CROWS;
            const uint32_t wv[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
            if constexpr (I8) {
                auto field = [&](auto Fc) {
                    constexpr int F = decltype(Fc)::value;
                    uint4 o;
                    o.x = tern_dec_i8<F>(wv[0]);
                    o.y = tern_dec_i8<F>(wv[1]);
                    o.z = tern_dec_i8<F>(wv[2]);
                    o.w = tern_dec_i8<F>(wv[3]);
                    /* columns 64F + 16cc .. +15: chunk 4F + cc of 16 */
                    *reinterpret_cast<uint4 *>(w + swz(r, 4 * F + cc, WG_BN)) = o;
                };
                field(std::integral_constant<int, 0>());
                field(std::integral_constant<int, 1>());
                field(std::integral_constant<int, 2>());
                field(std::integral_constant<int, 3>());
            } else {
                /* bytes (b0 b2 b1 b3): the decoder's pairs become (b0, b1), (b2, b3) */
                uint32_t p[4], q[4];
#pragma unroll
                for (int m = 0; m < 4; m++) {
                    p[m] = __byte_perm(wv[m], 0, 0x3120);
                    q[m] = p[m] >> 8;
                }
                auto field = [&](auto Fc, int h) {
                    constexpr int F = decltype(Fc)::value;
                    uint4 o0, o1;
                    o0.x = tern_dec_bf16<F>(p[0]);
                    o0.y = tern_dec_bf16<F>(q[0]);
                    o0.z = tern_dec_bf16<F>(p[1]);
                    o0.w = tern_dec_bf16<F>(q[1]);
                    o1.x = tern_dec_bf16<F>(p[2]);
                    o1.y = tern_dec_bf16<F>(q[2]);
                    o1.z = tern_dec_bf16<F>(p[3]);
                    o1.w = tern_dec_bf16<F>(q[3]);
                    /* columns 64h + 16cc .. +15 of the stage: bytes 128h + 32cc */
                    *reinterpret_cast<uint4 *>(w + swz(r, 8 * h + 2 * cc, WG_BN)) = o0;
                    *reinterpret_cast<uint4 *>(w + swz(r, 8 * h + 2 * cc + 1, WG_BN)) = o1;
                };
                if (hs == 0) {
                    field(std::integral_constant<int, 0>(), 0);
                    field(std::integral_constant<int, 1>(), 1);
                } else {
                    field(std::integral_constant<int, 2>(), 0);
                    field(std::integral_constant<int, 3>(), 1);
                }
            }
        }
    };

    /* scales for the epilogue (visible after the prologue's barrier) */
    for (int i = tid; i < WG_BN; i += THREADS)
        s_scale[i] = row0 + i < a.rows ? a.scales[(row0 + i) * a.scale_stride] : 0.0f;
    if constexpr (I8)
        for (int i = tid; i < BM; i += THREADS) s_sx[i] = tok0 + i < a.n ? a.sx[tok0 + i] : 1.0f;

    Acc d[64];
#pragma unroll
    for (int i = 0; i < 64; i++) d[i] = 0;

    /* three stages in flight; stage kt0 decoded before the loop */
    if (tid == 0)
        for (int p = 0; p < WG_ST - 1; p++)
            if (kt0 + p < kt1) issue(p);
    if (kt0 < kt1) {
        uint4 v[NC];
        tern_mbar::wait(full_s, 0);
        codes_at(0, v);
        decode(v, kt0, wtile);
    }
    fence_proxy_async();
    __syncthreads();
    int slot = 0, wb = 0;
    for (int kt = kt0; kt < kt1; kt++) {
        /* stage kt + 3 into the slot of kt - 1, whose wgmmas are done */
        if (tid == 0 && kt + WG_ST - 1 < kt1) issue(slot == 0 ? WG_ST - 1 : slot - 1);
        /* descriptors of the stage's tiles; a k step adds its byte offset / 16
         * to the address field (no carry: shared addresses are < 256 KB) */
        const uint64_t da = wg_desc(smem_s + slot * C_::SLOT + wg * 8192);
        const uint64_t db = wg_desc(smem_s + WG_ST * C_::SLOT + wb * C_::W_BYTES);
        wg_fence();
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t off = (k & 3) * 32; /* 32 bytes of K per wgmma */
            const uint64_t ka = ((k >> 2) * (BM * 128) + off) >> 4;
            const uint64_t kb = ((k >> 2) * (WG_BN * 128) + off) >> 4;
            if constexpr (I8) wgmma_s8(d, da + ka, db + kb);
            else wgmma_bf16(d, da + ka, db + kb);
        }
        wg_commit();
        const int nslot = slot == WG_ST - 1 ? 0 : slot + 1;
        if (kt + 1 < kt1) { /* while the tensor cores work: decode kt + 1 */
            uint4 v[NC];
            tern_mbar::wait(full_s + 8 * nslot, ((kt + 1 - kt0) / WG_ST) & 1);
            codes_at(nslot, v);
            decode(v, kt + 1, wtile + (wb ^ 1) * C_::W_BYTES);
        }
        wg_wait<0>();
        keep(d);
        fence_proxy_async(); /* the decoded tile, for the next wgmmas */
        __syncthreads();     /* every warpgroup is done with slot kt */
        slot = nslot;
        wb ^= 1;
    }

    /* d[4j + 2h + e]: token 16 * warp + g + 8h of this warpgroup, row 8j + 2t + e;
     * y as finalize_out computes it, with the scales from shared memory */
    using Red = Acc;
    Red *part = reinterpret_cast<Red *>(a.partial);
    const int warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int tl = 64 * wg + 16 * warp + g + 8 * h;
        const int64_t tok = tok0 + tl;
        if (tok >= a.n) continue;
        float *yt = a.y + tok * a.rows + row0;
        Red *pt = part + ((int64_t)split * a.n + tok) * a.rows + row0;
#pragma unroll
        for (int j = 0; j < 16; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int rl = 8 * j + 2 * t + e;
                if (row0 + rl >= a.rows) continue;
                const Red v = d[4 * j + 2 * h + e];
                if (ksplit > 1) pt[rl] = v;
                else if constexpr (I8) yt[rl] = __fdiv_rn(__fmul_rn(s_scale[rl], (float)v), s_sx[tl]);
                else yt[rl] = s_scale[rl] * v;
            }
    }
    if (ksplit == 1) return;
    __threadfence();
    __syncthreads();
    int *ctr = a.counters + (int64_t)blockIdx.y * gridDim.x + blockIdx.x;
    if (tid == 0) s_last = atomicAdd(ctr, 1) == ksplit - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    tern_mm::reduce_splits<I8, 0, THREADS, WG_BN, BM, 16>(a, part, ksplit, row0, tok0);
    if (tid == 0) *ctr = 0;
}

/* cuTensorMapEncodeTiled through the runtime's driver entry point (no link
 * against libcuda) */
int encode_2d(CUtensorMap *map, CUtensorMapDataType dt, const void *base, uint64_t inner,
              uint64_t outer, uint64_t stride_bytes, uint32_t box_inner, uint32_t box_outer,
              CUtensorMapSwizzle swz_mode) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        void *fn = nullptr;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                             &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess || !fn)
            return err_set("tern_gemm_wg: cuTensorMapEncodeTiled is not available from the driver");
        encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }
    const cuuint64_t dims[2] = {inner, outer}, strides[1] = {stride_bytes};
    const cuuint32_t box[2] = {box_inner, box_outer}, estr[2] = {1, 1};
    const CUresult r = encode(map, dt, 2, const_cast<void *>(base), dims, strides, box, estr,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, swz_mode,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return err_set("tern_gemm_wg: cuTensorMapEncodeTiled failed (%d) for a %llu x %llu tensor",
                       (int)r, (unsigned long long)outer, (unsigned long long)inner);
    return 0;
}

template <int ACT, int WGS>
int launch_wg(const TernKArgs *a0, cudaStream_t s) {
    using C_ = WgCfg<WGS>;
    auto kern = tern_gemm_wg_kernel<ACT, WGS>;
    static int attr_dev = -1;
    int dev;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (attr_dev != dev) {
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C_::SMEM));
        int per_sm = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, C_::THREADS, C_::SMEM));
        if (per_sm < 1)
            return err_set("tern_gemm_wg: a %d-thread CTA with %d bytes of shared memory does not "
                           "fit on this GPU",
                           C_::THREADS, C_::SMEM);
        attr_dev = dev;
    }
    int n_sm;
    CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    TernKArgs a = *a0;
    const int64_t gx = (a.rows + WG_BN - 1) / WG_BN, gy = (a.n + C_::BM - 1) / C_::BM;
    if (gx > 0x7fffffff || gy > 65535)
        return err_set("tern_gemm_wg: %lld rows x %lld tokens is too large for one launch",
                       (long long)a.rows, (long long)a.n);
    /* split K until the grid covers the SMs, keeping >= 4 stages per split */
    const int64_t KT = (int64_t)a.planes * a.kblocks * (ACT == TACT_I8 ? 1 : 2), tiles = gx * gy;
    int64_t ks = (n_sm + tiles - 1) / tiles;
    if (ks > KT / 4) ks = KT / 4;
    if (ks > 64) ks = 64;
    if (ks < 1) ks = 1;
    if (ks > 1 && tern_mm::scratch(ks * a.n * a.rows, tiles, &a.partial, &a.counters) < 0) return -1;
    /* the activations: planes stacked along the rows (f32 = 3 bf16 planes) */
    constexpr int esz = ACT == TACT_I8 ? 1 : 2;
    if (a.planes > 1 && a.plane_stride != a.n * a.ldx)
        return err_set("tern_gemm_wg: activation planes must be contiguous (internal)");
    if ((int64_t)a.planes * a.n > 0x7fffffff || a.cols > 0x7fffffff || a.row_bytes > 0x7fffffff)
        return err_set("tern_gemm_wg: %lld tokens x %lld columns is too large for one launch",
                       (long long)a.n, (long long)a.cols);
    CUtensorMap tmx, tmc;
    if (encode_2d(&tmx, ACT == TACT_I8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                  a.x, (uint64_t)a.cols, (uint64_t)(a.planes * a.n), (uint64_t)(a.ldx * esz),
                  128 / esz, C_::BM, CU_TENSOR_MAP_SWIZZLE_128B) < 0 ||
        encode_2d(&tmc, CU_TENSOR_MAP_DATA_TYPE_UINT8, a.codes, (uint64_t)a.row_bytes,
                  (uint64_t)a.rows, (uint64_t)a.row_bytes, 64, WG_BN, CU_TENSOR_MAP_SWIZZLE_64B) < 0)
        return -1;
    kern<<<dim3((unsigned)gx, (unsigned)gy, (unsigned)ks), C_::THREADS, C_::SMEM, s>>>(a, (int)ks,
                                                                                    tmx, tmc);
    CUDA_CHECK_LAUNCH("tern_gemm_wg_kernel");
    return 0;
}

} // namespace

/* act: TACT_BF16 (planes >= 1) or TACT_I8; one scale per row (gu = 0). */
int tern_gemm_wg_launch(int act, const TernKArgs *a, cudaStream_t s) {
    if (a->n < 1) return err_set("tern_gemm_wg: n = %lld", (long long)a->n);
    if (a->gu != 0)
        return err_set("tern_gemm_wg: the wgmma GEMM takes one scale per row (group of %lld "
                       "columns given)",
                       (long long)a->group_cols);
    if (!a->x_vec)
        return err_set("tern_gemm_wg: activations must be 16-byte aligned rows (internal: pad "
                       "them first)");
    switch (act) {
    case TACT_BF16: return a->n > 64 ? launch_wg<TACT_BF16, 2>(a, s) : launch_wg<TACT_BF16, 1>(a, s);
    case TACT_I8: return a->n > 64 ? launch_wg<TACT_I8, 2>(a, s) : launch_wg<TACT_I8, 1>(a, s);
    default: return err_set("tern_gemm_wg: activation type %d (f32 goes as bf16 planes)", act);
    }
}
