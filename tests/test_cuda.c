/* The CUDA backend (src/runtime/cuda_engine.h, kernels/cuda/fwd_cuda.h):
 * every forward kernel against its CPU twin on awkward shapes with guard
 * bytes around the device buffers; GPU logits against the transformers
 * references of both fixtures (fp32 and bf16 activations); 100 greedy tokens
 * GPU vs CPU on the same ternary weights at batch 1 and 8; graph replay vs
 * eager launches.  Tests named gpu_* report SKIPPED where no GPU is visible
 * (CI); the refusals at the end run everywhere. */
#include "test.h"
#include "fixtures.h"
#include "core/blas_setup.h"
#include "core/err.h"
#include "core/mem.h"
#include "eval/ppl.h"
#include "load/tokens.h"
#include "quant/quant.h"
#include "runtime/cuda_engine.h"
#include "runtime/forward.h"
#include "runtime/forward_internal.h"
#include "tp/tp_engine.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SKIP_WITHOUT_GPU()                                                        \
    do {                                                                          \
        char why_[256];                                                           \
        if (!cuda_backend_available(why_, sizeof why_)) {                         \
            test_skip("%s", why_);                                                \
            return;                                                               \
        }                                                                         \
    } while (0)

/* ---- kernels vs their CPU twins ---------------------------------------- */
#ifdef TL_HAVE_CUDA
static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}
#include "cuda/fwd_cuda.h"
#include "cuda/tern_cuda.h"

#include <cuda_runtime_api.h>

#define GUARD 256 /* bytes before and after every device buffer */
#define GUARD_BYTE 0xA5

typedef struct {
    uint8_t *base;
    size_t bytes;
} DevBuf;

/* A device buffer of `bytes` between two guard regions; the whole thing is
 * filled with GUARD_BYTE first, then `init` (if any) copied in. */
static void *dev_new(DevBuf *b, size_t bytes, const void *init) {
    b->bytes = bytes;
    if (cudaMalloc((void **)&b->base, bytes + 2 * GUARD) != cudaSuccess) return NULL;
    cudaMemset(b->base, GUARD_BYTE, bytes + 2 * GUARD);
    if (init) cudaMemcpy(b->base + GUARD, init, bytes, cudaMemcpyHostToDevice);
    return b->base + GUARD;
}
static void *dev_ptr(const DevBuf *b) { return b->base + GUARD; }
static void dev_get(const DevBuf *b, void *out) {
    cudaMemcpy(out, b->base + GUARD, b->bytes, cudaMemcpyDeviceToHost);
}
/* 1 when both guard regions are intact; frees the buffer. */
static int dev_done(DevBuf *b) {
    uint8_t g[2 * GUARD];
    cudaMemcpy(g, b->base, GUARD, cudaMemcpyDeviceToHost);
    cudaMemcpy(g + GUARD, b->base + GUARD + b->bytes, GUARD, cudaMemcpyDeviceToHost);
    cudaFree(b->base);
    for (int i = 0; i < 2 * GUARD; i++)
        if (g[i] != GUARD_BYTE) return 0;
    return 1;
}

