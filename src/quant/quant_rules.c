/* Threshold and scale rules (the definitions; see quant.h for the formulas).
 * Mirrors ternarise_groups() in ../shared/fixtures/make_ptq_refs.py: fp32
 * element arithmetic, sums accumulated in double and rounded once to fp32 —
 * but for l2opt, whose cut scores (S^2 / k over the sorted |w|) are summed in
 * double where the script's fp32 cumsum picks another cut in a few rows (8 of
 * 5632 in llama-tiny; the double cut has the lower error, the exact optimum). */
#include "quant/quant.h"

#include "core/err.h"
#include "core/mem.h"

#include <math.h>
#include <stdlib.h>

static float sum_abs(const float *w, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += fabsf(w[i]);
    return (float)s;
}

int quant_absmean_ref(const float *w, int64_t n, int8_t *q, float *scale) {
    float g = sum_abs(w, n) / (float)n;
    if (!(g >= 1e-5f)) g = 1e-5f; /* max(mean, 1e-5); a NaN mean also takes the floor */
    for (int64_t i = 0; i < n; i++) {
        float r = rintf(w[i] / g);
        q[i] = (int8_t)(r > 1.0f ? 1 : r < -1.0f ? -1 : (int)r);
    }
    *scale = g;
    return 0;
}

int quant_absmax_ref(const float *w, int64_t n, int8_t *q, float *scale) {
    float d = 0.0f;
    for (int64_t i = 0; i < n; i++) d = fmaxf(d, fabsf(w[i]));
    for (int64_t i = 0; i < n; i++) q[i] = d > 0.0f ? (int8_t)rintf(w[i] / d) : 0;
    *scale = d;
    return 0;
}

/* Keep |w| > delta, q = sign(w); scale = mean |w| of the kept (0 if none). */
static void keep_above(const float *w, int64_t n, float delta, int8_t *q, float *scale) {
    double s = 0;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(w[i]);
        if (a > delta) {
            q[i] = w[i] > 0 ? 1 : -1;
            s += a;
            k++;
        } else {
            q[i] = 0;
        }
    }
    *scale = k > 0 ? (float)s / (float)k : 0.0f;
}

int quant_twn_ref(const float *w, int64_t n, int8_t *q, float *scale) {
    /* torch: 0.7 * a.sum(1) / cnt, evaluated left to right in fp32 */
    float delta = 0.7f * sum_abs(w, n) / (float)n;
    keep_above(w, n, delta, q, scale);
    return 0;
}

int quant_std_ref(const float *w, int64_t n, int8_t *q, float *scale) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        s += w[i];
        s2 += (double)(w[i] * w[i]); /* torch squares in fp32, then sums */
    }
    float mean = (float)s / (float)n;
    float var = (float)s2 / (float)n - mean * mean;
    float delta = 0.6f * sqrtf(var > 0.0f ? var : 0.0f);
    keep_above(w, n, delta, q, scale);
    return 0;
}

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

int quant_l2opt_ref(const float *w, int64_t n, int8_t *q, float *scale) {
    float *s = mem_alloc((size_t)n * sizeof *s, "l2opt sort scratch");
    if (!s) return -1;
    for (int64_t i = 0; i < n; i++) s[i] = fabsf(w[i]);
    qsort(s, (size_t)n, sizeof *s, cmp_desc);
    /* Cut after position i (k = i+1 kept) is admissible only where the next
     * magnitude differs, so equal magnitudes are kept or dropped together.
     * First maximum of S^2/k wins, as torch.argmax does. */
    double S = 0, best_obj = -1, best_S = 0;
    int64_t best = 0;
    for (int64_t i = 0; i < n; i++) {
        S += s[i];
        if (i + 1 < n && s[i + 1] == s[i]) continue;
        double obj = S * S / (double)(i + 1);
        if (obj > best_obj) {
            best_obj = obj;
            best = i;
            best_S = S;
        }
    }
    float v = s[best];
    mem_free(s);
    if (!(v > 0.0f)) {
        for (int64_t i = 0; i < n; i++) q[i] = 0;
        *scale = 0.0f;
        return 0;
    }
    for (int64_t i = 0; i < n; i++) q[i] = fabsf(w[i]) >= v ? (w[i] > 0 ? 1 : -1) : 0;
    *scale = (float)best_S / (float)(best + 1);
    return 0;
}

