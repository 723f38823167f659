/* ternlab diff: per-layer, per-sub-block and per-linear divergence of two runs.
 * How sub-blocks are recovered without changing forward.c: see diff.h. */
#include "eval/diff.h"
#include "core/err.h"
#include "core/mem.h"
#include "runtime/engine.h"
#include "runtime/linear.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- side settings -------------------------------------------------------- */

enum { KEY_NONE, KEY_QUANT, KEY_KV, KEY_DENSE, KEY_DEVICE, KEY_TP };

/* the side settings' key item starts with (KEY_NONE for none) */
static int starts_key(const char *item) {
    static const char *keys[] = {"quant=", "kv=", "dense=", "device=", "tp="};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strncmp(item, keys[i], strlen(keys[i])) == 0) return (int)i + 1;
    return KEY_NONE;
}

static int side_set(DiffSide *o, const char *item, int *have_kv, unsigned *seen) {
    const char *eq = strchr(item, '=');
    const char *v = eq + 1;
    const int key = starts_key(item);
    /* a key given twice (the last one had won: quant=rule=twn,quant=loaded compared loaded) */
    const unsigned bit = 1u << key;
    if (*seen & bit) return err_set("'%.*s' given twice", (int)(eq - item), item);
    *seen |= bit;
    switch (key) {
    case KEY_QUANT: {
        if (!*v) return err_set("quant=: empty (use quant=loaded or a QuantSpec)");
        if (strcmp(v, "loaded") == 0) {
            o->quant[0] = 0;
            return 0;
        }
        QuantSpec qs;
        if (quant_spec_parse(v, &qs) != 0) return err_prefix("quant=%s: ", v);
        if (strlen(v) >= sizeof o->quant) return err_set("quant=%s: too long", v);
        snprintf(o->quant, sizeof o->quant, "%s", v);
        return 0;
    }
    case KEY_KV:
        *have_kv = 1;
        return kv_policy_parse(v, &o->kv) ? err_prefix("kv=%s: ", v) : 0;
    case KEY_DENSE:
        if (strcmp(v, "0") && strcmp(v, "1")) return err_set("dense=%s: expected 0 or 1", v);
        o->dense = v[0] == '1';
        return 0;
    case KEY_DEVICE:
        return strcmp(v, "cpu") ? err_set("device=%s: this build runs diff on cpu only", v) : 0;
    default: /* KEY_TP (side_set is called only for items that start with a key) */
        return strcmp(v, "1") ? err_set("tp=%s: tensor parallelism is not available (only tp=1)", v) : 0;
    }
}

int diff_side_parse(const char *s, DiffSide *out) {
    memset(out, 0, sizeof *out);
    if (!s || !*s)
        return err_set("empty side settings (expected e.g. 'quant=loaded' or "
                       "'quant=rule=twn,group=128,kv=all,dense=1')");
    size_t n = strlen(s);
    char *buf = xmalloc(n + 1), *cur = xmalloc(n + 1);
    memcpy(buf, s, n + 1);
    cur[0] = 0;
    int rc = 0, have_kv = 0;
    unsigned seen = 0; /* the keys given (bit starts_key) */
    /* items separated by ',' or ';'; an item that does not start with a key
     * continues the current value (the quant spec's own commas) */
    for (char *p = buf; rc == 0;) {
        size_t len = strcspn(p, ",;");
        char sep = p[len];
        p[len] = 0;
        if (starts_key(p)) {
            if (cur[0]) rc = side_set(out, cur, &have_kv, &seen);
            snprintf(cur, n + 1, "%s", p);
        } else if (!cur[0] || !*p) {
            rc = err_set("'%s': unknown or empty setting (keys: quant=SPEC|loaded, kv=POLICY, "
                         "dense=0|1, device=cpu, tp=1)", p);
        } else {
            size_t l = strlen(cur);
            snprintf(cur + l, n + 1 - l, ",%s", p);
        }
        if (!sep) break;
        p += len + 1;
    }
    if (rc == 0 && cur[0]) rc = side_set(out, cur, &have_kv, &seen);
    free(buf);
    free(cur);
    if (rc != 0) return -1;
    if (!have_kv) out->kv.layer_lo = out->kv.layer_hi = -1;
    char pol[96];
    kv_policy_format(&out->kv, pol, sizeof pol);
    snprintf(out->desc, sizeof out->desc, "quant=%s,kv=%s%s", out->quant[0] ? out->quant : "loaded",
             pol, out->dense ? ",dense=1" : "");
    return 0;
}

