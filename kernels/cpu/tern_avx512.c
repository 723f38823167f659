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
 * Paths by batch (details at each):
 *   int8 n = 1, whole-block groups: i8_gemv (4 rows share activation loads,
 *     fields by vpand with a mask per field, one accumulator per field;
 *     row chunks handed out by a shared counter).
 *   int8 n >= 8 (>= 4 on rows of <= 4 blocks): i8_gemm, 32-row panels of
 *     signed q x 12-token tiles, no horizontal reductions.
 *   int8 otherwise: i8_row, TB = 4 tokens per pass over a row, token tiles
 *     of TILE_T tokens, column chunks, OpenMP over row blocks.
 *   f32 n >= 4, one scale per row (tensor, row, or equal group scales
 *     within each row): table lookup GEMM,
 *     tern_lut_avx512.c (vpermps on sign-folded 14-entry tables of the
 *     partial sums of column triples).
 *   f32 n >= 4, groups of 32..256 columns: f32_gemm (decoded float panels,
 *     32 x 12 register tile).
 *   f32 n < 4: f32_rows4 (n = 1) / f32_row (TB = 2). */
#include "cpu/tern_kernels.h"

#include "core/err.h"
#include "core/mem.h"
#include "ternary_format.h"

#include <immintrin.h>
#include <omp.h>

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

/* ------------------------------------------------------------ int8 GEMM */

/* int8 GEMM for many tokens (n >= I8_GEMM_MIN_N), the shape of prefill and of
 * a ppl run (n = 2048 tokens per call).  The GEMV-style path above reduces
 * every (row, token) dot horizontally, which at 256 columns costs more than
 * the four vpdpbusd of the dot itself; here the lanes of an accumulator are
 * 16 rows, so nothing is reduced horizontally:
 *
 *   panel P (per worker, L2): rows r0..r0+31 decoded to signed q, four
 *     consecutive columns per dword, k-major: P[m*32 + j] = q(r0+j, 4m..4m+3)
 *   activations xk (per call): xq ^ 0x80 = xq + 128 as unsigned bytes,
 *     packed per 12-token tile k-major (xk[m][12 tokens] dwords of 4
 *     columns), padded with 0x80 (x = 0)
 *   tile: 32 rows x TB tokens, acc[token] += vpdpbusd(bcast xk[m][token],
 *     P[m]): sum (x+128)*q = sum x*q + 128*sum q, and C = 128*sum q per row
 *     and group comes from the panel (vpdpbusd against 0x80 bytes), so
 *     D = acc - C is exact and the float combination over groups runs in
 *     group order exactly as tern_matmul_i8_ref: bit-identical.
 *
 * One group per row (tensor, row): TB = 12 tokens, 24 accumulators.  Groups
 * of 32..256 columns: TB = 6 (24 int + float accumulators); the group
 * epilogue (sub, convert, mul, add) then costs up to half the dots at
 * group 32.  Work items are (panel, token chunk) pairs over OpenMP threads;
 * a panel (32 x cols bytes, 448 KB at 14336 columns) stays in L2 while all
 * token tiles of its chunk stream through.
 * History (fixture shapes, n = 2048, vs OpenBLAS sgemm in the same run):
 *   v1 i8_row for every n: 15-60 GOP/s, 0.25-1.2x OpenBLAS (a horizontal
 *      reduction per row and token every 16 blocks, i.e. every block at 256
 *      columns; per-call mallocs).
 *   v2 this GEMM, scatter decode: ~230 GOP/s, 1.8-3.6x; n = 8 at 4096 x 14336
 *      was 8x slower than i8_row (the scatter decode).
 *   v3 gather decode (four quads per gather): n = 8 at 4096 x 14336 within
 *      20% of i8_row.
 *   v4 x packed per tile (one broadcast pointer) and vpdpbusd through inline
 *      asm (dpbusd_ip): GCC 12 had wrapped every dot in two register moves;
 *      2x, ~500 GOP/s on one core (256 x 768, n = 2048). */
/* GEMM from 8 tokens, or from 4 when rows are short (<= 4 blocks): the
 * GEMV-style path reuses each decoded block for 4 tokens only but decodes
 * nothing up front.  4096 x 14336, one core: n = 4: 1.9 ms (i8_row) vs 4 ms
 * (GEMM); n = 8: 10.6 vs 4.2-8 ms. */
#define I8_GEMM_MIN_N 8
#define I8_GEMM_MIN_N_SHORT 4
#define IG_R 32 /* rows per panel: two zmm of 16 rows */
#define IG_T 12 /* most tokens per tile */

/* vpdpbusd in place.  GCC 12 copies the accumulator around every
 * _mm512_dpbusd_epi32 in unrolled tiles (a move in and out per dot: about
 * as many vmovdqa as vpdpbusd); the asm form keeps it in its register. */
ALWAYS_INLINE __m512i dpbusd_ip(__m512i acc, __m512i u8, __m512i s8) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
    return acc;
}

