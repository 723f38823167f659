#include "load/config.h"
#include "load/json_strict.h"
#include "core/err.h"
#include "core/mem.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *arch_name(Arch a) { return a == ARCH_BITNET ? "bitnet" : "llama"; }

float rope_theta_pow(const ModelConfig *c, int i) {
    return powf((float)rope_base(c), (float)(2 * i) / (float)c->head_dim);
}

float rope_default_freq(const ModelConfig *c, int i) { return 1.0f / rope_theta_pow(c, i); }

int rope_llama3_band(const ModelConfig *c, float freq, float *smooth) {
    /* (the constants as torch holds python floats against a float32 tensor) */
    const float wl = (1.0f / freq) * (float)(2.0 * M_PI);
    if (wl < (float)((double)c->rope_orig_ctx / c->rope_high)) return 0;
    if (wl > (float)((double)c->rope_orig_ctx / c->rope_low)) return 1;
    float s = (1.0f / wl) * (float)c->rope_orig_ctx;
    s = s - (float)c->rope_low;
    *smooth = s / (float)(c->rope_high - c->rope_low);
    return 2;
}

static int get_int(const cJSON *root, const char *key, int *out, int required, const char *path) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!j || cJSON_IsNull(j)) {
        if (required) return err_set("%s: missing field '%s'", path, key);
        return 1;
    }
    if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble) || j->valuedouble < 1 ||
        j->valuedouble > 1e9)
        return err_set("%s: field '%s' must be a positive integer", path, key);
    *out = (int)j->valuedouble;
    return 0;
}

static int get_num(const cJSON *j, const char *key, double *out, const char *path) {
    if (!cJSON_IsNumber(j) || !(j->valuedouble > 0) || !isfinite(j->valuedouble))
        return err_set("%s: field '%s' must be a positive number", path, key);
    *out = j->valuedouble;
    return 0;
}

/* A RoPE scaling from transformers' rope_parameters (5.x) or rope_scaling
 * (4.x) object `o` (NULL: none; `where` names it in messages).  The type is
 * rope_type, else the legacy key type (transformers reads both; a linear
 * scaling written as "type" had run unscaled); linear and llama3 read their
 * parameters from the same object, as transformers does.  given: a type was
 * named.  0, or -1 with err_set. */
typedef struct {
    int given;
    RopeKind kind;
    double factor, low, high;
    int orig; /* 0: not given (transformers then takes max_position_embeddings) */
    /* yarn's optional keys as given (0: not given, or given as transformers' defaults
     * read them: null, 0); truncate 1 absent or true, 0 false or null */
    double attn, beta_fast, beta_slow, mscale, mscale_all;
    int truncate;
    /* longrope: short_factor and long_factor as float32 (torch.tensor's), their lengths;
     * factor 0 where not given (attn as yarn's) */
    float sf[ROPE_MAX_FACTORS], lf[ROPE_MAX_FACTORS];
    int nsf, nlf;
} RopeParams;

static int rope_param(const cJSON *o, const char *where, const char *key, double *out, const char *path) {
    char full[96];
    snprintf(full, sizeof full, "%s.%s", where, key);
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j || cJSON_IsNull(j)) return err_set("%s: missing field '%s' (the rope type needs it)", path, full);
    if (get_num(j, full, out, path) != 0) return -1;
    if (*out < 1e-30 || *out > 1e30) /* (as a float32, as torch holds it: neither 0 nor infinite) */
        return err_set("%s: field '%s' %g is outside [1e-30, 1e30]", path, full, *out);
    return 0;
}

/* yarn's factor null, longrope's absent: max_position_embeddings (LlamaConfig's
 * 2048 where absent) over the original length, as transformers derives it */
static double rope_ratio_factor(const ModelConfig *c) {
    return (double)(c->max_pos ? c->max_pos : 2048) / (double)c->rope_orig_ctx;
}

/* transformers' _compute_yarn_parameters in double as Python runs it, one
 * operation a statement: get_mscale, 0.1 * m * ln(scale) + 1 (1 at scale <= 1) */
static double yarn_mscale(double scale, double m) {
    if (scale <= 1) return 1.0;
    double a = 0.1 * m;
    a = a * log(scale);
    return a + 1.0;
}

/* find_correction_dim: (dim ln(original / (rotations 2 pi))) / (2 ln theta) */
static double yarn_corr_dim(double rot, int dim, double theta, int orig) {
    double d = rot * 2;
    d = d * M_PI;
    d = (double)orig / d;
    d = (double)dim * log(d);
    const double b = 2 * log(theta);
    return d / b;
}

