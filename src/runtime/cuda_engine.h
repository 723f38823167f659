/* The CUDA backend: the forward pass of src/runtime/forward.c on one GPU.
 *
 * cuda_engine_open fills an ordinary Engine whose RunState carries a forward
 * hook (runtime/forward.h), so forward(), engine_generate() and eval_ppl()
 * — every command — run on the GPU unchanged.  What lives where:
 *   - weights are uploaded once: ternary linears packed as loaded
 *     (kernels/cuda/tern_cuda.h, same bytes as the CPU), dense linears, the
 *     embedding, lm_head and norms in fp32 (EngineOpts.bf16 = 0, the reference)
 *     or bf16 (dense linears; then activations into every linear are bf16 too);
 *   - the paged KV cache lives on the device (f32 pages in the host cache's
 *     layout, or, in a layer whose every token the KV policy stores ternary,
 *     ternary pages in the CPU's format: kv_pages_for_policy in
 *     cuda_engine.cu); the Engine's KvCache keeps the block allocator and block tables
 *     on the host (no host pages) and the device holds a mirror of the tables,
 *     updated by the changed entries only;
 *   - matmuls: ternary through tern_cuda_matmul_* (int8 activations for
 *     BitNet-style linears, f32 as three bf16 terms, or bf16), dense through
 *     cuBLAS (SGEMM without TF32 for fp32; cublasGemmEx BF16 in, fp32
 *     accumulation for bf16);
 *   - RMSNorm, RoPE, paged attention, SwiGLU/ReLU^2, residuals, int8 activation
 *     quantisation: kernels/cuda/fwd_cuda.h (CPU twins in forward.c).
 * A decode step (RunState.decode, logits of every token) is captured into a
 * CUDA graph the second time a batch size is seen and replayed after that:
 * one host-to-device copy of the step's inputs, one graph launch, one copy of
 * the logits back — or, for greedy steps on one GPU, of the ids, the argmax
 * being inside the graph (TERNLAB_CUDA_ARGMAX_GRAPH=0 keeps it after).  No
 * host synchronisation inside a step.
 *
 * Not supported on the GPU (clear errors): ternary KV pages with tp > 1,
 * --dump-layers.
 * Builds without CUDA get the same functions returning an error. */
#ifndef TL_CUDA_ENGINE_H
#define TL_CUDA_ENGINE_H

#include "runtime/engine.h"

#include <stddef.h>
#include <stdint.h>

/* 1 when this build has the CUDA backend and a GPU is visible; else 0 with the
 * reason in why (may be NULL). */
int cuda_backend_available(char *why, size_t n);

/* Opens e for model m (which must outlive e) on GPU o->gpu.  Returns 0, or -1
 * (err_set) with nothing left allocated. */
int cuda_engine_open(Engine *e, Model *m, const EngineOpts *o);

/* Tensor parallelism over tp GPUs (tp == 1: cuda_engine_open): rank r on GPU
 * r, one host thread per rank, NCCL communicators (ncclCommInitRank; NVLink
 * multicast off: NCCL_NVLS_ENABLE=0).  Column-parallel q/k/v/gate/up,
 * row-parallel o/down with an all-reduce on the compute stream (inside the
 * decode graphs); attention and KV heads split (the KV heads must divide by
 * tp); embedding, norms and lm_head replicated (logits on rank 0).
 * int8 activations are exact (bit-identical to one GPU): the row-parallel
 * input is all-gathered and quantised whole, the integer partial sums are
 * all-reduced.  f32/bf16 activations differ from one GPU by float
 * reassociation of the row-parallel sums.  Refused with a message: fewer
 * GPUs than tp, a shard boundary that cuts a scale group, int8 activations
 * with several scale groups per row. */
int cuda_engine_open_tp(Engine *e, Model *m, const EngineOpts *o, int tp);
/* What an open checks before it reads the model: the TERNLAB_CUDA_* settings, a GPU
 * visible (a CUDA build), tp of them.  0, or -1 (err_set, "--device cuda: ..." where no GPU
 * is). The commands call it before loading the model (a 27B had loaded, --quant and all,
 * before "no CUDA device"). */
