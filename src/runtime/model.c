#include "runtime/model.h"
#include "load/gguf.h"
#include "runtime/preflight.h"
#include "core/err.h"
#include "core/mem.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* BF16/F16 values (n) from a safetensors mapping -> f32.  A tensor's data
 * starts wherever the header length and its offsets put it, odd addresses
 * included (the format allows any header length), and reading a misaligned
 * uint16_t is undefined behaviour: aligned data goes straight to the array
 * conversion, misaligned data through an aligned bounce buffer (one extra
 * copy, only for such files). */
static void half_to_f32(DType dt, const void *src, float *dst, size_t n) {
    void (*cvt)(const uint16_t *, float *, size_t) =
        dt == DT_BF16 ? bf16_to_f32_array : f16_to_f32_array;
    if ((uintptr_t)src % _Alignof(uint16_t) == 0) {
        cvt(src, dst, n);
        return;
    }
    uint16_t buf[4096];
    const unsigned char *p = src;
    for (size_t i = 0; i < n; i += 4096) {
        size_t k = n - i < 4096 ? n - i : 4096;
        memcpy(buf, p + 2 * i, 2 * k);
        cvt(buf, dst + i, k);
    }
}

/* Copies a BF16/F16/F32 tensor of exactly the expected shape into a new f32 buffer. */
static int load_dense(const SafeTensors *st, const char *name, int64_t d0, int64_t d1, float **out) {
    const StTensor *t = st_find(st, name);
    if (!t) return err_set("tensor '%s' is missing from the checkpoint", name);
    int ok_shape = d1 ? (t->ndim == 2 && t->shape[0] == d0 && t->shape[1] == d1)
                      : (t->ndim == 1 && t->shape[0] == d0);
    if (!ok_shape) {
        if (d1)
            return err_set("tensor '%s': shape [%lld, %lld] expected from config.json, file has "
                           "%d dims [%lld, %lld...]", name, (long long)d0, (long long)d1, t->ndim,
                           (long long)(t->ndim > 0 ? t->shape[0] : 0),
                           (long long)(t->ndim > 1 ? t->shape[1] : 0));
        return err_set("tensor '%s': shape [%lld] expected from config.json, file has %d dims "
                       "[%lld...]", name, (long long)d0, t->ndim,
                       (long long)(t->ndim > 0 ? t->shape[0] : 0));
    }
    float *w = mem_alloc(sizeof(float) * (size_t)t->numel, name);
    if (!w) return -1;
    switch (t->dtype) {
    case DT_F32: memcpy(w, t->data, t->nbytes); break;
    case DT_BF16:
    case DT_F16: half_to_f32(t->dtype, t->data, w, (size_t)t->numel); break;
    default:
        mem_free(w);
        return err_set("tensor '%s': dtype %s where a float tensor (F32, BF16, F16) is expected",
                       name, st_dtype_name(t->dtype));
    }
    if (model_refuse_nonfinite(w, (size_t)t->numel, name) != 0) {
        mem_free(w);
        return -1;
    }
    *out = w;
    return 0;
}

int model_load_bitnet_linear(Model *m, Linear *lin, const ModelLoadOpts *opts);
int model_load_ternlab_linear(Model *m, Linear *lin, const QuantSpec *spec);
int model_quantise_linear(Model *m, Linear *lin, int layer, const char *kind,
                          const ModelLoadOpts *opts);

int model_refuse_nonfinite(const float *w, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(w[i]))
            return err_set("tensor '%s': element %zu is %g (a checkpoint's weights must be finite)", name, i,
                           (double)w[i]);
    return 0;
}

/* whether out (existing, stat so) is the file dir/name */
static int same_as(const struct stat *so, const char *dir, const char *name) {
    char p[4400];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0 && st.st_dev == so->st_dev && st.st_ino == so->st_ino;
}

