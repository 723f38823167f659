/* tern_cuda.h — ternary matmuls on the GPU (C API; kernels in tern_gemv.cu,
 * tern_gemm.cu, dispatch and cuBLAS baseline in tern_cuda.cu).
 *
 *   y (n, rows) = x (n, cols) @ W^T      W a TernaryMatrix (rows = out features)
 *
 * The device copy keeps the packed layout of kernels/ternary_format.h byte for
 * byte (no repacking): codes (rows, row_bytes) and the f32 scales
 * scales[r*scale_stride + k/group_cols] (already rounded to the scale dtype).
 * The CPU twins are tern_matmul_f32_ref / tern_matmul_i8_ref
 * (kernels/cpu/tern_kernels.h); tests/gpu/test_gpu.cu compares them.
 *
 * Activations:
 *   f32   x f32 (n, cols). Each x is split exactly into three bf16 terms
 *         (hi + mid + lo, |error| <= 2^-24 |x|), each multiplied on the bf16
 *         tensor cores with fp32 accumulation: the fp32 reference path.
 *   bf16  x bf16 (n, cols) (uint16_t bit patterns): one bf16 MMA term. The
 *         products q*x are exact; only the fp32 accumulation order differs
 *         from the reference fed with the same bf16 values.
 *   int8  xq int8 (n, cols) and sx f32 (n): y = (sum_g s_g * D_g) / sx[t],
 *         D_g the exact integer dot product of group g (s8 tensor cores with
 *         s32 accumulation).
 * Output y is f32 (n, rows), every element written.
 *
 * Kernels (one template, tern_mm.cuh; chosen by n): n <= 16 the decode GEMV
 * (tern_gemv.cu: 128 rows x 8/16 tokens per CTA, 4 cp.async stages, split-K
 * until ~4 CTAs per SM), n > 16 the prefill GEMM (tern_gemm.cu: 256 rows x
 * 128 tokens, or 128 x 64); with one scale per row or per tensor the
 * bulk-copy GEMVs (tern_gemv_bmma.cu: int8 and bf16 activations, n <= 16)
 * and the wgmma GEMM (tern_gemm_wg.cu) take their place where the dispatch
 * in tern_cuda.cu says.  Codes are decoded to bf16 / s8 in registers and
 * multiplied with mma.sync; split-K partials are summed in a fixed order by
 * the last CTA of a tile, so results are deterministic.
 *
 * Contracts.  All pointers named d_* are device pointers; x and y must not
 * overlap.  Calls are asynchronous on `stream`.  Split-K scratch, f32
 * planes and padded copies of unaligned activations live in a per-device
 * workspace grown synchronously (cudaFree/cudaMalloc): calls must be ordered
 * on one stream per device, and a stream being captured into a CUDA graph
 * must not grow it (run the largest call once before capturing).  Every
 * function returns 0, or -1 with err_set (unsupported shape or group, bad
 * argument, CUDA error); nothing is silently skipped. */
#ifndef TL_TERN_CUDA_H
#define TL_TERN_CUDA_H

#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "quant/quant.h"

typedef struct {
    int64_t rows, cols;    /* rows = output features, cols = input features */
    int64_t row_bytes;     /* = tern_row_bytes(cols) */
    int64_t kblocks;       /* 256-column blocks per row */
    int64_t group_cols;    /* columns sharing a scale (cols for tensor / row) */
    int64_t n_groups;      /* groups per row */
    int64_t scale_stride;  /* 0 (tensor) or n_groups */
    int64_t n_scales;
    uint8_t *d_codes;      /* (rows, row_bytes), ternary_format.h layout */
    float *d_scales;       /* (n_scales,) f32 */
    int64_t device_bytes;  /* codes + scales */
} TernCudaMatrix;

/* Copies a host TernaryMatrix to the current device.  Supported groups:
 * tensor, row, 32, 64, 128, 256 (any group whose columns are a multiple of
 * 32 dividing 256, or a single group per row).  out owns device memory
 * (tern_cuda_free).  Returns 0 or -1 (err_set). */
int tern_cuda_upload(const TernaryMatrix *W, TernCudaMatrix *out);
void tern_cuda_free(TernCudaMatrix *m);
/* Bytes the kernels must read for the weights: codes + n_scales * 4. */
int64_t tern_cuda_weight_bytes(const TernCudaMatrix *m);