int diff_side_load(const char *path, const DiffSide *s, Model *m) {
    ModelLoadOpts o = {.quant = s->quant[0] ? s->quant : NULL, .dense = s->dense};
    return model_load(path, &o, m);
}

/* ---- statistics ----------------------------------------------------------- */

DiffStat diff_stat(const float *a, const float *b, int64_t n) {
    DiffStat s = {0};
    double num = 0, den = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        int fa = isfinite(a[i]), fb = isfinite(b[i]);
        s.nonfinite_a += !fa;
        s.nonfinite_b += !fb;
        if (!fa || !fb) continue;
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
        if (fabs(d) > mx) mx = fabs(d);
    }
    s.max_abs = mx;
    if (s.nonfinite_a || s.nonfinite_b) s.rel_l2 = NAN;
    else if (den > 0) s.rel_l2 = sqrt(num / den);
    else s.rel_l2 = num > 0 ? INFINITY : 0.0;
    return s;
}

/* ---- running one side ----------------------------------------------------- */

/* Runs tok[0..T) as one sequence through m under pol: one call, or (split) T/2
 * prefill tokens and then one decode call per token.  Optional outputs:
 * dump (n_layers+2, T, hidden); att (T, n_heads*head_dim) and hb (T, inter):
 * RunState.att / RunState.hb after each call, i.e. the last layer's attention
 * output and MLP product (see diff.h). */
static int run_window(Model *m, const KvPolicy *pol, const int *tok, int T, int split, float *dump,
                      float *att, float *hb) {
    const ModelConfig *c = &m->cfg;
    int64_t H = c->hidden, qd = (int64_t)c->n_heads * c->head_dim, I = c->inter;
    Engine e;
    EngineOpts eo = {.max_tok = T, .block_size = 16, .n_blocks = (T + 15) / 16};
    if (engine_init(&e, m, &eo) != 0) return -1;
    int rc = kv_set_policy(&e.kv, pol);
    int64_t rows = (int64_t)c->n_layers + 2;
    float *tmp = NULL;
    if (rc == 0 && dump) {
        tmp = mem_alloc(sizeof(float) * (size_t)(rows * T * H), "layer dump");
        if (!tmp) rc = -1;
    }
    int *seq = xmalloc(sizeof(int) * (size_t)T);
    int64_t *pos = xmalloc(sizeof(int64_t) * (size_t)T);
    int sid = rc == 0 ? kv_seq_new(&e.kv) : 0;
    for (int t = 0; t < T; t++) {
        seq[t] = sid;
        pos[t] = t;
    }
    int first = split ? T / 2 : T;
    for (int t0 = 0; t0 < T && rc == 0;) {
        int n = t0 == 0 ? first : 1;
        e.rs.decode = t0 > 0;
        e.rs.dump = tmp;
        rc = forward(m, &e.kv, &e.rs, tok + t0, seq + t0, pos + t0, n, NULL, 0, NULL);
        e.rs.dump = NULL;
        if (rc == 0 && dump)
            for (int64_t s = 0; s < rows; s++)
                memcpy(dump + (s * T + t0) * H, tmp + s * n * H, sizeof(float) * (size_t)(n * H));
        if (rc == 0 && att) memcpy(att + t0 * qd, e.rs.att, sizeof(float) * (size_t)(n * qd));
        if (rc == 0 && hb) memcpy(hb + t0 * I, e.rs.hb, sizeof(float) * (size_t)(n * I));
        t0 += n;
    }
    mem_free(tmp);
    free(seq);
    free(pos);
    engine_free(&e);
    return rc;
}

/* Activations of one layer of one side, window 0, recovered from its one-layer rerun. */
typedef struct {
    float *att, *hb;   /* captured: (T, qd), (T, inter) */
    float *xn;         /* (T, H) rmsnorm(x_l, attn_norm): input of q, k, v */
    float *ao;         /* (T, qd) input of o_proj (attn_sub_norm applied for BitNet) */
    float *aout;       /* (T, H) attention contribution (o_proj output) */
    float *h;          /* (T, H) x_l + aout */
    float *hn;         /* (T, H) rmsnorm(h, ffn_norm): input of gate, up */
    float *mi;         /* (T, inter) input of down_proj */
    float *mout;       /* (T, H) MLP contribution (down_proj output) */
} LayerActs;

