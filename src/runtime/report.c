/* Load report and capacity (contract in report.h). */
#include "runtime/report.h"
#include "core/blas_setup.h"
#include "core/err.h"
#include "core/mem.h"
#include "cpu/tern_kernels.h"
#include "kv/kvcache.h"
#include "runtime/linear.h"
#include "ternary_format.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const KINDS[7] = {"q", "k", "v", "o", "gate", "up", "down"};

static const Linear *layer_lin(const Layer *L, int k) {
    const Linear *ls[LAYER_N_LINEARS] = LAYER_LINEARS(L);
    return ls[k];
}

static int is_gguf(const Model *m) {
    size_t n = m->path ? strlen(m->path) : 0;
    return n >= 5 && strcmp(m->path + n - 5, ".gguf") == 0;
}

/* The checkpoint's format of tensor `base`.weight. */
static void stored_format(const Model *m, const char *base, const Linear *lin, char *buf, size_t n) {
    char wn[160];
    snprintf(wn, sizeof wn, "%s.weight", base);
    const StTensor *t = m->st.n_tensors ? st_find(&m->st, wn) : NULL;
    if (t && t->dtype == DT_U8) {
        if (m->cfg.ternlab_packed)
            snprintf(buf, n, "native ternary packed (ternlab %s)", m->cfg.ternlab_spec);
        else snprintf(buf, n, "native ternary packed (BitNet U8 + weight_scale)");
    } else if (t) {
        snprintf(buf, n, "dense %s", st_dtype_name(t->dtype));
    } else if (is_gguf(m)) {
        /* the GGUF loader keeps no per-tensor type; what it turned the tensor into tells it */
        snprintf(buf, n, lin && lin->t && (!m->has_quant || lin->kept) ? "GGUF TQ1_0/TQ2_0 (native ternary)"
                                                                        : "GGUF dense (F32/F16/BF16/Q8_0)");
    } else {
        snprintf(buf, n, "unknown (tensor not in the checkpoint index)");
    }
}

static void fill_linear_row(const Model *m, const Linear *lin, int layer, const char *kind,
                            ReportRow *r) {
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", lin->name);
    r->layer = layer;
    stored_format(m, lin->name, lin, r->stored, sizeof r->stored);
    int native = strstr(r->stored, "native") != NULL;
    int selected = layer >= 0 && m->has_quant && quant_layer_selected(&m->quant, layer, kind) == 1 &&
                   !lin->kept; /* (act= alone keeps ternary weights as stored) */
    snprintf(r->act, sizeof r->act, "%s", lin->act_int8 ? "int8" : "f32");
    if (lin->t) {
        const char *origin = selected ? "ternarised" : native ? "native" : "?";
        if (lin->twin) snprintf(r->run_as, sizeof r->run_as, "dense twin of ternary (%s)", origin);
        else snprintf(r->run_as, sizeof r->run_as, "ternary packed (%s)", origin);
        if (selected) snprintf(r->rule, sizeof r->rule, "%s", quant_rule_name(m->quant.rule));
        else if (m->cfg.ternlab_packed) {
            QuantSpec qs;
            if (quant_spec_parse(m->cfg.ternlab_spec, &qs) == 0)
                snprintf(r->rule, sizeof r->rule, "%s (stored)", quant_rule_name(qs.rule));
            else snprintf(r->rule, sizeof r->rule, "? (bad stored spec)");
        } else if (is_gguf(m)) snprintf(r->rule, sizeof r->rule, "absmax (GGUF TQ)");
        else snprintf(r->rule, sizeof r->rule, "absmean (BitNet b1.58)");
        snprintf(r->group, sizeof r->group, "%s", quant_group_name(lin->t->group));
        snprintf(r->scale, sizeof r->scale, "%s", dtype_name(lin->t->scale_dtype));
    } else {
        snprintf(r->run_as, sizeof r->run_as, "dense f32");
        snprintf(r->rule, sizeof r->rule, "-");
        snprintf(r->group, sizeof r->group, "-");
        snprintf(r->scale, sizeof r->scale, "-");
    }
    r->bytes = (int64_t)linear_bytes(lin);
    r->bits_per_weight = (double)r->bytes * 8.0 / (double)(lin->out * lin->in);
}

