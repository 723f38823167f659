/* fwd_cuda.cu — the forward pass's non-matmul kernels (fwd_cuda.h).  Plain
 * CUDA-core kernels: they move a few bytes per weight byte of a decode step,
 * so they are written for clarity and one launch each. */
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>

#include "cuda/cuda_util.h"
#include "cuda/fwd_cuda.h"
#include "cuda/tern_launch.cuh"
extern "C" {
#include "kv/kv_ternary.h"
}
#include "cuda/tern_mma.cuh"

namespace {

/* attention CTAs: 8 warps for small grids (a decode step at small batch: one
 * CTA per head and token, short contexts, so the keys a warp walks one after
 * another are the latency), 4 warps for large ones (prefill, large batches:
 * 8 warps measured 9-11 % slower at prefill 2048).  The two add in different
 * orders (last-bit differences), so the choice uses the whole model's heads:
 * a tensor-parallel rank picks what one GPU would. */
constexpr int kAttnThreadsSmall = 256, kAttnThreadsLarge = 128;
/* 16 warps for the smallest grids (<= 64 heads x tokens: one or two tokens of
 * a 32-head model): a warp's runs of keys after the projection are fewer.
 * H200, bench-e2e tern-i8, same binary, three rounds: B = 1 7B 914-925 ->
 * 931-934 tok/s (prompt 64; 928 -> 940 at prompt 1024), 27B 311-312 ->
 * 312-313; at B = 8 (256 heads x tokens) 16 warps lost 3 % (7B 4476-4520 ->
 * 4332-4350), so 8 stay there. */
constexpr int kAttnThreadsTiny = 512, kAttnTinyGrid = 64;
constexpr int kAttnChunk = 256; /* keys scored per pass of the online softmax */
/* The per-warp attention's key split (flash decoding): where the tokens x heads
 * are fewer CTAs than SMs, a token's keys are split over up to kAttnMaxSplit
 * CTAs of kAttnSplitKeys keys or more each; the last of them to finish merges
 * their states. */
constexpr int kAttnMaxSplit = 8, kAttnSplitKeys = 128;
static_assert(kAttnMaxSplit <= 32, "the merge takes a split a lane of one warp");

int grid1(int64_t total, int threads) {
    int64_t b = (total + threads - 1) / threads;
    return (int)(b > 65535 ? 65535 : b < 1 ? 1 : b);
}

__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Block-wide sum / max (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result.  `red` holds 32 floats of shared memory. */
__device__ float block_sum(float v, float *red) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    float r = lane < nw ? red[lane] : 0.0f;
    return warp_sum(r);
}
__device__ float block_max(float v, float *red) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    float r = lane < nw ? red[lane] : -INFINITY;
    return warp_max(r);
}

constexpr int kRowThreads = 1024; /* row kernels: a decode step has few rows, so one
                                    * CTA per row must keep many loads in flight */

/* One CTA per row: x += h (optional, written back), out = x * rsqrt(mean(x^2)
 * + eps) * w in f32 and/or bf16, and optionally the row's int8 activations
 * of the f32 out values (act_quant_int8_ref: s = 127 / max(max|out|, 1e-5)).
 * V4: dim % 4 == 0 and 16-byte aligned rows (float4 loads). */
template <bool V4>
__global__ void __launch_bounds__(kRowThreads)
norm_kernel(float *x, const float *h, const float *w, int64_t dim, float eps, float *o32,
            __nv_bfloat16 *o16, int8_t *xq, float *sx) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    float *xr = x + blockIdx.x * dim;
    const float *hr = h ? h + blockIdx.x * dim : nullptr;
    const int64_t row = blockIdx.x * dim;
    constexpr int W = V4 ? 4 : 1;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x * W; i < dim; i += (int64_t)blockDim.x * W) {
        float v[W];
        if constexpr (V4) {
            float4 a = *reinterpret_cast<const float4 *>(xr + i);
            if (hr) {
                const float4 b = *reinterpret_cast<const float4 *>(hr + i);
                a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
                *reinterpret_cast<float4 *>(xr + i) = a;
            }
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        } else {
            v[0] = xr[i];
            if (hr) xr[i] = v[0] = v[0] + hr[i];
        }
#pragma unroll
        for (int e = 0; e < W; e++) ss += v[e] * v[e];
    }
    ss = block_sum(ss, red);
    const float r = 1.0f / sqrtf(ss / (float)dim + eps);
    float mx = 0.0f;
    for (int64_t i = threadIdx.x * W; i < dim; i += (int64_t)blockDim.x * W) {
        float v[W];
#pragma unroll
        for (int e = 0; e < W; e++) {
            v[e] = __fmul_rn(w[i + e], __fmul_rn(xr[i + e], r));
            mx = fmaxf(mx, fabsf(v[e]));
        }
        if constexpr (V4) {
            if (o32) *reinterpret_cast<float4 *>(o32 + row + i) = make_float4(v[0], v[1], v[2], v[3]);
            if (o16) {
                *reinterpret_cast<__nv_bfloat162 *>(o16 + row + i) = __floats2bfloat162_rn(v[0], v[1]);
                *reinterpret_cast<__nv_bfloat162 *>(o16 + row + i + 2) = __floats2bfloat162_rn(v[2], v[3]);
            }
        } else {
            if (o32) o32[row + i] = v[0];
            if (o16) o16[row + i] = __float2bfloat16_rn(v[0]);
        }
    }
    if (!xq) return;
    mx = block_max(mx, red);
    const float s = tern_act_scale(mx);
    for (int64_t i = threadIdx.x * W; i < dim; i += (int64_t)blockDim.x * W) {
        int8_t q[W];
#pragma unroll
        for (int e = 0; e < W; e++) q[e] = tern_quant1(__fmul_rn(w[i + e], __fmul_rn(xr[i + e], r)), s);
        if constexpr (V4) *reinterpret_cast<char4 *>(xq + row + i) = make_char4(q[0], q[1], q[2], q[3]);
        else xq[row + i] = q[0];
    }
    if (threadIdx.x == 0) sx[blockIdx.x] = s;
}

/* One CTA per row: y = act(g) * u (g, u rows of stride ld) into o32 (n, cols),
 * optional bf16 copy and int8 activations of the f32 values. */
template <bool V4>
__global__ void __launch_bounds__(kRowThreads)
glu_rows_kernel(int act, const float *g, const float *u, int64_t cols, int64_t ld, float *o32,
                __nv_bfloat16 *o16, int8_t *xq, float *sx) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    const float *gr = g + blockIdx.x * ld, *ur = u + blockIdx.x * ld;
    const int64_t row = blockIdx.x * cols;
    float *orow = o32 + row;
    constexpr int W = V4 ? 4 : 1;
    float mx = 0.0f;
    for (int64_t i = threadIdx.x * W; i < cols; i += (int64_t)blockDim.x * W) {
        float v[W];
        if constexpr (V4) {
            const float4 a = *reinterpret_cast<const float4 *>(gr + i);
            const float4 b = *reinterpret_cast<const float4 *>(ur + i);
            v[0] = tern_glu1(act, a.x, b.x), v[1] = tern_glu1(act, a.y, b.y);
            v[2] = tern_glu1(act, a.z, b.z), v[3] = tern_glu1(act, a.w, b.w);
            *reinterpret_cast<float4 *>(orow + i) = make_float4(v[0], v[1], v[2], v[3]);
            if (o16) {
                *reinterpret_cast<__nv_bfloat162 *>(o16 + row + i) = __floats2bfloat162_rn(v[0], v[1]);
                *reinterpret_cast<__nv_bfloat162 *>(o16 + row + i + 2) = __floats2bfloat162_rn(v[2], v[3]);
            }
        } else {
            v[0] = tern_glu1(act, gr[i], ur[i]);
            orow[i] = v[0];
            if (o16) o16[row + i] = __float2bfloat16_rn(v[0]);
        }
#pragma unroll
        for (int e = 0; e < W; e++) mx = fmaxf(mx, fabsf(v[e]));
    }
    if (!xq) return;
    mx = block_max(mx, red); /* its __syncthreads also orders the o32 writes before the reads */
    const float s = tern_act_scale(mx);
    for (int64_t i = threadIdx.x * W; i < cols; i += (int64_t)blockDim.x * W) {
        int8_t q[W];
#pragma unroll
        for (int e = 0; e < W; e++) q[e] = tern_quant1(orow[i + e], s);
        if constexpr (V4) *reinterpret_cast<char4 *>(xq + row + i) = make_char4(q[0], q[1], q[2], q[3]);
        else xq[row + i] = q[0];
    }
    if (threadIdx.x == 0) sx[blockIdx.x] = s;
}

/* Rows of up to kCache * 4 * blockDim.x columns (float4-aligned): the same
 * arithmetic as norm_kernel<true> / glu_rows_kernel<true> with each thread's
 * values kept in registers between the passes instead of read again from
 * global memory (two fewer memory round trips on a decode step's critical
 * path).  Results are bit-identical to the uncached kernels. */
constexpr int kCache = 4;

/* The int8 tail of the register-cached row kernels: this thread's values
 * v[c] of columns 4 * threadIdx.x + c * step (+0..3) and their |max| mx;
 * the row's scale 127 / max|v| into sx[blockIdx.x], the codes into xq. */
template <int KC>
__device__ __forceinline__ void quant_cached_row(const float4 (&v)[KC], float mx, int64_t n,
                                                 int64_t row, int64_t step, int8_t *xq, float *sx,
                                                 float *red) {
    mx = block_max(mx, red);
    const float s = tern_act_scale(mx);
#pragma unroll
    for (int c = 0; c < KC; c++) {
        const int64_t i = threadIdx.x * 4 + c * step;
        if (i >= n) break;
        *reinterpret_cast<char4 *>(xq + row + i) =
            make_char4(tern_quant1(v[c].x, s), tern_quant1(v[c].y, s), tern_quant1(v[c].z, s), tern_quant1(v[c].w, s));
    }
    if (threadIdx.x == 0) sx[blockIdx.x] = s;
}

/* DEF: h is a GEMV's output still in its split-K partials (one row,
 * tern_cuda_matmul_i8_f32x_defer): h[i] formed as that GEMV's finisher would
 * have (tern_i8_out of the row's scale, the exact sum and 127 / max|x|), the
 * partials set back to zero.  Read before the wait: w (a weight) and, DEF or
 * xr (fwdc_norm_x_ready), x — then x's last writer ran before the kernel
 * before this one, which waits for its own predecessor before it lets this
 * kernel start (every ternary GEMV / GEMM: pdl_wait, then pdl_trigger; a
 * kernel launched without the attribute lets it start only once complete),
 * so x is final when this kernel runs at all; DEF: the GEMV's scales and
 * max|x| of its input too (written before that GEMV's wait), the partials
 * after the wait. */
template <bool DEF, int KC>
__global__ void __launch_bounds__(kRowThreads)
norm_kernel_c(float *x, const float *h, TernDeferred hd, const float *w, int64_t dim, float eps, float *o32,
              __nv_bfloat16 *o16, int8_t *xq, float *sx, int xr) {
    pdl_trigger();
    __shared__ float red[32];
    float *xrow = x + blockIdx.x * dim;
    const float *hr = h ? h + blockIdx.x * dim : nullptr;
    const int64_t row = blockIdx.x * dim, step = (int64_t)blockDim.x * 4;
    float4 xv[KC], wv[KC], sv[KC];
    float ss = 0.0f;
    constexpr int kPre = KC < 2 ? KC : 2; /* (columns past 2 x 4096 read after the wait: no spills) */
    const bool early = DEF || xr;
    const int64_t ss1 = hd.scale_stride;
    /* (what earlier kernels wrote read through L2, __ldcg: no L1 line of this SM can be older) */
    const float hsx = DEF ? tern_act_scale(__uint_as_float(__ldcg(hd.xmax))) : 0.0f;
#pragma unroll
    for (int c = 0; c < KC; c++) {
        const int64_t i = threadIdx.x * 4 + c * step;
        if (i >= dim) break;
        wv[c] = *reinterpret_cast<const float4 *>(w + i);
        if (early && c < kPre) xv[c] = __ldcg(reinterpret_cast<const float4 *>(xrow + i));
        if (DEF && c < kPre) {
            const float *sc = hd.scales + i * ss1;
            sv[c] = make_float4(sc[0], sc[ss1], sc[2 * ss1], sc[3 * ss1]);
        }
    }
    pdl_wait();
#pragma unroll
    for (int c = 0; c < KC; c++) {
        const int64_t i = threadIdx.x * 4 + c * step;
        if (i >= dim) break;
        float4 a = early && c < kPre ? xv[c] : *reinterpret_cast<const float4 *>(xrow + i);
        if constexpr (DEF) {
            if (c >= kPre) {
                const float *sc = hd.scales + i * ss1;
                sv[c] = make_float4(sc[0], sc[ss1], sc[2 * ss1], sc[3 * ss1]);
            }
            const int4 d = *reinterpret_cast<const int4 *>(hd.part + i);
            *reinterpret_cast<int4 *>(hd.part + i) = make_int4(0, 0, 0, 0);
            a.x += tern_i8_out(sv[c].x, (float)d.x, hsx);
            a.y += tern_i8_out(sv[c].y, (float)d.y, hsx);
            a.z += tern_i8_out(sv[c].z, (float)d.z, hsx);
            a.w += tern_i8_out(sv[c].w, (float)d.w, hsx);
            *reinterpret_cast<float4 *>(xrow + i) = a;
        } else if (hr) {
            const float4 b = *reinterpret_cast<const float4 *>(hr + i);
            a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
            *reinterpret_cast<float4 *>(xrow + i) = a;
        }
        xv[c] = a;
        ss += a.x * a.x;
        ss += a.y * a.y;
        ss += a.z * a.z;
        ss += a.w * a.w;
    }
    ss = block_sum(ss, red);
    TERN_TRACE_NOW(tr_mid);
    const float r = 1.0f / sqrtf(ss / (float)dim + eps);
    float mx = 0.0f;
#pragma unroll
    for (int c = 0; c < KC; c++) {
        const int64_t i = threadIdx.x * 4 + c * step;
        if (i >= dim) break;
        float4 v;
        v.x = __fmul_rn(wv[c].x, __fmul_rn(xv[c].x, r));
        v.y = __fmul_rn(wv[c].y, __fmul_rn(xv[c].y, r));
        v.z = __fmul_rn(wv[c].z, __fmul_rn(xv[c].z, r));
        v.w = __fmul_rn(wv[c].w, __fmul_rn(xv[c].w, r));
        mx = fmaxf(mx, fabsf(v.x));
        mx = fmaxf(mx, fabsf(v.y));
        mx = fmaxf(mx, fabsf(v.z));
        mx = fmaxf(mx, fabsf(v.w));
        if (o32) *reinterpret_cast<float4 *>(o32 + row + i) = v;
        if (o16) {
            *reinterpret_cast<__nv_bfloat162 *>(o16 + row + i) = __floats2bfloat162_rn(v.x, v.y);
            *reinterpret_cast<__nv_bfloat162 *>(o16 + row + i + 2) = __floats2bfloat162_rn(v.z, v.w);
        }
        xv[c] = v;
    }
    if (xq) quant_cached_row(xv, mx, dim, row, step, xq, sx, red);
    TERN_TRACE_END(tr_mid);
}

/* The register-cached GLU pass of one row: columns c0 + 4 threadIdx.x +
 * c step (c < kCache) below c1, act(g) * u written to o32 (and o16) and kept
 * in vv; returns this thread's |max|. */
__device__ __forceinline__ float glu_cached_pass(int act, const float *gr, const float *ur, int64_t c0,
                                                 int64_t c1, int64_t row, int64_t step, float *o32,
                                                 __nv_bfloat16 *o16, float4 (&vv)[kCache]) {
    float mx = 0.0f;
#pragma unroll
    for (int c = 0; c < kCache; c++) {
        const int64_t i = c0 + threadIdx.x * 4 + c * step;
        if (i >= c1) break;
        const float4 a = *reinterpret_cast<const float4 *>(gr + i);
        const float4 b = *reinterpret_cast<const float4 *>(ur + i);
        float4 v;
        v.x = tern_glu1(act, a.x, b.x), v.y = tern_glu1(act, a.y, b.y);
        v.z = tern_glu1(act, a.z, b.z), v.w = tern_glu1(act, a.w, b.w);
        *reinterpret_cast<float4 *>(o32 + row + i) = v;
        if (o16) {
            *reinterpret_cast<__nv_bfloat162 *>(o16 + row + i) = __floats2bfloat162_rn(v.x, v.y);
            *reinterpret_cast<__nv_bfloat162 *>(o16 + row + i + 2) = __floats2bfloat162_rn(v.z, v.w);
        }
        mx = fmaxf(mx, fabsf(v.x));
        mx = fmaxf(mx, fabsf(v.y));
        mx = fmaxf(mx, fabsf(v.z));
        mx = fmaxf(mx, fabsf(v.w));
        vv[c] = v;
    }
    return mx;
}

