/* Run-time choice among the ternary kernel variants (cpuid via
 * __builtin_cpu_supports, TERNLAB_KERNEL to force one) and the helpers the
 * variants share. */
#include "cpu/tern_kernels.h"

#include "core/err.h"
#include "core/mem.h"
#include "ternary_format.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const char *short_names[TK_COUNT] = {"ref", "generic", "avx2", "avx512"};

const char *tern_kernel_short_name(TernKernel k) {
    return (unsigned)k < TK_COUNT ? short_names[k] : "?";
}

int tern_kernel_supported(TernKernel k) {
    switch (k) {
    case TK_REF:
    case TK_GENERIC: return 1;
    case TK_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    case TK_AVX512:
        /* the AVX-512 file is compiled with VNNI (vpdpbusd) in its int8 path */
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vnni");
    default: return 0;
    }
}

static int forced = -1; /* tern_kernel_force; -1 = none */

int tern_kernel_force(TernKernel k) {
    if (!tern_kernel_supported(k))
        return err_set("ternary kernel '%s' is not supported on this CPU", tern_kernel_short_name(k));
    forced = (int)k;
    return 0;
}

int tern_kernel_choose(TernKernel *k) {
    if (forced >= 0) {
        *k = (TernKernel)forced;
        return 0;
    }
    const char *env = getenv("TERNLAB_KERNEL");
    if (env && *env) {
        for (int i = 0; i < TK_COUNT; i++)
            if (strcmp(env, short_names[i]) == 0) {
                if (!tern_kernel_supported((TernKernel)i))
                    return err_set("TERNLAB_KERNEL=%s: this CPU does not support it (unset "
                                   "TERNLAB_KERNEL to pick the best supported one)",
                                   env);
                *k = (TernKernel)i;
                return 0;
            }
        return err_set("TERNLAB_KERNEL=%s: unknown kernel (valid: ref, generic, avx2, avx512)",
                       env);
    }
    *k = tern_kernel_supported(TK_AVX512) ? TK_AVX512
         : tern_kernel_supported(TK_AVX2) ? TK_AVX2
                                          : TK_GENERIC;
    return 0;
}

const char *tern_kernel_name(void) {
    TernKernel k;
    if (tern_kernel_choose(&k) < 0) return "unavailable";
    switch (k) {
    case TK_REF: return "gemm_ternary_ref";
    case TK_GENERIC: return "gemm_ternary_generic";
    case TK_AVX2: return "gemm_ternary_avx2";
    case TK_AVX512: return "gemm_ternary_avx512_vnni";
    default: return "unavailable";
    }
}

int tern_matmul_f32(const TernaryMatrix *W, const float *x, int64_t n, float *y) {
    TernKernel k;
    if (tern_kernel_choose(&k) < 0) return -1;
    switch (k) {
    case TK_REF: return tern_matmul_f32_ref(W, x, n, y);
    case TK_GENERIC: return tern_matmul_f32_generic(W, x, n, y);
    case TK_AVX2: return tern_matmul_f32_avx2(W, x, n, y);
    default: return tern_matmul_f32_avx512(W, x, n, y);
    }
}

int tern_matmul_i8(const TernaryMatrix *W, const int8_t *xq, const float *sx, int64_t n,
                   float *y) {
    TernKernel k;
    if (tern_kernel_choose(&k) < 0) return -1;
    switch (k) {
    case TK_REF: return tern_matmul_i8_ref(W, xq, sx, n, y);
    case TK_GENERIC: return tern_matmul_i8_generic(W, xq, sx, n, y);
    case TK_AVX2: return tern_matmul_i8_avx2(W, xq, sx, n, y);
    default: return tern_matmul_i8_avx512(W, xq, sx, n, y);
    }
}

void tern_act_quant_i8(const float *x, int64_t n, int64_t cols, int8_t *xq, float *sx) {
    TernKernel k;
    if (tern_kernel_choose(&k) == 0 && k == TK_AVX512) tern_act_quant_i8_avx512(x, n, cols, xq, sx);
    else act_quant_int8_ref(x, n, cols, xq, sx);
}

int tern_check_args(const TernaryMatrix *W, const void *x, int64_t n, const float *y,
                    const char *who) {
    if (!W || !W->codes || !W->scales || W->rows < 1 || W->cols < 1)
        return err_set("%s: empty or freed ternary matrix", who);
    if (W->row_bytes != tern_row_bytes(W->cols))
        return err_set("%s: row stride %lld does not match the packed layout (%lld)", who,
                       (long long)W->row_bytes, (long long)tern_row_bytes(W->cols));
    /* the layout's 64-byte base (ternary_format.h): the SIMD kernels load rows aligned,
     * and a misaligned base had ended in SIGSEGV */
    if ((uintptr_t)W->codes % TERN_ALIGN != 0)
        return err_set("%s: packed codes at %p are not %d-byte aligned (the layout's base)", who,
                       (const void *)W->codes, (int)TERN_ALIGN);
    if (n < 0) return err_set("%s: negative token count %lld", who, (long long)n);
    if (n > 0 && (!x || !y)) return err_set("%s: NULL activations or output", who);
    return 0;
}

const void *tern_pad_act(const void *x, int64_t n, int64_t cols, size_t esize, void **owned) {
    *owned = NULL;
    int64_t pc = tern_row_blocks(cols) * TERN_BLOCK;
    if (pc == cols) return x;
    uint8_t *p = mem_alloc((size_t)(n * pc) * esize, "padded activations");
    if (!p) return NULL;
    for (int64_t t = 0; t < n; t++) {
        memcpy(p + (size_t)(t * pc) * esize, (const uint8_t *)x + (size_t)(t * cols) * esize,
               (size_t)cols * esize);
        memset(p + (size_t)(t * pc + cols) * esize, 0, (size_t)(pc - cols) * esize);
    }
    *owned = p;
    return p;
}

