/* f32 ternary GEMM by table lookup (AVX-512F), for many tokens and one scale
 * per row (group tensor or row, or smaller groups whose scales are equal
 * within each row: the same matrix, so it takes the same path and gives the
 * same bits whatever its group encoding, e.g. a group=row model written to
 * GGUF TQ1_0 and read back as 256-column groups).  Called by
 * tern_matmul_f32_avx512; the definition is tern_matmul_f32_ref (tests
 * compare within TOL_F32).
 *
 * Why: the FMA GEMM (tern_avx512.c, f32_gemm) spends one FMA per 16
 * weight x activation products, like a dense sgemm, with both FMA ports
 * busy.  Three ternary weights have 27 value combinations, and flipping all
 * three signs maps combination e to 26 - e with the negated sum, so for one
 * token and a column triple (a, b, c) the 14 partial sums
 *     T[e] = qa*x[a] + qb*x[b] + qc*x[c],  e = ca + 3 cb + 9 cc <= 13
 * (codes c = q + 1) fit in ONE zmm register.  A row's triple is stored as the
 * folded index min(e, 26 - e) and a sign +-1.0f (-1 when e > 13), and
 *     acc += vpermps(idx, T) * sign          (vpermps: port 5, FMA: port 0)
 * does 16 rows x 3 columns = 48 products in two uops, against 32 for two
 * FMAs.  The tables are built once per (token tile, triple) and reused by
 * every row of a work item (LUT_RB rows), so building them costs little.
 *
 * Triples follow the packed layout (ternary_format.h), so decoding needs no
 * shuffles: a chunk is up to three consecutive blocks, i.e. L = 4 * blocks
 * "lanes" of 64 columns (lane l = field l % 4 of block l / 4), and triple
 * (m, j) takes byte j of lanes m, m + M and m + 2M (M = ceil(L / 3); a lane
 * past L is a zero weight).  One dword gather per block and 16 rows fetches
 * bytes 4q..4q+3 of each row's block, and byte-wise ca + 3 cb + 9 cc gives
 * the combinations of four triples at once.
 *
 * Rows past `rows` and blocks past the row gather the zero code (e = 13,
 * T[13] = 0.0f) and are not stored.  Columns past cols have the zero code
 * (padding) and x = 0 in the tables, so x is never read past n * cols.
 *
 * Loop nest of a work item (rows [r0, r0 + RB), a range of token tiles):
 *   chunk (3 blocks) -> sub-chunk of 8 bytes j (K = 8M <= 32 triples):
 *     decode index + sign of the item's rows (RB/16 x K x 128 B, L2)
 *     token tile (8 tokens): build K x 8 tables (16 KB, L1), then for each
 *       pair of 16-row groups: 16 accumulators (2 x 8 tokens) over K
 *       triples, added to y (first sub-chunk: stored; last: times the row
 *       scale).
 * Summation order differs from the reference (3-term table entries, then
 * lanes over triples), like any blocked float kernel: within TOL_F32.
 * History (interleaved A/B in one process; the 2-core box is shared, so
 * ratios, not absolute times, are what carry over):
 *   v1 27-entry tables in two zmm, vpermi2ps on a copy of the indices + add:
 *      1.2x the FMA GEMM (1024 x 4096, n = 512, one thread); the register
 *      copies are not eliminated and take port 0/5 slots (3 uops/lookup).
 *   v2 this (sign-folded 14-entry tables, vpermps + FMA by the sign): 1.11x
 *      v1 on one thread, 1.14x on two (4096 x 14336, n = 512: 260 GFLOP/s);
 *      1.13-1.22x the FMA GEMM at n = 4 and 8.
 *   v3 activations of the next token tile prefetched (lut_prefetch_x): 1.04x
 *      (one thread) to 1.13x (two threads), 4096 x 14336 at n = 512: 289
 *      GFLOP/s on two threads when the box was quiet. */
#include "cpu/tern_kernels.h"

#include "core/err.h"
#include "ternary_format.h"

#include <immintrin.h>
#include <omp.h>
#include <string.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

#define LUT_TB 8  /* tokens per tile */
#define LUT_J 8   /* bytes j per sub-chunk: K = 8 M <= 32 triples (16: no faster) */
#define LUT_KMAX (4 * LUT_J)
/* Rows per work item: each table serves RB/16 lookups.  4096 x 14336, n =
 * 512, two threads: 512 rows 0.81x the speed of 1024, 2048 the same. */
#define LUT_RB 1024

/* Coefficients of xa, xb, xc in table entry e: qa = e % 3 - 1,
 * qb = e / 3 % 3 - 1, qc = e / 9 - 1 for e <= 13 (0 past 13). */