__global__ void __launch_bounds__(kRowThreads)
glu_rows_kernel_c(int act, const float *g, const float *u, int64_t cols, int64_t ld, float *o32,
                  __nv_bfloat16 *o16, int8_t *xq, float *sx) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    const float *gr = g + blockIdx.x * ld, *ur = u + blockIdx.x * ld;
    const int64_t row = blockIdx.x * cols, step = (int64_t)blockDim.x * 4;
    float4 vv[kCache];
    const float mx = glu_cached_pass(act, gr, ur, 0, cols, row, step, o32, o16, vv);
    if (xq) quant_cached_row(vv, mx, cols, row, step, xq, sx, red);
}



/* Few rows (a decode step at small batch): glu_rows_kernel_c's arithmetic with
 * each row split over a cluster of kGluCl CTAs (one SM streamed a whole row of
 * gate|up before: 11008-36864 columns); the CTAs' |max| meet through
 * distributed shared memory.  max is exact, so the results are bit-identical
 * to the one-CTA kernels. */
constexpr int kGluCl = 8, kGluClThreads = 512;

__global__ void __cluster_dims__(kGluCl, 1, 1) __launch_bounds__(kGluClThreads)
glu_rows_kernel_cl(int act, const float *g, const float *u, int64_t cols, int64_t ld, float *o32,
                   __nv_bfloat16 *o16, int8_t *xq, float *sx) {
    pdl_trigger();
    pdl_wait();
    namespace cg = cooperative_groups;
    __shared__ float red[32];
    __shared__ float s_mx;
    cg::cluster_group cl = cg::this_cluster();
    const int rank = (int)cl.block_rank();
    const int64_t r = blockIdx.x / kGluCl, sl = ((cols + kGluCl - 1) / kGluCl + 3) / 4 * 4;
    const int64_t c0 = rank * sl, c1 = c0 + sl < cols ? c0 + sl : cols;
    const float *gr = g + r * ld, *ur = u + r * ld;
    const int64_t row = r * cols, step = (int64_t)blockDim.x * 4;
    float4 vv[kCache];
    float mx = glu_cached_pass(act, gr, ur, c0, c1, row, step, o32, o16, vv);
    if (!xq) return;
    mx = block_max(mx, red);
    if (threadIdx.x == 0) s_mx = mx;
    cl.sync(); /* every CTA's s_mx is written */
    float m = 0.0f;
#pragma unroll
    for (int q = 0; q < kGluCl; q++) m = fmaxf(m, *cl.map_shared_rank(&s_mx, q));
    const float s = tern_act_scale(m);
#pragma unroll
    for (int c = 0; c < kCache; c++) {
        const int64_t i = c0 + threadIdx.x * 4 + c * step;
        if (i >= c1) break;
        *reinterpret_cast<char4 *>(xq + row + i) =
            make_char4(tern_quant1(vv[c].x, s), tern_quant1(vv[c].y, s), tern_quant1(vv[c].z, s), tern_quant1(vv[c].w, s));
    }
    if (rank == 0 && threadIdx.x == 0) sx[r] = s;
    cl.sync(); /* no CTA leaves while another may still read its s_mx */
}

/* Rotate-half RoPE of the pair (x1, x2) = dims (j, j + hd/2) by the angle
 * whose cosine / sine are c / s (fwd_rope_apply's rounding: no contraction). */
__device__ __forceinline__ void rope_pair(float x1, float x2, float c, float s, float *y1, float *y2) {
    *y1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
    *y2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

/* One thread per work item of a token: a q pair, a k pair (rotated, written
 * to its page) or a v element (copied to its page); grid (tokens, items /
 * 256).  A single CTA looping over the items was latency-bound (~17 us per
 * layer at 7B shapes). */
__global__ void rope_kv_kernel(float *q, int64_t ldq, float *k, int64_t ldk, const float *v,
                               int64_t ldv, const int32_t *pos, const int32_t *slot, int n_heads,
                               int n_kv, int hd, const float *cs, const float *sn, float *kp,
                               float *vp, int bs) {
    pdl_trigger();
    pdl_wait();
    const int64_t i = blockIdx.x;
    const int half = hd / 2;
    const int wq = n_heads * half, wk = n_kv * half;
    int e = blockIdx.y * blockDim.x + threadIdx.x;
    if (e >= wq + wk + n_kv * hd) return;
    const int p = pos[i], sl = slot[i], blk = sl / bs, off = sl % bs;
    if (e < wq + wk) {
        const bool isq = e < wq;
        if (!isq) e -= wq;
        const int h = e / half, j = e % half;
        const float c = cs[(int64_t)p * half + j], s = sn[(int64_t)p * half + j];
        float *r = (isq ? q + i * ldq : k + i * ldk) + (int64_t)h * hd;
        float y1, y2;
        rope_pair(r[j], r[j + half], c, s, &y1, &y2);
        r[j] = y1;
        r[j + half] = y2;
        if (!isq && kp) {
            float *dst = kp + (((int64_t)blk * n_kv + h) * bs + off) * hd;
            dst[j] = y1;
            dst[j + half] = y2;
        }
    } else if (vp) {
        e -= wq + wk;
        const int h = e / hd, d = e % hd;
        vp[(((int64_t)blk * n_kv + h) * bs + off) * hd + d] = v[i * ldv + e];
    }
}

/* kvt_quant_row's group scale before its f16 rounding: the mean of |x| over
 * cnt values summed one by one, clamped to [1e-8, 65504]; and a value's code
 * q in {-1, 0, 1}: rintf(x / mean) clamped.  The sum is one chain of adds in
 * the CPU's order; its loads go sixteen at a time, ahead of their adds (a
 * load an iteration put a memory round trip into every fourth add: 32 for a
 * 128-dim V row). */
__device__ __forceinline__ float kvt_group_mean(const float *x, int cnt) {
    float sum = 0.0f;
    int j = 0;
    for (; j + 16 <= cnt; j += 16) {
        float a[16];
#pragma unroll
        for (int u = 0; u < 16; u++) a[u] = x[j + u];
#pragma unroll
        for (int u = 0; u < 16; u++) sum = __fadd_rn(sum, fabsf(a[u]));
    }
    for (; j < cnt; j++) sum = __fadd_rn(sum, fabsf(x[j]));
    float gam = __fdiv_rn(sum, (float)cnt);
    if (gam < 1e-8f) gam = 1e-8f;
    if (gam > 65504.0f) gam = 65504.0f;
    return gam;
}
__device__ __forceinline__ int kvt_code(float x, float gam) {
    const float q = rintf(__fdiv_rn(x, gam));
    return (int)(q > 1.0f ? 1.0f : (q < -1.0f ? -1.0f : q));
}

/* The KV policy's ternary rows in place (fwdc_kv_ternarise): token i's K and
 * V rows of KV head blockIdx.y at slot[i], one thread per scale group — a K
 * row's groups of KV_K_GROUP channels (thread t < nk), the V row whole
 * (thread nk) — with kvt_quant_row's operations in its order (the group's
 * |x| summed one by one, its mean, the clamps, rintf(x / mean), the scale
 * rounded to f16) and each value replaced by kvt_dequant_row's (code - 1) x
 * scale: the CPU's bits.  grid (tokens, n_kv), 32 threads (hd <= 256). */
__global__ void kv_ternarise_kernel(float *kp, float *vp, const int32_t *slot, int n_kv, int hd, int bs) {
    pdl_trigger();
    pdl_wait();
    const int64_t i = blockIdx.x;
    const int h = blockIdx.y, t = threadIdx.x, nk = tern_kv_scales(hd, 1);
    if (t > nk) return;
    const int sl = slot[i];
    const int64_t off = (((int64_t)(sl / bs) * n_kv + h) * bs + sl % bs) * hd;
    float *x = t < nk ? kp + off + (int64_t)t * KV_K_GROUP : vp + off;
    const int cnt = t < nk ? min(KV_K_GROUP, hd - t * KV_K_GROUP) : hd;
    const float gam = kvt_group_mean(x, cnt), sc = __half2float(__float2half_rn(gam));
    for (int j = 0; j < cnt; j++) x[j] = __fmul_rn((float)kvt_code(x[j], gam), sc);
}

/* The ternary pages' coding (fwdc_kv_code_rows): token i's K and V rows of
 * KV head blockIdx.y from the activations, one thread per scale group as in
 * kv_ternarise_kernel (the same operations), its codes and f16 scale written
 * as kvt_quant_row writes them (padding code 1).  A K group of KV_K_GROUP
 * channels owns KV_K_GROUP / 4 whole bytes. */
/* (KV_K_GROUP % 4 == 0: asserted with layout TKV, kernels/ternary_format.h) */
__global__ void kv_code_rows_kernel(const float *k, int64_t ldk, const float *v, int64_t ldv, const int32_t *slot,
                                    int n_kv, int hd, int bs, FwdcKvTern pg) {
    pdl_trigger();
    pdl_wait();
    const int64_t i = blockIdx.x;
    const int h = blockIdx.y, t = threadIdx.x, nk = tern_kv_scales(hd, 1), cb = tern_kv_code_bytes(hd);
    if (t > nk) return;
    const int sl = slot[i];
    const int64_t r = ((int64_t)(sl / bs) * n_kv + h) * bs + sl % bs;
    const float *x = t < nk ? k + i * ldk + (int64_t)h * hd + (int64_t)t * KV_K_GROUP : v + i * ldv + (int64_t)h * hd;
    const int cnt = t < nk ? min(KV_K_GROUP, hd - t * KV_K_GROUP) : hd;
    const float gam = kvt_group_mean(x, cnt);
    uint8_t *codes = t < nk ? pg.kc + r * cb + t * (KV_K_GROUP / 4) : pg.vc + r * cb;
    for (int b = 0; b < (cnt + 3) / 4; b++) {
        unsigned byte = TERN_BYTE_ZERO; /* code 1 (zero) where the row ends inside the byte */
        for (int u = 0; u < 4 && 4 * b + u < cnt; u++)
            byte = (byte & ~(3u << (2 * u))) | ((unsigned)(kvt_code(x[4 * b + u], gam) + 1) << (2 * u));
        codes[b] = (uint8_t)byte;
    }
    *(t < nk ? pg.ks + r * tern_kv_scales(hd, 1) + t : pg.vs + r) =
        __half_as_ushort(__float2half_rn(gam));
}

/* kvt_dequant_row's value of the low two bits of c with scale s, and of the
 * four codes of a byte; the f16 scale at p as f32. */
__device__ __forceinline__ float kvt_val(unsigned c, float s) { return __fmul_rn((float)((int)(c & 3u) - 1), s); }
__device__ __forceinline__ float4 kvt_val4(unsigned b, float s) {
    return make_float4(kvt_val(b, s), kvt_val(b >> 2, s), kvt_val(b >> 4, s), kvt_val(b >> 6, s));
}
/* a K / V scale: f16 bits */
__device__ __forceinline__ float kvt_half(unsigned short b) { return __half2float(__ushort_as_half(b)); }
__device__ __forceinline__ float kvt_scale(const uint16_t *p) { return kvt_half(*p); }
/* N 32-bit words from p (16-byte aligned) in 16-byte loads */
template <int N>
__device__ __forceinline__ void kvt_words16(const void *p, uint32_t (&w)[N]) {
    static_assert(N % 4 == 0, "whole 16-byte loads");
#pragma unroll
    for (int g = 0; g < N; g += 4) {
        const uint4 a = reinterpret_cast<const uint4 *>(p)[g / 4];
        w[g] = a.x, w[g + 1] = a.y, w[g + 2] = a.z, w[g + 3] = a.w;
    }
}
/* a code byte's four factors c - 1 without a conversion instruction: the
 * float 2^23 + c (its bits 0x4B000000 | c) less 2^23 + 1, exact */
__device__ __forceinline__ float kvt_fac(unsigned b, int i) {
    return __fsub_rn(__uint_as_float(0x4B000000u | (b >> (2 * i) & 3u)), 8388609.0f);
}
__device__ __forceinline__ float4 kvt_fac4(unsigned b) {
    return make_float4(kvt_fac(b, 0), kvt_fac(b, 1), kvt_fac(b, 2), kvt_fac(b, 3));
}

/* Offset (floats) of position p's row of KV head kvh in a layer's pages,
 * through the sequence's block-table row tb. */
__device__ __forceinline__ int64_t kv_row(const int32_t *tb, int p, int bs, int n_kv, int kvh, int hd) {
    return (((int64_t)tb[p / bs] * n_kv + kvh) * bs + p % bs) * hd;
}

/* One CTA per (token, query head), keys in chunks of kAttnChunk with an
 * online softmax (running max and sum).  Scores: one warp per key, lanes over
 * head_dim (coalesced float4 loads, q in shared memory; the page offsets of
 * a chunk are looked up first, one thread per key — a thread per key doing
 * the whole dot product issued its 32 loads one after another).  Values:
 * warp w takes keys w, w + kWarps, ...; lane l dims l, l+32, ...; the warps'
 * partial sums are added at the end. */
template <int kAttnThreads>
__global__ void __launch_bounds__(kAttnThreads)
attention_kernel(const float *q, int64_t ldq, const float *kp, const float *vp,
                 const int32_t *pos, const int32_t *tab, int tab_stride, const int32_t *tab_row,
                 int n_heads, int n_kv, int hd, int bs, float scale, float *out) {
    pdl_trigger();
    pdl_wait();
    constexpr int kWarps = kAttnThreads / 32, kDims = 256 / 32;
    __shared__ __align__(16) float qs[256];
    __shared__ float sc[kAttnChunk];
    __shared__ int64_t roff[kAttnChunk];
    __shared__ float part[kWarps][256];
    __shared__ float red[32];
    const int64_t i = blockIdx.x;
    const int h = blockIdx.y, kvh = h / (n_heads / n_kv);
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int ctx = pos[i] + 1;
    const int32_t *tb = tab + (int64_t)tab_row[i] * tab_stride;
    const float *qr = q + i * ldq + (int64_t)h * hd;
    for (int d = t; d < hd; d += kAttnThreads) qs[d] = qr[d];
    const bool vec = (hd & 3) == 0;
    float acc[kDims];
#pragma unroll
    for (int r = 0; r < kDims; r++) acc[r] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    __syncthreads();
    for (int c0 = 0; c0 < ctx; c0 += kAttnChunk) {
        const int cn = ctx - c0 < kAttnChunk ? ctx - c0 : kAttnChunk;
        /* page offsets of the chunk's keys (one table load each), then the
         * scores: warp w takes keys w, w + kWarps, ...; lane l dims 4l.. of
         * 128 (coalesced float4 loads), a warp sum per key */
        for (int j = t; j < cn; j += kAttnThreads) roff[j] = kv_row(tb, c0 + j, bs, n_kv, kvh, hd);
        __syncthreads();
        float lm = -INFINITY;
#pragma unroll 4
        for (int j = warp; j < cn; j += kWarps) {
            const float *kr = kp + roff[j];
            float s = 0.0f;
            if (vec) {
                for (int d = 4 * lane; d < hd; d += 128) {
                    const float4 k4 = *reinterpret_cast<const float4 *>(kr + d);
                    s += qs[d] * k4.x + qs[d + 1] * k4.y + qs[d + 2] * k4.z + qs[d + 3] * k4.w;
                }
            } else {
                for (int d = lane; d < hd; d += 32) s += qs[d] * kr[d];
            }
            s = warp_sum(s) * scale;
            if (lane == 0) sc[j] = s;
            lm = fmaxf(lm, s);
        }
        const float mn = fmaxf(m, block_max(lm, red));
        const float corr = expf(m - mn); /* 0 on the first chunk (m = -inf) */
        float ls = 0.0f;
        for (int j = t; j < cn; j += kAttnThreads) {
            const float pj = expf(sc[j] - mn);
            sc[j] = pj;
            ls += pj;
        }
        l = l * corr + block_sum(ls, red); /* block_sum syncs: sc and roff are complete */
        m = mn;
#pragma unroll
        for (int r = 0; r < kDims; r++) acc[r] *= corr;
#pragma unroll 4
        for (int j = warp; j < cn; j += kWarps) {
            const float pj = sc[j];
            const float *vr = vp + roff[j];
#pragma unroll
            for (int r = 0; r < kDims; r++) {
                const int d = lane + 32 * r;
                if (d < hd) acc[r] += pj * vr[d];
            }
        }
        __syncthreads(); /* before the next chunk overwrites sc / roff */
    }
#pragma unroll
    for (int r = 0; r < kDims; r++) {
        const int d = lane + 32 * r;
        if (d < hd) part[warp][d] = acc[r];
    }
    __syncthreads();
    float *o = out + (i * n_heads + h) * (int64_t)hd;
    const float inv = 1.0f / l;
    for (int d = t; d < hd; d += kAttnThreads) {
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; w++) sum += part[w][d];
        o[d] = sum * inv;
    }
}

