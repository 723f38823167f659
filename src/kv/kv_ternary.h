/* Ternary KV pages: K and V rows of one token and head stored as 2-bit codes
 * with f16 scales, dequantised inside attention when a block is gathered.
 *
 * Format of one (token, head) row of head_dim values: layout TKV of
 * kernels/ternary_format.h (the one definition, shared with the CUDA kernels):
 *   codes: ceil(head_dim/4) bytes, value i in bits 2*(i%4) of byte i/4, code = q+1
 *          (unused codes 1, value 0);
 *   V: one scale per (token, head)            — values are per-token quantities;
 *   K: one scale per KV_K_GROUP channels      — keys carry outlier channels
 *      (KIVI, arXiv 2402.02750; KVQuant, arXiv 2401.18079), so they get finer
 *      channel groups.  KIVI quantises keys per channel across tokens, which
 *      needs a full block (a full-precision residual until then); we quantise
 *      each token on arrival instead, so that the encoder/decoder policy holds
 *      exactly at token granularity, and give K channel groups within the token.
 * Rule: absmean (BitNet b1.58) per group (a short last K group: the mean over its
 * own channels): g = min(max(mean|x|, 1e-8), 65504) (f16's largest finite); q =
 * clamp(round(x/g), -1, 1), round half to even, with g in f32; the scale is then
 * rounded to f16 (nearest even; a g below f16's smallest subnormal stores 0) and
 * that stored value is what dequantisation uses.
 * Bytes per (token, head): 2*ceil(head_dim/4) + 2*(ceil(head_dim/KV_K_GROUP) + 1). */
#ifndef TL_KV_TERNARY_H
#define TL_KV_TERNARY_H

#include <stddef.h>
#include <stdint.h>

#include "ternary_format.h"

#define KV_K_GROUP TERN_KV_K_GROUP /* key channels per scale (layout TKV) */

typedef enum { KVP_NONE = 0, KVP_ENCODER, KVP_DECODER, KVP_ALL } KvPolicyKind;

typedef struct {
    KvPolicyKind kind;
    int layer_lo, layer_hi; /* inclusive; -1/-1 = every layer */
} KvPolicy;

/* "none" | "encoder" | "decoder" | "all", optionally "@layers=a-b" (or "@layers=a").
 * Returns 0, or -1 with err_set listing the valid forms. */
int kv_policy_parse(const char *s, KvPolicy *p);
void kv_policy_format(const KvPolicy *p, char *buf, size_t n);
/* 0 when the policy's @layers range lies in a model of n_layers layers, else
 * -1 with err_set naming the range and the model's layers. */
int kv_policy_check_layers(const KvPolicy *p, int n_layers);
/* 1 when a token of this phase (decode = generated token) in `layer` is stored ternary. */
int kv_policy_ternary(const KvPolicy *p, int layer, int decode);
/* 1 when every token of `layer` (both phases) is stored ternary: such a layer
 * needs no f32 pages. */
int kv_policy_all_ternary(const KvPolicy *p, int layer);

/* Scales per row: K head_dim/KV_K_GROUP (rounded up), V 1. */
int kvt_n_scales(int head_dim, int is_key);
/* Quantises one row x (head_dim) into codes (head_dim/4 rounded up bytes) and
 * f16 scales; dequantises back.  The reference definition (plain C). */
void kvt_quant_row(const float *x, int head_dim, int is_key, uint8_t *codes, uint16_t *scales);
void kvt_dequant_row(const uint8_t *codes, const uint16_t *scales, int head_dim, int is_key,
                     float *x);
/* Bytes one token occupies in the cache for one layer and KV head, K and V. */
size_t kvt_bytes_per_token_head(int head_dim, int ternary);

#endif