typedef struct {
    float a[16], b[16], c[16];
} LutCoef;

static void lut_coef_init(LutCoef *cf) {
    for (int e = 0; e < 16; e++) {
        cf->a[e] = e < 14 ? (float)(e % 3 - 1) : 0.0f;
        cf->b[e] = e < 14 ? (float)(e / 3 % 3 - 1) : 0.0f;
        cf->c[e] = e < 14 ? (float)(e / 9 - 1) : 0.0f;
    }
}

/* Column of byte j of lane l in chunk ch. */
ALWAYS_INLINE int64_t lut_col(int64_t ch, int l, int j) {
    return (3 * ch + l / 4) * TERN_BLOCK + TERN_LANE * (l % 4) + j;
}

/* Folded combinations and signs of triples (m, j0 + jj), m < M, jj < 8, for
 * the 16-row groups [0, nrg) of rows starting at r0: with k = m * 8 + jj,
 * I[(g * LUT_KMAX + k) * 32 + lane] = min(e, 26 - e) and the float at
 * lane + 16 = e > 13 ? -1 : 1. */
static void lut_decode(const TernaryMatrix *W, int64_t r0, int nrg, int64_t ch, int nblk, int M,
                       int j0, int32_t *I) {
    const int L = 4 * nblk;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i zero_codes = _mm512_set1_epi32(0x55555555), m3 = _mm512_set1_epi32(0x03030303);
    const __m512i roff = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)W->row_bytes));
    for (int g = 0; g < nrg; g++) {
        const int64_t rb = r0 + 16 * g;
        const int64_t left = W->rows - rb;
        const __mmask16 live = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
        const uint8_t *base = W->codes + (live ? rb : 0) * W->row_bytes;
        int32_t *Ig = I + (int64_t)g * LUT_KMAX * 32;
        for (int qq = 0; qq < LUT_J / 4; qq++) {
            const int q = j0 / 4 + qq;
            __m512i G[3];
            for (int bi = 0; bi < 3; bi++)
                G[bi] = bi < nblk ? _mm512_mask_i32gather_epi32(
                                        zero_codes, live,
                                        _mm512_add_epi32(roff, _mm512_set1_epi32((int)((3 * ch + bi) * TERN_BLOCK_BYTES + 4 * q))),
                                        base, 1)
                                  : zero_codes;
            for (int m = 0; m < M; m++) {
                __m512i c[3];
                for (int s = 0; s < 3; s++) {
                    const int l = m + s * M;
                    c[s] = l < L ? _mm512_and_si512(_mm512_srl_epi32(G[l / 4], _mm_cvtsi32_si128(2 * (l % 4))), m3)
                                 : _mm512_set1_epi32(0x01010101);
                }
                /* bytes <= 26: no carry between bytes */
                const __m512i f = _mm512_add_epi32(
                    _mm512_add_epi32(c[0], _mm512_add_epi32(c[1], _mm512_slli_epi32(c[1], 1))),
                    _mm512_add_epi32(c[2], _mm512_slli_epi32(c[2], 3)));
                for (int i = 0; i < 4; i++) {
                    const __m512i e = _mm512_and_si512(_mm512_srli_epi32(f, 8 * i), _mm512_set1_epi32(0xff));
                    const __m512i ef = _mm512_min_epu32(e, _mm512_sub_epi32(_mm512_set1_epi32(26), e));
                    const __m512 sg = _mm512_mask_blend_ps(_mm512_cmpgt_epu32_mask(e, _mm512_set1_epi32(13)),
                                                           _mm512_set1_ps(1.0f), _mm512_set1_ps(-1.0f));
                    int32_t *dst = Ig + (m * LUT_J + qq * 4 + i) * 32;
                    _mm512_store_si512((void *)dst, ef);
                    _mm512_store_ps((float *)(dst + 16), sg);
                }
            }
        }
    }
}

/* Tables of tokens [t0, t0 + tbn) for the K = 8M triples of the sub-chunk:
 * T[(k * LUT_TB + u) * 16 + e]. */
