/* dev/tern_gemv_i8_mma.cu — an experiment, not built (see NOTES.md): int8
 * decode GEMVs on the s8 tensor cores with the codes loaded straight into
 * registers (gemv_i8_reg: shift + AND decode, sum(x) by a second MMA with
 * A = ones, register double buffering) and gemv_i8_reg2 (fields used in place
 * with one AND per 4 weights and per-field accumulators, codes through a
 * cp.async ring).  Bit-identical to tern_matmul_i8_ref (tests/gpu at the
 * time: 2560 cases), but at n = 1 slower than the dp4a kernels and at n = 8
 * / 16 mixed against the tern_mm GEMV (H200, same run, us):
 *   n = 1   36864x4608: reg 30.5, reg2 26.8, dp4a rows 17.1
 *   n = 16  14336x4096: mm 25.6, reg 21.1, reg2 (MT 1, 2 stages) 17.1
 *   n = 16  36864x4608: mm 37.9, reg 39.0, reg2 33.9
 *   n = 8   36864x4608: mm 29.7, reg 36.7, reg2 33.8
 * The MMA pipe (m16n8k32 with 7 of 8 token columns empty at n = 1, plus the
 * ones-MMA) and the register pressure of the fragments are the likely limits. */
/* tern_gemv_reg.cu — decode GEMV for int8 activations (n <= 16 tokens, one
 * scale per row): codes loaded straight into registers, decoded to unsigned
 * bytes with one shift + AND per 4 weights and multiplied on the s8 tensor
 * cores (mma m16n8k32 u8 x s8 -> s32).  No shared memory, no barriers: the
 * weight stream is the whole cost, so each warp issues the 16-byte loads of
 * U blocks x (rows g, g+8) before any arithmetic.
 *
 * Layout (ternary_format.h): byte j, field i of a 64-byte block holds column
 * 64i + j.  Thread (g, t) of a warp (lane = 4g + t) loads bytes 16t..16t+15 of
 * a block of rows g and g+8 (MT m-tiles of 16 rows).  The MMA's k order is
 * free as long as A and B agree, so step (i, h) takes as A the words 2h and
 * 2h+1 of that chunk at field i: columns 64i + 16t + 8h + {0..3} and
 * {4..7} — and as B the 8 activation bytes x[64i + 16t + 8h .. +7] of token
 * g (one 16-byte load per field covers both h).
 *
 * Codes are c = q + 1 in {0, 1, 2}: D = sum c*x - sum x, both exact in int32;
 * sum x comes from a second MMA with A = all ones (the tensor pipe is idle;
 * this costs no ALU op per weight).  y = s_r * (float)D / sx, the formula of
 * tern_matmul_i8_ref, so results equal the CPU twin bit for bit.
 *
 * Split-K: the k blocks are cut into S slices so that the grid has ~WT warps
 * per SM; each warp adds its exact int32 partials to a zeroed scratch with
 * atomicAdd (order-free: integer sums), the last warp of a row tile (a
 * per-tile counter) takes the sums with atomicExch(…, 0), writes y and resets
 * the counter — the scratch is left zero for the next call, and the result
 * does not depend on the order in which slices finish.
 *
 * Versions: dev/tern_gemv_i8_v2.cu .. v5 and v3 (tern_gemv_i8.cu, dp4a, one
 * warp per row) — measurements in dev/NOTES.md. */
#include <cuda_runtime.h>

#include <stdint.h>

#include "cuda/cuda_util.h"
#include "cuda/tern_cuda.h"
#include "cuda/tern_mma.cuh"