/* One group per row: rows of the panel x TB tokens over quads [0, nq). */
ALWAYS_INLINE void ig_tile1(const int32_t *P, int64_t nq, const int32_t *xt,
                            const int32_t *C, const float *S, const float *sxt, float *yt,
                            int64_t ldy, __mmask16 m0, __mmask16 m1, const int TB) {
    __m512i a0[IG_T], a1[IG_T];
#pragma GCC unroll 16
    for (int u = 0; u < TB; u++) a0[u] = a1[u] = _mm512_setzero_si512();
    for (int64_t m = 0; m < nq; m++) {
        const __m512i w0 = _mm512_load_si512((const void *)(P + m * IG_R));
        const __m512i w1 = _mm512_load_si512((const void *)(P + m * IG_R + 16));
        const int32_t *xm = xt + m * IG_T;
#pragma GCC unroll 16
        for (int u = 0; u < TB; u++) {
            const __m512i xb = _mm512_set1_epi32(xm[u]);
            a0[u] = dpbusd_ip(a0[u], xb, w0);
            a1[u] = dpbusd_ip(a1[u], xb, w1);
        }
    }
    const __m512i c0 = _mm512_load_si512((const void *)C), c1 = _mm512_load_si512((const void *)(C + 16));
    const __m512 s0 = _mm512_load_ps(S), s1 = _mm512_load_ps(S + 16), z = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int u = 0; u < TB; u++) {
        /* ref: acc = 0.0f; acc += s * (float)D; y = acc / sx (0 + keeps -0 -> +0) */
        const __m512 d = _mm512_set1_ps(sxt[u]);
        __m512 f0 = _mm512_add_ps(z, _mm512_mul_ps(s0, _mm512_cvtepi32_ps(_mm512_sub_epi32(a0[u], c0))));
        __m512 f1 = _mm512_add_ps(z, _mm512_mul_ps(s1, _mm512_cvtepi32_ps(_mm512_sub_epi32(a1[u], c1))));
        _mm512_mask_storeu_ps(yt + u * ldy, m0, _mm512_div_ps(f0, d));
        _mm512_mask_storeu_ps(yt + u * ldy + 16, m1, _mm512_div_ps(f1, d));
    }
}

/* Several groups per row: group g covers quads [g*gq, min((g+1)*gq, nq)). */
ALWAYS_INLINE void ig_tileg(const int32_t *P, int64_t nq, int64_t gq, int64_t ng,
                            const int32_t *xt, const int32_t *C, const float *S,
                            const float *sxt, float *yt, int64_t ldy, __mmask16 m0,
                            __mmask16 m1, const int TB) {
    __m512 f0[IG_T / 2], f1[IG_T / 2];
#pragma GCC unroll 16
    for (int u = 0; u < TB; u++) f0[u] = f1[u] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        __m512i a0[IG_T / 2], a1[IG_T / 2];
#pragma GCC unroll 16
        for (int u = 0; u < TB; u++) a0[u] = a1[u] = _mm512_setzero_si512();
        const int64_t q1 = (g + 1) * gq < nq ? (g + 1) * gq : nq;
        for (int64_t m = g * gq; m < q1; m++) {
            const __m512i w0 = _mm512_load_si512((const void *)(P + m * IG_R));
            const __m512i w1 = _mm512_load_si512((const void *)(P + m * IG_R + 16));
            const int32_t *xm = xt + m * IG_T;
#pragma GCC unroll 16
            for (int u = 0; u < TB; u++) {
                const __m512i xb = _mm512_set1_epi32(xm[u]);
                a0[u] = dpbusd_ip(a0[u], xb, w0);
                a1[u] = dpbusd_ip(a1[u], xb, w1);
            }
        }
        const __m512i c0 = _mm512_load_si512((const void *)(C + g * IG_R));
        const __m512i c1 = _mm512_load_si512((const void *)(C + g * IG_R + 16));
        const __m512 s0 = _mm512_load_ps(S + g * IG_R), s1 = _mm512_load_ps(S + g * IG_R + 16);
#pragma GCC unroll 16
        for (int u = 0; u < TB; u++) {
            f0[u] = _mm512_add_ps(f0[u], _mm512_mul_ps(s0, _mm512_cvtepi32_ps(_mm512_sub_epi32(a0[u], c0))));
            f1[u] = _mm512_add_ps(f1[u], _mm512_mul_ps(s1, _mm512_cvtepi32_ps(_mm512_sub_epi32(a1[u], c1))));
        }
    }
#pragma GCC unroll 16
    for (int u = 0; u < TB; u++) {
        const __m512 d = _mm512_set1_ps(sxt[u]);
        _mm512_mask_storeu_ps(yt + u * ldy, m0, _mm512_div_ps(f0[u], d));
        _mm512_mask_storeu_ps(yt + u * ldy + 16, m1, _mm512_div_ps(f1[u], d));
    }
}

typedef struct {
    const int32_t *P, *C;
    const float *S;
    int64_t nq, gq, ng, ldy;
    __mmask16 m0, m1;
} IgPanel;