static int acts_alloc(LayerActs *a, const ModelConfig *c, int T) {
    memset(a, 0, sizeof *a);
    size_t H = (size_t)c->hidden * (size_t)T, Q = (size_t)c->n_heads * (size_t)c->head_dim * (size_t)T,
           I = (size_t)c->inter * (size_t)T;
    float **ps[] = {&a->att, &a->hb, &a->xn, &a->ao, &a->aout, &a->h, &a->hn, &a->mi, &a->mout};
    size_t ns[] = {Q, I, H, Q, H, H, H, I, H};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        if (!(*ps[i] = mem_alloc(sizeof(float) * ns[i], "diff activations"))) return -1;
    return 0;
}

static void acts_free(LayerActs *a) {
    float *ps[] = {a->att, a->hb, a->xn, a->ao, a->aout, a->h, a->hn, a->mi, a->mout};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) mem_free(ps[i]);
    memset(a, 0, sizeof *a);
}

static const Linear *layer_linear(const Layer *L, int k) {
    const Linear *ls[LAYER_N_LINEARS] = LAYER_LINEARS(L);
    return ls[k];
}

/* Layer l of model m on input x (T, H): the one-layer view of the model run
 * through forward() under the same protocol, then o_proj and down_proj
 * re-applied to the captured inputs. */
static int layer_pass(Model *m, const KvPolicy *pol, int l, const float *x, int T, int split,
                      const int *ids, void *scratch, LayerActs *a) {
    const ModelConfig *c = &m->cfg;
    int64_t H = c->hidden, qd = (int64_t)c->n_heads * c->head_dim, I = c->inter;
    /* the view shares the RoPE tables; forward must not grow them through the
     * copy (that would free the original's) */
    if (m->rope_len < T) return err_set("diff: RoPE table shorter than the window (internal)");
    Model sub = *m;
    sub.cfg.n_layers = 1;
    sub.cfg.vocab = T;
    sub.embed = (float *)x; /* read only: token t's embedding row is x_l[t] */
    sub.layers = &m->layers[l];
    KvPolicy sp = {.kind = KVP_NONE, .layer_lo = -1, .layer_hi = -1};
    if (pol->kind != KVP_NONE && (pol->layer_lo < 0 || (l >= pol->layer_lo && l <= pol->layer_hi)))
        sp.kind = pol->kind;
    if (run_window(&sub, &sp, ids, T, split, NULL, a->att, a->hb) != 0) return -1;
    const Layer *L = &m->layers[l];
    rmsnorm_rows(a->xn, x, L->attn_norm, T, H, c->eps);
    if (L->attn_sub_norm) rmsnorm_rows(a->ao, a->att, L->attn_sub_norm, T, qd, c->eps);
    else memcpy(a->ao, a->att, sizeof(float) * (size_t)(T * qd));
    if (linear_forward(&L->o, a->ao, T, a->aout, scratch) != 0) return -1;
    for (int64_t i = 0; i < T * H; i++) a->h[i] = x[i] + a->aout[i];
    rmsnorm_rows(a->hn, a->h, L->ffn_norm, T, H, c->eps);
    if (L->ffn_sub_norm) rmsnorm_rows(a->mi, a->hb, L->ffn_sub_norm, T, I, c->eps);
    else memcpy(a->mi, a->hb, sizeof(float) * (size_t)(T * I));
    return linear_forward(&L->down, a->mi, T, a->mout, scratch);
}

static int same_config(const ModelConfig *a, const ModelConfig *b) {
    return a->hidden == b->hidden && a->n_layers == b->n_layers && a->n_heads == b->n_heads &&
           a->n_kv_heads == b->n_kv_heads && a->head_dim == b->head_dim && a->inter == b->inter &&
           a->vocab == b->vocab && a->arch == b->arch;
}

static int crosses(double v, double thr) { return isnan(v) || v > thr; }

