/* A llama- or bitnet-architecture GGUF (llama.cpp's converter output) into a
 * Model — the same struct model_load fills from an HF folder, so every command
 * runs on it.
 * Contract in load/gguf.h (model_load_gguf). */
#include "core/dtype.h"
#include "core/err.h"
#include "core/mem.h"
#include "load/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int model_quantise_linear(Model *m, Linear *lin, int layer, const char *kind,
                          const ModelLoadOpts *opts);

int64_t gguf_hf_row_of(int64_t r, int64_t hd) {
    int64_t h = r / hd, j = r % hd;
    return h * hd + (j % 2) * (hd / 2) + j / 2;
}

/* The tensor `name` with shape (rows, cols) (rows 0: a vector of cols). */
static int find_shaped(const GgufFile *g, const char *name, int64_t rows, int64_t cols,
                       const GgufTensor **out) {
    const GgufTensor *t = gguf_find_tensor(g, name);
    if (!t) return err_set("tensor '%s' is missing from the file", name);
    int ok = rows ? (t->n_dims == 2 && t->ne[0] == cols && t->ne[1] == rows)
                  : (t->n_dims == 1 && t->ne[0] == cols);
    if (!ok) {
        if (rows)
            return err_set("tensor '%s': ne [%lld, %lld] (cols, rows) expected from the "
                           "metadata, the file has %d dims [%lld, %lld, ...]", name,
                           (long long)cols, (long long)rows, t->n_dims, (long long)t->ne[0],
                           (long long)t->ne[1]);
        return err_set("tensor '%s': ne [%lld] expected from the metadata, the file has "
                       "%d dims [%lld, ...]", name, (long long)cols, t->n_dims,
                       (long long)t->ne[0]);
    }
    *out = t;
    return 0;
}

/* Any readable type -> new f32 buffer (rows, cols); perm_hd > 0 undoes the q/k
 * permutation with that head size. */
static int load_f32(const GgufFile *g, const char *name, int64_t rows, int64_t cols,
                    int64_t perm_hd, float **out) {
    const GgufTensor *t;
    if (find_shaped(g, name, rows, cols, &t) != 0) return -1;
    float *w = mem_alloc(sizeof(float) * (size_t)t->n_elements, name);
    if (!w) return -1;
    if (gguf_tensor_to_f32(t, w) != 0 || model_refuse_nonfinite(w, (size_t)t->n_elements, name) != 0) {
        mem_free(w);
        return -1;
    }
    if (perm_hd > 0) {
        float *p = mem_alloc(sizeof(float) * (size_t)t->n_elements, name);
        if (!p) {
            mem_free(w);
            return -1;
        }
        for (int64_t r = 0; r < rows; r++)
            memcpy(p + gguf_hf_row_of(r, perm_hd) * cols, w + r * cols, sizeof(float) * (size_t)cols);
        mem_free(w);
        w = p;
    }
    *out = w;
    return 0;
}

/* TQ1_0/TQ2_0 -> packed ternary: codes straight into int8 and then the packed
 * layout, one f16 scale per 256-weight block (group 256) — or, where the
 * file's ternlab.quant_spec (rec, may be NULL) says group row or tensor and
 * every block of a row (of the tensor) holds the same scale, that one scale
 * in the spec's group: the matrix the file was written from.  (Stored as
 * group 256, its f32 kernels other than the AVX-512 lookup one had summed it
 * per block, so the file ran a few ulps away from its model on CPUs without
 * AVX-512 and at fewer than 4 tokens.) */