/* Tokens [t0, t0+tbn) of the panel, tbn <= IG_T; xt: their packed tile. */
static void ig_tile(const IgPanel *pn, const int32_t *xt, const float *sxt, float *yt, int tbn) {
#define T1(N) ig_tile1(pn->P, pn->nq, xt, pn->C, pn->S, sxt, yt, pn->ldy, pn->m0, pn->m1, N)
#define TG(N) ig_tileg(pn->P, pn->nq, pn->gq, pn->ng, xt + u0, pn->C, pn->S, sxt + u0, yt + u0 * pn->ldy, pn->ldy, pn->m0, pn->m1, N)
    if (pn->ng == 1) {
        switch (tbn) {
        case 12: T1(12); break; case 11: T1(11); break; case 10: T1(10); break;
        case 9: T1(9); break;   case 8: T1(8); break;   case 7: T1(7); break;
        case 6: T1(6); break;   case 5: T1(5); break;   case 4: T1(4); break;
        case 3: T1(3); break;   case 2: T1(2); break;   default: T1(1); break;
        }
        return;
    }
    for (int u0 = 0; u0 < tbn; u0 += IG_T / 2) {
        const int k = tbn - u0 < IG_T / 2 ? tbn - u0 : IG_T / 2;
        switch (k) {
        case 6: TG(6); break; case 5: TG(5); break; case 4: TG(4); break;
        case 3: TG(3); break; case 2: TG(2); break; default: TG(1); break;
        }
    }
#undef T1
#undef TG
}

/* Packs the activations of token tile tt: xk[m*IG_T + u] = bytes 4m..4m+3 of
 * token tt*IG_T + u, plus 128 (xor 0x80), for m < nq4 (a multiple of 4);
 * bytes past cols and tokens past n are 0x80 (x = 0).  4x4 dword transposes
 * of 16-byte loads, so the tile kernel broadcasts from one pointer. */
static void ig_pack_x(const int8_t *xq, int64_t n, int64_t cols, int64_t tt, int64_t nq4,
                      int32_t *xk) {
    const __m128i k80 = _mm_set1_epi8((char)0x80);
    for (int u0 = 0; u0 < IG_T; u0 += 4)
        for (int64_t m = 0; m < nq4; m += 4) {
            __m128 v[4];
            const int64_t left = cols - 4 * m;
            const __mmask16 mk = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
            for (int r = 0; r < 4; r++) {
                const int64_t t = tt * IG_T + u0 + r;
                __m128i b = t < n ? _mm_maskz_loadu_epi8(mk, xq + t * cols + 4 * m) : _mm_setzero_si128();
                v[r] = _mm_castsi128_ps(_mm_xor_si128(b, k80));
            }
            _MM_TRANSPOSE4_PS(v[0], v[1], v[2], v[3]);
            for (int i = 0; i < 4; i++) _mm_storeu_ps((float *)(xk + (m + i) * IG_T + u0), v[i]);
        }
}

/* Decodes rows [r0, r0+nr) into P (nb*64 quads x 32 rows; rows >= nr are
 * zero weights), S[g*32 + j] = scale of (r0+j, g) and C[g*32 + j] = 128 *
 * sum of q over the quads of group g.  One dword gather per 16 rows fetches
 * bytes 4j..4j+3 of each row's block = columns 64i + 4j..4j+3 in field i,
 * i.e. quad 16i + j: four quads per gather, two ops each, no transpose. */
static void ig_decode(const TernaryMatrix *W, int64_t r0, int nr, int64_t nq, int64_t gq,
                      int32_t *P, int32_t *C, float *S) {
    const int64_t nb = tern_row_blocks(W->cols), ng = W->n_groups;
    const __m512i m3 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const uint8_t *base = W->codes + r0 * W->row_bytes;
    for (int h = 0; h < 2; h++) {
        const __mmask16 live = (__mmask16)(h * 16 >= nr ? 0 : nr - h * 16 >= 16 ? 0xffff : (1u << (nr - h * 16)) - 1);
        const __m512i rix = _mm512_add_epi32(lane, _mm512_set1_epi32(h * 16));
        const __m512i off = _mm512_mullo_epi32(rix, _mm512_set1_epi32((int)W->row_bytes));
        for (int64_t b = 0; b < nb; b++) {
            const __m512i ob = _mm512_add_epi32(off, _mm512_set1_epi32((int)(b * TERN_BLOCK_BYTES)));
            int32_t *pb = P + b * 64 * IG_R + 16 * h;
            for (int j = 0; j < 16; j++) {
                /* dead rows gather nothing: 0 bytes -> q = -1, zeroed below */
                const __m512i g4 = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live,
                                                               _mm512_add_epi32(ob, _mm512_set1_epi32(4 * j)), base, 1);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) {
                    __m512i q = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi32(g4, 2 * i), m3), one);
                    _mm512_store_si512((void *)(pb + (16 * i + j) * IG_R), _mm512_maskz_mov_epi32(live, q));
                }
            }
        }
    }
    for (int j = 0; j < IG_R; j++)
        for (int64_t g = 0; g < ng; g++)
            S[g * IG_R + j] = j < nr ? W->scales[(r0 + j) * W->scale_stride + g] : 0.0f;
    const __m512i k80 = _mm512_set1_epi8((char)0x80);
    for (int64_t g = 0; g < ng; g++) {
        __m512i c0 = _mm512_setzero_si512(), c1 = _mm512_setzero_si512();
        const int64_t q1 = (g + 1) * gq < nq ? (g + 1) * gq : nq;
        for (int64_t m = g * gq; m < q1; m++) {
            c0 = _mm512_dpbusd_epi32(c0, k80, _mm512_load_si512((const void *)(P + m * IG_R)));
            c1 = _mm512_dpbusd_epi32(c1, k80, _mm512_load_si512((const void *)(P + m * IG_R + 16)));
        }
        _mm512_store_si512((void *)(C + g * IG_R), c0);
        _mm512_store_si512((void *)(C + g * IG_R + 16), c1);
    }
}