int model_out_not_input(const char *out, const char *what, const char *model, const char *tokens) {
    struct stat so, sm;
    if (stat(out, &so) != 0) return 0; /* (a new file is nobody's input) */
    if (tokens && file_same(out, tokens))
        return err_set("%s %s is the token file: it would be written over", what, out);
    if (!model || stat(model, &sm) != 0) return 0;
    if (!S_ISDIR(sm.st_mode)) {
        if (so.st_dev == sm.st_dev && so.st_ino == sm.st_ino)
            return err_set("%s %s is the --model file: it would be written over", what, out);
        return 0;
    }
    int hit = same_as(&so, model, "config.json") || same_as(&so, model, "model.safetensors.index.json");
    const size_t ol = strlen(out);
    if (!hit && ol >= 12 && strcmp(out + ol - 12, ".safetensors") == 0) {
        char dir[4200]; /* out's folder is the model's */
        snprintf(dir, sizeof dir, "%s", out);
        path_parent(dir);
        struct stat sd;
        hit = stat(dir, &sd) == 0 && sd.st_dev == sm.st_dev && sd.st_ino == sm.st_ino;
    }
    char ip[4400], **shards = NULL;
    int ns = 0;
    snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", model);
    if (!hit && access(ip, R_OK) == 0) { /* the shards the index names (one it cannot read names none) */
        if (st_index_shards(model, &shards, &ns) == 0) {
            for (int i = 0; i < ns; i++) {
                hit = hit || same_as(&so, model, shards[i]);
                free(shards[i]);
            }
            free(shards);
        }
        err_clear();
    }
    if (hit)
        return err_set("%s %s is a file the loader reads from the --model folder: it would be written over "
                       "(write elsewhere)", what, out);
    return 0;
}

int model_refuse_unknown_layer_tensor(const char *name, const char *prefix, const char *const *known,
                                      const char *const *ignored) {
    const size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0) return 0;
    const char *rest = strchr(name + pl, '.');
    if (!rest) return 0; /* (no index: model_refuse_layer_past's) */
    rest++;
    for (int i = 0; known[i]; i++)
        if (strcmp(rest, known[i]) == 0) return 0;
    for (int i = 0; ignored && ignored[i]; i++)
        if (strcmp(rest, ignored[i]) == 0) return 0;
    size_t need = 0;
    for (int i = 0; known[i]; i++) need += strlen(known[i]) + 2;
    char *list = xmalloc(need + 1);
    list[0] = 0;
    for (int i = 0; known[i]; i++) {
        if (i) strcat(list, ", ");
        strcat(list, known[i]);
    }
    err_set("tensor '%s' is not one this model's layers are run with (%s): running without it "
            "would give another model's numbers (not supported)", name, list);
    free(list);
    return -1;
}

int model_refuse_bias(const char *name) {
    const size_t len = strlen(name);
    if (len >= 5 && strcmp(name + len - 5, ".bias") == 0)
        return err_set("tensor '%s' is a bias: ternlab's linears and norms have none, and "
                       "running without it would give wrong numbers (not supported)", name);
    return 0;
}

/* Layer tensors are named prefix + index + "." (model.layers.N. in a
 * checkpoint, blk.N. in a GGUF).  -1 (err_set, naming the tensor) where
 * `name` starts with `prefix` and its index is not one of the n_layers that
 * the config (`count`, e.g. "the config's num_hidden_layers") declares: past
 * the count (the loader would build n_layers layers and never read it: a
 * model cut short, silently), or no plain decimal index at all (empty, not
 * digits, a leading zero: no layer is named so either).  The index is read
 * digit by digit and stops growing once it reaches n_layers, so any length
 * of digits is past without overflowing.  0 for every other name. */
int model_refuse_layer_past(const char *name, const char *prefix, int n_layers,
                            const char *unit, const char *count) {
    const size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0) return 0;
    const char *s = name + pl, *e = s;
    int64_t v = 0; /* <= 10 * n_layers + 9: n_layers is an int */
    for (; *e >= '0' && *e <= '9'; e++)
        if (v < n_layers) v = v * 10 + (*e - '0');
    const int len = (int)(e - s);
    if (len == 0 || (*e != '.' && *e != '\0') || (s[0] == '0' && len > 1)) {
        const size_t seg = strcspn(s, ".");
        return err_set("tensor '%s': '%.*s' after '%s' is not a %s index (decimal digits, no "
                       "leading zero), so no %s would use it (not supported)", name,
                       (int)(seg > 64 ? 64 : seg), s, prefix, unit, unit);
    }
    if (v >= n_layers)
        return err_set("tensor '%s': %s %.*s is past %s (%d): no %s would use it, and running on "
                       "the first %d alone would give wrong numbers (not supported)", name, unit,
                       len > 64 ? 64 : len, s, count, n_layers, unit, n_layers);
    return 0;
}

