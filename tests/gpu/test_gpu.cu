/* test_gpu.cu — every CUDA ternary kernel against its CPU *_ref twin.
 *
 * For awkward shapes (rows / cols not multiples of 4, 32, 128, 256), every
 * scale group (tensor, row, 32, 64, 128, 256), n in {1, 3, 9, 17, 64, 100,
 * 300} and the three activation types, every kernel family (decode GEMV,
 * the mma.sync and the wgmma GEMM, the one-token dp4a GEMVs; forced) is run
 * on random data and compared with tern_matmul_f32_ref / tern_matmul_i8_ref.
 * Device buffers carry guard zones filled with a sentinel and the output is poisoned with NaN before
 * each run: a write outside the buffer, an element left unwritten or a NaN
 * fails the case.  Also: determinism (two runs bit-identical), the cuBLAS
 * baseline against a double-precision sum, and bad arguments returning errors.
 *
 * This is a separate program from tests/runner.c because it needs a GPU:
 * without one it prints "SKIPPED: no GPU" and "0 passed, 0 failed" and
 * exits 0 — nothing counts as passed.  Build and run: make test-gpu
 * (kernels/cuda/gpu.mk); one argument runs a part: quick, wg (the wgmma
 * GEMM's plans), splits (its K splits of small tiles), mc (its multicast
 * cases), mt, gemv, errors. */
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/tern_cuda.h"
#include "cuda/tern_mm.cuh"
extern "C" {
#include "core/dtype.h"
#include "core/err.h"
#include "cpu/tern_kernels.h"
#include "quant/quant.h"
#include "ternary_format.h"
}

/* Tolerances (relative L2 of the whole output against the reference).
 * f32:  x split exactly into 3 bf16 terms (error <= 2^-24 |x|), summed by the
 *       tensor cores in fp32.  Both the GPU and tern_matmul_f32_ref (a
 *       sequential fp32 sum) are compared with a float64 sum of the same
 *       terms; the GPU must be within TOL_F32 of it and within TOL_F32_REF
 *       of the CPU reference.  The first H200 run showed GPU vs CPU-ref
 *       errors up to 3.5e-5 at K = 9000 (fp32 round-off of both sides: a
 *       K-term fp32 sum of cancelling terms carries ~sqrt(K) * 2^-24 relative
 *       error per partial sum, and tensor-core fp32 accumulation truncates);
 *       the float64 comparison says which side it comes from.
 * bf16: products q*x are exact in fp32; only the summation order differs.
 * int8: D is an exact integer; the GEMM sums groups in the reference order
 *       (bit-identical, TOL 0); the GEMV's split-K adds groups in another
 *       order when there are several groups per row (1e-6). */
#define TOL_F32 3e-5
#define TOL_F32_REF 6e-5
#define TOL_BF16 1e-5
#define TOL_I8_SPLIT 1e-6
#define TOL_DENSE 1e-5 /* cuBLAS bf16 x bf16, fp32 accumulation vs double */
#define GUARD 256      /* elements of sentinel before and after each buffer */

static int g_pass, g_fail;
static double g_worst_gpu64, g_worst_ref64; /* f32: worst rel. error vs float64 */