static int i8_gemm(const TernaryMatrix *W, const int8_t *xq, const float *sx, int64_t n, float *y) {
    const int64_t rows = W->rows, cols = W->cols, nb = tern_row_blocks(cols), ng = W->n_groups;
    const int64_t nq = (cols + 3) / 4;  /* quads holding real columns */
    const int64_t nq4 = (nq + 3) & ~(int64_t)3;
    const int64_t gq = ng == 1 ? nq : W->group_cols / 4;
    if (ng > 1 && W->group_cols % 4)
        return err_set("tern_matmul_i8_avx512: group of %lld columns is not a multiple of 4",
                       (long long)W->group_cols);
    const int64_t nrp = (rows + IG_R - 1) / IG_R, ntiles = (n + IG_T - 1) / IG_T;
    int32_t *xk = tern_scratch(TERN_SCRATCH_ACT, (size_t)(ntiles * nq4 * IG_T) * 4,
                               "int8 GEMM activations");
    if (!xk) return -1;
    const int par = tern_par((double)n * rows * cols, TERN_PAR_WORK_I8_GEMM);
    const int nth = par ? omp_get_max_threads() : 1;
    /* enough work items for dynamic balance on few panels (rows 128: 4 panels) */
    int64_t ntc = nrp >= 4 * nth ? 1 : (4 * nth + nrp - 1) / nrp;
    if (ntc > ntiles) ntc = ntiles;
    const int64_t items = nrp * ntc;
    int failed = 0;
#pragma omp parallel if (par)
    {
#pragma omp for schedule(static)
        for (int64_t tt = 0; tt < ntiles; tt++) ig_pack_x(xq, n, cols, tt, nq4, xk + tt * nq4 * IG_T);
        int32_t *P = tern_scratch(TERN_SCRATCH_PANEL, (size_t)(nb * 64 * IG_R) * 4, "int8 GEMM panel");
        int32_t *C = tern_scratch(TERN_SCRATCH_PANEL2, (size_t)(ng * IG_R) * 8, "int8 GEMM panel scales");
        if (!P || !C) {
#pragma omp atomic write
            failed = 1;
        }
        IgPanel pn = {P, C, (const float *)(C + ng * IG_R), nq, gq, ng, rows, 0, 0};
        int64_t have = -1; /* panel decoded in P */
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; it++) {
            if (!P || !C) continue;
            const int64_t rp = it / ntc, tc = it % ntc, r0 = rp * IG_R;
            const int nr = (int)(rows - r0 < IG_R ? rows - r0 : IG_R);
            if (rp != have) {
                ig_decode(W, r0, nr, nq, gq, P, C, (float *)(C + ng * IG_R));
                have = rp;
            }
            const uint32_t bits = nr == 32 ? 0xffffffffu : (1u << nr) - 1;
            pn.m0 = (__mmask16)(bits & 0xffff), pn.m1 = (__mmask16)(bits >> 16);
            for (int64_t ti = tc * ntiles / ntc; ti < (tc + 1) * ntiles / ntc; ti++) {
                const int64_t t0 = ti * IG_T;
                const int tbn = (int)(n - t0 < IG_T ? n - t0 : IG_T);
                ig_tile(&pn, xk + ti * nq4 * IG_T, sx + t0, y + t0 * rows + r0, tbn);
            }
        }
    }
    return failed ? err_set("tern_matmul_i8_avx512: out of memory for a panel") : 0;
}

/* ------------------------------------------------------------ int8 GEMV */