/* yarn's attention factor (given; else from mscale / mscale_all_dim where both
 * are given; else get_mscale(factor)) and its correction range (dims at
 * beta_fast .. beta_slow rotations over the original length, floored / ceiled
 * under truncate, bounded to 0 .. head_dim - 1) into c.  0, or -1 with err_set. */
static int yarn_finish(ModelConfig *c, const RopeParams *rp, const char *path) {
    const double f = rp->factor != 0 ? rp->factor : rope_ratio_factor(c);
    double att = rp->attn;
    if (att == 0) {
        if (rp->mscale != 0 && rp->mscale_all != 0) {
            const double num = yarn_mscale(f, rp->mscale), den = yarn_mscale(f, rp->mscale_all);
            att = num / den;
        } else {
            att = yarn_mscale(f, 1);
        }
    }
    if (!(att >= 1e-30 && att <= 1e30))
        return err_set("%s: yarn's attention factor %g (from mscale / mscale_all_dim) is not a positive number",
                       path, att);
    if (c->rope_theta == 1.0) return err_set("%s: yarn with rope_theta 1 (its correction range divides by ln theta)", path);
    const double bf = rp->beta_fast != 0 ? rp->beta_fast : 32, bs = rp->beta_slow != 0 ? rp->beta_slow : 1;
    double low = yarn_corr_dim(bf, c->head_dim, c->rope_theta, c->rope_orig_ctx);
    double high = yarn_corr_dim(bs, c->head_dim, c->rope_theta, c->rope_orig_ctx);
    if (rp->truncate) {
        low = floor(low);
        high = ceil(high);
    }
    c->rope_low = low > 0 ? low : 0;
    c->rope_high = high < c->head_dim - 1 ? high : c->head_dim - 1;
    c->rope_attn = att;
    c->rope_factor = f;
    return 0;
}

/* longrope's short factors (the frequencies up to the original length; the long
 * ones, past it, are refused there: rope_positions_check) and its attention
 * factor: given, else from factor (given, else max_position_embeddings over the
 * original length; LlamaConfig's 2048 where absent) as transformers'
 * _compute_longrope_parameters in double: sqrt(1 + ln factor / ln original),
 * 1 at factor <= 1.  0, or -1 with err_set. */
static int longrope_finish(ModelConfig *c, const RopeParams *rp, const char *path) {
    const int half = c->head_dim / 2;
    if (rp->nsf != half || rp->nlf != half)
        return err_set("%s: longrope's short_factor and long_factor must hold head_dim / 2 = %d numbers each "
                       "(%d and %d given)", path, half, rp->nsf, rp->nlf);
    const double f = rp->factor != 0 ? rp->factor : rope_ratio_factor(c);
    double att = rp->attn;
    if (att == 0) {
        if (f <= 1.0) {
            att = 1.0;
        } else {
            if (c->rope_orig_ctx == 1)
                return err_set("%s: longrope with original_max_position_embeddings 1 (its attention factor "
                               "divides by ln 1)", path);
            double a = log(f) / log((double)c->rope_orig_ctx);
            a = 1 + a;
            att = sqrt(a);
        }
    }
    memcpy(c->rope_ff, rp->sf, sizeof(float) * (size_t)half);
    c->rope_factor = f;
    c->rope_attn = att;
    return 0;
}

float rope_attention_factor(const ModelConfig *c) {
    return c->rope_kind == ROPE_YARN || c->rope_kind == ROPE_LONGROPE ? (float)c->rope_attn : 1.0f;
}

double rope_base(const ModelConfig *c) {
    if (c->rope_kind != ROPE_DYNAMIC) return c->rope_theta;
    /* (_compute_dynamic_ntk_parameters at seq_len = max_position_embeddings, Python's order) */
    const double L = (double)c->rope_orig_ctx, f = c->rope_factor;
    double t = f * L;
    t = t / L;
    t = t - (f - 1);
    const double e = (double)c->head_dim / (double)(c->head_dim - 2);
    return c->rope_theta * pow(t, e);
}

int rope_positions_check(const ModelConfig *c, int64_t max_pos) {
    if (c->rope_kind == ROPE_DYNAMIC && max_pos >= c->rope_orig_ctx)
        return err_set("position %lld under dynamic RoPE scaling: a sequence longer than max_position_embeddings %d, "
                       "where transformers rescales the frequencies call by call (the cached keys keep the old ones); not supported: "
                       "use windows / prompts of at most %d tokens", (long long)max_pos, c->rope_orig_ctx,
                       c->rope_orig_ctx);
    if (c->rope_kind == ROPE_LONGROPE && max_pos >= c->rope_orig_ctx)
        return err_set("position %lld under longrope RoPE scaling: a sequence longer than "
                       "original_max_position_embeddings %d, where transformers switches to the long factors call by call (the cached keys keep the short "
                       "ones); not supported: use windows / prompts of at most %d tokens", (long long)max_pos,
                       c->rope_orig_ctx, c->rope_orig_ctx);
    return 0;
}