namespace {

struct RegArgs {
    const uint8_t *codes;
    const float *scales;
    int64_t scale_stride, rows, row_bytes, kblocks;
    int64_t cols; /* columns of x that may be read (zeros past the matrix's) */
    const int8_t *x;
    int64_t ldx;
    const float *sx;
    int n;
    int64_t bps; /* k blocks per slice */
    int *part;   /* (n, rows) int32, zero on entry and exit */
    int *ctr;    /* per row tile, zero on entry and exit */
    float *y;
};

__device__ __forceinline__ uint4 ld_codes(const uint8_t *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ void mma_u8s8(int c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t word(const uint4 &v, int k) {
    return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

template <int U, int MT>
__device__ __forceinline__ void load_batch(uint4 (&w)[U][MT][2], const uint8_t *const (&rp)[MT][2],
                                           int64_t kb, int64_t kb1) {
#pragma unroll
    for (int u = 0; u < U; u++)
        if (kb + u < kb1)
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) w[u][m][hh] = ld_codes(rp[m][hh] + (kb + u) * 64);
}

__device__ __forceinline__ void cp_async16(void *smem, const void *g) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(g));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

/* NT 8-token tiles, MT 16-row tiles per warp, U blocks per load batch.
 * griddepcontrol (programmatic dependent launch) is a no-op unless the
 * kernel is launched with that attribute (tern_cuda_pdl). */
template <int NT, int MT, int U>
__global__ void __launch_bounds__(128) gemv_i8_reg(RegArgs p) {
    /* let the next kernel's blocks start (they wait for this grid before
     * reading anything it writes) */
    asm volatile("griddepcontrol.launch_dependents;");
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t tile = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    const int64_t r0 = tile * 16 * MT;
    if (r0 >= p.rows) return; /* warp-uniform: the whole tile is past the end */
    const int64_t kb0 = (int64_t)blockIdx.y * p.bps;
    const int64_t kb1 = kb0 + p.bps < p.kblocks ? kb0 + p.bps : p.kblocks;

    const uint8_t *rp[MT][2];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            int64_t r = r0 + 16 * m + 8 * hh + g;
            if (r >= p.rows) r = p.rows - 1; /* read a valid row, never stored */
            rp[m][hh] = p.codes + r * p.row_bytes + 16 * t;
        }
    const int8_t *xp[NT];
    bool xok[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int tok = 8 * j + g;
        xok[j] = tok < p.n;
        xp[j] = p.x + (int64_t)(xok[j] ? tok : 0) * p.ldx + 16 * t;
    }

    int acc[MT][NT][4], ones[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) ones[j][e] = 0;
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[m][j][e] = 0;
    }

    /* double-buffered batches of U blocks: the next batch's loads are in flight
     * while the current one is multiplied */
    uint4 w[U][MT][2], wn[U][MT][2];
    load_batch<U, MT>(w, rp, kb0, kb1);
    /* programmatic dependent launch: the codes do not depend on the previous
     * kernel, the activations (and the scratch, and y) do */
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int64_t kb = kb0; kb < kb1; kb += U) {
        if (kb + U < kb1) load_batch<U, MT>(wn, rp, kb + U, kb1);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (kb + u >= kb1) break;
            const int64_t c0 = (kb + u) * 256; /* + 64i + 16t: the thread's 16 columns */
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint4 xv[NT];
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    /* cols % 16 == 0: a 16-column run is all in or all out */
                    if (xok[j] && c0 + 64 * i + 16 * t < p.cols)
                        xv[j] = __ldg(reinterpret_cast<const uint4 *>(xp[j] + c0 + 64 * i));
                    else
                        xv[j] = make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int h = 0; h < 2; h++) {
#pragma unroll
                    for (int j = 0; j < NT; j++)
                        mma_u8s8(ones[j], 0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u,
                                 word(xv[j], 2 * h), word(xv[j], 2 * h + 1));
#pragma unroll
                    for (int m = 0; m < MT; m++) {
                        const uint32_t a0 = (word(w[u][m][0], 2 * h) >> (2 * i)) & 0x03030303u;
                        const uint32_t a1 = (word(w[u][m][1], 2 * h) >> (2 * i)) & 0x03030303u;
                        const uint32_t a2 = (word(w[u][m][0], 2 * h + 1) >> (2 * i)) & 0x03030303u;
                        const uint32_t a3 = (word(w[u][m][1], 2 * h + 1) >> (2 * i)) & 0x03030303u;
#pragma unroll
                        for (int j = 0; j < NT; j++)
                            mma_u8s8(acc[m][j], a0, a1, a2, a3, word(xv[j], 2 * h),
                                     word(xv[j], 2 * h + 1));
                    }
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int m = 0; m < MT; m++) {
                w[u][m][0] = wn[u][m][0];
                w[u][m][1] = wn[u][m][1];
            }
    }

    /* c[e]: row 16m + g + 8(e >> 1), token 8j + 2t + (e & 1) */
    const bool split = gridDim.y > 1;
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t r = r0 + 16 * m + g + 8 * (e >> 1);
                const int tok = 8 * j + 2 * t + (e & 1);
                if (r >= p.rows || tok >= p.n) continue;
                const int d = acc[m][j][e] - ones[j][e];
                if (split) {
                    atomicAdd(&p.part[(int64_t)tok * p.rows + r], d);
                } else {
                    const float a = __fmul_rn(p.scales[r * p.scale_stride], (float)d);
                    p.y[(int64_t)tok * p.rows + r] = __fdiv_rn(a, p.sx[tok]);
                }
            }
    if (!split) return;
    __threadfence();
    __syncwarp();
    int last = 0;
    if (lane == 0) last = atomicAdd(&p.ctr[tile], 1) == (int)gridDim.y - 1;
    last = __shfl_sync(0xffffffffu, last, 0);
    if (!last) return;
    __threadfence();
    /* the last slice of this tile: every partial has reached L2 */
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t r = r0 + 16 * m + g + 8 * (e >> 1);
                const int tok = 8 * j + 2 * t + (e & 1);
                if (r >= p.rows || tok >= p.n) continue;
                const int d = atomicExch(&p.part[(int64_t)tok * p.rows + r], 0);
                const float a = __fmul_rn(p.scales[r * p.scale_stride], (float)d);
                p.y[(int64_t)tok * p.rows + r] = __fdiv_rn(a, p.sx[tok]);
            }
    if (lane == 0) atomicExch(&p.ctr[tile], 0);
}