/* n = 1 (decode) with groups of whole blocks (tensor, row, 256).
 * Per 64-byte block and row: four vpand with the field masks 0x03, 0x0c,
 * 0x30, 0xc0 leave 4^i * c_i in the bytes of field i, and four vpdpbusd
 * against the activations of that field go to one accumulator per field:
 * A_i = 4^i * sum c*x.  At the end of a group the fields are combined with
 * exact arithmetic shifts (every lane of A_i is a multiple of 4^i), so the
 * integer dot per group is exact and the float sum over groups runs in group
 * order from 0.0f as in the reference: bit-identical.  8 vector uops per
 * row-block, all on ports 0/5 (vpdpbusd zmm issues on both: ~1.9 per cycle
 * measured), instead of 9 with shift/vpermb decoding, and no shift on port 0.
 * Four rows share each activation load (16 accumulators, 4 activation and 4
 * mask registers).  A lane of A_3 grows by at most 4*192*128 per block, so
 * the accumulators are folded every GEMV_FOLD blocks (no int32 overflow for
 * any row length).  xp: activations padded to whole blocks; xs: sum of xp per
 * group.
 * History (4096 x 14336, n = 1, calls back to back, 2 threads):
 *   v1 field 0 by vpand, 1-2 by vpermb, 3 by shift; each thread a fixed half
 *      of the rows: 0.40-0.49 ms median.
 *   v2 this (vpand per field, rows handed out in chunks): 0.39-0.45 ms,
 *      1.04-1.09x v1 interleaved; with a 2 ms gap between calls (the other
 *      thread asleep) 0.44-0.46 vs 0.55-0.56 ms.  Right after an OpenBLAS
 *      call (the bench's rotation) both take 0.7-1.7 ms: the pthread
 *      OpenBLAS worker spins in sched_yield for ~0.1 s after each call and
 *      shares a core with ours, and a 235 MB sgemv evicts the codes from
 *      L3; with OPENBLAS_THREAD_TIMEOUT=4 in the environment 0.75 ms. */
#define GEMV_FOLD 4096

ALWAYS_INLINE void i8_rows4(const TernaryMatrix *W, int64_t r0, const int8_t *xp,
                            const int32_t *xs, float sxv, float *yo, const int NR) {
    const int64_t nb = tern_row_blocks(W->cols);
    const int64_t gb = W->n_groups == 1 ? nb : W->group_cols / TERN_BLOCK; /* blocks per group */
    const __m512i m0 = _mm512_set1_epi8(0x03), m1 = _mm512_set1_epi8(0x0c);
    const __m512i m2 = _mm512_set1_epi8(0x30), m3 = _mm512_set1_epi8((char)0xc0);
    const uint8_t *rowp[4];
    const float *scp[4];
    float acc[4];
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++) {
        rowp[j] = W->codes + (r0 + j) * W->row_bytes;
        scp[j] = W->scales + (r0 + j) * W->scale_stride;
        acc[j] = 0.0f;
    }
    for (int64_t b0 = 0, g = 0; b0 < nb; b0 += gb, g++) {
        const int64_t b1 = b0 + gb < nb ? b0 + gb : nb;
        __m512i T[4];
#pragma GCC unroll 4
        for (int j = 0; j < NR; j++) T[j] = _mm512_setzero_si512();
        for (int64_t f0 = b0; f0 < b1; f0 += GEMV_FOLD) {
            const int64_t f1 = f0 + GEMV_FOLD < b1 ? f0 + GEMV_FOLD : b1;
            __m512i A[4][4];
#pragma GCC unroll 4
            for (int j = 0; j < NR; j++) A[j][0] = A[j][1] = A[j][2] = A[j][3] = _mm512_setzero_si512();
            for (int64_t b = f0; b < f1; b++) {
                const int8_t *xb = xp + b * TERN_BLOCK;
                const __m512i x0 = _mm512_load_si512((const void *)xb), x1 = _mm512_load_si512((const void *)(xb + 64));
                const __m512i x2 = _mm512_load_si512((const void *)(xb + 128)), x3 = _mm512_load_si512((const void *)(xb + 192));
#pragma GCC unroll 4
                for (int j = 0; j < NR; j++) {
                    const __m512i v = _mm512_load_si512((const void *)(rowp[j] + b * TERN_BLOCK_BYTES));
                    A[j][0] = dpbusd_ip(A[j][0], _mm512_and_si512(v, m0), x0);
                    A[j][1] = dpbusd_ip(A[j][1], _mm512_and_si512(v, m1), x1);
                    A[j][2] = dpbusd_ip(A[j][2], _mm512_and_si512(v, m2), x2);
                    A[j][3] = dpbusd_ip(A[j][3], _mm512_and_si512(v, m3), x3);
                }
            }
#pragma GCC unroll 4
            for (int j = 0; j < NR; j++) {
                const __m512i s01 = _mm512_add_epi32(A[j][0], _mm512_srai_epi32(A[j][1], 2));
                const __m512i s23 = _mm512_add_epi32(_mm512_srai_epi32(A[j][2], 4), _mm512_srai_epi32(A[j][3], 6));
                T[j] = _mm512_add_epi32(T[j], _mm512_add_epi32(s01, s23));
            }
        }
#pragma GCC unroll 4
        for (int j = 0; j < NR; j++) {
            const int32_t d = _mm512_reduce_add_epi32(T[j]) - xs[g];
            acc[j] += scp[j][g] * (float)d;
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NR; j++) yo[j] = acc[j] / sxv;
}

/* Rows [4*q0, 4*q1), four at a time. */
static void i8_gemv_quads(const TernaryMatrix *W, int64_t q0, int64_t q1, const int8_t *xp,
                          const int32_t *xs, float sxv, float *y) {
    for (int64_t i = q0; i < q1; i++) i8_rows4(W, 4 * i, xp, xs, sxv, y + 4 * i, 4);
}

