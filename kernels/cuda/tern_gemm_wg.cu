/* tern_gemm_wg.cu — the ternary GEMM for prefill and batches (n > 16 tokens,
 * one scale per row) on Hopper's warpgroup tensor cores (wgmma).
 *
 * y (n, rows) = x (n, cols) @ W^T as D = A B with A = the weights (the wgmma
 * M side: 64 rows per warpgroup, 2 warpgroups = 128 rows per CTA), decoded
 * from their 2-bit codes straight into the A register fragments, and B = the
 * activations (NT = 64, 128 or 256 tokens: the wgmma N), K-major in shared
 * memory with the 128-byte swizzle.  A stage covers 256 bytes of K per token:
 * 256 int8 columns (one 64-byte code block) or 128 bf16 columns (half a
 * block).  In the fragment order of m16n8k32 (int8) / m16n8k16 (bf16) a
 * thread's k slots are consecutive columns of one field of its code words,
 * so no activation is permuted (frags() below).
 *
 * Data movement is TMA: per stage one thread issues the two 128-byte halves
 * of the activation tile and the 128 x 64-byte code tile (64-byte swizzle:
 * the fragment reads are conflict-free), completing on the slot's mbarrier;
 * outside the tensors the boxes read zeros (columns past cols, tokens past
 * n, rows past rows).  Per stage kt (two A register sets): wgmmas of kt
 * (asynchronous) | wait for kt - 1's | one barrier | copies of kt + ST - 1
 * into kt - 1's slot | fragments of kt + 1 into kt - 1's register set
 * while kt's run (one A set: see the ONE_A loop).  Tiles of 64 - 256
 * tokens have a producer warpgroup instead (PW): one thread issues every
 * stage's copies as soon as the 8 consumer warps have released the slot
 * (an mbarrier per slot), and the consumers never meet at a barrier in the
 * loop: at M = 2048, bf16 0.86-0.91x -> 0.93-1.00x cuBLAS BF16 on the
 * K = 4096 / 14336 shapes (H200, same run; int8 there within 1.5 %, int8
 * at 64 - 256 tokens 3-27 % faster).  Each
 * code is decoded once per CTA and feeds NT tokens; the weights never pass
 * through shared memory.
 *
 * int8 accumulates exact s32 sums (y = s_row * sum / s_tok, bit-identical to
 * tern_matmul_i8_ref; the quotient by tern_mm::div_rn_by, not div.rn, whose
 * slow-path checks cost 15-20 % at M = 2048); bf16 (f32 = three bf16 planes
 * stacked along the rows of the activation tensor) accumulates f32.  Tiles
 * of >= 64 tokens without a K split stage y in shared memory and store it
 * with the copy engine (2-5 % at M = 2048 over direct stores).  Small grids
 * split K, and grids of >= 64-token tiles with a partial last wave may split
 * only that wave's tiles (tern_wg_plan.c; partials per split tile); the
 * partials are reduced in split order (tern_mm.cuh), so results do not
 * depend on the schedule.
 *
 * Versions (H200, 2026-11-29; NOTES.md): the mma.sync kernel of tern_mm.cuh
 * (tern_gemm.cu, kept for grouped scales) runs near 530 int8 TOPS; the
 * first wgmma version (dev/tern_gemm_wg_v1.cu: weights decoded into a
 * swizzled shared-memory B tile, activations as A) reached 0.98-1.31x cuBLAS
 * BF16 at M = 2048 with int8 and 0.65-0.70x with bf16, limited by shared
 * memory traffic (each stage wrote and re-read the decoded tile). */
#include <algorithm>
#include <atomic>
#include <stdio.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "cuda/cuda_util.h"
#include "cuda/tern_launch.cuh"
#include "cuda/tern_mbar.cuh"
#include "cuda/tern_mm.cuh"
#include "cuda/tern_wg_plan.h"


namespace {

constexpr int WG_BN = TERN_WG_ROWS;     /* weight rows per CTA: 2 warpgroups x 64 */
constexpr int WG_THREADS = 256;
constexpr int WG_CBYTES = WG_BN * 64;   /* codes of one stage (one 64-byte block per row) */
/* the producer warpgroup's kernels (PW): 384 threads launched with 168
 * registers each; setmaxnreg moves them to 40 (producer) and 232 (the two
 * consumer warpgroups), which needs the whole pool: 40 x 128 + 232 x 256 =
 * 168 x 384 (launch_wg checks the compiled count) */
constexpr int PW_THREADS = WG_THREADS + 128, PW_PRODUCER_REGS = 40, PW_CONSUMER_REGS = 232;

/* The grid.  Kernels without the producer warpgroup: (row tiles, token
 * tiles, K splits), every tile split ks ways.  With it (FLAT): one
 * dimension, the first `full` tiles (row tile fastest, then token tile) one
 * CTA each, then the remaining `tail` tiles split ks ways (split-major:
 * every tail tile's split 0, then split 1, ...), so that only the last
 * wave's tiles need be split (tern_wg_plan.c). */
struct WgGrid {
    int gx, full, tail, ks;
};
/* A CTA's tile (in grid order) and K split.  FLAT reads its index with a
 * volatile move, so that the epilogue can take it afresh instead of keeping
 * it in registers through the main loop (the 3-D grid's indices are
 * special registers, reread for free). */
struct WgPlace {
    int tile, split, ksplit;
    int64_t row0, tok0;
};
template <bool FLAT, int NT>
__device__ __forceinline__ WgPlace wg_place(const WgGrid &gr) {
    WgPlace p;
    if constexpr (FLAT) {
        int b;
        asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(b));
        const bool tail = b >= gr.full;
        p.tile = tail ? gr.full + (b - gr.full) % gr.tail : b;
        p.split = tail ? (b - gr.full) / gr.tail : 0;
        p.ksplit = tail ? gr.ks : 1;
        p.row0 = (int64_t)(p.tile % gr.gx) * TERN_WG_ROWS;
        p.tok0 = (int64_t)(p.tile / gr.gx) * NT;
    } else { /* gy = 1 here (tiles of <= 32 tokens hold n <= 32), so tile < 2^31 */
        p.tile = (int)(blockIdx.y * gridDim.x + blockIdx.x);
        p.split = (int)blockIdx.z;
        p.ksplit = gr.ks;
        p.row0 = (int64_t)blockIdx.x * TERN_WG_ROWS;
        p.tok0 = (int64_t)blockIdx.y * NT;
    }
    return p;
}

