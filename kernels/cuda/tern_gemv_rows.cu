/* tern_gemv_rows.cu — the one-token decode GEMV for int8 activations and one
 * scale per row (BitNet checkpoints, per-row / per-tensor ternarisation) on
 * the CUDA cores with dp4a: a warp covers several rows with lanes that keep
 * the same columns, so the activations are loaded once per chunk for all of
 * them (the earlier one-warp-per-row kernel, tern_gemv_i8.cu, loaded x again
 * for every row: four activation bytes per code byte through L1).
 *
 * Measured (H200, bench_gpu --sweep-decode, M = 1, same run; read-only
 * stream of the same bytes in brackets): 14336x4096 7.4 us (floor 5.2, v3
 * 8.5), 4096x14336 9.5 (5.2, 9.3), 36864x4608 17.1 (12.0, 23.9), 4608x36864
 * 20.2 (12.0, 22.0) — 50-64 % of copy bandwidth.  The integer pipe (one AND
 * and one dp4a per 4 weights, plus sum(x)) is about as busy as the memory
 * stream; register or shared-memory prefetch depth changed little.  The
 * tensor-core variants (kernels/cuda/dev/tern_gemv_i8_mma.cu) were slower
 * at n = 1.  dev/NOTES.md has the sweep. */
#include <cuda_runtime.h>

#include <stdint.h>

#include "cuda/cuda_util.h"
#include "cuda/tern_cuda.h"
#include "cuda/tern_mma.cuh"

namespace {


__device__ __forceinline__ void cp_async16(void *smem, const void *g) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(g));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

} // namespace

/* ======================================================================
 * One token: the dp4a row GEMV (CUDA cores).  For n = 1 the s8 tensor
 * cores waste 7/8 of each MMA; dp4a does 4 weights per instruction.
 *
 * A warp covers R row groups of RPI = 32 / L rows: L lanes per row, and lane
 * t of a row always takes the same 16-byte chunks (t, t + L, ...) of its
 * slice, so the activations of a chunk (4 x 16 bytes, columns 64i + 16(c&3)
 * of block c/4) are loaded once and used for R rows.  Field i of a code word
 * is used in place: dp4a(w & (3 << 2i) per byte, x) = 4^i sum c*x, one
 * accumulator per field, recombined exactly (acc_i is a multiple of 4^i);
 * sum x over the lane's columns is one more dp4a per word, shared by the R
 * rows.  D = sum_i acc_i / 4^i - sum x, reduced over the L lanes (exact),
 * split-K partials as in gemv_i8_reg.  The next chunk's codes are loaded
 * before the current one is multiplied.
 * ====================================================================== */
