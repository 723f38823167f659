/* Decode GEMV for int8 activations, one token, one scale per row (group tensor
 * or row: BitNet checkpoints, TQ-style per-row scales), on the CUDA cores with
 * dp4a: the weight stream is the cost, so each lane loads 16 bytes of codes
 * (64 weights) per step and decodes them in registers.
 *
 *   byte j of a 64-byte block holds columns b*256 + 64*i + j in its 2-bit fields
 *   i (kernels/ternary_format.h), code c = q + 1.  For a 32-bit word of codes,
 *   (w >> 2i) & 0x03030303 is four codes of four consecutive columns, so
 *   sum q*x = dp4a(c, x) - dp4a(0x01010101, x): both exact in int32.
 *   y = s_r * (float)D / sx, the reference's formula (tern_matmul_i8_ref), so
 *   the result equals the CPU twin bit for bit.
 * One warp per row, grid-stride over rows; lanes stride over 16-byte chunks,
 * then an integer warp reduction (exact, any order).
 * Measured (H200, make bench-gpu, M = 1, group row): 4096x4096 3.8 us (3.4x cuBLAS
 * BF16), 14336x4096 10.1 us (3.1x), 4096x14336 9.3 us (3.4x), 36864x4608 27.5 us
 * (3.2x) — 28-40% of copy bandwidth (the first measurements; the binary
 * tensor-core GEMVs have since taken every row of >= 8192 columns and the
 * larger matrices: tern_cuda.cu's gemv1_rule sends this kernel the rest).
 * v2 in dev/.
 * The f32-input form (gemv_i8_rowscale_f32x, the decode step's o projection
 * after the attention: its int8 pass gone) codes x itself: each CTA forms the
 * int8 codes of the whole f32 row in shared memory (127 / max|x| from the max
 * given, tern_quant1: act_quant_int8_ref's codes and scale) before its rows,
 * so y is the same bits as the int8 pass + this kernel. */
#include "cuda/cuda_util.h"
#include "cuda/tern_cuda.h"
#include "cuda/tern_mma.cuh"
#include "ternary_format.h"

#include <cuda_runtime.h>
#include <stdint.h>

namespace {

/* sum (c - 1) x over a 16-byte chunk of codes c (SUM: else sum c x, the
 * caller subtracting sum x of the whole row once).  SMEM: x in shared memory
 * (the f32-input form's codes), else global */
template <bool SMEM, bool SUM = true>
__device__ __forceinline__ int chunk_dot(uint4 w, const int8_t *__restrict__ x, int64_t base,
                                         int64_t cols) {
    int acc = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t c0 = base + 64 * i; /* first column of field i */
        if (c0 >= cols) break;            /* cols % 16 == 0: a run is all in or all out */
        const int4 xv = SMEM ? *reinterpret_cast<const int4 *>(x + c0) : __ldg(reinterpret_cast<const int4 *>(x + c0));
        const unsigned sh = 2u * (unsigned)i;
        acc = __dp4a((int)((w.x >> sh) & 0x03030303u), xv.x, acc);
        acc = __dp4a((int)((w.y >> sh) & 0x03030303u), xv.y, acc);
        acc = __dp4a((int)((w.z >> sh) & 0x03030303u), xv.z, acc);
        acc = __dp4a((int)((w.w >> sh) & 0x03030303u), xv.w, acc);
        if (SUM)
            acc -= __dp4a(0x01010101, xv.x, 0) + __dp4a(0x01010101, xv.y, 0) +
                   __dp4a(0x01010101, xv.z, 0) + __dp4a(0x01010101, xv.w, 0);
    }
    return acc;
}

/* (256, 8): 32 registers, so 8 blocks per SM and the whole grid in one wave
 * (64 registers gave 4 blocks per SM and two waves; NOTES.md) */