#ifndef TERN_WG_EARLY
#define TERN_WG_EARLY 1 /* the first stages' codes and the row scales before the PDL wait (0: after it) */
#endif
#ifndef TERN_WG_KW_STP
#define TERN_WG_KW_STP 6 /* slots per warpgroup pair of the KW kernels (4: 0-1 % slower) */
#endif
template <int NT, int KW = 1> /* tokens per CTA: the wgmma N; KW: warpgroup pairs on K (below) */
struct WgCfg {
    /* pipeline slots: deeper for the small, memory-bound tiles; KW pairs take
     * TERN_WG_KW_STP slots each */
    static constexpr int ST = KW > 1 ? KW * TERN_WG_KW_STP : NT == 256 ? 3 : NT >= 64 ? 4 : 6;
    static constexpr int X_BYTES = NT * 256;           /* two 128-byte swizzle columns */
    static constexpr int SLOT = X_BYTES + WG_CBYTES;   /* a multiple of 1024 */
    static constexpr int SMEM = ST * SLOT + 1024;      /* + alignment */
    static constexpr bool TMA_Y = NT >= TERN_WG_STAGED_NT; /* the staged epilogue compiled in */
    static_assert(!TMA_Y || ST * SLOT >= WG_BN * NT * 4, "the staged tile fits in the slots");
    static_assert(SLOT % 1024 == 0, "swizzle atoms need 1024-byte alignment");
};

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
/* keeps the compiler from moving accesses of these registers across the
 * asynchronous MMA (accumulators; the A fragments stay in place until it is done) */
