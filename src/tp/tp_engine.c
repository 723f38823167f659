#include "tp/tp_engine.h"
#include "runtime/cuda_engine.h"
#include "core/err.h"
#include "core/mem.h"
#include "core/timer.h"
#include "runtime/forward_internal.h"
#include "runtime/linear.h"
#include "runtime/preflight.h"
#include "tp/comm.h"
#include "tp/shard.h"
#include "tp/tp_linear.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const float *attn_norm, *ffn_norm; /* (hidden) replicated, the model's */
    const float *attn_sub_norm;        /* (n_heads*head_dim/tp) this rank's slice, or NULL */
    const float *ffn_sub_norm;         /* (inter/tp) this rank's slice, or NULL */
    TpLinear q, k, v, o, gate, up, down;
} TpLayer;

struct TpEngine;

typedef struct {
    struct TpEngine *te;
    int rank;
    Model lm;          /* cfg with this rank's head counts and inter; RoPE tables borrowed */
    TpLayer *layers;
    TpLinear lm_head;  /* vocab rows [v0, v1) */
    int64_t v0, v1;
    KvCache own;       /* ranks > 0: K/V pool of this rank's heads */
    KvCache view;      /* own pool + the shared block tables (refreshed per call) */
    RunState rs;
    TpScratch scr;
    float *logits;     /* (max_tok, v1 - v0) */
    int rc;
    char err[1024];
    pthread_t th;
    int started;
} TpRank;

typedef struct {
    const int *tok, *seq;
    const int64_t *pos;
    int64_t n, n_logits;
    const int64_t *logit_idx;
    float *logits;
    int decode;
} TpJob;

typedef struct TpEngine {
    int tp, omp_per_rank, quit;
    Model *m;
    Engine *e;
    TpRank *ranks;
    TpComm comm;
    /* dispatch: the caller bumps gen to start a job, workers count down pending */
    pthread_mutex_t mu;
    pthread_cond_t cv_go, cv_done;
    int64_t gen;
    int pending, sync_ok;
    TpJob job;
    int64_t tokens, forwards;
    double forward_seconds;
} TpEngine;

/* ---- one rank's forward (SPMD: every rank runs this on the same job) ---- */

/* RMSNorm over a vector split across ranks (BitNet's sub-norms): the sum of
 * squares runs as one chain, rank 0's columns first, continuing the same fp32
 * accumulator on the next rank — the exact loop of rmsnorm_rows. */
static void rmsnorm_chain(TpComm *c, int rank, float *out, const float *x, const float *w,
                          int64_t n, int64_t dim, int64_t full_dim, float eps) {
    double t0 = tp_comm_now();
    tp_comm_barrier(c);
    for (int step = 0; step < c->tp; step++) {
        if (rank == step)
            for (int64_t t = 0; t < n; t++) {
                const float *xr = x + t * dim;
                float ss = rank == 0 ? 0.0f : c->acc[t];
                for (int64_t i = 0; i < dim; i++) ss += xr[i] * xr[i];
                c->acc[t] = ss;
            }
        tp_comm_barrier(c);
    }
    for (int64_t t = 0; t < n; t++) {
        const float *xr = x + t * dim;
        float *o = out + t * dim;
        float r = 1.0f / sqrtf(c->acc[t] / (float)full_dim + eps);
        for (int64_t i = 0; i < dim; i++) o[i] = w[i] * (xr[i] * r);
    }
    tp_comm_account(c, rank, t0, n);
}

#define KEEP(call)                                                                \
    do {                                                                          \
        if ((call) != 0 && rc == 0) rc = -1;                                      \
    } while (0)

