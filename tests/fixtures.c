#include "fixtures.h"
#include "test.h"
#include "core/err.h"
#include "core/mem.h"
#include "eval/metrics.h"
#include "eval/ppl.h"
#include "load/tokens.h"

#include <cJSON.h>
#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static cJSON *read_json(const char *path) {
    char *text;
    if (file_read_all(test_path(path), &text, NULL) != 0) return NULL;
    cJSON *j = cJSON_Parse(text);
    free(text);
    return j;
}

#define ROPE_REF LLAMA_DIR "/rope.reference.json"

const char *fixture_rope_dir(const char *variant, int legacy) {
    static _Thread_local char dir[600];
    char path[700];
    snprintf(dir, sizeof dir, "%s/rope-%s%s", test_tmpdir(), variant, legacy ? "-legacy" : "");
    cJSON *ref = read_json(ROPE_REF), *cfg = read_json(LLAMA_DIR "/config.json");
    const cJSON *vs = ref ? cJSON_GetObjectItem(ref, "variants") : NULL, *v = vs ? cJSON_GetObjectItem(vs, variant) : NULL,
                *rp = v ? cJSON_GetObjectItem(v, "rope_parameters") : NULL;
    const char *rc = NULL;
    if (!cfg || !cJSON_IsObject(rp)) {
        fprintf(stderr, "    %s or %s/config.json: no variant '%s'\n", ROPE_REF, LLAMA_DIR, variant);
        goto done;
    }
    cJSON *scal = cJSON_Duplicate(rp, 1);
    if (legacy) { /* transformers 4: rope_theta at the top level, the scaling in rope_scaling */
        cJSON *th = cJSON_DetachItemFromObject(scal, "rope_theta");
        cJSON_DeleteItemFromObject(cfg, "rope_parameters");
        cJSON_AddItemToObject(cfg, "rope_theta", th);
        if (!strcmp(variant, "linear") || !strcmp(variant, "yarn") || !strcmp(variant, "dynamic") ||
            !strncmp(variant, "longrope", 8)) {
            cJSON *t = cJSON_DetachItemFromObject(scal, "rope_type");
            cJSON_AddItemToObject(scal, "type", t);
        }
        /* (a key of YaRN checkpoints' configs that transformers ignores; so did its run) */
        if (!strcmp(variant, "yarn")) cJSON_AddTrueToObject(scal, "finetuned");
        cJSON_AddItemToObject(cfg, "rope_scaling", scal);
    } else {
        cJSON_ReplaceItemInObject(cfg, "rope_parameters", scal);
    }
    char *text = cJSON_Print(cfg);
    snprintf(path, sizeof path, "%s/config.json", dir);
    /* (made again in the same test: the same folder) */
    int ok = (mkdir(dir, 0777) == 0 || errno == EEXIST) && file_write_atomic(path, text, strlen(text)) == 0;
    free(text);
    static const char *const linked[] = {"model.safetensors", "tokenizer.json"};
    for (int i = 0; i < 2 && ok; i++) {
        char src[1200];
        snprintf(src, sizeof src, "%s", test_path(LLAMA_DIR));
        char *abs = realpath(src, NULL);
        snprintf(src, sizeof src, "%s/%s", abs ? abs : "", linked[i]);
        free(abs);
        snprintf(path, sizeof path, "%s/%s", dir, linked[i]);
        ok = symlink(src, path) == 0 || errno == EEXIST;
    }
    if (ok) rc = dir;
    else fprintf(stderr, "    cannot make %s: %s\n", dir, strerror(errno));
done:
    cJSON_Delete(ref);
    cJSON_Delete(cfg);
    return rc;
}

int fixture_rope_oracle(const char *variant, double *all, double *worst, double *decode) {
    enum { TW = 256, NP = 16, POS = 99 };
    char path[256];
    snprintf(path, sizeof path, "%s/rope_%s.ref_logits.f32", LLAMA_DIR, variant);
    const char *dir = fixture_rope_dir(variant, 0);
    float *ref = NULL, *got = NULL, *dec = NULL;
    int32_t *tok = NULL;
    int64_t nt = 0, n = dir ? fixture_read_f32(path, &ref) : -1;
    Model m;
    Engine e;
    int rc = -1, V = 0;
    if (n < 0 || fixture_engine(dir, NULL, TW, 16, 1, TW, &m, &e) != 0) goto done;
    V = m.cfg.vocab;
    got = fixture_window_logits(&e, TW, 0, 1);
    engine_free(&e);
    model_free(&m);
    if (!got || n != (int64_t)TW * V || tokens_load(test_path(TOKENS_FILE), V, &tok, &nt) != 0 || nt <= POS) goto done;
    /* the prompt's NP tokens prefilled, then tokens NP .. POS a decode step each */
    int Vd = 0;
    dec = fixture_forced_logits(dir, NULL, tok, NP, tok + NP, POS + 1 - NP, &Vd);
    if (!dec || Vd != V) goto done;
    *all = rel_l2(got, ref, n);
    *worst = rel_l2_worst_row(got, ref, TW, V);
    *decode = rel_l2(dec, ref + (int64_t)POS * V, V);
    rc = 0;
done:
    if (rc) fprintf(stderr, "    %s: the scaled model's logits or transformers' could not be had\n", variant);
    free(ref);
    free(got);
    free(dec);
    free(tok);
    return rc;
}