/* a BitNet config whose linears transformers ternarises in every forward from
 * float weights: quantization_mode online with linear_class autobitlinear */
static int bitnet_online(const ModelConfig *c) {
    return c->bitnet_1bitllm ||
           (strcmp(c->bitnet_mode, "online") == 0 && c->bitnet_scale == BITNET_AUTOBITLINEAR);
}

/* A BitNet layer's sub-norms (before o_proj, before down_proj) as the
 * checkpoint names them: transformers' BitNet, or 1bitLLM's form. */
static const char *const *sub_norm_names(const ModelConfig *c) {
    static const char *const hf[2] = {"self_attn.attn_sub_norm", "mlp.ffn_sub_norm"};
    static const char *const onebit[2] = {"self_attn.inner_attn_ln", "mlp.ffn_layernorm"};
    return c->bitnet_1bitllm ? onebit : hf;
}

static int load_linear(Model *m, Linear *lin, const char *name, int64_t out, int64_t in,
                       int layer, const char *kind, const ModelLoadOpts *opts) {
    snprintf(lin->name, sizeof lin->name, "%s", name);
    lin->out = out;
    lin->in = in;
    char wname[160];
    snprintf(wname, sizeof wname, "%s.weight", name);
    const StTensor *t = st_find(&m->st, wname);
    QuantSpec ts; /* a ternlab checkpoint's spec, parsed once for the checks and the load */
    if (m->cfg.ternlab_packed && t) {
        /* a ternlab checkpoint's spec names its ternary linears (quantize writes
         * those packed, the rest as the source held them): a linear stored the
         * other way contradicts it (a dense one had run dense under a spec that
         * says ternary, a packed one under a spec that leaves it out) */
        if (quant_spec_parse(m->cfg.ternlab_spec, &ts) != 0)
            return err_prefix("%s: quantization_config.spec: ", m->path);
        const int sel = quant_layer_selected(&ts, layer, kind);
        if (sel < 0) return -1;
        if (sel != (t->dtype == DT_U8))
            return err_set(sel ? "tensor '%s' is %s, but quantization_config.spec '%s' makes it ternary "
                                 "(U8 codes + weight_scales): the file contradicts its spec"
                               : "tensor '%s' is %s (packed ternary), but quantization_config.spec '%s' "
                                 "leaves it out: the file contradicts its spec",
                           wname, st_dtype_name(t->dtype), m->cfg.ternlab_spec);
    }
    if (m->cfg.ternlab_packed && t && t->dtype == DT_U8) {
        if (model_load_ternlab_linear(m, lin, &ts) != 0) return -1;
    } else if (m->cfg.bitnet_linears && t && t->dtype == DT_U8) {
        if (model_load_bitnet_linear(m, lin, opts) != 0) return -1;
    } else if (load_dense(&m->st, wname, out, in, &lin->w) != 0) {
        return -1;
    } else if (m->cfg.bitnet_linears && bitnet_online(&m->cfg)) {
        /* float weights of an online BitNet (check_checkpoint): transformers
         * ternarises them in every forward (per-tensor absmean, round, clamp to
         * +-1) with int8 activations per token; the weights do not change, so
         * once here gives the same model, then run as a native ternary one.
         * Where --quant selects the linear, its rule applies to these float
         * weights instead (model_quantise_linear), not to their absmean ternary */
        QuantSpec qs;
        const int sel = opts->quant && quant_spec_parse(opts->quant, &qs) == 0 &&
                        quant_layer_selected(&qs, layer, kind) > 0;
        if (!sel) {
            QuantSpec bs;
            if (quant_spec_parse("rule=absmean,group=tensor,scale=f32", &bs) != 0) return -1;
            TernaryMatrix *tm = xcalloc(1, sizeof *tm);
            if (tern_from_dense(lin->w, out, in, &bs, tm) != 0) {
                free(tm);
                return err_prefix("%s: ", lin->name);
            }
            mem_free(lin->w);
            lin->w = NULL;
            lin->t = tm;
        }
        lin->act_int8 = 1;
        m->native_ternary = 1;
    }
    return model_quantise_linear(m, lin, layer, kind, opts);
}

