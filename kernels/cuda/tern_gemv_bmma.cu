/* tern_gemv_bmma.cu — the one-token decode GEMV for int8 activations and one
 * scale per row on the binary tensor cores (mma.m16n8k256 .b1, AND + POPC):
 * the 2-bit codes are the A operand as they are stored, no decoding at all.
 * (Also here, sharing its bulk-copy pipeline: the GEMV of 1 .. 16 tokens on
 * the int8 tensor cores, gemv_i8_tbm_mt, described where it starts below.)
 *
 * Why: the dp4a GEMVs (tern_gemv_rows.cu, tern_gemv_tma.cu) spend about 80
 * integer instructions per 128 weights (an AND and a dp4a per 4 weights) and
 * reach 50-65 % of the copy bandwidth, below a read-only stream of the same
 * bytes (72-90 %) however their loads are issued (dev/NOTES.md).  Here a
 * 1 KB tile of codes (16 rows x one 64-byte block) costs one 16-byte load per
 * thread and row half, four MMAs and a handful of shifts.
 *
 * Arithmetic (exact): a code c in {0, 1, 2} (w = c - 1) has bits c = b0 +
 * 2 b1; an int8 activation x = sum_p coef_p x_p over its bit planes (coef_p
 * = 2^p, coef_7 = -128, two's complement).  A = the code words: bit 2m of a
 * word is b0 of its code m, bit 2m + 1 is b1.  B column p (the MMA's N = 8
 * columns are the 8 bit planes) holds x_p of code m's column at bit 2m and
 * zero at bit 2m + 1 ("even" B) — the same shifted left by one ("odd" B)
 * pairs x_p with b1.  With D_e, D_o the popcount sums of A AND B_e / B_o:
 *   sum c x = sum_p coef_p (D_e[p] + 2 D_o[p]),   y = s_row (sum c x - sum x) / s_x
 * bit-identical to tern_matmul_i8_ref.  Code m of word j of a block sits in
 * byte 4j + m / 4, field m % 4, i.e. column 64 (m % 4) + 4j + m / 4.
 *
 * Fragments (m16n8k256, .b1): thread (g = lane / 4, t = lane % 4) holds A
 * rows g and g + 8, 32 k bits at 32t and at 128 + 32t, B column g at the same
 * k, D rows g, g + 8 x columns 2t, 2t + 1.  k order inside a block is ours to
 * choose: thread t loads bytes 16t .. 16t + 15 of the block (words 4t .. 4t
 * + 3) of both rows; k step s uses words 4t + 2s (a0 / a1) and 4t + 2s + 1
 * (a2 / a3), and B the same words of plane g.
 *
 * CTA: 8 warps x 16 rows = 128 rows x one K slice of ks blocks; its B planes
 * (512 bytes per block) are built once in shared memory from x, with the
 * slice's sum x.  Each warp keeps U blocks of codes in flight in registers.
 * Slices of one row group add their exact integer partials atomically; the
 * last CTA of the group (a counter) writes y and clears the scratch. */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "cuda/cuda_util.h"
#include "cuda/tern_cuda.h"
#include "cuda/tern_mbar.cuh"
#include "cuda/tern_mma.cuh"

namespace {

constexpr int BM_WARPS = 8, BM_ROWS = 16 * BM_WARPS; /* rows per CTA */

struct BmArgs {
    const uint8_t *codes;
    const float *scales;
    int64_t scale_stride, rows, row_bytes, kblocks;
    int64_t xcols; /* readable columns of x (zeros past them) */
    const int8_t *x;
    const float *sx;
    const float *xf;      /* instead of x / sx: f32 activations, coded here (tern_gemv_i8_bmma_f32x) */
    const unsigned *xmax; /* with xf: max|x| as float bits (the scale 127 / max formed here) */
    /* the folded norm's input (TernNormIn; the GLU form from xf): x * xw coded, r from the
     * n_ss slots nss, eps, xcols columns */
    const float *xw, *nss;
    int n_ss;
    float eps;
    float *y;
    int ks;          /* blocks per K slice */
    int *part, *ctr; /* split K: partial sums per row (the multi-token kernel: per token and
                      * row), slices done per row group (bmma) or per CTA range (tbm) */
    TernDeferred *def; /* (host) the f32-input bulk-copy kernel's split K left to the reader */
};


/* d += popc(A AND B) per (row, column) */
__device__ __forceinline__ void bmma(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                     uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* The four MMAs of one block (two k steps, even and odd B), each into its
 * own accumulator: the MMAs into one accumulator form a dependent chain, and
 * the binary MMA's latency, not its rate, bounded the kernels while one
 * accumulator pair took every block (d[0] + d[2] = D_e, d[1] + d[3] = D_o). */
__device__ __forceinline__ void block_mma(int (&d)[4][4], const uint4 &ca, const uint4 &cb, const uint4 &e) {
    bmma(d[0], ca.x, cb.x, ca.y, cb.y, e.x, e.y);
    bmma(d[1], ca.x, cb.x, ca.y, cb.y, e.x << 1, e.y << 1);
    bmma(d[2], ca.z, cb.z, ca.w, cb.w, e.z, e.w);
    bmma(d[3], ca.z, cb.z, ca.w, cb.w, e.z << 1, e.w << 1);
}

/* D_e and D_o from NS accumulator sets of block_mma (exact integer sums) */
template <int NS>
__device__ __forceinline__ void sum_sets(const int (&d)[NS][4][4], int (&de)[4], int (&dq)[4]) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        de[j] = 0;
        dq[j] = 0;
#pragma unroll
        for (int u = 0; u < NS; u++) {
            de[j] += d[u][0][j] + d[u][2][j];
            dq[j] += d[u][1][j] + d[u][3][j];
        }
    }
}

/* The B planes of blocks kb0 .. kb0 + nkb - 1 of x ([block][plane][word], 512
 * bytes per block) and their sum x, added to *sumx (zeroed here; a barrier
 * among the nthr threads that call this must follow before either is read).
 * XF: x's codes formed here from the f32 values xf with the scale 127 /
 * max|x| (*xmax's float bits), which is returned (else 0); each thread's
 * first PRE items of f32 values are loaded before the scale is formed, one
 * L2 round trip instead of two (max, then values): 4608 x 36864 18.7 -> 16.1
 * us, 4608 x 4096 6.2 -> 4.9 (int8 x: 15.3, 4.4).  The
 * register-fed kernel takes PRE 1 (its CTAs hold <= 1 item per thread at
 * the shapes it serves): 16 registers per item, and with PRE 2 it lost a
 * CTA per SM (7B's 4096 x 11008: 10.0 -> 11.9 us). */
