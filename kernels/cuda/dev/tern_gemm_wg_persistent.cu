/* dev/tern_gemm_wg_persistent.cu — NOT BUILT, NOT YET RUN ON A GPU (written at
 * the end of the fourth session, when the device time was spent).
 *
 * A persistent version of tern_gemm_wg.cu: the grid is at most the resident
 * CTAs and each CTA runs its work units (tile x K split) as one stream of
 * stages, so a unit's first copies and fragments overlap the previous unit's
 * last stages and epilogue.  Motivation (H200, bench_gpu at 9bd40e8, int8,
 * M = 2048): time per tile-wave fits 14 us + 1.43 us per stage (4096^2:
 * 16 stages, 37 us; 4096 x 14336: 56 stages, 94 us), i.e. ~14 us of fill
 * and epilogue per tile, a third of the time on the K = 4096 shapes.
 *
 * To try it: build the GPU programs with it in place of tern_gemm_wg.cu
 *   make -f kernels/cuda/gpu.mk GPU_BUILD=/tmp/gp gpu-progs GPU_CU_SRC="$(echo
 *     kernels/cuda/tern_gemv.cu ... kernels/cuda/dev/tern_gemm_wg_persistent.cu ...)"
 * and run test_gpu also with TERNLAB_WG_MAX_CTAS=3 in the environment (every
 * CTA then runs many units, split-K units of one tile included).
 * Compiled (ptxas, sm_90a): no spills, but 230-255 registers (the non-
 * persistent kernel: 95-221), so the 16- and 32-token tiles drop to one CTA
 * per SM; capping them at 128 registers spilled. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdlib.h>

#include "cuda/cuda_util.h"
#include "cuda/tern_mm.cuh"

namespace {

constexpr int WG_BN = 128;              /* weight rows per CTA: 2 warpgroups x 64 */
constexpr int WG_THREADS = 256;
constexpr int WG_CBYTES = WG_BN * 64;   /* codes of one stage (one 64-byte block per row) */

template <int NT> /* tokens per CTA: the wgmma N */
struct WgCfg {
    /* pipeline slots: deeper for the small, memory-bound tiles */
    static constexpr int ST = NT == 256 ? 3 : NT >= 64 ? 4 : 6;
    static constexpr int X_BYTES = NT * 256;           /* two 128-byte swizzle columns */
    static constexpr int SLOT = X_BYTES + WG_CBYTES;   /* a multiple of 1024 */
    static constexpr int SMEM = ST * SLOT + 1024;      /* + alignment */
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

/* ---- mbarrier and TMA (cp.async.bulk.tensor) ---------------------------- */
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT;\n"
                 "}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
/* box at (c0 inner, c1 outer) of the 2-D map into shared memory, completing on bar */
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                            uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}

/* D (64 weight rows x N tokens) += A (registers: this warp's 16 rows x K of
 * decoded weights, mma.m16n8k32 / m16n8k16 fragment order) x B (the
 * activations' descriptor, N tokens x K, K-major) */
template <int ACT, int N>
__device__ __forceinline__ void wgmma_rs(typename std::conditional<ACT == TACT_I8, int, float>::type (&d)[N / 2],
                                         const uint32_t (&A)[4], uint64_t db);
