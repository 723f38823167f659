#include "runtime/engine.h"
#include "core/err.h"
#include "core/mem.h"
#include "runtime/cuda_engine.h" /* engine_open */
#include "runtime/preflight.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int engine_init(Engine *e, Model *m, const EngineOpts *o) {
    memset(e, 0, sizeof *e);
    e->m = m;
    int bs = o->block_size > 0 ? o->block_size : 16;
    if (o->n_blocks < 1 || o->n_blocks > (int64_t)1 << 30)
        return err_set("KV cache: %lld blocks is out of range", (long long)o->n_blocks);
    /* refuse before allocating, with needed vs available and what to change; the
     * weights are resident already, so they count as used, not needed */
    char rep[512];
    int64_t mt = o->max_tok > 0 ? o->max_tok : 256;
    if (preflight_check_ctx(&m->cfg, 0, 0, o->n_blocks * bs, o->max_ctx, mt, bs, rep, sizeof rep) != 0) return -1;
    if (kv_init(&e->kv, m->cfg.n_layers, m->cfg.n_kv_heads, m->cfg.head_dim, bs,
                (int)o->n_blocks) != 0)
        return -1;
    if ((o->kv && kv_set_policy(&e->kv, o->kv) != 0) ||
        runstate_init(&e->rs, m, o->max_tok > 0 ? o->max_tok : 256) != 0) {
        kv_free(&e->kv);
        return -1;
    }
    return 0;
}

void engine_free(Engine *e) {
    if (e->backend_free) {
        e->backend_free(e);
        return;
    }
    runstate_free(&e->rs);
    kv_free(&e->kv);
}

int engine_device_parse(const char *s) {
    if (strcmp(s, "cpu") == 0) return ENGINE_CPU;
    if (strcmp(s, "cuda") == 0) return ENGINE_CUDA;
    return -1;
}

int engine_open(Engine *e, Model *m, const EngineOpts *o) {
    if (o->device == ENGINE_CUDA) return cuda_engine_open(e, m, o);
    return engine_init(e, m, o);
}

int64_t argmax_f32(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Greedy's token from a sequence's logits row into *id; an error where the row
 * holds a non-finite logit (an overflowed forward: the argmax of all-inf logits
 * had been token 0 at every step, printed as a result). */
static int greedy_id(const float *x, int64_t V, int s, int64_t step, int32_t *id) {
    int64_t best = 0; /* (argmax_f32's first maximum, in the same pass as the check) */
    for (int64_t i = 0; i < V; i++) {
        if (!isfinite(x[i]))
            return err_set("generate: sequence %d, token %lld: logit %lld is %g (the forward produced "
                           "non-finite logits)", s, (long long)step, (long long)i, x[i]);
        if (x[i] > x[best]) best = i;
    }
    *id = (int32_t)best;
    return 0;
}

int engine_prefill(Engine *e, int sid, const int32_t *prompt, int64_t len, float *logits) {
    if (len < 1) return err_set("generate: empty prompt");
    const int64_t cap = e->rs.max_tok;
    const int64_t n = len < cap ? len : cap;
    int *tok = xmalloc(sizeof(int) * (size_t)n), *seq = xmalloc(sizeof(int) * (size_t)n);
    int64_t *pos = xmalloc(sizeof(int64_t) * (size_t)n);
    int rc = 0;
    for (int64_t p0 = 0; p0 < len && rc == 0; p0 += cap) {
        int64_t cnt = len - p0 < cap ? len - p0 : cap;
        for (int64_t i = 0; i < cnt; i++) {
            tok[i] = prompt[p0 + i];
            seq[i] = sid;
            pos[i] = p0 + i;
        }
        int last = p0 + cnt == len;
        int64_t li = cnt - 1;
        rc = forward(e->m, &e->kv, &e->rs, tok, seq, pos, cnt, &li, 1, last ? logits : NULL);
    }
    free(tok);
    free(seq);
    free(pos);
    return rc;
}

int engine_generate(Engine *e, const int32_t *const *prompts, const int64_t *prompt_len, int n_seq,
                    int64_t max_new, int32_t **out) {
    const int64_t V = e->m->cfg.vocab, cap = e->rs.max_tok;
    if (n_seq > cap) return err_set("generate: batch %d exceeds the run state (%lld tokens)", n_seq,
                                    (long long)cap);
    int rc = 0;
    int *seq = xmalloc(sizeof(int) * (size_t)n_seq);
    int *ids = xmalloc(sizeof(int) * (size_t)n_seq);
    int *tok = xmalloc(sizeof(int) * (size_t)n_seq);
    int64_t *pos = xmalloc(sizeof(int64_t) * (size_t)n_seq);
    int64_t *lidx = xmalloc(sizeof(int64_t) * (size_t)n_seq);
    float *logits = mem_alloc(sizeof(float) * (size_t)(n_seq * V), "logits");
    if (!logits) rc = -1;
    for (int s = 0; s < n_seq; s++) ids[s] = kv_seq_new(&e->kv);
    /* prefill each prompt; keep its last logits */
    for (int s = 0; s < n_seq && rc == 0; s++)
        rc = engine_prefill(e, ids[s], prompts[s], prompt_len[s], logits + s * V);
    /* batched greedy decode; a backend that can (the GPU) takes the argmax where
     * the logits are and only the token ids come back (RunState.argmax_out) */
    int32_t *next = NULL;
    if (rc == 0 && e->rs.argmax_capable) {
        next = xmalloc(sizeof(int32_t) * (size_t)n_seq);
        for (int s = 0; s < n_seq && rc == 0; s++) rc = greedy_id(logits + s * V, V, s, 0, &next[s]);
    }
    /* on one GPU the decode steps are chained (cuda_engine_decode_chain): each
     * step's tokens are the last one's argmax on the device, and the next step
     * is enqueued before the host waits for the ids */
    if (rc == 0 && next && max_new > 1 && cuda_engine_chain_ok(e)) {
        int32_t *cids = xmalloc(sizeof(int32_t) * (size_t)n_seq * (size_t)(max_new - 1));
        for (int s = 0; s < n_seq; s++) {
            out[s][0] = next[s];
            seq[s] = ids[s];
            pos[s] = prompt_len[s];
        }
        rc = cuda_engine_decode_chain(e, seq, pos, next, n_seq, max_new - 1, cids, NULL);
        for (int64_t t = 0; t + 1 < max_new && rc == 0; t++)
            for (int s = 0; s < n_seq; s++) out[s][t + 1] = cids[t * n_seq + s];
        free(cids);
    } else {
        e->rs.decode = 1;
        for (int64_t step = 0; step < max_new && rc == 0; step++) {
            for (int s = 0; s < n_seq && rc == 0; s++) {
                if (next) out[s][step] = next[s];
                else rc = greedy_id(logits + s * V, V, s, step, &out[s][step]);
                tok[s] = out[s][step];
                seq[s] = ids[s];
                pos[s] = prompt_len[s] + step;
                lidx[s] = s;
            }
            if (rc == 0 && step + 1 < max_new) {
                e->rs.argmax_out = next;
                rc = forward(e->m, &e->kv, &e->rs, tok, seq, pos, n_seq, lidx, n_seq,
                             next ? NULL : logits);
                e->rs.argmax_out = NULL;
            }
        }
    }
    e->rs.decode = 0;
    free(next);
    for (int s = 0; s < n_seq; s++) kv_seq_free(&e->kv, ids[s]);
    mem_free(logits);
    free(seq);
    free(ids);
    free(tok);
    free(pos);
    free(lidx);
    return rc;
}
