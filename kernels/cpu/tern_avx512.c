/* AVX-512 ternary matmuls (AVX-512F/BW/VL + VNNI).  Compiled with the flags
 * of FLAGS_avx512 (Makefile); called only when tern_kernel_supported(TK_AVX512).
 *
 * int8 activations (the decode fast path): one 64-byte load = one block of
 * 256 codes; field i is (v >> 2i) & 3 = codes c = q+1 of 64 consecutive
 * columns, fed to vpdpbusd (u8 c x s8 x, 4 products per i32 lane) against a
 * plain 64-byte load of activations.  sum(q*x) = sum(c*x) - sum(x): the
 * per-group activation sums are computed once per token.  Integer dots per
 * group are exact; the float combination over groups runs in group order
 * exactly as tern_matmul_i8_ref, so results are bit-identical.
 *
 * f32 activations: the 16 codes of a 16-byte slice are widened to dwords
 * (vpmovzxbd); vpermps with a 16-entry table indexed by the low 4 bits (two
 * fields) turns them into -1/0/+1 floats without masking; fields 2 and 3 use
 * the same tables after one shift by 4.  Then FMA with the activations.
 * Accumulation order differs from the reference (tolerance 1e-5 relative).
 *
 * Both process TB tokens per pass over a row so the decoded codes are reused
 * (TB=4 int8, TB=2 f32: what fits the 32 zmm registers), token tiles of
 * TILE_T tokens keep activations in L2, and rows are split among OpenMP
 * threads. */
#include "cpu/tern_kernels.h"

#include "core/err.h"
#include "core/mem.h"
#include "ternary_format.h"

#include <immintrin.h>

#define TILE_T 64 /* tokens whose activations stay in L2 while rows stream */

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* ---------------------------------------------------------------- int8 */

/* Row r, TB tokens, blocks [b0, b1) of the row.  The running state of each
 * (token, row) pair lives in dst[tb] (integer partial dot of the current
 * group) and acc[tb] (float sum over finished groups), so a row can be
 * processed in column chunks while a chunk of activations stays in L1.
 * When b1 is the last block, *yo[tb] = acc / sx.  xp[tb]: padded int8
 * activations, xs[tb]: per-group activation sums of that token. */