__global__ void __launch_bounds__(256, 8) gemv_i8_rowscale(const uint8_t *__restrict__ codes,
                                                        const float *__restrict__ scales,
                                                        int64_t scale_stride, int64_t rows,
                                                        int64_t cols, int64_t row_bytes,
                                                        const int8_t *__restrict__ x,
                                                        const float *__restrict__ sxp,
                                                        float *__restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const int64_t chunks = row_bytes / 16;
    /* programmatic dependent launch (tern_cuda_pdl): blocks may start before
     * the previous kernel ends; nothing it writes is read before this */
    pdl_wait();
    pdl_trigger(); /* the next kernel may take its place in the queue now */
    TERN_TRACE_NOW(tr_mid);
    for (int64_t r = warp; r < rows; r += nwarps) {
        const uint8_t *row = codes + r * row_bytes;
        int acc = 0;
        int64_t c = lane;
        /* four loads in flight per lane before any arithmetic */
        for (; c + 96 < chunks; c += 128) {
            uint4 w0 = ldg_stream_u4(row + 16 * c), w1 = ldg_stream_u4(row + 16 * (c + 32));
            uint4 w2 = ldg_stream_u4(row + 16 * (c + 64)), w3 = ldg_stream_u4(row + 16 * (c + 96));
            acc += chunk_dot<false>(w0, x, (c >> 2) * 256 + (c & 3) * 16, cols);
            acc += chunk_dot<false>(w1, x, ((c + 32) >> 2) * 256 + ((c + 32) & 3) * 16, cols);
            acc += chunk_dot<false>(w2, x, ((c + 64) >> 2) * 256 + ((c + 64) & 3) * 16, cols);
            acc += chunk_dot<false>(w3, x, ((c + 96) >> 2) * 256 + ((c + 96) & 3) * 16, cols);
        }
        for (; c < chunks; c += 32)
            acc += chunk_dot<false>(ldg_stream_u4(row + 16 * c), x, (c >> 2) * 256 + (c & 3) * 16, cols);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) y[r] = tern_i8_out(scales[r * scale_stride], (float)acc, sxp[0]);
    }
    TERN_TRACE_END(tr_mid);
}

/* The f32-input form: rows of at most kF32xChunks 16-byte chunks (8192
 * columns), each lane holding its <= 4 chunks of a row in registers.  Each
 * warp's first row — codes and scale — is loaded before the programmatic
 * wait (no kernel writes weights), so after the release only x's round trip
 * (the f32 row, coded into shared memory: cols bytes) is left before the
 * arithmetic.  xf: cols floats, 16-byte aligned; max|x| the float bits
 * *xmax.  CTAs of 1024 threads, one per SM: each CTA reads x from L2 once,
 * and its 44 registers a thread leave room on the SM for the kernels around
 * it.  H200, 7B decode step (bench-e2e tern-i8 B = 1, same run, five rounds):
 * 804-815 tok/s against 785-788 with the int8 pass and gemv_i8_rowscale;
 * with 256-thread CTAs, 4 per SM: 796-812 against 803-805 (three rounds; x
 * read from L2 by 512 CTAs), and 772-777 against 797-802 when 62 registers
 * (four float4 loads of x in flight) filled the register file (NOTES.md). */
constexpr int kF32xChunks = kTernWarpF32xRowBytes / 16, kF32xThreads = 1024;
/* NO: the folded norm's producer (TernNormOut, tern_cuda.h): y added to res
 * (loaded after the wait, while x is coded), the next norm's weight of the
 * row loaded with its codes; each warp's sum of x'^2 over its rows in row
 * order and its max|x' w|, then the CTA's warps' sums in warp order into
 * ss[blockIdx.x] and the max raised into *amax. */