template <bool XF, int PRE, bool NX = false>
__device__ __forceinline__ float build_planes(uint32_t *planes, const int8_t *x, const float *xf,
                                              const unsigned *xmax, int64_t xcols, int64_t kb0, int nkb,
                                              int tid, int nthr, int *sumx, const float *xw = nullptr) {
    if (tid == 0) *sumx = 0;
    int sx_part = 0;
    float xs = 0.0f;
    const int n = nkb * 16;
    /* item it: words j of block kbl, bytes 4j.. of each 64-column quarter f */
    auto emit = [&](int it, const uint32_t (&w)[4]) {
        const int kbl = it >> 4, j = it & 15;
#pragma unroll
        for (int f = 0; f < 4; f++) sx_part = __dp4a((int)w[f], 0x01010101, sx_part);
#pragma unroll
        for (int pl = 0; pl < 8; pl++) {
            const uint32_t m = 0x01010101u;
            planes[(kbl * 8 + pl) * 16 + j] = ((w[0] >> pl) & m) | (((w[1] >> pl) & m) << 2) |
                                             (((w[2] >> pl) & m) << 4) | (((w[3] >> pl) & m) << 6);
        }
    };
    auto col_of = [&](int it) { return (kb0 + (it >> 4)) * 256 + 4 * (it & 15); };
    /* NX: v = x * w (wv), then coded */
    auto quant4 = [&](const float4 (&vv)[4], const float4 (&wv)[4], uint32_t (&w)[4]) { /* 0 past xcols */
#pragma unroll
        for (int f = 0; f < 4; f++) {
            float4 v = vv[f];
            if (NX)
                v = make_float4(__fmul_rn(v.x, wv[f].x), __fmul_rn(v.y, wv[f].y), __fmul_rn(v.z, wv[f].z),
                                __fmul_rn(v.w, wv[f].w));
            w[f] = (uint32_t)(uint8_t)tern_quant1(v.x, xs) | (uint32_t)(uint8_t)tern_quant1(v.y, xs) << 8 |
                   (uint32_t)(uint8_t)tern_quant1(v.z, xs) << 16 | (uint32_t)(uint8_t)tern_quant1(v.w, xs) << 24;
        }
    };
    auto load = [&](int it, float4 (&vv)[4], float4 (&wv)[4]) {
        const int64_t col = col_of(it);
#pragma unroll
        for (int f = 0; f < 4; f++) {
            const bool in = it < n && col + 64 * f < xcols;
            vv[f] = in ? *reinterpret_cast<const float4 *>(xf + col + 64 * f) : make_float4(0.f, 0.f, 0.f, 0.f);
            if (NX) wv[f] = in ? *reinterpret_cast<const float4 *>(xw + col + 64 * f) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
    static_assert(!XF || PRE > 0, "f32 input: PRE items loaded before the scale");
    if constexpr (XF) {
        const unsigned xm = *xmax;
        float4 v[PRE][4], wv[NX ? PRE : 1][4];
        int it = tid;
#pragma unroll
        for (int k = 0; k < PRE; k++) load(it + k * nthr, v[k], wv[NX ? k : 0]);
        xs = tern_act_scale(__uint_as_float(xm));
        while (it < n) {
#pragma unroll
            for (int k = 0; k < PRE; k++) {
                if (it + k * nthr >= n) break;
                uint32_t w[4];
                quant4(v[k], wv[NX ? k : 0], w);
                emit(it + k * nthr, w);
            }
            it += PRE * nthr;
            if (it < n)
#pragma unroll
                for (int k = 0; k < PRE; k++) load(it + k * nthr, v[k], wv[NX ? k : 0]);
        }
    } else {
        for (int it = tid; it < n; it += nthr) {
            const int64_t col = col_of(it);
            uint32_t w[4];
#pragma unroll
            for (int f = 0; f < 4; f++)
                w[f] = col + 64 * f >= xcols ? 0u : __ldg(reinterpret_cast<const uint32_t *>(x + col + 64 * f));
            emit(it, w);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sx_part += __shfl_xor_sync(0xffffffffu, sx_part, o);
    asm volatile("bar.sync 2, %0;" ::"r"(nthr) : "memory"); /* *sumx = 0 is visible */
    if ((tid & 31) == 0 && sx_part != 0) atomicAdd(sumx, sx_part);
    return xs;
}

/* sum c x of rows g (*va) and g + 8 (*vb) of a 16-row tile from the
 * accumulators (this thread: planes 2t, 2t + 1), reduced over the 4 lanes of
 * a row */
__device__ __forceinline__ void combine_planes(const int (&de)[4], const int (&dq)[4], int t, int *va, int *vb) {
    const int c0 = t == 3 ? 64 : 1 << (2 * t), c1 = t == 3 ? -128 : 2 << (2 * t);
    int a = c0 * (de[0] + 2 * dq[0]) + c1 * (de[1] + 2 * dq[1]);
    int b = c0 * (de[2] + 2 * dq[2]) + c1 * (de[3] + 2 * dq[3]);
    a += __shfl_xor_sync(0xffffffffu, a, 1);
    a += __shfl_xor_sync(0xffffffffu, a, 2);
    b += __shfl_xor_sync(0xffffffffu, b, 1);
    b += __shfl_xor_sync(0xffffffffu, b, 2);
    *va = a;
    *vb = b;
}

/* The scale of row r: from a copy in shared memory of rows sbase.. (ssc),
 * else from global memory. */
__device__ __forceinline__ float row_scale(const BmArgs &p, int64_t r, const float *ssc, int64_t sbase) {
    return ssc ? ssc[r - sbase] : p.scales[r * p.scale_stride];
}

/* Rows r and r + 8 of a tile: y = s_row * d / s_x, or (split K) the exact
 * partial added to the scratch. */
__device__ __forceinline__ void store_rows(const BmArgs &p, int64_t r, int va, int vb, bool split, float sx,
                                           const float *ssc = nullptr, int64_t sbase = 0) {
    if (r < p.rows) {
        if (split) atomicAdd(&p.part[r], va);
        else p.y[r] = tern_i8_out(row_scale(p, r, ssc, sbase), (float)va, sx);
    }
    if (r + 8 < p.rows) {
        if (split) atomicAdd(&p.part[r + 8], vb);
        else p.y[r + 8] = tern_i8_out(row_scale(p, r + 8, ssc, sbase), (float)vb, sx);
    }
}

template <int U, bool XF>
__global__ void __launch_bounds__(32 * BM_WARPS) gemv_i8_bmma(const BmArgs p) {
    extern __shared__ __align__(16) uint32_t planes[]; /* [block][plane 8][word 16] */
    __shared__ int s_sumx, s_last;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t kb0 = (int64_t)blockIdx.y * p.ks;
    const int nkb = (int)(p.kblocks - kb0 < p.ks ? p.kblocks - kb0 : p.ks);
    const int64_t r0 = (int64_t)blockIdx.x * BM_ROWS + warp * 16;
    const int64_t ra = r0 + g < p.rows ? r0 + g : p.rows - 1, rb = r0 + g + 8 < p.rows ? r0 + g + 8 : p.rows - 1;
    const uint8_t *pa = p.codes + ra * p.row_bytes + kb0 * 64 + 16 * t;
    const uint8_t *pb = p.codes + rb * p.row_bytes + kb0 * 64 + 16 * t;

    /* the first U blocks of codes: they do not depend on the kernel before */
    uint4 ca[U], cb[U];
#pragma unroll
    for (int u = 0; u < U; u++)
        if (u < nkb) ca[u] = ldg_stream_u4(pa + 64 * u), cb[u] = ldg_stream_u4(pb + 64 * u);
    pdl_wait();
    pdl_trigger(); /* the next kernel may take its place in the queue now */

    /* B planes of the slice and its sum x */
    /* (int8 x: its scale read after the planes) */
    const float xs = build_planes<XF, 1>(planes, p.x, p.xf, p.xmax, p.xcols, kb0, nkb, tid, 32 * BM_WARPS, &s_sumx);
    __syncthreads(); /* planes and s_sumx complete */

    int d[1][4][4] = {}; /* one accumulator set (a second, for odd blocks: 22 more registers, 3 CTAs per SM) */
    const uint32_t *pl_g = planes + g * 16 + 4 * t;
    for (int kb = 0; kb < nkb; kb += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (kb + u < nkb) {
                const uint4 e = *reinterpret_cast<const uint4 *>(pl_g + (kb + u) * 128);
                block_mma(d[0], ca[u], cb[u], e);
                if (kb + u + U < nkb) {
                    ca[u] = ldg_stream_u4(pa + 64 * (kb + u + U));
                    cb[u] = ldg_stream_u4(pb + 64 * (kb + u + U));
                }
            }
        }
    }

    int de[4], dq[4], va, vb;
    sum_sets(d, de, dq);
    combine_planes(de, dq, t, &va, &vb);
    va -= s_sumx;
    vb -= s_sumx;
    const bool split = gridDim.y > 1;
    const float sx = XF ? xs : p.sx[0];
    if (t == 0) store_rows(p, r0 + g, va, vb, split, sx);
    if (!split) return;
    __threadfence();
    __syncthreads();
    if (tid == 0) s_last = atomicAdd(&p.ctr[blockIdx.x], 1) == (int)gridDim.y - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    const int64_t rg0 = (int64_t)blockIdx.x * BM_ROWS;
    for (int i = tid; i < BM_ROWS; i += 32 * BM_WARPS) {
        const int64_t r = rg0 + i;
        if (r >= p.rows) break;
        const int d = atomicExch(&p.part[r], 0);
        p.y[r] = tern_i8_out(row_scale(p, r, nullptr, 0), (float)d, sx);
    }
    if (tid == 0) atomicExch(&p.ctr[blockIdx.x], 0);
}

template <int U, bool XF>
int launch_bmma(BmArgs &a, int per_sm, int sms, cudaStream_t s) {
    const int64_t groups = (a.rows + BM_ROWS - 1) / BM_ROWS;
    /* K slices: as many CTAs as per_sm per SM hold, at least U blocks each, one
     * wave (CTAs left over for a second wave doubled the time) */
    int64_t S = (int64_t)sms * per_sm / groups;
    const int64_t smax = (a.kblocks + U - 1) / U, smin = (a.kblocks + 255) / 256; /* planes <= 128 KB */
    if (S > smax) S = smax;
    if (S < smin) S = smin; /* very wide rows: more than one wave rather than no launch */
    if (S < 1) S = 1;
    a.ks = (int)((a.kblocks + S - 1) / S);
    S = (a.kblocks + a.ks - 1) / a.ks;
    if (S > 65535 || groups > 0x7fffffff)
        return err_set("tern_gemv_i8_bmma: %lld rows x %lld blocks is too large", (long long)a.rows,
                       (long long)a.kblocks);
    const size_t smem = (size_t)a.ks * 512; /* <= 128 KB (ks <= 256) */
    /* the limit is the largest any call uses, never lowered: a captured graph
     * replays launches of several sizes */
    CUDA_CHECK(cudaFuncSetAttribute(gemv_i8_bmma<U, XF>, cudaFuncAttributeMaxDynamicSharedMemorySize, 128 * 1024));
    if (S > 1) {
        void *ws;
        if (tern_ws_zeroed((size_t)(groups + a.rows) * sizeof(int), &ws) < 0) return -1;
        a.ctr = static_cast<int *>(ws);
        a.part = a.ctr + groups;
    }
    return tern_launch_pdl_smem("gemv_i8_bmma", gemv_i8_bmma<U, XF>, dim3((unsigned)groups, (unsigned)S), dim3(32 * BM_WARPS),
                                smem, s, a);
}


/* ---- the same arithmetic with the codes streamed by the bulk copy engine ----
 * CTA (x, y): K slice y (ks blocks; the B planes built once) and an equal
 * share of the 16-row tiles, tiles [x T / gx, (x + 1) T / gx) of T (a
 * grid-stride over units of RT tiles left SMs with 5 units where the average
 * was 4.36: the stream ran at the busiest SM's pace); one producer warp
 * copies each unit's rows (the slice's bytes of a row are contiguous) into a
 * stage, row r at r * stride (stride = the slice's bytes, padded to 64 mod
 * 128: the A reads of rows g and g + 1 in one quarter-warp fall on different
 * banks); consumer warp w takes tile w % RT of each unit (the last unit of
 * a CTA may hold fewer). */
/* shared memory for sc row scales, in whole 128-byte lines (the stages follow) */
__host__ __device__ constexpr size_t tbm_scale_bytes(int sc) { return ((size_t)sc * 4 + 127) / 128 * 128; }

/* the bulk-copy kernel's forms: int8 x; f32 x coded in the kernel
 * (tern_gemv_i8_bmma_f32x); int8 x with the GLU epilogue (paired rows); the
 * GLU form from the folded norm's input (tern_gemv_i8_glu_norm: f32 x * w
 * coded, the outputs times r) */
enum { TBM_I8 = 0, TBM_F32X = 1, TBM_GLU = 2, TBM_GLU_N = 3, TBM_MT8 = 4, TBM_MT16 = 5, TBM_BF1 = 6, TBM_BF8 = 7,
       TBM_BF16 = 8, TBM_MTG8 = 9 };
/* (TBM_MTG8: the multi-token kernel's GLU form for up to 8 tokens — the GLU
 * epilogue over paired gate / up tiles, h and each token's max|h| as
 * tern_gemv_i8_glu's: tern_gemv_i8_glu_mt) */
__host__ __device__ constexpr bool tbm_paired(int mode) {
    return mode == TBM_GLU || mode == TBM_GLU_N || mode == TBM_MTG8;
}
/* The GLU forms let the next kernel (the down GEMV, whose CTAs start
 * streaming its matrix at once) in only after their x is coded into planes,
 * not right after their wait: 7B B = 1 853-858 -> 866-871 tok/s with the
 * folded norm's form, 27B (the int8 form) 299-301 -> 302 (H200, three rounds;
 * the same for the other forms: no gain, or a loss for the int8 form). */
__host__ __device__ constexpr bool tbm_late_trigger(int mode) { return tbm_paired(mode); }
/* (TBM_MT8 / TBM_MT16: up to 8 / 16 tokens on the int8 tensor cores, one or
 * two 8-token MMA tiles: gemv_i8_tbm_mt below; TBM_BF1 / TBM_BF8 / TBM_BF16: 1,
 * up to 8, up to 16 tokens of bf16 activations on the bf16 tensor cores:
 * gemv_bf16_tbm below) */
__host__ __device__ constexpr bool tbm_mt(int mode) {
    return mode == TBM_MT8 || mode == TBM_MT16 || mode == TBM_MTG8;
}
/* the multi-token kernel's 8-token MMA tiles */
__host__ __device__ constexpr int tbm_mt_tiles(int mode) { return mode == TBM_MT16 ? 2 : 1; }
__host__ __device__ constexpr bool tbm_bf(int mode) { return mode >= TBM_BF1 && mode <= TBM_BF16; }

struct TbArgs {
    BmArgs b;
    int st, stride;  /* stages, bytes per row in a stage */
    int64_t tiles;   /* 16-row tiles (paired: of the gate half) */
    int sc_rows;     /* row scales copied to shared memory at the start (0: read at the end) */
    /* paired (the GLU, tern_gemv_i8_glu): rows [0, half) gate, [half, 2 half) up;
     * a unit holds RT / 2 tiles of gate rows and the same tiles of up rows, and
     * h = act(y_gate) * y_up replaces y, its max|h| raised into *hmax */
    int64_t half; /* (the paired form only) */
    int act;
    float *h;
    unsigned *hmax;
    /* the multi-token kernel: tokens (1 .. 8 MN; their rows of x are BmArgs::xcols apart,
     * token n's outputs at y + n rows) */
    int ntok;
    int defer; /* split K: the slices' sums left in part, y not written (BmArgs::def) */
    int l2ef;  /* the codes read with an L2 evict-first policy (tern_cuda_l2ef_get) */
    /* the bf16 kernel: its activations (ntok rows, BmArgs::xcols apart) and, split K, the
     * slices' float sums (slice, token, row) */
    const uint16_t *xh;
    float *fpart;
    /* split K, one int8 token, not paired nor deferred: per row the slices' sums
     * (each + kTbmBias) and, from bit 40, how many slices have added them
     * (tbm_row_add) */
    unsigned long long *rsum;
};

/* bytes between tokens' rows of x in shared memory for K slices of ks blocks
 * (the multi-token kernel) */
__host__ __device__ constexpr size_t mt_xrow(int ks) { return (size_t)ks * 256 + 64; }
/* bytes between tokens' rows of bf16 x (16 mod 128: the B loads of lanes g
 * and g + 1 of a quarter-warp fall on different banks) and the rows kept */
__host__ __device__ constexpr size_t bf_xrow(int ks) { return (size_t)ks * 512 + 16; }
__host__ __device__ constexpr int bf_xrows(int mode) { return mode == TBM_BF1 ? 1 : mode == TBM_BF8 ? 8 : 16; }
/* shared memory for x in K slices of ks blocks: binary planes (512 bytes a
 * block), 8 MN int8 tokens' rows (mt_xrow), or 1 / 8 / 16 bf16 tokens' rows
 * (bf_xrow); the row scales and stages follow */
__host__ __device__ constexpr size_t tbm_x_bytes(int mode, int ks) {
    return tbm_bf(mode)   ? bf_xrows(mode) * bf_xrow(ks)
           : tbm_mt(mode) ? 8 * tbm_mt_tiles(mode) * mt_xrow(ks)
                          : (size_t)ks * 512;
}

/* Every consumer thread of a CTA of a K split, after its partial sums are
 * out: whether it is the last of the K slices of its tile range (one counter
 * per CTA range, the same tiles in every slice: a fence and a counter per
 * tile inside the unit loop put an L2 round trip between units). */
template <int NT>
__device__ __forceinline__ bool tbm_last_slice(int *ctr, int *s_last, int tid) {
    __syncwarp(); /* (the lanes that stored the last unit's sums, with the rest, before the barrier) */
    __threadfence();
    asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory");
    if (tid == 0) *s_last = atomicAdd(&ctr[blockIdx.x], 1) == (int)gridDim.y - 1;
    asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory");
    if (!*s_last) return false;
    __threadfence();
    return true;
}

/* paired: h of gate row r (y from the exact sum dg) and up row half + r (du)
 * into q.h[r]; returns m raised by |h|.  Scales from ssc (the CTA's nr gate
 * rows from row sbase, then the same up rows) or global memory.  NX: both y
 * times the folded norm's r (rn). */
template <bool NX>
__device__ __forceinline__ float glu_pair(const TbArgs &q, int64_t r, int dg, int du, float sx, const float *ssc,
                                          int64_t sbase, int64_t nr, float m, float rn, int64_t hoff = 0) {
    const BmArgs &p = q.b;
    /* (up row half + r sits at ssc[nr + r - sbase]: an offset sbase + half - nr) */
    const float sg = row_scale(p, r, ssc, sbase), su = row_scale(p, q.half + r, ssc, sbase + q.half - nr);
    float yg = tern_i8_out(sg, (float)dg, sx), yu = tern_i8_out(su, (float)du, sx);
    if (NX) yg = __fmul_rn(yg, rn), yu = __fmul_rn(yu, rn);
    const float hv = tern_glu1(q.act, yg, yu);
    q.h[hoff + r] = hv;
    return fmaxf(m, fabsf(hv));
}

/* The binary MMAs of blocks [kb, ke) of rows g (ra) and g + 8 (rb) of a
 * stage against the planes from pl_g: the next block's operands are loaded
 * before the current block's MMAs (one warp per scheduler: nothing else hides
 * the shared-memory latency), even and odd blocks in their own accumulators. */
__device__ __forceinline__ void tile_mma(int (&d)[2][4][4], const uint8_t *ra, const uint8_t *rb,
                                         const uint32_t *pl_g, int kb, int ke) {
    if (kb >= ke) return;
    uint4 a0 = *reinterpret_cast<const uint4 *>(ra + 64 * kb), b0 = *reinterpret_cast<const uint4 *>(rb + 64 * kb),
          e0 = *reinterpret_cast<const uint4 *>(pl_g + kb * 128), a1, b1, e1;
    for (; kb < ke; kb += 2) {
        const bool has1 = kb + 1 < ke;
        if (has1) {
            a1 = *reinterpret_cast<const uint4 *>(ra + 64 * (kb + 1));
            b1 = *reinterpret_cast<const uint4 *>(rb + 64 * (kb + 1));
            e1 = *reinterpret_cast<const uint4 *>(pl_g + (kb + 1) * 128);
        }
        block_mma(d[0], a0, b0, e0);
        if (kb + 2 < ke) {
            a0 = *reinterpret_cast<const uint4 *>(ra + 64 * (kb + 2));
            b0 = *reinterpret_cast<const uint4 *>(rb + 64 * (kb + 2));
            e0 = *reinterpret_cast<const uint4 *>(pl_g + (kb + 2) * 128);
        }
        if (has1) block_mma(d[1], a1, b1, e1);
    }
}

/* The producer warp of the bulk-copy kernels: each unit's rows of the K
 * slice (sb bytes from block kb0) into the next of q.st stages (paired: nh
 * gate rows to stage rows [0, nh), the same up rows to [16 RH, 16 RH + nh)),
 * full barrier per stage, waiting for the consumers' empty one before reuse. */
template <int RT, bool paired>
__device__ __forceinline__ void tbm_produce(const TbArgs &q, uint8_t *stages, uint32_t stage_bytes, uint32_t full_s,
                                            uint32_t empty_s, int64_t tb, int64_t te, int64_t kb0, uint32_t sb,
                                            int lane) {
    const BmArgs &p = q.b;
    constexpr int RH = RT / 2, step = paired ? RH : RT;
    const int ST = q.st;
    const uint32_t st_s = (uint32_t)__cvta_generic_to_shared(stages);
    int slot = 0, i = 0;
    uint32_t phase = 0;
    const uint64_t pol = q.l2ef ? tern_mbar::evict_first_policy() : 0;
    for (int64_t t0 = tb; t0 < te; t0 += step, i++) {
        if (i >= ST && lane == 0) tern_mbar::wait(empty_s + 8 * slot, phase ^ 1);
        __syncwarp();
        const uint32_t dst = st_s + slot * stage_bytes, bar = full_s + 8 * slot;
        if (!paired) {
            const int64_t row0 = t0 * 16, rend = te * 16 < p.rows ? te * 16 : p.rows;
            const int nr = (int)(rend - row0 < 16 * RT ? rend - row0 : 16 * RT);
            if (lane == 0) tern_mbar::expect_tx(bar, nr * (int)sb);
            __syncwarp();
            for (int r = lane; r < nr; r += 32)
                tern_mbar::bulk_load(dst + r * q.stride, p.codes + (row0 + r) * p.row_bytes + kb0 * 64, sb, bar, q.l2ef,
                                     pol);
        } else {
            const int nh = 16 * (int)(te - t0 < RH ? te - t0 : RH);
            if (lane == 0) tern_mbar::expect_tx(bar, 2 * nh * (int)sb);
            __syncwarp();
            for (int r = lane; r < 2 * nh; r += 32) {
                const int hr = r < nh ? r : r - nh;
                const int64_t src = (r < nh ? 0 : q.half) + t0 * 16 + hr;
                tern_mbar::bulk_load(dst + (r < nh ? hr : 16 * RH + hr) * q.stride,
                                     p.codes + src * p.row_bytes + kb0 * 64, sb, bar, q.l2ef, pol);
            }
        }
        if (++slot == ST) slot = 0, phase ^= 1;
    }
}

/* The CTA's row scales into ssc (independent of earlier kernels too): one
 * round trip at the start instead of one per unit at its end (paired: the
 * gate rows' scales, then the up rows'). */
template <bool paired>
__device__ __forceinline__ void tbm_row_scales(const TbArgs &q, float *ssc, int64_t tb, int64_t te, int tid,
                                               int nthr) {
    const BmArgs &p = q.b;
    const int64_t nrange = (te - tb) * 16, r0 = tb * 16;
    if constexpr (paired) {
        for (int64_t i = tid; i < 2 * nrange; i += nthr)
            ssc[i] = p.scales[(i < nrange ? r0 + i : q.half + r0 + i - nrange) * p.scale_stride];
    } else {
        const int64_t nr = (te * 16 < p.rows ? te * 16 : p.rows) - r0;
        for (int64_t i = tid; i < nr; i += nthr) ssc[i] = p.scales[(r0 + i) * p.scale_stride];
    }
}

/* What a bulk-copy kernel's CTA works on: its K slice (blocks kb0 ..
 * kb0 + nkb - 1, sb bytes of a row), its range of tiles [tb, te), its
 * shared memory (x, then the row scales ssc where copied, then the stages)
 * and the stages' full / empty barriers (shared addresses). */
struct TbmCta {
    int64_t kb0, tb, te;
    int nkb;
    uint32_t sb, stage_bytes, full_s, empty_s;
    uint8_t *x, *stages;
    float *ssc;
};

/* The CTA's share, with the stage barriers (and *s_xbar, where given: one
 * arrival) initialised; every thread calls, a barrier ends it.  Then the
 * producer warp (warp nw) streams the codes and returns true; the consumers
 * copy the row scales, wait for the kernel before (PDL) and let the next one
 * queue — the GLU forms only once their x is coded (tbm_late_trigger) —, and
 * get false. */
template <int RT, int MODE>
__device__ __forceinline__ bool tbm_start(const TbArgs &q, uint8_t *smem, uint64_t *s_full, uint64_t *s_empty,
                                          uint64_t *s_xbar, int nw, TbmCta &c) {
    const BmArgs &p = q.b;
    constexpr bool paired = tbm_paired(MODE);
    const int tid = threadIdx.x;
    c.kb0 = (int64_t)blockIdx.y * p.ks;
    c.nkb = (int)(p.kblocks - c.kb0 < p.ks ? p.kblocks - c.kb0 : p.ks);
    c.sb = (uint32_t)c.nkb * 64;
    c.stage_bytes = (uint32_t)(16 * RT) * q.stride;
    c.x = smem;
    c.ssc = q.sc_rows ? reinterpret_cast<float *>(smem + tbm_x_bytes(MODE, p.ks)) : nullptr;
    c.stages = smem + tbm_x_bytes(MODE, p.ks) + tbm_scale_bytes(q.sc_rows);
    c.tb = (int64_t)blockIdx.x * q.tiles / gridDim.x;
    c.te = ((int64_t)blockIdx.x + 1) * q.tiles / gridDim.x;
    c.full_s = (uint32_t)__cvta_generic_to_shared(s_full);
    c.empty_s = (uint32_t)__cvta_generic_to_shared(s_empty);
    if (tid == 0) {
        for (int i = 0; i < q.st; i++) {
            tern_mbar::init(c.full_s + 8 * i, 1);
            tern_mbar::init(c.empty_s + 8 * i, nw);
        }
        if (s_xbar) tern_mbar::init((uint32_t)__cvta_generic_to_shared(s_xbar), 1);
        tern_mbar::init_fence();
    }
    __syncthreads();
    if (tid >> 5 == nw) { /* producer: the codes do not depend on earlier kernels */
        tbm_produce<RT, paired>(q, c.stages, c.stage_bytes, c.full_s, c.empty_s, c.tb, c.te, c.kb0, c.sb, tid & 31);
        return true;
    }
    if (c.ssc) tbm_row_scales<paired>(q, c.ssc, c.tb, c.te, tid, 32 * nw);
    pdl_wait();
    if (!tbm_late_trigger(MODE)) pdl_trigger(); /* the next kernel may take its place in the queue now */
    return false;
}

/* The last K slice of a CTA's tiles (tbm_last_slice): y of its rows (ntok
 * tokens' rows, each sx(n)) from the exact sums in the scratch, which it
 * leaves zero with the counter. */
template <typename SX>
__device__ __forceinline__ void tbm_finish(const BmArgs &p, const TbmCta &c, int ntok, int tid, int nthr, SX sx) {
    const int nr = (int)((c.te * 16 < p.rows ? c.te * 16 : p.rows) - c.tb * 16);
    for (int i = tid; i < nr * ntok; i += nthr) { /* (one pass over rows x tokens: independent round trips) */
        const int n = ntok == 1 ? 0 : i / nr;
        const int64_t r = c.tb * 16 + (i - n * nr), at = (int64_t)n * p.rows + r;
        const int d = atomicExch(&p.part[at], 0);
        p.y[at] = tern_i8_out(row_scale(p, r, c.ssc, c.tb * 16), (float)d, sx(n));
    }
    if (tid == 0) atomicExch(&p.ctr[blockIdx.x], 0);
}

/* The one-token int8 kernels' K split without a finishing pass: each slice
 * adds its exact sum of row r, biased by kTbmBias (|sum| <= 128 x 64 blocks x
 * 256 = 2^21: int8 x, slices of <= 64 blocks), and 2^40 into rsum[r] with one 64-bit atomic; the slice that
 * leaves a count of S (the slices) is the last, holds the whole sum (S x
 * kTbmBias below the word's low 40 bits) and writes y and a zero word.  No fence, counter or
 * read-back: one atomic round trip a row, taken a unit later
 * (TbmRows).  Before, each CTA range's last slice (counter after a fence)
 * read the sums back: 14.75 -> 12.55 us at 4608 x 36864 with that pass left
 * out (a probe, H200). */
constexpr long long kTbmBias = 1ll << 22;
constexpr unsigned long long kTbmLow40 = (1ull << 40) - 1;
#ifndef TERN_TBM_PEND
#define TERN_TBM_PEND 2
#endif
constexpr int kTbmPend = TERN_TBM_PEND;

/* rows r and r + 8 of a tile as this slice left them (rsum[r] and rsum[r + 8];
 * 0: not added — a word this slice added to counts at least one slice) */
struct TbmRows {
    unsigned long long a, b;
};

__device__ __forceinline__ unsigned long long tbm_row_add(const TbArgs &q, int64_t r, int v) {
    if (r >= q.b.rows) return 0ull;
    const unsigned long long add = (1ull << 40) + (unsigned long long)(v + kTbmBias);
    return atomicAdd(q.rsum + r, add) + add;
}

/* y of row r where this slice was the last of S (w: the word it left) */
__device__ __forceinline__ void tbm_row_last(const TbArgs &q, int64_t r, unsigned long long w, int S, float sx,
                                             const float *ssc, int64_t sbase) {
    if ((w >> 40) != (unsigned long long)S) return;
    const long long d = (long long)(w & kTbmLow40) - S * kTbmBias;
    q.b.y[r] = tern_i8_out(row_scale(q.b, r, ssc, sbase), (float)d, sx);
    q.rsum[r] = 0; /* (no slice adds to it again in this call) */
}

/* RT consumer warps per K part, KH parts: warp w takes tile w % RT of each
 * unit and blocks [h nkb / KH, (h + 1) nkb / KH) of it (h = w / RT); with
 * several parts the others' sums go to the first through shared memory, one
 * consumer barrier per unit (KH times the warps for the MMAs' latency). */
template <int RT, int KH, int MODE, bool RS = false> /* RS: a K split through tbm_row_add (tbm_rs) */
__global__ void __launch_bounds__(32 * (RT * KH + 1)) gemv_i8_tbm(const TbArgs q) {
    const BmArgs &p = q.b;
    constexpr int NW = RT * KH, NT = 32 * NW; /* consumer warps, threads */
    constexpr int RH = RT / 2;                /* paired: gate tiles per unit (their up tiles follow) */
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ __align__(8) uint64_t s_full[8], s_empty[8];
    __shared__ int s_sumx, s_last;
    constexpr bool paired = tbm_paired(MODE), XF = MODE == TBM_F32X || MODE == TBM_GLU_N, NX = MODE == TBM_GLU_N;
    /* the parts' sums by unit parity: paired every part's, else parts 1.. at [part - 1] */
    __shared__ int s_part[2][paired ? KH : KH > 1 ? KH - 1 : 1][RT][16];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int tw = warp % RT, part = warp / RT; /* consumers: tile and K part */
    const int step = paired ? RH : RT; /* tiles of the range per unit */
    const int ST = q.st;
    TbmCta c;
    if (tbm_start<RT, MODE>(q, smem, s_full, s_empty, nullptr, NW, c)) return; /* (the producer) */
    const int64_t kb0 = c.kb0, tb = c.tb, te = c.te;
    const int nkb = c.nkb;
    const uint32_t stage_bytes = c.stage_bytes, full_s = c.full_s, empty_s = c.empty_s;
    uint32_t *planes = reinterpret_cast<uint32_t *>(c.x);
    const float *ssc = c.ssc;
    uint8_t *stages = c.stages;
    int slot = 0;
    uint32_t phase = 0;
    const int64_t nrange = (te - tb) * 16; /* paired: the range's gate rows */
    /* (int8 x: its scale read after the planes) */
#if defined(TERN_TBM_PROBE) && TERN_TBM_PROBE == 2 /* no planes either */
    if (tid == 0) s_sumx = 0;
    const float xs = 1.0f;
    (void)kb0;
#else
    float nsv[kTernNormSlotsLane]; /* NX: the norm's slots, in flight while the planes form */
    if (NX) tern_norm_slots_load(p.nss, p.n_ss, nsv);
    const float xs = build_planes<XF, 2, NX>(planes, p.x, p.xf, p.xmax, p.xcols, kb0, nkb, tid, NT, &s_sumx, p.xw);
#endif
    asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory"); /* planes, s_sumx and ssc complete */
    if (tbm_late_trigger(MODE)) pdl_trigger();
#if !(defined(TERN_TBM_PROBE) && TERN_TBM_PROBE == 2)
    const float rn = NX ? tern_norm_r(nsv, p.xcols, p.eps) : 1.0f;
#else
    const float rn = 1.0f;
#endif
    TERN_TRACE_NOW(tr_mid);
    const int sumx = s_sumx;
    const float sx = XF ? xs : p.sx[0];
    const bool split = gridDim.y > 1;
    const uint32_t *pl_g = planes + g * 16 + 4 * t;
    const int kbeg = part * nkb / KH, kend = (part + 1) * nkb / KH;
    /* the rows added in the last kTbmPend units, newest first (rows r_new - 16 i step):
     * a slice's atomics return behind the SM's stream of codes, so each is read
     * kTbmPend units on */
    TbmRows pend[kTbmPend] = {};
    int64_t r_new = 0;
    const int S = (int)gridDim.y;
    (void)S, (void)r_new;
    int u = 0;
    float hm = 0.0f; /* paired: this thread's largest |h| */
    for (int64_t t0 = tb; t0 < te; t0 += step, u ^= 1) {
        tern_mbar::wait(full_s + 8 * slot, phase);
        const int64_t my = t0 + (paired ? tw % RH : tw); /* this warp's tile (paired: of the gate half) */
#ifdef TERN_TBM_PROBE /* timing probes built on the device only (results wrong): no MMAs */
        const bool mine = false;
#else
        const bool mine = my < te; /* the CTA's last unit may hold fewer tiles */
#endif
        const uint8_t *ra = stages + slot * stage_bytes + (16 * tw + g) * q.stride + 16 * t;
        int d[2][4][4] = {};
        if (mine) tile_mma(d, ra, ra + 8 * q.stride, pl_g, kbeg, kend);
        __syncwarp();
        if (lane == 0) tern_mbar::arrive(empty_s + 8 * slot); /* the slot may be refilled */
        if (++slot == ST) slot = 0, phase ^= 1;
        int va = 0, vb = 0;
        if (mine) {
            int de[4], dq[4];
            sum_sets(d, de, dq);
            combine_planes(de, dq, t, &va, &vb);
        }
        if constexpr (paired) { /* every part's sums of the unit's gate and up tiles meet in shared memory */
            if (t == 0) s_part[u][part][tw][g] = va, s_part[u][part][tw][g + 8] = vb;
            asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory");
            if (part > 0 || tw >= RH || !mine || t != 0) continue;
            int dg0 = -sumx, dg1 = -sumx, du0 = -sumx, du1 = -sumx;
#pragma unroll
            for (int h = 0; h < KH; h++) {
                dg0 += s_part[u][h][tw][g], dg1 += s_part[u][h][tw][g + 8];
                du0 += s_part[u][h][tw + RH][g], du1 += s_part[u][h][tw + RH][g + 8];
            }
            const int64_t r = my * 16 + g;
            if (split) {
                atomicAdd(&p.part[r], dg0), atomicAdd(&p.part[r + 8], dg1);
                atomicAdd(&p.part[q.half + r], du0), atomicAdd(&p.part[q.half + r + 8], du1);
            } else {
                hm = glu_pair<NX>(q, r, dg0, du0, sx, ssc, tb * 16, nrange, hm, rn);
                hm = glu_pair<NX>(q, r + 8, dg1, du1, sx, ssc, tb * 16, nrange, hm, rn);
            }
            continue;
        }
        if (KH > 1) {
            if (part > 0 && mine && t == 0) s_part[u][part - 1][tw][g] = va, s_part[u][part - 1][tw][g + 8] = vb;
            asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory");
            if (part > 0) continue;
            if (mine)
#pragma unroll
                for (int h = 0; h < KH - 1; h++) va += s_part[u][h][tw][g], vb += s_part[u][h][tw][g + 8];
        }
        if (!mine) continue;
        va -= sumx;
        vb -= sumx;
        const int64_t r0 = (t0 + tw) * 16;
        if constexpr (RS) {
            if (t != 0) continue;
            const int64_t r_old = r_new - 16 * step * (kTbmPend - 1);
            tbm_row_last(q, r_old, pend[kTbmPend - 1].a, S, sx, ssc, tb * 16);
            tbm_row_last(q, r_old + 8, pend[kTbmPend - 1].b, S, sx, ssc, tb * 16);
#pragma unroll
            for (int i = kTbmPend - 1; i > 0; i--) pend[i] = pend[i - 1];
            r_new = r0 + g;
            pend[0] = {tbm_row_add(q, r_new, va), tbm_row_add(q, r_new + 8, vb)};
        } else {
            if (t == 0) store_rows(p, r0 + g, va, vb, split, sx, ssc, tb * 16);
        }
    }
    TERN_TRACE_END(tr_mid);
    if constexpr (RS) {
#pragma unroll
        for (int i = kTbmPend - 1; i >= 0; i--) { /* the last units' rows */
            tbm_row_last(q, r_new - 16 * step * i, pend[i].a, S, sx, ssc, tb * 16);
            tbm_row_last(q, r_new - 16 * step * i + 8, pend[i].b, S, sx, ssc, tb * 16);
        }
        return;
    }
    if (paired && !split) tern_raise_absmax(q.hmax, hm);
    /* the last of the K slices of this CTA's tiles writes their y */
    if (!split || q.defer || !tbm_last_slice<NT>(p.ctr, &s_last, tid)) return;
    if (paired) {
        float m = 0.0f;
        for (int64_t r = tb * 16 + tid; r < te * 16; r += NT) {
            const int dg = atomicExch(&p.part[r], 0), du = atomicExch(&p.part[q.half + r], 0);
            m = glu_pair<NX>(q, r, dg, du, sx, ssc, tb * 16, nrange, m, rn);
        }
        tern_raise_absmax(q.hmax, m);
        if (tid == 0) atomicExch(&p.ctr[blockIdx.x], 0);
    } else {
        tbm_finish(p, c, 1, tid, NT, [sx](int) { return sx; });
    }
}

/* ---- several tokens (1 .. 16) on the int8 tensor cores, the codes streamed the same way ----
 * mma.m16n8k32 .s8: A = the codes c in {0, 1, 2} as bytes, B = the int8
 * activations, sum (c - 1) x = D - sum x.  c = (word >> 2f) & 0x03030303 is
 * field f of a word's four bytes: columns 64 f + 4j .. 64 f + 4j + 3 of word
 * j, in order — two instructions per register, no other decoding.
 * Fragments (m16n8k32): thread (g = lane / 4, t = lane % 4) holds A rows g
 * (a0, a2) and g + 8 (a1, a3) at k 4t .. 4t + 3 (a0, a1) and 16 + 4t .. (a2,
 * a3), B column (token) g at the same k (b0, b1), D rows g, g + 8 x tokens 2t,
 * 2t + 1.  k order inside a block is ours: thread t loads words 4t .. 4t + 3
 * of both rows (as the binary kernel does), and k step s = 2f + p takes field
 * f of words 4t + 2p (a0 / a1) and 4t + 2p + 1 (a2 / a3), i.e. columns 64 f +
 * 16 t + 8 p .. + 7 — so B of steps 2f and 2f + 1 is 16 bytes of token g in
 * x's own order (one 16-byte load).  The CTA's K slice of x is copied once
 * into shared memory by the bulk copy engine (one row per token, rows 64 mod
 * 128 bytes apart as the stage rows: a quarter-warp's 16-byte loads fall on
 * distinct banks), each token's sum of the slice formed from there.  B columns of tokens past ntok
 * hold whatever shared memory held: they only reach D columns never stored.
 * The rest is the one-token kernel's: producer, stages, units, K parts,
 * split K (partials per token and row).  Timing probes (device builds only,
 * results wrong): TERN_TBM_PROBE 1 or 2 no MMA loop, 3 an add for each MMA.
 * Variants with 4 tiles of 4 K parts (a = 8) spill at 9 .. 16 tokens (544
 * threads: 96 registers); the dispatch does not take them there. */


/* d += A x B (s8, m16n8k32; the codes 0 .. 2 are the same bytes as u8) */
__device__ __forceinline__ void mma_s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint32_t b0, uint32_t b1) {
#if defined(TERN_TBM_PROBE) && TERN_TBM_PROBE == 3 /* timing probe (results wrong): an add for the MMA */
    d[0] += (int)(a0 + a1 + a2 + a3 + b0 + b1);
#else
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

/* One block's operands of this lane: the code words 4t .. 4t + 3 of rows g
 * (ca) and g + 8 (cb); B of steps 2f, 2f + 1 in e[f] for MN tiles of tokens. */
template <int MN>
struct MtOps {
    uint4 ca, cb;
    uint4 e[4][MN];
};
template <int MN>
__device__ __forceinline__ void load_mt(MtOps<MN> &o, const uint8_t *ra, const uint8_t *rb, const uint8_t *xl,
                                        size_t xrow, int kb) {
    o.ca = *reinterpret_cast<const uint4 *>(ra + 64 * kb);
    o.cb = *reinterpret_cast<const uint4 *>(rb + 64 * kb);
#pragma unroll
    for (int f = 0; f < 4; f++)
#pragma unroll
        for (int nt = 0; nt < MN; nt++)
            o.e[f][nt] = *reinterpret_cast<const uint4 *>(xl + nt * 8 * xrow + (size_t)kb * 256 + 64 * f);
}
template <int MN, int NS>
__device__ __forceinline__ void block_mma_mt(int (&d)[NS][MN][4], const MtOps<MN> &o) {
    constexpr uint32_t m = 0x03030303u;
#pragma unroll
    for (int st = 0; st < 8; st++) {
        const int f = st >> 1, pp = st & 1;
        const uint32_t a0 = ((pp ? o.ca.z : o.ca.x) >> (2 * f)) & m, a2 = ((pp ? o.ca.w : o.ca.y) >> (2 * f)) & m;
        const uint32_t a1 = ((pp ? o.cb.z : o.cb.x) >> (2 * f)) & m, a3 = ((pp ? o.cb.w : o.cb.y) >> (2 * f)) & m;
#pragma unroll
        for (int nt = 0; nt < MN; nt++) {
            const uint4 &e = o.e[f][nt];
            mma_s8(d[st % NS][nt], a0, a1, a2, a3, pp ? e.z : e.x, pp ? e.w : e.y);
        }
    }
}

/* The MMAs of blocks [kb, ke) of rows g (ra = the lane's bytes 16t of its row
 * in the stage) and g + 8 (rb) against B from xl (the lane's token row +
 * 16t): the next block's operands are loaded before the current block's
 * MMAs (two operand sets in turn, no copies), which go into NS accumulator
 * sets by step (4 independent chains). */
template <int MN, int NS>
__device__ __forceinline__ void tile_mma_mt(int (&d)[NS][MN][4], const uint8_t *ra, const uint8_t *rb,
                                            const uint8_t *xl, size_t xrow, int kb, int ke) {
    if (kb >= ke) return;
    MtOps<MN> o0, o1;
    load_mt<MN>(o0, ra, rb, xl, xrow, kb);
    for (; kb < ke; kb += 2) {
        if (kb + 1 < ke) load_mt<MN>(o1, ra, rb, xl, xrow, kb + 1);
        block_mma_mt<MN, NS>(d, o0);
        if (kb + 1 >= ke) break;
        if (kb + 2 < ke) load_mt<MN>(o0, ra, rb, xl, xrow, kb + 2);
        block_mma_mt<MN, NS>(d, o1);
    }
}

/* y (or split K: the exact partial into the scratch, token n's rows at
 * part + n rows) of rows r and r + 8 for tokens n, n + 1 from v[0..3] (D's
 * order: (r, n), (r, n + 1), (r + 8, n), (r + 8, n + 1)) less the slice's sums */
__device__ __forceinline__ void store_mt(const TbArgs &q, int64_t r, int n, const int (&v)[4], const int *sumx,
                                         bool split, const float *ssc, int64_t sbase, const float *sxv) {
    const BmArgs &p = q.b;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int64_t rr = r + (j >> 1) * 8;
        const int nn = n + (j & 1);
        if (rr >= p.rows || nn >= q.ntok) continue;
        const int d = v[j] - sumx[nn];
        if (split) atomicAdd(&p.part[(int64_t)nn * p.rows + rr], d);
        else p.y[(int64_t)nn * p.rows + rr] = tern_i8_out(row_scale(p, rr, ssc, sbase), (float)d, sxv[nn]);
    }
}

/* The paired form's h of gate rows r, r + 8 (this warp's v) and their up rows
 * (vu, the up warp's) for tokens n, n + 1 (D's order as store_mt's); split K:
 * both exact partials into the scratch (token nn's rows at part + nn rows, up
 * rows at half + r).  hm[j & 1]: the largest |h| of token n + (j & 1). */
__device__ __forceinline__ void glu_mt(const TbArgs &q, int64_t r, int n, const int (&v)[4], const int (&vu)[4],
                                       const int *sumx, bool split, const float *ssc, int64_t sbase, int64_t nr,
                                       const float *sxv, float (&hm)[2]) {
    const BmArgs &p = q.b;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int64_t rr = r + (j >> 1) * 8;
        const int nn = n + (j & 1);
        if (nn >= q.ntok) continue; /* (gate tiles are whole: rr < half) */
        const int dg = v[j] - sumx[nn], du = vu[j] - sumx[nn];
        if (split) {
            atomicAdd(&p.part[(int64_t)nn * p.rows + rr], dg);
            atomicAdd(&p.part[(int64_t)nn * p.rows + q.half + rr], du);
        } else {
            hm[j & 1] = glu_pair<false>(q, rr, dg, du, sxv[nn], ssc, sbase, nr, hm[j & 1], 1.0f, nn * q.half);
        }
    }
}

/* A unit's sums of one consumer warp (tile tw, K part `part`): its NS
 * accumulator sets added in order, then, with K parts, parts 1.. through
 * shared memory (sp: s_part[u], [KH - 1][RT][32][4 MN] by part, tile, lane)
 * into part 0's in part order, one barrier of the NT consumer threads.
 * false: not part 0, nothing more to do for the unit.  (The multi-token
 * kernels, int8 and bf16.) */
template <int NT, int KH, int RT, int MN, int NS, typename T>
__device__ __forceinline__ bool unit_sums(T (&v)[MN][4], const T (&d)[NS][MN][4], T (*sp)[RT][32][4 * MN], int part,
                                          int tw, int lane, bool mine) {
#pragma unroll
    for (int nt = 0; nt < MN; nt++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            v[nt][j] = d[0][nt][j];
#pragma unroll
            for (int s2 = 1; s2 < NS; s2++) v[nt][j] += d[s2][nt][j];
        }
    if (KH > 1) {
        if (part > 0 && mine)
#pragma unroll
            for (int nt = 0; nt < MN; nt++)
#pragma unroll
                for (int j = 0; j < 4; j++) sp[part - 1][tw][lane][4 * nt + j] = v[nt][j];
        asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory");
        if (part > 0) return false;
        if (mine)
#pragma unroll
            for (int h = 0; h < KH - 1; h++)
#pragma unroll
                for (int nt = 0; nt < MN; nt++)
#pragma unroll
                    for (int j = 0; j < 4; j++) v[nt][j] += sp[h][tw][lane][4 * nt + j];
    }
    return true;
}

/* MODE: TBM_MT8 / TBM_MT16, or TBM_MTG8: the GLU over paired gate / up tiles
 * (a unit's warps tw < RT / 2 take its gate tiles, the others the same
 * tiles' up rows, whose sums reach the gate warps through shared memory). */
template <int RT, int KH, int MODE>
__global__ void __launch_bounds__(32 * (RT * KH + 1)) gemv_i8_tbm_mt(const TbArgs q) {
    const BmArgs &p = q.b;
    constexpr int MN = tbm_mt_tiles(MODE);
    constexpr bool paired = tbm_paired(MODE);
    constexpr int NW = RT * KH, NT = 32 * NW; /* consumer warps, threads */
    constexpr int RH = RT / 2;                /* paired: gate tiles per unit (their up tiles follow) */
    static_assert(!paired || (RT % 2 == 0 && MN == 1), "the GLU form: whole gate / up tile pairs, <= 8 tokens");
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ __align__(8) uint64_t s_full[8], s_empty[8], s_xbar;
    __shared__ int s_sumx[16], s_last;
    /* parts 1..'s accumulators by unit parity, per tile and lane */
    __shared__ int s_part[2][KH > 1 ? KH - 1 : 1][RT][32][4 * MN];
    /* paired: the up tiles' sums by unit parity, per tile and lane */
    __shared__ int s_up[paired ? 2 : 1][paired ? RH : 1][32][4];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int tw = warp % RT, part = warp / RT;
    const int step = paired ? RH : RT; /* tiles of the range per unit */
    const int ST = q.st;
    const uint32_t xbar = (uint32_t)__cvta_generic_to_shared(&s_xbar);
    TbmCta c;
    if (tbm_start<RT, MODE>(q, smem, s_full, s_empty, &s_xbar, NW, c)) return; /* (the producer) */
    const int64_t kb0 = c.kb0, tb = c.tb, te = c.te;
    const int nkb = c.nkb;
    const uint32_t stage_bytes = c.stage_bytes, full_s = c.full_s, empty_s = c.empty_s;
    const size_t xrow = mt_xrow(p.ks);
    uint8_t *xs = c.x;
    const float *ssc = c.ssc;
    uint8_t *stages = c.stages;
    /* the slice of each token's x (zeros past xcols), then its sum */
    const int64_t c0 = kb0 * 256, avail = p.xcols - c0;
    const uint32_t xb = (uint32_t)(avail < (int64_t)nkb * 256 ? avail : (int64_t)nkb * 256);
    if (tid == 0) {
        tern_mbar::expect_tx(xbar, q.ntok * (int)xb);
        const uint32_t xs_s = (uint32_t)__cvta_generic_to_shared(xs);
        for (int n = 0; n < q.ntok; n++)
            tern_mbar::bulk_load(xs_s + (uint32_t)(n * xrow), p.x + n * p.xcols + c0, xb, xbar);
    }
    if (xb < (uint32_t)nkb * 256)
        for (int i = tid; i < q.ntok * (nkb * 256 - (int)xb); i += NT) {
            const int w = nkb * 256 - (int)xb, n = i / w;
            xs[n * xrow + xb + (i - n * w)] = 0;
        }
    tern_mbar::wait(xbar, 0);
    asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory"); /* the zeroed tails */
    for (int n = warp; n < q.ntok; n += NW) {
        int sum = 0;
        for (int c = lane; c < nkb * 16; c += 32) {
            const uint4 v = *reinterpret_cast<const uint4 *>(xs + n * xrow + 16 * c);
            sum = __dp4a((int)v.x, 0x01010101, sum);
            sum = __dp4a((int)v.y, 0x01010101, sum);
            sum = __dp4a((int)v.z, 0x01010101, sum);
            sum = __dp4a((int)v.w, 0x01010101, sum);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) s_sumx[n] = sum;
    }
    asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory"); /* s_sumx and ssc complete */
    if (tbm_late_trigger(MODE)) pdl_trigger();
    const float *sxv = p.sx;
    const bool split = gridDim.y > 1;
    const uint8_t *xl = xs + g * xrow + 16 * t;
    const int kbeg = part * nkb / KH, kend = (part + 1) * nkb / KH;
    const int64_t nrange = (te - tb) * 16; /* paired: the range's gate rows */
    float hm[2] = {0.0f, 0.0f};            /* paired: this thread's largest |h| of tokens 2t, 2t + 1 */
    int slot = 0, u = 0;
    uint32_t phase = 0;
    for (int64_t t0 = tb; t0 < te; t0 += step, u ^= 1) {
        tern_mbar::wait(full_s + 8 * slot, phase);
        const int64_t my = t0 + (paired ? tw % RH : tw); /* this warp's tile (paired: of the gate half) */
#if defined(TERN_TBM_PROBE) && TERN_TBM_PROBE != 3 /* timing probes (results wrong): no MMAs */
        const bool mine = false;
#else
        const bool mine = my < te;
#endif
        const uint8_t *ra = stages + slot * stage_bytes + (16 * tw + g) * q.stride + 16 * t;
        constexpr int NS = 4 / MN; /* accumulator sets: 4 chains */
        int d[NS][MN][4] = {};
        if (mine) tile_mma_mt<MN, NS>(d, ra, ra + 8 * q.stride, xl, xrow, kbeg, kend);
        __syncwarp();
        if (lane == 0) tern_mbar::arrive(empty_s + 8 * slot);
        if (++slot == ST) slot = 0, phase ^= 1;
        int v[MN][4];
        const bool first = unit_sums<NT, KH, RT, MN, NS>(v, d, s_part[u], part, tw, lane, mine);
        if constexpr (paired) { /* the up tiles' sums to their gate warps */
            if (first && mine && tw >= RH)
#pragma unroll
                for (int j = 0; j < 4; j++) s_up[u][tw - RH][lane][j] = v[0][j];
            asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory");
            if (!first || !mine || tw >= RH) continue;
            int vu[4];
#pragma unroll
            for (int j = 0; j < 4; j++) vu[j] = s_up[u][tw][lane][j];
            glu_mt(q, my * 16 + g, 2 * t, v[0], vu, s_sumx, split, ssc, tb * 16, nrange, sxv, hm);
            continue;
        }
        if (!first || !mine) continue;
#pragma unroll
        for (int nt = 0; nt < MN; nt++)
            store_mt(q, my * 16 + g, 8 * nt + 2 * t, v[nt], s_sumx, split, ssc, tb * 16, sxv);
    }
    if constexpr (paired) {
        if (!split) { /* each token's max over the warp's lanes of one t, then one atomic */
#pragma unroll
            for (int k = 0; k < 2; k++) {
                float m = hm[k];
#pragma unroll
                for (int o = 4; o < 32; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
                if (g == 0 && 2 * t + k < q.ntok && m > 0.0f) atomicMax(q.hmax + 2 * t + k, __float_as_uint(m));
            }
        }
    }
    /* the last of the K slices of this CTA's tiles writes their y (paired: h) */
    if (!split || !tbm_last_slice<NT>(p.ctr, &s_last, tid)) return;
    if constexpr (paired) {
        for (int n = 0; n < q.ntok; n++) {
            float m = 0.0f;
            for (int64_t r = tb * 16 + tid; r < te * 16; r += NT) {
                const int64_t at = (int64_t)n * p.rows + r;
                const int dg = atomicExch(&p.part[at], 0), du = atomicExch(&p.part[at + q.half], 0);
                m = glu_pair<false>(q, r, dg, du, sxv[n], ssc, tb * 16, nrange, m, 1.0f, n * q.half);
            }
            tern_raise_absmax(q.hmax + n, m);
        }
        if (tid == 0) atomicExch(&p.ctr[blockIdx.x], 0);
    } else {
        tbm_finish(p, c, q.ntok, tid, NT, [sxv](int n) { return sxv[n]; });
    }
}

/* ---- 1 .. 16 tokens of bf16 activations, the codes streamed the same way ----
 * mma.m16n8k16 .bf16 with f32 accumulation: A = the codes decoded to q = c - 1
 * in bf16 (tern_dec_bf16: 1 LOP3 + 1 HFMA2 per register of two weights), B =
 * the activations.  Thread (g, t) loads words 4t .. 4t + 3 of rows g and g + 8
 * of a block (bytes 16t .. 16t + 15, as the int8 kernel above); word j at
 * field f holds columns C = 64 f + 16 t + 4 j .. C + 3, and a decoded register
 * holds the pair (C, C + 2) (the word's bytes 0 and 2: p = 0) or (C + 1, C +
 * 3) (the word shifted right by 8: p = 1).  Step (f, h, p) of a block takes
 * words 2h (a0 / a1) and 2h + 1 (a2 / a3) at field f, pair p; B of thread t
 * must then hold x[C + p], x[C + p + 2] of those words' column groups, so the
 * CTA's slice of x sits in shared memory with every 8 columns x0 .. x7 stored
 * as (x0, x2), (x4, x6), (x1, x3), (x5, x7): thread t's B of a field, all
 * four of its steps, are two 16-byte loads, each step's b0 / b1 adjacent
 * registers as the MMA takes them (no moves).  Decoding takes one LOP3 per
 * register with 0x43004300 held in a register (k43: with both constants as
 * immediates the compiler split it into two).  The products q x are exact;
 * the sums are fp32 (the
 * MMAs', then the accumulator sets', the K parts' and the K slices' in a
 * fixed order: the same bits every call), y = s_row * sum as
 * tern_matmul_f32_ref forms it.  x comes in through ordinary loads after the
 * wait (zeros past xcols).  One token (TBM_BF1): one row of x, every B column
 * token 0; 2 .. 16: column g of 8-token tile nt is token 8 nt + g (clamped to
 * the last; only real tokens' outputs are stored).  A K split leaves every
 * slice's sums in a float scratch (slice, token, row); the last slice of a CTA
 * range adds them in slice order.  (The variant and the split follow the
 * token count, so a token's bits may differ between calls of 1 and of 8
 * tokens; within the reference's bounds either way.)  The rest is the int8 kernels': producer,
 * stages, units, K parts, plan. */

/* tern_dec_bf16 with its OR constant from a register (k43 = 0x43004300) */
template <int F>
__device__ __forceinline__ uint32_t dec_bf16_k(uint32_t w, uint32_t k43) {
    constexpr uint32_t mul = F == 0 ? 0x3F803F80u : F == 1 ? 0x3E803E80u : F == 2 ? 0x3D803D80u : 0x3C803C80u;
    constexpr uint32_t add = F == 0 ? 0xC301C301u : F == 1 ? 0xC204C204u : F == 2 ? 0xC110C110u : 0xC040C040u;
    const uint32_t v = (w & (0x00030003u << (2 * F))) | k43;
    uint32_t r; /* q = v * 4^-F - (128 * 4^-F + 1): bf16 pairs 1 / 0.25 / 0.0625 / 0.015625, -129 / -33 / -9 / -3 */
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(mul), "r"(add));
    return r;
}

/* the four steps of field F of a block: words ca / cb of rows g / g + 8 (and
 * the same >> 8), B from xl[nt] (this lane's token row of tile nt, at the
 * block) */
template <int F, int MN, int NS>
__device__ __forceinline__ void field_mma_bf(float (&d)[NS][MN][4], const uint4 &ca, const uint4 &cb,
                                             const uint4 &ca8, const uint4 &cb8, const uint8_t *const (&xl)[MN],
                                             uint32_t k43) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        uint4 e[MN];
#pragma unroll
        for (int nt = 0; nt < MN; nt++) e[nt] = *reinterpret_cast<const uint4 *>(xl[nt] + 128 * F + 16 * h);
#pragma unroll
        for (int pp = 0; pp < 2; pp++) {
            const uint4 &wa = pp ? ca8 : ca, &wb = pp ? cb8 : cb;
            const uint32_t a[4] = {dec_bf16_k<F>(h ? wa.z : wa.x, k43), dec_bf16_k<F>(h ? wb.z : wb.x, k43),
                                   dec_bf16_k<F>(h ? wa.w : wa.y, k43), dec_bf16_k<F>(h ? wb.w : wb.y, k43)};
#pragma unroll
            for (int nt = 0; nt < MN; nt++)
                mma_bf16_16816(d[(4 * F + 2 * h + pp) % NS][nt], a, pp ? e[nt].z : e[nt].x, pp ? e[nt].w : e[nt].y);
        }
    }
}

