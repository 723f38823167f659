#include "runtime/forward.h"
#include "runtime/forward_internal.h"
#include "core/err.h"
#include "core/mem.h"
#include "runtime/linear.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ATT_Q_CHUNK 128 /* query rows per attention tile: bounds the scores buffer */

#define LIN(...)                                                                  \
    do {                                                                          \
        if (linear_forward(__VA_ARGS__) != 0) return -1;                          \
    } while (0)

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

int runstate_init(RunState *s, const Model *m, int64_t max_tok) {
    memset(s, 0, sizeof *s);
    const ModelConfig *c = &m->cfg;
    int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    int64_t wide = max64(max64(c->hidden, qd), c->inter);
    s->max_tok = max_tok;
    s->x = mem_alloc(sizeof(float) * (size_t)(max_tok * c->hidden), "activations");
    s->xb = mem_alloc(sizeof(float) * (size_t)(max_tok * wide), "activations");
    s->q = mem_alloc(sizeof(float) * (size_t)(max_tok * qd), "activations");
    s->k = mem_alloc(sizeof(float) * (size_t)(max_tok * kvd), "activations");
    s->v = mem_alloc(sizeof(float) * (size_t)(max_tok * kvd), "activations");
    s->att = mem_alloc(sizeof(float) * (size_t)(max_tok * qd), "activations");
    s->hb = mem_alloc(sizeof(float) * (size_t)(max_tok * c->inter), "activations");
    s->hb2 = mem_alloc(sizeof(float) * (size_t)(max_tok * c->inter), "activations");
    s->hout = mem_alloc(sizeof(float) * (size_t)(max_tok * c->hidden), "activations");
    s->lin_scratch = mem_alloc(linear_scratch_bytes(max_tok, wide), "activations");
    if (!s->x || !s->xb || !s->q || !s->k || !s->v || !s->att || !s->hb || !s->hb2 || !s->hout ||
        !s->lin_scratch) {
        runstate_free(s);
        return err_prefix("run state for %lld tokens: ", (long long)max_tok);
    }
    return 0;
}

void runstate_free(RunState *s) {
    void *ps[] = {s->x, s->xb, s->q, s->k, s->v, s->att, s->hb, s->hb2, s->hout, s->lin_scratch,
                  s->kc, s->vc, s->scores};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) mem_free(ps[i]);
    memset(s, 0, sizeof *s);
}

static int ensure_ctx(RunState *s, int64_t ctx, int head_dim) {
    if (ctx <= s->ctx_cap) return 0;
    int64_t cap = max64(ctx, 2 * s->ctx_cap);
    mem_free(s->kc);
    mem_free(s->vc);
    mem_free(s->scores);
    s->kc = mem_alloc(sizeof(float) * (size_t)(cap * head_dim), "attention keys");
    s->vc = mem_alloc(sizeof(float) * (size_t)(cap * head_dim), "attention values");
    s->scores = mem_alloc(sizeof(float) * (size_t)(cap * ATT_Q_CHUNK), "attention scores");
    if (!s->kc || !s->vc || !s->scores) {
        s->ctx_cap = 0;
        return -1;
    }
    s->ctx_cap = cap;
    return 0;
}

