/* tern_mma.cuh — device helpers shared by the ternary GEMV and GEMM:
 * decoding 2-bit codes (ternary_format.h) into tensor-core A fragments, the
 * mma.sync wrappers, and the internal launch interface.
 *
 * How codes meet the tensor cores ("swap AB").  The weight rows are the MMA's
 * M dimension (16 rows per fragment), tokens its N dimension (8 per
 * fragment).  The order of the reduction index k inside one MMA is free as
 * long as A and B use the same one, so A is built from what a thread loads
 * naturally and the activations (B) are gathered to match:
 *
 *   lane = 4g + t.  Thread (g, t) reads, from each 64-byte block of rows g
 *   and g+8, the words W[h][j] = bytes 32h + 8t + 4j .. +3 (h, j in {0,1}).
 *   Byte beta, field f holds column 64f + beta of the block.
 *
 *   bf16 (m16n8k16), step (f, h, p):  A regs {g: W[h][0], g+8: W[h][0],
 *     g: W[h][1], g+8: W[h][1]} decoded at field f, pair p (p = 0: bytes 0,2
 *     of the word; p = 1: bytes 1,3).  Thread t's k-slots hold columns
 *     C+p, C+p+2 | C+p+4, C+p+6 with C = 64f + 32h + 8t, so a step covers
 *     16 columns of one 32-column unit (2f + h) and B is x[C+p+{0,2,4,6}].
 *   int8 (m16n8k32), step (f, h): A regs W[h][j] decoded at field f are the
 *     4 consecutive columns C + 4j + {0..3}; B is x[C..C+7] as two words.
 *
 * Every step stays inside one 32-column unit, so per-group scales of 32, 64,
 * 128 or 256 columns are applied exactly at group boundaries (partials per
 * group, then s_g * partial, like the reference).
 *
 * Decoding.  bf16: (w & (0x00030003 << 2f)) | 0x43004300 is the bf16 pair
 * 128 + c*4^f (for f = 3 the code's high bit lands on the exponent's lowest
 * bit: 128 -> 192 -> 256, still affine in c), and one HFMA2 maps it exactly
 * to q = c - 1: 1 LOP3 + 1 HFMA2 per 2 weights (plus 1 shift per word for
 * p = 1).  int8: c = (w >> 2f) & 0x03030303; q = (c + 0x7f7f7f7f) ^ 0x80808080
 * (no carry leaves a byte since c <= 2). */
#ifndef TL_TERN_MMA_CUH
#define TL_TERN_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/cuda_util.h"
#include "cuda/tern_cuda.h"
#include "cuda/tern_launch.cuh"

enum { TACT_BF16 = 0, TACT_F32 = 1, TACT_I8 = 2 };

/* An int8 output as tern_matmul_i8_ref forms it from the exact sum d, the
 * row scale s and the token scale sx: acc = 0.0f; acc += s * (float)d;
 * y = acc / sx.  tern_i8_acc is acc: the product, but +0 where it is -0 (a
 * zero or negative row scale), so every int8 kernel's y is bit-identical
 * to the reference's. */
__device__ __forceinline__ float tern_i8_acc(float s, float d) { return __fadd_rn(0.0f, __fmul_rn(s, d)); }
__device__ __forceinline__ float tern_i8_out(float s, float d, float sx) { return __fdiv_rn(tern_i8_acc(s, d), sx); }

/* The GLU's act(x) * u (act 0: SiLU, 1: ReLU^2), a row's int8 scale from its
 * max|v| and a value's int8 code (act_quant_int8_ref: s = 127 / max(max|v|,
 * 1e-5), q = rint(v s) clamped).  The row kernels (fwd_cuda.cu) and the
 * one-token GEMV's fused forms (tern_gemv_bmma.cu) share them: the same bits. */
__device__ __forceinline__ float tern_glu1(int act, float x, float u) {
    if (act == 0) return __fmul_rn(__fdiv_rn(x, 1.0f + expf(-x)), u);
    const float rl = x > 0.0f ? x : 0.0f;
    return __fmul_rn(__fmul_rn(rl, rl), u);
}
__device__ __forceinline__ float tern_act_scale(float mx) { return 127.0f / (mx > 1e-5f ? mx : 1e-5f); }
__device__ __forceinline__ int8_t tern_quant1(float v, float s) {
    const float q = rintf(__fmul_rn(v, s));
    return (int8_t)(q > 127.0f ? 127 : q < -128.0f ? -128 : (int)q);
}
/* The longest row (bytes of codes: 8192 columns) the one-warp GEMV's
 * f32-input form takes (tern_gemv_i8.cu, each lane holding its row's <= 4
 * 16-byte chunks in registers); tern_cuda.cu's dispatch asks the same. */