/* The decode step's RoPE and KV write folded into the attention
 * (attention_warp_kernel with kRope): q, k, v as the q|k|v projection left
 * them (not rotated); each CTA rotates its query head and its KV head's key
 * of the token at pos[i] (rope_pair, the bits rope_kv_kernel stores), keeps
 * that key and value in shared memory and scores the token's own position
 * from there; the first query head of each KV group writes them to the
 * token's slot.  No CTA reads that slot from the pages, so the tokens must
 * belong to distinct sequences (a decode batch).  omax (may be NULL):
 * max |out row i| raised into omax[i] as float bits (zero before) —
 * the scale of the row's int8 codes, formed by the next GEMV
 * (tern_cuda_matmul_i8_f32x) instead of an act-quant pass. */
struct AttnFuse {
    const float *k = nullptr, *v = nullptr;
    int64_t ldk = 0, ldv = 0;
    const int32_t *slot = nullptr;
    const float *cs = nullptr, *sn = nullptr;
    float *kw = nullptr, *vw = nullptr; /* the layer's pages, written */
    unsigned *omax = nullptr;
    /* 1: the token's K / V rows coded as the KV policy's ternary rows
     * (kvt_quant_row) before they are scored and stored — into f32 pages as
     * kv_ternarise_kernel's values, or (kTern) into ternary pages as
     * kv_code_rows_kernel's bytes */
    int code = 0;
};

/* The key split's scratch: per (token, head) a counter (zero, and left zero)
 * and gridDim.z states of (hd sums, max, sum of weights) */
struct AttnSplit {
    float *part = nullptr;
    int *ctr = nullptr;
};

/* The same attention with one online softmax per warp: warp w takes keys in
 * runs of kU (keys kU*w .., then kU*(w + kWarps) .., ...), loads the K and V
 * rows of a run together (one memory round trip per run, where scoring all
 * keys before reading any value costs two plus the block-wide max and sum),
 * and keeps its own running max, sum and weighted values; the warps' states
 * are merged once at the end.  Lanes hold head dims 4*lane + 128*r (float4,
 * head_dim % 4 == 0) or lane + 32*r (any head_dim); q sits in registers.
 * kRope: the fused decode form above (AttnFuse). */
template <int kThreads, int kMode, bool kRope, bool kTern,
          bool kSplit> /* kMode 0: float4, hd <= 128; 1: float4, hd <= 256; 2: scalars; 3 / 4 (kTern,
                                * hd % 16 == 0): key lanes, hd <= 128 / 256; kTern: K / V from ternary pages
                                * tz (kp, vp unused; with kRope the token's rows coded into them); kSplit:
                                * the keys split over gridDim.z CTAs (else gridDim.z is 1 and the split's
                                * code is compiled out: attn_warp_launch says where each is taken) */
/* (key lanes: at least one CTA an SM, no more asked — with the pair table ptxas otherwise held the
 * 256-thread head_dim <= 128 forms at 64 / 80 registers and spilled 28 / 36 bytes; now 96-103, no
 * spills; the other modes' bound as before, the same registers.  The 128-thread head_dim <= 128
 * key lanes (large grids) five CTAs an SM: the split merge's loads at once took them from 94 to
 * 103 registers, four CTAs; bound, 95, no spills.  The head_dim <= 256 key lanes of 128 / 256
 * threads (the pair table) 512 threads an SM, as they had without the table: unbound, their
 * fused forms took 139 registers, one 256-thread CTA an SM where 128 had left two; bound, 119,
 * no spills; the unfused ones 120-121 since the 16-byte row loads (123 before them, 127 / 120 before
 * the table), no spills) */
__global__ void __launch_bounds__(kThreads, kMode == 3 && kThreads == 128 ? 5
                                            : kMode == 4 && kThreads <= 256 ? 512 / kThreads
                                            : kMode >= 3 ? 1 : 0)
