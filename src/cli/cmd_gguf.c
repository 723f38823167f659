/* GGUF commands: `ternlab info` on a .gguf path (metadata and per-tensor
 * types) and `ternlab quantize ... --format gguf-tq2_0|gguf-tq1_0`. */
#include "cli/cli.h"
#include "core/dtype.h"
#include "core/err.h"
#include "core/mem.h"
#include "load/gguf.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_gguf_info(const char *path);
int cmd_quantize_gguf(const char *model, const char *quant, const char *format, const char *out);

/* Prints a string value, escaped and cut at `max` bytes. */
static void print_str(const uint8_t *s, uint64_t len, size_t max) {
    putchar('"');
    for (uint64_t i = 0; i < len && i < max; i++) {
        unsigned char ch = s[i];
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 32 || ch == 127) printf("\\x%02x", ch);
        else putchar(ch);
    }
    putchar('"');
    if (len > max) printf("... (%llu bytes)", (unsigned long long)len);
}

static void print_scalar(uint32_t type, const uint8_t *p) {
    GgufKV kv = {.type = type, .data = p};
    if (type == GGUF_TYPE_FLOAT32 || type == GGUF_TYPE_FLOAT64) printf("%.9g", gguf_kv_scalar(&kv));
    else if (type == GGUF_TYPE_BOOL) printf("%s", p[0] ? "true" : "false");
    else printf("%.0f", gguf_kv_scalar(&kv));
}

static void print_kv(const GgufKV *kv) {
    printf("  %-44s %-8s ", kv->key, gguf_value_type_name(kv->type));
    if (kv->type == GGUF_TYPE_STRING) {
        print_str(kv->data, kv->n, 80);
    } else if (kv->type == GGUF_TYPE_ARRAY) {
        printf("[%s x %llu]", gguf_value_type_name(kv->arr_type), (unsigned long long)kv->n);
        /* the first few elements of a flat array (the parser validated the bytes) */
        const uint8_t *p = kv->data, *end = kv->data + kv->nbytes;
        for (uint64_t i = 0; i < kv->n && i < 5 && kv->arr_type != GGUF_TYPE_ARRAY; i++) {
            printf(i ? ", " : " ");
            if (kv->arr_type == GGUF_TYPE_STRING) {
                uint64_t len = 0;
                for (int b = 0; b < 8; b++) len |= (uint64_t)p[b] << (8 * b);
                print_str(p + 8, len, 24);
                p += 8 + len;
            } else {
                print_scalar(kv->arr_type, p);
                p += (kv->nbytes / (kv->n ? kv->n : 1));
            }
            if (p > end) break;
        }
        if (kv->n > 5 && kv->arr_type != GGUF_TYPE_ARRAY) printf(", ...");
    } else {
        print_scalar(kv->type, kv->data);
    }
    putchar('\n');
}

int cmd_gguf_info(const char *path) {
    GgufFile g;
    if (gguf_open(path, &g) != 0) {
        fprintf(stderr, "ternlab info: %s\n", err_msg());
        return 1;
    }
    printf("model        %s\n", path);
    printf("format       GGUF v%u, alignment %llu, data section at %zu, %lld metadata keys, "
           "%lld tensors\n", g.version, (unsigned long long)g.alignment, g.data_offset,
           (long long)g.n_kv, (long long)g.n_tensors);
    printf("metadata:\n");
    for (int64_t i = 0; i < g.n_kv; i++) print_kv(&g.kv[i]);
    printf("tensors (ne fastest first):\n");
    size_t total = 0, by_type[64] = {0};
    int64_t count[64] = {0};
    for (int64_t i = 0; i < g.n_tensors; i++) {
        const GgufTensor *t = &g.tensors[i];
        char shape[128] = "";
        for (int d = 0; d < t->n_dims; d++) {
            size_t l = strlen(shape);
            snprintf(shape + l, sizeof shape - l, d ? ", %lld" : "%lld", (long long)t->ne[d]);
        }
        printf("  %-36s %-6s [%s] %zu bytes at +%llu\n", t->name, gguf_type_name(t->type), shape,
               t->nbytes, (unsigned long long)t->offset);
        total += t->nbytes;
        if (t->type < 64) {
            by_type[t->type] += t->nbytes;
            count[t->type]++;
        }
    }
    printf("tensor bytes %zu:", total);
    for (int k = 0; k < 64; k++)
        if (count[k]) printf(" %s %lld (%zu bytes)", gguf_type_name((uint32_t)k), (long long)count[k],
                             by_type[k]);
    printf("\n");
    gguf_close(&g);
    return 0;
}