/* The MMAs of blocks [kb, ke) of rows g (ra: the lane's bytes 16t of its row
 * in the stage) and g + 8 (rb) against x from xl (the lane's token rows + 32t
 * bytes), the next block's codes loaded before the current block's MMAs. */
template <int MN, int NS>
__device__ __forceinline__ void tile_mma_bf(float (&d)[NS][MN][4], const uint8_t *ra, const uint8_t *rb,
                                            const uint8_t *const (&xl)[MN], int kb, int ke, uint32_t k43) {
    if (kb >= ke) return;
    uint4 ca = *reinterpret_cast<const uint4 *>(ra + 64 * kb), cb = *reinterpret_cast<const uint4 *>(rb + 64 * kb);
    for (; kb < ke; kb++) {
        uint4 na = ca, nb = cb;
        if (kb + 1 < ke) {
            na = *reinterpret_cast<const uint4 *>(ra + 64 * (kb + 1));
            nb = *reinterpret_cast<const uint4 *>(rb + 64 * (kb + 1));
        }
        const uint4 ca8 = make_uint4(ca.x >> 8, ca.y >> 8, ca.z >> 8, ca.w >> 8),
                    cb8 = make_uint4(cb.x >> 8, cb.y >> 8, cb.z >> 8, cb.w >> 8);
        const uint8_t *xb[MN];
#pragma unroll
        for (int nt = 0; nt < MN; nt++) xb[nt] = xl[nt] + 512 * kb;
        field_mma_bf<0, MN, NS>(d, ca, cb, ca8, cb8, xb, k43);
        field_mma_bf<1, MN, NS>(d, ca, cb, ca8, cb8, xb, k43);
        field_mma_bf<2, MN, NS>(d, ca, cb, ca8, cb8, xb, k43);
        field_mma_bf<3, MN, NS>(d, ca, cb, ca8, cb8, xb, k43);
        ca = na, cb = nb;
    }
}