ALWAYS_INLINE void i8_row(const TernaryMatrix *W, int64_t r, int64_t b0, int64_t b1,
                          const int8_t *const *xp, const int32_t *const *xs, const float *sxv,
                          int32_t *const *dst, float *const *acc, float *const *yo, const int TB) {
    const int64_t cols = W->cols, gc = W->group_cols, nb = tern_row_blocks(cols);
    const uint8_t *row = W->codes + r * W->row_bytes;
    const float *sc = W->scales + r * W->scale_stride;
    const __m512i m3 = _mm512_set1_epi8(3);
    if (gc % TERN_BLOCK == 0 || W->n_groups == 1) {
        /* groups made of whole blocks: integer accumulators across blocks */
        __m512i A[4][4];
        #pragma GCC unroll 16
        for (int tb = 0; tb < TB; tb++)
            #pragma GCC unroll 16
            for (int i = 0; i < 4; i++) A[tb][i] = _mm512_setzero_si512();
        for (int64_t b = b0; b < b1; b++) {
            __m512i v = _mm512_loadu_si512((const void *)(row + b * TERN_BLOCK_BYTES));
            __m512i c0 = _mm512_and_si512(v, m3);
            __m512i c1 = _mm512_and_si512(_mm512_srli_epi16(v, 2), m3);
            __m512i c2 = _mm512_and_si512(_mm512_srli_epi16(v, 4), m3);
            __m512i c3 = _mm512_and_si512(_mm512_srli_epi16(v, 6), m3);
            #pragma GCC unroll 16
            for (int tb = 0; tb < TB; tb++) {
                const int8_t *xb = xp[tb] + b * TERN_BLOCK;
                A[tb][0] = _mm512_dpbusd_epi32(A[tb][0], c0, _mm512_loadu_si512((const void *)xb));
                A[tb][1] = _mm512_dpbusd_epi32(A[tb][1], c1, _mm512_loadu_si512((const void *)(xb + 64)));
                A[tb][2] = _mm512_dpbusd_epi32(A[tb][2], c2, _mm512_loadu_si512((const void *)(xb + 128)));
                A[tb][3] = _mm512_dpbusd_epi32(A[tb][3], c3, _mm512_loadu_si512((const void *)(xb + 192)));
            }
            const int group_end = b == nb - 1 || ((b + 1) * TERN_BLOCK) % gc == 0;
            if (group_end || b == b1 - 1) {
                #pragma GCC unroll 16
                for (int tb = 0; tb < TB; tb++) {
                    __m512i s = _mm512_add_epi32(_mm512_add_epi32(A[tb][0], A[tb][1]),
                                                 _mm512_add_epi32(A[tb][2], A[tb][3]));
                    *dst[tb] += _mm512_reduce_add_epi32(s);
                    #pragma GCC unroll 16
                    for (int i = 0; i < 4; i++) A[tb][i] = _mm512_setzero_si512();
                    if (group_end) {
                        int64_t g = (b * TERN_BLOCK) / gc;
                        *acc[tb] += sc[g] * (float)(*dst[tb] - xs[tb][g]);
                        *dst[tb] = 0;
                    }
                }
            }
        }
    } else {
        /* groups of 32, 64 or 128 columns (never crossing a block): reduce per
         * 32- or 64-column segment, in column order (b, i, half) */
        const int half = gc < 64;
        for (int64_t b = b0; b < b1; b++) {
            __m512i v = _mm512_loadu_si512((const void *)(row + b * TERN_BLOCK_BYTES));
            #pragma GCC unroll 16
            for (int i = 0; i < 4; i++) {
                int64_t col = b * TERN_BLOCK + i * TERN_LANE;
                if (col >= cols) break;
                __m512i c = _mm512_and_si512(_mm512_srl_epi16(v, _mm_cvtsi32_si128(2 * i)), m3);
                #pragma GCC unroll 16
                for (int tb = 0; tb < TB; tb++) {
                    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c,
                                                    _mm512_loadu_si512((const void *)(xp[tb] + col)));
                    if (half) {
                        int32_t lo = _mm512_mask_reduce_add_epi32(0x00ff, p);
                        int32_t hi = _mm512_mask_reduce_add_epi32(0xff00, p);
                        int64_t g = col / gc;
                        *acc[tb] += sc[g] * (float)(lo - xs[tb][g]);
                        if (col + 32 < cols) *acc[tb] += sc[g + 1] * (float)(hi - xs[tb][g + 1]);
                    } else {
                        *dst[tb] += _mm512_reduce_add_epi32(p);
                        int64_t end = col + TERN_LANE;
                        if (end % gc == 0 || end >= cols) {
                            int64_t g = col / gc;
                            *acc[tb] += sc[g] * (float)(*dst[tb] - xs[tb][g]);
                            *dst[tb] = 0;
                        }
                    }
                }
            }
        }
    }
    if (b1 == nb)
        #pragma GCC unroll 16
        for (int tb = 0; tb < TB; tb++) *yo[tb] = *acc[tb] / sxv[tb];
}

static void i8_row_n(const TernaryMatrix *W, int64_t r, int64_t b0, int64_t b1,
                     const int8_t *const *xp, const int32_t *const *xs, const float *sxv,
                     int32_t *const *dst, float *const *acc, float *const *yo, int tbn) {
    switch (tbn) {
    case 4: i8_row(W, r, b0, b1, xp, xs, sxv, dst, acc, yo, 4); break;
    case 3: i8_row(W, r, b0, b1, xp, xs, sxv, dst, acc, yo, 3); break;
    case 2: i8_row(W, r, b0, b1, xp, xs, sxv, dst, acc, yo, 2); break;
    default: i8_row(W, r, b0, b1, xp, xs, sxv, dst, acc, yo, 1); break;
    }
}