static void lut_tables(const float *x, int64_t cols, int64_t t0, int tbn, int64_t ch, int nblk,
                       int M, int j0, const LutCoef *cf, float *T) {
    const int L = 4 * nblk;
    const __m512 ca = _mm512_loadu_ps(cf->a), cb = _mm512_loadu_ps(cf->b), cc = _mm512_loadu_ps(cf->c);
    static const float zero = 0.0f; /* x of a column past cols (stride 0) */
    for (int m = 0; m < M; m++)
        for (int jj = 0; jj < LUT_J; jj++) {
            const int j = j0 + jj;
            const float *p3[3];
            int64_t st[3];
            for (int s = 0; s < 3; s++) {
                const int l = m + s * M;
                const int64_t k = l < L ? lut_col(ch, l, j) : cols;
                p3[s] = k < cols ? x + t0 * cols + k : &zero;
                st[s] = k < cols ? cols : 0;
            }
            float *Tk = T + (int64_t)(m * LUT_J + jj) * LUT_TB * 16;
            for (int u = 0; u < tbn; u++) {
                const __m512 xa = _mm512_set1_ps(p3[0][u * st[0]]);
                const __m512 xb = _mm512_set1_ps(p3[1][u * st[1]]);
                const __m512 xc = _mm512_set1_ps(p3[2][u * st[2]]);
                _mm512_store_ps(Tk + u * 16, _mm512_fmadd_ps(xc, cc, _mm512_fmadd_ps(xb, cb, _mm512_mul_ps(xa, ca))));
            }
        }
}

/* Prefetches the activations lut_tables will read for tokens [t0, t0+tbn):
 * 8 consecutive columns of 3M lanes per token, a different page for every
 * token (x is (n, cols) row-major).  Issued one token tile ahead, while the
 * current tile's lookups run; without it the table builds wait on these
 * misses (19% of the time at 4096 x 14336, n = 512, one thread; with the
 * prefetch 1.04x faster on one thread, 1.13x on two; _MM_HINT_T1 no
 * better). */
static void lut_prefetch_x(const float *x, int64_t cols, int64_t t0, int tbn, int64_t ch,
                           int nblk, int M, int j0) {
    const int L = 4 * nblk;
    for (int u = 0; u < tbn; u++)
        for (int l = 0; l < L && l < 3 * M; l++) {
            const int64_t k = lut_col(ch, l, j0);
            if (k < cols) _mm_prefetch((const char *)(x + (t0 + u) * cols + k), _MM_HINT_T0);
        }
}

/* Two 16-row groups (indices I0, I1) x TB tokens over K triples. */
ALWAYS_INLINE void lut_tile(const int32_t *I0, const int32_t *I1, int K, const float *T, float *y,
                            int64_t ldy, __mmask16 m0, __mmask16 m1, int first, int last,
                            __m512 s0, __m512 s1, const int TB) {
    __m512 a0[LUT_TB], a1[LUT_TB];
#pragma GCC unroll 8
    for (int u = 0; u < TB; u++) {
        a0[u] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, y + u * ldy);
        a1[u] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, y + u * ldy + 16);
    }
    for (int k = 0; k < K; k++) {
        const __m512i i0 = _mm512_load_si512((const void *)(I0 + k * 32));
        const __m512i i1 = _mm512_load_si512((const void *)(I1 + k * 32));
        const __m512 g0 = _mm512_load_ps((const float *)(I0 + k * 32 + 16));
        const __m512 g1 = _mm512_load_ps((const float *)(I1 + k * 32 + 16));
        const float *Tk = T + k * LUT_TB * 16;
#pragma GCC unroll 8
        for (int u = 0; u < TB; u++) {
            const __m512 tab = _mm512_load_ps(Tk + u * 16);
            a0[u] = _mm512_fmadd_ps(_mm512_permutexvar_ps(i0, tab), g0, a0[u]);
            a1[u] = _mm512_fmadd_ps(_mm512_permutexvar_ps(i1, tab), g1, a1[u]);
        }
    }
#pragma GCC unroll 8
    for (int u = 0; u < TB; u++) {
        if (last) {
            a0[u] = _mm512_mul_ps(a0[u], s0);
            a1[u] = _mm512_mul_ps(a1[u], s1);
        }
        _mm512_mask_storeu_ps(y + u * ldy, m0, a0[u]);
        _mm512_mask_storeu_ps(y + u * ldy + 16, m1, a1[u]);
    }
}

static void lut_tile_n(const int32_t *I0, const int32_t *I1, int K, const float *T, float *y,
                       int64_t ldy, __mmask16 m0, __mmask16 m1, int first, int last, __m512 s0,
                       __m512 s1, int tbn) {
    switch (tbn) {
#define LT(N) case N: lut_tile(I0, I1, K, T, y, ldy, m0, m1, first, last, s0, s1, N); break;
        LT(8) LT(7) LT(6) LT(5) LT(4) LT(3) LT(2) LT(1)
#undef LT
    default: break;
    }
}

int tern_rows_one_scale(const TernaryMatrix *W) {
    if (W->n_groups == 1 || W->scale_stride == 0) return 1;
    for (int64_t r = 0; r < W->rows; r++) {
        const float *sc = W->scales + r * W->scale_stride;
        for (int64_t g = 1; g < W->n_groups; g++)
            if (memcmp(&sc[g], &sc[0], sizeof sc[0]) != 0) return 0;
    }
    return 1;
}