static void report(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(bool ok, const char *fmt, ...) {
    if (ok) {
        g_pass++;
        return;
    }
    g_fail++;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}
static float frand(void) { return (float)(rnd() & 0xffffff) / 16777216.0f; } /* [0,1) */
static float nrand(void) {
    float u = frand() + 1e-7f, v = frand();
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

#define CK(call)                                                                            \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) {                                                            \
            printf("FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

/* A device buffer of `bytes` with GUARD*esize sentinel bytes on each side. */
struct GBuf {
    uint8_t *base = nullptr;
    size_t bytes = 0, guard = 0;
    void *ptr() { return base + guard; }
};
static const uint8_t SENT = 0xA5;
static GBuf gbuf(size_t bytes, size_t esize) {
    GBuf b;
    b.bytes = bytes;
    b.guard = GUARD * esize;
    CK(cudaMalloc(&b.base, bytes + 2 * b.guard));
    CK(cudaMemset(b.base, SENT, bytes + 2 * b.guard));
    return b;
}
static bool guards_ok(GBuf &b) {
    size_t tot = b.bytes + 2 * b.guard;
    uint8_t *h = (uint8_t *)malloc(tot);
    CK(cudaMemcpy(h, b.base, tot, cudaMemcpyDeviceToHost));
    bool ok = true;
    for (size_t i = 0; i < b.guard && ok; i++) ok = h[i] == SENT && h[b.guard + b.bytes + i] == SENT;
    free(h);
    return ok;
}
static void gfree(GBuf &b) { cudaFree(b.base); }

static double rel_l2(const float *a, const float *ref, size_t n, int *nan_or_mismatch) {
    double num = 0, den = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) bad++;
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    *nan_or_mismatch = bad;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static const char *act_name(int act) { return act == 0 ? "f32" : act == 1 ? "bf16" : "int8"; }

/* fn(t0, t1) for slices of the n tokens on all host threads: the CPU
 * references, whose result for a token does not depend on the others (the
 * output is the same as one call over all tokens; the device machine's
 * cores make the full run several times shorter) */
template <typename F>
static int par_tokens(int64_t n, F fn) {
    const int64_t nt = std::min<int64_t>(n, std::max(1u, std::thread::hardware_concurrency()));
    if (nt <= 1) return fn((int64_t)0, n);
    std::vector<std::thread> th;
    std::atomic<int> rc{0};
    for (int64_t i = 0; i < nt; i++)
        th.emplace_back([&, i] {
            if (fn(n * i / nt, n * (i + 1) / nt) < 0) rc = -1;
        });
    for (auto &t : th) t.join();
    return rc;
}

/* int8 token scales of run_case: 0.5 .. 3.5 unless set (test_i8_scale_range) */
static float (*g_sx_of)(int64_t t);

/* One (matrix, n, activation) case: reference once, then each kernel family. */
static void run_case(const TernaryMatrix *W, const TernCudaMatrix *dW, int64_t n, int act,
                     const char *gname) {
    const int64_t rows = W->rows, cols = W->cols;
    float *x = (float *)malloc((size_t)(n * cols) * sizeof(float));
    uint16_t *xb = (uint16_t *)malloc((size_t)(n * cols) * 2);
    int8_t *xq = (int8_t *)malloc((size_t)(n * cols));
    float *sx = (float *)malloc((size_t)n * sizeof(float));
    float *ref = (float *)malloc((size_t)(n * rows) * sizeof(float));
    float *got = (float *)malloc((size_t)(n * rows) * sizeof(float));
    float *got2 = (float *)malloc((size_t)(n * rows) * sizeof(float));
    float *ref64 = (float *)malloc((size_t)(n * rows) * sizeof(float));
    for (int64_t i = 0; i < n * cols; i++) x[i] = nrand();
    int rc;
    if (act == 1) { /* the reference sees the same bf16 values */
        for (int64_t i = 0; i < n * cols; i++) {
            xb[i] = f32_to_bf16(x[i]);
            x[i] = bf16_to_f32(xb[i]);
        }
    }
    if (act == 2) {
        for (int64_t i = 0; i < n * cols; i++) xq[i] = (int8_t)(int)(rnd() % 256 - 128);
        for (int64_t t = 0; t < n; t++) sx[t] = g_sx_of ? g_sx_of(t) : 0.5f + 3.0f * frand();
        rc = par_tokens(n, [&](int64_t t0, int64_t t1) {
            return tern_matmul_i8_ref(W, xq + t0 * cols, sx + t0, t1 - t0, ref + t0 * rows);
        });
    } else {
        rc = par_tokens(n, [&](int64_t t0, int64_t t1) {
            if (tern_matmul_f32_ref(W, x + t0 * cols, t1 - t0, ref + t0 * rows) < 0) return -1;
            /* float64 sum of the same terms, for the f32 bound */
            for (int64_t t = t0; t < t1; t++)
                for (int64_t r = 0; r < rows; r++) {
                    const uint8_t *row = W->codes + r * W->row_bytes;
                    double acc = 0;
                    for (int64_t k = 0; k < cols; k++)
                        acc += (double)tern_get(row, k) * W->scales[r * W->scale_stride + k / W->group_cols] *
                               x[t * cols + k];
                    ref64[t * rows + r] = (float)acc;
                }
            return 0;
        });
    }
    if (rc < 0) {
        report(false, "reference failed: %s", err_msg());
        goto out;
    }
    {
        const size_t esz = act == 0 ? 4 : act == 1 ? 2 : 1;
        GBuf dx = gbuf((size_t)(n * cols) * esz, esz), dy = gbuf((size_t)(n * rows) * 4, 4),
             dsx = gbuf((size_t)n * 4, 4);
        const void *hx = act == 0 ? (const void *)x : act == 1 ? (const void *)xb : (const void *)xq;
        CK(cudaMemcpy(dx.ptr(), hx, dx.bytes, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dsx.ptr(), sx, dsx.bytes, cudaMemcpyHostToDevice));
        static const char *const kname[] = {"", "gemv", "gemm", "gemv_rows", "gemv_warp",
                                            "gemm_wgmma", "gemv_bmma", "gemv_tbm_mt", "gemv_tbm_bf16"};
        for (int kern = 1; kern <= 8; kern++) {
            /* 3, 4, 6: the one-token int8 one-scale-per-row GEMVs */
            if ((kern == 3 || kern == 4 || kern == 6) && (act != 2 || W->n_groups != 1 || n != 1))
                continue;
            /* 7: 1 .. 16 tokens, int8, one scale per row */
            if (kern == 7 && (act != 2 || W->n_groups != 1 || n > 16)) continue;
            /* 8: 1 .. 16 tokens, bf16, one scale per row */
            if (kern == 8 && (act != 1 || W->n_groups != 1 || n > 16)) continue;
            /* 5: the wgmma GEMM, one scale per row */
            if (kern == 5 && W->n_groups != 1) continue;
            tern_cuda_force_kernel(kern);
            float *outs[2] = {got, got2};
            bool call_ok = true;
            for (int rep = 0; rep < 2 && call_ok; rep++) {
                CK(cudaMemset(dy.ptr(), 0xFF, dy.bytes)); /* NaN poison */
                if (act == 0)
                    rc = tern_cuda_matmul_f32(dW, (const float *)dx.ptr(), n, (float *)dy.ptr(), 0);
                else if (act == 1)
                    rc = tern_cuda_matmul_bf16(dW, (const uint16_t *)dx.ptr(), n, (float *)dy.ptr(), 0);
                else
                    rc = tern_cuda_matmul_i8(dW, (const int8_t *)dx.ptr(), (const float *)dsx.ptr(), n,
                                             (float *)dy.ptr(), 0);
                cudaError_t e = cudaDeviceSynchronize();
                if (rc < 0 || e != cudaSuccess) {
                    report(false, "%s %lldx%lld group=%s n=%lld %s: call failed: %s / %s",
                           kname[kern], (long long)rows, (long long)cols, gname,
                           (long long)n, act_name(act), rc < 0 ? err_msg() : "ok",
                           cudaGetErrorString(e));
                    call_ok = false;
                    break;
                }
                CK(cudaMemcpy(outs[rep], dy.ptr(), dy.bytes, cudaMemcpyDeviceToHost));
            }
            tern_cuda_force_kernel(0);
            if (!call_ok) continue;
            int bad = 0;
            double err = rel_l2(got, ref, (size_t)(n * rows), &bad), err64 = 0, ref_err64 = 0;
            if (act == 0) {
                int b2;
                err64 = rel_l2(got, ref64, (size_t)(n * rows), &b2);
                ref_err64 = rel_l2(ref, ref64, (size_t)(n * rows), &b2);
                if (ref_err64 > g_worst_ref64) g_worst_ref64 = ref_err64;
                if (err64 > g_worst_gpu64) g_worst_gpu64 = err64;
            }
            double tol;
            if (act == 0) tol = TOL_F32_REF;
            else if (act == 1) tol = TOL_BF16;
            else tol = (kern == 2 || W->n_groups == 1) ? 0.0 : TOL_I8_SPLIT;
            int64_t mism = 0;
            if (tol == 0.0)
                for (int64_t i = 0; i < n * rows; i++) mism += memcmp(&got[i], &ref[i], 4) != 0;
            const bool det = memcmp(got, got2, (size_t)(n * rows) * 4) == 0;
            const bool gok = guards_ok(dx) && guards_ok(dy) && guards_ok(dsx);
            const bool ok = bad == 0 && err <= tol && err64 <= TOL_F32 && mism == 0 && det && gok;
            report(ok,
                   "%s %lldx%lld group=%s n=%lld %s: rel_l2 %.3g (tol %.1g) vs float64 %.3g "
                   "(cpu ref vs float64 %.3g) non-finite %d bit-mismatch %lld deterministic %d "
                   "guards %d",
                   kname[kern], (long long)rows, (long long)cols, gname,
                   (long long)n, act_name(act), err, tol, err64, ref_err64, bad, (long long)mism,
                   det, gok);
        }
        gfree(dx);
        gfree(dy);
        gfree(dsx);
    }
out:
    free(x);
    free(xb);
    free(xq);
    free(sx);
    free(ref);
    free(got);
    free(got2);
    free(ref64);
}

static int make_matrix(int64_t rows, int64_t cols, QuantGroup grp, TernaryMatrix *W) {
    int8_t *q = (int8_t *)malloc((size_t)(rows * cols));
    for (int64_t i = 0; i < rows * cols; i++) q[i] = (int8_t)((int)(rnd() % 3) - 1);
    int64_t ns = tern_n_scales(grp, rows, cols);
    float *s = (float *)malloc((size_t)ns * sizeof(float));
    for (int64_t i = 0; i < ns; i++) s[i] = 0.25f + frand();
    int rc = tern_from_codes(q, s, rows, cols, grp, DT_BF16, W);
    free(q);
    free(s);
    return rc;
}

/* A forced kernel `kern` under each development variant of `variants` on
 * the given shapes and token counts, int8 activations, one scale per row
 * (or per tensor: grp): results bit-identical to the reference, repeated
 * calls identical (split scratch left zero), guards intact. */
struct Shape2 {
    int64_t rows, cols;
};
static void forced_variants_g(const char *what, int kern, const Shape2 *shapes, int n_shapes,
                              const int64_t *ns, int n_ns, const int *variants, int n_var, QuantGroup grp) {
    for (int si = 0; si < n_shapes; si++) {
        const int64_t rows = shapes[si].rows, cols = shapes[si].cols;
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (make_matrix(rows, cols, grp, &W) < 0 || tern_cuda_upload(&W, &dW) < 0) {
            report(false, "%s %lldx%lld: %s", what, (long long)rows, (long long)cols, err_msg());
            continue;
        }
        for (int ni = 0; ni < n_ns; ni++) {
            const int64_t n = ns[ni];
            int8_t *xq = (int8_t *)malloc((size_t)(n * cols));
            float *sx = (float *)malloc((size_t)n * 4), *ref = (float *)malloc((size_t)(n * rows) * 4),
                  *got = (float *)malloc((size_t)(n * rows) * 4);
            for (int64_t i = 0; i < n * cols; i++) xq[i] = (int8_t)(int)(rnd() % 256 - 128);
            for (int64_t t = 0; t < n; t++) sx[t] = 0.5f + 3.0f * frand();
            int rc = par_tokens(n, [&](int64_t t0, int64_t t1) {
                return tern_matmul_i8_ref(&W, xq + t0 * cols, sx + t0, t1 - t0, ref + t0 * rows);
            });
            GBuf dx = gbuf((size_t)(n * cols), 1), dy = gbuf((size_t)(n * rows) * 4, 4),
                 dsx = gbuf((size_t)n * 4, 4);
            CK(cudaMemcpy(dx.ptr(), xq, dx.bytes, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dsx.ptr(), sx, dsx.bytes, cudaMemcpyHostToDevice));
            for (int vi = 0; vi < n_var; vi++) {
                tern_cuda_force_kernel(kern);
                const int oldv = tern_cuda_decode_variant(variants[vi]);
                int64_t mism = 0;
                bool call_ok = rc == 0;
                for (int rep = 0; rep < 3 && call_ok; rep++) {
                    CK(cudaMemset(dy.ptr(), 0xFF, dy.bytes));
                    call_ok = tern_cuda_matmul_i8(&dW, (const int8_t *)dx.ptr(), (const float *)dsx.ptr(),
                                                  n, (float *)dy.ptr(), 0) == 0 &&
                              cudaDeviceSynchronize() == cudaSuccess;
                    if (!call_ok) break;
                    CK(cudaMemcpy(got, dy.ptr(), dy.bytes, cudaMemcpyDeviceToHost));
                    for (int64_t i = 0; i < n * rows; i++) mism += memcmp(&got[i], &ref[i], 4) != 0;
                }
                tern_cuda_decode_variant(oldv);
                tern_cuda_force_kernel(0);
                const bool gok = guards_ok(dx) && guards_ok(dy) && guards_ok(dsx);
                report(call_ok && mism == 0 && gok,
                       "%s %lldx%lld n=%lld variant %d (3 calls): %s bit-mismatch %lld guards %d", what,
                       (long long)rows, (long long)cols, (long long)n, variants[vi],
                       call_ok ? "ok" : err_msg(), (long long)mism, gok);
            }
            gfree(dx);
            gfree(dy);
            gfree(dsx);
            free(xq);
            free(sx);
            free(ref);
            free(got);
        }
        tern_cuda_free(&dW);
        tern_free(&W);
    }
}

static void forced_variants(const char *what, int kern, const Shape2 *shapes, int n_shapes,
                            const int64_t *ns, int n_ns, const int *variants, int n_var) {
    forced_variants_g(what, kern, shapes, n_shapes, ns, n_ns, variants, n_var, QG_ROW);
}

/* The one-token GEMV on the binary tensor cores (tern_gemv_bmma.cu) with
 * configurations that the shapes of run_case do not reach: 1..4 blocks of
 * codes in flight, K splits for 1..9 CTAs per SM (several row groups, split
 * groups), and the bulk-copy version (K slices of 4..64 blocks, 2..8 stages,
 * several units per CTA, one or two consumer warps per tile; 200 x 1024:
 * slices of one block, so with two warps per tile the first has none), and
 * the bulk-copy version with one scale per tensor (no row scales in shared
 * memory). */
static void test_bmma_grid(void) {
    const Shape2 shapes[] = {{4100, 5000}, {1000, 36864}, {2051, 1024}, {200, 1024}};
    const int64_t ns[] = {1};
    const int variants[] = {0,     51100, 52900, 54100, 54400, 62131, 64521, 62440, 62282, 62550, 64530,
                            62941, 63131, 66521, 63440, 63282, 63550, 66420, 63941, 66520, 64520,
                            63530, 65520, 68520, 65131};
    forced_variants("gemv_bmma", 6, shapes, 4, ns, 1, variants, 25);
    const int tensor_variants[] = {64520, 63530, 66521, 63131};
    forced_variants_g("gemv_bmma tensor scale", 6, shapes, 4, ns, 1, tensor_variants, 4, QG_TENSOR);
}

/* The multi-token bulk-copy GEMV on the int8 tensor cores (forced 7,
 * tern_gemv_bmma.cu's gemv_i8_tbm_mt): 1 .. 16 tokens (one and two 8-token
 * tiles, partial ones), each variant shape of the one-token kernel (1, 2 or 4
 * consumer warps per tile, 2 or 4 tiles per unit, K slices of 4 .. 64
 * blocks, i.e. splits and none, 2 .. 8 stages, CTA caps), rows not a
 * multiple of 16, a partial last 256-column block (padded by the caller, or
 * not: the kernel's own zero fill); one scale per tensor too. */
static void test_mt_grid(void) {
    /* (4112 and 1040 columns: rows 16-byte aligned, so no padded copy — the kernel
     * zero-fills the last slice past them; 5000: the padded copy) */
    const Shape2 shapes[] = {{4100, 5000}, {1000, 36864}, {2051, 1024}, {200, 1024}, {300, 4096},
                             {1500, 4112}, {300, 1040}};
    const int64_t ns[] = {1, 2, 5, 8, 9, 13, 16};
    const int variants[] = {63520, 64520, 62520, 66520, 63540, 64530, 62131, 66521, 62282,
                            63941, 62840, 63330, 62550, 68520, 65520, 68131, 65441};
    forced_variants("gemv_tbm_mt", 7, shapes, 7, ns, 7, variants, 17);
    const int64_t ns_t[] = {3, 16};
    const int tensor_variants[] = {64520, 63530, 66521};
    forced_variants_g("gemv_tbm_mt tensor scale", 7, shapes, 7, ns_t, 2, tensor_variants, 3, QG_TENSOR);
}

/* W for a shape and its upload (false: reported) */
/* cfg is want, or want and the " rowsum" of a one-token K split through
 * tbm_row_add (test_tbm_rowsum checks where that is taken) */
static bool cfg_is(const char *cfg, const char *want) {
    const size_t n = strlen(want);
    return strncmp(cfg, want, n) == 0 && (cfg[n] == 0 || strcmp(cfg + n, " rowsum") == 0);
}

static bool upload_shape(const char *what, Shape2 sh, TernaryMatrix *W, TernCudaMatrix *dW,
                         QuantGroup grp = QG_ROW) {
    if (make_matrix(sh.rows, sh.cols, grp, W) == 0) {
        if (tern_cuda_upload(W, dW) == 0) return true;
        tern_free(W);
    }
    report(false, "%s %lldx%lld: %s", what, (long long)sh.rows, (long long)sh.cols, err_msg());
    return false;
}

/* The bulk-copy GEMV on the bf16 tensor cores (forced 8, tern_gemv_bmma.cu's
 * gemv_bf16_tbm) under variants of every unit shape (1, 2 or 4 consumer warps
 * per tile, 2 or 4 tiles per unit, K slices of 4 .. 64 blocks: splits and
 * none, 2 .. 8 stages, CTA caps) for 1 .. 16 tokens (one and two 8-token
 * tiles, partial ones), rows not a multiple of 16, a partial last block
 * (the kernel's own zero fill: 1040 / 4112 / 5000 columns; the padded copy
 * of x: 300 columns, and below an x not 16-byte aligned); one scale per row
 * and per tensor: within TOL_BF16 of tern_matmul_f32_ref fed the same bf16
 * values, the same bits on three calls, guards intact; and the dispatch's
 * default (config "gemv_tbm bf16 v=...") the same way.  Then what must not
 * take it: f32 activations (three bf16 planes), grouped scales, the mma
 * GEMV's own development variant 2 ("gemv_mma"); what must: any other
 * variant (6abcd its own, a wgmma knob 701 the default's); forced 8 with
 * grouped scales refused. */
static void test_bf_grid(void) {
    const Shape2 shapes[] = {{4100, 5000}, {1000, 36864}, {2051, 1024}, {200, 1024}, {300, 4096},
                             {1500, 4112}, {300, 1040}, {37, 300}};
    const int64_t ns[] = {1, 2, 5, 8, 9, 13, 16};
    const int variants[] = {0, 63520, 64520, 62520, 66520, 65520, 68520, 62131, 66521, 62282, 63941, 62840, 65441};
    const QuantGroup grps[] = {QG_ROW, QG_TENSOR};
    for (QuantGroup grp : grps)
        for (const Shape2 &sh : shapes) {
            TernaryMatrix W;
            TernCudaMatrix dW;
            if (!upload_shape("gemv_tbm_bf16", sh, &W, &dW, grp)) continue;
            const int64_t rows = sh.rows, cols = sh.cols;
            for (int64_t n : ns) {
                if (grp == QG_TENSOR && n != 1 && n != 9) continue;
                std::vector<uint16_t> xb((size_t)(n * cols));
                std::vector<float> x((size_t)(n * cols)), ref((size_t)(n * rows)), got((size_t)(n * rows)),
                    first((size_t)(n * rows));
                for (size_t i = 0; i < xb.size(); i++) {
                    xb[i] = f32_to_bf16(nrand());
                    x[i] = bf16_to_f32(xb[i]);
                }
                const int rc = par_tokens(n, [&](int64_t t0, int64_t t1) {
                    return tern_matmul_f32_ref(&W, x.data() + t0 * cols, t1 - t0, ref.data() + t0 * rows);
                });
                GBuf dx = gbuf(xb.size() * 2, 2), dy = gbuf(got.size() * 4, 4);
                CK(cudaMemcpy(dx.ptr(), xb.data(), dx.bytes, cudaMemcpyHostToDevice));
                for (int var : variants) {
                    const int oldf = tern_cuda_force_kernel(var ? 8 : 0), oldv = tern_cuda_decode_variant(var);
                    bool call_ok = rc == 0, same = true;
                    char cfg[96] = "";
                    for (int rep = 0; rep < 3 && call_ok; rep++) {
                        CK(cudaMemset(dy.ptr(), 0xFF, dy.bytes)); /* NaN poison */
                        call_ok = tern_cuda_matmul_bf16(&dW, (const uint16_t *)dx.ptr(), n, (float *)dy.ptr(), 0) == 0;
                        snprintf(cfg, sizeof cfg, "%s", tern_cuda_last_config());
                        call_ok = call_ok && cudaDeviceSynchronize() == cudaSuccess;
                        if (!call_ok) break;
                        CK(cudaMemcpy(rep ? got.data() : first.data(), dy.ptr(), dy.bytes, cudaMemcpyDeviceToHost));
                        if (rep) same = same && memcmp(got.data(), first.data(), got.size() * 4) == 0;
                    }
                    tern_cuda_decode_variant(oldv);
                    tern_cuda_force_kernel(oldf);
                    int bad = 0;
                    const double err = call_ok ? rel_l2(first.data(), ref.data(), ref.size(), &bad) : 1.0;
                    const bool cfg_ok = strncmp(cfg, "gemv_tbm bf16 v=", 16) == 0 &&
                                        (var == 0 || atoi(cfg + 16) == var);
                    const bool gok = guards_ok(dx) && guards_ok(dy);
                    report(call_ok && bad == 0 && err <= TOL_BF16 && same && cfg_ok && gok,
                           "gemv_tbm_bf16 %lldx%lld %s n=%lld variant %d (%s, 3 calls): %s rel_l2 %.3g (tol %.1g) "
                           "non-finite %d same bits %d guards %d",
                           (long long)rows, (long long)cols, quant_group_name(grp), (long long)n, var, cfg,
                           call_ok ? "ok" : err_msg(), err, TOL_BF16, bad, same, gok);
                }
                gfree(dx);
                gfree(dy);
            }
            tern_cuda_free(&dW);
            tern_free(&W);
        }
    { /* x one element past a 16-byte boundary: the padded copy, then the kernel */
        TernaryMatrix W;
        TernCudaMatrix dW;
        const Shape2 sh = {300, 1040};
        const int64_t n = 3;
        if (upload_shape("gemv_tbm_bf16 unaligned x", sh, &W, &dW)) {
            std::vector<uint16_t> xb((size_t)(n * sh.cols + 8));
            std::vector<float> x((size_t)(n * sh.cols)), ref((size_t)(n * sh.rows)), got((size_t)(n * sh.rows));
            for (size_t i = 0; i < x.size(); i++) {
                xb[i + 1] = f32_to_bf16(nrand());
                x[i] = bf16_to_f32(xb[i + 1]);
            }
            const int rc = tern_matmul_f32_ref(&W, x.data(), n, ref.data());
            GBuf dx = gbuf(xb.size() * 2, 2), dy = gbuf(got.size() * 4, 4);
            CK(cudaMemcpy(dx.ptr(), xb.data(), dx.bytes, cudaMemcpyHostToDevice));
            CK(cudaMemset(dy.ptr(), 0xFF, dy.bytes));
            const bool ok = rc == 0 &&
                            tern_cuda_matmul_bf16(&dW, (const uint16_t *)dx.ptr() + 1, n, (float *)dy.ptr(), 0) == 0;
            char cfg[96];
            snprintf(cfg, sizeof cfg, "%s", tern_cuda_last_config());
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(got.data(), dy.ptr(), dy.bytes, cudaMemcpyDeviceToHost));
            int bad = 0;
            const double err = ok ? rel_l2(got.data(), ref.data(), ref.size(), &bad) : 1.0;
            report(ok && bad == 0 && err <= TOL_BF16 && !strncmp(cfg, "gemv_tbm bf16", 13) && guards_ok(dx) &&
                       guards_ok(dy),
                   "gemv_tbm_bf16 300x1040 n=3 x not 16-byte aligned (%s): rel_l2 %.3g non-finite %d", cfg, err, bad);
            gfree(dx), gfree(dy);
            tern_cuda_free(&dW);
            tern_free(&W);
        }
    }
    { /* what keeps the mma GEMV */
        const Shape2 sh = {256, 512};
        TernaryMatrix Wr = {}, Wg = {};
        TernCudaMatrix dWr = {}, dWg = {}; /* (zero: freeing one never made is a no-op) */
        if (upload_shape("gemv_tbm_bf16 dispatch", sh, &Wr, &dWr) &&
            upload_shape("gemv_tbm_bf16 dispatch", sh, &Wg, &dWg, QG_32)) {
            GBuf dx = gbuf((size_t)sh.cols * 4, 4), dy = gbuf((size_t)sh.rows * 4, 4);
            CK(cudaMemset(dx.ptr(), 0, dx.bytes));
            /* (f32, bf16 group 32, bf16 under variants 2 / 63520 / 701 / none) */
            const struct {
                int f32, grouped, variant;
                const char *want;
            } cases[] = {{1, 0, 0, "gemv_mma"},
                         {0, 1, 0, "gemv_mma"},
                         {0, 0, 2, "gemv_mma"},
                         {0, 0, 63520, "gemv_tbm bf16 v=63520"},
                         {0, 0, 701, "gemv_tbm bf16 v=65521"},
                         {0, 0, 0, "gemv_tbm bf16 v=65521"}};
            for (const auto &c : cases) {
                const int oldv = tern_cuda_decode_variant(c.variant);
                const int rc = c.f32 ? tern_cuda_matmul_f32(&dWr, (const float *)dx.ptr(), 1, (float *)dy.ptr(), 0)
                                     : tern_cuda_matmul_bf16(c.grouped ? &dWg : &dWr, (const uint16_t *)dx.ptr(), 1,
                                                             (float *)dy.ptr(), 0);
                char cfg[96];
                snprintf(cfg, sizeof cfg, "%s", tern_cuda_last_config());
                tern_cuda_decode_variant(oldv);
                CK(cudaDeviceSynchronize());
                report(rc == 0 && cfg_is(cfg, c.want),
                       "gemv_tbm_bf16 dispatch 256x512 n=1 %s%s variant %d: '%s' (want '%s')%s%s",
                       c.f32 ? "f32" : "bf16", c.grouped ? " group 32" : "", c.variant, cfg, c.want,
                       rc ? ": " : "", rc ? err_msg() : "");
            }
            const int oldf = tern_cuda_force_kernel(8);
            const int rcg = tern_cuda_matmul_bf16(&dWg, (const uint16_t *)dx.ptr(), 1, (float *)dy.ptr(), 0);
            report(rcg < 0 && strstr(err_msg(), "bf16 bulk-copy") != NULL,
                   "gemv_tbm_bf16 forced with group 32 refused: %s", rcg < 0 ? err_msg() : "(taken)");
            tern_cuda_force_kernel(oldf);
            gfree(dx), gfree(dy);
        }
        tern_cuda_free(&dWr), tern_cuda_free(&dWg);
        tern_free(&Wr), tern_free(&Wg);
    }
}

static int sm_count(void) {
    int dev = 0, n_sm = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    return n_sm;
}

/* The kernel configuration the dispatch chose for n int8 tokens (constant
 * activations) into cfg; the call's return code. */
static int dispatch_config(const TernCudaMatrix *dW, Shape2 sh, int64_t n, char *cfg, size_t cap) {
    GBuf dx = gbuf((size_t)(n * sh.cols), 1), dsx = gbuf((size_t)n * 4, 4),
         dy = gbuf((size_t)(n * sh.rows) * 4, 4);
    CK(cudaMemset(dx.ptr(), 1, dx.bytes));
    CK(cudaMemset(dsx.ptr(), 0x3f, dsx.bytes)); /* 0x3f3f3f3f: about 0.747f */
    const int rc = tern_cuda_matmul_i8(dW, (const int8_t *)dx.ptr(), (const float *)dsx.ptr(), n,
                                       (float *)dy.ptr(), 0);
    CK(cudaDeviceSynchronize());
    snprintf(cfg, cap, "%s", tern_cuda_last_config());
    gfree(dx);
    gfree(dsx);
    gfree(dy);
    return rc;
}

/* The wgmma GEMM's small token tiles (8 and 16 tokens: the offset decoding
 * with sum x per split) and larger ones under forced K splits (7KK; 8KK:
 * the one-A-set kernel for 16 tokens too; 10KK / 11KK: the small tiles on
 * two warpgroup pairs that share K): full and partial tiles, splits
 * of one stage up to splits of several, partial 256-column blocks, extreme
 * activations (-128..127); int8 bit-identical, and on one shape bf16 and
 * f32 against the reference and the config naming the split asked for. */
static void test_wg_splits(void) {
    const Shape2 shapes[] = {{300, 5000}, {1000, 2304}, {129, 260}};
    const int64_t ns[] = {2, 8, 13, 16, 40};
    /* 10KK / 11KK: two warpgroup pairs on K (one / two A sets; 129 x 260 has 2 stages, so
     * with a split one pair of each CTA has none) */
    const int variants[] = {0, 701, 702, 703, 705, 708, 719, 800, 802, 805, 1000, 1002, 1003, 1100, 1101, 1105};
    forced_variants("gemm_wgmma", 5, shapes, 3, ns, 5, variants, 16);
    TernaryMatrix W;
    TernCudaMatrix dW;
    const Shape2 sh = {1000, 2304}; /* 9 int8 / 18 bf16 stages */
    if (!upload_shape("wgmma splits", sh, &W, &dW)) return;
    struct Cfg {
        int64_t n;
        int variant;
        const char *ks;
    } cfgs[] = {{16, 703, " ks=3 "}, {16, 708, " ks=8 "}, {13, 719, " ks=9 "}, {32, 702, " ks=2 "},
                {8, 705, " ks=5 "}, {16, 1003, "sets=1 kw=2 ks=3 "}, {16, 1102, "sets=2 kw=2 ks=2 "},
                {8, 1100, "sets=1 kw=2 ks="}, {16, 0, "sets=2 kw=2 ks=1 "}, {8, 0, " kw=1 "}};
    for (const Cfg &c : cfgs) { /* the split asked for, on the plain kernel (tiles of <= 32 tokens) */
        tern_cuda_force_kernel(5);
        const int oldv = tern_cuda_decode_variant(c.variant);
        char cfg[128];
        const int rc = dispatch_config(&dW, sh, c.n, cfg, sizeof cfg);
        tern_cuda_decode_variant(oldv);
        tern_cuda_force_kernel(0);
        report(rc == 0 && strstr(cfg, c.ks) && strstr(cfg, " pw=0 "), "wgmma split n=%lld variant %d: \"%s\"",
               (long long)c.n, c.variant, cfg);
    }
    /* bf16 and f32 (three bf16 planes) split 3, 5 and 8 ways, against the reference (run_case:
     * every kernel family, the variant reaching the wgmma GEMM) */
    const int fv[] = {703, 705, 708};
    for (int v : fv)
        for (int64_t n : {13, 32}) {
            const int oldv = tern_cuda_decode_variant(v);
            run_case(&W, &dW, n, 1, "row");
            if (n == 13) run_case(&W, &dW, n, 0, "row");
            tern_cuda_decode_variant(oldv);
        }
    tern_cuda_free(&dW);
    tern_free(&W);
    /* the rule's two warpgroup pairs on K (two A sets) for the 16-token tiles of a grid of one
     * wave: one tile per SM unsplit (4 stages, a partial last block and row tile) and n_sm / 4
     * tiles of 5000 columns split (tern_wg_kw_splits: 4 ways on 132 SMs); int8 bit-identical
     * (run_case) */
    const int n_sm = sm_count();
    const Shape2 kws[2] = {{128 * (int64_t)n_sm - 60, 1000}, {128 * (int64_t)(n_sm / 4) - 7, 5000}};
    for (int i = 0; i < 2; i++) {
        if (!upload_shape("wgmma pairs", kws[i], &W, &dW)) continue;
        char cfg[128];
        tern_cuda_force_kernel(5);
        const int rc = dispatch_config(&dW, kws[i], 16, cfg, sizeof cfg);
        tern_cuda_force_kernel(0);
        report(rc == 0 && strstr(cfg, "nt=16 sets=2 kw=2 ") && (i == 1) == !strstr(cfg, " ks=1 "),
               "wgmma pairs %lldx%lld n=16: the dispatch chose \"%s\"", (long long)kws[i].rows,
               (long long)kws[i].cols, cfg);
        run_case(&W, &dW, 16, 2, "row");
        run_case(&W, &dW, 11, 2, "row");
        tern_cuda_free(&dW);
        tern_free(&W);
    }
}

/* The wgmma GEMM's large token tiles (128 and 256 tokens, the kernels with
 * a producer warpgroup; chosen from 66 row tiles on — with up to 134 SMs —
 * so the shapes above never reach them): 67 row tiles, partial token
 * tiles, 9 / 18 stages (int8 / bf16: the slot ring wraps, with and without
 * forced K splits); the epilogue
 * staged for the copy engine (one split: the last row and token tiles
 * partial, clipped by the store) and direct (variant 900, and the splits);
 * int8 bit-identical, f32 and bf16 against the reference (run_case, every
 * kernel family). */
static void test_wg_big_tiles(void) {
    const Shape2 shapes[] = {{8500, 2056}};
    const int64_t ns[] = {100, 129, 300};
    const int variants[] = {0, 702, 703, 900}; /* 900: the epilogue's direct stores */
    forced_variants("gemm_wgmma big tiles", 5, shapes, 1, ns, 3, variants, 4);
    TernaryMatrix W;
    TernCudaMatrix dW;
    if (!upload_shape("big tiles", shapes[0], &W, &dW)) return;
    { /* the dispatch took the tiles meant (67 row tiles >= 66 with <= 134 SMs) */
        const int n_sm = sm_count();
        const int64_t nn[2] = {100, 300};
        const char *want[2] = {"wgmma nt=128 ", "wgmma nt=256 "};
        for (int i = 0; i < 2; i++) {
            char cfg[128];
            const int rc = dispatch_config(&dW, shapes[0], nn[i], cfg, sizeof cfg);
            if (n_sm <= 134) /* ... the staged epilogue (one K split, 8500 rows), the producer */
                report(rc == 0 && !strncmp(cfg, want[i], strlen(want[i])) && strstr(cfg, " ks=1 ") &&
                           strstr(cfg, "tma_y=1") && strstr(cfg, "pw=1"),
                       "big tiles n=%lld on %d SMs: the dispatch chose \"%s\"", (long long)nn[i],
                       n_sm, cfg);
            else
                printf("  (big tiles n=%lld on %d SMs: \"%s\", not checked)\n", (long long)nn[i], n_sm,
                       cfg);
        }
    }
    run_case(&W, &dW, 100, 1, "row"); /* 128-token tiles */
    run_case(&W, &dW, 300, 1, "row"); /* 256-token tiles, the second one partial */
    run_case(&W, &dW, 129, 0, "row"); /* f32: three bf16 planes */
    for (int v : {702, 900}) {
        const int oldv = tern_cuda_decode_variant(v);
        run_case(&W, &dW, 300, 1, "row");
        tern_cuda_decode_variant(oldv);
    }
    tern_cuda_free(&dW);
    tern_free(&W);
}

/* The default one-token dispatch to the bulk-copy GEMV: >= 18M weights in
 * rows of <= 6144 columns (variant 64520; from 40M weights 63520; M = 2^20:
 * 16400 x 4100 is 64.1M, 12300 x 4100 48.1M, 10240 x 4100 40.04M, 10000 x
 * 4100 39.1M; 4700 x 4100 18.4M, 4400 x 4100 17.2M), rows of 8192 .. 65536
 * columns in >= 4096 rows (65820, 4100 x 12300 a K split; from 128M weights in
 * rows of >= 32768 columns 63520: 4100 x 32800 is 128.3M, 4100 x 32500 127.1M,
 * 16400 x 8200 134.5M in shorter rows stays 65820), bit-identical to the
 * reference; the config names the variant.
 * Not taken: 4095 rows, 6160 columns, a forced kernel, a decode variant,
 * TERNLAB_CUDA_GEMV1. */
static void test_gemv_default(void) {
    const Shape2 shapes[] = {{8200, 4100},  {4100, 12300}, {4100, 9000}, {16400, 4100},
                             {4700, 4100}, {4100, 32800}, {12300, 4100}};
    const int64_t ns[] = {1};
    const int variants[] = {0};
    forced_variants("gemv default", 0, shapes, 7, ns, 1, variants, 1);
    struct {
        Shape2 sh;
        int force, variant;
        const char *env, *want;
    } cases[] = {
        {{8200, 4100}, 0, 0, NULL, "gemv_tbm v=64520"},  {{4100, 12300}, 0, 0, NULL, "gemv_tbm v=65820"},
        {{4100, 9000}, 0, 0, NULL, "gemv_tbm v=65820"},  {{4095, 12300}, 0, 0, NULL, "gemv_bmma"},
        {{8200, 6160}, 0, 0, NULL, "gemv_rows"},         {{8200, 4100}, 3, 0, NULL, "gemv_rows"},
        {{4100, 12300}, 0, 51400, NULL, "gemv_bmma"},    {{8200, 4100}, 0, 0, "bmma", "gemv_bmma"},
        {{8200, 4100}, 6, 64521, NULL, "gemv_tbm v=64521"}, {{16400, 4100}, 0, 0, NULL, "gemv_tbm v=63520"},
        {{10240, 4100}, 0, 0, NULL, "gemv_tbm v=63520"}, {{4700, 4100}, 0, 0, NULL, "gemv_tbm v=64520"},
        {{4400, 4100}, 0, 0, NULL, "gemv_warp"},         {{4100, 32800}, 0, 0, NULL, "gemv_tbm v=63520"},
        {{4100, 32500}, 0, 0, NULL, "gemv_tbm v=65820"}, {{12300, 4100}, 0, 0, NULL, "gemv_tbm v=63520"},
        {{4100, 12200}, 0, 0, NULL, "gemv_tbm v=65820"}, {{10000, 4100}, 0, 0, NULL, "gemv_tbm v=64520"},
        {{16400, 8200}, 0, 0, NULL, "gemv_tbm v=65820"},
    };
    for (const auto &c : cases) {
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (!upload_shape("gemv default", c.sh, &W, &dW)) continue;
        const int oldf = tern_cuda_force_kernel(c.force), oldv = tern_cuda_decode_variant(c.variant);
        if (c.env) setenv("TERNLAB_CUDA_GEMV1", c.env, 1);
        char cfg[128];
        const int rc = dispatch_config(&dW, c.sh, 1, cfg, sizeof cfg);
        if (c.env) unsetenv("TERNLAB_CUDA_GEMV1");
        tern_cuda_force_kernel(oldf);
        tern_cuda_decode_variant(oldv);
        report(rc == 0 && cfg_is(cfg, c.want),
               "gemv default %lldx%lld n=1 force %d variant %d GEMV1=%s: config '%s' (want %s)%s%s",
               (long long)c.sh.rows, (long long)c.sh.cols, c.force, c.variant, c.env ? c.env : "-", cfg, c.want,
               rc ? ": " : "", rc ? err_msg() : "");
        tern_cuda_free(&dW);
        tern_free(&W);
    }

    /* tern_cuda_tbm_override (TERNLAB_CUDA_TBM): a variant by shape, in place of the rule
     * (8200 x 4100: 64520 by rule; 4400 x 4100: one warp per row by rule), only for that shape;
     * a malformed list is an error and leaves the one before; NULL clears it */
    struct {
        const char *spec;
        int rc;
        Shape2 sh;
        const char *want;
    } ov[] = {
        {"8200x4100:63520", 0, {8200, 4100}, "gemv_tbm v=63520"},
        {"8200x4100:63520", 0, {4700, 4100}, "gemv_tbm v=64520"},
        {"4700x4100:66520,4400x4100:65520", 0, {4400, 4100}, "gemv_tbm v=65520"},
        {"4400x4100:65520,", 0, {4400, 4100}, "gemv_tbm v=65520"},
        {"4400x4100:61520", -1, {4400, 4100}, "gemv_tbm v=65520"}, /* 1 row tile: no such variant */
        {"4400x4100:65510", -1, {4400, 4100}, "gemv_tbm v=65520"}, /* 1 stage */
        {"4400x4100", -1, {4400, 4100}, "gemv_tbm v=65520"},
        {"4400x4100:66520;", -1, {4400, 4100}, "gemv_tbm v=65520"},
        {" 4400x4100:66520", -1, {4400, 4100}, "gemv_tbm v=65520"},
        {"4400x4100:4295032816", -1, {4400, 4100}, "gemv_tbm v=65520"}, /* (65520 mod 2^32) */
        {"4400x4100:66520,4400x4100:63520", 0, {4400, 4100}, "gemv_tbm v=66520"}, /* the first wins */
        {NULL, 0, {4400, 4100}, "gemv_warp"},
        {"8200x4100:63520", 0, {8200, 4100}, "gemv_tbm v=63520"},
        {"", 0, {8200, 4100}, "gemv_tbm v=64520"},
    };
    for (const auto &c : ov) {
        const int rc = tern_cuda_tbm_override(c.spec);
        const bool msg_ok = rc == 0 || strstr(err_msg(), "expected ROWSxCOLS:V") != NULL;
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (!upload_shape("gemv override", c.sh, &W, &dW)) continue;
        char cfg[128];
        const int rc2 = dispatch_config(&dW, c.sh, 1, cfg, sizeof cfg);
        report(rc == c.rc && msg_ok && rc2 == 0 && cfg_is(cfg, c.want),
               "gemv override '%s' (rc %d, want %d%s): %lldx%lld config '%s' (want %s)%s%s", c.spec ? c.spec : "NULL",
               rc, c.rc, msg_ok ? "" : ", no usage message", (long long)c.sh.rows, (long long)c.sh.cols, cfg, c.want,
               rc2 ? ": " : "", rc2 ? err_msg() : "");
        tern_cuda_free(&dW);
        tern_free(&W);
    }
    tern_cuda_tbm_override(NULL);
}

/* tern_cuda_tbm_reserve: the one-token int8 bulk-copy GEMV sized for fewer
 * SMs.  The same bits as the reference under reserves 0, 1, 3 and one past
 * the SM count (clamped to SMs - 1) with the dispatch's variants 64520 (8200
 * x 4100) and 65820 (4100 x 12300, a K split), and 63521 (at most one CTA per
 * SM) by tern_cuda_tbm_override for 12300 x 4100; the config names the
 * reserve and the grid where it is > 0 and adds nothing at 0
 * (test_gemv_default's exact configs); 63521 takes
 * at most SMs - R CTAs (or one a K slice); the unsplit shapes take no more
 * CTAs at a larger reserve, and 64520 strictly fewer at 3 than at 1; the setter
 * clamps a negative reserve to 0. */
static void test_tbm_reserve(void) {
    const Shape2 shapes[] = {{8200, 4100}, {12300, 4100}, {4100, 12300}};
    const int64_t ns[] = {1};
    const int variants[] = {0};
    const int sms = sm_count();
    const int res[] = {0, 1, 3, sms + 1};
    int64_t prev[3] = {-1, -1, -1}; /* CTAs at the last reserve > 0 */
    if (tern_cuda_tbm_override("12300x4100:63521") != 0) {
        report(false, "gemv reserve: tern_cuda_tbm_override failed: %s", err_msg());
        return;
    }
    for (int ri = 0; ri < 4; ri++) {
        const int old = tern_cuda_tbm_reserve(res[ri]);
        char what[64];
        snprintf(what, sizeof what, "gemv reserve %d", res[ri]);
        forced_variants(what, 0, shapes, 3, ns, 1, variants, 1);
        const int r = res[ri] < sms - 1 ? res[ri] : sms - 1;
        for (int si = 0; si < 3; si++) {
            TernaryMatrix W;
            TernCudaMatrix dW;
            if (!upload_shape(what, shapes[si], &W, &dW)) continue;
            char cfg[128];
            const int rc = dispatch_config(&dW, shapes[si], 1, cfg, sizeof cfg);
            int got_r = -1, gx = 0, gs = 0;
            const char *p = strstr(cfg, " res=");
            const bool parsed = p && sscanf(p, " res=%d grid=%dx%d", &got_r, &gx, &gs) == 3;
            const int64_t ctas = (int64_t)gx * gs;
            bool ok = rc == 0 && strstr(cfg, "gemv_tbm v=") == cfg;
            if (r == 0) {
                ok = ok && p == NULL;
            } else {
                ok = ok && parsed && got_r == r && gx >= 1 && gs >= 1;
                if (si == 1) ok = ok && ctas <= (sms - r > gs ? sms - r : gs); /* (>= 1 CTA a slice) */
                /* (not the split shape: its split may change with the SMs — 4100 x 12300 on 65820
                 * took 2 slices x 65 CTAs at reserve 1 and 3 x 86 at reserve 3, both one wave) */
                if (prev[si] >= 0 && si < 2)
                    ok = ok && (si == 0 && res[ri] == 3 ? ctas < prev[si] : ctas <= prev[si]);
                prev[si] = ctas;
            }
            report(ok, "%s %lldx%lld: config '%s'%s%s", what, (long long)shapes[si].rows,
                   (long long)shapes[si].cols, cfg, rc ? ": " : "", rc ? err_msg() : "");
            tern_cuda_free(&dW);
            tern_free(&W);
        }
        tern_cuda_tbm_reserve(old);
    }
    tern_cuda_tbm_override(NULL);
    const int old = tern_cuda_tbm_reserve(-5);
    report(tern_cuda_tbm_reserve_get() == 0, "tern_cuda_tbm_reserve(-5) reads back %d (want 0)",
           tern_cuda_tbm_reserve_get());
    tern_cuda_tbm_reserve(old);
}

/* The one-token K split through tbm_row_add (config " rowsum": one 64-bit
 * atomic a row and slice, the last slice writes y and a zero word): taken by
 * the split variants 63520 / 63530 where their kernel fits as many CTAs an SM
 * as the counter kernel (4608 x 36864 and 4100 x 20000: two CTAs, shared
 * memory bound) and by the dispatch there (63520; 65820 on 4100 x 20000);
 * bit-identical to
 * tern_matmul_i8_ref on 3 calls each, the shapes one after another (a word
 * left nonzero would fail the next call's count: no y, the NaN poison);
 * unsplit (36864 x 4608 under 63520) without it. */
static void test_tbm_rowsum(void) {
    const Shape2 shapes[] = {{4608, 36864}, {4100, 20000}, {1000, 36864}};
    const int64_t ns[] = {1};
    const int variants[] = {63520, 63530}, dispatch[] = {0};
    forced_variants("gemv rowsum", 6, shapes, 3, ns, 1, variants, 2);
    forced_variants("gemv rowsum dispatch", 0, shapes, 3, ns, 1, dispatch, 1);
    const Shape2 taken[] = {{4608, 36864}, {4100, 20000}, {36864, 4608}};
    for (int si = 0; si < 3; si++) {
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (!upload_shape("gemv rowsum", taken[si], &W, &dW)) continue;
        for (int var : {63520, 0}) {
            const int oldf = tern_cuda_force_kernel(var ? 6 : 0), oldv = tern_cuda_decode_variant(var);
            char cfg[128];
            const int rc = dispatch_config(&dW, taken[si], 1, cfg, sizeof cfg);
            tern_cuda_decode_variant(oldv);
            tern_cuda_force_kernel(oldf);
            const bool want = si < 2, has = strstr(cfg, " rowsum") != NULL;
            report(rc == 0 && strncmp(cfg, "gemv_tbm v=", 11) == 0 && has == want,
                   "gemv rowsum %lldx%lld variant %d: config '%s' (rowsum %s)%s%s", (long long)taken[si].rows,
                   (long long)taken[si].cols, var, cfg, want ? "expected" : "not expected", rc ? ": " : "",
                   rc ? err_msg() : "");
        }
        tern_cuda_free(&dW);
        tern_free(&W);
    }
}

/* The default dispatch of 2 .. 16 int8 tokens to the multi-token bulk-copy
 * GEMV (tern_cuda.cu mt_rule: 2^24 .. 2^27 weights for <= 8 tokens, to 24M
 * for <= 16 — but not where the wgmma GEMM's KW kernel takes the tiles:
 * 8 tokens in tern_wg_kw8's range, 16 tokens above 17.5M weights in one
 * wave of row tiles; variant 65540 to 24M weights, 68520 in rows of <= 6144
 * columns, else 65420), bit-identical to the reference at those n; not
 * taken: 4000 x 4100 (16.4M < 2^24), 33000 x 4100 (135.3M > 2^27), 16
 * tokens over 24M weights, a forced kernel, a decode variant. */
static void test_mt_default(void) {
    /* (4100 x 4608: 18 blocks, 16 tokens — x and 4 stages fit an SM only with a K split) */
    const Shape2 shapes[] = {{4100, 4100}, {16400, 4100}, {4100, 12300}, {4100, 4608}};
    const int64_t ns[] = {2, 8, 16};
    const int variants[] = {0};
    forced_variants("gemv mt default", 0, shapes, 4, ns, 3, variants, 1);
    /* (16 tokens on 4100 x 4608 are the wgmma GEMM's by default now: the K split forced 7) */
    const int64_t n16[] = {16};
    forced_variants("gemv mt forced", 7, shapes + 3, 1, n16, 1, variants, 1);
    /* 3 x 2^24 .. 2^27 weights in one wave of row tiles: the 8-token tiles of the KW kernel
     * (16400 x 4100: 67.2M weights, 129 row tiles; 4100 x 12300: 50.4M, 33) */
    const int n_sm = sm_count();
    const char *big = n_sm >= 129 ? "wgmma nt=8 sets=1 kw=2 " : "gemv_tbm mt v=68520";
    const char *wide = n_sm >= 33 ? "wgmma nt=8 sets=1 kw=2 " : "gemv_tbm mt v=65420";
    /* 16 tokens above 17.5M weights: the KW kernel where the row tiles are one wave
     * (4100 x 4608: 33 row tiles; 18432 x 1024: 144) */
    const char *mid16 = n_sm >= 33 ? "wgmma nt=16 sets=2 kw=2 " : "gemv_tbm mt v=65540";
    const char *tall16 = n_sm >= 144 ? "wgmma nt=16 sets=2 kw=2 " : "gemv_tbm mt v=65540";
    struct {
        Shape2 sh;
        int64_t n;
        int force, variant;
        const char *want; /* a prefix of the config */
    } cases[] = {
        {{4100, 4100}, 8, 0, 0, "gemv_tbm mt v=65540"},   {{4100, 4100}, 16, 0, 0, "gemv_tbm mt v=65540"},
        {{4100, 4100}, 2, 0, 0, "gemv_tbm mt v=65540"},   {{16400, 4100}, 5, 0, 0, big},
        {{16400, 4100}, 8, 0, 0, big},                    {{16400, 4100}, 16, 0, 0, "wgmma "},
        {{4100, 12300}, 8, 0, 0, wide},                   {{4100, 12300}, 9, 0, 0, "wgmma "},
        {{8200, 4100}, 8, 0, 0, "gemv_tbm mt v=68520"},   {{4100, 8200}, 8, 0, 0, "gemv_tbm mt v=65420"},
        {{33000, 4100}, 8, 0, 0, "wgmma "},               {{4000, 4100}, 8, 0, 0, "wgmma "},
        {{16400, 4100}, 8, 5, 0, "wgmma "},               {{16400, 4100}, 8, 0, 702, "wgmma "},
        {{16400, 4100}, 8, 7, 63520, "gemv_tbm mt v=63520"}, {{4100, 4100}, 1, 0, 0, "gemv_warp"},
        {{4100, 4608}, 8, 0, 0, "gemv_tbm mt v=65540"},   {{4100, 4608}, 16, 0, 0, mid16},
        {{18432, 1024}, 16, 0, 0, tall16}, /* 18.9M weights in 144 row tiles */
    };
    for (const auto &c : cases) {
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (!upload_shape("gemv mt default", c.sh, &W, &dW)) continue;
        const int oldf = tern_cuda_force_kernel(c.force), oldv = tern_cuda_decode_variant(c.variant);
        char cfg[128];
        const int rc = dispatch_config(&dW, c.sh, c.n, cfg, sizeof cfg);
        tern_cuda_force_kernel(oldf);
        tern_cuda_decode_variant(oldv);
        report(rc == 0 && strncmp(cfg, c.want, strlen(c.want)) == 0,
               "gemv mt default %lldx%lld n=%lld force %d variant %d: config '%s' (want %s...)%s%s",
               (long long)c.sh.rows, (long long)c.sh.cols, (long long)c.n, c.force, c.variant, cfg, c.want,
               rc ? ": " : "", rc ? err_msg() : "");
        tern_cuda_free(&dW);
        tern_free(&W);
    }
}

/* h = act(y_gate) * y_up of a gate|up output y, and max|h| raised (the GLU
 * the fused GEMV must reproduce, through the same tern_glu1; that formula is
 * checked against the host below) */
__global__ void glu_ref_kernel(const float *y, int64_t half, int act, float *h, unsigned *hmax) {
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < half; j += (int64_t)gridDim.x * blockDim.x) {
        h[j] = tern_glu1(act, y[j], y[half + j]);
        atomicMax(hmax, __float_as_uint(fabsf(h[j])));
    }
}

/* The config a fused form records under decode variant v (0: the
 * dispatch's own): "gemv_tbm <form> v=V" or "gemv_bmma <form>". */
static bool fused_config_ok(const char *cfg, const char *form, int v) {
    char want[48];
    if (v >= 60000) snprintf(want, sizeof want, "gemv_tbm %s v=%d", form, v);
    else if (v >= 50000) snprintf(want, sizeof want, "gemv_bmma %s", form);
    else return strstr(cfg, form) != NULL && !strncmp(cfg, "gemv_", 5);
    return cfg_is(cfg, want);
}

/* An f32-input GEMV case (tern_cuda_matmul_i8_f32x) for W: x = amp N(0, 1)
 * with x[pos] = -big (amp and big 0: all zeros) into dx, max|x| as float bits
 * into dm, and the reference outputs (act_quant_int8_ref, then
 * tern_matmul_i8_ref) into ref (W.rows of them). */
static void f32x_input(const TernaryMatrix &W, float amp, int64_t pos, float big, std::vector<float> &ref,
                       GBuf &dx, GBuf &dm) {
    const int64_t K = W.cols;
    std::vector<float> x((size_t)K);
    for (auto &v : x) v = amp ? amp * nrand() : 0.0f;
    if (big) x[(size_t)pos] = -big;
    std::vector<int8_t> xq((size_t)K);
    float sx = 0.0f, mx = 0.0f;
    for (float v : x) mx = std::max(mx, fabsf(v));
    act_quant_int8_ref(x.data(), 1, K, xq.data(), &sx);
    tern_matmul_i8_ref(&W, xq.data(), &sx, 1, ref.data());
    unsigned mb;
    memcpy(&mb, &mx, 4);
    CK(cudaMemcpy(dx.ptr(), x.data(), (size_t)K * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dm.ptr(), &mb, 4, cudaMemcpyHostToDevice));
}

/* The decode step's fused one-token MLP forms against the separate kernels:
 * tern_cuda_glu_i8 (the gate|up GEMV with the GLU in its epilogue: h and
 * max|h| bit-identical to tern_cuda_matmul_i8 followed by the GLU) for both
 * activations, units of 2 / 4 tiles, one / two warps per tile, one K slice
 * and several (4608 x 36864-like rows: the split's finishing CTA forms h),
 * partial units; tern_cuda_matmul_i8_f32x (f32 activations coded in the
 * kernel) bit-identical to act_quant_int8_ref + tern_matmul_i8_ref on the
 * register-fed and the bulk-copy kernels; shapes either refuses. */
static void test_fused_mlp(void) {
    const Shape2 glu_shapes[] = {{2048, 4096}, {2016, 36864}, {64, 256}, {1440, 1040}, {32, 4096}};
    const int glu_vars[] = {0, 64520, 63520, 66520, 62520, 63530, 66521, 62330, 65520, 68520};
    for (const Shape2 &sh : glu_shapes) {
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (!upload_shape("fused glu", sh, &W, &dW)) continue;
        const int64_t half = sh.rows / 2, K = sh.cols;
        std::vector<int8_t> xq((size_t)K);
        for (auto &v : xq) v = (int8_t)((int)(rnd() % 256) - 128);
        const float sx = 0.37f;
        GBuf dx = gbuf((size_t)K, 1), dsx = gbuf(4, 4), dy = gbuf((size_t)sh.rows * 4, 4),
             dh = gbuf((size_t)half * 4, 4), dhr = gbuf((size_t)half * 4, 4), dm = gbuf(8, 4);
        CK(cudaMemcpy(dx.ptr(), xq.data(), (size_t)K, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dsx.ptr(), &sx, 4, cudaMemcpyHostToDevice));
        std::vector<float> yref((size_t)sh.rows), y((size_t)sh.rows);
        tern_matmul_i8_ref(&W, xq.data(), &sx, 1, yref.data());
        for (int act = 0; act < 2; act++) {
            /* the separate kernels: the GEMV (against the reference), then the GLU */
            CK(cudaMemset(dm.ptr(), 0, 8));
            bool ok = tern_cuda_matmul_i8(&dW, (const int8_t *)dx.ptr(), (const float *)dsx.ptr(), 1,
                                          (float *)dy.ptr(), 0) == 0;
            glu_ref_kernel<<<64, 256>>>((const float *)dy.ptr(), half, act, (float *)dhr.ptr(),
                                        (unsigned *)dm.ptr() + 1);
            CK(cudaDeviceSynchronize());
            std::vector<float> hr((size_t)half), hg((size_t)half);
            unsigned m[2];
            CK(cudaMemcpy(hr.data(), dhr.ptr(), (size_t)half * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(y.data(), dy.ptr(), (size_t)sh.rows * 4, cudaMemcpyDeviceToHost));
            /* the GLU formula on the host: ReLU^2 exact, SiLU within the device expf's error */
            int bad_y = 0, bad_h = 0;
            for (int64_t r = 0; r < sh.rows; r++) bad_y += memcmp(&y[(size_t)r], &yref[(size_t)r], 4) != 0;
            for (int64_t j = 0; j < half; j++) {
                const float g = yref[(size_t)j], u = yref[(size_t)(half + j)];
                const float rl = g > 0.0f ? g : 0.0f;
                const float want = act == 1 ? (rl * rl) * u : g / (1.0f + expf(-g)) * u;
                const float got = hr[(size_t)j];
                bad_h += act == 1 ? memcmp(&got, &want, 4) != 0
                                  : fabsf(got - want) > 1e-6f * fabsf(want) + 1e-30f;
            }
            report(ok && bad_y == 0 && bad_h == 0, "fused glu %lldx%lld act %d: separate GEMV %d of %lld outputs "
                   "differ from the reference, GLU %d of %lld from the host formula",
                   (long long)sh.rows, (long long)K, act, bad_y, (long long)sh.rows, bad_h, (long long)half);
            for (int v : glu_vars) {
                const int oldv = tern_cuda_decode_variant(v);
                CK(cudaMemset(dm.ptr(), 0, 4));
                CK(cudaMemset(dh.ptr(), 0xff, (size_t)half * 4));
                const int rc = tern_cuda_glu_i8(&dW, (const int8_t *)dx.ptr(), (const float *)dsx.ptr(), act,
                                                (float *)dh.ptr(), (unsigned *)dm.ptr(), 0);
                const bool cfg_ok = fused_config_ok(tern_cuda_last_config(), "glu", v);
                tern_cuda_decode_variant(oldv);
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(hg.data(), dh.ptr(), (size_t)half * 4, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(m, dm.ptr(), 8, cudaMemcpyDeviceToHost));
                int bad = 0;
                float hmx = 0.0f;
                for (int64_t j = 0; j < half; j++) {
                    bad += memcmp(&hg[(size_t)j], &hr[(size_t)j], 4) != 0;
                    hmx = std::max(hmx, fabsf(hg[(size_t)j]));
                }
                unsigned hb;
                memcpy(&hb, &hmx, 4);
                report(ok && rc == 0 && cfg_ok && bad == 0 && m[0] == m[1] && m[0] == hb && m[1] != 0,
                       "fused glu %lldx%lld act %d variant %d (%s): %d of %lld h differ, max bits %08x vs %08x "
                       "(host %08x)%s%s",
                       (long long)sh.rows, (long long)K, act, v, tern_cuda_last_config(), bad, (long long)half, m[0],
                       m[1], hb, rc ? ": " : "", rc ? err_msg() : "");
            }
        }
        report(guards_ok(dh) && guards_ok(dy) && guards_ok(dm), "fused glu %lldx%lld: sentinels intact",
               (long long)sh.rows, (long long)K);
        gfree(dx), gfree(dsx), gfree(dy), gfree(dh), gfree(dhr), gfree(dm);
        tern_cuda_free(&dW);
        tern_free(&W);
    }
    { /* rows not of whole gate / up tiles, groups of scales: refused */
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (upload_shape("fused glu refusal", {48, 256}, &W, &dW)) {
            GBuf dx = gbuf(256, 1), dsx = gbuf(4, 4), dh = gbuf(24 * 4, 4), dm = gbuf(4, 4);
            const int rc = tern_cuda_glu_i8(&dW, (const int8_t *)dx.ptr(), (const float *)dsx.ptr(), 0,
                                            (float *)dh.ptr(), (unsigned *)dm.ptr(), 0);
            report(!tern_cuda_glu_i8_ok(&dW) && rc < 0 && strstr(err_msg(), "not a gate|up matrix"),
                   "fused glu 48 x 256 (24 + 24 rows) refused for its shape: %s", rc < 0 ? err_msg() : "(taken)");
            gfree(dx), gfree(dsx), gfree(dh), gfree(dm);
            tern_cuda_free(&dW);
            tern_free(&W);
        }
        if (upload_shape("fused refusal, groups of 128", {2048, 4096}, &W, &dW, QG_128)) {
            report(!tern_cuda_glu_i8_ok(&dW) && !tern_cuda_matmul_i8_f32x_ok(&dW),
                   "fused forms: 2048 x 4096 in groups of 128 columns refused");
            tern_cuda_free(&dW);
            tern_free(&W);
        }
    }

    const Shape2 f32_shapes[] = {{4096, 11008}, {4100, 12304}, {300, 8192}, {8200, 4096}, {4100, 32768}};
    /* the variant each takes by default (tern_cuda.cu f32x_kernel: rows of >= 8192 columns 65520
     * in >= 4096 rows, else the register-fed kernel, 50000; shorter ones the int8 dispatch's
     * bulk-copy variant) */
    const int f32_default[] = {65520, 65520, 50000, 64520, 65520};
    const int f32_vars[] = {0, 51400, 52200, 63530, 64520, 66520, 63520, 65520, 68520};
    for (size_t si = 0; si < sizeof f32_shapes / sizeof f32_shapes[0]; si++) {
        const Shape2 &sh = f32_shapes[si];
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (!upload_shape("f32x", sh, &W, &dW)) continue;
        const int64_t K = sh.cols, N = sh.rows;
        std::vector<float> ref((size_t)N), got((size_t)N);
        GBuf dx = gbuf((size_t)K * 4, 4), dm = gbuf(4, 4), dy = gbuf((size_t)N * 4, 4);
        f32x_input(W, 3.0f, K / 3, 40.0f, ref, dx, dm); /* the largest |x| negative */
        const bool ok = tern_cuda_matmul_i8_f32x_ok(&dW) != 0;
        report(ok, "f32x %lldx%lld: taken", (long long)N, (long long)K);
        for (int v : f32_vars) {
            if (!ok) break;
            const int oldv = tern_cuda_decode_variant(v);
            CK(cudaMemset(dy.ptr(), 0xff, (size_t)N * 4));
            const int rc = tern_cuda_matmul_i8_f32x(&dW, (const float *)dx.ptr(), (const unsigned *)dm.ptr(),
                                                    (float *)dy.ptr(), 0);
            const bool cfg_ok = fused_config_ok(tern_cuda_last_config(), "f32x", v ? v : f32_default[si]);
            tern_cuda_decode_variant(oldv);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(got.data(), dy.ptr(), (size_t)N * 4, cudaMemcpyDeviceToHost));
            int bad = 0;
            for (int64_t r = 0; r < N; r++) bad += memcmp(&got[(size_t)r], &ref[(size_t)r], 4) != 0;
            report(rc == 0 && cfg_ok && bad == 0, "f32x %lldx%lld variant %d (%s): %d of %lld outputs differ from the reference%s%s",
                   (long long)N, (long long)K, v, tern_cuda_last_config(), bad, (long long)N, rc ? ": " : "",
                   rc ? err_msg() : "");
        }
        report(guards_ok(dy) && guards_ok(dx), "f32x %lldx%lld: sentinels intact", (long long)N, (long long)K);
        gfree(dx), gfree(dm), gfree(dy);
        tern_cuda_free(&dW);
        tern_free(&W);
    }
    /* the one-warp GEMV's shapes take its f32 form (the codes formed in each CTA's shared memory):
     * bit-identical to the reference, the rows of the last CTA partial, columns not whole 256-column
     * blocks, more rows than warps in the grid (the second row of a warp loaded after the wait),
     * one scale for the whole tensor, the largest |x| negative and zero */
    const struct {
        Shape2 sh;
        QuantGroup grp;
    } warp_cases[] = {{{1000, 4096}, QG_ROW}, {{300, 5008}, QG_ROW},   {{4096, 4096}, QG_ROW},
                      {{37, 1040}, QG_ROW},   {{9, 16}, QG_ROW},      {{64, 8176}, QG_ROW},
                      {{8192, 1024}, QG_ROW}, {{4300, 2064}, QG_ROW}, {{4300, 2064}, QG_TENSOR}};
    for (const auto &wc : warp_cases) {
        const Shape2 sh = wc.sh;
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (!upload_shape("f32x one warp", sh, &W, &dW, wc.grp)) continue;
        const int64_t K = sh.cols, N = sh.rows;
        for (int zero = 0; zero < 2; zero++) {
            std::vector<float> ref((size_t)N), got((size_t)N);
            GBuf dx = gbuf((size_t)K * 4, 4), dm = gbuf(4, 4), dy = gbuf((size_t)N * 4, 4);
            f32x_input(W, zero ? 0.0f : 2.0f, K / 2, zero ? 0.0f : 25.0f, ref, dx, dm);
            CK(cudaMemset(dy.ptr(), 0xff, (size_t)N * 4));
            const int kind = tern_cuda_matmul_i8_f32x_kernel(&dW);
            const int rc = tern_cuda_matmul_i8_f32x(&dW, (const float *)dx.ptr(), (const unsigned *)dm.ptr(),
                                                    (float *)dy.ptr(), 0);
            const bool cfg_ok = strcmp(tern_cuda_last_config(), "gemv_warp f32x") == 0;
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(got.data(), dy.ptr(), (size_t)N * 4, cudaMemcpyDeviceToHost));
            int bad = 0;
            for (int64_t r = 0; r < N; r++) bad += memcmp(&got[(size_t)r], &ref[(size_t)r], 4) != 0;
            report(kind == 4 && tern_cuda_matmul_i8_f32x_ok(&dW) && rc == 0 && cfg_ok && bad == 0 &&
                       guards_ok(dy) && guards_ok(dx),
                   "f32x %lldx%lld%s one warp per row%s (kind %d, %s): %d of %lld outputs differ from the "
                   "reference%s%s",
                   (long long)N, (long long)K, wc.grp == QG_TENSOR ? " (tensor scale)" : "", zero ? ", x = 0" : "",
                   kind, tern_cuda_last_config(), bad,
                   (long long)N, rc ? ": " : "", rc ? err_msg() : "");
            gfree(dx), gfree(dm), gfree(dy);
        }
        tern_cuda_free(&dW);
        tern_free(&W);
    }
    { /* the multi-row dp4a GEMV's shapes (>= 32M weights in 6145 .. 8191 columns): refused */
        const Shape2 sh = {4200, 8000};
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (upload_shape("f32x refusal", sh, &W, &dW)) {
            GBuf dx = gbuf((size_t)sh.cols * 4, 4), dm = gbuf(4, 4), dy = gbuf((size_t)sh.rows * 4, 4);
            const int rc = tern_cuda_matmul_i8_f32x(&dW, (const float *)dx.ptr(), (const unsigned *)dm.ptr(),
                                                    (float *)dy.ptr(), 0);
            report(!tern_cuda_matmul_i8_f32x_ok(&dW) && tern_cuda_matmul_i8_f32x_kernel(&dW) == 0 && rc < 0 &&
                       strstr(err_msg(), "binary tensor-core or the one-warp"),
                   "f32x %lldx%lld refused: %s", (long long)sh.rows, (long long)sh.cols,
                   rc < 0 ? err_msg() : "(taken)");
            gfree(dx), gfree(dm), gfree(dy);
            tern_cuda_free(&dW);
            tern_free(&W);
        }
    }
    /* tern_cuda_tbm_override reaches the fused forms: the f32-input form of 4096 x 11008 on the
     * variant it names instead of 65520, that of a one-warp shape (4096 x 4096: its one-warp form
     * above) moved to the bulk-copy kernel on its variant, the GLU of a 2048 x 4096 gate|up matrix
     * likewise (the variants' bits are checked above) */
    struct {
        Shape2 sh;
        bool glu;
        const char *spec;
        int want;
    } ov[] = {{{4096, 11008}, false, "4096x11008:63540", 63540},
              {{4096, 4096}, false, "4096x4096:64520", 64520},
              {{2048, 4096}, true, "2048x4096:65520", 65520}};
    for (const auto &c : ov) {
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (!upload_shape("fused override", c.sh, &W, &dW)) continue;
        GBuf dx = gbuf((size_t)c.sh.cols * 4, 4), dm = gbuf(4, 4), dy = gbuf((size_t)c.sh.rows * 4, 4);
        CK(cudaMemset(dx.ptr(), 0, dx.bytes));
        CK(cudaMemset(dm.ptr(), 0x3f, dm.bytes)); /* a scale and a max of about 0.747 */
        const int orc = tern_cuda_tbm_override(c.spec);
        const bool takes = c.glu ? tern_cuda_glu_i8_ok(&dW) != 0 : tern_cuda_matmul_i8_f32x_ok(&dW) != 0;
        const int rc = c.glu ? tern_cuda_glu_i8(&dW, (const int8_t *)dx.ptr(), (const float *)dm.ptr(), 0,
                                                (float *)dy.ptr(), (unsigned *)dm.ptr(), 0)
                             : tern_cuda_matmul_i8_f32x(&dW, (const float *)dx.ptr(), (const unsigned *)dm.ptr(),
                                                        (float *)dy.ptr(), 0);
        CK(cudaDeviceSynchronize());
        const char *form = c.glu ? "glu" : "f32x";
        report(orc == 0 && takes && rc == 0 && fused_config_ok(tern_cuda_last_config(), form, c.want),
               "fused override %s: %s %lldx%lld config '%s'%s%s", c.spec, form, (long long)c.sh.rows,
               (long long)c.sh.cols, tern_cuda_last_config(), rc ? ": " : "", rc ? err_msg() : "");
        tern_cuda_tbm_override(NULL);
        gfree(dx), gfree(dm), gfree(dy);
        tern_cuda_free(&dW);
        tern_free(&W);
    }
}

