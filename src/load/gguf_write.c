/* GGUF writer: a generic collector of metadata and tensors (GgufWriter) and
 * gguf_write_model, which writes a (ternary) llama Model as llama.cpp's
 * converter would (contract in gguf.h).
 *
 * Cost: tensor data is copied into the writer before the file is written, so
 * writing holds a second copy of the converted weights in memory (small next
 * to the f32 model it comes from). */
#include "core/dtype.h"
#include "core/err.h"
#include "core/mem.h"
#include "load/gguf.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    uint8_t *p;
    size_t n, cap;
} Buf;

static void buf_put(Buf *b, const void *src, size_t n) {
    if (n == 0) return; /* (an empty buffer's pointer may be NULL: memcpy takes none) */
    if (b->n + n > b->cap) {
        while (b->n + n > b->cap) b->cap = b->cap ? 2 * b->cap : 4096;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_u32(Buf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    buf_put(b, x, 4);
}
static void put_u64(Buf *b, uint64_t v) {
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}
static void put_str(Buf *b, const char *s) {
    put_u64(b, strlen(s));
    buf_put(b, s, strlen(s));
}

typedef struct {
    char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint8_t *data;
    size_t nbytes;
} WTensor;

struct GgufWriter {
    Buf kv;        /* serialised key/value pairs */
    uint64_t n_kv;
    WTensor *t;
    int64_t n_t, cap_t;
};

GgufWriter *gguf_writer_new(void) { return xcalloc(1, sizeof(GgufWriter)); }

void gguf_writer_free(GgufWriter *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    free(w->kv.p);
    free(w);
}

void gguf_writer_str(GgufWriter *w, const char *key, const char *val) {
    put_str(&w->kv, key);
    put_u32(&w->kv, GGUF_TYPE_STRING);
    put_str(&w->kv, val);
    w->n_kv++;
}

void gguf_writer_u32(GgufWriter *w, const char *key, uint32_t val) {
    put_str(&w->kv, key);
    put_u32(&w->kv, GGUF_TYPE_UINT32);
    put_u32(&w->kv, val);
    w->n_kv++;
}

void gguf_writer_f32(GgufWriter *w, const char *key, float val) {
    put_str(&w->kv, key);
    put_u32(&w->kv, GGUF_TYPE_FLOAT32);
    put_u32(&w->kv, f32_bits(val));
    w->n_kv++;
}

void gguf_writer_str_array(GgufWriter *w, const char *key, const char *const *vals, uint64_t n) {
    put_str(&w->kv, key);
    put_u32(&w->kv, GGUF_TYPE_ARRAY);
    put_u32(&w->kv, GGUF_TYPE_STRING);
    put_u64(&w->kv, n);
    for (uint64_t i = 0; i < n; i++) put_str(&w->kv, vals[i]);
    w->n_kv++;
}

/* A raw key/value (type + value bytes as in a file), e.g. copied from another GGUF. */
static void writer_raw(GgufWriter *w, const GgufKV *kv) {
    put_str(&w->kv, kv->key);
    put_u32(&w->kv, kv->type);
    if (kv->type == GGUF_TYPE_STRING) put_u64(&w->kv, kv->n);
    if (kv->type == GGUF_TYPE_ARRAY) {
        put_u32(&w->kv, kv->arr_type);
        put_u64(&w->kv, kv->n);
    }
    buf_put(&w->kv, kv->data, kv->nbytes);
    w->n_kv++;
}

int gguf_writer_tensor(GgufWriter *w, const char *name, uint32_t type, int n_dims,
                       const int64_t *ne, const void *data, size_t nbytes) {
    int64_t n = 1, blk = gguf_type_block(type);
    if (!blk) return err_set("tensor '%s': cannot write type %s", name, gguf_type_name(type));
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return err_set("tensor '%s': %d dimensions", name, n_dims);
    for (int d = 0; d < n_dims; d++) n *= ne[d];
    if (ne[0] % blk != 0 || (size_t)(n / blk) * gguf_type_block_bytes(type) != nbytes)
        return err_set("tensor '%s': %zu bytes do not match its shape and type %s", name, nbytes,
                       gguf_type_name(type));
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? 2 * w->cap_t : 64;
        w->t = xrealloc(w->t, sizeof *w->t * (size_t)w->cap_t);
    }
    WTensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    t->name = xstrdup(name);
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->data = xmalloc(nbytes ? nbytes : 1);
    memcpy(t->data, data, nbytes);
    t->nbytes = nbytes;
    return 0;
}

static size_t pad_to(size_t x, size_t a) { return (a - x % a) % a; }

int gguf_writer_write(GgufWriter *w, const char *path) {
    Buf h = {0};
    buf_put(&h, GGUF_MAGIC, 4);
    put_u32(&h, 3);
    put_u64(&h, (uint64_t)w->n_t);
    put_u64(&h, w->n_kv);
    buf_put(&h, w->kv.p, w->kv.n);
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        WTensor *t = &w->t[i];
        put_str(&h, t->name);
        put_u32(&h, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) put_u64(&h, (uint64_t)t->ne[d]);
        put_u32(&h, t->type);
        put_u64(&h, off);
        off += t->nbytes + pad_to(t->nbytes, GGUF_DEFAULT_ALIGNMENT);
    }
    static const uint8_t zeros[GGUF_DEFAULT_ALIGNMENT] = {0};
    buf_put(&h, zeros, pad_to(h.n, GGUF_DEFAULT_ALIGNMENT));

    if (file_out_check(path) != 0) {
        free(h.p); /* (it had leaked: the sanitizer build's leak report) */
        return -1;
    }
    size_t tl = strlen(path) + 128;
    char *tmp = xmalloc(tl);
    tmp_begin(tmp, tl, path); /* (it had been path.tmp: two writers of one file shared it) */
    FILE *f = tmp_fopen(tmp, "wb");
    int rc = 0;
    if (!f) {
        rc = err_set("%s: cannot create: %s", tmp, strerror(errno));
    } else {
        int ok = fwrite(h.p, 1, h.n, f) == h.n;
        for (int64_t i = 0; i < w->n_t && ok; i++) {
            ok = fwrite(w->t[i].data, 1, w->t[i].nbytes, f) == w->t[i].nbytes;
            size_t p = pad_to(w->t[i].nbytes, GGUF_DEFAULT_ALIGNMENT);
            if (ok && p) ok = fwrite(zeros, 1, p, f) == p;
        }
        if (fclose(f) != 0) ok = 0;
        if (!ok) rc = err_set("%s: write failed: %s (disk full?)", tmp, strerror(errno));
        else if (rename(tmp, path) != 0)
            rc = err_set("%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        if (rc != 0) remove(tmp);
    }
    tmp_end(tmp);
    free(tmp);
    free(h.p);
    return rc;
}

/* ---- llama models -------------------------------------------------------- */

/* Adds a float tensor (rows, cols) (rows 0: vector) in the smallest type that
 * holds every value exactly: F16 (the converter's choice), else BF16, else F32.
 * f32_only forces F32 (norms).  perm_hd > 0 permutes q/k rows for llama.cpp. */
static int add_float(GgufWriter *w, const char *name, const float *x, int64_t rows, int64_t cols,
                     int64_t perm_hd, int f32_only) {
    int64_t n = (rows ? rows : 1) * cols;
    int f16_ok = !f32_only, bf16_ok = !f32_only;
    for (int64_t i = 0; i < n && (f16_ok || bf16_ok); i++) {
        uint32_t b = f32_bits(x[i]);
        if (f16_ok && f32_bits(f16_to_f32(f32_to_f16(x[i]))) != b) f16_ok = 0;
        if (bf16_ok && f32_bits(bf16_to_f32(f32_to_bf16(x[i]))) != b) bf16_ok = 0;
    }
    uint32_t type = f16_ok ? GGML_TYPE_F16 : bf16_ok ? GGML_TYPE_BF16 : GGML_TYPE_F32;
    size_t es = type == GGML_TYPE_F32 ? 4 : 2;
    uint8_t *buf = mem_alloc(es * (size_t)n, name);
    if (!buf) return -1;
    for (int64_t r = 0; r < (rows ? rows : 1); r++) {
        const float *src = x + (perm_hd > 0 ? gguf_hf_row_of(r, perm_hd) : r) * cols;
        uint8_t *dst = buf + (size_t)(r * cols) * es;
        for (int64_t k = 0; k < cols; k++) {
            uint32_t v = type == GGML_TYPE_F16    ? f32_to_f16(src[k])
                         : type == GGML_TYPE_BF16 ? f32_to_bf16(src[k])
                                                  : f32_bits(src[k]);
            for (size_t j = 0; j < es; j++) dst[k * (int64_t)es + (int64_t)j] = (uint8_t)(v >> (8 * j));
        }
    }
    int64_t ne[2] = {cols, rows};
    int rc = gguf_writer_tensor(w, name, type, rows ? 2 : 1, ne, buf, es * (size_t)n);
    mem_free(buf);
    return rc;
}

/* A ternary matrix as TQ2_0/TQ1_0: one f16 scale per 256-weight block, which
 * is exact for group 256, row and tensor scales that f16 represents. */
static int add_ternary(GgufWriter *w, const char *name, const TernaryMatrix *t, int64_t perm_hd,
                       int tq1) {
    int64_t rows = t->rows, cols = t->cols, nb = cols / GGUF_QK_K;
    if (t->group != QG_TENSOR && t->group != QG_ROW && t->group_cols % GGUF_QK_K != 0)
        return err_set("tensor '%s': group %s has several scales per 256-weight block, and %s "
                       "holds one; quantise with group=256, row or tensor", name,
                       quant_group_name(t->group), tq1 ? "TQ1_0" : "TQ2_0");
    size_t bb = tq1 ? GGUF_TQ1_0_BYTES : GGUF_TQ2_0_BYTES;
    int8_t *q = mem_alloc((size_t)(rows * cols), name);
    uint8_t *out = mem_alloc((size_t)(rows * nb) * bb, name);
    int rc = (q && out) ? 0 : -1;
    if (rc == 0) tern_unpack_codes(t, q);
    for (int64_t r = 0; r < rows && rc == 0; r++) {
        int64_t src = perm_hd > 0 ? gguf_hf_row_of(r, perm_hd) : r;
        for (int64_t b = 0; b < nb; b++) {
            float s = t->scales[src * t->scale_stride + (b * GGUF_QK_K) / t->group_cols];
            uint16_t d = f32_to_f16(s);
            if ((d & 0x7c00) == 0x7c00) {
                rc = err_set("tensor '%s': scale %g does not fit in f16 (TQ block scale)", name,
                             (double)s);
                break;
            }
            uint8_t *blk = out + (size_t)(r * nb + b) * bb;
            const int8_t *qb = q + src * cols + b * GGUF_QK_K;
            if (tq1) gguf_tq1_0_encode(qb, d, blk);
            else gguf_tq2_0_encode(qb, d, blk);
        }
    }
    int64_t ne[2] = {cols, rows};
    if (rc == 0)
        rc = gguf_writer_tensor(w, name, tq1 ? GGML_TYPE_TQ1_0 : GGML_TYPE_TQ2_0, 2, ne, out,
                                (size_t)(rows * nb) * bb);
    mem_free(q);
    mem_free(out);
    return rc;
}

static int add_linear(GgufWriter *w, const char *name, const Linear *lin, int64_t perm_hd, int tq1) {
    if (!lin->t) return add_float(w, name, lin->w, lin->out, lin->in, perm_hd, 0);
    if (lin->in % GGUF_QK_K == 0) return add_ternary(w, name, lin->t, perm_hd, tq1);
    /* as the converter does: a row that is not whole TQ blocks stays float */
    float *x = mem_alloc(sizeof(float) * (size_t)(lin->out * lin->in), name);
    if (!x) return -1;
    tern_dequant(lin->t, x);
    int rc = add_float(w, name, x, lin->out, lin->in, perm_hd, 0);
    mem_free(x);
    return rc;
}

static void writer_i32_array(GgufWriter *w, const char *key, const int32_t *v, uint64_t n) {
    put_str(&w->kv, key);
    put_u32(&w->kv, GGUF_TYPE_ARRAY);
    put_u32(&w->kv, GGUF_TYPE_INT32);
    put_u64(&w->kv, n);
    for (uint64_t i = 0; i < n; i++) put_u32(&w->kv, (uint32_t)v[i]);
    w->n_kv++;
}

/* dir/file parsed into *out; a file that is not there: 0 and *out NULL; one that is
 * there but cannot be read or is not JSON: -1 with err_set (a broken tokenizer.json
 * had been taken for none, and the GGUF written without a vocabulary, exit 0). */
static int read_json(const char *dir, const char *file, cJSON **out) {
    size_t l = strlen(dir) + strlen(file) + 2;
    char *p = xmalloc(l);
    snprintf(p, l, "%s/%s", dir, file);
    char *text = NULL;
    int rc = 0;
    *out = NULL;
    struct stat st;
    if (stat(p, &st) != 0 && errno == ENOENT) {
        free(p);
        return 0;
    }
    if (file_read_all(p, &text, NULL) != 0) rc = -1;
    else if (!(*out = cJSON_Parse(text))) {
        const char *at = cJSON_GetErrorPtr();
        rc = err_set("%s: not valid JSON (at byte %lld of %lld)", p, at ? (long long)(at - text) : -1LL,
                     (long long)strlen(text));
    }
    free(text);
    free(p);
    return rc;
}

/* 1 when tokenizer.json's pre-tokenizer is GPT-2's byte-level one alone (or a
 * Sequence of nothing else): the one kind of BPE llama.cpp's "gpt2" tokenizer
 * with pre "gpt-2" reproduces.  A SentencePiece-style BPE (Metaspace, byte
 * fallback) is another, and so is a Sequence with its own Split regex before
 * ByteLevel (Llama 3, Qwen2: llama.cpp splits those by other rules). */
static int byte_level_pre(const cJSON *pre) {
    const cJSON *t = pre ? cJSON_GetObjectItemCaseSensitive(pre, "type") : NULL;
    if (!cJSON_IsString(t)) return 0;
    if (strcmp(t->valuestring, "ByteLevel") == 0) return 1;
    if (strcmp(t->valuestring, "Sequence") != 0) return 0;
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers"), *e;
    if (!cJSON_IsArray(seq) || cJSON_GetArraySize(seq) == 0) return 0;
    cJSON_ArrayForEach(e, seq) if (!byte_level_pre(e)) return 0;
    return 1;
}

/* A byte-level BPE tokenizer.json (GPT-2 style) as llama.cpp's "gpt2"
 * tokenizer, as the converter writes it: tokens by id (holes as [PADn]),
 * token types (1 normal, 3 control = special added token, 4 user-defined),
 * merges "a b", bos/eos from config.json.  Other tokenizers are skipped
 * (*written stays 0): the weights are still complete, llama.cpp then needs a
 * tokenizer from elsewhere (gguf_write_model says "none"). */
static int hf_tokenizer(GgufWriter *w, const Model *m, int *written) {
    cJSON *tj;
    if (read_json(m->path, "tokenizer.json", &tj) != 0) return -1;
    const cJSON *model = tj ? cJSON_GetObjectItemCaseSensitive(tj, "model") : NULL;
    const cJSON *type = model ? cJSON_GetObjectItemCaseSensitive(model, "type") : NULL;
    const cJSON *vocab = model ? cJSON_GetObjectItemCaseSensitive(model, "vocab") : NULL;
    const cJSON *merges = model ? cJSON_GetObjectItemCaseSensitive(model, "merges") : NULL;
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0 || !cJSON_IsObject(vocab) ||
        !cJSON_IsArray(merges) || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")) ||
        !byte_level_pre(cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer"))) {
        cJSON_Delete(tj);
        return 0;
    }
    int n = m->cfg.vocab;
    const char **tok = xcalloc((size_t)n, sizeof *tok);
    int32_t *tt = xcalloc((size_t)n, sizeof *tt);
    char **pads = xcalloc((size_t)n, sizeof *pads);
    const cJSON *e;
    int rc = 0;
    /* (llama.cpp's converter asserts every id below the model's vocab_size too) */
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble != (double)e->valueint || e->valueint < 0 || e->valueint >= n) {
            rc = cJSON_IsNumber(e)
                     ? err_set("%s/tokenizer.json: vocab entry '%s': id %g is not an integer in [0, %d) "
                               "(the model's vocab_size)", m->path, e->string ? e->string : "?", e->valuedouble, n)
                     : err_set("%s/tokenizer.json: vocab entry '%s': its id is not a number", m->path,
                               e->string ? e->string : "?");
            break;
        }
        tok[e->valueint] = e->string;
        tt[e->valueint] = 1;
    }
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(tj, "added_tokens")) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || id->valueint < 0 || id->valueint >= n || !cJSON_IsString(content))
            continue;
        tok[id->valueint] = content->valuestring;
        tt[id->valueint] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")) ? 3 : 4;
    }
    for (int i = 0; i < n; i++)
        if (!tok[i]) {
            pads[i] = xmalloc(24);
            snprintf(pads[i], 24, "[PAD%d]", i);
            tok[i] = pads[i];
            tt[i] = 5; /* UNUSED */
        }
    int nm = cJSON_GetArraySize(merges), k = 0;
    char **mg = xcalloc((size_t)(nm ? nm : 1), sizeof *mg);
    cJSON_ArrayForEach(e, merges) {
        if (rc != 0) break;
        if (cJSON_IsString(e)) {
            mg[k++] = xstrdup(e->valuestring);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 0)) && cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            const char *a = cJSON_GetArrayItem(e, 0)->valuestring, *b = cJSON_GetArrayItem(e, 1)->valuestring;
            size_t l = strlen(a) + strlen(b) + 2;
            mg[k] = xmalloc(l);
            snprintf(mg[k++], l, "%s %s", a, b);
        } else {
            rc = err_set("%s/tokenizer.json: merge %d is neither \"a b\" nor [\"a\", \"b\"]", m->path, k);
        }
    }
    cJSON *cfg = NULL;
    if (rc == 0) rc = read_json(m->path, "config.json", &cfg);
    if (rc == 0) {
        gguf_writer_str(w, "tokenizer.ggml.model", "gpt2");
        gguf_writer_str(w, "tokenizer.ggml.pre", "gpt-2");
        gguf_writer_str_array(w, "tokenizer.ggml.tokens", tok, (uint64_t)n);
        writer_i32_array(w, "tokenizer.ggml.token_type", tt, (uint64_t)n);
        gguf_writer_str_array(w, "tokenizer.ggml.merges", (const char *const *)mg, (uint64_t)k);
        const char *ids[2][2] = {{"bos_token_id", "tokenizer.ggml.bos_token_id"},
                                 {"eos_token_id", "tokenizer.ggml.eos_token_id"}};
        for (int i = 0; i < 2; i++) {
            const cJSON *v = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, ids[i][0]) : NULL;
            if (cJSON_IsNumber(v) && v->valueint >= 0 && v->valueint < n)
                gguf_writer_u32(w, ids[i][1], (uint32_t)v->valueint);
        }
        *written = 1;
    }
    cJSON_Delete(cfg);
    for (int i = 0; i < k; i++) free(mg[i]);
    for (int i = 0; i < n; i++) free(pads[i]);
    free(mg);
    free(pads);
    free(tt);
    free(tok);
    cJSON_Delete(tj);
    return rc;
}