static int rank_forward(TpEngine *te, TpRank *R) {
    const TpJob *j = &te->job;
    const ModelConfig *c = &te->m->cfg, *lc = &R->lm.cfg;
    const int64_t n = j->n, H = c->hidden, hd = c->head_dim;
    const int64_t qd = (int64_t)lc->n_heads * hd, kvd = (int64_t)lc->n_kv_heads * hd,
                  n_inter = lc->inter;
    RunState *s = &R->rs;
    KvCache *kv = &R->view;
    TpComm *cm = &te->comm;
    const int half = (int)hd / 2;
    int rc = 0;
    s->decode = j->decode;
    for (int64_t i = 0; i < n; i++)
        memcpy(s->x + i * H, te->m->embed + (int64_t)j->tok[i] * H, sizeof(float) * (size_t)H);
    for (int l = 0; l < c->n_layers; l++) {
        const TpLayer *L = &R->layers[l];
        /* attention block: q/k/v column-parallel over this rank's heads */
        rmsnorm_rows(s->xb, s->x, L->attn_norm, n, H, c->eps);
        KEEP(tp_linear_col(&L->q, s->xb, n, s->q, s->lin_scratch)); /* (n,H) -> (n,qd/tp) */
        KEEP(tp_linear_col(&L->k, s->xb, n, s->k, s->lin_scratch)); /* (n,H) -> (n,kvd/tp) */
        KEEP(tp_linear_col(&L->v, s->xb, n, s->v, s->lin_scratch));
#pragma omp parallel for schedule(static) if (n > 64)
        for (int64_t i = 0; i < n; i++) {
            const float *cs = R->lm.rope_cos + j->pos[i] * half, *sn = R->lm.rope_sin + j->pos[i] * half;
            fwd_rope_apply(s->q + i * qd, lc->n_heads, (int)hd, cs, sn);
            fwd_rope_apply(s->k + i * kvd, lc->n_kv_heads, (int)hd, cs, sn);
            kv_write_token(kv, l, j->seq[i], j->pos[i], s->k + i * kvd, s->v + i * kvd, s->decode);
        }
        for (int64_t i0 = 0; i0 < n;) {
            int64_t i1 = i0 + 1;
            while (i1 < n && j->seq[i1] == j->seq[i0]) i1++;
            fwd_attention_run(&R->lm, kv, s, l, j->seq[i0], j->pos, i0, i1);
            i0 = i1;
        }
        const float *ao = s->att;
        if (L->attn_sub_norm) {
            rmsnorm_chain(cm, R->rank, s->xb, s->att, L->attn_sub_norm, n, qd,
                          (int64_t)c->n_heads * hd, c->eps);
            ao = s->xb;
        }
        /* o row-parallel: (n,qd/tp) @ Wo[:, cols]^T -> (n,H), summed over ranks */
        KEEP(tp_linear_row(&L->o, cm, R->rank, ao, n, s->hout, &R->scr, s->lin_scratch));
        for (int64_t i = 0; i < n * H; i++) s->x[i] += s->hout[i];

        /* MLP block: gate/up column-parallel over inter, down row-parallel */
        rmsnorm_rows(s->xb, s->x, L->ffn_norm, n, H, c->eps);
        KEEP(tp_linear_col(&L->gate, s->xb, n, s->hb, s->lin_scratch)); /* (n,H) -> (n,inter/tp) */
        KEEP(tp_linear_col(&L->up, s->xb, n, s->hb2, s->lin_scratch));
        fwd_glu(c->act, s->hb, s->hb2, n * n_inter); /* hb = act(gate) * up */
        const float *mi = s->hb;
        if (L->ffn_sub_norm) {
            rmsnorm_chain(cm, R->rank, s->hb2, s->hb, L->ffn_sub_norm, n, n_inter, c->inter, c->eps);
            mi = s->hb2;
        }
        KEEP(tp_linear_row(&L->down, cm, R->rank, mi, n, s->hout, &R->scr, s->lin_scratch));
        for (int64_t i = 0; i < n * H; i++) s->x[i] += s->hout[i];
    }
    if (!j->logits) return rc;
    /* final norm (replicated) + this rank's vocab rows of lm_head */
    int64_t nl = j->logit_idx ? j->n_logits : n, vl = R->v1 - R->v0;
    for (int64_t k = 0; k < nl; k++) {
        int64_t i = j->logit_idx ? j->logit_idx[k] : k;
        memcpy(s->hout + k * H, s->x + i * H, sizeof(float) * (size_t)H);
    }
    rmsnorm_rows(s->xb, s->hout, te->m->final_norm, nl, H, c->eps);
    KEEP(tp_linear_col(&R->lm_head, s->xb, nl, R->logits, s->lin_scratch)); /* (nl,H) -> (nl,V/tp) */
    for (int64_t k = 0; k < nl; k++)
        memcpy(j->logits + k * c->vocab + R->v0, R->logits + k * vl, sizeof(float) * (size_t)vl);
    return rc;
}

