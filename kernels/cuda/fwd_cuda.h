/* fwd_cuda.h — the pieces of the forward pass other than the matmuls, on the
 * GPU (kernels in fwd_cuda.cu).  Each has a CPU twin that defines it:
 *
 *   fwdc_embed           rows of the embedding table         forward.c (memcpy per token)
 *   fwdc_rmsnorm         rmsnorm_rows                        src/runtime/forward.c
 *   fwdc_norm            residual add + rmsnorm_rows (+ act_quant_int8_ref)
 *   fwdc_glu_rows        fwd_glu (+ act_quant_int8_ref)
 *   fwdc_rope_kv_write   fwd_rope_apply + kv_write_token     forward.c, src/kv/kvcache.c
 *   fwdc_kv_ternarise    kvt_quant_row + kvt_dequant_row     src/kv/kv_ternary.c
 *   fwdc_kv_code_rows    kvt_quant_row (ternary pages)       src/kv/kv_ternary.c
 *   fwdc_attention       fwd_attention_run (causal, GQA)     forward.c
 *   fwdc_attention_tern  the same over ternary pages (kvt_dequant_row's values)
 *   fwdc_attention_rope  the two above in one decode kernel
 *   fwdc_attention_rope_coded  the same with the token's rows coded ternary
 *   fwdc_glu             fwd_glu (SiLU or ReLU^2 gate * up)  forward.c
 *   fwdc_act_quant_i8    act_quant_int8_ref (bit-identical)  src/quant/quant.h
 *   fwdc_act_quant_i8_max, fwdc_row_absmax: the same by column slices (tp)
 *
 * Paged KV on the device: one layer's pages are (n_blocks, n_kv_heads,
 * block_size, head_dim) f32, the host cache's layout; a token's slot is
 * block * block_size + offset.  Block tables are (rows, tab_stride) int32;
 * token i reads row tab_row[i] and attends to positions 0..pos[i].
 *
 * Sizes that vary from call to call (positions, slots, table rows, the number
 * of table updates) are read from device memory, so a launch sequence can be
 * captured once into a CUDA graph and replayed.  All pointers d_* are device
 * pointers; calls are asynchronous on `stream`; each returns 0, or -1 with
 * err_set (bad argument, unsupported shape, launch failure). */
#ifndef TL_FWD_CUDA_H
#define TL_FWD_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cuda/tern_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x (n, H) = embed[tok[i]] (embed f32 (vocab, H)). */
int fwdc_embed(const float *d_embed, const int32_t *d_tok, int64_t n, int64_t H, float *d_x,
               cudaStream_t stream);
/* out = x * rsqrt(mean(x^2) + eps) * w per row.  Writes out32 (f32) and/or
 * out16 (bf16, round to nearest even) — either may be NULL, not both. */
int fwdc_rmsnorm(const float *d_x, const float *d_w, int64_t n, int64_t dim, float eps,
                 float *d_out32, uint16_t *d_out16, cudaStream_t stream);
/* The fused form: x += h first when h is non-NULL (x written back: the
 * residual add), then the RMSNorm into out32 / out16 (each may be NULL) and,
 * when xq is non-NULL, the per-token int8 activations of the f32 out values
 * (act_quant_int8_ref, bit-identical) into xq, sx. */
int fwdc_norm(float *d_x, const float *d_h, const float *d_w, int64_t n, int64_t dim, float eps,
              float *d_out32, uint16_t *d_out16, int8_t *d_xq, float *d_sx, cudaStream_t stream);
/* fwdc_norm for an x already final when the kernel before this one on the
 * stream passes its wait (its last writer ran before that kernel, and that
 * kernel waits before it lets this one start: a ternary GEMV, or one launched
 * without programmatic dependence): x read before this kernel's wait.  The
 * same bits. */
int fwdc_norm_x_ready(float *d_x, const float *d_h, const float *d_w, int64_t n, int64_t dim, float eps,
                      float *d_out32, uint16_t *d_out16, int8_t *d_xq, float *d_sx, cudaStream_t stream);
