/* Serving latency of a model on this machine (exp-throughput): time to first
 * token, time per output token and decode-step latency percentiles over
 * requests, tokens/s, and where a decode step's time goes.
 *
 * Requests: n_requests requests of prompt_len prompt tokens and gen_len output
 * tokens, served `batch` at a time (one prefill call for the batch's prompts,
 * then batched greedy decode steps).  Per request:
 *   TTFT = end of the prefill call that produced its first token - batch start
 *   TPOT = (end of its last decode step - end of prefill) / (gen_len - 1)
 * Percentiles are nearest-rank over requests (TTFT, TPOT) and over decode steps.
 * `warmup` whole batches run first and are not counted.
 *
 * Decode-step breakdown at batch `batch` and context prompt_len (medians over
 * `repeats`, after one warm-up):
 *   step_ms        one batched decode forward (the packed model as loaded)
 *   step_ctx1_ms   the same at context 1 (fresh sequences): attention ~ 0
 *   attention_ms   step_ms - step_ctx1_ms (signed: negative where the two medians'
 *                  noise exceeds the attention's share, as at short contexts)
 *   linear_ms      every linear_forward of the step (7 per layer + lm_head) timed
 *                  alone on the same (batch, in) inputs
 *   ternary_ms     the packed ternary linears among them (unpack + GEMV)
 *   twin_ms        the same linears of the dense twin (ModelLoadOpts.dense = 1:
 *                  f32 weights through sgemm), same inputs; NaN without a twin
 *   unpack_ms      ternary_ms - twin_ms: what the packed path costs over the
 *                  dense one for the same linears (negative when the packed
 *                  path is faster, e.g. memory-bound decode); unpack_share =
 *                  unpack_ms / step_ms
 *   act_quant_ms   int8 activation quantisation of the int8 linears (included
 *                  in linear_ms)
 *   other_ms       step_ms - linear_ms - attention_ms: norms, RoPE, KV writes,
 *                  call overhead.
 * Attribution by subtraction of separately timed parts is approximate (caches
 * are warmer when a part runs alone); the parts are reported, not forced to
 * sum. */
#ifndef TL_LATENCY_H
#define TL_LATENCY_H

#include "kv/kv_ternary.h"
#include "runtime/model.h"

#include <stdint.h>

typedef struct {
    int batch;       /* concurrent requests (default 1) */
    int prompt_len;  /* default 128 */
    int gen_len;     /* output tokens per request, >= 2 (default 32) */
    int n_requests;  /* default 4 * batch */
    int warmup;      /* batches not counted (default 1) */
    int repeats;     /* breakdown repeats (default 5) */
    int tp;          /* ranks of the CPU engine the requests run on (0/1: one; tp_engine_open);
                      * with tp > 1 the linear split of the step (linear, ternary, act_quant,
                      * twin, unpack_*, other) is NaN: it times the unsharded linears */
    const KvPolicy *kv; /* the KV policy of the requests' cache (NULL: none) */
} LatencyOpts;

typedef struct {
    double ttft_ms_p50, ttft_ms_p95, ttft_ms_p99;
    double tpot_ms_p50, tpot_ms_p95, tpot_ms_p99;
    double step_ms_p50, step_ms_p95, step_ms_p99;
    double tok_s;         /* output tokens / wall time, over the counted batches */
    double prefill_tok_s; /* prompt tokens / prefill time */
    double decode_tok_s;  /* decode-step tokens / decode time */
    int64_t n_requests;
    /* decode-step breakdown (see above) */
    double step_ms, step_ctx1_ms, attention_ms, linear_ms, ternary_ms, twin_ms, unpack_ms,
        unpack_share, act_quant_ms, other_ms;
    int tp; /* ranks of the engine the requests ran on */
    double kv_alloc_bytes; /* the requests' KV pool bytes per token slot under o->kv, all ranks together */
} LatencyResult;

/* attention_ms from the two medians: step_ms - step_ctx1_ms, signed */
double latency_attention_ms(double step_ms, double step_ctx1_ms);

/* tok[0..n) supplies the prompts (request i starts at (i * prompt_len) mod
 * (n - prompt_len)).  twin may be NULL (twin_ms, unpack_* NaN); it must have
 * m's configuration.  Returns 0, or -1 with err_set (bad options, out of
 * memory, a forward error). */
int latency_measure(Model *m, const Model *twin, const int32_t *tok, int64_t n,
                    const LatencyOpts *o, LatencyResult *r);

/* Nearest-rank percentile (q in [0, 1]) of v[0..n); sorts v.  NaN when n = 0. */
double latency_percentile(double *v, int64_t n, double q);

#endif
