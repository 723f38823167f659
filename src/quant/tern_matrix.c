/* TernaryMatrix: packing into the ternary_format.h layout, conversions in
 * (dense, codes, HF BitNet), dequantisation and statistics. */
#include "quant/quant.h"

#include "core/err.h"
#include "core/mem.h"
#include "ternary_format.h"

#include <math.h>
#include <string.h>

/* Allocates codes (filled with zero codes) and scales for the shape. */
static int tern_alloc(int64_t rows, int64_t cols, QuantGroup group, DType sdt, TernaryMatrix *m) {
    memset(m, 0, sizeof *m);
    if (rows < 1 || cols < 1)
        return err_set("ternary matrix: bad shape %lld x %lld", (long long)rows, (long long)cols);
    if ((unsigned)group >= QG_COUNT) return err_set("ternary matrix: bad group %d", (int)group);
    if (sdt != DT_F32 && sdt != DT_BF16 && sdt != DT_F16 && sdt != DT_FP8_E4M3 && sdt != DT_E8M0)
        return err_set("ternary matrix: scale dtype %s not supported (f32, bf16, f16, fp8_e4m3, "
                       "e8m0)",
                       dtype_name(sdt));
    m->rows = rows;
    m->cols = cols;
    m->row_bytes = tern_row_bytes(cols);
    m->group = group;
    m->group_cols = quant_group_cols(group, cols);
    m->n_groups = (cols + m->group_cols - 1) / m->group_cols;
    m->scale_stride = group == QG_TENSOR ? 0 : m->n_groups;
    m->n_scales = tern_n_scales(group, rows, cols);
    m->scale_dtype = sdt;
    m->codes = mem_alloc((size_t)(rows * m->row_bytes), "ternary codes");
    m->scales = mem_alloc((size_t)m->n_scales * sizeof(float), "ternary scales");
    if (!m->codes || !m->scales) {
        tern_free(m);
        return -1;
    }
    memset(m->codes, TERN_BYTE_ZERO, (size_t)(rows * m->row_bytes));
    return 0;
}

void tern_free(TernaryMatrix *m) {
    mem_free(m->codes);
    mem_free(m->scales);
    m->codes = NULL;
    m->scales = NULL;
}

int tern_pack_codes(const int8_t *q, int64_t rows, int64_t cols, uint8_t *codes) {
    const int64_t rb = tern_row_bytes(cols);
    memset(codes, TERN_BYTE_ZERO, (size_t)(rows * rb));
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = codes + r * rb;
        const int8_t *qr = q + r * cols;
        for (int64_t k = 0; k < cols; k++) {
            if (qr[k] < -1 || qr[k] > 1)
                return err_set("ternary codes: value %d at (%lld, %lld) is not in {-1, 0, 1}",
                               qr[k], (long long)r, (long long)k);
            tern_set(row, k, qr[k]);
        }
    }
    return 0;
}

static int pack_codes(const int8_t *q, TernaryMatrix *m) {
    return tern_pack_codes(q, m->rows, m->cols, m->codes);
}

int tern_from_codes(const int8_t *q, const float *scales, int64_t rows, int64_t cols,
                    QuantGroup group, DType scale_dtype, TernaryMatrix *out) {
    TernaryMatrix m;
    if (tern_alloc(rows, cols, group, scale_dtype, &m) < 0) return -1;
    if (pack_codes(q, &m) < 0) {
        tern_free(&m);
        return -1;
    }
    for (int64_t i = 0; i < m.n_scales; i++) {
        m.scales[i] = dtype_round(scale_dtype, scales[i]);
        if (!isfinite(m.scales[i])) { /* (a NaN had run as ppl nan, exit 0) */
            const double v = scales[i];
            const long long ns = (long long)m.n_scales;
            tern_free(&m);
            return err_set("scale %lld of %lld is %g%s: scales must be finite", (long long)i, ns, v,
                           isfinite(v) ? " (overflows the scale dtype)" : "");
        }
    }
    *out = m;
    return 0;
}

int tern_from_dense(const float *w, int64_t rows, int64_t cols, const QuantSpec *spec,
                    TernaryMatrix *out) {
    TernaryMatrix m;
    if (tern_alloc(rows, cols, spec->group, spec->scale, &m) < 0) return -1;
    int8_t *q = mem_alloc((size_t)(rows * cols), "ternary codes scratch");
    if (!q || quant_matrix_ref(w, rows, cols, spec, q, m.scales) < 0 || pack_codes(q, &m) < 0) {
        mem_free(q);
        tern_free(&m);
        return err_prefix("quantising %lld x %lld: ", (long long)rows, (long long)cols);
    }
    mem_free(q);
    *out = m;
    return 0;
}

