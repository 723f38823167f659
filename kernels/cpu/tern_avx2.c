/* AVX2 ternary matmuls (AVX2 + FMA, no VNNI).  Same structure as
 * tern_avx512.c at half width:
 *   int8: a 32-byte half of a block, (v >> 2i) & 3 = codes c = q+1 of 32
 *         consecutive columns; vpmaddubsw (u8 c x s8 x -> i16 pairs, at most
 *         2*2*128 = 512, no saturation) then vpmaddwd with ones -> i32;
 *         sum(q*x) = sum(c*x) - sum(x).  Bit-identical to the reference.
 *   f32:  8 codes widened to dwords, shifted by 2i, vpermps with an 8-entry
 *         table (period 4, so bits above the field do not matter) -> -1/0/+1,
 *         FMA with the activations.
 * 16 ymm registers: TB = 2 tokens per pass for int8, 1 for f32. */
#include "cpu/tern_kernels.h"

#include "core/err.h"
#include "core/mem.h"
#include "ternary_format.h"

#include <immintrin.h>

#define TILE_T 64
#define ALWAYS_INLINE static inline __attribute__((always_inline))

static inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---------------------------------------------------------------- int8 */

ALWAYS_INLINE void i8_row(const TernaryMatrix *W, int64_t r, const int8_t *const *xp,
                          const int32_t *const *xs, const float *sxv, float *const *yo,
                          const int TB) {
    const int64_t cols = W->cols, gc = W->group_cols, nb = tern_row_blocks(cols);
    const uint8_t *row = W->codes + r * W->row_bytes;
    const float *sc = W->scales + r * W->scale_stride;
    const __m256i m3 = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    const int whole = gc % TERN_BLOCK == 0 || W->n_groups == 1;
    float acc[2] = {0.0f, 0.0f};
    int32_t dacc[2] = {0, 0};
    __m256i A[2][4];
    #pragma GCC unroll 16
    for (int tb = 0; tb < TB; tb++)
        #pragma GCC unroll 16
        for (int i = 0; i < 4; i++) A[tb][i] = _mm256_setzero_si256();
    int64_t g = 0;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + b * TERN_BLOCK_BYTES;
        __m256i v0 = _mm256_loadu_si256((const __m256i *)blk);
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(blk + 32));
        #pragma GCC unroll 16
        for (int i = 0; i < 4; i++) {
            __m128i sh = _mm_cvtsi32_si128(2 * i);
            __m256i c0 = _mm256_and_si256(_mm256_srl_epi16(v0, sh), m3); /* cols 64i + [0,32) */
            __m256i c1 = _mm256_and_si256(_mm256_srl_epi16(v1, sh), m3); /* cols 64i + [32,64) */
            int64_t col = b * TERN_BLOCK + i * TERN_LANE;
            if (whole) {
                #pragma GCC unroll 16
                for (int tb = 0; tb < TB; tb++) {
                    const int8_t *xb = xp[tb] + col;
                    __m256i p0 = _mm256_maddubs_epi16(c0, _mm256_loadu_si256((const __m256i *)xb));
                    __m256i p1 = _mm256_maddubs_epi16(c1, _mm256_loadu_si256((const __m256i *)(xb + 32)));
                    A[tb][i] = _mm256_add_epi32(A[tb][i], _mm256_madd_epi16(_mm256_add_epi16(p0, p1), ones));
                }
                continue;
            }
            if (col >= cols) break;
            #pragma GCC unroll 16
            for (int h = 0; h < 2; h++) { /* 32-column segments in column order */
                int64_t c = col + 32 * h;
                if (c >= cols) break;
                #pragma GCC unroll 16
                for (int tb = 0; tb < TB; tb++) {
                    __m256i p = _mm256_maddubs_epi16(h ? c1 : c0,
                                                     _mm256_loadu_si256((const __m256i *)(xp[tb] + c)));
                    dacc[tb] += hsum_epi32(_mm256_madd_epi16(p, ones));
                    int64_t end = c + 32;
                    if (end % gc == 0 || end >= cols) {
                        int64_t gg = c / gc;
                        acc[tb] += sc[gg] * (float)(dacc[tb] - xs[tb][gg]);
                        dacc[tb] = 0;
                    }
                }
            }
        }
        if (whole && (b == nb - 1 || ((b + 1) * TERN_BLOCK) % gc == 0)) {
            #pragma GCC unroll 16
            for (int tb = 0; tb < TB; tb++) {
                __m256i s = _mm256_add_epi32(_mm256_add_epi32(A[tb][0], A[tb][1]),
                                             _mm256_add_epi32(A[tb][2], A[tb][3]));
                acc[tb] += sc[g] * (float)(hsum_epi32(s) - xs[tb][g]);
                #pragma GCC unroll 16
                for (int i = 0; i < 4; i++) A[tb][i] = _mm256_setzero_si256();
            }
            g++;
        }
    }
    #pragma GCC unroll 16
    for (int tb = 0; tb < TB; tb++) *yo[tb] = acc[tb] / sxv[tb];
}