/* The decode step's GLU form at several tokens (the multi-token kernel):
 * tern_cuda_glu_i8_mt's h and each token's max|h| bit-identical to
 * tern_cuda_matmul_i8 of the same tokens (itself against the reference)
 * followed by the GLU, for both activations, at 1, 2, 3, 5 and 8 tokens, on
 * the default variant and forced ones (2 / 4 tiles a unit, 1 / 2 / 4 K parts,
 * slices of 4 blocks: a K split whose last slice forms h), the last unit
 * partial; sentinels; 9 tokens, gate|up rows not of whole tile pairs and
 * groups of scales refused; the engine's rule (not where the int8 dispatch
 * takes the multi-token GEMV itself). */
static void test_fused_mt(void) {
    const Shape2 shapes[] = {{2048, 4096}, {1440, 1040}, {64, 256}, {2016, 36864}};
    const int vars[] = {0, 65540, 68520, 65420, 62540, 64140, 65140, 63140, 68140};
    const int toks[] = {1, 2, 3, 5, 8};
    for (const Shape2 &sh : shapes) {
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (!upload_shape("fused mt glu", sh, &W, &dW)) continue;
        const int64_t N = sh.rows, K = sh.cols, half = N / 2, NT = 8;
        GBuf dx = gbuf((size_t)(NT * K), 1), dsx = gbuf(NT * 4, 4), dy = gbuf((size_t)(NT * N * 4), 4),
             dh = gbuf((size_t)(NT * half * 4), 4), dhr = gbuf((size_t)(NT * half * 4), 4), dm = gbuf(NT * 4, 4),
             dmr = gbuf(NT * 4, 4);
        for (int n : toks) {
            const int act = n & 1; /* SiLU at 2 and 8 tokens, ReLU^2 at 1, 3 and 5 */
            std::vector<int8_t> xq((size_t)(n * K));
            std::vector<float> sx((size_t)n), yref((size_t)(n * N)), y((size_t)(n * N)), hr((size_t)(n * half)),
                got((size_t)(n * half));
            for (auto &v : xq) v = (int8_t)((int)(rnd() % 256) - 128);
            for (int k = 0; k < n; k++) sx[(size_t)k] = 0.37f + 0.11f * (float)k;
            CK(cudaMemcpy(dx.ptr(), xq.data(), (size_t)(n * K), cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dsx.ptr(), sx.data(), (size_t)n * 4, cudaMemcpyHostToDevice));
            tern_matmul_i8_ref(&W, xq.data(), sx.data(), n, yref.data());
            /* the separate kernels: the GEMV (against the reference), then the GLU */
            CK(cudaMemset(dmr.ptr(), 0, (size_t)n * 4));
            const bool ok = tern_cuda_matmul_i8(&dW, (const int8_t *)dx.ptr(), (const float *)dsx.ptr(), n,
                                                (float *)dy.ptr(), 0) == 0;
            for (int k = 0; k < n; k++)
                glu_ref_kernel<<<64, 256>>>((const float *)dy.ptr() + k * N, half, act, (float *)dhr.ptr() + k * half,
                                            (unsigned *)dmr.ptr() + k);
            CK(cudaDeviceSynchronize());
            std::vector<unsigned> mr((size_t)n), m((size_t)n);
            CK(cudaMemcpy(y.data(), dy.ptr(), (size_t)(n * N) * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hr.data(), dhr.ptr(), hr.size() * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(mr.data(), dmr.ptr(), (size_t)n * 4, cudaMemcpyDeviceToHost));
            int bad_y = 0;
            for (int64_t i = 0; i < n * N; i++) bad_y += memcmp(&y[(size_t)i], &yref[(size_t)i], 4) != 0;
            for (int v : vars) {
                const int oldv = tern_cuda_decode_variant(v);
                CK(cudaMemset(dh.ptr(), 0xff, (size_t)(n * half) * 4));
                CK(cudaMemset(dm.ptr(), 0, (size_t)n * 4));
                const bool takes = tern_cuda_glu_i8_mt_ok(&dW, n);
                const int rc = tern_cuda_glu_i8_mt(&dW, (const int8_t *)dx.ptr(), (const float *)dsx.ptr(), n, act,
                                                   (float *)dh.ptr(), (unsigned *)dm.ptr(), 0);
                char cfg[64];
                snprintf(cfg, sizeof cfg, "%s", tern_cuda_last_config());
                tern_cuda_decode_variant(oldv);
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(got.data(), dh.ptr(), got.size() * 4, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(m.data(), dm.ptr(), (size_t)n * 4, cudaMemcpyDeviceToHost));
                int bad = 0, badm = 0;
                for (int64_t i = 0; i < n * half; i++) bad += memcmp(&got[(size_t)i], &hr[(size_t)i], 4) != 0;
                for (int k = 0; k < n; k++) { /* each token's max: the separate GLU's and the host's over h */
                    float hmx = 0.0f;
                    for (int64_t j = 0; j < half; j++) hmx = std::max(hmx, fabsf(got[(size_t)(k * half + j)]));
                    unsigned hb;
                    memcpy(&hb, &hmx, 4);
                    badm += m[(size_t)k] != mr[(size_t)k] || m[(size_t)k] != hb || hb == 0;
                }
                const char *pre = "gemv_tbm mt glu v=";
                const bool cfg_ok = strncmp(cfg, pre, strlen(pre)) == 0 && (v == 0 || atoi(cfg + strlen(pre)) == v);
                report(ok && bad_y == 0 && takes && rc == 0 && cfg_ok && bad == 0 && badm == 0,
                       "fused mt glu %lldx%lld n=%d act %d variant %d (%s): GEMV %d of %lld y differ, %d of %lld h, "
                       "%d maxima%s%s",
                       (long long)N, (long long)K, n, act, v, cfg, bad_y, (long long)(n * N), bad,
                       (long long)(n * half), badm, rc ? ": " : "", rc ? err_msg() : "");
            }
        }
        report(guards_ok(dx) && guards_ok(dy) && guards_ok(dh) && guards_ok(dm) && guards_ok(dhr),
               "fused mt glu %lldx%lld: sentinels intact", (long long)N, (long long)K);
        const int rc = tern_cuda_glu_i8_mt(&dW, (const int8_t *)dx.ptr(), (const float *)dsx.ptr(), 9, 0,
                                           (float *)dh.ptr(), (unsigned *)dm.ptr(), 0);
        report(rc < 0 && !tern_cuda_glu_i8_mt_ok(&dW, 9) && strstr(err_msg(), "9 tokens (1 .. 8)"),
               "fused mt glu %lldx%lld: 9 tokens refused: %s", (long long)N, (long long)K,
               rc < 0 ? err_msg() : "(taken)");
        /* the engine's rule: 2048 x 4096 (8M weights) is no multi-token GEMV shape of the int8
         * dispatch, so the GLU form takes it at 2 .. 8 tokens, not at one */
        if (sh.rows == 2048)
            report(tern_cuda_glu_i8_mt_rule(&dW, 2) && tern_cuda_glu_i8_mt_rule(&dW, 8) &&
                       !tern_cuda_glu_i8_mt_rule(&dW, 1) && !tern_cuda_glu_i8_mt_rule(&dW, 9),
                   "fused mt glu 2048x4096: the engine's rule at 1 / 2 / 8 / 9 tokens");
        gfree(dx), gfree(dsx), gfree(dy), gfree(dh), gfree(dhr), gfree(dm), gfree(dmr);
        tern_cuda_free(&dW);
        tern_free(&W);
    }
    { /* a gate|up matrix the int8 dispatch runs on the multi-token GEMV at 2 and 8 tokens
       * (the 7B's 22016 x 4096): the rule leaves it there */
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (upload_shape("fused mt rule", {22016, 4096}, &W, &dW)) {
            report(tern_cuda_glu_i8_mt_ok(&dW, 2) && !tern_cuda_glu_i8_mt_rule(&dW, 2) &&
                       !tern_cuda_glu_i8_mt_rule(&dW, 8),
                   "fused mt glu 22016x4096: taken, but not by the engine's rule");
            tern_cuda_free(&dW);
            tern_free(&W);
        }
    }
    { /* gate|up rows not of whole tile pairs, and groups of scales: refused */
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (upload_shape("fused mt refusal", {48, 256}, &W, &dW)) {
            GBuf dx = gbuf(512, 1), dsx = gbuf(8, 4), dh = gbuf(48 * 4, 4), dm = gbuf(8, 4);
            const int rc = tern_cuda_glu_i8_mt(&dW, (const int8_t *)dx.ptr(), (const float *)dsx.ptr(), 2, 0,
                                               (float *)dh.ptr(), (unsigned *)dm.ptr(), 0);
            report(!tern_cuda_glu_i8_mt_ok(&dW, 2) && rc < 0 && strstr(err_msg(), "not a gate|up matrix"),
                   "fused mt glu 48 x 256 refused for its shape: %s", rc < 0 ? err_msg() : "(taken)");
            gfree(dx), gfree(dsx), gfree(dh), gfree(dm);
            tern_cuda_free(&dW);
            tern_free(&W);
        }
        if (upload_shape("fused mt refusal, groups of 128", {2048, 4096}, &W, &dW, QG_128)) {
            report(!tern_cuda_glu_i8_mt_ok(&dW, 2), "fused mt glu: 2048 x 4096 in groups of 128 columns refused");
            tern_cuda_free(&dW);
            tern_free(&W);
        }
    }
}

/* The last wave split (tern_wg_plan.c): n_sm + 5 row tiles of 256 tokens,
 * so 5 tiles are left over after one whole wave (300 tokens: two token
 * tiles, the second partial, 10 left over after two waves, all in the
 * second token tile); split by the knobs 90K (K ways, at least 8 stages
 * each: int8 24 stages -> 3, bf16 48 -> 6, f32 144 -> 8) while the others
 * run unsplit with the staged epilogue, or not at all (0: the default rule,
 * which leaves 24 stages unsplit; 901).
 * int8 bit-identical, bf16 / f32 against the reference (run_case). */
static void test_wg_last_wave(void) {
    const int n_sm = sm_count();
    const Shape2 shapes[] = {{128 * (int64_t)(n_sm + 5) - 36, 6000}};
    const int64_t ns[] = {130, 300};
    const int variants[] = {0, 901, 902, 903, 908};
    forced_variants("gemm_wgmma last wave", 5, shapes, 1, ns, 2, variants, 5);
    TernaryMatrix W;
    TernCudaMatrix dW;
    if (!upload_shape("last wave", shapes[0], &W, &dW)) return;
    const int oldv = tern_cuda_decode_variant(903);
    { /* the dispatch split only the 5 tiles past the wave, 3 ways */
        char cfg[128];
        const int rc = dispatch_config(&dW, shapes[0], 130, cfg, sizeof cfg);
        if (n_sm >= 15) /* n_sm / 5 >= 3 */
            report(rc == 0 && !strncmp(cfg, "wgmma nt=256 ", 13) && strstr(cfg, " ks=3 ") &&
                       strstr(cfg, "tma_y=1") && strstr(cfg, "pw=1") && strstr(cfg, "split_tiles=5"),
                   "last wave on %d SMs: the dispatch chose \"%s\"", n_sm, cfg);
        else
            printf("  (last wave on %d SMs: \"%s\", not checked)\n", n_sm, cfg);
    }
    run_case(&W, &dW, 130, 1, "row"); /* bf16, 3 ways */
    run_case(&W, &dW, 300, 1, "row"); /* bf16, 3 ways, the split tiles in the second token tile */
    run_case(&W, &dW, 130, 0, "row"); /* f32 (three bf16 planes), 3 ways */
    tern_cuda_decode_variant(908);
    run_case(&W, &dW, 130, 0, "row"); /* f32, 8 ways */
    tern_cuda_decode_variant(oldv);
    tern_cuda_free(&dW);
    tern_free(&W);
}

/* The configuration the dispatch chose for n bf16 tokens (constant
 * activations) into cfg; the call's return code. */
static int dispatch_config_bf16(const TernCudaMatrix *dW, Shape2 sh, int64_t n, char *cfg, size_t cap) {
    GBuf dx = gbuf((size_t)(n * sh.cols) * 2, 2), dy = gbuf((size_t)(n * sh.rows) * 4, 4);
    CK(cudaMemset(dx.ptr(), 0x3f, dx.bytes)); /* 0x3f3f: about 0.747 */
    const int rc = tern_cuda_matmul_bf16(dW, (const uint16_t *)dx.ptr(), n, (float *)dy.ptr(), 0);
    CK(cudaDeviceSynchronize());
    snprintf(cfg, cap, "%s", tern_cuda_last_config());
    gfree(dx);
    gfree(dy);
    return rc;
}

/* The dispatched bf16 GEMM called reps more times on the same random
 * activations: every result the same bits as the first (the multicast
 * kernel's slot hand-off between the two CTAs: a slot refilled before the
 * other CTA's consumers are done with it gives different bits only now and
 * then, so one pair of calls, as run_case makes, is not enough to show it). */
static void repeat_bits_bf16(const TernCudaMatrix *dW, Shape2 sh, int64_t n, int reps, const char *what) {
    const size_t nx = (size_t)(n * sh.cols), ny = (size_t)(n * sh.rows);
    std::vector<uint16_t> hx(nx);
    for (size_t i = 0; i < nx; i++) hx[i] = f32_to_bf16(nrand());
    GBuf dx = gbuf(nx * 2, 2), dy = gbuf(ny * 4, 4);
    CK(cudaMemcpy(dx.ptr(), hx.data(), nx * 2, cudaMemcpyHostToDevice));
    std::vector<float> first(ny), got(ny);
    int rc = 0, differ = 0, first_bad = -1;
    for (int r = 0; r <= reps && rc == 0; r++) {
        CK(cudaMemset(dy.ptr(), 0xFF, ny * 4)); /* NaN poison */
        rc = tern_cuda_matmul_bf16(dW, (const uint16_t *)dx.ptr(), n, (float *)dy.ptr(), 0);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(r ? got.data() : first.data(), dy.ptr(), ny * 4, cudaMemcpyDeviceToHost));
        if (r && memcmp(got.data(), first.data(), ny * 4) != 0) {
            differ++;
            if (first_bad < 0) first_bad = r;
        }
    }
    int nonfinite = 0;
    for (size_t i = 0; i < ny; i++) nonfinite += !isfinite(first[i]);
    report(rc == 0 && differ == 0 && nonfinite == 0 && guards_ok(dx) && guards_ok(dy),
           "%s %lldx%lld n=%lld: %d calls after the first, %d with other bits (first at %d), %d non-finite (%s)",
           what, (long long)sh.rows, (long long)sh.cols, (long long)n, reps, differ, first_bad, nonfinite,
           rc == 0 ? tern_cuda_last_config() : err_msg());
    gfree(dx);
    gfree(dy);
}