template <int NT, int MT, int U>
int launch(RegArgs &a, int sms, int wt, cudaStream_t s) {
    const int64_t tiles = (a.rows + 16 * MT - 1) / (16 * MT);
    /* slices: ~wt warps per SM, at least U blocks per slice */
    int64_t S = ((int64_t)sms * wt + tiles - 1) / tiles;
    const int64_t smax = (a.kblocks + U - 1) / U;
    if (S > smax) S = smax;
    if (S < 1) S = 1;
    a.bps = (a.kblocks + S - 1) / S;
    S = (a.kblocks + a.bps - 1) / a.bps;
    if (S > 65535) return err_set("tern_gemv_i8_reg: %lld k slices", (long long)S);
    if (S > 1) {
        void *ws;
        const size_t need = (size_t)(tiles + (int64_t)a.n * a.rows) * sizeof(int);
        if (tern_ws_zeroed(need, &ws) < 0) return -1;
        a.ctr = static_cast<int *>(ws);
        a.part = a.ctr + tiles;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)((tiles + 3) / 4), (unsigned)S);
    cfg.blockDim = dim3(128);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = tern_cuda_pdl_get() ? 1 : 0;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, gemv_i8_reg<NT, MT, U>, a));
    return 0;
}

template <int NT>
int by_shape(RegArgs &a, int sms, int variant, cudaStream_t s) {
    /* variant 1MUW (bench sweeps): M = rows tiles of 16 per warp, U = blocks per
     * load batch, W = warps per SM / 8; 0 = the default */
    int mt = 1, u = 4, wt = 32;
    if (variant >= 1000 && variant < 2000) {
        mt = variant / 100 % 10;
        u = variant / 10 % 10;
        wt = 8 * (variant % 10);
    } else if (variant != 0) {
        return err_set("tern_gemv_i8_reg: unknown variant %d", variant);
    }
    if (wt < 8) return err_set("tern_gemv_i8_reg: variant %d: no warps", variant);
    if (mt == 1 && u == 2) return launch<NT, 1, 2>(a, sms, wt, s);
    if (mt == 1 && u == 4) return launch<NT, 1, 4>(a, sms, wt, s);
    if (mt == 2 && u == 2) return launch<NT, 2, 2>(a, sms, wt, s);
    return err_set("tern_gemv_i8_reg: variant %d (tiles %d, batch %d) not built", variant, mt, u);
}

} // namespace

int tern_gemv_i8_reg2_dispatch(RegArgs &a, int sms, int variant, cudaStream_t s);

int tern_gemv_i8_reg(const TernCudaMatrix *W, const int8_t *d_x, int64_t ldx, int64_t xcols,
                     const float *d_sx, int64_t n, float *d_y, int variant, cudaStream_t s) {
    if (W->n_groups != 1)
        return err_set("tern_gemv_i8_reg: %lld scale groups per row (one scale per row only)",
                       (long long)W->n_groups);
    if (n < 1 || n > 16) return err_set("tern_gemv_i8_reg: n = %lld outside 1..16", (long long)n);
    if (ldx % 16 != 0 || xcols % 16 != 0 || xcols < W->cols || ldx < xcols ||
        ((uintptr_t)d_x & 15) != 0)
        return err_set("tern_gemv_i8_reg: activations must be 16-byte aligned rows of a "
                       "multiple of 16 columns");
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    RegArgs a = {};
    a.codes = W->d_codes;
    a.scales = W->d_scales;
    a.scale_stride = W->scale_stride;
    a.rows = W->rows;
    a.row_bytes = W->row_bytes;
    a.kblocks = W->kblocks;
    a.cols = xcols;
    a.x = d_x;
    a.ldx = ldx;
    a.sx = d_sx;
    a.n = (int)n;
    a.y = d_y;
    if (variant >= 4000 && variant < 5000) return tern_gemv_i8_reg2_dispatch(a, sms, variant, s);
    return n <= 8 ? by_shape<1>(a, sms, variant, s) : by_shape<2>(a, sms, variant, s);
}

