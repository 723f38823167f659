/* GGUF (llama.cpp's model file format), versions 2 and 3: the parser, the
 * block formats ternlab reads (F32, F16, BF16, Q8_0, TQ1_0, TQ2_0), a small
 * writer, and the llama-architecture model loader/writer built on them.
 *
 * File layout (all little-endian):
 *   "GGUF" u32 version  u64 n_tensors  u64 n_kv
 *   n_kv x { string key, u32 value_type, value }
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
 *   padding to general.alignment (default 32), then the data section; each
 *   tensor's offset is relative to the data section and a multiple of the
 *   alignment.  string = u64 length + bytes (no NUL); array = u32 element type
 *   + u64 count + elements (arrays may nest).
 * Dimensions are stored fastest-first: a (rows, cols) matrix has ne[0] = cols,
 * ne[1] = rows.
 *
 * The parser validates everything against the file before handing anything
 * out: every count is bounded by the bytes left (so a corrupt count fails
 * before any allocation), every string and array lies inside the file, every
 * tensor has a known type, a row length that is a whole number of blocks, an
 * aligned offset and a byte range inside the data section, no two tensors
 * overlap and no name repeats.  Errors name the file and the item. */
#ifndef TL_GGUF_H
#define TL_GGUF_H

#include "core/mem.h"
#include "runtime/model.h"

#include <stddef.h>
#include <stdint.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4      /* GGML_MAX_DIMS */
#define GGUF_MAX_NESTING 8   /* arrays of arrays deeper than this are refused */

/* Metadata value types (gguf_type in ggml). */
typedef enum {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} GgufType;

/* Tensor types ternlab reads (ggml_type numbering; others are refused by name). */
typedef enum {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_TQ1_0 = 34,
    GGML_TYPE_TQ2_0 = 35,
} GgmlType;

/* ---- Block formats (ggml-common.h) ------------------------------------
 * Q8_0  (8.5 bits/weight): { f16 d; int8 qs[32]; }            34 bytes / 32
 *       w[i] = d * qs[i].
 * TQ2_0 (2.0625 bits/weight): { u8 qs[64]; f16 d; }           66 bytes / 256
 *       element e = 128*h + 32*l + m (h in 0..1, l in 0..3, m in 0..31) is
 *       bits 2l..2l+1 of qs[32*h + m]; code c -> value c - 1 (3 is invalid
 *       for ternary weights); w = value * d.  d is the block absmax.
 * TQ1_0 (1.6875 bits/weight): { u8 qs[48]; u8 qh[4]; f16 d; } 54 bytes / 256
 *       base-3 with 5 trits per byte, stored as the fixed-point fraction
 *       byte = ceil(v * 256 / 243) of v = sum t_n 3^(4-n) (first trit most
 *       significant); trit n is ((u8)(byte * 3^n) * 3) >> 8.
 *         qs[m], m < 32:       trit n -> element m + 32n          (0..159)
 *         qs[32 + m], m < 16:  trit n -> element 160 + m + 16n    (160..239)
 *         qh[j], j < 4:        trit n (n < 4) -> element 240 + j + 4n,
 *                              the 5th trit is 0                  (240..255)
 *       trit t -> value t - 1; w = value * d. */
#define GGUF_QK8_0 32
#define GGUF_Q8_0_BYTES 34
#define GGUF_QK_K 256
#define GGUF_TQ2_0_BYTES 66
#define GGUF_TQ1_0_BYTES 54
_Static_assert(GGUF_Q8_0_BYTES == 2 + GGUF_QK8_0, "block_q8_0");
_Static_assert(GGUF_TQ2_0_BYTES == GGUF_QK_K / 4 + 2, "block_tq2_0");
_Static_assert(GGUF_TQ1_0_BYTES == (GGUF_QK_K - 4 * GGUF_QK_K / 64) / 5 + GGUF_QK_K / 64 + 2,
               "block_tq1_0");

/* Decodes one block into values q[256] in {-1,0,1} and its raw f16 scale.
 * tq2_0 returns the number of invalid codes (3), which are written as 0. */
int gguf_tq2_0_decode(const uint8_t *blk, int8_t *q, uint16_t *d);
void gguf_tq1_0_decode(const uint8_t *blk, int8_t *q, uint16_t *d);
/* Encodes q[256] in {-1,0,1} (other values are the caller's bug) and d. */
void gguf_tq2_0_encode(const int8_t *q, uint16_t d, uint8_t *blk);
void gguf_tq1_0_encode(const int8_t *q, uint16_t d, uint8_t *blk);

/* Elements per block and bytes per block; 0 for a type ternlab does not read. */
int64_t gguf_type_block(uint32_t ggml_type);
size_t gguf_type_block_bytes(uint32_t ggml_type);
/* "F32", "TQ2_0", ...; for other ggml types their ggml name, else "type#N". */
const char *gguf_type_name(uint32_t ggml_type);
const char *gguf_value_type_name(uint32_t t);

/* ---- Parsed file ------------------------------------------------------ */

typedef struct {
    char *key;              /* NUL-terminated copy */
    uint32_t type;          /* GgufType */
    uint32_t arr_type;      /* element type when type == ARRAY */
    uint64_t n;             /* ARRAY: element count; STRING: byte length */
    const uint8_t *data;    /* into the image: scalar bytes, string bytes, or the
                             * first array element */
    size_t nbytes;          /* bytes of the value at data */
} GgufKV;