/* The producer kernel in clusters of 2 CTAs sharing each stage's
 * activations (tern_wg_multicast: bf16, 256-token tiles, several token
 * tiles; the knob 909 turns it off): 2 and 3 token tiles, the last one
 * partial, the last row tile partial, every tile split (702), direct stores
 * (900), a last wave of 12 split tiles (903: 3 ways), f32 (three bf16
 * planes) unsplit and split; bf16 and f32 within the reference's bounds
 * (run_case), int8 (without multicast) bit-identical, the config naming it
 * where the rule gives it and not for int8 or 128-token tiles; the
 * multicast cases called 25 times, the same bits each time. */
static void test_wg_multicast(void) {
    const int n_sm = sm_count();
    const bool check = n_sm <= 134 && n_sm % 2 == 0; /* (even row tiles; one wave and 12 tiles) */
    struct Case {
        Shape2 sh;
        int64_t n;
        int variant;
        const char *want; /* the bf16 config's start, then its split and mc */
        const char *split;
        int mc;
        bool f32;
    } cases[] = {{{128 * 66, 2056}, 300, 0, "wgmma nt=256 ", "split_tiles=0", 1, true},
                 {{128 * 66, 2056}, 300, 909, "wgmma nt=256 ", "split_tiles=0", 0, false},
                 {{128 * 66, 2056}, 300, 702, "wgmma nt=256 ", "split_tiles=132", 1, true}, /* every tile split */
                 {{128 * 66, 2056}, 300, 900, "wgmma nt=256 ", "split_tiles=0", 1, false}, /* direct stores */
                 {{128 * 66, 2056}, 600, 0, "wgmma nt=256 ", "split_tiles=0", 1, false},   /* 3 token tiles */
                 {{128 * 66, 2056}, 100, 0, "wgmma nt=128 ", "split_tiles=0", 0, false},
                 {{128 * (int64_t)(n_sm + 6) - 40, 6000}, 300, 903, "wgmma nt=256 ", "split_tiles=12", 1, true},
                 {{128 * (int64_t)(n_sm + 6) - 40, 6000}, 300, 909, "wgmma nt=256 ", "split_tiles=0", 0, false}};
    TernaryMatrix W;
    TernCudaMatrix dW;
    Shape2 up = {0, 0};
    for (const Case &c : cases) {
        if (c.sh.rows != up.rows || c.sh.cols != up.cols) {
            if (up.rows) tern_cuda_free(&dW), tern_free(&W);
            up = {0, 0};
            if (!upload_shape("multicast", c.sh, &W, &dW)) continue;
            up = c.sh;
        }
        const int oldv = tern_cuda_decode_variant(c.variant);
        char cfg[128], cfg8[128];
        const int rc = dispatch_config_bf16(&dW, c.sh, c.n, cfg, sizeof cfg);
        const int rc8 = dispatch_config(&dW, c.sh, c.n, cfg8, sizeof cfg8);
        if (check)
            report(rc == 0 && !strncmp(cfg, c.want, strlen(c.want)) && strstr(cfg, "pw=1") && strstr(cfg, c.split) &&
                       strstr(cfg, c.mc ? "mc=1" : "mc=0") && rc8 == 0 && strstr(cfg8, "mc=0"),
                   "multicast %lldx%lld n=%lld variant %d: bf16 \"%s\", int8 \"%s\"", (long long)c.sh.rows,
                   (long long)c.sh.cols, (long long)c.n, c.variant, cfg, cfg8);
        else
            printf("  (multicast on %d SMs: \"%s\", not checked)\n", n_sm, cfg);
        run_case(&W, &dW, c.n, 1, "row"); /* bf16 */
        if (c.mc) repeat_bits_bf16(&dW, c.sh, c.n, 24, "multicast repeated");
        if (c.f32) run_case(&W, &dW, c.n, 0, "row"); /* f32: three bf16 planes */
        if (c.variant == 0) run_case(&W, &dW, c.n, 2, "row"); /* int8 */
        tern_cuda_decode_variant(oldv);
    }
    if (up.rows) tern_cuda_free(&dW), tern_free(&W);
    const Shape2 odd = {8500, 2056}; /* 67 row tiles: a pair would span two token tiles */
    if (upload_shape("multicast odd", odd, &W, &dW)) {
        char cfg[128];
        const int rc = dispatch_config_bf16(&dW, odd, 300, cfg, sizeof cfg);
        report(rc == 0 && strstr(cfg, "pw=1") && strstr(cfg, "mc=0"), "multicast 8500 rows: \"%s\"", cfg);
        tern_cuda_free(&dW);
        tern_free(&W);
    }
}