/* fwdc_norm of one row with h still in a deferred GEMV's split-K partials
 * (tern_cuda_matmul_i8_f32x_defer; h->rows == dim): the same bits as
 * fwdc_norm of the GEMV's finished output; the partials left zero.  It must
 * be the next kernel after that GEMV on the stream. */
int fwdc_norm_deferred(float *d_x, const TernDeferred *h, const float *d_w, int64_t dim, float eps,
                       float *d_out32, uint16_t *d_out16, int8_t *d_xq, float *d_sx, cudaStream_t stream);
/* Rotate-half RoPE on q (n rows of stride ldq, n_heads*hd used) and k (stride
 * ldk) in place with the tables cos/sin (positions, hd/2) at pos[i], then K
 * and V (stride ldv) of token i stored at slot[i] of this layer's pages.
 * d_kpages and d_vpages both NULL: the rotation only (a layer of ternary
 * pages, which fwdc_kv_code_rows then fills from the rotated k and v). */
int fwdc_rope_kv_write(float *d_q, int64_t ldq, float *d_k, int64_t ldk, const float *d_v,
                       int64_t ldv, const int32_t *d_pos, const int32_t *d_slot, int64_t n,
                       int n_heads, int n_kv, int hd, const float *d_cos, const float *d_sin,
                       float *d_kpages, float *d_vpages, int block_size, cudaStream_t stream);
/* The KV policy's ternary rows (src/kv/kv_ternary.h): token i's K and V
 * rows at slot[i] of this layer's pages, every KV head, each value replaced
 * in place by kvt_dequant_row(kvt_quant_row(row)) — the CPU's bits.  The
 * pages stay f32: the attention reads the ternary format's values, the
 * memory is not saved.  head_dim 1..256. */
int fwdc_kv_ternarise(float *d_kpages, float *d_vpages, const int32_t *d_slot, int64_t n, int n_kv, int hd,
                      int block_size, cudaStream_t stream);
/* A layer's ternary KV pages on the device, in the CPU's format
 * (src/kv/kv_ternary.h): row r = (block * n_kv + KV head) * block_size +
 * offset holds the K codes at kc + r * cb (cb = (hd + 3) / 4 bytes; value d
 * in bits 2 (d % 4) of byte d / 4, code = q + 1, padding code 1), the K
 * scales (f16 bits, one per KV_K_GROUP channels: nks = (hd + 15) / 16) at
 * ks + r * nks, the V codes at vc + r * cb and the V scale at vs[r].  About
 * 1 / 12 of an f32 page's bytes at head_dim 128. */
typedef struct {
    uint8_t *kc, *vc;
    uint16_t *ks, *vs;
} FwdcKvTern;
/* (bytes a row: kvt_bytes_per_token_head(hd, 1), src/kv/kv_ternary.h) */
/* Token i's K and V rows (d_k, d_v of strides ldk, ldv: every KV head, k as
 * fwdc_rope_kv_write rotated it) coded into slot[i] of the ternary pages:
 * kvt_quant_row's codes and scales, byte for byte.  head_dim 1..256. */
int fwdc_kv_code_rows(const float *d_k, int64_t ldk, const float *d_v, int64_t ldv, const int32_t *d_slot,
                      int64_t n, int n_kv, int hd, int block_size, FwdcKvTern pages, cudaStream_t stream);
/* out (n, n_heads*hd) = softmax(q k^T / sqrt(hd)) v over positions 0..pos[i]
 * of token i's sequence (block table row tab_row[i]); q rows of stride ldq;
 * query head h reads KV head h / (n_heads / n_kv).  head_dim <= 256.
 * model_heads: the whole model's query heads (n_heads x the tensor-parallel
 * degree): the CTA width, and with it the order of the sums, is chosen from
 * n x model_heads, so a rank's results do not depend on the degree.
 * one_seq: all n tokens belong to one sequence (table row tab_row[0]), as
 * in a prompt: from 32 tokens on (head_dim % 4 == 0, <= 128) they go through
 * the tiled kernel, 64 queries per CTA sharing each K / V tile. */