int tern_cuda_matmul_f32(const TernCudaMatrix *W, const float *d_x, int64_t n, float *d_y,
                         cudaStream_t stream);
/* d_x: bf16 bit patterns (n, cols). */
int tern_cuda_matmul_bf16(const TernCudaMatrix *W, const uint16_t *d_x, int64_t n, float *d_y,
                          cudaStream_t stream);
/* d_xq (n, cols) int8, d_sx (n,) f32 per-token scales (act_quant_int8_ref). */
int tern_cuda_matmul_i8(const TernCudaMatrix *W, const int8_t *d_xq, const float *d_sx,
                        int64_t n, float *d_y, cudaStream_t stream);

/* The decode step's fused one-token forms (int8 activations, one scale per
 * row).  tern_cuda_glu_i8: W holds gate rows [0, half) over up rows [half,
 * 2 half); d_h (half,) = act(W_gate x) * (W_up x) with act 0 SiLU, 1 ReLU^2
 * (the same bits as tern_cuda_matmul_i8 and then the GLU), and max|h| raised
 * into *d_hmax (its float bits; zero before the call).  tern_cuda_matmul_i8_f32x:
 * y = W x for f32 x whose int8 codes and scale (act_quant_int8_ref's: 127 /
 * max|x|, max|x| from *d_xmax's float bits) the kernel forms itself.  The
 * _ok functions: 1 where W's shape and format allow the call (rows % 32 == 0
 * for the GLU, cols % 16 == 0 for both, one scale per row, and for f32x a
 * one-token dispatch to the binary tensor-core GEMVs or to the one-warp GEMV,
 * which has an f32 form too: tern_cuda_matmul_i8_f32x_kernel says which, 6
 * or 4, 0 where _ok says 0) and no kernel is forced
 * (tern_cuda_force_kernel, TERNLAB_CUDA_GEMV1), else 0 — also under a
 * malformed TERNLAB_CUDA_GEMV1 or TERNLAB_CUDA_TBM, which the calls themselves
 * report.  A call refused because a kernel is forced says so, not that the
 * shape is wrong. */
int tern_cuda_glu_i8_ok(const TernCudaMatrix *W);
int tern_cuda_glu_i8(const TernCudaMatrix *W, const int8_t *d_xq, const float *d_sx, int act, float *d_h,
                     unsigned *d_hmax, cudaStream_t stream);
int tern_cuda_matmul_i8_f32x_ok(const TernCudaMatrix *W);
int tern_cuda_matmul_i8_f32x_kernel(const TernCudaMatrix *W);
int tern_cuda_matmul_i8_f32x(const TernCudaMatrix *W, const float *d_x, const unsigned *d_xmax, float *d_y,
                             cudaStream_t stream);

/* tern_cuda_matmul_i8_f32x whose K split, where its plan has one, is left for
 * the next kernel to finish: the slices' exact integer sums stay in def->part
 * (rows ints of the split-K scratch), y is not written, and y[r] =
 * scales[r * scale_stride] * part[r] / (127 / max|x|) as the GEMV would have
 * formed it (tern_i8_out) is the reader's, which also sets part back to zero
 * (fwdc_norm_deferred; it must be the next kernel on the stream: the scratch
 * is shared by every split GEMV).  def->part is NULL where the GEMV finished
 * y itself (no split, not the bulk-copy kernel, or rows not a multiple of 64
 * up to 16384: what fwdc_norm_deferred takes). */
typedef struct {
    int *part;
    const float *scales;
    int64_t scale_stride, rows;
    const unsigned *xmax; /* max|x| as float bits */
} TernDeferred;
int tern_cuda_matmul_i8_f32x_defer(const TernCudaMatrix *W, const float *d_x, const unsigned *d_xmax,
                                   float *d_y, TernDeferred *def, cudaStream_t stream);