int report_rows(const Model *m, ReportRow **rows, int *n) {
    const ModelConfig *c = &m->cfg;
    int cnt = 7 * c->n_layers + 2, i = 0;
    ReportRow *r = xcalloc((size_t)cnt, sizeof *r);
    /* embedding: the forward holds it as f32 (vocab, hidden) */
    ReportRow *e = &r[i++];
    snprintf(e->name, sizeof e->name, "model.embed_tokens");
    e->layer = -1;
    stored_format(m, "model.embed_tokens", NULL, e->stored, sizeof e->stored);
    snprintf(e->run_as, sizeof e->run_as, "dense f32 (row lookup)");
    snprintf(e->rule, sizeof e->rule, "-");
    snprintf(e->group, sizeof e->group, "-");
    snprintf(e->scale, sizeof e->scale, "-");
    snprintf(e->act, sizeof e->act, "-");
    e->bytes = (int64_t)sizeof(float) * c->vocab * c->hidden;
    e->bits_per_weight = 32.0;
    for (int l = 0; l < c->n_layers; l++)
        for (int k = 0; k < 7; k++)
            fill_linear_row(m, layer_lin(&m->layers[l], k), l, KINDS[k], &r[i++]);
    ReportRow *h = &r[i++];
    if (m->lm_head_tied) {
        snprintf(h->name, sizeof h->name, "lm_head");
        h->layer = -1;
        snprintf(h->stored, sizeof h->stored, "tied to model.embed_tokens");
        snprintf(h->run_as, sizeof h->run_as, "dense f32, tied to embedding");
        snprintf(h->rule, sizeof h->rule, "-");
        snprintf(h->group, sizeof h->group, "-");
        snprintf(h->scale, sizeof h->scale, "-");
        snprintf(h->act, sizeof h->act, "f32");
        h->bytes = 0;
        h->bits_per_weight = 0;
    } else {
        fill_linear_row(m, &m->lm_head, -1, "lm_head", h);
    }
    *rows = r;
    *n = cnt;
    return 0;
}

/* ---- kernels and fallbacks ------------------------------------------------ */

static void add_fallback(ReportKernels *k, const char *fmt, const char *a, const char *b) {
    char item[512];
    snprintf(item, sizeof item, fmt, a ? a : "", b ? b : "");
    size_t l = strlen(k->fallbacks);
    if (k->n_fallbacks == 0) l = 0;
    snprintf(k->fallbacks + l, sizeof k->fallbacks - l, "%s%s", k->n_fallbacks ? "; " : "", item);
    k->n_fallbacks++;
}

static void ranges(const int *flag, int n, char *buf, size_t cap) {
    int any = 0, all = 1;
    for (int i = 0; i < n; i++) {
        any |= flag[i];
        all &= flag[i];
    }
    if (!any || !all) buf[0] = 0;
    if (!any) {
        snprintf(buf, cap, "none");
        return;
    }
    if (all) {
        snprintf(buf, cap, "all");
        return;
    }
    for (int i = 0; i < n;) {
        if (!flag[i]) {
            i++;
            continue;
        }
        int j = i;
        while (j + 1 < n && flag[j + 1]) j++;
        size_t l = strlen(buf);
        if (j > i) snprintf(buf + l, cap - l, "%s%d-%d", l ? "+" : "", i, j);
        else snprintf(buf + l, cap - l, "%s%d", l ? "+" : "", i);
        i = j + 1;
    }
}