int fwdc_attention(const float *d_q, int64_t ldq, const float *d_kpages, const float *d_vpages,
                   const int32_t *d_pos, const int32_t *d_tab, int tab_stride,
                   const int32_t *d_tab_row, int64_t n, int n_heads, int n_kv, int hd,
                   int block_size, int model_heads, int one_seq, float *d_out, int splits,
                   cudaStream_t stream);
/* fwdc_attention over a layer's ternary pages: each K / V value is
 * kvt_dequant_row's, formed as it is read.  Where head_dim is whole K scale
 * groups (% 16) and the codes 4-byte aligned, the per-warp kernel scores a
 * key a lane from its 32-bit code words (key lanes: each key's products
 * summed in another order than over f32 pages, within 1e-5 of them); else,
 * and in the tiled prompt kernel, the f32 pages' kernels form the values and
 * give the bits fwdc_attention gives over f32 pages holding them.
 * TERNLAB_CUDA_ATTN=block (the block kernel reads f32 pages only) is
 * refused. */
int fwdc_attention_tern(const float *d_q, int64_t ldq, FwdcKvTern pages, const int32_t *d_pos,
                        const int32_t *d_tab, int tab_stride, const int32_t *d_tab_row, int64_t n,
                        int n_heads, int n_kv, int hd, int block_size, int model_heads, int one_seq,
                        float *d_out, int splits, cudaStream_t stream);
/* The decode step's fwdc_rope_kv_write + fwdc_attention in one kernel, for
 * n tokens of n distinct sequences (no token reads another's new position):
 * q, k, v (strides ldq, ldk, ldv) as the projections left them, not rotated
 * — each CTA rotates its own query head and its KV head's key (the bits
 * fwdc_rope_kv_write stores), scores the token's own position from them and
 * one CTA per KV head writes K, V to slot[i]; d_out bit-identical to the two
 * calls.  d_omax (n) may be NULL; else max |out row i| raised into d_omax[i]
 * as float bits (zero before the call; under TERNLAB_CUDA_ATTN=block, where
 * the separate calls run and q, k are rotated in place, it is written, the
 * same value): the int8 scale of the row, formed by
 * tern_cuda_matmul_i8_f32x.  head_dim even, <= 256.  The kernel reads
 * everything but q, k, v (positions, slots, cos / sin, the block table and
 * the pages of earlier positions) before its programmatic wait, so on the
 * stream the kernel just before it must (a) not write any of those and (b)
 * wait for its own predecessor before it lets this one start (the ternary
 * GEMVs / GEMMs do; the fwdc_ row kernels, which trigger first, do not), or
 * be launched without the programmatic attribute (cuBLAS). */
int fwdc_attention_rope(const float *d_q, int64_t ldq, const float *d_k, int64_t ldk, const float *d_v,
                        int64_t ldv, const int32_t *d_pos, const int32_t *d_slot, const float *d_cos,
                        const float *d_sin, float *d_kpages, float *d_vpages, const int32_t *d_tab,
                        int tab_stride, const int32_t *d_tab_row, int64_t n, int n_heads, int n_kv,
                        int hd, int block_size, int model_heads, float *d_out, unsigned *d_omax,
                        int splits, cudaStream_t stream);
/* fwdc_attention_rope for a layer whose decode tokens the KV policy stores
 * ternary: each token's rotated K and V rows are coded as kvt_quant_row codes
 * them and scored from those values.  pages.kc non-NULL: the codes and f16
 * scales go to the ternary pages (d_kpages, d_vpages unused) and d_out is
 * bit-identical to fwdc_rope_kv_write (no pages) + fwdc_kv_code_rows +
 * fwdc_attention_tern; else the coded values go to the f32 pages, as
 * fwdc_rope_kv_write + fwdc_kv_ternarise + fwdc_attention give them (the
 * separate passes under TERNLAB_CUDA_ATTN=block, which is refused with
 * ternary pages).  The same contract as fwdc_attention_rope otherwise. */