template <int RT, int KH, int MODE>
__global__ void __launch_bounds__(32 * (RT * KH + 1)) gemv_bf16_tbm(const TbArgs q) {
    const BmArgs &p = q.b;
    constexpr int NW = RT * KH, NT = 32 * NW; /* consumer warps, threads */
    constexpr int MN = MODE == TBM_BF16 ? 2 : 1, NS = 4 / MN; /* 8-token tiles, accumulator sets */
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ __align__(8) uint64_t s_full[8], s_empty[8];
    __shared__ int s_last;
    /* parts 1..'s sums by unit parity, per tile and lane */
    __shared__ float s_part[2][KH > 1 ? KH - 1 : 1][RT][32][4 * MN];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int tw = warp % RT, part = warp / RT;
    const int ST = q.st;
    TbmCta c;
    if (tbm_start<RT, MODE>(q, smem, s_full, s_empty, nullptr, NW, c)) return; /* (the producer) */
    const int64_t tb = c.tb, te = c.te;
    const int nkb = c.nkb;
    const size_t xrow = bf_xrow(p.ks);
    /* the slice of each token's x, 8 columns a thread at a time as (x0, x2), (x4, x6),
     * (x1, x3), (x5, x7); zeros past xcols (a multiple of 8) */
    const int64_t c0 = c.kb0 * 256;
    const int chunks = nkb * 32;
    for (int i = tid; i < q.ntok * chunks; i += NT) {
        const int n = i / chunks, ch = i - n * chunks;
        const int64_t col = c0 + 8 * ch;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (col < p.xcols) v = *reinterpret_cast<const uint4 *>(q.xh + n * p.xcols + col);
        *reinterpret_cast<uint4 *>(c.x + n * xrow + 16 * ch) =
            make_uint4(pair_even(v.x, v.y), pair_even(v.z, v.w), pair_odd(v.x, v.y), pair_odd(v.z, v.w));
    }
    asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory"); /* x and ssc complete */
    const bool split = gridDim.y > 1;
    const uint8_t *xl[MN];
#pragma unroll
    for (int nt = 0; nt < MN; nt++) {
        const int n = MODE == TBM_BF1 ? 0 : min(8 * nt + g, q.ntok - 1);
        xl[nt] = c.x + n * xrow + 32 * t;
    }
    const int kbeg = part * nkb / KH, kend = (part + 1) * nkb / KH;
    /* 0x43004300 in a register the compiler cannot see through (ks <= 64: its bits
     * from 9 on are zero), so that each decode is one LOP3 */
    const uint32_t k43 = 0x43004300u | ((uint32_t)p.ks >> 9);
    int slot = 0, u = 0;
    uint32_t phase = 0;
    for (int64_t t0 = tb; t0 < te; t0 += RT, u ^= 1) {
        tern_mbar::wait(c.full_s + 8 * slot, phase);
        const int64_t my = t0 + tw;
        const bool mine = my < te; /* the CTA's last unit may hold fewer tiles */
        const uint8_t *ra = c.stages + slot * c.stage_bytes + (16 * tw + g) * q.stride + 16 * t;
        float d[NS][MN][4] = {};
        if (mine) tile_mma_bf<MN, NS>(d, ra, ra + 8 * q.stride, xl, kbeg, kend, k43);
        __syncwarp();
        if (lane == 0) tern_mbar::arrive(c.empty_s + 8 * slot); /* the slot may be refilled */
        if (++slot == ST) slot = 0, phase ^= 1;
        float v[MN][4];
        if (!unit_sums<NT, KH, RT, MN, NS>(v, d, s_part[u], part, tw, lane, mine)) continue;
        if (!mine) continue;
        /* D: rows g, g + 8 x tokens 2t, 2t + 1 of each tile */
#pragma unroll
        for (int nt = 0; nt < MN; nt++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int64_t r = my * 16 + g + (j >> 1) * 8;
                const int n = 8 * nt + 2 * t + (j & 1);
                if (r >= p.rows || n >= q.ntok) continue;
                if (split) q.fpart[((int64_t)blockIdx.y * q.ntok + n) * p.rows + r] = v[nt][j];
                else p.y[(int64_t)n * p.rows + r] = row_scale(p, r, c.ssc, tb * 16) * v[nt][j];
            }
    }
    /* the last of the K slices of this CTA's tiles adds the slices' sums in order */
    if (!split || !tbm_last_slice<NT>(p.ctr, &s_last, tid)) return;
    const int nr = (int)((te * 16 < p.rows ? te * 16 : p.rows) - tb * 16);
    const int64_t sstride = (int64_t)q.ntok * p.rows;
    for (int i = tid; i < nr * q.ntok; i += NT) {
        const int n = i / nr;
        const int64_t r = tb * 16 + (i - n * nr), at = (int64_t)n * p.rows + r;
        float sum = __ldcg(q.fpart + at);
        for (int sl = 1; sl < (int)gridDim.y; sl++) sum += __ldcg(q.fpart + sl * sstride + at);
        p.y[at] = row_scale(p, r, c.ssc, tb * 16) * sum;
    }
    if (tid == 0) atomicExch(&p.ctr[blockIdx.x], 0);
}