void report_kernels(const Model *m, ReportKernels *k) {
    memset(k, 0, sizeof *k);
    const ModelConfig *c = &m->cfg;
    int n_tern = 0, n_twin = 0, n_int8 = 0, n_pad = 0, pad_in = 0;
    int *dense = xcalloc((size_t)c->n_layers + 1, sizeof(int));
    for (int l = 0; l < c->n_layers; l++) {
        dense[l] = 1;
        for (int q = 0; q < 7; q++) {
            const Linear *lin = layer_lin(&m->layers[l], q);
            if (lin->t) dense[l] = 0;
            if (lin->t && !lin->twin) {
                n_tern++;
                if (lin->in % TERN_BLOCK) {
                    n_pad++;
                    pad_in = (int)lin->in;
                }
            }
            n_twin += lin->twin;
            n_int8 += lin->act_int8;
        }
    }
    ranges(dense, c->n_layers, k->dense_layers, sizeof k->dense_layers);
    free(dense);

    TernKernel chosen, best = tern_kernel_supported(TK_AVX512) ? TK_AVX512
                             : tern_kernel_supported(TK_AVX2) ? TK_AVX2
                                                              : TK_GENERIC;
    int ok = tern_kernel_choose(&chosen) == 0;
    snprintf(k->ternary_gemm, sizeof k->ternary_gemm, "%s", tern_kernel_name());
    if (!n_tern) {
        size_t l = strlen(k->ternary_gemm);
        snprintf(k->ternary_gemm + l, sizeof k->ternary_gemm - l, " (unused: no packed linear)");
    }
    /* linear_forward calls tern_act_quant_i8, which follows the ternary kernel choice */
    snprintf(k->act_quant, sizeof k->act_quant, "%s",
             !n_int8 ? "unused (f32 activations)"
             : ok && chosen == TK_AVX512 ? "tern_act_quant_i8_avx512 (per token)"
                                         : "act_quant_int8_ref (plain C, per token)");
    snprintf(k->dense_gemm, sizeof k->dense_gemm, "OpenBLAS sgemm (core %s)", blas_core_report());
    snprintf(k->attention, sizeof k->attention, "cpu attention (sgemm over gathered pages)");

    const char *env = getenv("TERNLAB_KERNEL");
    if (!ok) {
        add_fallback(k, "ternary kernels unavailable: %s%s", err_msg(), NULL);
    } else if (env && *env) {
        if (chosen != best)
            add_fallback(k, "ternary GEMM forced to '%s' by TERNLAB_KERNEL (best on this CPU: %s)",
                         tern_kernel_short_name(chosen), tern_kernel_short_name(best));
    } else if (chosen != TK_AVX512) {
        add_fallback(k, "ternary GEMM uses '%s': this CPU lacks AVX-512 BW/VL/DQ + VNNI%s",
                     tern_kernel_short_name(chosen), chosen == TK_GENERIC ? " and AVX2/FMA/F16C" : "");
    }
    if (n_int8 && ok && chosen != TK_AVX512)
        add_fallback(k, "int8 activation quantisation runs act_quant_int8_ref (plain C): the "
                        "AVX-512 version needs the avx512 kernel choice%s%s", NULL, NULL);
    const char *det = getenv("TERNLAB_BLAS_DETECTED"), *auto_env = getenv("TERNLAB_BLAS_AUTO");
    const char *ct = getenv("OPENBLAS_CORETYPE");
    if (det)
        add_fallback(k, "OpenBLAS core override: the library detected %s, ternlab set "
                        "OPENBLAS_CORETYPE=%s from cpuid (src/core/blas_setup.c)", det, ct);
    else if (auto_env && strcmp(auto_env, "0") == 0)
        add_fallback(k, "OpenBLAS core check off (TERNLAB_BLAS_AUTO=0): using the library's own "
                        "detection%s%s", NULL, NULL);
    else if (ct)
        add_fallback(k, "OpenBLAS core set by the user's OPENBLAS_CORETYPE=%s%s", ct, NULL);
    const char *quota = cpu_quota_report();
    if (quota)
        add_fallback(k, "threads capped at the cgroup CPU quota, %s (%s set by ternlab; "
                        "src/core/blas_setup.c)", quota, cpu_quota_vars());
    if (n_twin) {
        char nb[32];
        snprintf(nb, sizeof nb, "%d", n_twin);
        add_fallback(k, "%s ternary linears run as dense twins through sgemm (dense=1, the "
                        "reference path)%s", nb, NULL);
    }
    if (n_pad) {
        char a[32], b[32];
        snprintf(a, sizeof a, "%d", n_pad);
        snprintf(b, sizeof b, "%d", pad_in);
        add_fallback(k, "%s packed linears have an input width (e.g. %s) that is not a multiple of "
                        "256: each call copies the activations zero-padded (tern_pad_act)", a, b);
    }
    if (!k->n_fallbacks) snprintf(k->fallbacks, sizeof k->fallbacks, "none");
}