int tern_matmul_f32_lut_avx512(const TernaryMatrix *W, const float *x, int64_t n, float *y) {
    if (tern_check_args(W, x, n, y, "tern_matmul_f32_lut_avx512") < 0) return -1;
    if (!tern_rows_one_scale(W))
        return err_set("tern_matmul_f32_lut_avx512: needs one scale per row (group tensor or row, "
                       "or groups whose scales are equal within each row)");
    if (n == 0) return 0;
    const int64_t rows = W->rows, cols = W->cols, nb = tern_row_blocks(cols);
    const int64_t nch = (nb + 2) / 3, ntiles = (n + LUT_TB - 1) / LUT_TB;
    const int64_t rb = rows < LUT_RB ? (rows + 31) / 32 * 32 : LUT_RB; /* rows per item */
    const int64_t nrb = (rows + rb - 1) / rb;
    const int par = tern_par((double)n * rows * cols, TERN_PAR_WORK);
    const int nth = par ? omp_get_max_threads() : 1;
    int64_t ntc = nrb >= 4 * nth ? 1 : (4 * nth + nrb - 1) / nrb; /* token chunks */
    if (ntc > ntiles) ntc = ntiles;
    const int64_t items = nrb * ntc;
    LutCoef cf;
    lut_coef_init(&cf);
    int failed = 0;
#pragma omp parallel if (par)
    {
        int32_t *I = tern_scratch(TERN_SCRATCH_PANEL, (size_t)(rb / 16) * LUT_KMAX * 32 * sizeof(int32_t),
                                  "f32 LUT GEMM indices");
        float *T = tern_scratch(TERN_SCRATCH_PANEL2, (size_t)LUT_KMAX * LUT_TB * 16 * sizeof(float),
                                "f32 LUT GEMM tables");
        float *S = tern_scratch(TERN_SCRATCH_AUX, (size_t)rb * sizeof(float), "f32 LUT GEMM row scales");
        if (!I || !T || !S) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; it++) {
            if (!I || !T || !S) continue;
            const int64_t ri = it / ntc, tc = it % ntc, r0 = ri * rb;
            const int64_t nr = rows - r0 < rb ? rows - r0 : rb;
            const int nrg = (int)((nr + 31) / 32 * 2); /* 16-row groups, even */
            const int64_t tt0 = tc * ntiles / ntc, tt1 = (tc + 1) * ntiles / ntc;
            for (int64_t r = 0; r < nrg * 16; r++)
                S[r] = r < nr ? W->scales[(r0 + r) * W->scale_stride] : 0.0f;
            for (int64_t ch = 0; ch < nch; ch++) {
                const int nblk = (int)(nb - 3 * ch < 3 ? nb - 3 * ch : 3);
                const int M = (4 * nblk + 2) / 3, K = M * LUT_J;
                for (int j0 = 0; j0 < TERN_LANE; j0 += LUT_J) {
                    const int first = ch == 0 && j0 == 0;
                    const int last = ch == nch - 1 && j0 + LUT_J == TERN_LANE;
                    lut_decode(W, r0, nrg, ch, nblk, M, j0, I);
                    for (int64_t tt = tt0; tt < tt1; tt++) {
                        const int64_t t0 = tt * LUT_TB;
                        const int tbn = (int)(n - t0 < LUT_TB ? n - t0 : LUT_TB);
                        lut_tables(x, cols, t0, tbn, ch, nblk, M, j0, &cf, T);
                        if (tt + 1 < tt1) {
                            const int64_t t1 = t0 + LUT_TB;
                            lut_prefetch_x(x, cols, t1, (int)(n - t1 < LUT_TB ? n - t1 : LUT_TB), ch, nblk, M, j0);
                        }
                        for (int g = 0; g < nrg; g += 2) {
                            const int64_t rg = r0 + 16 * g, left = rows - rg;
                            const uint32_t bits = left >= 32 ? 0xffffffffu : (1u << left) - 1;
                            lut_tile_n(I + (int64_t)g * LUT_KMAX * 32, I + (int64_t)(g + 1) * LUT_KMAX * 32, K,
                                       T, y + t0 * rows + rg, rows, (__mmask16)(bits & 0xffff),
                                       (__mmask16)(bits >> 16), first, last,
                                       _mm512_loadu_ps(S + 16 * g), _mm512_loadu_ps(S + 16 * g + 16), tbn);
                        }
                    }
                }
            }
        }
    }
    return failed ? err_set("tern_matmul_f32_lut_avx512: out of memory for a panel") : 0;
}