static uint16_t bf16_rne(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

TEST(gpu_rmsnorm_matches_cpu) {
    SKIP_WITHOUT_GPU();
    const int64_t shapes[][2] = {{7, 1000}, {1, 4096}, {3, 33}};
    uint64_t s = 1;
    for (size_t k = 0; k < 3; k++) {
        int64_t n = shapes[k][0], dim = shapes[k][1];
        float *x = xmalloc(sizeof(float) * (size_t)(n * dim)), *w = xmalloc(sizeof(float) * (size_t)dim);
        float *ref = xmalloc(sizeof(float) * (size_t)(n * dim)), *got = xmalloc(sizeof(float) * (size_t)(n * dim));
        uint16_t *g16 = xmalloc(2 * (size_t)(n * dim));
        for (int64_t i = 0; i < n * dim; i++) x[i] = 3.0f * frand(&s);
        for (int64_t i = 0; i < dim; i++) w[i] = 1.0f + 0.5f * frand(&s);
        rmsnorm_rows(ref, x, w, n, dim, 1e-6f);
        DevBuf bx, bw, bo, b16;
        float *dx = dev_new(&bx, sizeof(float) * (size_t)(n * dim), x);
        float *dw = dev_new(&bw, sizeof(float) * (size_t)dim, w);
        float *dout = dev_new(&bo, sizeof(float) * (size_t)(n * dim), NULL);
        uint16_t *d16 = dev_new(&b16, 2 * (size_t)(n * dim), NULL);
        REQUIRE(fwdc_rmsnorm(dx, dw, n, dim, 1e-6f, dout, d16, 0) == 0);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        dev_get(&bo, got);
        dev_get(&b16, g16);
        double rel = rel_l2(got, ref, n * dim);
        int bad16 = 0;
        for (int64_t i = 0; i < n * dim; i++) bad16 += g16[i] != bf16_rne(got[i]);
        CHECK_MSG(rel <= 1e-6, "%lldx%lld: rel L2 %.3g", (long long)n, (long long)dim, rel);
        CHECK_MSG(bad16 == 0, "%d bf16 outputs are not the rounded f32 outputs", bad16);
        CHECK(dev_done(&bx) && dev_done(&bw) && dev_done(&bo) && dev_done(&b16));
        free(x), free(w), free(ref), free(got), free(g16);
    }
}

/* The fused forms: residual add + RMSNorm + int8 activations, and the row
 * GLU + int8 activations, against the CPU twins (the int8 part bit-identical
 * to act_quant_int8_ref of the kernel's own f32 output). */
static void check_fused_norm_glu(int64_t dim, int64_t n) {
    /* up starts `off` columns after gate: float4-aligned rows when dim % 4 == 0 */
    const int64_t off = dim % 4 ? 5 : 4, ld = 2 * dim + off;
    uint64_t s = 11;
    float *x = xmalloc(sizeof(float) * n * dim), *h = xmalloc(sizeof(float) * n * dim);
    float *w = xmalloc(sizeof(float) * dim), *sum = xmalloc(sizeof(float) * n * dim);
    float *ref = xmalloc(sizeof(float) * n * dim), *got = xmalloc(sizeof(float) * n * dim);
    float *gx = xmalloc(sizeof(float) * n * dim), *gu = xmalloc(sizeof(float) * n * ld);
    int8_t *qg = xmalloc((size_t)(n * dim)), *qr = xmalloc((size_t)(n * dim));
    float *sg = xmalloc(sizeof(float) * n), *sr = xmalloc(sizeof(float) * n);
    for (int64_t i = 0; i < n * dim; i++) x[i] = 2.0f * frand(&s), h[i] = frand(&s);
    for (int64_t i = 0; i < dim; i++) w[i] = 1.0f + 0.3f * frand(&s);
    for (int64_t i = 0; i < n * ld; i++) gu[i] = 5.0f * frand(&s);
    for (int64_t i = 0; i < n * dim; i++) sum[i] = x[i] + h[i];
    rmsnorm_rows(ref, sum, w, n, dim, 1e-5f);
    DevBuf bx, bh, bw, bo, bq, bs, bgu;
    float *dx = dev_new(&bx, sizeof(float) * n * dim, x), *dh = dev_new(&bh, sizeof(float) * n * dim, h);
    float *dw = dev_new(&bw, sizeof(float) * dim, w), *dout = dev_new(&bo, sizeof(float) * n * dim, NULL);
    int8_t *dq = dev_new(&bq, (size_t)(n * dim), NULL);
    float *ds = dev_new(&bs, sizeof(float) * n, NULL), *dgu = dev_new(&bgu, sizeof(float) * n * ld, gu);
    /* fwdc_norm, then from the same x fwdc_norm_x_ready (x read before the kernel's wait, the
     * first 8192 columns of a row), whose outputs must be the same bits */
    float *gx2 = xmalloc(sizeof(float) * n * dim), *got2 = xmalloc(sizeof(float) * n * dim);
    int8_t *qg2 = xmalloc((size_t)(n * dim));
    float *sg2 = xmalloc(sizeof(float) * n);
    for (int k = 0; k < 2; k++) {
        REQUIRE(cudaMemcpy(dx, x, sizeof(float) * n * dim, cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE((k ? fwdc_norm_x_ready : fwdc_norm)(dx, dh, dw, n, dim, 1e-5f, dout, NULL, dq, ds, 0) == 0);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        dev_get(&bx, k ? gx2 : gx);
        dev_get(&bo, k ? got2 : got);
        dev_get(&bq, k ? qg2 : qg);
        dev_get(&bs, k ? sg2 : sg);
    }
    CHECK_MSG(memcmp(gx2, gx, sizeof(float) * n * dim) == 0 && memcmp(got2, got, sizeof(float) * n * dim) == 0 &&
                  memcmp(qg2, qg, (size_t)(n * dim)) == 0 && memcmp(sg2, sg, sizeof(float) * n) == 0,
              "%lldx%lld: fwdc_norm_x_ready differs from fwdc_norm", (long long)n, (long long)dim);
    free(gx2), free(got2), free(qg2), free(sg2);
    CHECK_MSG(memcmp(gx, sum, sizeof(float) * n * dim) == 0, "residual add written back wrong");
    double rel = rel_l2(got, ref, n * dim);
    /* the GPU and the CPU add dim f32 squares in different orders: the scale's
     * relative error grows like sqrt(dim) 2^-24 (17000 .. 36864 columns:
     * 1.1e-6 .. 2.0e-6 measured) */
    const double tol = 1e-6 > 6e-8 * sqrt((double)dim) ? 1e-6 : 6e-8 * sqrt((double)dim);
    CHECK_MSG(rel <= tol, "add + norm %lldx%lld rel L2 %.3g (bound %.2g)", (long long)n, (long long)dim, rel,
              tol);
    act_quant_int8_ref(got, n, dim, qr, sr);
    CHECK(memcmp(qg, qr, (size_t)(n * dim)) == 0 && memcmp(sg, sr, sizeof(float) * n) == 0);
    /* GLU rows: gate at column 0, up at column dim + off of rows of stride ld */
    for (int act = 0; act < 2; act++) {
        for (int64_t t = 0; t < n; t++) {
            memcpy(ref + t * dim, gu + t * ld, sizeof(float) * dim);
            fwd_glu(act ? ACT_RELU2 : ACT_SILU, ref + t * dim, gu + t * ld + dim + off, dim);
        }
        REQUIRE(fwdc_glu_rows(act, dgu, dgu + dim + off, n, dim, ld, dout, NULL, dq, ds, 0) == 0);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        dev_get(&bo, got);
        dev_get(&bq, qg);
        dev_get(&bs, sg);
        rel = rel_l2(got, ref, n * dim);
        CHECK_MSG(rel <= 1e-6, "glu rows %lldx%lld act %d rel L2 %.3g", (long long)n, (long long)dim, act,
                  rel);
        act_quant_int8_ref(got, n, dim, qr, sr);
        CHECK_MSG(memcmp(qg, qr, (size_t)(n * dim)) == 0 && memcmp(sg, sr, sizeof(float) * n) == 0,
                  "glu rows %lldx%lld act %d: int8 activations differ from act_quant_int8_ref", (long long)n,
                  (long long)dim, act);
    }
    CHECK(dev_done(&bx) && dev_done(&bh) && dev_done(&bw) && dev_done(&bo) && dev_done(&bq) &&
          dev_done(&bs) && dev_done(&bgu));
    free(x), free(h), free(w), free(sum), free(ref), free(got), free(gx), free(gu), free(qg), free(qr);
    free(sg), free(sr);
}

/* 777: the scalar kernels; 1000, 4608, 40: float4 rows kept in registers; 17000 x 20
 * rows: float4 rows too wide for the register cache; up to 16 rows of >= 4096
 * columns: the GLU rows split over a cluster of CTAs (11008, 17000, 36864) */
TEST(gpu_fused_norm_glu_match_cpu) {
    SKIP_WITHOUT_GPU();
    check_fused_norm_glu(777, 6);
    check_fused_norm_glu(1000, 6);
    check_fused_norm_glu(4608, 2);
    check_fused_norm_glu(40, 3);
    check_fused_norm_glu(17000, 20);
    check_fused_norm_glu(17000, 6);
    check_fused_norm_glu(11008, 1);
    check_fused_norm_glu(12288, 2); /* (past the columns fwdc_norm_x_ready reads before its wait) */
    check_fused_norm_glu(36864, 3);
}

/* W (R x K, one scale per row): codes drawn uniformly from {-1, 0, 1}, then
 * scales 1e-3 (1 + |u|), both from *s; uploaded into dW.  0, or -1 with the
 * error set. */
static int rand_ternary_upload(int64_t R, int64_t K, uint64_t *s, TernaryMatrix *W, TernCudaMatrix *dW) {
    int8_t *cq = xmalloc((size_t)(R * K));
    float *cs = xmalloc(sizeof(float) * (size_t)R);
    for (int64_t i = 0; i < R * K; i++) cq[i] = (int8_t)((int)((*s = *s * 6364136223846793005ull + 1) >> 61) % 3 - 1);
    for (int64_t r = 0; r < R; r++) cs[r] = 1e-3f * (1.0f + fabsf(frand(s)));
    int rc = tern_from_codes(cq, cs, R, K, QG_ROW, DT_F32, W);
    free(cq), free(cs);
    if (rc == 0 && (rc = tern_cuda_upload(W, dW)) != 0) tern_free(W);
    return rc;
}

/* fwdc_norm_deferred (the next layer's norm finishing a deferred f32-input
 * GEMV's K split) gives the same bits as that GEMV finishing itself and then
 * fwdc_norm — residual, f32 output, int8 codes and scale — at row widths
 * that take each cached-norm form (4096: one float4 a thread, 4608: two,
 * 11008: four), and leaves the partials zero.  The GEMV is forced onto the
 * bulk-copy kernel (variant 63540), whose plan splits K at 8192 columns. */
TEST(gpu_norm_deferred_equals_norm) {
    SKIP_WITHOUT_GPU();
    static const int64_t dims[] = {4096, 4608, 11008};
    const int64_t K = 8192;
    for (int di = 0; di < 3; di++) {
        const int64_t R = dims[di];
        uint64_t s = 21 + (uint64_t)di;
        TernaryMatrix W;
        TernCudaMatrix dW;
        REQUIRE(rand_ternary_upload(R, K, &s, &W, &dW) == 0);
        float *x = xmalloc(sizeof(float) * K), *res = xmalloc(sizeof(float) * R), *w = xmalloc(sizeof(float) * R);
        float mx = 0.0f;
        for (int64_t i = 0; i < K; i++) x[i] = 2.0f * frand(&s), mx = fmaxf(mx, fabsf(x[i]));
        for (int64_t r = 0; r < R; r++) res[r] = frand(&s), w[r] = 1.0f + 0.3f * frand(&s);
        unsigned mxb;
        memcpy(&mxb, &mx, 4);
        DevBuf bx, bm, bw, by, br[2], bo[2], bq[2], bs[2];
        float *dx = dev_new(&bx, sizeof(float) * K, x), *dw = dev_new(&bw, sizeof(float) * R, w);
        unsigned *dm = dev_new(&bm, sizeof(unsigned), &mxb);
        float *dy = dev_new(&by, sizeof(float) * R, NULL);
        float *dr[2], *dout[2], *dsx[2];
        int8_t *dq[2];
        for (int k = 0; k < 2; k++) {
            dr[k] = dev_new(&br[k], sizeof(float) * R, res);
            dout[k] = dev_new(&bo[k], sizeof(float) * R, NULL);
            dq[k] = dev_new(&bq[k], (size_t)R, NULL);
            dsx[k] = dev_new(&bs[k], sizeof(float), NULL);
        }
        const int oldv = tern_cuda_decode_variant(63540);
        REQUIRE(tern_cuda_matmul_i8_f32x(&dW, dx, dm, dy, 0) == 0);
        REQUIRE(fwdc_norm(dr[0], dy, dw, 1, R, 1e-5f, dout[0], NULL, dq[0], dsx[0], 0) == 0);
        TernDeferred def;
        REQUIRE(tern_cuda_matmul_i8_f32x_defer(&dW, dx, dm, dy, &def, 0) == 0);
        const int deferred = def.part != NULL;
        if (deferred) REQUIRE(fwdc_norm_deferred(dr[1], &def, dw, R, 1e-5f, dout[1], NULL, dq[1], dsx[1], 0) == 0);
        tern_cuda_decode_variant(oldv);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        CHECK_MSG(deferred, "%lld x %lld on variant 63540: the GEMV finished its own K split", (long long)R,
                  (long long)K);
        if (deferred) {
            float *a = xmalloc(sizeof(float) * R), *b = xmalloc(sizeof(float) * R);
            int8_t *qa = xmalloc((size_t)R), *qb = xmalloc((size_t)R);
            int *part = xmalloc(sizeof(int) * R);
            float sa, sb;
            int bad = 0, left = 0;
            dev_get(&br[0], a), dev_get(&br[1], b);
            bad += memcmp(a, b, sizeof(float) * R) != 0;
            dev_get(&bo[0], a), dev_get(&bo[1], b);
            bad += 2 * (memcmp(a, b, sizeof(float) * R) != 0);
            dev_get(&bq[0], qa), dev_get(&bq[1], qb), dev_get(&bs[0], &sa), dev_get(&bs[1], &sb);
            bad += 4 * (memcmp(qa, qb, (size_t)R) != 0 || memcmp(&sa, &sb, 4) != 0);
            REQUIRE(cudaMemcpy(part, def.part, sizeof(int) * R, cudaMemcpyDeviceToHost) == cudaSuccess);
            for (int64_t r = 0; r < R; r++) left += part[r] != 0;
            CHECK_MSG(bad == 0, "%lld columns: deferred norm differs (mask %d: 1 residual, 2 f32, 4 int8)",
                      (long long)R, bad);
            CHECK_MSG(left == 0, "%lld columns: %d partials left non-zero", (long long)R, left);
            free(a), free(b), free(qa), free(qb), free(part);
        }
        CHECK(dev_done(&bx) && dev_done(&bm) && dev_done(&bw) && dev_done(&by));
        for (int k = 0; k < 2; k++) CHECK(dev_done(&br[k]) && dev_done(&bo[k]) && dev_done(&bq[k]) && dev_done(&bs[k]));
        tern_cuda_free(&dW);
        tern_free(&W);
        free(x), free(res), free(w);
    }
}

/* argmax of each row equals argmax_f32 (first index on ties), rows of one
 * chunk of columns and of many (the chunks' pairs reduced by the last CTA of
 * a row; called twice: the counters and scratch are left clear). */
static void check_argmax(int64_t rows, int64_t cols, uint64_t seed) {
    uint64_t s = seed;
    float *x = xmalloc(sizeof(float) * rows * cols);
    for (int64_t i = 0; i < rows * cols; i++) x[i] = frand(&s);
    if (cols > 20) x[0 * cols + 17] = x[0 * cols + cols - 3] = 7.0f; /* tie far apart: the first wins */
    for (int64_t i = 0; i < cols; i++) x[1 * cols + i] = -1.0f; /* all equal: index 0 */
    x[2 * cols + cols - 1] = 9.0f;                              /* the last column */
    if (rows > 3) x[3 * cols + cols / 2] = x[3 * cols + cols / 2 + 1] = 8.0f; /* adjacent tie */
    if (rows > 4)
        for (int64_t i = 0; i < cols; i++) x[4 * cols + i] = -INFINITY; /* nothing above -inf: index 0 */
    int32_t *got = xmalloc(sizeof(int32_t) * rows), *got2 = xmalloc(sizeof(int32_t) * rows);
    DevBuf bx, bo, bo2;
    float *dx = dev_new(&bx, sizeof(float) * rows * cols, x);
    int32_t *dout = dev_new(&bo, sizeof(int32_t) * rows, NULL), *dout2 = dev_new(&bo2, sizeof(int32_t) * rows, NULL);
    for (int rep = 0; rep < 2; rep++) {
        /* -1 before each call: a row whose last CTA never ran (a counter left non-zero) shows;
         * the second copy asked for on the second call only (left -1 on the first) */
        REQUIRE(cudaMemset(dout, 0xff, sizeof(int32_t) * rows) == cudaSuccess);
        REQUIRE(cudaMemset(dout2, 0xff, sizeof(int32_t) * rows) == cudaSuccess);
        REQUIRE(fwdc_argmax_rows(dx, rows, cols, dout, rep ? dout2 : NULL, 0) == 0);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        dev_get(&bo, got);
        dev_get(&bo2, got2);
        for (int64_t r = 0; r < rows; r++) {
            CHECK_MSG(got[r] == argmax_f32(x + r * cols, cols), "%lld x %lld, call %d, row %lld: %d vs %lld",
                      (long long)rows, (long long)cols, rep, (long long)r, got[r],
                      (long long)argmax_f32(x + r * cols, cols));
            CHECK_MSG(got2[r] == (rep ? got[r] : -1), "%lld x %lld, call %d, row %lld: second copy %d, first %d",
                      (long long)rows, (long long)cols, rep, (long long)r, got2[r], got[r]);
        }
    }
    CHECK(dev_done(&bx) && dev_done(&bo) && dev_done(&bo2));
    free(x), free(got), free(got2);
}

TEST(gpu_argmax_rows_match_cpu) {
    SKIP_WITHOUT_GPU();
    check_argmax(5, 5003, 12);   /* two chunks of 4096 */
    check_argmax(5, 4096, 13);   /* exactly one */
    check_argmax(4, 300, 14);    /* less than one */
    check_argmax(6, 70001, 15);  /* 18 chunks, the last partial */
    check_argmax(3, 256000, 16); /* the 27B vocabulary */
    check_argmax(65537, 8, 17);  /* more rows than one launch's grid takes (65535) */
}

TEST(gpu_act_quant_bit_identical) {
    SKIP_WITHOUT_GPU();
    const int64_t n = 5, cols = 1001;
    uint64_t s = 2;
    float *x = xmalloc(sizeof(float) * (size_t)(n * cols));
    for (int64_t i = 0; i < n * cols; i++) x[i] = 2.0f * frand(&s);
    for (int64_t i = 0; i < cols; i++) x[cols + i] = (float)(i % 255 - 127) / 127.0f; /* ties */
    for (int64_t i = 0; i < cols; i++) x[2 * cols + i] = 0.0f;                        /* all zero */
    for (int64_t i = 0; i < 400; i++) x[3 * cols + i] = i % 3 ? 0.0f : -0.0f; /* zero in slice 0 only */
    x[4 * cols + 7] = -0.0f, x[4 * cols + 500] = -3.5f; /* the row's largest |x| in slice 1, negative */
    int8_t *qr = xmalloc((size_t)(n * cols)), *qg = xmalloc((size_t)(n * cols));
    float sr[5], sg[5];
    act_quant_int8_ref(x, n, cols, qr, sr);
    DevBuf bx, bq, bs;
    float *dx = dev_new(&bx, sizeof(float) * (size_t)(n * cols), x);
    int8_t *dq = dev_new(&bq, (size_t)(n * cols), NULL);
    float *ds = dev_new(&bs, sizeof sg, NULL);
    REQUIRE(fwdc_act_quant_i8(dx, n, cols, dq, ds, 0) == 0);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    dev_get(&bq, qg);
    dev_get(&bs, sg);
    CHECK(memcmp(qr, qg, (size_t)(n * cols)) == 0);
    CHECK(memcmp(sr, sg, sizeof sr) == 0);
    /* the tensor-parallel form: each of two column slices (as a rank holds
     * them, rows of w) quantised with the larger of the slices' row maxima
     * (fwdc_row_absmax; the all-reduce's max) gives the whole rows' values
     * and scales */
    const int64_t w0 = 400, w1 = cols - w0;
    float *xs[2] = {xmalloc(sizeof(float) * (size_t)(n * w0)), xmalloc(sizeof(float) * (size_t)(n * w1))};
    for (int64_t t = 0; t < n; t++) {
        memcpy(xs[0] + t * w0, x + t * cols, sizeof(float) * (size_t)w0);
        memcpy(xs[1] + t * w1, x + t * cols + w0, sizeof(float) * (size_t)w1);
    }
    float mx[2][5], mref[5];
    int quant_ok = 1;
    for (int pass = 0; pass < 2; pass++) /* pass 0: the maxima; 1: quantise with their max */
        for (int r = 0; r < 2; r++) {
            const int64_t w = r ? w1 : w0;
            DevBuf bxs, bm, bqs, bss;
            float *dxs = dev_new(&bxs, sizeof(float) * (size_t)(n * w), xs[r]);
            float *dm = dev_new(&bm, sizeof mref, pass ? mref : NULL);
            int8_t *dqs = dev_new(&bqs, (size_t)(n * w), NULL);
            float *dss = dev_new(&bss, sizeof sg, NULL);
            if (pass == 0) {
                REQUIRE(fwdc_row_absmax(dxs, n, w, dm, 0) == 0);
                REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
                dev_get(&bm, mx[r]);
            } else {
                REQUIRE(fwdc_act_quant_i8_max(dxs, n, w, dm, dqs, dss, 0) == 0);
                REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
                int8_t *q = xmalloc((size_t)(n * w));
                dev_get(&bqs, q);
                dev_get(&bss, sg);
                for (int64_t t = 0; t < n; t++)
                    quant_ok = quant_ok && !memcmp(q + t * w, qr + t * cols + (r ? w0 : 0), (size_t)w);
                quant_ok = quant_ok && !memcmp(sr, sg, sizeof sr);
                free(q);
            }
            CHECK(dev_done(&bxs) && dev_done(&bm) && dev_done(&bqs) && dev_done(&bss));
            if (pass == 0 && r == 1)
                for (int64_t t = 0; t < n; t++) mref[t] = mx[0][t] > mx[1][t] ? mx[0][t] : mx[1][t];
        }
    for (int64_t t = 0; t < n; t++) { /* the maxima themselves */
        float m = 0.0f;
        for (int64_t k = 0; k < cols; k++) m = fabsf(x[t * cols + k]) > m ? fabsf(x[t * cols + k]) : m;
        CHECK_MSG(mref[t] == m, "row %lld: max %g, expected %g", (long long)t, mref[t], m);
    }
    CHECK(quant_ok);
    CHECK(dev_done(&bx) && dev_done(&bq) && dev_done(&bs));
    free(x), free(qr), free(qg), free(xs[0]), free(xs[1]);
    /* rows of 9000 columns (whole float4s: the maxima given, the row spread over three CTAs,
     * the last partial), the largest |x| negative in the last CTA's columns */
    const int64_t n2 = 3, c2 = 9000;
    float *x2 = xmalloc(sizeof(float) * (size_t)(n2 * c2)), m2[3], s2r[3], s2g[3];
    for (int64_t i = 0; i < n2 * c2; i++) x2[i] = 3.0f * frand(&s);
    for (int64_t t = 0; t < n2; t++) {
        x2[t * c2 + 8500 + t] = -9.0f - (float)t;
        m2[t] = 0.0f;
        for (int64_t k = 0; k < c2; k++) m2[t] = fabsf(x2[t * c2 + k]) > m2[t] ? fabsf(x2[t * c2 + k]) : m2[t];
    }
    int8_t *q2r = xmalloc((size_t)(n2 * c2)), *q2g = xmalloc((size_t)(n2 * c2));
    act_quant_int8_ref(x2, n2, c2, q2r, s2r);
    DevBuf b2x, b2m, b2q, b2s;
    float *d2x = dev_new(&b2x, sizeof(float) * (size_t)(n2 * c2), x2), *d2m = dev_new(&b2m, sizeof m2, m2);
    int8_t *d2q = dev_new(&b2q, (size_t)(n2 * c2), NULL);
    float *d2s = dev_new(&b2s, sizeof s2g, NULL);
    REQUIRE(fwdc_act_quant_i8_max(d2x, n2, c2, d2m, d2q, d2s, 0) == 0);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    dev_get(&b2q, q2g);
    dev_get(&b2s, s2g);
    CHECK_MSG(memcmp(q2r, q2g, (size_t)(n2 * c2)) == 0 && memcmp(s2r, s2g, sizeof s2r) == 0,
              "rows of 9000 columns with their maxima given: codes or scales differ from the reference");
    CHECK(dev_done(&b2x) && dev_done(&b2m) && dev_done(&b2q) && dev_done(&b2s));
    free(x2), free(q2r), free(q2g);
}

TEST(gpu_glu_add_bf16_match_cpu) {
    SKIP_WITHOUT_GPU();
    const int64_t cnt = 12345;
    uint64_t s = 3;
    float *g = xmalloc(sizeof(float) * cnt), *u = xmalloc(sizeof(float) * cnt);
    float *ref = xmalloc(sizeof(float) * cnt), *got = xmalloc(sizeof(float) * cnt);
    for (int act = 0; act < 2; act++) {
        for (int64_t i = 0; i < cnt; i++) g[i] = 6.0f * frand(&s), u[i] = frand(&s);
        memcpy(ref, g, sizeof(float) * cnt);
        fwd_glu(act == 0 ? ACT_SILU : ACT_RELU2, ref, u, cnt);
        DevBuf bg, bu;
        float *dg = dev_new(&bg, sizeof(float) * cnt, g), *du = dev_new(&bu, sizeof(float) * cnt, u);
        REQUIRE(fwdc_glu(act, dg, du, cnt, 0) == 0);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        dev_get(&bg, got);
        double rel = rel_l2(got, ref, cnt);
        CHECK_MSG(rel <= 1e-6, "act %d: rel L2 %.3g", act, rel);
        /* residual add is exact; bf16 conversion rounds to nearest even */
        REQUIRE(fwdc_add(dg, du, cnt, 0) == 0);
        uint16_t *b16 = xmalloc(2 * cnt), *d16;
        DevBuf bb;
        d16 = dev_new(&bb, 2 * cnt, NULL);
        REQUIRE(fwdc_to_bf16(dg, cnt, d16, 0) == 0);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        float *sum = xmalloc(sizeof(float) * cnt);
        dev_get(&bg, sum);
        dev_get(&bb, b16);
        int bad = 0, bad16 = 0;
        for (int64_t i = 0; i < cnt; i++) {
            bad += sum[i] != got[i] + u[i];
            bad16 += b16[i] != bf16_rne(sum[i]);
        }
        CHECK_MSG(bad == 0 && bad16 == 0, "add: %d wrong, bf16: %d wrong", bad, bad16);
        CHECK(dev_done(&bg) && dev_done(&bu) && dev_done(&bb));
        free(b16), free(sum);
    }
    free(g), free(u), free(ref), free(got);
}

/* The ternary pages on the case check_attention_1 just ran (its q and k
 * rotated in place, its f32 pages written): fwdc_rope_kv_write without pages
 * rotates q, k as with them and writes nothing else; fwdc_kv_code_rows codes
 * each token's rotated K and V rows into its slot as kvt_quant_row does, byte
 * for byte, leaving the unused blocks' bytes alone; fwdc_attention_tern over
 * those pages gives the bits fwdc_attention gives over f32 pages holding
 * their values (fwdc_kv_ternarise in place: the same kernels read the same
 * numbers).  Under TERNLAB_CUDA_ATTN=block it is refused. */
static void check_attention_tern(int n_heads, int n_kv, int hd, int bs, int ctx, int one_seq, int start,
                                 const float *q, const float *k, const float *v, const float *cs, const float *sn,
                                 int64_t rope_len, int n_blocks, const int32_t *tab, DevBuf *bq, DevBuf *bk,
                                 DevBuf *bv, DevBuf *bpos, DevBuf *bslot, DevBuf *brow, DevBuf *btab, DevBuf *bkp,
                                 DevBuf *bvp) {
    const int qd = n_heads * hd, kvd = n_kv * hd, half = hd / 2, cb = (hd + 3) / 4, nks = (hd + 15) / 16;
    const int64_t rows = (int64_t)n_blocks * n_kv * bs;
    float *dq = dev_ptr(bq), *dk = dev_ptr(bk), *dv = dev_ptr(bv), *dkp = dev_ptr(bkp), *dvp = dev_ptr(bvp);
    int32_t *dpos = dev_ptr(bpos), *dslot = dev_ptr(bslot), *drow = dev_ptr(brow), *dtab = dev_ptr(btab);
    DevBuf bq2, bk2, bcos, bsin, bkc, bvc, bks, bvs, bo1, bo2;
    float *dq2 = dev_new(&bq2, sizeof(float) * (size_t)ctx * qd, q), *dk2 = dev_new(&bk2, sizeof(float) * (size_t)ctx * kvd, k);
    float *dcos = dev_new(&bcos, sizeof(float) * (size_t)rope_len * half, cs);
    float *dsin = dev_new(&bsin, sizeof(float) * (size_t)rope_len * half, sn);
    FwdcKvTern pg = {dev_new(&bkc, (size_t)rows * cb, NULL), dev_new(&bvc, (size_t)rows * cb, NULL),
                     dev_new(&bks, sizeof(uint16_t) * (size_t)rows * nks, NULL),
                     dev_new(&bvs, sizeof(uint16_t) * (size_t)rows, NULL)};
    float *o1 = dev_new(&bo1, sizeof(float) * (size_t)ctx * qd, NULL), *o2 = dev_new(&bo2, sizeof(float) * (size_t)ctx * qd, NULL);
    REQUIRE(fwdc_rope_kv_write(dq2, qd, dk2, kvd, dv, kvd, dpos, dslot, ctx, n_heads, n_kv, hd, dcos, dsin, NULL,
                               NULL, bs, 0) == 0);
    REQUIRE(fwdc_kv_code_rows(dk, kvd, dv, kvd, dslot, ctx, n_kv, hd, bs, pg, 0) == 0);
    REQUIRE(fwdc_kv_ternarise(dkp, dvp, dslot, ctx, n_kv, hd, bs, 0) == 0);
    const char *kind = getenv("TERNLAB_CUDA_ATTN");
    const int block = kind && !strcmp(kind, "block");
    const int sp = fwdc_attention_splits(ctx - start, n_heads, n_heads, ctx, hd, 1); /* (the engine's choice) */
    REQUIRE(fwdc_attention(dq + (size_t)start * qd, qd, dkp, dvp, dpos + start, dtab, n_blocks, drow + start,
                           ctx - start, n_heads, n_kv, hd, bs, n_heads, one_seq, o1 + (size_t)start * qd, sp, 0) == 0);
    const int rc = fwdc_attention_tern(dq + (size_t)start * qd, qd, pg, dpos + start, dtab, n_blocks, drow + start,
                                       ctx - start, n_heads, n_kv, hd, bs, n_heads, one_seq, o2 + (size_t)start * qd, sp,
                                       0);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    if (block) CHECK_MSG(rc != 0 && strstr(err_msg(), "TERNLAB_CUDA_ATTN=block"), "block kernel: rc %d", rc);
    else CHECK_MSG(rc == 0, "fwdc_attention_tern: %s", err_msg());
    const size_t nq = (size_t)ctx * qd, nk = (size_t)ctx * kvd;
    float *a = xmalloc(sizeof(float) * nq), *b = xmalloc(sizeof(float) * nq), *kr = xmalloc(sizeof(float) * nk);
    float *vr = xmalloc(sizeof(float) * nk);
    uint8_t *kc = xmalloc((size_t)rows * cb), *vc = xmalloc((size_t)rows * cb);
    uint16_t *ks = xmalloc(sizeof(uint16_t) * (size_t)rows * nks), *vs = xmalloc(sizeof(uint16_t) * (size_t)rows);
    /* the rotation without pages: the same q and k */
    dev_get(bq, a), dev_get(&bq2, b);
    CHECK_MSG(memcmp(a, b, sizeof(float) * nq) == 0, "hd %d: q rotated without pages differs", hd);
    dev_get(bk, kr), dev_get(&bk2, b);
    CHECK_MSG(memcmp(kr, b, sizeof(float) * nk) == 0, "hd %d: k rotated without pages differs", hd);
    dev_get(bv, vr);
    /* the codes: kvt_quant_row of each token's rows at its slot; other rows the fill */
    dev_get(&bkc, kc), dev_get(&bvc, vc), dev_get(&bks, ks), dev_get(&bvs, vs);
    char *used = xcalloc((size_t)rows, 1);
    uint8_t c1[64], c2[64];
    uint16_t s1[16], s2[1];
    int bad = 0, touched = 0;
    for (int i = 0; i < ctx; i++)
        for (int h = 0; h < n_kv; h++) {
            const size_t r = ((size_t)(tab[i / bs]) * n_kv + (size_t)h) * bs + (size_t)(i % bs);
            used[r] = 1;
            kvt_quant_row(kr + (size_t)i * kvd + (size_t)h * hd, hd, 1, c1, s1);
            kvt_quant_row(vr + (size_t)i * kvd + (size_t)h * hd, hd, 0, c2, s2);
            bad += memcmp(kc + r * cb, c1, (size_t)cb) != 0 || memcmp(ks + r * nks, s1, 2 * (size_t)nks) != 0 ||
                   memcmp(vc + r * cb, c2, (size_t)cb) != 0 || vs[r] != s2[0];
        }
    for (int64_t r = 0; r < rows; r++) {
        if (used[r]) continue;
        for (int j = 0; j < cb; j++) touched += kc[r * cb + j] != GUARD_BYTE || vc[r * cb + j] != GUARD_BYTE;
        for (int j = 0; j < nks; j++) touched += ks[r * nks + j] != (GUARD_BYTE | GUARD_BYTE << 8);
        touched += vs[r] != (GUARD_BYTE | GUARD_BYTE << 8);
    }
    CHECK_MSG(bad == 0, "heads %d/%d hd %d bs %d: %d rows coded unlike kvt_quant_row", n_heads, n_kv, hd, bs, bad);
    CHECK_MSG(touched == 0, "hd %d: %d bytes of unused rows written", hd, touched);
    if (!block) {
        dev_get(&bo1, a), dev_get(&bo2, b);
        /* head_dim of whole K scale groups: the warp kernel's key lanes (a key's products summed in
         * another order), within 1e-5 of the f32 pages' kernel; else the same kernels, the same bits */
        const int keys = hd % 16 == 0;
        double mx = 1.0, err = 0.0;
        for (size_t e = (size_t)start * qd; e < nq; e++) mx = fmax(mx, fabs(a[e]));
        for (size_t e = (size_t)start * qd; e < nq; e++) err = fmax(err, fabs((double)a[e] - b[e]));
        CHECK_MSG(keys ? err <= 1e-5 * mx
                       : memcmp(a + (size_t)start * qd, b + (size_t)start * qd, sizeof(float) * (nq - (size_t)start * qd)) == 0,
                  "heads %d/%d hd %d bs %d ctx %d one_seq %d start %d: ternary pages' attention differs from f32 "
                  "pages holding their values (max %.3g, largest |output| %.3g)",
                  n_heads, n_kv, hd, bs, ctx, one_seq, start, err, mx);
    }
    DevBuf *all[] = {&bq2, &bk2, &bcos, &bsin, &bkc, &bvc, &bks, &bvs, &bo1, &bo2};
    int guards = 1;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) guards &= dev_done(all[i]);
    CHECK_MSG(guards, "a guard region around a ternary-page buffer was written");
    free(a), free(b), free(kr), free(vr), free(kc), free(vc), free(ks), free(vs), free(used);
}

/* RoPE + paged K/V write + attention for one sequence of ctx tokens whose
 * blocks are shuffled over a pool with unused blocks, against a float64
 * reference (RoPE tables from forward.c).  The attention call takes tokens
 * start .. ctx-1 (a prompt continued after start cached positions). */
static void check_attention_1(int n_heads, int n_kv, int hd, int bs, int ctx, int one_seq, int start) {
    const int n_blocks = (ctx + bs - 1) / bs + 3, qd = n_heads * hd, kvd = n_kv * hd;
    Model m;
    memset(&m, 0, sizeof m);
    m.cfg.head_dim = hd;
    m.cfg.rope_theta = 10000.0;
    REQUIRE(fwd_rope_ensure(&m, ctx) == 0);
    const int half = hd / 2;
    uint64_t s = (uint64_t)(n_heads * 1000 + hd * 10 + bs);
    float *q = xmalloc(sizeof(float) * (size_t)ctx * qd), *k = xmalloc(sizeof(float) * (size_t)ctx * kvd);
    float *v = xmalloc(sizeof(float) * (size_t)ctx * kvd);
    for (int i = 0; i < ctx * qd; i++) q[i] = frand(&s);
    for (int i = 0; i < ctx * kvd; i++) k[i] = frand(&s), v[i] = frand(&s);
    /* block table: a permutation of the pool, the last 3 blocks never used */
    int32_t *tab = xmalloc(sizeof(int32_t) * (size_t)n_blocks);
    for (int b = 0; b < n_blocks; b++) tab[b] = b;
    for (int b = n_blocks - 4; b > 0; b--) {
        int j = (int)((frand(&s) * 0.5f + 0.5f) * (float)(b + 1)) % (b + 1);
        int t = tab[b];
        tab[b] = tab[j];
        tab[j] = t;
    }
    int32_t *pos = xmalloc(sizeof(int32_t) * (size_t)ctx), *slot = xmalloc(sizeof(int32_t) * (size_t)ctx);
    int32_t *row = xcalloc((size_t)ctx, sizeof(int32_t));
    for (int i = 0; i < ctx; i++) pos[i] = i, slot[i] = tab[i / bs] * bs + i % bs;
    /* reference: RoPE with the CPU twin, attention in float64 */
    float *qr = xmalloc(sizeof(float) * (size_t)ctx * qd), *kr = xmalloc(sizeof(float) * (size_t)ctx * kvd);
    memcpy(qr, q, sizeof(float) * (size_t)ctx * qd);
    memcpy(kr, k, sizeof(float) * (size_t)ctx * kvd);
    for (int i = 0; i < ctx; i++) {
        fwd_rope_apply(qr + (size_t)i * qd, n_heads, hd, m.rope_cos + (size_t)i * half, m.rope_sin + (size_t)i * half);
        fwd_rope_apply(kr + (size_t)i * kvd, n_kv, hd, m.rope_cos + (size_t)i * half, m.rope_sin + (size_t)i * half);
    }
    float *ref = xmalloc(sizeof(float) * (size_t)ctx * qd);
    double *sc = xmalloc(sizeof(double) * (size_t)ctx);
    for (int i = start; i < ctx; i++) /* (only the rows compared) */
        for (int h = 0; h < n_heads; h++) {
            int kh = h / (n_heads / n_kv);
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j <= i; j++) {
                double d = 0;
                for (int e = 0; e < hd; e++)
                    d += (double)qr[(size_t)i * qd + h * hd + e] * kr[(size_t)j * kvd + kh * hd + e];
                sc[j] = d / sqrt((double)hd);
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int j = 0; j <= i; j++) sum += (sc[j] = exp(sc[j] - mx));
            for (int e = 0; e < hd; e++) {
                double o = 0;
                for (int j = 0; j <= i; j++) o += sc[j] * v[(size_t)j * kvd + kh * hd + e];
                ref[(size_t)i * qd + h * hd + e] = (float)(o / sum);
            }
        }
    const size_t page = (size_t)n_blocks * n_kv * bs * hd;
    DevBuf bq, bk, bv, bpos, bslot, brow, btab, bcos, bsin, bkp, bvp, bout;
    float *dq = dev_new(&bq, sizeof(float) * (size_t)ctx * qd, q);
    float *dk = dev_new(&bk, sizeof(float) * (size_t)ctx * kvd, k);
    float *dv = dev_new(&bv, sizeof(float) * (size_t)ctx * kvd, v);
    int32_t *dpos = dev_new(&bpos, sizeof(int32_t) * (size_t)ctx, pos);
    int32_t *dslot = dev_new(&bslot, sizeof(int32_t) * (size_t)ctx, slot);
    int32_t *drow = dev_new(&brow, sizeof(int32_t) * (size_t)ctx, row);
    int32_t *dtab = dev_new(&btab, sizeof(int32_t) * (size_t)n_blocks, tab);
    float *dcos = dev_new(&bcos, sizeof(float) * (size_t)m.rope_len * half, m.rope_cos);
    float *dsin = dev_new(&bsin, sizeof(float) * (size_t)m.rope_len * half, m.rope_sin);
    float *dkp = dev_new(&bkp, sizeof(float) * page, NULL);
    float *dvp = dev_new(&bvp, sizeof(float) * page, NULL);
    float *dout = dev_new(&bout, sizeof(float) * (size_t)ctx * qd, NULL);
    REQUIRE(fwdc_rope_kv_write(dq, qd, dk, kvd, dv, kvd, dpos, dslot, ctx, n_heads, n_kv, hd,
                               dcos, dsin, dkp, dvp, bs, 0) == 0);
    /* (a few tokens over many keys: the key split, as the engine chooses it) */
    REQUIRE(fwdc_attention(dq + (size_t)start * qd, qd, dkp, dvp, dpos + start, dtab, n_blocks,
                           drow + start, ctx - start, n_heads, n_kv, hd, bs, n_heads, one_seq,
                           dout + (size_t)start * qd, fwdc_attention_splits(ctx - start, n_heads, n_heads, ctx, hd, 0), 0) == 0);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    float *got = xmalloc(sizeof(float) * (size_t)ctx * qd), *gq = xmalloc(sizeof(float) * (size_t)ctx * qd);
    float *kp = xmalloc(sizeof(float) * page), *vp = xmalloc(sizeof(float) * page);
    dev_get(&bout, got);
    dev_get(&bq, gq);
    dev_get(&bkp, kp);
    dev_get(&bvp, vp);
    double rq = rel_l2(gq, qr, (int64_t)ctx * qd);
    double ra = rel_l2(got + (size_t)start * qd, ref + (size_t)start * qd, (int64_t)(ctx - start) * qd);
    CHECK_MSG(rq <= 1e-6, "heads %d/%d hd %d: RoPE rel L2 %.3g", n_heads, n_kv, hd, rq);
    CHECK_MSG(ra <= 1e-5, "heads %d/%d hd %d bs %d ctx %d one_seq %d start %d: attention rel L2 %.3g",
              n_heads, n_kv, hd, bs, ctx, one_seq, start, ra);
    /* the pages: each token's K (roped) and V at its slot; unused blocks untouched */
    int bad_page = 0, touched = 0;
    for (int i = 0; i < ctx; i++)
        for (int h = 0; h < n_kv; h++)
            for (int e = 0; e < hd; e++) {
                size_t at = (((size_t)(slot[i] / bs) * n_kv + h) * bs + slot[i] % bs) * hd + e;
                bad_page += fabsf(kp[at] - kr[(size_t)i * kvd + h * hd + e]) > 1e-5f;
                bad_page += vp[at] != v[(size_t)i * kvd + h * hd + e];
            }
    uint8_t fill[4] = {GUARD_BYTE, GUARD_BYTE, GUARD_BYTE, GUARD_BYTE};
    float sentinel;
    memcpy(&sentinel, fill, 4);
    for (int b = n_blocks - 3; b < n_blocks; b++)
        for (size_t e = 0; e < (size_t)n_kv * bs * hd; e++) {
            size_t at = (size_t)tab[b] * n_kv * bs * hd + e;
            touched += memcmp(&kp[at], &sentinel, 4) != 0 || memcmp(&vp[at], &sentinel, 4) != 0;
        }
    CHECK_MSG(bad_page == 0, "%d K/V page entries wrong", bad_page);
    CHECK_MSG(touched == 0, "%d entries of unused blocks written", touched);
    check_attention_tern(n_heads, n_kv, hd, bs, ctx, one_seq, start, q, k, v, m.rope_cos, m.rope_sin, m.rope_len,
                         n_blocks, tab, &bq, &bk, &bv, &bpos, &bslot, &brow, &btab, &bkp, &bvp);
    DevBuf *all[] = {&bq, &bk, &bv, &bpos, &bslot, &brow, &btab, &bcos, &bsin, &bkp, &bvp, &bout};
    int guards = 1;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) guards &= dev_done(all[i]);
    CHECK_MSG(guards, "a guard region around a device buffer was written");
    mem_free(m.rope_cos), mem_free(m.rope_sin);
    free(q), free(k), free(v), free(tab), free(pos), free(slot), free(row), free(qr), free(kr);
    free(ref), free(sc), free(got), free(gq), free(kp), free(vp);
}
/* Each case as single tokens (one_seq 0: the per-warp kernel) and as one
 * sequence's prompt (one_seq 1: from 32 tokens the tiled kernel). */
static void check_attention(int n_heads, int n_kv, int hd, int bs, int ctx) {
    check_attention_1(n_heads, n_kv, hd, bs, ctx, 0, 0);
    check_attention_1(n_heads, n_kv, hd, bs, ctx, 1, 0);
}

