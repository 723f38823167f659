/* Ternary quantisation: QuantSpec (what to quantise and how), the threshold
 * and scale rules, scale dtypes, the packed TernaryMatrix and conversions in
 * (dense f32, raw codes, HF BitNet packed U8), and int8 activation quantisation.
 *
 * The packed code layout is kernels/ternary_format.h.  Scales are kept as f32
 * values that are already rounded to the spec's scale dtype; the dtype tag
 * only matters for byte accounting.  Everything here matches the PyTorch
 * reference ../shared/fixtures/make_ptq_refs.py (fp32 arithmetic). */
#ifndef TL_QUANT_H
#define TL_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"

/* ---- QuantSpec ------------------------------------------------------- */

typedef enum { QR_ABSMEAN = 0, QR_TWN, QR_STD, QR_L2OPT, QR_ABSMAX, QR_COUNT } QuantRule;
typedef enum { QG_TENSOR = 0, QG_ROW, QG_32, QG_64, QG_128, QG_256, QG_COUNT } QuantGroup;
typedef enum { QA_F32 = 0, QA_INT8, QA_COUNT } QuantAct;
typedef enum { QL_ALL = 0, QL_ATTN, QL_MLP, QL_RANGES } QuantLayersKind;

#define QUANT_MAX_RANGES 16

typedef struct {
    QuantRule rule;      /* default absmean */
    QuantGroup group;    /* default tensor */
    DType scale;         /* DT_F32 (default), DT_BF16, DT_F16, DT_FP8_E4M3, DT_E8M0 */
    QuantAct act;        /* default f32 */
    int act_explicit;    /* 1 when the spec named act=; else the model may choose
                          * (int8 for native BitNet checkpoints) */
    int act_only;        /* 1 when act= is the spec's only key: linears already ternary as
                          * loaded keep their codes and scales (not re-ternarised), only their
                          * activations change; dense ones are ternarised with the defaults */
    QuantLayersKind layers;
    int n_ranges;        /* QL_RANGES: inclusive layer index ranges */
    int range_lo[QUANT_MAX_RANGES], range_hi[QUANT_MAX_RANGES];
} QuantSpec;

/* Defaults: rule=absmean, group=tensor, scale=f32, act=f32 (not explicit),
 * layers=all. */
void quant_spec_default(QuantSpec *s);

/* Parses "key=value,key=value" (keys rule, group, scale, act, layers; any
 * subset, any order; missing keys keep their defaults).  layers is one of
 * all | attn | mlp | a list of indices and inclusive ranges joined by '+'
 * (the spec itself is comma-separated), e.g. "layers=0-1+3".  Returns 0, or
 * -1 with err_set naming the bad key/value and listing the valid ones. */
int quant_spec_parse(const char *s, QuantSpec *out);

/* Canonical string ("rule=..,group=..,scale=..[,act=..],layers=..") that
 * parses back to the same spec; act appears only when explicit.  Returns the
 * length written, or -1 (err_set) when buf is too small. */
int quant_spec_format(const QuantSpec *s, char *buf, size_t n);

/* 1 when linear `kind` ("q","k","v","o","gate","up","down") of decoder layer
 * `layer` is ternarised under s, 0 when not, -1 (err_set) for an unknown kind. */
int quant_layer_selected(const QuantSpec *s, int layer, const char *kind);

const char *quant_rule_name(QuantRule r);
const char *quant_group_name(QuantGroup g); /* "tensor", "row", "32", ... */
const char *quant_scale_name(DType t);      /* "f32", "bf16", "f16", "fp8_e4m3", "e8m0"; "?" */
/* Columns of a row that share one scale: cols for tensor and row, else g. */
int64_t quant_group_cols(QuantGroup g, int64_t cols);

/* ---- Rules (the definitions) ----------------------------------------- */
/* Each ternarises one group w[0..n) (n >= 1) into q[0..n) in {-1,0,1} and
 * returns the fp32 scale in *scale (before dtype rounding); round = rintf
 * (half to even), all arithmetic fp32 except long sums (accumulated in
 * double, then rounded once to fp32 — torch's tree reduction is closer to
 * that than to a naive fp32 loop).
 *   absmean: g = max(mean|w|, 1e-5); q = clamp(round(w/g), -1, 1); scale g.
 *   twn:     D = 0.7*sum|w| / n; keep |w| > D; q = sign(w) on kept;
 *            scale = mean |w| over kept (0 if none).
 *   std:     m = sum(w)/n; var = sum(w^2)/n - m^2 (clamped >= 0);
 *            D = 0.6*sqrt(var); then as twn.
 *   l2opt:   the exact minimiser of |w - a*q|^2: sort |w| descending, S_k the
 *            running sum; among cut points k that end a run of equal
 *            magnitudes pick the first maximising S_k^2/k; v = |w| at k;
 *            keep |w| >= v (ties together) when v > 0; a = S_k/k (0 if v=0).
 *   absmax:  d = max|w|; q = round(w/d) (0 if d == 0); scale d.
 * Returns 0, or -1 (err_set) when scratch memory (l2opt) cannot be had. */