int tern_matmul_i8_avx2(const TernaryMatrix *W, const int8_t *xq, const float *sx, int64_t n,
                        float *y) {
    if (tern_check_args(W, xq, n, y, "tern_matmul_i8_avx2") < 0) return -1;
    if (n == 0) return 0;
    const int64_t rows = W->rows, pc = tern_row_blocks(W->cols) * TERN_BLOCK, ng = W->n_groups;
    void *owned;
    const int8_t *xp = tern_pad_act(xq, n, W->cols, 1, &owned);
    if (!xp) return -1;
    int32_t *xs = tern_group_sums_i8(W, xq, n);
    if (!xs) {
        mem_free(owned);
        return -1;
    }
    for (int64_t t0 = 0; t0 < n; t0 += TILE_T) {
        int64_t nt = n - t0 < TILE_T ? n - t0 : TILE_T;
#pragma omp parallel for schedule(static) if (tern_par((double)nt * rows * W->cols, TERN_PAR_WORK))
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t t = t0; t < t0 + nt; t += 2) {
                const int64_t u = t + 1 < t0 + nt ? t + 1 : t;
                const int8_t *xv[2] = {xp + t * pc, xp + u * pc};
                const int32_t *sv[2] = {xs + t * ng, xs + u * ng};
                float sxv[2] = {sx[t], sx[u]};
                float *yv[2] = {y + t * rows + r, y + u * rows + r};
                if (u != t) i8_row(W, r, xv, sv, sxv, yv, 2);
                else i8_row(W, r, xv, sv, sxv, yv, 1);
            }
        }
    }
    mem_free(xs);
    mem_free(owned);
    return 0;
}

/* ----------------------------------------------------------------- f32 */

int tern_matmul_f32_avx2(const TernaryMatrix *W, const float *x, int64_t n, float *y) {
    if (tern_check_args(W, x, n, y, "tern_matmul_f32_avx2") < 0) return -1;
    if (n == 0) return 0;
    const int64_t rows = W->rows, cols = W->cols, gc = W->group_cols, nb = tern_row_blocks(cols);
    const int64_t pc = nb * TERN_BLOCK;
    const int whole = gc % TERN_BLOCK == 0 || W->n_groups == 1;
    void *owned;
    const float *xp = tern_pad_act(x, n, cols, sizeof(float), &owned);
    if (!xp) return -1;
    for (int64_t t0 = 0; t0 < n; t0 += TILE_T) {
        int64_t nt = n - t0 < TILE_T ? n - t0 : TILE_T;
#pragma omp parallel for schedule(static) if (tern_par((double)nt * rows * cols, TERN_PAR_WORK))
        for (int64_t r = 0; r < rows; r++) {
            const uint8_t *row = W->codes + r * W->row_bytes;
            const float *sc = W->scales + r * W->scale_stride;
            const __m256 tab = _mm256_setr_ps(-1, 0, 1, 0, -1, 0, 1, 0);
            for (int64_t t = t0; t < t0 + nt; t++) {
                const float *xt = xp + t * pc;
                __m256 A[8], F = _mm256_setzero_ps(); /* A[2i+h]: cols 64i + 32h + [0,32) */
                #pragma GCC unroll 16
                for (int j = 0; j < 8; j++) A[j] = _mm256_setzero_ps();
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *blk = row + b * TERN_BLOCK_BYTES;
                    const float *xb = xt + b * TERN_BLOCK;
                    #pragma GCC unroll 16
                    for (int s = 0; s < 8; s++) {
                        __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 8 * s)));
                        const int h = s >> 2;
                        __m256 w0 = _mm256_permutevar8x32_ps(tab, v);
                        __m256 w1 = _mm256_permutevar8x32_ps(tab, _mm256_srli_epi32(v, 2));
                        __m256 w2 = _mm256_permutevar8x32_ps(tab, _mm256_srli_epi32(v, 4));
                        __m256 w3 = _mm256_permutevar8x32_ps(tab, _mm256_srli_epi32(v, 6));
                        A[0 + h] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xb + 8 * s), A[0 + h]);
                        A[2 + h] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xb + 64 + 8 * s), A[2 + h]);
                        A[4 + h] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xb + 128 + 8 * s), A[4 + h]);
                        A[6 + h] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xb + 192 + 8 * s), A[6 + h]);
                    }
                    if (whole) {
                        if (b == nb - 1 || ((b + 1) * TERN_BLOCK) % gc == 0) {
                            __m256 s = _mm256_set1_ps(sc[(b * TERN_BLOCK) / gc]);
                            __m256 tsum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(A[0], A[1]), _mm256_add_ps(A[2], A[3])),
                                                        _mm256_add_ps(_mm256_add_ps(A[4], A[5]), _mm256_add_ps(A[6], A[7])));
                            F = _mm256_fmadd_ps(tsum, s, F);
                            #pragma GCC unroll 16
                            for (int j = 0; j < 8; j++) A[j] = _mm256_setzero_ps();
                        }
                    } else {
                        #pragma GCC unroll 16
                        for (int j = 0; j < 8; j++) {
                            int64_t col = b * TERN_BLOCK + (j >> 1) * TERN_LANE + (j & 1) * 32;
                            if (col >= cols) break;
                            F = _mm256_fmadd_ps(A[j], _mm256_set1_ps(sc[col / gc]), F);
                            A[j] = _mm256_setzero_ps();
                        }
                    }
                }
                y[t * rows + r] = hsum_ps(F);
            }
        }
    }
    mem_free(owned);
    return 0;
}
