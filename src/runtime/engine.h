/* A model with its paged KV cache and run state: what prefill, decode, perplexity
 * and generation run on. */
#ifndef TL_ENGINE_H
#define TL_ENGINE_H

#include "runtime/forward.h"

typedef struct {
    Model *m;
    KvCache kv;
    RunState rs;
} Engine;

typedef struct {
    int64_t max_tok;  /* tokens per forward call (batch of windows / prompt chunk) */
    int block_size;   /* KV block size in tokens (default 16) */
    int64_t n_blocks; /* KV pool size in blocks */
} EngineOpts;

int engine_init(Engine *e, Model *m, const EngineOpts *o);
void engine_free(Engine *e);

/* Greedy generation for n_seq prompts at once (batched decode: one forward per
 * step with one token of every sequence).  out[s] receives max_new ids.
 * Prompts are prefilled in chunks of at most max_tok tokens. */
int engine_generate(Engine *e, const int32_t *const *prompts, const int64_t *prompt_len, int n_seq,
                    int64_t max_new, int32_t **out);

/* Index of the largest logit (first on ties, as torch.argmax). */
int64_t argmax_f32(const float *x, int64_t n);

#endif