int cuda_engine_precheck(int tp);
/* Call before the process's first CUDA call when it will run tp > 1 on the
 * GPU: sets CUDA_MODULE_LOADING=EAGER (unless the user set it).  With lazy
 * module loading a rank's first launch of a kernel can wait on the driver
 * while another rank's all-reduce kernel spins waiting for it: a hang. */
void cuda_prepare_multi_gpu(void);

/* Synthetic models for throughput (no files): m holds only cfg (and RoPE
 * tables); weights are generated on the device from `seed`: every decoder
 * linear ternary (packed, one scale per row; int8 activations when act_int8,
 * else bf16) when ternary = 1, else dense bf16 (the BF16 reference); the
 * embedding f32, lm_head dense bf16, norms 1.  Requires o->bf16 = 1. */
typedef struct {
    int ternary;
    int act_int8;
    uint64_t seed;
    int tp; /* > 1: over tp GPUs as cuda_engine_open_tp (each rank its own random slice) */
} CudaSynthetic;
int cuda_engine_open_synthetic(Engine *e, Model *m, const EngineOpts *o, const CudaSynthetic *syn);

/* GPUs visible (0 without CUDA). */
int cuda_device_count(void);

/* 1 when e was opened by cuda_engine_open*. */
int cuda_engine_is(const Engine *e);

typedef struct {
    size_t weight_bytes;   /* device bytes of every weight (codes, scales, dense, norms, embedding) */
    size_t step_bytes;     /* weight bytes one decode step reads whatever its batch: all
                            * linears + lm_head + norms (not the per-token embedding rows and
                            * logits, nor the KV: bench-e2e adds those) */
    size_t kv_bytes;       /* device K/V pool (f32 and ternary pages as the KV policy last taken left them) */
    int kv_ternary_pages;  /* layers whose KV pages are ternary (codes + f16 scales, not f32) */
    int tp;                /* ranks (GPUs) */
    size_t rank_layer_bytes[16]; /* decoder-linear bytes each rank holds */
    /* each rank's fused attentions and fused final norms (the counters below are rank 0's) */
    int64_t rank_fused_att[16], rank_tail_fused[16];
    int64_t graphs;        /* decode graphs captured (rank 0) */
    int64_t graph_launches;
    int64_t argmax_in_graph; /* of those launches, the ones whose argmax was in the graph */
    /* layers enqueued (eagerly or into a graph) with the fused decode forms:
     * attention with RoPE + KV write (under TERNLAB_CUDA_ATTN=block the call
     * runs the separate kernels), o projection from f32, MLP as two GEMVs */
    int64_t fused_att, fused_o, fused_mlp;
    /* layers enqueued (the same way) at 2 .. 8 tokens with the GLU in the
     * gate|up GEMV (tern_cuda_glu_i8_mt) */
    int64_t mt_mlp;
    /* the most tokens of a call on that GLU form (TERNLAB_CUDA_MT_FUSE; unset,
     * the device's: 8 where its memory is narrow for its SMs, an H100's, 0 where
     * it is wide, an H200's) */
    int64_t mt_fuse;
    /* layers enqueued (the same way) whose fused MLP's down GEMV leaves its K
     * split for the next layer's norm to finish (tern_cuda_matmul_i8_f32x_defer) */
    int64_t deferred;
    /* layers enqueued (the same way) whose K / V of the call were stored
     * ternary under the cache's KV policy (fwdc_kv_code_rows into ternary
     * pages, or fwdc_kv_ternarise's values into f32 pages) */
    int64_t kv_ternary;
    /* calls enqueued (eager, or captured into a graph) whose attention split
     * each token's keys over several CTAs (fwdc_attention_splits > 1) */
    int64_t attn_split;
    /* layers enqueued (the same way) whose int8 pass before the o projection
     * takes the fused attention's max|output| (one token with o not fused,
     * or 2 .. 8 tokens) */
    int64_t omax_given;
    /* layers enqueued (the same way) whose MLP norm was folded into the o and
     * gate|up GEMVs (one token; TERNLAB_CUDA_NORM_FOLD=0 turns it off) */
    int64_t norm_folded;
    /* LM heads enqueued (the same way) on ternlab's bf16 GEMV
     * (tern_cuda_gemv_bf16: a ternary model's, 1 .. 4 logit rows;
     * TERNLAB_CUDA_LM_GEMV=0 keeps cuBLAS) */
    int64_t lm_gemv;
    /* calls enqueued (the same way) whose last residual add was the final
     * norm's (logit rows the tokens' own: no add, gather or norm kernel of
     * their own; the last down GEMV's K split deferred to it where it defers) */
    int64_t tail_fused;
    /* 1 where a chained step's ids are read where its argmax kernel wrote them
     * (mapped host memory), 0 where they are copied back on the stream
     * (TERNLAB_CUDA_IDS_MAPPED=0, or no mapping) */
    int64_t ids_mapped;
    /* decode steps cuda_engine_decode_chain enqueued before the previous
     * step's ids were back (their tokens taken on the device) */
    int64_t chained;
    char device_name[128];
} CudaEngineInfo;