static void rank_run(TpEngine *te, TpRank *R) {
    R->rc = rank_forward(te, R);
    if (R->rc) snprintf(R->err, sizeof R->err, "%s", err_msg());
}

static void *worker_main(void *arg) {
    TpRank *R = arg;
    TpEngine *te = R->te;
    omp_set_num_threads(te->omp_per_rank);
    int64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&te->mu);
        while (te->gen == seen && !te->quit) pthread_cond_wait(&te->cv_go, &te->mu);
        seen = te->gen;
        int quit = te->quit;
        pthread_mutex_unlock(&te->mu);
        if (quit) break;
        rank_run(te, R);
        pthread_mutex_lock(&te->mu);
        if (--te->pending == 0) pthread_cond_signal(&te->cv_done);
        pthread_mutex_unlock(&te->mu);
    }
    return NULL;
}

/* The forward hook: validation, KV reservation and RoPE tables on the caller
 * (the single writer of shared state), then every rank runs the job. */
static int tp_forward(void *ctx, const Model *m, KvCache *kv, RunState *s, const int *tok,
                      const int *seq, const int64_t *pos, int64_t n, const int64_t *logit_idx,
                      int64_t n_logits, float *logits) {
    TpEngine *te = ctx;
    const ModelConfig *c = &m->cfg;
    if (m != te->m || kv != &te->e->kv)
        return err_set("forward: this run state belongs to a tp = %d engine of another model/cache",
                       te->tp);
    if (s->dump) return err_set("--dump-layers is not available with --tp %d (use --tp 1)", te->tp);
    if (n > s->max_tok) return err_set("forward: %lld tokens but the run state holds %lld",
                                       (long long)n, (long long)s->max_tok);
    if (n == 0) return 0;
    double t0 = time_now();
    int64_t max_pos = 0;
    if (fwd_prepare_tokens(m, kv, tok, seq, pos, n, &max_pos) != 0) return -1;
    if (fwd_rope_ensure(te->m, max_pos + 1) != 0) return -1;
    for (int r = 0; r < te->tp; r++) {
        TpRank *R = &te->ranks[r];
        if (fwd_ensure_ctx(&R->rs, max_pos + 1, c->head_dim) != 0) return -1;
        R->lm.rope_cos = te->m->rope_cos;
        R->lm.rope_sin = te->m->rope_sin;
        R->lm.rope_len = te->m->rope_len;
        KvCache *src = r == 0 ? kv : &R->own;
        if (r > 0 && memcmp(&R->own.policy, &kv->policy, sizeof kv->policy) != 0 &&
            kv_set_policy(&R->own, &kv->policy) != 0)
            return err_prefix("tp rank %d: ", r);
        /* the rank's pools with the shared block tables (one allocator for all ranks) */
        R->view = *src;
        R->view.seqs = kv->seqs;
        R->view.n_seqs = kv->n_seqs;
        R->view.seq_cap = kv->seq_cap;
        R->view.free_list = kv->free_list;
        R->view.n_free = kv->n_free;
    }
    te->job = (TpJob){tok, seq, pos, n, n_logits, logit_idx, logits, s->decode};
    pthread_mutex_lock(&te->mu);
    te->pending = te->tp - 1;
    te->gen++;
    pthread_cond_broadcast(&te->cv_go);
    pthread_mutex_unlock(&te->mu);
    int saved = omp_get_max_threads();
    omp_set_num_threads(te->omp_per_rank);
    rank_run(te, &te->ranks[0]);
    omp_set_num_threads(saved);
    pthread_mutex_lock(&te->mu);
    while (te->pending > 0) pthread_cond_wait(&te->cv_done, &te->mu);
    pthread_mutex_unlock(&te->mu);
    for (int r = 0; r < te->tp; r++)
        if (te->ranks[r].rc) return err_set("tp rank %d: %s", r, te->ranks[r].err);
    for (int64_t i = 0; i < n; i++) {
        KvSeq *sq = &kv->seqs[seq[i]];
        if (pos[i] + 1 > sq->len) sq->len = pos[i] + 1;
    }
    te->tokens += n;
    te->forwards++;
    te->forward_seconds += time_now() - t0;
    return 0;
}

/* ---- open / close ---------------------------------------------------------- */

static void layer_free(TpLayer *L) {
    TpLinear *ls[] = LAYER_LINEARS(L);
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) tp_linear_free(ls[i]);
}

