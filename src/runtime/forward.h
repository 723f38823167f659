/* The forward pass on the CPU (llama2.c-style: one function you can read in one
 * sitting).  One call runs any mix of tokens through the model: a prefill
 * (many consecutive positions of one sequence), a batched decode (one token
 * for each of several sequences), or several prefills at once.  K/V are
 * written into and read from the paged cache. */
#ifndef TL_FORWARD_H
#define TL_FORWARD_H

#include "kv/kvcache.h"
#include "runtime/model.h"

typedef struct RunState {
    int64_t max_tok;
    float *x;      /* (max_tok, hidden) residual stream */
    float *xb;     /* (max_tok, max(hidden, q_dim, inter)) normed input to a linear */
    float *q;      /* (max_tok, n_heads*head_dim) */
    float *k, *v;  /* (max_tok, n_kv_heads*head_dim) */
    float *att;    /* (max_tok, n_heads*head_dim) attention output */
    float *hb, *hb2; /* (max_tok, inter) */
    float *hout;   /* (max_tok, hidden) output of o_proj / down_proj */
    void *lin_scratch;
    /* attention scratch, grown with the longest context seen */
    float *kc, *vc; /* (ctx, head_dim) one head's keys/values gathered from the pages */
    float *scores;  /* (ATT_Q_CHUNK, ctx) */
    int64_t ctx_cap;
    /* optional: when non-NULL, the residual stream is copied here as
     * (n_layers+2, n, hidden): embedding, after each layer, after the final norm */
    float *dump;
    /* optional, backends that set RunState.hook only (the CUDA engine): when
     * non-NULL, forward() also writes the index of the largest logit (first
     * on ties, as argmax_f32) of each requested row here, computed where the
     * logits are, and `logits` may then be NULL (greedy decoding without
     * copying the logits back) */
    int32_t *argmax_out;
    int argmax_capable; /* set by a backend whose hook fills argmax_out */
    /* 1 while the caller feeds generated tokens (decode), 0 for prompt tokens
     * (prefill): the KV policy stores "decoder" and "encoder" tokens differently */
    int decode;
    /* optional (src/tp): when set, forward() hands the whole call to hook(hook_ctx,
     * ...) with its own arguments — a tensor-parallel engine runs it on its ranks.
     * NULL (runstate_init's default) = the single-rank forward below. */
    int (*hook)(void *hook_ctx, const Model *m, KvCache *kv, struct RunState *s, const int *tok,
                const int *seq, const int64_t *pos, int64_t n, const int64_t *logit_idx,
                int64_t n_logits, float *logits);
    void *hook_ctx;
} RunState;

/* RoPE's inverse frequencies inv[0 .. head_dim / 2) of c's rope type
 * (config.h RopeKind) in transformers' float32 arithmetic; ROPE_FACTORS: the
 * default ones over llama.cpp's divisors. */
void rope_inv_freq(const ModelConfig *c, float *inv);

int runstate_init(RunState *s, const Model *m, int64_t max_tok);
void runstate_free(RunState *s);

/* Runs n tokens (n <= s->max_tok).  Token i is tok[i] at position pos[i] of KV
 * sequence seq[i]; within one sequence, tokens come in increasing position
 * order and every earlier position is already in the cache or in this call.
 * Logits of the tokens listed in logit_idx (n_logits of them, NULL = all n) are
 * written to logits as (n_logits, vocab).  Returns 0, or -1 with err_set (e.g.
 * the KV cache is out of blocks; then nothing was written). */
int forward(const Model *m, KvCache *kv, RunState *s, const int *tok, const int *seq,
            const int64_t *pos, int64_t n, const int64_t *logit_idx, int64_t n_logits,
            float *logits);

/* RMSNorm as transformers: x * rsqrt(mean(x^2) + eps) * w, per row of n rows. */
void rmsnorm_rows(float *out, const float *x, const float *w, int64_t n, int64_t dim, float eps);

#endif