/* Blocking for int8: row blocks of I8_ROWS rows (their code chunks stay in
 * L2) are split among threads; within one, column chunks of I8_KB blocks
 * (4 tokens x 4 KB of activations stay in L1) x token groups of 4 x rows. */
#define I8_ROWS 64
#define I8_KB 16

int tern_matmul_i8_avx512(const TernaryMatrix *W, const int8_t *xq, const float *sx, int64_t n,
                          float *y) {
    if (tern_check_args(W, xq, n, y, "tern_matmul_i8_avx512") < 0) return -1;
    if (n == 0) return 0;
    const int64_t rows = W->rows, nb = tern_row_blocks(W->cols), pc = nb * TERN_BLOCK;
    const int64_t ng = W->n_groups;
    void *owned;
    const int8_t *xp = tern_pad_act(xq, n, W->cols, 1, &owned);
    if (!xp) return -1;
    int32_t *xs = tern_group_sums_i8(W, xq, n);
    int64_t tt = n < TILE_T ? n : TILE_T;
    int32_t *dstate = mem_alloc((size_t)(tt * rows) * sizeof(int32_t), "int8 matmul state");
    float *astate = mem_alloc((size_t)(tt * rows) * sizeof(float), "int8 matmul state");
    if (!xs || !dstate || !astate) {
        mem_free(xs), mem_free(dstate), mem_free(astate), mem_free(owned);
        return -1;
    }
    const int64_t nrb = (rows + I8_ROWS - 1) / I8_ROWS;
    for (int64_t t0 = 0; t0 < n; t0 += TILE_T) {
        int64_t nt = n - t0 < TILE_T ? n - t0 : TILE_T;
        memset(dstate, 0, (size_t)(nt * rows) * sizeof(int32_t));
        memset(astate, 0, (size_t)(nt * rows) * sizeof(float));
        /* n = 1 decode: one row block per thread share keeps both cores busy */
#pragma omp parallel for schedule(static) if ((double)nt * rows * W->cols > TERN_PAR_MIN_WORK)
        for (int64_t rb = 0; rb < nrb; rb++) {
            int64_t r1 = (rb + 1) * I8_ROWS < rows ? (rb + 1) * I8_ROWS : rows;
            for (int64_t b0 = 0; b0 < nb; b0 += I8_KB) {
                int64_t b1 = b0 + I8_KB < nb ? b0 + I8_KB : nb;
                for (int64_t t = t0; t < t0 + nt; t += 4) {
                    int tbn = (int)(t0 + nt - t < 4 ? t0 + nt - t : 4);
                    const int8_t *xv[4];
                    const int32_t *sv[4];
                    float sxv[4];
                    for (int tb = 0; tb < tbn; tb++) {
                        xv[tb] = xp + (t + tb) * pc;
                        sv[tb] = xs + (t + tb) * ng;
                        sxv[tb] = sx[t + tb];
                    }
                    for (int64_t r = rb * I8_ROWS; r < r1; r++) {
                        int32_t *dv[4];
                        float *av[4], *yv[4];
                        for (int tb = 0; tb < tbn; tb++) {
                            dv[tb] = dstate + (t + tb - t0) * rows + r;
                            av[tb] = astate + (t + tb - t0) * rows + r;
                            yv[tb] = y + (t + tb) * rows + r;
                        }
                        i8_row_n(W, r, b0, b1, xv, sv, sxv, dv, av, yv, tbn);
                    }
                }
            }
        }
    }
    mem_free(xs), mem_free(dstate), mem_free(astate), mem_free(owned);
    return 0;
}

/* ----------------------------------------------------------------- f32 */