/* Both attention kernels (TERNLAB_CUDA_ATTN: the per-warp softmax by
 * default, the block softmax) at both CTA widths (tokens x heads <= 512 or
 * not) and every head-dim path (float4 up to 128 / 256 dims, scalars). */
TEST(gpu_rope_paged_attention_match_reference) {
    SKIP_WITHOUT_GPU();
    const char *kinds[] = {NULL, "block"};
    unsetenv("TERNLAB_CUDA_ATTN");
    for (int k = 0; k < 2; k++) {
        if (kinds[k]) setenv("TERNLAB_CUDA_ATTN", kinds[k], 1);
        check_attention(4, 2, 20, 5, 37);    /* GQA, tiny head, block 5 */
        check_attention(3, 3, 128, 16, 300); /* more than one 256-key chunk, 4 warps */
        check_attention(1, 1, 128, 16, 300); /* the same at 8 warps */
        check_attention(2, 1, 256, 7, 70);   /* the largest head_dim */
        check_attention(4, 2, 256, 16, 150); /* the largest head_dim at 4 warps */
        check_attention(8, 2, 64, 1, 9);     /* block size 1 */
        check_attention(2, 2, 6, 4, 23);     /* head_dim not a multiple of 4 */
        check_attention(2, 1, 34, 4, 45);    /* the same over three K scale groups, the last of 2 channels */
        check_attention(4, 1, 128, 16, 200); /* tiles: 4 query heads per KV head, a partial tile */
        check_attention(2, 2, 64, 3, 97);    /* tiles: head_dim 64, block 3 */
        check_attention(3, 1, 36, 8, 33);    /* tiles: head_dim 36 (dims past 32 only on some lanes) */
        check_attention(2, 2, 96, 1, 128);   /* tiles: block size 1, dims past 64 on half the lanes, n = 2 x 64 */
        /* a prompt continued after cached positions (chunked prefill) */
        check_attention_1(2, 1, 128, 16, 300, 1, 200);
        check_attention_1(3, 3, 72, 5, 150, 1, 50);
        check_attention_1(3, 3, 72, 5, 150, 0, 50);
        /* ternary pages' key lanes: the fixtures' head_dim 32 (a partial last warp of keys), and one
         * token over 1100 keys (five 256-key chunks; the key split: 8 CTAs a head, merged) */
        check_attention(4, 4, 32, 16, 70);
        check_attention_1(2, 2, 128, 16, 1100, 0, 1099);
        /* tokens over 301-600 / 501-600 keys, 600 / 200 CTAs (no key split): up to three 256-key chunks a
         * CTA, at head_dim 128 and 256 (the query's pair table) */
        check_attention_1(2, 1, 128, 16, 600, 0, 300);
        check_attention_1(2, 1, 256, 16, 600, 0, 500);
        /* head_dim 256 over 60 CTAs (30 tokens, < 256 keys: no split): 16 warps, the key lanes
         * without the pair table */
        check_attention_1(2, 1, 256, 16, 200, 0, 170);
        /* head_dim 256, two tokens x 16 heads over ~1.1k keys: 8 splits, 256 CTAs of 8 warps (the
         * 7b-hd256 shape's decode at batch 2) */
        check_attention_1(16, 16, 256, 16, 1100, 0, 1098);
        /* head_dim 144 / 192 (the pair table's first 72 / 96 pairs): 600 CTAs of 4 warps, 200 of 8 */
        check_attention(4, 2, 144, 16, 150);
        check_attention_1(2, 1, 192, 16, 600, 0, 500);
        /* two tokens x 32 heads over ~1k keys: the ternary pages' split count cut to what the SMs
         * hold at once (H200: 4 splits, against 5 on f32 pages) */
        check_attention_1(32, 8, 128, 16, 1026, 0, 1024);
        unsetenv("TERNLAB_CUDA_ATTN");
    }
    setenv("TERNLAB_CUDA_ATTN", "bogus", 1);
    float *d = NULL;
    REQUIRE(cudaMalloc((void **)&d, 4096) == cudaSuccess);
    int32_t *di = (int32_t *)d;
    err_clear();
    CHECK(fwdc_attention(d, 8, d, d, di, di, 1, di, 1, 1, 1, 8, 16, 1, 0, d + 512, 1, 0) != 0);
    CHECK_MSG(strstr(err_msg(), "TERNLAB_CUDA_ATTN"), "message: %s", err_msg());
    unsetenv("TERNLAB_CUDA_ATTN");
    cudaFree(d);
}

/* The decode attention with RoPE and the KV write folded in
 * (fwdc_attention_rope) against the separate calls: n tokens of n distinct
 * sequences at positions `pos` (earlier positions' K / V random in the
 * pages, blocks shuffled over a pool), outputs and every page byte
 * identical, and max |out row| raised into omax.
 * code 1: fwdc_attention_rope_coded into f32 pages against rope_kv_write +
 * kv_ternarise + attention; code 2: into ternary pages (earlier rows random
 * codes and f16 scales) against rope_kv_write without pages + kv_code_rows
 * + attention_tern — every code and scale byte identical too (under
 * TERNLAB_CUDA_ATTN=block refused). */
static void check_attention_rope_code(int n_heads, int n_kv, int hd, int bs, int n, const int *pos, int sep, int prod,
                                      int code) {
    const int qd = n_heads * hd, kvd = n_kv * hd, ld = qd + 2 * kvd, half = hd / 2;
    /* sep: q, k, v as three arrays (n x qd, n x kvd, n x kvd) in one buffer,
     * as separate projections leave them; else rows of q | k | v */
    const int ldq = sep ? qd : ld, ldk = sep ? kvd : ld;
    const size_t ko = sep ? (size_t)n * qd : (size_t)qd, vo = sep ? (size_t)n * (qd + kvd) : (size_t)(qd + kvd);
    int maxb = 0;
    for (int i = 0; i < n; i++) maxb = pos[i] / bs + 1 > maxb ? pos[i] / bs + 1 : maxb;
    const int n_blocks = n * maxb + 2; /* table rows of maxb entries, 2 blocks spare */
    int maxp = 0;
    for (int i = 0; i < n; i++) maxp = pos[i] > maxp ? pos[i] : maxp;
    const int sp = fwdc_attention_splits(n, n_heads, n_heads, maxp + 1, hd, code == 2); /* (the engine's choice) */
    Model m;
    memset(&m, 0, sizeof m);
    m.cfg.head_dim = hd;
    m.cfg.rope_theta = 10000.0;
    REQUIRE(fwd_rope_ensure(&m, maxp + 1) == 0);
    uint64_t s = (uint64_t)(n_heads * 7919 + hd * 31 + bs * 7 + n);
    /* q | k | v rows as the fused q|k|v projection leaves them */
    float *qkv = xmalloc(sizeof(float) * (size_t)n * ld);
    for (int i = 0; i < n * ld; i++) qkv[i] = frand(&s);
    const size_t page = (size_t)n_blocks * n_kv * bs * hd;
    float *pk = xmalloc(sizeof(float) * page), *pv = xmalloc(sizeof(float) * page);
    for (size_t e = 0; e < page; e++) pk[e] = frand(&s), pv[e] = frand(&s);
    int32_t *perm = xmalloc(sizeof(int32_t) * (size_t)n_blocks);
    for (int b = 0; b < n_blocks; b++) perm[b] = b;
    for (int b = n_blocks - 1; b > 0; b--) {
        int j = (int)((frand(&s) * 0.5f + 0.5f) * (float)(b + 1)) % (b + 1), t = perm[b];
        perm[b] = perm[j], perm[j] = t;
    }
    int32_t *tab = xmalloc(sizeof(int32_t) * (size_t)n * maxb), *row = xmalloc(sizeof(int32_t) * (size_t)n);
    int32_t *slot = xmalloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) {
        row[i] = n - 1 - i; /* token i uses table row n-1-i */
        for (int b = 0; b < maxb; b++) tab[(size_t)row[i] * maxb + b] = perm[i * maxb + b];
        slot[i] = tab[(size_t)row[i] * maxb + pos[i] / bs] * bs + pos[i] % bs;
    }
    DevBuf bq1, bq2, bpos, bslot, brow, btab, bcos, bsin, bk1, bv1, bk2, bv2, bo1, bo2, bmx;
    float *dq1 = dev_new(&bq1, sizeof(float) * (size_t)n * ld, qkv);
    float *dq2 = dev_new(&bq2, sizeof(float) * (size_t)n * ld, qkv);
    int32_t *dpos = dev_new(&bpos, sizeof(int32_t) * (size_t)n, pos);
    int32_t *dslot = dev_new(&bslot, sizeof(int32_t) * (size_t)n, slot);
    int32_t *drow = dev_new(&brow, sizeof(int32_t) * (size_t)n, row);
    int32_t *dtab = dev_new(&btab, sizeof(int32_t) * (size_t)n * maxb, tab);
    float *dcos = dev_new(&bcos, sizeof(float) * (size_t)m.rope_len * half, m.rope_cos);
    float *dsin = dev_new(&bsin, sizeof(float) * (size_t)m.rope_len * half, m.rope_sin);
    float *dk1 = dev_new(&bk1, sizeof(float) * page, pk), *dv1 = dev_new(&bv1, sizeof(float) * page, pv);
    float *dk2 = dev_new(&bk2, sizeof(float) * page, pk), *dv2 = dev_new(&bv2, sizeof(float) * page, pv);
    /* code 2: ternary pages, random codes and scales in every row (the same in both) */
    const size_t rows = (size_t)n_blocks * n_kv * bs, cb = (size_t)(hd + 3) / 4, nks = (size_t)(hd + 15) / 16;
    uint8_t *tc = xmalloc(2 * rows * cb);
    uint16_t *tsc = xmalloc(sizeof(uint16_t) * rows * (nks + 1));
    for (size_t e = 0; e < 2 * rows * cb; e++) tc[e] = (uint8_t)((frand(&s) * 0.5f + 0.5f) * 255.0f);
    for (size_t e = 0; e < rows * (nks + 1); e++) tsc[e] = f32_to_f16(0.05f + 0.5f * fabsf(frand(&s)));
    DevBuf tb[2][4];
    FwdcKvTern tp[2] = {{0}, {0}};
    for (int c = 0; c < 2 && code == 2; c++) {
        tp[c].kc = dev_new(&tb[c][0], rows * cb, tc), tp[c].vc = dev_new(&tb[c][1], rows * cb, tc + rows * cb);
        tp[c].ks = dev_new(&tb[c][2], sizeof(uint16_t) * rows * nks, tsc);
        tp[c].vs = dev_new(&tb[c][3], sizeof(uint16_t) * rows, tsc + rows * nks);
    }
    float *do1 = dev_new(&bo1, sizeof(float) * (size_t)n * qd, NULL);
    float *do2 = dev_new(&bo2, sizeof(float) * (size_t)n * qd, NULL);
    unsigned *dmx = dev_new(&bmx, sizeof(unsigned) * (size_t)n, NULL);
    REQUIRE(cudaMemset(dmx, 0, sizeof(unsigned) * (size_t)n) == cudaSuccess);
    /* prod (one token, q|k|v rows): q|k|v come from a ternary GEMV of 200M weights on the
     * one-warp-per-row kernel (small CTAs: the attention's fit beside them) launched just before
     * the fused call on the same stream (its programmatic dependent): the fused kernel starts
     * while the GEMV runs, and reading q, k or v before its wait would see the NaNs left there
     * (the reference takes the GEMV's output after a synchronisation) */
    TernaryMatrix W;
    TernCudaMatrix dW;
    int8_t *dx = NULL;
    float *dsx = NULL;
    if (prod) {
        REQUIRE(n == 1 && !sep);
        const int64_t K = 32768;
        int8_t *xq = xmalloc((size_t)K);
        float one = 1.0f;
        REQUIRE(rand_ternary_upload(ld, K, &s, &W, &dW) == 0);
        for (int64_t i = 0; i < K; i++) xq[i] = (int8_t)(frand(&s) * 127.0f);
        REQUIRE(cudaMalloc((void **)&dx, (size_t)K) == cudaSuccess && cudaMalloc((void **)&dsx, 4) == cudaSuccess);
        REQUIRE(cudaMemcpy(dx, xq, (size_t)K, cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE(cudaMemcpy(dsx, &one, 4, cudaMemcpyHostToDevice) == cudaSuccess);
        setenv("TERNLAB_CUDA_GEMV1", "warp", 1);
        REQUIRE(tern_cuda_matmul_i8(&dW, dx, dsx, 1, dq1, 0) == 0);
        CHECK_MSG(strcmp(tern_cuda_last_config(), "gemv_warp") == 0, "q|k|v GEMV: %s", tern_cuda_last_config());
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        REQUIRE(cudaMemset(dq2, 0xff, sizeof(float) * (size_t)ld) == cudaSuccess);
        free(xq);
    }
    const char *kind = getenv("TERNLAB_CUDA_ATTN");
    const int block = kind && !strcmp(kind, "block");
    REQUIRE(fwdc_rope_kv_write(dq1, ldq, dq1 + ko, ldk, dq1 + vo, ldk, dpos, dslot, n, n_heads, n_kv,
                               hd, dcos, dsin, code == 2 ? NULL : dk1, code == 2 ? NULL : dv1, bs, 0) == 0);
    if (code == 1) REQUIRE(fwdc_kv_ternarise(dk1, dv1, dslot, n, n_kv, hd, bs, 0) == 0);
    if (code == 2) {
        REQUIRE(fwdc_kv_code_rows(dq1 + ko, ldk, dq1 + vo, ldk, dslot, n, n_kv, hd, bs, tp[0], 0) == 0);
        /* (the tiled prompt kernel is not a decode batch's: one_seq 0, as the fused form's warp kernel) */
        REQUIRE(block || fwdc_attention_tern(dq1, ldq, tp[0], dpos, dtab, maxb, drow, n, n_heads, n_kv, hd, bs,
                                             n_heads, 0, do1, sp, 0) == 0);
    } else {
        REQUIRE(fwdc_attention(dq1, ldq, dk1, dv1, dpos, dtab, maxb, drow, n, n_heads, n_kv, hd, bs,
                               n_heads, 0, do1, sp, 0) == 0);
    }
    if (prod) {
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess); /* the reference done; the GEMV then the fused call */
        REQUIRE(tern_cuda_matmul_i8(&dW, dx, dsx, 1, dq2, 0) == 0);
        unsetenv("TERNLAB_CUDA_GEMV1");
    }
    if (code == 0)
        REQUIRE(fwdc_attention_rope(dq2, ldq, dq2 + ko, ldk, dq2 + vo, ldk, dpos, dslot, dcos, dsin, dk2,
                                    dv2, dtab, maxb, drow, n, n_heads, n_kv, hd, bs, n_heads, do2, dmx,
                                    sp, 0) == 0);
    else {
        const int rc = fwdc_attention_rope_coded(dq2, ldq, dq2 + ko, ldk, dq2 + vo, ldk, dpos, dslot, dcos, dsin,
                                                 code == 2 ? NULL : dk2, code == 2 ? NULL : dv2, tp[1], dtab, maxb,
                                                 drow, n, n_heads, n_kv, hd, bs, n_heads, do2, dmx, sp, 0);
        if (code == 2 && block) { /* the block kernel reads f32 pages only */
            CHECK_MSG(rc != 0 && strstr(err_msg(), "TERNLAB_CUDA_ATTN=block"), "block, ternary pages: rc %d", rc);
            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
            if (prod) {
                tern_cuda_free(&dW);
                tern_free(&W);
                cudaFree(dx), cudaFree(dsx);
            }
            goto done;
        }
        REQUIRE(rc == 0);
    }
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    if (prod) {
        tern_cuda_free(&dW);
        tern_free(&W);
        cudaFree(dx), cudaFree(dsx);
    }
    float *o1 = xmalloc(sizeof(float) * (size_t)n * qd), *o2 = xmalloc(sizeof(float) * (size_t)n * qd);
    float *k1 = xmalloc(sizeof(float) * page), *k2 = xmalloc(sizeof(float) * page);
    float *v1 = xmalloc(sizeof(float) * page), *v2 = xmalloc(sizeof(float) * page);
    unsigned *mx = xmalloc(sizeof(unsigned) * (size_t)n);
    dev_get(&bo1, o1), dev_get(&bo2, o2), dev_get(&bk1, k1), dev_get(&bk2, k2);
    dev_get(&bv1, v1), dev_get(&bv2, v2), dev_get(&bmx, mx);
    int bad_o = 0, bad_mx = 0, new_k = 0;
    for (int i = 0; i < n * qd; i++) bad_o += memcmp(o1 + i, o2 + i, 4) != 0;
    for (int i = 0; i < n; i++) {
        float want = 0.0f;
        for (int e = 0; e < qd; e++) want = fmaxf(want, fabsf(o1[(size_t)i * qd + e]));
        unsigned wb;
        memcpy(&wb, &want, 4);
        bad_mx += mx[i] != wb;
        /* the token's K was written (the pages held other values there) */
        for (int h = 0; h < n_kv; h++) {
            size_t at = (((size_t)(slot[i] / bs) * n_kv + h) * bs + slot[i] % bs) * hd;
            new_k += memcmp(k2 + at, pk + at, sizeof(float) * (size_t)hd) != 0;
        }
    }
    CHECK_MSG(bad_o == 0, "heads %d/%d hd %d bs %d n %d: %d of %d outputs differ", n_heads, n_kv, hd, bs,
              n, bad_o, n * qd);
    CHECK_MSG(memcmp(k1, k2, sizeof(float) * page) == 0 && memcmp(v1, v2, sizeof(float) * page) == 0,
              "heads %d/%d hd %d n %d: the pages differ", n_heads, n_kv, hd, n);
    CHECK_MSG(code == 2 ? new_k == 0 : new_k == n * n_kv, "code %d: %d of %d K rows written", code, new_k,
              n * n_kv);
    CHECK_MSG(bad_mx == 0, "heads %d/%d hd %d n %d: %d row maxima wrong", n_heads, n_kv, hd, n, bad_mx);
    if (code == 2) { /* every code and scale byte as the separate calls left them; the tokens' rows new */
        uint8_t *c1 = xmalloc(2 * rows * cb), *c2 = xmalloc(2 * rows * cb);
        uint16_t *s1 = xmalloc(sizeof(uint16_t) * rows * (nks + 1)), *s2 = xmalloc(sizeof(uint16_t) * rows * (nks + 1));
        dev_get(&tb[0][0], c1), dev_get(&tb[0][1], c1 + rows * cb), dev_get(&tb[0][2], s1);
        dev_get(&tb[0][3], s1 + rows * nks);
        dev_get(&tb[1][0], c2), dev_get(&tb[1][1], c2 + rows * cb), dev_get(&tb[1][2], s2);
        dev_get(&tb[1][3], s2 + rows * nks);
        CHECK_MSG(memcmp(c1, c2, 2 * rows * cb) == 0 && memcmp(s1, s2, sizeof(uint16_t) * rows * (nks + 1)) == 0,
                  "heads %d/%d hd %d n %d: the ternary pages differ", n_heads, n_kv, hd, n);
        /* (a K and a V row written: its codes or scales no longer the random ones — a scale alone
         * can come out equal: the V row's one f16 scale did in 1 of 160 rows at head_dim 256) */
        int new_rows = 0;
        for (int i = 0; i < n; i++)
            for (int h = 0; h < n_kv; h++) {
                const size_t r = ((size_t)(slot[i] / bs) * n_kv + (size_t)h) * bs + (size_t)(slot[i] % bs);
                const int k_new = memcmp(c2 + r * cb, tc + r * cb, cb) != 0 ||
                                  memcmp(s2 + r * nks, tsc + r * nks, sizeof(uint16_t) * nks) != 0;
                const int v_new = memcmp(c2 + (rows + r) * cb, tc + (rows + r) * cb, cb) != 0 ||
                                  s2[rows * nks + r] != tsc[rows * nks + r];
                new_rows += k_new && v_new;
            }
        CHECK_MSG(new_rows == n * n_kv, "%d of %d ternary rows written", new_rows, n * n_kv);
        free(c1), free(c2), free(s1), free(s2);
    }
    free(o1), free(o2), free(k1), free(k2), free(v1), free(v2), free(mx);
done:;
    DevBuf *all[] = {&bq1, &bq2, &bpos, &bslot, &brow, &btab, &bcos, &bsin, &bk1, &bv1, &bk2, &bv2, &bo1, &bo2, &bmx};
    int guards = 1;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) guards &= dev_done(all[i]);
    for (int c = 0; c < 2 && code == 2; c++)
        for (int b = 0; b < 4; b++) guards &= dev_done(&tb[c][b]);
    CHECK_MSG(guards, "a guard region around a device buffer was written");
    mem_free(m.rope_cos), mem_free(m.rope_sin);
    free(qkv), free(pk), free(pv), free(perm), free(tab), free(row), free(slot), free(tc), free(tsc);
}

static void check_attention_rope(int n_heads, int n_kv, int hd, int bs, int n, const int *pos, int sep, int prod) {
    for (int code = 0; code < 3; code++) check_attention_rope_code(n_heads, n_kv, hd, bs, n, pos, sep, prod, code);
}

/* The key split's count: 1 below 256 positions or where the tokens x heads
 * fill the SMs; else the two-CTAs-an-SM count rounded up (at most 8), cut
 * one at a time while the grid is more CTAs than the SMs hold at once of the
 * kernel it takes (fwdc_attention_resident) — so the grid fits, and one split
 * more would not unless no cut was made (the old rule, rounding up only, put
 * a second, partial wave of key-lane CTAs at 2 .. 4 tokens of 32 heads). */
TEST(gpu_attention_splits_rule) {
    SKIP_WITHOUT_GPU();
    int dev = 0, n_sm = 0;
    REQUIRE(cudaGetDevice(&dev) == cudaSuccess);
    REQUIRE(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess);
    const int hds[] = {32, 34, 128, 256};
    for (int a = 0; a < 4; a++)
        for (int64_t n = 1; n <= 9; n++)
            for (int tern = 0; tern < 2; tern++) {
                const int hd = hds[a], heads = 32;
                const int64_t hxt = n * heads;
                const int sp = fwdc_attention_splits(n, heads, heads, 1024, hd, tern);
                const int64_t up = hxt >= n_sm ? 1 : (2 * n_sm + hxt - 1) / hxt;
                const int64_t top = up < 8 ? up : 8;
                CHECK_MSG(sp >= 1 && sp <= top, "hd %d n %lld tern %d: %d splits (at most %lld)", hd, (long long)n,
                          tern, sp, (long long)top);
                const int per = fwdc_attention_resident(hxt * sp, hd, tern);
                CHECK_MSG(per >= 1, "hd %d n %lld tern %d: %d CTAs an SM", hd, (long long)n, tern, per);
                if (sp > 1)
                    CHECK_MSG(hxt * sp <= (int64_t)n_sm * per, "hd %d n %lld tern %d: %d splits, %lld CTAs past %d x %d",
                              hd, (long long)n, tern, sp, (long long)(hxt * sp), n_sm, per);
                if (sp < top) {
                    const int per1 = fwdc_attention_resident(hxt * (sp + 1), hd, tern);
                    CHECK_MSG(hxt * (sp + 1) > (int64_t)n_sm * per1, "hd %d n %lld tern %d: %d splits, one more fits",
                              hd, (long long)n, tern, sp);
                }
                CHECK(fwdc_attention_splits(n, heads, heads, 255, hd, tern) == 1);
            }
    /* (one head of one token: 8 CTAs, which any GPU holds) */
    CHECK(fwdc_attention_splits(1, 1, 1, 1 << 20, 128, 1) == (2 * n_sm < 8 ? 2 * n_sm : 8));
    CHECK(fwdc_attention_resident(0, 128, 0) == 0);
}

/* Both attention kinds (the block-softmax one runs the separate passes), both
 * CTA widths, every head-dim path, positions 0, inside and past a 256-key
 * chunk, the token's own key first / mid / last in its warp's run. */
