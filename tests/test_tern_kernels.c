/* Ternary CPU kernels: every variant against tern_matmul_*_ref on random
 * inputs of awkward shapes for every group kind (golden check 4), sentinels
 * and guard pages around every buffer a kernel touches (golden check 2),
 * dispatch and TERNLAB_KERNEL. */
#include "test.h"

#include "core/err.h"
#include "core/mem.h"
#include "cpu/tern_kernels.h"
#include "ternary_format.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* f32 activations: fast kernels sum in another order (vector lanes, fused
 * multiply-add); reordering n terms moves the result by ~sqrt(n)*2^-24 of
 * sum|terms| (about 2e-6 at n = 1000), so 1e-5 of sum|s*q*x| is a safe bound
 * that still catches any wrong or missing term. */
#define TOL_F32 1e-5

static uint64_t st = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return (uint32_t)(st >> 20);
}
static float rndf(void) { return (float)(rnd() % 2000001) / 1000000.0f - 1.0f; }

static const int64_t shapes[][3] = { /* rows, cols, n */
    {1, 1, 1}, {3, 5, 2}, {5, 256, 1}, {37, 300, 3}, {8, 512, 4}, {130, 523, 5},
    {67, 1000, 9}, {4, 63, 7}, {33, 129, 1}, {300, 1000, 5},
    {9, 4500, 5}, {70, 8300, 1}, /* several column chunks of the blocked kernels */
    {17, 523, 61}, {5, 70, 48}, {40, 300, 50}, /* n >= 4: the f32 GEMM path (panels) */
    /* n >= 16: the int8 GEMM path (32-row panels x 12-token tiles): rows and
     * tokens not multiples of 32 / 12, columns not of 4 / 64 / 256 */
    {1, 3, 16}, {33, 4353, 17}, {97, 1000, 29}, {64, 256, 24}, {130, 129, 37},
    /* f32 table-lookup GEMM (one scale per row, n >= 4): more rows than one
     * work item (1024), chunks of 1, 2 and 3 blocks (cols 1000: 3 + 1) */
    {1100, 300, 9}, {1037, 1000, 4},
    /* int8 GEMV (n = 1): more than GEMV_FOLD (4096) blocks in a row */
    {5, 1050000, 1}
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static void random_matrix(int64_t rows, int64_t cols, QuantGroup g, TernaryMatrix *m) {
    int8_t *q = xmalloc((size_t)(rows * cols));
    for (int64_t i = 0; i < rows * cols; i++) q[i] = (int8_t)((int)(rnd() % 3) - 1);
    int64_t ns = tern_n_scales(g, rows, cols);
    float *s = xmalloc((size_t)ns * sizeof *s);
    for (int64_t i = 0; i < ns; i++) s[i] = 0.01f + fabsf(rndf());
    if (tern_from_codes(q, s, rows, cols, g, DT_F32, m) < 0) test_fail(__FILE__, __LINE__, "%s", err_msg());
    free(q);
    free(s);
}

typedef int (*f32_fn)(const TernaryMatrix *, const float *, int64_t, float *);
typedef int (*i8_fn)(const TernaryMatrix *, const int8_t *, const float *, int64_t, float *);
static const f32_fn f32_fns[TK_COUNT] = {tern_matmul_f32_ref, tern_matmul_f32_generic,
                                         tern_matmul_f32_avx2, tern_matmul_f32_avx512};
static const i8_fn i8_fns[TK_COUNT] = {tern_matmul_i8_ref, tern_matmul_i8_generic,
                                       tern_matmul_i8_avx2, tern_matmul_i8_avx512};

/* sum |s*q*x| per output: the scale of the rounding error */
static void magnitude(const TernaryMatrix *m, const float *x, int64_t n, double *mag) {
    float *w = xmalloc((size_t)(m->rows * m->cols) * sizeof *w);
    tern_dequant(m, w);
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = 0; r < m->rows; r++) {
            double a = 0;
            for (int64_t k = 0; k < m->cols; k++) a += fabs((double)w[r * m->cols + k] * x[t * m->cols + k]);
            mag[t * m->rows + r] = a;
        }
    free(w);
}

