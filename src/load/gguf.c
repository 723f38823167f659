/* GGUF parser and block codecs (see gguf.h for the format and the contract). */
#include "load/gguf.h"
#include "core/dtype.h"
#include "core/err.h"
#include "core/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Types ------------------------------------------------------------- */

/* ggml's type names (ggml.h, 2025): used to name a type ternlab cannot read. */
static const char *const ggml_names[] = {
    "F32", "F16", "Q4_0", "Q4_1", "type#4", "type#5", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
    "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M",
    "BF16", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4",
    "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};

const char *gguf_type_name(uint32_t t) {
    static _Thread_local char buf[24];
    if (t < sizeof ggml_names / sizeof ggml_names[0]) return ggml_names[t];
    snprintf(buf, sizeof buf, "type#%u", t);
    return buf;
}

static const char *const value_names[GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64"};

const char *gguf_value_type_name(uint32_t t) {
    return t < GGUF_TYPE_COUNT ? value_names[t] : "unknown";
}

int64_t gguf_type_block(uint32_t t) {
    switch (t) {
    case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: return 1;
    case GGML_TYPE_Q8_0: return GGUF_QK8_0;
    case GGML_TYPE_TQ1_0: case GGML_TYPE_TQ2_0: return GGUF_QK_K;
    default: return 0;
    }
}

size_t gguf_type_block_bytes(uint32_t t) {
    switch (t) {
    case GGML_TYPE_F32: return 4;
    case GGML_TYPE_F16: case GGML_TYPE_BF16: return 2;
    case GGML_TYPE_Q8_0: return GGUF_Q8_0_BYTES;
    case GGML_TYPE_TQ1_0: return GGUF_TQ1_0_BYTES;
    case GGML_TYPE_TQ2_0: return GGUF_TQ2_0_BYTES;
    default: return 0;
    }
}

/* Bytes of a scalar value type; 0 for string, array and unknown types. */
static size_t scalar_size(uint32_t t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

/* ---- Block codecs -------------------------------------------------------- */

int gguf_tq2_0_decode(const uint8_t *blk, int8_t *q, uint16_t *d) {
    int bad = 0;
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 4; l++)
            for (int m = 0; m < 32; m++) {
                int c = (blk[32 * h + m] >> (2 * l)) & 3;
                if (c == 3) {
                    bad++;
                    c = 1;
                }
                q[128 * h + 32 * l + m] = (int8_t)(c - 1);
            }
    *d = rd16(blk + 64);
    return bad;
}

void gguf_tq2_0_encode(const int8_t *q, uint16_t d, uint8_t *blk) {
    for (int h = 0; h < 2; h++)
        for (int m = 0; m < 32; m++) {
            uint8_t b = 0;
            for (int l = 0; l < 4; l++) b |= (uint8_t)((q[128 * h + 32 * l + m] + 1) << (2 * l));
            blk[32 * h + m] = b;
        }
    blk[64] = (uint8_t)(d & 0xff);
    blk[65] = (uint8_t)(d >> 8);
}

static const uint8_t pow3[5] = {1, 3, 9, 27, 81};

/* Trit n of a TQ1_0 byte: multiplying by 3^n (mod 256) shifts the fraction
 * left by n trits; the top trit is then floor(frac * 3). */
static inline int8_t tq1_trit(uint8_t b, int n) {
    uint8_t s = (uint8_t)(b * pow3[n]);
    return (int8_t)((((uint16_t)s * 3) >> 8) - 1);
}

void gguf_tq1_0_decode(const uint8_t *blk, int8_t *q, uint16_t *d) {
    const uint8_t *qs = blk, *qh = blk + 48;
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 32; m++) q[m + 32 * n] = tq1_trit(qs[m], n);
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 16; m++) q[160 + m + 16 * n] = tq1_trit(qs[32 + m], n);
    for (int n = 0; n < 4; n++)
        for (int j = 0; j < 4; j++) q[240 + j + 4 * n] = tq1_trit(qh[j], n);
    *d = rd16(blk + 52);
}