/* value of field 0 (bits 0-1) and field 1 (bits 2-3) of a 4-bit index */
static const float TAB_F0[16] = {-1, 0, 1, 0, -1, 0, 1, 0, -1, 0, 1, 0, -1, 0, 1, 0};
static const float TAB_F1[16] = {-1, -1, -1, -1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0};

ALWAYS_INLINE void f32_row(const TernaryMatrix *W, int64_t r, const float *const *xp,
                           float *const *yo, const int TB) {
    const int64_t cols = W->cols, gc = W->group_cols, nb = tern_row_blocks(cols);
    const uint8_t *row = W->codes + r * W->row_bytes;
    const float *sc = W->scales + r * W->scale_stride;
    const __m512 tab0 = _mm512_loadu_ps(TAB_F0), tab1 = _mm512_loadu_ps(TAB_F1);
    const int whole = gc % TERN_BLOCK == 0 || W->n_groups == 1;
    __m512 A[2][8], F[2];
    #pragma GCC unroll 16
    for (int tb = 0; tb < TB; tb++) {
        F[tb] = _mm512_setzero_ps();
        #pragma GCC unroll 16
        for (int j = 0; j < 8; j++) A[tb][j] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + b * TERN_BLOCK_BYTES;
        #pragma GCC unroll 16
        for (int s = 0; s < 4; s++) {
            __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + 16 * s)));
            __m512i v4 = _mm512_srli_epi32(v, 4);
            __m512 w0 = _mm512_permutexvar_ps(v, tab0);  /* columns      16s.. */
            __m512 w1 = _mm512_permutexvar_ps(v, tab1);  /* columns 64 + 16s.. */
            __m512 w2 = _mm512_permutexvar_ps(v4, tab0); /* columns 128 + 16s.. */
            __m512 w3 = _mm512_permutexvar_ps(v4, tab1); /* columns 192 + 16s.. */
            const int h = s >> 1;
            #pragma GCC unroll 16
            for (int tb = 0; tb < TB; tb++) {
                const float *xb = xp[tb] + b * TERN_BLOCK + 16 * s;
                A[tb][0 + h] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xb), A[tb][0 + h]);
                A[tb][2 + h] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xb + 64), A[tb][2 + h]);
                A[tb][4 + h] = _mm512_fmadd_ps(w2, _mm512_loadu_ps(xb + 128), A[tb][4 + h]);
                A[tb][6 + h] = _mm512_fmadd_ps(w3, _mm512_loadu_ps(xb + 192), A[tb][6 + h]);
            }
        }
        if (whole) {
            if (b == nb - 1 || ((b + 1) * TERN_BLOCK) % gc == 0) {
                __m512 s = _mm512_set1_ps(sc[(b * TERN_BLOCK) / gc]);
                #pragma GCC unroll 16
                for (int tb = 0; tb < TB; tb++) {
                    __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(A[tb][0], A[tb][1]),
                                                           _mm512_add_ps(A[tb][2], A[tb][3])),
                                             _mm512_add_ps(_mm512_add_ps(A[tb][4], A[tb][5]),
                                                           _mm512_add_ps(A[tb][6], A[tb][7])));
                    F[tb] = _mm512_fmadd_ps(t, s, F[tb]);
                    #pragma GCC unroll 16
                    for (int j = 0; j < 8; j++) A[tb][j] = _mm512_setzero_ps();
                }
            }
        } else {
            /* A[.][2i+h] holds columns b*256 + 64i + 32h + [0, 32) */
            #pragma GCC unroll 16
            for (int j = 0; j < 8; j++) {
                int64_t col = b * TERN_BLOCK + (j >> 1) * TERN_LANE + (j & 1) * 32;
                if (col >= cols) break;
                __m512 s = _mm512_set1_ps(sc[col / gc]);
                #pragma GCC unroll 16
                for (int tb = 0; tb < TB; tb++) {
                    F[tb] = _mm512_fmadd_ps(A[tb][j], s, F[tb]);
                    A[tb][j] = _mm512_setzero_ps();
                }
            }
        }
    }
    #pragma GCC unroll 16
    for (int tb = 0; tb < TB; tb++) *yo[tb] = _mm512_reduce_add_ps(F[tb]);
}