/* tern_mm::div_rn_by (the int8 epilogues' division) against __fdiv_rn, bit
 * for bit, over the range where callers take it (div_scale_ok): random
 * signs, exponents and mantissas of p and s, exact quotients (p = k s),
 * quotients next to ties (p = (q +- half an ulp) s rounded), zeros, and the
 * range's ends. */
__global__ void div_rn_kernel(const float *p, const float *s, int64_t n, unsigned *bad) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float q = tern_mm::div_rn_by(p[i], s[i], __frcp_rn(s[i]));
        const float want = __fdiv_rn(p[i], s[i]);
        if (__float_as_uint(q) != __float_as_uint(want)) atomicAdd(bad, 1u);
    }
}
__global__ void div_ok_kernel(const float *s, int n, int *ok) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) ok[i] = (int)tern_mm::div_scale_ok(s[i], false) + 2 * (int)tern_mm::div_scale_ok(s[i], true);
}
static float rand_exp_float(int lo, int hi) { /* random sign and mantissa, exponent in [lo, hi) */
    const float m = 1.0f + (float)(rnd() & 0x7fffff) / 8388608.0f;
    const float v = ldexpf(m, lo + (int)(rnd() % (uint32_t)(hi - lo)));
    return rnd() & 1 ? -v : v;
}
static void test_div_rn(void) {
    const int64_t N = 1 << 24;
    float *p = (float *)malloc(N * 4), *s = (float *)malloc(N * 4);
    for (int64_t i = 0; i < N; i++) {
        s[i] = rand_exp_float(-32, 32); /* |s| in [2^-32, 2^32) */
        switch (i % 6) {
        case 0: case 1: p[i] = rand_exp_float(-32, 63); break; /* |p| in [2^-32, 2^63) */
        case 2: { /* p = s_row * an int32 sum, as the GEMM forms it */
            const float sr = rand_exp_float(-32, 32);
            const int v = (int)(rnd() >> (rnd() % 31)) * (rnd() & 1 ? 1 : -1);
            p[i] = sr * (float)(v ? v : 1);
            if (fabsf(p[i]) < 0x1p-32f || fabsf(p[i]) >= 0x1p63f) p[i] = 1.0f;
            break;
        }
        case 3: p[i] = (float)(int)(rnd() % 20001 - 10000) * s[i]; break; /* exact, or rounded */
        case 4: { /* next to a tie: q + half an ulp, times s */
            const float q = fabsf(rand_exp_float(-60, 90));
            const float h = nextafterf(q, INFINITY) - q;
            p[i] = (double)(q + 0.5 * h) * s[i] * (rnd() & 1 ? 1.0 : 1.0000001);
            if (fabsf(p[i]) < 0x1p-32f || fabsf(p[i]) >= 0x1p63f) p[i] = 3.0f;
            break;
        }
        default: p[i] = i % 12 == 5 ? 0.0f : -0.0f; break;
        }
    }
    const float ends[] = {0x1p-32f, -0x1p-32f, 0x1p32f, -0x1p32f};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            s[64 * i + j] = ends[i];
            p[64 * i + j] = j == 0 ? 0x1p-32f : j == 1 ? -0x1.fffffep62f : j == 2 ? 0x1.234568p40f : 7.0f;
        }
    GBuf dp = gbuf((size_t)N * 4, 4), ds = gbuf((size_t)N * 4, 4), db = gbuf(4, 4);
    CK(cudaMemcpy(dp.ptr(), p, N * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ds.ptr(), s, N * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(db.ptr(), 0, 4));
    div_rn_kernel<<<1024, 256>>>((const float *)dp.ptr(), (const float *)ds.ptr(), N, (unsigned *)db.ptr());
    unsigned bad = 1;
    CK(cudaMemcpy(&bad, db.ptr(), 4, cudaMemcpyDeviceToHost));
    report(bad == 0 && guards_ok(dp) && guards_ok(ds), "div_rn_by vs __fdiv_rn: %u of %lld quotients differ",
           bad, (long long)N);
    /* the range check: 1 = ok as a token scale, 3 = also as a row scale */
    const float sv[] = {0x1p-32f, 0x1p32f, -0x1p32f, 1.0f, 0.0f, -0.0f, nextafterf(0x1p-32f, 0.0f),
                        nextafterf(0x1p32f, INFINITY), INFINITY, NAN, 1e-40f};
    const int want[] = {3, 3, 3, 3, 2, 2, 0, 0, 0, 0, 0};
    const int ns = (int)(sizeof sv / sizeof sv[0]);
    int got[16] = {0};
    GBuf dsv = gbuf(sizeof sv, 4), dok = gbuf(sizeof got, 4);
    CK(cudaMemcpy(dsv.ptr(), sv, sizeof sv, cudaMemcpyHostToDevice));
    div_ok_kernel<<<1, 32>>>((const float *)dsv.ptr(), ns, (int *)dok.ptr());
    CK(cudaMemcpy(got, dok.ptr(), ns * 4, cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < ns; i++) wrong += got[i] != want[i];
    report(wrong == 0, "div_scale_ok: %d of %d scales classified wrongly", wrong, ns);
    gfree(dp);
    gfree(ds);
    gfree(db);
    gfree(dsv);
    gfree(dok);
    free(p);
    free(s);
}

/* int8 with scales at and past the ends of div_rn_by's range: every kernel
 * bit-identical to the reference, whether a tile divides with div_rn_by
 * (row scales 0, negative, 2^-32, 2^32; token scales 2^-32, 2^32) or falls
 * back to __fdiv_rn (row scales of 1e-13 and subnormal ones, token scales
 * of 1e-11, 1e11 and 1e-20): with the subnormal row scales div_rn_by itself
 * differs from __fdiv_rn in ~4 % of the quotients by a 1e-20 token scale
 * (CPU emulation), so a tile that skipped the fallback fails.  The zero
 * scale on nonzero codes gives products of -0, which the reference's
 * 0.0f + s d turns into +0 (tern_i8_acc). */
static float sx_ends(int64_t t) { return t % 5 == 1 ? 0x1p-32f : t % 5 == 3 ? 0x1p32f : 0.75f + 0.01f * (float)(t % 7); }
static float sx_outside(int64_t t) {
    return t == 5 ? 1e-11f : t == 40 ? 1e11f : t % 7 == 3 ? 1e-20f : 1.5f;
}
static void test_i8_scale_range(void) {
    TernaryMatrix W;
    TernCudaMatrix dW;
    if (make_matrix(300, 700, QG_ROW, &W) < 0) {
        report(false, "scale range: %s", err_msg());
        return;
    }
    const int64_t ss = W.scale_stride;
    W.scales[0 * ss] = 0.0f;
    W.scales[1 * ss] = -0.5f;
    W.scales[2 * ss] = 0x1p-32f;
    W.scales[3 * ss] = 0x1p32f;
    W.scales[130 * ss] = 1e-13f; /* the second 128-row tile: __fdiv_rn */
    for (int i = 0; i < 30; i++) W.scales[(131 + i) * ss] = 1e-40f * (1.0f + (float)i / 15.0f);
    if (tern_cuda_upload(&W, &dW) < 0) {
        report(false, "scale range upload: %s", err_msg());
        tern_free(&W);
        return;
    }
    const int64_t ns[] = {1, 9, 17, 64, 300};
    for (int k = 0; k < 2; k++) {
        g_sx_of = k == 0 ? sx_ends : sx_outside;
        for (int64_t n : ns) run_case(&W, &dW, n, 2, k == 0 ? "row, scales at the ends" : "row, scales outside");
    }
    g_sx_of = nullptr;
    tern_cuda_free(&dW);
    tern_free(&W);
}

static void test_dense(void) {
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        report(false, "cublasCreate failed");
        return;
    }
    const int64_t rows = 37, cols = 200, n = 5;
    uint16_t *w = (uint16_t *)malloc(rows * cols * 2), *x = (uint16_t *)malloc(n * cols * 2);
    float *y = (float *)malloc(n * rows * 4), *ref = (float *)malloc(n * rows * 4);
    for (int64_t i = 0; i < rows * cols; i++) w[i] = f32_to_bf16(nrand());
    for (int64_t i = 0; i < n * cols; i++) x[i] = f32_to_bf16(nrand());
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = 0; r < rows; r++) {
            double a = 0;
            for (int64_t k = 0; k < cols; k++)
                a += (double)bf16_to_f32(w[r * cols + k]) * bf16_to_f32(x[t * cols + k]);
            ref[t * rows + r] = (float)a;
        }
    GBuf dw = gbuf(rows * cols * 2, 2), dx = gbuf(n * cols * 2, 2), dy = gbuf(n * rows * 4, 4);
    CK(cudaMemcpy(dw.ptr(), w, dw.bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx.ptr(), x, dx.bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(dy.ptr(), 0xFF, dy.bytes));
    int rc = tern_cuda_dense_bf16(h, (const uint16_t *)dw.ptr(), rows, cols,
                                  (const uint16_t *)dx.ptr(), n, dy.ptr(), 1, 0);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(y, dy.ptr(), dy.bytes, cudaMemcpyDeviceToHost));
    int bad = 0;
    double err = rel_l2(y, ref, n * rows, &bad);
    report(rc == 0 && bad == 0 && err <= TOL_DENSE && guards_ok(dy),
           "cuBLAS dense bf16 37x200 n=5: rc %d rel_l2 %.3g non-finite %d", rc, err, bad);
    gfree(dw);
    gfree(dx);
    gfree(dy);
    free(w);
    free(x);
    free(y);
    free(ref);
    cublasDestroy(h);
}