static void find_first(DiffResult *r) {
    r->first_layer = -1;
    r->first_block[0] = 0;
    r->first_value = 0;
    int L = r->n_layers;
#define HIT(layer, blk, val)                                                     \
    do {                                                                         \
        if (crosses(val, r->threshold)) {                                        \
            r->first_layer = layer;                                              \
            snprintf(r->first_block, sizeof r->first_block, "%s", blk);          \
            r->first_value = val;                                                \
            return;                                                              \
        }                                                                        \
    } while (0)
    HIT(-1, "embed", r->resid[0].rel_l2);
    for (int l = 0; l < L; l++) {
        if (r->have_blocks) {
            HIT(l, "attn", r->attn[l].rel_l2);
            HIT(l, "mlp", r->mlp[l].rel_l2);
        }
        HIT(l, "resid", r->resid[l + 1].rel_l2);
    }
    HIT(L, "final_norm", r->resid[L + 1].rel_l2);
#undef HIT
}

void diff_result_free(DiffResult *r) {
    free(r->resid);
    free(r->attn);
    free(r->mlp);
    free(r->lin);
    free(r->lin_name);
    memset(r, 0, sizeof *r);
}

/* How far (rel L2) a --b-dump's embedding rows may be from the model's own: a
 * dump made in bf16 or f16 is within ~4e-3; other tokens or another model are
 * at ~1.4. */
#define DIFF_DUMP_EMBED_TOL 0.1

int diff_compare(Model *a, const KvPolicy *pa, Model *b, const KvPolicy *pb, const float *b_dump,
                 const int32_t *tok, int T, double threshold, DiffResult *r) {
    memset(r, 0, sizeof *r);
    const ModelConfig *c = &a->cfg;
    if (T < 2) return err_set("diff: window %d is too short (at least 2 tokens)", T);
    if (!b && !b_dump) return err_set("diff: neither a B model nor a B dump");
    if (b && !same_config(c, &b->cfg))
        return err_set("diff: A and B have different configurations (same model expected)");
    if (!(threshold > 0)) return err_set("diff: threshold %g must be positive", threshold);
    int64_t H = c->hidden, L = c->n_layers, rows = L + 2;
    /* a KV policy runs the split protocol (half prefilled, half decoded), as ppl --kv; against a
     * dump, A runs the window as one prefill, as ppl --dump-layers makes it (a split A had
     * parted from a dump of the same policy at layer 0) */
    int split = b && (pa->kind != KVP_NONE || pb->kind != KVP_NONE);
    r->n_layers = (int)L;
    r->T = T;
    r->hidden = (int)H;
    r->threshold = threshold;
    r->have_blocks = b != NULL;
    r->resid = xcalloc((size_t)rows, sizeof(DiffStat));
    r->attn = xcalloc((size_t)L, sizeof(DiffStat));
    r->mlp = xcalloc((size_t)L, sizeof(DiffStat));
    r->n_lin = b ? (int)(7 * L) : 0;
    r->lin = xcalloc((size_t)(7 * L), sizeof(DiffStat));
    r->lin_name = xcalloc((size_t)(7 * L), sizeof *r->lin_name);

    int *ids = xmalloc(sizeof(int) * (size_t)T), *iota = xmalloc(sizeof(int) * (size_t)T);
    for (int t = 0; t < T; t++) {
        ids[t] = tok[t];
        iota[t] = t;
    }
    size_t dn = (size_t)(rows * T * H);
    float *da = mem_alloc(sizeof(float) * dn, "diff: A layer dump");
    float *db = b ? mem_alloc(sizeof(float) * dn, "diff: B layer dump") : NULL;
    int rc = da && (!b || db) ? 0 : -1;
    if (rc == 0) rc = run_window(a, pa, ids, T, split, da, NULL, NULL);
    if (rc == 0 && b) rc = run_window(b, pb, ids, T, split, db, NULL, NULL);
    if (rc == 0 && !b) db = (float *)b_dump;
    for (int64_t s = 0; s < rows && rc == 0; s++)
        r->resid[s] = diff_stat(da + s * T * H, db + s * T * H, T * H);
    /* a dump's first rows are the embedding of the same tokens: a lookup, the same
     * for any run of this model up to the dump's precision; far from them, the dump
     * is of another model or other tokens (it had been reported as divergence at the
     * embedding, exit 0) */
    if (rc == 0 && !b && !(r->resid[0].rel_l2 <= DIFF_DUMP_EMBED_TOL))
        rc = err_set("the --b-dump's embedding rows differ from this model's on these tokens (rel L2 "
                     "%.3g): a dump of another model, other tokens or another window, not a divergence",
                     r->resid[0].rel_l2);

    if (rc == 0 && b) {
        int64_t qd = (int64_t)c->n_heads * c->head_dim, I = c->inter;
        int64_t wide = H > qd ? H : qd;
        wide = wide > I ? wide : I;
        LayerActs A, B;
        void *scratch = mem_alloc(linear_scratch_bytes(T, wide), "diff: linear scratch");
        float *ya = mem_alloc(sizeof(float) * (size_t)(T * wide), "diff: linear outputs");
        float *yb = mem_alloc(sizeof(float) * (size_t)(T * wide), "diff: linear outputs");
        rc = acts_alloc(&A, c, T) | acts_alloc(&B, c, T);
        if (!scratch || !ya || !yb) rc = -1;
        for (int l = 0; l < L && rc == 0; l++) {
            rc = layer_pass(a, pa, l, da + l * T * H, T, split, iota, scratch, &A);
            if (rc == 0) rc = layer_pass(b, pb, l, db + l * T * H, T, split, iota, scratch, &B);
            if (rc != 0) break;
            r->attn[l] = diff_stat(A.aout, B.aout, T * H);
            r->mlp[l] = diff_stat(A.mout, B.mout, T * H);
            /* each linear alone: A's input through A's and B's weights */
            const float *in[7] = {A.xn, A.xn, A.xn, A.ao, A.hn, A.hn, A.mi};
            for (int k = 0; k < 7 && rc == 0; k++) {
                const Linear *la = layer_linear(&a->layers[l], k), *lb = layer_linear(&b->layers[l], k);
                rc = linear_forward(la, in[k], T, ya, scratch);
                if (rc == 0) rc = linear_forward(lb, in[k], T, yb, scratch);
                int i = (int)(7 * l + k);
                snprintf(r->lin_name[i], sizeof r->lin_name[i], "%s", la->name);
                if (rc == 0) r->lin[i] = diff_stat(ya, yb, T * la->out);
            }
        }
        acts_free(&A);
        acts_free(&B);
        mem_free(scratch);
        mem_free(ya);
        mem_free(yb);
    }
    mem_free(da);
    if (b) mem_free(db);
    free(ids);
    free(iota);
    if (rc != 0) {
        diff_result_free(r);
        return err_prefix("diff: ");
    }
    find_first(r);
    return 0;
}