/* The multi-token GLU form's bound where TERNLAB_CUDA_MT_FUSE is unset, from
 * a device's figures (cudaDeviceGetAttribute: memory clock and SM clock in
 * kHz, bus width in bits, SM count): 8 where the memory's peak is under 16
 * bytes a cycle an SM (an H100 SXM's 2 619 000 kHz x 5120 bits over 132 SMs
 * at 1 980 000 kHz: 12.8), 0 where it is wider (an H200's 3 201 000 x 6144:
 * 18.8), where the form measured slower; 8 where a figure is not positive. */
static inline int cuda_mt_fuse_for(int mem_khz, int bus_bits, int sm_khz, int sms) {
    if (mem_khz <= 0 || bus_bits <= 0 || sm_khz <= 0 || sms <= 0) return 8;
    const double per_sm_cycle = 2.0 * (double)mem_khz * (double)bus_bits / 8.0 / ((double)sms * (double)sm_khz);
    return per_sm_cycle < 16.0 ? 8 : 0;
}
int cuda_engine_info(const Engine *e, CudaEngineInfo *info);

/* Greedy decode pipelined one step deep, on one GPU: `steps` decode steps of
 * B distinct sequences seq[0..B), sequence b at positions pos0[b], pos0[b] +
 * 1, ...  Step 0's tokens are tok0; step t's (t > 0) are step t - 1's argmax,
 * which the decode graph writes into the next step's token inputs on the
 * device, so step t + 1 is prepared and enqueued (inputs up, graph launched)
 * before the host waits for step t's ids: the host's work and the launch
 * overlap the device's.  The first steps of a batch size run as forward()
 * runs them (eager, then the capture), waiting for the step before; with
 * decode graphs off (EngineOpts.no_graphs, TERNLAB_CUDA_GRAPHS=0) every step
 * does, so none is chained.  B >= 1.
 * ids[t * B + b] = step t's argmax for sequence b (the next token of b);
 * t_done (optional, steps entries) = time_now() when step t's ids were back.
 * The same ids, KV cache and sequence lengths as `steps` forward() calls with
 * RunState.argmax_out, each fed the last one's ids.  Refused (a message)
 * under tensor parallelism; on an error nothing is left running. */
int cuda_engine_decode_chain(Engine *e, const int *seq, const int64_t *pos0, const int32_t *tok0, int B,
                             int64_t steps, int32_t *ids, double *t_done);
/* 1 when e can chain its decode steps (one GPU, decode graphs on) and
 * TERNLAB_CUDA_CHAIN is not 0; engine_generate and bench-e2e then decode
 * through cuda_engine_decode_chain. */
int cuda_engine_chain_ok(const Engine *e);

/* Waits for all work of e's stream (for timing). */
int cuda_engine_sync(const Engine *e);

/* Device-to-device copy bandwidth on GPU `gpu` (bytes read + written per
 * second) over `bytes`: the larger of the medians of `reps` cudaMemcpyAsync
 * copies and of `reps` copy-kernel runs (tern_cuda_copy_bandwidth, the
 * measurement bench_gpu quotes too). */
int cuda_copy_bandwidth(int gpu, size_t bytes, int reps, double *bytes_per_s);

#endif