/* v = sum t_n 3^(k-1-n) with t = q + 1, stored as ceil(v * 256 / 243) (ggml's
 * quantize_row_tq1_0_ref); a 4-trit byte is shifted up one trit first. */
static uint8_t tq1_pack(const int8_t *q, int stride, int k) {
    unsigned v = 0;
    for (int n = 0; n < k; n++) v = v * 3 + (unsigned)(q[n * stride] + 1);
    for (int n = k; n < 5; n++) v *= 3;
    return (uint8_t)((v * 256 + 242) / 243);
}

void gguf_tq1_0_encode(const int8_t *q, uint16_t d, uint8_t *blk) {
    for (int m = 0; m < 32; m++) blk[m] = tq1_pack(q + m, 32, 5);
    for (int m = 0; m < 16; m++) blk[32 + m] = tq1_pack(q + 160 + m, 16, 5);
    for (int j = 0; j < 4; j++) blk[48 + j] = tq1_pack(q + 240 + j, 4, 4);
    blk[52] = (uint8_t)(d & 0xff);
    blk[53] = (uint8_t)(d >> 8);
}

int gguf_tensor_to_f32(const GgufTensor *t, float *out) {
    const uint8_t *p = t->data;
    int64_t n = t->n_elements;
    int8_t q[GGUF_QK_K];
    uint16_t d;
    switch (t->type) {
    case GGML_TYPE_F32: memcpy(out, p, (size_t)n * 4); return 0;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++) out[i] = f16_to_f32(rd16(p + 2 * i));
        return 0;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) out[i] = bf16_to_f32(rd16(p + 2 * i));
        return 0;
    case GGML_TYPE_Q8_0:
        for (int64_t b = 0; b < n / GGUF_QK8_0; b++, p += GGUF_Q8_0_BYTES) {
            float s = f16_to_f32(rd16(p));
            for (int i = 0; i < GGUF_QK8_0; i++) out[b * GGUF_QK8_0 + i] = s * (float)(int8_t)p[2 + i];
        }
        return 0;
    case GGML_TYPE_TQ2_0:
        for (int64_t b = 0; b < n / GGUF_QK_K; b++, p += GGUF_TQ2_0_BYTES) {
            gguf_tq2_0_decode(p, q, &d);
            float s = f16_to_f32(d);
            for (int i = 0; i < GGUF_QK_K; i++) {
                int c = (p[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
                out[b * GGUF_QK_K + i] = (float)(c - 1) * s; /* ggml: code 3 reads as +2 */
            }
        }
        return 0;
    case GGML_TYPE_TQ1_0:
        for (int64_t b = 0; b < n / GGUF_QK_K; b++, p += GGUF_TQ1_0_BYTES) {
            gguf_tq1_0_decode(p, q, &d);
            float s = f16_to_f32(d);
            for (int i = 0; i < GGUF_QK_K; i++) out[b * GGUF_QK_K + i] = (float)q[i] * s;
        }
        return 0;
    default:
        return err_set("tensor '%s': type %s cannot be dequantised", t->name,
                       gguf_type_name(t->type));
    }
}

/* ---- Parser ------------------------------------------------------------- */

typedef struct {
    const uint8_t *buf;
    size_t size, pos;
    const char *path;
} Cur;

static int need(Cur *c, uint64_t n, const char *what) {
    if (n > c->size - c->pos)
        return err_set("%s: truncated file: %s needs %llu bytes at offset %zu, only %zu remain",
                       c->path, what, (unsigned long long)n, c->pos, c->size - c->pos);
    return 0;
}

static int get_u32(Cur *c, uint32_t *v, const char *what) {
    if (need(c, 4, what) != 0) return -1;
    *v = rd32(c->buf + c->pos);
    c->pos += 4;
    return 0;
}

static int get_u64(Cur *c, uint64_t *v, const char *what) {
    if (need(c, 8, what) != 0) return -1;
    *v = rd64(c->buf + c->pos);
    c->pos += 8;
    return 0;
}