TEST(tern_kernels_match_ref) {
    int tested = 0;
    for (int si = 0; si < N_SHAPES; si++)
        for (int g = 0; g < QG_COUNT; g++) {
            int64_t rows = shapes[si][0], cols = shapes[si][1], n = shapes[si][2];
            TernaryMatrix m;
            random_matrix(rows, cols, (QuantGroup)g, &m);
            REQUIRE(m.codes);
            float *x = xmalloc((size_t)(n * cols) * sizeof *x);
            int8_t *xq = xmalloc((size_t)(n * cols));
            float *sx = xmalloc((size_t)n * sizeof *sx);
            for (int64_t i = 0; i < n * cols; i++) {
                x[i] = rndf();
                xq[i] = (int8_t)((int)(rnd() % 256) - 128); /* full range, -128 included */
            }
            for (int64_t t = 0; t < n; t++) sx[t] = 1.0f + (float)t * 3.7f;
            float *yr = xmalloc((size_t)(n * rows) * sizeof *yr), *yf = xmalloc((size_t)(n * rows) * sizeof *yf);
            float *yri = xmalloc((size_t)(n * rows) * sizeof *yri);
            double *mag = xmalloc((size_t)(n * rows) * sizeof *mag);
            magnitude(&m, x, n, mag);
            REQUIRE(tern_matmul_f32_ref(&m, x, n, yr) == 0);
            REQUIRE(tern_matmul_i8_ref(&m, xq, sx, n, yri) == 0);
            /* each kernel as it chooses, then with every region forking its
             * team (the shapes are below the thresholds: threads checked) */
            for (int kf = 2 * TK_GENERIC; kf < 2 * TK_COUNT; kf++) {
                const int k = kf / 2, forced = kf % 2;
                if (!tern_kernel_supported((TernKernel)k)) continue;
                tern_par_scale(forced ? 0.0 : 1.0);
                char kn[32];
                snprintf(kn, sizeof kn, "%s%s", tern_kernel_short_name((TernKernel)k),
                         forced ? " (threads)" : "");
                memset(yf, 0xff, (size_t)(n * rows) * sizeof *yf); /* NaN: unwritten shows */
                REQUIRE(f32_fns[k](&m, x, n, yf) == 0);
                int bad = 0;
                double worst = 0;
                for (int64_t i = 0; i < n * rows; i++) {
                    double e = fabs((double)yf[i] - yr[i]) / (mag[i] > 1e-30 ? mag[i] : 1e-30);
                    if (!(e <= TOL_F32)) bad++;
                    if (e > worst) worst = e;
                }
                CHECK_MSG(bad == 0, "f32 %s %lldx%lld n=%lld group=%s: %d outputs off (worst %.3g)",
                          kn, (long long)rows, (long long)cols, (long long)n,
                          quant_group_name((QuantGroup)g), bad, worst);
                memset(yf, 0xff, (size_t)(n * rows) * sizeof *yf);
                REQUIRE(i8_fns[k](&m, xq, sx, n, yf) == 0);
                CHECK_MSG(memcmp(yf, yri, (size_t)(n * rows) * sizeof *yf) == 0,
                          "int8 %s %lldx%lld n=%lld group=%s: not bit-identical to the reference",
                          kn, (long long)rows, (long long)cols, (long long)n,
                          quant_group_name((QuantGroup)g));
                tested++;
            }
            tern_par_scale(1.0);
            free(x), free(xq), free(sx), free(yr), free(yf), free(yri), free(mag);
            tern_free(&m);
        }
    CHECK(tested > 0);
}

/* The f32 table-lookup GEMM takes one scale per row only: other groups are
 * an error, never a silent wrong answer (the dispatcher sends them to the
 * panel GEMM, tested above). */