template <int N>
__device__ __forceinline__ void keep(int (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void keep(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void keep(uint32_t (&A)[8][4]) {
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) asm volatile("" : "+r"(A[i][j])::"memory");
}

/* D (64 weight rows x N tokens) += A (registers: this warp's 16 rows x K of
 * decoded weights, mma.m16n8k32 / m16n8k16 fragment order) x B (the
 * activations' descriptor, N tokens x K, K-major) */
constexpr int WG_U8 = 100; /* wgmma_rs: int8 activations, unsigned 8-bit weights */
template <int ACT, int N>
__device__ __forceinline__ void wgmma_rs(typename std::conditional<ACT != TACT_BF16, int, float>::type (&d)[N / 2],
                                         const uint32_t (&A)[4], uint64_t db);

/* The specialisations, one asm statement per N: the accumulators are
 * operands %0 .. %(N/2 - 1), then the four A registers and the descriptor. */
#define WG_R0_3 "%0, %1, %2, %3"
#define WG_R4_7 "%4, %5, %6, %7"
#define WG_R8_15 "%8, %9, %10, %11, %12, %13, %14, %15"
#define WG_R16_31 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_R32_63 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_R64_127 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define WG_REGS4 WG_R0_3
#define WG_REGS8 WG_REGS4 ", " WG_R4_7
#define WG_REGS16 WG_REGS8 ", " WG_R8_15
#define WG_REGS32 WG_REGS16 ", " WG_R16_31
#define WG_REGS64 WG_REGS32 ", " WG_R32_63
#define WG_REGS128 WG_REGS64 ", " WG_R64_127
#define WG_D4(C, i) C(d[(i)]), C(d[(i) + 1]), C(d[(i) + 2]), C(d[(i) + 3])
#define WG_D8(C, i) WG_D4(C, i), WG_D4(C, (i) + 4)
#define WG_D16(C, i) WG_D8(C, i), WG_D8(C, (i) + 8)
#define WG_D32(C, i) WG_D16(C, i), WG_D16(C, (i) + 16)
#define WG_D64(C, i) WG_D32(C, i), WG_D32(C, (i) + 32)
#define WG_OUT4(C) WG_D4(C, 0)
#define WG_OUT8(C) WG_D8(C, 0)
#define WG_OUT16(C) WG_D16(C, 0)
#define WG_OUT32(C) WG_D32(C, 0)
#define WG_OUT64(C) WG_D64(C, 0)
#define WG_OUT128(C) WG_D64(C, 0), WG_D64(C, 64)
#define WG_I8 "+r"
#define WG_F32 "+f"
/* ACT, N, accumulator type, its constraint, N / 2, the instruction, the
 * operands after the accumulators (A registers, descriptor, immediates) */
#define WG_RS(ACT_, N_, T_, C_, ND_, INSTR_, TAIL_)                                             \
    template <>                                                                                 \
    __device__ __forceinline__ void wgmma_rs<ACT_, N_>(T_(&d)[ND_], const uint32_t(&A)[4],      \
                                                       uint64_t db) {                           \
        asm volatile("{\n" INSTR_ "{" WG_REGS##ND_ "}, " TAIL_ "\n}\n"                         \
                     : WG_OUT##ND_(C_)                                                          \
                     : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(db));                    \
    }
WG_RS(TACT_I8, 32, int, WG_I8, 16, "wgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8 ",
      "{%16, %17, %18, %19}, %20, 1;")
WG_RS(TACT_I8, 64, int, WG_I8, 32, "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 ",
      "{%32, %33, %34, %35}, %36, 1;")
WG_RS(TACT_I8, 128, int, WG_I8, 64, "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 ",
      "{%64, %65, %66, %67}, %68, 1;")
WG_RS(TACT_I8, 256, int, WG_I8, 128, "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 ",
      "{%128, %129, %130, %131}, %132, 1;")
/* int8 tiles of 8 and 16 tokens: unsigned weights (the offset decoding, see OFF) */
WG_RS(WG_U8, 8, int, WG_I8, 4, "wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.s8 ",
      "{%4, %5, %6, %7}, %8, 1;")
WG_RS(WG_U8, 16, int, WG_I8, 8, "wgmma.mma_async.sync.aligned.m64n16k32.s32.u8.s8 ",
      "{%8, %9, %10, %11}, %12, 1;")
WG_RS(TACT_BF16, 8, float, WG_F32, 4, "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 ",
      "{%4, %5, %6, %7}, %8, 1, 1, 1, 0;")
WG_RS(TACT_BF16, 16, float, WG_F32, 8, "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 ",
      "{%8, %9, %10, %11}, %12, 1, 1, 1, 0;")
WG_RS(TACT_BF16, 32, float, WG_F32, 16, "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 ",
      "{%16, %17, %18, %19}, %20, 1, 1, 1, 0;")
WG_RS(TACT_BF16, 64, float, WG_F32, 32, "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 ",
      "{%32, %33, %34, %35}, %36, 1, 1, 1, 0;")
WG_RS(TACT_BF16, 128, float, WG_F32, 64, "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 ",
      "{%64, %65, %66, %67}, %68, 1, 1, 1, 0;")
WG_RS(TACT_BF16, 256, float, WG_F32, 128, "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 ",
      "{%128, %129, %130, %131}, %132, 1, 1, 1, 0;")
#undef WG_RS
#undef WG_OUT128
#undef WG_OUT64
#undef WG_OUT32
#undef WG_OUT16
#undef WG_OUT8
#undef WG_OUT4

/* tmx: the activations as (planes * n rows, cols) with 128-byte boxes of NT
 * rows, 128-byte swizzle; tmc: the codes as (rows, row_bytes) with 64-byte
 * boxes of 128 rows, 64-byte swizzle.  Both zero-fill outside the tensor. */
/* MC (PW only): CTAs in clusters of 2 on the same token tile and K range
 * (tern_wg_multicast) — each copies one of the stage's two activation
 * halves into both (multicast), halving the activations' L2 reads; a slot
 * is refilled once both CTAs' consumers are done with it (their warps
 * arrive on both CTAs' empty barriers). */
/* KW (int8 tiles of <= 16 tokens): KW pairs of consumer warpgroups (256 KW
 * threads) share the tile, pair p taking stages kt0 + p, kt0 + p + KW, ...
 * into slots of its own (TERN_WG_KW_STP each, its own issuing thread and
 * named barrier); after the loop the pairs' sums meet in shared memory and
 * pair 0 alone runs the epilogue.  The stage chain of a 16-token tile
 * (decode, 8 wgmmas, wait, barrier) is latency-bound at two warps per
 * scheduler (NOTES.md): this puts more warps on the same tile without a
 * split's partials in global memory. */
template <int ACT, int NT, bool ONE_A, bool PW, bool MC = false, int KW = 1>
__device__ __forceinline__ void wg_gemm(const TernKArgs &a, const WgGrid &gr, const CUtensorMap &tmx,
                                        const CUtensorMap &tmc, const CUtensorMap &tmy, int tma_y) {
    using C_ = WgCfg<NT, KW>;
    constexpr bool I8 = ACT == TACT_I8;
    constexpr int ST = C_::ST, ND = NT / 2; /* accumulators per thread */
    /* Offset decoding (int8, tiles of <= 16 tokens, where the decoding is a
     * large share of the work per byte): the weights enter the MMA as the
     * unsigned codes c = w + 1 in {0, 1, 2} masked in place, without shifting
     * (one AND per 4 weights instead of shift, mask, add, xor): fields 0 and 2
     * (after one shift of the word by 4) as c, fields 1 and 3 as 4c, summed
     * into two accumulator sets; then sum w x = S1 + S4 / 4 - sum x (exact:
     * S4 is a multiple of 4), with sum x over this CTA's columns taken from
     * the activation tiles in shared memory (one 16-byte load and four dp4a
     * per thread and stage). */
    constexpr bool OFF = I8 && NT <= 16;
    static_assert(OFF || !ONE_A, "one A register set only with the offset decoding");
    static_assert(!PW || !ONE_A, "the producer warp feeds the two-set loop");
    static_assert(PW || !MC, "multicast copies with the producer warpgroup only");
    static_assert(KW == 1 || (OFF && !PW), "warpgroup pairs on K: the offset-decoded int8 tiles only");
    constexpr int STP = ST / KW; /* slots per pair */
    using Acc = typename std::conditional<I8, int, float>::type;
    extern __shared__ uint8_t smem_raw[];
    __shared__ int s_last;
    __shared__ float s_scale[WG_BN], s_sx[NT]; /* the tile's row and token scales */
    __shared__ float s_rx[I8 ? NT : 1];          /* int8: __frcp_rn of the token scales */
    __shared__ int s_xs[NT];                     /* OFF: sum x per token over this split */
    __shared__ __align__(8) uint64_t s_full[ST]; /* a slot's copies have landed */
    __shared__ __align__(8) uint64_t s_empty[PW ? ST : 1]; /* PW: the 8 consumer warps are done with a slot */
    /* 1024-byte aligned base (the swizzle pattern repeats every 1024 bytes) */
    const uint32_t raw_s = (uint32_t)__cvta_generic_to_shared(smem_raw);
    uint8_t *smem = smem_raw + ((1024 - (raw_s & 1023)) & 1023);
    const uint32_t smem_s = (uint32_t)__cvta_generic_to_shared(smem);
    const uint32_t full_s = (uint32_t)__cvta_generic_to_shared(s_full);
    const uint32_t empty_s = (uint32_t)__cvta_generic_to_shared(s_empty);
    /* PW: thread 256 (warpgroup 2) only issues the copies; the 256 consumer
     * threads meet at named barrier 1 after the main loop */
    auto csync = [&] {
        if constexpr (PW || KW > 1) asm volatile("bar.sync 1, 256;\n" ::: "memory");
        else __syncthreads();
    };

    /* KW: kh the pair, ptid the thread within it; kh and wg through
     * __shfl_sync, so that ptxas knows them warp-uniform (else it serialised
     * the KW kernels' wgmmas, warning C7520: two sets 121 -> 110 registers;
     * H200 M = 16 14336 x 4096 9.5 -> 8.4 us, 36864 x 4608 one pair 20.4 ->
     * 19.9) */
    const int tid = threadIdx.x, kh = KW > 1 ? __shfl_sync(0xffffffffu, tid >> 8, 0) : 0, ptid = tid & (WG_THREADS - 1);
    const int wg = __shfl_sync(0xffffffffu, ptid >> 7, 0), q = (tid >> 5) & 3, lane = tid & 31;
    const int sb = kh * STP; /* the pair's first slot */
    const int g = lane >> 2, t = lane & 3;
    /* this CTA's tile and K split (taken again for the epilogue) */
    WgPlace pl = wg_place<PW, NT>(gr);
    int64_t row0 = pl.row0, tok0 = pl.tok0;
    int split = pl.split, ksplit = pl.ksplit;
    constexpr int SPB = I8 ? 1 : 2; /* stages per code block */
    constexpr int esz = I8 ? 1 : 2;
    /* 32-bit stage counters, advanced incrementally: no 64-bit division in
     * the loop (it cost more instructions than the decoding) */
    const int SPP = (int)a.kblocks * SPB, KT = a.planes * SPP;
    const int kt0 = (int)((int64_t)KT * split / ksplit), kt1 = (int)((int64_t)KT * (split + 1) / ksplit);

    /* thread 0 (PW: thread 256, the producer) issues a stage's copies: the
     * codes of its block and two 128-byte halves of activations (MC: one,
     * into both CTAs) */
    int i_plane = (kt0 + kh) / SPP, i_sp = (kt0 + kh) % SPP; /* the next stage to issue (KW: of this pair) */
    const uint32_t crank = MC ? tern_mbar::cluster_rank() : 0;
    auto next_stage = [&](int &plane, int &sp) { /* (KW: this pair's next) */
        if constexpr (KW > 1) {
            for (sp += KW; sp >= SPP; sp -= SPP) plane++;
        } else if (++sp == SPP) {
            sp = 0, plane++;
        }
    };
    auto issue_codes = [&](int slot, int sp) { /* with the slot's whole expectation */
        const uint32_t bar = full_s + 8 * slot;
        tern_mbar::expect_tx(bar, C_::SLOT); /* (MC: an activation half comes from the other CTA) */
        tern_mbar::tma_load_2d(smem_s + slot * C_::SLOT + C_::X_BYTES, &tmc, (sp / SPB) * 64, (int)row0, bar);
    };
    auto issue_x = [&](int slot, int plane, int sp) {
        const uint32_t dst = smem_s + slot * C_::SLOT, bar = full_s + 8 * slot;
        const int col0 = sp * (256 / esz), xrow = plane * (int)a.n + (int)tok0;
        if constexpr (MC) {
            tern_mbar::tma_load_2d_mc(dst + crank * (NT * 128), &tmx, col0 + (int)crank * (128 / esz), xrow, bar,
                                      (uint16_t)3);
        } else {
            tern_mbar::tma_load_2d(dst, &tmx, col0, xrow, bar);
            tern_mbar::tma_load_2d(dst + NT * 128, &tmx, col0 + 128 / esz, xrow, bar);
        }
    };
    auto issue = [&](int slot) {
        issue_codes(slot, i_sp);
        issue_x(slot, i_plane, i_sp);
        next_stage(i_plane, i_sp);
    };

    /* Launched as a programmatic dependent, this grid may start while the
     * previous one runs: the barriers (and the tensor maps' prefetch) before
     * the wait, set up by the thread that issues the copies, and the first
     * ST - 1 stages' codes (PW: ST; KW: each pair's issuer, its first STP - 1)
     * with the row scales, which depend on no kernel (TERN_WG_EARLY 0: after
     * the wait, as the activations).  The activations of those stages go out
     * ahead of the token scales' loads (1-2 % faster at M = 64..2048),
     * except for the offset-decoded int8 tiles of 8 / 16 tokens, where after
     * them is 2-5 % faster (but 4096 x 4096: 7.1 vs 6.9 us; H200, same run). */
    constexpr int ISSUER = PW ? WG_THREADS : 0;
    if (tid == ISSUER) {
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmc)) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmx)) : "memory");
        for (int i = 0; i < ST; i++) tern_mbar::init(full_s + 8 * i, 1);
        if constexpr (PW) /* MC: the consumer warps of both CTAs */
            for (int i = 0; i < ST; i++) tern_mbar::init(empty_s + 8 * i, (MC ? 2 : 1) * WG_THREADS / 32);
        tern_mbar::init_fence();
    }
    if constexpr (MC) tern_mbar::cluster_sync(); /* both CTAs' barriers set before any copy */
    const bool issuer = PW ? tid == ISSUER : ptid == 0;
    const int NFIRST = PW ? ST : STP - 1; /* stages issued before the main loop */
    if constexpr (TERN_WG_EARLY) {
        if constexpr (KW > 1) __syncthreads(); /* (pair 1's issuer: the barriers set by thread 0) */
        if (issuer)
            for (int p = 0, pl = i_plane, sp = i_sp; p < NFIRST && kt0 + kh + p * KW < kt1; p++) {
                issue_codes(sb + p, sp);
                next_stage(pl, sp);
            }
    }
    for (int i = tid; i < WG_BN; i += WG_THREADS)
        s_scale[i] = row0 + i < a.rows ? a.scales[(row0 + i) * a.scale_stride] : 0.0f;
    pdl_wait();
    pdl_trigger(); /* the next kernel may take its place in the queue now */
    auto first_copies = [&] {
        if (issuer)
            for (int p = 0; p < NFIRST && kt0 + kh + p * KW < kt1; p++) {
                if (!TERN_WG_EARLY) issue_codes(sb + p, i_sp);
                issue_x(sb + p, i_plane, i_sp);
                next_stage(i_plane, i_sp);
            }
    };
    if constexpr (!OFF) first_copies();
    /* int8: the epilogue divides by the token scales with div_rn_by where
     * every scale of the tile allows it (any other: __fdiv_rn throughout) */
    int slow_div = 0;
    if constexpr (I8) {
        for (int i = tid; i < WG_BN; i += WG_THREADS) /* (the row scales this thread stored) */
            slow_div |= !tern_mm::div_scale_ok(s_scale[i], true);
        for (int i = tid; i < NT; i += WG_THREADS) {
            const float sx = tok0 + i < a.n ? a.sx[tok0 + i] : 1.0f;
            s_sx[i] = sx;
            s_rx[i] = __frcp_rn(sx);
            slow_div |= !tern_mm::div_scale_ok(sx, false);
        }
    }
    if constexpr (OFF)
        for (int i = tid; i < NT; i += WG_THREADS) s_xs[i] = 0;
    if constexpr (I8) slow_div = __syncthreads_or(slow_div);
    else __syncthreads();
    if constexpr (OFF) first_copies();
    if constexpr (PW) { /* registers move from the producer warpgroup to the consumers */
        if (tid >= WG_THREADS) { /* the producer: stage j into slot (j - kt0) % ST once the
                                  * consumers released its previous use */
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PW_PRODUCER_REGS) : "memory");
            if (tid == WG_THREADS) /* the first ST stages went out above */
                for (int j = kt0 + ST, sl = 0, use = 1; j < kt1; j++) {
                    tern_mbar::wait(empty_s + 8 * sl, (use - 1) & 1);
                    issue(sl);
                    if (++sl == ST) sl = 0, use++;
                }
            if constexpr (MC) tern_mbar::cluster_sync(); /* (the consumers' one after their loop) */
            return;
        }
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(PW_CONSUMER_REGS) : "memory");
    }

    /* The A fragments of a stage, decoded from the codes in shared memory (row
     * r at r * 64, 16-byte chunk j at (j ^ ((r >> 1) & 3)) * 16: 64-byte
     * swizzle, conflict-free here).  This thread's rows: 64 wg + 16 q + g and
     * + 8.  Byte b, field f of a row's block holds column 64 f + b.
     * int8, k step s (32 columns): field s >> 1, bytes 32 (s & 1) + 4t.. (a0,
     * a1) and + 16 (a2, a3): the words of chunks 2 (s & 1) and 2 (s & 1) + 1.
     * bf16, k step s (16 of the stage's 128 columns): field 2 hs + (s >> 2),
     * bytes 16 (s & 3) + 2t, +1 (a0, a1) and + 8 (a2, a3). */
    const int rA = 64 * wg + 16 * q + g;
    /* this thread's word in row rA of a slot's code tile, and the row's swizzle (the same for
     * row rA + 8: (rA + 8) >> 1 = (rA >> 1) + 4), formed once: per stage only the slot moves */
    const uint32_t w_off = (uint32_t)(C_::X_BYTES + rA * 64 + (I8 ? 4 * t : 4 * (t >> 1)));
    const uint32_t w_sw = (uint32_t)(((rA >> 1) & 3) << 4);
    auto words = [&](int slot, uint32_t (&w)[2][4]) {
        const uint8_t *c = smem + slot * C_::SLOT + w_off;
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const uint8_t *cr = c + hh * (8 * 64);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint8_t *ch = cr + ((uint32_t)(j << 4) ^ w_sw);
                if constexpr (I8) {
                    w[hh][j] = *reinterpret_cast<const uint32_t *>(ch);
                } else {
                    const uint32_t u = *reinterpret_cast<const uint32_t *>(ch);
                    const uint32_t v = *reinterpret_cast<const uint32_t *>(ch + 8);
                    /* bytes 2t, 2t+1, 8+2t, 9+2t, then reordered (b0 b2 b1 b3) so
                     * that the decoder's pairs are (b0, b1) and (b2, b3) */
                    const uint32_t x = __byte_perm(u, v, (t & 1) ? 0x7632 : 0x5410);
                    w[hh][j] = __byte_perm(x, 0, 0x3120);
                }
            }
        }
    };
    auto decode = [&](int st, const uint32_t (&w)[2][4], uint32_t (&A)[8][4]) {
        if constexpr (OFF) {
#pragma unroll
            for (int o = 0; o < 2; o++) {
                const uint32_t v[4] = {w[0][2 * o], w[1][2 * o], w[0][2 * o + 1], w[1][2 * o + 1]};
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const uint32_t hi = v[r] >> 4;
                    A[o][r] = v[r] & 0x03030303u;     /* field 0: c */
                    A[2 + o][r] = v[r] & 0x0C0C0C0Cu; /* field 1: 4c */
                    A[4 + o][r] = hi & 0x03030303u;   /* field 2: c */
                    A[6 + o][r] = hi & 0x0C0C0C0Cu;   /* field 3: 4c */
                }
            }
        } else if constexpr (I8) {
            auto field = [&](auto Fc) {
                constexpr int F = decltype(Fc)::value;
#pragma unroll
                for (int o = 0; o < 2; o++) {
                    const int s = 2 * F + o;
                    A[s][0] = tern_dec_i8<F>(w[0][2 * o]);
                    A[s][1] = tern_dec_i8<F>(w[1][2 * o]);
                    A[s][2] = tern_dec_i8<F>(w[0][2 * o + 1]);
                    A[s][3] = tern_dec_i8<F>(w[1][2 * o + 1]);
                }
            };
            field(std::integral_constant<int, 0>());
            field(std::integral_constant<int, 1>());
            field(std::integral_constant<int, 2>());
            field(std::integral_constant<int, 3>());
        } else {
            auto field = [&](auto Fc, int half) {
                constexpr int F = decltype(Fc)::value;
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int s = 4 * half + j;
                    A[s][0] = tern_dec_bf16<F>(w[0][j]);
                    A[s][1] = tern_dec_bf16<F>(w[1][j]);
                    A[s][2] = tern_dec_bf16<F>(w[0][j] >> 8);
                    A[s][3] = tern_dec_bf16<F>(w[1][j] >> 8);
                }
            };
            if ((st & 1) == 0) { /* SPP is even: the stage's half of the block */
                field(std::integral_constant<int, 0>(), 0);
                field(std::integral_constant<int, 1>(), 1);
            } else {
                field(std::integral_constant<int, 2>(), 0);
                field(std::integral_constant<int, 3>(), 1);
            }
        }
    };
    auto frags = [&](int slot, int st, uint32_t (&A)[8][4]) {
        uint32_t w[2][4];
        words(slot, w);
        decode(st, w, A);
    };

    Acc d[ND], d4[OFF ? ND : 1]; /* OFF: d = S1, d4 = S4 */
