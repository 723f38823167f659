/* Memory preflight: before a model, its KV cache and its workspaces are
 * allocated, add up the bytes they will take and compare them with the memory
 * this process can actually get, so that a run that cannot fit is refused at
 * once with needed vs available and what to change, instead of dying an hour
 * into a sweep (or being killed by the OOM killer with no message at all).
 *
 * Host memory only for now: the CUDA backend adds its device budget here when
 * it lands (same message, cudaMemGetInfo as the "available" side).
 *
 * Available memory is the smallest of: MemAvailable (/proc/meminfo; sysconf
 * free pages where there is no /proc), the cgroup limit minus current usage
 * (Slurm jobs and containers), and RLIMIT_AS minus the address space already
 * in use.  TERNLAB_MEM_LIMIT (bytes, or with a K/M/G/T suffix) replaces the
 * detection: a budget for the whole process (what is already resident counts
 * against it), for tests and to hold a run to a share of a shared node.
 *
 * Since available memory is measured when the check runs, a check after the
 * weights are loaded passes weight_bytes = 0: they are already accounted. */
#ifndef TL_PREFLIGHT_H
#define TL_PREFLIGHT_H

#include "load/config.h"
#include "load/safetensors.h"
#include "quant/quant.h"

#include <stddef.h>
#include <stdint.h>

/* Allowance on top of the computed bytes: OpenBLAS per-thread buffers, HDF5,
 * allocator overhead and fragmentation.  64 MiB was measured generous for the
 * tiny models (peak RSS minus computed bytes stays under 40 MiB). */
#define PREFLIGHT_MARGIN_BYTES ((size_t)64 << 20)

typedef struct {
    size_t weights;    /* resident weights as the forward reads them */
    size_t load_extra; /* transient while loading: one dense f32 linear being ternarised */
    size_t kv;         /* paged KV cache */
    int64_t kv_tokens; /* tokens the KV pool holds (whole blocks) */
    size_t workspace;  /* run state, linear scratch, attention scratch, RoPE tables, logits */
    size_t ranks;      /* what CPU tensor-parallel ranks add (their shards and buffers; 0 at tp 1) */
    size_t margin;     /* PREFLIGHT_MARGIN_BYTES */
    size_t needed;     /* the sum of the above */
    size_t available;
    char source[96];   /* where `available` came from */
} PreflightPlan;

/* Bytes the weights of a model take once loaded (what model_weight_bytes will
 * report): dense linears, embedding and head as f32; linears ternarised by
 * `spec` (NULL: weights as stored) or stored packed ternary (BitNet) as packed
 * codes + f32 scales, unless `dense`.  `st` (may be NULL) decides an absent
 * tie_word_embeddings by whether lm_head.weight exists.  *load_extra (may be
 * NULL) receives the transient peak on top while loading. */
size_t preflight_weight_bytes(const ModelConfig *c, const SafeTensors *st, const QuantSpec *spec,
                              int dense, size_t *load_extra);

/* Bytes of runstate_init(max_tok) plus the attention scratch and RoPE tables
 * grown for contexts up to max_ctx tokens, plus max_tok rows of logits. */
size_t preflight_workspace_bytes(const ModelConfig *c, int64_t max_tok, int64_t max_ctx);

/* Memory this process can still get, and where the number came from.
 * Returns 0, or -1 (err_set) when nothing could be read (then *avail = SIZE_MAX). */
int preflight_available(size_t *avail, char *source, size_t n);

/* Fills *plan and compares.  weight_bytes: from preflight_weight_bytes before
 * loading, or 0 once the model is resident (the available memory then already
 * excludes it).  kv_tokens: tokens the KV pool must hold (e.g. batch x
 * max-seq; rounded up to whole blocks of block_size); max_tok: tokens per
 * forward call.  Returns 0 when it fits, else -1 with err_set giving needed vs
 * available, the breakdown and what to change (--window / --max-new, --batch,
 * --kv-blocks, --quant). */
int preflight_plan(const ModelConfig *c, size_t weight_bytes, size_t load_extra, int64_t kv_tokens,
                   int64_t max_tok, int block_size, PreflightPlan *plan);

/* The same, with a one-line report ("memory: weights .. + KV .. = .. needed,
 * .. available (source)") written to report (may be NULL) whether or not it
 * fits. */
int preflight_check(const ModelConfig *c, size_t weight_bytes, int64_t kv_tokens, int64_t max_tok,
                    int block_size, char *report, size_t n);

/* preflight_check where no sequence's context exceeds max_ctx tokens (0 or
 * more than the pool: the pool, as preflight_check assumes): the attention
 * scratch and RoPE tables are sized for it (a batch's pool had been taken as
 * one sequence's context, and a run that fits refused); ranks_bytes: what
 * CPU tensor-parallel ranks add besides (preflight_tp_ranks_bytes; 0 at tp 1). */
int preflight_check_ctx(const ModelConfig *c, size_t weight_bytes, size_t ranks_bytes, int64_t kv_tokens,
                        int64_t max_ctx, int64_t max_tok, int block_size, char *report, size_t n);

/* What tp CPU ranks in this process add to one engine's needs: their shards of
 * the linears and LM head (shard_bytes: one more copy), each rank's run state,
 * attention scratch and RoPE tables for contexts up to max_ctx tokens (0 or past
 * the pool of kv_tokens: the pool, as preflight_check_ctx) and its slice of the
 * logits, and the communicator's three max_tok x hidden buffers. */
size_t preflight_tp_ranks_bytes(const ModelConfig *c, int tp, size_t shard_bytes, int64_t max_tok,
                                int64_t max_ctx, int64_t kv_tokens);

/* "1.5 GiB", "312 MiB", "4 KiB", "17 B" into buf; returns buf. */
const char *preflight_fmt_bytes(size_t b, char *buf, size_t n);

#endif