template <>
__device__ __forceinline__ void wgmma_rs<TACT_I8, 8>(int (&d)[4], const uint32_t (&A)[4], uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8 "
        "{"
        "%0, %1, %2, %3"
        "}, {%4, %5, %6, %7}, %8, 1;\n"
        "}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(db));
}
template <>
__device__ __forceinline__ void wgmma_rs<TACT_I8, 16>(int (&d)[8], const uint32_t (&A)[4], uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.s32.s8.s8 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7"
        "}, {%8, %9, %10, %11}, %12, 1;\n"
        "}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7])
        : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(db));
}
template <>
__device__ __forceinline__ void wgmma_rs<TACT_I8, 32>(int (&d)[16], const uint32_t (&A)[4], uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, {%16, %17, %18, %19}, %20, 1;\n"
        "}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
        : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(db));
}
template <>
__device__ __forceinline__ void wgmma_rs<TACT_I8, 64>(int (&d)[32], const uint32_t (&A)[4], uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, 1;\n"
        "}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
          "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
          "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
        : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(db));
}
template <>
__device__ __forceinline__ void wgmma_rs<TACT_I8, 128>(int (&d)[64], const uint32_t (&A)[4], uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, 1;\n"
        "}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
          "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
          "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
          "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
          "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
          "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
          "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
        : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(db));
}
template <>
__device__ __forceinline__ void wgmma_rs<TACT_I8, 256>(int (&d)[128], const uint32_t (&A)[4], uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, {%128, %129, %130, %131}, %132, 1;\n"
        "}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
          "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
          "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
          "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
          "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
          "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
          "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]),
          "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]),
          "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]),
          "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]),
          "+r"(d[88]), "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]),
          "+r"(d[96]), "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]),
          "+r"(d[104]), "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]),
          "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]),
          "+r"(d[120]), "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
        : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(db));
}
template <>
__device__ __forceinline__ void wgmma_rs<TACT_BF16, 8>(float (&d)[4], const uint32_t (&A)[4], uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3"
        "}, {%4, %5, %6, %7}, %8, 1, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(db));
}
template <>
__device__ __forceinline__ void wgmma_rs<TACT_BF16, 16>(float (&d)[8], const uint32_t (&A)[4], uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7"
        "}, {%8, %9, %10, %11}, %12, 1, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(db));
}
template <>
__device__ __forceinline__ void wgmma_rs<TACT_BF16, 32>(float (&d)[16], const uint32_t (&A)[4], uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, {%16, %17, %18, %19}, %20, 1, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(db));
}
template <>
__device__ __forceinline__ void wgmma_rs<TACT_BF16, 64>(float (&d)[32], const uint32_t (&A)[4], uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, 1, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(db));
}
template <>
__device__ __forceinline__ void wgmma_rs<TACT_BF16, 128>(float (&d)[64], const uint32_t (&A)[4], uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, 1, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(db));
}
template <>
__device__ __forceinline__ void wgmma_rs<TACT_BF16, 256>(float (&d)[128], const uint32_t (&A)[4], uint64_t db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, {%128, %129, %130, %131}, %132, 1, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "l"(db));
}

/* tmx: the activations as (planes * n rows, cols) with 128-byte boxes of NT
 * rows, 128-byte swizzle; tmc: the codes as (rows, row_bytes) with 64-byte
 * boxes of 128 rows, 64-byte swizzle.  Both zero-fill outside the tensor.
 *
 * Persistent: the grid is at most the resident CTAs; CTA c takes the work
 * units c, c + G, c + 2G, ... (unit = tile x K split, tile-major) and runs
 * their stages as one stream, so the copies and the decoding of a unit's
 * first stages overlap the previous unit's last stages and epilogue (a
 * fresh CTA per tile paid ~14 us of pipeline fill and epilogue per tile,
 * H200, NOTES.md). */
struct WgGrid {
    int64_t gx, tiles; /* row tiles, tiles (row tiles x token tiles) */
    int ksplit;        /* K splits per tile */
};