double fixture_rope_attention(const char *variant) {
    cJSON *ref = read_json(ROPE_REF);
    const cJSON *vs = ref ? cJSON_GetObjectItem(ref, "variants") : NULL, *v = vs ? cJSON_GetObjectItem(vs, variant) : NULL,
                *a = v ? cJSON_GetObjectItem(v, "attention_scaling") : NULL;
    const double r = cJSON_IsNumber(a) ? a->valuedouble : -1;
    cJSON_Delete(ref);
    return r;
}

int fixture_rope_freq_case(int k, const char **name, const char **dir, float *inv, int cap) {
    static _Thread_local char nm[64], d[600];
    char path[700];
    cJSON *ref = read_json(LLAMA_DIR "/rope_freq_cases.json"), *cfg = read_json(LLAMA_DIR "/config.json");
    const cJSON *cs = ref ? cJSON_GetObjectItem(ref, "cases") : NULL;
    const cJSON *c = cJSON_IsObject(cs) ? cJSON_GetArrayItem(cs, k) : NULL;
    const cJSON *hd = c ? cJSON_GetObjectItem(c, "head_dim") : NULL, *rp = c ? cJSON_GetObjectItem(c, "rope_parameters") : NULL,
                *a = c ? cJSON_GetObjectItem(c, "inv_freq") : NULL;
    int n = -1;
    if (!cfg || !cJSON_IsObject(cs)) {
        fprintf(stderr, "    %s/rope_freq_cases.json or config.json unreadable\n", LLAMA_DIR);
        goto done;
    }
    if (!c) { /* past the last case */
        n = 0;
        goto done;
    }
    if (!cJSON_IsNumber(hd) || !cJSON_IsObject(rp) || !cJSON_IsArray(a) || cJSON_GetArraySize(a) > cap ||
        cJSON_GetArraySize(a) != hd->valueint / 2) {
        fprintf(stderr, "    rope_freq_cases.json: case %d malformed\n", k);
        goto done;
    }
    /* llama-tiny's config with the case's head size (8 heads of it) and scaling */
    snprintf(nm, sizeof nm, "%s", c->string);
    snprintf(d, sizeof d, "%s/rope-case-%d", test_tmpdir(), k);
    cJSON_ReplaceItemInObject(cfg, "head_dim", cJSON_CreateNumber(hd->valueint));
    cJSON_ReplaceItemInObject(cfg, "hidden_size", cJSON_CreateNumber(8 * hd->valueint));
    cJSON_ReplaceItemInObject(cfg, "max_position_embeddings", cJSON_CreateNumber(131072));
    cJSON_ReplaceItemInObject(cfg, "rope_parameters", cJSON_Duplicate(rp, 1));
    char *text = cJSON_Print(cfg);
    snprintf(path, sizeof path, "%s/config.json", d);
    const int ok = (mkdir(d, 0777) == 0 || errno == EEXIST) && file_write_atomic(path, text, strlen(text)) == 0;
    free(text);
    if (!ok) {
        fprintf(stderr, "    cannot make %s: %s\n", d, strerror(errno));
        goto done;
    }
    n = cJSON_GetArraySize(a);
    for (int i = 0; i < n; i++) inv[i] = (float)cJSON_GetArrayItem(a, i)->valuedouble;
    *name = nm;
    *dir = d;
done:
    cJSON_Delete(ref);
    cJSON_Delete(cfg);
    return n;
}

int fixture_rope_inv_freq(const char *variant, float *inv, int cap) {
    cJSON *ref = read_json(ROPE_REF);
    const cJSON *vs = ref ? cJSON_GetObjectItem(ref, "variants") : NULL,
                *v = vs ? cJSON_GetObjectItem(vs, variant) : NULL,
                *a = !ref ? NULL : !strcmp(variant, "default") ? cJSON_GetObjectItem(ref, "default_inv_freq")
                                                               : v ? cJSON_GetObjectItem(v, "inv_freq") : NULL;
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    if (n > cap) n = -1;
    for (int i = 0; i < n; i++) inv[i] = (float)cJSON_GetArrayItem(a, i)->valuedouble; /* (float32's repr) */
    cJSON_Delete(ref);
    return n;
}