/* n = 1 with groups of whole blocks (tensor, row, 256): four rows share each
 * activation load, so the activations (57 KB at 14336 columns, more than L1)
 * are streamed from L2 once per four rows instead of once per row. */
ALWAYS_INLINE void f32_rows4(const TernaryMatrix *W, int64_t r0, const float *xp, float *yo) {
    const int64_t gc = W->group_cols, nb = tern_row_blocks(W->cols);
    const __m512 tab0 = _mm512_loadu_ps(TAB_F0), tab1 = _mm512_loadu_ps(TAB_F1);
    const uint8_t *rowp[4];
    const float *scp[4];
    __m512 A[4][2], F[4];
    #pragma GCC unroll 16
    for (int j = 0; j < 4; j++) {
        rowp[j] = W->codes + (r0 + j) * W->row_bytes;
        scp[j] = W->scales + (r0 + j) * W->scale_stride;
        A[j][0] = A[j][1] = F[j] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        #pragma GCC unroll 16
        for (int s = 0; s < 4; s++) {
            const float *xb = xp + b * TERN_BLOCK + 16 * s;
            __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 64);
            __m512 x2 = _mm512_loadu_ps(xb + 128), x3 = _mm512_loadu_ps(xb + 192);
            #pragma GCC unroll 16
            for (int j = 0; j < 4; j++) {
                __m512i v = _mm512_cvtepu8_epi32(
                    _mm_load_si128((const __m128i *)(rowp[j] + b * TERN_BLOCK_BYTES + 16 * s)));
                __m512i v4 = _mm512_srli_epi32(v, 4);
                A[j][0] = _mm512_fmadd_ps(_mm512_permutexvar_ps(v, tab0), x0, A[j][0]);
                A[j][1] = _mm512_fmadd_ps(_mm512_permutexvar_ps(v, tab1), x1, A[j][1]);
                A[j][0] = _mm512_fmadd_ps(_mm512_permutexvar_ps(v4, tab0), x2, A[j][0]);
                A[j][1] = _mm512_fmadd_ps(_mm512_permutexvar_ps(v4, tab1), x3, A[j][1]);
            }
        }
        if (b == nb - 1 || ((b + 1) * TERN_BLOCK) % gc == 0) {
            #pragma GCC unroll 16
            for (int j = 0; j < 4; j++) {
                __m512 sv = _mm512_set1_ps(scp[j][(b * TERN_BLOCK) / gc]);
                F[j] = _mm512_fmadd_ps(_mm512_add_ps(A[j][0], A[j][1]), sv, F[j]);
                A[j][0] = A[j][1] = _mm512_setzero_ps();
            }
        }
    }
    #pragma GCC unroll 16
    for (int j = 0; j < 4; j++) yo[j] = _mm512_reduce_add_ps(F[j]);
}

/* f32 GEMM for many tokens: W is decoded, a 32-row x 256-column panel at a
 * time, into floats q*scale laid out k-major (P[k][32 rows], 32 KB, L1), and
 * a register-blocked kernel computes 32 rows x TBN tokens with one FMA per
 * (token, k) against a broadcast activation.  Column chunks run in the outer
 * loop so each chunk of activations (n x 256 floats) stays in L2 while the
 * threads sweep their rows; y accumulates across chunks.  No padded copy of
 * x is needed: only columns < cols are read. */
#define GEMM_MIN_N 48
#define GEMM_KC 256
#define GEMM_TB 12

/* xk: activations packed k-major, xk[k*GEMM_TB + t] (packing avoids the
 * 4 KB-aliasing of TBN rows of x that are a multiple of 4 KB apart). */