/* tern_cuda_gemv_bf16 (a ternary model's LM head) against tern_dense_bf16_ref
 * on awkward shapes: rows past the grid's warps (a warp's second row), rows
 * of 1 .. 48 pieces (a lane's last batch partly past the row), 1 .. 4
 * tokens (a warp's second row at 3 tokens too), x at the shared-memory
 * bound (4 x 12288); every element within
 * cols x 2^-24 x sum |w x| of the double sum (f32 sums), the output's guards
 * intact, the same bits in a second call, with PDL and the L2 hint off, and
 * refusals of what it does not take. */
static void test_dense_gemv(void) {
    struct Case {
        int64_t rows, cols, n;
    };
    static const Case cases[] = {{1, 8, 1},     {37, 200, 1},   {37, 200, 4},  {517, 264, 3},  {2113, 4096, 1},
                                 {3000, 4608, 2}, {33, 12288, 4}, {40000, 256, 1}, {5, 2056, 4},   {4099, 384, 2},
                                 {40000, 256, 3}};
    for (const Case &c : cases) {
        const int64_t R = c.rows, K = c.cols, n = c.n;
        std::vector<uint16_t> w((size_t)(R * K)), x((size_t)(n * K));
        for (auto &v : w) v = f32_to_bf16(nrand() * (rnd() % 5 == 0 ? 8.0f : 0.5f));
        for (auto &v : x) v = f32_to_bf16(nrand());
        std::vector<float> ref((size_t)(n * R)), y((size_t)(n * R)), y2((size_t)(n * R));
        tern_dense_bf16_ref(w.data(), R, K, x.data(), n, ref.data());
        GBuf dw = gbuf((size_t)(R * K) * 2, 8), dx = gbuf((size_t)(n * K) * 2, 8), dy = gbuf((size_t)(n * R) * 4, 4);
        CK(cudaMemcpy(dw.ptr(), w.data(), dw.bytes, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dx.ptr(), x.data(), dx.bytes, cudaMemcpyHostToDevice));
        int rc = tern_cuda_gemv_bf16((const uint16_t *)dw.ptr(), R, K, (const uint16_t *)dx.ptr(), n,
                                     (float *)dy.ptr(), 0);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(y.data(), dy.ptr(), dy.bytes, cudaMemcpyDeviceToHost));
        int bad = 0;
        int64_t over = 0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t r = 0; r < R; r++) {
                double mag = 0.0;
                for (int64_t k = 0; k < K; k++)
                    mag += fabs((double)bf16_to_f32(w[(size_t)(r * K + k)]) * bf16_to_f32(x[(size_t)(t * K + k)]));
                const double e = fabs((double)y[(size_t)(t * R + r)] - ref[(size_t)(t * R + r)]);
                over += !(e <= (double)K * ldexp(1.0, -24) * mag);
            }
        const double err = rel_l2(y.data(), ref.data(), (size_t)(n * R), &bad);
        const bool guards = guards_ok(dy);
        /* again, then with programmatic launches and the evict-first hint off: the same bits */
        const int old_pdl = tern_cuda_pdl(0), old_ef = tern_cuda_l2ef(0);
        CK(cudaMemset(dy.ptr(), 0, dy.bytes));
        const int rc2 = tern_cuda_gemv_bf16((const uint16_t *)dw.ptr(), R, K, (const uint16_t *)dx.ptr(), n,
                                            (float *)dy.ptr(), 0);
        tern_cuda_pdl(old_pdl), tern_cuda_l2ef(old_ef);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(y2.data(), dy.ptr(), dy.bytes, cudaMemcpyDeviceToHost));
        report(rc == 0 && rc2 == 0 && bad == 0 && over == 0 && err <= TOL_DENSE && guards &&
                   memcmp(y.data(), y2.data(), y.size() * 4) == 0,
               "dense bf16 GEMV %lldx%lld n=%lld: rc %d/%d rel_l2 %.3g, %lld outside the bound, non-finite %d, "
               "guards %s, second call %s",
               (long long)R, (long long)K, (long long)n, rc, rc2, err, (long long)over, bad, guards ? "ok" : "BROKEN",
               memcmp(y.data(), y2.data(), y.size() * 4) == 0 ? "the same bits" : "DIFFERS");
        gfree(dw), gfree(dx), gfree(dy);
    }
    /* refusals: 0 or 5 tokens, columns not a multiple of 8, x past 96 KB, NULL, misaligned */
    GBuf dw = gbuf(64 * 12296 * 2, 8), dx = gbuf(5 * 12296 * 2, 8), dy = gbuf(5 * 64 * 4, 4);
    const uint16_t *w = (const uint16_t *)dw.ptr(), *x = (const uint16_t *)dx.ptr();
    float *y = (float *)dy.ptr();
    struct Bad {
        const uint16_t *w, *x;
        float *y;
        int64_t rows, cols, n;
        const char *what, *msg;
    };
    const Bad bads[] = {{w, x, y, 64, 4096, 0, "0 tokens", "not supported"},
                        {w, x, y, 64, 4096, 5, "5 tokens", "not supported"},
                        {w, x, y, 64, 260, 1, "260 columns", "not supported"},
                        {w, x, y, 64, 12296, 4, "4 x 12296 columns", "not supported"},
                        {w, x, y, 0, 4096, 1, "0 rows", "not supported"},
                        {nullptr, x, y, 64, 4096, 1, "NULL weights", "NULL"},
                        {w, x, nullptr, 64, 4096, 1, "NULL output", "NULL"},
                        {w + 1, x, y, 64, 4096, 1, "weights 2 bytes off 16-byte alignment", "aligned"},
                        {w, x + 4, y, 64, 4096, 1, "tokens 8 bytes off 16-byte alignment", "aligned"}};
    for (const Bad &b : bads) {
        const int rc = tern_cuda_gemv_bf16(b.w, b.rows, b.cols, b.x, b.n, b.y, 0);
        report(rc < 0 && strstr(err_msg(), b.msg) != nullptr && cudaDeviceSynchronize() == cudaSuccess,
               "dense bf16 GEMV refuses %s: rc %d \"%s\"", b.what, rc, rc < 0 ? err_msg() : "");
    }
    report(tern_cuda_gemv_bf16_ok(32000, 4096, 1) && tern_cuda_gemv_bf16_ok(256000, 4608, 4) &&
               !tern_cuda_gemv_bf16_ok(32000, 4096, 5) && !tern_cuda_gemv_bf16_ok(32000, 4100, 1),
           "dense bf16 GEMV takes the LM heads' shapes (1 .. 4 tokens), not 5 tokens or 4100 columns");
    report(guards_ok(dy), "dense bf16 GEMV refusals: output guards intact");
    gfree(dw), gfree(dx), gfree(dy);
}