int64_t fixture_ref_ints(const char *dir, const char *field, int32_t **out) {
    char path[512];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    cJSON *j = read_json(path);
    cJSON *a = j ? cJSON_GetObjectItem(j, field) : NULL;
    if (!cJSON_IsArray(a)) {
        cJSON_Delete(j);
        return -1;
    }
    int64_t n = cJSON_GetArraySize(a);
    *out = xmalloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) (*out)[i] = cJSON_GetArrayItem(a, (int)i)->valueint;
    cJSON_Delete(j);
    return n;
}

double fixture_json_number(const char *path, const char *field) {
    cJSON *j = read_json(path);
    cJSON *v = j ? cJSON_GetObjectItem(j, field) : NULL;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    cJSON_Delete(j);
    return d;
}

int64_t fixture_read_f32(const char *path, float **out) {
    char *buf;
    size_t n;
    if (file_read_all(test_path(path), &buf, &n) != 0) return -1;
    *out = (float *)buf;
    return (int64_t)(n / 4);
}

double rel_l2(const float *a, const float *b, int64_t n) { return rel_l2_row(a, b, n); }

double rel_l2_worst_row(const float *a, const float *b, int64_t rows, int64_t cols) {
    double worst = 0;
    for (int64_t r = 0; r < rows; r++) worst = fmax(worst, rel_l2(a + r * cols, b + r * cols, cols));
    return worst;
}

EngineOpts fixture_backend;

int fixture_engine(const char *dir, const ModelLoadOpts *opts, int64_t max_tok, int block_size,
                   int64_t seqs, int64_t seq_len, Model *m, Engine *e) {
    if (model_load(test_path(dir), opts, m) != 0) {
        fprintf(stderr, "    %s\n", err_msg());
        return -1;
    }
    EngineOpts eo = fixture_backend;
    eo.max_tok = max_tok;
    eo.block_size = block_size;
    eo.n_blocks = seqs * ((seq_len + block_size - 1) / block_size);
    if (engine_open(e, m, &eo) != 0) {
        fprintf(stderr, "    %s\n", err_msg());
        model_free(m);
        return -1;
    }
    return 0;
}

typedef struct {
    float *dst;
    int64_t first;
} Collect;

static int collect(void *ctx, int64_t w, const float *logits, const int32_t *tokens, int T, int V,
                   int r0) {
    Collect *c = ctx;
    memcpy(c->dst + (size_t)(w - c->first) * (size_t)T * (size_t)V, logits,
           sizeof(float) * (size_t)T * (size_t)V);
    return 0;
}

float *fixture_window_logits(Engine *e, int T, int64_t a, int64_t b) {
    int32_t *tok;
    int64_t n;
    if (tokens_load(test_path(TOKENS_FILE), e->m->cfg.vocab, &tok, &n) != 0) return NULL;
    int V = e->m->cfg.vocab;
    Collect c = {xmalloc(sizeof(float) * (size_t)((b - a) * T) * (size_t)V), a};
    PplOpts po = {.window = T, .first_window = a, .max_windows = b - a, .on_logits = collect,
                  .ctx = &c};
    PplResult r;
    int rc = eval_ppl(e, tok, n, &po, &r);
    free(tok);
    if (rc != 0) {
        fprintf(stderr, "    %s\n", err_msg());
        free(c.dst);
        return NULL;
    }
    return c.dst;
}

float *fixture_model_logits(Model *m, int T, int64_t nw) {
    Engine e;
    EngineOpts eo = fixture_backend;
    eo.max_tok = T * nw, eo.block_size = 16, eo.n_blocks = nw * ((T + 15) / 16);
    if (engine_open(&e, m, &eo) != 0) {
        fprintf(stderr, "    %s\n", err_msg());
        return NULL;
    }
    float *l = fixture_window_logits(&e, T, 0, nw);
    engine_free(&e);
    return l;
}

int fixture_greedy(const char *dir, const ModelLoadOpts *opts, const int32_t *prompt, int64_t np,
                   int64_t n_new, int batch, int32_t **out, CudaEngineInfo *info) {
    const int32_t *prompts[8];
    int64_t lens[8];
    if (batch < 1 || batch > 8) return -1;
    for (int b = 0; b < batch; b++) {
        prompts[b] = prompt;
        lens[b] = np;
    }
    return fixture_greedy_each(dir, opts, prompts, lens, n_new, batch, out, info);
}