/* A string: returns a pointer into the image and its length. */
static int get_str(Cur *c, const uint8_t **s, uint64_t *len, const char *what) {
    if (get_u64(c, len, what) != 0) return -1;
    if (*len > c->size - c->pos)
        return err_set("%s: %s has length %llu but only %zu bytes remain at offset %zu", c->path,
                       what, (unsigned long long)*len, c->size - c->pos, c->pos);
    *s = c->buf + c->pos;
    c->pos += (size_t)*len;
    return 0;
}

/* A NUL-terminated copy of a name (key or tensor name); a NUL inside is refused. */
static int get_name(Cur *c, char **out, const char *what) {
    const uint8_t *s;
    uint64_t len;
    if (get_str(c, &s, &len, what) != 0) return -1;
    if (memchr(s, 0, (size_t)len))
        return err_set("%s: %s at offset %zu contains a NUL byte", c->path, what,
                       c->pos - (size_t)len);
    *out = xmalloc((size_t)len + 1);
    memcpy(*out, s, (size_t)len);
    (*out)[len] = '\0';
    return 0;
}

/* Walks (and so validates) one value of `type`. */
static int skip_value(Cur *c, uint32_t type, int depth, const char *key) {
    size_t sz = scalar_size(type);
    if (sz) {
        if (need(c, sz, "value") != 0) return err_prefix("key '%s': ", key);
        c->pos += sz;
        return 0;
    }
    if (type == GGUF_TYPE_STRING) {
        const uint8_t *s;
        uint64_t len;
        return get_str(c, &s, &len, "string value");
    }
    if (type != GGUF_TYPE_ARRAY)
        return err_set("%s: key '%s': unknown value type %u (valid: 0..12)", c->path, key, type);
    if (depth >= GGUF_MAX_NESTING)
        return err_set("%s: key '%s': arrays nested deeper than %d", c->path, key,
                       GGUF_MAX_NESTING);
    uint32_t et;
    uint64_t n;
    if (get_u32(c, &et, "array element type") != 0 || get_u64(c, &n, "array length") != 0)
        return err_prefix("key '%s': ", key);
    size_t esz = scalar_size(et);
    size_t min = esz ? esz : et == GGUF_TYPE_STRING ? 8 : et == GGUF_TYPE_ARRAY ? 12 : 0;
    if (!min)
        return err_set("%s: key '%s': array of unknown element type %u", c->path, key, et);
    if (n > (c->size - c->pos) / min)
        return err_set("%s: key '%s': array of %llu %s elements cannot fit in the %zu bytes left "
                       "(corrupt length?)", c->path, key, (unsigned long long)n,
                       gguf_value_type_name(et), c->size - c->pos);
    if (esz) {
        c->pos += (size_t)n * esz;
        return 0;
    }
    for (uint64_t i = 0; i < n; i++)
        if (skip_value(c, et, depth + 1, key) != 0) return -1;
    return 0;
}