static const char *const layer_linears[] = {"self_attn.q_proj", "self_attn.k_proj",
                                            "self_attn.v_proj", "self_attn.o_proj",
                                            "mlp.gate_proj",    "mlp.up_proj",
                                            "mlp.down_proj"};
#define N_LAYER_LINEARS (sizeof layer_linears / sizeof layer_linears[0])

/* Cheap structural checks on the opened checkpoint, before the memory plan
 * and any allocation (both scale with num_hidden_layers, which config.json
 * may overstate by orders of magnitude):
 *  - the first and the last layer's tensors exist;
 *  - no tensor model.layers.N.* lies past num_hidden_layers (a config that
 *    understates the layers had run the first ones alone), and every such N
 *    is a plain index (model_refuse_layer_past);
 *  - no tensor is a bias: ternlab's linears and norms have none, and a model
 *    run without its biases gives wrong numbers;
 *  - a layer holds only what its forward reads (norms, linears, their
 *    scales: model_refuse_unknown_layer_tensor); rotary_emb.inv_freq, and
 *    tensors outside the layers that ternlab does not know, stay ignored;
 *  - a bitnet checkpoint stores its linears packed (U8), or as floats only
 *    where it is online with autobitlinear (load_linear ternarises those):
 *    offline float linears had run as a dense model, without ternary weights
 *    or int8 activations (transformers' BitLinear loads packed ones only);
 *    online ones (and 1bitLLM's) store floats only: packed linears there had
 *    run with the scale convention of a form that does not read them.
 * Returns 0, or -1 with a message naming the tensor. */
static int check_checkpoint(const Model *m) {
    const ModelConfig *c = &m->cfg;
    const SafeTensors *st = &m->st;
    char name[160];
    /* what a layer holds, as this config reads it: its norms and linears (each
     * required: the first n_req), then the linears' scales (BitNet's packed
     * weight_scale, a ternlab checkpoint's weight_scales) */
    const char *norms[] = {"input_layernorm", "post_attention_layernorm", sub_norm_names(c)[0], sub_norm_names(c)[1]};
    const int n_norms = c->arch == ARCH_BITNET ? 4 : 2;
    const char *scale = c->ternlab_packed ? "weight_scales" : c->bitnet_linears ? "weight_scale" : NULL;
    const char *known[4 + 2 * N_LAYER_LINEARS + 1], *ignored[] = {"self_attn.rotary_emb.inv_freq", NULL};
    char kbuf[4 + 2 * N_LAYER_LINEARS][48];
    int nk = 0;
    for (int i = 0; i < n_norms + (int)N_LAYER_LINEARS; i++, nk++) {
        snprintf(kbuf[nk], sizeof kbuf[nk], "%s.weight", i < n_norms ? norms[i] : layer_linears[i - n_norms]);
        known[nk] = kbuf[nk];
    }
    const int n_req = nk;
    for (size_t i = 0; scale && i < N_LAYER_LINEARS; i++, nk++) {
        snprintf(kbuf[nk], sizeof kbuf[nk], "%s.%s", layer_linears[i], scale);
        known[nk] = kbuf[nk];
    }
    known[nk] = NULL;
    const int ends[2] = {0, c->n_layers - 1};
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < n_req; i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", ends[e], known[i]);
            if (!st_find(st, name))
                return err_set("config.json says num_hidden_layers %d, but tensor '%s' (layer %d) "
                               "is missing from the checkpoint", c->n_layers, name, ends[e]);
        }
    for (int i = 0; i < st->n_tensors; i++)
        if (model_refuse_bias(st->tensors[i].name) != 0 ||
            model_refuse_layer_past(st->tensors[i].name, "model.layers.", c->n_layers, "layer",
                                    "the config's num_hidden_layers") != 0 ||
            model_refuse_unknown_layer_tensor(st->tensors[i].name, "model.layers.", known, ignored) != 0)
            return -1;
    if (c->bitnet_linears) {
        const int online = bitnet_online(c);
        for (int l = 0; l < c->n_layers; l++)
            for (size_t i = 0; i < N_LAYER_LINEARS; i++) {
                snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, layer_linears[i]);
                const StTensor *t = st_find(st, name);
                if (!t || (t->dtype == DT_U8) != online) continue; /* a missing one is reported at its load */
                if (online)
                    return err_set(
                        "tensor '%s' is U8 (packed ternary), but this checkpoint's linears are float "
                        "weights ternarised in every forward (%s)", name,
                        c->bitnet_1bitllm ? "1bitLLM's BitnetForCausalLM, whose modeling code reads "
                                            "float linears only"
                                          : "quantization_mode online with linear_class autobitlinear: "
                                            "transformers' AutoBitLinear unpacks packed weights only in "
                                            "offline mode; packed linears need quantization_mode offline");
                return err_set(
                    "tensor '%s' is %s, but this is a bitnet checkpoint (quantization_config "
                    "linear_class %s, quantization_mode %s), whose linears are read packed "
                    "(U8 + weight_scale); float linears are ternarised only under "
                    "quantization_mode online with linear_class autobitlinear (transformers' "
                    "combination for float weights; it does not load this one either)", name,
                    st_dtype_name(t->dtype), c->bitnet_class, c->bitnet_mode);
            }
    }
    return 0;
}