TEST(gpu_attention_rope_matches_separate_calls) {
    SKIP_WITHOUT_GPU();
    const char *kinds[] = {NULL, "block"};
    const int p1[] = {37}, p3[] = {0, 300, 513}, p4[] = {5, 6, 7, 8}, p1501[] = {1500};
    int p40[40], p10[10];
    for (int i = 0; i < 40; i++) p40[i] = (i * 53) % 290;
    for (int i = 0; i < 10; i++) p10[i] = 520 + 7 * i;
    unsetenv("TERNLAB_CUDA_ATTN");
    for (int k = 0; k < 2; k++) {
        if (kinds[k]) setenv("TERNLAB_CUDA_ATTN", kinds[k], 1);
        check_attention_rope(32, 8, 128, 16, 1, p1, 0, 0);  /* 27B-like GQA, one token, 8 warps */
        check_attention_rope(32, 8, 128, 16, 1, p1, 0, 1);  /* the same after a slow q|k|v GEMV */
        check_attention_rope(4, 2, 20, 5, 3, p3, 0, 0);     /* a small head, chunks of 256 keys */
        check_attention_rope(3, 3, 128, 16, 4, p4, 0, 0);   /* the own key at each place in a run */
        check_attention_rope(3, 3, 128, 16, 4, p4, 1, 0);   /* q, k, v from separate projections */
        check_attention_rope(2, 1, 256, 7, 3, p3, 0, 0);    /* the largest head_dim */
        check_attention_rope(2, 2, 128, 16, 3, p3, 0, 0);   /* key lanes of 16 warps, 4 / 2 / 1 of 8 splits */
        check_attention_rope(2, 2, 6, 4, 4, p4, 1, 0);      /* head_dim not a multiple of 4 */
        check_attention_rope(16, 4, 64, 16, 40, p40, 0, 0); /* 640 CTAs: 4 warps */
        /* head_dim 256 / 160, the fused form against the separate calls (both read the pair table:
         * gpu_rope_paged_attention_match_reference checks it against f32 pages): 640 CTAs of 4 warps,
         * 160 of 8, and one token over 1501 keys in 8 splits (128 CTAs of 8 warps) */
        check_attention_rope(16, 4, 256, 16, 40, p40, 0, 0);
        check_attention_rope(16, 4, 256, 16, 10, p10, 0, 0);
        check_attention_rope(16, 4, 256, 16, 1, p1501, 0, 0);
        check_attention_rope(16, 4, 160, 16, 10, p10, 0, 0);
        /* 320 CTAs (no key split) over 521-584 keys: three 256-key chunks a CTA (the key lanes'
         * page rows of the next chunk looked up in the other buffer, back in the first by the third) */
        check_attention_rope(32, 8, 128, 16, 10, p10, 0, 0);
        /* one token over 1501 keys: the keys split over 8 CTAs a head (the last one to finish merges),
         * after a slow q|k|v GEMV */
        check_attention_rope(32, 8, 128, 16, 1, p1501, 0, 1);
        unsetenv("TERNLAB_CUDA_ATTN");
    }
    float *d = NULL;
    REQUIRE(cudaMalloc((void **)&d, 4096) == cudaSuccess);
    int32_t *di = (int32_t *)d;
    err_clear();
    CHECK(fwdc_attention_rope(d, 8, d, 8, d, 8, di, di, d, d, d, d, di, 1, di, 1, 1, 1, 7, 16, 1, d, NULL, 1, 0) != 0);
    CHECK_MSG(strstr(err_msg(), "head_dim 7"), "message: %s", err_msg());
    CHECK(fwdc_attention_rope(d, 8, d, 8, d, 8, di, di, d, d, d, d, di, 1, di, 1, 3, 2, 8, 16, 3, d, NULL, 1, 0) != 0);
    /* a key split outside 1..8 */
    CHECK(fwdc_attention_rope(d, 8, d, 8, d, 8, di, di, d, d, d, d, di, 1, di, 1, 1, 1, 8, 16, 1, d, NULL, 9, 0) != 0);
    CHECK_MSG(strstr(err_msg(), "key splits"), "message: %s", err_msg());
    cudaFree(d);
}

