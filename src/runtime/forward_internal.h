/* Pieces of the forward pass (forward.c) that the tensor-parallel ranks
 * (src/tp) run on their own shard: same code, so a rank's attention over its
 * heads is the single-rank arithmetic.  Not part of the public runtime API. */
#ifndef TL_FORWARD_INTERNAL_H
#define TL_FORWARD_INTERNAL_H

#include "runtime/forward.h"

/* Grows m's RoPE tables to cover positions [0, len).  Not thread-safe: call
 * before ranks read the tables.  Returns 0 or -1 (err_set). */
int fwd_rope_ensure(Model *m, int64_t len);
/* Grows s's attention scratch (kc, vc, scores) to ctx positions.  0 or -1. */
int fwd_ensure_ctx(RunState *s, int64_t ctx, int head_dim);
/* Rotate-half RoPE on n_heads heads of one token (cs, sn: head_dim/2 each). */
void fwd_rope_apply(float *x, int n_heads, int hd, const float *cs, const float *sn);
/* Causal attention of tokens [i0, i1) of one sequence over m->cfg.n_heads query
 * heads and m->cfg.n_kv_heads KV heads: reads s->q (n, n_heads*head_dim), the
 * cache kv, writes s->att.  A rank passes a Model whose cfg holds its own head
 * counts and a cache holding only its KV heads. */
void fwd_attention_run(const Model *m, const KvCache *kv, RunState *s, int layer, int seq,
                       const int64_t *pos, int64_t i0, int64_t i1);

/* Checks every token id against the vocabulary and reserves KV space for every
 * (seq, pos) before anything is written, so a failure (out of blocks) writes
 * nothing.  *max_pos receives the largest position.  Returns 0 or -1 (err_set). */
int fwd_prepare_tokens(const Model *m, KvCache *kv, const int *tok, const int *seq,
                       const int64_t *pos, int64_t n, int64_t *max_pos);
/* Gated MLP activation in place: g[i] = act(g[i]) * u[i] (SiLU or ReLU^2). */
void fwd_glu(HiddenAct act, float *g, const float *u, int64_t cnt);

#endif