static void test_errors(void) {
    /* the copy bandwidth both benchmarks quote: positive and below 20 TB/s for both ways of
     * copying (HBM3e peaks near 5 TB/s each way); a size not a multiple of 16 and no
     * repetitions are errors */
    double mem = 0, ker = 0;
    const int crc = tern_cuda_copy_bandwidth((size_t)64 << 20, 3, &mem, &ker);
    report(crc == 0 && mem > 1e11 && mem < 2e13 && ker > 1e11 && ker < 2e13,
           "copy bandwidth of 64 MB: cudaMemcpyAsync %.0f GB/s, copy kernel %.0f GB/s%s%s", mem / 1e9, ker / 1e9,
           crc ? ": " : "", crc ? err_msg() : "");
    report(tern_cuda_copy_bandwidth(1000, 3, &mem, &ker) < 0 && tern_cuda_copy_bandwidth(1024, 0, &mem, &ker) < 0,
           "copy bandwidth: 1000 bytes or 0 repetitions must be errors");
    TernCudaMatrix empty;
    memset(&empty, 0, sizeof empty);
    float *dy;
    CK(cudaMalloc(&dy, 64));
    report(tern_cuda_matmul_f32(&empty, (const float *)dy, 1, dy, 0) < 0,
           "empty matrix must be an error");
    TernaryMatrix W;
    if (make_matrix(5, 200, QG_ROW, &W) < 0) {
        report(false, "make_matrix: %s", err_msg());
        return;
    }
    TernCudaMatrix dW;
    report(tern_cuda_upload(&W, &dW) == 0, "upload 5x200: %s", err_msg());
    report(tern_cuda_matmul_f32(&dW, (const float *)dy, -1, dy, 0) < 0, "n < 0 must be an error");
    report(tern_cuda_matmul_i8(&dW, (const int8_t *)dy, NULL, 1, dy, 0) < 0,
           "int8 without scales must be an error");
    report(tern_cuda_matmul_bf16(&dW, NULL, 1, dy, 0) < 0, "NULL x must be an error");
    /* the one-token int8 GEMVs refuse what they do not implement */
    for (int k = 3; k <= 6; k += k == 4 ? 2 : 1) {
        tern_cuda_force_kernel(k);
        report(tern_cuda_matmul_i8(&dW, (const int8_t *)dy, dy, 2, dy, 0) < 0,
               "one-token GEMV %d with two tokens must be refused", k);
        report(tern_cuda_matmul_bf16(&dW, (const uint16_t *)dy, 1, dy, 0) < 0,
               "one-token GEMV %d with bf16 activations must be refused", k);
    }
    /* the multi-token one: 1 .. 16 tokens of int8 only; its variants 6abcd only */
    tern_cuda_force_kernel(7);
    report(tern_cuda_matmul_i8(&dW, (const int8_t *)dy, dy, 17, dy, 0) < 0,
           "multi-token GEMV with 17 tokens must be refused");
    report(tern_cuda_matmul_bf16(&dW, (const uint16_t *)dy, 2, dy, 0) < 0,
           "multi-token GEMV with bf16 activations must be refused");
    {
        const int oldv = tern_cuda_decode_variant(62110);
        report(tern_cuda_matmul_i8(&dW, (const int8_t *)dy, dy, 2, dy, 0) < 0 && strstr(err_msg(), "1 stages"),
               "multi-token GEMV with 1 stage must be refused: %s", err_msg());
        tern_cuda_decode_variant(oldv);
    }
    /* the bf16 one: 1 .. 16 tokens of bf16 activations only (not int8, not the f32 form's planes) */
    tern_cuda_force_kernel(8);
    report(tern_cuda_matmul_bf16(&dW, (const uint16_t *)dy, 17, dy, 0) < 0 && strstr(err_msg(), "bf16 bulk-copy"),
           "bf16 bulk-copy GEMV with 17 tokens must be refused: %s", err_msg());
    report(tern_cuda_matmul_i8(&dW, (const int8_t *)dy, dy, 1, dy, 0) < 0 && strstr(err_msg(), "bf16 bulk-copy"),
           "bf16 bulk-copy GEMV with int8 activations must be refused: %s", err_msg());
    report(tern_cuda_matmul_f32(&dW, (const float *)dy, 1, dy, 0) < 0 && strstr(err_msg(), "bf16 bulk-copy"),
           "bf16 bulk-copy GEMV with f32 activations must be refused: %s", err_msg());
    {
        const int oldv = tern_cuda_decode_variant(62110);
        report(tern_cuda_matmul_bf16(&dW, (const uint16_t *)dy, 1, dy, 0) < 0 && strstr(err_msg(), "1 stages"),
               "bf16 bulk-copy GEMV with 1 stage must be refused: %s", err_msg());
        tern_cuda_decode_variant(oldv);
    }
    tern_cuda_force_kernel(0);
    /* a misspelt kernel choice is an error, not a silent default */
    setenv("TERNLAB_CUDA_GEMV1", "bogus", 1);
    report(tern_cuda_matmul_i8(&dW, (const int8_t *)dy, dy, 1, dy, 0) < 0 &&
               strstr(err_msg(), "TERNLAB_CUDA_GEMV1=bogus") != NULL,
           "TERNLAB_CUDA_GEMV1=bogus must be refused: %s", err_msg());
    unsetenv("TERNLAB_CUDA_GEMV1");
    tern_cuda_free(&dW);
    { /* a kernel forced for every one-token GEMV turns the fused forms off (the _ok functions
       * say no), and their refusals give that reason, or the malformed variable's, not the shape */
        TernaryMatrix Wg, Wf;
        TernCudaMatrix dWg, dWf;
        if (upload_shape("fused off: glu", {2048, 4096}, &Wg, &dWg)) {
            if (upload_shape("fused off: f32x", {4096, 11008}, &Wf, &dWf)) {
                GBuf dx = gbuf((size_t)11008 * 4, 4), dsx = gbuf(4, 4), dh = gbuf((size_t)4096 * 4, 4),
                     dm = gbuf(4, 4);
                auto glu = [&] {
                    return tern_cuda_glu_i8(&dWg, (const int8_t *)dx.ptr(), (const float *)dsx.ptr(), 0,
                                            (float *)dh.ptr(), (unsigned *)dm.ptr(), 0);
                };
                auto f32x = [&] {
                    return tern_cuda_matmul_i8_f32x(&dWf, (const float *)dx.ptr(), (const unsigned *)dm.ptr(),
                                                    (float *)dh.ptr(), 0);
                };
                report(tern_cuda_glu_i8_ok(&dWg) && tern_cuda_matmul_i8_f32x_ok(&dWf),
                       "fused forms taken for 2048 x 4096 (GLU) and 4096 x 11008 (f32 input)");
                const int oldf = tern_cuda_force_kernel(3);
                const bool off = !tern_cuda_glu_i8_ok(&dWg) && !tern_cuda_matmul_i8_f32x_ok(&dWf);
                const bool rg = glu() < 0 && strstr(err_msg(), "tern_cuda_glu_i8: a kernel is forced");
                const char *mg = rg ? "" : err_msg();
                report(off && rg, "forced kernel: GLU form off, refused as forced%s%s", *mg ? ": " : "", mg);
                report(f32x() < 0 && strstr(err_msg(), "tern_cuda_matmul_i8_f32x: a kernel is forced"),
                       "forced kernel: f32-input form refused as forced: %s", err_msg());
                tern_cuda_force_kernel(oldf);
                setenv("TERNLAB_CUDA_GEMV1", "nonsense", 1);
                report(!tern_cuda_glu_i8_ok(&dWg) && glu() < 0 &&
                           strstr(err_msg(), "tern_cuda_glu_i8: TERNLAB_CUDA_GEMV1=nonsense") != NULL,
                       "TERNLAB_CUDA_GEMV1=nonsense: GLU form refused with the variable's error: %s", err_msg());
                report(!tern_cuda_matmul_i8_f32x_ok(&dWf) && f32x() < 0 &&
                           strstr(err_msg(), "tern_cuda_matmul_i8_f32x: TERNLAB_CUDA_GEMV1=nonsense") != NULL,
                       "TERNLAB_CUDA_GEMV1=nonsense: f32-input form refused likewise: %s", err_msg());
                unsetenv("TERNLAB_CUDA_GEMV1");
                report(tern_cuda_glu_i8_ok(&dWg) && tern_cuda_matmul_i8_f32x_ok(&dWf),
                       "fused forms taken again once nothing is forced");
                gfree(dx), gfree(dsx), gfree(dh), gfree(dm);
                tern_cuda_free(&dWf);
                tern_free(&Wf);
            }
            tern_cuda_free(&dWg);
            tern_free(&Wg);
        }
    }
    {
        TernaryMatrix G;
        TernCudaMatrix dG;
        if (make_matrix(5, 256, QG_64, &G) == 0 && tern_cuda_upload(&G, &dG) == 0) {
            tern_cuda_force_kernel(3);
            report(tern_cuda_matmul_i8(&dG, (const int8_t *)dy, dy, 1, dy, 0) < 0,
                   "row GEMV with 4 scale groups per row must be refused");
            printf("  (expected error: %s)\n", err_msg());
            tern_cuda_force_kernel(5);
            report(tern_cuda_matmul_i8(&dG, (const int8_t *)dy, dy, 20, dy, 0) < 0,
                   "wgmma GEMM with 4 scale groups per row must be refused");
            printf("  (expected error: %s)\n", err_msg());
            tern_cuda_force_kernel(0);
            tern_cuda_free(&dG);
            tern_free(&G);
        } else {
            report(false, "make/upload 5x256 g64: %s", err_msg());
        }
    }
    /* a group width the kernels do not implement (5 groups of 48 columns) */
    TernaryMatrix bad = W;
    bad.group_cols = 48;
    bad.n_groups = (W.cols + 47) / 48;
    bad.scale_stride = bad.n_groups;
    TernCudaMatrix dbad;
    report(tern_cuda_upload(&bad, &dbad) < 0, "group of 48 columns must be refused");
    printf("  (expected error: %s)\n", err_msg());
    tern_free(&W);
    cudaFree(dy);
}

/* Every kernel family on awkward shapes, each scale grouping and token
 * count, against the CPU reference (run_case). */
static void test_shapes(int quick) {
    struct Shape {
        int64_t rows, cols;
    } shapes[] = {{1, 1},     {3, 5},     {17, 300},  {33, 257},  {100, 1000},
                  {130, 513}, {257, 768}, {64, 4096}, {520, 9000}, {1000, 1100},
                  {11, 11008}, {37, 15000}};
    const QuantGroup groups[] = {QG_TENSOR, QG_ROW, QG_32, QG_64, QG_128, QG_256};
    const int64_t ns[] = {1, 3, 9, 17, 64, 100, 300};
    for (const Shape &sh : shapes)
        for (QuantGroup grp : groups) {
            TernaryMatrix W;
            if (make_matrix(sh.rows, sh.cols, grp, &W) < 0) {
                report(false, "make_matrix: %s", err_msg());
                continue;
            }
            TernCudaMatrix dW;
            if (tern_cuda_upload(&W, &dW) < 0) {
                report(false, "upload %lldx%lld: %s", (long long)sh.rows, (long long)sh.cols,
                       err_msg());
                tern_free(&W);
                continue;
            }
            for (int64_t n : ns) {
                /* keep the CPU reference affordable */
                if ((double)n * sh.rows * sh.cols > (quick ? 2e6 : 6e7)) continue;
                for (int act = 0; act < 3; act++) run_case(&W, &dW, n, act, quant_group_name(grp));
            }
            tern_cuda_free(&dW);
            tern_free(&W);
        }
}

/* The folded norm's r as tern_norm_r forms it (lane l adds slots l, l + 32,
 * ... in turn; the lanes' sums meet by xor 16, 8, 4, 2, 1), on the host. */