TEST(gpu_embed_gather_table_update_exact) {
    SKIP_WITHOUT_GPU();
    const int64_t V = 50, H = 37;
    uint64_t s = 9;
    float *emb = xmalloc(sizeof(float) * V * H), *got = xmalloc(sizeof(float) * 4 * H);
    for (int64_t i = 0; i < V * H; i++) emb[i] = frand(&s);
    int32_t tok[4] = {49, 0, 7, 7}, idx[2] = {3, 0};
    DevBuf be, bt, bx, bi, bo;
    float *de = dev_new(&be, sizeof(float) * V * H, emb);
    int32_t *dt = dev_new(&bt, sizeof tok, tok), *di = dev_new(&bi, sizeof idx, idx);
    float *dx = dev_new(&bx, sizeof(float) * 4 * H, NULL), *dout = dev_new(&bo, sizeof(float) * 2 * H, NULL);
    REQUIRE(fwdc_embed(de, dt, 4, H, dx, 0) == 0);
    REQUIRE(fwdc_gather_rows(dx, di, 2, H, dout, 0) == 0);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    dev_get(&bx, got);
    int bad = 0;
    for (int t = 0; t < 4; t++) bad += memcmp(got + t * H, emb + tok[t] * H, sizeof(float) * H) != 0;
    dev_get(&bo, got);
    bad += memcmp(got, emb + tok[3] * H, sizeof(float) * H) != 0;
    bad += memcmp(got + H, emb + tok[0] * H, sizeof(float) * H) != 0;
    CHECK_MSG(bad == 0, "%d rows wrong", bad);
    /* table updates: count 3 of capacity 5 (the rest must not be applied) */
    int32_t tab[10], in[1 + 10] = {3, 2, 20, 9, 90, 0, 1, 4, 40, 5}, out[10];
    for (int i = 0; i < 10; i++) tab[i] = -1;
    DevBuf btab, bin;
    int32_t *dtab = dev_new(&btab, sizeof tab, tab), *din = dev_new(&bin, sizeof in, in);
    REQUIRE(fwdc_table_update(dtab, din, din + 1, 5, 0) == 0);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    dev_get(&btab, out);
    int32_t want[10] = {1, -1, 20, -1, -1, -1, -1, -1, -1, 90};
    CHECK(memcmp(out, want, sizeof want) == 0);
    /* with the zeroing of 700 words (more than the table's capacity: the grid covers both) */
    uint32_t z[700];
    for (int i = 0; i < 700; i++) z[i] = 0xdeadbeefu + (uint32_t)i;
    DevBuf bz;
    uint32_t *dz = dev_new(&bz, sizeof z, z);
    in[0] = 1, in[1] = 3, in[2] = 33;
    REQUIRE(cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(fwdc_table_update_z(dtab, din, din + 1, 5, dz, 699, 0) == 0);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    dev_get(&btab, out);
    dev_get(&bz, z);
    want[3] = 33;
    CHECK(memcmp(out, want, sizeof want) == 0);
    int nz = 0;
    for (int i = 0; i < 699; i++) nz += z[i] != 0;
    CHECK_MSG(nz == 0 && z[699] == 0xdeadbeefu + 699u, "%d words not zeroed, last %#x", nz, z[699]);
    /* a step's first kernel (fwdc_step_begin): the updates, the zeroing and the embedding rows in one
     * launch, the same as the three calls — the grid sized by the 4 x 37 embedding values, more
     * than the 5 updates and 99 words zeroed */
    for (int i = 0; i < 700; i++) z[i] = 0xdeadbeefu + (uint32_t)i;
    REQUIRE(cudaMemcpy(dz, z, sizeof z, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemset(dx, 0, sizeof(float) * 4 * H) == cudaSuccess);
    in[0] = 2, in[1] = 4, in[2] = 44, in[3] = 6, in[4] = 66;
    REQUIRE(cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(fwdc_step_begin(dtab, din, din + 1, 5, dz, 99, de, dt, 4, H, dx, 0) == 0);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    dev_get(&btab, out);
    dev_get(&bz, z);
    dev_get(&bx, got);
    want[4] = 44, want[6] = 66;
    CHECK(memcmp(out, want, sizeof want) == 0);
    nz = 0;
    for (int i = 0; i < 99; i++) nz += z[i] != 0;
    CHECK_MSG(nz == 0 && z[99] == 0xdeadbeefu + 99u, "step begin: %d words not zeroed, the 100th %#x", nz, z[99]);
    bad = 0;
    for (int t = 0; t < 4; t++) bad += memcmp(got + t * H, emb + tok[t] * H, sizeof(float) * H) != 0;
    CHECK_MSG(bad == 0, "step begin: %d embedding rows wrong", bad);
    CHECK(dev_done(&be) && dev_done(&bt) && dev_done(&bx) && dev_done(&bi) && dev_done(&bo) &&
          dev_done(&btab) && dev_done(&bin) && dev_done(&bz));
    free(emb), free(got);
}

/* One decode run of a synthetic ternary int8 model (hidden 256, MLP 8192,
 * `heads` heads of 128 — synth_decode: 64, down and o projections of 8192
 * columns, the binary tensor-core GEMV's shape; 16: o of 2048 columns, the
 * one-warp GEMV's) with
 * the fusions set by glu / att / ofu (TERNLAB_CUDA_GLU_FUSE, _ATT_FUSE,
 * _O_FUSE; ofu -1 leaves _O_FUSE unset, the default): prompts of
 * 8 tokens for sequences A and B, then `steps` single-token steps of A
 * (eager, captured, replayed), `steps` two-token steps of A and B (distinct
 * sequences: the fused attention at two tokens), and one step of A, A, B
 * (two tokens of one sequence: the separate RoPE / KV write).  Logits of
 * every decode token into lg (steps x 3 + 3 rows of vocab); the config of the
 * first decode step's last ternary matmul into cfg. */
enum { SYN_V = 512 };
/* A synthetic Llama of hidden 256, heads of 128 and vocab SYN_V into *m */
static void synth_model(Model *m, int64_t inter, int layers, int heads, int kv_heads) {
    memset(m, 0, sizeof *m);
    ModelConfig *c = &m->cfg;
    c->arch = ARCH_LLAMA, c->act = ACT_SILU, c->eps = 1e-5f, c->rope_theta = 10000.0;
    c->hidden = 256, c->inter = inter, c->n_layers = layers, c->n_heads = heads, c->n_kv_heads = kv_heads;
    c->head_dim = 128, c->vocab = SYN_V;
    snprintf(c->model_type, sizeof c->model_type, "synthetic-test");
}

/* cuda_engine_open_synthetic with the n environment variables names[i] set to
 * vals[i] (NULL: not set) for the open only; all n unset after it. */
static int synth_open_env(Engine *e, Model *m, const EngineOpts *o, const CudaSynthetic *syn, int n,
                          const char *const *names, const char *const *vals) {
    for (int i = 0; i < n; i++)
        if (vals[i]) setenv(names[i], vals[i], 1);
    const int rc = cuda_engine_open_synthetic(e, m, o, syn);
    for (int i = 0; i < n; i++) unsetenv(names[i]);
    return rc;
}

static void synth_decode_h(int heads, int glu, int att, int ofu, int steps, float *lg, char *cfg, size_t cap,
                           CudaEngineInfo *info) {
    Model m;
    synth_model(&m, 8192, 2, heads, 4); /* o: 256 x 128 heads columns */
    /* (the GLU form's bound named, 8: unset, it is the device's — gpu_glu_form_default_by_memory) */
    static const char *const names[] = {"TERNLAB_CUDA_GLU_FUSE", "TERNLAB_CUDA_ATT_FUSE", "TERNLAB_CUDA_O_FUSE",
                                        "TERNLAB_CUDA_MT_FUSE"};
    const char *const vals[] = {glu ? "1" : "0", att ? "1" : "0", ofu < 0 ? NULL : ofu ? "1" : "0", "8"};
    EngineOpts o = {.max_tok = 8, .block_size = 16, .device = ENGINE_CUDA, .bf16 = 1, .n_blocks = 8};
    CudaSynthetic syn = {.ternary = 1, .act_int8 = 1, .seed = 5};
    Engine e;
    const int rc = synth_open_env(&e, &m, &o, &syn, 4, names, vals);
    CHECK_MSG(rc == 0, "%s", err_msg());
    if (rc != 0) return;
    int tok[8], seq[8];
    int64_t pos[8], li[3] = {0, 1, 2}, last = 7, np[2] = {8, 8};
    const int sa = kv_seq_new(&e.kv), sb = kv_seq_new(&e.kv);
    float *out = lg;
    for (int q = 0; q < 2; q++) {
        for (int i = 0; i < 8; i++) tok[i] = (i * 37 + 5 + q * 11) % SYN_V, seq[i] = q ? sb : sa, pos[i] = i;
        REQUIRE(forward(e.m, &e.kv, &e.rs, tok, seq, pos, 8, &last, 1, out) == 0);
    }
    e.rs.decode = 1;
    int prev_n = 1; /* logit rows the previous call wrote at out */
    for (int s = 0; s < 2 * steps + 1; s++) {
        const int n = s < steps ? 1 : s < 2 * steps ? 2 : 3;
        for (int i = 0; i < n; i++) {
            seq[i] = n == 3 ? (i < 2 ? sa : sb) : (i ? sb : sa);
            tok[i] = (int)argmax_f32(out + (i < prev_n ? i : 0) * SYN_V, SYN_V) ^ i;
            pos[i] = np[seq[i] == sb]++;
        }
        prev_n = n;
        out = lg + (s < steps ? s : s < 2 * steps ? steps + 2 * (s - steps) : 3 * steps) * SYN_V;
        REQUIRE(forward(e.m, &e.kv, &e.rs, tok, seq, pos, n, li, n, out) == 0);
        if (s == 0) snprintf(cfg, cap, "%s", tern_cuda_last_config());
    }
    e.rs.decode = 0;
    CHECK(cuda_engine_info(&e, info) == 0);
    engine_free(&e);
    mem_free(m.rope_cos);
    mem_free(m.rope_sin);
}
static void synth_decode(int glu, int att, int ofu, int steps, float *lg, char *cfg, size_t cap,
                         CudaEngineInfo *info) {
    synth_decode_h(64, glu, att, ofu, steps, lg, cfg, cap, info);
}

/* The one-token MLP fused into two GEMVs (the GLU in the gate|up GEMV, the
 * int8 coding of h in the down GEMV) and the decode attention with RoPE, the
 * KV write and (one token) the o projection's int8 pass folded in give the
 * same logits, bit for bit, as the separate kernels, eagerly and in decode
 * graphs, at one and two tokens, and for two tokens of one sequence. */
TEST(gpu_fused_decode_bit_identical) {
    SKIP_WITHOUT_GPU();
    const int steps = 4, rows = 3 * steps + 3;
    float *a = xcalloc((size_t)rows * SYN_V, sizeof(float)), *b = xmalloc(sizeof(float) * rows * SYN_V);
    char ca[96], cb[96];
    CudaEngineInfo ia, ib;
    synth_decode(0, 0, 0, steps, a, ca, sizeof ca, &ia);
    CHECK_MSG(ia.fused_att == 0 && ia.fused_o == 0 && ia.fused_mlp == 0 && ia.omax_given == 0,
              "fused layers with fusion off");
    /* (glu, att, o): each alone, all, attention without o; the last with the
     * one-token GEMVs on bulk-copy variant 63540, whose K split of the down
     * projection (256 x 8192) the next layer's norm finishes (deferred) */
    static const int set[][3] = {{1, 0, 0}, {0, 1, 1}, {1, 1, 1}, {1, 1, 0}, {1, 1, 0}};
    for (int v = 0; v < 5; v++) {
        const int glu = set[v][0], att = set[v][1], ofu = set[v][2];
        memset(b, 0, sizeof(float) * rows * SYN_V);
        const int oldv = tern_cuda_decode_variant(v == 4 ? 63540 : 0);
        synth_decode(glu, att, ofu, steps, b, cb, sizeof cb, &ib);
        tern_cuda_decode_variant(oldv);
        /* the register-fed kernel (the dispatch at this shape) finishes its own split;
         * on the bulk-copy kernel each one-token step's layers defer, the last one's to the
         * final norm (its logit row is the token's: TERNLAB_CUDA_TAIL) */
        CHECK_MSG(v == 4 ? ib.deferred > 0 && ib.deferred == ib.fused_mlp : ib.deferred == 0,
                  "set %d: %lld down GEMVs deferred of %lld fused MLPs", v, (long long)ib.deferred,
                  (long long)ib.fused_mlp);
        /* the int8 pass before an unfused o takes the attention's max at one token, and at two
         * tokens (distinct sequences) whether or not o is fused at one */
        CHECK_MSG((ib.omax_given > 0) == att, "set %d: %lld int8 passes took the attention's max", v,
                  (long long)ib.omax_given);
        /* (o, 256 x 8192, is no one-warp shape: the MLP norm is never folded here — gpu_norm_fold_close) */
        CHECK_MSG(ib.norm_folded == 0, "set %d: %lld norms folded", v, (long long)ib.norm_folded);
        CHECK_MSG(strstr(ca, "f32x") == NULL && (strstr(cb, "f32x") != NULL) == glu,
                  "the last ternary matmul of a decode step: \"%s\" unfused, \"%s\" glu %d att %d", ca,
                  cb, glu, att);
        /* layers enqueued fused: the MLP and o at one token, the attention at
         * one and two tokens (more layers than o); a graph for each step shape */
        CHECK_MSG((ib.fused_mlp > 0) == glu && (ib.fused_o > 0) == (att && ofu) &&
                      (att ? ib.fused_att > ib.fused_o : ib.fused_att == 0),
                  "glu %d att %d o %d: fused layers: MLP %lld, o %lld, attention %lld", glu, att, ofu,
                  (long long)ib.fused_mlp, (long long)ib.fused_o, (long long)ib.fused_att);
        /* the two-token steps' MLPs on the multi-token kernel's GLU form (16384 x 256 gate|up) */
        CHECK_MSG(ia.mt_mlp == 0 && (ib.mt_mlp > 0) == glu, "glu %d att %d o %d: GLU form at two tokens in %lld layers",
                  glu, att, ofu, (long long)ib.mt_mlp);
        CHECK_MSG(ia.graphs >= 2 && ib.graphs >= 2, "decode graphs captured: %lld / %lld",
                  (long long)ia.graphs, (long long)ib.graphs);
        int bad = 0, first = -1;
        for (int i = 0; i < rows * SYN_V; i++)
            if (memcmp(a + i, b + i, 4) != 0) bad++, first = first < 0 ? i / SYN_V : first;
        CHECK_MSG(bad == 0, "glu %d att %d o %d: %d of %d logits differ (first in row %d)", glu, att, ofu,
                  bad, rows * SYN_V, first);
    }
    free(a), free(b);
}

/* A synthetic engine (one layer) opened with environment variable name set
 * to the malformed value v: refused, its message naming the variable. */
static void env_refused_at_open(const char *name, const char *v) {
    Model m;
    synth_model(&m, 512, 1, 2, 2);
    EngineOpts o = {.max_tok = 8, .block_size = 16, .device = ENGINE_CUDA, .bf16 = 1, .n_blocks = 8};
    CudaSynthetic syn = {.ternary = 1, .act_int8 = 1, .seed = 5};
    Engine e;
    const int rc = synth_open_env(&e, &m, &o, &syn, 1, &name, &v);
    CHECK_MSG(rc != 0 && strstr(err_msg(), name) != NULL, "%s=\"%s\": rc %d, \"%s\"", name, v, rc,
              rc ? err_msg() : "");
    if (rc == 0) engine_free(&e);
    mem_free(m.rope_cos);
    mem_free(m.rope_sin);
}

/* Decode steps of 2, 3, 5, 8 and 9 tokens of distinct sequences of a
 * synthetic ternary int8 model (hidden 256, MLP 8192, 64 heads of 128: o of
 * 8192 columns), each size `steps` times (eager, captured, replayed), with
 * the few-token forms on (TERNLAB_CUDA_MT_FUSE=8, o's maxima by default) or
 * off (TERNLAB_CUDA_MT_FUSE=0, TERNLAB_CUDA_OMAX=0); logits of every token
 * into lg (steps x 27 rows of vocab). */
enum { MT_SIZES = 5, MT_ROWS = 27 };
static void synth_mt_decode(int mt, int steps, float *lg, CudaEngineInfo *info) {
    static const int sizes[MT_SIZES] = {2, 3, 5, 8, 9};
    Model m;
    synth_model(&m, 8192, 2, 64, 4);
    static const char *const names[] = {"TERNLAB_CUDA_MT_FUSE", "TERNLAB_CUDA_OMAX"};
    const char *const vals[] = {mt ? "8" : "0", mt ? NULL : "0"}; /* (the GLU form's bound named: unset, the device's) */
    EngineOpts o = {.max_tok = 16, .block_size = 16, .device = ENGINE_CUDA, .bf16 = 1, .n_blocks = 32};
    CudaSynthetic syn = {.ternary = 1, .act_int8 = 1, .seed = 7};
    Engine e;
    const int rc = synth_open_env(&e, &m, &o, &syn, 2, names, vals);
    CHECK_MSG(rc == 0, "%s", err_msg());
    if (rc != 0) return;
    int tok[16], seq[16], sq[9];
    int64_t pos[16], li[16], np[9], last = 3;
    float *out = lg;
    for (int q = 0; q < 9; q++) { /* a prompt of 4 tokens for each sequence (its logits overwritten) */
        sq[q] = kv_seq_new(&e.kv);
        for (int i = 0; i < 4; i++) tok[i] = (i * 37 + 5 + q * 11) % SYN_V, seq[i] = sq[q], pos[i] = i;
        REQUIRE(forward(e.m, &e.kv, &e.rs, tok, seq, pos, 4, &last, 1, out) == 0);
        np[q] = 4;
    }
    for (int i = 0; i < 16; i++) li[i] = i;
    e.rs.decode = 1;
    const float *prev = lg; /* the last call's logits (rows prev_n): the next tokens */
    int prev_n = 1;
    for (int z = 0; z < MT_SIZES; z++)
        for (int s = 0; s < steps; s++) {
            const int n = sizes[z];
            for (int i = 0; i < n; i++) {
                seq[i] = sq[i];
                tok[i] = (int)argmax_f32(prev + (i < prev_n ? i : 0) * SYN_V, SYN_V) ^ i;
                pos[i] = np[i]++;
            }
            REQUIRE(forward(e.m, &e.kv, &e.rs, tok, seq, pos, n, li, n, out) == 0);
            prev = out, prev_n = n;
            out += (size_t)n * SYN_V;
        }
    e.rs.decode = 0;
    CHECK(cuda_engine_info(&e, info) == 0);
    engine_free(&e);
    mem_free(m.rope_cos);
    mem_free(m.rope_sin);
}

/* The few-token forms at 2 .. 8 tokens of distinct sequences (o's int8 pass
 * from each token's max|att| raised by the attention; the GLU in the gate|up
 * GEMV, each token's max|h| raised there, h's int8 pass from those maxima)
 * give the same logits, bit for bit, as the separate kernels, eagerly and in
 * decode graphs; every layer of those steps takes them, none at 9 tokens. */
TEST(gpu_few_token_forms_bit_identical) {
    SKIP_WITHOUT_GPU();
    const int steps = 3, rows = steps * MT_ROWS;
    float *a = xcalloc((size_t)rows * SYN_V, sizeof(float)), *b = xcalloc((size_t)rows * SYN_V, sizeof(float));
    CudaEngineInfo ia, ib;
    synth_mt_decode(0, steps, a, &ia);
    synth_mt_decode(1, steps, b, &ib);
    /* o's pass: every layer enqueued at 2 .. 8 tokens (four of the five step sizes, each
     * enqueued as often: eagerly, into its graph), none at 9; the GLU form (16384 x 256: not a
     * multi-token GEMV shape) in the same layers and in the prompts of 4 tokens of one sequence
     * (2 layers x 9 prompts), whose attention is not the decode kernel */
    CHECK_MSG(ia.omax_given == 0 && ia.mt_mlp == 0 && ib.omax_given > 0 &&
                  ib.omax_given * MT_SIZES == ib.fused_att * 4 && ib.mt_mlp == ib.omax_given + 2 * 9,
              "layers on the few-token forms: off o %lld MLP %lld, on o %lld MLP %lld (attention fused %lld)",
              (long long)ia.omax_given, (long long)ia.mt_mlp, (long long)ib.omax_given, (long long)ib.mt_mlp,
              (long long)ib.fused_att);
    CHECK_MSG(ia.graphs >= MT_SIZES && ib.graphs >= MT_SIZES, "decode graphs captured: %lld / %lld",
              (long long)ia.graphs, (long long)ib.graphs);
    int bad = 0, first = -1;
    for (int i = 0; i < rows * SYN_V; i++)
        if (memcmp(a + i, b + i, 4) != 0) bad++, first = first < 0 ? i / SYN_V : first;
    CHECK_MSG(bad == 0, "%d of %d logits differ (first in row %d)", bad, rows * SYN_V, first);
    free(a), free(b);
    /* a malformed bound: the engine does not open, and says why */
    static const char *const badv[] = {"9", "-1", "x", ""};
    for (int k = 0; k < 4; k++) env_refused_at_open("TERNLAB_CUDA_MT_FUSE", badv[k]);
}

/* The GLU form's bound from a device's figures (cuda_mt_fuse_for; no GPU
 * needed): an H100 SXM's (12.8 bytes a cycle an SM) keeps it at 8, an H200's
 * (18.8) turns it off, the 16-byte line between, figures not read keep 8. */
TEST(cuda_glu_form_bound_from_figures) {
    CHECK(cuda_mt_fuse_for(2619000, 5120, 1980000, 132) == 8);
    CHECK(cuda_mt_fuse_for(3201000, 6144, 1980000, 132) == 0);
    /* exactly 16 bytes a cycle an SM (1e6 kHz x 2 x 1024 bits / 8 over 16 SMs at 1e6 kHz): wide */
    CHECK(cuda_mt_fuse_for(1000000, 1024, 1000000, 16) == 0);
    CHECK(cuda_mt_fuse_for(999999, 1024, 1000000, 16) == 8);
    CHECK(cuda_mt_fuse_for(0, 6144, 1980000, 132) == 8 && cuda_mt_fuse_for(3201000, 6144, 1980000, 0) == 8);
}

/* The engine's bound where TERNLAB_CUDA_MT_FUSE is unset is the one of this
 * device's figures (cudaDeviceGetAttribute, cuda_mt_fuse_for); a value given
 * is taken on any device. */
TEST(gpu_glu_form_default_by_memory) {
    SKIP_WITHOUT_GPU();
    int mem = 0, bus = 0, clk = 0, sms = 0;
    REQUIRE(cudaDeviceGetAttribute(&mem, cudaDevAttrMemoryClockRate, 0) == cudaSuccess &&
            cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, 0) == cudaSuccess &&
            cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0) == cudaSuccess &&
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
    printf("    memory %d kHz x %d bits, %d SMs at %d kHz: bound %d\n", mem, bus, sms, clk,
           cuda_mt_fuse_for(mem, bus, clk, sms));
    static const char *const given[] = {NULL, "3", "0", "8"};
    const int64_t want[] = {cuda_mt_fuse_for(mem, bus, clk, sms), 3, 0, 8};
    for (int k = 0; k < 4; k++) {
        Model m;
        synth_model(&m, 512, 1, 2, 2);
        EngineOpts o = {.max_tok = 8, .block_size = 16, .device = ENGINE_CUDA, .bf16 = 1, .n_blocks = 8};
        CudaSynthetic syn = {.ternary = 1, .act_int8 = 1, .seed = 5};
        Engine e;
        const char *name = "TERNLAB_CUDA_MT_FUSE";
        const int rc = synth_open_env(&e, &m, &o, &syn, 1, &name, &given[k]);
        CHECK_MSG(rc == 0, "%s", err_msg());
        if (rc == 0) {
            CudaEngineInfo info;
            CHECK(cuda_engine_info(&e, &info) == 0);
            CHECK_MSG(info.mt_fuse == want[k], "TERNLAB_CUDA_MT_FUSE %s: bound %lld, want %lld",
                      given[k] ? given[k] : "unset", (long long)info.mt_fuse, (long long)want[k]);
            engine_free(&e);
        }
        mem_free(m.rope_cos);
        mem_free(m.rope_sin);
    }
}

/* The CUDA engine leaves one SM to the row kernel before its one-token int8
 * GEMVs (tern_cuda_tbm_reserve: 1 once it opens, TERNLAB_CUDA_TBM_RESERVE=N
 * gives N; a malformed N is an error at open), and the reserve changes the
 * grid, never a value: the same logits bit for bit under reserves 0, 1 and
 * 3 with q|k|v (64 heads: 9216 x 256) on the bulk-copy kernel (variant
 * 64520 by shape); that GEMV alone under reserve 1 names it and its grid in
 * its config. */
TEST(gpu_tbm_reserve_bit_identical) {
    SKIP_WITHOUT_GPU();
    const int steps = 3, rows = 3 * steps + 3;
    float *a = xcalloc((size_t)rows * SYN_V, sizeof(float)), *b = xcalloc((size_t)rows * SYN_V, sizeof(float));
    char cfg[96];
    CudaEngineInfo info;
    const int old = tern_cuda_tbm_reserve(0);
    REQUIRE(tern_cuda_tbm_override("9216x256:64520") == 0);
    unsetenv("TERNLAB_CUDA_TBM_RESERVE");
    synth_decode_h(64, 1, 1, -1, steps, a, cfg, sizeof cfg, &info);
    CHECK_MSG(tern_cuda_tbm_reserve_get() == 1, "reserve after an engine opened: %d (want 1)",
              tern_cuda_tbm_reserve_get());
    static const char *const want[] = {"0", "3"};
    for (int k = 0; k < 2; k++) {
        setenv("TERNLAB_CUDA_TBM_RESERVE", want[k], 1);
        memset(b, 0, sizeof(float) * rows * SYN_V);
        synth_decode_h(64, 1, 1, -1, steps, b, cfg, sizeof cfg, &info);
        unsetenv("TERNLAB_CUDA_TBM_RESERVE");
        CHECK_MSG(tern_cuda_tbm_reserve_get() == atoi(want[k]), "TERNLAB_CUDA_TBM_RESERVE=%s: reserve %d", want[k],
                  tern_cuda_tbm_reserve_get());
        int bad = 0;
        for (int i = 0; i < rows * SYN_V; i++) bad += memcmp(a + i, b + i, 4) != 0;
        CHECK_MSG(bad == 0, "reserve %s against 1: %d of %d logits differ", want[k], bad, rows * SYN_V);
    }
    /* a malformed value: the engine does not open, and says why */
    static const char *const bad[] = {"", "x", "-1", "2x", "99999999999"};
    for (int k = 0; k < 5; k++) env_refused_at_open("TERNLAB_CUDA_TBM_RESERVE", bad[k]);
    /* the q|k|v shape alone under the engine's reserve: its config names the reserve and the grid */
    {
        const int64_t R = 9216, K = 256;
        uint64_t s = 9;
        float one = 1.0f;
        int8_t xq[256];
        for (int i = 0; i < K; i++) xq[i] = (int8_t)(i % 7 - 3); /* (any int8 values) */
        TernaryMatrix W;
        TernCudaMatrix dW;
        REQUIRE(rand_ternary_upload(R, K, &s, &W, &dW) == 0);
        DevBuf bx, bs, by;
        int8_t *dx = dev_new(&bx, (size_t)K, xq);
        float *dsx = dev_new(&bs, sizeof(float), &one), *dy = dev_new(&by, sizeof(float) * (size_t)R, NULL);
        tern_cuda_tbm_reserve(1);
        REQUIRE(tern_cuda_matmul_i8(&dW, dx, dsx, 1, dy, 0) == 0);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        CHECK_MSG(strncmp(tern_cuda_last_config(), "gemv_tbm v=64520 res=1 grid=", 28) == 0, "config '%s'",
                  tern_cuda_last_config());
        CHECK(dev_done(&bx) && dev_done(&bs) && dev_done(&by));
        tern_cuda_free(&dW);
        tern_free(&W);
    }
    tern_cuda_tbm_override(NULL);
    tern_cuda_tbm_reserve(old);
    free(a), free(b);
}

/* The L2 evict-first hint (tern_cuda_l2ef, TERNLAB_CUDA_L2EF) changes where
 * lines stay in L2, never a value: the same logits bit for bit with it on and
 * off, on a 16-head model whose o projection runs on the one-warp f32 form
 * (its loads hinted) — first with the dispatch's kernels, then with the
 * one-token GLU and down GEMVs on the bulk-copy kernel (variant 63540: its
 * producer's copies hinted, both the paired and the f32-input form; q|k|v
 * stays on a one-warp int8 form, which takes no hint).  The same kernels in
 * both runs of a pair, and on the bulk-copy kernel the launch records the
 * hint's absence ("l2ef=0" in the config), so a hint that never reaches the
 * kernel does not pass unseen. */
TEST(gpu_l2_evict_first_bit_identical) {
    SKIP_WITHOUT_GPU();
    const int steps = 4, rows = 3 * steps + 3;
    float *a = xcalloc((size_t)rows * SYN_V, sizeof(float)), *b = xcalloc((size_t)rows * SYN_V, sizeof(float));
    char ca[96], cb[96];
    CudaEngineInfo ia, ib;
    for (int k = 0; k < 2; k++) {
        const int oldv = tern_cuda_decode_variant(k ? 63540 : 0);
        const int olde = tern_cuda_l2ef(1);
        synth_decode_h(16, 1, 1, -1, steps, a, ca, sizeof ca, &ia);
        tern_cuda_l2ef(0);
        synth_decode_h(16, 1, 1, -1, steps, b, cb, sizeof cb, &ib);
        tern_cuda_l2ef(olde);
        tern_cuda_decode_variant(oldv);
        CHECK_MSG(ia.fused_o > 0 && ia.fused_mlp > 0 && ia.fused_o == ib.fused_o && ia.fused_mlp == ib.fused_mlp &&
                      ia.norm_folded == ib.norm_folded && ia.deferred == ib.deferred,
                  "variant set %d: fused o %lld / %lld, MLP %lld / %lld", k, (long long)ia.fused_o,
                  (long long)ib.fused_o, (long long)ia.fused_mlp, (long long)ib.fused_mlp);
        /* the last ternary matmul of a step: the down GEMV (k 1: on the bulk-copy kernel) */
        if (k == 0) CHECK_MSG(strcmp(ca, cb) == 0, "configs \"%s\" / \"%s\"", ca, cb);
        else
            CHECK_MSG(strstr(ca, "gemv_tbm") && !strstr(ca, "l2ef=0") && strstr(cb, "l2ef=0"),
                      "configs \"%s\" / \"%s\"", ca, cb);
        int bad = 0;
        for (int i = 0; i < rows * SYN_V; i++) bad += memcmp(a + i, b + i, 4) != 0;
        CHECK_MSG(bad == 0, "variant set %d: %d of %d logits differ", k, bad, rows * SYN_V);
    }
    free(a), free(b);
}

/* The o projection on the one-warp GEMV (16 heads: 256 x 2048) codes its f32
 * input itself by default at one token (tern_cuda_matmul_i8_f32x's one-warp
 * form, the int8 pass gone): the same logits, bit for bit, as with
 * TERNLAB_CUDA_O_FUSE=0 (the int8 pass with the attention's max, then the int8
 * GEMV), and o fused in every one-token layer only without it. */
TEST(gpu_fused_o_warp_bit_identical) {
    SKIP_WITHOUT_GPU();
    const int steps = 4, rows = 3 * steps + 3;
    float *a = xcalloc((size_t)rows * SYN_V, sizeof(float)), *b = xcalloc((size_t)rows * SYN_V, sizeof(float));
    char ca[96], cb[96];
    CudaEngineInfo ia, ib;
    setenv("TERNLAB_CUDA_NORM_FOLD", "0", 1); /* (the norm fold is not bit-identical: gpu_norm_fold_close) */
    synth_decode_h(16, 1, 1, 0, steps, a, ca, sizeof ca, &ia);
    synth_decode_h(16, 1, 1, -1, steps, b, cb, sizeof cb, &ib);
    unsetenv("TERNLAB_CUDA_NORM_FOLD");
    CHECK_MSG(ia.fused_o == 0 && ia.omax_given > 0, "O_FUSE=0: o fused in %lld layers, %lld int8 passes took "
              "the attention's max", (long long)ia.fused_o, (long long)ia.omax_given);
    /* one-token steps: `steps` eager or captured calls of 2 layers each, at least; the int8 pass
     * with the attention's max stays only at two tokens (distinct sequences), where o is never
     * fused: the one-token layers that pass before o without it are the ones fused with it */
    CHECK_MSG(ib.fused_o >= 2 && ib.omax_given > 0 && ia.omax_given == ib.omax_given + ib.fused_o &&
                  ib.fused_mlp > 0,
              "default: o fused in %lld layers, %lld int8 passes before o, MLP fused in %lld",
              (long long)ib.fused_o, (long long)ib.omax_given, (long long)ib.fused_mlp);
    int bad = 0, first = -1;
    for (int i = 0; i < rows * SYN_V; i++)
        if (memcmp(a + i, b + i, 4) != 0) bad++, first = first < 0 ? i / SYN_V : first;
    CHECK_MSG(bad == 0, "o on the one-warp GEMV from f32: %d of %d logits differ (first in row %d)", bad,
              rows * SYN_V, first);
    free(a), free(b);
}

/* The 16-head synthetic decode three times: with `knob` set to 0 into a,
 * then by default into b and c. */
static void decode_knob_off_on_on(const char *knob, int steps, float *a, float *b, float *c, CudaEngineInfo *ia,
                                  CudaEngineInfo *ib, CudaEngineInfo *ic) {
    char cfg[96];
    setenv(knob, "0", 1);
    synth_decode_h(16, 1, 1, -1, steps, a, cfg, sizeof cfg, ia);
    unsetenv(knob);
    synth_decode_h(16, 1, 1, -1, steps, b, cfg, sizeof cfg, ib);
    synth_decode_h(16, 1, 1, -1, steps, c, cfg, sizeof cfg, ic);
}

/* b's logits (rows x SYN_V) within rel L2 `bound` of a's, the same greedy
 * tokens, and c the same bits as b (what: the default's form, printed) */
static void check_close_deterministic(const float *a, const float *b, const float *c, int rows, double bound,
                                      const char *what) {
    int same_top = 0;
    for (int r = 0; r < rows; r++)
        same_top += argmax_f32(a + (int64_t)r * SYN_V, SYN_V) == argmax_f32(b + (int64_t)r * SYN_V, SYN_V);
    const double rel = rel_l2(b, a, (int64_t)rows * SYN_V);
    double mag = 0.0, dmax = 0.0;
    for (int64_t i = 0; i < (int64_t)rows * SYN_V; i++)
        mag += fabs((double)a[i]), dmax = fmax(dmax, fabs((double)a[i] - (double)b[i]));
    printf("    %s: logits rel L2 %.3g against the knob off (max |diff| %.3g, mean |logit| %.3g), %d of %d greedy "
           "tokens the same\n",
           what, rel, dmax, mag / ((double)rows * SYN_V), same_top, rows);
    CHECK_MSG(mag > 0.0, "all logits zero");
    CHECK_MSG(rel <= bound, "%s: rel L2 %.3g > %.3g", what, rel, bound);
    CHECK_MSG(same_top == rows, "%s: %d of %d greedy tokens the same", what, same_top, rows);
    CHECK_MSG(memcmp(b, c, sizeof(float) * (size_t)rows * SYN_V) == 0, "%s: two runs differ", what);
}

/* The norm between a one-warp o projection and the fused MLP folded into
 * both GEMVs (by default; TERNLAB_CUDA_NORM_FOLD=0 keeps the norm kernel; 16
 * heads: o 256 x 2048; the synthetic norm weights 1 +- 0.5, so a wrong weight
 * vector or layer would show): in every layer where o is fused (one token)
 * and only there; logits within rel L2 1e-4 of the norm kernel's (the fold
 * moves r into the outputs' scale and codes x' w: ulps, and a code at a
 * rounding tie; on this model in fact the same bits, while the ffn norm's
 * weights swapped for the attention norm's give rel L2 1.2) and the same
 * greedy tokens; the same bits in two runs (the slots summed in a fixed
 * order). */
TEST(gpu_norm_fold_close) {
    SKIP_WITHOUT_GPU();
    const int steps = 4, rows = 3 * steps + 3;
    const size_t bytes = sizeof(float) * (size_t)rows * SYN_V;
    float *a = xcalloc(1, bytes), *b = xcalloc(1, bytes), *c = xcalloc(1, bytes);
    CudaEngineInfo ia, ib, ic;
    decode_knob_off_on_on("TERNLAB_CUDA_NORM_FOLD", steps, a, b, c, &ia, &ib, &ic);
    CHECK_MSG(ia.norm_folded == 0 && ia.fused_o >= 2, "NORM_FOLD=0: %lld norms folded, o fused in %lld layers",
              (long long)ia.norm_folded, (long long)ia.fused_o);
    CHECK_MSG(ib.norm_folded == ib.fused_o && ib.norm_folded >= 2 && ib.fused_mlp >= ib.norm_folded,
              "default: %lld norms folded, o fused in %lld layers, MLP in %lld", (long long)ib.norm_folded,
              (long long)ib.fused_o, (long long)ib.fused_mlp);
    check_close_deterministic(a, b, c, rows, 1e-4, "norm folded");
    free(a), free(b), free(c);
}
/* The end of a decode step where the logit rows are the tokens' own: the
 * last layer's residual add in the final norm (with the last down GEMV's K
 * split deferred to it, variant 63540) gives the same logits, bit for bit, as
 * the add, gather and norm kernels (TERNLAB_CUDA_TAIL=0), in every decode
 * call (one, two and three tokens) and only there (not the prompts, whose
 * logit row is the last token's).  A ternary model's LM head on ternlab's
 * bf16 GEMV (by default; TERNLAB_CUDA_LM_GEMV=0: cuBLAS) in every call of at
 * most 4 logit rows: logits within rel L2 1e-5 of cuBLAS's (f32 sums in
 * another order), the same greedy tokens, the same bits in two runs. */
TEST(gpu_tail_norm_exact_lm_gemv_close) {
    SKIP_WITHOUT_GPU();
    const int steps = 4, rows = 3 * steps + 3;
    const size_t bytes = sizeof(float) * (size_t)rows * SYN_V;
    float *a = xcalloc(1, bytes), *b = xcalloc(1, bytes), *c = xcalloc(1, bytes);
    char cfg[96];
    CudaEngineInfo ia, ib, ic;
    const int oldv = tern_cuda_decode_variant(63540);
    setenv("TERNLAB_CUDA_TAIL", "0", 1);
    synth_decode_h(16, 1, 1, -1, steps, a, cfg, sizeof cfg, &ia);
    unsetenv("TERNLAB_CUDA_TAIL");
    synth_decode_h(16, 1, 1, -1, steps, b, cfg, sizeof cfg, &ib);
    tern_cuda_decode_variant(oldv);
    /* (counted where enqueued: eagerly or into a graph, so once or twice a decode shape of 1, 2 and 3
     * tokens; never the prompts) */
    CHECK_MSG(ia.tail_fused == 0 && ib.tail_fused >= 3, "tail fused in %lld calls off, %lld on",
              (long long)ia.tail_fused, (long long)ib.tail_fused);
    CHECK_MSG(ia.fused_mlp >= 2 && ia.deferred == ia.fused_mlp / 2 && ib.deferred == ib.fused_mlp,
              "deferred down GEMVs: %lld of %lld fused MLPs with the tail off, %lld of %lld on",
              (long long)ia.deferred, (long long)ia.fused_mlp, (long long)ib.deferred, (long long)ib.fused_mlp);
    int bad = 0;
    for (int i = 0; i < rows * SYN_V; i++) bad += memcmp(a + i, b + i, 4) != 0;
    CHECK_MSG(bad == 0, "tail in the final norm: %d of %d logits differ", bad, rows * SYN_V);
    /* the LM head: cuBLAS against the GEMV (and the GEMV twice) */
    decode_knob_off_on_on("TERNLAB_CUDA_LM_GEMV", steps, a, b, c, &ia, &ib, &ic);
    /* every call's logit rows (1 .. 3) fit the GEMV: the 2 prompts and each decode shape, enqueued */
    CHECK_MSG(ia.lm_gemv == 0 && ib.lm_gemv >= 5, "LM heads on the GEMV: %lld with it off, %lld on",
              (long long)ia.lm_gemv, (long long)ib.lm_gemv);
    check_close_deterministic(a, b, c, rows, 1e-5, "LM head on the bf16 GEMV (off: cuBLAS)");
    free(a), free(b), free(c);
}

/* fwdc_kv_ternarise against kvt_quant_row + kvt_dequant_row (its CPU twin,
 * src/kv/kv_ternary.c) on the rows of the listed slots, every KV head: the
 * same bits; every other row of the pages untouched; guards intact.  Head
 * dims with a partial last key group (40, 7), rows of zeros (the 1e-8 floor)
 * and of |x| ~ 1e5 (the scale's f16 saturation), values at a rounding tie. */
static void check_kv_ternarise(int hd, int n_kv, int bs, int n_blocks) {
    const int slots[] = {0, 17, 2 * bs - 1, n_blocks * bs - 1, 3}; /* distinct, as a call's are */
    const int n = (int)(sizeof slots / sizeof slots[0]);
    const size_t rows = (size_t)n_blocks * n_kv * bs, cnt = rows * (size_t)hd;
    float *k = xmalloc(sizeof(float) * cnt), *v = xmalloc(sizeof(float) * cnt);
    float *gk = xmalloc(sizeof(float) * cnt), *gv = xmalloc(sizeof(float) * cnt);
    uint64_t sd = 99 + (uint64_t)hd * 7 + (uint64_t)n_kv;
    for (size_t i = 0; i < cnt; i++) k[i] = 3.0f * frand(&sd), v[i] = frand(&sd);
    /* slot 17, head 0: zeros; the last slot, last head: |x| ~ 1e5; slot 3, head 0:
     * a group whose mean is 1 with entries 0.5, 1.5 (x / mean at ties) */
    const size_t r17 = (((size_t)(17 / bs) * n_kv) * bs + 17 % bs) * hd;
    const int sl = slots[3];
    const size_t rl = (((size_t)(sl / bs) * n_kv + (size_t)(n_kv - 1)) * bs + sl % bs) * hd;
    const size_t r3 = (((size_t)(3 / bs) * n_kv) * bs + 3 % bs) * hd;
    for (int d = 0; d < hd; d++) {
        k[r17 + d] = v[r17 + d] = 0.0f;
        k[rl + d] = 1e5f * frand(&sd), v[rl + d] = -7e4f;
        k[r3 + d] = v[r3 + d] = d % 2 ? 1.5f : 0.5f;
    }
    int32_t sl32[8];
    for (int i = 0; i < n; i++) sl32[i] = slots[i];
    DevBuf bk, bv, bs32;
    float *dk = dev_new(&bk, sizeof(float) * cnt, k), *dv = dev_new(&bv, sizeof(float) * cnt, v);
    int32_t *dsl = dev_new(&bs32, sizeof(int32_t) * (size_t)n, sl32);
    REQUIRE(dk && dv && dsl);
    REQUIRE(fwdc_kv_ternarise(dk, dv, dsl, n, n_kv, hd, bs, 0) == 0);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    dev_get(&bk, gk);
    dev_get(&bv, gv);
    /* the expected pages: the listed rows through the CPU twin, the rest as they were */
    uint8_t codes[64];
    uint16_t sc[32];
    for (int i = 0; i < n; i++)
        for (int h = 0; h < n_kv; h++) {
            const size_t r = (((size_t)(slots[i] / bs) * n_kv + (size_t)h) * bs + slots[i] % bs) * hd;
            kvt_quant_row(k + r, hd, 1, codes, sc);
            kvt_dequant_row(codes, sc, hd, 1, k + r);
            kvt_quant_row(v + r, hd, 0, codes, sc);
            kvt_dequant_row(codes, sc, hd, 0, v + r);
        }
    CHECK_MSG(memcmp(gk, k, sizeof(float) * cnt) == 0 && memcmp(gv, v, sizeof(float) * cnt) == 0,
              "hd %d, %d KV heads: the pages differ from kvt_quant_row + kvt_dequant_row", hd, n_kv);
    size_t zeros = 0;
    for (int d = 0; d < hd; d++) zeros += k[r3 + d] == 0.0f; /* (ties to even: 0.5 -> 0) */
    if (hd % 2 == 0) /* (every group's mean 1) */
        CHECK_MSG(zeros == (size_t)hd / 2, "hd %d: %zu of the tie row's keys coded 0", hd, zeros);
    CHECK(dev_done(&bk) && dev_done(&bv) && dev_done(&bs32));
    free(k), free(v), free(gk), free(gv);
}

TEST(gpu_kv_ternarise_matches_cpu_rows) {
    SKIP_WITHOUT_GPU();
    check_kv_ternarise(128, 2, 16, 4);
    check_kv_ternarise(40, 3, 16, 3);
    check_kv_ternarise(7, 1, 8, 5);
    check_kv_ternarise(256, 1, 16, 3);
    float *d = NULL;
    int32_t *di = NULL;
    REQUIRE(cudaMalloc((void **)&d, 4096) == cudaSuccess && cudaMalloc((void **)&di, 64) == cudaSuccess);
    CHECK(fwdc_kv_ternarise(d, d, di, 1, 1, 257, 16, 0) != 0 && strstr(err_msg(), "head_dim 257"));
    CHECK(fwdc_kv_ternarise(d, d, di, 1, 0, 8, 16, 0) != 0);
    cudaFree(d);
    cudaFree(di);
}
#endif /* TL_HAVE_CUDA */

/* ---- the model on the GPU vs the transformers references ---------------- */

static const int T = 256;

/* logits of windows 0-1 on the GPU vs ref_logits.f32: rel L2 and top-1. */
static void oracle(const char *dir, int bf16, double max_rel, double min_top1) {
    fixture_backend.device = ENGINE_CUDA;
    fixture_backend.bf16 = bf16;
    float *got, *ref;
    int V;
    REQUIRE(fixture_oracle_logits(dir, NULL, T, &got, &ref, &V) == 0);
    int64_t n = 2 * (int64_t)T * V;
    int agree = 0;
    for (int r = 0; r < 2 * T; r++)
        agree += argmax_f32(got + (int64_t)r * V, V) == argmax_f32(ref + (int64_t)r * V, V);
    double rel = rel_l2(got, ref, n), top1 = agree / (2.0 * T);
    printf("    %s on the GPU (%s activations): logits rel L2 %.3g, top-1 agreement %.4f\n", dir,
           bf16 ? "bf16" : "fp32", rel, top1);
    CHECK_MSG(rel <= max_rel, "rel L2 %.3g > %.3g", rel, max_rel);
    CHECK_MSG(top1 >= min_top1, "top-1 %.4f < %.4f", top1, min_top1);
    free(got);
    free(ref);
}

TEST(gpu_llama_logits_fp32_match_transformers) {
    SKIP_WITHOUT_GPU();
    oracle(LLAMA_DIR, 0, 1e-4, 0.0);
}
TEST(gpu_llama_logits_bf16_match_transformers) {
    SKIP_WITHOUT_GPU();
    oracle(LLAMA_DIR, 1, 1e-2, 0.99);
}
TEST(gpu_bitnet_logits_fp32_match_transformers) {
    SKIP_WITHOUT_GPU();
    oracle(BITNET_DIR, 0, 3e-2, 0.97);
}
TEST(gpu_bitnet_logits_bf16_match_transformers) {
    SKIP_WITHOUT_GPU();
    oracle(BITNET_DIR, 1, 1.0, 0.95);
}

/* The GPU forward under scaled RoPE (transformers' llama3, linear, yarn and dynamic types,
 * yarn's attention factor on cos and sin; the device's rotation tables come from
 * the host's) against transformers' logits:
 * the prefill's window and a decode step through the fused attention, fp32
 * activations, the CPU's bound. */
TEST(gpu_rope_scaled_logits_match_transformers) {
    SKIP_WITHOUT_GPU();
    fixture_backend.device = ENGINE_CUDA;
    static const char *const vs[] = {"llama3", "linear", "yarn", "yarn_opts", "dynamic", "longrope"};
    for (int k = 0; k < 6; k++) {
        double all, worst, dec;
        REQUIRE(fixture_rope_oracle(vs[k], &all, &worst, &dec) == 0);
        printf("    %s on the GPU: logits rel L2 %.3g overall, worst row %.3g; decode step at position 99 %.3g\n",
               vs[k], all, worst, dec);
        CHECK_MSG(worst <= 1e-4 && dec <= 1e-4, "%s: worst row %.3g, decode %.3g", vs[k], worst, dec);
    }
}

/* Where GPU and CPU greedy tokens part (after `same` common tokens, hist):
 * each path's logits at that step, fed the common history as decode steps,
 * for the two tokens (g: the GPU's, c: the CPU's) — a near-tie shows as a
 * small difference, in both paths.  Printed with the failure; not a check. */
static void report_parting(const char *dir, const ModelLoadOpts *lo, const int32_t *prompt, int64_t np,
                           const int32_t *hist, int same, int32_t g, int32_t c) {
    const EngineDevice saved = fixture_backend.device;
    const EngineDevice devs[2] = {ENGINE_CUDA, ENGINE_CPU};
    for (int i = 0; i < 2; i++) {
        int V = 0;
        fixture_backend.device = devs[i];
        float *lg = fixture_forced_logits(dir, lo, prompt, np, hist, same, &V);
        if (!lg || g < 0 || g >= V || c < 0 || c >= V) {
            printf("    (the %s logits at token %d: not available)\n", i ? "CPU" : "GPU", same);
            free(lg);
            continue;
        }
        printf("    %s logits at token %d: argmax %lld; the GPU's token %d %.6f, the CPU's %d %.6f (GPU's - CPU's "
               "%.3g)\n", i ? "CPU" : "GPU", same, (long long)argmax_f32(lg, V), g, lg[g], c, lg[c], lg[g] - lg[c]);
        free(lg);
    }
    fixture_backend.device = saved;
}

/* 100 greedy tokens GPU (fp32 activations, decode graphs) vs CPU on the same
 * ternary weights, batch 1 and 8. */
static void gpu_vs_cpu(const char *dir, const char *quant) {
    int32_t *prompt;
    int64_t np = fixture_ref_ints(dir, "greedy_prompt", &prompt);
    REQUIRE(np > 0);
    for (int batch = 1; batch <= 8; batch += 7) {
        int32_t *gpu[8], *cpu[8];
        for (int b = 0; b < batch; b++) {
            gpu[b] = xmalloc(sizeof(int32_t) * 100);
            cpu[b] = xmalloc(sizeof(int32_t) * 100);
        }
        CudaEngineInfo info;
        ModelLoadOpts lo = {.quant = quant};
        fixture_backend.device = ENGINE_CUDA;
        REQUIRE(fixture_greedy(dir, &lo, prompt, np, 100, batch, gpu, &info) == 0);
        fixture_backend.device = ENGINE_CPU;
        REQUIRE(fixture_greedy(dir, &lo, prompt, np, 100, batch, cpu, NULL) == 0);
        CHECK_MSG(info.graphs >= 1 && info.graph_launches >= 90,
                  "decode graphs: %lld captured, %lld launches", (long long)info.graphs,
                  (long long)info.graph_launches);
        int parted = 0; /* the first parting sequence's logits are reported */
        for (int b = 0; b < batch; b++) {
            int same = 0;
            while (same < 100 && gpu[b][same] == cpu[b][same]) same++;
            /* (the CPU's dense sums — attention, LM head — come from OpenBLAS, whose kernels
             * round by core: a core forced through OPENBLAS_CORETYPE can move the CPU's logits
             * across a near-tie; the message names the core the CPU run had) */
            CHECK_MSG(same == 100, "%s quant=%s batch %d seq %d: first difference at %d (CPU: %s, OpenBLAS core %s, "
                      "OPENBLAS_CORETYPE %s)", dir, quant ? quant : "(native)", batch, b, same, cpu_model_report(),
                      blas_core_report(), getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset");
            if (same < 100 && !parted++) report_parting(dir, &lo, prompt, np, cpu[b], same, gpu[b][same], cpu[b][same]);
            free(gpu[b]);
            free(cpu[b]);
        }
    }
    free(prompt);
}

/* Decode past 2 x 128 positions at batch 1 and 2 (prompts of 200 and 230
 * test tokens, 90 new ones): from position 256 on the attention splits each
 * token's keys over several CTAs (fwdc_attention_splits), the decode graph
 * captured again for it; the greedy tokens are the CPU's, with f32 pages
 * (none) and with ternary pages (all: key lanes; there the CPU and the GPU
 * may code a value at a rounding boundary differently, so the first 40). */
static void long_ctx_vs_cpu(const char *dir, const char *quant, const char *policy, int n_cmp) {
    int32_t *tok;
    int64_t nt;
    Model m0;
    REQUIRE(model_load(test_path(dir), NULL, &m0) == 0);
    REQUIRE(tokens_load(test_path(TOKENS_FILE), m0.cfg.vocab, &tok, &nt) == 0 && nt > 1000);
    model_free(&m0);
    KvPolicy pol;
    REQUIRE(kv_policy_parse(policy, &pol) == 0);
    const int64_t n_new = 90;
    for (int batch = 1; batch <= 2; batch++) {
        const int32_t *prompts[2] = {tok, tok + 500};
        const int64_t lens[2] = {200, 230};
        int32_t *gpu[2], *cpu[2];
        for (int b = 0; b < batch; b++) gpu[b] = xmalloc(sizeof(int32_t) * n_new), cpu[b] = xmalloc(sizeof(int32_t) * n_new);
        CudaEngineInfo info;
        ModelLoadOpts lo = {.quant = quant};
        fixture_backend.kv = &pol;
        fixture_backend.device = ENGINE_CUDA;
        REQUIRE(fixture_greedy_each(dir, &lo, prompts, lens, n_new, batch, gpu, &info) == 0);
        fixture_backend.device = ENGINE_CPU;
        REQUIRE(fixture_greedy_each(dir, &lo, prompts, lens, n_new, batch, cpu, NULL) == 0);
        fixture_backend.kv = NULL;
        CHECK_MSG(info.attn_split >= 1 && info.graphs >= 2, "%s kv %s batch %d: %lld calls with the keys split, %lld graphs",
                  dir, policy, batch, (long long)info.attn_split, (long long)info.graphs);
        for (int b = 0; b < batch; b++) {
            int same = 0;
            while (same < n_new && gpu[b][same] == cpu[b][same]) same++;
            CHECK_MSG(same >= n_cmp, "%s kv %s batch %d seq %d: first difference at %d", dir, policy, batch, b, same);
            free(gpu[b]), free(cpu[b]);
        }
    }
    free(tok);
}

TEST(gpu_long_context_key_split_equals_cpu) {
    SKIP_WITHOUT_GPU();
    long_ctx_vs_cpu(LLAMA_DIR, "rule=absmean,group=128", "none", 90);
    long_ctx_vs_cpu(BITNET_DIR, NULL, "none", 90);
    long_ctx_vs_cpu(LLAMA_DIR, "rule=absmean,group=128", "all", 40);
}

TEST(gpu_greedy_equals_cpu_bitnet) {
    SKIP_WITHOUT_GPU();
    gpu_vs_cpu(BITNET_DIR, NULL);
}
TEST(gpu_greedy_equals_cpu_llama_ternary) {
    SKIP_WITHOUT_GPU();
    gpu_vs_cpu(LLAMA_DIR, "rule=absmean,group=128");
    gpu_vs_cpu(LLAMA_DIR, "rule=twn,group=row,act=int8");
}

/* Perplexity of 4 windows of 64 under a KV policy with the split protocol
 * (each window's first half prefilled, the rest decoded a step at a time)
 * on the engine of `dev`; NAN where it failed.  info (GPU) receives the
 * engine's counters. */
/* kv_policy_ppl on an open engine e of model m */
static double kv_policy_ppl_on(Engine *e, const Model *m, const char *policy, CudaEngineInfo *info) {
    int32_t *tok = NULL;
    int64_t n = 0;
    KvPolicy p;
    double ppl = NAN;
    PplOpts po = {.window = 64, .max_windows = 4, .kv_split = 1};
    PplResult r;
    if (kv_policy_parse(policy, &p) == 0 && kv_set_policy(&e->kv, &p) == 0 &&
        tokens_load(test_path(TOKENS_FILE), m->cfg.vocab, &tok, &n) == 0 && eval_ppl(e, tok, n, &po, &r) == 0 &&
        (!info || cuda_engine_info(e, info) == 0))
        ppl = r.ppl;
    else
        fprintf(stderr, "    %s\n", err_msg());
    free(tok);
    return ppl;
}

static double kv_policy_ppl(const char *dir, const char *quant, EngineDevice dev, const char *policy,
                            CudaEngineInfo *info) {
    fixture_backend.device = dev;
    fixture_backend.bf16 = 0;
    Model m;
    Engine e;
    ModelLoadOpts lo = {.quant = quant};
    if (fixture_engine(dir, &lo, 4 * 64, 16, 4, 64, &m, &e) != 0) return NAN;
    const double ppl = kv_policy_ppl_on(&e, &m, policy, info);
    engine_free(&e);
    model_free(&m);
    return ppl;
}

/* Ternary KV pages on one GPU (fwdc_kv_ternarise in the layers and phases
 * the policy names, the separate attention there, decode graphs) give the
 * CPU engine's perplexity on the same weights under every policy, within
 * tol relative, while each policy moves the perplexity well beyond that
 * from none's.  The pages hold the CPU's dequantised values of the GPU's
 * K / V, which differ from the CPU's in the last bits, so a value at a
 * rounding boundary may code differently: llama-tiny (f32 activations)
 * agrees to ~3e-6 here (H200; 5.7e-4 over 16 windows of 256), checked at
 * 2e-3; BitNet's per-token int8
 * activations already part the two paths at none (1.7e-3 here, as its
 * logits do against transformers), checked at 1e-2. */
static void kv_policies_gpu_vs_cpu(const char *dir, const char *quant, double tol) {
    const char *pols[] = {"none", "encoder", "decoder", "all", "decoder@layers=1-2"};
    double none = NAN;
    for (int i = 0; i < 5; i++) {
        CudaEngineInfo info;
        const double g = kv_policy_ppl(dir, quant, ENGINE_CUDA, pols[i], &info);
        const double c = kv_policy_ppl(dir, quant, ENGINE_CPU, pols[i], NULL);
        const double rel = fabs(g - c) / c;
        if (i == 0) none = c;
        printf("    %s %s kv %s: ppl GPU %.6f CPU %.6f (rel %.2g), none %.6f; %lld layer calls stored "
               "ternary, %lld decode graph launches\n",
               dir, quant ? quant : "(native)", pols[i], g, c, rel, none, (long long)info.kv_ternary,
               (long long)info.graph_launches);
        CHECK_MSG(isfinite(g) && isfinite(c) && rel <= tol, "%s kv %s: GPU %.6f CPU %.6f", dir, pols[i], g, c);
        CHECK_MSG(i == 0 ? info.kv_ternary == 0 : info.kv_ternary > 0, "kv %s: %lld", pols[i],
                  (long long)info.kv_ternary);
        if (i > 0) CHECK_MSG(fabs(c - none) / none > 5 * tol, "kv %s: ppl %.6f, none %.6f", pols[i], c, none);
        CHECK_MSG(info.graph_launches >= 16, "kv %s: %lld decode graph launches", pols[i],
                  (long long)info.graph_launches);
    }
}

TEST(gpu_kv_policies_ppl_equal_cpu) {
    SKIP_WITHOUT_GPU();
    kv_policies_gpu_vs_cpu(LLAMA_DIR, NULL, 2e-3);
    kv_policies_gpu_vs_cpu(BITNET_DIR, NULL, 1e-2);
}

/* Ternary pages in a layer whose every token the policy stores ternary
 * (all, all@layers) give the perplexity of f32 pages holding the same values
 * (TERNLAB_CUDA_KV_PAGES=f32) within the key lanes' summation order, with
 * the layer's f32 pages gone — the pool's bytes as counted below; the decode
 * steps' fused attention gives the bits of the separate kernels.  Policies
 * that leave one phase full precision keep f32 pages either way. */
static void kv_pages_equal(const char *dir, const char *policy, int tern_layers_expected) {
    CudaEngineInfo it, i32, iu;
    unsetenv("TERNLAB_CUDA_KV_PAGES");
    const double t = kv_policy_ppl(dir, NULL, ENGINE_CUDA, policy, &it);
    setenv("TERNLAB_CUDA_KV_PAGES", "f32", 1);
    const double f = kv_policy_ppl(dir, NULL, ENGINE_CUDA, policy, &i32);
    unsetenv("TERNLAB_CUDA_KV_PAGES");
    /* the decode steps' attention unfused (RoPE / KV write, coding, attention apart): the same bits
     * as the fused form that codes the token's rows (fwdc_attention_rope_coded), which the steps
     * above took in every layer */
    setenv("TERNLAB_CUDA_ATT_FUSE", "0", 1);
    const double u = kv_policy_ppl(dir, NULL, ENGINE_CUDA, policy, &iu);
    unsetenv("TERNLAB_CUDA_ATT_FUSE");
    CHECK_MSG(t == u, "%s kv %s: fused decode attention %.9g, unfused %.9g", dir, policy, t, u);
    CHECK_MSG(it.fused_att > 0 && i32.fused_att > 0 && iu.fused_att == 0 && it.kv_ternary > 0,
              "fused attentions %lld / %lld / %lld, ternary stores %lld", (long long)it.fused_att,
              (long long)i32.fused_att, (long long)iu.fused_att, (long long)it.kv_ternary);
    Model m;
    REQUIRE(model_load(test_path(dir), NULL, &m) == 0);
    const int L = m.cfg.n_layers, hd = m.cfg.head_dim;
    const int64_t rows = 4 * ((64 + 15) / 16) * 16 * (int64_t)m.cfg.n_kv_heads; /* kv_policy_ppl's pool */
    model_free(&m);
    const int lt = tern_layers_expected < 0 ? L : tern_layers_expected;
    const size_t f32_layer = 2 * sizeof(float) * (size_t)rows * (size_t)hd;
    const size_t want = (size_t)(L - lt) * f32_layer + (size_t)lt * (size_t)rows * kvt_bytes_per_token_head(hd, 1);
    printf("    %s kv %s: ppl ternary pages %.9g, f32 pages %.9g; %d / %d layers on ternary pages, pool %zu / %zu "
           "bytes\n",
           dir, policy, t, f, it.kv_ternary_pages, i32.kv_ternary_pages, it.kv_bytes, i32.kv_bytes);
    /* (head_dim 32: the ternary pages' attention sums a key's products in its own order, key lanes;
     * BitNet's int8 activations turn a last-bit difference of an attention output into another code
     * now and then, so there the bound is the GPU-vs-CPU one, kv_policies_gpu_vs_cpu's 1e-2) */
    const double tol = strcmp(dir, BITNET_DIR) == 0 ? 1e-2 : 1e-5;
    CHECK_MSG(isfinite(t) && fabs(t - f) <= tol * f, "%s kv %s: ternary pages %.9g, f32 pages %.9g", dir, policy, t,
              f);
    CHECK_MSG(it.kv_ternary_pages == lt && i32.kv_ternary_pages == 0, "%d / %d ternary layers", it.kv_ternary_pages,
              i32.kv_ternary_pages);
    CHECK_MSG(it.kv_bytes == want && i32.kv_bytes == (size_t)L * f32_layer, "pool %zu (want %zu), f32 %zu (want %zu)",
              it.kv_bytes, want, i32.kv_bytes, (size_t)L * f32_layer);
}

TEST(gpu_kv_ternary_pages_equal_f32_pages) {
    SKIP_WITHOUT_GPU();
    kv_pages_equal(LLAMA_DIR, "all", -1);
    kv_pages_equal(LLAMA_DIR, "all@layers=1-2", 2);
    kv_pages_equal(LLAMA_DIR, "encoder", 0);
    kv_pages_equal(BITNET_DIR, "all", -1);
    kv_pages_equal(BITNET_DIR, "all@layers=0", 1);
    setenv("TERNLAB_CUDA_KV_PAGES", "f16", 1);
    fixture_backend.device = ENGINE_CUDA;
    Model m;
    Engine e;
    err_clear();
    const int rc = fixture_engine(LLAMA_DIR, NULL, 64, 16, 1, 64, &m, &e);
    unsetenv("TERNLAB_CUDA_KV_PAGES");
    CHECK_MSG(rc != 0 && strstr(err_msg(), "TERNLAB_CUDA_KV_PAGES=\"f16\""), "rc %d: %s", rc, err_msg());
    if (rc == 0) engine_free(&e), model_free(&m);
}

/* A pool that fits on the GPU only as ternary pages opens with the policy
 * given from the start (EngineOpts.kv: no f32 page is allocated in a layer
 * the policy stores all ternary) and runs; the same pool as f32 pages is
 * refused at open with the bytes it needs. */
TEST(gpu_kv_ternary_pool_fits_where_f32_does_not) {
    SKIP_WITHOUT_GPU();
#ifdef TL_HAVE_CUDA /* (cudaMemGetInfo) */
    Model m;
    REQUIRE(model_load(test_path(LLAMA_DIR), NULL, &m) == 0);
    size_t fr = 0, tot = 0;
    REQUIRE(cudaMemGetInfo(&fr, &tot) == cudaSuccess);
    const int bs = 16, L = m.cfg.n_layers, hd = m.cfg.head_dim, nkv = m.cfg.n_kv_heads;
    const double f32_block = 2.0 * sizeof(float) * L * nkv * hd * bs, tern_block = (double)L * nkv * bs * kvt_bytes_per_token_head(hd, 1);
    const int64_t n_blocks = (int64_t)(1.3 * (double)fr / f32_block);
    printf("    %zu MiB free: %lld blocks, as f32 pages %.0f MiB, as ternary pages %.0f MiB\n", fr >> 20,
           (long long)n_blocks, n_blocks * f32_block / 1048576.0, n_blocks * tern_block / 1048576.0);
    REQUIRE(n_blocks * tern_block < 0.5 * (double)fr);
    KvPolicy all, none;
    REQUIRE(kv_policy_parse("all", &all) == 0 && kv_policy_parse("none", &none) == 0);
    EngineOpts eo = {.max_tok = 64, .block_size = bs, .n_blocks = n_blocks, .device = ENGINE_CUDA, .kv = &all};
    Engine e;
    const int rc = engine_open(&e, &m, &eo);
    CHECK_MSG(rc == 0, "ternary pool: %s", err_msg());
    if (rc == 0) {
        int tok[8], seq[8];
        int64_t pos[8];
        const int sid = kv_seq_new(&e.kv);
        for (int i = 0; i < 8; i++) tok[i] = 200 + i, seq[i] = sid, pos[i] = i;
        float *lg = xmalloc(sizeof(float) * (size_t)m.cfg.vocab * 8);
        CHECK(forward(&m, &e.kv, &e.rs, tok, seq, pos, 8, NULL, 0, lg) == 0);
        CudaEngineInfo info;
        REQUIRE(cuda_engine_info(&e, &info) == 0);
        CHECK_MSG(info.kv_ternary_pages == L && info.kv_bytes == (size_t)L * (size_t)(n_blocks * nkv * bs) * kvt_bytes_per_token_head(hd, 1),
                  "%d ternary layers, %zu bytes", info.kv_ternary_pages, info.kv_bytes);
        free(lg);
        engine_free(&e);
    }
    eo.kv = &none;
    err_clear();
    const int rc2 = engine_open(&e, &m, &eo);
    CHECK_MSG(rc2 != 0 && strstr(err_msg(), "KV cache") && strstr(err_msg(), "bytes of device memory"), "f32 pool: rc %d, %s",
              rc2, err_msg());
    if (rc2 == 0) engine_free(&e);
    model_free(&m);
#endif
}

/* A tied head reads the embedding's device copy with f32 activations: the engine holds
 * vocab x hidden f32 fewer than with the same matrix untied, and the logits are the same bits
 * (it had been uploaded a second time).  (llama-tiny tied to its embedding here: neither
 * fixture ties its head.) */
TEST(gpu_tied_head_uploaded_once) {
    SKIP_WITHOUT_GPU();
    Model m;
    REQUIRE(model_load(test_path(LLAMA_DIR), NULL, &m) == 0);
    REQUIRE(!m.lm_head_tied && m.lm_head.w && !m.lm_head.t);
    mem_free(m.lm_head.w);
    m.lm_head.w = m.embed;
    m.lm_head_tied = 1;
    const int64_t V = m.cfg.vocab, H = m.cfg.hidden;
    float *lg[2];
    size_t wb[2] = {0, 0};
    for (int u = 0; u < 2; u++) {
        if (u) { /* the same matrix, untied */
            m.lm_head.w = mem_alloc(sizeof(float) * (size_t)(V * H), "untied head");
            REQUIRE(m.lm_head.w);
            memcpy(m.lm_head.w, m.embed, sizeof(float) * (size_t)(V * H));
            m.lm_head_tied = 0;
        }
        EngineOpts eo = {.max_tok = 8, .block_size = 16, .n_blocks = 4, .device = ENGINE_CUDA};
        Engine e;
        REQUIRE(engine_open(&e, &m, &eo) == 0 || (fprintf(stderr, "    %s\n", err_msg()), 0));
        int tok[8], seq[8];
        int64_t pos[8];
        const int sid = kv_seq_new(&e.kv);
        for (int i = 0; i < 8; i++) tok[i] = 100 + 7 * i, seq[i] = sid, pos[i] = i;
        lg[u] = xmalloc(sizeof(float) * (size_t)V * 8);
        CHECK(forward(&m, &e.kv, &e.rs, tok, seq, pos, 8, NULL, 0, lg[u]) == 0);
        CudaEngineInfo info;
        CHECK(cuda_engine_info(&e, &info) == 0);
        wb[u] = info.weight_bytes;
        engine_free(&e);
    }
    printf("    device weights: tied %zu B, untied %zu B (the head %zu B)\n", wb[0], wb[1],
           sizeof(float) * (size_t)(V * H));
    CHECK_MSG(wb[1] - wb[0] == sizeof(float) * (size_t)(V * H), "tied %zu, untied %zu", wb[0], wb[1]);
    CHECK(memcmp(lg[0], lg[1], sizeof(float) * (size_t)V * 8) == 0);
    free(lg[0]);
    free(lg[1]);
    model_free(&m);
}

/* A new sequence of tok[0..n) at positions 0..n-1 prefilled through e; its id in *sid. */
static int prefill_new_seq(Model *m, Engine *e, const int *tok, int n, float *logits, int *sid) {
    int seq[8];
    int64_t pos[8];
    if (n > 8) return -1;
    *sid = kv_seq_new(&e->kv);
    for (int i = 0; i < n; i++) seq[i] = *sid, pos[i] = i;
    e->rs.decode = 0;
    return forward(m, &e->kv, &e->rs, tok, seq, pos, n, NULL, 0, logits);
}

/* The pages change between f32 and ternary only on an empty cache: a policy
 * that would change them while a sequence holds tokens is refused (those
 * rows would be lost), and taken after kv_reset; back to none, the f32
 * pages return and give none's logits. */
TEST(gpu_kv_pages_change_needs_an_empty_cache) {
    SKIP_WITHOUT_GPU();
    fixture_backend.device = ENGINE_CUDA;
    fixture_backend.bf16 = 0;
    Model m;
    Engine e;
    REQUIRE(fixture_engine(LLAMA_DIR, NULL, 64, 16, 2, 64, &m, &e) == 0);
    const int V = m.cfg.vocab, n = 8;
    int tok[8], sid;
    float *l0 = xmalloc(sizeof(float) * (size_t)V * n), *l1 = xmalloc(sizeof(float) * (size_t)V * n);
    for (int i = 0; i < n; i++) tok[i] = 100 + 7 * i;
    KvPolicy none, all;
    REQUIRE(kv_policy_parse("none", &none) == 0 && kv_policy_parse("all", &all) == 0);
    REQUIRE(prefill_new_seq(&m, &e, tok, n, l0, &sid) == 0);
    err_clear();
    CHECK(kv_set_policy(&e.kv, &all) != 0);
    CHECK_MSG(strstr(err_msg(), "holds 8 tokens"), "message: %s", err_msg());
    /* set behind kv_set_policy's back, the engine refuses it at the next step */
    e.kv.policy = all;
    int next = 5;
    int64_t p8 = n;
    e.rs.decode = 1;
    err_clear();
    CHECK(forward(&m, &e.kv, &e.rs, &next, &sid, &p8, 1, NULL, 0, l1) != 0);
    CHECK_MSG(strstr(err_msg(), "holds 8 tokens"), "message: %s", err_msg());
    kv_reset(&e.kv);
    CHECK(prefill_new_seq(&m, &e, tok, n, l1, &sid) == 0);
    CudaEngineInfo info;
    REQUIRE(cuda_engine_info(&e, &info) == 0);
    CHECK_MSG(info.kv_ternary_pages == m.cfg.n_layers, "%d layers on ternary pages", info.kv_ternary_pages);
    CHECK_MSG(memcmp(l0, l1, sizeof(float) * (size_t)V * n) != 0, "all gave none's logits");
    kv_reset(&e.kv);
    REQUIRE(kv_set_policy(&e.kv, &none) == 0);
    CHECK(prefill_new_seq(&m, &e, tok, n, l1, &sid) == 0);
    REQUIRE(cuda_engine_info(&e, &info) == 0);
    CHECK(info.kv_ternary_pages == 0);
    CHECK_MSG(memcmp(l0, l1, sizeof(float) * (size_t)V * n) == 0, "none after all: the logits differ");
    free(l0), free(l1);
    engine_free(&e);
    model_free(&m);
}

/* A policy set on an engine whose decode graph was captured under another
 * drops that graph: the same engine under none, then all, gives a fresh
 * engine's all (the same kernels: the same bits), not none's again. */
TEST(gpu_kv_policy_change_drops_the_graph) {
    SKIP_WITHOUT_GPU();
    fixture_backend.device = ENGINE_CUDA;
    fixture_backend.bf16 = 0;
    Model m;
    Engine e;
    REQUIRE(fixture_engine(LLAMA_DIR, NULL, 4 * 64, 16, 4, 64, &m, &e) == 0);
    CudaEngineInfo i0, i1;
    const double none = kv_policy_ppl_on(&e, &m, "none", &i0), all = kv_policy_ppl_on(&e, &m, "all", &i1);
    engine_free(&e);
    model_free(&m);
    const double fresh = kv_policy_ppl(LLAMA_DIR, NULL, ENGINE_CUDA, "all", NULL);
    printf("    one engine: none %.6f (%lld graphs), then all %.6f (%lld graphs); a fresh engine's all %.6f\n", none,
           (long long)i0.graphs, all, (long long)i1.graphs, fresh);
    CHECK_MSG(i0.graphs >= 1 && i1.graphs > i0.graphs, "graphs %lld then %lld", (long long)i0.graphs,
              (long long)i1.graphs);
    CHECK_MSG(all == fresh && fabs(all - none) > 1e-2 * none, "none %.9g, all %.9g, fresh all %.9g", none, all, fresh);
}

/* A replayed decode graph computes what eager launches compute: the same
 * greedy tokens, with the argmax inside the graph (the default) or after it.
 * Each sequence has a prompt of its own (the fixture's from offset b), so ids
 * that land in the wrong row differ. */
TEST(gpu_graph_replay_equals_eager) {
    SKIP_WITHOUT_GPU();
    unsetenv("TERNLAB_CUDA_ARGMAX_GRAPH");
    int32_t *prompt;
    int64_t np = fixture_ref_ints(LLAMA_DIR, "greedy_prompt", &prompt);
    REQUIRE(np > 8);
    const int32_t *prompts[8];
    int64_t lens[8];
    int32_t *a[8], *b[8];
    for (int i = 0; i < 8; i++) {
        a[i] = xmalloc(4 * 40), b[i] = xmalloc(4 * 40);
        prompts[i] = prompt + i, lens[i] = np - i;
    }
    CudaEngineInfo ia, ib;
    fixture_backend.device = ENGINE_CUDA;
    fixture_backend.bf16 = 1;
    REQUIRE(fixture_greedy_each(LLAMA_DIR, NULL, prompts, lens, 40, 8, a, &ia) == 0);
    setenv("TERNLAB_CUDA_ARGMAX_GRAPH", "0", 1);
    CudaEngineInfo ic;
    const int rc = fixture_greedy_each(LLAMA_DIR, NULL, prompts, lens, 40, 8, b, &ic);
    unsetenv("TERNLAB_CUDA_ARGMAX_GRAPH");
    REQUIRE(rc == 0);
    CHECK(ic.graph_launches >= 30 && ic.argmax_in_graph == 0);
    for (int i = 0; i < 8; i++) CHECK(memcmp(a[i], b[i], 4 * 40) == 0);
    int same = 0; /* (the prompts must lead to different tokens for the row check to mean anything) */
    for (int i = 1; i < 8; i++) same += memcmp(a[0], a[i], 4 * 40) == 0;
    CHECK_MSG(same < 7, "all 8 sequences produced the same tokens");
    fixture_backend.no_graphs = 1;
    REQUIRE(fixture_greedy_each(LLAMA_DIR, NULL, prompts, lens, 40, 8, b, &ib) == 0);
    CHECK(ia.graphs >= 1 && ia.graph_launches >= 30);
    CHECK_MSG(ia.argmax_in_graph == ia.graph_launches, "the argmax in %lld of %lld replays", /* (argmax_graph) */
              (long long)ia.argmax_in_graph, (long long)ia.graph_launches);
    CHECK(ib.graphs == 0 && ib.graph_launches == 0);
    for (int i = 0; i < 8; i++) {
        CHECK(memcmp(a[i], b[i], 4 * 40) == 0);
        free(a[i]), free(b[i]);
    }
    free(prompt);
}

/* forward(); where failures is given, a call that failed on purpose
 * (TERNLAB_CUDA_FAIL_LAUNCH) is made once more and counted in *failures */
static int forward_retry(Engine *e, const int *tok, const int *seq, const int64_t *pos, int64_t n,
                         const int64_t *lidx, int64_t nl, float *logits, int *failures) {
    int rc = forward(e->m, &e->kv, &e->rs, tok, seq, pos, n, lidx, nl, logits);
    if (rc != 0 && failures && strstr(err_msg(), "on purpose")) {
        (*failures)++;
        rc = forward(e->m, &e->kv, &e->rs, tok, seq, pos, n, lidx, nl, logits);
    }
    return rc;
}

/* B sequences, prompt b the fixture's greedy prompt from offset b (np - b
 * tokens), prefilled one by one: seq[b] their KV sequences, len[b] their
 * lengths, first[b] the argmax of their last logits (logits: B x vocab);
 * failures as forward_retry's. */
static int prefill_offsets(Engine *e, const int32_t *prompt, int64_t np, int B, int *seq, int64_t *len,
                           float *logits, int *first, int *failures) {
    const int64_t V = e->m->cfg.vocab;
    int rc = 0;
    for (int b = 0; b < B && rc == 0; b++) {
        seq[b] = kv_seq_new(&e->kv);
        len[b] = np - b;
        int *pt = xmalloc(sizeof(int) * (size_t)len[b]), *ps = xmalloc(sizeof(int) * (size_t)len[b]);
        int64_t *pp = xmalloc(sizeof(int64_t) * (size_t)len[b]), li = len[b] - 1;
        for (int64_t i = 0; i < len[b]; i++) pt[i] = prompt[b + i], ps[i] = seq[b], pp[i] = i;
        rc = forward_retry(e, pt, ps, pp, len[b], &li, 1, logits + b * V, failures);
        first[b] = (int)argmax_f32(logits + b * V, V);
        free(pt), free(ps), free(pp);
    }
    return rc;
}

/* B = 4 prompts prefilled one by one (the fixture's greedy prompt from offset
 * b), then N greedy decode steps of all four; a forward call that fails on
 * purpose (TERNLAB_CUDA_FAIL_LAUNCH=fail, read when the engine opens) is
 * made again.  out: the tokens; *failures: the calls that failed. */
enum { FL_B = 4, FL_N = 8 };
static int failed_launch_tokens(const char *fail, int32_t out[FL_B][FL_N], int *failures) {
    Model m;
    Engine e;
    fixture_backend.device = ENGINE_CUDA;
    fixture_backend.bf16 = 0;
    fixture_backend.no_graphs = 0;
    int32_t *prompt;
    const int64_t np = fixture_ref_ints(LLAMA_DIR, "greedy_prompt", &prompt);
    if (fail) setenv("TERNLAB_CUDA_FAIL_LAUNCH", fail, 1);
    const int opened = np > FL_B ? fixture_engine(LLAMA_DIR, NULL, 64, 16, FL_B, np + FL_N, &m, &e) : -1;
    unsetenv("TERNLAB_CUDA_FAIL_LAUNCH");
    if (opened != 0) {
        free(prompt);
        return -1;
    }
    const int64_t V = m.cfg.vocab;
    float *logits = xmalloc(sizeof(float) * (size_t)(FL_B * V));
    int seq[FL_B], tok[FL_B], rc = 0;
    int64_t len[FL_B], pos[FL_B], lidx[FL_B];
    *failures = 0;
    rc = prefill_offsets(&e, prompt, np, FL_B, seq, len, logits, tok, failures);
    e.rs.decode = 1;
    for (int s = 0; s < FL_N && rc == 0; s++) {
        for (int b = 0; b < FL_B; b++) out[b][s] = tok[b], pos[b] = len[b] + s, lidx[b] = b;
        rc = forward_retry(&e, tok, seq, pos, FL_B, lidx, FL_B, logits, failures);
        for (int b = 0; b < FL_B && rc == 0; b++) tok[b] = (int)argmax_f32(logits + b * V, V);
    }
    e.rs.decode = 0;
    if (rc != 0) fprintf(stderr, "    %s\n", err_msg());
    free(logits), free(prompt);
    engine_free(&e);
    model_free(&m);
    return rc;
}

/* A step launch that fails (the second call: seq 1's prompt, new KV blocks;
 * the sixth: the second decode step, where the graph would be captured)
 * leaves the engine usable: the call made again and the steps after it give
 * the tokens of an engine where nothing failed — the failed step's
 * block-table updates go with the next. */
TEST(gpu_failed_launch_resends_tables) {
    SKIP_WITHOUT_GPU();
    int32_t want[FL_B][FL_N], got[FL_B][FL_N];
    int failures = -1;
    REQUIRE(failed_launch_tokens(NULL, want, &failures) == 0);
    CHECK(failures == 0);
    for (int k = 0; k < 2; k++) {
        const char *fail = k == 0 ? "2" : "6";
        memset(got, 0xff, sizeof got);
        CHECK_MSG(failed_launch_tokens(fail, got, &failures) == 0, "TERNLAB_CUDA_FAIL_LAUNCH=%s", fail);
        CHECK_MSG(failures == 1, "TERNLAB_CUDA_FAIL_LAUNCH=%s: %d failed calls", fail, failures);
        CHECK_MSG(memcmp(want, got, sizeof want) == 0, "TERNLAB_CUDA_FAIL_LAUNCH=%s: other tokens", fail);
    }
    setenv("TERNLAB_CUDA_FAIL_LAUNCH", "2x", 1); /* malformed: the open fails with its name */
    Model m;
    Engine e;
    const int rc = fixture_engine(LLAMA_DIR, NULL, 64, 16, 1, 64, &m, &e);
    unsetenv("TERNLAB_CUDA_FAIL_LAUNCH");
    CHECK(rc != 0 && strstr(err_msg(), "TERNLAB_CUDA_FAIL_LAUNCH"));
    if (rc == 0) {
        engine_free(&e);
        model_free(&m);
    }
}

/* Decode steps of one shape that alternate between the logits back (argmax
 * on the host) and the ids back (argmax on the GPU): the graph captured with
 * or without the argmax serves both, is captured again at most once (to take
 * the argmax in), and the tokens equal those of eager steps with the host's
 * argmax throughout.  Ternary int8 linears (the fused forms' maxima). */
static int alt_decode(int graphs, int32_t out[4][24], CudaEngineInfo *info) {
    enum { B = 4, N = 24 };
    Model m;
    Engine e;
    ModelLoadOpts lo = {.quant = "rule=twn,group=row,act=int8"};
    fixture_backend.device = ENGINE_CUDA;
    fixture_backend.bf16 = 0;
    fixture_backend.no_graphs = !graphs;
    int32_t *prompt;
    const int64_t np = fixture_ref_ints(LLAMA_DIR, "greedy_prompt", &prompt);
    if (np <= B || fixture_engine(LLAMA_DIR, &lo, 64, 16, B, np + N, &m, &e) != 0) return -1;
    const int64_t V = m.cfg.vocab;
    float *logits = xmalloc(sizeof(float) * (size_t)(B * V));
    int seq[B], tok[B];
    int32_t ids[B];
    int64_t pos[B], lidx[B], len[B];
    int rc = prefill_offsets(&e, prompt, np, B, seq, len, logits, tok, NULL);
    e.rs.decode = 1;
    for (int s = 0; s < N && rc == 0; s++) {
        for (int b = 0; b < B; b++) out[b][s] = tok[b], pos[b] = len[b] + s, lidx[b] = b;
        const int host = graphs ? s % 3 == 1 : 1; /* steps 1, 4, 7, ...: the logits back */
        e.rs.argmax_out = host ? NULL : ids;
        rc = forward(e.m, &e.kv, &e.rs, tok, seq, pos, B, lidx, B, host ? logits : NULL);
        e.rs.argmax_out = NULL;
        for (int b = 0; b < B && rc == 0; b++) tok[b] = host ? (int)argmax_f32(logits + b * V, V) : ids[b];
    }
    e.rs.decode = 0;
    if (rc != 0) fprintf(stderr, "    %s\n", err_msg());
    if (rc == 0 && info) rc = cuda_engine_info(&e, info);
    free(logits), free(prompt);
    engine_free(&e);
    model_free(&m);
    fixture_backend.no_graphs = 0;
    return rc;
}

TEST(gpu_argmax_graph_alternating_calls) {
    SKIP_WITHOUT_GPU();
    unsetenv("TERNLAB_CUDA_ARGMAX_GRAPH");
    int32_t got[4][24], want[4][24];
    CudaEngineInfo ig, ie;
    REQUIRE(alt_decode(1, got, &ig) == 0);
    REQUIRE(alt_decode(0, want, &ie) == 0);
    CHECK(memcmp(got, want, sizeof got) == 0);
    CHECK_MSG(ig.graphs >= 1 && ig.graphs <= 2 && ig.argmax_in_graph >= 10 && ig.graph_launches >= 20,
              "graphs %lld, launches %lld, argmax in graph %lld", (long long)ig.graphs,
              (long long)ig.graph_launches, (long long)ig.argmax_in_graph);
    CHECK(ie.graphs == 0);
}

/* Greedy decode of B sequences (prompt b: the fixture's from offset b),
 * N steps after the prompts: chained (cuda_engine_decode_chain, in two
 * calls: the second starts on the first's graph) or by one forward() a
 * step, each fed the last one's ids; then one more step through
 * forward() with the logits back (the engine after a chain serves plain
 * calls).  ids: N x B, then the extra step's argmax. */
static int chain_decode(int chained, int B, int N, int32_t *ids, CudaEngineInfo *info, double *done) {
    Model m;
    Engine e;
    ModelLoadOpts lo = {.quant = "rule=twn,group=row,act=int8"};
    fixture_backend.device = ENGINE_CUDA;
    fixture_backend.bf16 = 0;
    int32_t *prompt;
    const int64_t np = fixture_ref_ints(LLAMA_DIR, "greedy_prompt", &prompt);
    if (np <= B + 1 || fixture_engine(LLAMA_DIR, &lo, 64, 16, B, np + N + 1, &m, &e) != 0) return -1;
    const int64_t V = m.cfg.vocab;
    float *logits = xmalloc(sizeof(float) * (size_t)(B * V));
    int *seq = xmalloc(sizeof(int) * (size_t)B), *tok = xmalloc(sizeof(int) * (size_t)B);
    int32_t *t0 = xmalloc(sizeof(int32_t) * (size_t)B);
    int64_t *pos = xmalloc(sizeof(int64_t) * (size_t)B), *lidx = xmalloc(sizeof(int64_t) * (size_t)B),
            *len = xmalloc(sizeof(int64_t) * (size_t)B);
    int rc = prefill_offsets(&e, prompt, np, B, seq, len, logits, tok, NULL);
    for (int b = 0; b < B; b++) t0[b] = tok[b];
    for (int b = 0; b < B; b++) pos[b] = len[b], lidx[b] = b;
    if (rc == 0 && chained) {
        const int n1 = N / 2 + 1;
        rc = cuda_engine_decode_chain(&e, seq, pos, t0, B, n1, ids, done);
        for (int b = 0; b < B; b++) t0[b] = ids[(size_t)(n1 - 1) * (size_t)B + (size_t)b], pos[b] = len[b] + n1;
        if (rc == 0)
            rc = cuda_engine_decode_chain(&e, seq, pos, t0, B, N - n1, ids + (size_t)n1 * (size_t)B,
                                          done ? done + n1 : NULL);
    } else if (rc == 0) {
        e.rs.decode = 1;
        for (int s = 0; s < N && rc == 0; s++) {
            for (int b = 0; b < B; b++) tok[b] = s ? ids[(s - 1) * B + b] : t0[b], pos[b] = len[b] + s;
            e.rs.argmax_out = ids + (size_t)s * (size_t)B;
            rc = forward(e.m, &e.kv, &e.rs, tok, seq, pos, B, lidx, B, NULL);
            e.rs.argmax_out = NULL;
        }
        e.rs.decode = 0;
    }
    for (int b = 0; b < B && rc == 0; b++) { /* the cache holds every step's token */
        if (e.kv.seqs[seq[b]].len != len[b] + N) {
            fprintf(stderr, "    sequence %d: length %lld, expected %lld\n", b, (long long)e.kv.seqs[seq[b]].len,
                    (long long)(len[b] + N));
            rc = -1;
        }
        tok[b] = ids[(size_t)(N - 1) * (size_t)B + (size_t)b], pos[b] = len[b] + N;
    }
    e.rs.decode = 1;
    if (rc == 0) rc = forward(e.m, &e.kv, &e.rs, tok, seq, pos, B, lidx, B, logits);
    e.rs.decode = 0;
    for (int b = 0; b < B && rc == 0; b++) ids[(size_t)N * (size_t)B + (size_t)b] = (int32_t)argmax_f32(logits + b * V, V);
    if (rc != 0) fprintf(stderr, "    %s\n", err_msg());
    if (rc == 0 && info) rc = cuda_engine_info(&e, info);
    free(logits), free(prompt), free(seq), free(tok), free(t0), free(pos), free(lidx), free(len);
    engine_free(&e);
    model_free(&m);
    return rc;
}

/* The chained decode (a step's tokens taken on the device from the last
 * step's argmax, the next step enqueued before the ids are back) gives the
 * ids of one forward() a step, at batch 1 and 5, with the argmax in the graph
 * and after it; most steps are chained; the ids come back in order; bad
 * batches are refused. */
TEST(gpu_decode_chain_equals_steps) {
    SKIP_WITHOUT_GPU();
    unsetenv("TERNLAB_CUDA_CHAIN");
    enum { N = 30 };
    const int bs[2] = {1, 5};
    for (int k = 0; k < 2; k++)
        for (int ag = 1; ag >= 0; ag--) {
            const int B = bs[k];
            if (ag) unsetenv("TERNLAB_CUDA_ARGMAX_GRAPH");
            else setenv("TERNLAB_CUDA_ARGMAX_GRAPH", "0", 1);
            int32_t *a = xmalloc(sizeof(int32_t) * (size_t)((N + 1) * B)), *r = xmalloc(sizeof(int32_t) * (size_t)((N + 1) * B));
            double done[N];
            CudaEngineInfo ia, ir;
            REQUIRE(chain_decode(1, B, N, a, &ia, done) == 0);
            REQUIRE(chain_decode(0, B, N, r, &ir, NULL) == 0);
            for (int s = 0; s <= N; s++)
                for (int b = 0; b < B; b++)
                    CHECK_MSG(a[s * B + b] == r[s * B + b], "B %d, argmax in graph %d, step %d, sequence %d: %d vs %d",
                              B, ag, s, b, a[s * B + b], r[s * B + b]);
            int varied = 0; /* (tokens that never change would not show a step fed the wrong ids) */
            for (int s = 1; s <= N; s++) varied += a[s * B] != a[(s - 1) * B];
            CHECK_MSG(varied >= 5, "B %d: the first sequence's token changed %d times in %d steps", B, varied, N);
            CHECK_MSG(ia.chained == N - 3 && ir.chained == 0, "B %d: %lld / %lld steps chained", B,
                      (long long)ia.chained, (long long)ir.chained); /* (each chain's first step, the
                                                                     * first's eager step and capture not) */
            CHECK(ia.argmax_in_graph == (ag ? ia.graph_launches - 1 : 0)); /* (the last step: logits back) */
            for (int s = 1; s < N; s++) CHECK(done[s] >= done[s - 1]);
            /* the ids read where the argmax kernels wrote them (mapped host memory, by default), or
             * copied back on the stream (TERNLAB_CUDA_IDS_MAPPED=0): the same ids */
            setenv("TERNLAB_CUDA_IDS_MAPPED", "0", 1);
            CudaEngineInfo ic;
            const int rcc = chain_decode(1, B, N, r, &ic, NULL);
            unsetenv("TERNLAB_CUDA_IDS_MAPPED");
            REQUIRE(rcc == 0);
            CHECK_MSG(ia.ids_mapped == 1 && ic.ids_mapped == 0 && ic.chained == N - 3, "ids mapped %lld / %lld",
                      (long long)ia.ids_mapped, (long long)ic.ids_mapped);
            CHECK_MSG(memcmp(a, r, sizeof(int32_t) * (size_t)((N + 1) * B)) == 0,
                      "B %d, argmax in graph %d: the ids copied back differ from the mapped ones", B, ag);
            free(a), free(r);
        }
    unsetenv("TERNLAB_CUDA_ARGMAX_GRAPH");
    { /* decode graphs off: every step waits for the one before (none chained), the same ids */
        int32_t a[N + 1], r[N + 1];
        CudaEngineInfo ia, ir;
        fixture_backend.no_graphs = 1;
        const int rca = chain_decode(1, 1, N, a, &ia, NULL), rcr = chain_decode(0, 1, N, r, &ir, NULL);
        fixture_backend.no_graphs = 0;
        REQUIRE(rca == 0 && rcr == 0);
        CHECK(memcmp(a, r, sizeof a) == 0);
        CHECK(ia.chained == 0 && ia.graph_launches == 0);
    }
    /* refused: a batch of 0, a sequence twice */
    Model m;
    Engine e;
    ModelLoadOpts lo = {.quant = "rule=twn,group=row,act=int8"};
    fixture_backend.device = ENGINE_CUDA;
    REQUIRE(fixture_engine(LLAMA_DIR, &lo, 64, 16, 2, 64, &m, &e) == 0);
    CHECK(cuda_engine_chain_ok(&e));
    setenv("TERNLAB_CUDA_CHAIN", "0", 1);
    CHECK(!cuda_engine_chain_ok(&e));
    unsetenv("TERNLAB_CUDA_CHAIN");
    int seq[2] = {kv_seq_new(&e.kv), 0};
    seq[1] = seq[0];
    int64_t pos[2] = {0, 1};
    int32_t tk[2] = {1, 2}, out[4];
    CHECK(cuda_engine_decode_chain(&e, seq, pos, tk, 0, 2, out, NULL) != 0);
    CHECK(strstr(err_msg(), "batch 0") != NULL);
    CHECK(cuda_engine_decode_chain(&e, seq, pos, tk, 2, 2, out, NULL) != 0);
    CHECK(strstr(err_msg(), "distinct") != NULL);
    CHECK(e.kv.seqs[seq[0]].n_blocks == 0); /* (refused before any block is reserved) */
    engine_free(&e);
    model_free(&m);
    fixture_backend.no_graphs = 1; /* engine_generate does not chain without decode graphs */
    REQUIRE(fixture_engine(LLAMA_DIR, &lo, 64, 16, 2, 64, &m, &e) == 0);
    fixture_backend.no_graphs = 0;
    CHECK(!cuda_engine_chain_ok(&e));
    engine_free(&e);
    model_free(&m);
}

/* The chained decode's own RoPE limit (generate refuses upfront; a caller of
 * cuda_engine_decode_chain reaches this one): steps that would reach position
 * 1024 under dynamic scaling or 512 under longrope (llama-tiny's limits) are
 * refused before any KV block is reserved, the message naming the scaling. */
TEST(gpu_decode_chain_refuses_positions_past_the_rope_limit) {
    SKIP_WITHOUT_GPU();
    fixture_backend.device = ENGINE_CUDA;
    static const char *const vs[] = {"dynamic", "longrope"};
    const int64_t limit[] = {1024, 512};
    for (int v = 0; v < 2; v++) {
        Model m;
        Engine e;
        const char *dir = fixture_rope_dir(vs[v], 0);
        /* (a KV cache that reaches past the limit: its own check does not refuse first) */
        REQUIRE(dir && fixture_engine(dir, NULL, 64, 16, 1, 1040, &m, &e) == 0);
        int seq[1] = {kv_seq_new(&e.kv)};
        int64_t pos[1] = {limit[v] - 2};
        int32_t tk[1] = {1}, out[3];
        char want[96];
        snprintf(want, sizeof want, "decode: position %lld under %s RoPE scaling", (long long)limit[v], vs[v]);
        CHECK_MSG(cuda_engine_decode_chain(&e, seq, pos, tk, 1, 3, out, NULL) != 0 && strstr(err_msg(), want),
                  "%s: '%s'", vs[v], err_msg());
        CHECK(e.kv.seqs[seq[0]].n_blocks == 0);
        engine_free(&e);
        model_free(&m);
    }
}

/* ---- tensor parallelism over GPUs (NCCL) --------------------------------- */

#define SKIP_WITHOUT_GPUS(k)                                                      \
    do {                                                                          \
        char why_[256];                                                           \
        cuda_prepare_multi_gpu(); /* before this process's first CUDA call */    \
        if (!cuda_backend_available(why_, sizeof why_)) {                         \
            test_skip("%s", why_);                                                \
            return;                                                               \
        }                                                                         \
        if (cuda_device_count() < (k)) {                                          \
            test_skip("needs %d GPUs, %d visible", (k), cuda_device_count());     \
            return;                                                               \
        }                                                                         \
    } while (0)

/* Logits of windows 0-1 and 40 greedy tokens (batch 4) at tp on the GPU. */
static int tp_run(const char *dir, const char *quant, int tp, float **logits, int32_t **greedy,
                  CudaEngineInfo *info) {
    Model m;
    ModelLoadOpts lo = {.quant = quant};
    if (model_load(test_path(dir), &lo, &m) != 0) {
        fprintf(stderr, "    %s\n", err_msg());
        return -1;
    }
    EngineOpts eo = {.max_tok = 2 * T, .block_size = 16, .n_blocks = 64, .device = ENGINE_CUDA};
    Engine e;
    if (tp_engine_open(&e, &m, &eo, tp) != 0) {
        fprintf(stderr, "    %s\n", err_msg());
        model_free(&m);
        return -1;
    }
    *logits = fixture_window_logits(&e, T, 0, 2);
    int32_t *prompt;
    int64_t np = fixture_ref_ints(dir, "greedy_prompt", &prompt);
    const int32_t *prompts[4] = {prompt, prompt, prompt, prompt};
    int64_t lens[4] = {np, np, np - 1, np - 2};
    int32_t *out[4];
    *greedy = xmalloc(sizeof(int32_t) * 4 * 40);
    for (int b = 0; b < 4; b++) out[b] = *greedy + b * 40;
    int rc = *logits && np > 2 ? engine_generate(&e, prompts, lens, 4, 40, out) : -1;
    if (rc) fprintf(stderr, "    %s\n", err_msg());
    if (rc == 0) rc = cuda_engine_info(&e, info);
    free(prompt);
    engine_free(&e);
    model_free(&m);
    return rc;
}

/* tp = 2 against tp = 1 on the GPU: logits within max_rel (0 = bit for bit),
 * greedy tokens identical, each rank holding half the decoder weights. */
static void tp_check(const char *dir, const char *quant, double max_rel) {
    float *l1, *l2;
    int32_t *g1, *g2;
    CudaEngineInfo i1, i2;
    REQUIRE(tp_run(dir, quant, 1, &l1, &g1, &i1) == 0);
    REQUIRE(tp_run(dir, quant, 2, &l2, &g2, &i2) == 0);
    Model m;
    REQUIRE(config_load(test_path(dir), &m.cfg) == 0);
    double rel = rel_l2(l2, l1, 2 * (int64_t)T * m.cfg.vocab);
    printf("    %s quant=%s: tp 2 vs tp 1 on the GPU: logits rel L2 %.3g; decoder bytes %zu -> %zu "
           "+ %zu\n", dir, quant ? quant : "(as loaded)", rel, i1.rank_layer_bytes[0],
           i2.rank_layer_bytes[0], i2.rank_layer_bytes[1]);
    CHECK_MSG(max_rel == 0 ? rel == 0 : rel <= max_rel, "rel L2 %.3g > %.3g", rel, max_rel);
    CHECK_MSG(memcmp(g1, g2, sizeof(int32_t) * 4 * 40) == 0, "greedy tokens differ");
    CHECK(i2.tp == 2);
    /* (no one-token step, and no MLP fused at tp 1: no norm folded into the GEMVs, which would be
     * close to tp 2, not the same bits) */
    CHECK_MSG(i1.norm_folded == 0 && i2.norm_folded == 0, "norms folded: %lld / %lld", (long long)i1.norm_folded,
              (long long)i2.norm_folded);
    /* each rank holds its half of the decoder weights: exactly half of the
     * dense bytes; for packed ternary more than half, because a row-parallel
     * half of a row still takes whole 256-column code blocks (llama-tiny:
     * o_proj's 128-column halves keep one 64-byte block per row, as the full
     * 256-column rows do; down_proj's 384 columns take 2 blocks of 3) and
     * row-parallel scales are per row; never the whole, and equal on both */
    const int dense = quant == NULL && strcmp(dir, LLAMA_DIR) == 0;
    CHECK_MSG(i2.rank_layer_bytes[0] == i2.rank_layer_bytes[1], "ranks hold %zu and %zu bytes",
              i2.rank_layer_bytes[0], i2.rank_layer_bytes[1]);
    for (int r = 0; r < 2; r++) {
        double share = (double)i2.rank_layer_bytes[r] / (double)i1.rank_layer_bytes[0];
        CHECK_MSG(dense ? share > 0.49 && share < 0.51 : share >= 0.5 && share < 0.6,
                  "rank %d holds %.4f of the decoder weights", r, share);
    }
    free(l1), free(l2), free(g1), free(g2);
}

/* f32 activations: the row-parallel layers add two partial sums in the
 * all-reduce instead of one sum in order, a reassociation of f32 terms
 * (measured on 2 x H200: 4.8e-7 .. 1.1e-6) */
TEST(gpu_tp2_llama_dense_equals_tp1) {
    SKIP_WITHOUT_GPUS(2);
    tp_check(LLAMA_DIR, NULL, 1e-5);
}
TEST(gpu_tp2_llama_ternary_groups_equal_tp1) {
    SKIP_WITHOUT_GPUS(2);
    tp_check(LLAMA_DIR, "rule=absmean,group=tensor", 1e-5);
    tp_check(LLAMA_DIR, "rule=absmean,group=row", 1e-5);
    tp_check(LLAMA_DIR, "rule=twn,group=64", 1e-5);
    tp_check(LLAMA_DIR, "rule=absmean,group=128", 1e-5);
}
TEST(gpu_tp2_int8_bit_identical) {
    SKIP_WITHOUT_GPUS(2);
    tp_check(BITNET_DIR, NULL, 0);
    tp_check(LLAMA_DIR, "rule=absmean,group=row,act=int8", 0);
}

/* The switches a tp rank's step reads (TERNLAB_CUDA_ATT_FUSE, _LM_GEMV, _TAIL) reach every
 * rank: off, none of their forms ran; unset, the fused attention did (the ranks had kept
 * the defaults whatever the environment said). */
TEST(gpu_tp2_switches_reach_every_rank) {
    SKIP_WITHOUT_GPUS(2);
    static const char *const sw[] = {"TERNLAB_CUDA_ATT_FUSE", "TERNLAB_CUDA_LM_GEMV", "TERNLAB_CUDA_TAIL"};
    for (int off = 0; off < 2; off++) {
        for (int i = 0; i < 3; i++) off ? setenv(sw[i], "0", 1) : unsetenv(sw[i]);
        float *l;
        int32_t *g;
        CudaEngineInfo info;
        const int rc = tp_run(BITNET_DIR, NULL, 2, &l, &g, &info);
        for (int i = 0; i < 3; i++) unsetenv(sw[i]);
        REQUIRE(rc == 0);
        printf("    tp 2, switches %s: fused attention %lld, LM-head GEMVs %lld, tail norms %lld\n",
               off ? "off" : "unset", (long long)info.fused_att, (long long)info.lm_gemv,
               (long long)info.tail_fused);
        for (int r = 0; r < 2; r++) /* (every rank's: rank 0's alone had shown the default kept elsewhere) */
            CHECK_MSG(off ? info.rank_fused_att[r] == 0 && info.rank_tail_fused[r] == 0 : info.rank_fused_att[r] > 0,
                      "rank %d: fused attentions %lld, tail norms %lld", r, (long long)info.rank_fused_att[r],
                      (long long)info.rank_tail_fused[r]);
        if (off) CHECK(info.lm_gemv == 0); /* (the LM head runs on rank 0) */
        free(l), free(g);
    }
}

/* A rank whose step launch fails (TERNLAB_CUDA_FAIL_LAUNCH=2:1: rank 1's
 * second) while the other has enqueued its all-reduces: every rank aborts its
 * communicator, the call fails naming the rank that failed (no hang), later
 * calls are refused, and the engine closes. */
TEST(gpu_tp2_failed_launch_aborts) {
    SKIP_WITHOUT_GPUS(2);
    Model m;
    REQUIRE(model_load(test_path(LLAMA_DIR), NULL, &m) == 0);
    EngineOpts eo = {.max_tok = 64, .block_size = 16, .n_blocks = 8, .device = ENGINE_CUDA};
    Engine e;
    setenv("TERNLAB_CUDA_FAIL_LAUNCH", "2:1", 1);
    const int opened = tp_engine_open(&e, &m, &eo, 2);
    unsetenv("TERNLAB_CUDA_FAIL_LAUNCH");
    if (opened != 0) fprintf(stderr, "    %s\n", err_msg());
    REQUIRE(opened == 0);
    const int64_t V = m.cfg.vocab;
    float *logits = xmalloc(sizeof(float) * (size_t)V);
    const int seq = kv_seq_new(&e.kv);
    int rcs[3];
    char msgs[3][512];
    for (int i = 0; i < 3; i++) { /* one token a call: positions 0, 1, 1 (the failed one again) */
        const int tok = 5 + i;
        const int64_t pos = i < 2 ? i : 1, li = 0;
        rcs[i] = forward(e.m, &e.kv, &e.rs, &tok, &seq, &pos, 1, &li, 1, logits);
        snprintf(msgs[i], sizeof msgs[i], "%s", rcs[i] ? err_msg() : "");
    }
    CHECK_MSG(rcs[0] == 0, "%s", msgs[0]);
    CHECK_MSG(rcs[1] != 0 && strstr(msgs[1], "tp rank 1") && strstr(msgs[1], "on purpose"), "%s", msgs[1]);
    CHECK_MSG(rcs[2] != 0 && strstr(msgs[2], "communicators were aborted"), "%s", msgs[2]);
    free(logits);
    engine_free(&e);
    model_free(&m);
}

/* A GPU fault that shows only after every rank enqueued its step
 * (TERNLAB_CUDA_FAULT_STEP=4:R: rank R's fourth step — a graph replay — has a
 * kernel that writes to an illegal address after ~0.5 s, before the step's
 * all-reduces): the
 * faulted rank stops short of them, and the other had waited in
 * cudaStreamSynchronize for ever.  Each rank now polls its stream, NCCL's error
 * and the others' flag: the command ends (exit 1, not the timeout's 124) naming
 * the rank and the fault (by name, or by CUDA's text where the error shows in
 * a call that gives the text alone).  In a process of its own (the fault ends the
 * device's context for the process). */
TEST(gpu_tp2_device_fault_ends_every_rank) {
    SKIP_WITHOUT_GPUS(2);
    for (int r = 0; r < 2; r++) {
        char cmd[2048], *out = NULL, want[32];
        snprintf(cmd, sizeof cmd,
                 "TERNLAB_CUDA_FAULT_STEP=4:%d timeout 120 %s generate --model %s --prompt 1,2,3,4 --max-new 8 "
                 "--device cuda --tp 2 2>&1",
                 r, bin_path("ternlab"), test_path(LLAMA_DIR));
        const int rc = test_run(cmd, &out);
        snprintf(want, sizeof want, "tp rank %d", r);
        CHECK_MSG(rc == 1 && out && strstr(out, want) &&
                      (strstr(out, "cudaErrorIllegalAddress") || strstr(out, "illegal memory access")),
                  "fault on rank %d: rc %d (124: hung): %s", r, rc, out ? out : "");
        free(out);
    }
}

/* The same fault on one GPU: an error naming it (exit 1), not a crash or a
 * hang; a malformed TERNLAB_CUDA_FAULT_STEP is refused by name. */
TEST(gpu_device_fault_is_an_error) {
    SKIP_WITHOUT_GPU();
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "TERNLAB_CUDA_FAULT_STEP=4 timeout 120 %s generate --model %s --prompt 1,2,3,4 --max-new 8 --device cuda "
             "2>&1",
             bin_path("ternlab"), test_path(LLAMA_DIR));
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 1 && out && (strstr(out, "cudaErrorIllegalAddress") || strstr(out, "illegal memory access")),
              "rc %d: %s", rc, out ? out : "");
    free(out);
    snprintf(cmd, sizeof cmd,
             "TERNLAB_CUDA_FAULT_STEP=3x timeout 120 %s generate --model %s --prompt 1,2 --max-new 2 --device cuda 2>&1",
             bin_path("ternlab"), test_path(LLAMA_DIR));
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 1 && out && strstr(out, "TERNLAB_CUDA_FAULT_STEP=\"3x\""), "rc %d: %s", rc, out ? out : "");
    free(out);
}