struct NormOut {
    float *res;
    const float *w;
    unsigned *amax;
    float *ss;
};
template <bool NO>
__global__ void __launch_bounds__(kF32xThreads, 1) gemv_i8_rowscale_f32x(const uint8_t *__restrict__ codes,
                                                             const float *__restrict__ scales,
                                                             int64_t scale_stride, int64_t rows,
                                                             int64_t cols, int64_t row_bytes,
                                                             const float *__restrict__ xf,
                                                             const unsigned *__restrict__ xmax,
                                                             float *__restrict__ y, NormOut no, int ef) {
    extern __shared__ int4 xs4[];
    int8_t *xs = reinterpret_cast<int8_t *>(xs4);
    const int lane = threadIdx.x & 31;
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const int64_t chunks = row_bytes / 16;
    uint4 w[kF32xChunks / 32];
    float sr = 0.0f, nw = 0.0f;
    auto load = [&](int64_t r) {
        const uint8_t *row = codes + r * row_bytes;
#pragma unroll
        for (int j = 0; j < kF32xChunks / 32; j++) {
            const int64_t c = lane + 32 * j;
            w[j] = c >= chunks ? make_uint4(0, 0, 0, 0)
                   : ef  ? ldg_stream_u4_ef(row + 16 * c)
                         : ldg_stream_u4(row + 16 * c);
        }
        sr = scales[r * scale_stride];
        if (NO) nw = no.w[r];
    };
    int64_t r = warp;
    if (r < rows) load(r);
    pdl_wait();
    pdl_trigger();
    float res = NO && r < rows && lane == 0 ? no.res[r] : 0.0f;
    const float sx = tern_act_scale(__uint_as_float(*xmax));
    /* the codes, and their sum (every row's offset term: sum (c - 1) x = sum c x - sum x,
     * subtracted once per row, not per chunk) — warps' sums in s_xsum */
    __shared__ __align__(16) int s_xsum[kF32xThreads / 32];
    int xsum = 0;
    for (int64_t i = 4 * (int64_t)threadIdx.x; i < cols; i += 4 * (int64_t)blockDim.x) {
        const float4 v = *reinterpret_cast<const float4 *>(xf + i);
        const char4 q = make_char4(tern_quant1(v.x, sx), tern_quant1(v.y, sx), tern_quant1(v.z, sx), tern_quant1(v.w, sx));
        *reinterpret_cast<char4 *>(xs + i) = q;
        xsum += (int)q.x + (int)q.y + (int)q.z + (int)q.w;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) xsum += __shfl_xor_sync(0xffffffffu, xsum, o);
    if (lane == 0) s_xsum[threadIdx.x >> 5] = xsum;
    __syncthreads();
    if (lane == 0) { /* (only lane 0 forms y) */
        xsum = 0;
#pragma unroll
        for (int i = 0; i < kF32xThreads / 32; i += 4) {
            const int4 t = *reinterpret_cast<const int4 *>(s_xsum + i);
            xsum += t.x + t.y + t.z + t.w;
        }
    }
    TERN_TRACE_NOW(tr_mid);
    float ss = 0.0f, mx = 0.0f; /* NO: this warp's sum of x'^2 and max|x' w| (lane 0) */
    for (; r < rows; r += nwarps) {
        if (r != warp) {
            load(r);
            if (NO && lane == 0) res = no.res[r];
        }
        int acc = 0;
#pragma unroll
        for (int j = 0; j < kF32xChunks / 32; j++) {
            const int64_t c = lane + 32 * j;
            if (c < chunks) acc += chunk_dot<true, false>(w[j], xs, (c >> 2) * 256 + (c & 3) * 16, cols);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) {
            const float yr = tern_i8_out(sr, (float)(acc - xsum), sx);
            if (NO) {
                const float xn = __fadd_rn(res, yr);
                no.res[r] = xn;
                ss = __fadd_rn(ss, __fmul_rn(xn, xn));
                mx = fmaxf(mx, fabsf(__fmul_rn(xn, nw)));
            } else {
                y[r] = yr;
            }
        }
    }
    TERN_TRACE_END(tr_mid);
    if constexpr (NO) {
        __shared__ float s_ss[kF32xThreads / 32], s_mx[kF32xThreads / 32];
        if (lane == 0) s_ss[threadIdx.x >> 5] = ss, s_mx[threadIdx.x >> 5] = mx;
        __syncthreads();
        if (threadIdx.x < 32) { /* (the kernel runs kF32xThreads threads: the loads ahead of the adds) */
            float t = 0.0f, m = 0.0f;
            if (threadIdx.x == 0)
#pragma unroll
                for (int i = 0; i < kF32xThreads / 32; i++) t = __fadd_rn(t, s_ss[i]);
            m = threadIdx.x < kF32xThreads / 32 ? s_mx[threadIdx.x] : 0.0f; /* (a constant bound: folds away) */
            if (threadIdx.x == 0) no.ss[blockIdx.x] = t;
            tern_raise_absmax(no.amax, m);
        }
    }
}

} /* namespace */