/* original_max_position_embeddings of a llama3 / yarn object (where: "rope_scaling",
 * ...) or of the top level (where NULL): 0 where absent (transformers'
 * standardize_rope_params then sets max_position_embeddings); null refused
 * (transformers keeps the None, and its computation fails on it). */
static int rope_orig(const cJSON *o, const char *where, const char *path, int *orig) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, "original_max_position_embeddings");
    char name[64];
    snprintf(name, sizeof name, "%s%soriginal_max_position_embeddings", where ? where : "", where ? "." : "");
    *orig = 0;
    if (!j) return 0;
    if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble) || j->valuedouble < 1 || j->valuedouble > 1e9)
        return err_set("%s: %s must be a positive integer", path, name);
    *orig = (int)j->valuedouble;
    return 0;
}

/* An optional number of a yarn object: 0 where absent or null (not given, as
 * transformers reads None); else a number within +-1e30, as given.  sign 0: any
 * (mscale, mscale_all_dim: 0 counts as not given, as transformers' truthiness
 * test reads it); 1: 0 (Python's `x or default`: not given) or at least 1e-30
 * (beta_fast, beta_slow); 2: at least 1e-30 (attention_factor, which
 * transformers takes as it is, 0 included). */
static int rope_opt(const cJSON *o, const char *where, const char *key, int sign, double *out, const char *path) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = 0;
    if (!j || cJSON_IsNull(j)) return 0;
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || fabs(j->valuedouble) > 1e30)
        return err_set("%s: field '%s.%s' must be a number", path, where, key);
    const double v = j->valuedouble;
    if ((sign == 1 && v != 0 && v < 1e-30) || (sign == 2 && v < 1e-30))
        return err_set("%s: field '%s.%s' %g must be positive", path, where, key, v);
    *out = v;
    return 0;
}

/* longrope's short_factor / long_factor: a list of at most ROPE_MAX_FACTORS
 * numbers, each within [1e-30, 1e30] (a frequency's divisor), as float32. */
static int rope_factor_list(const cJSON *o, const char *where, const char *key, float *out, int *n,
                            const char *path) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key), *e;
    *n = 0;
    if (!j || cJSON_IsNull(j)) return err_set("%s: missing field '%s.%s' (the rope type needs it)", path, where, key);
    if (!cJSON_IsArray(j)) return err_set("%s: field '%s.%s' must be a list of numbers", path, where, key);
    cJSON_ArrayForEach(e, j) {
        if (*n == ROPE_MAX_FACTORS)
            return err_set("%s: field '%s.%s' holds more than %d numbers (head_dim %d at most)", path, where, key,
                           ROPE_MAX_FACTORS, 2 * ROPE_MAX_FACTORS);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 1e-30 && e->valuedouble <= 1e30))
            return err_set("%s: field '%s.%s' entry %d must be a number within [1e-30, 1e30]", path, where, key,
                           *n);
        out[(*n)++] = (float)e->valuedouble;
    }
    return 0;
}

