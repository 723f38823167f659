/* Model hyperparameters from a Hugging Face config.json (through cJSON).
 * Missing or contradictory fields are errors: a silent default could change
 * every number a run reports. */
#ifndef TL_CONFIG_H
#define TL_CONFIG_H

#include <stdint.h>

typedef enum { ARCH_LLAMA = 0, ARCH_BITNET } Arch;
typedef enum { ACT_SILU = 0, ACT_RELU2 } HiddenAct;
/* How a BitNet checkpoint's per-tensor weight_scale is applied. */
typedef enum { BITNET_SCALE_NONE = 0, BITNET_BITLINEAR, BITNET_AUTOBITLINEAR } BitnetScale;
/* tie_word_embeddings: given true/false, or absent (then decided by whether
 * the checkpoint has lm_head.weight, and reported). */
typedef enum { TIE_ABSENT = -1, TIE_FALSE = 0, TIE_TRUE = 1 } Tie;
/* RoPE's frequencies (rope_inv_freq, forward.h): transformers' rope types
 * "default" (1 / theta^(2i/d)), "linear" (those over factor), "llama3"
 * (Llama 3.1+: frequencies of wavelength above original / low_freq_factor
 * over factor, below original / high_freq_factor kept, a smooth blend
 * between), "yarn" (the dims below the correction range kept, those above
 * over factor, a linear ramp between; cos and sin times an attention factor)
 * and "dynamic" (NTK: theta scaled for the sequence's length, which up to
 * max_position_embeddings leaves the default frequencies; longer sequences
 * change them call by call, and are refused: rope_positions_check) and
 * "longrope" (Phi-3's LongRoPE: each default frequency divided by its
 * short_factor up to original_max_position_embeddings, cos and sin times an
 * attention factor; past it transformers switches to long_factor call by
 * call, refused as dynamic's);
 * ROPE_FACTORS: a GGUF's rope_freqs.weight, llama.cpp's divisor a frequency
 * (its converter writes them for llama3). */
typedef enum { ROPE_DEFAULT = 0, ROPE_LINEAR, ROPE_LLAMA3, ROPE_FACTORS, ROPE_YARN, ROPE_DYNAMIC, ROPE_LONGROPE } RopeKind;
#define ROPE_MAX_FACTORS 256 /* ROPE_FACTORS, ROPE_LONGROPE: head_dim / 2 at most */

typedef struct {
    Arch arch;
    char model_type[32];
    int hidden;       /* hidden_size */
    int n_layers;     /* num_hidden_layers */
    int n_heads;      /* num_attention_heads */
    int n_kv_heads;   /* num_key_value_heads */
    int head_dim;     /* head_dim, default hidden / heads */
    int inter;        /* intermediate_size */
    int vocab;        /* vocab_size */
    int max_pos;      /* max_position_embeddings (informational; 0 if absent) */
    float eps;        /* rms_norm_eps */
    double rope_theta;
    RopeKind rope_kind;
    double rope_factor;                 /* linear, llama3, yarn, dynamic: factor */
    double rope_low, rope_high;         /* llama3: low_freq_factor, high_freq_factor;
                                         * yarn: the correction range's dims (after
                                         * truncation and the bounds, as transformers) */
    int rope_orig_ctx;                  /* llama3, yarn, longrope: original_max_position_embeddings;
                                         * dynamic: max_position_embeddings (2048 absent) */
    double rope_attn;                   /* yarn, longrope: the attention factor on cos and sin */
    float rope_ff[ROPE_MAX_FACTORS];    /* ROPE_FACTORS: head_dim / 2 divisors; longrope: its
                                         * short_factor, as float32 */
    HiddenAct act;
    Tie tie;
    /* The linears are BitNet's BitLinear (quantization_config.quant_method
     * "bitnet", on a bitnet model or a llama one): packed U8 + weight_scale,
     * or float ternarised on load when online; int8 activations per token. */
    int bitnet_linears;
    /* 1bitLLM's BitNet b1.58 form (bitnet_b1_58-large / -3B, and llama.cpp's
     * BitnetModel converter's source): model_type llama with architectures
     * BitnetForCausalLM; BitNet's sub-norms, stored as
     * self_attn.inner_attn_ln / mlp.ffn_layernorm, before o_proj and
     * down_proj; float linears ternarised in every forward (per-tensor
     * absmean, int8 activations per token), as an online BitNet's. */
    int bitnet_1bitllm;
    BitnetScale bitnet_scale; /* BitNet linears only */
    char bitnet_class[16];    /* BitNet linears only: quantization_config.linear_class */
    char bitnet_mode[16];     /* BitNet linears only: quantization_config.quantization_mode
                               * ("offline" when absent, transformers' default) */
    /* A checkpoint written by `ternlab quantize`: quantization_config.quant_method
     * "ternlab" with the QuantSpec it was made with; its ternary linears are
     * stored in kernels/ternary_format.h's layout (see src/cli/cmd_tools.c). */
    int ternlab_packed;
    char ternlab_spec[256];
} ModelConfig;

/* theta^(2i / head_dim) in transformers' float32 arithmetic (theta: rope_base,
 * dynamic's own where the type is dynamic), and the default frequency i of c,
 * its reciprocal: what every rope type scales. */
float rope_theta_pow(const ModelConfig *c, int i);
float rope_default_freq(const ModelConfig *c, int i);
/* The factor on RoPE's cos and sin: yarn's or longrope's attention factor, else 1. */
float rope_attention_factor(const ModelConfig *c);
/* The theta c's frequencies are computed from: dynamic's, transformers'
 * theta ((factor L / L) - (factor - 1))^(d / (d - 2)) at L =
 * max_position_embeddings in double; else rope_theta. */
double rope_base(const ModelConfig *c);
/* 0 where a forward may place tokens at positions up to max_pos under c's
 * RoPE; -1 with err_set past what it supports (dynamic: positions from
 * max_position_embeddings on, where transformers rescales per call;
 * longrope: from original_max_position_embeddings on, where it takes the
 * long factors per call). */
int rope_positions_check(const ModelConfig *c, int64_t max_pos);
/* Where frequency `freq` (a default one, rope_default_freq) falls in c's llama3
 * scaling, in transformers' float32 arithmetic (its wavelength 2 pi / freq
 * as torch forms it: the reciprocal, then the product): 0 below original /
 * high_freq_factor (kept), 1 above original / low_freq_factor (divided by
 * factor), 2 between, with *smooth = (original / wavelength - low) / (high -
 * low) — one operation a statement, so no fused multiply-add. */
int rope_llama3_band(const ModelConfig *c, float freq, float *smooth);

/* Parses JSON text; `path` is used in messages only. */
int config_parse(const char *json, const char *path, ModelConfig *cfg);
/* Reads DIR/config.json. */
int config_load(const char *dir, ModelConfig *cfg);
const char *arch_name(Arch a);

#endif