/* ======================================================================
 * gemv_i8_reg2: the tensor-core GEMV with one ALU op per 4 weights.  Field
 * i of a code word is used in place (w & (3 << 2i) per byte = 4^i c, still a
 * u8), multiplied into its own accumulator set, and the sets are recombined
 * exactly at the end (acc_i is a multiple of 4^i); codes stream through a
 * D-stage cp.async ring per thread (no registers held by loads in flight).
 * Thread/fragment mapping as gemv_i8_reg.
 * ====================================================================== */
namespace {

template <int NT, int MT, int D>
__global__ void __launch_bounds__(128) gemv_i8_reg2(RegArgs p) {
    asm volatile("griddepcontrol.launch_dependents;");
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t tile = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    const int64_t r0 = tile * 16 * MT;
    if (r0 >= p.rows) return;
    const int64_t kb0 = (int64_t)blockIdx.y * p.bps;
    const int64_t kb1 = kb0 + p.bps < p.kblocks ? kb0 + p.bps : p.kblocks;

    const uint8_t *rp[MT][2];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            int64_t r = r0 + 16 * m + 8 * hh + g;
            if (r >= p.rows) r = p.rows - 1;
            rp[m][hh] = p.codes + r * p.row_bytes + 16 * t;
        }
    const int8_t *xp[NT];
    bool xok[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int tok = 8 * j + g;
        xok[j] = tok < p.n;
        xp[j] = p.x + (int64_t)(xok[j] ? tok : 0) * p.ldx + 16 * t;
    }
    int acc[4][MT][NT][4], ones[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            ones[j][e] = 0;
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int m = 0; m < MT; m++) acc[i][m][j][e] = 0;
        }

    __shared__ uint4 ring[D][MT * 2][128];
#pragma unroll
    for (int st = 0; st < D - 1; st++) {
        if (kb0 + st < kb1)
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++)
                    cp_async16(&ring[st][2 * m + hh][threadIdx.x], rp[m][hh] + (kb0 + st) * 64);
        cp_commit();
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int64_t kb = kb0; kb < kb1; kb++) {
        const int k = (int)(kb - kb0);
        {
            const int64_t kn = kb + D - 1;
            const int st = (k + D - 1) % D;
            if (kn < kb1)
#pragma unroll
                for (int m = 0; m < MT; m++)
#pragma unroll
                    for (int hh = 0; hh < 2; hh++)
                        cp_async16(&ring[st][2 * m + hh][threadIdx.x], rp[m][hh] + kn * 64);
            cp_commit();
        }
        cp_wait<D - 1>();
        uint4 w[MT][2];
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) w[m][hh] = ring[k % D][2 * m + hh][threadIdx.x];
        const int64_t c0 = kb * 256;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint4 xv[NT];
#pragma unroll
            for (int j = 0; j < NT; j++) {
                if (xok[j] && c0 + 64 * i + 16 * t < p.cols)
                    xv[j] = __ldg(reinterpret_cast<const uint4 *>(xp[j] + c0 + 64 * i));
                else
                    xv[j] = make_uint4(0, 0, 0, 0);
            }
            const uint32_t msk = 0x03030303u << (2 * i);