static int load_ternary(const GgufTensor *t, int64_t rows, int64_t cols, int64_t perm_hd, const QuantSpec *rec,
                        TernaryMatrix **out) {
    int64_t nb = cols / GGUF_QK_K;
    size_t bb = gguf_type_block_bytes(t->type);
    int8_t *q = mem_alloc((size_t)(rows * cols), t->name);
    float *sc = mem_alloc(sizeof(float) * (size_t)(rows * nb), t->name);
    int rc = (q && sc) ? 0 : -1;
    for (int64_t r = 0; r < rows && rc == 0; r++) {
        int64_t dst = perm_hd > 0 ? gguf_hf_row_of(r, perm_hd) : r;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = t->data + (size_t)(r * nb + b) * bb;
            uint16_t d;
            int8_t *qb = q + dst * cols + b * GGUF_QK_K;
            if (t->type == GGML_TYPE_TQ1_0) {
                gguf_tq1_0_decode(blk, qb, &d);
            } else if (gguf_tq2_0_decode(blk, qb, &d) != 0) {
                rc = err_set("tensor '%s': row %lld block %lld holds code 3 (value +2), which "
                             "is not ternary", t->name, (long long)r, (long long)b);
                break;
            }
            sc[dst * nb + b] = f16_to_f32(d);
        }
    }
    QuantGroup grp = QG_256;
    if (rc == 0 && rec && (rec->group == QG_ROW || rec->group == QG_TENSOR)) {
        int same = 1;
        for (int64_t i = 1; i < rows * nb && same; i++)
            same = sc[i] == sc[rec->group == QG_TENSOR ? 0 : i - i % nb];
        if (same) {
            grp = rec->group;
            for (int64_t r = 0; r < rows; r++) sc[r] = sc[r * nb]; /* (row r's first block; r * nb >= r) */
        }
    }
    if (rc == 0) {
        TernaryMatrix *tm = xcalloc(1, sizeof *tm);
        rc = tern_from_codes(q, sc, rows, cols, grp, DT_F16, tm);
        if (rc == 0) *out = tm;
        else {
            free(tm);
            err_prefix("tensor '%s': ", t->name);
        }
    }
    mem_free(q);
    mem_free(sc);
    return rc;
}

/* A linear that the file's ternlab.quant_spec made ternary but that the file
 * holds as floats: gguf_write_model writes rows that are not whole 256-weight
 * TQ blocks (input size not a multiple of 256) as their exact dequantised
 * values, ±scale or 0 within each of the spec's groups.  The codes and scales
 * are read back from them, so that the linear runs as it did when written
 * (packed kernel, the recorded activation mode), not as a dense f32 linear.
 * Scales keep the spec's dtype when they are values of it (else f32: a spec
 * whose TQ scales were rounded to f16 while these rows kept f32 ones).
 * Values that are not ternary in those groups contradict the recorded spec:
 * an error naming the tensor. */
static int ternary_from_float(Linear *lin, const char *tname, const QuantSpec *qs) {
    int64_t rows = lin->out, cols = lin->in;
    int64_t gc = quant_group_cols(qs->group, cols), ng = (cols + gc - 1) / gc;
    int64_t ns = tern_n_scales(qs->group, rows, cols);
    float *sc = xcalloc((size_t)ns, sizeof(float));
    int8_t *q = mem_alloc((size_t)(rows * cols), tname);
    int rc = q ? 0 : -1;
    for (int64_t r = 0; r < rows && rc == 0; r++)
        for (int64_t k = 0; k < cols; k++) {
            float w = lin->w[r * cols + k], a = fabsf(w);
            int64_t i = qs->group == QG_TENSOR ? 0 : r * ng + k / gc;
            if (!isfinite(w) || (a > 0 && sc[i] > 0 && a != sc[i])) {
                rc = err_set("tensor '%s': ternlab.quant_spec makes it ternary (group %s), but "
                             "its value %g at [%lld, %lld] is not 0 or ±%g as the other values "
                             "of its scale group (the file contradicts its spec)", tname,
                             quant_group_name(qs->group), (double)w, (long long)r, (long long)k,
                             (double)sc[i]);
                break;
            }
            if (a > 0) sc[i] = a;
            q[r * cols + k] = (int8_t)((w > 0) - (w < 0));
        }
    DType sdt = qs->scale;
    for (int64_t i = 0; i < ns && rc == 0; i++)
        if (dtype_round(sdt, sc[i]) != sc[i]) sdt = DT_F32;
    TernaryMatrix *tm = NULL;
    if (rc == 0) {
        tm = xcalloc(1, sizeof *tm);
        rc = tern_from_codes(q, sc, rows, cols, qs->group, sdt, tm);
        if (rc != 0) {
            free(tm);
            err_prefix("tensor '%s': ", tname);
        }
    }
    if (rc == 0) {
        mem_free(lin->w);
        lin->w = NULL;
        lin->t = tm;
    }
    mem_free(q);
    free(sc);
    return rc;
}