int tern_from_bitnet_packed(const uint8_t *packed, int64_t rows, int64_t cols,
                            float weight_scale, int autobitlinear, TernaryMatrix *out) {
    if (!(weight_scale > 0.0f) || isinf(weight_scale))
        return err_set("BitNet weight_scale %g is not a positive finite number", weight_scale);
    TernaryMatrix m;
    if (tern_alloc(rows, cols, QG_TENSOR, DT_F32, &m) < 0) return -1;
    int64_t pr = (rows + 3) / 4;
    for (int64_t p = 0; p < pr; p++)
        for (int i = 0; i < 4; i++) {
            int64_t r = p + i * pr;
            if (r >= rows) break;
            uint8_t *row = m.codes + r * m.row_bytes;
            const uint8_t *src = packed + p * cols;
            for (int64_t k = 0; k < cols; k++) {
                unsigned c = (src[k] >> (2 * i)) & 3u;
                if (c == 3) {
                    tern_free(&m);
                    return err_set("BitNet packed weight: code 3 (not ternary) at packed (%lld, "
                                   "%lld) field %d; is this really a packed ternary tensor?",
                                   (long long)p, (long long)k, i);
                }
                tern_set(row, k, (int)c - 1);
            }
        }
    m.scales[0] = autobitlinear ? weight_scale : 1.0f / weight_scale;
    if (!isfinite(m.scales[0])) { /* a subnormal weight_scale: 1 / ws is inf (it had run as ppl nan) */
        tern_free(&m);
        return err_set("BitNet weight_scale %g: its reciprocal overflows a float", weight_scale);
    }
    *out = m;
    return 0;
}

void tern_unpack_codes(const TernaryMatrix *m, int8_t *q) {
    for (int64_t r = 0; r < m->rows; r++) {
        const uint8_t *row = m->codes + r * m->row_bytes;
        for (int64_t k = 0; k < m->cols; k++) q[r * m->cols + k] = (int8_t)tern_get(row, k);
    }
}

void tern_dequant(const TernaryMatrix *m, float *w) {
    for (int64_t r = 0; r < m->rows; r++) {
        const uint8_t *row = m->codes + r * m->row_bytes;
        const float *sc = m->scales + r * m->scale_stride;
        for (int64_t k = 0; k < m->cols; k++)
            w[r * m->cols + k] = (float)tern_get(row, k) * sc[k / m->group_cols];
    }
}

double tern_sparsity(const TernaryMatrix *m) {
    int64_t zeros = 0;
    for (int64_t r = 0; r < m->rows; r++) {
        const uint8_t *row = m->codes + r * m->row_bytes;
        for (int64_t k = 0; k < m->cols; k++) zeros += tern_get(row, k) == 0;
    }
    return (double)zeros / ((double)m->rows * (double)m->cols);
}

int64_t tern_bytes(const TernaryMatrix *m) {
    return m->rows * m->row_bytes + m->n_scales * (int64_t)dtype_size(m->scale_dtype);
}

double tern_bits_per_weight(const TernaryMatrix *m) {
    return 8.0 * (double)tern_bytes(m) / ((double)m->rows * (double)m->cols);
}

double tern_rel_error(const TernaryMatrix *m, const float *w) {
    double num = 0, den = 0;
    for (int64_t r = 0; r < m->rows; r++) {
        const uint8_t *row = m->codes + r * m->row_bytes;
        const float *sc = m->scales + r * m->scale_stride;
        for (int64_t k = 0; k < m->cols; k++) {
            double d = (double)tern_get(row, k) * sc[k / m->group_cols];
            double x = w[r * m->cols + k];
            num += (d - x) * (d - x);
            den += x * x;
        }
    }
    if (den == 0) return num == 0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

void tern_scale_range(const TernaryMatrix *m, float *smin, float *smax) {
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < m->n_scales; i++) {
        lo = fminf(lo, m->scales[i]);
        hi = fmaxf(hi, m->scales[i]);
    }
    *smin = lo;
    *smax = hi;
}
