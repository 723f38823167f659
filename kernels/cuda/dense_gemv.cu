/* dense_gemv.cu — the GEMV of dense bf16 weights for one to four tokens
 * (tern_cuda_gemv_bf16, tern_cuda.h): a ternary model's LM head at 1 .. 4
 * logit rows.
 *
 * A pure stream: every weight is read once and used for at most four
 * products, so the kernel is a read of the matrix at the HBM's pace plus
 * the few microseconds of a launch.  One CTA of 512 threads an SM; warp w
 * takes rows w, w + W, ... (W the grid's warps; at 2 .. 4 tokens two
 * adjacent rows at a time: 2w, 2w + 1, then 2(w + W), ...), a lane the
 * row's 16-byte pieces lane, lane + 32, ...; the pieces come in batches of
 * kDgU a lane (kDgU / 2 of each row where two), the next batch's loads
 * issued before the current one is summed (a batch
 * in flight a lane while the one before is summed: 16 warps x 32 lanes x
 * kDgU x 16 B = 64 KB a SM in flight).  The grid leaves out the SMs
 * tern_cuda_tbm_reserve keeps for the row kernel before (the final norm: a
 * CTA there would start only once the norm ends, and end last).  x (the tokens, bf16) is staged in shared memory once a CTA.  As a
 * programmatic dependent it issues its first batch before the wait: the
 * weights depend on no kernel.  Sums in f32, two partial sums a token and
 * lane (even / odd columns of a piece), then the warp's lanes by a xor tree:
 * a fixed order, so the same bits every call (not cuBLAS's bits). */
#include <cuda_runtime.h>

#include <stdint.h>

#include "cuda/cuda_util.h"
#include "cuda/tern_cuda.h"
#include "cuda/tern_launch.cuh"
#include "cuda/tern_mma.cuh"