/* More ranks than GPUs, or a split that cuts a scale group: a clear error. */
TEST(gpu_tp_refusals) {
    SKIP_WITHOUT_GPU();
    Model m;
    ModelLoadOpts lo = {.quant = "rule=absmean,group=128"};
    REQUIRE(model_load(test_path(LLAMA_DIR), &lo, &m) == 0);
    EngineOpts eo = {.max_tok = 64, .block_size = 16, .n_blocks = 8, .device = ENGINE_CUDA};
    Engine e;
    int many = cuda_device_count() + 1;
    CHECK(tp_engine_open(&e, &m, &eo, many) != 0);
    CHECK_MSG(strstr(err_msg(), "GPUs") != NULL, "%s", err_msg());
    if (cuda_device_count() >= 4) { /* o_proj at tp 4: 64 columns per rank, groups of 128 */
        CHECK(tp_engine_open(&e, &m, &eo, 4) != 0);
        CHECK_MSG(strstr(err_msg(), "cuts a scale group") != NULL, "%s", err_msg());
    }
    model_free(&m);
}

/* ---- what the CUDA path refuses (runs everywhere) ------------------------ */
TEST(cuda_refusals_are_clear) {
    char *out = NULL;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s ppl --model %s --tokens %s --max-windows 1 --device cuda --tp 2",
             bin_path("ternlab"), test_path(LLAMA_DIR), test_path(TOKENS_FILE));
    char why[256];
    int gpu = cuda_backend_available(why, sizeof why);
    if (cuda_device_count() < 2) { /* --tp 2 on fewer than 2 GPUs: refused with the count */
        int rc = test_run(cmd, &out);
        CHECK_MSG(rc == 1 && strstr(out, gpu ? "needs 2 GPUs" : "--device cuda"), "rc %d: %s", rc,
                  out);
        free(out);
    }
    int rc;
    /* ternary KV pages: on one GPU the CPU's perplexity (the last stdout line), over
     * several GPUs refused at the command line */
    const char *ppl_kv = "%s ppl --model %s --tokens %s --max-windows 2 --window 64 --kv decoder --device %s";
    snprintf(cmd, sizeof cmd, ppl_kv, bin_path("ternlab"), test_path(LLAMA_DIR), test_path(TOKENS_FILE), "cuda");
    rc = test_run(cmd, &out);
    if (!gpu) {
        CHECK_MSG(rc == 1 && strstr(out, "--device cuda"), "rc %d: %s", rc, out);
    } else {
        char *cpu = NULL;
        snprintf(cmd, sizeof cmd, ppl_kv, bin_path("ternlab"), test_path(LLAMA_DIR), test_path(TOKENS_FILE), "cpu");
        const int rc_cpu = test_run(cmd, &cpu);
        const char *a = rc == 0 ? strstr(out, "\nppl ") : NULL, *b = rc_cpu == 0 ? strstr(cpu, "\nppl ") : NULL;
        const double pa = a ? atof(a + 5) : NAN, pb = b ? atof(b + 5) : NAN;
        CHECK_MSG(a && b && fabs(pa - pb) <= 2e-3 * pb, "cuda rc %d ppl %g, cpu rc %d ppl %g: %s", rc, pa, rc_cpu,
                  pb, out);
        free(cpu);
    }
    free(out);
    snprintf(cmd, sizeof cmd, "%s ppl --model %s --tokens %s --device cuda --tp 2 --kv all",
             bin_path("ternlab"), test_path(LLAMA_DIR), test_path(TOKENS_FILE));
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "run on one GPU or on the CPU"), "rc %d: %s", rc, out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s ppl --model %s --tokens %s --dtype bf16", bin_path("ternlab"),
             test_path(LLAMA_DIR), test_path(TOKENS_FILE));
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "--dtype bf16 applies to --device cuda"), "rc %d: %s", rc, out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s ppl --model %s --tokens %s --device tpu", bin_path("ternlab"),
             test_path(LLAMA_DIR), test_path(TOKENS_FILE));
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "expected cpu or cuda"), "rc %d: %s", rc, out);
    free(out);