template <int ACT, int NT>
__global__ void __launch_bounds__(WG_THREADS)
    tern_gemm_wg_kernel(const TernKArgs a, const WgGrid gr, const __grid_constant__ CUtensorMap tmx,
                        const __grid_constant__ CUtensorMap tmc) {
    using C_ = WgCfg<NT>;
    constexpr bool I8 = ACT == TACT_I8;
    constexpr int ST = C_::ST, ND = NT / 2; /* accumulators per thread */
    using Acc = typename std::conditional<I8, int, float>::type;
    extern __shared__ uint8_t smem_raw[];
    __shared__ int s_last;
    /* the row and token scales of a unit, double-buffered by unit parity
     * (filled at the unit's start, read by its epilogue) */
    __shared__ float s_scale[2][WG_BN], s_sx[2][NT];
    __shared__ __align__(8) uint64_t s_full[ST]; /* a slot's copies have landed */
    /* 1024-byte aligned base (the swizzle pattern repeats every 1024 bytes) */
    const uint32_t raw_s = (uint32_t)__cvta_generic_to_shared(smem_raw);
    uint8_t *smem = smem_raw + ((1024 - (raw_s & 1023)) & 1023);
    const uint32_t smem_s = (uint32_t)__cvta_generic_to_shared(smem);
    const uint32_t full_s = (uint32_t)__cvta_generic_to_shared(s_full);

    const int tid = threadIdx.x, wg = tid >> 7, q = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    constexpr int SPB = I8 ? 1 : 2; /* stages per code block */
    constexpr int esz = I8 ? 1 : 2;
    /* 32-bit stage counters, advanced incrementally: no 64-bit division per
     * stage (it cost more instructions than the decoding) */
    const int SPP = (int)a.kblocks * SPB, KT = a.planes * SPP;
    const int64_t U = gr.tiles * gr.ksplit, G = gridDim.x;

    /* a unit's place: rows from row0, tokens from tok0, stages [kt0, kt1) */
    struct Unit {
        int64_t row0, tok0, tile;
        int split, kt0, kt1;
    };
    auto unit_of = [&](int64_t u) {
        Unit w;
        w.tile = u / gr.ksplit;
        w.split = (int)(u % gr.ksplit);
        w.row0 = (w.tile % gr.gx) * WG_BN;
        w.tok0 = (w.tile / gr.gx) * NT;
        w.kt0 = (int)((int64_t)KT * w.split / gr.ksplit);
        w.kt1 = (int)((int64_t)KT * (w.split + 1) / gr.ksplit);
        return w;
    };

    if (tid == 0) {
        for (int i = 0; i < ST; i++) mbar_init(full_s + 8 * i, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    /* thread 0 issues the stream's stages in order: two 128-byte halves of
     * activations and the codes of the stage's block */
    int64_t i_u = blockIdx.x; /* the unit of the next stage to issue */
    Unit iw = unit_of(i_u);
    int i_kt = iw.kt0, i_plane = iw.kt0 / SPP, i_sp = iw.kt0 % SPP;
    auto issue = [&](int slot) {
        const uint32_t dst = smem_s + slot * C_::SLOT, bar = full_s + 8 * slot;
        mbar_expect_tx(bar, C_::SLOT);
        const int col0 = i_sp * (256 / esz), xrow = i_plane * (int)a.n + (int)iw.tok0;
        tma_load_2d(dst, &tmx, col0, xrow, bar);
        tma_load_2d(dst + NT * 128, &tmx, col0 + 128 / esz, xrow, bar);
        tma_load_2d(dst + C_::X_BYTES, &tmc, (i_sp / SPB) * 64, (int)iw.row0, bar);
        if (++i_sp == SPP) i_sp = 0, i_plane++;
        if (++i_kt == iw.kt1) { /* on to the next unit */
            i_u += G;
            if (i_u < U) {
                iw = unit_of(i_u);
                i_kt = iw.kt0, i_plane = iw.kt0 / SPP, i_sp = iw.kt0 % SPP;
            }
        }
    };
    /* stages of the stream still to issue (thread 0) */
    int64_t to_issue = 0;
    for (int64_t u = blockIdx.x; u < U; u += G) {
        const Unit w = unit_of(u);
        to_issue += w.kt1 - w.kt0;
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
    auto frags = [&](int slot, int st, uint32_t (&A)[8][4]) {
        const uint8_t *c = smem + slot * C_::SLOT + C_::X_BYTES;
        uint32_t w[2][4];
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int r = rA + 8 * hh;
            const uint8_t *cr = c + r * 64;
            const int sw = (r >> 1) & 3;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint8_t *ch = cr + ((j ^ sw) << 4);
                if constexpr (I8) {
                    w[hh][j] = *reinterpret_cast<const uint32_t *>(ch + 4 * t);
                } else {
                    const uint32_t u = *reinterpret_cast<const uint32_t *>(ch + 4 * (t >> 1));
                    const uint32_t v = *reinterpret_cast<const uint32_t *>(ch + 8 + 4 * (t >> 1));
                    /* bytes 2t, 2t+1, 8+2t, 9+2t, then reordered (b0 b2 b1 b3) so
                     * that the decoder's pairs are (b0, b1) and (b2, b3) */
                    const uint32_t x = __byte_perm(u, v, (t & 1) ? 0x7632 : 0x5410);
                    w[hh][j] = __byte_perm(x, 0, 0x3120);
                }
            }
        }
        if constexpr (I8) {
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

    /* ST - 1 stages in flight; the stream's first stage decoded before the
     * loop.  Per stage (stream position p): copies of p + ST - 1 into the
     * slot of p - 1 | wgmmas of p (asynchronous, A from registers) | while
     * they run: fragments of p + 1 (the next stage of this unit or the first
     * of the next) into the second register set | wait | one barrier. */
    uint32_t A0[8][4], A1[8][4];
    if (tid == 0)
        for (int p = 0; p < ST - 1 && to_issue > 0; p++, to_issue--) issue(p);
    int64_t u = blockIdx.x;
    if (u >= U) return;
    Unit w = unit_of(u);
    mbar_wait(full_s, 0);
    frags(0, w.kt0, A0);
    int slot = 0;
    int64_t pos = 0; /* stream position of the stage being computed */
    Acc d[ND];
    auto step = [&](bool has_next, int next_kt, uint32_t (&Acur)[8][4], uint32_t (&Anxt)[8][4]) {
        if (tid == 0 && to_issue > 0) {
            issue(slot == 0 ? ST - 1 : slot - 1);
            to_issue--;
        }
        /* a k step adds its byte offset / 16 to the descriptor's address field
         * (no carry: shared addresses are < 256 KB) */
        const uint64_t db = wg_desc(smem_s + slot * C_::SLOT);
        wg_fence();
#pragma unroll
        for (int s = 0; s < 8; s++)
            wgmma_rs<ACT, NT>(d, Acur[s], db + ((uint64_t)((s >> 2) * (NT * 128) + (s & 3) * 32) >> 4));
        wg_commit();
        const int nslot = slot == ST - 1 ? 0 : slot + 1;
        if (has_next) {
            mbar_wait(full_s + 8 * nslot, (uint32_t)(((pos + 1) / ST) & 1));
            frags(nslot, next_kt, Anxt);
        }
        wg_wait<0>();
        keep(d);
        keep(Acur);
        __syncthreads(); /* every warpgroup is done with this slot */
        slot = nslot;
        pos++;
    };
    for (int ui = 0;; ui++) {
        const int sb = ui & 1; /* this unit's scale buffer */
        for (int i = tid; i < WG_BN; i += WG_THREADS)
            s_scale[sb][i] = w.row0 + i < a.rows ? a.scales[(w.row0 + i) * a.scale_stride] : 0.0f;
        if constexpr (I8)
            for (int i = tid; i < NT; i += WG_THREADS)
                s_sx[sb][i] = w.tok0 + i < a.n ? a.sx[w.tok0 + i] : 1.0f;
#pragma unroll
        for (int i = 0; i < ND; i++) d[i] = 0;
        const int64_t nu = u + G;
        const Unit nw = nu < U ? unit_of(nu) : w;
        for (int kt = w.kt0; kt < w.kt1; kt++) {
            const bool last = kt + 1 == w.kt1;
            const bool has_next = !last || nu < U;
            const int next_kt = last ? nw.kt0 : kt + 1;
            step(has_next, next_kt, A0, A1);
            /* the wgmmas that read A0 are done: the next stage's fragments move
             * over (register moves; a second code path with the sets swapped
             * doubled the registers) */
#pragma unroll
            for (int s8 = 0; s8 < 8; s8++)
#pragma unroll
                for (int r4 = 0; r4 < 4; r4++) A0[s8][r4] = A1[s8][r4];
        }

        /* d[4j + 2h + e]: weight row 64 wg + 16 q + g + 8h, token 8j + 2t + e;
         * y as finalize_out computes it, with the scales from shared memory
         * (written before this unit's first barrier) */
        using Red = Acc;
        Red *part = reinterpret_cast<Red *>(a.partial);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int rl = rA + 8 * h;
            const int64_t row = w.row0 + rl;
            if (row >= a.rows) continue;
#pragma unroll
            for (int j = 0; j < NT / 8; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int tl = 8 * j + 2 * t + e;
                    const int64_t tok = w.tok0 + tl;
                    if (tok >= a.n) continue;
                    const Red v = d[4 * j + 2 * h + e];
                    if (gr.ksplit > 1) part[((int64_t)w.split * a.n + tok) * a.rows + row] = v;
                    else if constexpr (I8)
                        a.y[tok * a.rows + row] =
                            __fdiv_rn(__fmul_rn(s_scale[sb][rl], (float)v), s_sx[sb][tl]);
                    else a.y[tok * a.rows + row] = s_scale[sb][rl] * v;
                }
        }
        if (gr.ksplit > 1) {
            __threadfence();
            __syncthreads();
            int *ctr = a.counters + w.tile;
            if (tid == 0) s_last = atomicAdd(ctr, 1) == gr.ksplit - 1;
            __syncthreads();
            if (s_last) {
                __threadfence();
                tern_mm::reduce_splits<I8, 0, WG_THREADS, WG_BN, NT, 16>(a, part, gr.ksplit, w.row0,
                                                                        w.tok0);
                if (tid == 0) *ctr = 0;
            }
            __syncthreads(); /* s_last is read by all before the next unit sets it */
        }
        if (nu >= U) break;
        u = nu;
        w = nw;
    }
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

int g_wg_max_ctas = 0; /* tern_cuda_wg_max_ctas */

template <int ACT, int NT>
int launch_wg(const TernKArgs *a0, cudaStream_t s) {
    using C_ = WgCfg<NT>;
    auto kern = tern_gemm_wg_kernel<ACT, NT>;
    static int attr_dev = -1, per_sm = 1; /* the attribute is per function and device */
    int dev;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (attr_dev != dev) {
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C_::SMEM));
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, WG_THREADS, C_::SMEM));
        if (per_sm < 1)
            return err_set("tern_gemm_wg: a %d-thread CTA with %d bytes of shared memory does not "
                           "fit on this GPU",
                           WG_THREADS, C_::SMEM);
        attr_dev = dev;
    }
    int n_sm;
    CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    TernKArgs a = *a0;
    const int64_t gx = (a.rows + WG_BN - 1) / WG_BN, gy = (a.n + NT - 1) / NT;
    if (gx > 0x7fffffff || gy > 65535)
        return err_set("tern_gemm_wg: %lld rows x %lld tokens is too large for one launch",
                       (long long)a.rows, (long long)a.n);
    /* split K until the grid fills the GPU (resident CTAs), keeping >= 4
     * stages per split; tiles of >= 64 tokens (compute-bound) only when
     * there are fewer tiles than half the SMs (the reduction costs more) */
    const int64_t KT = (int64_t)a.planes * a.kblocks * (ACT == TACT_I8 ? 1 : 2), tiles = gx * gy;
    int64_t ks = NT >= 64 && tiles >= n_sm / 2 ? 1 : ((int64_t)n_sm * per_sm + tiles - 1) / tiles;
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
                  128 / esz, NT, CU_TENSOR_MAP_SWIZZLE_128B) < 0 ||
        encode_2d(&tmc, CU_TENSOR_MAP_DATA_TYPE_UINT8, a.codes, (uint64_t)a.row_bytes,
                  (uint64_t)a.rows, (uint64_t)a.row_bytes, 64, WG_BN, CU_TENSOR_MAP_SWIZZLE_64B) < 0)
        return -1;
    /* persistent: at most the resident CTAs (or the development cap) */
    const WgGrid gr = {gx, tiles, (int)ks};
    int64_t grid = (int64_t)n_sm * per_sm;
    if (g_wg_max_ctas == 0) { /* or TERNLAB_WG_MAX_CTAS=n in the environment (tests) */
        const char *e = getenv("TERNLAB_WG_MAX_CTAS");
        g_wg_max_ctas = e && atoi(e) > 0 ? atoi(e) : -1;
    }
    if (g_wg_max_ctas > 0 && grid > g_wg_max_ctas) grid = g_wg_max_ctas;
    if (grid > tiles * ks) grid = tiles * ks;
    kern<<<(unsigned)grid, WG_THREADS, C_::SMEM, s>>>(a, gr, tmx, tmc);
    CUDA_CHECK_LAUNCH("tern_gemm_wg_kernel");
    return 0;
}