/* The one-token int8 forms whose K split goes through tbm_row_add: int8 x and
 * f32 x where the split is not left to the reader (TbArgs::defer); the paired
 * and multi-token forms keep the counter and the last slice's pass. */
__host__ __device__ constexpr bool tbm_rs(int mode) { return mode == TBM_I8 || mode == TBM_F32X; }

/* the kernel of a mode (rs: its K-split form through tbm_row_add, where tbm_rs) */
template <int RT, int KH, int MODE>
constexpr auto tbm_kernel(bool rs = false) {
    if constexpr (tbm_bf(MODE)) return gemv_bf16_tbm<RT, KH, MODE>;
    else if constexpr (tbm_mt(MODE)) return gemv_i8_tbm_mt<RT, KH, MODE>;
    else if constexpr (tbm_rs(MODE)) return rs ? gemv_i8_tbm<RT, KH, MODE, true> : gemv_i8_tbm<RT, KH, MODE>;
    else return gemv_i8_tbm<RT, KH, MODE>;
}
constexpr const char *tbm_name(int mode) {
    return tbm_bf(mode) ? "gemv_bf16_tbm" : tbm_mt(mode) ? "gemv_i8_tbm_mt" : "gemv_i8_tbm";
}


/* 16-row tiles the CTAs share out (paired: of the gate half, each with its up tile) */
constexpr int64_t tbm_tiles(int mode, int64_t rows) { return tbm_paired(mode) ? rows / 32 : (rows + 15) / 16; }

