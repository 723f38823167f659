#include "eval/ppl.h"
#include "core/err.h"
#include "core/mem.h"
#include "core/timer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double nll_of(const float *logits, int64_t vocab, int32_t target) {
    float mx = logits[0];
    for (int64_t j = 1; j < vocab; j++) mx = logits[j] > mx ? logits[j] : mx;
    double sum = 0.0;
    for (int64_t j = 0; j < vocab; j++) sum += exp((double)logits[j] - (double)mx);
    return log(sum) + (double)mx - (double)logits[target];
}

int ppl_scored_per_window(int T, int kv_split) { return kv_split ? T - T / 2 : T - 1; }

int64_t ppl_window_count(int64_t n_tok, const PplOpts *o) {
    int64_t T = o->window > 0 ? o->window : 256;
    int64_t nw = n_tok / T - o->first_window;
    if (nw < 0) nw = 0;
    if (o->max_windows > 0 && nw > o->max_windows) nw = o->max_windows;
    return nw;
}

int eval_ppl(Engine *e, const int32_t *tok, int64_t n_tok, const PplOpts *o, PplResult *r) {
    memset(r, 0, sizeof *r);
    const int T = o->window > 0 ? o->window : 256;
    const int V = e->m->cfg.vocab;
    if (T < 2) return err_set("window must be at least 2 tokens");
    int64_t nw = ppl_window_count(n_tok, o);
    if (nw == 0)
        return err_set("no complete window of %d tokens (after skipping %lld) in %lld tokens", T,
                       (long long)o->first_window, (long long)n_tok);
    int64_t B = e->rs.max_tok / T; /* windows per forward call */
    if (B > 4096) B = 4096;
    if (B < 1) return err_set("window %d is longer than the run state (%lld tokens)", T,
                              (long long)e->rs.max_tok);
    float *logits = mem_alloc(sizeof(float) * (size_t)(B * T) * (size_t)V, "logits");
    if (!logits) return -1;
    int *seq = xmalloc(sizeof(int) * (size_t)(B * T));
    int *ids = xmalloc(sizeof(int) * (size_t)(B * T));
    int64_t *pos = xmalloc(sizeof(int64_t) * (size_t)(B * T));
    double *wnll = xmalloc(sizeof(double) * (size_t)(B * T));
    int rc = 0;
    Progress pr;
    progress_init(&pr, "ppl windows", nw);
    if (!o->progress) pr.enabled = 0;
    double t0 = time_now(), fwd = 0; /* fwd: seconds inside forward() */
    const int r0 = o->kv_split ? T / 2 - 1 : 0; /* first scored row */
    const int per_w = T - 1 - r0;
    for (int64_t w0 = 0; w0 < nw && rc == 0; w0 += B) {
        int64_t nb = nw - w0 < B ? nw - w0 : B;
        kv_reset(&e->kv);
        int sids[4096];
        for (int64_t b = 0; b < nb; b++) {
            sids[b] = kv_seq_new(&e->kv);
            for (int t = 0; t < T; t++) {
                ids[b * T + t] = tok[(o->first_window + w0 + b) * T + t];
                seq[b * T + t] = sids[b];
                pos[b * T + t] = t;
            }
        }
        if (!o->kv_split) {
            e->rs.decode = 0;
            double tf = time_now();
            rc = forward(e->m, &e->kv, &e->rs, ids, seq, pos, nb * T, NULL, 0, logits);
            fwd += time_now() - tf;
            r->fed_tokens += nb * T;
        } else {
            /* prefill the first halves (all windows in one call), keeping row r0's logits */
            int h = T / 2;
            int *pid = xmalloc(sizeof(int) * (size_t)(nb * h));
            int *psq = xmalloc(sizeof(int) * (size_t)(nb * h));
            int64_t *pps = xmalloc(sizeof(int64_t) * (size_t)(nb * h));
            int64_t *lidx = xmalloc(sizeof(int64_t) * (size_t)nb);
            float *lg = mem_alloc(sizeof(float) * (size_t)nb * (size_t)V, "logits");
            for (int64_t b = 0; b < nb; b++) {
                for (int t = 0; t < h; t++) {
                    pid[b * h + t] = ids[b * T + t];
                    psq[b * h + t] = sids[b];
                    pps[b * h + t] = t;
                }
                lidx[b] = b * h + h - 1;
            }
            e->rs.decode = 0;
            double tf = time_now();
            rc = lg ? forward(e->m, &e->kv, &e->rs, pid, psq, pps, nb * h, lidx, nb, lg) : -1;
            fwd += time_now() - tf;
            r->fed_tokens += nb * h;
            for (int64_t b = 0; b < nb && rc == 0; b++)
                memcpy(logits + ((size_t)b * T + (size_t)r0) * V, lg + b * V, sizeof(float) * V);
            /* then one decode step per position, batched over the windows */
            e->rs.decode = 1;
            for (int t = h; t < T - 1 && rc == 0; t++) {
                for (int64_t b = 0; b < nb; b++) {
                    pid[b] = ids[b * T + t];
                    psq[b] = sids[b];
                    pps[b] = t;
                    lidx[b] = b;
                }
                double td = time_now();
                rc = forward(e->m, &e->kv, &e->rs, pid, psq, pps, nb, lidx, nb, lg);
                td = time_now() - td;
                fwd += td;
                r->decode_seconds += td;
                for (int64_t b = 0; b < nb && rc == 0; b++)
                    memcpy(logits + ((size_t)b * T + (size_t)t) * V, lg + b * V, sizeof(float) * V);
            }
            r->decode_tokens += nb * (T - 1 - h);
            r->fed_tokens += nb * (T - 1 - h);
            e->rs.decode = 0;
            mem_free(lg);
            free(pid);
            free(psq);
            free(pps);
            free(lidx);
        }
        if (rc) break;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < nb * T; i++) {
            int t = (int)(i % T);
            wnll[i] = t >= r0 && t < T - 1 ? nll_of(logits + i * V, V, ids[i + 1]) : 0.0;
        }
        for (int64_t b = 0; b < nb && rc == 0; b++) {
            for (int t = r0; t < T - 1; t++) {
                r->nll_sum += wnll[b * T + t];
                if (o->nll_out) o->nll_out[(w0 + b) * per_w + (t - r0)] = (float)wnll[b * T + t];
            }
            if (o->on_logits)
                rc = o->on_logits(o->ctx, o->first_window + w0 + b, logits + b * T * V, ids + b * T,
                                  T, V, r0);
        }
        r->n_pred += nb * per_w;
        progress_update(&pr, w0 + nb);
    }
    kv_reset(&e->kv);
    progress_done(&pr);
    r->n_windows = nw;
    r->seconds = time_now() - t0;
    r->forward_seconds = fwd;
    r->tok_per_s = fwd > 0 ? (double)r->fed_tokens / fwd : 0;
    r->ppl = r->n_pred ? exp(r->nll_sum / (double)r->n_pred) : NAN;
    mem_free(logits);
    free(seq);
    free(ids);
    free(pos);
    free(wnll);
    return rc;
}