/* Tokenizer metadata (llama.cpp needs it to load the file): copied from the
 * source GGUF when the model came from one, else from an HF tokenizer.json;
 * *copied: 1 when tokenizer.ggml.model was written. */
static int copy_tokenizer(GgufWriter *w, const Model *m, int *copied) {
    *copied = 0;
    size_t l = m->path ? strlen(m->path) : 0;
    if (l == 0) return 0;
    if (l < 5 || strcmp(m->path + l - 5, ".gguf") != 0) return hf_tokenizer(w, m, copied);
    GgufFile g;
    if (gguf_open(m->path, &g) != 0) return -1;
    for (int64_t i = 0; i < g.n_kv; i++)
        if (strncmp(g.kv[i].key, "tokenizer.", 10) == 0) writer_raw(w, &g.kv[i]);
    /* (other tokenizer.* keys without the model's: the caller still writes "none") */
    *copied = gguf_find_kv(&g, "tokenizer.ggml.model") != NULL;
    gguf_close(&g);
    return 0;
}

/* The rope_freqs.weight llama.cpp's converter writes for transformers' llama3
 * rope type (convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors), in its
 * float32 arithmetic: frequency i's divisor 1 where its wavelength 2 pi /
 * freq_i is below original / high_freq_factor, factor above original /
 * low_freq_factor, else 1 / ((1 - s) / factor + s) with s = (original /
 * wavelength - low) / (high - low).  original: the scaling's own
 * original_max_position_embeddings, as transformers runs it (the converter
 * reads a top-level one, 8192 where absent: the same for Llama 3.1 / 3.2). */