int fwd_prepare_tokens(const Model *m, KvCache *kv, const int *tok, const int *seq,
                       const int64_t *pos, int64_t n, int64_t *max_pos) {
    int64_t mp = 0;
    for (int64_t i = 0; i < n; i++) {
        if (tok[i] < 0 || tok[i] >= m->cfg.vocab)
            return err_set("forward: token id %d outside the vocabulary (0..%d)", tok[i],
                           m->cfg.vocab - 1);
        if (kv_seq_live(kv, seq[i]) != 0) return err_prefix("forward: token %lld: ", (long long)i);
        if (pos[i] < 0) return err_set("forward: token %lld at position %lld", (long long)i, (long long)pos[i]);
        mp = max64(mp, pos[i]);
    }
    if (rope_positions_check(&m->cfg, mp) != 0) return err_prefix("forward: ");
    /* all or nothing: out of blocks, the sequences give back what this call took
     * (a scheduler that preempts and retries had found the pool emptied).  A
     * later failure of the call (a GPU table or RoPE growth) leaves its blocks
     * with their sequences, returned when they are freed. */
    int *held = xmalloc(sizeof(int) * (size_t)(kv->n_seqs > 0 ? kv->n_seqs : 1));
    for (int s = 0; s < kv->n_seqs; s++) held[s] = kv->seqs[s].n_blocks;
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) rc = kv_seq_reserve(kv, seq[i], pos[i] + 1);
    if (rc != 0)
        for (int s = 0; s < kv->n_seqs; s++) kv_seq_shrink(kv, s, held[s]);
    free(held);
    *max_pos = mp;
    return rc;
}

void fwd_glu(HiddenAct act, float *g, const float *u, int64_t cnt) {
    if (act == ACT_SILU) {
#pragma omp parallel for schedule(static) if (cnt > 65536)
        for (int64_t i = 0; i < cnt; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    } else { /* ReLU^2 (BitNet) */
#pragma omp parallel for schedule(static) if (cnt > 65536)
        for (int64_t i = 0; i < cnt; i++) {
            float r = g[i] > 0.0f ? g[i] : 0.0f;
            g[i] = r * r * u[i];
        }
    }
}

void rmsnorm_rows(float *out, const float *x, const float *w, int64_t n, int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (n * dim > 32768)
    for (int64_t t = 0; t < n; t++) {
        const float *xr = x + t * dim;
        float *o = out + t * dim;
        float ss = 0.0f;
        for (int64_t i = 0; i < dim; i++) ss += xr[i] * xr[i];
        float r = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int64_t i = 0; i < dim; i++) o[i] = w[i] * (xr[i] * r);
    }
}

void rope_inv_freq(const ModelConfig *c, float *inv) {
    const float f = (float)c->rope_factor;
    for (int i = 0; i < c->head_dim / 2; i++) {
        const float pos = rope_theta_pow(c, i), b = 1.0f / pos; /* (rope_default_freq) */
        float v = b, s;
        if (c->rope_kind == ROPE_LINEAR) {
            v = b / f;
        } else if (c->rope_kind == ROPE_FACTORS) {
            v = b / c->rope_ff[i];
        } else if (c->rope_kind == ROPE_LONGROPE) {
            /* transformers' _compute_longrope_parameters: 1 / (short_factor theta^(2i/d)) */
            const float d = c->rope_ff[i] * pos;
            v = 1.0f / d;
        } else if (c->rope_kind == ROPE_YARN) {
            /* transformers' _compute_yarn_parameters in float32, one operation a statement:
             * extrapolation 1 / pos, interpolation 1 / (factor pos), blended by 1 - the
             * linear ramp over the correction range (rope_low .. rope_high, in double) */
            float interp = f * pos;
            interp = 1.0f / interp;
            const double hi = c->rope_high == c->rope_low ? c->rope_high + 0.001 : c->rope_high;
            float ramp = (float)i - (float)c->rope_low;
            ramp = ramp / (float)(hi - c->rope_low);
            ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
            const float ext = 1.0f - ramp;
            float a = 1.0f - ext;
            a = interp * a;
            const float d = b * ext;
            v = a + d;
        } else if (c->rope_kind == ROPE_LLAMA3) {
            /* transformers' _compute_llama3_parameters: the low band divided by factor, the
             * smooth one (1 - s) v / factor + s v, one operation a statement */
            const int band = rope_llama3_band(c, b, &s);
            if (band == 1) v = b / f;
            if (band == 2) {
                float a = 1.0f - s;
                a = a * v;
                a = a / f;
                const float d = s * v;
                v = a + d;
            }
        }
        inv[i] = v;
    }
}

