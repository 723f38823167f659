/* tern_gemv_bmma.cu — the one-token decode GEMV for int8 activations and one
 * scale per row on the binary tensor cores (mma.m16n8k256 .b1, AND + POPC):
 * the 2-bit codes are the A operand as they are stored, no decoding at all.
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

#include "cuda/cuda_util.h"
#include "cuda/tern_cuda.h"
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
    float *y;
    int ks;          /* blocks per K slice */
    int *part, *ctr; /* split K: partial sums per row, slices done per row group */
};

__device__ __forceinline__ uint4 ld_codes(const uint8_t *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* d += popc(A AND B) per (row, column) */
__device__ __forceinline__ void bmma(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                     uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* The four MMAs of one block (two k steps, even and odd B). */
__device__ __forceinline__ void block_mma(int (&de)[4], int (&dq)[4], const uint4 &ca, const uint4 &cb,
                                          const uint4 &e) {
    bmma(de, ca.x, cb.x, ca.y, cb.y, e.x, e.y);
    bmma(dq, ca.x, cb.x, ca.y, cb.y, e.x << 1, e.y << 1);
    bmma(de, ca.z, cb.z, ca.w, cb.w, e.z, e.w);
    bmma(dq, ca.z, cb.z, ca.w, cb.w, e.z << 1, e.w << 1);
}

template <int U>
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
        if (u < nkb) ca[u] = ld_codes(pa + 64 * u), cb[u] = ld_codes(pb + 64 * u);
    if (tid == 0) s_sumx = 0;
    asm volatile("griddepcontrol.wait;" ::: "memory");

    /* B planes of the slice and its sum x */
    int sx_part = 0;
    for (int it = tid; it < nkb * 16; it += 32 * BM_WARPS) {
        const int kbl = it >> 4, j = it & 15;
        const int64_t col = (kb0 + kbl) * 256 + 4 * j;
        uint32_t w[4];
#pragma unroll
        for (int f = 0; f < 4; f++) {
            w[f] = col + 64 * f < p.xcols ? __ldg(reinterpret_cast<const uint32_t *>(p.x + col + 64 * f)) : 0u;
            sx_part = __dp4a((int)w[f], 0x01010101, sx_part);
        }
#pragma unroll
        for (int pl = 0; pl < 8; pl++) {
            const uint32_t m = 0x01010101u;
            planes[(kbl * 8 + pl) * 16 + j] = ((w[0] >> pl) & m) | (((w[1] >> pl) & m) << 2) |
                                             (((w[2] >> pl) & m) << 4) | (((w[3] >> pl) & m) << 6);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sx_part += __shfl_xor_sync(0xffffffffu, sx_part, o);
    __syncthreads(); /* s_sumx = 0 is visible */
    if (lane == 0 && sx_part != 0) atomicAdd(&s_sumx, sx_part);
    __syncthreads(); /* planes and s_sumx complete */

    int de[4] = {0, 0, 0, 0}, dq[4] = {0, 0, 0, 0};
    const uint32_t *pl_g = planes + g * 16 + 4 * t;
    for (int kb = 0; kb < nkb; kb += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (kb + u < nkb) {
                const uint4 e = *reinterpret_cast<const uint4 *>(pl_g + (kb + u) * 128);
                block_mma(de, dq, ca[u], cb[u], e);
                if (kb + u + U < nkb) {
                    ca[u] = ld_codes(pa + 64 * (kb + u + U));
                    cb[u] = ld_codes(pb + 64 * (kb + u + U));
                }
            }
        }
    }

    /* this thread: planes 2t, 2t + 1 of rows g (d[0], d[1]) and g + 8 (d[2], d[3]) */
    const int c0 = t == 3 ? 64 : 1 << (2 * t), c1 = t == 3 ? -128 : 2 << (2 * t);
    int va = c0 * (de[0] + 2 * dq[0]) + c1 * (de[1] + 2 * dq[1]);
    int vb = c0 * (de[2] + 2 * dq[2]) + c1 * (de[3] + 2 * dq[3]);
    va += __shfl_xor_sync(0xffffffffu, va, 1);
    va += __shfl_xor_sync(0xffffffffu, va, 2);
    vb += __shfl_xor_sync(0xffffffffu, vb, 1);
    vb += __shfl_xor_sync(0xffffffffu, vb, 2);
    va -= s_sumx;
    vb -= s_sumx;
    const bool split = gridDim.y > 1;
    const float sx = p.sx[0];
    if (t == 0) {
        if (r0 + g < p.rows) {
            if (split) atomicAdd(&p.part[r0 + g], va);
            else p.y[r0 + g] = __fdiv_rn(__fmul_rn(p.scales[(r0 + g) * p.scale_stride], (float)va), sx);
        }
        if (r0 + g + 8 < p.rows) {
            if (split) atomicAdd(&p.part[r0 + g + 8], vb);
            else p.y[r0 + g + 8] = __fdiv_rn(__fmul_rn(p.scales[(r0 + g + 8) * p.scale_stride], (float)vb), sx);
        }
    }
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
        p.y[r] = __fdiv_rn(__fmul_rn(p.scales[r * p.scale_stride], (float)d), sx);
    }
    if (tid == 0) atomicExch(&p.ctr[blockIdx.x], 0);
}

template <int U>
int launch_bmma(BmArgs &a, int per_sm, int sms, cudaStream_t s) {
    const int64_t groups = (a.rows + BM_ROWS - 1) / BM_ROWS;
    /* K slices: enough CTAs for per_sm per SM, at least U blocks each */
    int64_t S = ((int64_t)sms * per_sm + groups - 1) / groups;
    const int64_t smax = (a.kblocks + U - 1) / U;
    if (S > smax) S = smax;
    if (S < 1) S = 1;
    a.ks = (int)((a.kblocks + S - 1) / S);
    S = (a.kblocks + a.ks - 1) / a.ks;
    if (S > 65535 || groups > 0x7fffffff)
        return err_set("tern_gemv_i8_bmma: %lld rows x %lld blocks is too large", (long long)a.rows,
                       (long long)a.kblocks);
    const size_t smem = (size_t)a.ks * 512;
    if (smem > 200 * 1024) return err_set("tern_gemv_i8_bmma: a K slice of %d blocks", a.ks);
    CUDA_CHECK(cudaFuncSetAttribute(gemv_i8_bmma<U>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if (S > 1) {
        void *ws;
        if (tern_ws_zeroed((size_t)(groups + a.rows) * sizeof(int), &ws) < 0) return -1;
        a.ctr = static_cast<int *>(ws);
        a.part = a.ctr + groups;
    }
    return tern_launch_pdl_smem(gemv_i8_bmma<U>, dim3((unsigned)groups, (unsigned)S), dim3(32 * BM_WARPS),
                                smem, s, a);
}

} // namespace

int tern_gemv_i8_bmma(const TernCudaMatrix *W, const int8_t *d_x, int64_t xcols, const float *d_sx,
                      float *d_y, int variant, cudaStream_t s) {
    if (W->n_groups != 1)
        return err_set("tern_gemv_i8_bmma: %lld scale groups per row (one scale per row only)",
                       (long long)W->n_groups);
    if (xcols % 16 != 0 || xcols < W->cols || ((uintptr_t)d_x & 15) != 0)
        return err_set("tern_gemv_i8_bmma: activations must be 16-byte aligned with a multiple "
                       "of 16 columns");
    if (((uintptr_t)W->d_codes & 15) != 0 || W->row_bytes % 64 != 0)
        return err_set("tern_gemv_i8_bmma: codes must be 16-byte aligned in 64-byte blocks");
    if (W->cols > 4194304) /* |sum c x| <= 2 * 128 * cols in int32 */
        return err_set("tern_gemv_i8_bmma: %lld columns (at most 4194304)", (long long)W->cols);
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    BmArgs a = {};
    a.codes = W->d_codes;
    a.scales = W->d_scales;
    a.scale_stride = W->scale_stride;
    a.rows = W->rows;
    a.row_bytes = W->row_bytes;
    a.kblocks = W->row_bytes / 64;
    a.xcols = xcols;
    a.x = d_x;
    a.sx = d_sx;
    a.y = d_y;
    /* variant 5UC00 (bench sweeps): U blocks in flight per warp (1, 2, 4), C = CTAs per SM
     * the K split aims at (1..9) */
    int u = 2, per_sm = 4;
    if (variant >= 50000 && variant < 60000) {
        u = variant / 1000 % 10;
        per_sm = variant / 100 % 10;
    } else if (variant != 0) {
        return err_set("tern_gemv_i8_bmma: unknown variant %d", variant);
    }
    if (per_sm < 1) return err_set("tern_gemv_i8_bmma: variant %d: no CTAs", variant);
    if (u == 1) return launch_bmma<1>(a, per_sm, sms, s);
    if (u == 2) return launch_bmma<2>(a, per_sm, sms, s);
    if (u == 4) return launch_bmma<4>(a, per_sm, sms, s);
    return err_set("tern_gemv_i8_bmma: variant %d: %d blocks in flight (1, 2 or 4)", variant, u);
}