TEST(tern_kernels_lut_rejects_groups) {
    if (!tern_kernel_supported(TK_AVX512)) return;
    TernaryMatrix m;
    random_matrix(5, 300, QG_32, &m);
    float x[4 * 300], y[4 * 5];
    for (int i = 0; i < 4 * 300; i++) x[i] = rndf();
    CHECK(tern_matmul_f32_lut_avx512(&m, x, 4, y) < 0 && strstr(err_msg(), "one scale per row"));
    tern_free(&m);
    random_matrix(5, 300, QG_ROW, &m);
    CHECK(tern_matmul_f32_lut_avx512(&m, x, 4, y) == 0);
    /* groups of 32 whose scales are equal within each row are the same matrix
     * as its group=row form: the AVX-512 kernel (the lookup one from 4 tokens)
     * gives the same bits (called directly: TERNLAB_KERNEL may force another,
     * which sums group by group) */
    TernaryMatrix g;
    random_matrix(5, 300, QG_32, &g);
    memcpy(g.codes, m.codes, (size_t)(5 * m.row_bytes));
    for (int64_t r = 0; r < 5; r++)
        for (int64_t k = 0; k < g.n_groups; k++) g.scales[r * g.scale_stride + k] = m.scales[r * m.scale_stride];
    CHECK(tern_rows_one_scale(&g));
    float y2[4 * 5], yr[4 * 5];
    double mag[4 * 5];
    REQUIRE(tern_matmul_f32_avx512(&m, x, 4, y) == 0 && tern_matmul_f32_avx512(&g, x, 4, y2) == 0);
    CHECK(memcmp(y, y2, sizeof y) == 0);
    REQUIRE(tern_matmul_f32_ref(&g, x, 4, yr) == 0);
    magnitude(&g, x, 4, mag);
    for (int i = 0; i < 4 * 5; i++) CHECK(fabs((double)y2[i] - yr[i]) <= TOL_F32 * mag[i]);
    g.scales[g.scale_stride + 3] *= 2.0f; /* one group of row 1 differs */
    CHECK(!tern_rows_one_scale(&g));
    tern_free(&g);
    tern_free(&m);
}

/* The int8 reference itself against a hand-worked case: W (2, 3) row scales
 * 0.5 and 2; q row0 = [1, -1, 0], row1 = [1, 1, 1]; xq = [10, 3, -7], sx = 4:
 * row0: 0.5*(10-3)/4 = 0.875; row1: 2*(10+3-7)/4 = 3. */
TEST(tern_kernels_i8_ref_hand) {
    const int8_t q[6] = {1, -1, 0, 1, 1, 1};
    const float s[2] = {0.5f, 2.0f};
    TernaryMatrix m;
    REQUIRE(tern_from_codes(q, s, 2, 3, QG_ROW, DT_F32, &m) == 0);
    const int8_t xq[3] = {10, 3, -7};
    const float sx = 4.0f, x[3] = {2.5f, 0.75f, -1.75f};
    float y[2];
    REQUIRE(tern_matmul_i8_ref(&m, xq, &sx, 1, y) == 0);
    CHECK(y[0] == 0.875f && y[1] == 3.0f);
    REQUIRE(tern_matmul_f32_ref(&m, x, 1, y) == 0); /* same numbers as x = xq/sx */
    CHECK(y[0] == 0.875f && y[1] == 3.0f);
    tern_free(&m);
}

/* ---- Golden check 2: sentinels and guard pages -------------------------- */

/* A buffer of `size` bytes that ends exactly at a PROT_NONE page: any read or
 * write past its end faults (the test runner counts the crash as a failure),
 * and SENT bytes just before it catch writes before the start. */
typedef struct {
    uint8_t *map;
    size_t map_len;
    uint8_t *p;
} Guarded;
#define SENT 0x5A
#define SENT_N 64

static uint8_t *guarded_alloc(Guarded *g, size_t size) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t body = (size + SENT_N + pg - 1) / pg * pg;
    g->map_len = body + pg;
    g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED) return NULL;
    mprotect(g->map + body, pg, PROT_NONE);
    g->p = g->map + body - size;
    memset(g->map, SENT, body - size);
    return g->p;
}
static int guarded_ok(const Guarded *g) {
    for (int i = 1; i <= SENT_N; i++)
        if (g->p[-i] != SENT) return 0;
    return 1;
}
static void guarded_free(Guarded *g) { munmap(g->map, g->map_len); }

