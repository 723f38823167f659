/* dev/tern_gemv_tma.cu — NOT BUILT (kept for the record; it was
 * tern_cuda_force_kernel(6) for one run of measurements, fifth session).
 * The one-token decode GEMV for int8 activations and one scale per row, with
 * the weight stream on the bulk copy engine (TMA).
 *
 * Measured (H200, bench_gpu --sweep-decode, M = 1, best of 20 configurations
 * per shape; the dp4a row GEMV in brackets): 14336x4096 8.8 us (7.2),
 * 4096x14336 10.2 (9.4), 36864x4608 18.6 (16.9), 4608x36864 18.6 (20.4).
 * Nsight Compute (36864x4608): issue slots 45 % busy, one eligible warp per
 * scheduler, 2 CTAs of 9 warps per SM (shared memory), DRAM 37 %: the
 * consumers are latency-bound on the dp4a chains, and more stages only cost
 * CTAs.  Bit-identical to the reference on every tested shape and
 * configuration.  Superseded by tern_gemv_bmma.cu (no decoding at all).
 *
 * Why: the dp4a row GEMV (tern_gemv_rows.cu) reached 50-64 % of the copy
 * bandwidth while a read-only stream of the same codes reached 72-90 %
 * (dev/NOTES.md): its warps issue their own loads, so while they do the
 * integer work (one AND and one dp4a per 4 weights) fewer bytes are in
 * flight.  Here one producer warp per CTA keeps ST stages of codes in flight
 * with cp.async.bulk (contiguous bytes, mbarrier completion) and eight
 * consumer warps only compute, so the memory stream does not wait on the
 * arithmetic.
 *
 * Work: a unit is RG = 8 * RPW rows x one piece of their code row (the
 * whole row when it is at most PMAX bytes: then the RG rows are one
 * contiguous copy).  The grid is the resident CTAs (persistent); CTA b takes
 * units [U b / P, U (b + 1) / P), in row-group order (stream-K: no tail of
 * idle SMs).  Consumer warp w owns rows w * RPW .. + RPW - 1 of each unit and
 * its lanes the 16-byte chunks lane, lane + 32, ...; the activations are
 * staged once per CTA in shared memory, reordered per 2-bit field (field i
 * of chunk c pairs with x[256 (c / 4) + 16 (c % 4) + 64 i ..], stored at
 * xq[i][16 c ..]: lanes read consecutive 16 bytes, no bank conflicts), with
 * sum(x) per chunk precomputed.  Arithmetic as in tern_gemv_rows.cu: field i
 * used in place, dp4a(w & (3 << 2i) per byte, x) = 4^i sum c x, one
 * accumulator per field, D = sum_i acc_i / 4^i - sum x (exact), so y is
 * bit-identical to tern_matmul_i8_ref.  A row group split between two CTAs
 * adds its exact integer partials atomically; the CTA that completes the
 * group's pieces (a counter) writes y and resets the scratch. */
#include <cuda_runtime.h>

#include <stdint.h>

#include "cuda/cuda_util.h"
#include "cuda/tern_cuda.h"
#include "cuda/tern_mbar.cuh"
#include "cuda/tern_mma.cuh"

namespace {

constexpr int TMA_CW = 8; /* consumer warps; one more warp issues the copies */
constexpr int TMA_THREADS = 32 * (TMA_CW + 1);
constexpr int TMA_MAXST = 8;

struct TmaArgs {
    const uint8_t *codes;
    const float *scales;
    int64_t scale_stride, rows, row_bytes;
    int64_t xcols; /* readable columns of x (zeros past them) */
    const int8_t *x;
    const float *sx;
    float *y;
    int piece, np, st; /* code bytes per row and unit, pieces per row, stages */
    int64_t units;     /* row groups x pieces */
    int *part, *ctr;   /* split groups: partial sums per row, pieces done per group */
};

__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(32 * TMA_CW) : "memory");
}