/* largest K slice (blocks) for variant digit b */
constexpr int kSliceMax[10] = {18, 4, 8, 12, 16, 18, 24, 32, 48, 64};

/* The K split and grid of the bulk-copy kernel: every split from the one the
 * largest slice (kmax blocks) gives to four times as many, each with the CTAs
 * that fit one wave (occupancy under its shared memory, at most cap per SM);
 * taken: the least bytes on the busiest SM (its CTAs x the largest CTA's
 * tiles x blocks per slice), a larger split only where that is > 1 % less
 * (each split adds partial sums and a counter per CTA range), and none that
 * leaves a consumer warp fewer than 4 blocks of a unit's K slice (its barrier
 * and epilogue per unit then outweigh its MMAs: 22016 x 4096 with two warps
 * per tile in 4 slices of 4 blocks took 19.4 us, in one slice 9.4; 4608 x
 * 36864, 29 slices of 5 blocks, 26.0 against 15.9 in 8 of 18) unless no
 * other split fits (a second pass). */
struct TbPlan {
    int dev, rt, kh, kmax, st, cap, sms, scaled, mode; /* the key (scaled: one scale per row) */
    int rs; /* (key) a K split takes the tbm_row_add kernel (tbm_rs, not left to the reader) */
    int64_t rows, kblocks;
    int64_t s, gx; /* the plan */
    int ks, stride, sc;
    int use_rs; /* a split launches the tbm_row_add kernel (as many CTAs an SM as the other) */
    size_t smem;
};