/* The RMSNorm between the o projection and the gate|up GEMV of a one-token
 * decode step folded into both GEMVs, no norm kernel between them.  Let x' =
 * res + y (the residual after the o projection's output y) and v = x' * w
 * (w the norm's weights); the norm's output x' * r * w, r = 1 / sqrt(sum
 * x'^2 / dim + eps), has the int8 codes of v (int8 coding is scale-free: 127
 * / max|v|) with r moved into the consumer's output scale.
 * TernNormOut (tern_cuda_matmul_i8_f32x_norm, the one-warp f32 form only):
 *   res[r] += y[r] in place (y not written), *amax raised by max |x'[r] *
 *   w[r]| (float bits, zero before the call), and ss[c] = the sum of x'[r]^2
 *   over the rows of the producer's CTA c, in a fixed order (each warp's rows
 *   in turn, then the CTA's warps in turn); the call sets n_ss, the slots
 *   written (<= TERN_NORM_SLOTS).
 * TernNormIn (tern_cuda_glu_i8_norm, the bulk-copy GLU form): x = the
 *   residual and w (dim = W->cols floats each, 16-byte aligned), amax and the
 *   n_ss slots ss as written; each output y = W q(v) as tern_cuda_matmul_i8
 *   forms it (127 / max|v|, act_quant_int8_ref's codes of v), times r, with
 *   sum x'^2 the slots' sum in a fixed order (tern_norm_r: lane l of a warp
 *   adds slots l, l + 32, ... in turn, then the lanes' sums meet by xor
 *   shuffles 16, 8, 4, 2, 1); then the GLU as tern_cuda_glu_i8.
 * Not bit-identical to the separate norm kernel (its max is of x' * r * w,
 * its sum of squares in another order): ulps of r, and a code where v * 127 /
 * max|v| falls within rounding of a half; and where max|v| < 1e-5 (a residual
 * near zero) the codes' floor of 1e-5 applies to max|v|, not to r max|v| as
 * there.  Deterministic for a step shape on one GPU model: the slots' grouping
 * of rows follows the producer's grid (min(rows / 32, SMs) CTAs), and the
 * fold is taken for one-token steps only. */
#define TERN_NORM_SLOTS 160
typedef struct {
    float *res;
    const float *w;
    unsigned *amax;
    float *ss;
    int n_ss;
} TernNormOut;
typedef struct {
    const float *x, *w;
    const unsigned *amax;
    const float *ss;
    int n_ss;
    float eps;
} TernNormIn;
/* _ok: 1 where W takes the producer (tern_cuda_matmul_i8_f32x_kernel 4, and
 * its grid — a CTA per 32 rows, at most one per SM — no more CTAs than
 * TERN_NORM_SLOTS), else 0; the consumer takes tern_cuda_glu_i8's shapes
 * (tern_cuda_glu_i8_ok). */
int tern_cuda_matmul_i8_f32x_norm_ok(const TernCudaMatrix *W);
int tern_cuda_matmul_i8_f32x_norm(const TernCudaMatrix *W, const float *d_x, const unsigned *d_xmax,
                                  TernNormOut *no, cudaStream_t stream);
int tern_cuda_glu_i8_norm(const TernCudaMatrix *W, const TernNormIn *ni, int act, float *d_h, unsigned *d_hmax,
                          cudaStream_t stream);

/* The GLU form for a decode step of n = 1 .. 8 tokens on the multi-token
 * bulk-copy GEMV (int8 activations, one scale per row): W holds gate rows
 * [0, half) over up rows [half, 2 half) (rows % 32 == 0); for token k (x rows
 * of W->cols, d_sx[k]) d_h[k half + j] = act(y_k[j]) * y_k[half + j], the
 * same bits as tern_cuda_matmul_i8 and then the GLU, and max|h_k| raised into
 * d_hmax[k] (float bits; zero before the call).  _ok: 1 where W's format and
 * n allow the call (as tern_cuda_glu_i8_ok, and 1 <= n <= 8); _rule: 1 where
 * _ok and the engine takes it at 2 .. 8 tokens (where tern_cuda_matmul_i8
 * would not run W on the multi-token GEMV: tern_cuda.cu), within the
 * engine's bound (TERNLAB_CUDA_MT_FUSE; unset, cuda_mt_fuse_for in
 * runtime/cuda_engine.h: none on a device whose memory is wide for its SMs). */
int tern_cuda_glu_i8_mt_ok(const TernCudaMatrix *W, int64_t n);
int tern_cuda_glu_i8_mt_rule(const TernCudaMatrix *W, int64_t n);
int tern_cuda_glu_i8_mt(const TernCudaMatrix *W, const int8_t *d_xq, const float *d_sx, int64_t n, int act,
                        float *d_h, unsigned *d_hmax, cudaStream_t stream);