namespace {

__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

struct RowArgs {
    const uint8_t *codes;
    const float *scales;
    int64_t scale_stride, rows, row_bytes, nch; /* nch: 16-byte chunks per row */
    int64_t cols;                               /* readable columns of x */
    const int8_t *x;
    const float *sx;
    int64_t cps; /* chunks per slice (a multiple of L) */
    int *part, *ctr;
    float *y;
};

/* D = 0: the next chunk's codes prefetched in registers; D >= 2: a D-stage
 * cp.async ring in shared memory per lane (each lane reads back only its own
 * 16-byte slots: no barrier), D - 1 chunks in flight without registers. */
template <int L, int R, int D>
__global__ void __launch_bounds__(256) gemv_i8_rows(RowArgs p) {
    constexpr int RPI = 32 / L;
    const int lane = threadIdx.x & 31, sub = lane / L, t = lane % L;
    const int64_t tile = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int64_t r0 = tile * (R * RPI);
    if (r0 >= p.rows) return;
    const int64_t cbeg = (int64_t)blockIdx.y * p.cps;
    const int64_t cend = cbeg + p.cps < p.nch ? cbeg + p.cps : p.nch;

    const uint8_t *rp[R];
#pragma unroll
    for (int q = 0; q < R; q++) {
        int64_t r = r0 + q * RPI + sub;
        if (r >= p.rows) r = p.rows - 1;
        rp[q] = p.codes + r * p.row_bytes;
    }
    int acc[R][4];
#pragma unroll
    for (int q = 0; q < R; q++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[q][i] = 0;
    int xs = 0;

    int64_t c = cbeg + t;
    uint4 w[R];
    constexpr int DS = D > 0 ? D : 1;
    __shared__ uint4 ring[DS][R][256];
    if (D == 0) {
        if (c < cend)
#pragma unroll
            for (int q = 0; q < R; q++) w[q] = ldg_stream_u4(rp[q] + 16 * c);
    } else {
#pragma unroll
        for (int st = 0; st < D - 1; st++) {
            const int64_t cc = c + (int64_t)st * L;
            if (cc < cend)
#pragma unroll
                for (int q = 0; q < R; q++) cp_async16(&ring[st][q][threadIdx.x], rp[q] + 16 * cc);
            cp_commit();
        }
    }
    /* programmatic dependent launch: the codes above do not depend on the
     * previous kernel; x, the scratch and y do */
    pdl_wait();
    pdl_trigger(); /* the next kernel may take its place in the queue now */
    for (int k = 0; c < cend; c += L, k++) {
        uint4 wn[R];
        if (D == 0) {
            if (c + L < cend)
#pragma unroll
                for (int q = 0; q < R; q++) wn[q] = ldg_stream_u4(rp[q] + 16 * (c + L));
        } else {
            const int64_t cc = c + (int64_t)(D - 1) * L;
            const int st = (k + D - 1) % DS;
            if (cc < cend)
#pragma unroll
                for (int q = 0; q < R; q++) cp_async16(&ring[st][q][threadIdx.x], rp[q] + 16 * cc);
            cp_commit();
            cp_wait<(D > 0 ? D - 1 : 0)>();
#pragma unroll
            for (int q = 0; q < R; q++) w[q] = ring[k % DS][q][threadIdx.x];
        }
        const int64_t col = (c >> 2) * 256 + (c & 3) * 16;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint4 xv = make_uint4(0, 0, 0, 0);
            if (col + 64 * i < p.cols) xv = __ldg(reinterpret_cast<const uint4 *>(p.x + col + 64 * i));
            xs = dp4a_us(0x01010101u, xv.x, xs);
            xs = dp4a_us(0x01010101u, xv.y, xs);
            xs = dp4a_us(0x01010101u, xv.z, xs);
            xs = dp4a_us(0x01010101u, xv.w, xs);
            const uint32_t m = 0x03030303u << (2 * i);
#pragma unroll
            for (int q = 0; q < R; q++) {
                acc[q][i] = dp4a_us(w[q].x & m, xv.x, acc[q][i]);
                acc[q][i] = dp4a_us(w[q].y & m, xv.y, acc[q][i]);
                acc[q][i] = dp4a_us(w[q].z & m, xv.z, acc[q][i]);
                acc[q][i] = dp4a_us(w[q].w & m, xv.w, acc[q][i]);
            }
        }
        if (D == 0)
#pragma unroll
            for (int q = 0; q < R; q++) w[q] = wn[q];
    }

    const bool split = gridDim.y > 1;
    int d[R];
#pragma unroll
    for (int q = 0; q < R; q++) {
        d[q] = acc[q][0] + (acc[q][1] >> 2) + (acc[q][2] >> 4) + (acc[q][3] >> 6) - xs;
#pragma unroll
        for (int o = L / 2; o > 0; o >>= 1) d[q] += __shfl_xor_sync(0xffffffffu, d[q], o);
    }
    if (t == 0)
#pragma unroll
        for (int q = 0; q < R; q++) {
            const int64_t r = r0 + q * RPI + sub;
            if (r >= p.rows) continue;
            if (split) {
                atomicAdd(&p.part[r], d[q]);
            } else {
                p.y[r] = tern_i8_out(p.scales[r * p.scale_stride], (float)d[q], p.sx[0]);
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
    if (t == 0)
#pragma unroll
        for (int q = 0; q < R; q++) {
            const int64_t r = r0 + q * RPI + sub;
            if (r >= p.rows) continue;
            const int dd = atomicExch(&p.part[r], 0);
            p.y[r] = tern_i8_out(p.scales[r * p.scale_stride], (float)dd, p.sx[0]);
        }
    if (lane == 0) atomicExch(&p.ctr[tile], 0);
}

template <int L, int R, int D>
int launch_rows(RowArgs &a, int sms, int wt, cudaStream_t s) {
    constexpr int RPW = R * (32 / L); /* rows per warp */
    const int64_t tiles = (a.rows + RPW - 1) / RPW;
    const int64_t per_lane = (a.nch + L - 1) / L; /* chunks per lane, whole row */
    int64_t S = ((int64_t)sms * wt + tiles - 1) / tiles;
    if (S > per_lane) S = per_lane;
    if (S < 1) S = 1;
    a.cps = (int64_t)L * ((per_lane + S - 1) / S);
    S = (a.nch + a.cps - 1) / a.cps;
    if (S > 65535) return err_set("tern_gemv_i8_rows: %lld k slices", (long long)S);
    if (S > 1) {
        void *ws;
        const size_t need = (size_t)(tiles + a.rows) * sizeof(int);
        if (tern_ws_zeroed(need, &ws) < 0) return -1;
        a.ctr = static_cast<int *>(ws);
        a.part = a.ctr + tiles;
    }
    return tern_launch_pdl("gemv_i8_rows", gemv_i8_rows<L, R, D>, dim3((unsigned)((tiles + 7) / 8), (unsigned)S),
                           dim3(256), s, a);
}

} // namespace

int tern_gemv_i8_rows(const TernCudaMatrix *W, const int8_t *d_x, int64_t xcols, const float *d_sx,
                      float *d_y, int variant, cudaStream_t s) {
    /* field 3 accumulates 64 * 2 * 128 per column in int32 */
    int sms = 0;
    if (tern_gemv1_prepare("tern_gemv_i8_rows", W, d_x, xcols, 131072, &sms) < 0) return -1;
    RowArgs a = {};
    tern_gemv1_fill(a, W, d_x, d_sx, d_y);
    a.nch = W->row_bytes / 16;
    a.cols = xcols;
    /* variant 3LRDW (bench sweeps): L = 0 auto, 1: 8, 2: 16, 3: 32 lanes per row; R row
     * groups per warp; D cp.async stages (0: registers); W = warps per SM / 8 */
    int lc = 0, r = 2, d = -1, wt = 32;
    if (variant >= 30000 && variant < 40000) {
        lc = variant / 1000 % 10;
        r = variant / 100 % 10;
        d = variant / 10 % 10;
        wt = 8 * (variant % 10);
    } else if (variant != 0) {
        return err_set("tern_gemv_i8_rows: unknown variant %d", variant);
    }
    int L = lc == 1 ? 8 : lc == 2 ? 16 : 32;
    if (lc == 0) L = a.nch % 32 == 0 || a.nch >= 256 ? 32 : a.nch % 16 == 0 ? 16 : 8;
    /* measured (NOTES.md): the cp.async ring pays off for long rows and for 8 lanes
     * per row, register prefetch for rows of 4096 - 16384 columns */
    if (d < 0) d = (a.nch % 32 != 0 || a.nch >= 512) ? 4 : 0;
    if (wt < 8) return err_set("tern_gemv_i8_rows: variant %d: no warps", variant);
#define TL_ROWS(l, rr, dd) \
    if (L == l && r == rr && d == dd) return launch_rows<l, rr, dd>(a, sms, wt, s);
    TL_ROWS(32, 2, 0) TL_ROWS(16, 2, 0) TL_ROWS(8, 2, 0)
    TL_ROWS(32, 2, 4) TL_ROWS(16, 2, 4) TL_ROWS(8, 2, 4)
#undef TL_ROWS
    return err_set("tern_gemv_i8_rows: variant %d not built", variant);
}

