/* Shared helpers for tests that use the embedded fixtures (data/). */
#ifndef TL_TEST_FIXTURES_H
#define TL_TEST_FIXTURES_H

#include "runtime/cuda_engine.h"
#include "runtime/engine.h"

#include <stdint.h>

#define LLAMA_DIR "data/llama-tiny"
#define BITNET_DIR "data/bitnet-tiny"
#define TOKENS_FILE "data/wikitext2-test.tokens.i32"

/* Reads an int array field of DIR/reference.json (e.g. "greedy_out"); returns count or -1. */
int64_t fixture_ref_ints(const char *dir, const char *field, int32_t **out);
/* Reads a number field of a JSON file. */
double fixture_json_number(const char *path, const char *field);
/* Reads a whole f32 file; returns element count or -1. */
int64_t fixture_read_f32(const char *path, float **out);
/* ||a-b|| / ||b|| */
double rel_l2(const float *a, const float *b, int64_t n);
/* The largest rel_l2 of the rows rows of width cols of a against b. */
double rel_l2_worst_row(const float *a, const float *b, int64_t rows, int64_t cols);
/* Backend of the engines fixture_engine opens (device, bf16, no_graphs; the
 * sizes are set per call).  Zero = the CPU.  Tests run in their own process,
 * so a test that sets it affects itself only. */
extern EngineOpts fixture_backend;
/* Loads a model (opts may be NULL) and an engine with room for `seqs` sequences
 * of `seq_len` tokens; returns 0 or -1. */
int fixture_engine(const char *dir, const ModelLoadOpts *opts, int64_t max_tok, int block_size,
                   int64_t seqs, int64_t seq_len, Model *m, Engine *e);
/* The oracle comparison both fixtures share: logits of windows 0 and 1 of the
 * test tokens from `dir` (loaded with opts) into *got, transformers' into *ref
 * (both (2*T, vocab), heap); *vocab receives V.  Returns 0 or -1. */
int fixture_oracle_logits(const char *dir, const ModelLoadOpts *opts, int T, float **got,
                          float **ref, int *vocab);
/* Greedy decoding of the model in dir (loaded with opts, may be NULL) on an
 * engine of fixture_backend (64 tokens per call, block 16): batch copies of
 * the prompt (np tokens), n_new ids each into out[b] (batch <= 8).  When info
 * is non-NULL the engine's cuda_engine_info is taken before it closes (a CUDA
 * engine only).  Returns 0 or -1 (message on stderr). */
int fixture_greedy(const char *dir, const ModelLoadOpts *opts, const int32_t *prompt, int64_t np,
                   int64_t n_new, int batch, int32_t **out, CudaEngineInfo *info);
/* The same with a prompt of its own for each sequence (prompts[b], lens[b]). */
int fixture_greedy_each(const char *dir, const ModelLoadOpts *opts, const int32_t *const *prompts,
                        const int64_t *lens, int64_t n_new, int batch, int32_t **out, CudaEngineInfo *info);
/* The logits after the prompt and then the n_gen tokens of gen fed as decode
 * steps, one sequence on a fixture_backend engine (as fixture_greedy's, one
 * token a step): they predict the token after gen[n_gen-1] (after the prompt
 * where n_gen = 0).  *vocab floats, heap; NULL on an error (printed). */
float *fixture_forced_logits(const char *dir, const ModelLoadOpts *opts, const int32_t *prompt, int64_t np,
                             const int32_t *gen, int64_t n_gen, int *vocab);
/* data/llama-tiny/rope.reference.json's RoPE scalings (transformers' logits of
 * llama-tiny under them in rope_<variant>.ref_logits.f32): "llama3", "linear",
 * "yarn" (original 256, the defaults), "yarn_opts" (every optional key),
 * "dynamic" (factor 2: the default frequencies within max_position_embeddings). */
/* A checkpoint folder in the test's scratch directory: llama-tiny's weights and
 * tokenizer (symlinked) under a config.json carrying the variant's scaling —
 * in rope_parameters as transformers 5 writes it, or (legacy) as transformers
 * 4 did: rope_scaling beside a top-level rope_theta, linear's, yarn's and
 * dynamic's type as "type" (yarn's with YaRN checkpoints' "finetuned": true).
 * NULL on an error (printed). */
const char *fixture_rope_dir(const char *variant, int legacy);
/* The variant's inverse frequencies as transformers computed them into inv
 * (head_dim / 2 of them; "default": llama-tiny's own); the count, or -1. */
int fixture_rope_inv_freq(const char *variant, float *inv, int cap);
/* The variant's attention factor on cos and sin as transformers computed it
 * (the rotary embedding's attention_scaling, a double); -1 where absent. */
double fixture_rope_attention(const char *variant);
/* data/llama-tiny/rope_freq_cases.json's case k (transformers' llama3 inv_freq
 * of real checkpoints' scalings, computed without a model): its name, a folder
 * whose config.json is llama-tiny's with the case's head_dim (8 heads of it)
 * and rope_parameters (no weights: for config_load), and its frequencies in
 * inv.  Their number; 0 past the last case; -1 (said) when unreadable. */
int fixture_rope_freq_case(int k, const char **name, const char **dir, float *inv, int cap);
/* Window 0's logits of fixture_rope_dir(variant, 0) on a fixture_backend
 * engine against transformers' (rel L2 over all rows into *all, the worst row
 * into *worst), and the logits after a 16-token prompt and 84 decode steps
 * (position 99) against transformers' row 99 (*decode).  0, or -1 (printed). */
int fixture_rope_oracle(const char *variant, double *all, double *worst, double *decode);
/* Path of a built program: $TERNLAB_BUILD/<prog> (default build/), so the
 * sanitizer suite runs its own binaries. */
const char *bin_path(const char *prog);
/* Logits of windows [a, b) of the test tokens: ((b-a)*T, vocab), heap. */
float *fixture_window_logits(Engine *e, int T, int64_t a, int64_t b);
/* The logits of windows [0, nw) of T tokens of the token file under model m,
 * through a fixture_backend engine opened for them (NULL on an error, printed). */
float *fixture_model_logits(Model *m, int T, int64_t nw);
/* The n values of the HDF5 dataset at path in file as doubles into v: 0, or
 * -1 where it is absent or holds another count (v then all NaN). */
int h5_read_f64s(const char *file, const char *path, double *v, int64_t n);
/* The element count of the HDF5 dataset at path in file, or -1 where absent. */
int64_t h5_dataset_len(const char *file, const char *path);
/* The float64 attribute `name` of object obj in file (NaN where absent). */
double h5_attr_f64(const char *file, const char *obj, const char *name);

#endif