ALWAYS_INLINE void gemm_tile(const float *P, int64_t kc, const float *xk,
                             float *y, int64_t ldy, __mmask16 m0, __mmask16 m1, int first,
                             const int TBN) {
    __m512 a0[GEMM_TB], a1[GEMM_TB]; /* rows r0..r0+15 and r0+16..r0+31 */
#pragma GCC unroll 16
    for (int t = 0; t < TBN; t++) a0[t] = a1[t] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m512 w0 = _mm512_load_ps(P + k * 32), w1 = _mm512_load_ps(P + k * 32 + 16);
#pragma GCC unroll 16
        for (int t = 0; t < TBN; t++) {
            __m512 xb = _mm512_set1_ps(xk[k * GEMM_TB + t]);
            a0[t] = _mm512_fmadd_ps(xb, w0, a0[t]);
            a1[t] = _mm512_fmadd_ps(xb, w1, a1[t]);
        }
    }
#pragma GCC unroll 16
    for (int t = 0; t < TBN; t++) {
        float *yt = y + t * ldy;
        if (!first) {
            a0[t] = _mm512_add_ps(a0[t], _mm512_maskz_loadu_ps(m0, yt));
            a1[t] = _mm512_add_ps(a1[t], _mm512_maskz_loadu_ps(m1, yt + 16));
        }
        _mm512_mask_storeu_ps(yt, m0, a0[t]);
        _mm512_mask_storeu_ps(yt + 16, m1, a1[t]);
    }
}

static void gemm_tile_n(const float *P, int64_t kc, const float *xk, float *y, int64_t ldy,
                        __mmask16 m0, __mmask16 m1, int first, int tbn) {
    switch (tbn) {
#define GT(N) case N: gemm_tile(P, kc, xk, y, ldy, m0, m1, first, N); break;
        GT(12) GT(11) GT(10) GT(9) GT(8) GT(7) GT(6) GT(5) GT(4) GT(3) GT(2) GT(1)
#undef GT
    default: break;
    }
}

static int f32_gemm(const TernaryMatrix *W, const float *x, int64_t n, float *y) {
    const int64_t rows = W->rows, cols = W->cols, gc = W->group_cols;
    const int64_t nrb = (rows + 31) / 32, ntg = (n + GEMM_TB - 1) / GEMM_TB;
    int failed = 0;
    float *xk = mem_alloc((size_t)(ntg * GEMM_KC * GEMM_TB) * sizeof(float), "packed activations");
    if (!xk) return -1;
    for (int64_t k0 = 0; k0 < cols; k0 += GEMM_KC) {
        const int64_t kc = cols - k0 < GEMM_KC ? cols - k0 : GEMM_KC;
        /* xk[tg][k][u] = x[tg*GEMM_TB + u][k0 + k], zero past n */
#pragma omp parallel for schedule(static) if ((double)n * rows * cols > TERN_PAR_MIN_WORK)
        for (int64_t tg = 0; tg < ntg; tg++)
            for (int u = 0; u < GEMM_TB; u++) {
                int64_t t = tg * GEMM_TB + u;
                float *d = xk + tg * GEMM_KC * GEMM_TB + u;
                for (int64_t k = 0; k < kc; k++) d[k * GEMM_TB] = t < n ? x[t * cols + k0 + k] : 0.0f;
            }
        const uint8_t *blk0 = W->codes + (k0 / TERN_BLOCK) * TERN_BLOCK_BYTES;
#pragma omp parallel if ((double)n * rows * cols > TERN_PAR_MIN_WORK)
        {
            float *P = mem_alloc(GEMM_KC * 32 * sizeof(float), "f32 gemm panel");
            if (!P) {
#pragma omp atomic write
                failed = 1;
            }
#pragma omp for schedule(static)
            for (int64_t rb = 0; rb < nrb; rb++) {
                if (!P) continue;
                const int64_t r0 = rb * 32, nr = rows - r0 < 32 ? rows - r0 : 32;
                /* decode the panel: P[k][j] = q(r0+j, k0+k) * scale */
                for (int j = 0; j < 32; j++) {
                    if (j >= nr) {
                        for (int64_t k = 0; k < kc; k++) P[k * 32 + j] = 0.0f;
                        continue;
                    }
                    const uint8_t *bp = blk0 + (r0 + j) * W->row_bytes;
                    const float *sc = W->scales + (r0 + j) * W->scale_stride;
                    /* 32-column segments share a scale (groups are >= 32 columns) */
                    for (int64_t k = 0; k < kc; k += 32) {
                        const float s = sc[(k0 + k) / gc];
                        const float val[4] = {-s, 0.0f, s, 0.0f};
                        const int sh = (int)(2 * (k / TERN_LANE));
                        const int64_t e = kc - k < 32 ? kc - k : 32;
                        const uint8_t *bb = bp + k % TERN_LANE;
                        for (int64_t u = 0; u < e; u++) P[(k + u) * 32 + j] = val[(bb[u] >> sh) & 3];
                    }
                }
                const uint32_t bits = nr == 32 ? 0xffffffffu : (1u << nr) - 1;
                const __mmask16 m0 = (__mmask16)(bits & 0xffff), m1 = (__mmask16)(bits >> 16);
                for (int64_t t = 0; t < n; t += GEMM_TB) {
                    int tbn = (int)(n - t < GEMM_TB ? n - t : GEMM_TB);
                    gemm_tile_n(P, kc, xk + (t / GEMM_TB) * GEMM_KC * GEMM_TB, y + t * rows + r0,
                                rows, m0, m1, k0 == 0, tbn);
                }
            }
            mem_free(P);
        }
        if (failed) {
            mem_free(xk);
            return err_set("tern_matmul_f32_avx512: out of memory for a panel");
        }
    }
    mem_free(xk);
    return 0;
}