/* rec: the file's ternlab.quant_spec (NULL when it has none). */
static int load_linear(Model *m, const GgufFile *g, Linear *lin, int layer, const char *gname,
                       const char *hfname, const char *kind, int64_t out, int64_t in,
                       int64_t perm_hd, const QuantSpec *rec, const ModelLoadOpts *opts) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s.weight", layer, gname);
    snprintf(lin->name, sizeof lin->name, "model.layers.%d.%s", layer, hfname);
    lin->out = out;
    lin->in = in;
    const GgufTensor *t;
    if (find_shaped(g, name, out, in, &t) != 0) return -1;
    /* a file this writer made from an act=int8 model: restore int8 activations */
    int act_int8 = rec && rec->act_explicit && rec->act == QA_INT8;
    if (t->type == GGML_TYPE_TQ1_0 || t->type == GGML_TYPE_TQ2_0) {
        /* a ternary linear that the recorded spec leaves out contradicts it (quantize
         * writes no such file: quantized_spec) */
        const int sel = rec ? quant_layer_selected(rec, layer, kind) : 1;
        if (sel < 0) return err_prefix("%s: ternlab.quant_spec: ", g->path);
        if (!sel)
            return err_set("tensor '%s' is %s, but ternlab.quant_spec leaves it out (the file contradicts "
                           "its spec)", name, t->type == GGML_TYPE_TQ1_0 ? "TQ1_0" : "TQ2_0");
        if (load_ternary(t, out, in, perm_hd, rec, &lin->t) != 0) return -1;
        lin->act_int8 = act_int8;
        m->native_ternary = 1;
    } else if (load_f32(g, name, out, in, perm_hd, &lin->w) != 0) {
        return -1;
    } else if (rec) {
        int sel = quant_layer_selected(rec, layer, kind);
        if (sel < 0) return err_prefix("%s: ternlab.quant_spec: ", g->path);
        if (sel) {
            if (ternary_from_float(lin, name, rec) != 0) return -1;
            lin->act_int8 = act_int8;
            m->native_ternary = 1;
        }
    }
    /* bitnet: blk.N.<linear>.scale, one value llama.cpp's graph multiplies into the
     * linear's output (its loader takes it where present; older BitNet conversions
     * wrote them), folded into the linear's scales or weights */
    if (m->cfg.arch == ARCH_BITNET) {
        snprintf(name, sizeof name, "blk.%d.%s.scale", layer, gname);
        const GgufTensor *st = gguf_find_tensor(g, name);
        if (st) {
            float s = 0.0f;
            if (st->n_elements != 1 || gguf_tensor_to_f32(st, &s) != 0 || !isfinite(s))
                return err_set("tensor '%s': one finite float expected (the linear's output scale)", name);
            if (lin->t) {
                for (int64_t i = 0; i < lin->t->n_scales; i++) lin->t->scales[i] *= s;
                for (int64_t i = 0; i < lin->t->n_scales && lin->t->scale_dtype != DT_F32; i++)
                    if (dtype_round(lin->t->scale_dtype, lin->t->scales[i]) != lin->t->scales[i])
                        lin->t->scale_dtype = DT_F32;
            } else {
                for (int64_t i = 0; i < out * in; i++) lin->w[i] *= s;
            }
        }
    }
    return model_quantise_linear(m, lin, layer, kind, opts);
}

/* The metadata key "<arch>.<suffix>" (llama.* or bitnet.*), in a buffer of the caller's. */
#define AKEY_LEN 96
static const char *akey(char *buf, const ModelConfig *c, const char *suffix) {
    snprintf(buf, AKEY_LEN, "%s.%s", c->model_type, suffix);
    return buf;
}

/* A required positive <arch>.* integer that fits an int. */
static int req_int(const GgufFile *g, const ModelConfig *c, const char *suffix, int required, int *out) {
    char key[AKEY_LEN];
    akey(key, c, suffix);
    int64_t v;
    int r = gguf_get_int(g, key, &v);
    if (r < 0) return -1;
    if (r == 0) return required ? err_set("%s: missing metadata key '%s'", g->path, key) : 0;
    if (v < 1 || v > (1 << 30)) return err_set("%s: %s = %lld is out of range", g->path, key,
                                               (long long)v);
    *out = (int)v;
    return 1;
}