int fwdc_attention_rope_coded(const float *d_q, int64_t ldq, const float *d_k, int64_t ldk, const float *d_v,
                              int64_t ldv, const int32_t *d_pos, const int32_t *d_slot, const float *d_cos,
                              const float *d_sin, float *d_kpages, float *d_vpages, FwdcKvTern pages,
                              const int32_t *d_tab, int tab_stride, const int32_t *d_tab_row, int64_t n,
                              int n_heads, int n_kv, int hd, int block_size, int model_heads, float *d_out,
                              unsigned *d_omax, int splits, cudaStream_t stream);
/* The per-warp attention's key split (flash decoding), the `splits` argument
 * of the calls above: where n tokens x the model's heads fill fewer CTAs than
 * the GPU has SMs and a token has 2 x 128 keys or more (max_ctx: the largest
 * position + 1 among them), a token's keys are split over up to 8 CTAs a head
 * (each at least 128 keys, as many as its own position allows), the last to
 * finish merging their states — about two CTAs an SM, no more than the SMs
 * hold at once of the kernel head_dim hd and the pages (tern: ternary pages in
 * some layer) take; else 1.  The result depends on the splits (the
 * sums' order): a decode graph is captured for one value.  The calls take any
 * value 1..8; fwdc_attention_reserve(n, n_heads, hd, splits) grows the
 * scratch a split launch needs (outside a stream capture). */
int fwdc_attention_splits(int64_t n, int n_heads, int model_heads, int64_t max_ctx, int hd, int tern);
/* CTAs an SM holds at once of the split attention kernel a grid of `grid`
 * CTAs (tokens x heads x splits) takes at head_dim hd on f32 / ternary (tern)
 * pages — what fwdc_attention_splits fits the grid to; 0 where unknown */
int fwdc_attention_resident(int64_t grid, int hd, int tern);
int fwdc_attention_reserve(int64_t n, int n_heads, int hd, int splits);
/* Row form of the gated activation: out32 (n, cols) = act(g) * u with g, u
 * rows of stride ld (act 0 = SiLU, 1 = ReLU^2); optional bf16 copy (out16)
 * and int8 activations of the f32 values (xq, sx) as fwdc_norm. */
int fwdc_glu_rows(int act, const float *d_g, const float *d_u, int64_t n, int64_t cols,
                  int64_t ld, float *d_out32, uint16_t *d_out16, int8_t *d_xq, float *d_sx,
                  cudaStream_t stream);
/* g[i] = act(g[i]) * u[i]; act 0 = SiLU, 1 = ReLU^2. */
int fwdc_glu(int act, float *d_g, const float *d_u, int64_t cnt, cudaStream_t stream);
/* x[i] += h[i]. */
int fwdc_add(float *d_x, const float *d_h, int64_t cnt, cudaStream_t stream);
/* Per-token int8 activations: sx[t] = 127 / max(max|x_t|, 1e-5),
 * xq = clamp(rint(x * sx), -128, 127) — bit-identical to act_quant_int8_ref. */
int fwdc_act_quant_i8(const float *d_x, int64_t n, int64_t cols, int8_t *d_xq, float *d_sx,
                      cudaStream_t stream);
/* The same with each row's max|x| given in d_mx (n): a tensor-parallel rank
 * quantises its slice of a row with the max over every rank's slice (an
 * all-reduce of fwdc_row_absmax), giving the values the whole row would. */
int fwdc_act_quant_i8_max(const float *d_x, int64_t n, int64_t cols, const float *d_mx, int8_t *d_xq,
                          float *d_sx, cudaStream_t stream);
/* d_mx[t] = max |x_t| over the cols of row t (exact, in any order). */
int fwdc_row_absmax(const float *d_x, int64_t n, int64_t cols, float *d_mx, cudaStream_t stream);
/* y = bf16(x) (round to nearest even), cnt elements. */
int fwdc_to_bf16(const float *d_x, int64_t cnt, uint16_t *d_y, cudaStream_t stream);
/* out (cnt, dim) = x[idx[j]] rows. */
int fwdc_gather_rows(const float *d_x, const int32_t *d_idx, int64_t cnt, int64_t dim,
                     float *d_out, cudaStream_t stream);
