/* Serving latency and decode-step breakdown (contract in latency.h). */
#include "eval/latency.h"
#include "core/err.h"
#include "core/mem.h"
#include "core/timer.h"
#include "runtime/engine.h"
#include "runtime/linear.h"
#include "tp/tp_engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double latency_percentile(double *v, int64_t n, double q) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int64_t i = (int64_t)ceil(q * (double)n) - 1;
    return v[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

static double median(double *v, int n) { return latency_percentile(v, n, 0.5); }

/* All linears of a model in forward order: 7 per layer, then lm_head. */
static int model_linears(const Model *m, const Linear **out) {
    int k = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const Layer *L = &m->layers[l];
        const Linear *ls[LAYER_N_LINEARS] = LAYER_LINEARS(L);
        for (int i = 0; i < LAYER_N_LINEARS; i++) out[k++] = ls[i];
    }
    out[k++] = &m->lm_head;
    return k;
}

/* Median over `repeats` of the time of every linear of `lins` (filter: 1 =
 * packed ternary only in `ref`, the model whose kinds decide) on x (b, in). */
typedef struct {
    double all, ternary, act_quant;
} LinTimes;

static int time_linears(const Linear **lins, const Linear **kinds, int nl, int b, int repeats,
                        const float *x, float *y, void *scratch, int8_t *xq, float *sx,
                        LinTimes *out) {
    double *ta = xcalloc((size_t)repeats, sizeof(double)), *tt = xcalloc((size_t)repeats, sizeof(double)),
           *tq = xcalloc((size_t)repeats, sizeof(double));
    int rc = 0;
    for (int it = -1; it < repeats && rc == 0; it++) { /* it = -1: warm-up */
        double sa = 0, st = 0, sq = 0;
        for (int i = 0; i < nl && rc == 0; i++) {
            double t0 = time_now();
            rc = linear_forward(lins[i], x, b, y, scratch);
            double d = time_now() - t0;
            sa += d;
            if (kinds[i]->t && !kinds[i]->twin) st += d;
            if (lins[i]->act_int8) {
                t0 = time_now();
                act_quant_int8_ref(x, b, lins[i]->in, xq, sx);
                sq += time_now() - t0;
            }
        }
        if (it >= 0) {
            ta[it] = sa * 1e3;
            tt[it] = st * 1e3;
            tq[it] = sq * 1e3;
        }
    }
    if (rc == 0) {
        out->all = median(ta, repeats);
        out->ternary = median(tt, repeats);
        out->act_quant = median(tq, repeats);
    }
    free(ta);
    free(tt);
    free(tq);
    return rc;
}

/* signed, as other_ms and unpack_ms: a clamp at 0 had shown timing noise at a short
 * context as an attention that costs nothing */
double latency_attention_ms(double step_ms, double step_ctx1_ms) { return step_ms - step_ctx1_ms; }

