#include "runtime/linear.h"
#include "core/err.h"
#include "core/mem.h"
#include "cpu/tern_kernels.h"
#include "ternary_format.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t linear_scratch_bytes(int64_t n, int64_t in) {
    /* int8 activations (n, in) + per-token scales (n) + dequantised activations (n, in) */
    return (size_t)n * (size_t)in * (sizeof(float) + 1) + (size_t)n * sizeof(float) + 256;
}

/* The int8 dense twin: per scale group, D_g (n, out) = xq[:, g] @ q[:, g]^T by
 * sgemm (integer-valued, exact in f32 below 2^24), then y = sum_g s_g * D_g / sx. */
static int twin_int8(const Linear *lin, const int8_t *xq, const float *sx, int64_t n, float *y,
                     float *xf) {
    const TernaryMatrix *t = lin->t;
    int64_t in = lin->in, out = lin->out;
    float *d = mem_alloc(sizeof(float) * (size_t)(n * out), "int8 twin");
    if (!d) return -1;
    for (int64_t i = 0; i < n * in; i++) xf[i] = (float)xq[i];
    for (int64_t i = 0; i < n * out; i++) y[i] = 0.0f;
    for (int64_t g = 0; g < t->n_groups; g++) {
        int64_t k0 = g * t->group_cols;
        int64_t kn = k0 + t->group_cols < in ? t->group_cols : in - k0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)out, (int)kn, 1.0f,
                    xf + k0, (int)in, lin->qf + k0, (int)in, 0.0f, d, (int)out);
        for (int64_t s = 0; s < n; s++)
            for (int64_t r = 0; r < out; r++)
                y[s * out + r] += t->scales[r * t->scale_stride + g] * d[s * out + r];
    }
    for (int64_t s = 0; s < n; s++)
        for (int64_t r = 0; r < out; r++) y[s * out + r] /= sx[s];
    mem_free(d);
    return 0;
}

int linear_forward(const Linear *lin, const float *x, int64_t n, float *y, void *scratch) {
    if (n == 0) return 0;
    int8_t *xq = scratch;
    float *sx = (float *)((uintptr_t)(xq + n * lin->in + 63) & ~(uintptr_t)63);
    float *xdq = (float *)((uintptr_t)(sx + n + 15) & ~(uintptr_t)63);
    if (lin->act_int8) tern_act_quant_i8(x, n, lin->in, xq, sx);
    if (lin->t && !lin->twin) {
        if (lin->act_int8) return tern_matmul_i8(lin->t, xq, sx, n, y);
        return tern_matmul_f32(lin->t, x, n, y);
    }
    if (lin->twin && lin->act_int8) return twin_int8(lin, xq, sx, n, y, xdq);
    if (lin->act_int8) {
        /* reference twin of the int8 path: x' = xq / sx, then the dense GEMM */
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < lin->in; i++)
                xdq[t * lin->in + i] = (float)xq[t * lin->in + i] / sx[t];
        x = xdq;
    }
    /* W (out,in) @ x (n,in)^T -> y (n,out): row-major C = A B^T with A = x, B = W */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)lin->out, (int)lin->in, 1.0f,
                x, (int)lin->in, lin->w, (int)lin->in, 0.0f, y, (int)lin->out);
    return 0;
}

void linear_free(Linear *lin) {
    mem_free(lin->w);
    mem_free(lin->qf);
    lin->w = lin->qf = NULL;
    if (lin->t) {
        tern_free(lin->t);
        free(lin->t);
        lin->t = NULL;
    }
}

size_t linear_bytes(const Linear *lin) {
    if (lin->twin) return sizeof(float) * (size_t)(lin->out * lin->in);
    if (lin->t) return (size_t)tern_bytes(lin->t);
    return lin->w ? sizeof(float) * (size_t)(lin->out * lin->in) : 0;
}

void linear_describe(const Linear *lin, char *buf, size_t n) {
    if (lin->twin)
        snprintf(buf, n, "dense twin of ternary (group %s, scale %s) through sgemm, act %s",
                 quant_group_name(lin->t->group), dtype_name(lin->t->scale_dtype),
                 lin->act_int8 ? "int8" : "f32");
    else if (lin->t)
        snprintf(buf, n, "ternary packed, group %s, scale %s, %.3f bits/weight, act %s, kernel %s",
                 quant_group_name(lin->t->group), dtype_name(lin->t->scale_dtype),
                 tern_bits_per_weight(lin->t), lin->act_int8 ? "int8" : "f32", tern_kernel_name());
    else
        snprintf(buf, n, "dense f32 (sgemm), act %s", lin->act_int8 ? "int8" : "f32");
}