static void te_destroy(TpEngine *te) {
    if (te->sync_ok) {
        pthread_mutex_lock(&te->mu);
        te->quit = 1;
        pthread_cond_broadcast(&te->cv_go);
        pthread_mutex_unlock(&te->mu);
        for (int r = 1; r < te->tp; r++)
            if (te->ranks[r].started) pthread_join(te->ranks[r].th, NULL);
        pthread_mutex_destroy(&te->mu);
        pthread_cond_destroy(&te->cv_go);
        pthread_cond_destroy(&te->cv_done);
    }
    for (int r = 0; te->ranks && r < te->tp; r++) {
        TpRank *R = &te->ranks[r];
        for (int l = 0; R->layers && l < te->m->cfg.n_layers; l++) layer_free(&R->layers[l]);
        free(R->layers);
        tp_linear_free(&R->lm_head);
        if (r > 0) kv_free(&R->own);
        runstate_free(&R->rs);
        tp_scratch_free(&R->scr);
        mem_free(R->logits);
    }
    free(te->ranks);
    tp_comm_free(&te->comm);
    free(te);
}

static int rank_init(TpEngine *te, int r, const EngineOpts *o, int bs) {
    const Model *m = te->m;
    const ModelConfig *c = &m->cfg;
    const int tp = te->tp;
    TpRank *R = &te->ranks[r];
    R->te = te;
    R->rank = r;
    R->lm.cfg = *c;
    R->lm.cfg.n_heads = c->n_heads / tp;
    R->lm.cfg.n_kv_heads = c->n_kv_heads / tp;
    R->lm.cfg.inter = c->inter / tp;
    const int64_t hd = c->head_dim;
    int64_t h0, h1, k0, k1, i0, i1;
    tp_range(c->n_heads, tp, r, &h0, &h1);
    tp_range(c->n_kv_heads, tp, r, &k0, &k1);
    tp_range(c->inter, tp, r, &i0, &i1);
    tp_range(c->vocab, tp, r, &R->v0, &R->v1);
    R->layers = xcalloc((size_t)c->n_layers, sizeof(TpLayer));
    for (int l = 0; l < c->n_layers; l++) {
        const Layer *F = &m->layers[l];
        TpLayer *L = &R->layers[l];
        L->attn_norm = F->attn_norm;
        L->ffn_norm = F->ffn_norm;
        L->attn_sub_norm = F->attn_sub_norm ? F->attn_sub_norm + h0 * hd : NULL;
        L->ffn_sub_norm = F->ffn_sub_norm ? F->ffn_sub_norm + i0 : NULL;
        if (tp_shard_linear(&F->q, TP_SPLIT_ROWS, h0 * hd, h1 * hd, &L->q) != 0 ||
            tp_shard_linear(&F->k, TP_SPLIT_ROWS, k0 * hd, k1 * hd, &L->k) != 0 ||
            tp_shard_linear(&F->v, TP_SPLIT_ROWS, k0 * hd, k1 * hd, &L->v) != 0 ||
            tp_shard_linear(&F->o, TP_SPLIT_COLS, h0 * hd, h1 * hd, &L->o) != 0 ||
            tp_shard_linear(&F->gate, TP_SPLIT_ROWS, i0, i1, &L->gate) != 0 ||
            tp_shard_linear(&F->up, TP_SPLIT_ROWS, i0, i1, &L->up) != 0 ||
            tp_shard_linear(&F->down, TP_SPLIT_COLS, i0, i1, &L->down) != 0)
            return err_prefix("tp rank %d, layer %d: ", r, l);
        if (tp_linear_reserve(&L->o, o->max_tok, &R->scr) != 0 ||
            tp_linear_reserve(&L->down, o->max_tok, &R->scr) != 0)
            return -1;
    }
    if (tp_shard_linear(&m->lm_head, TP_SPLIT_ROWS, R->v0, R->v1, &R->lm_head) != 0)
        return err_prefix("tp rank %d: ", r);
    R->logits = mem_alloc(sizeof(float) * (size_t)(o->max_tok * (R->v1 - R->v0)), "tp logits");
    if (!R->logits) return -1;
    if (r > 0 && kv_init(&R->own, c->n_layers, R->lm.cfg.n_kv_heads, c->head_dim, bs,
                         (int)o->n_blocks) != 0)
        return err_prefix("tp rank %d: ", r);
    return runstate_init(&R->rs, &R->lm, o->max_tok);
}