static int cmp_tensor_offset(const void *a, const void *b) {
    const GgufTensor *x = *(const GgufTensor *const *)a, *y = *(const GgufTensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* First repeated string among n, or NULL. */
static const char *find_duplicate(const char **names, int64_t n) {
    qsort(names, (size_t)n, sizeof *names, cmp_str_ptr);
    for (int64_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) return names[i];
    return NULL;
}

static int parse(Cur *c, GgufFile *g) {
    if (c->size < 4 || memcmp(c->buf, GGUF_MAGIC, 4) != 0)
        return err_set("%s: not a GGUF file (magic is not \"GGUF\")", c->path);
    c->pos = 4;
    uint64_t n_tensors, n_kv;
    if (get_u32(c, &g->version, "version") != 0) return -1;
    if (g->version == 1)
        return err_set("%s: GGUF version 1 is not supported (only 2 and 3; re-convert the model "
                       "with a current llama.cpp)", c->path);
    if (g->version != 2 && g->version != 3)
        return err_set("%s: GGUF version %u is not supported (only 2 and 3)%s", c->path,
                       g->version, (g->version & 0xffff) == 0 ? "; a big-endian file?" : "");
    if (get_u64(c, &n_tensors, "tensor count") != 0 || get_u64(c, &n_kv, "metadata count") != 0)
        return -1;
    /* a key is at least 8 (length) + 4 (type) + 1 bytes, a tensor info 8 (name length) + 4
     * (n_dims) + 4 (type) + 8 (offset) = 24 with an empty name and 0 dimensions */
    if (n_kv > (c->size - c->pos) / 13)
        return err_set("%s: metadata count %llu cannot fit in the file (%zu bytes)", c->path,
                       (unsigned long long)n_kv, c->size);
    g->kv = xcalloc(n_kv ? (size_t)n_kv : 1, sizeof(GgufKV));
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < n_kv; i++) {
        GgufKV *kv = &g->kv[i];
        char what[64];
        snprintf(what, sizeof what, "metadata key #%llu", (unsigned long long)i);
        if (get_name(c, &kv->key, what) != 0) return -1;
        g->n_kv = (int64_t)i + 1;
        if (get_u32(c, &kv->type, "value type") != 0) return err_prefix("key '%s': ", kv->key);
        if (kv->type == GGUF_TYPE_ARRAY) {
            if (need(c, 12, "array header") != 0) return err_prefix("key '%s': ", kv->key);
            kv->arr_type = rd32(c->buf + c->pos);
            kv->n = rd64(c->buf + c->pos + 4);
        }
        size_t start = c->pos;
        if (skip_value(c, kv->type, 0, kv->key) != 0) return -1;
        if (kv->type == GGUF_TYPE_ARRAY) start += 12;
        if (kv->type == GGUF_TYPE_STRING) {
            kv->n = rd64(c->buf + start);
            start += 8;
        }
        kv->data = c->buf + start;
        kv->nbytes = c->pos - start;
        if (strcmp(kv->key, "general.alignment") == 0) {
            if (kv->type != GGUF_TYPE_UINT32)
                return err_set("%s: general.alignment has type %s, uint32 expected", c->path,
                               gguf_value_type_name(kv->type));
            uint32_t a = rd32(kv->data);
            if (a == 0 || (a & (a - 1)) != 0)
                return err_set("%s: general.alignment %u is not a power of two", c->path, a);
            g->alignment = a;
        }
    }
    if (n_tensors > (c->size - c->pos) / 24) /* (the smallest info: empty name, 0 dimensions) */
        return err_set("%s: tensor count %llu cannot fit in the file (%zu bytes)", c->path,
                       (unsigned long long)n_tensors, c->size);
    g->tensors = xcalloc(n_tensors ? (size_t)n_tensors : 1, sizeof(GgufTensor));
    for (uint64_t i = 0; i < n_tensors; i++) {
        GgufTensor *t = &g->tensors[i];
        char what[64];
        snprintf(what, sizeof what, "tensor info #%llu", (unsigned long long)i);
        if (get_name(c, &t->name, what) != 0) return -1;
        g->n_tensors = (int64_t)i + 1;
        uint32_t nd;
        if (get_u32(c, &nd, "n_dims") != 0) return err_prefix("tensor '%s': ", t->name);
        if (nd > GGUF_MAX_DIMS) /* (0: a scalar, as llama.cpp reads it) */
            return err_set("%s: tensor '%s': %u dimensions (at most %d supported)", c->path, t->name,
                           nd, GGUF_MAX_DIMS);
        t->n_dims = (int)nd;
        int64_t numel = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) {
            uint64_t ne = 1;
            if (d < t->n_dims && get_u64(c, &ne, "dimension") != 0)
                return err_prefix("tensor '%s': ", t->name);
            if (ne > (uint64_t)INT64_MAX || (ne && numel > INT64_MAX / (int64_t)ne))
                return err_set("%s: tensor '%s': dimension %d = %llu overflows the element count",
                               c->path, t->name, d, (unsigned long long)ne);
            t->ne[d] = (int64_t)ne;
            numel *= (int64_t)ne;
        }
        t->n_elements = numel;
        if (get_u32(c, &t->type, "type") != 0 || get_u64(c, &t->offset, "offset") != 0)
            return err_prefix("tensor '%s': ", t->name);
        int64_t blk = gguf_type_block(t->type);
        if (!blk)
            return err_set("%s: tensor '%s': type %s (%u) is not supported (ternlab reads F32, "
                           "F16, BF16, Q8_0, TQ1_0, TQ2_0)", c->path, t->name,
                           gguf_type_name(t->type), t->type);
        if (t->ne[0] % blk != 0)
            return err_set("%s: tensor '%s': row length %lld is not a multiple of the %s block "
                           "(%lld)", c->path, t->name, (long long)t->ne[0],
                           gguf_type_name(t->type), (long long)blk);
        uint64_t nb = (uint64_t)(numel / blk);
        if (nb > SIZE_MAX / gguf_type_block_bytes(t->type))
            return err_set("%s: tensor '%s': size overflows", c->path, t->name);
        t->nbytes = (size_t)nb * gguf_type_block_bytes(t->type);
    }
    /* data section: the tensor infos padded to the alignment */
    size_t data = c->pos + (size_t)((g->alignment - c->pos % g->alignment) % g->alignment);
    if (n_tensors > 0 && data > c->size)
        return err_set("%s: truncated file: the data section would start at %zu, the file has "
                       "%zu bytes", c->path, data, c->size);
    g->data_offset = data > c->size ? c->size : data;
    size_t avail = c->size - g->data_offset;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        GgufTensor *t = &g->tensors[i];
        if (t->offset % g->alignment != 0)
            return err_set("%s: tensor '%s': data offset %llu is not a multiple of the alignment "
                           "%llu (misaligned data)", c->path, t->name,
                           (unsigned long long)t->offset, (unsigned long long)g->alignment);
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return err_set("%s: tensor '%s': data [%llu, +%zu) runs past the end of the file "
                           "(data section has %zu bytes; truncated file?)", c->path, t->name,
                           (unsigned long long)t->offset, t->nbytes, avail);
        t->data = c->buf + g->data_offset + t->offset;
    }
    if (g->n_tensors > 1) {
        GgufTensor **by = xmalloc(sizeof *by * (size_t)g->n_tensors);
        for (int64_t i = 0; i < g->n_tensors; i++) by[i] = &g->tensors[i];
        qsort(by, (size_t)g->n_tensors, sizeof *by, cmp_tensor_offset);
        for (int64_t i = 1; i < g->n_tensors; i++)
            if (by[i - 1]->offset + by[i - 1]->nbytes > by[i]->offset) {
                int rc = err_set("%s: tensors '%s' and '%s' overlap in the data section", c->path,
                                 by[i - 1]->name, by[i]->name);
                free(by);
                return rc;
            }
        free(by);
    }
    int64_t nn = g->n_kv > g->n_tensors ? g->n_kv : g->n_tensors;
    const char **names = xmalloc(sizeof *names * (size_t)(nn ? nn : 1));
    for (int64_t i = 0; i < g->n_kv; i++) names[i] = g->kv[i].key;
    const char *dup = find_duplicate(names, g->n_kv);
    int rc = dup ? err_set("%s: metadata key '%s' appears twice", c->path, dup) : 0;
    if (rc == 0) {
        for (int64_t i = 0; i < g->n_tensors; i++) names[i] = g->tensors[i].name;
        dup = find_duplicate(names, g->n_tensors);
        if (dup) rc = err_set("%s: tensor '%s' appears twice", c->path, dup);
    }
    free(names);
    return rc;
}