/* llama.cpp's "llama" architecture, and its "bitnet" one (the converter's
 * output for 1bitLLM's BitnetForCausalLM and BitNet b1.58 checkpoints: llama
 * layers plus attn_sub_norm / ffn_sub_norm before attn_output / ffn_down, RoPE
 * in NEOX order so q/k unpermuted, lm_head always token_embd, the FFN
 * activation <arch>.hidden_activation, SiLU when absent). */
static int load_config(const GgufFile *g, Model *m) {
    ModelConfig *c = &m->cfg;
    const char *s;
    size_t len;
    char key[AKEY_LEN];
    int r = gguf_get_str(g, "general.architecture", &s, &len);
    if (r <= 0) return r < 0 ? -1 : err_set("%s: missing metadata key 'general.architecture'", g->path);
    if (len == 5 && memcmp(s, "llama", 5) == 0) c->arch = ARCH_LLAMA;
    else if (len == 6 && memcmp(s, "bitnet", 6) == 0) c->arch = ARCH_BITNET;
    else
        return err_set("%s: architecture '%.*s' is not supported (llama, bitnet)", g->path,
                       (int)(len > 64 ? 64 : len), s);
    snprintf(c->model_type, sizeof c->model_type, "%s", c->arch == ARCH_BITNET ? "bitnet" : "llama");
    c->act = ACT_SILU;
    if (c->arch == ARCH_BITNET) {
        if ((r = gguf_get_str(g, akey(key, c, "hidden_activation"), &s, &len)) < 0) return -1;
        if (r == 1) {
            if (len == 4 && memcmp(s, "silu", 4) == 0) c->act = ACT_SILU;
            else if (len == 5 && memcmp(s, "relu2", 5) == 0) c->act = ACT_RELU2;
            else
                return err_set("%s: %s '%.*s' is not supported (silu, relu2)", g->path, key,
                               (int)(len > 64 ? 64 : len), s);
        }
    }
    int64_t experts = 0;
    if (gguf_get_int(g, akey(key, c, "expert_count"), &experts) < 0) return -1;
    if (experts > 0) return err_set("%s: mixture-of-experts %s (%lld experts) is not supported",
                                    g->path, c->model_type, (long long)experts);
    if (req_int(g, c, "embedding_length", 1, &c->hidden) < 0 ||
        req_int(g, c, "block_count", 1, &c->n_layers) < 0 ||
        req_int(g, c, "attention.head_count", 1, &c->n_heads) < 0 ||
        req_int(g, c, "feed_forward_length", 1, &c->inter) < 0)
        return -1;
    c->n_kv_heads = c->n_heads; /* llama.cpp's default when head_count_kv is absent */
    if (req_int(g, c, "attention.head_count_kv", 0, &c->n_kv_heads) < 0) return -1;
    if ((r = req_int(g, c, "attention.key_length", 0, &c->head_dim)) < 0) return -1;
    if (r == 0) {
        if (c->hidden % c->n_heads != 0)
            return err_set("%s: embedding_length %d is not a multiple of head_count %d and "
                           "attention.key_length is absent", g->path, c->hidden, c->n_heads);
        c->head_dim = c->hidden / c->n_heads;
    }
    int vlen = c->head_dim, rot = c->head_dim;
    if (req_int(g, c, "attention.value_length", 0, &vlen) < 0 || req_int(g, c, "rope.dimension_count", 0, &rot) < 0)
        return -1;
    if (vlen != c->head_dim)
        return err_set("%s: attention.value_length %d differs from key_length %d (not supported)",
                       g->path, vlen, c->head_dim);
    if (rot != c->head_dim)
        return err_set("%s: rope.dimension_count %d differs from the head size %d (partial "
                       "rotary embeddings are not supported)", g->path, rot, c->head_dim);
    if (c->head_dim % 2 != 0)
        return err_set("%s: head size %d must be even for RoPE", g->path, c->head_dim);
    if (c->n_heads % c->n_kv_heads != 0)
        return err_set("%s: head_count %d is not a multiple of head_count_kv %d", g->path,
                       c->n_heads, c->n_kv_heads);
    if (req_int(g, c, "context_length", 0, &c->max_pos) < 0) return -1;
    double eps;
    if ((r = gguf_get_float(g, akey(key, c, "attention.layer_norm_rms_epsilon"), &eps)) <= 0)
        return r < 0 ? -1 : err_set("%s: missing metadata key '%s'", g->path, key);
    if (!(eps >= 1e-30 && eps <= 1.0))
        return err_set("%s: layer_norm_rms_epsilon %g is outside [1e-30, 1]", g->path, eps);
    c->eps = (float)eps;
    c->rope_theta = 10000.0;
    if ((r = gguf_get_float(g, akey(key, c, "rope.freq_base"), &c->rope_theta)) < 0) return -1;
    if (!(c->rope_theta >= 1.0 && c->rope_theta <= 1e30))
        return err_set("%s: rope.freq_base %g is outside [1, 1e30]", g->path, c->rope_theta);
    if (r == 0) model_note(m, "%s", "rope.freq_base absent: 10000 (llama.cpp's default)");
    /* RoPE scaling: type none, or linear (what llama.cpp's converter writes for
     * bitnet, by a factor of 1: none), else refused.  Without a type, or linear,
     * llama.cpp scales linearly by rope.scaling.factor (freq_scale = 1 / factor; 0 is
     * none), or by the legacy rope.scale_linear where the factor is absent (it had
     * been ignored, exit 0): transformers' linear rope type.  (Llama 3.1+'s scaling
     * comes as the tensor rope_freqs.weight: model_load_gguf.) */
    char tkey[AKEY_LEN], fkey[AKEY_LEN];
    akey(tkey, c, "rope.scaling.type");
    if (gguf_get_str(g, tkey, &s, &len) < 0) return -1;
    const int has_type = gguf_find_kv(g, tkey) != NULL, linear = has_type && len == 6 && !memcmp(s, "linear", 6);
    if (has_type && !(len == 4 && memcmp(s, "none", 4) == 0) && !linear)
        return err_set("%s: %s '%.*s' is not supported", g->path, tkey, (int)(len > 64 ? 64 : len), s);
    if (!has_type || linear) {
        double f = 0.0;
        akey(fkey, c, "rope.scaling.factor");
        if ((r = gguf_get_float(g, fkey, &f)) < 0) return -1;
        if (r == 0) { /* (llama.cpp: the legacy key where the factor is absent) */
            akey(fkey, c, "rope.scale_linear");
            f = 0.0;
            if ((r = gguf_get_float(g, fkey, &f)) < 0) return -1;
        }
        if (r > 0 && !(f == 0.0 || (f >= 1e-30 && f <= 1e30)))
            return err_set("%s: %s %g is not a RoPE scaling factor (0: none, else in [1e-30, 1e30])", g->path,
                           fkey, f);
        if (r > 0 && f != 0.0 && f != 1.0) {
            c->rope_kind = ROPE_LINEAR;
            c->rope_factor = f;
            char note[AKEY_LEN + 48];
            snprintf(note, sizeof note, "RoPE scaled linearly by %s %g", fkey, f);
            model_note(m, "%s", note);
        }
    }
    /* a factor on the rotation's cos / sin (llama.cpp multiplies its attention factor by
     * it, whatever the type): not applied here, so refused unless 1 */
    double af = 1.0;
    akey(fkey, c, "rope.scaling.attn_factor");
    if ((r = gguf_get_float(g, fkey, &af)) < 0) return -1;
    if (r > 0 && af != 1.0)
        return err_set("%s: %s %g scales the RoPE rotation, which ternlab does not (not supported)", g->path, fkey,
                       af);
    int vocab = 0;
    if ((r = req_int(g, c, "vocab_size", 0, &vocab)) < 0) return -1;
    if (r == 0) {
        const GgufKV *tok = gguf_find_kv(g, "tokenizer.ggml.tokens");
        if (tok && tok->type == GGUF_TYPE_ARRAY && tok->n > 0 && tok->n < (1u << 30))
            vocab = (int)tok->n;
        const GgufTensor *e = gguf_find_tensor(g, "token_embd.weight");
        if (!vocab && e && e->n_dims == 2 && e->ne[1] > 0 && e->ne[1] < (1 << 30))
            vocab = (int)e->ne[1];
        if (!vocab)
            return err_set("%s: vocabulary size unknown (no %s.vocab_size, tokenizer.ggml.tokens "
                           "or token_embd.weight)", g->path, c->model_type);
    }
    c->vocab = vocab;
    if (c->arch == ARCH_BITNET && gguf_find_tensor(g, "output.weight"))
        return err_set("%s: tensor 'output.weight' in a bitnet GGUF: llama.cpp's bitnet architecture "
                       "takes the logits from token_embd and reads no output tensor (not supported)", g->path);
    c->tie = gguf_find_tensor(g, "output.weight") ? TIE_FALSE : TIE_TRUE;
    return 0;
}