template <int RPW>
__global__ void __launch_bounds__(TMA_THREADS) gemv_i8_tma(const TmaArgs p) {
    constexpr int RG = TMA_CW * RPW;
    extern __shared__ __align__(128) uint8_t sm[];
    __shared__ __align__(8) uint64_t s_full[TMA_MAXST], s_empty[TMA_MAXST];
    __shared__ int s_last;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int ST = p.st;
    const uint32_t stage_bytes = (uint32_t)(RG * p.piece);
    const uint32_t full_s = tern_mbar::saddr(s_full), empty_s = tern_mbar::saddr(s_empty);
    const int64_t P = gridDim.x;
    const int64_t u0 = p.units * blockIdx.x / P, u1 = p.units * (blockIdx.x + 1) / P;
    if (tid == 0) {
        for (int i = 0; i < ST; i++) {
            tern_mbar::init(full_s + 8 * i, 1);
            tern_mbar::init(empty_s + 8 * i, TMA_CW);
        }
        tern_mbar::init_fence();
    }
    __syncthreads();
    int64_t g = u0 / p.np; /* the current unit's row group and piece */
    int s = (int)(u0 % p.np);
    int slot = 0;
    uint32_t phase = 0;

    if (warp == TMA_CW) { /* producer: the codes do not depend on earlier kernels */
        const uint32_t stages_s = tern_mbar::saddr(sm);
        for (int64_t u = u0; u < u1; u++) {
            if (u >= u0 + ST && lane == 0) tern_mbar::wait(empty_s + 8 * slot, phase ^ 1);
            __syncwarp();
            const int nr = (int)(p.rows - g * RG < RG ? p.rows - g * RG : RG);
            const int64_t off = (int64_t)s * p.piece;
            const int pb = (int)(p.row_bytes - off < p.piece ? p.row_bytes - off : p.piece);
            const uint32_t dst = stages_s + slot * stage_bytes, bar = full_s + 8 * slot;
            const uint8_t *src = p.codes + g * RG * p.row_bytes + off;
            if (lane == 0) tern_mbar::expect_tx(bar, nr * pb);
            __syncwarp();
            if (p.np == 1) { /* whole rows: one contiguous copy */
                if (lane == 0) tern_mbar::bulk_load(dst, src, (uint32_t)(nr * pb), bar);
            } else {
                for (int r = lane; r < nr; r += 32)
                    tern_mbar::bulk_load(dst + r * p.piece, src + r * p.row_bytes, (uint32_t)pb, bar);
            }
            if (++s == p.np) s = 0, g++;
            if (++slot == ST) slot = 0, phase ^= 1;
        }
        return;
    }

    /* consumers: x is written by the kernel before this one */
    asm volatile("griddepcontrol.wait;" ::: "memory");
    uint8_t *xq = sm + (size_t)ST * stage_bytes;
    int *xsum = reinterpret_cast<int *>(xq + 4 * p.row_bytes);
    const int nch = (int)(p.row_bytes / 16);
    for (int c = tid; c < nch; c += 32 * TMA_CW) {
        const int64_t col = (int64_t)(c >> 2) * 256 + (c & 3) * 16;
        int xs = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint4 v = make_uint4(0, 0, 0, 0);
            if (col + 64 * i < p.xcols) v = __ldg(reinterpret_cast<const uint4 *>(p.x + col + 64 * i));
            xs = dp4a_us(0x01010101u, v.x, xs);
            xs = dp4a_us(0x01010101u, v.y, xs);
            xs = dp4a_us(0x01010101u, v.z, xs);
            xs = dp4a_us(0x01010101u, v.w, xs);
            *reinterpret_cast<uint4 *>(xq + i * p.row_bytes + 16 * c) = v;
        }
        xsum[c] = xs;
    }
    consumers_sync();
    const float sx = p.sx[0];

    int acc[RPW][4];