void report_print(const Model *m, FILE *f) {
    ReportRow *rows;
    int n;
    report_rows(m, &rows, &n);
    ReportKernels k;
    report_kernels(m, &k);
    fprintf(f, "load report:\n");
    int sw = 36; /* the stored column as wide as its longest entry (a ternlab spec runs long) */
    for (int i = 0; i < n; i++) sw = (int)strlen(rows[i].stored) > sw ? (int)strlen(rows[i].stored) : sw;
    fprintf(f, "  %-38s %-*s %-30s %-22s %-7s %-9s %-5s %7s %12s\n", "weight", sw, "stored", "runs as",
            "rule", "group", "scale", "act", "bits/w", "bytes");
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const ReportRow *r = &rows[i];
        fprintf(f, "  %-38s %-*s %-30s %-22s %-7s %-9s %-5s %7.3f %12lld\n", r->name, sw, r->stored,
                r->run_as, r->rule, r->group, r->scale, r->act, r->bits_per_weight,
                (long long)r->bytes);
        total += r->bytes;
    }
    fprintf(f, "  total weight bytes %lld (model_weight_bytes %zu; norms not counted)\n",
            (long long)total, model_weight_bytes(m));
    fprintf(f, "  decoder layers that stay dense: %s (embedding, norms%s: dense f32)\n",
            k.dense_layers, m->lm_head.t ? "" : ", lm_head");
    fprintf(f, "kernels on this machine:\n");
    fprintf(f, "  ternary GEMM/GEMV (f32 and int8 act)  %s\n", k.ternary_gemm);
    fprintf(f, "  int8 activation quantisation          %s\n", k.act_quant);
    fprintf(f, "  dense GEMM                            %s\n", k.dense_gemm);
    fprintf(f, "  attention                             %s\n", k.attention);
    fprintf(f, "  fallbacks (%d): %s\n", k.n_fallbacks, k.fallbacks);
    free(rows);
}

int report_write_h5(H5Log *lg, const Model *m) {
    ReportRow *rows;
    int n;
    report_rows(m, &rows, &n);
    ReportKernels k;
    report_kernels(m, &k);
    const char **s = xcalloc((size_t)n, sizeof(char *));
    double *bpw = xcalloc((size_t)n, sizeof(double));
    int64_t *bytes = xcalloc((size_t)n, sizeof(int64_t));
    int e = 0;
#define STRCOL(field, path)                                              \
    do {                                                                 \
        for (int i = 0; i < n; i++) s[i] = rows[i].field;                \
        e |= h5log_strings(lg, path, s, n);                              \
    } while (0)
    STRCOL(name, "/load_report/name");
    STRCOL(stored, "/load_report/stored");
    STRCOL(run_as, "/load_report/run_as");
    STRCOL(rule, "/load_report/rule");
    STRCOL(group, "/load_report/group");
    STRCOL(scale, "/load_report/scale_dtype");
    STRCOL(act, "/load_report/act");
#undef STRCOL
    for (int i = 0; i < n; i++) {
        bpw[i] = rows[i].bits_per_weight;
        bytes[i] = rows[i].bytes;
    }
    e |= h5log_f64(lg, "/load_report/bits_per_weight", bpw, n);
    e |= h5log_i64(lg, "/load_report/bytes", bytes, n);
    e |= h5log_attr_str(lg, "/load_report", "kernel_ternary_gemm", k.ternary_gemm);
    e |= h5log_attr_str(lg, "/load_report", "kernel_act_quant", k.act_quant);
    e |= h5log_attr_str(lg, "/load_report", "kernel_dense_gemm", k.dense_gemm);
    e |= h5log_attr_str(lg, "/load_report", "kernel_attention", k.attention);
    e |= h5log_attr_str(lg, "/load_report", "dense_layers", k.dense_layers);
    e |= h5log_attr_str(lg, "/load_report", "fallbacks", k.fallbacks);
    e |= h5log_attr_i64(lg, "/load_report", "n_fallbacks", k.n_fallbacks);
    e |= h5log_attr_i64(lg, "/load_report", "weight_bytes", (int64_t)model_weight_bytes(m));
    e |= h5log_attr_str(lg, "/load_report", "load_notes", m->load_notes);
    free(s);
    free(bpw);
    free(bytes);
    free(rows);
    return e ? -1 : 0;
}

