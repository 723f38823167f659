/* dev/tern_gemv_bmma_n.cu — NOT BUILT (kept for the record, fifth session).
 * The part of tern_gemv_bmma.cu that also took 2 .. 16 tokens
 * (gemv_i8_bmma_n: 8 tokens per CTA, B planes per token, 4 MMAs per block and
 * token, accumulators 8 tokens x 8 registers, 106-116 registers, 2 CTAs per
 * SM).  Bit-identical to tern_matmul_i8_ref (test_gpu), but 1.3-3.7x slower
 * than the wgmma GEMM's 8/16-token tiles (H200, bench_gpu --sweep-decode,
 * best configuration; wgmma in brackets): M = 8: 4096^2 12.2 us (8.1),
 * 14336x4096 20.5 (15.5), 4096x14336 19.4 (17.1), 36864x4608 59.3 (28.3),
 * 4608x36864 48.0 (31.6); M = 16 about twice that.  The b1 MMA itself is
 * not the limit (m16n8k256.b1 issues at the m16n8k32.s8 rate, ~1.1 per SM
 * per ns: bench_gpu --mma-rate; 36864x4608 at M = 8 needs ~9 us of MMAs per
 * SM): with the accumulators of 8 tokens only one or two blocks of codes fit
 * in flight per thread and 2 CTAs per SM, so the code stream has too few
 * bytes in flight.
 *
 * Only the multi-token kernel, its launcher and the branch of the entry point
 * are kept here; they use tern_gemv_bmma.cu's helpers (ld_codes, block_mma,
 * combine_planes; build_planes with one more parameter, the words between
 * blocks of planes; BmArgs with two more fields, int64_t n, ldx, the tokens
 * and x's row stride).  The whole file as measured is in git history:
 * kernels/cuda/dev/tern_gemv_bmma_n.cu at commit b8cf6d1.
 */

/* ---- 2 .. 16 tokens: 8 tokens per CTA (blockIdx.z), B planes per token ----
 * The same tiles and K slices as gemv_i8_bmma; each block of codes feeds 4
 * MMAs per token (accumulators: 8 tokens x 8 registers).  Planes in shared
 * memory [block][token][plane][word] (4 KB per block). */
constexpr int BN_TOK = 8;

template <int U>
__global__ void __launch_bounds__(32 * BM_WARPS) gemv_i8_bmma_n(const BmArgs p) {
    extern __shared__ __align__(16) uint32_t planes[];
    __shared__ int s_sumx[BN_TOK], s_last;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t kb0 = (int64_t)blockIdx.y * p.ks, tok0 = (int64_t)blockIdx.z * BN_TOK;
    const int nkb = (int)(p.kblocks - kb0 < p.ks ? p.kblocks - kb0 : p.ks);
    const int nt = (int)(p.n - tok0 < BN_TOK ? p.n - tok0 : BN_TOK);
    const int64_t r0 = (int64_t)blockIdx.x * BM_ROWS + warp * 16;
    const int64_t ra = r0 + g < p.rows ? r0 + g : p.rows - 1, rb = r0 + g + 8 < p.rows ? r0 + g + 8 : p.rows - 1;
    const uint8_t *pa = p.codes + ra * p.row_bytes + kb0 * 64 + 16 * t;
    const uint8_t *pb = p.codes + rb * p.row_bytes + kb0 * 64 + 16 * t;
    uint4 ca[U], cb[U];
#pragma unroll
    for (int u = 0; u < U; u++)
        if (u < nkb) ca[u] = ld_codes(pa + 64 * u), cb[u] = ld_codes(pb + 64 * u);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int tk = 0; tk < nt; tk++)
        build_planes(planes + tk * 128, BN_TOK * 128, p.x + (tok0 + tk) * p.ldx, p.xcols, kb0, nkb, tid,
                     32 * BM_WARPS, &s_sumx[tk]);
    __syncthreads(); /* planes and sums complete */

    int de[BN_TOK][4], dq[BN_TOK][4];
#pragma unroll
    for (int tk = 0; tk < BN_TOK; tk++)
#pragma unroll
        for (int i = 0; i < 4; i++) de[tk][i] = dq[tk][i] = 0;
    const uint32_t *pl_g = planes + g * 16 + 4 * t;
    for (int kb = 0; kb < nkb; kb += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (kb + u < nkb) {
#pragma unroll
                for (int tk = 0; tk < BN_TOK; tk++)
                    if (tk < nt) {
                        const uint4 e =
                            *reinterpret_cast<const uint4 *>(pl_g + ((kb + u) * BN_TOK + tk) * 128);
                        block_mma(de[tk], dq[tk], ca[u], cb[u], e);
                    }
                if (kb + u + U < nkb) {
                    ca[u] = ld_codes(pa + 64 * (kb + u + U));
                    cb[u] = ld_codes(pb + 64 * (kb + u + U));
                }
            }
        }
    }
    const bool split = gridDim.y > 1;