TEST(tern_kernels_guard_pages) {
    /* rows not a multiple of 4/32/128, columns not a multiple of 4/32/128/256 */
    static const int64_t gs[][3] = {{3, 5, 1}, {33, 300, 2}, {131, 257, 8}, {5, 512, 3}, {2, 1000, 5}, {3, 4353, 2}, {19, 300, 49}, {3, 4353, 20}, {35, 61, 16}};
    for (size_t si = 0; si < sizeof gs / sizeof gs[0]; si++)
        for (int g = 0; g < QG_COUNT; g++) {
            int64_t rows = gs[si][0], cols = gs[si][1], n = gs[si][2];
            TernaryMatrix src;
            random_matrix(rows, cols, (QuantGroup)g, &src);
            REQUIRE(src.codes);
            Guarded gc, gsc, gx, gxq, gsx, gy;
            size_t cb = (size_t)(rows * src.row_bytes), sb = (size_t)src.n_scales * sizeof(float);
            TernaryMatrix m = src;
            m.codes = guarded_alloc(&gc, cb);
            m.scales = (float *)guarded_alloc(&gsc, sb);
            float *x = (float *)guarded_alloc(&gx, (size_t)(n * cols) * sizeof(float));
            int8_t *xq = (int8_t *)guarded_alloc(&gxq, (size_t)(n * cols));
            float *sx = (float *)guarded_alloc(&gsx, (size_t)n * sizeof(float));
            float *y = (float *)guarded_alloc(&gy, (size_t)(n * rows) * sizeof(float));
            REQUIRE(m.codes && m.scales && x && xq && sx && y);
            /* repack into the guarded buffer: the packer writes exactly cb bytes */
            int8_t *q = xmalloc((size_t)(rows * cols));
            tern_unpack_codes(&src, q);
            REQUIRE(tern_pack_codes(q, rows, cols, m.codes) == 0);
            CHECK(memcmp(m.codes, src.codes, cb) == 0);
            memcpy(m.scales, src.scales, sb);
            for (int64_t i = 0; i < n * cols; i++) {
                x[i] = rndf();
                xq[i] = (int8_t)((int)(rnd() % 255) - 127);
            }
            for (int64_t t = 0; t < n; t++) sx[t] = 2.0f;
            for (int k = 0; k < TK_COUNT; k++) {
                if (!tern_kernel_supported((TernKernel)k)) continue;
                REQUIRE(f32_fns[k](&m, x, n, y) == 0);
                REQUIRE(i8_fns[k](&m, xq, sx, n, y) == 0);
                CHECK_MSG(guarded_ok(&gc) && guarded_ok(&gsc) && guarded_ok(&gx) &&
                              guarded_ok(&gxq) && guarded_ok(&gsx) && guarded_ok(&gy),
                          "%s %lldx%lld group=%s: sentinel before a buffer changed",
                          tern_kernel_short_name((TernKernel)k), (long long)rows, (long long)cols,
                          quant_group_name((QuantGroup)g));
            }
            CHECK(memcmp(m.codes, src.codes, cb) == 0); /* kernels never write weights */
            free(q);
            guarded_free(&gc), guarded_free(&gsc), guarded_free(&gx), guarded_free(&gxq);
            guarded_free(&gsx), guarded_free(&gy);
            tern_free(&src);
        }
}

/* tern_act_quant_i8 (AVX-512) against act_quant_int8_ref: bit-identical codes
 * and scales on awkward widths, an all-zero row (scale from the 1e-5 floor),
 * exact .5 ties (round half to even), huge values, -0.0, NaN (quiet and
 * signalling) and inf. */
TEST(tern_act_quant_matches_ref) {
    static const int64_t widths[] = {1, 3, 15, 16, 17, 255, 300, 1000, 4353};
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
        const int64_t cols = widths[wi], n = 8;
        float *x = xmalloc((size_t)(n * cols) * sizeof *x), *s1 = xmalloc(n * sizeof *s1), *s2 = xmalloc(n * sizeof *s2);
        int8_t *q1 = xmalloc((size_t)(n * cols)), *q2 = xmalloc((size_t)(n * cols));
        for (int64_t i = 0; i < n * cols; i++) x[i] = rndf();
        for (int64_t k = 0; k < cols; k++) {
            x[1 * cols + k] = 0.0f;                                 /* zero row */
            x[2 * cols + k] = (float)((int)(rnd() % 255) - 127) + 0.5f; /* ties */
            x[3 * cols + k] = rndf() * 3e30f;                       /* huge */
        }
        x[2 * cols] = 127.0f; /* max 127: scale 1, x*s keeps the .5 ties */
        x[4 * cols + cols / 2] = -0.0f;
        x[5 * cols + cols / 3] = NAN;
        x[6 * cols + cols / 3] = INFINITY;
        /* a signalling NaN after the row's largest value (libm's fmaxf returns NaN for
         * one, so the reference's running max had restarted after it: scale 63.5 where
         * the AVX-512 kernel, and every other NaN, gives 1.27) */
        const uint32_t snan_bits = 0x7f800001u;
        x[7 * cols] = 100.0f;
        memcpy(&x[7 * cols + cols / 2], &snan_bits, sizeof snan_bits);
        act_quant_int8_ref(x, n, cols, q1, s1);
        if (tern_kernel_supported(TK_AVX512)) {
            memset(q2, 0x33, (size_t)(n * cols));
            tern_act_quant_i8_avx512(x, n, cols, q2, s2);
            CHECK_MSG(memcmp(q1, q2, (size_t)(n * cols)) == 0 && memcmp(s1, s2, n * sizeof *s1) == 0,
                      "act quant avx512 cols=%lld: not bit-identical to act_quant_int8_ref", (long long)cols);
        }
        tern_act_quant_i8(x, n, cols, q2, s2); /* the dispatcher, whatever it picks */
        CHECK(memcmp(q1, q2, (size_t)(n * cols)) == 0 && memcmp(s1, s2, n * sizeof *s1) == 0);
        free(x), free(s1), free(s2), free(q1), free(q2);
    }
}