#ifdef TL_HAVE_CUDA /* (a build without CUDA refuses --device cuda before reading any switch) */
    /* an on/off switch given anything but 0 / 1 is refused when the engine opens (GPU or not),
     * where it had silently meant the default */
    snprintf(cmd, sizeof cmd, "TERNLAB_CUDA_GRAPHS=off %s ppl --model %s --tokens %s --max-windows 1 --device cuda",
             bin_path("ternlab"), test_path(LLAMA_DIR), test_path(TOKENS_FILE));
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 1 && strstr(out, "TERNLAB_CUDA_GRAPHS=\"off\": expected 0 or 1"), "rc %d: %s", rc, out);
    free(out);
    snprintf(cmd, sizeof cmd, "TERNLAB_CUDA_L2EF=no %s generate --model %s --prompt 1,2,3 --max-new 2 --device cuda",
             bin_path("ternlab"), test_path(LLAMA_DIR));
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 1 && strstr(out, "TERNLAB_CUDA_L2EF=\"no\""), "rc %d: %s", rc, out);
    free(out);
    /* the numeric settings likewise, on every open: --tp 2 (which reads neither) refuses them
     * before it counts the GPUs */
    static const char *const numeric[][2] = {{"TERNLAB_CUDA_MT_FUSE", "9"}, {"TERNLAB_CUDA_TBM_RESERVE", "x"}};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s=%s %s ppl --model %s --tokens %s --max-windows 1 --device cuda --tp 2",
                 numeric[k][0], numeric[k][1], bin_path("ternlab"), test_path(LLAMA_DIR), test_path(TOKENS_FILE));
        rc = test_run(cmd, &out);
        char want[96];
        snprintf(want, sizeof want, "%s=\"%s\": expected", numeric[k][0], numeric[k][1]);
        CHECK_MSG(rc == 1 && strstr(out, want), "%s: rc %d: %s", want, rc, out);
        free(out);
    }
#endif
    if (!gpu) { /* no GPU here: --device cuda is an error with the reason, not a crash */
        snprintf(cmd, sizeof cmd, "%s generate --model %s --prompt 1,2,3 --max-new 2 --device cuda",
                 bin_path("ternlab"), test_path(LLAMA_DIR));
        rc = test_run(cmd, &out);
        CHECK_MSG(rc == 1 && strstr(out, "--device cuda:"), "rc %d: %s", rc, out);
        free(out);
        /* before the model: a path that does not exist is not what it reports (the model
         * had loaded, however long, before the device was looked at) */
        snprintf(cmd, sizeof cmd, "%s ppl --model %s/no-such-model --tokens %s --device cuda",
                 bin_path("ternlab"), test_tmpdir(), test_path(TOKENS_FILE));
        rc = test_run(cmd, &out);
        CHECK_MSG(rc == 1 && strstr(out, "--device cuda:") && !strstr(out, "no-such-model"), "rc %d: %s", rc, out);
        free(out);
    }
}
