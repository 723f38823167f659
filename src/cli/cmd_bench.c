/* ternlab bench: ternary GEMV/GEMM kernels against OpenBLAS on the same
 * matrix in f32, in one run.
 *
 * For each shape W (rows, cols) and batch n: y (n, rows) = x (n, cols) @ W^T with
 *   tern_f32  tern_matmul_f32 (dispatched variant), f32 activations
 *   tern_i8   tern_matmul_i8, int8 per-token activations (BitNet), without
 *             the activation quantisation itself
 *   blas_f32  cblas_sgemv (n = 1) / cblas_sgemm (n > 1) on the dequantised W:
 *             OpenBLAS's best form for each n.  (The dense reference path
 *             upcasts BF16 weights to f32 at load and calls sgemm, at n = 1
 *             too, where sgemm is ~2.4x slower than sgemv on the 2-core
 *             machine: against the dense path as it runs, the n = 1 ratios
 *             are larger.)
 * Each timing: one warm-up call (weights then L3-resident where they fit),
 * then rounds of one call of each of the three, interleaved, until ~0.3 s
 * per call (at least 3, at most 200); the medians are reported.  The
 * "x blas" columns are the ratios OpenBLAS time / ternary time.  GFLOP/s counts 2*n*rows*cols; GB/s counts the weight bytes
 * read once (2-bit codes + scales, or 4-byte floats) plus activations and
 * outputs; each is also given as a fraction of the memory read bandwidth
 * measured in the same run (a parallel read of a 512 MiB buffer; above 1
 * where the weights stayed cache-resident between calls).  Each timed kernel
 * is then checked against its *_ref twin on the first tokens and the last:
 * int8 bit-identical, f32 within 1e-5 of sum |s q x| per output; a mismatch
 * fails the run (no file).
 * Decode rows (n = 1) also time the int8 GEMV alone, 101 calls back to back after
 * three warm-ups (codes L3-resident and its threads awake, as in a decode loop
 * — the condition the CPU target is stated for): "int8 alone" line,
 * /bench/tern_i8_warm_ms (0 for n > 1); sgemv is timed alone the same way
 * (/bench/blas_f32_warm_ms, and the ratio speedup_i8_warm_vs_blas_warm), so
 * that the back-to-back int8 time has a baseline measured as it was: in the
 * interleaved rounds each call also pays for waking threads the other two
 * let sleep, which at the fixture shapes is most of a call.
 * Output: a table on stdout; with --out FILE.h5 the same numbers in HDF5
 * (src/log/h5log.h: written to a temporary name, renamed when complete). */
#include "cli/cli.h"

#include "core/blas_setup.h"
#include "core/err.h"
#include "core/strnum.h"
#include "core/mem.h"
#include "core/timer.h"
#include "cpu/tern_kernels.h"
#include "eval/experiment.h"
#include "log/h5log.h"
#include "quant/quant.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_TARGET_S 0.3
#define BENCH_MIN_REPS 3
#define BENCH_MAX_REPS 200

typedef struct {
    int64_t rows, cols, n;
    double ms[3], gflops[3], gbs[3]; /* tern_f32, tern_i8, blas_f32 */
    double ms_i8_warm;               /* n = 1: tern_i8 alone, back to back (0 otherwise) */
    double ms_blas_warm;             /* n = 1: sgemv alone, back to back (0 otherwise) */
    double max_rel_diff;             /* tern_f32 vs blas, max |d| / max |y| */
    double ref_err_f32;              /* tern_f32 vs tern_matmul_f32_ref, max |d| / sum|s q x| */
    int reps;                        /* timed rounds of each call */
} BenchRow;

#define BENCH_F32_TOL 1e-5
#define BENCH_CHECK_TOKENS 4 /* the first tokens checked against the twins (and the last) */

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The memory read bandwidth (GB/s) here, now: every thread sums its part of a
 * 512 MiB buffer (256 MiB with quick), median of 5 passes after one; 0 when
 * the buffer cannot be had. */
