/* Tensor-parallel engine on the CPU: tp ranks as threads (`threads`
 * communicator), each owning its shard of every decoder linear, its query and
 * KV heads (a KV cache of n_kv_heads/tp heads), and a slice of lm_head's vocab
 * rows.  The residual stream, the embedding and the norms are replicated.
 *
 * Integration: tp_engine_open fills an ordinary Engine whose RunState carries a
 * forward hook (runtime/forward.h), so forward(), engine_generate() and
 * eval_ppl() — the perplexity-window protocol, kv_split included — run on the
 * ranks unchanged.  The Engine's KvCache holds the block tables every rank uses
 * (one allocator, so every rank maps a sequence to the same physical blocks)
 * and rank 0's K/V; ranks 1.. keep their own K/V pools with the same geometry.
 *
 * Results: int8-activation models (BitNet) are bit-identical to tp = 1; f32
 * activations differ by float reassociation in the row-parallel sums only
 * (tp_linear.h).  Not available: --dump-layers (RunState.dump). */
#ifndef TL_TP_ENGINE_H
#define TL_TP_ENGINE_H

#include "runtime/engine.h"

#include <stddef.h>
#include <stdint.h>

#define TP_MAX_RANKS 64

typedef struct {
    size_t layer_bytes;         /* decoder linears as this rank's forward reads them */
    int64_t layer_weights;      /* weights (elements) of its decoder linear shards */
    int64_t layer_payload_bits; /* the same without packed-row padding (tp_shard_payload_bits) */
    int64_t dup_scale_bits;     /* of which scales another rank holds too (cut groups, tensor scales) */
    size_t lm_head_bytes;       /* its vocab slice of lm_head */
    size_t kv_bytes;            /* its K/V pool (f32 pages) */
    double comm_seconds;        /* inside collectives (waits included) */
    int64_t comm_calls, comm_elems;
} TpRankStats;

typedef struct {
    int tp;
    size_t full_layer_bytes;         /* the unsharded model's decoder linears (linear_bytes) */
    int64_t full_layer_weights;
    int64_t full_layer_payload_bits; /* ... and their payload */
    size_t replicated_bytes;         /* embedding + norms, held by every rank */
    int64_t tokens, forwards;        /* forward() calls and tokens through them */
    double forward_seconds;
    TpRankStats rank[TP_MAX_RANKS];
    int gpu_ranks; /* 1: a CUDA engine over tp > 1 GPUs: of the per-rank fields only
                    * layer_bytes and kv_bytes are known (layer_weights and
                    * layer_payload_bits -1); its NCCL all-reduces run inside the
                    * step's graphs and are not timed apart (comm_* 0) */
} TpStats;

/* Opens e over tp ranks for model m (which must outlive e).  tp == 1 is exactly
 * engine_init.  tp > 1: checks the split (tp_plan_check: refuses a tp that does
 * not divide the KV heads, naming the model, the head counts and tp), builds
 * the shards, starts tp-1 worker threads (the caller runs rank 0).  Each rank's
 * OpenMP team gets max(1, omp_get_max_threads()/tp) threads.  Returns 0, or -1
 * (err_set) with nothing left allocated. */
int tp_engine_open(Engine *e, Model *m, const EngineOpts *o, int tp);
/* Stops the workers and frees everything (engine_free for tp == 1). */
void tp_engine_close(Engine *e);
/* The TP degree of an engine (1 for one opened by engine_init). */
int tp_engine_degree(const Engine *e);
/* Counters since open or the last reset; for tp == 1 only the byte fields and
 * tp are filled; for a CUDA engine over several GPUs see gpu_ranks.  Returns 0. */
int tp_engine_stats(const Engine *e, TpStats *st);
void tp_engine_reset_stats(Engine *e);

#endif