#pragma unroll
    for (int q = 0; q < RPW; q++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[q][i] = 0;
    int xs = 0;
    for (int64_t u = u0; u < u1; u++) {
        tern_mbar::wait(full_s + 8 * slot, phase);
        const uint8_t *stg = sm + slot * stage_bytes + warp * RPW * p.piece;
        const int64_t off = (int64_t)s * p.piece;
        const int pc = (int)((p.row_bytes - off < p.piece ? p.row_bytes - off : p.piece) >> 4);
        const int cb = (int)(off >> 4);
        for (int l = lane; l < pc; l += 32) {
            uint4 w[RPW];
#pragma unroll
            for (int q = 0; q < RPW; q++) w[q] = *reinterpret_cast<const uint4 *>(stg + q * p.piece + 16 * l);
            const int c = cb + l;
            xs += xsum[c];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint4 xv = *reinterpret_cast<const uint4 *>(xq + i * p.row_bytes + 16 * c);
                const uint32_t m = 0x03030303u << (2 * i);
#pragma unroll
                for (int q = 0; q < RPW; q++) {
                    acc[q][i] = dp4a_us(w[q].x & m, xv.x, acc[q][i]);
                    acc[q][i] = dp4a_us(w[q].y & m, xv.y, acc[q][i]);
                    acc[q][i] = dp4a_us(w[q].z & m, xv.z, acc[q][i]);
                    acc[q][i] = dp4a_us(w[q].w & m, xv.w, acc[q][i]);
                }
            }
        }
        __syncwarp();
        if (lane == 0) tern_mbar::arrive(empty_s + 8 * slot); /* the slot may be refilled */
        if (++slot == ST) slot = 0, phase ^= 1;

        if (s == p.np - 1 || u == u1 - 1) { /* the end of this CTA's part of group g */
            const int64_t gu0 = g * p.np;
            const int covered = (int)(u - (u0 > gu0 ? u0 : gu0) + 1);
            const int64_t rbase = g * RG + warp * RPW;
            int d[RPW];
#pragma unroll
            for (int q = 0; q < RPW; q++) {
                d[q] = acc[q][0] + (acc[q][1] >> 2) + (acc[q][2] >> 4) + (acc[q][3] >> 6) - xs;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) d[q] += __shfl_xor_sync(0xffffffffu, d[q], o);
#pragma unroll
                for (int i = 0; i < 4; i++) acc[q][i] = 0;
            }
            xs = 0;
            if (covered == p.np) {
#pragma unroll
                for (int q = 0; q < RPW; q++)
                    if (lane == q && rbase + q < p.rows) {
                        const int64_t r = rbase + q;
                        p.y[r] = __fdiv_rn(__fmul_rn(p.scales[r * p.scale_stride], (float)d[q]), sx);
                    }
            } else { /* shared with another CTA: exact integer partials */
#pragma unroll
                for (int q = 0; q < RPW; q++)
                    if (lane == q && rbase + q < p.rows) atomicAdd(&p.part[rbase + q], d[q]);
                __threadfence();
                consumers_sync();
                if (tid == 0) s_last = atomicAdd(&p.ctr[g], covered) + covered == p.np;
                consumers_sync();
                if (s_last) {
                    __threadfence();
#pragma unroll
                    for (int q = 0; q < RPW; q++)
                        if (lane == q && rbase + q < p.rows) {
                            const int64_t r = rbase + q;
                            const int dd = atomicExch(&p.part[r], 0);
                            p.y[r] = __fdiv_rn(__fmul_rn(p.scales[r * p.scale_stride], (float)dd), sx);
                        }
                    if (tid == 0) atomicExch(&p.ctr[g], 0);
                }
            }
        }
        if (++s == p.np) s = 0, g++;
    }
}

/* the largest piece (bytes of one code row per unit) for variant digit b */
constexpr int kPieceMax[10] = {1152, 256, 512, 768, 1024, 1152, 1536, 2048, 3072, 4096};