/* the grid of either form: a row per warp of `threads`, at most per_sm CTAs per SM (one wave) */
static int rowscale_grid(const TernCudaMatrix *W, int threads, int per_sm, unsigned *blocks) {
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int64_t wpc = threads / 32;
    int64_t b = (W->rows + wpc - 1) / wpc;
    if (b > (int64_t)sms * per_sm) b = (int64_t)sms * per_sm;
    *blocks = (unsigned)b;
    return 0;
}

/* x: one token of int8 activations, 16-byte aligned, x_cols (>= W->cols, a multiple
 * of 16) readable with zeros past W->cols; no host synchronisation (graph-safe). */
extern "C" int tern_gemv_i8_rowscale(const TernCudaMatrix *W, const int8_t *d_x, int64_t x_cols,
                                     const float *d_sx, float *d_y, cudaStream_t s) {
    if (W->n_groups != 1) return err_set("tern_gemv_i8_rowscale: %lld scale groups per row",
                                         (long long)W->n_groups);
    if (x_cols % 16 != 0 || x_cols < W->cols || ((uintptr_t)d_x & 15) != 0)
        return err_set("tern_gemv_i8_rowscale: activations must be 16-byte aligned with a "
                       "multiple of 16 columns");
    unsigned blocks = 0;
    if (rowscale_grid(W, 256, 8, &blocks) < 0) return -1;
    return tern_launch_pdl("gemv_i8_rowscale", gemv_i8_rowscale, dim3(blocks), dim3(256), s,
                           (const uint8_t *)W->d_codes, (const float *)W->d_scales, W->scale_stride, W->rows,
                           x_cols, W->row_bytes, d_x, d_sx, d_y);
}

/* the f32-input form's grid: CTAs of kF32xThreads, one per SM at most */
int tern_gemv_i8_rowscale_f32x_ctas(const TernCudaMatrix *W, unsigned *ctas) {
    return rowscale_grid(W, kF32xThreads, 1, ctas);
}

/* x: one token of f32 activations (W->cols of them, 16-byte aligned), max|x|
 * as the float bits *d_xmax; W->cols a multiple of 16, at most 8192; with
 * no, the folded norm's producer (no->n_ss set: the CTAs). */
int tern_gemv_i8_rowscale_f32x(const TernCudaMatrix *W, const float *d_x, const unsigned *d_xmax, float *d_y,
                               TernNormOut *no, cudaStream_t s) {
    if (W->n_groups != 1) return err_set("tern_gemv_i8_rowscale_f32x: %lld scale groups per row",
                                         (long long)W->n_groups);
    if (W->cols % 16 != 0 || W->row_bytes > 16 * kF32xChunks || ((uintptr_t)d_x & 15) != 0)
        return err_set("tern_gemv_i8_rowscale_f32x: %lld columns (a multiple of 16 up to %d, "
                       "16-byte aligned activations)",
                       (long long)W->cols, 64 * kF32xChunks);
    unsigned blocks = 0;
    if (tern_gemv_i8_rowscale_f32x_ctas(W, &blocks) < 0) return -1;
    NormOut n = {};
    if (no) {
        if (!no->res || !no->w || !no->amax || !no->ss)
            return err_set("tern_gemv_i8_rowscale_f32x: the folded norm's output without its buffers");
        if (blocks > TERN_NORM_SLOTS)
            return err_set("tern_gemv_i8_rowscale_f32x: %u CTAs, more than %d norm slots", blocks, TERN_NORM_SLOTS);
        n = {no->res, no->w, no->amax, no->ss};
        no->n_ss = (int)blocks;
    }
    const char *name = no ? "gemv_i8_rowscale_f32x (norm)" : "gemv_i8_rowscale_f32x";
    return tern_launch_pdl_smem(name, no ? gemv_i8_rowscale_f32x<true> : gemv_i8_rowscale_f32x<false>, dim3(blocks),
                                dim3(kF32xThreads), (size_t)W->cols, s, (const uint8_t *)W->d_codes,
                                (const float *)W->d_scales, W->scale_stride, W->rows, W->cols, W->row_bytes, d_x,
                                d_xmax, d_y, n, tern_cuda_l2ef_get());
}