/* Makes the dense reference twin of a ternary linear (see Linear.twin). */
static int linear_make_twin(Linear *lin) {
    int64_t cnt = lin->out * lin->in;
    lin->w = mem_alloc(sizeof(float) * (size_t)cnt, lin->name);
    if (!lin->w) return -1;
    tern_dequant(lin->t, lin->w);
    if (lin->act_int8) {
        int8_t *q = xmalloc((size_t)cnt);
        lin->qf = mem_alloc(sizeof(float) * (size_t)cnt, lin->name);
        if (!lin->qf) {
            free(q);
            return -1;
        }
        tern_unpack_codes(lin->t, q);
        for (int64_t i = 0; i < cnt; i++) lin->qf[i] = (float)q[i];
        free(q);
    }
    lin->twin = 1;
    return 0;
}

/* Replaces a ternary linear by its dense f32 dequantisation (input to re-ternarising). */
static int linear_densify(Linear *lin) {
    float *w = mem_alloc(sizeof(float) * (size_t)(lin->out * lin->in), lin->name);
    if (!w) return -1;
    tern_dequant(lin->t, w);
    tern_free(lin->t);
    free(lin->t);
    lin->t = NULL;
    lin->w = w;
    return 0;
}

/* Native BitNet: packed U8 (ceil(out/4), in) + per-tensor weight_scale. */
int model_load_bitnet_linear(Model *m, Linear *lin, const ModelLoadOpts *opts) {
    char name[160];
    snprintf(name, sizeof name, "%s.weight", lin->name);
    const StTensor *t = st_find(&m->st, name);
    int64_t prow = (lin->out + 3) / 4;
    if (t->ndim != 2 || t->shape[0] != prow || t->shape[1] != lin->in)
        return err_set("tensor '%s': packed BitNet shape [%lld, %lld] expected for %lldx%lld, "
                       "file has [%lld, %lld]", name, (long long)prow, (long long)lin->in,
                       (long long)lin->out, (long long)lin->in, (long long)t->shape[0],
                       (long long)(t->ndim > 1 ? t->shape[1] : 0));
    snprintf(name, sizeof name, "%s.weight_scale", lin->name);
    const StTensor *s = st_find(&m->st, name);
    if (!s) return err_set("tensor '%s' is missing (packed BitNet weights need it)", name);
    if (s->numel != 1) return err_set("tensor '%s': one value expected, found %lld", name,
                                      (long long)s->numel);
    /* through memcpy: the value may sit at any byte offset of the mapping */
    float ws;
    uint16_t h = 0;
    if (s->dtype == DT_BF16 || s->dtype == DT_F16) memcpy(&h, s->data, sizeof h);
    if (s->dtype == DT_BF16) ws = bf16_to_f32(h);
    else if (s->dtype == DT_F16) ws = f16_to_f32(h);
    else if (s->dtype == DT_F32) memcpy(&ws, s->data, 4);
    else return err_set("tensor '%s': dtype %s, expected a float", name, st_dtype_name(s->dtype));
    if (!(ws > 0)) return err_set("tensor '%s': weight_scale %g must be positive", name, (double)ws);
    lin->t = xcalloc(1, sizeof(TernaryMatrix));
    if (tern_from_bitnet_packed(t->data, lin->out, lin->in, ws,
                                m->cfg.bitnet_scale == BITNET_AUTOBITLINEAR, lin->t) != 0) {
        free(lin->t);
        lin->t = NULL;
        return err_prefix("%s: ", lin->name);
    }
    m->native_ternary = 1;
    lin->act_int8 = 1; /* BitNet b1.58: per-token int8 activations into every packed linear */
    return 0;
}

/* A ternlab checkpoint's linear: U8 (out, tern_row_bytes(in)) codes in the
 * ternary_format.h layout + F32 `weight_scales` (already rounded to the spec's
 * scale dtype).  Unpacked and re-packed through tern_from_codes, which rejects
 * invalid codes. */