/* 1 when every scale of the ternary linears that go into TQ blocks (rows of
 * whole 256-weight blocks; gguf_write_model) is an f16 value, so the file
 * holds the scales exactly; 0 when some are rounded to f16 there. */
static int tq_scales_exact_in_f16(const Model *m) {
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const Layer *L = &m->layers[l];
        const Linear *lins[] = LAYER_LINEARS(L);
        for (int i = 0; i < LAYER_N_LINEARS; i++) {
            const TernaryMatrix *t = lins[i]->t;
            if (!t || lins[i]->in % GGUF_QK_K != 0) continue; /* dense, or written as float */
            for (int64_t k = 0; k < t->n_scales; k++)
                if (f16_to_f32(f32_to_f16(t->scales[k])) != t->scales[k]) return 0;
        }
    }
    return 1;
}

int cmd_quantize_gguf(const char *model, const char *quant, const char *format, const char *out) {
    int tq1;
    if (format && strcmp(format, "gguf-tq2_0") == 0) tq1 = 0;
    else if (format && strcmp(format, "gguf-tq1_0") == 0) tq1 = 1;
    else {
        fprintf(stderr, "ternlab quantize: --format '%s' is not one of gguf-tq2_0, gguf-tq1_0\n",
                format ? format : "");
        return 2;
    }
    if (!model || !out) {
        fprintf(stderr, "ternlab quantize: --model and --out are required\n");
        return 2;
    }
    /* what the writer would refuse, refused before the model is loaded and
     * quantised (a folder at --out had been found only after that) */
    if (file_out_path_check(out, "--out") != 0 || model_out_not_input(out, "--out", model, NULL) != 0) {
        fprintf(stderr, "ternlab quantize: %s\n", err_msg());
        return 1;
    }
    /* The file's ternlab.quant_spec is what its linears hold: one format for
     * every ternary linear (layers left as stored in another one had been
     * written rounded under a spec that did not describe them), the
     * activations they run (int8 kept as stored had been recorded as f32).
     * TQ2_0/TQ1_0 store one f16 scale per 256-weight block: where some scale
     * is not an f16 value (scale=f32 above all), the model is loaded again,
     * ternarised with scale=f16 from its weights, so that the file is exactly
     * --quant with scale=f16 (rounding the stored scales there had given
     * neither spec: bf16 scales rounded twice, and the rows stored as floats
     * kept theirs).  (model_load reads a .gguf source too.) */
    ModelLoadOpts o = {.quant = quant};
    Model m;
    char s16[256];
    int rounded = 0, rc;
    for (;;) {
        if (model_load(model, &o, &m) != 0) {
            fprintf(stderr, "ternlab quantize: %s\n", err_msg());
            return 1;
        }
        QuantSpec spec;
        rc = m.has_quant ? quantized_spec(&m, &spec) : 0;
        if (rc == 0 && m.has_quant && !rounded && spec.scale != DT_F16 && !tq_scales_exact_in_f16(&m)) {
            spec.scale = DT_F16;
            model_free(&m);
            if (quant_spec_format(&spec, s16, sizeof s16) < 0) {
                fprintf(stderr, "ternlab quantize: %s\n", err_msg());
                return 1;
            }
            o.quant = s16;
            rounded = 1;
            continue;
        }
        if (rc == 0 && m.has_quant) m.quant = spec;
        break;
    }
    if (rc != 0) {
        fprintf(stderr, "ternlab quantize: %s\n", err_msg());
        model_free(&m);
        return 1;
    }
    rc = gguf_write_model(&m, out, tq1);
    char written[256] = "";
    if (m.has_quant && quant_spec_format(&m.quant, written, sizeof written) < 0) written[0] = 0;
    if (rc != 0) fprintf(stderr, "ternlab quantize: %s\n", err_msg());
    else
        printf("wrote %s (%s, quant %s%s)\n", out, format, written[0] ? written : "as loaded",
               rounded ? "; ternarised with scale=f16: the TQ blocks hold f16 scales" : "");
    model_free(&m);
    return rc != 0;
}