/* Applies *d_count (<= cap) updates tab[pairs[2u]] = pairs[2u+1]. */
int fwdc_table_update(int32_t *d_tab, const int32_t *d_count, const int32_t *d_pairs, int64_t cap,
                      cudaStream_t stream);
/* The same, and d_zero[0 .. nzero) = 0 in the same kernel (the decode step's
 * per-layer maxima, without a memset node of their own). */
int fwdc_table_update_z(int32_t *d_tab, const int32_t *d_count, const int32_t *d_pairs, int64_t cap,
                        unsigned *d_zero, int64_t nzero, cudaStream_t stream);
/* The same, and fwdc_embed's x (n, H) = embed[tok[t]], all in one kernel (a
 * decode step's first: one launch where there were two). */
int fwdc_step_begin(int32_t *d_tab, const int32_t *d_count, const int32_t *d_pairs, int64_t cap, unsigned *d_zero,
                    int64_t nzero, const float *d_embed, const int32_t *d_tok, int64_t n, int64_t H, float *d_x,
                    cudaStream_t stream);
/* out[r] = index of the largest of x[r*cols .. r*cols+cols) (the first on
 * ties, as argmax_f32), rows rows; d_out2 (or NULL): the same ids again (a
 * decode step's argmax into the next step's token inputs). */
int fwdc_argmax_rows(const float *d_x, int64_t rows, int64_t cols, int32_t *d_out, int32_t *d_out2,
                     cudaStream_t stream);
/* The same, and the ids also into host memory the device writes (h_out:
 * pinned, mapped; rows <= 65535) at slot *d_slot (a word on the device, read
 * when the kernel runs; NULL: slot 0) of h_stride ids — no copy back. */
int fwdc_argmax_rows_to(const float *d_x, int64_t rows, int64_t cols, int32_t *d_out, int32_t *d_out2,
                        int32_t *h_out, const int32_t *d_slot, int64_t h_stride, cudaStream_t stream);
/* Grows the scratch fwdc_argmax_rows of rows x cols needs (cudaMalloc and a
 * synchronous zeroing: not allowed inside a stream capture, so called before
 * one that captures the argmax). */
int fwdc_argmax_reserve(int64_t rows, int64_t cols);
/* Tensor parallelism.  The all-gather of tp slices (n, w) each, stored rank
 * after rank in g (tp, n, w), into rows of the full vector: out (n, tp*w),
 * out[t][r*w + c] = g[r][t][c]. */
int fwdc_unshard(const float *d_g, int tp, int64_t n, int64_t w, float *d_out, cudaStream_t stream);
/* out (n, w) = x (n, full)[:, lo:lo+w] (int8). */
int fwdc_slice_i8(const int8_t *d_x, int64_t n, int64_t full, int64_t lo, int64_t w,
                  int8_t *d_out, cudaStream_t stream);
/* y (n, cols) holds exact integer dot products D as floats; y = (s * D) / sx
 * with s = scales[c * stride] (stride 0: one tensor scale) and sx per row —
 * the int8 kernels' own final formula, so a row-parallel shard whose integer
 * partial sums were all-reduced ends bit-identical to one GPU. */
int fwdc_scale_rows(float *d_y, int64_t n, int64_t cols, const float *d_scales, int64_t stride,
                    const float *d_sx, cudaStream_t stream);
/* Fills buf with deterministic pseudo-random values (synthetic models):
 * kind 0 = f32 uniform in [-amp, amp); 1 = bf16 uniform in [-amp, amp);
 * 2 = packed ternary code bytes (every 2-bit field in {0,1,2}, i.e. q in
 * {-1,0,1}); 3 = f32 constant amp; 4 = f32 uniform in [1 - amp, 1 + amp)
 * (norm weights). */
int fwdc_fill(void *d_buf, int64_t cnt, int kind, float amp, uint64_t seed, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