#pragma unroll
            for (int h = 0; h < 2; h++) {
#pragma unroll
                for (int j = 0; j < NT; j++)
                    mma_u8s8(ones[j], 0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u,
                             word(xv[j], 2 * h), word(xv[j], 2 * h + 1));
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const uint32_t a0 = word(w[m][0], 2 * h) & msk;
                    const uint32_t a1 = word(w[m][1], 2 * h) & msk;
                    const uint32_t a2 = word(w[m][0], 2 * h + 1) & msk;
                    const uint32_t a3 = word(w[m][1], 2 * h + 1) & msk;
#pragma unroll
                    for (int j = 0; j < NT; j++)
                        mma_u8s8(acc[i][m][j], a0, a1, a2, a3, word(xv[j], 2 * h),
                                 word(xv[j], 2 * h + 1));
                }
            }
        }
    }

    const bool split = gridDim.y > 1;
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t r = r0 + 16 * m + g + 8 * (e >> 1);
                const int tok = 8 * j + 2 * t + (e & 1);
                if (r >= p.rows || tok >= p.n) continue;
                const int d = acc[0][m][j][e] + (acc[1][m][j][e] >> 2) + (acc[2][m][j][e] >> 4) +
                              (acc[3][m][j][e] >> 6) - ones[j][e];
                if (split) {
                    atomicAdd(&p.part[(int64_t)tok * p.rows + r], d);
                } else {
                    const float a = __fmul_rn(p.scales[r * p.scale_stride], (float)d);
                    p.y[(int64_t)tok * p.rows + r] = __fdiv_rn(a, p.sx[tok]);
                }
            }
    if (!split) return;
    __threadfence();
    __syncwarp();
    int last = 0;
    if (lane == 0) last = atomicAdd(&p.ctr[tile], 1) == (int)gridDim.y - 1;
    last = __shfl_sync(0xffffffffu, last, 0);
    if (!last) return;
    __threadfence();
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t r = r0 + 16 * m + g + 8 * (e >> 1);
                const int tok = 8 * j + 2 * t + (e & 1);
                if (r >= p.rows || tok >= p.n) continue;
                const int d = atomicExch(&p.part[(int64_t)tok * p.rows + r], 0);
                const float a = __fmul_rn(p.scales[r * p.scale_stride], (float)d);
                p.y[(int64_t)tok * p.rows + r] = __fdiv_rn(a, p.sx[tok]);
            }
    if (lane == 0) atomicExch(&p.ctr[tile], 0);
}

template <int NT, int MT, int D>
int launch2(RegArgs &a, int sms, int wt, cudaStream_t s) {
    const int64_t tiles = (a.rows + 16 * MT - 1) / (16 * MT);
    int64_t S = ((int64_t)sms * wt + tiles - 1) / tiles;
    const int64_t smax = (a.kblocks + 1) / 2; /* at least 2 blocks per slice */
    if (S > smax) S = smax;
    if (S < 1) S = 1;
    a.bps = (a.kblocks + S - 1) / S;
    S = (a.kblocks + a.bps - 1) / a.bps;
    if (S > 65535) return err_set("tern_gemv_i8_reg: %lld k slices", (long long)S);
    if (S > 1) {
        void *ws;
        const size_t need = (size_t)(tiles + (int64_t)a.n * a.rows) * sizeof(int);
        if (tern_ws_zeroed(need, &ws) < 0) return -1;
        a.ctr = static_cast<int *>(ws);
        a.part = a.ctr + tiles;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)((tiles + 3) / 4), (unsigned)S);
    cfg.blockDim = dim3(128);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = tern_cuda_pdl_get() ? 1 : 0;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, gemv_i8_reg2<NT, MT, D>, a));
    return 0;
}

template <int NT>
int by_shape2(RegArgs &a, int sms, int variant, cudaStream_t s) {
    /* variant 4MDW: M 16-row tiles per warp, D stages, W = warps per SM / 8 */
    int mt = 1, d = 4, wt = 32;
    if (variant >= 4000 && variant < 5000) {
        mt = variant / 100 % 10;
        d = variant / 10 % 10;
        wt = 8 * (variant % 10);
    }
    if (wt < 8) return err_set("tern_gemv_i8_reg: variant %d: no warps", variant);
    if (mt == 1 && d == 4) return launch2<NT, 1, 4>(a, sms, wt, s);
    if (mt == 1 && d == 6) return launch2<NT, 1, 6>(a, sms, wt, s);
    if (mt == 2 && d == 4) return launch2<NT, 2, 4>(a, sms, wt, s);
    if (mt == 2 && d == 3) return launch2<NT, 2, 3>(a, sms, wt, s);
    return err_set("tern_gemv_i8_reg: variant %d not built", variant);
}

} // namespace

int tern_gemv_i8_reg2_dispatch(RegArgs &a, int sms, int variant, cudaStream_t s) {
    return a.n <= 8 ? by_shape2<1>(a, sms, variant, s) : by_shape2<2>(a, sms, variant, s);
}
