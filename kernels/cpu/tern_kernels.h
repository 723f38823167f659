/* CPU ternary matmul: y (n, rows) = x (n, cols) @ W^T, W a TernaryMatrix
 * (rows = output features).  Two activation modes:
 *
 *   f32:  y[t][r] = sum_g s_rg * sum_{k in g} q_rk * x[t][k]
 *   int8: y[t][r] = (sum_g s_rg * (float)D_trg) / sx[t],
 *         D_trg = sum_{k in g} q_rk * xq[t][k]   (exact integer)
 *         the float sum over groups runs in group order, starting from 0.0f,
 *         so every int8 kernel is bit-identical to the reference.
 *
 * Variants: *_ref (plain C, the definition), *_generic (plain C, faster loop
 * order, any CPU), *_avx2, *_avx512 (AVX-512BW + VNNI).  tern_matmul_f32 /
 * tern_matmul_i8 dispatch at run time: the best supported variant, or the one
 * named by TERNLAB_KERNEL=ref|generic|avx2|avx512 (an unsupported or unknown
 * name is an error, never a silent fallback).  Large shapes run on OpenMP
 * threads over rows.  x and y are dense row-major; x is never read past
 * n*cols elements (tails use a zero-padded copy).  All return 0, or -1 with
 * err_set (bad shape, no memory, unsupported kernel). */
#ifndef TL_TERN_KERNELS_H
#define TL_TERN_KERNELS_H

#include <stdint.h>

#include "quant/quant.h"

typedef enum { TK_REF = 0, TK_GENERIC, TK_AVX2, TK_AVX512, TK_COUNT } TernKernel;

/* "ref", "generic", "avx2", "avx512". */
const char *tern_kernel_short_name(TernKernel k);
/* 1 when this CPU can run variant k. */
int tern_kernel_supported(TernKernel k);
/* The variant tern_matmul_* use: TERNLAB_KERNEL if set, else the best one.
 * Returns 0 and *k, or -1 (err_set) when the forced one is unknown or
 * unsupported here. */
int tern_kernel_choose(TernKernel *k);
/* Overrides the choice for this process (tests, bench); -1 if unsupported. */
int tern_kernel_force(TernKernel k);
/* Descriptive name of the chosen variant for load reports, e.g.
 * "gemm_ternary_avx512_vnni"; "unavailable" when the choice is an error. */
const char *tern_kernel_name(void);

int tern_matmul_f32(const TernaryMatrix *W, const float *x, int64_t n, float *y);
int tern_matmul_i8(const TernaryMatrix *W, const int8_t *xq, const float *sx, int64_t n,
                   float *y);

/* The variants (same contract). */
int tern_matmul_f32_ref(const TernaryMatrix *W, const float *x, int64_t n, float *y);
int tern_matmul_i8_ref(const TernaryMatrix *W, const int8_t *xq, const float *sx, int64_t n,
                       float *y);
/* Dense bf16 weights (the CUDA engine's LM head GEMV's twin,
 * tern_cuda_gemv_bf16): y (n, rows) = x (n, cols) @ W^T with W (rows, cols)
 * and x bf16 (raw bits), the exact products summed in double, rounded to f32
 * once. */
void tern_dense_bf16_ref(const uint16_t *w, int64_t rows, int64_t cols, const uint16_t *x, int64_t n,
                         float *y);
int tern_matmul_f32_generic(const TernaryMatrix *W, const float *x, int64_t n, float *y);
int tern_matmul_i8_generic(const TernaryMatrix *W, const int8_t *xq, const float *sx, int64_t n,
                           float *y);
int tern_matmul_f32_avx2(const TernaryMatrix *W, const float *x, int64_t n, float *y);
int tern_matmul_i8_avx2(const TernaryMatrix *W, const int8_t *xq, const float *sx, int64_t n,
                        float *y);
int tern_matmul_f32_avx512(const TernaryMatrix *W, const float *x, int64_t n, float *y);
int tern_matmul_i8_avx512(const TernaryMatrix *W, const int8_t *xq, const float *sx, int64_t n,
                          float *y);
/* f32 GEMM by table lookup (tern_lut_avx512.c), same contract but only for
 * one scale per row (tern_rows_one_scale; else -1 with err_set).
 * tern_matmul_f32_avx512 uses it from TERN_LUT_MIN_N tokens. */
int tern_matmul_f32_lut_avx512(const TernaryMatrix *W, const float *x, int64_t n, float *y);
/* 1 when every row has a single scale: one group per row, or all of a row's
 * group scales bit-equal (then the matrix holds the values of its group=row
 * form; the lookup kernel runs both alike, bit for bit, but the other f32
 * paths sum such a matrix group by group, a few ulps from the group=row
 * sums — the GGUF loader gives a TQ file written from a group=row or tensor
 * model that group back).  Scans the scales: rows * n_groups compares. */
int tern_rows_one_scale(const TernaryMatrix *W);
#define TERN_LUT_MIN_N 4

/* Per-token int8 activation quantisation (BitNet), bit-identical to
 * act_quant_int8_ref (src/quant/quant.h), the definition: for each of the n
 * rows of x (n, cols), sx[t] = 127 / max(max|x|, 1e-5) and xq (n, cols) =
 * clamp(rintf(x * sx[t]), -128, 127).  Dispatches to the AVX-512 version
 * when the CPU has it (and TERNLAB_KERNEL does not force ref/generic/avx2),
 * else to the reference. */
