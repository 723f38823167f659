/* Per-token int8 activation quantisation with AVX-512, bit-identical to
 * act_quant_int8_ref (src/quant/quant_rules.c), which is the definition:
 *   s = 127 / max(max_k |x_k|, 1e-5);  xq_k = clamp(rintf(x_k * s), -128, 127)
 * The scalar reference had called libm fmaxf per element (no inline form
 * under -std=c11), which made it 20% of a bitnet-tiny ppl run.  Equalities:
 *  - max: vmaxps(|x|, m) returns m when |x| is NaN, quiet or signalling, as
 *    the reference's (|x| > m ? |x| : m) does (fmaxf had returned NaN for a
 *    signalling one); max is exact, so the lane order does not matter.
 *  - x*s then vrndscaleps(nearest even) = rintf under the default rounding.
 *  - clamp as max(-128, r) then min(127, .) keeps a NaN r (both return the
 *    second operand on NaN), vcvtps2dq turns it into 0x80000000 and vpmovdb
 *    truncates that to 0, as the reference's (int8_t)(int)NaN does on x86. */
#include "cpu/tern_kernels.h"

#include <immintrin.h>

static inline __mmask16 tail_mask(int64_t left) {
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

void tern_act_quant_i8_avx512(const float *x, int64_t n, int64_t cols, int8_t *xq, float *sx) {
    const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
#pragma omp parallel for schedule(static) if (n * cols > (1 << 18))
    for (int64_t t = 0; t < n; t++) {
        const float *xr = x + t * cols;
        int8_t *qr = xq + t * cols;
        __m512 m = _mm512_setzero_ps();
        for (int64_t k = 0; k < cols; k += 16) {
            const __m512 v = _mm512_maskz_loadu_ps(tail_mask(cols - k), xr + k);
            m = _mm512_max_ps(_mm512_abs_ps(v), m);
        }
        const float mx = _mm512_reduce_max_ps(m);
        const float s = 127.0f / (mx > 1e-5f ? mx : 1e-5f);
        const __m512 sv = _mm512_set1_ps(s);
        for (int64_t k = 0; k < cols; k += 16) {
            const __mmask16 mk = tail_mask(cols - k);
            const __m512 v = _mm512_maskz_loadu_ps(mk, xr + k);
            __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(v, sv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            r = _mm512_min_ps(hi, _mm512_max_ps(lo, r));
            _mm512_mask_cvtepi32_storeu_epi8(qr + k, mk, _mm512_cvtps_epi32(r));
        }
        sx[t] = s;
    }
}
