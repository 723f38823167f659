/* A model with its paged KV cache and run state: what prefill, decode, perplexity
 * and generation run on. */
#ifndef TL_ENGINE_H
#define TL_ENGINE_H

#include "runtime/forward.h"

typedef struct Engine {
    Model *m;
    KvCache kv;
    RunState rs;
    /* set by a backend that runs forward() elsewhere (src/runtime/cuda_engine.h):
     * engine_free calls it to free what the backend holds */
    void (*backend_free)(struct Engine *e);
} Engine;

typedef enum { ENGINE_CPU = 0, ENGINE_CUDA = 1 } EngineDevice;

typedef struct {
    int64_t max_tok;  /* tokens per forward call (batch of windows / prompt chunk) */
    int block_size;   /* KV block size in tokens (default 16) */
    int64_t n_blocks; /* KV pool size in blocks */
    int64_t max_ctx;  /* the longest context one sequence reaches (0: the whole pool), for
                       * the memory check's attention scratch and RoPE tables */
    EngineDevice device; /* ENGINE_CPU (default) or ENGINE_CUDA (cuda_engine_open) */
    int bf16;         /* cuda: activations into the linears and dense weights in bf16
                       * (0 = fp32, the reference) */
    int no_graphs;    /* cuda: 1 = launch every decode step eagerly (no CUDA graph) */
    int gpu;          /* cuda: device ordinal */
    /* the KV policy from the start (NULL: none; kv_set_policy may change it
     * later, on an empty cache where pages change kind): on CUDA the pool is
     * allocated as the policy needs it — ternary pages alone in the layers it
     * stores all ternary — so a pool that fits only as ternary pages opens */
    const KvPolicy *kv;
} EngineOpts;

/* "cpu" / "cuda" -> ENGINE_*; -1 for anything else. */
int engine_device_parse(const char *s);
/* Opens e on the device o->device asks for: engine_init on the CPU,
 * cuda_engine_open on the GPU.  Returns 0 or -1 (err_set). */
int engine_open(Engine *e, Model *m, const EngineOpts *o);

int engine_init(Engine *e, Model *m, const EngineOpts *o);
void engine_free(Engine *e);

/* Prefills prompt (len >= 1 tokens) into KV sequence sid in chunks of at most
 * max_tok tokens, positions 0 .. len-1; the last token's logits (vocab floats)
 * into logits.  Returns 0 or -1 (err_set). */
int engine_prefill(Engine *e, int sid, const int32_t *prompt, int64_t len, float *logits);

/* Greedy generation for n_seq prompts at once (batched decode: one forward per
 * step with one token of every sequence).  out[s] receives max_new ids.
 * Prompts are prefilled in chunks of at most max_tok tokens. */
int engine_generate(Engine *e, const int32_t *const *prompts, const int64_t *prompt_len, int n_seq,
                    int64_t max_new, int32_t **out);

/* Index of the largest logit (first on ties, as torch.argmax). */
int64_t argmax_f32(const float *x, int64_t n);

#endif