int gguf_parse(const uint8_t *buf, size_t size, const char *path, GgufFile *g) {
    memset(g, 0, sizeof *g);
    g->path = xstrdup(path);
    Cur c = {buf, size, 0, path};
    if (!buf) c.buf = (const uint8_t *)"", c.size = 0;
    if (parse(&c, g) != 0) {
        gguf_close(g);
        return -1;
    }
    return 0;
}

int gguf_open(const char *path, GgufFile *g) {
    MappedFile mf;
    memset(g, 0, sizeof *g);
    if (file_map(path, &mf) != 0) return -1;
    if (gguf_parse(mf.data, mf.size, path, g) != 0) {
        file_unmap(&mf);
        return -1;
    }
    g->mf = mf;
    return 0;
}

void gguf_close(GgufFile *g) {
    for (int64_t i = 0; i < g->n_kv; i++) free(g->kv[i].key);
    for (int64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->path);
    if (g->mf.path || g->mf.data) file_unmap(&g->mf);
    memset(g, 0, sizeof *g);
}

const GgufKV *gguf_find_kv(const GgufFile *g, const char *key) {
    for (int64_t i = 0; i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0) return &g->kv[i];
    return NULL;
}

const GgufTensor *gguf_find_tensor(const GgufFile *g, const char *name) {
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0) return &g->tensors[i];
    return NULL;
}