static double read_bandwidth_gbs(int quick) {
    const size_t n = (quick ? (size_t)256 : (size_t)512) << 20 >> 3;
    uint64_t *b = mem_alloc(n * sizeof *b, "bandwidth buffer");
    if (!b) return 0;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) b[i] = i;
    double ts[6];
    volatile uint64_t sink = 0;
    for (int p = 0; p < 6; p++) {
        uint64_t s = 0;
        const double a = time_now();
#pragma omp parallel for schedule(static) reduction(^ : s)
        for (size_t i = 0; i < n; i += 8) /* (a line of 8 words a step: the loads, not the adds) */
            s ^= b[i] ^ b[i + 1] ^ b[i + 2] ^ b[i + 3] ^ b[i + 4] ^ b[i + 5] ^ b[i + 6] ^ b[i + 7];
        ts[p] = time_now() - a;
        sink ^= s;
    }
    (void)sink;
    mem_free(b);
    double *t = ts + 1; /* (the first pass warms the pages) */
    qsort(t, 5, sizeof *t, cmp_d);
    return t[2] > 0 ? (double)(n * sizeof *b) / t[2] * 1e-9 : 0;
}

typedef enum { B_TF32, B_TI8, B_BLAS } BenchWhat;

typedef struct {
    BenchWhat what;
    const TernaryMatrix *tm;
    const float *w, *x, *sx;
    const int8_t *xq;
    float *y;
    int64_t n;
} BenchCall;