int tern_matmul_f32_avx512(const TernaryMatrix *W, const float *x, int64_t n, float *y) {
    if (tern_check_args(W, x, n, y, "tern_matmul_f32_avx512") < 0) return -1;
    if (n == 0) return 0;
    if (n >= GEMM_MIN_N) return f32_gemm(W, x, n, y);
    const int64_t rows = W->rows, pc = tern_row_blocks(W->cols) * TERN_BLOCK;
    void *owned;
    const float *xp = tern_pad_act(x, n, W->cols, sizeof(float), &owned);
    if (!xp) return -1;
    const int whole = W->group_cols % TERN_BLOCK == 0 || W->n_groups == 1;
    if (n == 1 && whole && rows >= 4) {
        const int64_t r4 = rows / 4;
#pragma omp parallel for schedule(static) if ((double)rows * W->cols > TERN_PAR_MIN_WORK)
        for (int64_t i = 0; i < r4; i++) f32_rows4(W, 4 * i, xp, y + 4 * i);
        for (int64_t r = 4 * r4; r < rows; r++) { /* the last rows % 4 */
            const float *xv[1] = {xp};
            float *yv[1] = {y + r};
            f32_row(W, r, xv, yv, 1);
        }
        mem_free(owned);
        return 0;
    }
    for (int64_t t0 = 0; t0 < n; t0 += TILE_T) {
        int64_t nt = n - t0 < TILE_T ? n - t0 : TILE_T;
#pragma omp parallel for schedule(static) if ((double)nt * rows * W->cols > TERN_PAR_MIN_WORK)
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t t = t0; t < t0 + nt; t += 2) {
                const int two = t + 1 < t0 + nt;
                const float *xv[2] = {xp + t * pc, xp + (two ? t + 1 : t) * pc};
                float *yv[2] = {y + t * rows + r, y + (two ? t + 1 : t) * rows + r};
                if (two) f32_row(W, r, xv, yv, 2);
                else f32_row(W, r, xv, yv, 1);
            }
        }
    }
    mem_free(owned);
    return 0;
}
