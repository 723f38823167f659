/* Perplexity over non-overlapping windows (GPTQ protocol): window w is
 * tokens[w*T, (w+1)*T); positions 0..T-2 predict 1..T-1; no BOS; the partial
 * tail is dropped; ppl = exp(sum nll / count).  Windows are batched into one
 * forward call (several KV sequences) so the linears run as GEMMs. */
#ifndef TL_PPL_H
#define TL_PPL_H

#include "runtime/engine.h"

/* Called once per window with its logits (T, vocab), row = position; rows
 * r0..T-2 are the scored predictions (r0 = 0, or T/2-1 under kv_split; rows
 * before r0 hold no data then). */
typedef int (*ppl_logits_fn)(void *ctx, int64_t window, const float *logits, const int32_t *tokens,
                             int T, int vocab, int r0);

typedef struct {
    int window;            /* T, default 256 */
    int64_t first_window;  /* default 0 */
    int64_t max_windows;   /* 0 = all */
    ppl_logits_fn on_logits;
    void *ctx;
    float *nll_out;        /* optional: per-token nll of the scored positions, in order */
    int progress;
    /* KV-policy protocol: each window's first half (T/2 tokens) is prefilled, the
     * rest fed token by token through the decode path (batched over windows);
     * only predictions of tokens T/2..T-1 are scored (T - T/2 per window). */
    int kv_split;
} PplOpts;

typedef struct {
    double nll_sum, ppl;
    int64_t n_pred, n_windows;
    double seconds;         /* wall time of the whole evaluation (scoring and callbacks too) */
    double forward_seconds; /* of it, inside forward() */
    int64_t fed_tokens;     /* tokens the forward calls took: T a window, T - 1 under kv_split */
    double tok_per_s;       /* fed_tokens / forward_seconds */
    double decode_seconds;  /* kv_split: time in the decode steps' forward calls */
    int64_t decode_tokens;
} PplResult;

/* Scored predictions per window: T-1, or T - T/2 under kv_split. */
int ppl_scored_per_window(int T, int kv_split);

/* Number of windows eval_ppl will run for these options. */
int64_t ppl_window_count(int64_t n_tok, const PplOpts *o);
int eval_ppl(Engine *e, const int32_t *tok, int64_t n_tok, const PplOpts *o, PplResult *r);

/* -log softmax(logits)[target] in double, as torch's log_softmax(.double()). */
double nll_of(const float *logits, int64_t vocab, int32_t target);

#endif