int32_t *tern_group_sums_i8(const TernaryMatrix *W, const int8_t *xq, int64_t n) {
    int32_t *s = mem_alloc((size_t)(n * W->n_groups) * sizeof *s, "activation group sums");
    if (!s) return NULL;
    for (int64_t t = 0; t < n; t++)
        for (int64_t g = 0; g < W->n_groups; g++) {
            int64_t k0 = g * W->group_cols;
            int64_t k1 = k0 + W->group_cols < W->cols ? k0 + W->group_cols : W->cols;
            int32_t a = 0;
            for (int64_t k = k0; k < k1; k++) a += xq[t * W->cols + k];
            s[t * W->n_groups + g] = a;
        }
    return s;
}

static double par_scale = 1.0;
static long par_forks;

double tern_par_threads_factor(int threads) {
    if (threads <= 2) return 1.0;
    if (threads >= 16) return 0.25;
    return pow(2.0 / threads, 2.0 / 3.0); /* (the two measured ends joined geometrically: unmeasured) */
}

int tern_par(double work, double threshold) {
    if (!(work > threshold * par_scale * tern_par_threads_factor(omp_get_max_threads()))) return 0;
    __atomic_fetch_add(&par_forks, 1, __ATOMIC_RELAXED);
    return 1;
}

double tern_par_scale(double scale) {
    double old = par_scale;
    par_scale = scale;
    return old;
}

long tern_par_forks(void) { return __atomic_load_n(&par_forks, __ATOMIC_RELAXED); }

/* Grow-only per-thread buffers (tern_kernels.h).  Grown by a quarter more
 * than asked so slowly growing n does not reallocate on every call.  The
 * buffers hang off a pthread key whose destructor frees them when the thread
 * ends (OpenMP pool threads of tensor-parallel ranks come and go). */
typedef struct {
    void *p;
    size_t cap;
} ScratchSlot;
static _Thread_local ScratchSlot *scratch;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_destroy(void *v) {
    ScratchSlot *s = v;
    for (int i = 0; i < TERN_SCRATCH_SLOTS; i++) mem_free(s[i].p);
    free(s);
}
static void scratch_key_init(void) { pthread_key_create(&scratch_key, scratch_destroy); }

void *tern_scratch(int slot, size_t bytes, const char *what) {
    if (slot < 0 || slot >= TERN_SCRATCH_SLOTS) {
        err_set("tern_scratch: no slot %d (%s)", slot, what);
        return NULL;
    }
    if (!scratch) {
        pthread_once(&scratch_once, scratch_key_init);
        scratch = calloc(TERN_SCRATCH_SLOTS, sizeof *scratch);
        if (!scratch) {
            err_set("tern_scratch: out of memory (%s)", what);
            return NULL;
        }
        pthread_setspecific(scratch_key, scratch);
    }
    if (bytes > scratch[slot].cap || !scratch[slot].p) {
        size_t cap = (bytes + bytes / 4 + 63) & ~(size_t)63;
        void *p = mem_alloc(cap ? cap : 64, what);
        if (!p) return NULL;
        mem_free(scratch[slot].p);
        scratch[slot].p = p;
        scratch[slot].cap = cap;
    }
    return scratch[slot].p;
}

void tern_scratch_release(void) {
    if (!scratch) return;
    for (int i = 0; i < TERN_SCRATCH_SLOTS; i++) {
        mem_free(scratch[i].p);
        scratch[i].p = NULL;
        scratch[i].cap = 0;
    }
}

int tern_check_twins(const TernaryMatrix *W, const float *w, const float *x, const int8_t *xq,
                     const float *sx, const float *yf, const float *yi, int64_t t0, int64_t k,
                     double f32_tol, double *err) {
    const int64_t rows = W->rows, cols = W->cols;
    float *r = mem_alloc((size_t)(k * rows) * sizeof *r, "reference output");
    if (!r) return -1;
    int rc = tern_matmul_i8_ref(W, xq + t0 * cols, sx + t0, k, r);
    if (rc == 0 && memcmp(r, yi + t0 * rows, (size_t)(k * rows) * sizeof *r) != 0)
        rc = err_set("%lldx%lld: tern_matmul_i8 (%s) is not bit-identical to tern_matmul_i8_ref on "
                     "tokens %lld..%lld", (long long)rows, (long long)cols, tern_kernel_name(),
                     (long long)t0, (long long)(t0 + k - 1));
    if (rc == 0) rc = tern_matmul_f32_ref(W, x + t0 * cols, k, r);
    for (int64_t t = 0; t < k && rc == 0; t++)
        for (int64_t i = 0; i < rows && rc == 0; i++) {
            double mag = 0;
            const float *wr = w + i * cols, *xt = x + (t0 + t) * cols;
            for (int64_t j = 0; j < cols; j++) mag += fabs((double)wr[j] * xt[j]);
            const double e = fabs((double)yf[(t0 + t) * rows + i] - r[t * rows + i]) / (mag > 1e-30 ? mag : 1e-30);
            if (!(e <= f32_tol))
                rc = err_set("%lldx%lld: tern_matmul_f32 (%s) token %lld row %lld is %g off its *_ref twin "
                             "(relative to sum|s q x|; bound %g)", (long long)rows, (long long)cols,
                             tern_kernel_name(), (long long)(t0 + t), (long long)i, e, f32_tol);
            if (isnan(*err) || e > *err) *err = e;
        }
    mem_free(r);
    return rc;
}