/* Threads take chunks of row quads from a shared counter instead of a fixed
 * half each.  The caller starts on the first chunk at once while the other
 * thread is still waking up (OMP_WAIT_POLICY=passive: it sleeps between
 * calls, and waking a vCPU costs tens of microseconds), and when a core is
 * shared with another busy thread (OpenBLAS workers spin with sched_yield
 * for a while after each BLAS call) the thread on the free core takes most
 * of the chunks instead of waiting at the barrier for the slow half.
 * Chunks of ~64 KB of codes: the counter costs < 1% of a chunk. */
#define GEMV_CHUNK_BYTES 65536

static int i8_gemv(const TernaryMatrix *W, const int8_t *xq, const float *sx, float *y) {
    const int64_t rows = W->rows, cols = W->cols, nb = tern_row_blocks(cols);
    const int64_t gb = W->n_groups == 1 ? nb : W->group_cols / TERN_BLOCK, ng = W->n_groups;
    int8_t *xp = tern_scratch(TERN_SCRATCH_ACT, (size_t)(nb * TERN_BLOCK), "int8 GEMV activations");
    int32_t *xs = tern_scratch(TERN_SCRATCH_AUX, (size_t)ng * sizeof(int32_t), "int8 GEMV group sums");
    if (!xp || !xs) return -1;
    /* padded copy (aligned loads; zero past cols) and per-group sums */
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t g = 0; g < ng; g++) {
        __m512i s = _mm512_setzero_si512();
        for (int64_t b = g * gb; b < (g + 1) * gb && b < nb; b++)
            for (int i = 0; i < 4; i++) {
                const int64_t k = b * TERN_BLOCK + 64 * i, left = cols - k;
                const __mmask64 mk = left >= 64 ? ~(__mmask64)0 : left <= 0 ? 0 : ((__mmask64)1 << left) - 1;
                const __m512i v = _mm512_maskz_loadu_epi8(mk, xq + k);
                _mm512_store_si512((void *)(xp + k), v);
                s = _mm512_dpbusd_epi32(s, ones, v);
            }
        xs[g] = _mm512_reduce_add_epi32(s);
    }
    const int64_t r4 = rows / 4;
    int64_t cq = GEMV_CHUNK_BYTES / (4 * W->row_bytes); /* quads per chunk */
    if (cq < 1) cq = 1;
    const int64_t nchunks = (r4 + cq - 1) / cq;
    int64_t next = 0;
    if (nchunks > 1 && tern_par((double)rows * cols, TERN_PAR_WORK)) {
#pragma omp parallel
        for (;;) {
            int64_t c;
#pragma omp atomic capture
            c = next++;
            if (c >= nchunks) break;
            const int64_t q1 = (c + 1) * cq < r4 ? (c + 1) * cq : r4;
            i8_gemv_quads(W, c * cq, q1, xp, xs, sx[0], y);
        }
    } else {
        i8_gemv_quads(W, 0, r4, xp, xs, sx[0], y);
    }
    for (int64_t r = 4 * r4; r < rows; r++) i8_rows4(W, r, xp, xs, sx[0], y + r, 1);
    return 0;
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
    if (n >= I8_GEMM_MIN_N || (n >= I8_GEMM_MIN_N_SHORT && tern_row_blocks(W->cols) <= 4))
        return i8_gemm(W, xq, sx, n, y);
    if (n == 1 && (W->n_groups == 1 || W->group_cols % TERN_BLOCK == 0)) return i8_gemv(W, xq, sx, y);
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
#pragma omp parallel for schedule(static) if (tern_par((double)nt * rows * W->cols, TERN_PAR_WORK))
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

/* f32 GEMM for many tokens with groups smaller than a row (one scale per
 * row goes to the table lookup GEMM, tern_lut_avx512.c: in `ternlab bench`
 * runs interleaved with this one, n = 512, 1.09-1.49x OpenBLAS sgemm against
 * 0.90-1.09x for this kernel).  W is decoded, a 32-row x 256-column panel at a
 * time, into floats q*scale laid out k-major (P[k][32 rows], 32 KB, L1), and
 * a register-blocked kernel computes 32 rows x TBN tokens with one FMA per
 * (token, k) against a broadcast activation; y accumulates across column
 * chunks.  No padded copy of x is needed: only columns < cols are read.
 * History (fixture shapes, n = 2048, one core of the shared 2-core box):
 *   v1 chunk-major, a parallel region per chunk for packing and one for the
 *      panels, scalar packing/decoding, malloc per call: 0.7-1.0x OpenBLAS
 *      (16% of the time in the scalar x packing, page faults from the
 *      per-call 2 MB buffer).
 *   v2 one parallel region, (panel group, token chunk) work items, 4x4
 *      transposes for packing, gather decode, per-thread scratch: 1.0-1.2x.
 * From n = 4: at n = 8 the panel decode is still a third of the time but
 * beats the per-row kernel (4096 x 14336: 12 vs 26 ms). */