/* A block's tensors (each NAME.weight): a llama block's, then bitnet's two sub-norms. */
static const char *const blk_tensors[] = {"attn_norm", "ffn_norm", "attn_q",        "attn_k",
                                          "attn_v",    "attn_output", "ffn_gate",    "ffn_up",
                                          "ffn_down",  "attn_sub_norm", "ffn_sub_norm"};
#define N_BLK_LLAMA 9

static int n_blk_tensors(const ModelConfig *c) {
    return c->arch == ARCH_BITNET ? (int)(sizeof blk_tensors / sizeof blk_tensors[0]) : N_BLK_LLAMA;
}

/* Cheap checks before anything is allocated (the layer array and every
 * buffer scale with <arch>.block_count, which a file may overstate):
 *  - the first and the last block's tensors exist;
 *  - no tensor blk.N.* lies past <arch>.block_count (a count that understates
 *    the blocks had run the first ones alone), and every such N is a plain
 *    index (model_refuse_layer_past, model.c);
 *  - no tensor that this model would silently leave out: a bias of any
 *    linear or norm (blk.N.attn_q.bias, ...: ternlab's have none), or
 *    rope_freqs.weight outside a llama (the per-frequency factors llama.cpp
 *    writes for Llama 3.1+ RoPE scaling; rope_factors reads them), nor any other
 *    blk.N.* than the block's norms and linears (model_refuse_unknown_layer_tensor:
 *    a bitnet sub-norm in a llama file; a linear's .scale outside a bitnet one).
 * Returns 0, or -1 with a message naming the tensor. */