int model_load_ternlab_linear(Model *m, Linear *lin, const QuantSpec *sp) {
    const QuantSpec spec = *sp; /* (the checkpoint's, parsed by load_linear) */
    char name[160];
    snprintf(name, sizeof name, "%s.weight", lin->name);
    const StTensor *t = st_find(&m->st, name);
    int64_t rb = tern_row_bytes(lin->in);
    if (t->ndim != 2 || t->shape[0] != lin->out || t->shape[1] != rb)
        return err_set("tensor '%s': packed ternary shape [%lld, %lld] expected", name,
                       (long long)lin->out, (long long)rb);
    snprintf(name, sizeof name, "%s.weight_scales", lin->name);
    const StTensor *sc = st_find(&m->st, name);
    int64_t ns = tern_n_scales(spec.group, lin->out, lin->in);
    if (!sc || sc->dtype != DT_F32 || sc->numel != ns)
        return err_set("tensor '%s': F32 with %lld scales expected", name, (long long)ns);
    int8_t *q = xmalloc((size_t)(lin->out * lin->in));
    const uint8_t *codes = t->data;
    for (int64_t r = 0; r < lin->out; r++)
        for (int64_t k = 0; k < lin->in; k++) q[r * lin->in + k] = (int8_t)tern_get(codes + r * rb, k);
    float *scales = xmalloc(sizeof(float) * (size_t)ns);
    memcpy(scales, sc->data, sizeof(float) * (size_t)ns);
    /* the stored scales are values of the spec's scale dtype (quantize writes them
     * rounded); one that is not contradicts the spec (rounding it had run another
     * model, exit 0).  Non-finite ones are tern_from_codes' to refuse. */
    for (int64_t i = 0; i < ns; i++)
        if (isfinite(scales[i]) && dtype_round(spec.scale, scales[i]) != scales[i]) {
            const double v = scales[i];
            free(q);
            free(scales);
            return err_set("tensor '%s': scale %lld is %.9g, not a value of the spec's scale dtype "
                           "(quantization_config.spec says scale=%s): the file contradicts its spec", name,
                           (long long)i, v, quant_scale_name(spec.scale));
        }
    lin->t = xcalloc(1, sizeof(TernaryMatrix));
    int rc = tern_from_codes(q, scales, lin->out, lin->in, spec.group, spec.scale, lin->t);
    free(q);
    free(scales);
    if (rc != 0) {
        free(lin->t);
        lin->t = NULL;
        return err_prefix("%s: ", lin->name);
    }
    lin->act_int8 = spec.act == QA_INT8;
    m->native_ternary = 1;
    return 0;
}

/* Applies --quant to one decoder linear (after it was loaded) and --dense. */
int model_quantise_linear(Model *m, Linear *lin, int layer, const char *kind,
                          const ModelLoadOpts *opts) {
    if (opts->quant && !m->has_quant) {
        if (quant_spec_parse(opts->quant, &m->quant) != 0) return err_prefix("--quant: ");
        /* (a range past the last layer had selected nothing, silently) */
        for (int i = 0; m->quant.layers == QL_RANGES && i < m->quant.n_ranges; i++)
            if (m->quant.range_hi[i] >= m->cfg.n_layers)
                return err_set("--quant layers: %d-%d is past the model's %d layers (0-%d)", m->quant.range_lo[i],
                               m->quant.range_hi[i], m->cfg.n_layers, m->cfg.n_layers - 1);
        m->has_quant = 1;
    }
    if (m->has_quant) {
        int sel = quant_layer_selected(&m->quant, layer, kind);
        if (sel < 0) return -1;
        if (sel && lin->t && m->quant.act_only) {
            /* act= alone: a ternary linear keeps its weights (it had been re-ternarised with
             * the default rule, so act could not be varied on a native checkpoint alone) */
            lin->act_int8 = m->quant.act == QA_INT8;
            lin->kept = 1;
        } else if (sel) {
            /* re-ternarise: from the dense weights, or (native ternary) from their dequantised
             * values, because the spec asks for it */
            if (lin->t && linear_densify(lin) != 0) return -1;
            TernaryMatrix *tm = xcalloc(1, sizeof *tm);
            if (tern_from_dense(lin->w, lin->out, lin->in, &m->quant, tm) != 0) {
                free(tm);
                return err_prefix("%s: ", lin->name);
            }
            mem_free(lin->w);
            lin->w = NULL;
            lin->t = tm;
            if (m->quant.act_explicit) lin->act_int8 = m->quant.act == QA_INT8;
            /* without an explicit act, keep the model's own (int8 for BitNet, f32 for BF16) */
        } else if (m->quant.act_explicit && lin->t) {
            lin->act_int8 = m->quant.act == QA_INT8;
        }
    }
    if (opts->dense && lin->t) return linear_make_twin(lin);
    return 0;
}

int model_act_only_kept(const Model *m) {
    int kept = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const Layer *L = &m->layers[l];
        const Linear *lins[] = LAYER_LINEARS(L);
        for (int i = 0; i < LAYER_N_LINEARS; i++) kept += lins[i]->kept;
    }
    return kept;
}

size_t model_layer_linear_bytes(const Model *m) {
    size_t b = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const Layer *L = &m->layers[l];
        const Linear *lins[] = LAYER_LINEARS(L);
        for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++) b += linear_bytes(lins[i]);
    }
    return b;
}

size_t model_weight_bytes(const Model *m) {
    size_t b = m->lm_head_tied ? 0 : linear_bytes(&m->lm_head);
    b += sizeof(float) * (size_t)m->cfg.vocab * (size_t)m->cfg.hidden;
    return b + model_layer_linear_bytes(m);
}