int latency_measure(Model *m, const Model *twin, const int32_t *tok, int64_t n,
                    const LatencyOpts *o, LatencyResult *r) {
    memset(r, 0, sizeof *r);
    int B = o->batch > 0 ? o->batch : 1, P = o->prompt_len > 0 ? o->prompt_len : 128,
        G = o->gen_len > 0 ? o->gen_len : 32, W = o->warmup >= 0 ? o->warmup : 1,
        R = o->repeats > 0 ? o->repeats : 5;
    int64_t NR = o->n_requests > 0 ? o->n_requests : 4 * (int64_t)B;
    if (G < 2) return err_set("latency: gen_len %d: at least 2 output tokens are needed for TPOT", G);
    if (B > 4096) return err_set("latency: batch %d is larger than 4096", B);
    if (n <= P) return err_set("latency: %lld tokens cannot supply prompts of %d", (long long)n, P);
    if (twin && (twin->cfg.n_layers != m->cfg.n_layers || twin->cfg.hidden != m->cfg.hidden ||
                 twin->cfg.inter != m->cfg.inter))
        return err_set("latency: the dense twin has another configuration");
    const int64_t V = m->cfg.vocab;
    int64_t n_batches = (NR + B - 1) / B;
    Engine e;
    EngineOpts eo = {.max_tok = (int64_t)B * P, .block_size = 16, .kv = o->kv};
    eo.n_blocks = (int64_t)2 * B * ((P + G + 15) / 16 + 1);
    const int tp = o->tp > 1 ? o->tp : 1;
    if (tp_engine_open(&e, m, &eo, tp) != 0) return -1;
    if (o->kv && kv_set_policy(&e.kv, o->kv) != 0) {
        tp_engine_close(&e);
        return -1;
    }
    r->tp = tp_engine_degree(&e);
    r->kv_alloc_bytes = (double)kv_alloc_bytes(&e.kv) * r->tp / (double)(eo.n_blocks * eo.block_size);
    int64_t nt = (int64_t)B * P;
    int *ids = xmalloc(sizeof(int) * (size_t)nt), *seq = xmalloc(sizeof(int) * (size_t)nt);
    int *sids = xmalloc(sizeof(int) * (size_t)B);
    int64_t *pos = xmalloc(sizeof(int64_t) * (size_t)nt), *lidx = xmalloc(sizeof(int64_t) * (size_t)B);
    float *lg = mem_alloc(sizeof(float) * (size_t)(B * V), "logits");
    double *ttft = xcalloc((size_t)(n_batches * B), sizeof(double));
    double *tpot = xcalloc((size_t)(n_batches * B), sizeof(double));
    double *steps = xcalloc((size_t)(n_batches * (G - 1)), sizeof(double));
    int64_t n_req = 0, n_steps = 0;
    double wall = 0, t_pre = 0, t_dec = 0;
    int64_t out_tok = 0, pre_tok = 0, dec_tok = 0;
    int rc = lg ? 0 : -1;

    /* one batch: prefill + G-1 decode steps; returns its timings */
    for (int64_t bi = -W; bi < n_batches && rc == 0; bi++) {
        int count = bi < 0 ? B : (int)(NR - bi * B < B ? NR - bi * B : B);
        kv_reset(&e.kv);
        for (int b = 0; b < count; b++) {
            sids[b] = kv_seq_new(&e.kv);
            int64_t req = (bi < 0 ? 0 : bi * B) + b;
            int64_t start = (req * P) % (n - P);
            for (int t = 0; t < P; t++) {
                ids[b * P + t] = tok[start + t];
                seq[b * P + t] = sids[b];
                pos[b * P + t] = t;
            }
            lidx[b] = (int64_t)b * P + P - 1;
        }
        e.rs.decode = 0;
        double t0 = time_now();
        rc = forward(m, &e.kv, &e.rs, ids, seq, pos, (int64_t)count * P, lidx, count, lg);
        double t1 = time_now(), tl = t1;
        e.rs.decode = 1;
        for (int g = 1; g < G && rc == 0; g++) {
            for (int b = 0; b < count; b++) {
                ids[b] = (int)argmax_f32(lg + (int64_t)b * V, V);
                seq[b] = sids[b];
                pos[b] = P + g - 1;
                lidx[b] = b;
            }
            double s0 = time_now();
            rc = forward(m, &e.kv, &e.rs, ids, seq, pos, count, lidx, count, lg);
            tl = time_now();
            if (bi >= 0) steps[n_steps++] = (tl - s0) * 1e3;
        }
        if (rc == 0 && bi >= 0) {
            for (int b = 0; b < count; b++) {
                ttft[n_req] = (t1 - t0) * 1e3;
                tpot[n_req] = (tl - t1) * 1e3 / (G - 1);
                n_req++;
            }
            wall += tl - t0;
            t_pre += t1 - t0;
            t_dec += tl - t1;
            out_tok += (int64_t)count * G;
            pre_tok += (int64_t)count * P;
            dec_tok += (int64_t)count * (G - 1);
        }
    }
    if (rc == 0) {
        r->n_requests = n_req;
        r->ttft_ms_p50 = latency_percentile(ttft, n_req, 0.50);
        r->ttft_ms_p95 = latency_percentile(ttft, n_req, 0.95);
        r->ttft_ms_p99 = latency_percentile(ttft, n_req, 0.99);
        r->tpot_ms_p50 = latency_percentile(tpot, n_req, 0.50);
        r->tpot_ms_p95 = latency_percentile(tpot, n_req, 0.95);
        r->tpot_ms_p99 = latency_percentile(tpot, n_req, 0.99);
        r->step_ms_p50 = latency_percentile(steps, n_steps, 0.50);
        r->step_ms_p95 = latency_percentile(steps, n_steps, 0.95);
        r->step_ms_p99 = latency_percentile(steps, n_steps, 0.99);
        r->tok_s = wall > 0 ? (double)out_tok / wall : NAN;
        r->prefill_tok_s = t_pre > 0 ? (double)pre_tok / t_pre : NAN;
        r->decode_tok_s = t_dec > 0 ? (double)dec_tok / t_dec : NAN;
    }

    /* breakdown: a decode step of B tokens at context P (sequences of the last
     * batch, rewound to P each time) and at context 1 (fresh sequences) */
    double *ts = xcalloc((size_t)R, sizeof(double)), *t1s = xcalloc((size_t)R, sizeof(double));
    if (rc == 0) {
        kv_reset(&e.kv);
        for (int b = 0; b < B; b++) {
            sids[b] = kv_seq_new(&e.kv);
            for (int t = 0; t < P; t++) {
                ids[b * P + t] = tok[((int64_t)b * P) % (n - P) + t];
                seq[b * P + t] = sids[b];
                pos[b * P + t] = t;
            }
        }
        e.rs.decode = 0;
        rc = forward(m, &e.kv, &e.rs, ids, seq, pos, nt, NULL, 0, NULL);
        int *fresh = xmalloc(sizeof(int) * (size_t)B);
        for (int b = 0; b < B; b++) fresh[b] = kv_seq_new(&e.kv);
        e.rs.decode = 1;
        for (int it = -1; it < R && rc == 0; it++) {
            for (int b = 0; b < B; b++) {
                kv_seq_set_len(&e.kv, sids[b], P);
                ids[b] = tok[b % n];
                seq[b] = sids[b];
                pos[b] = P;
                lidx[b] = b;
            }
            double s0 = time_now();
            rc = forward(m, &e.kv, &e.rs, ids, seq, pos, B, lidx, B, lg);
            double d = time_now() - s0;
            for (int b = 0; b < B && rc == 0; b++) {
                kv_seq_set_len(&e.kv, fresh[b], 0);
                seq[b] = fresh[b];
                pos[b] = 0;
            }
            s0 = time_now();
            if (rc == 0) rc = forward(m, &e.kv, &e.rs, ids, seq, pos, B, lidx, B, lg);
            double d1 = time_now() - s0;
            if (it >= 0) {
                ts[it] = d * 1e3;
                t1s[it] = d1 * 1e3;
            }
        }
        free(fresh);
    }
    if (rc == 0) {
        r->step_ms = median(ts, R);
        r->step_ctx1_ms = median(t1s, R);
        r->attention_ms = latency_attention_ms(r->step_ms, r->step_ctx1_ms);
    }
    if (rc == 0 && tp > 1) { /* the tp engine's linears are shards: no unsharded split */
        r->linear_ms = r->ternary_ms = r->act_quant_ms = r->twin_ms = r->unpack_ms = r->unpack_share =
            r->other_ms = NAN;
    } else if (rc == 0) {
        int nl = 7 * m->cfg.n_layers + 1;
        const Linear **lm = xcalloc((size_t)nl, sizeof *lm), **lt = xcalloc((size_t)nl, sizeof *lt);
        model_linears(m, lm);
        int64_t wide = 0;
        for (int i = 0; i < nl; i++) {
            wide = lm[i]->in > wide ? lm[i]->in : wide;
            wide = lm[i]->out > wide ? lm[i]->out : wide;
        }
        float *x = mem_alloc(sizeof(float) * (size_t)(B * wide), "latency inputs");
        float *y = mem_alloc(sizeof(float) * (size_t)(B * wide), "latency outputs");
        void *scr = mem_alloc(linear_scratch_bytes(B, wide), "latency scratch");
        int8_t *xq = xmalloc((size_t)(B * wide));
        float *sx = xmalloc(sizeof(float) * (size_t)B);
        if (!x || !y || !scr) rc = -1;
        /* deterministic inputs in [-1, 1): timing does not depend on the values */
        uint64_t s = 0x9E3779B97F4A7C15ull;
        for (int64_t i = 0; rc == 0 && i < B * wide; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
        }
        LinTimes tp = {0}, tw = {0};
        if (rc == 0) rc = time_linears(lm, lm, nl, B, R, x, y, scr, xq, sx, &tp);
        r->linear_ms = tp.all;
        r->ternary_ms = tp.ternary;
        r->act_quant_ms = tp.act_quant;
        r->twin_ms = r->unpack_ms = r->unpack_share = NAN;
        if (rc == 0 && twin) {
            /* the twin's linears at the positions that are packed in m */
            model_linears(twin, lt);
            int k = 0;
            const Linear **sel = xcalloc((size_t)nl, sizeof *sel), **selk = xcalloc((size_t)nl, sizeof *selk);
            for (int i = 0; i < nl; i++)
                if (lm[i]->t && !lm[i]->twin) {
                    sel[k] = lt[i];
                    selk[k++] = lm[i];
                }
            if (k) rc = time_linears(sel, selk, k, B, R, x, y, scr, xq, sx, &tw);
            free(sel);
            free(selk);
            if (rc == 0) {
                r->twin_ms = k ? tw.all : 0.0;
                r->unpack_ms = r->ternary_ms - r->twin_ms;
                r->unpack_share = r->step_ms > 0 ? r->unpack_ms / r->step_ms : NAN;
            }
        }
        r->other_ms = r->step_ms - r->linear_ms - r->attention_ms;
        mem_free(x);
        mem_free(y);
        mem_free(scr);
        free(xq);
        free(sx);
        free(lm);
        free(lt);
    }
    free(ts);
    free(t1s);
    free(ids);
    free(seq);
    free(sids);
    free(pos);
    free(lidx);
    free(ttft);
    free(tpot);
    free(steps);
    mem_free(lg);
    tp_engine_close(&e);
    return rc;
}