static int call(const BenchCall *c) {
    const TernaryMatrix *m = c->tm;
    switch (c->what) {
    case B_TF32: return tern_matmul_f32(m, c->x, c->n, c->y);
    case B_TI8: return tern_matmul_i8(m, c->xq, c->sx, c->n, c->y);
    case B_BLAS:
        if (c->n == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)m->rows, (int)m->cols, 1.0f, c->w,
                        (int)m->cols, c->x, 1, 0.0f, c->y, 1);
        else /* y (n, rows) = x (n, cols) @ W^T, W (rows, cols) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c->n, (int)m->rows,
                        (int)m->cols, 1.0f, c->x, (int)m->cols, c->w, (int)m->cols, 0.0f, c->y,
                        (int)m->rows);
        return 0;
    }
    return -1;
}

/* Median seconds of each of nc calls, after a warm-up of each.  The calls
 * are timed interleaved (one of each per round, order rotating), so load
 * from other processes on a shared machine hits all of them alike and the
 * ratios stay meaningful even when the absolute times move. */
#define BENCH_MAX_CALLS 3
static int time_calls(const BenchCall *c, int nc, int quick, double *median, int *reps_out) {
    double first = 0;
    for (int k = 0; k < nc; k++) {
        if (call(&c[k]) < 0) return -1; /* warm-up */
        double t0 = time_now();
        if (call(&c[k]) < 0) return -1;
        first += time_now() - t0;
    }
    int reps = first > 0 ? (int)((quick ? BENCH_TARGET_S / 4 : BENCH_TARGET_S) * nc / first) : BENCH_MAX_REPS;
    if (reps < BENCH_MIN_REPS) reps = BENCH_MIN_REPS;
    if (reps > BENCH_MAX_REPS) reps = BENCH_MAX_REPS;
    static double ts[BENCH_MAX_CALLS][BENCH_MAX_REPS];
    for (int i = 0; i < reps; i++)
        for (int j = 0; j < nc; j++) {
            int k = (i + j) % nc;
            double a = time_now();
            if (call(&c[k]) < 0) return -1;
            ts[k][i] = time_now() - a;
        }
    for (int k = 0; k < nc; k++) {
        qsort(ts[k], (size_t)reps, sizeof ts[k][0], cmp_d);
        median[k] = reps % 2 ? ts[k][reps / 2] : 0.5 * (ts[k][reps / 2 - 1] + ts[k][reps / 2]);
    }
    *reps_out = reps;
    return 0;
}

/* Median milliseconds of one call made back to back (101 times, 25 with
 * quick) after three warm-ups: the decode-loop condition, where nothing
 * else runs between the calls. */
static int time_alone(const BenchCall *c, int quick, double *ms) {
    double ts[BENCH_MAX_REPS];
    const int reps = quick ? 25 : 101;
    for (int k = 0; k < 3 + reps; k++) {
        const double a = time_now();
        if (call(c) < 0) return -1;
        if (k >= 3) ts[k - 3] = time_now() - a;
    }
    qsort(ts, (size_t)reps, sizeof ts[0], cmp_d);
    *ms = ts[reps / 2] * 1e3;
    return 0;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static int bench_shape(int64_t rows, int64_t cols, const int64_t *ns, int n_ns, int quick, double bw,
                       BenchRow *out) {
    int rc = -1;
    int64_t nmax = 0;
    for (int i = 0; i < n_ns; i++) nmax = ns[i] > nmax ? ns[i] : nmax;
    int8_t *q = mem_alloc((size_t)(rows * cols), "bench codes");
    float *w = mem_alloc((size_t)(rows * cols) * sizeof(float), "bench dense weights");
    float *x = mem_alloc((size_t)(nmax * cols) * sizeof(float), "bench activations");
    int8_t *xq = mem_alloc((size_t)(nmax * cols), "bench int8 activations");
    float *sx = mem_alloc((size_t)nmax * sizeof(float), "bench activation scales");
    float *y = mem_alloc((size_t)(nmax * rows) * sizeof(float), "bench output");
    float *yb = mem_alloc((size_t)(nmax * rows) * sizeof(float), "bench output");
    float *yi = mem_alloc((size_t)(nmax * rows) * sizeof(float), "bench output");
    TernaryMatrix tm = {0};
    if (!q || !w || !x || !xq || !sx || !y || !yb || !yi) goto done;
    /* codes with about a third zeros, like absmean on Gaussian weights */
    for (int64_t i = 0; i < rows * cols; i++) q[i] = (int8_t)((int)(rnd() % 3) - 1);
    float scale = 0.02f;
    if (tern_from_codes(q, &scale, rows, cols, QG_TENSOR, DT_F32, &tm) < 0) goto done;
    tern_dequant(&tm, w);
    for (int64_t i = 0; i < nmax * cols; i++) x[i] = (float)(rnd() % 20001) / 10000.0f - 1.0f;
    act_quant_int8_ref(x, nmax, cols, xq, sx);
    for (int i = 0; i < n_ns; i++) {
        int64_t n = ns[i];
        BenchRow *r = &out[i];
        memset(r, 0, sizeof *r);
        r->rows = rows, r->cols = cols, r->n = n;
        double flops = 2.0 * (double)n * (double)rows * (double)cols;
        double act_f32 = (double)n * (double)cols * 4 + (double)n * (double)rows * 4;
        double bytes[3] = {(double)tern_bytes(&tm) + act_f32,
                           (double)tern_bytes(&tm) + (double)n * (double)cols + (double)n * (double)rows * 4,
                           (double)rows * (double)cols * 4 + act_f32};
        BenchCall c[3];
        double med[3];
        for (int what = 0; what < 3; what++)
            c[what] = (BenchCall){(BenchWhat)what, &tm, w, x, sx, xq, what == B_BLAS ? yb : y, n};
        c[B_TI8].y = yi;
        if (time_calls(c, 3, quick, med, &r->reps) < 0) goto done;
        for (int what = 0; what < 3; what++) {
            r->ms[what] = med[what] * 1e3;
            r->gflops[what] = flops / med[what] * 1e-9;
            r->gbs[what] = bytes[what] / med[what] * 1e-9;
        }
        if (tern_matmul_f32(&tm, x, n, y) < 0) goto done; /* sanity line vs blas (in yb) */
        double dmax = 0, ymax = 0;
        for (int64_t k = 0; k < n * rows; k++) {
            dmax = fmax(dmax, fabs((double)y[k] - yb[k]));
            ymax = fmax(ymax, fabs((double)yb[k]));
        }
        r->max_rel_diff = ymax > 0 ? dmax / ymax : dmax;
        /* the timed outputs (y: tern_f32 just now; yi: tern_i8's last timed call) against the
         * twins, on the first tokens and the last (a wrong kernel had been timed and reported) */
        const int64_t k0 = n < BENCH_CHECK_TOKENS ? n : BENCH_CHECK_TOKENS;
        r->ref_err_f32 = NAN; /* (a row never checked stays NaN) */
        if (tern_check_twins(&tm, w, x, xq, sx, y, yi, 0, k0, BENCH_F32_TOL, &r->ref_err_f32) != 0 ||
            (n > k0 && tern_check_twins(&tm, w, x, xq, sx, y, yi, n - 1, 1, BENCH_F32_TOL, &r->ref_err_f32) != 0)) {
            err_prefix("n=%lld: ", (long long)n);
            goto done;
        }
        if (n == 1) { /* decode: the int8 GEMV alone and sgemv alone, each back to back (codes
                       * or weights cache-resident where they fit, the threads awake, as in a
                       * decode loop), after a warm-up */
            if (time_alone(&c[B_TI8], quick, &r->ms_i8_warm) < 0 || time_alone(&c[B_BLAS], quick, &r->ms_blas_warm) < 0)
                goto done;
        }
        printf("%6lld x %-6lld n=%-5lld| %9.4f %8.1f %7.1f | %9.4f %8.1f %7.1f | %9.4f %8.1f "
               "%7.1f | %6.2fx %6.2fx | %5.0f%% | %.1e\n",
               (long long)rows, (long long)cols, (long long)n, r->ms[0], r->gflops[0], r->gbs[0],
               r->ms[1], r->gflops[1], r->gbs[1], r->ms[2], r->gflops[2], r->gbs[2],
               r->ms[2] / r->ms[0], r->ms[2] / r->ms[1], bw > 0 ? 100 * r->gbs[1] / bw : NAN, r->max_rel_diff);
        if (n == 1)
            printf("%25s int8 alone, back to back: %.4f ms (%.1f GB/s); sgemv alone: %.4f ms (%.1f GB/s); "
                   "x blas %.2fx\n",
                   "", r->ms_i8_warm, bytes[1] / (r->ms_i8_warm * 1e-3) * 1e-9, r->ms_blas_warm,
                   bytes[2] / (r->ms_blas_warm * 1e-3) * 1e-9, r->ms_blas_warm / r->ms_i8_warm);
        fflush(stdout);
    }
    rc = 0;
done:
    tern_free(&tm);
    mem_free(q), mem_free(w), mem_free(x), mem_free(xq), mem_free(sx), mem_free(y), mem_free(yb), mem_free(yi);
    return rc;
}

/* The double field at byte offset off of every row, as dataset path of lg
 * (dv: room for nr values). */
static int put_column(H5Log *lg, const char *path, const BenchRow *rows, int nr, size_t off, double *dv) {
    for (int i = 0; i < nr; i++) dv[i] = *(const double *)((const char *)&rows[i] + off);
    return h5log_f64(lg, path, dv, nr);
}

/* Writes the rows into lg (created before the benchmark ran, so that an
 * unwritable place fails first) and commits it; aborts it on an error. */
static int write_h5(H5Log *lg, const BenchRow *rows, int nr, int quick, double bw, double par_scale, long forks) {
    int64_t *iv = xmalloc((size_t)nr * sizeof *iv);
    double *dv = xmalloc((size_t)nr * sizeof *dv);
    static const char *names[3] = {"tern_f32", "tern_i8", "blas_f32"};
    char commit[64];
    exp_git_commit(commit, sizeof commit);
    int rc = h5log_write_provenance(lg, TERNLAB_VERSION, commit);
    rc = rc ? rc : h5log_attr_str(lg, "/", "experiment", "bench-kernels");
    rc = rc ? rc : h5log_attr_str(lg, "/", "kernel", tern_kernel_name());
    rc = rc ? rc : h5log_attr_str(lg, "/", "blas_core", blas_core_report());
    rc = rc ? rc : h5log_attr_i64(lg, "/", "threads", omp_get_max_threads());
    rc = rc ? rc : h5log_attr_i64(lg, "/", "quick", quick);
    rc = rc ? rc : h5log_attr_f64(lg, "/", "par_scale", par_scale);
    rc = rc ? rc : h5log_attr_i64(lg, "/", "par_forks", forks);
    rc = rc ? rc : h5log_attr_f64(lg, "/", "par_threads_factor", tern_par_threads_factor(omp_get_max_threads()));
    rc = rc ? rc : h5log_attr_str(lg, "/", "cpu", cpu_model_report());
    rc = rc ? rc : h5log_attr_f64(lg, "/", "mem_read_gbs", bw);
    rc = rc ? rc : h5log_attr_str(lg, "/", "note",
                                  "blas_f32 = cblas_sgemv (n=1) / cblas_sgemm (n>1) on the dequantised "
                                  "f32 matrix (the dense reference path calls sgemm at n=1 too, ~2.4x "
                                  "slower than sgemv on the 2-core machine). Times are medians of reps "
                                  "interleaved rounds after a warm-up. *_frac_mem_bw = GB/s over "
                                  "mem_read_gbs, the read bandwidth measured in the same run (above 1: "
                                  "the weights stayed cache-resident). tern_f32_ref_err: the worst "
                                  "|tern_f32 - tern_matmul_f32_ref| / sum|s q x| on the first 4 tokens "
                                  "and the last; tern_i8 was bit-identical to tern_matmul_i8_ref there "
                                  "(a mismatch fails the run).");
    for (int f = 0; f < 3 && !rc; f++) {
        int64_t v;
        for (int i = 0; i < nr; i++) {
            v = f == 0 ? rows[i].rows : f == 1 ? rows[i].cols : rows[i].n;
            iv[i] = v;
        }
        rc = h5log_i64(lg, f == 0 ? "/bench/rows" : f == 1 ? "/bench/cols" : "/bench/n", iv, nr);
    }
    for (int k = 0; k < 3 && !rc; k++) {
        char p[96];
        for (int m = 0; m < 3 && !rc; m++) {
            for (int i = 0; i < nr; i++)
                dv[i] = m == 0 ? rows[i].ms[k] : m == 1 ? rows[i].gflops[k] : rows[i].gbs[k];
            snprintf(p, sizeof p, "/bench/%s_%s", names[k], m == 0 ? "ms" : m == 1 ? "gflops" : "gbs");
            rc = h5log_f64(lg, p, dv, nr);
        }
    }
    for (int k = 0; k < 3 && !rc; k++) {
        char p[96];
        for (int i = 0; i < nr; i++) dv[i] = bw > 0 ? rows[i].gbs[k] / bw : NAN;
        snprintf(p, sizeof p, "/bench/%s_frac_mem_bw", names[k]);
        rc = h5log_f64(lg, p, dv, nr);
    }
    rc = rc ? rc : put_column(lg, "/bench/tern_i8_warm_ms", rows, nr, offsetof(BenchRow, ms_i8_warm), dv);
    rc = rc ? rc : put_column(lg, "/bench/blas_f32_warm_ms", rows, nr, offsetof(BenchRow, ms_blas_warm), dv);
    if (!rc) {
        for (int i = 0; i < nr; i++) dv[i] = rows[i].ms_i8_warm > 0 ? rows[i].ms_blas_warm / rows[i].ms_i8_warm : 0;
        rc = h5log_f64(lg, "/bench/speedup_i8_warm_vs_blas_warm", dv, nr);
    }
    rc = rc ? rc : put_column(lg, "/bench/tern_f32_ref_err", rows, nr, offsetof(BenchRow, ref_err_f32), dv);
    rc = rc ? rc
            : put_column(lg, "/bench/tern_f32_vs_blas_max_rel_diff", rows, nr, offsetof(BenchRow, max_rel_diff), dv);
    if (!rc) {
        for (int i = 0; i < nr; i++) iv[i] = rows[i].reps;
        rc = h5log_i64(lg, "/bench/reps", iv, nr);
    }
    for (int k = 0; k < 2 && !rc; k++) {
        for (int i = 0; i < nr; i++) dv[i] = rows[i].ms[2] / rows[i].ms[k];
        rc = h5log_f64(lg, k == 0 ? "/bench/speedup_f32_vs_blas" : "/bench/speedup_i8_vs_blas", dv, nr);
    }
    free(iv);
    free(dv);
    if (rc) {
        h5log_abort(lg);
        return -1;
    }
    return h5log_commit(lg);
}

/* Batches per shape: the big shapes at decode / small batch / prefill; the
 * fixture shapes (bitnet-tiny, llama-tiny: hidden 256, MLP 768) also at
 * n = 2048, the tokens per call of a whole-model ppl run (8 windows x 256). */
static const int64_t ns_big[] = {1, 8, 512}, ns_big_quick[] = {1, 8};
static const int64_t ns_fix[] = {1, 8, 512, 2048}, ns_fix_quick[] = {1, 8, 2048};

int cmd_bench(int argc, char **argv) {
    int quick = 0, fixture_only = 0;
    double par_scale = 1.0;
    const char *out = NULL;
    H5Log *lg = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (strcmp(argv[i], "--fixture") == 0) fixture_only = 1;
        else if (strcmp(argv[i], "--par-scale") == 0) {
            /* the kernels' fork thresholds scaled (tern_par_scale): measures them on a
             * machine of other cores than the 2-vCPU one they were set on */
            const char *v = i + 1 < argc ? argv[++i] : "";
            if (str_to_f64(v, &par_scale) != 0 || par_scale < 0) {
                fprintf(stderr, "ternlab bench: --par-scale '%s': expected a finite number >= 0 (0: every "
                                "parallel region forks; 1: the built-in thresholds)\n", v);
                h5log_abort(lg);
                return 2;
            }
        }
        else if (strcmp(argv[i], "--out") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ternlab bench: --out needs a value (a FILE.h5)\n");
                h5log_abort(lg);
                return 2;
            }
            out = argv[++i];
            /* what the HDF5 writer would refuse, refused before the benchmark runs */
            if (!*out) {
                fprintf(stderr, "ternlab bench: --out has an empty value\n");
                h5log_abort(lg);
                return 2;
            }
            if (exp_check_out(out) != 0) {
                fprintf(stderr, "ternlab bench: %s\n", err_msg());
                h5log_abort(lg);
                return 1;
            }
            if (lg) {
                fprintf(stderr, "ternlab bench: --out is given more than once\n");
                h5log_abort(lg);
                return 2;
            }
            /* the temporary made now: a place it cannot be written fails before the run */
            if (!(lg = h5log_create(out))) {
                fprintf(stderr, "ternlab bench: %s\n", err_msg());
                return 1;
            }
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("ternlab bench [--quick] [--fixture] [--par-scale S] [--out FILE.h5]\n"
                   "Ternary GEMV/GEMM (f32 and int8 activations) vs OpenBLAS sgemv/sgemm on the\n"
                   "same matrix, at 4096x14336 and 14336x4096 for n = 1, 8, 512 tokens, and at the\n"
                   "fixture shapes (rows x cols: 256x256, 128x256, 768x256, 256x768) for n = 1, 8,\n"
                   "512, 2048 (2048 = tokens per call of a ppl run). Medians after warm-up; the\n"
                   "'x blas' columns are OpenBLAS time / ternary time (> 1: ternary faster).\n"
                   "--quick: 4096x14336 at n = 1, 8 and the fixture shapes at n = 1, 8, 2048,\n"
                   "shorter timing. --fixture: the fixture shapes only. Kernel variant:\n"
                   "TERNLAB_KERNEL.  CPU only: the GPU kernels are make bench-gpu, the GPU end\n"
                   "to end ternlab bench-e2e.\n"
                   "--par-scale S: the kernels' thresholds for forking their OpenMP team scaled\n"
                   "by S (default 1; 0: every region that can fork does; a large S: none does) on\n"
                   "top of their factor for the team's size; recorded in the run file as par_scale, with\n"
                   "par_threads_factor and par_forks (the regions that forked).\n");
            h5log_abort(lg);
            return 0;
        } else if (strcmp(argv[i], "--device") == 0) {
            /* (the GPU kernels have their own benchmark; the main usage had listed bench
             * among the commands --device cuda runs) */
            fprintf(stderr, "ternlab bench: the CPU kernel benchmark takes no --device; GPU kernels: "
                            "make bench-gpu, end to end: ternlab bench-e2e\n");
            h5log_abort(lg);
            return 2;
        } else if (argv[i][0] != '-') {
            fprintf(stderr, "ternlab bench: unexpected argument '%s' (see ternlab bench --help)\n", argv[i]);
            h5log_abort(lg);
            return 2;
        } else {
            fprintf(stderr, "ternlab bench: unknown option '%s' (see ternlab bench --help)\n", argv[i]);
            h5log_abort(lg);
            return 2;
        }
    }
    static const int64_t shapes[][2] = {{4096, 14336}, {14336, 4096}, {256, 256},
                                        {128, 256},    {768, 256},    {256, 768}};
    const int n_shapes = 6, n_big = 2;
    const int max_ns = 4;
    BenchRow *res = xcalloc((size_t)(n_shapes * max_ns), sizeof *res);
    tern_par_scale(par_scale);
    const long forks0 = tern_par_forks();
    printf("ternary kernel: %s   OpenBLAS core: %s   threads: %d   fork thresholds x %g (x %.3g for the threads)\n",
           tern_kernel_name(), blas_core_report(), omp_get_max_threads(), par_scale,
           tern_par_threads_factor(omp_get_max_threads()));
    const double bw = read_bandwidth_gbs(quick);
    printf("memory read bandwidth (same run, %d MiB, median of 5): %.1f GB/s; %%bw: the i8 kernel's GB/s over it\n",
           quick ? 256 : 512, bw);
    printf("%-22s | %-27s | %-27s | %-27s | %-15s | %-6s | %s\n", "shape (rows x cols)",
           "tern f32: ms GFLOP/s GB/s", "tern i8: ms GFLOP/s GB/s", "OpenBLAS f32: ms GFLOP/s GB/s",
           "x blas: f32 i8", "i8 %bw", "f32 vs blas");
    int nr = 0;
    for (int s = 0; s < n_shapes; s++) {
        const int big = s < n_big;
        if (big && fixture_only) continue;
        if (quick && s == 1) continue;
        const int64_t *ns = big ? (quick ? ns_big_quick : ns_big) : (quick ? ns_fix_quick : ns_fix);
        int n_ns = big ? (quick ? 2 : 3) : (quick ? 3 : 4);
        if (bench_shape(shapes[s][0], shapes[s][1], ns, n_ns, quick, bw, res + nr) < 0) {
            fprintf(stderr, "ternlab bench: %s\n", err_msg());
            free(res);
            h5log_abort(lg);
            return 1;
        }
        nr += n_ns;
    }
    const long forks = tern_par_forks() - forks0;
    printf("parallel regions forked by the ternary kernels: %ld\n", forks);
    int rc = 0;
    if (lg && write_h5(lg, res, nr, quick, bw, par_scale, forks) < 0) {
        fprintf(stderr, "ternlab bench: %s\n", err_msg());
        rc = 1;
    } else if (out) {
        printf("wrote %s\n", out);
    }
    free(res);
    return rc;
}