constexpr int kTernWarpF32xRowBytes = 2048;

/* The folded norm's r (TernNormIn, tern_cuda.h): a warp's lanes load the
 * producer's slots (tern_norm_slots_load: lane l slots l, l + 32, ..., zero
 * past n; loads only, so other loads can follow before the sum is needed),
 * then tern_norm_r sums them (each lane its slots in turn, then the lanes'
 * sums by xor shuffles 16 .. 1) and forms 1 / sqrt(sum / dim + eps) with
 * IEEE single operations (a host twin gets the same bits).  Every lane of the
 * warp calls both; all get the same r. */
constexpr int kTernNormSlotsLane = TERN_NORM_SLOTS / 32;
static_assert(TERN_NORM_SLOTS % 32 == 0, "the slots are loaded 32 at a time");
__device__ __forceinline__ void tern_norm_slots_load(const float *ss, int n, float (&v)[kTernNormSlotsLane]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < kTernNormSlotsLane; j++) v[j] = lane + 32 * j < n ? ss[lane + 32 * j] : 0.0f;
}
__device__ __forceinline__ float tern_norm_r(const float (&v)[kTernNormSlotsLane], int64_t dim, float eps) {
    float p = 0.0f;
#pragma unroll
    for (int j = 0; j < kTernNormSlotsLane; j++) p = __fadd_rn(p, v[j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) p = __fadd_rn(p, __shfl_xor_sync(0xffffffffu, p, o));
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(p, (float)dim), eps)));
}

/* A row's max|v| for the next GEMV's int8 scale (tern_cuda_matmul_i8_f32x):
 * the warp's largest m (every lane calls, m = some |v| >= 0) raised into *mx
 * as float bits (non-negative floats order as their bits; *mx zero before). */
__device__ __forceinline__ void tern_raise_absmax(unsigned *mx, float m) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0 && m > 0.0f) atomicMax(mx, __float_as_uint(m));
}

/* Arguments of one ternary matmul launch (all device pointers). */
struct TernKArgs {
    const uint8_t *codes;   /* (rows, row_bytes) */
    const float *scales;    /* scales[r*scale_stride + group] */
    int64_t rows, cols, row_bytes, kblocks, scale_stride, group_cols;
    int gu;                 /* 32-col units per group: 1,2,4,8; 0 = one group per row */
    const void *x;          /* activations (n, ldx): bf16 / f32 / int8 */
    int64_t ldx;            /* elements between tokens */
    int x_vec;              /* 1: x rows 16-byte aligned, ldx a multiple of 8 (16 for int8) */
    const float *sx;        /* int8: (n,) per-token scales */
    int64_t n;
    float *y;               /* (n, rows) */
    float *partial;         /* GEMV split-K scratch */
    int *counters;
    int planes;             /* GEMM: number of bf16 planes of x summed (f32 = 3) */
    int64_t plane_stride;   /* elements between planes */
    int l2ef;               /* GEMV (tern_gemv_launch): the codes read with an L2 evict-first hint */
};

int tern_gemv_launch(int act, const TernKArgs *a, cudaStream_t s);
/* whether v is one of tern_gemv.cu's own development variants (2, 20, 10;
 * it runs 0 and the wgmma GEMM's 7KK .. as 0 and refuses the others) */
bool tern_gemv_own_variant(int v);
/* The bulk-copy and one-token GEMVs' common checks (one scale per row or
 * per tensor; x 16-byte aligned with a multiple of col_mult readable
 * columns: 16 int8, 8 bf16; codes 16-byte aligned in 64-byte blocks; at most
 * max_cols columns) and the device's SM count. */
inline int tern_gemv1_prepare(const char *who, const TernCudaMatrix *W, const void *d_x, int64_t xcols,
                              int64_t max_cols, int *sms, int64_t col_mult = 16) {
    if (W->n_groups != 1)
        return err_set("%s: %lld scale groups per row (one scale per row or per tensor only)", who,
                       (long long)W->n_groups);
    if (xcols % col_mult != 0 || xcols < W->cols || ((uintptr_t)d_x & 15) != 0)
        return err_set("%s: activations must be 16-byte aligned with a multiple of %lld columns", who,
                       (long long)col_mult);
    if (((uintptr_t)W->d_codes & 15) != 0 || W->row_bytes % 64 != 0)
        return err_set("%s: codes must be 16-byte aligned in 64-byte blocks", who);
    if (W->cols > max_cols)
        return err_set("%s: %lld columns (at most %lld)", who, (long long)W->cols, (long long)max_cols);
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev));
    return 0;
}

/* The matrix fields every kernel argument struct shares (TernKArgs, RowArgs,
 * BmArgs). */