static int parse_rope(const cJSON *o, const char *where, const char *path, RopeParams *rp) {
    memset(rp, 0, sizeof *rp);
    const cJSON *rt = o ? cJSON_GetObjectItemCaseSensitive(o, "rope_type") : NULL;
    const cJSON *lt = o ? cJSON_GetObjectItemCaseSensitive(o, "type") : NULL;
    if (rt && !cJSON_IsNull(rt) && lt && !cJSON_IsNull(lt) &&
        !(cJSON_IsString(rt) && cJSON_IsString(lt) && strcmp(rt->valuestring, lt->valuestring) == 0))
        /* (transformers 4 took type over rope_type, 5 the other way round) */
        return err_set("%s: %s names two rope types (rope_type and type differ)", path, where);
    if (!rt || cJSON_IsNull(rt)) rt = lt;
    if (!rt || cJSON_IsNull(rt)) return 0;
    rp->given = 1;
    if (!cJSON_IsString(rt)) return err_set("%s: the rope type in %s must be a string", path, where);
    const char *t = rt->valuestring;
    if (strcmp(t, "default") == 0) return 0;
    if (strcmp(t, "linear") == 0) {
        rp->kind = ROPE_LINEAR;
        return rope_param(o, where, "factor", &rp->factor, path);
    }
    if (strcmp(t, "llama3") == 0) {
        rp->kind = ROPE_LLAMA3;
        if (rope_param(o, where, "factor", &rp->factor, path) != 0 ||
            rope_param(o, where, "low_freq_factor", &rp->low, path) != 0 ||
            rope_param(o, where, "high_freq_factor", &rp->high, path) != 0 || rope_orig(o, where, path, &rp->orig) != 0)
            return -1;
        if (!(rp->high > rp->low))
            return err_set("%s: %s.high_freq_factor %g must be above low_freq_factor %g (llama3's smooth band "
                           "divides by their difference)", path, where, rp->high, rp->low);
        return 0;
    }
    if (strcmp(t, "dynamic") == 0) {
        rp->kind = ROPE_DYNAMIC;
        return rope_param(o, where, "factor", &rp->factor, path);
    }
    if (strcmp(t, "yarn") == 0) {
        rp->kind = ROPE_YARN;
        /* factor null: derived (rope_ratio_factor); absent: refused (transformers' KeyError) */
        const cJSON *fj = cJSON_GetObjectItemCaseSensitive(o, "factor");
        if ((!cJSON_IsNull(fj) && rope_param(o, where, "factor", &rp->factor, path) != 0) ||
            rope_orig(o, where, path, &rp->orig) != 0 ||
            rope_opt(o, where, "attention_factor", 2, &rp->attn, path) != 0 ||
            rope_opt(o, where, "beta_fast", 1, &rp->beta_fast, path) != 0 ||
            rope_opt(o, where, "beta_slow", 1, &rp->beta_slow, path) != 0 ||
            rope_opt(o, where, "mscale", 0, &rp->mscale, path) != 0 ||
            rope_opt(o, where, "mscale_all_dim", 0, &rp->mscale_all, path) != 0)
            return -1;
        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(o, "truncate");
        if (tr && !cJSON_IsNull(tr) && !cJSON_IsBool(tr))
            return err_set("%s: field '%s.truncate' must be true or false", path, where);
        rp->truncate = !tr || cJSON_IsTrue(tr);
        return 0;
    }
    if (strcmp(t, "longrope") == 0) {
        rp->kind = ROPE_LONGROPE;
        return rope_factor_list(o, where, "short_factor", rp->sf, &rp->nsf, path) != 0 ||
                       rope_factor_list(o, where, "long_factor", rp->lf, &rp->nlf, path) != 0 ||
                       rope_orig(o, where, path, &rp->orig) != 0 ||
                       rope_opt(o, where, "factor", 2, &rp->factor, path) != 0 ||
                       rope_opt(o, where, "attention_factor", 2, &rp->attn, path) != 0
                   ? -1
                   : 0;
    }
    return err_set("%s: the rope type '%s' in %s is not supported (default, linear, llama3, yarn, dynamic, "
                   "longrope)", path, t, where);
}

/* quantization_config.modules_to_not_convert (BitNet): transformers keeps a
 * module dense when an entry is a substring of its name.  Only modules outside
 * the decoder layers (lm_head, the default) may be kept: a layer linear kept
 * dense among ternary ones is not supported, and refused rather than read as
 * ternary.  The names "model.layers.L.<linear>" hold one run of digits, L's:
 * an entry with no digits matches some layer's name iff it matches layer 0's;
 * one with a run D matches only where D is within L, and the smallest such L
 * is D or 1D (a leading zero) — so those few layers are tried, not every one
 * of num_hidden_layers (which the config may overstate by orders of
 * magnitude: it is checked against the tensors later).  0, or -1 with
 * err_set. */
static int not_converted(const cJSON *qcfg, int n_layers, const char *path) {
    static const char *const lins[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                       "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                       "mlp.down_proj"};
    const cJSON *mods = cJSON_GetObjectItemCaseSensitive(qcfg, "modules_to_not_convert");
    if (!mods || cJSON_IsNull(mods)) return 0;
    if (!cJSON_IsArray(mods))
        return err_set("%s: quantization_config.modules_to_not_convert must be a list of names", path);
    const cJSON *e;
    cJSON_ArrayForEach(e, mods) {
        if (!cJSON_IsString(e))
            return err_set("%s: quantization_config.modules_to_not_convert must be a list of names", path);
        int64_t cand[2] = {0, -1};
        const char *d = strpbrk(e->valuestring, "0123456789");
        if (d) {
            const size_t dl = strspn(d, "0123456789");
            if (dl > 10) continue; /* (more digits than any layer index has) */
            char num[16];
            snprintf(num, sizeof num, "%.*s", (int)dl, d);
            cand[0] = strtoll(num, NULL, 10);
            snprintf(num, sizeof num, "1%.*s", (int)dl, d);
            cand[1] = strtoll(num, NULL, 10);
        }
        for (int c = 0; c < 2; c++) {
            if (cand[c] < 0 || cand[c] >= n_layers) continue;
            char name[96];
            for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++) {
                snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)cand[c], lins[i]);
                if (strstr(name, e->valuestring))
                    return err_set("%s: quantization_config.modules_to_not_convert entry '%s' keeps %s "
                                   "dense: dense linears among ternary ones are not supported (only "
                                   "modules outside the layers, such as lm_head)", path,
                                   e->valuestring, name);
            }
        }
    }
    return 0;
}