attention_warp_kernel(const float *q, int64_t ldq, const float *kp, const float *vp,
                      const int32_t *pos, const int32_t *tab, int tab_stride,
                      const int32_t *tab_row, int n_heads, int n_kv, int hd, int bs, float scale,
                      float *out, AttnFuse fz, FwdcKvTern tz, AttnSplit spw) {
    pdl_trigger();
    /* kRope: what the q|k|v projection (the kernel before) does not write is
     * read before the wait — this token's page offsets of the first chunk, the
     * rotation's cos / sin, the slot and the K / V rows of the warp's first run
     * of earlier positions (written by earlier steps), so that one memory round
     * trip, not three, follows the projection.  Sound because the kernel
     * before waits before it lets this one start (the GEMVs: pdl_wait, then
     * pdl_trigger; a kernel launched without the attribute never lets it
     * start early) and every kernel launched as a dependent waits before it
     * exits: when this one starts, all kernels before the projection — the
     * step's block-table update among them — have completed.  A row kernel
     * here (they trigger before they wait) would break it: see
     * fwdc_attention_rope's contract (fwd_cuda.h). */
    constexpr bool kVec = kMode != 2;
    /* key lanes (ternary pages, head_dim % 16 == 0): a warp scores 32 keys at once, lane j
     * key j, from its code words (one 32-bit word a K scale group) and the query in shared
     * memory — no shuffles a key, where the dims' lanes sum each key's products across the
     * warp; the values' lanes then add the 32 keys' weighted rows (ncu, H200, 7B at batch
     * 64 and 1k keys: the dims' lanes took 128 instructions a key and key, bound by them) */
    constexpr bool kKeys = kMode >= 3;
    constexpr int kG = kMode == 4 ? 256 / KV_K_GROUP : 128 / KV_K_GROUP; /* key lanes: K scale groups a row */
    static_assert(!kKeys || kTern, "key lanes read ternary pages");
    if (!kRope) pdl_wait();
    constexpr int kWarps = kThreads / 32, kU = 4, kE = kMode == 0 || kMode == 3 ? 4 : 8; /* head dims per lane */
    static_assert(!kRope || kThreads >= 128, "kRope: a thread per rotated pair (head_dim <= 256)");
    __shared__ int64_t roff[kAttnChunk];
    /* key lanes: the next chunk's rows (looked up, and their codes fetched into L2, while this
     * chunk is scored; roff and roff_n alternate) and the query's pair table: entry (p, n) the
     * products of dims 2p, 2p + 1 with the factors of a code nibble n (a pair's 16 entries on 16
     * banks: lanes at one pair read without conflicts) */
    __shared__ int64_t roff_n[kKeys ? kAttnChunk : 1];
    /* (head_dim <= 128: 4 KB; at 256, 8 KB, not at 16 warps: their staged value rows and the table
     * would pass the 48 KB of static shared memory) */
    constexpr bool kQT = kMode == 3 || (kMode == 4 && kThreads <= 256);
    __shared__ __align__(16) float qt[kQT ? (kMode == 4 ? 256 : 128) / 2 * 16 : 1];
    __shared__ float wm[kWarps], wl[kWarps];
    /* the warps' states at the end (wacc); key lanes: before that, each warp's staged value code
     * rows of its 32 keys (a row padded to an odd number of words: a lane's stores fall on
     * distinct banks). The chunk loop's last barrier separates the two uses. */
    constexpr int kVW = kMode == 4 ? 256 / 16 : 128 / 16; /* key lanes: value code words a row, at most */
    /* key lanes: a key's value code words and scale loaded with its key row's words, ahead of the
     * key's sum (H200, 7B tern-i8 ternary pages, 1024-token prompt, batch 4 / 8: 2.115 / 2.412 ->
     * 2.085 / 2.362 ms a step); where launch bounds hold the registers (128 threads; head_dim >
     * 128) after the sum, as before */
    constexpr bool kVEarly = kMode == 3 && kThreads >= 256;
    constexpr int kVsRow = 4 * kVW + 4;                   /* bytes a staged row */
    constexpr int kVsBytes = kKeys ? kWarps * 32 * kVsRow : 0, kWaccBytes = kWarps * 256 * (int)sizeof(float);
    __shared__ __align__(16) unsigned char wbuf[kVsBytes > kWaccBytes ? kVsBytes : kWaccBytes];
    float(*const wacc)[256] = reinterpret_cast<float(*)[256]>(wbuf);
    __shared__ __align__(16) float cur[kRope || kKeys ? 3 * 256 : 4]; /* rotated q, k; v of the token
                                                                       * (key lanes: q) */
    /* key lanes, kRope: the token's own coded rows, scored from here */
    __shared__ __align__(16) uint8_t okc[kKeys && kRope ? 64 : 4], ovc[kKeys && kRope ? 64 : 4];
    __shared__ __align__(16) uint16_t oks[kKeys && kRope ? 24 : 1];
    const int64_t i = blockIdx.x;
    const int h = blockIdx.y, kvh = h / (n_heads / n_kv);
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int ctx = pos[i] + 1;
    /* the key split: this CTA's keys [k0, k1) of se splits (se from the token's keys); the
     * last split holds the token's own position (kRope) */
    const int S = kSplit ? (int)gridDim.z : 1, spl = kSplit ? (int)blockIdx.z : 0;
    const int se = kSplit && S > 1 ? max(1, min(S, ctx / kAttnSplitKeys)) : 1;
    if (spl >= se) return;
    const int per = (ctx + se - 1) / se, k0 = spl * per, k1 = min(ctx, k0 + per);
    const bool last_split = spl == se - 1;
    const int32_t *tb = tab + (int64_t)tab_row[i] * tab_stride;
    const float *qr = q + i * ldq + (int64_t)h * hd;
    float *const cq = cur, *const ck = cur + (kRope ? 256 : 0), *const cv = cur + (kRope ? 512 : 0);
    /* lane's dims: e-th of kE at dim_of(e); valid when < hd */
    auto dim_of = [&](int e) { return kVec ? 4 * lane + 128 * (e / 4) + e % 4 : lane + 32 * e; };
    /* K and V of the run of kU keys from chunk key j0 (chunk c0 of cn keys)
     * into kr / vr: the pages' rows where glob, the token's own key (kRope:
     * from shared memory, warp-uniform) where own; zeros past the end */
    float kr[kU][kE], vr[kU][kE];
    /* kTern: roff holds page rows (kv_row of head_dim 1), cb code bytes and nks K scales a row */
    const int rhd = kTern ? 1 : hd, cb = tern_kv_code_bytes(hd), nks = tern_kv_scales(hd, 1);
    auto load_run = [&](int c0, int j0, int cn, bool glob, bool own_too) {
#pragma unroll
        for (int u = 0; u < kU; u++) {
            const bool ok = j0 + u < cn;
            const bool own = kRope && ok && c0 + j0 + u == ctx - 1;
            if (own ? !own_too : !glob) continue;
            if (kTern && !own) { /* (the own key, coded, is in shared memory as f32 values) */
                const int64_t r = ok ? roff[j0 + u] : 0;
                const float vs = ok ? kvt_scale(tz.vs + r) : 0.0f;
#pragma unroll
                for (int e = 0; e < kE; e += (kVec ? 4 : 1)) {
                    const int d = dim_of(e);
                    const bool in = ok && d < hd;
                    if (kVec) {
                        float4 k4 = make_float4(0.f, 0.f, 0.f, 0.f), v4 = k4;
                        if (in) {
                            const float ks = kvt_scale(tz.ks + r * nks + d / KV_K_GROUP);
                            /* (a code byte's four factors by arithmetic: a shared-memory table of them
                             * was 8 % slower at head_dim 128, its float4 reads' bank conflicts) */
                            const float4 kc = kvt_fac4(tz.kc[r * cb + d / 4]), vc = kvt_fac4(tz.vc[r * cb + d / 4]);
                            k4 = make_float4(__fmul_rn(kc.x, ks), __fmul_rn(kc.y, ks), __fmul_rn(kc.z, ks),
                                             __fmul_rn(kc.w, ks));
                            v4 = make_float4(__fmul_rn(vc.x, vs), __fmul_rn(vc.y, vs), __fmul_rn(vc.z, vs),
                                             __fmul_rn(vc.w, vs));
                        }
                        kr[u][e] = k4.x, kr[u][e + 1] = k4.y, kr[u][e + 2] = k4.z, kr[u][e + 3] = k4.w;
                        vr[u][e] = v4.x, vr[u][e + 1] = v4.y, vr[u][e + 2] = v4.z, vr[u][e + 3] = v4.w;
                    } else {
                        const int sh = 2 * (d % 4);
                        kr[u][e] = in ? kvt_val(tz.kc[r * cb + d / 4] >> sh, kvt_scale(tz.ks + r * nks + d / KV_K_GROUP))
                                      : 0.0f;
                        vr[u][e] = in ? kvt_val(tz.vc[r * cb + d / 4] >> sh, vs) : 0.0f;
                    }
                }
                continue;
            }
            const float *kb = kTern || own ? ck : kp + (ok ? roff[j0 + u] : 0),
                        *vb = kTern || own ? cv : vp + (ok ? roff[j0 + u] : 0);
#pragma unroll
            for (int e = 0; e < kE; e += (kVec ? 4 : 1)) {
                const int d = dim_of(e);
                if (kVec) {
                    float4 k4 = make_float4(0.f, 0.f, 0.f, 0.f), v4 = k4;
                    if (ok && d < hd) {
                        k4 = *reinterpret_cast<const float4 *>(kb + d);
                        v4 = *reinterpret_cast<const float4 *>(vb + d);
                    }
                    kr[u][e] = k4.x, kr[u][e + 1] = k4.y, kr[u][e + 2] = k4.z, kr[u][e + 3] = k4.w;
                    vr[u][e] = v4.x, vr[u][e + 1] = v4.y, vr[u][e + 2] = v4.z, vr[u][e + 3] = v4.w;
                } else {
                    kr[u][e] = ok && d < hd ? kb[d] : 0.0f;
                    vr[u][e] = ok && d < hd ? vb[d] : 0.0f;
                }
            }
        }
    };
    if constexpr (kRope) {
        const int half = hd / 2, p = ctx - 1, cn0 = k1 - k0 < kAttnChunk ? k1 - k0 : kAttnChunk;
        for (int j = t; j < cn0; j += kThreads) roff[j] = kv_row(tb, k0 + j, bs, n_kv, kvh, rhd);
        /* one CTA per KV head stores the token's K and V */
        const bool wr = last_split && h % (n_heads / n_kv) == 0;
        const int sl = wr ? fz.slot[i] : 0;
        const bool code = kTern || fz.code;
        const float c = t < half ? fz.cs[(int64_t)p * half + t] : 0.0f, s = t < half ? fz.sn[(int64_t)p * half + t] : 0.0f;
        __syncthreads(); /* roff */
        if constexpr (kKeys) { /* the code rows of the chunk's first 32 x kWarps keys into L2 */
            const int j = 32 * warp + lane;
            if (j < cn0 && k0 + j != p) {
                asm volatile("prefetch.global.L2 [%0];" ::"l"(tz.kc + roff[j] * cb));
                asm volatile("prefetch.global.L2 [%0];" ::"l"(tz.vc + roff[j] * cb));
            }
        } else {
            load_run(k0, kU * warp, cn0, true, false);
        }
        /* ternary pages off the key lanes: the codes of the warp's later runs of the chunk into L2
         * (a row's codes, one line each).  Not the f32 pages' K / V lines: their prefetch, a lane a
         * 128-byte line, cost more than it hid (H200, 7B tern-i8 kv none, same run, two rounds,
         * ms/step without it: 32-token prompt batch 1 / 8 1.060-1.061 / 1.736-1.740 -> 1.052-1.056
         * / 1.730-1.731; 1024-token prompt batch 1 / 8 / 64 1.523-1.564 / 4.122-4.131 /
         * 20.97-21.04 -> 1.464-1.500 / 4.005-4.019 / 18.66-18.70) */
        if constexpr (kTern && !kKeys)
            for (int j = kU * (warp + kWarps); j < cn0; j += kU * kWarps)
                for (int u = 0; u < kU && j + u < cn0; u++)
                    if (k0 + j + u != p && lane < 2)
                        asm volatile("prefetch.global.L2 [%0];" ::"l"((lane ? tz.vc : tz.kc) + roff[j + u] * cb));
        pdl_wait();
        const float *kr0 = fz.k + i * fz.ldk + (int64_t)kvh * hd, *vr0 = fz.v + i * fz.ldv + (int64_t)kvh * hd;
        const int64_t srow = ((int64_t)(sl / bs) * n_kv + kvh) * bs + sl % bs; /* the slot's page row */
        float *kw = kTern ? nullptr : fz.kw + srow * hd, *vw = kTern ? nullptr : fz.vw + srow * hd;
        const bool wf = wr && !code; /* the f32 values stored as they are */
        if (t < half) {
            float y1, y2;
            rope_pair(qr[t], qr[t + half], c, s, &cq[t], &cq[t + half]);
            rope_pair(kr0[t], kr0[t + half], c, s, &y1, &y2);
            ck[t] = y1, ck[t + half] = y2;
            if (wf) kw[t] = y1, kw[t + half] = y2;
        }
        for (int d = t; d < hd; d += kThreads) {
            const float x = vr0[d];
            cv[d] = x;
            if (wf) vw[d] = x;
        }
        if (code && last_split) { /* the rows coded: kv_code_rows_kernel's operations, the CTA's threads
                                   * sharing them */
            __shared__ float gam[256 / KV_K_GROUP + 1];
            __syncthreads(); /* the rotated k and v */
            if (t <= nks) gam[t] = t < nks ? kvt_group_mean(ck + t * KV_K_GROUP, min(KV_K_GROUP, hd - t * KV_K_GROUP))
                                           : kvt_group_mean(cv, hd);
            __syncthreads();
            const float gv = gam[nks], sv = __half2float(__float2half_rn(gv));
            /* a dim a thread (its two divisions; a thread coding a byte's four dims had eight in a
             * chain), a byte's codes gathered from its four lanes (d0: warp-uniform) */
            for (int d0 = 0; d0 < hd; d0 += kThreads) {
                const int d = d0 + t, sh = 2 * (d & 3);
                unsigned kbyte = 1u << sh, vbyte = 1u << sh; /* code 1 (zero) where the row ends inside the byte */
                if (d < hd) {
                    const int qk = kvt_code(ck[d], gam[d / KV_K_GROUP]), qv = kvt_code(cv[d], gv);
                    ck[d] = __fmul_rn((float)qk, __half2float(__float2half_rn(gam[d / KV_K_GROUP])));
                    cv[d] = __fmul_rn((float)qv, sv);
                    kbyte = (unsigned)(qk + 1) << sh, vbyte = (unsigned)(qv + 1) << sh;
                    if (!kTern && wr) kw[d] = ck[d], vw[d] = cv[d];
                }
#pragma unroll
                for (int o = 1; o <= 2; o <<= 1) {
                    kbyte |= __shfl_xor_sync(0xffffffffu, kbyte, o);
                    vbyte |= __shfl_xor_sync(0xffffffffu, vbyte, o);
                }
                if ((d & 3) == 0 && d < hd) {
                    const int b = d >> 2;
                    if (kTern && wr) tz.kc[srow * cb + b] = (uint8_t)kbyte, tz.vc[srow * cb + b] = (uint8_t)vbyte;
                    if (kKeys) okc[b] = (uint8_t)kbyte, ovc[b] = (uint8_t)vbyte;
                }
            }
            if (kTern && t <= nks) {
                const uint16_t h16 = __half_as_ushort(__float2half_rn(gam[t]));
                if (wr) *(t < nks ? tz.ks + srow * nks + t : tz.vs + srow) = h16;
                if (kKeys) oks[t] = h16; /* (oks[nks]: the V scale) */
            }
        }
        qr = cq;
    }
    float qv[kE], acc[kE];
    auto load_q = [&]() {
#pragma unroll
        for (int e = 0; e < kE; e++) {
            const int d = dim_of(e);
            qv[e] = d < hd ? qr[d] : 0.0f;
        }
    };
    if (!kRope && !kKeys) load_q();
#pragma unroll
    for (int e = 0; e < kE; e++) acc[e] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    if constexpr (kKeys) {
        /* key lanes: the query in shared memory (kRope: rotated there already), published by
         * the chunk's barrier below; l is each lane's part of the warp's sum until the end */
        float *const qs = cur;
        if (!kRope) { /* the query and the first chunk's page rows (kRope: in place already) */
            for (int d = t; d < hd; d += kThreads) qs[d] = qr[d];
            for (int j = t; j < k1 - k0 && j < kAttnChunk; j += kThreads) roff[j] = kv_row(tb, k0 + j, bs, n_kv, kvh, 1);
        }
        /* a key's code words and K scales (kVEarly: its value code words too) in 16-byte loads
         * where a row is kG whole scale groups and the pages are 16-byte aligned (uniform), not
         * a 4-byte load a word and 2-byte a scale: a lane a key, each load of the warp touches
         * as many rows as keys (H200, 7B tern-i8 on ternary pages, ms a step: 1024-token prompt,
         * batch 1 / 2 / 4 / 8, 1.240-1.241 / 1.919-1.921 / 2.074-2.076 / 2.367-2.373 ->
         * 1.232-1.233 / 1.898-1.900 / 2.055-2.058 / 2.326-2.330; 4096-token prompt, batch 1 / 2,
         * 1.449-1.451 / 2.355-2.357 -> 1.421-1.423 / 2.321-2.325; 32-token prompt batch 1 / 8
         * ~0.5 % slower, 1.124-1.126 / 1.767-1.770 -> 1.130-1.133 / 1.773-1.774) */
        const bool v16 = nks == kG && (((uintptr_t)tz.kc | (uintptr_t)tz.vc | (uintptr_t)tz.ks) & 15u) == 0;
        for (int c0 = k0, ci = 0; c0 < k1; c0 += kAttnChunk, ci++) {
            const int cn = k1 - c0 < kAttnChunk ? k1 - c0 : kAttnChunk;
            /* ro: this chunk's page rows (the first chunk's from above, the others' looked up during
             * the chunk before, into rn) */
            int64_t *const ro = ci & 1 ? roff_n : roff, *const rn = ci & 1 ? roff : roff_n;
            __syncthreads(); /* ro; q; kRope: the token's coded rows */
            if (kQT && c0 == k0) {
                for (int e = t; e < hd / 2 * 16; e += kThreads) {
                    const int pr = e / 16, nb = e % 16;
                    qt[e] = fmaf(qs[2 * pr + 1], (float)((nb >> 2) - 1), qs[2 * pr] * (float)((nb & 3) - 1));
                }
            }
            if (c0 + kAttnChunk < k1) { /* the next chunk's rows (rn was last read by the chunk before) */
                const int c1 = c0 + kAttnChunk, cn1 = k1 - c1 < kAttnChunk ? k1 - c1 : kAttnChunk;
                for (int j = t; j < cn1; j += kThreads) {
                    const int64_t r = kv_row(tb, c1 + j, bs, n_kv, kvh, 1);
                    rn[j] = r;
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(tz.kc + r * cb));
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(tz.vc + r * cb));
                }
            }
            if (kQT && c0 == k0) __syncthreads(); /* qt */
            /* keys a warp takes at once (lanes kb.. idle): the chunk spread over the warps in eights,
             * at most 32 — a warp's value loop is serial over its keys, the latency where keys are
             * few (one token's split, short contexts) */
            const int kb = min(32, (((cn + kWarps - 1) / kWarps) + 7) & ~7);
            for (int j0 = kb * warp; j0 < cn; j0 += kb * kWarps) {
                const int j = j0 + lane;
                const bool ok = lane < kb && j < cn, own = kRope && ok && c0 + j == ctx - 1;
                const int64_t r = ok ? ro[j] : 0;
                float sc = -INFINITY, vsj = 0.0f;
                /* the key's value code row and scale (read only where ok) */
                auto v_row = [&]() { return reinterpret_cast<const uint32_t *>(own ? ovc : tz.vc + r * cb); };
                auto v_scale = [&]() { return kvt_scale(own ? oks + nks : tz.vs + r); };
                uint32_t vv[kVW];
                /* the key's value code words into vv (16-byte loads where v16: for the staging below
                 * too, where the forms without kVEarly load them — H200, 7B tern-i8 on ternary pages,
                 * 1024-token prompt, batch 1 / 8 / 64, ms a step: 7b-hd256 1.305-1.306 / 2.429-2.435 /
                 * 7.377-7.441 -> 1.300 / 2.362-2.371 / 7.022-7.027, 7b 1.240-1.243 / 2.325-2.328 /
                 * 7.423-7.430 -> 1.238-1.242 / 2.326-2.331 / 7.402-7.408) */
                auto v_load = [&]() {
                    const uint32_t *const vwp = v_row();
                    if (v16) {
                        kvt_words16(vwp, vv);
                    } else {
#pragma unroll
                        for (int g = 0; g < kVW; g++)
                            if (4 * g < cb) vv[g] = vwp[g];
                    }
                };
                if (ok) {
                    const uint32_t *kw = reinterpret_cast<const uint32_t *>(own ? okc : tz.kc + r * cb);
                    const uint16_t *ksp = own ? oks : tz.ks + r * nks;
                    /* the row's code words and scales first (all loads in flight), then the sums */
                    uint32_t wv[kG];
                    float sg[kG];
                    if (v16) {
                        uint32_t hw[kG / 2]; /* the scales, two f16 a word (low first) */
                        kvt_words16(kw, wv);
                        kvt_words16(ksp, hw);
#pragma unroll
                        for (int g = 0; g < kG; g++)
                            sg[g] = kvt_half((unsigned short)(hw[g / 2] >> (16 * (g % 2))));
                    } else {
#pragma unroll
                        for (int g = 0; g < kG; g++)
                            if (g < nks) wv[g] = kw[g], sg[g] = kvt_scale(ksp + g);
                    }
                    if constexpr (kVEarly) {
                        v_load();
                        vsj = v_scale();
                    }
                    float dot = 0.0f;
#pragma unroll
                    for (int g = 0; g < kG; g++) {
                        if (g >= nks) break;
                        const uint32_t w = wv[g];
                        float part = 0.0f;
                        if constexpr (kQT) { /* a pair of dims a lookup */
                            const float *tg = qt + 8 * 16 * g;
#pragma unroll
                            for (int k = 0; k < 8; k++) part += tg[16 * k + (w >> (4 * k) & 15u)];
                        } else {
                            const float4 *q4 = reinterpret_cast<const float4 *>(qs + KV_K_GROUP * g);
#pragma unroll
                            for (int i4 = 0; i4 < 4; i4++) {
                                const float4 qv4 = q4[i4];
                                part = fmaf(qv4.x, kvt_fac(w, 4 * i4), part);
                                part = fmaf(qv4.y, kvt_fac(w, 4 * i4 + 1), part);
                                part = fmaf(qv4.z, kvt_fac(w, 4 * i4 + 2), part);
                                part = fmaf(qv4.w, kvt_fac(w, 4 * i4 + 3), part);
                            }
                        }
                        dot = fmaf(part, sg[g], dot);
                    }
                    sc = dot * scale;
                    if constexpr (!kVEarly) vsj = v_scale();
                }
                /* the key's value code row (kVEarly: loaded above), staged for the value lanes, where
                 * the values' loop below had taken a round trip per eight keys; past the keys: code 1
                 * (zeros) */
                uint8_t *const vst = wbuf + warp * 32 * kVsRow;
                {
                    if (!ok) {
#pragma unroll
                        for (int g = 0; g < kVW; g++)
                            if (4 * g < cb) vv[g] = 0x55555555u;
                    } else if (!kVEarly) {
                        v_load();
                    }
                    __syncwarp(); /* the warp's reads of its last staged rows are done */
#pragma unroll
                    for (int g = 0; g < kVW; g++)
                        if (4 * g < cb) reinterpret_cast<uint32_t *>(vst + lane * kVsRow)[g] = vv[g];
                    __syncwarp();
                }
                float mx = sc;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
                const float mn = fmaxf(m, mx); /* (lane 0's key exists: finite) */
                const float corr = expf(m - mn); /* 0 on a warp's first keys (m = -inf) */
                l *= corr;
#pragma unroll
                for (int e = 0; e < kE; e++) acc[e] *= corr;
                const float pj = ok ? expf(sc - mn) : 0.0f;
                l += pj;
                const float pv = pj * vsj;
                const int nk = cn - j0 < kb ? cn - j0 : kb;
                for (int jb = 0; jb < nk; jb += 8) { /* eight keys' staged code bytes, then their sums */
                    unsigned vb[8][kE / 4];
#pragma unroll
                    for (int u = 0; u < 8; u++) {
                        const int jj = jb + u;
                        const uint8_t *vcp = vst + jj * kVsRow;
#pragma unroll
                        for (int e = 0; e < kE; e += 4) {
                            const int d = dim_of(e);
                            vb[u][e / 4] = jj < nk && d < hd ? vcp[d / 4] : TERN_BYTE_ZERO; /* (past the keys: zeros) */
                        }
                    }
#pragma unroll
                    for (int u = 0; u < 8; u++) {
                        const float w = __shfl_sync(0xffffffffu, pv, jb + u); /* (0 past the keys) */
#pragma unroll
                        for (int e = 0; e < kE; e += 4) {
                            const unsigned b = vb[u][e / 4];
                            acc[e] = fmaf(w, kvt_fac(b, 0), acc[e]);
                            acc[e + 1] = fmaf(w, kvt_fac(b, 1), acc[e + 1]);
                            acc[e + 2] = fmaf(w, kvt_fac(b, 2), acc[e + 2]);
                            acc[e + 3] = fmaf(w, kvt_fac(b, 3), acc[e + 3]);
                        }
                    }
                }
                m = mn;
            }
            /* (the last chunk: the stages before wacc; between chunks the next one's first barrier
             * orders this one's reads of ro before its writes of rn, the same buffer) */
            if (c0 + kAttnChunk >= k1) __syncthreads();
        }
        l = warp_sum(l);
    }
    for (int c0 = k0; c0 < k1 && !kKeys; c0 += kAttnChunk) {
        const int cn = k1 - c0 < kAttnChunk ? k1 - c0 : kAttnChunk;
        if (!kRope || c0 > k0) /* (kRope: the first chunk's offsets are in place) */
            for (int j = t; j < cn; j += kThreads) roff[j] = kv_row(tb, c0 + j, bs, n_kv, kvh, rhd);
        __syncthreads(); /* roff; kRope: the rotated q, k and v */
        if (kRope && c0 == k0) load_q();
        for (int j0 = kU * warp; j0 < cn; j0 += kU * kWarps) {
            if (kRope && c0 == k0 && j0 == kU * warp) load_run(c0, j0, cn, false, true); /* loaded but the own key */
            else load_run(c0, j0, cn, true, true);
            float s[kU], mn = m;
#pragma unroll
            for (int u = 0; u < kU; u++) {
                float d = 0.0f;
#pragma unroll
                for (int e = 0; e < kE; e++) d += qv[e] * kr[u][e];
                s[u] = j0 + u < cn ? warp_sum(d) * scale : -INFINITY;
                mn = fmaxf(mn, s[u]);
            }
            const float corr = expf(m - mn); /* 0 on a warp's first run (m = -inf) */
            l *= corr;
#pragma unroll
            for (int e = 0; e < kE; e++) acc[e] *= corr;
#pragma unroll
            for (int u = 0; u < kU; u++) {
                const float pu = expf(s[u] - mn); /* 0 past the end */
                l += pu;
#pragma unroll
                for (int e = 0; e < kE; e++) acc[e] += pu * vr[u][e];
            }
            m = mn;
        }
        __syncthreads(); /* before the next chunk overwrites roff */
    }
    if (lane == 0) wm[warp] = m, wl[warp] = l;
#pragma unroll
    for (int e = 0; e < kE; e++) {
        const int d = dim_of(e);
        if (d < hd) wacc[warp][d] = acc[e];
    }
    __syncthreads();
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; w++) mx = fmaxf(mx, wm[w]);
    float den = 0.0f, f[kWarps];