static float norm_r_host(const std::vector<float> &ss, int64_t dim, float eps) {
    float p[32], q[32];
    for (int l = 0; l < 32; l++) {
        p[l] = 0.0f;
        for (int j = 0; j < TERN_NORM_SLOTS / 32; j++) {
            const size_t i = (size_t)(l + 32 * j);
            p[l] = p[l] + (i < ss.size() ? ss[i] : 0.0f);
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        for (int l = 0; l < 32; l++) q[l] = p[l] + p[l ^ o];
        memcpy(p, q, sizeof p);
    }
    return 1.0f / sqrtf(p[0] / (float)dim + eps);
}

/* A folded norm's consumer input for W (K = W.cols): x = 2 N(0, 1) with
 * x[K / 3] = -30, w = N(0, 1), 97 slots of 1 .. 1 + 0.05 K, eps 1e-5 into
 * device buffers (dx, dw, dss, dnm: max|x w| as float bits) and ni; the
 * reference outputs y = tern_matmul_i8_ref(act_quant_int8_ref(x w)) * r into
 * yref (W.rows). */
struct NormInCase {
    GBuf dx, dw, dss, dnm;
    TernNormIn ni;
    std::vector<float> yref;
};
static NormInCase norm_in_case(const TernaryMatrix &W) {
    const int64_t K = W.cols;
    NormInCase c;
    std::vector<float> x((size_t)K), w((size_t)K), v((size_t)K), ss(97);
    std::vector<int8_t> xq((size_t)K);
    float mx = 0.0f, sxv = 0.0f;
    for (int64_t i = 0; i < K; i++) {
        x[(size_t)i] = i == K / 3 ? -30.0f : 2.0f * nrand();
        w[(size_t)i] = nrand();
        v[(size_t)i] = x[(size_t)i] * w[(size_t)i];
        mx = std::max(mx, fabsf(v[(size_t)i]));
    }
    for (auto &e : ss) e = 1.0f + frand() * 0.05f * (float)K;
    const float eps = 1e-5f, r = norm_r_host(ss, K, eps);
    act_quant_int8_ref(v.data(), 1, K, xq.data(), &sxv);
    c.yref.resize((size_t)W.rows);
    tern_matmul_i8_ref(&W, xq.data(), &sxv, 1, c.yref.data());
    for (auto &e : c.yref) e = e * r;
    unsigned mb;
    memcpy(&mb, &mx, 4);
    c.dx = gbuf((size_t)K * 4, 4), c.dw = gbuf((size_t)K * 4, 4), c.dss = gbuf(ss.size() * 4, 4), c.dnm = gbuf(4, 4);
    CK(cudaMemcpy(c.dx.ptr(), x.data(), (size_t)K * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c.dw.ptr(), w.data(), (size_t)K * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c.dss.ptr(), ss.data(), ss.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c.dnm.ptr(), &mb, 4, cudaMemcpyHostToDevice));
    c.ni = {(const float *)c.dx.ptr(), (const float *)c.dw.ptr(), (const unsigned *)c.dnm.ptr(),
            (const float *)c.dss.ptr(), (int)ss.size(), eps};
    return c;
}
static bool norm_in_free(NormInCase &c) {
    const bool ok = guards_ok(c.dx) && guards_ok(c.dw) && guards_ok(c.dss) && guards_ok(c.dnm);
    gfree(c.dx), gfree(c.dw), gfree(c.dss), gfree(c.dnm);
    return ok;
}

/* One folded-norm producer call on W (the one-warp f32 form) against the
 * host, bit for bit: res + y of f32x_input's reference y, max|x' w| and the
 * slots (each warp's rows in order, then the CTA's warps in order), the
 * slots past them untouched; refused where the grid has more CTAs than
 * TERN_NORM_SLOTS (a GPU of more SMs). */
static void norm_out_case(const TernaryMatrix &W, const TernCudaMatrix &dW, int sms) {
    const int64_t N = W.rows, K = W.cols;
    std::vector<float> ref((size_t)N), res((size_t)N), w((size_t)N), xn((size_t)N), got((size_t)N);
    GBuf dx = gbuf((size_t)K * 4, 4), dm = gbuf(4, 4), dres = gbuf((size_t)N * 4, 4), dw = gbuf((size_t)N * 4, 4),
         dmax = gbuf(4, 4), dss = gbuf(TERN_NORM_SLOTS * 4, 4);
    f32x_input(W, 2.0f, K / 2, 25.0f, ref, dx, dm);
    float mx = 0.0f;
    for (int64_t r = 0; r < N; r++) {
        res[(size_t)r] = 3.0f * nrand(), w[(size_t)r] = nrand();
        xn[(size_t)r] = res[(size_t)r] + ref[(size_t)r];
        mx = std::max(mx, fabsf(xn[(size_t)r] * w[(size_t)r]));
    }
    const int64_t blocks = std::min<int64_t>((N + 31) / 32, sms), nwarps = 32 * blocks;
    std::vector<float> slots((size_t)blocks), gss(TERN_NORM_SLOTS);
    for (int64_t c = 0; c < blocks; c++) {
        float t = 0.0f;
        for (int64_t wi = 0; wi < 32; wi++) {
            float sw = 0.0f;
            for (int64_t r = c * 32 + wi; r < N; r += nwarps) {
                volatile float sq = xn[(size_t)r] * xn[(size_t)r]; /* (rounded: no fused multiply-add) */
                sw = sw + sq;
            }
            t = t + sw;
        }
        slots[(size_t)c] = t;
    }
    CK(cudaMemcpy(dres.ptr(), res.data(), (size_t)N * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw.ptr(), w.data(), (size_t)N * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dmax.ptr(), 0, 4));
    TernNormOut no = {(float *)dres.ptr(), (const float *)dw.ptr(), (unsigned *)dmax.ptr(), (float *)dss.ptr(), 0};
    const int ok_said = tern_cuda_matmul_i8_f32x_norm_ok(&dW);
    const int rc = tern_cuda_matmul_i8_f32x_norm(&dW, (const float *)dx.ptr(), (const unsigned *)dm.ptr(), &no, 0);
    const bool cfg_ok = strcmp(tern_cuda_last_config(), "gemv_warp f32x norm") == 0;
    CK(cudaDeviceSynchronize());
    unsigned gm = 0, hm;
    memcpy(&hm, &mx, 4);
    CK(cudaMemcpy(got.data(), dres.ptr(), (size_t)N * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&gm, dmax.ptr(), 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gss.data(), dss.ptr(), TERN_NORM_SLOTS * 4, cudaMemcpyDeviceToHost));
    if (blocks > TERN_NORM_SLOTS) {
        report(!ok_said && rc < 0 && strstr(err_msg(), "norm slots") && guards_ok(dres),
               "norm fold out %lldx%lld: %lld CTAs, more than the slots: refused (%s)", (long long)N, (long long)K,
               (long long)blocks, rc < 0 ? err_msg() : "taken");
        gfree(dx), gfree(dm), gfree(dres), gfree(dw), gfree(dmax), gfree(dss);
        return;
    }
    int bad = 0, bad_ss = 0;
    for (int64_t r = 0; r < N; r++) bad += memcmp(&got[(size_t)r], &xn[(size_t)r], 4) != 0;
    for (int64_t c = 0; c < blocks; c++) bad_ss += memcmp(&gss[(size_t)c], &slots[(size_t)c], 4) != 0;
    for (int64_t c = blocks; c < TERN_NORM_SLOTS; c++) { /* (gbuf's sentinel bytes) */
        uint32_t u;
        memcpy(&u, &gss[(size_t)c], 4);
        bad_ss += u != 0xA5A5A5A5u;
    }
    report(rc == 0 && ok_said && cfg_ok && no.n_ss == (int)blocks && bad == 0 && bad_ss == 0 && gm == hm &&
               guards_ok(dres) && guards_ok(dss) && guards_ok(dmax),
           "norm fold out %lldx%lld (%s): %d slots (want %lld), %d of %lld x' and %d slots differ, max %08x "
           "(host %08x)%s%s",
           (long long)N, (long long)K, tern_cuda_last_config(), no.n_ss, (long long)blocks, bad, (long long)N, bad_ss,
           gm, hm, rc ? ": " : "", rc ? err_msg() : "");
    gfree(dx), gfree(dm), gfree(dres), gfree(dw), gfree(dmax), gfree(dss);
}

/* The RMSNorm folded into the GEMVs around it (TernNormOut / TernNormIn),
 * bit for bit against host twins of their definitions:
 * - producer (the one-warp f32 form, tern_cuda_matmul_i8_f32x_norm): res + y
 *   (y = act_quant_int8_ref + tern_matmul_i8_ref of x), max|x' w| and the
 *   CTAs' slots — a partial last CTA, more rows than the grid's warps,
 *   columns not whole blocks;
 * - consumer (the bulk-copy GLU form, tern_cuda_glu_i8_norm): v = x w coded
 *   with 127 / max|v|, y = the int8 GEMV's output times r (norm_r_host of 97
 *   slots), then the GLU (glu_ref_kernel), both activations, on variants with
 *   one and several K parts, a K split (its finishing CTA), partial units;
 * - refusals: the producer on a bulk-copy shape, the consumer without slots. */
static void test_norm_fold(void) {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int vars[] = {0, 64520, 63530, 66521, 62330, 65520};
    const Shape2 warp_shapes[] = {{4096, 4096}, {4300, 2064}, {37, 1040}, {8192, 1024}};
    for (const Shape2 &sh : warp_shapes) {
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (!upload_shape("norm fold out", sh, &W, &dW)) continue;
        norm_out_case(W, dW, sms);
        tern_cuda_free(&dW);
        tern_free(&W);
    }

    const Shape2 glu_shapes[] = {{2048, 4096}, {2016, 36864}, {1440, 1040}, {64, 256}};
    for (const Shape2 &sh : glu_shapes) {
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (!upload_shape("norm fold in", sh, &W, &dW)) continue;
        const int64_t N = sh.rows, half = N / 2, K = sh.cols;
        NormInCase c = norm_in_case(W);
        GBuf dy = gbuf((size_t)N * 4, 4), dh = gbuf((size_t)half * 4, 4), dhr = gbuf((size_t)half * 4, 4),
             dm = gbuf(8, 4);
        CK(cudaMemcpy(dy.ptr(), c.yref.data(), (size_t)N * 4, cudaMemcpyHostToDevice));
        for (int act = 0; act < 2; act++) {
            CK(cudaMemset(dm.ptr(), 0, 8));
            glu_ref_kernel<<<64, 256>>>((const float *)dy.ptr(), half, act, (float *)dhr.ptr(), (unsigned *)dm.ptr() + 1);
            CK(cudaDeviceSynchronize());
            std::vector<float> want((size_t)half), hg((size_t)half);
            CK(cudaMemcpy(want.data(), dhr.ptr(), (size_t)half * 4, cudaMemcpyDeviceToHost));
            for (int var : vars) {
                const int oldv = tern_cuda_decode_variant(var);
                CK(cudaMemset(dm.ptr(), 0, 4));
                CK(cudaMemset(dh.ptr(), 0xff, (size_t)half * 4));
                const int rc = tern_cuda_glu_i8_norm(&dW, &c.ni, act, (float *)dh.ptr(), (unsigned *)dm.ptr(), 0);
                const bool cfg_ok = fused_config_ok(tern_cuda_last_config(), "glu norm", var);
                tern_cuda_decode_variant(oldv);
                CK(cudaDeviceSynchronize());
                unsigned m[2];
                CK(cudaMemcpy(hg.data(), dh.ptr(), (size_t)half * 4, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(m, dm.ptr(), 8, cudaMemcpyDeviceToHost));
                int bad = 0;
                for (int64_t j = 0; j < half; j++) bad += memcmp(&hg[(size_t)j], &want[(size_t)j], 4) != 0;
                report(rc == 0 && tern_cuda_glu_i8_ok(&dW) && cfg_ok && bad == 0 && m[0] == m[1] && m[1] != 0,
                       "norm fold in (glu) %lldx%lld act %d variant %d (%s): %d of %lld h differ, max bits %08x vs "
                       "%08x%s%s",
                       (long long)N, (long long)K, act, var, tern_cuda_last_config(), bad, (long long)half, m[0], m[1],
                       rc ? ": " : "", rc ? err_msg() : "");
            }
        }
        report(norm_in_free(c) && guards_ok(dh) && guards_ok(dm), "norm fold in %lldx%lld: sentinels intact",
               (long long)N, (long long)K);
        gfree(dy), gfree(dh), gfree(dhr), gfree(dm);
        tern_cuda_free(&dW);
        tern_free(&W);
    }
    { /* refusals */
        TernaryMatrix W;
        TernCudaMatrix dW;
        if (upload_shape("norm fold refusal", {8200, 4096}, &W, &dW)) { /* a bulk-copy shape */
            GBuf dx = gbuf(4096 * 4, 4), dm = gbuf(4, 4), db = gbuf(8200 * 4, 4), dss = gbuf(TERN_NORM_SLOTS * 4, 4);
            TernNormOut no = {(float *)db.ptr(), (const float *)db.ptr(), (unsigned *)dm.ptr(), (float *)dss.ptr(), 0};
            const int rc = tern_cuda_matmul_i8_f32x_norm(&dW, (const float *)dx.ptr(), (const unsigned *)dm.ptr(), &no, 0);
            report(!tern_cuda_matmul_i8_f32x_norm_ok(&dW) && rc < 0 && strstr(err_msg(), "one-warp"),
                   "norm fold out 8200 x 4096 (a bulk-copy shape) refused: %s", rc < 0 ? err_msg() : "(taken)");
            gfree(dx), gfree(dm), gfree(db), gfree(dss);
            tern_cuda_free(&dW);
            tern_free(&W);
        }
        if (upload_shape("norm fold refusal", {2048, 4096}, &W, &dW)) {
            GBuf dx = gbuf(4096 * 4, 4), dm = gbuf(8, 4), dh = gbuf(1024 * 4, 4), dss = gbuf(TERN_NORM_SLOTS * 4, 4);
            const TernNormIn ni = {(const float *)dx.ptr(), (const float *)dx.ptr(), (const unsigned *)dm.ptr(),
                                   (const float *)dss.ptr(), 0, 1e-5f};
            const int rc = tern_cuda_glu_i8_norm(&dW, &ni, 0, (float *)dh.ptr(), (unsigned *)dm.ptr() + 1, 0);
            report(rc < 0 && strstr(err_msg(), "norm slots"), "norm fold in without slots refused: %s",
                   rc < 0 ? err_msg() : "(taken)");
            gfree(dx), gfree(dm), gfree(dh), gfree(dss);
            tern_cuda_free(&dW);
            tern_free(&W);
        }
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0); /* a run stopped by a time limit keeps what it printed */
    /* the parts that run alone (argv[1]; quick and wg are variants of the whole run below) */
    struct Part {
        const char *name;
        void (*fn[12])(void);
    };
    static const Part parts[] = {
        {"mt", {test_mt_grid, test_mt_default}},  /* the multi-token bulk-copy GEMV */
        {"bf", {test_bf_grid}},                   /* the bf16 bulk-copy GEMV */
        {"splits", {test_wg_splits}},             /* the wgmma GEMM's K splits of small tiles */
        {"mc", {test_wg_multicast}},              /* the wgmma GEMM's multicast cases */
        {"errors", {test_errors}},                /* the refusals (and the copy bandwidth) */
        {"dense", {test_dense, test_dense_gemv}}, /* dense bf16: cuBLAS, and ternlab's GEMV */
        {"gemv", {test_bmma_grid, test_mt_grid, test_mt_default, test_gemv_default, test_tbm_reserve,
                  test_tbm_rowsum, test_fused_mlp, test_fused_mt, test_norm_fold, test_bf_grid}}, /* the one-token and few-token GEMVs */
        {"fusedmt", {test_fused_mt}}, /* the multi-token kernel's GLU form */
        {"rowsum", {test_tbm_rowsum}}, /* the one-token K split through tbm_row_add */
    };
    const Part *part = nullptr;
    if (argc > 1)
        for (const Part &p : parts)
            if (strcmp(argv[1], p.name) == 0) part = &p;
    if (argc > 2 || (argc > 1 && !part && strcmp(argv[1], "quick") != 0 && strcmp(argv[1], "wg") != 0)) {
        fprintf(stderr, "usage: test_gpu [PART]  (PART: quick, wg");
        for (const Part &p : parts) fprintf(stderr, ", %s", p.name);
        fprintf(stderr, "; none: everything)\n");
        return 2;
    }
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("SKIPPED: no GPU (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        printf("0 passed, 0 failed\n");
        return 0;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, cc %d.%d\n", prop.name, prop.multiProcessorCount, prop.major,
           prop.minor);
    const int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    /* wg: only the wgmma GEMM's split / tile tests (e.g. under compute-sanitizer) */
    const int wg_only = argc > 1 && strcmp(argv[1], "wg") == 0;
    if (part) {
        for (void (*f)(void) : part->fn)
            if (f) f();
        printf("%d passed, %d failed\n", g_pass, g_fail);
        return g_fail ? 1 : 0;
    }

    if (!wg_only) {
        test_shapes(quick);
        test_div_rn();
        test_i8_scale_range();
        test_dense();
        test_dense_gemv();
        test_bmma_grid();
        test_mt_grid();
        test_mt_default();
        test_bf_grid();
        test_gemv_default();
        test_tbm_reserve();
        test_tbm_rowsum();
        test_fused_mlp();
        test_fused_mt();
        test_norm_fold();
    }
    test_wg_splits();
    test_wg_big_tiles();
    test_wg_last_wave();
    test_wg_multicast();
    if (!wg_only) test_errors();
    printf("f32: worst rel. error vs float64: GPU %.3g, CPU reference %.3g\n", g_worst_gpu64,
           g_worst_ref64);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
