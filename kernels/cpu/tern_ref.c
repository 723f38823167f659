/* Reference ternary matmuls: the definitions the fast variants are tested
 * against.  Straight loops over (token, row, group, column), reading codes
 * through the ternary_format.h accessor. */
#include "cpu/tern_kernels.h"

#include "core/dtype.h"
#include "ternary_format.h"

int tern_matmul_f32_ref(const TernaryMatrix *W, const float *x, int64_t n, float *y) {
    if (tern_check_args(W, x, n, y, "tern_matmul_f32_ref") < 0) return -1;
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * W->cols; // (cols,)
        for (int64_t r = 0; r < W->rows; r++) {
            const uint8_t *row = W->codes + r * W->row_bytes;
            const float *sc = W->scales + r * W->scale_stride;
            float acc = 0.0f;
            for (int64_t g = 0; g < W->n_groups; g++) {
                int64_t k0 = g * W->group_cols;
                int64_t k1 = k0 + W->group_cols < W->cols ? k0 + W->group_cols : W->cols;
                float part = 0.0f;
                for (int64_t k = k0; k < k1; k++) part += (float)tern_get(row, k) * xt[k];
                acc += sc[g] * part;
            }
            y[t * W->rows + r] = acc;
        }
    }
    return 0;
}

int tern_matmul_i8_ref(const TernaryMatrix *W, const int8_t *xq, const float *sx, int64_t n,
                       float *y) {
    if (tern_check_args(W, xq, n, y, "tern_matmul_i8_ref") < 0) return -1;
    for (int64_t t = 0; t < n; t++) {
        const int8_t *xt = xq + t * W->cols; // (cols,)
        for (int64_t r = 0; r < W->rows; r++) {
            const uint8_t *row = W->codes + r * W->row_bytes;
            const float *sc = W->scales + r * W->scale_stride;
            float acc = 0.0f;
            for (int64_t g = 0; g < W->n_groups; g++) {
                int64_t k0 = g * W->group_cols;
                int64_t k1 = k0 + W->group_cols < W->cols ? k0 + W->group_cols : W->cols;
                int64_t d = 0;
                for (int64_t k = k0; k < k1; k++) d += tern_get(row, k) * xt[k];
                acc += sc[g] * (float)d;
            }
            y[t * W->rows + r] = acc / sx[t];
        }
    }
    return 0;
}

void tern_dense_bf16_ref(const uint16_t *w, int64_t rows, int64_t cols, const uint16_t *x, int64_t n,
                         float *y) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = 0; r < rows; r++) {
            double a = 0.0;
            for (int64_t k = 0; k < cols; k++) a += (double)bf16_to_f32(w[r * cols + k]) * bf16_to_f32(x[t * cols + k]);
            y[t * rows + r] = (float)a;
        }
}