#pragma unroll
    for (int w = 0; w < kWarps; w++) f[w] = expf(wm[w] - mx), den += wl[w] * f[w]; /* 0: no keys */
    const float inv = 1.0f / den;
    float *o = out + (i * n_heads + h) * (int64_t)hd;
    float amax = 0.0f;
    if (kSplit && se > 1) { /* the split's state into the scratch; the last split to finish merges them */
        float *pp = spw.part + ((i * n_heads + h) * (int64_t)S + spl) * (hd + 2);
        for (int d = t; d < hd; d += kThreads) {
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < kWarps; w++) sum += wacc[w][d] * f[w];
            pp[d] = sum;
        }
        if (t == 0) pp[hd] = mx, pp[hd + 1] = den;
        /* the count by thread 0 with release and acquire semantics, between two CTA barriers: the
         * first orders every thread's state stores before its release, the second the merger's
         * loads after its acquire — where every thread had fenced before the count and the merger's
         * again after it (H200, 7B tern-i8, 1024-token prompt, batch 1 / 2 / 4, ms a step: ternary
         * pages 1.253-1.258 / 1.933-1.935 / 2.091 -> 1.240-1.241 / 1.919-1.921 / 2.074-2.076, f32
         * pages 1.475-1.480 / 2.233-2.244 / 2.713-2.718 -> 1.467-1.473 / 2.218-2.223 / 2.691-2.699;
         * the merger's end 8.77 -> 7.97 us after the wait) */
        __shared__ int merge;
        __syncthreads();
        if (t == 0) {
            int old;
            asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;"
                         : "=r"(old)
                         : "l"(spw.ctr + i * n_heads + h)
                         : "memory");
            merge = old == se - 1;
        }
        __syncthreads();
        if (!merge) return;
        const float *p0 = spw.part + (i * n_heads + h) * (int64_t)S * (hd + 2);
        __shared__ float fsh[kAttnMaxSplit], lsh[kAttnMaxSplit], linv;
        /* (the scratch is the counters' slot, which every kernel leaves zero: each value
         * read is zeroed again) */
        float *pz = const_cast<float *>(p0);
        /* key lanes: this thread's first dim of every split, loaded with the weights below (one L2
         * round trip for both, where the dims' loads had waited for the weights' barrier).  Not
         * on the dims' lanes (modes 0-2: f32 pages, and ternary pages off the key lanes): ptxas
         * spilled there (8 bytes at 128 / 256 threads; H200, 7B tern-i8 f32 pages batch 8,
         * 4096-token prompt, 10.03-10.05 -> 10.26 ms a step) */
        float v0[kKeys ? kAttnMaxSplit : 1];
        if constexpr (kKeys) {
#pragma unroll
            for (int sp = 0; sp < kAttnMaxSplit; sp++)
                if (sp < se && t < hd) v0[sp] = __ldcg(p0 + sp * (hd + 2) + t);
        }
        if (t < 32) { /* the splits' weights, one split a lane, summed in split order by lane 0:
                       * the same bits whichever CTA merges.  Every split's state is loaded at
                       * once (a loop of dependent loads took one L2 round trip a split) */
            const bool on = t < se;
            const float m = on ? __ldcg(p0 + t * (hd + 2) + hd) : -INFINITY;
            const float l = on ? __ldcg(p0 + t * (hd + 2) + hd + 1) : 0.0f;
            if (on) pz[t * (hd + 2) + hd] = 0.0f, pz[t * (hd + 2) + hd + 1] = 0.0f;
            const float mall = warp_max(m);
            if (on) fsh[t] = expf(m - mall), lsh[t] = l;
            __syncwarp();
            if (t == 0) {
                float lall = 0.0f;
#pragma unroll 1
                for (int sp = 0; sp < se; sp++) lall += lsh[sp] * fsh[sp];
                linv = 1.0f / lall;
            }
        }
        __syncthreads();
        for (int d = t; d < hd; d += kThreads) {
            float v[kAttnMaxSplit], sum = 0.0f;
#pragma unroll
            for (int sp = 0; sp < kAttnMaxSplit; sp++)
                if (sp < se) {
                    if constexpr (kKeys) v[sp] = d == t ? v0[sp] : __ldcg(p0 + sp * (hd + 2) + d);
                    else v[sp] = __ldcg(p0 + sp * (hd + 2) + d);
                    pz[sp * (hd + 2) + d] = 0.0f;
                }
#pragma unroll
            for (int sp = 0; sp < kAttnMaxSplit; sp++)
                if (sp < se) sum += v[sp] * fsh[sp];
            const float y = sum * linv;
            o[d] = y;
            if constexpr (kRope) amax = fmaxf(amax, fabsf(y));
        }
        if (t == 0) spw.ctr[i * n_heads + h] = 0; /* (left zero for the next call) */
    } else {
        for (int d = t; d < hd; d += kThreads) {
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < kWarps; w++) sum += wacc[w][d] * f[w];
            const float y = sum * inv;
            o[d] = y;
            if constexpr (kRope) amax = fmaxf(amax, fabsf(y));
        }
    }
    if constexpr (kRope)
        if (fz.omax) tern_raise_absmax(fz.omax + i, amax);
}


/* ---- prefill: a run of tokens of one sequence, tiled (flash attention on
 * the CUDA cores) ----
 * CTA = kTq queries x one head.  Keys in tiles of kTk: the page offsets of a
 * tile are looked up once, its K and V rows copied into shared memory
 * (cp.async, zero-filled past the last key), rows padded to hd + 4 floats
 * so that 8 consecutive rows' float4 reads fall on distinct banks.  Thread
 * (ty, tx) = (t / 16, t % 16) scores queries ty + 16 r (r < 4) against keys
 * tx + 16 c (c < 2): q and k as float4 from shared memory, 8 FMAs per load;
 * the 16 lanes of a query (one half-warp) meet for its running max and sum
 * by shuffles; P goes through shared memory, and the thread accumulates P V
 * for its 4 queries at dims 4 tx .. 4 tx + 3 and 64 + 4 tx ...  The warp
 * kernel above spends 5 shuffles per key and query on the dot product; here
 * a K / V row read from shared memory serves 64 queries.
 * head_dim % 4 == 0 and <= 128.  Keys past a query's position (up to the
 * tile's last) enter P V with weight 0, so their pages must hold finite
 * values: a call writes its own positions (fwdc_rope_kv_write) first. */
constexpr int kTq = 64, kTk = 32, kTileThreads = 256;

__device__ __forceinline__ void cp_async16_zfill(void *smem, const void *g, bool ok) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sa), "l"(g), "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_commit_wait_all() {
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
}

size_t attn_tile_smem(int hd) {
    return ((size_t)(kTq + 2 * kTk) * (size_t)(hd + 4) + (size_t)kTq * (kTk + 4)) * sizeof(float) +
           kTk * sizeof(int64_t) + kTq * sizeof(int);
}

template <bool kTern> /* K / V from ternary pages tz (kp, vp unused), dequantised into shared memory */
__global__ void __launch_bounds__(kTileThreads, 2)
attention_tile_kernel(const float *q, int64_t ldq, const float *kp, const float *vp,
                      const int32_t *pos, const int32_t *tab, int tab_stride,
                      const int32_t *tab_row, int64_t n, int n_heads, int n_kv, int hd, int bs,
                      float scale, float *out, FwdcKvTern tz) {
    pdl_trigger();
    pdl_wait();
    extern __shared__ __align__(16) float sm[];
    const int LD = hd + 4, LDP = kTk + 4, h4 = hd / 4;
    float *Qs = sm, *Ks = Qs + kTq * LD, *Vs = Ks + kTk * LD, *Ps = Vs + kTk * LD;
    int64_t *roff = reinterpret_cast<int64_t *>(Ps + kTq * LDP);
    int *qpos = reinterpret_cast<int *>(roff + kTk);
    __shared__ int s_kend;
    const int t = threadIdx.x, tx = t & 15, ty = t >> 4;
    const int64_t i0 = (int64_t)blockIdx.x * kTq;
    const int h = blockIdx.y, kvh = h / (n_heads / n_kv);
    const int32_t *tb = tab + (int64_t)tab_row[i0] * tab_stride;
    for (int idx = t; idx < kTq * h4; idx += kTileThreads) {
        const int qq = idx / h4, d4 = idx - qq * h4;
        const int64_t i = i0 + qq < n ? i0 + qq : i0;
        cp_async16_zfill(Qs + qq * LD + 4 * d4, q + i * ldq + (int64_t)h * hd + 4 * d4, i0 + qq < n);
    }
    if (t < kTq) qpos[t] = i0 + t < n ? pos[i0 + t] : -1;
    if (t < 32) { /* the tile's keys: 0 .. its largest position */
        int mx = -1;
        for (int qq = t; qq < kTq; qq += 32)
            if (i0 + qq < n) mx = max(mx, (int)pos[i0 + qq]);
        for (int o = 16; o > 0; o >>= 1) mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        if (t == 0) s_kend = mx + 1;
    }
    cp_commit_wait_all();
    __syncthreads();
    const int kend = s_kend;
    int myq[4];
    float m[4], l[4], o[4][8];
#pragma unroll
    for (int r = 0; r < 4; r++) {
        myq[r] = qpos[ty + 16 * r];
        m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) o[r][e] = 0.0f;
    }
    for (int k0 = 0; k0 < kend; k0 += kTk) {
        const int kn = kend - k0 < kTk ? kend - k0 : kTk;
        if (t < kTk) {
            const int p = k0 + t;
            roff[t] = t < kn ? kv_row(tb, p, bs, n_kv, kvh, kTern ? 1 : hd) : 0; /* kTern: page rows */
        }
        __syncthreads();
        for (int idx = t; idx < kTk * h4; idx += kTileThreads) {
            const int kk = idx / h4, d4 = idx - kk * h4;
            if constexpr (kTern) {
                float4 k4 = make_float4(0.f, 0.f, 0.f, 0.f), v4 = k4;
                if (kk < kn) {
                    const int64_t r = roff[kk], cb = h4; /* hd % 4 == 0: hd / 4 code bytes a row */
                    k4 = kvt_val4(tz.kc[r * cb + d4],
                                  kvt_scale(tz.ks + r * tern_kv_scales(hd, 1) + 4 * d4 / KV_K_GROUP));
                    v4 = kvt_val4(tz.vc[r * cb + d4], kvt_scale(tz.vs + r));
                }
                *reinterpret_cast<float4 *>(Ks + kk * LD + 4 * d4) = k4;
                *reinterpret_cast<float4 *>(Vs + kk * LD + 4 * d4) = v4;
            } else {
                cp_async16_zfill(Ks + kk * LD + 4 * d4, kp + roff[kk] + 4 * d4, kk < kn);
                cp_async16_zfill(Vs + kk * LD + 4 * d4, vp + roff[kk] + 4 * d4, kk < kn);
            }
        }
        cp_commit_wait_all();
        __syncthreads();
        float sc[4][2];
#pragma unroll
        for (int r = 0; r < 4; r++) sc[r][0] = sc[r][1] = 0.0f;
        for (int d = 0; d < hd; d += 4) {
            float4 qv[4], kv[2];
#pragma unroll
            for (int r = 0; r < 4; r++) qv[r] = *reinterpret_cast<const float4 *>(Qs + (ty + 16 * r) * LD + d);
#pragma unroll
            for (int c = 0; c < 2; c++) kv[c] = *reinterpret_cast<const float4 *>(Ks + (tx + 16 * c) * LD + d);
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 2; c++)
                    sc[r][c] += qv[r].x * kv[c].x + qv[r].y * kv[c].y + qv[r].z * kv[c].z + qv[r].w * kv[c].w;
        }
#pragma unroll
        for (int r = 0; r < 4; r++) {
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int key = k0 + tx + 16 * c;
                sc[r][c] = key <= myq[r] ? sc[r][c] * scale : -INFINITY;
                mx = fmaxf(mx, sc[r][c]);
            }
            for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float mn = fmaxf(m[r], mx);
            const float corr = mn == -INFINITY ? 1.0f : expf(m[r] - mn); /* 0 at the first key */
            float ps = 0.0f;
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const float pc = sc[r][c] == -INFINITY ? 0.0f : expf(sc[r][c] - mn);
                Ps[(ty + 16 * r) * LDP + tx + 16 * c] = pc;
                ps += pc;
            }
            for (int off = 8; off > 0; off >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
            l[r] = l[r] * corr + ps;
            m[r] = mn;
#pragma unroll
            for (int e = 0; e < 8; e++) o[r][e] *= corr;
        }
        __syncthreads(); /* P complete */
        if (4 * tx < hd) {
            const bool hi = 64 + 4 * tx < hd;
            for (int kk = 0; kk < kn; kk += 4) { /* P and V are zero past kn */
                float4 pr[4];
#pragma unroll
                for (int r = 0; r < 4; r++) pr[r] = *reinterpret_cast<const float4 *>(Ps + (ty + 16 * r) * LDP + kk);
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const float *vr = Vs + (kk + u) * LD + 4 * tx;
                    const float4 v0 = *reinterpret_cast<const float4 *>(vr);
                    const float4 v1 = hi ? *reinterpret_cast<const float4 *>(vr + 64) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
                    for (int r = 0; r < 4; r++) {
                        const float pu = u == 0 ? pr[r].x : u == 1 ? pr[r].y : u == 2 ? pr[r].z : pr[r].w;
                        o[r][0] += pu * v0.x, o[r][1] += pu * v0.y, o[r][2] += pu * v0.z, o[r][3] += pu * v0.w;
                        o[r][4] += pu * v1.x, o[r][5] += pu * v1.y, o[r][6] += pu * v1.z, o[r][7] += pu * v1.w;
                    }
                }
            }
        }
        __syncthreads(); /* before the next tile's offsets, K, V and P */
    }
    if (4 * tx >= hd) return;
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int64_t i = i0 + ty + 16 * r;
        if (i >= n) continue;
        const float inv = 1.0f / l[r];
        float *orow = out + (i * n_heads + h) * (int64_t)hd + 4 * tx;
        *reinterpret_cast<float4 *>(orow) = make_float4(o[r][0] * inv, o[r][1] * inv, o[r][2] * inv, o[r][3] * inv);
        if (64 + 4 * tx < hd)
            *reinterpret_cast<float4 *>(orow + 64) = make_float4(o[r][4] * inv, o[r][5] * inv, o[r][6] * inv, o[r][7] * inv);
    }
}

__global__ void glu_kernel(int act, float *g, const float *u, int64_t cnt) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < cnt;
         i += (int64_t)gridDim.x * blockDim.x) {
        g[i] = tern_glu1(act, g[i], u[i]);
    }
}

__global__ void add_kernel(float *x, const float *h, int64_t cnt) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < cnt;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] += h[i];
}

/* max |x| over a row of cols (one CTA), exact in any order */
__device__ float row_absmax(const float *xr, int64_t cols, float *red) {
    float m = 0.0f;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) m = fmaxf(m, fabsf(xr[k]));
    return block_max(m, red);
}

__global__ void __launch_bounds__(kRowThreads) row_absmax_kernel(const float *x, int64_t cols, float *mx) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    const float m = row_absmax(x + blockIdx.x * cols, cols, red);
    if (threadIdx.x == 0) mx[blockIdx.x] = m;
}

/* mx_in: the rows' max |x| given (tensor parallelism: over all ranks' slices) */
__global__ void __launch_bounds__(kRowThreads)
act_quant_kernel(const float *x, int64_t cols, const float *mx_in, int8_t *xq, float *sx) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    const float *xr = x + blockIdx.x * cols;
    const float m = mx_in ? mx_in[blockIdx.x] : row_absmax(xr, cols, red);
    const float s = tern_act_scale(m);
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) xq[blockIdx.x * cols + k] = tern_quant1(xr[k], s);
    if (threadIdx.x == 0) sx[blockIdx.x] = s;
}

/* act_quant_kernel with the rows' max given (two rows or more), spread over the row: CTA
 * (blockIdx.x, row blockIdx.y) codes columns [kWideCols blockIdx.x, +
 * kWideCols), each thread its kWideU float4 loaded at once (cols % 4 == 0, x
 * 16-byte aligned); the same codes and scale (a decode step has few rows, and
 * one CTA a row left a few SMs streaming the whole row) */
constexpr int kWideThreads = 256, kWideU = 4, kWideCols = kWideThreads * kWideU * 4;
__global__ void __launch_bounds__(kWideThreads)
act_quant_wide_kernel(const float *x, int64_t cols, const float *mx_in, int8_t *xq, float *sx) {
    pdl_trigger();
    pdl_wait();
    const int64_t row = blockIdx.y, c0 = (int64_t)blockIdx.x * kWideCols;
    const float s = tern_act_scale(mx_in[row]);
    float4 v[kWideU];
#pragma unroll
    for (int u = 0; u < kWideU; u++) {
        const int64_t c = c0 + 4 * (threadIdx.x + u * kWideThreads);
        v[u] = c < cols ? *reinterpret_cast<const float4 *>(x + row * cols + c) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < kWideU; u++) {
        const int64_t c = c0 + 4 * (threadIdx.x + u * kWideThreads);
        if (c < cols)
            *reinterpret_cast<char4 *>(xq + row * cols + c) = make_char4(
                tern_quant1(v[u].x, s), tern_quant1(v[u].y, s), tern_quant1(v[u].z, s), tern_quant1(v[u].w, s));
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) sx[row] = s;
}

__global__ void to_bf16_kernel(const float *x, int64_t cnt, __nv_bfloat16 *y) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < cnt;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void gather_rows_kernel(const float *x, const int32_t *idx, int64_t cnt, int64_t dim,
                                   float *out) {
    const int64_t total = cnt * dim;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = x[(int64_t)idx[i / dim] * dim + i % dim];
}

/* The step's first kernel: the table updates (cap 0: none, count not read),
 * the zeroing and, where embed is non-NULL, x (n, H) = embed[tok[t]]
 * (fwdc_embed alone, or all three) */
__global__ void step_begin_kernel(int32_t *tab, const int32_t *count, const int32_t *pairs,
                                  int64_t cap, unsigned *zero, int64_t nzero, const float *embed,
                                  const int32_t *tok, int64_t n, int64_t H, float *x) {
    if (embed) {
        const int64_t total = n * H;
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
             i += (int64_t)gridDim.x * blockDim.x)
            x[i] = embed[(int64_t)tok[i / H] * H + i % H];
    }
    const int64_t c = cap <= 0 ? 0 : *count < cap ? *count : cap;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < c;
         u += (int64_t)gridDim.x * blockDim.x)
        tab[pairs[2 * u]] = pairs[2 * u + 1];
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < nzero;
         u += (int64_t)gridDim.x * blockDim.x)
        zero[u] = 0u;
}