int tp_engine_open(Engine *e, Model *m, const EngineOpts *o, int tp) {
    if (tp == 1) return engine_open(e, m, o);
    if (o->device == ENGINE_CUDA) return cuda_engine_open_tp(e, m, o, tp); /* one rank per GPU, NCCL */
    memset(e, 0, sizeof *e);
    if (tp < 1 || tp > TP_MAX_RANKS)
        return err_set("--tp %d: the TP degree must be between 1 and %d", tp, TP_MAX_RANKS);
    if (tp_plan_check(&m->cfg, tp, m->path ? m->path : "(unnamed)") != 0) return -1;
    int bs = o->block_size > 0 ? o->block_size : 16;
    if (o->n_blocks < 1 || o->n_blocks > (int64_t)1 << 30)
        return err_set("KV cache: %lld blocks is out of range", (long long)o->n_blocks);
    EngineOpts eo = *o;
    if (eo.max_tok <= 0) eo.max_tok = 256;
    /* engine_init's check (it had been skipped here: a pool over the budget opened): the
     * ranks share this process, so their KV pages together are one model's pool, and
     * they add their shards (one more copy of the linears and the LM head) and each its
     * run state and logits slice (the loaded model is resident already, counted as used) */
    const size_t shards = model_layer_linear_bytes(m) + linear_bytes(&m->lm_head);
    const int64_t pool = eo.n_blocks * bs;
    const size_t ranks = preflight_tp_ranks_bytes(&m->cfg, tp, shards, eo.max_tok, eo.max_ctx, pool);
    char rep[512];
    if (preflight_check_ctx(&m->cfg, 0, ranks, pool, eo.max_ctx, eo.max_tok, bs, rep, sizeof rep) != 0)
        return err_prefix("--tp %d: ", tp);
    TpEngine *te = xcalloc(1, sizeof *te);
    te->tp = tp;
    te->m = m;
    te->e = e;
    int omp = omp_get_max_threads() / tp;
    te->omp_per_rank = omp > 0 ? omp : 1;
    te->ranks = xcalloc((size_t)tp, sizeof(TpRank));
    e->m = m;
    /* the front cache: block tables for all ranks + rank 0's K/V */
    if (kv_init(&e->kv, m->cfg.n_layers, m->cfg.n_kv_heads / tp, m->cfg.head_dim, bs,
                (int)eo.n_blocks) != 0) {
        free(te->ranks);
        free(te);
        return -1;
    }
    /* the policy from the start (EngineOpts.kv) on the front cache; the ranks take it at their first step */
    int rc = o->kv ? kv_set_policy(&e->kv, o->kv) : 0;
    if (rc == 0) rc = tp_comm_init(&te->comm, tp, eo.max_tok * (int64_t)m->cfg.hidden);
    for (int r = 0; r < tp && rc == 0; r++) rc = rank_init(te, r, &eo, bs);
    if (rc == 0) {
        if (pthread_mutex_init(&te->mu, NULL) != 0 || pthread_cond_init(&te->cv_go, NULL) != 0 ||
            pthread_cond_init(&te->cv_done, NULL) != 0)
            rc = err_set("tp: could not create the dispatch mutex/condition variables");
        else
            te->sync_ok = 1;
    }
    for (int r = 1; r < tp && rc == 0; r++) {
        if (pthread_create(&te->ranks[r].th, NULL, worker_main, &te->ranks[r]) != 0)
            rc = err_set("tp: could not start the thread of rank %d", r);
        else
            te->ranks[r].started = 1;
    }
    if (rc != 0) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", err_msg());
        te_destroy(te);
        kv_free(&e->kv);
        memset(e, 0, sizeof *e);
        return err_set("%s", msg);
    }
    /* the front run state: no buffers, only the hook (eval_ppl and
     * engine_generate read max_tok and set decode) */
    e->rs.max_tok = eo.max_tok;
    e->rs.hook = tp_forward;
    e->rs.hook_ctx = te;
    return 0;
}

int tp_engine_degree(const Engine *e) {
    return e->rs.hook == tp_forward ? ((const TpEngine *)e->rs.hook_ctx)->tp : 1;
}

