/* A loaded model: configuration plus the weights every forward pass reads.
 *
 * Dense weights are held as f32 (upcast once from the stored BF16/F16: the
 * reference computes in fp32, as transformers does after from_pretrained with
 * dtype=float32).  Ternary linears hold packed codes + scales (src/quant). */
#ifndef TL_MODEL_H
#define TL_MODEL_H

#include "load/config.h"
#include "load/safetensors.h"
#include "quant/quant.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char name[96];           /* checkpoint name, e.g. model.layers.0.self_attn.q_proj */
    int64_t out, in;         /* y (n,out) = x (n,in) @ W^T */
    float *w;                /* dense (out, in), owned; NULL when ternary */
    TernaryMatrix *t;        /* ternary, owned; NULL when dense */
    int act_int8;            /* quantise activations per token (BitNet) before this linear */
    int kept;                /* ternary as loaded and kept so under an act-only --quant (its
                              * activations alone changed: QuantSpec.act_only) */
    /* Dense reference twin of a ternary linear (ModelLoadOpts.dense): `t` keeps the
     * groups and scales, the forward runs OpenBLAS instead of the packed kernels.
     * f32 activations: w = dequantised weights.  int8 activations: qf = codes as
     * f32 and y = sum_g s_g * (xq . q)_g / sx in group order, the kernels' own
     * formula, so both paths agree bit for bit on integer-exact group sums. */
    int twin;
    float *qf;               /* (out, in) codes in {-1,0,1} as f32, int8 twin only */
} Linear;

typedef struct {
    float *attn_norm;     /* (hidden) input_layernorm */
    float *ffn_norm;      /* (hidden) post_attention_layernorm */
    float *attn_sub_norm; /* (n_heads*head_dim) BitNet only, before o_proj */
    float *ffn_sub_norm;  /* (inter) BitNet only, before down_proj */
    Linear q, k, v, o, gate, up, down;
} Layer;

typedef struct {
    ModelConfig cfg;
    char *path;
    SafeTensors st;
    float *embed;      /* (vocab, hidden) */
    float *final_norm; /* (hidden) */
    Linear lm_head;    /* (vocab, hidden); shares embed when tied (w == embed, not owned) */
    int lm_head_tied;
    Layer *layers;
    /* RoPE tables: cos/sin (rope_len, head_dim/2), grown on demand */
    float *rope_cos, *rope_sin;
    int64_t rope_len;
    char load_notes[1024]; /* decisions taken while loading (tied head, scale convention) */
    int has_quant;         /* a QuantSpec was applied */
    QuantSpec quant;       /* the spec applied (valid when has_quant) */
    int native_ternary;    /* the checkpoint stores packed ternary linears (BitNet) */
} Model;

typedef struct {
    const char *quant; /* QuantSpec string, NULL = weights as loaded */
    int dense;         /* 1: keep every linear dense f32: ternary weights (native or from
                        * --quant) are dequantised, int8 activations still apply — the
                        * reference twin of the packed-kernel path */
} ModelLoadOpts;

/* Adds fmt (with one %s, arg) to m->load_notes, "; "-separated. */
void model_note(Model *m, const char *fmt, const char *arg);
/* Loads config.json + safetensors from a folder.  Returns 0 or -1 (err_set). */
int model_load(const char *path, const ModelLoadOpts *opts, Model *m);
/* -1 (err_set, naming it) where a checkpoint tensor's name ends in ".bias": the
 * loaders refuse checkpoints with biases, which this forward does not apply */
int model_refuse_bias(const char *name);
/* -1 (err_set naming it and listing `known`) where `name` is a layer tensor,
 * prefix + index + "." + rest, whose rest is neither in `known` (what the
 * forward reads from a layer) nor in `ignored` (tensors derived from the
 * config, such as rotary_emb.inv_freq; both NULL-terminated).  A layer tensor
 * the forward does not read — a norm of another architecture (1bitLLM's
 * inner_attn_ln on a plain llama), a scale — had been dropped silently: the
 * model ran as another one. */
int model_refuse_unknown_layer_tensor(const char *name, const char *prefix, const char *const *known,
                                      const char *const *ignored);
/* -1 (err_set naming the tensor and the first bad element) where w[0, n) holds
 * a NaN or an infinity: such a weight makes every logit NaN and the run had
 * ended "ppl nan" with exit 0 (or, ternarised, hid it in a scale). */
int model_refuse_nonfinite(const float *w, size_t n, const char *name);

/* -1 (err_set) where the output `out` (what: its option, "--out") would be
 * written over one of the run's inputs: the token file `tokens`, the file
 * `model` (a GGUF) or, `model` a folder, a file the loader reads there —
 * config.json, model.safetensors.index.json and every shard it names, any
 * *.safetensors — compared by device and inode (NULL: not given).  It had
 * been: ppl --dump-layers onto the checkpoint's model.safetensors destroyed
 * it, logits --out onto the token file replaced it, exit 0.  Other files of
 * the folder (an earlier run's output) may be written over. */
int model_out_not_input(const char *out, const char *what, const char *model, const char *tokens);
/* -1 (err_set naming the tensor) where name is prefix + a layer index that is
 * not one of the n_layers the config declares (past it, or not a plain
 * decimal index); unit / count word the message ("layer", "the config's
 * num_hidden_layers").  0 for every other name (model.c). */
int model_refuse_layer_past(const char *name, const char *prefix, int n_layers, const char *unit,
                            const char *count);
void model_free(Model *m);

/* A layer's linears in the order q k v o gate up down, as an initializer: `const Linear
 * *ls[] = LAYER_LINEARS(L);` (TpLayer names its shards alike). */
#define LAYER_N_LINEARS 7
#define LAYER_LINEARS(L) {&(L)->q, &(L)->k, &(L)->v, &(L)->o, &(L)->gate, &(L)->up, &(L)->down}

/* Calls fn for each linear of the decoder (layer index, kind "q".."down"). */
typedef void (*linear_visit_fn)(Linear *lin, int layer, const char *kind, void *ctx);
void model_for_each_linear(Model *m, linear_visit_fn fn, void *ctx);

/* Bytes held by the model's weights as the forward reads them. */
size_t model_weight_bytes(const Model *m);
/* Bytes of the decoder layers' linears alone (7 a layer), as linear_bytes counts them. */
size_t model_layer_linear_bytes(const Model *m);

#endif