#define GEMM_MIN_N 4
#define GEMM_KC 256
#define GEMM_TB 12
#define GEMM_PG 4 /* panels (of 32 rows) sharing each packed x tile */

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

/* Decodes the 256-column chunk starting at block kb of rows [r0, r0+nr) into
 * P[k*32 + j] = q(r0+j, 256kb+k) * scale (rows >= nr: scale 0).  One dword
 * gather per 16 rows brings bytes 4j..4j+3 of each row's block: 4 columns x
 * 4 fields = 16 columns, each turned into -1/0/+1 by vpermps on a 4-bit
 * index (TAB_F0 ignores bits 2-3) and multiplied by the rows' scales. */
static void f32_decode_panel(const TernaryMatrix *W, int64_t r0, int nr, int64_t kb, int64_t kc,
                             float *P) {
    const __m512 tab = _mm512_loadu_ps(TAB_F0);
    const int64_t gc = W->group_cols;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int h = 0; h < 2; h++) {
        const __mmask16 live = (__mmask16)(h * 16 >= nr ? 0 : nr - h * 16 >= 16 ? 0xffff : (1u << (nr - h * 16)) - 1);
        /* byte offsets of the 16 rows' block kb (dead rows: row r0, scale 0) */
        const __m512i rix = _mm512_mask_blend_epi32(live, _mm512_setzero_si512(),
                                                    _mm512_add_epi32(lane, _mm512_set1_epi32(h * 16)));
        const __m512i off = _mm512_add_epi32(_mm512_mullo_epi32(rix, _mm512_set1_epi32((int)W->row_bytes)),
                                             _mm512_set1_epi32((int)(kb * TERN_BLOCK_BYTES)));
        const __m512i sidx = _mm512_mullo_epi32(rix, _mm512_set1_epi32((int)W->scale_stride));
        const uint8_t *base = W->codes + r0 * W->row_bytes;
        const float *sbase = W->scales + r0 * W->scale_stride;
        __m512 sv[8]; /* scales of the 32-column segments of this chunk */
        for (int s = 0; s < 8; s++) {
            const int64_t g = (kb * TERN_BLOCK + 32 * s) / gc;
            const int64_t gl = g < W->n_groups ? g : W->n_groups - 1;
            sv[s] = _mm512_maskz_mov_ps(live, _mm512_i32gather_ps(_mm512_add_epi32(sidx, _mm512_set1_epi32((int)gl)), sbase, 4));
        }
        for (int j = 0; j < 16; j++) {
            const __m512i g4 = _mm512_i32gather_epi32(_mm512_add_epi32(off, _mm512_set1_epi32(4 * j)), base, 1);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
                for (int b = 0; b < 4; b++) {
                    const int64_t k = 64 * i + 4 * j + b;
                    if (k >= kc) continue;
                    const __m512 q = _mm512_permutexvar_ps(_mm512_srli_epi32(g4, 8 * b + 2 * i), tab);
                    _mm512_store_ps(P + k * 32 + 16 * h, _mm512_mul_ps(q, sv[k / 32]));
                }
        }
    }
}

/* xk[k*GEMM_TB + u] = x[t0+u][k0+k] for k < kc, u < GEMM_TB (0 past n):
 * 4x4 transposes of rows of x. */
static void f32_pack_x(const float *x, int64_t n, int64_t cols, int64_t t0, int64_t k0, int64_t kc,
                       float *xk) {
    for (int u0 = 0; u0 < GEMM_TB; u0 += 4) {
        if (t0 + u0 + 4 <= n) {
            const float *x0 = x + (t0 + u0) * cols + k0;
            int64_t k = 0;
            for (; k + 4 <= kc; k += 4) {
                __m128 a = _mm_loadu_ps(x0 + k), b = _mm_loadu_ps(x0 + cols + k);
                __m128 c = _mm_loadu_ps(x0 + 2 * cols + k), d = _mm_loadu_ps(x0 + 3 * cols + k);
                _MM_TRANSPOSE4_PS(a, b, c, d);
                _mm_storeu_ps(xk + k * GEMM_TB + u0, a);
                _mm_storeu_ps(xk + (k + 1) * GEMM_TB + u0, b);
                _mm_storeu_ps(xk + (k + 2) * GEMM_TB + u0, c);
                _mm_storeu_ps(xk + (k + 3) * GEMM_TB + u0, d);
            }
            for (; k < kc; k++)
                for (int u = 0; u < 4; u++) xk[k * GEMM_TB + u0 + u] = x0[u * cols + k];
        } else {
            for (int u = u0; u < u0 + 4; u++)
                for (int64_t k = 0; k < kc; k++)
                    xk[k * GEMM_TB + u] = t0 + u < n ? x[(t0 + u) * cols + k0 + k] : 0.0f;
        }
    }
}