/* RoPE tables cos/sin (len, head_dim/2) with transformers' arithmetic:
 * inv_freq_i from rope_inv_freq in fp32, angle = pos * inv_freq_i in fp32,
 * cos and sin times the attention factor (yarn's, longrope's; 1 otherwise). */
static int rope_ensure(Model *m, int64_t len) {
    if (len <= m->rope_len) return 0;
    int64_t cap = max64(len, max64(2 * m->rope_len, 4096));
    int half = m->cfg.head_dim / 2;
    float *c = mem_alloc(sizeof(float) * (size_t)(cap * half), "RoPE table");
    float *sn = mem_alloc(sizeof(float) * (size_t)(cap * half), "RoPE table");
    if (!c || !sn) {
        mem_free(c);
        mem_free(sn);
        return -1;
    }
    float *inv = mem_alloc(sizeof(float) * (size_t)half, "RoPE frequencies");
    if (!inv) {
        mem_free(c);
        mem_free(sn);
        return -1;
    }
    rope_inv_freq(&m->cfg, inv);
    const float att = rope_attention_factor(&m->cfg); /* (yarn's, longrope's; transformers: emb.cos() * it) */
    for (int i = 0; i < half; i++) {
        for (int64_t p = 0; p < cap; p++) {
            float a = (float)p * inv[i];
            c[p * half + i] = (float)cos((double)a) * att;
            sn[p * half + i] = (float)sin((double)a) * att;
        }
    }
    mem_free(inv);
    mem_free(m->rope_cos);
    mem_free(m->rope_sin);
    m->rope_cos = c;
    m->rope_sin = sn;
    m->rope_len = cap;
    return 0;
}

/* Rotate-half RoPE on n_heads heads of one token: pairs (i, i + d/2). */
static void rope_apply(float *x, int n_heads, int hd, const float *cs, const float *sn) {
    int half = hd / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * hd;
        for (int i = 0; i < half; i++) {
            float x1 = v[i], x2 = v[i + half];
            v[i] = x1 * cs[i] - x2 * sn[i];
            v[i + half] = x2 * cs[i] + x1 * sn[i];
        }
    }
}

/* Attention for tokens [i0, i1) of one sequence: for each query head, scores
 * against positions 0..pos (causal), softmax, weighted sum of values. */