int quant_rule_ref(QuantRule r, const float *w, int64_t n, int8_t *q, float *scale) {
    if (n < 1) return err_set("quant_rule_ref: empty group");
    switch (r) {
    case QR_ABSMEAN: return quant_absmean_ref(w, n, q, scale);
    case QR_TWN: return quant_twn_ref(w, n, q, scale);
    case QR_STD: return quant_std_ref(w, n, q, scale);
    case QR_L2OPT: return quant_l2opt_ref(w, n, q, scale);
    case QR_ABSMAX: return quant_absmax_ref(w, n, q, scale);
    default: return err_set("quant_rule_ref: unknown rule %d", (int)r);
    }
}

int64_t tern_n_scales(QuantGroup g, int64_t rows, int64_t cols) {
    if (g == QG_TENSOR) return 1;
    int64_t gc = quant_group_cols(g, cols);
    return rows * ((cols + gc - 1) / gc);
}

/* *sc rounded to the spec's scale dtype; -1 with err_set where it does not fit
 * (past fp8_e4m3's 448 or f16's 65504 it had become NaN or inf, a checkpoint
 * that quantize wrote and its own loader refused, or a perplexity of nan) */
static int round_scale(const QuantSpec *spec, float *sc, int64_t row, int64_t group) {
    const float s = *sc;
    *sc = dtype_round(spec->scale, s);
    if (isfinite(*sc) || !isfinite(s)) return 0; /* (a non-finite weight is the loader's to refuse) */
    return err_set("a scale of %g (row %lld, group %lld) does not fit in scale=%s (it rounds to %g): "
                   "the weights are too large for it; use a scale dtype of more range (f16, bf16, f32)",
                   (double)s, (long long)row, (long long)group, quant_scale_name(spec->scale), (double)*sc);
}

int quant_matrix_ref(const float *w, int64_t rows, int64_t cols, const QuantSpec *spec,
                     int8_t *q, float *scales) {
    if (rows < 1 || cols < 1)
        return err_set("quantise: empty matrix (%lld x %lld)", (long long)rows, (long long)cols);
    if (spec->group == QG_TENSOR) {
        if (quant_rule_ref(spec->rule, w, rows * cols, q, &scales[0]) < 0) return -1;
        return round_scale(spec, &scales[0], 0, 0);
    }
    int64_t gc = quant_group_cols(spec->group, cols), ng = (cols + gc - 1) / gc;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < ng; g++) {
            int64_t k0 = g * gc, len = cols - k0 < gc ? cols - k0 : gc;
            float *sc = &scales[r * ng + g];
            if (quant_rule_ref(spec->rule, w + r * cols + k0, len, q + r * cols + k0, sc) < 0)
                return -1;
            if (round_scale(spec, sc, r, g) != 0) return -1;
        }
    return 0;
}

void act_quant_int8_ref(const float *x, int64_t n, int64_t cols, int8_t *xq, float *sx) {
    for (int64_t t = 0; t < n; t++) {
        const float *xr = x + t * cols;
        float m = 0.0f;
        for (int64_t k = 0; k < cols; k++) { /* (NaNs skipped, signalling ones too: fmaxf returns NaN there) */
            const float a = fabsf(xr[k]);
            if (a > m) m = a;
        }
        float s = 127.0f / (m > 1e-5f ? m : 1e-5f);
        for (int64_t k = 0; k < cols; k++) {
            float r = rintf(xr[k] * s);
            xq[t * cols + k] = (int8_t)(r > 127.0f ? 127 : r < -128.0f ? -128 : (int)r);
        }
        sx[t] = s;
    }
}