/* argmax: (value, index) pairs, the larger value wins, equal values the
 * smaller index; "none yet" is (-inf, cols).  Each CTA takes a chunk of
 * kArgChunk columns of one row (one CTA per row had read a 256000-column
 * row of logits in ~100 us: one load in flight per thread); the last CTA of
 * a row (a counter) reduces the chunks' pairs, then clears its scratch. */
constexpr int kArgThreads = 256, kArgPer = 16, kArgChunk = kArgThreads * kArgPer;

__device__ __forceinline__ void argmax_take(float &best, int64_t &bidx, float v, int64_t i) {
    if (v > best || (v == best && i < bidx)) best = v, bidx = i;
}

/* the CTA's pair, in thread 0 */
__device__ void argmax_block(float &best, int64_t &bidx, int64_t cols, float *bv, int64_t *bi) {
    for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, best, o);
        const int64_t i = __shfl_xor_sync(0xffffffffu, bidx, o);
        argmax_take(best, bidx, v, i);
    }
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* bv / bi free (a second call) */
    if (lane == 0) bv[w] = best, bi[w] = bidx;
    __syncthreads();
    if (w == 0) {
        best = lane < nw ? bv[lane] : -INFINITY;
        bidx = lane < nw ? bi[lane] : cols;
        for (int o = 16; o > 0; o >>= 1) {
            const float v = __shfl_xor_sync(0xffffffffu, best, o);
            const int64_t i = __shfl_xor_sync(0xffffffffu, bidx, o);
            argmax_take(best, bidx, v, i);
        }
    }
}

/* grid (chunks, rows); pv / pi: chunks pairs per row, ctr: a counter per row
 * (zero before and after; only used when chunks > 1); out2: a second copy of
 * out, or NULL */
__global__ void __launch_bounds__(kArgThreads)
argmax_kernel(const float *x, int64_t cols, float *pv, int32_t *pi, int *ctr, int32_t *out, int32_t *out2,
              int32_t *hout, const int32_t *hslot, int64_t hstride) {
    pdl_wait(); /* (launched as a dependent: placed while the LM head ends; no trigger, so what follows
                 * starts once this grid is done) */
    __shared__ float bv[32];
    __shared__ int64_t bi[32];
    __shared__ int s_last;
    const int64_t r = blockIdx.y, chunks = gridDim.x;
    const float *xr = x + r * cols;
    const int64_t k0 = (int64_t)blockIdx.x * kArgChunk + threadIdx.x;
    float v[kArgPer];
#pragma unroll
    for (int j = 0; j < kArgPer; j++) {
        const int64_t k = k0 + (int64_t)j * kArgThreads;
        v[j] = k < cols ? xr[k] : 0.0f;
    }
    float best = -INFINITY;
    int64_t bidx = cols;
#pragma unroll
    for (int j = 0; j < kArgPer; j++) {
        const int64_t k = k0 + (int64_t)j * kArgThreads;
        if (k < cols && (v[j] > best || bidx == cols)) best = v[j], bidx = k;
    }
    argmax_block(best, bidx, cols, bv, bi);
    if (chunks > 1) {
        if (threadIdx.x == 0) {
            pv[r * chunks + blockIdx.x] = best;
            pi[r * chunks + blockIdx.x] = (int32_t)bidx;
            __threadfence();
            s_last = atomicAdd(&ctr[r], 1) == (int)chunks - 1;
        }
        __syncthreads();
        if (!s_last) return;
        __threadfence();
        best = -INFINITY;
        bidx = cols;
        for (int64_t c = threadIdx.x; c < chunks; c += kArgThreads) { /* a thread's first pair taken as is */
            const float v = __ldcg(pv + r * chunks + c);
            const int32_t i = __ldcg(pi + r * chunks + c);
            if (bidx == cols) best = v, bidx = i; /* (as the scan: a NaN there stays, as it did with one CTA) */
            else argmax_take(best, bidx, v, i);
        }
        argmax_block(best, bidx, cols, bv, bi); /* its barriers order the reads before the clearing */
        for (int64_t c = threadIdx.x; c < chunks; c += kArgThreads)
            pv[r * chunks + c] = 0.0f, pi[r * chunks + c] = 0;
        if (threadIdx.x == 0) ctr[r] = 0;
    }
    if (threadIdx.x == 0) {
        const int32_t id = (int32_t)(bidx < cols ? bidx : 0);
        out[r] = id;
        if (out2) out2[r] = id;
        if (hout) hout[(hslot ? (int64_t)*hslot : 0) * hstride + r] = id; /* (host memory, mapped) */
    }
}

__global__ void unshard_kernel(const float *g, int tp, int64_t n, int64_t w, float *out) {
    const int64_t total = (int64_t)tp * n * w;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / (n * w), t = (i / w) % n, c = i % w;
        out[t * tp * w + r * w + c] = g[i];
    }
}

__global__ void slice_i8_kernel(const int8_t *x, int64_t n, int64_t full, int64_t lo, int64_t w,
                                int8_t *out) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * w;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = x[(i / w) * full + lo + i % w];
}

__global__ void scale_rows_kernel(float *y, int64_t n, int64_t cols, const float *sc,
                                  int64_t stride, const float *sx) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * cols;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = tern_i8_out(sc[(i % cols) * stride], y[i], sx[i / cols]);
}

__device__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ void fill_kernel(void *buf, int64_t cnt, int kind, float amp, uint64_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < cnt;
         i += (int64_t)gridDim.x * blockDim.x) {
        const uint64_t r = mix64(seed * 0x9e3779b97f4a7c15ull + (uint64_t)i);
        const float u = (float)(r >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; /* [-1, 1) */
        if (kind == 0) {
            static_cast<float *>(buf)[i] = amp * u;
        } else if (kind == 1) {
            static_cast<__nv_bfloat16 *>(buf)[i] = __float2bfloat16_rn(amp * u);
        } else if (kind == 2) {
            uint8_t b = 0;
            for (int f = 0; f < 4; f++) b |= (uint8_t)(((r >> (8 * f)) % 3u) << (2 * f));
            static_cast<uint8_t *>(buf)[i] = b;
        } else if (kind == 3) {
            static_cast<float *>(buf)[i] = amp;
        } else {
            static_cast<float *>(buf)[i] = 1.0f + amp * u;
        }
    }
}

/* alignment of an optional pointer (NULL counts as aligned) */
bool al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
bool al8(const void *p) { return ((uintptr_t)p & 7u) == 0; }
bool al4(const void *p) { return ((uintptr_t)p & 3u) == 0; }

/* what picks the attention kernels' warps: the whole model's heads (a
 * tensor-parallel rank's model_heads) times the tokens */
int64_t attn_heads_x_tokens(int64_t n, int n_heads, int model_heads) {
    return n * (int64_t)(model_heads > n_heads ? model_heads : n_heads);
}

/* The key split's scratch (zeroed counters, then the states) */
size_t attn_split_ctr_bytes(int64_t n, int n_heads) { return ((size_t)(n * n_heads) * sizeof(int) + 15) & ~(size_t)15; }
int attn_split_scratch(int64_t n, int n_heads, int hd, int splits, void **ws) {
    return tern_ws_zeroed(attn_split_ctr_bytes(n, n_heads) + (size_t)(n * n_heads) * splits * (hd + 2) * sizeof(float),
                          ws);
}

using AttnWarpK = void (*)(const float *, int64_t, const float *, const float *, const int32_t *,
                           const int32_t *, int, const int32_t *, int, int, int, int, float, float *, AttnFuse,
                           FwdcKvTern, AttnSplit);
/* The CTA width's kind by the whole grid (heads x tokens x splits): 0 large, 1 small, 2 tiny */
int attn_width_kind(int64_t grid) { return grid > 512 ? 0 : grid <= kAttnTinyGrid ? 2 : 1; }
/* The split-capable attention_warp_kernel of a kind and lane mode (3 / 4, the key lanes: ternary
 * pages only) */
template <bool kRope, bool kTern>
AttnWarpK attn_split_kernel(int kind, int mode) {
    constexpr int k3 = kTern ? 3 : 0, k4 = kTern ? 4 : 1;
    static const AttnWarpK kern[3][5] = {
        {attention_warp_kernel<kAttnThreadsLarge, 0, kRope, kTern, true>,
         attention_warp_kernel<kAttnThreadsLarge, 1, kRope, kTern, true>,
         attention_warp_kernel<kAttnThreadsLarge, 2, kRope, kTern, true>,
         attention_warp_kernel<kAttnThreadsLarge, k3, kRope, kTern, true>,
         attention_warp_kernel<kAttnThreadsLarge, k4, kRope, kTern, true>},
        {attention_warp_kernel<kAttnThreadsSmall, 0, kRope, kTern, true>,
         attention_warp_kernel<kAttnThreadsSmall, 1, kRope, kTern, true>,
         attention_warp_kernel<kAttnThreadsSmall, 2, kRope, kTern, true>,
         attention_warp_kernel<kAttnThreadsSmall, k3, kRope, kTern, true>,
         attention_warp_kernel<kAttnThreadsSmall, k4, kRope, kTern, true>},
        {attention_warp_kernel<kAttnThreadsTiny, 0, kRope, kTern, true>,
         attention_warp_kernel<kAttnThreadsTiny, 1, kRope, kTern, true>,
         attention_warp_kernel<kAttnThreadsTiny, 2, kRope, kTern, true>,
         attention_warp_kernel<kAttnThreadsTiny, k3, kRope, kTern, true>,
         attention_warp_kernel<kAttnThreadsTiny, k4, kRope, kTern, true>}};
    return kern[kind][mode];
}
int attn_kind_threads(int kind) {
    return kind == 2 ? kAttnThreadsTiny : kind == 1 ? kAttnThreadsSmall : kAttnThreadsLarge;
}
/* The lanes of attention_warp_kernel (kMode) at head_dim hd: on ternary pages (tern) the key lanes
 * where head_dim is whole K scale groups and the code rows are 32-bit aligned (codes_al), else the
 * f32 pages' float4 lanes whenever head_dim allows them (ternary pages, or f32 pages 16-byte
 * aligned: f32_al), so that both read the same values into the same lanes and sum them alike;
 * else scalar lanes */
int attn_lane_mode(int hd, bool tern, bool f32_al, bool codes_al) {
    const bool vec = hd % 4 == 0 && (tern || f32_al);
    const bool keys = tern && hd % KV_K_GROUP == 0 && codes_al;
    return keys ? (hd <= 128 ? 3 : 4) : !vec ? 2 : hd <= 128 ? 0 : 1;
}

/* attention_warp_kernel over (tokens, heads): 16, 8 or 4 warps by the whole
 * model's heads x tokens (kAttnThreadsTiny / Small / Large), float4 or scalar
 * lanes by head_dim and alignment. */
template <bool kRope, bool kTern = false>
int attn_warp_launch(const float *q, int64_t ldq, const float *kp, const float *vp, const int32_t *pos,
                     const int32_t *tab, int tab_stride, const int32_t *tab_row, int64_t n, int n_heads,
                     int n_kv, int hd, int bs, int model_heads, float *out, AttnFuse fz, int splits,
                     cudaStream_t s, FwdcKvTern tz = FwdcKvTern{}) {
    /* the key split (attention_warp_kernel, fwdc_attention_splits); the CTA width by the split grid */
    if (splits < 1 || splits > kAttnMaxSplit)
        return err_set("attention: %d key splits (1..%d)", splits, kAttnMaxSplit);
    AttnSplit spw;
    if (splits > 1) { /* counters (zero) then the states */
        void *ws = nullptr;
        if (attn_split_scratch(n, n_heads, hd, splits, &ws) < 0) return -1;
        spw.ctr = static_cast<int *>(ws);
        spw.part = reinterpret_cast<float *>(static_cast<char *>(ws) + attn_split_ctr_bytes(n, n_heads));
    }
    const int64_t heads_x_tokens = attn_heads_x_tokens(n, n_heads, model_heads) * splits;
    /* one split over the smallest grids, the dims' lanes: the kernel without the split's code
     * (H200, 7B tern-i8 at batch 1 after a 32-token prompt: 1.079-1.083 -> 1.060-1.063 ms a step).
     * Elsewhere the form without it lost (7B tern-i8, 1024-token prompt, same run, three rounds:
     * f32 pages batch 8 4.016-4.020 -> 4.069-4.090 ms, batch 64 20.95-21.01 -> 22.35-22.40;
     * ternary pages' key lanes batch 8 3.198-3.216 -> 3.591-3.609, batch 64 9.865-9.876 ->
     * 9.715-9.728), so those take the split kernel with one split */
    static const AttnWarpK tiny1[3] = {attention_warp_kernel<kAttnThreadsTiny, 0, kRope, kTern, false>,
                                       attention_warp_kernel<kAttnThreadsTiny, 1, kRope, kTern, false>,
                                       attention_warp_kernel<kAttnThreadsTiny, 2, kRope, kTern, false>};
    const int kind = attn_width_kind(heads_x_tokens), thr = attn_kind_threads(kind);
    const int mode = attn_lane_mode(hd, kTern, al16(kp) && al16(vp),
                                    ((uintptr_t)tz.kc & 3) == 0 && ((uintptr_t)tz.vc & 3) == 0);
    const float scale = 1.0f / sqrtf((float)hd);
    const AttnWarpK kernel =
        splits == 1 && kind == 2 && mode < 3 ? tiny1[mode] : attn_split_kernel<kRope, kTern>(kind, mode);
    return tern_launch_pdl("attention_warp_kernel", kernel,
                           dim3((unsigned)n, (unsigned)n_heads, (unsigned)splits), dim3(thr), s, q, ldq, kp, vp,
                           pos, tab, tab_stride, tab_row, n_heads, n_kv, hd, bs, scale, out, fz, tz, spw);
}

/* The decode attentions' heads grouped over the KV heads and their grid
 * (tokens x heads) within CUDA's limits, else -1 (err_set). */
int attn_check(const char *who, int64_t n, int n_heads, int n_kv) {
    if (n_kv < 1 || n_heads % n_kv)
        return err_set("%s: %d query heads do not group over %d KV heads", who, n_heads, n_kv);
    if (n > 0x7fffffff || n_heads > 65535)
        return err_set("%s: %lld tokens x %d heads is too large a grid", who, (long long)n, n_heads);
    return 0;
}

/* TERNLAB_CUDA_ATTN: warp (default, attention_warp_kernel) or block (the
 * block-softmax attention_kernel, for end-to-end comparisons); anything else
 * is an error (-1, err_set). */
int attn_kind(void) {
    const char *e = getenv("TERNLAB_CUDA_ATTN");
    if (!e || !*e || !strcmp(e, "warp")) return 0;
    if (!strcmp(e, "block")) return 1;
    return err_set("TERNLAB_CUDA_ATTN=%s: expected warp or block", e);
}

/* A prompt's queries for the tiled kernel: from 32 tokens, head_dim % 4 == 0
 * and <= 128, q and out rows 16-byte aligned. */
bool tile_ok(const float *q, int64_t ldq, int64_t n, int hd, const float *out) {
    return n >= kTq / 2 && hd % 4 == 0 && hd <= 128 && al16(q) && ldq % 4 == 0 && al16(out);
}

/* attention_tile_kernel over (query tiles, heads). */
template <bool kTern>
int attn_tile_launch(const float *q, int64_t ldq, const float *kp, const float *vp, const int32_t *pos,
                     const int32_t *tab, int tab_stride, const int32_t *tab_row, int64_t n, int n_heads, int n_kv,
                     int hd, int bs, float *out, FwdcKvTern tz, cudaStream_t s) {
    /* the largest tile (head_dim 128) allowed once per device: no attribute
     * change while a graph may be capturing */
    static bool attr_set[64];
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= 64) return err_set("fwdc_attention: device %d", dev);
    if (!attr_set[dev]) {
        CUDA_CHECK(cudaFuncSetAttribute(attention_tile_kernel<kTern>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)attn_tile_smem(128)));
        attr_set[dev] = true;
    }
    const dim3 tgrid((unsigned)((n + kTq - 1) / kTq), (unsigned)n_heads);
    const float scale = 1.0f / sqrtf((float)hd);
    return tern_launch_pdl_smem("attention_tile_kernel", attention_tile_kernel<kTern>, tgrid, dim3(kTileThreads),
                                attn_tile_smem(hd), s, q, ldq, kp, vp, pos, tab, tab_stride, tab_row, n, n_heads,
                                n_kv, hd, bs, scale, out, tz);
}

/* CTAs of the decode form's split kernel of a grid kind and lane mode that one SM holds at once
 * (the occupancy API, cached per device: a failed query is not asked again); 0 where it cannot be
 * told (also on devices past the 16th) */
