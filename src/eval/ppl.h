/* Perplexity over non-overlapping windows (GPTQ protocol): window w is
 * tokens[w*T, (w+1)*T); positions 0..T-2 predict 1..T-1; no BOS; the partial
 * tail is dropped; ppl = exp(sum nll / count).  Windows are batched into one
 * forward call (several KV sequences) so the linears run as GEMMs. */
#ifndef TL_PPL_H
#define TL_PPL_H

#include "runtime/engine.h"

/* Called once per window with its logits (T, vocab), row = position. */
typedef int (*ppl_logits_fn)(void *ctx, int64_t window, const float *logits, const int32_t *tokens,
                             int T, int vocab);

typedef struct {
    int window;            /* T, default 256 */
    int64_t first_window;  /* default 0 */
    int64_t max_windows;   /* 0 = all */
    ppl_logits_fn on_logits;
    void *ctx;
    float *nll_out;        /* optional: (n_windows, T-1) per-token nll */
    int progress;
} PplOpts;

typedef struct {
    double nll_sum, ppl;
    int64_t n_pred, n_windows;
    double seconds, tok_per_s;
} PplResult;

/* Number of windows eval_ppl will run for these options. */
int64_t ppl_window_count(int64_t n_tok, const PplOpts *o);
int eval_ppl(Engine *e, const int32_t *tok, int64_t n_tok, const PplOpts *o, PplResult *r);

/* -log softmax(logits)[target] in double, as torch's log_softmax(.double()). */
double nll_of(const float *logits, int64_t vocab, int32_t target);

#endif