/* ---- Dispatch ------------------------------------------------------------ */

TEST(tern_kernels_dispatch) {
    TernKernel k;
    unsetenv("TERNLAB_KERNEL");
    REQUIRE(tern_kernel_choose(&k) == 0);
    CHECK(tern_kernel_supported(k));
    CHECK(k != TK_REF);
    CHECK(strncmp(tern_kernel_name(), "gemm_ternary_", 13) == 0);
    if (tern_kernel_supported(TK_AVX512)) CHECK(strcmp(tern_kernel_name(), "gemm_ternary_avx512_vnni") == 0);
    setenv("TERNLAB_KERNEL", "generic", 1);
    REQUIRE(tern_kernel_choose(&k) == 0);
    CHECK(k == TK_GENERIC && strcmp(tern_kernel_name(), "gemm_ternary_generic") == 0);
    setenv("TERNLAB_KERNEL", "ref", 1);
    REQUIRE(tern_kernel_choose(&k) == 0);
    CHECK(k == TK_REF);
    setenv("TERNLAB_KERNEL", "neon", 1);
    CHECK(tern_kernel_choose(&k) < 0 && strstr(err_msg(), "avx512"));
    CHECK(strcmp(tern_kernel_name(), "unavailable") == 0);
    /* an error from the dispatcher, not a silent fallback */
    TernaryMatrix m;
    const int8_t q[1] = {1};
    const float s[1] = {1}, x[1] = {1};
    float y[1];
    REQUIRE(tern_from_codes(q, s, 1, 1, QG_TENSOR, DT_F32, &m) == 0);
    CHECK(tern_matmul_f32(&m, x, 1, y) < 0);
    unsetenv("TERNLAB_KERNEL");
    CHECK(tern_matmul_f32(&m, x, 1, y) == 0 && y[0] == 1.0f);
    tern_free(&m);
}

/* When the kernels fork their OpenMP team (tern_par): not for the fixture
 * shapes at a few tokens, where waking the sleeping threads cost ~10x the
 * work (768x256 at n = 8: 13 us on one thread, 113 us on two); yes above the
 * thresholds; every region when the scale is 0.  Counted through
 * tern_par_forks, on every kernel this machine has. */