void tp_engine_close(Engine *e) {
    if (e->rs.hook != tp_forward) {
        engine_free(e);
        return;
    }
    te_destroy(e->rs.hook_ctx);
    kv_free(&e->kv);
    memset(e, 0, sizeof *e);
}

static void full_bytes(const Model *m, TpStats *st) {
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const Layer *L = &m->layers[l];
        const Linear *ls[] = LAYER_LINEARS(L);
        for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) {
            st->full_layer_bytes += linear_bytes(ls[i]);
            st->full_layer_weights += ls[i]->out * ls[i]->in;
            st->full_layer_payload_bits += tp_linear_payload_bits(ls[i]);
        }
        st->replicated_bytes += sizeof(float) * (size_t)(2 * m->cfg.hidden);
        if (L->attn_sub_norm)
            st->replicated_bytes += sizeof(float) * (size_t)m->cfg.n_heads * (size_t)m->cfg.head_dim;
        if (L->ffn_sub_norm) st->replicated_bytes += sizeof(float) * (size_t)m->cfg.inter;
    }
    st->replicated_bytes += sizeof(float) * (size_t)m->cfg.vocab * (size_t)m->cfg.hidden +
                            sizeof(float) * (size_t)m->cfg.hidden;
}

int tp_engine_stats(const Engine *e, TpStats *st) {
    memset(st, 0, sizeof *st);
    full_bytes(e->m, st);
    const KvCache *kv = &e->kv;
    size_t kvb = kv_bytes_needed(kv->n_layers, kv->n_kv_heads, kv->head_dim, kv->block_size,
                                 kv->n_blocks);
    CudaEngineInfo ci;
    if (e->rs.hook != tp_forward && cuda_engine_is(e) && cuda_engine_info(e, &ci) == 0 && ci.tp > 1) {
        const int n = (int)(sizeof ci.rank_layer_bytes / sizeof ci.rank_layer_bytes[0]);
        st->tp = ci.tp < n ? ci.tp : n;
        st->gpu_ranks = 1;
        for (int r = 0; r < st->tp; r++) {
            st->rank[r].layer_bytes = ci.rank_layer_bytes[r];
            st->rank[r].layer_weights = st->rank[r].layer_payload_bits = -1;
            st->rank[r].kv_bytes = ci.kv_bytes; /* (rank 0's pool: every rank's has its shape) */
        }
        return 0;
    }
    if (e->rs.hook != tp_forward) {
        st->tp = 1;
        st->rank[0].layer_bytes = st->full_layer_bytes;
        st->rank[0].layer_weights = st->full_layer_weights;
        st->rank[0].layer_payload_bits = st->full_layer_payload_bits;
        st->rank[0].lm_head_bytes = linear_bytes(&e->m->lm_head);
        st->rank[0].kv_bytes = kvb;
        return 0;
    }
    const TpEngine *te = e->rs.hook_ctx;
    st->tp = te->tp;
    st->tokens = te->tokens;
    st->forwards = te->forwards;
    st->forward_seconds = te->forward_seconds;
    for (int r = 0; r < te->tp; r++) {
        const TpRank *R = &te->ranks[r];
        TpRankStats *rs = &st->rank[r];
        for (int l = 0; l < e->m->cfg.n_layers; l++) {
            const TpLayer *L = &R->layers[l];
            const TpLinear *ls[] = LAYER_LINEARS(L);
            for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) {
                rs->layer_bytes += tp_linear_bytes(ls[i]);
                rs->layer_weights += ls[i]->out * ls[i]->in;
                rs->layer_payload_bits += tp_shard_payload_bits(ls[i]);
                rs->dup_scale_bits += ls[i]->dup_scales * tp_shard_scale_bits(ls[i]);
            }
        }
        rs->lm_head_bytes = tp_linear_bytes(&R->lm_head);
        rs->kv_bytes = kvb; /* every rank's pool has the front's geometry */
        rs->comm_seconds = te->comm.stats[r].seconds;
        rs->comm_calls = te->comm.stats[r].calls;
        rs->comm_elems = te->comm.stats[r].elems;
    }
    return 0;
}

void tp_engine_reset_stats(Engine *e) {
    if (e->rs.hook != tp_forward) return;
    TpEngine *te = e->rs.hook_ctx;
    te->tokens = te->forwards = 0;
    te->forward_seconds = 0;
    memset(te->comm.stats, 0, sizeof(TpCommStats) * (size_t)te->tp);
}