/* Forces a kernel family for tests/bench: 0 = automatic (by n), 1 = GEMV
 * (n in 16-token chunks, any n), 2 = the mma.sync GEMM (tern_gemm.cu);
 * for one token of int8 activations and one scale per row, 3 = the
 * multi-row dp4a GEMV (tern_gemv_rows.cu) and 4 = the one-warp-per-row dp4a
 * GEMV (tern_gemv_i8.cu), 6 = the GEMV on the binary tensor cores
 * (tern_gemv_bmma.cu); anything else with 3 / 4 / 6 is an error; 5 = the
 * wgmma GEMM (tern_gemm_wg.cu, one scale per row, else an error); 7 = the
 * bulk-copy GEMV on the int8 tensor cores for 1 .. 16 tokens of int8
 * activations and one scale per row or per tensor (tern_gemv_bmma.cu, else
 * an error); 8 = the bulk-copy GEMV on the bf16 tensor cores for 1 .. 16
 * tokens of bf16 activations and one scale per row or per tensor
 * (tern_gemv_bmma.cu's gemv_bf16_tbm, else an error; variant 6abcd or its
 * own).
 * Returns the previous value. */
int tern_cuda_force_kernel(int which);

/* Development knob (bench; TERNLAB_CUDA_DECODE=v in the environment sets it
 * too): decode-GEMV variant, 0 = default; with one scale per row also
 * 2 = 4 blocks per stage, 20 = stream-K persistent grid, and 10 = variant 0
 * without the math (bf16, n <= 8: memory diagnostics only, the output is
 * garbage); 3LRDW selects a configuration of tern_gemv_rows.cu, 5UC00 and
 * 6abcd ones of tern_gemv_bmma.cu (see those files; a = 5 / 8: four K parts;
 * 6abcd also configures the multi-token GEMVs, forced 7 (int8) and 8 (bf16;
 * by default too); any variant set keeps the dispatch from taking the int8
 * one itself, and 2 / 20 / 10 from taking the bf16 one); 7KK (701 .. 764) makes the
 * wgmma GEMM split K into KK parts (capped at its stage count); 8KK the same
 * with the one-A-register-set kernel for int8 tiles of 16 tokens (800: its
 * own split rule).  Returns the previous value. */
int tern_cuda_decode_variant(int v);
int tern_cuda_decode_variant_get(void);

/* Development knob (TERNLAB_CUDA_TBM=spec in the environment sets it at the
 * first one-token GEMV unless this was called before): spec "RxC:V[,RxC:V..]"
 * sends the one-token int8 GEMVs of R x C matrices, and their f32-input and
 * GLU forms (the GLU's key: the fused gate|up matrix, 2 inter x hidden), to
 * the bulk-copy kernel with variant V (6abcd) in place of the shape rule —
 * also where the rule would take a dp4a kernel, which also makes the f32
 * input form available there (tern_cuda_matmul_i8_f32x_ok), and where it
 * would take the one-warp GEMV, whose f32 form then gives way to the
 * bulk-copy kernel's (tern_cuda_matmul_i8_f32x_kernel 6 instead of 4: the
 * engine then fuses such an o projection only under TERNLAB_CUDA_O_FUSE=1) — to tune one
 * matrix of a model end to end; "" or NULL clears it; the first entry of a
 * shape wins.  Set it before the GEMVs are enqueued: captured CUDA graphs
 * keep the kernels they captured.  -1 (err_set) on a malformed spec, which
 * leaves the list as it was; a malformed TERNLAB_CUDA_TBM fails every call
 * that consults it. */
int tern_cuda_tbm_override(const char *spec);

/* The kernel the calling thread's last tern_cuda_matmul_* chose, in words
 * without commas (e.g. "gemv_bmma", "wgmma nt=16 sets=2 ks=7 pdl=1"); ""
 * before any call.  tern_cuda_set_config: the launchers record it. */
const char *tern_cuda_last_config(void);
void tern_cuda_set_config(const char *cfg);

/* Programmatic dependent launch of the one-token int8 GEMVs (default on;
 * TERNLAB_CUDA_PDL=0 in the environment turns it off): they are launched
 * with cudaLaunchAttributeProgrammaticStreamSerialization, so their blocks
 * start, and load their first weights, while the kernel before them (the
 * forward's norm / quantisation / GLU / attention kernels trigger early)
 * finishes; they wait for it (griddepcontrol.wait) before reading its
 * outputs or writing theirs.  Returns the previous value. */
int tern_cuda_pdl(int on);
int tern_cuda_pdl_get(void);