TEST(tern_kernels_fork_rule) {
    /* the table below is for a team of 2 (the machine the thresholds were set on) */
    const int threads = omp_get_max_threads();
    omp_set_num_threads(2);
    CHECK(!tern_par(TERN_PAR_WORK, TERN_PAR_WORK) && tern_par(TERN_PAR_WORK + 1, TERN_PAR_WORK));
    /* a team of 16 forks from a quarter of the thresholds (measured on a 16-core Xeon),
     * between 2 and 16 a factor in between, falling with the team */
    omp_set_num_threads(16);
    CHECK(!tern_par(TERN_PAR_WORK / 4, TERN_PAR_WORK) && tern_par(TERN_PAR_WORK / 4 + 1, TERN_PAR_WORK));
    omp_set_num_threads(2);
    CHECK(tern_par_threads_factor(1) == 1.0 && tern_par_threads_factor(2) == 1.0 &&
          tern_par_threads_factor(16) == 0.25 && tern_par_threads_factor(128) == 0.25);
    for (int t = 3; t <= 16; t++)
        CHECK_MSG(tern_par_threads_factor(t) < tern_par_threads_factor(t - 1) && tern_par_threads_factor(t) >= 0.25,
                  "%d threads: factor %g after %g", t, tern_par_threads_factor(t), tern_par_threads_factor(t - 1));
    CHECK(TERN_PAR_WORK_I8_GEMM > TERN_PAR_WORK);
    static const int64_t cases[][4] = { /* rows, cols, n, fork expected at scale 1 */
        {768, 256, 8, 0}, {256, 768, 8, 0}, {768, 256, 16, 0}, {2048, 2048, 1, 0},
        {4096, 4096, 1, 1}, {1100, 1000, 48, 1}};
    for (int k = TK_GENERIC; k < TK_COUNT; k++) {
        if (!tern_kernel_supported((TernKernel)k)) continue;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const int64_t rows = cases[c][0], cols = cases[c][1], n = cases[c][2];
            TernaryMatrix m;
            random_matrix(rows, cols, QG_TENSOR, &m);
            float *x = xmalloc((size_t)(n * cols) * sizeof *x), *sx = xmalloc((size_t)n * sizeof *sx);
            float *y = xmalloc((size_t)(n * rows) * sizeof *y);
            int8_t *xq = xmalloc((size_t)(n * cols));
            for (int64_t i = 0; i < n * cols; i++) x[i] = rndf();
            act_quant_int8_ref(x, n, cols, xq, sx);
            for (int scale = 1; scale >= 0; scale--) {
                tern_par_scale(scale);
                for (int f = 0; f < 2; f++) {
                    long before = tern_par_forks();
                    REQUIRE((f ? i8_fns[k](&m, xq, sx, n, y) : f32_fns[k](&m, x, n, y)) == 0);
                    int forked = tern_par_forks() > before;
                    CHECK_MSG(forked == (scale ? (int)cases[c][3] : 1),
                              "%s %s %lldx%lld n=%lld scale %d: %s", tern_kernel_short_name((TernKernel)k),
                              f ? "int8" : "f32", (long long)rows, (long long)cols, (long long)n, scale,
                              forked ? "forked" : "did not fork");
                }
            }
            tern_par_scale(1.0);
            free(x), free(sx), free(y), free(xq);
            tern_free(&m);
        }
    }
    omp_set_num_threads(threads);
}

/* The check ternlab bench runs on every timed kernel (tern_check_twins):
 * quiet on the dispatched kernels' own outputs, and a wrong output in the
 * checked tokens — one int8 result one ulp off, one f32 result twice the
 * bound off — is an error naming it; tokens outside the range are not read. */
TEST(tern_check_twins_catches_wrong_outputs) {
    const int64_t rows = 37, cols = 300, n = 5;
    TernaryMatrix m;
    random_matrix(rows, cols, QG_ROW, &m);
    float *w = xmalloc((size_t)(rows * cols) * sizeof *w), *x = xmalloc((size_t)(n * cols) * sizeof *x);
    float *sx = xmalloc((size_t)n * sizeof *sx), *yf = xmalloc((size_t)(n * rows) * sizeof *yf);
    float *yi = xmalloc((size_t)(n * rows) * sizeof *yi);
    int8_t *xq = xmalloc((size_t)(n * cols));
    double *mag = xmalloc((size_t)(n * rows) * sizeof *mag);
    tern_dequant(&m, w);
    for (int64_t i = 0; i < n * cols; i++) x[i] = rndf();
    act_quant_int8_ref(x, n, cols, xq, sx);
    magnitude(&m, x, n, mag);
    REQUIRE(tern_matmul_f32(&m, x, n, yf) == 0 && tern_matmul_i8(&m, xq, sx, n, yi) == 0);
    double err = NAN;
    CHECK_MSG(tern_check_twins(&m, w, x, xq, sx, yf, yi, 0, n, 1e-5, &err) == 0, "%s", err_msg());
    CHECK(err >= 0 && err <= 1e-5);
    const int64_t at = 3 * rows + 17; /* token 3, row 17 */
    const float keep_i = yi[at], keep_f = yf[at];
    yi[at] = nextafterf(yi[at], INFINITY);
    err = NAN;
    CHECK(tern_check_twins(&m, w, x, xq, sx, yf, yi, 0, n, 1e-5, &err) < 0 &&
          strstr(err_msg(), "not bit-identical") && strstr(err_msg(), "tokens 0..4"));
    CHECK(tern_check_twins(&m, w, x, xq, sx, yf, yi, 4, 1, 1e-5, &err) == 0); /* token 4 only */
    yi[at] = keep_i;
    yf[at] = (float)(yf[at] + 2e-5 * mag[at]);
    err = NAN;
    CHECK(tern_check_twins(&m, w, x, xq, sx, yf, yi, 0, n, 1e-5, &err) < 0 &&
          strstr(err_msg(), "token 3 row 17") && strstr(err_msg(), "off its *_ref twin"));
    CHECK(err > 1e-5);
    yf[at] = keep_f;
    CHECK(tern_check_twins(&m, w, x, xq, sx, yf, yi, 0, n, 1e-5, &err) == 0);
    free(w), free(x), free(sx), free(yf), free(yi), free(xq), free(mag);
    tern_free(&m);
}