static void attention_run(const Model *m, const KvCache *kv, RunState *s, int layer, int seq,
                          const int64_t *pos, int64_t i0, int64_t i1) {
    const ModelConfig *c = &m->cfg;
    int hd = c->head_dim, grp = c->n_heads / c->n_kv_heads;
    int64_t qd = (int64_t)c->n_heads * hd;
    int64_t ctx = 0;
    for (int64_t i = i0; i < i1; i++) ctx = max64(ctx, pos[i] + 1);
    float scale = 1.0f / sqrtf((float)hd);
    for (int h = 0; h < c->n_kv_heads; h++) {
        /* gather this head's K and V for positions [0, ctx) from the pages */
        kv_gather_head(kv, layer, seq, h, ctx, s->kc, s->vc);
        for (int g = 0; g < grp; g++) {
            int hq = h * grp + g;
            for (int64_t r0 = i0; r0 < i1; r0 += ATT_Q_CHUNK) {
                int64_t nr = i1 - r0 < ATT_Q_CHUNK ? i1 - r0 : ATT_Q_CHUNK;
                int64_t rctx = 0; /* keys this tile needs */
                for (int64_t r = r0; r < r0 + nr; r++) rctx = max64(rctx, pos[r] + 1);
                /* S (nr, rctx) = Q (nr, hd) @ K^T * scale */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)rctx, hd, scale,
                            s->q + r0 * qd + (int64_t)hq * hd, (int)qd, s->kc, hd, 0.0f, s->scores,
                            (int)rctx);
#pragma omp parallel for schedule(static) if (nr * rctx > 16384)
                for (int64_t r = 0; r < nr; r++) {
                    float *row = s->scores + r * rctx;
                    int64_t valid = pos[r0 + r] + 1;
                    float mx = -INFINITY;
                    for (int64_t j = 0; j < valid; j++) mx = row[j] > mx ? row[j] : mx;
                    float sum = 0.0f;
                    for (int64_t j = 0; j < valid; j++) {
                        row[j] = expf(row[j] - mx);
                        sum += row[j];
                    }
                    float inv = 1.0f / sum;
                    for (int64_t j = 0; j < valid; j++) row[j] *= inv;
                    for (int64_t j = valid; j < rctx; j++) row[j] = 0.0f;
                }
                /* O (nr, hd) = P (nr, rctx) @ V (rctx, hd) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, hd, (int)rctx, 1.0f,
                            s->scores, (int)rctx, s->vc, hd, 0.0f,
                            s->att + r0 * qd + (int64_t)hq * hd, (int)qd);
            }
        }
    }
}

static void dump_rows(RunState *s, int slot, const float *x, int64_t n, int64_t dim) {
    if (s->dump) memcpy(s->dump + (size_t)slot * (size_t)(n * dim), x, sizeof(float) * (size_t)(n * dim));
}

int forward(const Model *m, KvCache *kv, RunState *s, const int *tok, const int *seq,
            const int64_t *pos, int64_t n, const int64_t *logit_idx, int64_t n_logits,
            float *logits) {
    const ModelConfig *c = &m->cfg;
    const int64_t H = c->hidden, hd = c->head_dim, qd = (int64_t)c->n_heads * hd,
                  kvd = (int64_t)c->n_kv_heads * hd, n_inter = c->inter;
    /* the rows asked for (every backend gathers them: one out of range had read
     * past the activations, on the GPU too) */
    for (int64_t j = 0; logit_idx && j < n_logits; j++)
        if (logit_idx[j] < 0 || logit_idx[j] >= n)
            return err_set("forward: logit row %lld is token %lld of %lld", (long long)j, (long long)logit_idx[j],
                           (long long)n);
    if (s->hook) return s->hook(s->hook_ctx, m, kv, s, tok, seq, pos, n, logit_idx, n_logits, logits);
    if (s->argmax_out) return err_set("forward: argmax_out needs a backend that computes it (cuda)");
    if (n > s->max_tok) return err_set("forward: %lld tokens but the run state holds %lld",
                                       (long long)n, (long long)s->max_tok);
    int64_t max_pos = 0;
    if (fwd_prepare_tokens(m, kv, tok, seq, pos, n, &max_pos) != 0) return -1;
    if (rope_ensure((Model *)m, max_pos + 1) != 0 || ensure_ctx(s, max_pos + 1, (int)hd) != 0)
        return -1;
    int half = (int)hd / 2;

    for (int64_t i = 0; i < n; i++) memcpy(s->x + i * H, m->embed + (int64_t)tok[i] * H, sizeof(float) * (size_t)H);
    dump_rows(s, 0, s->x, n, H);

    for (int l = 0; l < c->n_layers; l++) {
        const Layer *L = &m->layers[l];
        /* attention block */
        rmsnorm_rows(s->xb, s->x, L->attn_norm, n, H, c->eps);
        LIN(&L->q, s->xb, n, s->q, s->lin_scratch); /* (n,H) @ Wq^T -> (n,qd) */
        LIN(&L->k, s->xb, n, s->k, s->lin_scratch); /* (n,H) @ Wk^T -> (n,kvd) */
        LIN(&L->v, s->xb, n, s->v, s->lin_scratch); /* (n,H) @ Wv^T -> (n,kvd) */
#pragma omp parallel for schedule(static) if (n > 64)
        for (int64_t i = 0; i < n; i++) {
            const float *cs = m->rope_cos + pos[i] * half, *sn = m->rope_sin + pos[i] * half;
            rope_apply(s->q + i * qd, c->n_heads, (int)hd, cs, sn);
            rope_apply(s->k + i * kvd, c->n_kv_heads, (int)hd, cs, sn);
            kv_write_token(kv, l, seq[i], pos[i], s->k + i * kvd, s->v + i * kvd, s->decode);
        }
        /* runs of consecutive tokens of the same sequence share one gather of K/V */
        for (int64_t i0 = 0; i0 < n;) {
            int64_t i1 = i0 + 1;
            while (i1 < n && seq[i1] == seq[i0]) i1++;
            attention_run(m, kv, s, l, seq[i0], pos, i0, i1);
            i0 = i1;
        }
        const float *ao = s->att;
        if (L->attn_sub_norm) {
            rmsnorm_rows(s->xb, s->att, L->attn_sub_norm, n, qd, c->eps);
            ao = s->xb;
        }
        LIN(&L->o, ao, n, s->hout, s->lin_scratch); /* (n,qd) @ Wo^T -> (n,H) */
        for (int64_t i = 0; i < n * H; i++) s->x[i] += s->hout[i];

        /* MLP block: down(act(gate(x)) * up(x)) */
        rmsnorm_rows(s->xb, s->x, L->ffn_norm, n, H, c->eps);
        LIN(&L->gate, s->xb, n, s->hb, s->lin_scratch); /* (n,H) -> (n,n_inter) */
        LIN(&L->up, s->xb, n, s->hb2, s->lin_scratch);  /* (n,H) -> (n,n_inter) */
        fwd_glu(c->act, s->hb, s->hb2, n * n_inter); /* hb = act(gate) * up */
        const float *mi = s->hb;
        if (L->ffn_sub_norm) {
            rmsnorm_rows(s->hb2, s->hb, L->ffn_sub_norm, n, n_inter, c->eps);
            mi = s->hb2;
        }
        LIN(&L->down, mi, n, s->hout, s->lin_scratch); /* (n,n_inter) -> (n,H) */
        for (int64_t i = 0; i < n * H; i++) s->x[i] += s->hout[i];
        dump_rows(s, l + 1, s->x, n, H);
    }
    for (int64_t i = 0; i < n; i++) {
        KvSeq *sq = &kv->seqs[seq[i]];
        if (pos[i] + 1 > sq->len) sq->len = pos[i] + 1;
    }

    /* final norm + lm_head on the rows whose logits are wanted */
    if (s->dump) {
        rmsnorm_rows(s->xb, s->x, m->final_norm, n, H, c->eps);
        dump_rows(s, c->n_layers + 1, s->xb, n, H);
    }
    if (!logits) return 0;
    int64_t nl = logit_idx ? n_logits : n;
    for (int64_t j = 0; j < nl; j++) {
        int64_t i = logit_idx ? logit_idx[j] : j;
        memcpy(s->hout + j * H, s->x + i * H, sizeof(float) * (size_t)H);
    }
    rmsnorm_rows(s->xb, s->hout, m->final_norm, nl, H, c->eps);
    LIN(&m->lm_head, s->xb, nl, logits, s->lin_scratch); /* (nl,H) -> (nl,vocab) */
    return 0;
}

/* ---- the pieces tensor parallelism reuses (forward_internal.h) ---------- */
int fwd_rope_ensure(Model *m, int64_t len) { return rope_ensure(m, len); }
int fwd_ensure_ctx(RunState *s, int64_t ctx, int head_dim) { return ensure_ctx(s, ctx, head_dim); }
void fwd_rope_apply(float *x, int n_heads, int hd, const float *cs, const float *sn) {
    rope_apply(x, n_heads, hd, cs, sn);
}
void fwd_attention_run(const Model *m, const KvCache *kv, RunState *s, int layer, int seq,
                       const int64_t *pos, int64_t i0, int64_t i1) {
    attention_run(m, kv, s, layer, seq, pos, i0, i1);
}