/* The bulk-copy GEMVs (one- and multi-token, all their forms), the one-warp
 * f32-input GEMV and the mma GEMV of 1 .. 16 tokens (bf16 activations, one
 * plane) read their codes with an L2 evict-first policy
 * (default on; TERNLAB_CUDA_L2EF=0 turns it off): a decode step streams every
 * weight once, and without the hint that stream evicts the activations, K/V
 * pages, norm weights and scales the next kernels read from L2.  The other
 * GEMV forms and the GEMMs read as before.  Read at each launch (a captured
 * graph keeps what was in force at its capture).  tern_cuda_l2ef sets it
 * (returns the previous value), tern_cuda_l2ef_get reads it. */
int tern_cuda_l2ef(int on);
int tern_cuda_l2ef_get(void);

/* SMs the one-token bulk-copy GEMV of int8 activations (gemv_i8_tbm's
 * plain form: q|k|v and o in a decode step) leaves out when it sizes its
 * grid, for the one-CTA row kernel launched just before it (the norm, the
 * int8 pass): that CTA of 1024 threads can hold enough of its SM's
 * registers that the GEMV's CTA placed there starts only when it ends, and
 * then ends last (H200, 27B batch 1: q|k|v's last CTA 0.6-0.9 us late).
 * 0 by default (bench_gpu measures a kernel alone); the CUDA engine sets 1
 * when it opens (TERNLAB_CUDA_TBM_RESERVE=N: N instead, 0 .. 1024; anything
 * else fails the open) and leaves it so.
 * At most the SM count less one; the results are the same bits whatever
 * it is; where it is > 0 the launch adds " res=R grid=XxS" (CTAs x K
 * slices) to tern_cuda_last_config.  Returns the previous value. */
int tern_cuda_tbm_reserve(int n);
int tern_cuda_tbm_reserve_get(void);

/* The current device's device-to-device copy bandwidth over `bytes` (bytes
 * read + written per second), the median of `reps` timed copies each way:
 * cudaMemcpyAsync (*memcpy_bps) and a copy kernel of 16-byte loads and
 * stores (*kernel_bps).  The benchmarks' "physical limit" is the larger
 * (bench_gpu and bench-e2e measure it with this one function). */
int tern_cuda_copy_bandwidth(size_t bytes, int reps, double *memcpy_bps, double *kernel_bps);


/* Dense baseline through cuBLAS: y (n, rows) = x (n, cols) @ W^T with W bf16
 * (rows, cols) row-major, x bf16 (n, cols), fp32 accumulation
 * (cublasGemmEx, CUBLAS_COMPUTE_32F); y is f32 when y_f32, else bf16.
 * The handle's stream is set to `stream` where it is another (cublasSetStream
 * also drops a workspace given with cublasSetWorkspace: set the stream first). */
int tern_cuda_dense_bf16(cublasHandle_t h, const uint16_t *d_w, int64_t rows, int64_t cols,
                         const uint16_t *d_x, int64_t n, void *d_y, int y_f32,
                         cudaStream_t stream);

/* The same product for 1 .. 4 tokens by ternlab's own kernel (dense_gemv.cu;
 * twin: tern_dense_bf16_ref): y (n, rows) f32 = x (n, cols) @ W^T, W and x
 * bf16 and 16-byte aligned, f32 sums in a fixed order (the same bits every
 * call; not cuBLAS's).  A stream of the weights at the memory's pace,
 * launched as a programmatic dependent (tern_cuda_pdl) that reads its first
 * weights before its wait, with the L2 evict-first hint (tern_cuda_l2ef).
 * Its grid leaves out the SMs of tern_cuda_tbm_reserve.  The CUDA engine
 * takes it for a ternary model's LM head wherever a call has 1 .. 4 logit
 * rows (decode steps, a prompt's last token); the BF16 reference's linears
 * stay on cuBLAS.  _ok: whether the shape is one
 * it takes (1 .. 4 tokens, cols a multiple of 8, n x cols x 2 <= 96 KB); any
 * other is an error of tern_cuda_gemv_bf16. */
int tern_cuda_gemv_bf16_ok(int64_t rows, int64_t cols, int64_t n);
int tern_cuda_gemv_bf16(const uint16_t *d_w, int64_t rows, int64_t cols, const uint16_t *d_x, int64_t n,
                        float *d_y, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