typedef struct {
    char *name;             /* NUL-terminated copy */
    uint32_t type;          /* GgmlType */
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* fastest first; 1 beyond n_dims */
    int64_t n_elements;
    uint64_t offset;        /* relative to the data section */
    size_t nbytes;
    const uint8_t *data;    /* into the image */
} GgufTensor;

typedef struct {
    MappedFile mf;          /* owned when opened with gguf_open */
    char *path;
    uint32_t version;
    uint64_t alignment;
    size_t data_offset;     /* start of the data section in the image */
    GgufKV *kv;
    int64_t n_kv;
    GgufTensor *tensors;    /* in file order */
    int64_t n_tensors;
} GgufFile;

/* Maps and parses a file.  Returns 0, or -1 (err_set naming the file and the
 * item at fault).  Release with gguf_close. */
int gguf_open(const char *path, GgufFile *g);
/* Parses an image held in memory (which must outlive g); `path` names it in
 * messages.  The entry point of the fuzzing harness. */
int gguf_parse(const uint8_t *buf, size_t size, const char *path, GgufFile *g);
void gguf_close(GgufFile *g);

const GgufKV *gguf_find_kv(const GgufFile *g, const char *key);
const GgufTensor *gguf_find_tensor(const GgufFile *g, const char *name);

/* Typed metadata getters: 1 found, 0 absent, -1 (err_set) present with a type
 * that does not fit (any integer type for int, FLOAT32/64 for float). */
int gguf_get_int(const GgufFile *g, const char *key, int64_t *out);
int gguf_get_float(const GgufFile *g, const char *key, double *out);
int gguf_get_str(const GgufFile *g, const char *key, const char **s, size_t *len);
/* Scalar value of a non-string, non-array KV as double (bool as 0/1). */
double gguf_kv_scalar(const GgufKV *kv);

/* Dequantises a tensor of any readable type into out[n_elements] (ggml's
 * definitions: TQ2_0 code 3 gives 2*d).  Returns 0 or -1 (unsupported type). */
int gguf_tensor_to_f32(const GgufTensor *t, float *out);

/* ---- Writer ----------------------------------------------------------- */
/* Collects metadata and tensors in memory-order and writes a v3 file (with
 * alignment 32) to `path` via a temporary name that is renamed when complete.
 * Tensor data is copied in when added. */
typedef struct GgufWriter GgufWriter;

GgufWriter *gguf_writer_new(void);
void gguf_writer_free(GgufWriter *w);
void gguf_writer_str(GgufWriter *w, const char *key, const char *val);
void gguf_writer_u32(GgufWriter *w, const char *key, uint32_t val);
void gguf_writer_f32(GgufWriter *w, const char *key, float val);
/* An array of n strings. */
void gguf_writer_str_array(GgufWriter *w, const char *key, const char *const *vals, uint64_t n);
/* A tensor with ne[0..n_dims) fastest-first and `nbytes` of data in ggml_type. */
int gguf_writer_tensor(GgufWriter *w, const char *name, uint32_t ggml_type, int n_dims,
                       const int64_t *ne, const void *data, size_t nbytes);
int gguf_writer_write(GgufWriter *w, const char *path);

/* ---- llama and bitnet models ------------------------------------------- */

/* llama.cpp's converter permutes the rows of attn_q / attn_k within each head
 * (head size hd) so that RoPE rotates adjacent pairs: HF row s*(hd/2) + i of a
 * head (s = 0, 1) is stored as row 2i + s.  Returns the HF row that stored row
 * r holds (reading: hf[gguf_hf_row_of(r)] = stored[r]; writing the reverse). */
int64_t gguf_hf_row_of(int64_t r, int64_t hd);

/* Loads a llama- or bitnet-architecture GGUF into the same Model that
 * model_load fills from an HF folder: <arch>.* hyperparameters, tensors
 * token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output,
 * ffn_norm, ffn_gate, ffn_up, ffn_down} (bitnet: also attn_sub_norm,
 * ffn_sub_norm; bitnet.hidden_activation silu or relu2, silu when absent),
 * output_norm, output (absent = tied; never in a bitnet file).  llama's
 * converter q/k row permutation (adjacent-pair RoPE) is undone (bitnet's
 * NEOX-order files have none), so the model equals the safetensors
 * checkpoint it came from.  TQ1_0/TQ2_0 linears become packed ternary (group
 * 256, f16 scales; the recorded spec's row or tensor group where it has one)
 * straight from their codes; other types are dense f32; activations f32
 * unless a ternlab.quant_spec says int8.  Then opts (--quant, --dense) apply
 * as in model_load.  The file is closed before returning.  Returns 0 or -1
 * (err_set). */
int model_load_gguf(const char *path, const ModelLoadOpts *opts, Model *m);

/* Writes m as a llama GGUF, or a BitNet model as llama.cpp's bitnet one (its
 * lm_head must be the embedding: that architecture has no output tensor):
 * decoder linears that are ternary as TQ2_0 (tq1 = 0) or TQ1_0 (tq1 = 1)
 * with llama's q/k rows permuted as llama.cpp's converter does;
 * ternary linears need group 256, row or tensor (one scale per 256-weight
 * block), rows whose length is not a multiple of 256 are written as float.
 * Float tensors (embedding, lm_head, dense linears) as F16 when that is
 * lossless, else BF16 when that is, else F32; norms F32.  A quantised model
 * also records its spec under "ternlab.quant_spec" (act=int8 is restored from
 * it on load); a model read from a ternlab checkpoint and not quantised again
 * records the spec it was stored with.  Returns 0 or -1 (err_set). */
int gguf_write_model(const Model *m, const char *out_path, int tq1);

#endif