#pragma unroll
    for (int i = 0; i < ND; i++) d[i] = 0;
#pragma unroll
    for (int i = 0; i < (OFF ? ND : 1); i++) d4[i] = 0;
    int xs = 0; /* OFF: this thread's part of sum x, token (tid % (8 NT)) / 8 */

    /* ST - 1 stages in flight (two A register sets: the loop below).  ONE_A
     * (offset decoding: 8 ANDs and one shift per code word) keeps one A
     * register set, decoded after the wait from code words loaded while the
     * wgmmas run: 66 / 78 registers for 8 / 16 tokens instead of 107 for
     * the two-set 16-token kernel, 3 CTAs per SM instead of 2. */
    int slot = sb;
    /* every warpgroup (KW: of this pair) is done with a slot */
    auto pair_sync = [&] {
        if constexpr (KW > 1) asm volatile("bar.sync %0, 256;\n" ::"r"(1 + kh) : "memory");
        else __syncthreads();
    };
    auto mmas = [&](const uint32_t (&A)[8][4]) {
        /* a k step adds its byte offset / 16 to the descriptor's address field
         * (no carry: shared addresses are < 256 KB) */
        const uint64_t db = wg_desc(smem_s + slot * C_::SLOT);
        wg_fence();
#pragma unroll
        for (int s = 0; s < 8; s++) {
            const uint64_t dbs = db + ((uint64_t)((s >> 2) * (NT * 128) + (s & 3) * 32) >> 4);
            if constexpr (!OFF) wgmma_rs<ACT, NT>(d, A[s], dbs);
            else if ((s >> 1) & 1) wgmma_rs<WG_U8, NT>(d4, A[s], dbs);
            else wgmma_rs<WG_U8, NT>(d, A[s], dbs);
        }
        wg_commit();
        if constexpr (OFF) { /* sum x of this stage's tile (16-byte chunks, rows of 128 bytes) */
            constexpr int CH = C_::X_BYTES / 16;
            const uint8_t *xt = smem + slot * C_::SLOT;
#pragma unroll
            for (int j = 0; j < (CH + WG_THREADS - 1) / WG_THREADS; j++)
                if (CH >= WG_THREADS || ptid < CH) {
                    const uint4 v = *reinterpret_cast<const uint4 *>(xt + 16 * (ptid + WG_THREADS * j));
                    xs = __dp4a((int)v.x, 0x01010101, xs);
                    xs = __dp4a((int)v.y, 0x01010101, xs);
                    xs = __dp4a((int)v.z, 0x01010101, xs);
                    xs = __dp4a((int)v.w, 0x01010101, xs);
                }
        }
    };
    /* the end of stage kt (one A set): waits for the wgmmas, then one barrier */
    auto finish = [&](uint32_t (&A)[8][4], int nslot) {
        wg_wait<0>();
        keep(d);
        if constexpr (OFF) keep(d4);
        keep(A);
        pair_sync();
        slot = nslot;
    };
    /* the phase of the next stage's slot, ((kt + 1 - kt0) / ST) & 1, advanced as the ring wraps
     * (next_slot is called once per stage, in order) */
    int nphase = 0;
    auto next_slot = [&](int kt) {
        const int nslot = slot == sb + STP - 1 ? sb : slot + 1;
        if (nslot == sb) nphase ^= 1;
        if (kt + KW < kt1) tern_mbar::wait(full_s + 8 * nslot, nphase);
        return nslot;
    };
    /* the slot of the stage before (free after this stage's barrier), and the stage
     * that goes into it: ST - 1 (KW: STP - 1 of this pair's) stages ahead */
    auto prev_slot = [&] { return slot == sb ? sb + STP - 1 : slot - 1; };
    constexpr int AHEAD = (STP - 1) * KW;
    if constexpr (ONE_A) {
        uint32_t w[2][4], A[8][4];
        if (kt0 + kh < kt1) {
            tern_mbar::wait(full_s + 8 * sb, 0);
            words(sb, w);
        }
        for (int kt = kt0 + kh; kt < kt1; kt += KW) {
            if (ptid == 0 && kt + AHEAD < kt1) issue(prev_slot());
            decode(kt, w, A);
            mmas(A);
            const int nslot = next_slot(kt);
            if (kt + KW < kt1) words(nslot, w);
            finish(A, nslot);
        }
    } else {
        uint32_t A0[8][4], A1[8][4];
        keep(d);
        if constexpr (OFF) keep(d4);
        if (kt0 + kh < kt1) {
            tern_mbar::wait(full_s + 8 * sb, 0);
            frags(sb, kt0 + kh, A0);
        }
        /* one stage's wgmmas stay in flight across the stage boundary: stage
         * kt's are issued, then the wait for kt - 1's (its A set and slot
         * are free after it), the barrier, kt + ST - 1's copies into that
         * slot and kt + 1's fragments into that A set, so the tensor cores
         * are not drained at every stage */
        auto step = [&](int kt, uint32_t (&Acur)[8][4], uint32_t (&Anxt)[8][4]) {
            mmas(Acur);
            wg_wait<1>();
            if constexpr (PW) { /* this warp is done with kt - 1's slot (MC: in both CTAs) */
                if (kt > kt0 && lane == 0) {
                    const uint32_t eb = empty_s + 8 * (slot == 0 ? ST - 1 : slot - 1);
                    tern_mbar::arrive(eb);
                    if constexpr (MC) tern_mbar::arrive_cluster(eb, crank ^ 1u);
                }
            } else {
                pair_sync(); /* (of kt - 1's slot) */
                if (ptid == 0 && kt + AHEAD < kt1) issue(prev_slot());
            }
            const int nslot = next_slot(kt);
            if (kt + KW < kt1) frags(nslot, kt + KW, Anxt);
            slot = nslot;
        };
        for (int kt = kt0 + kh; kt < kt1; kt += 2 * KW) {
            step(kt, A0, A1);
            if (kt + KW < kt1) step(kt + KW, A1, A0);
        }
        wg_wait<0>();
        keep(d);
        if constexpr (OFF) keep(d4);
        /* MC: every copy into this CTA has landed (its consumers waited for each stage) and every
         * arrival on the other CTA's barriers is made: neither CTA touches the other's shared
         * memory after this, so either may leave */
        if constexpr (MC) tern_mbar::cluster_sync();
    }

    if constexpr (OFF) { /* the 8 lanes of a token's 128-byte row, then the rows' threads */
        static_assert(WG_THREADS % (8 * NT) == 0, "one token per thread");
        xs += __shfl_xor_sync(0xffffffffu, xs, 1);
        xs += __shfl_xor_sync(0xffffffffu, xs, 2);
        xs += __shfl_xor_sync(0xffffffffu, xs, 4);
        constexpr int CH = C_::X_BYTES / 16;
        if ((lane & 7) == 0 && (CH >= WG_THREADS || ptid < CH))
            atomicAdd(&s_xs[(ptid % (8 * NT)) / 8], xs);
        __syncthreads();
    }
    if constexpr (KW > 1) { /* the pairs' sums into pair 0's (the slots are free: every copy
                             * was waited for, every wgmma is done); S1 + S4 / 4 is exact */
        int *red = reinterpret_cast<int *>(smem);
        static_assert(C_::ST * C_::SLOT >= (KW - 1) * WG_THREADS * ND * 4, "the sums fit in the slots");
        if (kh > 0)
#pragma unroll
            for (int i = 0; i < ND; i++)
                red[((kh - 1) * ND + i) * WG_THREADS + ptid] = d[i] + (d4[i] >> 2);
        __syncthreads();
        if (kh > 0) return;
#pragma unroll
        for (int p = 1; p < KW; p++)
#pragma unroll
            for (int i = 0; i < ND; i++) d[i] += red[((p - 1) * ND + i) * WG_THREADS + ptid];
    }
    /* d[4j + 2h + e]: weight row 64 wg + 16 q + g + 8h, token 8j + 2t + e;
     * y as finalize_out computes it, with the scales from shared memory (the
     * int8 quotient by div_rn_by: one loop per division, so the fast one has
     * no branch).  Written either straight to y (4 rows x 8 tokens per warp
     * store) or, where the launch gave a tensor map of y (tma_y), into
     * shared memory as 4 boxes of 32 rows x NT tokens (128-byte swizzle:
     * conflict-free here) that the copy engine stores (outside y: clipped),
     * so the CTA is not held by 64 - 128 scattered stores per thread. */
    using Red = Acc;
    pl = wg_place<PW, NT>(gr);
    row0 = pl.row0, tok0 = pl.tok0, split = pl.split, ksplit = pl.ksplit;
    /* the partials of a split tile: in y's layout, or (PW) NT x WG_BN per
     * split, tail tile after tail tile */
    Red *part = reinterpret_cast<Red *>(a.partial) +
                (PW && ksplit > 1 ? (int64_t)(pl.tile - gr.full) * ksplit * (NT * WG_BN) : 0);
    auto epilogue = [&](auto fast_div, auto staged_c) {
        constexpr bool staged = decltype(staged_c)::value;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int rl = rA + 8 * h;
            const int64_t row = row0 + rl;
            if (!staged && row >= a.rows) continue;
#pragma unroll
            for (int j = 0; j < NT / 8; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    if constexpr (I8 && NT == 32) keep(d); /* else 170 registers, one CTA per SM */
                    const int tl = 8 * j + 2 * t + e;
                    const int64_t tok = tok0 + tl;
                    if (!staged && tok >= a.n) continue;
                    Red v = d[4 * j + 2 * h + e];
                    if constexpr (OFF) v += (d4[4 * j + 2 * h + e] >> 2) - s_xs[tl];
                    if (!staged && ksplit > 1) {
                        if constexpr (PW) part[split * (NT * WG_BN) + tl * WG_BN + rl] = v;
                        else part[((int64_t)split * a.n + tok) * a.rows + row] = v;
                        continue;
                    }
                    float y;
                    if constexpr (!I8) y = s_scale[rl] * v;
                    else if constexpr (decltype(fast_div)::value)
                        y = tern_mm::div_rn_by(tern_i8_acc(s_scale[rl], (float)v), s_sx[tl], s_rx[tl]);
                    else y = tern_i8_out(s_scale[rl], (float)v, s_sx[tl]);
                    if constexpr (staged) {
                        const int r = rl & 31;
                        *reinterpret_cast<float *>(smem + (rl >> 5) * (NT * 128) + tl * 128 +
                                                   (((r >> 2) ^ (tl & 7)) << 4) + (r & 3) * 4) = y;
                    } else {
                        a.y[tok * a.rows + row] = y;
                    }
                }
        }
    };
    const bool fast = !I8 || ksplit > 1 || !slow_div;
    if (WgCfg<NT>::TMA_Y && tma_y && ksplit == 1) {
        csync(); /* both warpgroups are done with the slots */
        if (fast) epilogue(std::true_type(), std::true_type());
        else if constexpr (I8) epilogue(std::false_type(), std::true_type());
        tern_mbar::fence_async_smem();
        csync();
        if (tid == 0) {
#pragma unroll
            for (int b = 0; b < WG_BN / 32; b++)
                tern_mbar::tma_store_2d(&tmy, (int)row0 + 32 * b, (int)tok0, smem_s + b * (NT * 128));
            tern_mbar::store_commit();
            tern_mbar::store_wait_read();
        }
        return;
    }
    if (fast) epilogue(std::true_type(), std::false_type());
    else if constexpr (I8) epilogue(std::false_type(), std::false_type());
    if (ksplit == 1) return;
    __threadfence();
    csync();
    int *ctr = a.counters + pl.tile;
    if (tid == 0) s_last = atomicAdd(ctr, 1) == ksplit - 1;
    csync();
    if (!s_last) return;
    __threadfence();
    tern_mm::reduce_splits<I8, 0, WG_THREADS, WG_BN, NT, 16, PW>(a, part, ksplit, row0, tok0);
    if (tid == 0) *ctr = 0;
}