template <int RT, int KH, int MODE>
int plan_tbm(TbPlan &pl) {
    auto kern = tbm_kernel<RT, KH, MODE>(), kern_rs = tbm_kernel<RT, KH, MODE>(pl.rs != 0);
    constexpr bool paired = tbm_paired(MODE);
    constexpr int threads = 32 * (RT * KH + 1);
    /* dynamic shared memory: the opt-in limit less the kernel's static part */
    cudaFuncAttributes fa;
    int optin = 0;
    CUDA_CHECK(cudaFuncGetAttributes(&fa, kern));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, pl.dev));
    const size_t dyn_max = (size_t)optin > fa.sharedSizeBytes ? (size_t)optin - fa.sharedSizeBytes : 0;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn_max));
    if (kern_rs != kern) { /* (the same static shared memory) */
        CUDA_CHECK(cudaFuncGetAttributes(&fa, kern_rs));
        if (fa.sharedSizeBytes + dyn_max > (size_t)optin)
            return err_set("bulk-copy GEMV: its split-K form has more static shared memory");
        CUDA_CHECK(cudaFuncSetAttribute(kern_rs, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn_max));
    }
    const int64_t tiles = tbm_tiles(MODE, pl.rows), s0 = (pl.kblocks + pl.kmax - 1) / pl.kmax;
    int64_t best_cost = -1;
    /* pass 1 with the rule below; pass 2 without, where no slice the rule lets
     * through fits (the multi-token kernel's x takes up to 75 KB: 16 tokens x
     * 18 blocks beside 4 stages left no unsplit plan for 520 x 9000) */
    for (int pass = 1; pass <= 2 && best_cost < 0; pass++) {
        for (int64_t S = s0; S <= 4 * s0 && S <= pl.kblocks; S++) {
            const int ks = (int)((pl.kblocks + S - 1) / S);
            if ((pl.kblocks + ks - 1) / ks != S) continue; /* the same slices as a smaller S */
            if (pass == 1 && S > s0 && ks < 4 * KH) continue; /* too little K per consumer warp */
            int stride = ks * 64;
            if (stride % 128 == 0) stride += 64;
            size_t smem = tbm_x_bytes(MODE, ks) + (size_t)pl.st * 16 * RT * stride;
            if (smem > dyn_max || S > 65535) continue;
            /* the plan from the counter kernel's occupancy; a split takes the
             * tbm_row_add kernel (more registers) only where as many CTAs fit:
             * planned with its own occupancy, 14336 x 4096 went from one slice to
             * two and 6.8 -> 7.9 us (H200) */
            int occ = 0, occ_rs = 0;
            CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, threads, smem));
            if (S > 1 && kern_rs != kern)
                CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_rs, kern_rs, threads, smem));
            if (pl.cap > 0 && occ > pl.cap) occ = pl.cap;
            if (pl.cap > 0 && occ_rs > pl.cap) occ_rs = pl.cap;
            if (occ < 1) continue;
            bool rs_ok = S > 1 && kern_rs != kern && occ_rs >= occ;
            /* one wave: a CTA left over for a second wave would double the time */
            int64_t gx = (int64_t)pl.sms * occ / S;
            if (gx < 1) gx = 1;
            if (gx > tiles) gx = tiles;
            /* the CTA's row scales in shared memory where they fit beside the same occupancy */
            int sc = 0;
            if (pl.scaled) {
                const int64_t need = (paired ? 32 : 16) * ((tiles + gx - 1) / gx);
                int occ2 = 0;
                if (need <= 16384)
                    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ2, kern, threads,
                                                                             smem + tbm_scale_bytes((int)need)));
                if (pl.cap > 0 && occ2 > pl.cap) occ2 = pl.cap;
                if (occ2 == occ && smem + tbm_scale_bytes((int)need) <= dyn_max) {
                    sc = (int)need;
                    smem += tbm_scale_bytes(sc);
                    if (rs_ok) {
                        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_rs, kern_rs, threads, smem));
                        rs_ok = (pl.cap > 0 && occ_rs > pl.cap ? pl.cap : occ_rs) >= occ;
                    }
                }
            }
            const int64_t busiest = (gx * S + pl.sms - 1) / pl.sms;
            const int64_t cost = busiest * ((tiles + gx - 1) / gx) * ks;
            if (best_cost < 0 || cost * 100 < best_cost * 99) {
                best_cost = cost;
                pl.s = S, pl.gx = gx, pl.ks = ks, pl.stride = stride, pl.sc = sc, pl.smem = smem;
                pl.use_rs = rs_ok;
            }
        }
    }
    if (best_cost < 0)
        return err_set("bulk-copy GEMV: no K slice of %d..%d blocks fits an SM with %d stages of %d rows",
                       (int)((pl.kblocks + 4 * s0 - 1) / (4 * s0)), pl.kmax, pl.st, 16 * RT);
    return 0;
}

/* The last bulk-copy launch's grid on this thread (CTAs per K slice, K slices) */
thread_local int g_tbm_grid[2];
/* whether it split K through tbm_row_add (the config's " rowsum") */
thread_local bool g_tbm_rs;

/* Plans made, per device and shape (the planner's occupancy queries cost more
 * host time than the kernel takes, for every call outside a CUDA graph). */
std::mutex g_tb_mu;
std::vector<TbPlan> g_tb_plans;

template <int RT, int KH, int MODE>
int launch_tbm(TbArgs &q, int kmax, int cap, int sms, cudaStream_t s) {
    BmArgs &a = q.b;
    TbPlan pl = {};
    CUDA_CHECK(cudaGetDevice(&pl.dev));
    pl.rt = RT, pl.kh = KH, pl.kmax = kmax, pl.st = q.st, pl.cap = cap, pl.sms = sms;
    pl.scaled = a.scale_stride != 0;
    pl.mode = MODE;
    pl.rows = a.rows, pl.kblocks = a.kblocks;
    /* (where the reader may take the split: the f32-input form's condition below) */
    const bool defer_ok = a.def && MODE == TBM_F32X && a.rows % 64 == 0 && a.rows <= 16384;
    pl.rs = tbm_rs(MODE) && !defer_ok;
    {
        std::lock_guard<std::mutex> lk(g_tb_mu);
        bool hit = false;
        for (const TbPlan &c : g_tb_plans)
            if (c.dev == pl.dev && c.rt == RT && c.kh == KH && c.kmax == kmax && c.st == q.st && c.cap == cap &&
                c.sms == sms && c.scaled == pl.scaled && c.mode == MODE && c.rs == pl.rs && c.rows == a.rows &&
                c.kblocks == a.kblocks) {
                pl = c;
                hit = true;
                break;
            }
        if (!hit) {
            if (plan_tbm<RT, KH, MODE>(pl) < 0) return -1;
            g_tb_plans.push_back(pl);
        }
    }
    q.tiles = tbm_tiles(MODE, a.rows);
    a.ks = pl.ks;
    q.stride = pl.stride;
    q.sc_rows = pl.sc;
    if (a.def) { /* the f32-input kernel's K split left to the reader, where fwdc_norm_deferred takes it:
                  * part 16-byte aligned (tiles % 4 == 0: rows % 64 == 0), <= 16384 rows */
        q.defer = defer_ok && pl.s > 1;
        *a.def = {};
        if (q.defer) a.def->scales = a.scales, a.def->scale_stride = a.scale_stride, a.def->rows = a.rows,
                     a.def->xmax = a.xmax;
    }
    if (pl.s > 1 && tbm_bf(MODE)) { /* float sums of each slice and token, counters zeroed */
        if (tern_mm::scratch(pl.s * q.ntok * a.rows, q.tiles, &q.fpart, &a.ctr) < 0) return -1;
    } else if (pl.s > 1 && pl.use_rs) { /* tbm_row_add's words */
        void *ws;
        if (tern_ws_zeroed((size_t)a.rows * sizeof(unsigned long long), &ws) < 0) return -1;
        q.rsum = static_cast<unsigned long long *>(ws);
    } else if (pl.s > 1) {
        void *ws;
        const int64_t per_row = tbm_mt(MODE) ? q.ntok : 1; /* partials of each token */
        if (tern_ws_zeroed((size_t)(q.tiles + a.rows * per_row) * sizeof(int), &ws) < 0) return -1;
        a.ctr = static_cast<int *>(ws);
        a.part = a.ctr + q.tiles;
        if (q.defer) a.def->part = a.part;
    }
    q.l2ef = tern_cuda_l2ef_get();
    g_tbm_grid[0] = (int)pl.gx, g_tbm_grid[1] = (int)pl.s;
    g_tbm_rs = pl.s > 1 && pl.use_rs;
    return tern_launch_pdl_smem(tbm_name(MODE), tbm_kernel<RT, KH, MODE>(pl.s > 1 && pl.use_rs),
                                dim3((unsigned)pl.gx, (unsigned)pl.s),
                                dim3(32 * (RT * KH + 1)), pl.smem, s, q);
}

/* variant 6abcd (bench sweeps, the dispatch): the bulk-copy kernel with a = row
 * tiles (consumer warps) per unit (2 or 4; 3 or 6: 2 or 4 with two consumer
 * warps per tile, each a K part; 5 or 8: with four — the f32-input form's
 * default 65520, and the multi-token kernel's), b = largest K slice
 * (kSliceMax), c = stages (2..8), d = CTAs per SM at most (0: as many as fit) */
} // namespace

bool tern_tbm_variant_ok(int variant) {
    const int rt = variant / 1000 % 10, st = variant / 10 % 10;
    return variant >= 60000 && variant < 70000 && rt >= 2 && rt <= 8 && rt != 7 && st >= 2 && st <= 8;
}