template <int RPW>
int launch_tma(TmaArgs &a, int pmax, int cap, int sms, cudaStream_t s) {
    constexpr int RG = TMA_CW * RPW;
    a.np = (int)((a.row_bytes + pmax - 1) / pmax);
    a.piece = (int)(((a.row_bytes + a.np - 1) / a.np + 63) / 64 * 64);
    const int64_t groups = (a.rows + RG - 1) / RG;
    a.units = groups * a.np;
    const size_t smem = (size_t)a.st * RG * a.piece + 4 * (size_t)a.row_bytes + (size_t)a.row_bytes / 4;
    if (smem > 227 * 1024)
        return err_set("tern_gemv_i8_tma: %zu bytes of shared memory (%d stages of %d x %d)", smem,
                       a.st, RG, a.piece);
    CUDA_CHECK(cudaFuncSetAttribute(gemv_i8_tma<RPW>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem));
    int occ = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, gemv_i8_tma<RPW>, TMA_THREADS, smem));
    if (occ < 1) return err_set("tern_gemv_i8_tma: %zu bytes of shared memory do not fit an SM", smem);
    if (cap > 0 && occ > cap) occ = cap;
    int64_t P = (int64_t)sms * occ;
    if (P > a.units) P = a.units;
    if (a.np > 1) { /* row groups may be split between CTAs */
        void *ws;
        if (tern_ws_zeroed((size_t)(groups + a.rows) * sizeof(int), &ws) < 0) return -1;
        a.ctr = static_cast<int *>(ws);
        a.part = a.ctr + groups;
    }
    return tern_launch_pdl_smem("gemv_i8_tma", gemv_i8_tma<RPW>, dim3((unsigned)P), dim3(TMA_THREADS), smem, s, a);
}

} // namespace

int tern_gemv_i8_tma(const TernCudaMatrix *W, const int8_t *d_x, int64_t xcols, const float *d_sx,
                     float *d_y, int variant, cudaStream_t s) {
    if (W->n_groups != 1)
        return err_set("tern_gemv_i8_tma: %lld scale groups per row (one scale per row only)",
                       (long long)W->n_groups);
    if (xcols % 16 != 0 || xcols < W->cols || ((uintptr_t)d_x & 15) != 0)
        return err_set("tern_gemv_i8_tma: activations must be 16-byte aligned with a multiple "
                       "of 16 columns");
    if (W->cols > TERN_GEMV_TMA_MAX_COLS) /* x is staged in shared memory */
        return err_set("tern_gemv_i8_tma: %lld columns (at most %d)", (long long)W->cols,
                       TERN_GEMV_TMA_MAX_COLS);
    if (((uintptr_t)W->d_codes & 15) != 0 || W->row_bytes % 64 != 0)
        return err_set("tern_gemv_i8_tma: codes must be 16-byte aligned in 64-byte blocks");
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    TmaArgs a = {};
    a.codes = W->d_codes;
    a.scales = W->d_scales;
    a.scale_stride = W->scale_stride;
    a.rows = W->rows;
    a.row_bytes = W->row_bytes;
    a.xcols = xcols;
    a.x = d_x;
    a.sx = d_sx;
    a.y = d_y;
    /* variant 4abcd (bench sweeps): a = rows per consumer warp (2 or 4), b = the
     * largest piece (kPieceMax), c = stages (2..8), d = CTAs per SM at most (0: as
     * many as fit) */
    int rpw = 2, b = 0, cap = 0;
    a.st = 4;
    if (variant >= 40000 && variant < 50000) {
        rpw = variant / 1000 % 10;
        b = variant / 100 % 10;
        a.st = variant / 10 % 10;
        cap = variant % 10;
    } else if (variant != 0) {
        return err_set("tern_gemv_i8_tma: unknown variant %d", variant);
    }
    if (a.st < 2 || a.st > TMA_MAXST)
        return err_set("tern_gemv_i8_tma: variant %d: %d stages (2..%d)", variant, a.st, TMA_MAXST);
    if (rpw == 2) return launch_tma<2>(a, kPieceMax[b], cap, sms, s);
    if (rpw == 4) return launch_tma<4>(a, kPieceMax[b], cap, sms, s);
    return err_set("tern_gemv_i8_tma: variant %d: %d rows per warp (2 or 4)", variant, rpw);
}
