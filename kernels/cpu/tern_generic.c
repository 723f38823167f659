/* Generic ternary matmuls: plain C for any CPU.  Each row's codes are
 * unpacked once into int8 (a 256-entry table per byte, four fields) and then
 * reused for every token, in loops the compiler can vectorise. */
#include "cpu/tern_kernels.h"

#include "core/err.h"
#include "core/mem.h"
#include "ternary_format.h"

#include <stdlib.h>

/* q (cols,) of one packed row. */
static void unpack_row(const uint8_t *row, int64_t cols, int8_t *q) {
    int64_t nb = tern_row_blocks(cols);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + b * TERN_BLOCK_BYTES;
        int64_t base = b * TERN_BLOCK;
        for (int i = 0; i < TERN_FIELDS; i++) {
            int64_t k0 = base + i * TERN_LANE;
            if (k0 >= cols) return;
            int64_t m = cols - k0 < TERN_LANE ? cols - k0 : TERN_LANE;
            for (int64_t j = 0; j < m; j++) q[k0 + j] = (int8_t)((int)((blk[j] >> (2 * i)) & 3u) - 1);
        }
    }
}

int tern_matmul_f32_generic(const TernaryMatrix *W, const float *x, int64_t n, float *y) {
    if (tern_check_args(W, x, n, y, "tern_matmul_f32_generic") < 0) return -1;
    const int64_t rows = W->rows, cols = W->cols, gc = W->group_cols;
    int failed = 0;
#pragma omp parallel if (tern_par((double)n * rows * cols, TERN_PAR_WORK))
    {
        int8_t *q = malloc((size_t)cols); /* this thread's unpacked row */
        if (!q) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if (!q) continue;
            const float *sc = W->scales + r * W->scale_stride;
            unpack_row(W->codes + r * W->row_bytes, cols, q);
            for (int64_t t = 0; t < n; t++) {
                const float *xt = x + t * cols; // (cols,)
                float acc = 0.0f;
                for (int64_t g = 0; g < W->n_groups; g++) {
                    int64_t k0 = g * gc, k1 = k0 + gc < cols ? k0 + gc : cols;
                    float part = 0.0f;
                    for (int64_t k = k0; k < k1; k++) part += (float)q[k] * xt[k];
                    acc += sc[g] * part;
                }
                y[t * rows + r] = acc;
            }
        }
        free(q);
    }
    if (failed) return err_set("tern_matmul_f32_generic: out of memory for a %lld-column row", (long long)cols);
    return 0;
}

int tern_matmul_i8_generic(const TernaryMatrix *W, const int8_t *xq, const float *sx, int64_t n,
                           float *y) {
    if (tern_check_args(W, xq, n, y, "tern_matmul_i8_generic") < 0) return -1;
    const int64_t rows = W->rows, cols = W->cols, gc = W->group_cols;
    int failed = 0;
#pragma omp parallel if (tern_par((double)n * rows * cols, TERN_PAR_WORK))
    {
        int8_t *q = malloc((size_t)cols);
        if (!q) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if (!q) continue;
            const float *sc = W->scales + r * W->scale_stride;
            unpack_row(W->codes + r * W->row_bytes, cols, q);
            for (int64_t t = 0; t < n; t++) {
                const int8_t *xt = xq + t * cols; // (cols,)
                float acc = 0.0f;
                for (int64_t g = 0; g < W->n_groups; g++) {
                    int64_t k0 = g * gc, k1 = k0 + gc < cols ? k0 + gc : cols;
                    int32_t d = 0;
                    for (int64_t k = k0; k < k1; k++) d += q[k] * xt[k];
                    acc += sc[g] * (float)d;
                }
                y[t * rows + r] = acc / sx[t];
            }
        }
        free(q);
    }
    if (failed) return err_set("tern_matmul_i8_generic: out of memory for a %lld-column row", (long long)cols);
    return 0;
}