/* f32 GEMM for many tokens.  Work items are (32-row panel, token chunk)
 * pairs, scheduled dynamically over the threads; an item walks the
 * 256-column chunks, decoding the panel chunk (32 KB, L1) and running the
 * 32 x 12 register tile over its token tiles, so its y tile (tokens x 32
 * floats) stays in L2 across chunks.  All activations are packed once per
 * call, tile-major and k-major (xk[chunk][tile][k][12]), inside the same
 * parallel region.  Buffers are per-thread scratch (no malloc per call). */
static int f32_gemm(const TernaryMatrix *W, const float *x, int64_t n, float *y) {
    const int64_t rows = W->rows, cols = W->cols, nch = tern_row_blocks(cols);
    const int64_t nrp = (rows + 31) / 32, ntg = (n + GEMM_TB - 1) / GEMM_TB;
    const int64_t ngp = (nrp + GEMM_PG - 1) / GEMM_PG; /* panel groups */
    const int64_t tstride = GEMM_KC * GEMM_TB;         /* floats per (chunk, tile) */
    float *xk = tern_scratch(TERN_SCRATCH_ACT, (size_t)(nch * ntg * tstride) * sizeof(float),
                             "f32 GEMM packed activations");
    if (!xk) return -1;
    const int par = tern_par((double)n * rows * cols, TERN_PAR_WORK);
    const int nth = par ? omp_get_max_threads() : 1;
    int64_t ntc = ngp >= 4 * nth ? 1 : (4 * nth + ngp - 1) / ngp;
    if (ntc > ntg) ntc = ntg;
    const int64_t items = ngp * ntc;
    int failed = 0;
#pragma omp parallel if (par)
    {
#pragma omp for schedule(static)
        for (int64_t ct = 0; ct < nch * ntg; ct++) {
            const int64_t c = ct / ntg, tg = ct % ntg, k0 = c * GEMM_KC;
            f32_pack_x(x, n, cols, tg * GEMM_TB, k0, cols - k0 < GEMM_KC ? cols - k0 : GEMM_KC,
                       xk + ct * tstride);
        }
        float *P = tern_scratch(TERN_SCRATCH_PANEL, GEMM_PG * GEMM_KC * 32 * sizeof(float),
                                "f32 GEMM panels");
        if (!P) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; it++) {
            if (!P) continue;
            const int64_t gp = it / ntc, tc = it % ntc;
            const int64_t p0 = gp * GEMM_PG, np = nrp - p0 < GEMM_PG ? nrp - p0 : GEMM_PG;
            const int64_t tg0 = tc * ntg / ntc, tg1 = (tc + 1) * ntg / ntc;
            for (int64_t c = 0; c < nch; c++) {
                const int64_t k0 = c * GEMM_KC, kc = cols - k0 < GEMM_KC ? cols - k0 : GEMM_KC;
                for (int64_t p = 0; p < np; p++) {
                    const int64_t r0 = (p0 + p) * 32;
                    f32_decode_panel(W, r0, (int)(rows - r0 < 32 ? rows - r0 : 32), c, kc,
                                     P + p * GEMM_KC * 32);
                }
                for (int64_t tg = tg0; tg < tg1; tg++) {
                    const int64_t t = tg * GEMM_TB;
                    const int tbn = (int)(n - t < GEMM_TB ? n - t : GEMM_TB);
                    const float *xt = xk + (c * ntg + tg) * tstride;
                    for (int64_t p = 0; p < np; p++) { /* the x tile stays in L1 */
                        const int64_t r0 = (p0 + p) * 32;
                        const int nr = (int)(rows - r0 < 32 ? rows - r0 : 32);
                        const uint32_t bits = nr == 32 ? 0xffffffffu : (1u << nr) - 1;
                        gemm_tile_n(P + p * GEMM_KC * 32, kc, xt, y + t * rows + r0, rows,
                                    (__mmask16)(bits & 0xffff), (__mmask16)(bits >> 16), c == 0, tbn);
                    }
                }
            }
        }
    }
    return failed ? err_set("tern_matmul_f32_avx512: out of memory for a panel") : 0;
}

int tern_matmul_f32_avx512(const TernaryMatrix *W, const float *x, int64_t n, float *y) {
    if (tern_check_args(W, x, n, y, "tern_matmul_f32_avx512") < 0) return -1;
    if (n == 0) return 0;
    if (n >= TERN_LUT_MIN_N && tern_rows_one_scale(W)) return tern_matmul_f32_lut_avx512(W, x, n, y);
    if (n >= GEMM_MIN_N) return f32_gemm(W, x, n, y);
    const int64_t rows = W->rows, pc = tern_row_blocks(W->cols) * TERN_BLOCK;
    void *owned;
    const float *xp = tern_pad_act(x, n, W->cols, sizeof(float), &owned);
    if (!xp) return -1;
    const int whole = W->group_cols % TERN_BLOCK == 0 || W->n_groups == 1;
    if (n == 1 && whole && rows >= 4) {
        const int64_t r4 = rows / 4;
#pragma omp parallel for schedule(static) if (tern_par((double)rows * W->cols, TERN_PAR_WORK))
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
#pragma omp parallel for schedule(static) if (tern_par((double)nt * rows * W->cols, TERN_PAR_WORK))
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