/* The kernels: 256 consumer threads that also issue the copies (tiles of
 * <= 32 tokens), or the same with a producer warpgroup (PW: 384
 * threads, 168 registers each at launch; the producer gives up all but 40,
 * the consumers take 232: one producer warp with 224-register consumers
 * does not fit, each SM sub-partition's 16K registers would hold 3 warps) */
template <int ACT, int NT, bool ONE_A, int KW = 1>
__global__ void __launch_bounds__(WG_THREADS * KW)
    tern_gemm_wg_kernel(const TernKArgs a, const WgGrid gr, const __grid_constant__ CUtensorMap tmx,
                        const __grid_constant__ CUtensorMap tmc, const __grid_constant__ CUtensorMap tmy,
                        int tma_y) {
    wg_gemm<ACT, NT, ONE_A, false, false, KW>(a, gr, tmx, tmc, tmy, tma_y);
}
template <int ACT, int NT, bool MC>
__global__ void __launch_bounds__(PW_THREADS, 1)
    tern_gemm_wg_pw_kernel(const TernKArgs a, const WgGrid gr, const __grid_constant__ CUtensorMap tmx,
                           const __grid_constant__ CUtensorMap tmc, const __grid_constant__ CUtensorMap tmy,
                           int tma_y) {
    wg_gemm<ACT, NT, false, true, MC>(a, gr, tmx, tmc, tmy, tma_y);
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

/* the kernel without multicast for a tile shape */
template <int ACT, int NT, bool ONE_A, bool PW, int KW = 1>
auto kern_of() {
    if constexpr (PW) return tern_gemm_wg_pw_kernel<ACT, NT, false>;
    else return tern_gemm_wg_kernel<ACT, NT, ONE_A, KW>;
}

/* plan: the tile (tern_wg_tile); dev, n_sm: the current device and its SM
 * count (by_tokens asked already) */
template <int ACT, int NT, bool ONE_A = false, int KW = 1>
int launch_wg(const TernKArgs *a0, TernWgPlan plan, int dev, int n_sm, cudaStream_t s) {
    using C_ = WgCfg<NT, KW>;
    constexpr bool PW = NT >= TERN_WG_PW_NT; /* plan.pw */
    auto kern = kern_of<ACT, NT, ONE_A, PW, KW>();
    /* the multicast form exists where tern_wg_multicast may take it: bf16, 256-token tiles */
    constexpr bool MCK = PW && ACT != TACT_I8 && NT == 256;
    auto kern_mc = [] { /* (else the plain kernel: unused) */
        if constexpr (MCK) return tern_gemm_wg_pw_kernel<ACT, NT, true>;
        else return kern_of<ACT, NT, ONE_A, PW>();
    }();
    constexpr int threads = PW ? PW_THREADS : WG_THREADS * KW;
    /* the shared-memory attribute is per function and device; CTAs per SM,
     * 0 = not set yet (one thread per GPU under tensor parallelism) */
    static std::atomic<int> per_sm_of[64];
    /* the multicast form's clusters of two that fit at once (0: none — e.g. SMs withheld by
     * MPS —, then no multicast), set with per_sm */
    static std::atomic<int> clusters_of[64];
    if (dev < 0 || dev >= 64) return err_set("tern_gemm_wg: device id %d out of range", dev);
    int per_sm = per_sm_of[dev].load();
    if (per_sm == 0) {
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C_::SMEM));
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, threads, C_::SMEM));
        if constexpr (MCK) {
            CUDA_CHECK(cudaFuncSetAttribute(kern_mc, cudaFuncAttributeMaxDynamicSharedMemorySize, C_::SMEM));
            cudaLaunchConfig_t lc = {};
            lc.gridDim = dim3(2);
            lc.blockDim = dim3(threads);
            lc.dynamicSmemBytes = C_::SMEM;
            cudaLaunchAttribute at;
            at.id = cudaLaunchAttributeClusterDimension;
            at.val.clusterDim.x = 2, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
            lc.attrs = &at;
            lc.numAttrs = 1;
            int nc = 0;
            if (cudaOccupancyMaxActiveClusters(&nc, kern_mc, &lc) != cudaSuccess) {
                cudaGetLastError(); /* (not an error of the launch: no multicast) */
                nc = 0;
            }
            clusters_of[dev].store(nc);
        }
        if constexpr (PW) { /* fewer registers at launch than setmaxnreg hands out: the
                             * consumers would wait for them forever */
            for (auto k : {kern, kern_mc}) {
                cudaFuncAttributes fa;
                CUDA_CHECK(cudaFuncGetAttributes(&fa, k));
                if (fa.numRegs * PW_THREADS < PW_PRODUCER_REGS * 128 + PW_CONSUMER_REGS * WG_THREADS)
                    return err_set("tern_gemm_wg: the producer kernel was compiled with %d registers per "
                                   "thread; setmaxnreg needs %d",
                                   fa.numRegs,
                                   (PW_PRODUCER_REGS * 128 + PW_CONSUMER_REGS * WG_THREADS) / PW_THREADS);
            }
        }
        if (per_sm < 1)
            return err_set("tern_gemm_wg: a %d-thread CTA with %d bytes of shared memory does not "
                           "fit on this GPU",
                           threads, C_::SMEM);
        per_sm_of[dev].store(per_sm);
    }
    TernKArgs a = *a0;
    const int64_t KT = (int64_t)a.planes * a.kblocks * (ACT == TACT_I8 ? 1 : 2);
    tern_wg_grid(ACT == TACT_I8, a.cols, KT, n_sm, per_sm, tern_cuda_decode_variant_get(),
                 tern_cuda_pdl_get(), &plan);
    const int64_t ks = plan.ks, tiles = plan.gx * plan.gy, tail = tiles - plan.full;
    if ((!PW && ks > 1 && plan.full != 0) || (ks > 1 && tail == 0) || (ks == 1 && tail != 0))
        return err_set("tern_gemm_wg: inconsistent split plan: %lld of %lld tiles split %lld ways "
                       "(%s kernel; internal)",
                       (long long)tail, (long long)tiles, (long long)ks, PW ? "producer" : "plain");
    if (PW ? tiles + tail * (ks - 1) > 0x7fffffff : plan.gx > 0x7fffffff || plan.gy > 65535)
        return err_set("tern_gemm_wg: %lld rows x %lld tokens is too large for one launch",
                       (long long)a.rows, (long long)a.n);
    const WgGrid gr = {(int)plan.gx, (int)plan.full, (int)tail, (int)ks};
    /* partials: PW, NT x WG_BN per split tile and split; else y's layout */
    if (ks > 1 && tern_mm::scratch(PW ? tail * ks * NT * WG_BN : ks * a.n * a.rows, tiles, &a.partial,
                                   &a.counters) < 0)
        return -1;
    /* the activations: planes stacked along the rows (f32 = 3 bf16 planes) */
    constexpr int esz = ACT == TACT_I8 ? 1 : 2;
    if (a.planes > 1 && a.plane_stride != a.n * a.ldx)
        return err_set("tern_gemm_wg: activation planes must be contiguous (internal)");
    if ((int64_t)a.planes * a.n > 0x7fffffff || a.cols > 0x7fffffff || a.row_bytes > 0x7fffffff)
        return err_set("tern_gemm_wg: %lld tokens x %lld columns is too large for one launch",
                       (long long)a.n, (long long)a.cols);
    CUtensorMap tmx, tmc, tmy;
    /* y through shared memory and the copy engine where a tensor map can
     * describe it (tern_wg_epilogue) */
    tern_wg_epilogue(a.rows, a.n, ((uintptr_t)a.y & 15) == 0, tern_cuda_decode_variant_get(), &plan);
    const int tma_y = plan.staged_y;
    memset(&tmy, 0, sizeof tmy);
    if (tma_y && encode_2d(&tmy, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, a.y, (uint64_t)a.rows, (uint64_t)a.n,
                           (uint64_t)a.rows * 4, 32, NT, CU_TENSOR_MAP_SWIZZLE_128B) < 0)
        return -1;
    if (encode_2d(&tmx, ACT == TACT_I8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                  a.x, (uint64_t)a.cols, (uint64_t)(a.planes * a.n), (uint64_t)(a.ldx * esz),
                  128 / esz, NT, CU_TENSOR_MAP_SWIZZLE_128B) < 0 ||
        encode_2d(&tmc, CU_TENSOR_MAP_DATA_TYPE_UINT8, a.codes, (uint64_t)a.row_bytes,
                  (uint64_t)a.rows, (uint64_t)a.row_bytes, 64, WG_BN, CU_TENSOR_MAP_SWIZZLE_64B) < 0)
        return -1;
    /* the activations multicast over pairs of CTAs where the pairs share them (tern_wg_multicast) */
    const int mc = MCK && clusters_of[dev].load() > 0 &&
                   tern_wg_multicast(PW, ACT == TACT_I8, NT, plan.gx, plan.gy, plan.full, tail,
                                     tern_cuda_decode_variant_get());
    char cfg[112];
    snprintf(cfg, sizeof cfg, "wgmma nt=%d sets=%d kw=%d ks=%lld pdl=%d tma_y=%d pw=%d split_tiles=%lld mc=%d",
             NT, ONE_A ? 1 : 2, KW, (long long)ks, plan.pdl, tma_y, (int)PW, (long long)(ks > 1 ? tail : 0), mc);
    tern_cuda_set_config(cfg);
    const dim3 grid = PW ? dim3((unsigned)(tiles + tail * (ks - 1)))
                         : dim3((unsigned)plan.gx, (unsigned)plan.gy, (unsigned)ks);
    return tern_launch_cl("tern_gemm_wg_kernel", mc ? kern_mc : kern, grid, dim3(threads), (size_t)C_::SMEM, s,
                          plan.pdl != 0, mc ? 2u : 1u, a, gr, tmx, tmc, tmy, tma_y);
}