int attn_resident(int dev, int kind, int mode, bool tern) {
    static std::atomic<int> memo[16][3][5][2]; /* (0: not asked yet; -1: asked, no answer) */
    if (dev < 0 || dev >= 16) return 0;
    std::atomic<int> &m = memo[dev][kind][mode][tern ? 1 : 0];
    int v = m.load(std::memory_order_relaxed);
    if (v == 0) {
        int nb = 0;
        const AttnWarpK k = tern ? attn_split_kernel<true, true>(kind, mode) : attn_split_kernel<true, false>(kind, mode);
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, reinterpret_cast<const void *>(k),
                                                          attn_kind_threads(kind), 0) != cudaSuccess || nb < 1) {
            (void)cudaGetLastError();
            nb = -1;
        }
        m.store(v = nb, std::memory_order_relaxed);
    }
    return v > 0 ? v : 0;
}
/* attn_resident of the kernel a split grid of `grid` CTAs takes at head_dim hd on the engine's
 * pages (aligned: the fused decode form's lanes) */
int attn_grid_resident(int dev, int64_t grid, int hd, bool tern) {
    return attn_resident(dev, attn_width_kind(grid), attn_lane_mode(hd, tern, true, true), tern);
}

} // namespace

/* norm_kernel_c with the fewest cached float4s a thread that hold the row
 * (the same arithmetic, bit for bit): fewer registers.  With 4 cached
 * float4s its 1024 threads took 56-61 registers, 8 warps x 64 of each
 * register partition's 16384, and a CTA of the bulk-copy GEMV launched
 * after it (5 warps of 96 registers: two in one partition) could not share
 * its SM before it ended — in a 27B trace even at the 47 registers 4608
 * columns still take, that SM's q|k|v CTA started 0.6-0.9 us after the
 * others.  4096 columns take 26-32 registers now; at 4608 the int8 GEMV's
 * planner leaves that SM out instead (tern_cuda_tbm_reserve). */
template <bool DEF>
static int norm_c_launch(dim3 grid, cudaStream_t stream, float *x, const float *h, TernDeferred hd,
                         const float *w, int64_t dim, float eps, float *o32, __nv_bfloat16 *o16, int8_t *xq,
                         float *sx, int xr) {
    const int64_t per = (int64_t)kRowThreads * 4;
    auto kern = dim <= per       ? norm_kernel_c<DEF, 1>
                : dim <= 2 * per ? norm_kernel_c<DEF, 2>
                                 : norm_kernel_c<DEF, kCache>;
    return tern_launch_pdl("norm_kernel_c", kern, grid, dim3(kRowThreads), stream, x, h, hd, w, dim, eps, o32, o16,
                           xq, sx, xr);
}

extern "C" {

int fwdc_embed(const float *d_embed, const int32_t *d_tok, int64_t n, int64_t H, float *d_x,
               cudaStream_t stream) {
    return fwdc_step_begin(nullptr, nullptr, nullptr, 0, nullptr, 0, d_embed, d_tok, n, H, d_x, stream);
}

/* The norms' outputs: at least one, int8 codes with their scales */
static int norm_outputs(const char *who, const float *d_out32, const uint16_t *d_out16, const int8_t *d_xq,
                        const float *d_sx) {
    if (!d_out32 && !d_out16 && !d_xq) return err_set("%s: no output", who);
    if (d_xq && !d_sx) return err_set("%s: int8 output without scales", who);
    return 0;
}

static int norm_launch(float *d_x, const float *d_h, const float *d_w, int64_t n, int64_t dim, float eps,
                       float *d_out32, uint16_t *d_out16, int8_t *d_xq, float *d_sx, int xr, cudaStream_t stream) {
    if (norm_outputs("fwdc_norm", d_out32, d_out16, d_xq, d_sx) < 0) return -1;
    if (n <= 0) return 0;
    if (n > 0x7fffffff) return err_set("fwdc_norm: %lld rows", (long long)n);
    const bool v4 = dim % 4 == 0 && al16(d_x) && al16(d_h) && al16(d_w) && al16(d_out32) &&
                    al8(d_out16) && al4(d_xq);
    if (v4 && dim <= (int64_t)kRowThreads * 4 * kCache)
        return norm_c_launch<false>(dim3((unsigned)n), stream, d_x, d_h, TernDeferred{}, d_w, dim, eps, d_out32,
                                    reinterpret_cast<__nv_bfloat16 *>(d_out16), d_xq, d_sx, xr);
    if (v4)
        return tern_launch_pdl("norm_kernel", norm_kernel<true>, dim3((unsigned)n), dim3(kRowThreads), stream,
            d_x, d_h, d_w, dim, eps, d_out32, reinterpret_cast<__nv_bfloat16 *>(d_out16), d_xq, d_sx);
    return tern_launch_pdl("norm_kernel", norm_kernel<false>, dim3((unsigned)n), dim3(kRowThreads), stream,
        d_x, d_h, d_w, dim, eps, d_out32, reinterpret_cast<__nv_bfloat16 *>(d_out16), d_xq, d_sx);
}

int fwdc_norm(float *d_x, const float *d_h, const float *d_w, int64_t n, int64_t dim, float eps,
              float *d_out32, uint16_t *d_out16, int8_t *d_xq, float *d_sx, cudaStream_t stream) {
    return norm_launch(d_x, d_h, d_w, n, dim, eps, d_out32, d_out16, d_xq, d_sx, 0, stream);
}
int fwdc_norm_x_ready(float *d_x, const float *d_h, const float *d_w, int64_t n, int64_t dim, float eps,
                      float *d_out32, uint16_t *d_out16, int8_t *d_xq, float *d_sx, cudaStream_t stream) {
    return norm_launch(d_x, d_h, d_w, n, dim, eps, d_out32, d_out16, d_xq, d_sx, 1, stream);
}

int fwdc_norm_deferred(float *d_x, const TernDeferred *h, const float *d_w, int64_t dim, float eps,
                       float *d_out32, uint16_t *d_out16, int8_t *d_xq, float *d_sx, cudaStream_t stream) {
    if (!h || !h->part || !h->scales || !h->xmax) return err_set("fwdc_norm_deferred: no deferred GEMV output");
    if (norm_outputs("fwdc_norm_deferred", d_out32, d_out16, d_xq, d_sx) < 0) return -1;
    if (h->rows != dim || dim % 4 != 0 || dim > (int64_t)kRowThreads * 4 * kCache || !al16(d_x) ||
        !al16(h->part) || !al16(d_w) || !al16(d_out32) || !al8(d_out16) || !al4(d_xq))
        return err_set("fwdc_norm_deferred: %lld columns, a GEMV of %lld rows, or unaligned buffers",
                       (long long)dim, (long long)h->rows);
    return norm_c_launch<true>(dim3(1), stream, d_x, (const float *)nullptr, *h, d_w, dim, eps, d_out32,
                               reinterpret_cast<__nv_bfloat16 *>(d_out16), d_xq, d_sx, 1);
}

int fwdc_rmsnorm(const float *d_x, const float *d_w, int64_t n, int64_t dim, float eps,
                 float *d_out32, uint16_t *d_out16, cudaStream_t stream) {
    if (!d_out32 && !d_out16) return err_set("fwdc_rmsnorm: no output");
    return fwdc_norm(const_cast<float *>(d_x), nullptr, d_w, n, dim, eps, d_out32, d_out16,
                     nullptr, nullptr, stream);
}

int fwdc_glu_rows(int act, const float *d_g, const float *d_u, int64_t n, int64_t cols,
                  int64_t ld, float *d_out32, uint16_t *d_out16, int8_t *d_xq, float *d_sx,
                  cudaStream_t stream) {
    if (!d_out32) return err_set("fwdc_glu_rows: no output");
    if (d_xq && !d_sx) return err_set("fwdc_glu_rows: int8 output without scales");
    if (n <= 0) return 0;
    if (n > 0x7fffffff) return err_set("fwdc_glu_rows: %lld rows", (long long)n);
    const bool v4 = cols % 4 == 0 && ld % 4 == 0 && al16(d_g) && al16(d_u) && al16(d_out32) &&
                    al8(d_out16) && al4(d_xq);
    if (v4 && n <= 16 && cols >= 4096 && cols <= (int64_t)kGluCl * kGluClThreads * 4 * kCache)
        return tern_launch_pdl("glu_rows_kernel_cl", glu_rows_kernel_cl, dim3((unsigned)(n * kGluCl)), dim3(kGluClThreads), stream,
            act, d_g, d_u, cols, ld, d_out32, reinterpret_cast<__nv_bfloat16 *>(d_out16), d_xq, d_sx);
    if (v4 && cols <= (int64_t)kRowThreads * 4 * kCache)
        return tern_launch_pdl("glu_rows_kernel_c", glu_rows_kernel_c, dim3((unsigned)n), dim3(kRowThreads), stream,
            act, d_g, d_u, cols, ld, d_out32, reinterpret_cast<__nv_bfloat16 *>(d_out16), d_xq, d_sx);
    if (v4)
        return tern_launch_pdl("glu_rows_kernel", glu_rows_kernel<true>, dim3((unsigned)n), dim3(kRowThreads), stream,
            act, d_g, d_u, cols, ld, d_out32, reinterpret_cast<__nv_bfloat16 *>(d_out16), d_xq, d_sx);
    return tern_launch_pdl("glu_rows_kernel", glu_rows_kernel<false>, dim3((unsigned)n), dim3(kRowThreads), stream,
        act, d_g, d_u, cols, ld, d_out32, reinterpret_cast<__nv_bfloat16 *>(d_out16), d_xq, d_sx);
}

int fwdc_rope_kv_write(float *d_q, int64_t ldq, float *d_k, int64_t ldk, const float *d_v,
                       int64_t ldv, const int32_t *d_pos, const int32_t *d_slot, int64_t n,
                       int n_heads, int n_kv, int hd, const float *d_cos, const float *d_sin,
                       float *d_kpages, float *d_vpages, int block_size, cudaStream_t stream) {
    if (hd % 2 || hd < 2) return err_set("fwdc_rope_kv_write: head_dim %d is not even", hd);
    if (n <= 0) return 0;
    const int64_t items = (int64_t)(n_heads + n_kv) * (hd / 2) + (int64_t)n_kv * hd;
    if (n > 0x7fffffff || (items + 255) / 256 > 65535)
        return err_set("fwdc_rope_kv_write: %lld tokens x %lld items is too large a grid",
                       (long long)n, (long long)items);
    const dim3 grid((unsigned)n, (unsigned)((items + 255) / 256));
    return tern_launch_pdl("rope_kv_kernel", rope_kv_kernel, grid, dim3(256), stream, d_q, ldq, d_k,
                           ldk, d_v, ldv, d_pos, d_slot, n_heads, n_kv, hd, d_cos, d_sin, d_kpages,
                           d_vpages, block_size);
}

int fwdc_kv_ternarise(float *d_kpages, float *d_vpages, const int32_t *d_slot, int64_t n, int n_kv, int hd,
                      int block_size, cudaStream_t stream) {
    if (hd < 1 || hd > 256 || n_kv < 1 || block_size < 1)
        return err_set("fwdc_kv_ternarise: head_dim %d (1..256), %d KV heads, block size %d", hd, n_kv,
                       block_size);
    if (n <= 0) return 0;
    if (n > 0x7fffffff || n_kv > 65535)
        return err_set("fwdc_kv_ternarise: %lld tokens x %d KV heads is too large a grid", (long long)n, n_kv);
    return tern_launch_pdl("kv_ternarise_kernel", kv_ternarise_kernel, dim3((unsigned)n, (unsigned)n_kv),
                           dim3(32), stream, d_kpages, d_vpages, d_slot, n_kv, hd, block_size);
}

int fwdc_attention_splits(int64_t n, int n_heads, int model_heads, int64_t max_ctx, int hd, int tern) {
    const int64_t hxt = attn_heads_x_tokens(n, n_heads, model_heads);
    int dev = 0, n_sm = 0;
    if (max_ctx < 2 * kAttnSplitKeys || n < 1) return 1;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        (void)cudaGetLastError(); /* (no SM count: no split) */
        return 1;
    }
    /* about two CTAs an SM (H200, 7B at batch 1 and 1k keys: 1.91 -> 1.45-1.62 ms a step on f32
     * pages, 3.34 -> 1.60-1.74 on ternary pages' key lanes).  Four an SM, up to 16 splits of
     * >= 64 keys, lost even with the merge's loads in parallel (7B tern-i8, 1024-token prompt,
     * batch 1 / 2 / 4, ms a step: f32 pages 1.52 / 2.36 / 2.92 -> 1.60 / 2.64 / 3.62, ternary
     * pages 1.29 / 2.04 / 2.28 -> 1.47 / 2.04 / 2.24) */
    if (hxt >= n_sm) return 1;
    int sp = (int)std::min<int64_t>(kAttnMaxSplit, (2 * n_sm + hxt - 1) / hxt);
    /* but no more CTAs than the SMs hold at once of the kernel that grid takes (the decode form's:
     * kRope; the key lanes hold two 256-thread CTAs an SM, where rounding up had put a second,
     * partial wave behind the first) */
    for (; sp > 1; sp--) {
        const int per = attn_grid_resident(dev, hxt * sp, hd, tern != 0);
        if (per < 1 || hxt * sp <= (int64_t)n_sm * per) break;
    }
    return sp;
}