/* ---- capacity ------------------------------------------------------------- */

int parse_bytes(const char *s, uint64_t *out) {
    static const struct {
        const char *u;
        unsigned __int128 mul;
    } units[] = {{"", 1},
                 {"b", 1},
                 {"k", (unsigned __int128)1 << 10},  {"kib", (unsigned __int128)1 << 10},
                 {"m", (unsigned __int128)1 << 20},  {"mib", (unsigned __int128)1 << 20},
                 {"g", (unsigned __int128)1 << 30},  {"gib", (unsigned __int128)1 << 30},
                 {"t", (unsigned __int128)1 << 40},  {"tib", (unsigned __int128)1 << 40},
                 {"p", (unsigned __int128)1 << 50},  {"pib", (unsigned __int128)1 << 50},
                 {"kb", 1000},                       {"mb", 1000000},
                 {"gb", 1000000000ull},              {"tb", 1000000000000ull},
                 {"pb", 1000000000000000ull}};
    if (!s || !*s) return err_set("memory size: empty (expected e.g. 24GiB, 512MiB, 100000)");
    const char *p = s;
    if (!isdigit((unsigned char)*p))
        return err_set("memory size '%s': expected a number of bytes, with or without a unit, e.g. 24GiB", s);
    unsigned __int128 ip = 0, frac = 0, fden = 1;
    const unsigned __int128 lim = (unsigned __int128)UINT64_MAX;
    for (; isdigit((unsigned char)*p); p++) {
        ip = ip * 10 + (unsigned)(*p - '0');
        if (ip > lim) return err_set("memory size '%s': too large (more than 2^64 bytes)", s);
    }
    int has_frac = 0;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p)) return err_set("memory size '%s': digits expected after '.'", s);
        for (; isdigit((unsigned char)*p); p++) {
            if (fden < (unsigned __int128)1000000000000ull) {
                frac = frac * 10 + (unsigned)(*p - '0');
                fden *= 10;
            }
            has_frac |= *p != '0';
        }
    }
    if (*p == ' ') p++;
    char unit[8] = {0};
    size_t ul = strlen(p);
    if (ul >= sizeof unit) return err_set("memory size '%s': unknown unit '%s'", s, p);
    for (size_t i = 0; i < ul; i++) unit[i] = (char)tolower((unsigned char)p[i]);
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(unit, units[i].u) != 0) continue;
        if (has_frac && units[i].mul == 1)
            return err_set("memory size '%s': a fraction of a byte (give a unit, e.g. 1.5GiB)", s);
        unsigned __int128 v = ip * units[i].mul + frac * units[i].mul / fden;
        if (ip > lim || v > lim) return err_set("memory size '%s': too large (more than 2^64 bytes)", s);
        *out = (uint64_t)v;
        return 0;
    }
    return err_set("memory size '%s': unknown unit '%s' (B, KiB, MiB, GiB, TiB, PiB or K, M, G, T, "
                   "P; KB, MB, GB, TB, PB are powers of 1000)", s, p);
}

/* Weight bytes of alternative formats, from the shapes. */
static uint64_t weights_alt(const Model *m, int fmt) {
    const ModelConfig *c = &m->cfg;
    uint64_t emb = (uint64_t)c->vocab * (uint64_t)c->hidden;
    uint64_t head = m->lm_head_tied ? 0 : emb;
    uint64_t b = 0;
    for (int l = 0; l < c->n_layers; l++)
        for (int k = 0; k < 7; k++) {
            const Linear *lin = layer_lin(&m->layers[l], k);
            uint64_t w = (uint64_t)lin->out * (uint64_t)lin->in;
            if (fmt == 1) b += 4 * w;
            else if (fmt == 2) b += 2 * w;
            else
                b += (uint64_t)(lin->out * tern_row_bytes(lin->in)) +
                     2 * (uint64_t)tern_n_scales(QG_256, lin->out, lin->in);
        }
    return b + (emb + head) * (fmt == 1 ? 4 : 2);
}