/* ---- output --------------------------------------------------------------- */

static void row_name(const DiffResult *r, int s, char *buf, size_t n) {
    if (s == 0) snprintf(buf, n, "embed");
    else if (s == r->n_layers + 1) snprintf(buf, n, "final_norm");
    else snprintf(buf, n, "layer %d", s - 1);
}

static void print_stat(FILE *f, const char *row, const char *blk, const DiffStat *s, double thr) {
    fprintf(f, "%-12s %-6s %12.4e %12.4e %8lld/%-8lld%s\n", row, blk, s->rel_l2, s->max_abs,
            (long long)s->nonfinite_a, (long long)s->nonfinite_b,
            crosses(s->rel_l2, thr) ? "  *" : "");
}

void diff_print(const DiffResult *r, const char *a_desc, const char *b_desc, FILE *f) {
    fprintf(f, "diff  A: %s\n      B: %s (reference)\n", a_desc, b_desc);
    fprintf(f, "window 0: %d tokens; rel_l2 = ||A-B||/||B||; * = above threshold %g\n", r->T,
            r->threshold);
    fprintf(f, "%-12s %-6s %12s %12s %17s\n", "row", "block", "rel_l2", "max_abs", "nonfinite A/B");
    char name[32];
    for (int s = 0; s < r->n_layers + 2; s++) {
        row_name(r, s, name, sizeof name);
        if (s >= 1 && s <= r->n_layers && r->have_blocks) {
            print_stat(f, name, "attn", &r->attn[s - 1], r->threshold);
            print_stat(f, name, "mlp", &r->mlp[s - 1], r->threshold);
        }
        print_stat(f, name, "resid", &r->resid[s], r->threshold);
    }
    if (!r->have_blocks)
        fprintf(f, "(sub-blocks and per-linear errors need two model runs; B is a dump)\n");
    if (r->n_lin) {
        fprintf(f, "per linear (same input: A's activations through A's and B's weights):\n");
        fprintf(f, "%-40s %12s %12s %17s\n", "linear", "rel_l2", "max_abs", "nonfinite A/B");
        for (int i = 0; i < r->n_lin; i++)
            fprintf(f, "%-40s %12.4e %12.4e %8lld/%-8lld%s\n", r->lin_name[i], r->lin[i].rel_l2,
                    r->lin[i].max_abs, (long long)r->lin[i].nonfinite_a,
                    (long long)r->lin[i].nonfinite_b, crosses(r->lin[i].rel_l2, r->threshold) ? "  *" : "");
    }
    if (r->first_block[0])
        fprintf(f, "first_layer %d block %s rel_l2 %.4e threshold %g\n", r->first_layer,
                r->first_block, r->first_value, r->threshold);
    else
        fprintf(f, "first_layer none threshold %g\n", r->threshold);
}