int fixture_greedy_each(const char *dir, const ModelLoadOpts *opts, const int32_t *const *prompts,
                        const int64_t *lens, int64_t n_new, int batch, int32_t **out, CudaEngineInfo *info) {
    Model m;
    Engine e;
    if (batch < 1 || batch > 8) return -1;
    int64_t np = 0;
    for (int b = 0; b < batch; b++) np = lens[b] > np ? lens[b] : np;
    if (fixture_engine(dir, opts, 64, 16, batch, np + n_new, &m, &e) != 0) return -1;
    int rc = engine_generate(&e, prompts, lens, batch, n_new, out);
    if (rc) fprintf(stderr, "    %s\n", err_msg());
    if (info && rc == 0 && (rc = cuda_engine_info(&e, info)) != 0)
        fprintf(stderr, "    %s\n", err_msg());
    engine_free(&e);
    model_free(&m);
    return rc;
}

float *fixture_forced_logits(const char *dir, const ModelLoadOpts *opts, const int32_t *prompt, int64_t np,
                             const int32_t *gen, int64_t n_gen, int *vocab) {
    Model m;
    Engine e;
    if (n_gen < 0) return NULL;
    if (fixture_engine(dir, opts, 64, 16, 1, np + n_gen + 1, &m, &e) != 0) return NULL;
    *vocab = m.cfg.vocab;
    float *out = xmalloc(sizeof(float) * (size_t)m.cfg.vocab);
    const int sid = kv_seq_new(&e.kv);
    /* the prompt as engine_generate prefills it, then the given tokens a
     * decode step each (the decode path's kernels) */
    int rc = engine_prefill(&e, sid, prompt, np, out);
    e.rs.decode = 1;
    for (int64_t t = 0; t < n_gen && rc == 0; t++) {
        const int tok = gen[t];
        const int64_t pos = np + t, li = 0;
        rc = forward(e.m, &e.kv, &e.rs, &tok, &sid, &pos, 1, &li, 1, out);
    }
    e.rs.decode = 0;
    if (rc) {
        fprintf(stderr, "    %s\n", err_msg());
        free(out);
        out = NULL;
    }
    kv_seq_free(&e.kv, sid);
    engine_free(&e);
    model_free(&m);
    return out;
}

const char *bin_path(const char *prog) {
    static _Thread_local char buf[8][512];
    static _Thread_local int k;
    const char *b = getenv("TERNLAB_BUILD");
    char *out = buf[k++ & 7];
    snprintf(out, sizeof buf[0], "%s/%s", b && *b ? b : "build", prog);
    return out;
}

int fixture_oracle_logits(const char *dir, const ModelLoadOpts *opts, int T, float **got,
                          float **ref, int *vocab) {
    Model m;
    Engine e;
    char path[512];
    if (fixture_engine(dir, opts, 2 * T, 16, 2, T, &m, &e) != 0) return -1;
    *vocab = m.cfg.vocab;
    *got = fixture_window_logits(&e, T, 0, 2);
    engine_free(&e);
    model_free(&m);
    snprintf(path, sizeof path, "%s/ref_logits.f32", dir);
    int64_t n = fixture_read_f32(path, ref);
    if (!*got || n != 2 * (int64_t)T * *vocab) {
        free(*got);
        if (n >= 0) free(*ref);
        return -1;
    }
    return 0;
}

/* The n values of the dataset at path as doubles into v: 0, or -1 where it is
 * absent or holds another count (v then all NaN). */
int h5_read_f64s(const char *file, const char *path, double *v, int64_t n) {
    int rc = -1;
    for (int64_t i = 0; i < n; i++) v[i] = NAN;
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return rc;
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    if (d >= 0) {
        hid_t s = H5Dget_space(d);
        if (H5Sget_simple_extent_npoints(s) == n &&
            H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0)
            rc = 0;
        H5Sclose(s);
        H5Dclose(d);
    }
    H5Fclose(f);
    return rc;
}

int64_t h5_dataset_len(const char *file, const char *path) {
    int64_t n = -1;
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return n;
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    if (d >= 0) {
        hid_t s = H5Dget_space(d);
        n = H5Sget_simple_extent_npoints(s);
        H5Sclose(s);
        H5Dclose(d);
    }
    H5Fclose(f);
    return n;
}

double h5_attr_f64(const char *file, const char *obj, const char *name) {
    double v = NAN;
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return v;
    if (H5Aexists_by_name(f, obj, name, H5P_DEFAULT) > 0) {
        hid_t a = H5Aopen_by_name(f, obj, name, H5P_DEFAULT, H5P_DEFAULT);
        if (a >= 0) {
            H5Aread(a, H5T_NATIVE_DOUBLE, &v);
            H5Aclose(a);
        }
    }
    H5Fclose(f);
    return v;
}