template <typename Args>
void tern_args_matrix(Args &a, const TernCudaMatrix *W) {
    a.codes = W->d_codes;
    a.scales = W->d_scales;
    a.scale_stride = W->scale_stride;
    a.rows = W->rows;
    a.row_bytes = W->row_bytes;
}

/* A one-token GEMV's arguments (RowArgs, BmArgs) from the matrix and the call. */
template <typename Args>
void tern_gemv1_fill(Args &a, const TernCudaMatrix *W, const int8_t *d_x, const float *d_sx, float *d_y) {
    tern_args_matrix(a, W);
    a.x = d_x;
    a.sx = d_sx;
    a.y = d_y;
}

/* tern_gemv_rows.cu: int8, one token, one scale per row, cols <= 131072; dp4a.
 * x has xcols readable columns (zeros past W->cols); variant 0 = default,
 * 3LRDW = bench sweeps (see the file). */
int tern_gemv_i8_rows(const TernCudaMatrix *W, const int8_t *d_x, int64_t xcols, const float *d_sx,
                      float *d_y, int variant, cudaStream_t s);
/* tern_gemv_bmma.cu: the same call on the binary tensor cores (codes as they
 * are stored); variant 0 = the register-fed kernel, 5UC00 = its bench sweeps,
 * 6abcd = the bulk-copy kernel (the dispatch and bench sweeps). */
int tern_gemv_i8_bmma(const TernCudaMatrix *W, const int8_t *d_x, int64_t xcols, const float *d_sx,
                      float *d_y, int variant, cudaStream_t s);
/* whether 6abcd is a variant of the bulk-copy kernel launch_variant builds
 * (a: 2 .. 6 or 8 row tiles / K parts, c: 2 .. 8 stages) */
bool tern_tbm_variant_ok(int variant);
/* tern_gemv_bmma.cu: 1 .. 16 tokens of int8 activations (rows ldx apart,
 * ldx readable columns, a multiple of 16; y token n's rows at d_y + n rows),
 * one scale per row or per tensor, on the int8 tensor cores fed by the bulk copy engine;
 * variant 6abcd (as tern_gemv_i8_bmma's bulk-copy kernel). */
int tern_gemv_i8_mt(const TernCudaMatrix *W, const int8_t *d_x, int64_t ldx, const float *d_sx, int64_t n,
                    float *d_y, int variant, cudaStream_t s);
/* tern_gemv_bmma.cu: 1 .. 16 tokens of bf16 activations (rows ldx apart, ldx
 * readable columns, a multiple of 8, 16-byte aligned, zeros or any finite
 * values past W->cols; y token n's rows at d_y + n rows), one scale per row or
 * per tensor, on the bf16 tensor cores fed by the bulk copy engine (fp32 sums
 * in a fixed order); variant 6abcd. */
int tern_gemv_bf16_mt(const TernCudaMatrix *W, const uint16_t *d_x, int64_t ldx, int64_t n, float *d_y, int variant,
                      cudaStream_t s);
/* tern_gemv_bmma.cu, the decode step's fused forms (one token, int8, one
 * scale per row):
 * tern_gemv_i8_glu: W holds gate rows [0, half) over up rows [half, 2 half)
 *   (half % 16 == 0); h[j] = act(y[j]) * y[half + j] of y = W x, and max|h|
 *   raised into *d_hmax (float bits: zero before the call); the bulk-copy
 *   kernel with variant 6abcd.
 * tern_gemv_i8_bmma_f32x: y = W x for f32 x (cols % 16 == 0, 16-byte
 *   aligned) whose int8 codes the kernel forms with the scale 127 / max|x|
 *   (*d_xmax, float bits) — act_quant_int8_ref's codes and scale; variant as
 *   tern_gemv_i8_bmma; with def, a K split of the bulk-copy kernel is left
 *   unfinished (tern_cuda_matmul_i8_f32x_defer). */
int tern_gemv_i8_glu(const TernCudaMatrix *W, const int8_t *d_x, int64_t xcols, const float *d_sx, int act,
                     float *d_h, unsigned *d_hmax, int variant, cudaStream_t s);
/* tern_gemv_i8_glu from the folded norm's input (TernNormIn, tern_cuda.h) */
int tern_gemv_i8_glu_norm(const TernCudaMatrix *W, const TernNormIn *ni, int act, float *d_h, unsigned *d_hmax,
                          int variant, cudaStream_t s);
/* tern_gemv_bmma.cu, the multi-token kernel's GLU form (1 .. 8 tokens, int8,
 * one scale per row or per tensor; variant 6abcd with an even number of row
 * tiles): tern_gemv_i8_glu's GLU for n tokens (x rows ldx apart; h token k's
 * half values at d_h + k half, its max|h| raised into d_hmax[k]). */