void tern_act_quant_i8(const float *x, int64_t n, int64_t cols, int8_t *xq, float *sx);
void tern_act_quant_i8_avx512(const float *x, int64_t n, int64_t cols, int8_t *xq, float *sx);

/* Shared helpers for the variants (tern_dispatch.c). */
/* Checks shapes/pointers; returns 0 or -1 (err_set). */
int tern_check_args(const TernaryMatrix *W, const void *x, int64_t n, const float *y,
                    const char *who);
/* Whether a parallel region of `work` multiply-adds (n * rows * cols) forks
 * its OpenMP team: work > threshold * the scale below.  A fork and its join
 * wait for threads that sleep between calls (OMP_WAIT_POLICY=passive, set by
 * blas_setup so that they do not steal OpenBLAS's cores): 50-120 us a region
 * on the 2-vCPU machine, so threads pay only for work that takes ~150 us or
 * more on one.  Measured there, one thread against two, calls 50 us apart:
 * f32 768x256 n=64 (12.6M) 276 / 301 us, n=128 463 / 358; int8 GEMM 2048x2048
 * n=8 (33.6M) 266 / 294 us, n=16 361 / 300, 768x256 n=8 (1.6M, above the old
 * single threshold of 2^20) 13 / 113; int8 GEMV 2048x2048 (4.2M) 34 / 56,
 * 4096x4096 (16.8M) 182 / 158.  TERN_PAR_WORK is for the kernels that do
 * ~40-100 multiply-adds a ns (f32, the generic and AVX2 int8 ones, the int8
 * GEMV); the AVX-512 VNNI int8 GEMM does 2-3x that.
 * With more threads a fork pays off sooner: on a 16-core Xeon (`ternlab bench
 * --par-scale S`, S = 0 / 0.25 / 1 / never, two rounds) a quarter of these
 * thresholds was as fast as them or faster on every bench shape (int8 GEMM
 * 256x256 n=512, 2^25 multiply-adds, not forked by them: 0.21-0.25 ms, forked
 * 0.093-0.100; f32 14336x4096 n=8 1.59 against 2.09 ms), and forking every
 * region was slower on the small shapes (f32 768x256 n=8 0.135 against 0.072
 * ms).  So the thresholds are scaled by tern_par_threads_factor of the OpenMP
 * team's size: 1 up to 2 threads, 0.25 from 16, between them (2/t)^(2/3) — an
 * interpolation of the two measured machines, not a measurement. */
#define TERN_PAR_WORK (3.0 * (1 << 22))
#define TERN_PAR_WORK_I8_GEMM ((double)(1 << 25))
int tern_par(double work, double threshold);
/* The thresholds' factor for a team of `threads` (see above). */
double tern_par_threads_factor(int threads);
/* Scales every threshold (1 by default; 0: every region with work forks, as
 * the tests use to check the threaded paths on small shapes).  Returns the
 * old scale.  Not for use while kernels run. */
double tern_par_scale(double scale);
/* How many times tern_par has said fork (tests). */
long tern_par_forks(void);
/* A zero-padded copy of activations: n rows of `cols` elements of `esize`
 * bytes each -> n rows of row_blocks*256 elements.  Returns x itself (and
 * *owned = NULL) when cols is already a multiple of 256, else a mem_alloc'd
 * buffer in *owned (caller mem_frees).  NULL + err_set on failure. */
const void *tern_pad_act(const void *x, int64_t n, int64_t cols, size_t esize, void **owned);
/* Outputs of the dispatched kernels on tokens [t0, t0 + k) (yf of
 * tern_matmul_f32, yi of tern_matmul_i8, both n x rows) against their *_ref
 * twins: int8 bit-identical, f32 within f32_tol of sum_j |w_ij x_tj| (w the
 * dequantised rows x cols matrix); the worst f32 error raised into *err (NaN:
 * none yet).  0, or -1 with err_set naming the first mismatch (ternlab bench
 * checks every timed kernel this way). */
int tern_check_twins(const TernaryMatrix *W, const float *w, const float *x, const int8_t *xq,
                     const float *sx, const float *yf, const float *yi, int64_t t0, int64_t k,
                     double f32_tol, double *err);
/* Per-thread scratch buffers that grow and are kept between calls, so a
 * GEMM called 28 times per forward pass does not malloc/free (and page-fault
 * in) megabytes each time.  Slot s of the calling thread: at least `bytes`
 * bytes, 64-byte aligned, contents undefined; valid until the next
 * tern_scratch(s, ...) on this thread.  NULL + err_set when out of memory.
 * The memory stays with the thread (OpenMP workers are reused) until
 * tern_scratch_release() on that thread. */
enum {
    TERN_SCRATCH_ACT = 0, /* caller: repacked activations */
    TERN_SCRATCH_AUX,     /* caller: per-call state (group sums, partial dots) */
    TERN_SCRATCH_PANEL,   /* each worker: decoded weight panel */
    TERN_SCRATCH_PANEL2,  /* each worker: panel scales / corrections */
    TERN_SCRATCH_SLOTS
};
void *tern_scratch(int slot, size_t bytes, const char *what);
void tern_scratch_release(void);

/* Per-token, per-group sums of xq (n, n_groups) int32 for the "code = q+1"
 * trick: D = sum(c*x) - sum(x).  Returns a mem_alloc'd array or NULL. */
int32_t *tern_group_sums_i8(const TernaryMatrix *W, const int8_t *xq, int64_t n);

#endif