static int check_tensors(const GgufFile *g, const ModelConfig *c) {
    char name[96], count[AKEY_LEN];
    akey(count, c, "block_count");
    const int nb = n_blk_tensors(c);
    int ends[2] = {0, c->n_layers - 1};
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < nb; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", ends[e], blk_tensors[i]);
            if (!gguf_find_tensor(g, name))
                return err_set("%s is %d, but tensor '%s' (block %d) is missing from the file (%lld tensors)",
                               count, c->n_layers, name, ends[e], (long long)g->n_tensors);
        }
    /* each NAME.weight; bitnet also each linear's NAME.scale (load_linear) */
    enum { NBT = sizeof blk_tensors / sizeof blk_tensors[0] };
    const char *known[2 * NBT + 1];
    char kbuf[2 * NBT][32];
    int nk = 0;
    for (int i = 0; i < nb; i++) {
        snprintf(kbuf[nk], sizeof kbuf[nk], "%s.weight", blk_tensors[i]);
        known[nk] = kbuf[nk];
        nk++;
        if (c->arch == ARCH_BITNET && !strstr(blk_tensors[i], "norm")) {
            snprintf(kbuf[nk], sizeof kbuf[nk], "%s.scale", blk_tensors[i]);
            known[nk] = kbuf[nk];
            nk++;
        }
    }
    known[nk] = NULL;
    /* (llama.cpp's name for a rotary inv_freq buffer: derived from the metadata) */
    static const char *const ignored[] = {"attn_rot_embd", "attn_rot_embd.weight", NULL};
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const char *n = g->tensors[i].name;
        if (model_refuse_bias(n) != 0 || model_refuse_layer_past(n, "blk.", c->n_layers, "block", count) != 0 ||
            model_refuse_unknown_layer_tensor(n, "blk.", known, ignored) != 0)
            return -1;
        if (strcmp(n, "rope_freqs.weight") == 0 && c->arch != ARCH_LLAMA)
            return err_set("tensor 'rope_freqs.weight' (RoPE frequency factors) in a %s file: llama.cpp "
                           "reads it for llama only (not supported)", c->model_type);
    }
    return 0;
}