namespace {

template <int MODE>
int launch_variant(TbArgs &q, int variant, int sms, cudaStream_t s, const char *who) {
    const int rt = variant / 1000 % 10, b = variant / 100 % 10, cap = variant % 10;
    q.st = variant / 10 % 10;
    if (variant < 60000 || variant >= 70000) return err_set("%s: variant %d (6abcd only)", who, variant);
    if (!tern_tbm_variant_ok(variant)) {
        if (q.st < 2 || q.st > 8) return err_set("%s: variant %d: %d stages (2..8)", who, variant, q.st);
        return err_set("%s: variant %d: %d row tiles per unit (2 or 4; 3 / 6: 2 / 4 with two K parts; 5 / 8: with four)",
                       who, variant, rt);
    }
    if (rt == 2) return launch_tbm<2, 1, MODE>(q, kSliceMax[b], cap, sms, s);
    if (rt == 4) return launch_tbm<4, 1, MODE>(q, kSliceMax[b], cap, sms, s);
    if (rt == 3) return launch_tbm<2, 2, MODE>(q, kSliceMax[b], cap, sms, s);
    if (rt == 6) return launch_tbm<4, 2, MODE>(q, kSliceMax[b], cap, sms, s);
    if (rt == 5) return launch_tbm<2, 4, MODE>(q, kSliceMax[b], cap, sms, s);
    if (rt == 8) return launch_tbm<4, 4, MODE>(q, kSliceMax[b], cap, sms, s);
    return err_set("%s: variant %d: %d row tiles per unit", who, variant, rt); /* (not reached) */
}

/* The one-token GEMV of a (x or xf) with variant 0 (the register-fed kernel),
 * 5UC00 or 6abcd (the bulk-copy kernel) */
int bmma_call(BmArgs &a, int variant, int sms, cudaStream_t s, const char *who) {
    if (variant >= 60000 && variant < 70000) {
        TbArgs q = {};
        q.b = a;
        return a.xf ? launch_variant<TBM_F32X>(q, variant, sms, s, who) : launch_variant<TBM_I8>(q, variant, sms, s, who);
    }
    /* variant 5UC00 (bench sweeps): U blocks in flight per warp (1, 2, 4), C = CTAs per SM
     * the K split aims at (1..9) */
    int u = 2, per_sm = 4;
    if (variant >= 50000 && variant < 60000) {
        u = variant / 1000 % 10;
        per_sm = variant / 100 % 10;
    } else if (variant != 0) {
        return err_set("%s: unknown variant %d", who, variant);
    }
    if (per_sm < 1) return err_set("%s: variant %d: no CTAs", who, variant);
    if (u == 1) return a.xf ? launch_bmma<1, true>(a, per_sm, sms, s) : launch_bmma<1, false>(a, per_sm, sms, s);
    if (u == 2) return a.xf ? launch_bmma<2, true>(a, per_sm, sms, s) : launch_bmma<2, false>(a, per_sm, sms, s);
    if (u == 4) return a.xf ? launch_bmma<4, true>(a, per_sm, sms, s) : launch_bmma<4, false>(a, per_sm, sms, s);
    return err_set("%s: variant %d: %d blocks in flight (1, 2 or 4)", who, variant, u);
}

/* The one-token GEMVs' common start: the checks (tern_gemv1_prepare; x the
 * activations as given, int8 or f32) and a's matrix, activation and output
 * fields; the SM count into *sms. */
int bm_args(const char *who, const TernCudaMatrix *W, const void *x, int64_t xcols, const float *d_sx, float *d_y,
            BmArgs &a, int *sms) {
    if (tern_gemv1_prepare(who, W, static_cast<const int8_t *>(x), xcols, 4194304, sms) < 0) return -1;
    tern_gemv1_fill(a, W, static_cast<const int8_t *>(x), d_sx, d_y);
    a.kblocks = W->row_bytes / 64;
    a.xcols = xcols;
    return 0;
}

} // namespace

namespace {
/* " rowsum" after the config where the last bulk-copy launch split K through tbm_row_add */
void tbm_config_rowsum() {
    if (!g_tbm_rs) return;
    char cfg[128];
    snprintf(cfg, sizeof cfg, "%s rowsum", tern_cuda_last_config());
    tern_cuda_set_config(cfg);
}
} // namespace

/* |sum c x| <= 2 * 128 * cols fits int32 for cols <= 4194304 */
int tern_gemv_i8_bmma(const TernCudaMatrix *W, const int8_t *d_x, int64_t xcols, const float *d_sx,
                      float *d_y, int variant, cudaStream_t s) {
    int sms = 0;
    BmArgs a = {};
    if (bm_args("tern_gemv_i8_bmma", W, d_x, xcols, d_sx, d_y, a, &sms) < 0) return -1;
    /* the SMs left to the kernel before (tern_cuda_tbm_reserve) */
    const int res = std::min(tern_cuda_tbm_reserve_get(), sms - 1);
    g_tbm_grid[0] = 0;
    g_tbm_rs = false;
    if (bmma_call(a, variant, sms - res, s, "tern_gemv_i8_bmma") < 0) return -1;
    if (res > 0 && g_tbm_grid[0] > 0) {
        char cfg[96];
        snprintf(cfg, sizeof cfg, "%s res=%d grid=%dx%d", tern_cuda_last_config(), res, g_tbm_grid[0],
                 g_tbm_grid[1]);
        tern_cuda_set_config(cfg);
    }
    tbm_config_rowsum();
    return 0;
}

int tern_gemv_i8_bmma_f32x(const TernCudaMatrix *W, const float *d_x, const unsigned *d_xmax, float *d_y,
                           int variant, cudaStream_t s, TernDeferred *def) {
    if (!d_x || !d_xmax || !d_y) return err_set("tern_gemv_i8_bmma_f32x: NULL argument");
    int sms = 0;
    BmArgs a = {};
    if (bm_args("tern_gemv_i8_bmma_f32x", W, d_x, W->cols, nullptr, d_y, a, &sms) < 0) return -1;
    a.x = nullptr; /* f32 activations instead */
    a.xf = d_x;
    a.xmax = d_xmax;
    a.def = def;
    if (def) *def = {}; /* finished here unless the bulk-copy kernel's split says otherwise */
    g_tbm_rs = false;
    if (bmma_call(a, variant, sms, s, "tern_gemv_i8_bmma_f32x") < 0) return -1;
    tbm_config_rowsum();
    return 0;
}

int tern_gemv_i8_glu(const TernCudaMatrix *W, const int8_t *d_x, int64_t xcols, const float *d_sx, int act,
                     float *d_h, unsigned *d_hmax, int variant, cudaStream_t s) {
    if (!d_h || !d_hmax) return err_set("tern_gemv_i8_glu: NULL output");
    int sms = 0;
    TbArgs q = {};
    if (bm_args("tern_gemv_i8_glu", W, d_x, xcols, d_sx, nullptr, q.b, &sms) < 0) return -1;
    if (W->rows % 32 != 0)
        return err_set("tern_gemv_i8_glu: %lld rows: gate and up halves of whole 16-row tiles needed",
                       (long long)W->rows);
    q.half = W->rows / 2;
    q.act = act;
    q.h = d_h;
    q.hmax = d_hmax;
    return launch_variant<TBM_GLU>(q, variant, sms, s, "tern_gemv_i8_glu");
}

int tern_gemv_i8_glu_norm(const TernCudaMatrix *W, const TernNormIn *ni, int act, float *d_h, unsigned *d_hmax,
                          int variant, cudaStream_t s) {
    const char *who = "tern_gemv_i8_glu_norm";
    if (!d_h || !d_hmax || !ni || !ni->x || !ni->w || !ni->amax || !ni->ss) return err_set("%s: NULL argument", who);
    if (ni->n_ss < 1 || ni->n_ss > TERN_NORM_SLOTS)
        return err_set("%s: %d norm slots (1 .. %d)", who, ni->n_ss, TERN_NORM_SLOTS);
    if (((uintptr_t)ni->x & 15) != 0 || ((uintptr_t)ni->w & 15) != 0)
        return err_set("%s: x and w must be 16-byte aligned", who);
    int sms = 0;
    TbArgs q = {};
    if (bm_args(who, W, ni->x, W->cols, nullptr, nullptr, q.b, &sms) < 0) return -1;
    if (W->rows % 32 != 0)
        return err_set("%s: %lld rows: gate and up halves of whole 16-row tiles needed", who, (long long)W->rows);
    q.b.x = nullptr; /* f32 activations instead */
    q.b.xf = ni->x;
    q.b.xmax = ni->amax;
    q.b.xw = ni->w;
    q.b.nss = ni->ss;
    q.b.n_ss = ni->n_ss;
    q.b.eps = ni->eps;
    q.half = W->rows / 2;
    q.act = act;
    q.h = d_h;
    q.hmax = d_hmax;
    return launch_variant<TBM_GLU_N>(q, variant, sms, s, who);
}

/* 1 .. 16 tokens (x rows ldx apart), the bulk-copy kernel on the int8 tensor
 * cores (gemv_i8_tbm_mt), variant 6abcd as the one-token kernel's */
int tern_gemv_i8_mt(const TernCudaMatrix *W, const int8_t *d_x, int64_t ldx, const float *d_sx, int64_t n,
                    float *d_y, int variant, cudaStream_t s) {
    const char *who = "tern_gemv_i8_mt";
    if (n < 1 || n > 16) return err_set("%s: %lld tokens (1 .. 16)", who, (long long)n);
    int sms = 0;
    TbArgs q = {};
    if (bm_args(who, W, d_x, ldx, d_sx, d_y, q.b, &sms) < 0) return -1;
    q.ntok = (int)n; /* (x rows ldx = q.b.xcols apart) */
    return n <= 8 ? launch_variant<TBM_MT8>(q, variant, sms, s, who) : launch_variant<TBM_MT16>(q, variant, sms, s, who);
}

/* The multi-token kernel's GLU form (1 .. 8 tokens): over W's gate | up
 * halves (int8 x rows ldx apart, h token n's half values at d_h + n half, its
 * max|h| raised into d_hmax[n]) */
int tern_gemv_i8_glu_mt(const TernCudaMatrix *W, const int8_t *d_x, int64_t ldx, const float *d_sx, int64_t n,
                        int act, float *d_h, unsigned *d_hmax, int variant, cudaStream_t s) {
    const char *who = "tern_gemv_i8_glu_mt";
    if (n < 1 || n > 8) return err_set("%s: %lld tokens (1 .. 8)", who, (long long)n);
    if (!d_x || !d_sx || !d_h || !d_hmax) return err_set("%s: NULL argument", who);
    int sms = 0;
    TbArgs q = {};
    if (bm_args(who, W, d_x, ldx, d_sx, nullptr, q.b, &sms) < 0) return -1;
    if (W->rows % 32 != 0)
        return err_set("%s: %lld rows: gate and up halves of whole 16-row tiles needed", who, (long long)W->rows);
    q.ntok = (int)n;
    q.half = W->rows / 2;
    q.act = act;
    q.h = d_h;
    q.hmax = d_hmax;
    return launch_variant<TBM_MTG8>(q, variant, sms, s, who);
}

/* 1 .. 16 tokens of bf16 activations (rows ldx apart), the bulk-copy kernel
 * on the bf16 tensor cores (gemv_bf16_tbm), variant 6abcd as the int8 kernels' */
int tern_gemv_bf16_mt(const TernCudaMatrix *W, const uint16_t *d_x, int64_t ldx, int64_t n, float *d_y, int variant,
                      cudaStream_t s) {
    const char *who = "tern_gemv_bf16_mt";
    if (n < 1 || n > 16) return err_set("%s: %lld tokens (1 .. 16)", who, (long long)n);
    if (!d_x || !d_y) return err_set("%s: NULL activations or output", who);
    int sms = 0;
    if (tern_gemv1_prepare(who, W, d_x, ldx, INT64_MAX, &sms, 8) < 0) return -1;
    TbArgs q = {};
    tern_args_matrix(q.b, W);
    q.b.y = d_y;
    q.b.kblocks = W->row_bytes / 64;
    q.b.xcols = ldx;
    q.xh = d_x;
    q.ntok = (int)n;
    if (n == 1) return launch_variant<TBM_BF1>(q, variant, sms, s, who);
    return n <= 8 ? launch_variant<TBM_BF8>(q, variant, sms, s, who) : launch_variant<TBM_BF16>(q, variant, sms, s, who);
}