int tern_gemv_i8_glu_mt(const TernCudaMatrix *W, const int8_t *d_x, int64_t ldx, const float *d_sx, int64_t n,
                        int act, float *d_h, unsigned *d_hmax, int variant, cudaStream_t s);
/* tern_gemv_i8.cu: the one-warp GEMV from f32 x (max|x| *d_xmax), y = W x;
 * with no, the folded norm's producer (TernNormOut: y added to no->res, not
 * written; no->n_ss set) */
int tern_gemv_i8_rowscale_f32x(const TernCudaMatrix *W, const float *d_x, const unsigned *d_xmax, float *d_y,
                               TernNormOut *no, cudaStream_t s);
/* its grid's CTAs for W (a row per warp of 1024 threads, at most one CTA per SM) */
int tern_gemv_i8_rowscale_f32x_ctas(const TernCudaMatrix *W, unsigned *ctas);
int tern_gemv_i8_bmma_f32x(const TernCudaMatrix *W, const float *d_x, const unsigned *d_xmax, float *d_y,
                           int variant, cudaStream_t s, TernDeferred *def = nullptr);
/* A per-device scratch of >= bytes, zero when handed out; users leave it zero. */
int tern_ws_zeroed(size_t bytes, void **out);
namespace tern_mm {
/* Scratch for split-K (tern_cuda.cu): partials of `floats` 4-byte elements
 * and `counters` zeroed counters; NULL + err_set on failure. */
int scratch(int64_t floats, int64_t counters, float **partial, int **ctr);
} // namespace tern_mm
int tern_gemm_launch(int act, const TernKArgs *a, cudaStream_t s);
/* tern_gemm_wg.cu: wgmma (Hopper), one scale per row, any n (meant for n > 16). */
int tern_gemm_wg_launch(int act, const TernKArgs *a, cudaStream_t s);

/* ---- decoding ---------------------------------------------------------- */

template <int F>
__device__ __forceinline__ uint32_t tern_dec_bf16(uint32_t w) {
    const uint32_t v = (w & (0x00030003u << (2 * F))) | 0x43004300u;
    /* q = v * 4^-F - (128 * 4^-F + 1) */
    const float mul = F == 0 ? 1.0f : F == 1 ? 0.25f : F == 2 ? 0.0625f : 0.015625f;
    const float add = F == 0 ? -129.0f : F == 1 ? -33.0f : F == 2 ? -9.0f : -3.0f;
    __nv_bfloat162 r = __hfma2(*reinterpret_cast<const __nv_bfloat162 *>(&v),
                               __float2bfloat162_rn(mul), __float2bfloat162_rn(add));
    return *reinterpret_cast<uint32_t *>(&r);
}

template <int F>
__device__ __forceinline__ uint32_t tern_dec_i8(uint32_t w) {
    const uint32_t c = (w >> (2 * F)) & 0x03030303u;
    return (c + 0x7f7f7f7fu) ^ 0x80808080u;
}

/* ---- MMA --------------------------------------------------------------- */

__device__ __forceinline__ void mma_bf16_16816(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_s8_16832(int c[4], const uint32_t a[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* bf16 pairs (x[2i], x[2i+2]) from two words holding (x0,x1), (x2,x3). */
__device__ __forceinline__ uint32_t pair_even(uint32_t lo, uint32_t hi) {
    return __byte_perm(lo, hi, 0x5410);
}
__device__ __forceinline__ uint32_t pair_odd(uint32_t lo, uint32_t hi) {
    return __byte_perm(lo, hi, 0x7632);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 r = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&r);
}

/* Exact 3-term bf16 split of f32 values: x = hi + mid + lo up to 2^-24|x|. */
__device__ __forceinline__ void split3(float x, float &hi, float &mid, float &lo) {
    hi = __bfloat162float(__float2bfloat16_rn(x));
    float r = x - hi;
    mid = __bfloat162float(__float2bfloat16_rn(r));
    lo = r - mid;
}

/* Streaming 8- / 16-byte loads of codes: read once, keep out of L1. */
__device__ __forceinline__ uint2 ldg_stream_u2(const void *p) {
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n"
                 : "=r"(v.x), "=r"(v.y)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ uint4 ldg_stream_u4(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
/* the same, the line the first L2 evicts (weights read once a step) */
__device__ __forceinline__ uint4 ldg_stream_u4_ef(const void *p) {
    uint4 v;
    asm volatile("{\n"
                 ".reg .b64 pol;\n"
                 "createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n"
                 "ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], pol;\n"
                 "}\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

#endif