static void llama3_rope_factors(const ModelConfig *c, float *ff) {
    for (int i = 0; i < c->head_dim / 2; i++) {
        const float freq = rope_default_freq(c, i);
        float s = 0.0f;
        const int band = rope_llama3_band(c, freq, &s);
        if (band < 2) {
            ff[i] = band ? (float)c->rope_factor : 1.0f;
        } else {
            float d = 1.0f - s;
            d = d / (float)c->rope_factor;
            d = d + s;
            ff[i] = 1.0f / d;
        }
    }
}

int gguf_write_model(const Model *m, const char *out_path, int tq1) {
    const ModelConfig *c = &m->cfg;
    const int bitnet = c->arch == ARCH_BITNET;
    const int rope_ff = c->rope_kind == ROPE_LLAMA3 || c->rope_kind == ROPE_FACTORS;
    if (c->rope_kind == ROPE_YARN)
        return err_set("%s: a model with yarn RoPE scaling is not written as GGUF: llama.cpp's YaRN "
                       "(rope.scaling.type yarn) is not read by ternlab's GGUF reader, so the file could not "
                       "be checked against this model (write safetensors: --out DIR)", out_path);
    if (c->rope_kind == ROPE_LONGROPE)
        return err_set("%s: a model with longrope RoPE scaling is not written as GGUF: llama.cpp's llama "
                       "architecture has no LongRoPE (its short and long factors are Phi-3's tensors), so the "
                       "file would lose the scaling (write safetensors: --out DIR)", out_path);
    if (c->rope_kind == ROPE_DYNAMIC)
        return err_set("%s: a model with dynamic RoPE scaling is not written as GGUF: llama.cpp has no such "
                       "scaling, and a file without it would lose the limit at max_position_embeddings "
                       "(write safetensors: --out DIR)", out_path);
    if (bitnet && rope_ff)
        return err_set("%s: a BitNet model with per-frequency RoPE scaling (llama3) has no GGUF form: "
                       "llama.cpp reads rope_freqs.weight for llama only", out_path);
    if (rope_ff && c->head_dim / 2 > ROPE_MAX_FACTORS)
        return err_set("%s: head_dim %d: more RoPE frequencies than %d (internal)", out_path, c->head_dim,
                       ROPE_MAX_FACTORS);
    /* llama.cpp's bitnet architecture: logits from token_embd (no output tensor), sub-norms
     * of n_embd values (attn_sub_norm) */
    if (bitnet && !m->lm_head_tied)
        return err_set("%s: a BitNet model whose lm_head is not its embedding (tie_word_embeddings false) "
                       "has no GGUF form: llama.cpp's bitnet architecture takes the logits from token_embd "
                       "and reads no output tensor", out_path);
    if (bitnet && (int64_t)c->n_heads * c->head_dim != c->hidden)
        return err_set("%s: heads x head_dim %lld differs from hidden %d: llama.cpp's bitnet architecture "
                       "holds attn_sub_norm with hidden values", out_path, (long long)c->n_heads * c->head_dim,
                       c->hidden);
    GgufWriter *w = gguf_writer_new();
    const char *A = bitnet ? "bitnet" : "llama";
    char key[96];
#define AK(suffix) (snprintf(key, sizeof key, "%s." suffix, A), key)
    const char *base = m->path ? strrchr(m->path, '/') : NULL;
    base = base ? base + 1 : m->path ? m->path : "ternlab";
    int any_ternary = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const Layer *L = &m->layers[l];
        const Linear *lins[] = LAYER_LINEARS(L);
        for (int i = 0; i < 7; i++) /* (written as TQ blocks: rows of whole blocks; add_linear) */
            any_ternary |= lins[i]->t && lins[i]->in % GGUF_QK_K == 0;
    }
    gguf_writer_str(w, "general.architecture", A);
    gguf_writer_str(w, "general.type", "model");
    gguf_writer_str(w, "general.name", base);
    /* llama_ftype: MOSTLY_TQ1_0 = 36, MOSTLY_TQ2_0 = 37; MOSTLY_F16 = 1 when nothing is ternary */
    gguf_writer_u32(w, "general.file_type", any_ternary ? (tq1 ? 36 : 37) : 1);
    gguf_writer_u32(w, "general.quantization_version", 2);
    gguf_writer_u32(w, AK("block_count"), (uint32_t)c->n_layers);
    /* (llama.cpp requires it; without max_position_embeddings, transformers' LlamaConfig default) */
    gguf_writer_u32(w, AK("context_length"), (uint32_t)(c->max_pos > 0 ? c->max_pos : 2048));
    gguf_writer_u32(w, AK("embedding_length"), (uint32_t)c->hidden);
    gguf_writer_u32(w, AK("feed_forward_length"), (uint32_t)c->inter);
    gguf_writer_u32(w, AK("attention.head_count"), (uint32_t)c->n_heads);
    gguf_writer_u32(w, AK("attention.head_count_kv"), (uint32_t)c->n_kv_heads);
    gguf_writer_f32(w, AK("rope.freq_base"), (float)c->rope_theta);
    gguf_writer_f32(w, AK("attention.layer_norm_rms_epsilon"), c->eps);
    gguf_writer_u32(w, AK("attention.key_length"), (uint32_t)c->head_dim);
    gguf_writer_u32(w, AK("attention.value_length"), (uint32_t)c->head_dim);
    gguf_writer_u32(w, AK("vocab_size"), (uint32_t)c->vocab);
    gguf_writer_u32(w, AK("rope.dimension_count"), (uint32_t)c->head_dim);
    if (bitnet) {
        /* as llama.cpp's converter writes for bitnet (no scaling).  The FFN activation:
         * SiLU is its graph's default and the converter writes no key (llama.cpp maps a
         * "silu" value to its fused SwiGLU, which does not fit bitnet's separate gate);
         * relu2 is recorded for ternlab's reader: llama.cpp's table has no such value
         * and runs it as SiLU (README) */
        gguf_writer_str(w, AK("rope.scaling.type"), "linear");
        gguf_writer_f32(w, AK("rope.scaling.factor"), c->rope_kind == ROPE_LINEAR ? (float)c->rope_factor : 1.0f);
        if (c->act == ACT_RELU2) gguf_writer_str(w, AK("hidden_activation"), "relu2");
    } else if (c->rope_kind == ROPE_LINEAR) { /* (as llama.cpp's converter writes transformers' linear type) */
        gguf_writer_str(w, AK("rope.scaling.type"), "linear");
        gguf_writer_f32(w, AK("rope.scaling.factor"), (float)c->rope_factor);
    }
