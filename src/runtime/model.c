#include "runtime/model.h"
#include "load/gguf.h"
#include "runtime/preflight.h"
#include "core/err.h"
#include "core/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    case DT_BF16: bf16_to_f32_array(t->data, w, (size_t)t->numel); break;
    case DT_F16: f16_to_f32_array(t->data, w, (size_t)t->numel); break;
    default:
        mem_free(w);
        return err_set("tensor '%s': dtype %s where a float tensor (F32, BF16, F16) is expected",
                       name, dtype_name(t->dtype));
    }
    *out = w;
    return 0;
}

int model_load_bitnet_linear(Model *m, Linear *lin, const ModelLoadOpts *opts);
int model_load_ternlab_linear(Model *m, Linear *lin);
int model_quantise_linear(Model *m, Linear *lin, int layer, const char *kind,
                          const ModelLoadOpts *opts);

static int load_linear(Model *m, Linear *lin, const char *name, int64_t out, int64_t in,
                       int layer, const char *kind, const ModelLoadOpts *opts) {
    snprintf(lin->name, sizeof lin->name, "%s", name);
    lin->out = out;
    lin->in = in;
    char wname[160];
    snprintf(wname, sizeof wname, "%s.weight", name);
    const StTensor *t = st_find(&m->st, wname);
    if (m->cfg.ternlab_packed && t && t->dtype == DT_U8) {
        if (model_load_ternlab_linear(m, lin) != 0) return -1;
    } else if (m->cfg.arch == ARCH_BITNET && t && t->dtype == DT_U8) {
        if (model_load_bitnet_linear(m, lin, opts) != 0) return -1;
    } else if (load_dense(&m->st, wname, out, in, &lin->w) != 0) {
        return -1;
    }
    return model_quantise_linear(m, lin, layer, kind, opts);
}

int model_load(const char *path, const ModelLoadOpts *opts, Model *m) {
    static const ModelLoadOpts none = {0};
    if (!opts) opts = &none;
    size_t pl = strlen(path);
    if (pl >= 5 && strcmp(path + pl - 5, ".gguf") == 0) return model_load_gguf(path, opts, m);
    memset(m, 0, sizeof *m);
    m->path = xstrdup(path);
    if (config_load(path, &m->cfg) != 0 || st_open_dir(path, &m->st) != 0) {
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
            rc = load_dense(&m->st, NAME("self_attn.attn_sub_norm.weight"), Q, 0, &L->attn_sub_norm);
            if (rc == 0) rc = load_dense(&m->st, NAME("mlp.ffn_sub_norm.weight"), I, 0, &L->ffn_sub_norm);
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
            snprintf(m->load_notes, sizeof m->load_notes, "lm_head tied to the embedding (%s)",
                     c->tie == TIE_TRUE ? "tie_word_embeddings true"
                                        : "tie_word_embeddings absent and no lm_head.weight");
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
            Linear *lins[] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down};
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