int fwdc_attention_resident(int64_t grid, int hd, int tern) {
    int dev = 0;
    if (grid < 1 || cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return attn_grid_resident(dev, grid, hd, tern != 0);
}

int fwdc_attention_reserve(int64_t n, int n_heads, int hd, int splits) {
    void *ws;
    return splits > 1 && n > 0 ? attn_split_scratch(n, n_heads, hd, splits, &ws) : 0;
}

int fwdc_attention(const float *d_q, int64_t ldq, const float *d_kpages, const float *d_vpages,
                   const int32_t *d_pos, const int32_t *d_tab, int tab_stride,
                   const int32_t *d_tab_row, int64_t n, int n_heads, int n_kv, int hd,
                   int block_size, int model_heads, int one_seq, float *d_out, int splits,
                   cudaStream_t stream) {
    if (hd < 1 || hd > 256)
        return err_set("fwdc_attention: head_dim %d is not supported on CUDA (1..256)", hd);
    if (attn_check("fwdc_attention", n, n_heads, n_kv) < 0) return -1;
    if (n <= 0) return 0;
    dim3 grid((unsigned)n, (unsigned)n_heads);
    const float scale = 1.0f / sqrtf((float)hd);
    const int64_t heads_x_tokens = attn_heads_x_tokens(n, n_heads, model_heads);
    const bool small = heads_x_tokens <= 512;
    const int kind = attn_kind();
    if (kind < 0) return -1;
    if (kind == 1) { /* the block-softmax kernel (TERNLAB_CUDA_ATTN=block) */
        if (small)
            attention_kernel<kAttnThreadsSmall><<<grid, kAttnThreadsSmall, 0, stream>>>(
                d_q, ldq, d_kpages, d_vpages, d_pos, d_tab, tab_stride, d_tab_row, n_heads, n_kv,
                hd, block_size, scale, d_out);
        else
            attention_kernel<kAttnThreadsLarge><<<grid, kAttnThreadsLarge, 0, stream>>>(
                d_q, ldq, d_kpages, d_vpages, d_pos, d_tab, tab_stride, d_tab_row, n_heads, n_kv,
                hd, block_size, scale, d_out);
        CUDA_CHECK_LAUNCH("attention_kernel");
        return 0;
    }
    if (one_seq && tile_ok(d_q, ldq, n, hd, d_out) && al16(d_kpages) && al16(d_vpages))
        return attn_tile_launch<false>(d_q, ldq, d_kpages, d_vpages, d_pos, d_tab, tab_stride, d_tab_row, n,
                                       n_heads, n_kv, hd, block_size, d_out, FwdcKvTern{}, stream);
    return attn_warp_launch<false>(d_q, ldq, d_kpages, d_vpages, d_pos, d_tab, tab_stride, d_tab_row,
                                   n, n_heads, n_kv, hd, block_size, model_heads, d_out, AttnFuse{},
                                   splits, stream);
}

int fwdc_kv_code_rows(const float *d_k, int64_t ldk, const float *d_v, int64_t ldv, const int32_t *d_slot,
                      int64_t n, int n_kv, int hd, int block_size, FwdcKvTern pages, cudaStream_t stream) {
    if (hd < 1 || hd > 256 || n_kv < 1 || block_size < 1 || ldk < (int64_t)n_kv * hd || ldv < (int64_t)n_kv * hd)
        return err_set("fwdc_kv_code_rows: head_dim %d (1..256), %d KV heads, block size %d, strides %lld / %lld",
                       hd, n_kv, block_size, (long long)ldk, (long long)ldv);
    if (!pages.kc || !pages.vc || !pages.ks || !pages.vs) return err_set("fwdc_kv_code_rows: no ternary pages");
    if (n <= 0) return 0;
    if (n > 0x7fffffff || n_kv > 65535)
        return err_set("fwdc_kv_code_rows: %lld tokens x %d KV heads is too large a grid", (long long)n, n_kv);
    return tern_launch_pdl("kv_code_rows_kernel", kv_code_rows_kernel, dim3((unsigned)n, (unsigned)n_kv), dim3(32),
                           stream, d_k, ldk, d_v, ldv, d_slot, n_kv, hd, block_size, pages);
}

int fwdc_attention_tern(const float *d_q, int64_t ldq, FwdcKvTern pages, const int32_t *d_pos,
                        const int32_t *d_tab, int tab_stride, const int32_t *d_tab_row, int64_t n,
                        int n_heads, int n_kv, int hd, int block_size, int model_heads, int one_seq,
                        float *d_out, int splits, cudaStream_t stream) {
    if (hd < 1 || hd > 256)
        return err_set("fwdc_attention_tern: head_dim %d is not supported on CUDA (1..256)", hd);
    if (!pages.kc || !pages.vc || !pages.ks || !pages.vs) return err_set("fwdc_attention_tern: no ternary pages");
    if (attn_check("fwdc_attention_tern", n, n_heads, n_kv) < 0) return -1;
    const int kind = attn_kind();
    if (kind < 0) return -1;
    if (kind == 1)
        return err_set("TERNLAB_CUDA_ATTN=block: the block-softmax attention reads f32 KV pages only, and this "
                       "layer's pages are ternary (--kv); unset it");
    if (n <= 0) return 0;
    if (one_seq && tile_ok(d_q, ldq, n, hd, d_out))
        return attn_tile_launch<true>(d_q, ldq, nullptr, nullptr, d_pos, d_tab, tab_stride, d_tab_row, n, n_heads,
                                      n_kv, hd, block_size, d_out, pages, stream);
    return attn_warp_launch<false, true>(d_q, ldq, nullptr, nullptr, d_pos, d_tab, tab_stride, d_tab_row, n,
                                         n_heads, n_kv, hd, block_size, model_heads, d_out, AttnFuse{}, splits,
                                         stream, pages);
}

/* fwdc_attention_rope (code 0) and fwdc_attention_rope_coded (code 1; pages
 * tp ternary where tp.kc, else the f32 pages d_kpages, d_vpages) */
static int attention_rope_run(const char *who, const float *d_q, int64_t ldq, const float *d_k, int64_t ldk,
                              const float *d_v, int64_t ldv, const int32_t *d_pos, const int32_t *d_slot,
                              const float *d_cos, const float *d_sin, float *d_kpages, float *d_vpages,
                              const int32_t *d_tab, int tab_stride, const int32_t *d_tab_row, int64_t n, int n_heads,
                              int n_kv, int hd, int block_size, int model_heads, float *d_out, unsigned *d_omax,
                              int code, FwdcKvTern tp, int splits, cudaStream_t stream) {
    if (hd % 2 || hd < 2 || hd > 256) return err_set("%s: head_dim %d is not even in 2..256", who, hd);
    if (attn_check(who, n, n_heads, n_kv) < 0) return -1;
    const bool tern = tp.kc != nullptr;
    if (tern && (!tp.vc || !tp.ks || !tp.vs)) return err_set("%s: incomplete ternary pages", who);
    if (!tern && (!d_kpages || !d_vpages)) return err_set("%s: no KV pages", who);
    if (n <= 0) return 0;
    const int kind = attn_kind();
    if (kind < 0) return -1;
    if (kind == 1) { /* the block-softmax kernel: the separate passes (q, k rotated in place) */
        if (tern)
            return err_set("TERNLAB_CUDA_ATTN=block: the block-softmax attention reads f32 KV pages only, and "
                           "this layer's pages are ternary (--kv); unset it");
        if (fwdc_rope_kv_write(const_cast<float *>(d_q), ldq, const_cast<float *>(d_k), ldk, d_v,
                               ldv, d_pos, d_slot, n, n_heads, n_kv, hd, d_cos, d_sin, d_kpages,
                               d_vpages, block_size, stream) != 0 ||
            (code && fwdc_kv_ternarise(d_kpages, d_vpages, d_slot, n, n_kv, hd, block_size, stream) != 0) ||
            fwdc_attention(d_q, ldq, d_kpages, d_vpages, d_pos, d_tab, tab_stride, d_tab_row, n,
                           n_heads, n_kv, hd, block_size, model_heads, 0, d_out, splits, stream) != 0)
            return -1;
        return d_omax ? fwdc_row_absmax(d_out, n, (int64_t)n_heads * hd, reinterpret_cast<float *>(d_omax),
                                        stream)
                      : 0;
    }
    AttnFuse fz;
    fz.k = d_k, fz.v = d_v, fz.ldk = ldk, fz.ldv = ldv, fz.slot = d_slot, fz.cs = d_cos, fz.sn = d_sin;
    fz.kw = d_kpages, fz.vw = d_vpages, fz.omax = d_omax, fz.code = code;
    if (tern)
        return attn_warp_launch<true, true>(d_q, ldq, nullptr, nullptr, d_pos, d_tab, tab_stride, d_tab_row, n,
                                            n_heads, n_kv, hd, block_size, model_heads, d_out, fz, splits, stream,
                                            tp);
    return attn_warp_launch<true>(d_q, ldq, d_kpages, d_vpages, d_pos, d_tab, tab_stride, d_tab_row, n,
                                  n_heads, n_kv, hd, block_size, model_heads, d_out, fz, splits, stream);
}

int fwdc_attention_rope(const float *d_q, int64_t ldq, const float *d_k, int64_t ldk, const float *d_v,
                        int64_t ldv, const int32_t *d_pos, const int32_t *d_slot, const float *d_cos,
                        const float *d_sin, float *d_kpages, float *d_vpages, const int32_t *d_tab,
                        int tab_stride, const int32_t *d_tab_row, int64_t n, int n_heads, int n_kv,
                        int hd, int block_size, int model_heads, float *d_out, unsigned *d_omax,
                        int splits, cudaStream_t stream) {
    return attention_rope_run("fwdc_attention_rope", d_q, ldq, d_k, ldk, d_v, ldv, d_pos, d_slot, d_cos, d_sin,
                              d_kpages, d_vpages, d_tab, tab_stride, d_tab_row, n, n_heads, n_kv, hd, block_size,
                              model_heads, d_out, d_omax, 0, FwdcKvTern{}, splits, stream);
}

int fwdc_attention_rope_coded(const float *d_q, int64_t ldq, const float *d_k, int64_t ldk, const float *d_v,
                              int64_t ldv, const int32_t *d_pos, const int32_t *d_slot, const float *d_cos,
                              const float *d_sin, float *d_kpages, float *d_vpages, FwdcKvTern pages,
                              const int32_t *d_tab, int tab_stride, const int32_t *d_tab_row, int64_t n,
                              int n_heads, int n_kv, int hd, int block_size, int model_heads, float *d_out,
                              unsigned *d_omax, int splits, cudaStream_t stream) {
    return attention_rope_run("fwdc_attention_rope_coded", d_q, ldq, d_k, ldk, d_v, ldv, d_pos, d_slot, d_cos,
                              d_sin, d_kpages, d_vpages, d_tab, tab_stride, d_tab_row, n, n_heads, n_kv, hd,
                              block_size, model_heads, d_out, d_omax, 1, pages, splits, stream);
}

int fwdc_glu(int act, float *d_g, const float *d_u, int64_t cnt, cudaStream_t stream) {
    if (cnt <= 0) return 0;
    glu_kernel<<<grid1(cnt, 256), 256, 0, stream>>>(act, d_g, d_u, cnt);
    CUDA_CHECK_LAUNCH("glu_kernel");
    return 0;
}

int fwdc_add(float *d_x, const float *d_h, int64_t cnt, cudaStream_t stream) {
    if (cnt <= 0) return 0;
    add_kernel<<<grid1(cnt, 256), 256, 0, stream>>>(d_x, d_h, cnt);
    CUDA_CHECK_LAUNCH("add_kernel");
    return 0;
}

int fwdc_act_quant_i8_max(const float *d_x, int64_t n, int64_t cols, const float *d_mx, int8_t *d_xq,
                          float *d_sx, cudaStream_t stream) {
    if (n <= 0) return 0;
    if (n > 0x7fffffff) return err_set("fwdc_act_quant_i8%s: %lld rows", d_mx ? "_max" : "", (long long)n);
    /* (one row keeps the one-CTA kernel: a one-token step's GEMV leaves it one SM, tern_cuda_tbm_reserve) */
    if (d_mx && n >= 2 && n <= 65535 && cols > 0 && cols % 4 == 0 && ((uintptr_t)d_x & 15) == 0 &&
        ((uintptr_t)d_xq & 3) == 0 && cols <= (int64_t)kWideCols * 65535)
        return tern_launch_pdl("act_quant_wide_kernel", act_quant_wide_kernel,
                               dim3((unsigned)((cols + kWideCols - 1) / kWideCols), (unsigned)n), dim3(kWideThreads),
                               stream, d_x, cols, d_mx, d_xq, d_sx);
    return tern_launch_pdl("act_quant_kernel", act_quant_kernel, dim3((unsigned)n), dim3(kRowThreads),
                           stream, d_x, cols, d_mx, d_xq, d_sx);
}

int fwdc_act_quant_i8(const float *d_x, int64_t n, int64_t cols, int8_t *d_xq, float *d_sx,
                      cudaStream_t stream) {
    return fwdc_act_quant_i8_max(d_x, n, cols, nullptr, d_xq, d_sx, stream);
}

int fwdc_row_absmax(const float *d_x, int64_t n, int64_t cols, float *d_mx, cudaStream_t stream) {
    if (n <= 0) return 0;
    if (n > 0x7fffffff) return err_set("fwdc_row_absmax: %lld rows", (long long)n);
    return tern_launch_pdl("row_absmax_kernel", row_absmax_kernel, dim3((unsigned)n), dim3(kRowThreads),
                           stream, d_x, cols, d_mx);
}

int fwdc_to_bf16(const float *d_x, int64_t cnt, uint16_t *d_y, cudaStream_t stream) {
    if (cnt <= 0) return 0;
    to_bf16_kernel<<<grid1(cnt, 256), 256, 0, stream>>>(d_x, cnt,
                                                        reinterpret_cast<__nv_bfloat16 *>(d_y));
    CUDA_CHECK_LAUNCH("to_bf16_kernel");
    return 0;
}

int fwdc_gather_rows(const float *d_x, const int32_t *d_idx, int64_t cnt, int64_t dim,
                     float *d_out, cudaStream_t stream) {
    if (cnt <= 0) return 0;
    gather_rows_kernel<<<grid1(cnt * dim, 256), 256, 0, stream>>>(d_x, d_idx, cnt, dim, d_out);
    CUDA_CHECK_LAUNCH("gather_rows_kernel");
    return 0;
}

int fwdc_step_begin(int32_t *d_tab, const int32_t *d_count, const int32_t *d_pairs, int64_t cap, unsigned *d_zero,
                    int64_t nzero, const float *d_embed, const int32_t *d_tok, int64_t n, int64_t H, float *d_x,
                    cudaStream_t stream) {
    if (!d_zero) nzero = 0;
    if (!d_embed || n <= 0) d_embed = nullptr, n = 0;
    const int64_t big = cap > nzero ? cap : nzero, cnt = big > n * H ? big : n * H;
    if (cnt <= 0) return 0;
    step_begin_kernel<<<grid1(cnt, 256), 256, 0, stream>>>(d_tab, d_count, d_pairs, cap, d_zero, nzero, d_embed,
                                                           d_tok, n, H, d_x);
    CUDA_CHECK_LAUNCH("step_begin_kernel");
    return 0;
}

int fwdc_table_update_z(int32_t *d_tab, const int32_t *d_count, const int32_t *d_pairs, int64_t cap,
                        unsigned *d_zero, int64_t nzero, cudaStream_t stream) {
    return fwdc_step_begin(d_tab, d_count, d_pairs, cap, d_zero, nzero, nullptr, nullptr, 0, 0, nullptr, stream);
}

int fwdc_table_update(int32_t *d_tab, const int32_t *d_count, const int32_t *d_pairs, int64_t cap,
                      cudaStream_t stream) {
    return fwdc_table_update_z(d_tab, d_count, d_pairs, cap, nullptr, 0, stream);
}

/* The argmax's scratch (counters, then the chunks' pairs) for rows x cols, in
 * bytes: 0 where a row is one chunk. */
size_t argmax_scratch_bytes(int64_t rows, int64_t cols) {
    const int64_t chunks = (cols + kArgChunk - 1) / kArgChunk, per = rows < 65535 ? rows : 65535;
    return chunks > 1 ? sizeof(int) * (size_t)(per + 2 * per * chunks) : 0;
}

int fwdc_argmax_reserve(int64_t rows, int64_t cols) {
    void *ws;
    const size_t b = rows > 0 && cols > 0 ? argmax_scratch_bytes(rows, cols) : 0;
    return b > 0 && tern_ws_zeroed(b, &ws) < 0 ? -1 : 0;
}

int fwdc_argmax_rows(const float *d_x, int64_t rows, int64_t cols, int32_t *d_out, int32_t *d_out2,
                     cudaStream_t stream) {
    return fwdc_argmax_rows_to(d_x, rows, cols, d_out, d_out2, nullptr, nullptr, 0, stream);
}

int fwdc_argmax_rows_to(const float *d_x, int64_t rows, int64_t cols, int32_t *d_out, int32_t *d_out2,
                        int32_t *h_out, const int32_t *d_slot, int64_t h_stride, cudaStream_t stream) {
    if (rows <= 0) return 0;
    if (h_out && (rows > 65535 || (d_slot && h_stride < rows)))
        return err_set("fwdc_argmax_rows_to: %lld rows into host slots of %lld", (long long)rows,
                       (long long)h_stride);
    if (cols < 1 || cols > 0x7fffffff) return err_set("fwdc_argmax_rows: %lld x %lld", (long long)rows, (long long)cols);
    const int64_t chunks = (cols + kArgChunk - 1) / kArgChunk, per = rows < 65535 ? rows : 65535;
    float *pv = nullptr;
    int32_t *pi = nullptr;
    int *ctr = nullptr;
    if (chunks > 1) { /* the split-K scratch: zero, and left zero */
        void *ws;
        if (tern_ws_zeroed(argmax_scratch_bytes(rows, cols), &ws) < 0) return -1;
        ctr = static_cast<int *>(ws);
        pv = reinterpret_cast<float *>(ctr + per);
        pi = reinterpret_cast<int32_t *>(pv + per * chunks);
    }
    for (int64_t r0 = 0; r0 < rows; r0 += per) { /* grid.y <= 65535 rows per launch */
        const int64_t nr = rows - r0 < per ? rows - r0 : per;
        if (tern_launch_pdl("argmax_kernel", argmax_kernel, dim3((unsigned)chunks, (unsigned)nr), dim3(kArgThreads),
                            stream, d_x + r0 * cols, cols, pv, pi, ctr, d_out + r0,
                            d_out2 ? d_out2 + r0 : nullptr, h_out, d_slot, h_stride) != 0)
            return -1;
    }
    return 0;
}

int fwdc_unshard(const float *d_g, int tp, int64_t n, int64_t w, float *d_out, cudaStream_t stream) {
    if (n <= 0) return 0;
    unshard_kernel<<<grid1((int64_t)tp * n * w, 256), 256, 0, stream>>>(d_g, tp, n, w, d_out);
    CUDA_CHECK_LAUNCH("unshard_kernel");
    return 0;
}

int fwdc_slice_i8(const int8_t *d_x, int64_t n, int64_t full, int64_t lo, int64_t w,
                  int8_t *d_out, cudaStream_t stream) {
    if (n <= 0) return 0;
    slice_i8_kernel<<<grid1(n * w, 256), 256, 0, stream>>>(d_x, n, full, lo, w, d_out);
    CUDA_CHECK_LAUNCH("slice_i8_kernel");
    return 0;
}

int fwdc_scale_rows(float *d_y, int64_t n, int64_t cols, const float *d_scales, int64_t stride,
                    const float *d_sx, cudaStream_t stream) {
    if (n <= 0) return 0;
    scale_rows_kernel<<<grid1(n * cols, 256), 256, 0, stream>>>(d_y, n, cols, d_scales, stride, d_sx);
    CUDA_CHECK_LAUNCH("scale_rows_kernel");
    return 0;
}

int fwdc_fill(void *d_buf, int64_t cnt, int kind, float amp, uint64_t seed, cudaStream_t stream) {
    if (kind < 0 || kind > 4) return err_set("fwdc_fill: unknown kind %d", kind);
    if (cnt <= 0) return 0;
    fill_kernel<<<grid1(cnt, 256), 256, 0, stream>>>(d_buf, cnt, kind, amp, seed);
    CUDA_CHECK_LAUNCH("fill_kernel");
    return 0;
}

} /* extern "C" */