#undef AK
    if (m->has_quant) {
        char spec[256];
        if (quant_spec_format(&m->quant, spec, sizeof spec) >= 0)
            gguf_writer_str(w, "ternlab.quant_spec", spec);
    } else if (m->cfg.ternlab_spec[0]) {
        /* a model read from a ternlab checkpoint (safetensors or GGUF) and not
         * quantised again: its stored spec, which restores act=int8 and the
         * float-stored ternary rows on the next load */
        gguf_writer_str(w, "ternlab.quant_spec", m->cfg.ternlab_spec);
    }
    int copied, rc = copy_tokenizer(w, m, &copied);
    /* no tokenizer written: llama.cpp requires the key, and "none" loads without a vocabulary */
    if (rc == 0 && !copied) gguf_writer_str(w, "tokenizer.ggml.model", "none");

    int64_t H = c->hidden, hd = c->head_dim;
    if (rc == 0) rc = add_float(w, "token_embd.weight", m->embed, c->vocab, H, 0, 0);
    if (rc == 0) rc = add_float(w, "output_norm.weight", m->final_norm, 0, H, 0, 1);
    if (rc == 0 && rope_ff) { /* llama3 (the converter's divisors), or a GGUF's own as read */
        float ff[ROPE_MAX_FACTORS];
        if (c->rope_kind == ROPE_LLAMA3) llama3_rope_factors(c, ff);
        else memcpy(ff, c->rope_ff, sizeof(float) * (size_t)(c->head_dim / 2));
        const int64_t ne[1] = {c->head_dim / 2};
        rc = gguf_writer_tensor(w, "rope_freqs.weight", GGML_TYPE_F32, 1, ne, ff, sizeof(float) * (size_t)ne[0]);
    }
    if (rc == 0 && !m->lm_head_tied) rc = add_linear(w, "output.weight", &m->lm_head, 0, 0);
    char name[96];
    for (int l = 0; l < c->n_layers && rc == 0; l++) {
        const Layer *L = &m->layers[l];
#define NAME(t) (snprintf(name, sizeof name, "blk.%d." t ".weight", l), name)
        rc = add_float(w, NAME("attn_norm"), L->attn_norm, 0, H, 0, 1);
        if (rc == 0) rc = add_float(w, NAME("ffn_norm"), L->ffn_norm, 0, H, 0, 1);
        if (rc == 0 && bitnet) rc = add_float(w, NAME("attn_sub_norm"), L->attn_sub_norm, 0, H, 0, 1);
        if (rc == 0 && bitnet) rc = add_float(w, NAME("ffn_sub_norm"), L->ffn_sub_norm, 0, c->inter, 0, 1);
        /* q/k rows permuted for llama's RoPE order; bitnet's is NEOX (rows as stored) */
        if (rc == 0) rc = add_linear(w, NAME("attn_q"), &L->q, bitnet ? 0 : hd, tq1);
        if (rc == 0) rc = add_linear(w, NAME("attn_k"), &L->k, bitnet ? 0 : hd, tq1);
        if (rc == 0) rc = add_linear(w, NAME("attn_v"), &L->v, 0, tq1);
        if (rc == 0) rc = add_linear(w, NAME("attn_output"), &L->o, 0, tq1);
        if (rc == 0) rc = add_linear(w, NAME("ffn_gate"), &L->gate, 0, tq1);
        if (rc == 0) rc = add_linear(w, NAME("ffn_up"), &L->up, 0, tq1);
        if (rc == 0) rc = add_linear(w, NAME("ffn_down"), &L->down, 0, tq1);
#undef NAME
    }
    if (rc == 0) rc = gguf_writer_write(w, out_path);
    gguf_writer_free(w);
    if (rc != 0) return err_prefix("writing %s: ", out_path);
    return 0;
}