int report_capacity_compute(const Model *m, uint64_t budget, int block_size, Capacity *cap) {
    memset(cap, 0, sizeof *cap);
    const ModelConfig *c = &m->cfg;
    if (block_size < 1) return err_set("capacity: block size %d must be >= 1", block_size);
    cap->budget = budget;
    cap->block_size = block_size;
    snprintf(cap->format[0], sizeof cap->format[0], "as loaded (measured)");
    snprintf(cap->format[1], sizeof cap->format[1], "dense f32 (this CPU runtime)");
    snprintf(cap->format[2], sizeof cap->format[2], "dense bf16");
    snprintf(cap->format[3], sizeof cap->format[3], "ternary 2-bit g256 f16 + bf16 embed/head");
    cap->weight_bytes[0] = model_weight_bytes(m);
    for (int f = 1; f < CAP_FORMATS; f++) cap->weight_bytes[f] = weights_alt(m, f);
    /* the runtime's own byte counts: a 1-block, 1-token cache per policy */
    for (int p = 0; p < CAP_POLICIES; p++) {
        KvCache kv;
        if (kv_init(&kv, c->n_layers, c->n_kv_heads, c->head_dim, 1, 1) != 0) return -1;
        KvPolicy pol = {.kind = (KvPolicyKind)p, .layer_lo = -1, .layer_hi = -1};
        if (kv_set_policy(&kv, &pol) != 0) {
            kv_free(&kv);
            return -1;
        }
        cap->kv_bytes[p][0] = kv_bytes_per_token(&kv, 0);
        cap->kv_bytes[p][1] = kv_bytes_per_token(&kv, 1);
        cap->alloc_per_token[p] = kv_alloc_bytes(&kv); /* 1 block of 1 token: per slot */
        kv_free(&kv);
    }
    for (int f = 0; f < CAP_FORMATS; f++) {
        uint64_t avail = budget > cap->weight_bytes[f] ? budget - cap->weight_bytes[f] : 0;
        for (int p = 0; p < CAP_POLICIES; p++) {
            for (int ph = 0; ph < 2; ph++)
                cap->tokens[f][p][ph] = cap->kv_bytes[p][ph] ? avail / cap->kv_bytes[p][ph] : 0;
            uint64_t blocks = avail / (cap->alloc_per_token[p] * (uint64_t)block_size);
            cap->pool_tokens[f][p] = blocks * (uint64_t)block_size;
            cap->pool_bytes[f][p] = cap->pool_tokens[f][p] * cap->alloc_per_token[p];
        }
    }
    return 0;
}

static void human(uint64_t b, char *buf, size_t n) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 6) {
        v /= 1024;
        i++;
    }
    snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", v, u[i]);
}

static const char *const POL_NAMES[CAP_POLICIES] = {"none", "encoder", "decoder", "all"};

void report_capacity(const Model *m, uint64_t budget, FILE *f) {
    Capacity c;
    if (report_capacity_compute(m, budget, 16, &c) != 0) {
        fprintf(f, "capacity: %s\n", err_msg());
        return;
    }
    char hb[32];
    human(budget, hb, sizeof hb);
    fprintf(f, "capacity at a budget of %s (%llu bytes): KV tokens that fit next to the weights\n",
            hb, (unsigned long long)budget);
    fprintf(f, "  KV bytes/token (prompt/generated):");
    for (int p = 0; p < CAP_POLICIES; p++)
        fprintf(f, " %s %llu/%llu", POL_NAMES[p], (unsigned long long)c.kv_bytes[p][0],
                (unsigned long long)c.kv_bytes[p][1]);
    fprintf(f, "\n  %-42s %14s", "weights", "bytes");
    for (int p = 0; p < CAP_POLICIES; p++) fprintf(f, " %23s", POL_NAMES[p]);
    fprintf(f, "\n");
    for (int w = 0; w < CAP_FORMATS; w++) {
        fprintf(f, "  %-42s %14llu", c.format[w], (unsigned long long)c.weight_bytes[w]);
        for (int p = 0; p < CAP_POLICIES; p++) {
            char cell[48];
            if (c.kv_bytes[p][0] == c.kv_bytes[p][1])
                snprintf(cell, sizeof cell, "%llu", (unsigned long long)c.tokens[w][p][0]);
            else
                snprintf(cell, sizeof cell, "%llu/%llu", (unsigned long long)c.tokens[w][p][0],
                         (unsigned long long)c.tokens[w][p][1]);
            fprintf(f, " %23s", cell);
        }
        fprintf(f, "%s\n", budget < c.weight_bytes[w] ? "  (weights alone exceed the budget)" : "");
    }
    fprintf(f, "  (tokens = floor((budget - weights) / KV bytes per token); a/b = all prompt / all "
               "generated tokens)\n");
    fprintf(f, "  this runtime's paged pool: f32 pages in every layer where the policy keeps a "
               "full-precision token, ternary pages where it stores ternary ones:\n  %-42s",
            "allocated bytes per token slot");
    for (int p = 0; p < CAP_POLICIES; p++)
        fprintf(f, " %s %llu", POL_NAMES[p], (unsigned long long)c.alloc_per_token[p]);
    fprintf(f, "\n  %-42s", "pool tokens / pool bytes, as loaded");
    for (int p = 0; p < CAP_POLICIES; p++)
        fprintf(f, " %s %llu/%llu", POL_NAMES[p], (unsigned long long)c.pool_tokens[0][p],
                (unsigned long long)c.pool_bytes[0][p]);
    fprintf(f, "\n");
}