#pragma unroll
    for (int tk = 0; tk < BN_TOK; tk++) {
        if (tk >= nt) break;
        int va, vb;
        combine_planes(de[tk], dq[tk], t, &va, &vb);
        va -= s_sumx[tk];
        vb -= s_sumx[tk];
        const int64_t tok = tok0 + tk;
        const float sx = p.sx[tok];
        float *y = p.y + tok * p.rows;
        int *part = p.part + tok * p.rows;
        if (t == 0) {
            if (r0 + g < p.rows) {
                if (split) atomicAdd(&part[r0 + g], va);
                else y[r0 + g] = __fdiv_rn(__fmul_rn(p.scales[(r0 + g) * p.scale_stride], (float)va), sx);
            }
            if (r0 + g + 8 < p.rows) {
                if (split) atomicAdd(&part[r0 + g + 8], vb);
                else y[r0 + g + 8] = __fdiv_rn(__fmul_rn(p.scales[(r0 + g + 8) * p.scale_stride], (float)vb), sx);
            }
        }
    }
    if (!split) return;
    __threadfence();
    __syncthreads();
    const int64_t cidx = (int64_t)blockIdx.z * gridDim.x + blockIdx.x;
    if (tid == 0) s_last = atomicAdd(&p.ctr[cidx], 1) == (int)gridDim.y - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    const int64_t rg0 = (int64_t)blockIdx.x * BM_ROWS;
    for (int i = tid; i < BM_ROWS * nt; i += 32 * BM_WARPS) {
        const int64_t r = rg0 + i % BM_ROWS, tok = tok0 + i / BM_ROWS;
        if (r >= p.rows) continue;
        const int d = atomicExch(&p.part[tok * p.rows + r], 0);
        p.y[tok * p.rows + r] = __fdiv_rn(__fmul_rn(p.scales[r * p.scale_stride], (float)d), p.sx[tok]);
    }
    if (tid == 0) atomicExch(&p.ctr[cidx], 0);
}

template <int U>
int launch_bmma_n(BmArgs &a, int per_sm, int sms, cudaStream_t s) {
    const int64_t groups = (a.rows + BM_ROWS - 1) / BM_ROWS, tg = (a.n + BN_TOK - 1) / BN_TOK;
    int64_t S = (int64_t)sms * per_sm / (groups * tg);
    const int64_t smax = (a.kblocks + U - 1) / U, smin = (a.kblocks + 11) / 12; /* <= 12 blocks: 48 KB */
    if (S > smax) S = smax;
    if (S < smin) S = smin;
    if (S < 1) S = 1;
    a.ks = (int)((a.kblocks + S - 1) / S);
    S = (a.kblocks + a.ks - 1) / a.ks;
    if (S > 65535 || groups > 0x7fffffff)
        return err_set("tern_gemv_i8_bmma: %lld rows x %lld blocks is too large", (long long)a.rows,
                       (long long)a.kblocks);
    const size_t smem = (size_t)a.ks * BN_TOK * 512;
    CUDA_CHECK(cudaFuncSetAttribute(gemv_i8_bmma_n<U>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if (S > 1) {
        void *ws;
        if (tern_ws_zeroed((size_t)(groups * tg + a.n * a.rows) * sizeof(int), &ws) < 0) return -1;
        a.ctr = static_cast<int *>(ws);
        a.part = a.ctr + groups * tg;
    }
    return tern_launch_pdl_smem("gemv_i8_bmma_n", gemv_i8_bmma_n<U>, dim3((unsigned)groups, (unsigned)S, (unsigned)tg),
                                dim3(32 * BM_WARPS), smem, s, a);
}

/* the entry point, n > 1 (tern_gemv_i8_bmma took n as its fourth argument) */
    if (n > 1) { /* variant 5UC00: U blocks in flight (1, 2), C CTAs per SM the K split aims at */
        int u = 1, per_sm = 2;
        if (variant >= 50000 && variant < 60000) {
            u = variant / 1000 % 10;
            per_sm = variant / 100 % 10;
        } else if (variant != 0) {
            return err_set("tern_gemv_i8_bmma: unknown variant %d for %lld tokens", variant, (long long)n);
        }
        if (per_sm < 1) return err_set("tern_gemv_i8_bmma: variant %d: no CTAs", variant);
        if (u == 1) return launch_bmma_n<1>(a, per_sm, sms, s);
        if (u == 2) return launch_bmma_n<2>(a, per_sm, sms, s);
        return err_set("tern_gemv_i8_bmma: variant %d: %d blocks in flight (1 or 2)", variant, u);
    }