namespace {

constexpr int kDgThreads = 512, kDgWarps = kDgThreads / 32, kDgU = 8, kDgMaxTok = 4;
constexpr size_t kDgMaxSmem = 96 * 1024; /* x staged: n x cols x 2 bytes at most */
/* rows a warp takes at once for M tokens (dense_gemv_bf16_kernel's R) */
template <int M>
constexpr int kDgRows = M >= 2 ? 2 : 1;

__device__ __forceinline__ float bf_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

/* a += the products of the eight bf16 of w and x (even columns into a0, odd into a1) */
__device__ __forceinline__ void dot8(const uint4 &w, const uint4 &x, float &a0, float &a1) {
    a0 = fmaf(bf_lo(w.x), bf_lo(x.x), a0);
    a1 = fmaf(bf_hi(w.x), bf_hi(x.x), a1);
    a0 = fmaf(bf_lo(w.y), bf_lo(x.y), a0);
    a1 = fmaf(bf_hi(w.y), bf_hi(x.y), a1);
    a0 = fmaf(bf_lo(w.z), bf_lo(x.z), a0);
    a1 = fmaf(bf_hi(w.z), bf_hi(x.z), a1);
    a0 = fmaf(bf_lo(w.w), bf_lo(x.w), a0);
    a1 = fmaf(bf_hi(w.w), bf_hi(x.w), a1);
}

/* w (rows, cpr pieces of 16 bytes), x (M, cpr pieces), y (M, rows) f32.
 * EF: the weights read with an L2 evict-first policy (tern_cuda_l2ef).
 * R: rows a warp takes at once (R consecutive rows, each piece of x read
 * from shared memory once for all R: at 2 .. 4 tokens the shared-memory
 * reads and x's unpacking, not the stream, would bound the kernel on a card
 * with the H200's bandwidth); a batch is kDgU / R pieces of each, so the
 * bytes in flight a lane stay kDgU x 16.  A row's sums are taken in the
 * same order for every R: the same bits. */
template <int M, bool EF, int R>
__global__ void __launch_bounds__(kDgThreads, 1)
dense_gemv_bf16_kernel(const uint4 *__restrict__ w, int64_t rows, int cpr, const uint4 *x,
                       float *__restrict__ y) {
    constexpr int U = kDgU / R;  /* pieces a row and lane a batch */
    extern __shared__ uint4 xs[]; /* (M, cpr) */
    const int lane = threadIdx.x & 31;
    const int64_t tw = (int64_t)gridDim.x * kDgWarps * R; /* the rows all warps take at once */
    const int nb = (cpr + 32 * U - 1) / (32 * U); /* batches a row */
    int64_t row = ((int64_t)blockIdx.x * kDgWarps + (threadIdx.x >> 5)) * R; /* the first of the warp's R */
    int b = 0;
    auto load = [&](uint4 (&v)[R][U], int64_t r0, int bb) {
#pragma unroll
        for (int q = 0; q < R; q++) {
            const int64_t r = r0 + q;
            const uint4 *wr = w + r * cpr;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = lane + 32 * (bb * U + u);
                if (r < rows && c < cpr) v[q][u] = EF ? ldg_stream_u4_ef(wr + c) : ldg_stream_u4(wr + c);
                else v[q][u] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
    };
    uint4 va[R][U], vb[R][U];
    load(va, row, 0);
    pdl_wait();
    pdl_trigger();
    for (int i = threadIdx.x; i < M * cpr; i += kDgThreads) xs[i] = __ldcg(x + i); /* (written by the kernel before) */
    __syncthreads();
    float acc[R][M][2];
#pragma unroll
    for (int q = 0; q < R; q++)
#pragma unroll
        for (int m = 0; m < M; m++) acc[q][m][0] = acc[q][m][1] = 0.0f;
    /* one batch: the next one's loads into nx, then cur summed; the rows'
     * sums stored after their last batch.  False once the warp's rows are done. */
    auto step = [&](uint4 (&cur)[R][U], uint4 (&nx)[R][U]) -> bool {
        if (row >= rows) return false;
        int64_t nrow = row;
        int nbb = b + 1;
        if (nbb == nb) nbb = 0, nrow += tw;
        load(nx, nrow, nbb);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = lane + 32 * (b * U + u);
            if (c < cpr) {
#pragma unroll
                for (int m = 0; m < M; m++) {
                    const uint4 xv = xs[m * cpr + c];
#pragma unroll
                    for (int q = 0; q < R; q++) dot8(cur[q][u], xv, acc[q][m][0], acc[q][m][1]);
                }
            }
        }
        if (nbb == 0) {
#pragma unroll
            for (int q = 0; q < R; q++)
#pragma unroll
                for (int m = 0; m < M; m++) {
                    float s = acc[q][m][0] + acc[q][m][1];
#pragma unroll
                    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                    if (lane == 0 && row + q < rows) y[(int64_t)m * rows + row + q] = s;
                    acc[q][m][0] = acc[q][m][1] = 0.0f;
                }
        }
        row = nrow, b = nbb;
        return true;
    };
    while (step(va, vb) && step(vb, va)) {
    }
}

template <int M>
int launch_m(const uint16_t *w, int64_t rows, int64_t cols, const uint16_t *x, float *y, cudaStream_t s) {
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const size_t smem = (size_t)M * (size_t)cols * 2;
    const int cpr = (int)(cols / 8);
    const bool ef = tern_cuda_l2ef_get() != 0;
    constexpr int R = kDgRows<M>;
    auto k = ef ? dense_gemv_bf16_kernel<M, true, R> : dense_gemv_bf16_kernel<M, false, R>;
    if (smem > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int res = tern_cuda_tbm_reserve_get(), use = res > 0 && res < sms ? sms - res : sms;
    const int64_t need = (rows + kDgWarps * R - 1) / (kDgWarps * R); /* CTAs that have a row */
    const unsigned grid = (unsigned)(need < use ? need : use);
    return tern_launch_pdl_smem("dense_gemv_bf16_kernel", k, dim3(grid), dim3(kDgThreads), smem, s,
                                reinterpret_cast<const uint4 *>(w), rows, cpr, reinterpret_cast<const uint4 *>(x),
                                y);
}

} /* namespace */

extern "C" {

int tern_cuda_gemv_bf16_ok(int64_t rows, int64_t cols, int64_t n) {
    return rows >= 1 && rows <= ((int64_t)1 << 40) && cols >= 8 && cols % 8 == 0 && n >= 1 && n <= kDgMaxTok &&
           (size_t)n * (size_t)cols * 2 <= kDgMaxSmem;
}

int tern_cuda_gemv_bf16(const uint16_t *d_w, int64_t rows, int64_t cols, const uint16_t *d_x, int64_t n,
                        float *d_y, cudaStream_t stream) {
    if (!d_w || !d_x || !d_y) return err_set("tern_cuda_gemv_bf16: NULL argument");
    if (!tern_cuda_gemv_bf16_ok(rows, cols, n))
        return err_set("tern_cuda_gemv_bf16: %lld x %lld for %lld tokens not supported (1 .. %d tokens, "
                       "columns a multiple of 8, tokens x columns x 2 bytes <= %zu)",
                       (long long)rows, (long long)cols, (long long)n, kDgMaxTok, kDgMaxSmem);
    if ((reinterpret_cast<uintptr_t>(d_w) | reinterpret_cast<uintptr_t>(d_x)) % 16)
        return err_set("tern_cuda_gemv_bf16: weights and tokens must be 16-byte aligned");
    switch (n) {
    case 1: return launch_m<1>(d_w, rows, cols, d_x, d_y, stream);
    case 2: return launch_m<2>(d_w, rows, cols, d_x, d_y, stream);
    case 3: return launch_m<3>(d_w, rows, cols, d_x, d_y, stream);
    default: return launch_m<4>(d_w, rows, cols, d_x, d_y, stream);
    }
}

} /* extern "C" */