int report_capacity_h5(H5Log *lg, const char *group, const Model *m, uint64_t budget) {
    Capacity c;
    if (report_capacity_compute(m, budget, 16, &c) != 0) return -1;
    char p[256];
    int e = 0;
    int64_t wb[CAP_FORMATS], kvb[CAP_POLICIES * 2], tok[CAP_FORMATS * CAP_POLICIES * 2],
        apt[CAP_POLICIES], pt[CAP_FORMATS * CAP_POLICIES], pb[CAP_FORMATS * CAP_POLICIES];
    const char *fn[CAP_FORMATS], *pn[CAP_POLICIES];
    for (int w = 0; w < CAP_FORMATS; w++) {
        wb[w] = (int64_t)c.weight_bytes[w];
        fn[w] = c.format[w];
        for (int q = 0; q < CAP_POLICIES; q++) {
            for (int ph = 0; ph < 2; ph++) tok[(w * CAP_POLICIES + q) * 2 + ph] = (int64_t)c.tokens[w][q][ph];
            pt[w * CAP_POLICIES + q] = (int64_t)c.pool_tokens[w][q];
            pb[w * CAP_POLICIES + q] = (int64_t)c.pool_bytes[w][q];
        }
    }
    for (int q = 0; q < CAP_POLICIES; q++) {
        pn[q] = POL_NAMES[q];
        kvb[2 * q] = (int64_t)c.kv_bytes[q][0];
        kvb[2 * q + 1] = (int64_t)c.kv_bytes[q][1];
        apt[q] = (int64_t)c.alloc_per_token[q];
    }
    int64_t d2[2] = {CAP_POLICIES, 2}, d3[2] = {CAP_FORMATS, CAP_POLICIES * 2},
            d4[2] = {CAP_FORMATS, CAP_POLICIES};
#define P(name) (snprintf(p, sizeof p, "%s/%s", group, name), p)
    e |= h5log_scalar_i64(lg, P("budget"), (int64_t)budget);
    e |= h5log_strings(lg, P("format"), fn, CAP_FORMATS);
    e |= h5log_strings(lg, P("policy"), pn, CAP_POLICIES);
    e |= h5log_i64(lg, P("weight_bytes"), wb, CAP_FORMATS);
    e |= h5log_dataset(lg, P("kv_bytes_per_token"), H5LOG_I64, 2, d2, kvb);
    e |= h5log_dataset(lg, P("tokens"), H5LOG_I64, 2, d3, tok);
    e |= h5log_i64(lg, P("alloc_bytes_per_token"), apt, CAP_POLICIES);
    e |= h5log_dataset(lg, P("pool_tokens"), H5LOG_I64, 2, d4, pt);
    e |= h5log_dataset(lg, P("pool_bytes"), H5LOG_I64, 2, d4, pb);
#undef P
    e |= h5log_attr_str(lg, group, "tokens_layout",
                        "[format, policy*2 + phase], phase 0 = prompt token, 1 = generated token");
    e |= h5log_attr_i64(lg, group, "block_size", c.block_size);
    return e ? -1 : 0;
}