/* rope_freqs.weight, where present (a llama: check_tensors): llama.cpp's
 * divisor of each RoPE frequency, which its converter writes for Llama 3.1+
 * (transformers' llama3 rope type) — head_dim / 2 values of at least 1e-30.  0, or -1
 * with err_set. */
static int rope_factors(const GgufFile *g, ModelConfig *c, Model *m) {
    if (!gguf_find_tensor(g, "rope_freqs.weight")) return 0;
    const int half = c->head_dim / 2;
    if (half > ROPE_MAX_FACTORS)
        return err_set("tensor 'rope_freqs.weight': head size %d has more than %d RoPE frequencies (not "
                       "supported)", c->head_dim, ROPE_MAX_FACTORS);
    if (c->rope_kind != ROPE_DEFAULT)
        return err_set("tensor 'rope_freqs.weight' beside linear RoPE scaling (factor %g): the two together "
                       "are not supported", c->rope_factor);
    float *ff;
    if (load_f32(g, "rope_freqs.weight", 0, half, 0, &ff) != 0) return -1;
    for (int i = 0; i < half; i++)
        if (!(ff[i] >= 1e-30f)) { /* (finite: load_f32) */
            const double v = ff[i];
            mem_free(ff);
            return err_set("tensor 'rope_freqs.weight': factor %d is %g (RoPE frequency divisors are at least "
                           "1e-30)", i, v);
        }
    memcpy(c->rope_ff, ff, sizeof(float) * (size_t)half);
    mem_free(ff);
    c->rope_kind = ROPE_FACTORS;
    model_note(m, "%s", "RoPE frequencies divided by rope_freqs.weight (llama.cpp's form of Llama 3.1+ scaling)");
    return 0;
}