/* A matrix whose packed codes do not start on the layout's 64-byte base is
 * refused by every kernel with a message (the AVX-512 int8 GEMV's aligned row
 * loads had ended in SIGSEGV at a 16-byte offset); the aligned one runs. */
TEST(tern_kernels_refuse_misaligned_codes) {
    TernaryMatrix m;
    random_matrix(8, 300, QG_ROW, &m);
    uint8_t *raw = mem_alloc((size_t)(8 * m.row_bytes) + TERN_ALIGN, "misaligned codes");
    REQUIRE(raw);
    uint8_t *aligned = m.codes;
    float x[4 * 300], y[4 * 8], sx[4] = {1.0f, 0.5f, 2.0f, 1.0f};
    int8_t xq[4 * 300];
    for (int i = 0; i < 4 * 300; i++) x[i] = rndf(), xq[i] = (int8_t)(rnd() % 255 - 127);
    for (int off = 0; off <= 16; off += 16) {
        memcpy(raw + off, aligned, (size_t)(8 * m.row_bytes));
        m.codes = raw + off;
        for (int k = TK_REF; k < TK_COUNT; k++) {
            if (!tern_kernel_supported((TernKernel)k)) continue;
            REQUIRE(tern_kernel_force((TernKernel)k) == 0);
            for (int64_t n = 1; n <= 4; n += 3) {
                const int rf = tern_matmul_f32(&m, x, n, y), ri = tern_matmul_i8(&m, xq, sx, n, y);
                if (off == 0) CHECK_MSG(rf == 0 && ri == 0, "%s: aligned refused: %s",
                                        tern_kernel_short_name((TernKernel)k), err_msg());
                else CHECK_MSG(rf < 0 && ri < 0 && strstr(err_msg(), "not 64-byte aligned"), "%s n=%lld: %d %d %s",
                               tern_kernel_short_name((TernKernel)k), (long long)n, rf, ri, err_msg());
            }
        }
    }
    if (tern_kernel_supported(TK_AVX512))
        CHECK(tern_matmul_f32_lut_avx512(&m, x, 4, y) < 0 && strstr(err_msg(), "not 64-byte aligned"));
    m.codes = aligned;
    mem_free(raw);
    tern_free(&m);
}

/* The dense bf16 twin (tern_dense_bf16_ref, the GPU LM-head GEMV's oracle) on
 * a hand case: bf16 bits of exactly representable values, y (n, rows) =
 * x @ W^T with W row-major (rows, cols); a transposed index, a token's row
 * taken for another's or a product rounded to bf16 would each change a value. */
TEST(tern_dense_bf16_ref_hand) {
    /* W = [[1, 2, -0.5], [4, -3, 0.125]], x = [[3, 0.25, 2], [1 + 2^-7, 1, 1]] */
    const uint16_t w[6] = {0x3f80, 0x4000, 0xbf00, 0x4080, 0xc040, 0x3e00};
    const uint16_t x[6] = {0x4040, 0x3e80, 0x4000, 0x3f81, 0x3f80, 0x3f80};
    const float want[4] = {2.5f, 11.5f, /* 3 + 0.5 - 1; 12 - 0.75 + 0.25 */
                           (float)(1.0 + 1.0 / 128 + 2 - 0.5), (float)(4.0 * (1.0 + 1.0 / 128) - 3 + 0.125)};
    float y[4] = {0};
    tern_dense_bf16_ref(w, 2, 3, x, 2, y);
    for (int i = 0; i < 4; i++) CHECK_MSG(y[i] == want[i], "y[%d] = %.9g, want %.9g", i, y[i], want[i]);
}