void model_note(Model *m, const char *fmt, const char *arg) {
    size_t l = strlen(m->load_notes);
    if (l + 3 >= sizeof m->load_notes) return;
    if (l) l += (size_t)snprintf(m->load_notes + l, sizeof m->load_notes - l, "; ");
    snprintf(m->load_notes + l, sizeof m->load_notes - l, fmt, arg);
}

int model_load(const char *path, const ModelLoadOpts *opts, Model *m) {
    static const ModelLoadOpts none = {0};
    if (!opts) opts = &none;
    size_t pl = strlen(path);
    if (pl >= 5 && strcmp(path + pl - 5, ".gguf") == 0) return model_load_gguf(path, opts, m);
    memset(m, 0, sizeof *m);
    struct stat sp;
    if (stat(path, &sp) == 0 && !S_ISDIR(sp.st_mode))
        return err_set("%s: not a model folder (config.json + model.safetensors) nor a GGUF file (told by "
                       "its .gguf name)", path);
    m->path = xstrdup(path);
    if (config_load(path, &m->cfg) != 0 || st_open_dir(path, &m->st) != 0) {
        model_free(m);
        return -1;
    }
    if (m->st.index_ignored)
        model_note(m, "%s", "model.safetensors read; the model.safetensors.index.json beside it is not "
                            "(transformers reads the single file first too)");
    if (check_checkpoint(m) != 0) {
        err_prefix("loading %s: ", path);
        model_free(m);
        return -1;
    }
    /* memory preflight: the weights as they will be held, before allocating any */
    {
        QuantSpec spec;
        const QuantSpec *sp = NULL;
        if (opts->quant && quant_spec_parse(opts->quant, &spec) == 0) sp = &spec;
        size_t extra = 0;
        size_t wb = preflight_weight_bytes(&m->cfg, &m->st, sp, opts->dense, &extra);
        PreflightPlan plan;
        if (preflight_plan(&m->cfg, wb, extra, 0, 0, 16, &plan) != 0) {
            err_prefix("loading %s: ", path);
            model_free(m);
            return -1;
        }
    }
    const ModelConfig *c = &m->cfg;
    int64_t H = c->hidden, Q = (int64_t)c->n_heads * c->head_dim,
            KV = (int64_t)c->n_kv_heads * c->head_dim, I = c->inter;
    int rc = load_dense(&m->st, "model.embed_tokens.weight", c->vocab, H, &m->embed);
    if (rc == 0) rc = load_dense(&m->st, "model.norm.weight", H, 0, &m->final_norm);
    m->layers = xcalloc((size_t)c->n_layers, sizeof(Layer));
    char name[160];
    for (int l = 0; l < c->n_layers && rc == 0; l++) {
        Layer *L = &m->layers[l];
        const char *p = "model.layers";
#define NAME(fmt) (snprintf(name, sizeof name, "%s.%d." fmt, p, l), name)
        rc = load_dense(&m->st, NAME("input_layernorm.weight"), H, 0, &L->attn_norm);
        if (rc == 0) rc = load_dense(&m->st, NAME("post_attention_layernorm.weight"), H, 0, &L->ffn_norm);
        if (rc == 0 && c->arch == ARCH_BITNET) {
            char sub[160];
            snprintf(sub, sizeof sub, "%s.%d.%s.weight", p, l, sub_norm_names(c)[0]);
            rc = load_dense(&m->st, sub, Q, 0, &L->attn_sub_norm);
            snprintf(sub, sizeof sub, "%s.%d.%s.weight", p, l, sub_norm_names(c)[1]);
            if (rc == 0) rc = load_dense(&m->st, sub, I, 0, &L->ffn_sub_norm);
        }
        if (rc == 0) rc = load_linear(m, &L->q, NAME("self_attn.q_proj"), Q, H, l, "q", opts);
        if (rc == 0) rc = load_linear(m, &L->k, NAME("self_attn.k_proj"), KV, H, l, "k", opts);
        if (rc == 0) rc = load_linear(m, &L->v, NAME("self_attn.v_proj"), KV, H, l, "v", opts);
        if (rc == 0) rc = load_linear(m, &L->o, NAME("self_attn.o_proj"), H, Q, l, "o", opts);
        if (rc == 0) rc = load_linear(m, &L->gate, NAME("mlp.gate_proj"), I, H, l, "gate", opts);
        if (rc == 0) rc = load_linear(m, &L->up, NAME("mlp.up_proj"), I, H, l, "up", opts);
        if (rc == 0) rc = load_linear(m, &L->down, NAME("mlp.down_proj"), H, I, l, "down", opts);
#undef NAME
    }
    if (rc == 0) {
        /* lm_head: tie_word_embeddings true -> the embedding (as transformers ties them);
         * false -> lm_head.weight must exist; absent -> lm_head.weight if present, else tied. */
        const StTensor *lh = st_find(&m->st, "lm_head.weight");
        snprintf(m->lm_head.name, sizeof m->lm_head.name, "lm_head");
        m->lm_head.out = c->vocab;
        m->lm_head.in = H;
        if (c->tie == TIE_TRUE || (c->tie == TIE_ABSENT && !lh)) {
            m->lm_head.w = m->embed;
            m->lm_head_tied = 1;
            model_note(m, "lm_head tied to the embedding (%s)",
                       c->tie == TIE_TRUE ? "tie_word_embeddings true"
                                          : "tie_word_embeddings absent and no lm_head.weight");
            if (lh) model_note(m, "%s", "the stored lm_head.weight is not used (transformers ties over it too)");

        } else if (!lh) {
            rc = err_set("%s: tie_word_embeddings is false but the checkpoint has no "
                         "lm_head.weight", path);
        } else {
            rc = load_dense(&m->st, "lm_head.weight", c->vocab, H, &m->lm_head.w);
        }
    }
    if (rc != 0) {
        err_prefix("loading %s: ", path);
        model_free(m);
        return -1;
    }
    return 0;
}