/* the tile and kernel by tern_wg_tile (tern_wg_plan.c) */
template <int ACT>
int by_tokens(const TernKArgs *a, cudaStream_t s) {
    int dev, n_sm;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    TernWgPlan p;
    tern_wg_tile(ACT == TACT_I8, a->rows, a->n, a->cols, (int64_t)a->planes * a->kblocks, n_sm,
                 tern_cuda_decode_variant_get(), &p);
    switch (p.nt) {
    case 256: return launch_wg<ACT, 256>(a, p, dev, n_sm, s);
    case 128: return launch_wg<ACT, 128>(a, p, dev, n_sm, s);
    case 64: return launch_wg<ACT, 64>(a, p, dev, n_sm, s);
    case 32: return launch_wg<ACT, 32>(a, p, dev, n_sm, s);
    default: break;
    }
    if constexpr (ACT == TACT_I8) {
        if (p.kw > 1) { /* warpgroup pairs on K */
            if (p.nt == 16)
                return p.one_a ? launch_wg<ACT, 16, true, 2>(a, p, dev, n_sm, s)
                               : launch_wg<ACT, 16, false, 2>(a, p, dev, n_sm, s);
            return launch_wg<ACT, 8, true, 2>(a, p, dev, n_sm, s);
        }
        if (p.nt == 16)
            return p.one_a ? launch_wg<ACT, 16, true>(a, p, dev, n_sm, s)
                           : launch_wg<ACT, 16, false>(a, p, dev, n_sm, s);
        return launch_wg<ACT, 8, true>(a, p, dev, n_sm, s);
    } else {
        if (p.nt == 16) return launch_wg<ACT, 16>(a, p, dev, n_sm, s);
        return launch_wg<ACT, 8>(a, p, dev, n_sm, s);
    }
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
    case TACT_BF16: return by_tokens<TACT_BF16>(a, s);
    case TACT_I8: return by_tokens<TACT_I8>(a, s);
    default: return err_set("tern_gemm_wg: activation type %d (f32 goes as bf16 planes)", act);
    }
}