static int put_stats(H5Log *lg, const char *group, const char *prefix, const DiffStat *s, int64_t n) {
    double *rel = xcalloc((size_t)n + 1, sizeof(double)), *mx = xcalloc((size_t)n + 1, sizeof(double));
    int64_t *na = xcalloc((size_t)n + 1, sizeof(int64_t)), *nb = xcalloc((size_t)n + 1, sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) {
        rel[i] = s[i].rel_l2;
        mx[i] = s[i].max_abs;
        na[i] = s[i].nonfinite_a;
        nb[i] = s[i].nonfinite_b;
    }
    char p[256];
    int e = 0;
    snprintf(p, sizeof p, "%s/%s_rel_l2", group, prefix);
    e |= h5log_f64(lg, p, rel, n);
    snprintf(p, sizeof p, "%s/%s_max_abs", group, prefix);
    e |= h5log_f64(lg, p, mx, n);
    snprintf(p, sizeof p, "%s/%s_nonfinite_a", group, prefix);
    e |= h5log_i64(lg, p, na, n);
    snprintf(p, sizeof p, "%s/%s_nonfinite_b", group, prefix);
    e |= h5log_i64(lg, p, nb, n);
    free(rel);
    free(mx);
    free(na);
    free(nb);
    return e ? -1 : 0;
}

int diff_write_h5(H5Log *lg, const char *group, const DiffResult *r, const char *a_desc,
                  const char *b_desc) {
    int rows = r->n_layers + 2, e = 0;
    char (*names)[32] = xcalloc((size_t)rows, sizeof *names);
    const char **np = xcalloc((size_t)rows, sizeof(char *));
    for (int s = 0; s < rows; s++) {
        row_name(r, s, names[s], sizeof names[s]);
        np[s] = names[s];
    }
    char p[256];
    snprintf(p, sizeof p, "%s/row_name", group);
    e |= h5log_strings(lg, p, np, rows);
    e |= put_stats(lg, group, "resid", r->resid, rows);
    if (r->have_blocks) {
        e |= put_stats(lg, group, "attn", r->attn, r->n_layers);
        e |= put_stats(lg, group, "mlp", r->mlp, r->n_layers);
        const char **ln = xcalloc((size_t)r->n_lin + 1, sizeof(char *));
        for (int i = 0; i < r->n_lin; i++) ln[i] = r->lin_name[i];
        snprintf(p, sizeof p, "%s/linear/name", group);
        e |= h5log_strings(lg, p, ln, r->n_lin);
        snprintf(p, sizeof p, "%s/linear", group);
        e |= put_stats(lg, p, "out", r->lin, r->n_lin);
        free(ln);
    }
    e |= h5log_attr_str(lg, group, "a", a_desc);
    e |= h5log_attr_str(lg, group, "b", b_desc);
    e |= h5log_attr_f64(lg, group, "threshold", r->threshold);
    e |= h5log_attr_i64(lg, group, "window", r->T);
    e |= h5log_attr_i64(lg, group, "have_blocks", r->have_blocks);
    e |= h5log_attr_i64(lg, group, "first_layer", r->first_layer);
    e |= h5log_attr_str(lg, group, "first_block", r->first_block[0] ? r->first_block : "none");
    e |= h5log_attr_f64(lg, group, "first_value", r->first_value);
    free(names);
    free(np);
    return e ? -1 : 0;
}