void model_for_each_linear(Model *m, linear_visit_fn fn, void *ctx) {
    for (int l = 0; l < m->cfg.n_layers; l++) {
        Layer *L = &m->layers[l];
        fn(&L->q, l, "q", ctx);
        fn(&L->k, l, "k", ctx);
        fn(&L->v, l, "v", ctx);
        fn(&L->o, l, "o", ctx);
        fn(&L->gate, l, "gate", ctx);
        fn(&L->up, l, "up", ctx);
        fn(&L->down, l, "down", ctx);
    }
}

void linear_free(Linear *lin);

void model_free(Model *m) {
    if (m->layers) {
        for (int l = 0; l < m->cfg.n_layers; l++) {
            Layer *L = &m->layers[l];
            mem_free(L->attn_norm);
            mem_free(L->ffn_norm);
            mem_free(L->attn_sub_norm);
            mem_free(L->ffn_sub_norm);
            Linear *lins[] = LAYER_LINEARS(L);
            for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++) linear_free(lins[i]);
        }
        free(m->layers);
    }
    if (!m->lm_head_tied) mem_free(m->lm_head.w);
    mem_free(m->embed);
    mem_free(m->final_norm);
    mem_free(m->rope_cos);
    mem_free(m->rope_sin);
    st_close(&m->st);
    free(m->path);
    memset(m, 0, sizeof *m);
}