int config_parse(const char *json, const char *path, ModelConfig *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cJSON *root = json_parse_strict(json, strlen(json), path);
    if (!root) return -1;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return err_set("%s: not a well-formed JSON object", path);
    }
    int rc = -1;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!cJSON_IsString(mt)) {
        err_set("%s: missing field 'model_type' (supported: llama, bitnet)", path);
        goto done;
    }
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", mt->valuestring);
    if (strcmp(mt->valuestring, "llama") == 0) cfg->arch = ARCH_LLAMA;
    else if (strcmp(mt->valuestring, "bitnet") == 0) cfg->arch = ARCH_BITNET;
    else {
        err_set("%s: model_type '%s' is not supported (supported: llama, bitnet)", path,
                mt->valuestring);
        goto done;
    }
    /* 1bitLLM's BitnetForCausalLM (a llama model_type; its own modeling code,
     * which llama.cpp's converter follows): BitNet's layers with llama's
     * activation, float weights ternarised in every forward */
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (cfg->arch == ARCH_LLAMA && cJSON_IsArray(archs)) {
        const cJSON *a;
        cJSON_ArrayForEach(a, archs) if (cJSON_IsString(a) && strcmp(a->valuestring, "BitnetForCausalLM") == 0)
            cfg->bitnet_1bitllm = 1;
    }
    if (cfg->bitnet_1bitllm) {
        /* its BitLinear: activation_quant over input_bits; weight_quant is ternary
         * whatever weight_bits says (1 in every released config): another value is
         * refused as a guard, a config this form was not released with */
        static const char *const bits_keys[] = {"weight_bits", "input_bits"};
        static const int bits_want[] = {1, 8};
        for (int i = 0; i < 2; i++) {
            const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, bits_keys[i]);
            if (b && !cJSON_IsNull(b) && (!cJSON_IsNumber(b) || b->valuedouble != bits_want[i])) {
                err_set("%s: BitnetForCausalLM with %s other than %d is not supported (1bitLLM's "
                        "released form: ternary weights, int8 activations)", path, bits_keys[i], bits_want[i]);
                goto done;
            }
        }
        cfg->arch = ARCH_BITNET;
    }
    if (get_int(root, "hidden_size", &cfg->hidden, 1, path) < 0 ||
        get_int(root, "num_hidden_layers", &cfg->n_layers, 1, path) < 0 ||
        get_int(root, "num_attention_heads", &cfg->n_heads, 1, path) < 0 ||
        get_int(root, "intermediate_size", &cfg->inter, 1, path) < 0 ||
        get_int(root, "vocab_size", &cfg->vocab, 1, path) < 0)
        goto done;
    /* absent in older Llama checkpoints (multi-head attention): transformers'
     * LlamaConfig then takes num_attention_heads */
    cfg->n_kv_heads = cfg->n_heads;
    if (get_int(root, "num_key_value_heads", &cfg->n_kv_heads, 0, path) < 0) goto done;
    int r = get_int(root, "head_dim", &cfg->head_dim, 0, path);
    if (r < 0) goto done;
    if (r == 1) {
        if (cfg->hidden % cfg->n_heads != 0) {
            err_set("%s: hidden_size %d is not a multiple of num_attention_heads %d and no "
                    "head_dim is given", path, cfg->hidden, cfg->n_heads);
            goto done;
        }
        cfg->head_dim = cfg->hidden / cfg->n_heads;
    }
    if (cfg->head_dim % 2 != 0) {
        err_set("%s: head_dim %d must be even for RoPE", path, cfg->head_dim);
        goto done;
    }
    if (cfg->n_heads % cfg->n_kv_heads != 0) {
        err_set("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", path,
                cfg->n_heads, cfg->n_kv_heads);
        goto done;
    }
    /* (null refused: transformers' config refuses it, and the scaled RoPE types derive
     * from it where it is absent) */
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "max_position_embeddings"))) {
        err_set("%s: field 'max_position_embeddings' must be a positive integer (null given)", path);
        goto done;
    }
    if (get_int(root, "max_position_embeddings", &cfg->max_pos, 0, path) < 0) goto done;

    double eps = 0;
    const cJSON *je = cJSON_GetObjectItemCaseSensitive(root, "rms_norm_eps");
    if (!je) {
        err_set("%s: missing field 'rms_norm_eps'", path);
        goto done;
    }
    if (get_num(je, "rms_norm_eps", &eps, path) < 0) goto done;
    if (eps < 1e-30 || eps > 1.0) {
        err_set("%s: rms_norm_eps %g is outside [1e-30, 1] (it must stay a positive fp32)", path, eps);
        goto done;
    }
    cfg->eps = (float)eps;

    /* rope_theta: top level (older checkpoints) or rope_parameters (transformers 5);
     * both present and different is a contradiction. */
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(root, "rope_theta");
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    const cJSON *nested = cJSON_IsObject(rp) ? cJSON_GetObjectItemCaseSensitive(rp, "rope_theta")
                                             : NULL;
    /* the rope type: in rope_parameters (transformers 5) or rope_scaling (4.x); both
     * naming a type must agree */
    RopeParams rpa, rpb;
    if (parse_rope(cJSON_IsObject(rp) ? rp : NULL, "rope_parameters", path, &rpa) != 0) goto done;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (rs && !cJSON_IsNull(rs) && !cJSON_IsObject(rs)) {
        err_set("%s: rope_scaling must be an object or null", path);
        goto done;
    }
    if (parse_rope(cJSON_IsObject(rs) ? rs : NULL, "rope_scaling", path, &rpb) != 0) goto done;
    if (cJSON_IsObject(rs) && !rpb.given) {
        err_set("%s: rope_scaling names no rope type (rope_type or type)", path);
        goto done;
    }
    if (cJSON_IsObject(rs) && nested) {
        /* transformers 5 takes rope_scaling for the whole of rope_parameters, its rope_theta
         * then from the top level (or its default): which theta the checkpoint means is
         * not clear */
        err_set("%s: rope_scaling beside rope_parameters.rope_theta (transformers 5 replaces "
                "rope_parameters with rope_scaling): give one of them", path);
        goto done;
    }
    if (rpa.given && rpb.given &&
        (rpa.kind != rpb.kind || rpa.factor != rpb.factor || rpa.low != rpb.low || rpa.high != rpb.high ||
         rpa.orig != rpb.orig || rpa.attn != rpb.attn || rpa.beta_fast != rpb.beta_fast ||
         rpa.beta_slow != rpb.beta_slow || rpa.mscale != rpb.mscale || rpa.mscale_all != rpb.mscale_all ||
         rpa.truncate != rpb.truncate || rpa.nsf != rpb.nsf || rpa.nlf != rpb.nlf ||
         memcmp(rpa.sf, rpb.sf, sizeof(float) * (size_t)rpa.nsf) != 0 ||
         memcmp(rpa.lf, rpb.lf, sizeof(float) * (size_t)rpa.nlf) != 0)) {
        err_set("%s: rope_parameters and rope_scaling describe different RoPE scalings", path);
        goto done;
    }
    const RopeParams *rpu = rpa.given ? &rpa : &rpb;
    cfg->rope_kind = rpu->kind;
    cfg->rope_factor = rpu->factor;
    cfg->rope_low = rpu->low;
    cfg->rope_high = rpu->high;
    /* llama3 / yarn: a top-level original_max_position_embeddings over the object's
     * (transformers' standardize_rope_params, run again as the frequencies are computed,
     * takes it: Phi-3's form); absent from both, max_position_embeddings, LlamaConfig's
     * 2048 where that is absent too */
    int orig_top = 0;
    if ((rpu->kind == ROPE_LLAMA3 || rpu->kind == ROPE_YARN || rpu->kind == ROPE_LONGROPE) &&
        rope_orig(root, NULL, path, &orig_top) != 0)
        goto done;
    cfg->rope_orig_ctx = orig_top ? orig_top : rpu->orig ? rpu->orig : cfg->max_pos ? cfg->max_pos : 2048;
    /* a rope_theta in rope_scaling (rope_parameters then holds none: refused above) is the
     * nested one: transformers 5 takes that object for rope_parameters, theta included, where
     * 4.x had taken the top level's; both given and different is refused as a contradiction */
    const char *nested_name = "rope_parameters.rope_theta";
    if (!nested && cJSON_IsObject(rs)) {
        nested = cJSON_GetObjectItemCaseSensitive(rs, "rope_theta");
        nested_name = "rope_scaling.rope_theta";
    }
    double th_top = 0, th_nested = 0;
    if (top && get_num(top, "rope_theta", &th_top, path) < 0) goto done;
    if (nested && get_num(nested, nested_name, &th_nested, path) < 0) goto done;
    if (!top && !nested) {
        err_set("%s: missing field 'rope_theta' (top level or in 'rope_parameters')", path);
        goto done;
    }
    if (top && nested && th_top != th_nested) {
        err_set("%s: rope_theta %g at the top level contradicts %s %g", path, th_top, nested_name,
                th_nested);
        goto done;
    }
    cfg->rope_theta = nested ? th_nested : th_top;
    if (cfg->rope_theta < 1.0 || cfg->rope_theta > 1e30) {
        err_set("%s: rope_theta %g is outside [1, 1e30]", path, cfg->rope_theta);
        goto done;
    }
    if (cfg->rope_kind == ROPE_YARN && yarn_finish(cfg, rpu, path) != 0) goto done;
    if (cfg->rope_kind == ROPE_LONGROPE && longrope_finish(cfg, rpu, path) != 0) goto done;
    if (cfg->rope_kind == ROPE_DYNAMIC) {
        if (cfg->head_dim == 2) { /* (its exponent d / (d - 2)) */
            err_set("%s: dynamic RoPE scaling with head_dim 2", path);
            goto done;
        }
        const double b = rope_base(cfg);
        if (!(b >= 1.0 && b <= 1e30)) {
            err_set("%s: dynamic RoPE scaling's theta %g is outside [1, 1e30]", path, b);
            goto done;
        }
    }
    /* partial_rotary_factor: LlamaConfig takes it into the rope parameters; Llama's default
     * frequencies ignore it, the scaled types' rotate int(head_dim x it) dims, which Llama's
     * attention (whole heads) cannot apply unless that is head_dim */
    for (int k = 0; k < 3; k++) {
        const cJSON *o = k == 0 ? root : k == 1 ? rp : rs;
        const cJSON *pr = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "partial_rotary_factor") : NULL;
        if (!pr || cJSON_IsNull(pr)) continue;
        if (!cJSON_IsNumber(pr) || !(pr->valuedouble > 0 && pr->valuedouble <= 1e6)) {
            err_set("%s: partial_rotary_factor must be a positive number", path);
            goto done;
        }
        const double rot = (double)cfg->head_dim * pr->valuedouble;
        if (cfg->rope_kind != ROPE_DEFAULT && floor(rot) != (double)cfg->head_dim) {
            err_set("%s: partial_rotary_factor %g rotates %.0f of head_dim %d dims under a scaled RoPE "
                    "(Llama rotates whole heads: transformers cannot run it)", path, pr->valuedouble, floor(rot),
                    cfg->head_dim);
            goto done;
        }
    }

    const cJSON *ha = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (!cJSON_IsString(ha)) {
        err_set("%s: missing field 'hidden_act'", path);
        goto done;
    }
    if (strcmp(ha->valuestring, "silu") == 0) cfg->act = ACT_SILU;
    else if (strcmp(ha->valuestring, "relu2") == 0) cfg->act = ACT_RELU2;
    else {
        err_set("%s: hidden_act '%s' is not supported (silu, relu2)", path, ha->valuestring);
        goto done;
    }

    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    if (!tie || cJSON_IsNull(tie)) cfg->tie = TIE_ABSENT;
    else if (cJSON_IsBool(tie)) cfg->tie = cJSON_IsTrue(tie) ? TIE_TRUE : TIE_FALSE;
    else {
        err_set("%s: tie_word_embeddings must be true or false", path);
        goto done;
    }

    /* Linear biases (Llama's attention_bias / mlp_bias): ternlab's linears have
     * none, and running without them gives another model's numbers. */
    static const char *const bias_keys[] = {"attention_bias", "mlp_bias"};
    for (size_t i = 0; i < sizeof bias_keys / sizeof bias_keys[0]; i++) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, bias_keys[i]);
        if (!b || cJSON_IsNull(b) || cJSON_IsFalse(b)) continue;
        if (!cJSON_IsTrue(b)) {
            err_set("%s: %s must be true or false", path, bias_keys[i]);
            goto done;
        }
        err_set("%s: %s is true: linears with biases are not supported (ternlab's linears have "
                "none, and running without the biases would give wrong numbers)", path,
                bias_keys[i]);
        goto done;
    }

    /* quantization_config: "ternlab" (written by ternlab quantize) or "bitnet"
     * (transformers' BitNet quantizer: on a bitnet model, and on a llama one
     * such as Falcon3-*-1.58bit, whose linears are then BitLinear with the
     * llama's own norms and activation).  Any other method (its weights are in
     * a layout this loader does not read) is refused rather than loaded as a
     * plain model. */
    const cJSON *qcfg = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (qcfg && !cJSON_IsNull(qcfg) && !cJSON_IsObject(qcfg)) {
        err_set("%s: quantization_config must be an object", path);
        goto done;
    }
    const cJSON *qm = qcfg ? cJSON_GetObjectItemCaseSensitive(qcfg, "quant_method") : NULL;
    if (cJSON_IsString(qm) && strcmp(qm->valuestring, "ternlab") == 0) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(qcfg, "spec");
        if (!cJSON_IsString(sp) || !sp->valuestring[0] || strlen(sp->valuestring) >= sizeof cfg->ternlab_spec) {
            /* (an empty one had been read as the defaults) */
            err_set("%s: quantization_config of a ternlab checkpoint needs a 'spec' string (not empty, "
                    "under %zu bytes)", path, sizeof cfg->ternlab_spec);
            goto done;
        }
        cfg->ternlab_packed = 1;
        snprintf(cfg->ternlab_spec, sizeof cfg->ternlab_spec, "%s", sp->valuestring);
    } else if (cJSON_IsObject(qcfg) && cfg->bitnet_1bitllm) {
        err_set("%s: BitnetForCausalLM (1bitLLM's form: float linears ternarised in every forward) "
                "with a quantization_config other than ternlab's is not supported", path);
        goto done;
    } else if (cfg->bitnet_1bitllm) {
        /* float linears, ternarised at load (load_linear: bitnet_online) */
        cfg->bitnet_linears = 1;
    } else if (cJSON_IsObject(qcfg)) {
        if (cJSON_IsString(qm) ? strcmp(qm->valuestring, "bitnet") != 0 : cfg->arch != ARCH_BITNET) {
            err_set("%s: quantization_config.quant_method %s%s%s is not supported (bitnet, ternlab)", path,
                    cJSON_IsString(qm) ? "'" : "", cJSON_IsString(qm) ? qm->valuestring : "missing",
                    cJSON_IsString(qm) ? "'" : "");
            goto done;
        }
        cfg->bitnet_linears = 1;
    } else if (cfg->arch == ARCH_BITNET) {
        err_set("%s: bitnet model without a quantization_config (quant_method bitnet, linear_class "
                "bitlinear or autobitlinear): cannot tell whether its linears are ternary, nor whether "
                "weight_scale divides or multiplies", path);
        goto done;
    }
    if (cfg->bitnet_linears && !cfg->bitnet_1bitllm) {
        /* linear_class: transformers' BitNetQuantConfig defaults to bitlinear
         * (Falcon3-*-1.58bit gives none) */
        const cJSON *lc = cJSON_GetObjectItemCaseSensitive(qcfg, "linear_class");
        const char *cls = !lc || cJSON_IsNull(lc) ? "bitlinear" : cJSON_IsString(lc) ? lc->valuestring : "";
        /* quantization_mode: "offline" (transformers' default: the linears are
         * stored ternary) or "online" (stored in float, ternarised in every
         * forward); kept for the loader's messages */
        /* use_rms_norm: transformers' AutoBitLinear then normalises each linear's input
         * with a norm of its own (`..._proj.rms_norm.weight`), which this forward does
         * not apply: refused, not run without it */
        const cJSON *urn = cJSON_GetObjectItemCaseSensitive(qcfg, "use_rms_norm");
        if (cJSON_IsTrue(urn)) {
            err_set("%s: quantization_config.use_rms_norm true (a norm inside every linear) is not "
                    "supported", path);
            goto done;
        }
        const cJSON *qmode = cJSON_GetObjectItemCaseSensitive(qcfg, "quantization_mode");
        if (qmode && !cJSON_IsNull(qmode) &&
            (!cJSON_IsString(qmode) ||
             (strcmp(qmode->valuestring, "offline") != 0 && strcmp(qmode->valuestring, "online") != 0))) {
            /* (transformers' BitNetQuantConfig raises on it; it had loaded as offline) */
            err_set("%s: quantization_config.quantization_mode '%s' is not supported (offline, online)", path,
                    cJSON_IsString(qmode) ? qmode->valuestring : "(not a string)");
            goto done;
        }
        snprintf(cfg->bitnet_mode, sizeof cfg->bitnet_mode, "%s",
                 cJSON_IsString(qmode) ? qmode->valuestring : "offline");
        snprintf(cfg->bitnet_class, sizeof cfg->bitnet_class, "%s", cls);
        if (strcmp(cls, "bitlinear") == 0) cfg->bitnet_scale = BITNET_BITLINEAR;
        else if (strcmp(cls, "autobitlinear") == 0) cfg->bitnet_scale = BITNET_AUTOBITLINEAR;
        else {
            err_set("%s: linear_class '%s' is not supported (bitlinear, autobitlinear)", path,
                    cJSON_IsString(lc) ? lc->valuestring : "(not a string)");
            goto done;
        }
        if (not_converted(qcfg, cfg->n_layers, path) != 0) goto done;
    }
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

int config_load(const char *dir, ModelConfig *cfg) {
    char path[4096], *text = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (file_read_all(path, &text, NULL) != 0) return -1;
    int rc = config_parse(text, path, cfg);
    free(text);
    return rc;
}