int quant_absmean_ref(const float *w, int64_t n, int8_t *q, float *scale);
int quant_twn_ref(const float *w, int64_t n, int8_t *q, float *scale);
int quant_std_ref(const float *w, int64_t n, int8_t *q, float *scale);
int quant_l2opt_ref(const float *w, int64_t n, int8_t *q, float *scale);
int quant_absmax_ref(const float *w, int64_t n, int8_t *q, float *scale);
int quant_rule_ref(QuantRule r, const float *w, int64_t n, int8_t *q, float *scale);

/* Whole-matrix reference: codes q (rows, cols) and scales (tern_n_scales),
 * scales already rounded to spec->scale.  dequant w' = q * scale. */
int quant_matrix_ref(const float *w, int64_t rows, int64_t cols, const QuantSpec *spec,
                     int8_t *q, float *scales);

/* ---- Packed ternary matrix ------------------------------------------- */

typedef struct {
    int64_t rows, cols;   /* rows = output features, cols = input features */
    int64_t row_bytes;    /* packed row stride = tern_row_bytes(cols) */
    uint8_t *codes;       /* (rows, row_bytes) ternary_format.h layout, 64-byte aligned */
    QuantGroup group;
    int64_t group_cols;   /* columns sharing a scale within a row */
    int64_t n_groups;     /* groups per row = ceil(cols / group_cols) */
    int64_t scale_stride; /* scales per row in `scales`: 0 (tensor) or n_groups */
    int64_t n_scales;     /* 1 (tensor) or rows * n_groups */
    float *scales;        /* scale of (r, k): scales[r*scale_stride + k/group_cols],
                           * already rounded to scale_dtype */
    DType scale_dtype;
} TernaryMatrix;

/* Number of scales a (rows, cols) matrix has under group g. */
int64_t tern_n_scales(QuantGroup g, int64_t rows, int64_t cols);

/* Dense f32 (rows, cols) row-major -> ternary under spec (rule, group, scale).
 * out owns its buffers (tern_free).  Returns 0 or -1 (err_set). */
int tern_from_dense(const float *w, int64_t rows, int64_t cols, const QuantSpec *spec,
                    TernaryMatrix *out);

/* Generic entry: codes q (rows, cols) in {-1,0,1}, scales (tern_n_scales of
 * group) in fp32; the scales are rounded to scale_dtype here.  Values of q
 * outside {-1,0,1} are an error. */
int tern_from_codes(const int8_t *q, const float *scales, int64_t rows, int64_t cols,
                    QuantGroup group, DType scale_dtype, TernaryMatrix *out);

/* HF BitNet packed weights: packed is U8 (ceil(rows/4), cols); bit field i
 * (bits 2i..2i+1) of packed row r holds original row r + i*ceil(rows/4); code
 * c means c-1.  linear_class "bitlinear" (autobitlinear = 0) divides by
 * weight_scale, so the stored per-tensor scale is 1/weight_scale; with
 * autobitlinear = 1 the scale is weight_scale.  Codes 3 are an error. */
int tern_from_bitnet_packed(const uint8_t *packed, int64_t rows, int64_t cols,
                            float weight_scale, int autobitlinear, TernaryMatrix *out);

/* Packs q (rows, cols) in {-1,0,1} into codes, which must hold exactly
 * rows * tern_row_bytes(cols) bytes (every byte is written, padding included;
 * nothing outside).  Returns 0, or -1 (err_set) for a value outside {-1,0,1}. */
int tern_pack_codes(const int8_t *q, int64_t rows, int64_t cols, uint8_t *codes);

/* w (rows, cols) = q * scale. */
void tern_dequant(const TernaryMatrix *m, float *w);
/* q (rows, cols) in {-1,0,1}. */
void tern_unpack_codes(const TernaryMatrix *m, int8_t *q);
void tern_free(TernaryMatrix *m);

/* Fraction of zero weights. */
double tern_sparsity(const TernaryMatrix *m);
/* Packed code bytes (with row padding) + n_scales * dtype_size(scale_dtype). */
int64_t tern_bytes(const TernaryMatrix *m);
double tern_bits_per_weight(const TernaryMatrix *m);
/* ||dequant(m) - w||_2 / ||w||_2 (0 when w == 0 and m dequantises to 0). */
double tern_rel_error(const TernaryMatrix *m, const float *w);
void tern_scale_range(const TernaryMatrix *m, float *smin, float *smax);

/* ---- Activations ----------------------------------------------------- */
/* BitNet per-token int8: for each of the n rows of x (n, cols):
 * s = 127 / max(max|x|, 1e-5); xq = clamp(rintf(x*s), -128, 127); sx[t] = s.
 * x * xq / sx approximates x. */
void act_quant_int8_ref(const float *x, int64_t n, int64_t cols, int8_t *xq, float *sx);

#endif