int model_load_gguf(const char *path, const ModelLoadOpts *opts, Model *m) {
    static const ModelLoadOpts none = {0};
    if (!opts) opts = &none;
    memset(m, 0, sizeof *m);
    m->path = xstrdup(path);
    GgufFile g;
    if (gguf_open(path, &g) != 0) {
        model_free(m);
        return -1;
    }
    int rc = load_config(&g, m);
    if (rc == 0) rc = check_tensors(&g, &m->cfg);
    if (rc == 0) rc = rope_factors(&g, &m->cfg, m);
    /* a file this writer made: the spec its ternary linears were made with
     * (which ones, activation mode) */
    QuantSpec rec_spec;
    const QuantSpec *rec = NULL;
    const char *spec;
    size_t slen;
    int r = rc == 0 ? gguf_get_str(&g, "ternlab.quant_spec", &spec, &slen) : 0;
    if (r < 0) rc = -1;
    if (r == 1) {
        char buf[256];
        snprintf(buf, sizeof buf, "%.*s", (int)(slen < 255 ? slen : 255), spec);
        if (slen >= sizeof buf) {
            rc = err_set("ternlab.quant_spec is %zu bytes long (at most 255)", slen);
        } else if (quant_spec_parse(buf, &rec_spec) != 0) {
            rc = err_prefix("ternlab.quant_spec '%s' is not a QuantSpec this version reads: ", buf);
        } else {
            rec = &rec_spec;
            /* kept, so that writing this model out again records the spec (gguf_write.c) */
            snprintf(m->cfg.ternlab_spec, sizeof m->cfg.ternlab_spec, "%s", buf);
            model_note(m, "written by ternlab from a model quantised with %s", buf);
        }
    }
    const ModelConfig *c = &m->cfg;
    int64_t H = c->hidden, hd = c->head_dim, Q = (int64_t)c->n_heads * hd,
            KV = (int64_t)c->n_kv_heads * hd, I = c->inter;
    if (rc == 0) rc = load_f32(&g, "token_embd.weight", c->vocab, H, 0, &m->embed);
    if (rc == 0) rc = load_f32(&g, "output_norm.weight", 0, H, 0, &m->final_norm);
    if (rc == 0) m->layers = xcalloc((size_t)c->n_layers, sizeof(Layer));
    char name[96];
    for (int l = 0; l < c->n_layers && rc == 0; l++) {
        Layer *L = &m->layers[l];
#define NAME(t) (snprintf(name, sizeof name, "blk.%d." t ".weight", l), name)
        rc = load_f32(&g, NAME("attn_norm"), 0, H, 0, &L->attn_norm);
        if (rc == 0) rc = load_f32(&g, NAME("ffn_norm"), 0, H, 0, &L->ffn_norm);
        if (rc == 0 && c->arch == ARCH_BITNET) {
            rc = load_f32(&g, NAME("attn_sub_norm"), 0, Q, 0, &L->attn_sub_norm);
            if (rc == 0) rc = load_f32(&g, NAME("ffn_sub_norm"), 0, I, 0, &L->ffn_sub_norm);
        }
#undef NAME
        /* q and k: un-permute with the head size (k has n_kv_heads heads of it); bitnet
         * rotates in NEOX order, its converter does not permute */
        const int64_t perm = c->arch == ARCH_BITNET ? 0 : hd;
        if (rc == 0) rc = load_linear(m, &g, &L->q, l, "attn_q", "self_attn.q_proj", "q", Q, H, perm, rec, opts);
        if (rc == 0) rc = load_linear(m, &g, &L->k, l, "attn_k", "self_attn.k_proj", "k", KV, H, perm, rec, opts);
        if (rc == 0) rc = load_linear(m, &g, &L->v, l, "attn_v", "self_attn.v_proj", "v", KV, H, 0, rec, opts);
        if (rc == 0) rc = load_linear(m, &g, &L->o, l, "attn_output", "self_attn.o_proj", "o", H, Q, 0, rec, opts);
        if (rc == 0) rc = load_linear(m, &g, &L->gate, l, "ffn_gate", "mlp.gate_proj", "gate", I, H, 0, rec, opts);
        if (rc == 0) rc = load_linear(m, &g, &L->up, l, "ffn_up", "mlp.up_proj", "up", I, H, 0, rec, opts);
        if (rc == 0) rc = load_linear(m, &g, &L->down, l, "ffn_down", "mlp.down_proj", "down", H, I, 0, rec, opts);
    }
    if (rc == 0) {
        snprintf(m->lm_head.name, sizeof m->lm_head.name, "lm_head");
        m->lm_head.out = c->vocab;
        m->lm_head.in = H;
        if (c->tie == TIE_TRUE) {
            m->lm_head.w = m->embed;
            m->lm_head_tied = 1;
            model_note(m, "%s", "lm_head tied to the embedding (no output.weight in the GGUF)");
        } else {
            rc = load_f32(&g, "output.weight", c->vocab, H, 0, &m->lm_head.w);
        }
    }
    for (int64_t i = 0; i < g.n_tensors && rc == 0; i++)
        if (g.tensors[i].type == GGML_TYPE_TQ1_0 || g.tensors[i].type == GGML_TYPE_TQ2_0) {
            model_note(m, "%s", rec && (rec->group == QG_ROW || rec->group == QG_TENSOR)
                                    ? "TQ1_0/TQ2_0 linears read as packed ternary (f16 scales; the recorded "
                                      "spec's group where every block of a row holds one scale, else 256)"
                                    : "TQ1_0/TQ2_0 linears read as packed ternary (group 256, f16 scales)");
            break;
        }
    if (rc == 0 && c->arch == ARCH_BITNET) {
        /* what the ternary linears run as loaded, --quant's act= included (the note had
         * followed the recorded spec alone: "every linear" under --quant act=int8, nothing
         * under act=f32 over a file that records int8) */
        int n_t = 0, n8 = 0;
        for (int l = 0; l < c->n_layers; l++) {
            const Linear *ls[] = LAYER_LINEARS(&m->layers[l]);
            for (int j = 0; j < LAYER_N_LINEARS; j++) {
                n_t += ls[j]->t != NULL;
                n8 += ls[j]->t && ls[j]->act_int8;
            }
        }
        char which[64] = "every ternary linear";
        if (n8) snprintf(which, sizeof which, "%d of the %d ternary linears", n_t - n8, n_t);
        if (n8 < n_t) /* (none without ternary linears) */
            model_note(m, "bitnet GGUF: f32 activations into %s, as llama.cpp runs the file (BitNet b1.58 "
                          "trains with int8 activations per token; a file ternlab wrote records them)",
                       which);
    }
    gguf_close(&g);
    if (rc != 0) {
        err_prefix("loading %s: ", path);
        model_free(m);
        return -1;
    }
    return 0;
}