/* the token tile (the wgmma N): the smallest of 8 .. 256 that holds n, but
 * from 64 tokens on halved while the grid would cover less than half of the
 * SMs (more tiles instead of a split K with its reduction: M = 256 on
 * 4096 x 4096 took 44 us with 32 tiles of 256 tokens split 4 ways) */
template <int ACT>
int by_tokens(const TernKArgs *a, cudaStream_t s) {
    int dev, n_sm;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    const int64_t gx = (a->rows + WG_BN - 1) / WG_BN;
    int nt = a->n > 128 ? 256 : a->n > 64 ? 128 : 64;
    while (nt > 64 && gx * ((a->n + nt - 1) / nt) < n_sm / 2) nt /= 2;
    if (a->n > 32 && nt == 256) return launch_wg<ACT, 256>(a, s);
    if (a->n > 32 && nt == 128) return launch_wg<ACT, 128>(a, s);
    if (a->n > 32) return launch_wg<ACT, 64>(a, s);
    if (a->n > 16) return launch_wg<ACT, 32>(a, s);
    if (a->n > 8) return launch_wg<ACT, 16>(a, s);
    return launch_wg<ACT, 8>(a, s);
}

} // namespace

int tern_cuda_wg_max_ctas(int n) {
    const int old = g_wg_max_ctas;
    g_wg_max_ctas = n;
    return old;
}

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