double gguf_kv_scalar(const GgufKV *kv) {
    const uint8_t *p = kv->data;
    switch (kv->type) {
    case GGUF_TYPE_UINT8: return p[0];
    case GGUF_TYPE_INT8: return (int8_t)p[0];
    case GGUF_TYPE_BOOL: return p[0] != 0;
    case GGUF_TYPE_UINT16: return rd16(p);
    case GGUF_TYPE_INT16: return (int16_t)rd16(p);
    case GGUF_TYPE_UINT32: return rd32(p);
    case GGUF_TYPE_INT32: return (int32_t)rd32(p);
    case GGUF_TYPE_FLOAT32: return f32_from_bits(rd32(p));
    case GGUF_TYPE_UINT64: return (double)rd64(p);
    case GGUF_TYPE_INT64: return (double)(int64_t)rd64(p);
    case GGUF_TYPE_FLOAT64: {
        uint64_t u = rd64(p);
        double d;
        memcpy(&d, &u, 8);
        return d;
    }
    default: return 0;
    }
}

int gguf_get_int(const GgufFile *g, const char *key, int64_t *out) {
    const GgufKV *kv = gguf_find_kv(g, key);
    if (!kv) return 0;
    switch (kv->type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16:
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: *out = (int64_t)gguf_kv_scalar(kv); return 1;
    case GGUF_TYPE_INT64: *out = (int64_t)rd64(kv->data); return 1;
    case GGUF_TYPE_UINT64:
        if (rd64(kv->data) > (uint64_t)INT64_MAX)
            return err_set("%s: key '%s': value out of range", g->path, key);
        *out = (int64_t)rd64(kv->data);
        return 1;
    default:
        return err_set("%s: key '%s' has type %s, an integer expected", g->path, key,
                       gguf_value_type_name(kv->type));
    }
}

int gguf_get_float(const GgufFile *g, const char *key, double *out) {
    const GgufKV *kv = gguf_find_kv(g, key);
    if (!kv) return 0;
    if (kv->type != GGUF_TYPE_FLOAT32 && kv->type != GGUF_TYPE_FLOAT64)
        return err_set("%s: key '%s' has type %s, a float expected", g->path, key,
                       gguf_value_type_name(kv->type));
    *out = gguf_kv_scalar(kv);
    return 1;
}

int gguf_get_str(const GgufFile *g, const char *key, const char **s, size_t *len) {
    const GgufKV *kv = gguf_find_kv(g, key);
    if (!kv) return 0;
    if (kv->type != GGUF_TYPE_STRING)
        return err_set("%s: key '%s' has type %s, a string expected", g->path, key,
                       gguf_value_type_name(kv->type));
    *s = (const char *)kv->data;
    *len = (size_t)kv->n;
    return 1;
}
